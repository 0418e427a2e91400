"""Where sandboxlite keeps its cache (executor binary, host /etc, rootfs images).

May import: errors.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import SetupError

ROOT_HOME = Path("/var/cache/sandboxlite")


def home() -> Path:
    """``$SANDBOXLITE_HOME``, else ``~/.cache/sandboxlite`` (``/var/cache/sandboxlite`` for root).

    A root caller's sandboxes run as an unprivileged uid (see ``identity.run_as``),
    and bwrap, running as that uid, must reach the files it binds (the host /etc
    copy, rootfs images): /root is closed to it, /var/cache is not.
    """
    env = os.environ.get("SANDBOXLITE_HOME")
    if env:
        return Path(env).expanduser().absolute()
    if os.geteuid() == 0:
        return ROOT_HOME
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "sandboxlite").absolute()


def snapshots(env: dict | None = None) -> Path:
    """Where snapshots are kept: ``$SANDBOXLITE_SNAPSHOTS`` (say, a directory on disk), else a
    tmpfs, ``/dev/shm/sandboxlite-UID/snapshots`` (snapshots are copies a sandbox starts from:
    memory-fast, gone at reboot), else ``home()/snapshots`` where /dev/shm is no tmpfs."""
    env = os.environ if env is None else env
    if env.get("SANDBOXLITE_SNAPSHOTS"):
        return Path(env["SANDBOXLITE_SNAPSHOTS"]).expanduser().absolute()
    try:
        on_tmpfs = _fs_type("/dev/shm") == "tmpfs"
    except OSError:
        on_tmpfs = False
    if on_tmpfs:
        return Path(f"/dev/shm/sandboxlite-{os.geteuid()}/snapshots")
    return home() / "snapshots"


def _fs_type(path: str) -> str:
    best, kind = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")) \
                    and len(parts[1]) >= len(best):
                best, kind = parts[1], parts[2]
    return kind


def ensure_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o755)
    except OSError as e:
        raise cache_error(path, e) from None
    return path


def cache_error(path: Path | str, e: OSError) -> SetupError:
    """A failed write under the cache directory, as an error that says where and what to do."""
    why = os.strerror(e.errno) if e.errno else str(e)
    hint = "point SANDBOXLITE_HOME at a writable directory"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free some space there (df -h), or " + hint + " with room"
    return SetupError(f"cannot write sandboxlite's cache in {path}: {why}", hint=hint)
