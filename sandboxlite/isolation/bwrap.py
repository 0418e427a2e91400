"""The bwrap on this host: where it is, its version and features (a host fact).

``find_bwrap()`` runs ``bwrap --version`` and ``--help`` (``Host.detect()`` asks
once); ``plan.py`` turns a config into bwrap's argv.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SetupError


@dataclass(frozen=True)
class BwrapInfo:
    path: str
    version: tuple[int, ...]
    disable_userns: bool  # --disable-userns (0.8.0+)

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))


MIN_VERSION = (0, 8, 0)


def find_bwrap(env: Mapping[str, str] | None = None) -> BwrapInfo:
    """Locate bwrap (``SANDBOXLITE_BWRAP``, else ``PATH``) and read its version and features."""
    env = os.environ if env is None else env
    path = env.get("SANDBOXLITE_BWRAP") or shutil.which("bwrap", path=env.get("PATH"))
    if not path:
        raise SetupError(
            "bubblewrap (bwrap) is not installed",
            hint="apt-get install bubblewrap   (Fedora: dnf install bubblewrap)",
        )
    if not os.access(path, os.X_OK):
        raise SetupError(
            f"bwrap at {path} is missing or not executable",
            hint="apt-get install bubblewrap, or point SANDBOXLITE_BWRAP at a working bwrap",
        )
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    version = tuple(int(x) for x in m.groups(default="0")) if m else (0, 0, 0)
    if version < MIN_VERSION:
        raise SetupError(
            f"bwrap {'.'.join(map(str, version))} at {path} is too old (sandboxlite needs 0.8.0 or newer)",
            hint="upgrade bubblewrap (Debian 12 and Ubuntu 24.04 ship 0.8.0+)",
        )
    helptext = subprocess.run([path, "--help"], capture_output=True, text=True).stdout
    return BwrapInfo(
        path=path,
        version=version,
        disable_userns="--disable-userns" in helptext,
    )
