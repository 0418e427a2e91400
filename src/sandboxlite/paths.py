"""Where sandboxlite keeps its cache (executor binary, host /etc, rootfs images)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """``$SANDBOXLITE_HOME``, else ``~/.cache/sandboxlite``."""
    env = os.environ.get("SANDBOXLITE_HOME")
    if env:
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "sandboxlite").absolute()


def ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    return path
