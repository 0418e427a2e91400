"""Build root filesystem images from the profiles in ``profiles/*.json`` with mmdebstrap.

``mmdebstrap_argv`` is a pure function of a profile (testable without
mmdebstrap); ``build`` runs it into a temporary directory next to the final
place, adds the manifest, and renames the result into place, so a failed or
interrupted build never leaves a half image behind.

Works as root (``--mode=root``) and as a normal user (``--mode=unshare``,
which needs the ``uidmap`` package and a subordinate id range in
/etc/subuid and /etc/subgid).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO

from ..errors import RootfsError, SetupError
from . import images_dir
from .manifest import extract, give_to_sandbox_user, remove_tree, write_manifest

DEFAULT_MIRROR = "http://deb.debian.org/debian"

# dpkg drops documentation, manuals and translations (copyright files stay): about a third less.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)

# Shell snippets run by mmdebstrap after installation ("$1" is the new root).
HOOKS = {
    # no setuid/setgid programs: nothing in a sandbox may gain privileges
    "no-setuid": 'find "$1" -xdev -type f -perm /6000 -exec chmod ug-s {} +',
    # mount points the jail needs, present in the image itself
    "mount-points": 'mkdir -p "$1/testbed/input" "$1/testbed/output" "$1/proc" "$1/dev" "$1/tmp" "$1/root"',
    # matplotlib draws to files (Agg) and finds its font cache built (saves 150-200 ms on every
    # `import matplotlib.pyplot`)
    "matplotlib-cache": 'echo "backend: Agg" > "$1/etc/matplotlibrc" && '
    'chroot "$1" env HOME=/root MPLBACKEND=Agg python3 -c "import matplotlib.pyplot"',
    # a sandbox's root is copy-on-write and thrown away on reset: pip installs into it (no PEP 668
    # "externally-managed-environment" refusal), and apt downloads as root (a sandbox maps no
    # _apt user); the proxy comes from HTTP(S)_PROXY, set only under network="allow:..."
    "installers": 'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED && mkdir -p "$1/etc/apt/apt.conf.d" && '
    'echo \'APT::Sandbox::User "root";\' > "$1/etc/apt/apt.conf.d/90sandboxlite"',
    # apt and dpkg leftovers that only take space
    "clean": 'rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*.bin "$1/var/log/"*.log',
}
ALWAYS_HOOKS = ("no-setuid", "mount-points", "installers")
FINAL_HOOKS = ("clean",)


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    suite: str
    variant: str
    packages: tuple[str, ...]
    hooks: tuple[str, ...] = field(default=())


def profile_names() -> list[str]:
    files = resources.files("sandboxlite.rootfs").joinpath("profiles")
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".json"))


def load_profile(name: str, _seen: tuple[str, ...] = ()) -> Profile:
    """A profile with its ``extends`` chain merged (packages and hooks accumulate)."""
    if name in _seen:
        raise RootfsError(f"profile {name!r} extends itself ({' -> '.join(_seen + (name,))})")
    try:
        raw = resources.files("sandboxlite.rootfs").joinpath("profiles", f"{name}.json").read_text()
    except FileNotFoundError:
        raise RootfsError(
            f"no rootfs profile named {name!r}", hint=f"choose one of: {', '.join(profile_names())}"
        ) from None
    data = json.loads(raw)
    allowed = {"description", "extends", "suite", "variant", "packages", "hooks"}
    unknown = set(data) - allowed
    if unknown:
        raise RootfsError(f"profile {name}: unknown keys {sorted(unknown)} (allowed: {sorted(allowed)})")
    for hook in data.get("hooks", []):
        if hook not in HOOKS:
            raise RootfsError(f"profile {name}: unknown hook {hook!r} (known: {sorted(HOOKS)})")
    if "extends" in data:
        base = load_profile(data["extends"], _seen + (name,))
        packages = base.packages + tuple(p for p in data.get("packages", []) if p not in base.packages)
        hooks = base.hooks + tuple(h for h in data.get("hooks", []) if h not in base.hooks)
        return Profile(name, data.get("description", ""), data.get("suite", base.suite),
                       data.get("variant", base.variant), packages, hooks)  # fmt: skip
    return Profile(name, data.get("description", ""), data.get("suite", "bookworm"), data.get("variant", "apt"),
                   tuple(data.get("packages", [])), tuple(data.get("hooks", [])))  # fmt: skip


def recipe_digest(profile: Profile) -> str:
    """What an image is built from (its mmdebstrap options: packages, hooks, suite; not the mode
    or the mirror), hashed: an image whose manifest records another was built from another recipe."""
    argv = mmdebstrap_argv(profile, "-", mode="root")
    return "sha256:" + hashlib.sha256(json.dumps(argv[2:-1]).encode()).hexdigest()


def build_mode() -> str:
    """mmdebstrap's mode: ``root`` for root, ``unshare`` (user namespaces + subuids) otherwise."""
    return "root" if os.geteuid() == 0 else "unshare"


