"""``ExecResult``: what one command did.  A non-zero exit is data, not an exception.

May import: errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import CommandFailed, CommandTimeout

TIMEOUT_EXIT_CODE = 124  # like GNU timeout(1)


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one command.

    exit_code: the exit status; ``128 + N`` when killed by signal N (``signal``
        is then N); 124 when the command ran out of time (``timed_out``); 126
        when it could not be started; 127 when it was not found.
    stdout, stderr: exactly the bytes written, up to the output cap
        (``truncated`` is set when either stream was cut).
    duration_s: wall time from start to exit.
    note: a remark from sandboxlite (e.g. "the shell session was restarted").
    """

    exit_code: int
    stdout: bytes
    stderr: bytes
    duration_s: float
    timed_out: bool = False
    truncated: bool = False
    signal: int | None = None
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def check(self) -> "ExecResult":
        """Return self if the command succeeded, else raise CommandTimeout / CommandFailed."""
        if self.timed_out:
            raise CommandTimeout(f"the command timed out after {self.duration_s:.1f}s", self)
        if self.exit_code != 0:
            tail = self.stderr_text.strip()[-500:]
            raise CommandFailed(f"the command exited with {self.exit_code}" + (f": {tail}" if tail else ""), self)
        return self


def decode_status(status: int) -> tuple[int, int | None]:
    """A wait status as (exit_code, signal): signals become ``128 + N``."""
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return 128 - code, -code
    return code, None


class OutputBuffer:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    __slots__ = ("cap", "data", "total")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)
