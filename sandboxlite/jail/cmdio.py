"""The command I/O loop: one spawned command's pipes and its frames, driven by poll(2).

``CommandIO`` feeds stdin, reads stdout and stderr into sinks and takes the
command's frames off the control channel (its exit status, or the errno of a
failed spawn).  The policy (when to stop, whom to kill when the time is up)
belongs to the caller: ``collect()`` here for ``Sandbox.exec``, ``Shell`` for a
persistent bash session.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable

from ..errors import SandboxCrashed
from ..executor.protocol import Channel, Op, Reply, kill_payload
from ..result import TIMEOUT_EXIT_CODE, ExecResult, OutputBuffer, decode_status

READ_CHUNK = 1 << 16
KILL_GRACE_S = 5.0  # after a kill request, the tree must be gone within this


class Proc:
    """A spawned command: its request id and our ends of its pipes (None when not piped).
    ``status_r``: the read end of its fd 3 (a shell's status channel), when asked for."""

    __slots__ = ("id", "in_w", "out_r", "err_r", "status_r")

    def __init__(self, ident: int, in_w: int | None, out_r: int, err_r: int, status_r: int | None = None) -> None:
        self.id, self.in_w, self.out_r, self.err_r, self.status_r = ident, in_w, out_r, err_r, status_r

    def close(self) -> None:
        for fd in (self.out_r, self.err_r, self.in_w, self.status_r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.in_w = self.status_r = None


class CommandIO:
    """Drive one command: ``poll()`` rounds until the caller's policy says it is done.

    ``sinks`` maps our read ends (stdout, stderr) to a ``feed(bytes)``; ``stdin`` is
    written as the pipe accepts it, then the pipe is closed unless ``keep_stdin``.
    After a round, ``status`` (a wait status) or ``spawn_errno`` is set once the
    command has ended or failed to start; ``open`` holds the read ends not at EOF.
    """

    def __init__(self, chan: Channel, proc: Proc, sinks: dict[int, Callable[[bytes], None]],
                 stdin: bytes | None = None, keep_stdin: bool = False) -> None:  # fmt: skip
        self.chan, self.proc, self.sinks = chan, proc, sinks
        self.keep_stdin = keep_stdin
        self.status: int | None = None
        self.spawn_errno: int | None = None
        self.open = set(sinks)
        self._poller = select.poll()
        self._poller.register(chan.fileno(), select.POLLIN)
        for fd in self.open:
            self._poller.register(fd, select.POLLIN)
        # another thread (a process reactor) may pump the channel and take our frame: then it
        # pokes an eventfd we poll as well
        self._wake = chan.wakeup_fd(proc.id) if chan.readers else None
        if self._wake is not None:
            self._poller.register(self._wake, select.POLLIN)
        self._pending = memoryview(stdin) if stdin else memoryview(b"")
        if proc.in_w is not None:
            if self._pending:
                os.set_blocking(proc.in_w, False)
                self._poller.register(proc.in_w, select.POLLOUT)
            elif not keep_stdin:
                os.close(proc.in_w)
                proc.in_w = None

    def close(self) -> None:
        """Stop listening for the command's frames (the pipes are the caller's ``Proc``)."""
        if self._wake is not None:
            self.chan.unlisten(self.proc.id)
            os.close(self._wake)
            self._wake = None

    def __enter__(self) -> "CommandIO":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def ended(self) -> bool:
        return self.status is not None or self.spawn_errno is not None

    def take_frames(self) -> bool:
        """Take the command's frames received so far; True once it has ended."""
        f = self.chan.take(self.proc.id)
        while f is not None:
            if f.type == Reply.EXIT:
                self.status = f.number()
            elif f.type == Reply.ERROR:
                self.spawn_errno = f.number()
            f = self.chan.take(self.proc.id)
        return self.ended

    def kill(self, how: str) -> None:
        """Ask the executor to kill the command's tree (``"all"``) or part of it (``"desc N"``)."""
        self.chan.send(Op.KILL, self.proc.id, kill_payload(how))

    def poll(self, timeout_s: float, died: str) -> None:
        """One round: wait up to ``timeout_s`` and serve what is ready.  ``died``: the message of
        the SandboxCrashed raised when the executor has gone."""
        for fd, _ev in self._poller.poll(max(0, int(timeout_s * 1000) + 1)):
            if fd == self.chan.fileno():
                if not self.chan.pump():
                    raise SandboxCrashed(died, hint="call reset() to start a fresh one")
            elif fd == self._wake:
                try:
                    os.eventfd_read(fd)
                except BlockingIOError:
                    pass
            elif fd == self.proc.in_w:
                self._write_stdin(fd)
            elif fd in self.open:
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    self.sinks[fd](chunk)
                else:
                    self._unwatch(fd)
                    self.open.discard(fd)
        self.take_frames()

    def _unwatch(self, fd: int) -> None:
        """Stop waiting on ``fd`` (at its end of file, or stdin written)."""
        self._poller.unregister(fd)

    def _write_stdin(self, fd: int) -> None:
        try:
            n = os.write(fd, self._pending[:READ_CHUNK])
            self._pending = self._pending[n:]
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin (EPIPE)
            self._pending = memoryview(b"")
        if not self._pending:
            self._unwatch(fd)
            if not self.keep_stdin:
                os.close(fd)
                self.proc.in_w = None

    def drain(self) -> set[int]:
        """Read what is already in the pipes, without waiting; returns the read ends still held
        open by someone (background processes of the command)."""
        for fd in list(self.open):
            os.set_blocking(fd, False)
            while True:
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    break
                if not chunk:
                    self.open.discard(fd)
                    break
                self.sinks[fd](chunk)
        return set(self.open)


def _tee(feed: Callable[[bytes], None], cb: Callable[[bytes], object] | None) -> Callable[[bytes], None]:
    if cb is None:
        return feed

    def both(chunk: bytes) -> None:
        feed(chunk)
        cb(chunk)

    return both


def collect(chan: Channel, proc: Proc, stdin: bytes | None, start: float, deadline: float, cap: int, *,
            on_stdout: Callable[[bytes], object] | None = None,
            on_stderr: Callable[[bytes], object] | None = None) -> ExecResult:  # fmt: skip
    """``Sandbox.exec``'s policy: run until the command's main process exits; at the deadline
    kill its whole tree; afterwards take what is in the pipes and let the executor drain the
    rest (background processes keep writing to them).  ``on_stdout``/``on_stderr`` get every
    chunk as it is read (all of it, also past the cap), in the calling thread."""
    out, err = OutputBuffer(cap), OutputBuffer(cap)
    io = CommandIO(chan, proc, {proc.out_r: _tee(out.feed, on_stdout), proc.err_r: _tee(err.feed, on_stderr)}, stdin)
    killed_at: float | None = None
    try:
        while not io.take_frames():
            now = time.monotonic()
            if killed_at is None and now >= deadline:
                io.kill("all")
                killed_at = now
            if killed_at is not None and now - killed_at > KILL_GRACE_S:
                raise SandboxCrashed("a timed-out command could not be killed within 5 s")
            io.poll((deadline if killed_at is None else killed_at + KILL_GRACE_S) - now,
                    "the sandbox died during a command")  # fmt: skip
        still_open = io.drain()
        if still_open:  # background processes still hold them: let the executor drain
            chan.send(Op.SINK, 0, b"", sorted(still_open))
    finally:
        io.close()
        proc.close()
    duration = time.monotonic() - start
    if io.spawn_errno is not None:
        msg = os.strerror(io.spawn_errno)
        if io.spawn_errno == errno.EAGAIN:
            msg += " (the sandbox's process limit is reached; reset() clears it)"
        err.feed(f"sandboxlite: cannot start the command: {msg}\n".encode())
        return ExecResult(126, bytes(out.data), bytes(err.data), duration, truncated=out.truncated or err.truncated)
    code, sig = decode_status(io.status)  # type: ignore[arg-type]
    timed_out = killed_at is not None
    return ExecResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out else code,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        duration_s=duration,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        signal=sig,
    )
