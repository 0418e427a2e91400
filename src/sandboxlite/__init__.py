"""sandboxlite: give an LLM a computer, in milliseconds.

A bubblewrap + seccomp jail over a read-only root filesystem, with a tiny
executor inside that forks each command.  The public API:

    from sandboxlite import Sandbox
    with Sandbox() as sb:
        r = sb.exec("python3 -c 'print(6*7)'")
        print(r.exit_code, r.stdout)
"""

from .config import Limits, Mount, SandboxConfig
from .errors import (
    CommandFailed,
    CommandTimeout,
    ConfigError,
    RootfsError,
    SandboxClosed,
    SandboxCrashed,
    SandboxError,
    SandboxFileError,
    SetupError,
)
from .result import ExecResult
from .sandbox import Sandbox
from .shell import Shell

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "SandboxConfig",
    "Limits",
    "Mount",
    "ExecResult",
    "Shell",
    "SandboxError",
    "ConfigError",
    "SetupError",
    "RootfsError",
    "SandboxClosed",
    "SandboxCrashed",
    "CommandTimeout",
    "CommandFailed",
    "SandboxFileError",
    "__version__",
]
