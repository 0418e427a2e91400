"""A persistent bash session inside a sandbox (what the agent's ``execute_bash`` uses).

One bash process reads commands from a pipe, NUL-separated, and ``eval``s each
in its own context, so ``cd``, exported and plain variables, functions and
aliases persist.  After each command it prints a marker with a random nonce,
the exit code and ``$PWD`` on stdout (and the marker on stderr), which is how we
know the command is done.  Each command gets its own timeout: on expiry every
process below bash (double-forked daemons included: bash's supervisor is a
subreaper) that the command started is killed, bash survives and reports exit
code 124.  Background jobs of earlier commands are spared.  If the command
was a shell builtin that never returns (``while :; do :; done``), bash itself
is killed and a new session starts in the same directory (``note`` says so).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._cmdio import CommandIO, Proc
from .config import check_timeout
from .errors import ConfigError, SandboxClosed, SandboxCrashed, SandboxError
from .result import TIMEOUT_EXIT_CODE, ExecResult, OutputBuffer, decode_status

if TYPE_CHECKING:
    from .sandbox import Sandbox

BOOT = r"""
__sl_m=$1
shopt -s expand_aliases
while IFS= read -r -d '' __sl_c; do
  eval "$__sl_c" </dev/null
  __sl_rc=$?
  printf '%s%d %s\0' "$__sl_m" "$__sl_rc" "$PWD"
  printf '%s' "$__sl_m" >&2
