"""Where sandboxlite keeps its cache (executor binary, host /etc, rootfs images)."""

from __future__ import annotations

import os
from pathlib import Path


ROOT_HOME = Path("/var/cache/sandboxlite")


def home() -> Path:
    """``$SANDBOXLITE_HOME``, else ``~/.cache/sandboxlite`` (``/var/cache/sandboxlite`` for root).

    A root caller's sandboxes run as an unprivileged uid (see ``sandbox.run_as``),
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


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    return path