def mmdebstrap_argv(profile: Profile, dest: str, *, mode: str, mirror: str = DEFAULT_MIRROR) -> list[str]:
    """The complete mmdebstrap command line for ``profile`` (a pure function).

    The output is a tarball (``dest``), unpacked afterwards like an imported
    image: as root with its owners, as a normal user owned by that user (which
    is what a copy-on-write layer over it needs).
    """
    argv = [
        "mmdebstrap",
        f"--mode={mode}",
        f"--variant={profile.variant}",
        "--format=tar",
        "--aptopt=Acquire::Retries \"3\"",
        f"--include={','.join(profile.packages)}",
    ]
    argv += [f"--dpkgopt={x}" for x in DPKG_EXCLUDES]
    for hook in (*ALWAYS_HOOKS, *profile.hooks, *FINAL_HOOKS):
        argv.append(f"--customize-hook={HOOKS[hook]}")
    argv += [profile.suite, dest, mirror]
    return argv


def check_tools(mode: str) -> None:
    missing = [t for t in ("mmdebstrap",) if not shutil.which(t)]
    if mode == "unshare":
        missing += [t for t in ("newuidmap", "newgidmap") if not shutil.which(t)]
    if missing:
        raise SetupError(
            f"building a rootfs needs {', '.join(missing)}",
            hint="apt-get install mmdebstrap uidmap zstd",
        )
    if mode == "unshare":
        user = os.environ.get("USER") or str(os.getuid())
        for f in ("/etc/subuid", "/etc/subgid"):
            try:
                lines = Path(f).read_text().splitlines()
            except OSError:
                lines = []
            if not any(line.split(":")[0] in (user, str(os.getuid())) for line in lines if line):
                first = free_subid_range()
                last = first + SUBID_COUNT - 1
                raise SetupError(
                    f"{f} has no subordinate id range for {user} (mmdebstrap --mode=unshare needs one)",
                    hint=f"sudo usermod --add-subuids {first}-{last} --add-subgids {first}-{last} {user}",
                )


SUBID_COUNT = 65536


def free_subid_range(files: tuple[str, ...] = ("/etc/subuid", "/etc/subgid"), start: int = 100000) -> int:
    """The first id of a 65536-id range no entry of ``files`` uses (what ``useradd`` would give next;
    not the range it already gave the first user), below sandboxlite's own range (slots.py)."""
    taken: list[tuple[int, int]] = []
    for f in files:
        try:
            lines = Path(f).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                taken.append((int(parts[1]), int(parts[1]) + int(parts[2])))
    first = start
    for lo, hi in sorted(taken):
        if first + SUBID_COUNT <= lo:
            break
        first = max(first, hi)
    return first


def build(
    name: str,
    *,
    force: bool = False,
    mirror: str = DEFAULT_MIRROR,
    out: IO[str] | None = None,
) -> Path:
    """Build the image for profile ``name`` into ``$SANDBOXLITE_HOME/rootfs/NAME``; returns that directory."""
    out = out or sys.stderr
    profile = load_profile(name)
    final = images_dir() / name
    if final.exists() and not force:
        raise RootfsError(
            f"an image named {name!r} already exists at {final}",
            hint=f"sandboxlite rootfs rm {name} (or build with --force)",
        )
    mode = build_mode()
    check_tools(mode)
    images_dir().mkdir(parents=True, exist_ok=True)
    os.chmod(images_dir(), 0o755)
    work = images_dir() / f".{name}.partial-{os.getpid()}"
    remove_tree(work)
    work.mkdir(mode=0o755)
    tarball = work / "root.tar"
    argv = mmdebstrap_argv(profile, str(tarball), mode=mode, mirror=mirror)
    print(f"building rootfs {name!r} ({profile.description}) with mmdebstrap --mode={mode}", file=out, flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RootfsError(
                f"mmdebstrap failed with exit code {proc.returncode} (its output is above)",
                hint="check the network access to the Debian mirror, then run the build again",
            )
        print("unpacking ...", file=out, flush=True)
        extract(tarball, work / "root")
        tarball.unlink()
        give_to_sandbox_user(work / "root")
        seconds = time.monotonic() - start
        print(f"built in {seconds:.1f}s; hashing the tree for the manifest ...", file=out, flush=True)
        write_manifest(work, name=name, profile=profile, build_seconds=seconds, mode=mode,
                       recipe=recipe_digest(profile))
        if final.exists():
            remove_tree(final)
        os.rename(work, final)
    except BaseException:
        remove_tree(work)
        raise
    print(f"rootfs {name!r} ready at {final / 'root'}", file=out, flush=True)
    return final
