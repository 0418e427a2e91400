"""Snapshots as files: export to and import from a tarball (``sandboxlite snapshot export|import``).

``export(snap, path)``: a zstd-compressed tar of ``manifest.json`` (format, the layers top first
with their metadata) and every layer's tree under ``layers/NAME/``, user xattrs in pax records.

``import_(store, path)``: the archive is read as a stream and each member checked before anything
is made: a path under ``layers/NAME/PLACE/`` of a layer the manifest lists, no ``..``, a directory,
a regular file, a symlink (made as it is, never followed: every parent is opened with O_NOFOLLOW),
a fifo or a whiteout; no hard link, no device, no setuid or setgid bit; at most the store's size
cap per layer.  Each layer is then named again from its content: it must be the name it came
under (the name is the digest), else nothing of it is kept.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..errors import SetupError, SnapshotError
from ..executor.protocol import is_layer_name
from .snapshot import PLACES, Snapshot, Store, nofollow, remove_tree, scan_tree, user_xattrs

MANIFEST = "manifest.json"
MANIFEST_MAX = 1 << 20
XATTR_PAX = "SCHILY.xattr."
MTIME_PAX = "SANDBOXLITE.mtime_ns"


# ---- export -------------------------------------------------------------------------------------


def _zstd() -> str:
    path = shutil.which("zstd")
    if path is None:
        raise SetupError("snapshot archives are zstd-compressed, and zstd is not installed", hint="apt-get install zstd")
    return path


def export(snap: Snapshot, dest: str | os.PathLike) -> Path:
    """Write ``snap`` with every layer below it to ``dest`` (a .tar.zst); the file appears whole."""
    dest = Path(dest).absolute()
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    metas = [snap.store.meta(name) for name in snap.layers]
    doc = {"format": 1, "kind": "sandboxlite-snapshot", "name": snap.name,
           "layers": [_meta_doc(m) for m in metas]}  # fmt: skip
    try:
        with open(tmp, "wb") as out:
            z = subprocess.Popen([_zstd(), "-q", "-c"], stdin=subprocess.PIPE, stdout=out)
            assert z.stdin is not None
            try:
                with tarfile.open(fileobj=z.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    data = json.dumps(doc, indent=1).encode()
                    info = tarfile.TarInfo(MANIFEST)
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
                    for m in metas:
                        _add_tree(tar, Path(snap.store.layers_dir) / m.name, f"layers/{m.name}")
            finally:
                z.stdin.close()
                rc = z.wait()
        if rc != 0:
            raise SnapshotError(f"zstd failed (exit code {rc}) writing {dest}")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def _meta_doc(m: Snapshot) -> dict:
    return {"name": m.name, "ancestors": list(m.ancestors), "size": m.size, "files": m.files,
            "created": m.created, "rootfs": m.rootfs, "cow": m.cow}  # fmt: skip


def _add_tree(tar: tarfile.TarFile, top: Path, arc: str) -> None:
    for dirpath, dirnames, filenames, _dfd in os.fwalk(top, follow_symlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            info = tar.gettarinfo(path, arcname=f"{arc}/{os.path.relpath(path, top)}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.pax_headers = {XATTR_PAX + k: v.decode("utf-8", "surrogateescape") for k, v in user_xattrs(path)}
            info.pax_headers[MTIME_PAX] = str(os.lstat(path).st_mtime_ns)  # the digest has it to the nanosecond
            if info.isreg():
                with open(path, "rb", opener=nofollow) as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)


# ---- import -------------------------------------------------------------------------------------


def import_(store: Store, archive: str | os.PathLike) -> Snapshot:
    """Check and keep the snapshot in ``archive`` (and the layers below it): the top one."""
    archive = Path(archive)
    if not archive.is_file():
        raise SnapshotError(f"{archive} is not a file")
    work = tempfile.mkdtemp(prefix="import-", dir=store.root / "staging")
    try:
        with open(archive, "rb") as raw:
            z = subprocess.Popen([_zstd(), "-q", "-dc"], stdin=raw, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            assert z.stdout is not None and z.stderr is not None
            doc, failed = None, None
            try:
                doc = _unpack(z.stdout, work, store, archive)
            except SnapshotError as e:
                failed = e
            finally:
                z.stdout.close()
                err = z.stderr.read().decode(errors="replace").strip()
                rc = z.wait()
            if rc != 0 and not (failed is not None and rc < 0):  # (killed by SIGPIPE: we stopped reading)
                raise SnapshotError(f"{archive} is not a zstd-compressed snapshot ({err or f'zstd exit code {rc}'})")
            if failed is not None:
                raise failed
        top = None
        for layer in reversed(doc["layers"]):  # the bottom first: parents are kept before their children
            top = _keep(store, Path(work) / "layers" / layer["name"], layer, archive)
        assert top is not None
        return top
    finally:
        remove_tree(work)


def _unpack(stream, work: str, store: Store, archive: Path) -> dict:
    try:
        tar = tarfile.open(fileobj=stream, mode="r|")
    except tarfile.TarError as e:
        raise SnapshotError(f"{archive} is not a snapshot archive ({e})") from None
    doc = None
    sizes: dict[str, int] = {}
    dirs: list[tuple[str, tarfile.TarInfo]] = []
    root = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for member in tar:
            if doc is None:
                doc = _read_manifest(tar, member, archive)
                for layer in doc["layers"]:
                    os.makedirs(os.path.join(work, "layers", layer["name"]))
                continue
            parts = _member_parts(member, doc, archive)
            layer = parts[1]
            sizes[layer] = sizes.get(layer, 0) + (member.size if member.isreg() else 0)
            if sizes[layer] > store.max_bytes:
                raise SnapshotError(f"{archive}: layer {layer[:12]} is larger than a snapshot may be "
                                    f"({store.max_bytes} bytes)")  # fmt: skip
            _make(tar, member, root, parts, archive)
            if member.isdir():
                dirs.append(("/".join(parts), member))
        if doc is None:
            raise SnapshotError(f"{archive} is empty: no {MANIFEST}")
        for rel, member in sorted(dirs, key=lambda x: -x[0].count("/")):  # modes and times once filled
            path = os.path.join(work, rel)
            os.chmod(path, member.mode & 0o1777)
            os.utime(path, ns=(_mtime_ns(member),) * 2)
    except tarfile.TarError as e:
        raise SnapshotError(f"{archive} is damaged ({e})") from None
    finally:
        os.close(root)
    return doc


def _read_manifest(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: Path) -> dict:
    if member.name != MANIFEST or not member.isreg() or member.size > MANIFEST_MAX:
        raise SnapshotError(f"{archive} is not a snapshot archive (its first member is not {MANIFEST})")
    f = tar.extractfile(member)
    assert f is not None
    try:
        doc = json.loads(f.read())
        layers = doc["layers"]
        assert doc.get("kind") == "sandboxlite-snapshot" and doc.get("format") == 1 and layers
        for i, layer in enumerate(layers):
            assert is_layer_name(layer["name"]) and len(layer["name"]) == 64
            assert list(layer["ancestors"]) == [x["name"] for x in layers[i + 1:]]
            assert isinstance(layer["created"], (int, float)) and isinstance(layer["rootfs"], str)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise SnapshotError(f"{archive}: its {MANIFEST} is not a snapshot manifest this version reads") from None
    return doc


def _member_parts(member: tarfile.TarInfo, doc: dict, archive: Path) -> list[str]:
    parts = member.name.split("/")
    names = {layer["name"] for layer in doc["layers"]}
    ok = (len(parts) >= 3 and parts[0] == "layers" and parts[1] in names and parts[2] in PLACES
          and all(p not in ("", ".", "..") for p in parts))  # fmt: skip
    if not ok:
        raise SnapshotError(f"{archive}: member {member.name!r} is outside the snapshot's layers")
    what = None
    if member.islnk():
        what = "a hard link"
    elif member.isblk() or (member.ischr() and (member.devmajor, member.devminor) != (0, 0)):
        what = "a device file"
    elif not (member.isdir() or member.isreg() or member.issym() or member.isfifo() or member.ischr()):
        what = "a special file"
    elif member.mode & (stat.S_ISUID | stat.S_ISGID):
        what = "setuid or setgid"
    elif len(parts) == 3 and not member.isdir():
        what = "not a directory"
    if what:
        raise SnapshotError(f"{archive}: member {member.name} is {what}: refused (nothing was kept)")
    return parts


def _make(tar: tarfile.TarFile, member: tarfile.TarInfo, root: int, parts: list[str], archive: Path) -> None:
    """Create one member under ``root``: its parents are opened one by one, never through a symlink."""
    fds = [root]
    try:
        for p in parts[:-1]:
            try:
                fds.append(os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fds[-1]))
            except FileNotFoundError:
                os.mkdir(p, 0o700, dir_fd=fds[-1])
                fds.append(os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fds[-1]))
            except OSError as e:  # ELOOP, ENOTDIR: a symlink or a file on the way
                raise SnapshotError(f"{archive}: member {member.name} goes through a non-directory ({e.strerror})") from None
        parent, name = fds[-1], parts[-1]
        mtime = _mtime_ns(member)
        if member.isdir():
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise SnapshotError(f"{archive}: member {member.name} is given twice") from None
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                _set_xattrs(fd, member)
            finally:
                os.close(fd)
            return
        try:
            if member.isreg():
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=parent)  # fmt: skip
                with os.fdopen(fd, "wb", buffering=0) as out:  # unbuffered: the times set below stay
                    src = tar.extractfile(member)
                    assert src is not None
                    shutil.copyfileobj(src, out, 1 << 20)
                    _set_xattrs(out.fileno(), member)
                    os.fchmod(out.fileno(), member.mode & 0o777)
                    os.utime(out.fileno(), ns=(mtime, mtime))
                return
            if member.issym():
                os.symlink(member.linkname, name, dir_fd=parent)
            elif member.isfifo():
                os.mkfifo(name, member.mode & 0o777, dir_fd=parent)
            else:  # a whiteout
                os.mknod(name, stat.S_IFCHR, 0, dir_fd=parent)
        except FileExistsError:
            raise SnapshotError(f"{archive}: member {member.name} is given twice") from None
        os.utime(name, ns=(mtime, mtime), dir_fd=parent, follow_symlinks=False)
    finally:
        for fd in fds[1:]:
            os.close(fd)


def _mtime_ns(member: tarfile.TarInfo) -> int:
    text = member.pax_headers.get(MTIME_PAX, "")
    return int(text) if text.isdigit() else int(member.mtime * 1_000_000_000)


def _set_xattrs(fd: int, member: tarfile.TarInfo) -> None:
    for k, v in member.pax_headers.items():
        if k.startswith(XATTR_PAX + "user."):
            os.setxattr(fd, k[len(XATTR_PAX):], v.encode("utf-8", "surrogateescape"))


def _keep(store: Store, tree: Path, layer: dict, archive: Path) -> Snapshot:
    """Check one unpacked layer against its name and keep it (one kept already is the same)."""
    name = layer["name"]
    parent = layer["ancestors"][0] if layer["ancestors"] else None
    got, size, files = scan_tree(str(tree), chown=store.owner, digest=True, parent=parent, image=layer["rootfs"],
                                 owner=store.owner[0] if store.owner is not None else os.geteuid())  # fmt: skip
    if got != name:
        raise SnapshotError(f"{archive}: layer {name[:12]} does not match its name (its content is {got[:12]})",
                            hint="the file is damaged or was modified: export it again")  # fmt: skip
    snap = Snapshot(name, tuple(layer["ancestors"]), size, files, float(layer["created"]), layer["rootfs"],
                    bool(layer.get("cow")), store)  # fmt: skip
    return store.adopt(str(tree), snap)
