"""Build root filesystem images from the recipes (``rootfs/profiles/*.json``, recipes.py) with mmdebstrap.

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
from pathlib import Path
from typing import IO

from ..errors import RootfsError, SetupError
from . import images_dir, recipes
from .manifest import extract, give_to_sandbox_user, remove_tree, write_manifest
from .recipes import profile_names  # noqa: F401  (build.profile_names, as before the recipes moved)

DEFAULT_MIRROR = "http://deb.debian.org/debian"

# the hooks every image gets, before and after the profile's own (rootfs/hooks/NAME.sh)
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


def load_profile(name: str, _seen: tuple[str, ...] = ()) -> Profile:
    """A profile with its ``extends`` chain merged (packages and hooks accumulate)."""
    if name in _seen:
        raise RootfsError(f"profile {name!r} extends itself ({' -> '.join(_seen + (name,))})")
    data = recipes.profile_data(name)
    allowed = {"description", "extends", "suite", "variant", "packages", "hooks"}
    unknown = set(data) - allowed
    if unknown:
        raise RootfsError(f"profile {name}: unknown keys {sorted(unknown)} (allowed: {sorted(allowed)})")
    known = recipes.hooks()
    for hook in data.get("hooks", []):
        if hook not in known:
            raise RootfsError(f"profile {name}: unknown hook {hook!r} (known: {sorted(known)})")
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
    argv += [f"--dpkgopt={x}" for x in recipes.dpkg_excludes()]
    hooks = recipes.hooks()
    for hook in (*ALWAYS_HOOKS, *profile.hooks, *FINAL_HOOKS):
        argv.append(f"--customize-hook={hooks[hook]}")
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
