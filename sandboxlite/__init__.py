"""sandboxlite: give an LLM a computer, in milliseconds.

A bubblewrap + seccomp jail over a read-only root filesystem, with a tiny
executor inside that forks each command.  The public API:

    from sandboxlite import Sandbox
    with Sandbox() as sb:
        r = sb.exec("python3 -c 'print(6*7)'")
        print(r.exit_code, r.stdout)

May import: _moved, errors, result, config, jail, state (the agent layer only lazily, by name).
"""

from . import _moved

_moved.install()  # the old import paths (sandboxlite.sandbox, sandboxlite.snapshot, ...) still work

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
    SnapshotError,
)
from .jail.aio import AsyncSandbox, AsyncShell
from .jail.files import FileEvent, FileInfo
from .jail.host import Host
from .jail.pool import SandboxPool
from .jail.sandbox import Sandbox
from .jail.process import Process
from .jail.shell import Shell
from .result import ExecResult
from .state.snapshot import Snapshot

__version__ = "0.1.0"

_AGENT = {"run_task": "run", "RunResult": "run", "ExitReason": "outcome", "Task": "task", "FakeModel": "model",
          "OpenAIModel": "model", "resolve_model": "profiles", "find_models": "catalog", "choose_model": "catalog"}  # fmt: skip


def __getattr__(name: str):  # the agent layer (and openai) load only when asked for
    if name in _AGENT:
        import importlib

        return getattr(importlib.import_module(f"sandboxlite.agent.{_AGENT[name]}"), name)
    raise AttributeError(f"module 'sandboxlite' has no attribute {name!r}")

__all__ = [
    "Sandbox",
    "AsyncSandbox",
    "AsyncShell",
    "Process",
    "SandboxPool",
    "Host",
    "SandboxConfig",
    "Limits",
    "Mount",
    "ExecResult",
    "Shell",
    "Snapshot",
    "FileInfo",
    "FileEvent",
    "SandboxError",
    "ConfigError",
    "SetupError",
    "RootfsError",
    "SandboxClosed",
    "SandboxCrashed",
    "CommandTimeout",
    "CommandFailed",
    "SandboxFileError",
    "SnapshotError",
    "__version__",
    "run_task",
    "RunResult",
    "ExitReason",
    "Task",
    "FakeModel",
    "OpenAIModel",
    "resolve_model",
    "find_models",
    "choose_model",
]