done
"""

STUCK_GRACE_S = 1.0  # after killing a command's children, how long bash has to come back


class _MarkerStream:
    """Splits one stream at the marker; keeps at most ``cap`` bytes of output."""

    def __init__(self, marker: bytes, cap: int, trailer: bool, carry: bytes = b"") -> None:
        self.marker = marker
        self.out = OutputBuffer(cap)
        self.window = bytearray()
        self.want_trailer = trailer
        self.found = False
        self.done = False
        self.trailer = bytearray()
        self.rest = bytearray()
        if carry:
            self.feed(carry)

    def feed(self, data: bytes) -> None:
        if self.done:
            self.rest += data
            return
        if self.found:  # collecting "RC PWD\0"
            self._trail(data)
            return
        self.window += data
        i = self.window.find(self.marker)
        if i < 0:
            keep = len(self.marker) - 1
            if len(self.window) > keep:
                self.out.feed(bytes(self.window[:-keep]))
                del self.window[:-keep]
            return
        self.out.feed(bytes(self.window[:i]))
        after = bytes(self.window[i + len(self.marker) :])
        self.window.clear()
        self.found = True
        if self.want_trailer:
            self._trail(after)
        else:
            self.done = True
            self.rest += after

    def _trail(self, data: bytes) -> None:
        j = data.find(b"\0")
        if j < 0:
            self.trailer += data
            if len(self.trailer) > 1 << 16:  # a PWD cannot be this long
                self.done = True
            return
        self.trailer += data[:j]
        self.rest += data[j + 1 :]
        self.done = True

    def flush(self) -> None:
        """The stream ended without a marker: everything seen is output."""
        if not self.found:
            self.out.feed(bytes(self.window))
            self.window.clear()


class Shell:
    """A bash session that lives across commands.  Get one with ``Sandbox.shell()``.

    It holds its sandbox for ``lock``, ``generation`` and ``config`` and drives the
    sandbox's ``jail`` (spawn, kill, last pid, the control channel) and nothing else.
    """

    def __init__(self, sandbox: "Sandbox", *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self._sb = sandbox
        self._env = dict(env or {})
        self._cwd = cwd or sandbox.config.workdir
        self._proc: Proc | None = None
        self._generation = sandbox.generation
        self._carry_out = b""
        self._carry_err = b""
        self.restarts = 0
        self._pending_note = ""
        self._start()

    # -- lifecycle -------------------------------------------------------------------------------
    def _start(self) -> None:
        self._marker = f"\x1e__SANDBOXLITE_{secrets.token_hex(8)}__".encode()
        with self._sb.lock:
            self._proc = self._sb.jail.spawn(
                ["/bin/bash", "--noprofile", "--norc", "-c", BOOT, "sandboxlite-shell", self._marker.decode()],
                cwd=self._cwd,
                env=self._env,
                stdin_pipe=True,
            )
        for fd in (self._proc.out_r, self._proc.err_r, self._proc.in_w):
            os.set_blocking(fd, False)
        self._carry_out = self._carry_err = b""

    def _close_fds(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None

    def detach(self) -> None:
        """The sandbox is closing or resetting: forget our process."""
        self._close_fds()

    def _same_jail(self) -> bool:
        return not self._sb.closed and self._sb.generation == self._generation

    def close(self) -> None:
        """End the session (kills bash and everything it started)."""
        with self._sb.lock:
            if self._proc is not None and self._same_jail():
                ident = self._proc.id
                jail = self._sb.jail
                jail.kill(ident, "all")
                self._close_fds()
                try:
                    jail.chan.wait(ident, time.monotonic() + 5.0)
                except (TimeoutError, SandboxCrashed):
                    pass
                jail.chan.discard(ident)
            self._close_fds()

    def __enter__(self) -> "Shell":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # dropped without close(): give back our ends of its pipes (the sandbox only holds
        # shells weakly), and bash, reading end of file, exits
        try:
            self._close_fds()
        except Exception:
            pass

    @property
    def cwd(self) -> str:
        """The session's working directory after the last command."""
        return self._cwd

    # -- commands --------------------------------------------------------------------------------
    def run(self, command: str, *, timeout: float | None = None) -> ExecResult:
        """Run one command in the session and return its output and exit code."""
        if not isinstance(command, str):
            raise ConfigError("command", f"must be a string, got {type(command).__name__}")
        if "\0" in command:
            raise ConfigError("command", "must not contain NUL bytes")
        try:
            payload = command.encode("utf-8", "surrogateescape") + b"\0"
        except UnicodeEncodeError as e:
            raise ConfigError("command", f"is not valid text: {e.reason} at position {e.start}") from None
        timeout = check_timeout(self._sb.config.limits.timeout_s if timeout is None else timeout)
        with self._sb.lock:
            if self._sb.closed:
                raise SandboxClosed()
            if self._sb.generation != self._generation:
                raise SandboxClosed("this shell belonged to the sandbox before reset()", hint="open a new sandbox.shell()")
            if self._proc is None:
                raise SandboxClosed("this shell is closed", hint="open a new one with sandbox.shell()")
            try:
                result = self._run(payload, timeout)
            except BaseException:
                # interrupted mid-command (Ctrl-C): bash's output is out of step with us now;
                # end this session and start a fresh one in the same directory
                self._abandon()
                raise
            if self._pending_note:
                result = dataclasses.replace(result, note=(self._pending_note + " " + result.note).strip())
                self._pending_note = ""
            return result

    def _abandon(self) -> None:
        proc = self._proc
        if proc is not None and self._sb.alive():
            try:
                jail = self._sb.jail
                jail.kill(proc.id, "all")
                jail.chan.discard(proc.id)
            except SandboxError:
                pass
        self._close_fds()
        try:
            self._start()
            self.restarts += 1
            self._pending_note = (
                f"the previous command was interrupted, so a new shell session was started in {self._cwd} "
                "(shell variables and functions of the old one are gone)."
            )
        except SandboxError:
            pass  # the sandbox itself is gone; run() will say so

    def _run(self, payload: bytes, timeout: float) -> ExecResult:
        jail = self._sb.jail
        assert self._proc is not None
        proc = self._proc
        cap = self._sb.config.limits.output_bytes
        out = _MarkerStream(self._marker, cap, True, self._carry_out)
        err = _MarkerStream(self._marker, cap, False, self._carry_err)
        io = CommandIO(jail.chan, proc, {proc.out_r: out.feed, proc.err_r: err.feed}, payload, keep_stdin=True)
        # processes with a higher pid than this belong to this command; on timeout
        # they are killed and older background jobs are spared
        floor = jail.last_pid()
        start = time.monotonic()
        deadline = start + timeout
        killed_desc_at: float | None = None
        killed_all = False
        while not (out.done and err.done) and not io.take_frames():
            now = time.monotonic()
            if now >= deadline and killed_desc_at is None:
                io.kill(f"desc {floor}")
                killed_desc_at = now
            elif killed_desc_at is not None and not killed_all and now - killed_desc_at > STUCK_GRACE_S:
                io.kill("all")  # bash itself is stuck in a builtin
                killed_all = True
            elif killed_all and now - killed_desc_at > STUCK_GRACE_S + 5.0:  # type: ignore[operator]
                raise SandboxCrashed("a timed-out shell could not be killed within 5 s")
            io.poll(deadline - now if killed_desc_at is None else 0.05, "the sandbox died during a shell command")
            if not io.open and not io.ended:
                # bash closed both streams: it is exiting, its status follows
                io.status = jail.chan.wait(proc.id, time.monotonic() + 5.0).number()
        duration = time.monotonic() - start
        timed_out = killed_desc_at is not None
        if out.done and err.done:  # the command finished and bash reported on it
            self._carry_out, self._carry_err = bytes(out.rest), bytes(err.rest)
            code = int(out.trailer.split(b" ", 1)[0] or b"0") if out.trailer else 0
            pwd = out.trailer.split(b" ", 1)[1] if b" " in out.trailer else b""
            if pwd:
                self._cwd = pwd.decode("utf-8", "surrogateescape")
            note = ""
            if io.ended:  # ... and then exited: the next command needs a new session
                jail.chan.discard(proc.id)
                self._close_fds()
                self._start()
                self.restarts += 1
                note = f"the shell session exited after this command; a new session was started in {self._cwd}"
            return _result(out, err, duration, timed_out, code, 9 if timed_out else None, note)
        # bash is gone (exit, set -e, killed because it was stuck, or it could not start): restart
        io.drain()
        out.flush()
        err.flush()
        if io.status is None:
            raise SandboxCrashed(f"the shell could not start: {os.strerror(io.spawn_errno or 0)}",
                                 hint="reset() the sandbox (its process limit may be reached)")  # fmt: skip
        code, sig = decode_status(io.status)
        jail.chan.discard(proc.id)
        self._close_fds()
        self._start()
        self.restarts += 1
        why = "was killed after the timeout" if timed_out else f"exited with status {code}"
        note = (
            f"the shell session {why}; a new session was started in {self._cwd} "
            "(shell variables, functions and background jobs of the old one are gone)"
        )
        return _result(out, err, duration, timed_out, code, sig, note)


def _result(out: _MarkerStream, err: _MarkerStream, duration: float, timed_out: bool, code: int,
            sig: int | None, note: str = "") -> ExecResult:  # fmt: skip
    return ExecResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out else code,
        stdout=bytes(out.out.data),
        stderr=bytes(err.out.data),
        duration_s=duration,
        timed_out=timed_out,
        truncated=out.out.truncated or err.out.truncated,
        signal=sig,
        note=note,
    )
