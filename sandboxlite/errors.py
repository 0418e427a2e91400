"""Every exception sandboxlite raises, in one hierarchy.

::

    SandboxError
    ├── ConfigError(SandboxError, ValueError)        a config field has a bad value
    ├── SetupError(SandboxError, RuntimeError)       the host cannot run sandboxes
    │                                                (bwrap missing, user namespaces off,
    │                                                no C compiler for the executor)
    ├── RootfsError(SandboxError)                    rootfs missing, incomplete or corrupt
    │   └── ImageError(RootfsError)                  a container image could not be read, checked,
    │       │                                        unpacked, pulled or found (hostile input included)
    │       └── BuildError(ImageError)               a Dockerfile could not be parsed or built: names
    │                                                the file and line (and a failed RUN's exit code)
    ├── SandboxClosed(SandboxError, RuntimeError)    the sandbox was closed (or never opened)
    ├── SandboxCrashed(SandboxError, RuntimeError)   the jail died under us
    ├── CommandTimeout(SandboxError, TimeoutError)   raised by ExecResult.check()
    ├── CommandFailed(SandboxError)                  raised by ExecResult.check()
    ├── SandboxFileError(SandboxError, OSError)      a file operation inside the sandbox failed
    │   ├── SandboxFileNotFound(.., FileNotFoundError)
    │   ├── SandboxPermissionError(.., PermissionError)
    │   ├── SandboxIsADirectory(.., IsADirectoryError)
    │   ├── SandboxNotADirectory(.., NotADirectoryError)
    │   └── SandboxFileExists(.., FileExistsError)
    ├── TaskError(SandboxError, ValueError)          a task (task.json) is invalid: names the key
    ├── ModelError(SandboxError)                     the model endpoint failed (after retries)
    │   ├── ContextOverflow(ModelError)              the conversation no longer fits the context
    │   └── BadEndpoint(ConfigError, ModelError)     the endpoint's settings are invalid (a base URL
    │                                                that is no URL): bad input, found before a request
    ├── SnapshotError(SandboxError)                  a snapshot could not be taken, kept, found,
    │                                                started from or imported
    ├── DataError(SandboxError)                      eval data could not be fetched, or failed its checksum
    └── AgentError(SandboxError)                     how an agent run is steered (mini-swe-agent style)
        ├── FormatError(AgentError)                  malformed model output: goes back to the model
        ├── ToolError(AgentError)                    a tool call failed: goes back to the model
        ├── Submitted(AgentError)                    the model called submit: the run ends well
        └── LimitsExceeded(AgentError)               steps, tokens or time ran out

A command that exits non-zero, or runs out of time, is *data*: ``Sandbox.exec``
returns an ``ExecResult`` with ``exit_code`` and ``timed_out`` set.  Call
``result.check()`` to turn it into ``CommandFailed`` / ``CommandTimeout``.

Every message says what went wrong and, where there is one, what to do about it
(a line starting with ``Hint:``).

May import: nothing.
"""

from __future__ import annotations

import errno as _errno
import os


