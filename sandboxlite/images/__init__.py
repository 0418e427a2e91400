"""Images: what a sandbox sees at ``/``.  This module resolves a rootfs spec; the rest of the
room builds and keeps the images.

    (this module)  ``resolve(spec) -> RootfsPlan``, the ``host`` rootfs's own /etc
    where          where images live (``images_dir()``), which image a container reference names
    recipes        the image recipes (``rootfs/`` at the repository's root: profiles, hooks)
    build          building an image from a profile with mmdebstrap
    manage         the images on this machine: list, verify, export, import, remove
    manifest       an image's manifest and digest; unpacking a tarball safely
    oci            container images: references, configs, reading docker/podman/OCI archives
    blobs          the content-addressed blob store (every blob checked against its digest)
    unpack         applying image layers safely onto a directory (hostile tars refused)
    store          container images imported into the store and named

Two kinds:

- ``host``: the host's ``/usr`` (and ``/bin``, ``/lib*`` ...) read-only, with a
  minimal ``/etc`` that sandboxlite assembles once and caches (a synthetic
  passwd/group/hosts, the loader cache, alternatives, CA certificates...).
  Nothing to build; works on any box with bwrap.  The caller's home, /etc/shadow,
  /root, /home, /var, /run are not there.
- a directory: a root filesystem tree (the prebuilt images of ``sandboxlite
  rootfs build``, or any debootstrap/mmdebstrap output), bound read-only.

Either way the jail root is a fresh tmpfs onto which the top-level entries
are bound one by one, then remounted read-only; /proc, /dev, /tmp, /testbed and
/root are the jail's own.  ``resolve()`` turns a spec into a ``RootfsPlan``, a
plain value that ``plan.plan()`` consumes.

May import: errors, paths, isolation.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import ConfigError, RootfsError
from . import where
from .where import image_root, images_dir

DEFAULT_PROFILE = "science"

# Top-level entries of a rootfs that the jail replaces with its own mounts.
JAIL_OWNED = frozenset({"proc", "sys", "dev", "tmp", "root", "testbed", "run", "lost+found"})

# Top-level host entries the "host" rootfs shows (when they exist).
HOST_TOP = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")

# /etc entries copied into the host rootfs's minimal /etc (when they exist).
HOST_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "debian_version",
    "lsb-release",
    "issue",
    "bash.bashrc",
    "inputrc",
    "profile",
    "environment",
    "gai.conf",
    "fonts",
    "matplotlibrc",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
    "gitconfig",
    "mailcap",
    "magic",
    "papersize",
    "resolv.conf",
)

SYNTHETIC_ETC = {
    "passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hostname": "sandbox\n",
    "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
    "protocols: files\nservices: files\n",
}


@dataclass(frozen=True)
class RootfsPlan:
    """How to assemble ``/``: read-only binds and symlinks at the top level."""

    name: str  # "host", an image name, or a directory
    kind: str  # "host" or "dir"
    path: str  # the source directory ("/" for host)
    binds: tuple[tuple[str, str], ...]  # (host source, sandbox destination), read-only
    symlinks: tuple[tuple[str, str], ...]  # (link target, sandbox path)
    env: tuple[tuple[str, str], ...] = ()  # a container image's own environment (its config's Env)
    user: tuple[int, int] | None = None  # a container image's User: the uid and gid inside (else 0:0)


def auto_choice(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """What ``rootfs="auto"`` means here, and why: ``$SANDBOXLITE_ROOTFS``, else the default image
    (``science``) when it is built, else the only built image, else the host's ``/usr`` (the
    reason then says so: a weaker root, which the caller is told of)."""
    env = os.environ if env is None else env
    chosen = env.get("SANDBOXLITE_ROOTFS", "").strip()
    if chosen and chosen != "auto":
        return chosen, "SANDBOXLITE_ROOTFS"
    if (image_root(DEFAULT_PROFILE).parent / "manifest.json").is_file():
        return DEFAULT_PROFILE, "the default image"
    try:
        built = sorted(d.name for d in images_dir().iterdir() if (d / "manifest.json").is_file())
    except OSError:
        built = []
    if len(built) == 1:
        return built[0], "the only built image"
    why = (f"no image is built ({DEFAULT_PROFILE!r} would be the default)" if not built else
           f"several images are built ({', '.join(built)}), none of them {DEFAULT_PROFILE!r}: set SANDBOXLITE_ROOTFS")
    return "host", f"{why}; the host's /usr is used read-only, without a copy-on-write root"


def resolve(spec: str) -> RootfsPlan:
    """Turn a rootfs spec (``auto``, ``host``, an image name, a container reference the store
    knows, a directory) into a plan.  An image name wins over a reference, a known reference over
    a relative directory of the same spelling (write ``./dir``)."""
    if spec == "auto":
        spec = auto_choice()[0]
    if spec == "host":
        return host_plan()
    if "/" not in spec and image_root(spec).is_dir():
        return _image_plan(spec)
    found = where.find(spec)  # a container reference the store knows (python:3.12-slim)
    if found is not None:
        return _image_plan(found)
    if "/" not in spec:
        raise RootfsError(
            f"no rootfs image named {spec!r} in {images_dir()}",
            hint=f"build it: sandboxlite rootfs build {spec}   (or import one: sandboxlite rootfs import FILE; "
            "a container image: sandboxlite image import FILE)",
        )
    return dir_plan(spec)


def _image_plan(spec: str) -> RootfsPlan:
    """The plan of the image NAME in the store (its manifest checked)."""
    root = image_root(spec)
    manifest = root.parent / "manifest.json"
    if not manifest.is_file():
        raise RootfsError(
            f"rootfs image {spec!r} is incomplete (no manifest.json)",
            hint=f"sandboxlite rootfs rm {spec} && sandboxlite rootfs build {spec}",
        )
    st = manifest.stat()
    env, user, container = _manifest_config(str(root.parent), st.st_mtime_ns, st.st_size)
    # a container image without a shell (distroless) runs argv commands; a built one without is broken
    plan = dir_plan(str(root), name=spec, shell_required=not container)
    return dataclasses.replace(plan, env=env, user=user) if env or user else plan


@functools.lru_cache(maxsize=32)
def _manifest_config(image: str, _mtime_ns: int, _size: int) -> tuple[tuple[tuple[str, str], ...], tuple[int, int] | None,
                                                                     bool]:  # fmt: skip
    """A container image's environment (its config's ``Env``) and user (``User``, resolved in the
    image's own /etc/passwd and /etc/group; None for root), and whether it is a container image;
    nothing for a built image.  Read again
    when the manifest changes.  A manifest that does not parse marks a damaged image."""
    from .manifest import read_manifest
    from .users import resolve_user

    manifest = read_manifest(Path(image))
    if not isinstance(manifest, dict):
        raise RootfsError(f"{image}/manifest.json is corrupt: not a JSON object", hint="sandboxlite rootfs rm NAME")
    config = (manifest.get("oci") or {}).get("config") or {}
    pairs = [item.split("=", 1) for item in config.get("env") or () if isinstance(item, str) and "=" in item]
    user = config.get("user")
    resolved = resolve_user(os.path.join(image, "root"), user) if isinstance(user, str) and user else None
    env = tuple((k, v) for k, v in pairs if k and "\0" not in k + v)
    return env, (None if resolved == (0, 0) else resolved), isinstance(manifest.get("oci"), dict)


def with_user(plan: RootfsPlan, spec: str) -> RootfsPlan:
    """``plan`` running as ``spec`` (``SandboxConfig.user``): numbers as they are, names looked up
    in the root's own /etc/passwd and /etc/group (RootfsError when it has no such name)."""
    from .users import resolve_user

    root = plan.path if plan.kind == "dir" else "/"
    try:
        ids = resolve_user(root, spec)
    except RootfsError as e:
        raise ConfigError("user", e.message.replace("the image's User", "the user", 1),
                          hint="give numbers (UID[:GID]), or a name the image's /etc/passwd has") from None
    return dataclasses.replace(plan, user=None if ids == (0, 0) else ids)


def _top_level(root: str, skip: frozenset[str]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    binds, links = [], []
    for entry in sorted(os.listdir(root)):
        if entry in skip:
            continue
        src = os.path.join(root, entry)
        st = os.lstat(src)
        if stat.S_ISLNK(st.st_mode):
            links.append((os.readlink(src), "/" + entry))
        elif stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            binds.append((src, "/" + entry))
    return binds, links


def dir_plan(root: str, name: str | None = None, *, shell_required: bool = True) -> RootfsPlan:
    """The plan of the root filesystem tree ``root``.  ``shell_required``: a directory the caller
    names must have a shell (the mark of a root filesystem, against a wrong path); an image from
    the store need not (a distroless image is a root without one)."""
    root = os.path.abspath(root)
    try:
        st = os.stat(root)
    except OSError:
        st = None
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise RootfsError(
            f"rootfs directory {root} does not exist",
            hint="check the path, or use rootfs='host'",
        )
    # the top level of a tree rarely changes: plan it again only when it does
    return _dir_plan(root, name, shell_required, st.st_ino, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _dir_plan(root: str, name: str | None, shell_required: bool, _ino: int, _mtime_ns: int) -> RootfsPlan:
    # a shell at /usr/bin/sh or /bin/sh (busybox images have no /usr): the mark of a root filesystem
    if shell_required and not (os.path.exists(os.path.join(root, "usr", "bin", "sh")) or os.path.lexists(os.path.join(root, "bin", "sh"))):
        raise RootfsError(
            f"{root} does not look like a root filesystem (no usr/bin/sh or bin/sh)",
            hint="point rootfs at the top of a root filesystem tree (one made by mmdebstrap, or a container "
            "image: sandboxlite image import FILE)",
        )
    try:
        binds, links = _top_level(root, JAIL_OWNED)
    except OSError as e:
        raise RootfsError(f"cannot read the rootfs {root}: {e.strerror}", hint="check its permissions") from None
    return RootfsPlan(name=name or root, kind="dir", path=root, binds=tuple(binds), symlinks=tuple(links))


def host_plan() -> RootfsPlan:
    """The host's /usr (and the rest of HOST_TOP) read-only, with the copy of /etc kept under
    ``$SANDBOXLITE_HOME``: planned once per home (a process that moves its home gets the new one's)."""
    plan = _host_plan(str(paths.home()))
    etc = next(src for src, dst in plan.binds if dst == "/etc")
    if not os.path.isdir(etc):  # (removed meanwhile: make it again)
        _host_plan.cache_clear()
        plan = _host_plan(str(paths.home()))
    return plan


@functools.lru_cache(maxsize=4)
def _host_plan(_home: str) -> RootfsPlan:
    binds, links = [], []
    for entry in HOST_TOP:
        src = "/" + entry
        if not os.path.lexists(src):
            continue
        if os.path.islink(src):
            links.append((os.readlink(src), src))
        elif os.path.isdir(src):
            binds.append((src, src))
    if not any(dst == "/usr" for _, dst in binds):
        raise RootfsError("the host has no /usr directory; rootfs='host' cannot work here")
    binds.append((str(host_etc()), "/etc"))
    return RootfsPlan(name="host", kind="host", path="/", binds=tuple(binds), symlinks=tuple(links))


def _etc_signature() -> str:
    h = hashlib.sha256(b"v1\0")
    for name in HOST_ETC:
        p = "/etc/" + name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        h.update(f"{name}\0{st.st_mtime_ns}\0{st.st_size}\0".encode())
    for k, v in sorted(SYNTHETIC_ETC.items()):
        h.update(f"{k}\0{v}\0".encode())
    return h.hexdigest()[:16]


def host_etc() -> Path:
    """The cached minimal /etc of the host rootfs, rebuilt when the host's copy changes."""
    base = paths.ensure_dir(paths.home() / "host-etc")
    target = base / _etc_signature()
    if target.is_dir():
        return target
    try:
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))
    except OSError as e:
        raise paths.cache_error(base, e) from None
    try:
        for name in HOST_ETC:
            src = Path("/etc") / name
            dst = tmp / name
            if not os.path.lexists(src):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                if src.is_symlink():
                    os.symlink(os.readlink(src), dst)
                elif src.is_dir():
                    shutil.copytree(src, dst, symlinks=True, ignore_dangling_symlinks=True)
                else:
                    shutil.copy2(src, dst)
            except PermissionError:
                continue  # unreadable for this user: leave it out
        for name, text in SYNTHETIC_ETC.items():
            (tmp / name).write_text(text)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, target)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise paths.cache_error(base, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # drop stale copies (older host /etc states) once nobody can still be using them
    for old in base.iterdir():
        try:
            stale = old != target and time.time() - old.stat().st_mtime > 86400
        except OSError:
            continue
        if stale:
            shutil.rmtree(old, ignore_errors=True)
    return target


def expose_from_image(fields: dict) -> dict:
    """``expose="image"`` among a sandbox's fields: the TCP ports its root, a container image in
    the store, declares (``ExposedPorts``; UDP ones cannot be relayed and are left out).  Other
    fields are returned as they are."""
    if fields.get("expose") != "image":
        return fields
    spec = fields.get("rootfs", "auto")
    name = spec if "/" not in spec and image_root(spec).is_dir() else where.find(spec)
    manifest = (image_root(name).parent / "manifest.json") if name else None
    config = {}
    if manifest is not None and manifest.is_file():
        from .manifest import read_manifest

        config = ((read_manifest(manifest.parent) or {}).get("oci") or {}).get("config") or {}
    if not config:
        raise RootfsError(f"expose='image' takes the ports a container image declares, and the root {spec!r} is "
                          "none", hint="give image=REF (a container image in the store), or list the ports")  # fmt: skip
    ports = sorted({int(p.split("/")[0]) for p in config.get("exposed_ports") or ()
                    if p.endswith("/tcp") and p.split("/")[0].isdigit() and 0 < int(p.split("/")[0]) < 65536})  # fmt: skip
    return {**fields, "expose": tuple(ports)}