class SandboxError(Exception):
    """Base class of every sandboxlite error."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message}\nHint: {hint}")


class ConfigError(SandboxError, ValueError):
    """A configuration value is invalid: the message names the field and what is allowed."""

    def __init__(self, field: str, message: str, *, hint: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}", hint=hint)


class SetupError(SandboxError, RuntimeError):
    """This host cannot run sandboxes as configured (see ``sandboxlite doctor``)."""


class RootfsError(SandboxError):
    """The root filesystem is missing, incomplete or corrupt."""


class ImageError(RootfsError):
    """A container image (OCI or docker) could not be read, checked, unpacked, pulled or found."""


class BuildError(ImageError):
    """A Dockerfile could not be parsed or built.  ``file`` and ``line`` (1-based; 0 when the
    error is not about one line) say where; the message starts with ``FILE:LINE:``."""

    def __init__(self, message: str, *, file: str = "Dockerfile", line: int = 0, hint: str | None = None) -> None:
        self.file, self.line = file, line
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}", hint=hint)


class SandboxClosed(SandboxError, RuntimeError):
    """An operation was attempted on a closed sandbox."""

    def __init__(self, message: str = "the sandbox is closed", *, hint: str | None = None) -> None:
        super().__init__(
            message, hint=hint or "open a new one (Sandbox(...)) or call reset() before close()"
        )


class SandboxCrashed(SandboxError, RuntimeError):
    """The jail (bwrap or the executor inside it) died unexpectedly."""


class CommandTimeout(SandboxError, TimeoutError):
    """A command ran past its timeout (raised by ``ExecResult.check()``)."""

    def __init__(self, message: str, result: object = None) -> None:
        self.result = result
        super().__init__(message, hint="raise the timeout (exec(..., timeout=S)) or run less at once")


class CommandFailed(SandboxError):
    """A command exited non-zero (raised by ``ExecResult.check()``)."""

    def __init__(self, message: str, result: object = None) -> None:
        self.result = result
        super().__init__(message)


class SandboxFileError(SandboxError, OSError):
    """A file operation inside the sandbox failed; ``errno`` and ``filename`` are set."""

    def __init__(self, err: int, path: str, message: str | None = None) -> None:
        self.message = message or os.strerror(err)
        self.hint = None
        OSError.__init__(self, err, self.message, path)

    def __str__(self) -> str:  # like OSError: "[Errno 2] No such file or directory: '/x'"
        return OSError.__str__(self) + " (inside the sandbox)"


class SandboxFileNotFound(SandboxFileError, FileNotFoundError):
    pass


class SandboxPermissionError(SandboxFileError, PermissionError):
    pass


class SandboxIsADirectory(SandboxFileError, IsADirectoryError):
    pass


class SandboxNotADirectory(SandboxFileError, NotADirectoryError):
    pass


class SandboxFileExists(SandboxFileError, FileExistsError):
    pass


_BY_ERRNO = {
    _errno.ENOENT: SandboxFileNotFound,
    _errno.EACCES: SandboxPermissionError,
    _errno.EPERM: SandboxPermissionError,
    _errno.EROFS: SandboxPermissionError,
    _errno.EISDIR: SandboxIsADirectory,
    _errno.ENOTDIR: SandboxNotADirectory,
    _errno.EEXIST: SandboxFileExists,
}


def file_error(err: int, path: str, message: str | None = None) -> SandboxFileError:
    """The most specific ``SandboxFileError`` subclass for ``err``."""
    return _BY_ERRNO.get(err, SandboxFileError)(err, path, message)


class TaskError(SandboxError, ValueError):
    """A task definition is invalid; the message names the key and what is expected."""

    def __init__(self, key: str, message: str, *, hint: str | None = None) -> None:
        self.key = key
        super().__init__(f"{key}: {message}", hint=hint)


class ModelError(SandboxError):
    """The model endpoint failed (after the retries)."""


class ContextOverflow(ModelError):
    """The conversation no longer fits in the model's context window."""


class BadEndpoint(ConfigError, ModelError):
    """The model endpoint's settings are invalid (a base URL that is no http(s) URL): a ``ConfigError``
    (bad input: the CLI's exit code 2), and a ``ModelError`` for callers that catch those."""


class SnapshotError(SandboxError):
    """A snapshot could not be taken, kept, found, started from or imported (the message says why)."""


class DataError(SandboxError):
    """Eval data could not be fetched from its source, or does not match its pinned checksum."""


class AgentError(SandboxError):
    """Base of the exceptions that steer an agent run."""


class FormatError(AgentError):
    """The model's reply could not be understood; the message goes back to the model."""


class ToolError(AgentError):
    """A tool call failed (bad arguments, unknown tool, refused edit); the message goes back to the model."""


class Submitted(AgentError):
    """The model called ``submit``: the episode ends."""


class LimitsExceeded(AgentError):
    """A limit (steps, tokens, wall time, format errors in a row) ended the run; ``reason`` names
    which (an ``ExitReason`` value of the agent layer, e.g. "max_steps")."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        self.reason = reason
        super().__init__(message, hint=hint)
