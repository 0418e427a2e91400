"""A persistent shell session inside a sandbox (what the agent's ``execute_bash`` uses): bash, or
the image's POSIX sh where it has no bash (``Dialect``).

One bash process reads commands from a pipe, NUL-separated, and ``eval``s each
in its own context, so ``cd``, exported and plain variables, functions and
aliases persist.  After each command it writes the exit code and ``$PWD`` on a
status channel of its own (fd 3, closed while the command runs, see BOOT), which
is how we know the command is done; stdout and stderr carry only what the
command wrote, and every buffer kept here is capped by the output limit.  A
status that is not what BOOT writes ends the session and starts a new one (the
result's ``note`` says so).  Each command gets its own timeout: on expiry every
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
from collections.abc import Generator, Mapping
from typing import Any, Protocol

from ..config import check_timeout
from ..errors import ConfigError, SandboxClosed, SandboxCrashed, SandboxError, SetupError
from ..result import TIMEOUT_EXIT_CODE, ExecResult, OutputBuffer, decode_status
from .cmdio import CommandIO, Proc


class Owner(Protocol):
    """What a shell uses of its sandbox (``Sandbox`` is one; it makes its shells, so this module
    does not import it)."""

    lock: Any  # threading.Lock
    jail: Any  # launch.Jail
    config: Any  # SandboxConfig
    generation: int

    @property
    def workdir(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def alive(self) -> bool: ...

    def is_file(self, path: str) -> bool: ...

# The status of each command travels on fd 3, a pipe of its own: it is closed while the command
# runs (bash keeps its copy close-on-exec), so no program the command starts can write to it
# or read it, whatever it prints.  ``builtin`` because a command may define a function named
# printf or read (one that redefines ``builtin`` itself only breaks its own session: no status
# comes, the timeout ends the command and a new session starts).
# One line, run as "bash": bash names that line in its messages about the command ("bash:
# nosuch: command not found", as `bash -c` does), never a line of this loop.
BOOT = (
    "shopt -s expand_aliases; "
    "while IFS= builtin read -r -d '' __sl_c; do "
    'builtin eval "$__sl_c" </dev/null 3>&-; '
    "builtin printf '%d %s\\0' \"$?\" \"$PWD\" >&3; "
    "done"
)

# Where bash is missing (busybox, alpine, a slim image): a POSIX sh, whose ``read`` has no -d.  A
# command comes as its lines, then a line that ends it (random per session, so no command's own
# line is it); ``command`` makes eval and printf the builtins (no function of that name), and
# keeps a syntax error in the command from ending the shell, as a special builtin's error would.
POSIX_BOOT = (
    '__sl_e=$1; __sl_c=; '
    "while IFS= read -r __sl_l; do "
    'case $__sl_l in "$__sl_e") '
    'command eval "$__sl_c" </dev/null 3>&-; '
    "command printf '%d %s\\0' \"$?\" \"$PWD\" >&3; "
    "__sl_c=;; "
    '*) __sl_c="$__sl_c$__sl_l\n";; esac; '
    "done"
)
BASH_PATHS = ("/bin/bash", "/usr/bin/bash")
SH_PATHS = ("/bin/sh", "/usr/bin/sh")


@dataclasses.dataclass(frozen=True)
class Dialect:
    """How a session talks to its shell: the argv that starts the loop, and a command's framing."""

    program: str
    argv: tuple[str, ...]
    end: bytes = b""  # the POSIX loop's end-of-command line ("": bash's NUL ends a command)

    @classmethod
    def bash(cls, program: str = "/bin/bash") -> Dialect:
        return cls(program, (program, "--noprofile", "--norc", "-c", BOOT, "bash"))

    @classmethod
    def posix(cls, program: str = "/bin/sh") -> Dialect:
        end = "__sl_end_" + secrets.token_hex(16)
        return cls(program, (program, "-c", POSIX_BOOT, "sh", end), end.encode())

    def frame(self, command: bytes) -> bytes:
        if not self.end:
            return command + b"\0"
        return command + (b"" if command.endswith(b"\n") or not command else b"\n") + self.end + b"\n"


def choose_dialect(is_file) -> Dialect:
    """bash when the sandbox has it, else its POSIX sh; ``is_file(path)`` asks the sandbox.  No
    shell at all (a distroless image): SetupError naming what is missing."""
    for path in BASH_PATHS:
        if is_file(path):
            return Dialect.bash(path)
    for path in SH_PATHS:
        if is_file(path):
            return Dialect.posix(path)
    raise SetupError("the sandbox has no shell: a session (execute_bash) needs /bin/bash or /bin/sh, and its root "
                     "has neither (a distroless image?)",
                     hint="use an image with a shell (busybox, alpine, debian), or run programs by argv: "
                          "sandbox.exec(['/path/to/program', ...]); sandboxlite doctor --image REF says what an image "
                          "lacks")  # fmt: skip


STUCK_GRACE_S = 1.0  # after killing a command's children, how long bash has to come back
MAX_STATUS_BYTES = 1 << 16  # "CODE PWD\0": a PWD is at most PATH_MAX (4096)
# after the status: what the command wrote before it is in the pipes; read at most this much more
# of each (a background job that keeps writing must not keep us here)
DRAIN_BYTES = 4 << 20


class _Status:
    """The status channel: one ``CODE PWD`` record per command, NUL-terminated, at most
    MAX_STATUS_BYTES (more, or a second record, is the sign of a session out of step)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.record: bytes | None = None
        self.extra = 0  # bytes after the record

    def feed(self, data: bytes) -> None:
        if self.record is not None:
            self.extra += len(data)
            return
        self.buf += data
        j = self.buf.find(b"\0")
        if j >= 0:
            self.record = bytes(self.buf[:j])
            self.extra = len(self.buf) - j - 1
            self.buf.clear()
        elif len(self.buf) > MAX_STATUS_BYTES:
            self.record = bytes(self.buf[:MAX_STATUS_BYTES])  # malformed: parse() says so
            self.buf.clear()

    @property
    def done(self) -> bool:
        return self.record is not None

    def parse(self) -> tuple[int, str] | None:
        """(exit code, cwd), or None for a record that is not what BOOT prints."""
        code, sep, pwd = (self.record or b"").partition(b" ")
        if not sep or not code.isdigit() or len(code) > 3 or not pwd.startswith(b"/"):
            return None
        return int(code), pwd.decode("utf-8", "surrogateescape")


class Shell:
    """A bash session that lives across commands.  Get one with ``Sandbox.shell()``.

    It holds its sandbox for ``lock``, ``generation`` and ``config`` and drives the
    sandbox's ``jail`` (spawn, kill, last pid, the control channel) and nothing else.
    """

    def __init__(self, sandbox: Owner, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self._sb = sandbox
        self._env = dict(env or {})
        self._cwd = cwd or sandbox.workdir
        self._proc: Proc | None = None
        self._generation = sandbox.generation
        self.restarts = 0
        self.busy = False  # a command is running
        self._io: CommandIO | None = None  # the running command's I/O
        self._pending_note = ""
        self.dialect = choose_dialect(sandbox.is_file)
        self._start()

    # -- lifecycle -------------------------------------------------------------------------------
    def _start(self) -> None:
        with self._sb.lock:
            self._proc = self._sb.jail.spawn(
                list(self.dialect.argv),
                cwd=self._cwd,
                env=self._env,
                stdin_pipe=True,
                status_pipe=True,
            )
        for fd in (self._proc.out_r, self._proc.err_r, self._proc.in_w, self._proc.status_r):
            os.set_blocking(fd, False)

    def _close_fds(self) -> None:
        if self._io is not None:  # (its watch on the pipes first)
            self._io.close()
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
                self._end_session()
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
        payload, timeout = self._prepare(command, timeout)
        with self._sb.lock:
            self._check_open()
            self.busy = True
            steps = self._steps(payload, timeout, CommandIO)
            try:
                wait = next(steps)
                while True:  # each round: wait up to what the policy asks, serve what is ready
                    self._io.poll(wait, "the sandbox died during a shell command")  # type: ignore[union-attr]
                    wait = steps.send(None)
            except StopIteration as done:
                return self._noted(done.value)
            except BaseException:
                self._interrupted(steps)
                raise
            finally:
                self._ended(steps)

    def _interrupted(self, steps: Generator) -> None:
        """The command was interrupted (Ctrl-C, a cancelled task, the sandbox failing): bash's
        output is out of step with us now; end this session and start a fresh one in the same
        directory."""
        steps.close()
        self._abandon()

    def _ended(self, steps: Generator) -> None:
        steps.close()
        self.busy = False
        self._io = None

    def _prepare(self, command: str, timeout: float | None) -> tuple[bytes, float]:
        """The command as the dialect frames it, and its timeout (checked); ConfigError if unusable."""
        if not isinstance(command, str):
            raise ConfigError("command", f"must be a string, got {type(command).__name__}")
        if "\0" in command:
            raise ConfigError("command", "must not contain NUL bytes")
        try:
            payload = self.dialect.frame(command.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError as e:
            raise ConfigError("command", f"is not valid text: {e.reason} at position {e.start}") from None
        return payload, check_timeout(self._sb.config.limits.timeout_s if timeout is None else timeout)

    def _check_open(self) -> None:
        """SandboxClosed unless the session can take a command now (called with the lock held)."""
        if self._sb.closed:
            raise SandboxClosed()
        if self._sb.generation != self._generation:
            raise SandboxClosed("this shell belonged to the sandbox before reset()", hint="open a new sandbox.shell()")
        if self._proc is None:
            raise SandboxClosed("this shell is closed", hint="open a new one with sandbox.shell()")
        if self.busy:  # (an event loop's other task: the lock is the thread's, not the task's)
            raise RuntimeError("this shell is already running a command; a session runs one at a time "
                               "(open another with sandbox.shell())")  # fmt: skip

    def _noted(self, result: ExecResult) -> ExecResult:
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

    def _steps(self, payload: bytes, timeout: float, make_io) -> Generator[float, None, ExecResult]:
        """One command's policy, apart from how it waits (sans-I/O): yields how long the caller
        may wait before the next round, and the caller (``run``, or ``AsyncShell.run`` on an event
        loop) serves what became ready in ``self._io``, made by ``make_io(chan, proc, sinks,
        payload, keep_stdin=True)`` (``CommandIO`` or its asyncio twin); returns the result."""
        jail = self._sb.jail
        assert self._proc is not None and self._proc.status_r is not None
        proc = self._proc
        cap = self._sb.config.limits.output_bytes
        out, err, status = OutputBuffer(cap), OutputBuffer(cap), _Status()
        _discard_ready(proc.status_r)  # a record a command forged for an earlier one (see BOOT)
        sinks = {proc.out_r: out.feed, proc.err_r: err.feed, proc.status_r: status.feed}
        io = self._io = make_io(jail.chan, proc, sinks, payload, keep_stdin=True)
        with io:  # (its wakeup, when another thread also reads the channel)
            # processes with a higher pid than this belong to this command; on timeout
            # they are killed and older background jobs are spared
            floor = jail.last_pid()
            start = time.monotonic()
            deadline = start + timeout
            killed_desc_at: float | None = None
            killed_all = False
            while not status.done and not io.take_frames():
                now = time.monotonic()
                if now >= deadline and killed_desc_at is None:
                    io.kill(f"desc {floor}")
                    killed_desc_at = now
                elif killed_desc_at is not None and not killed_all and now - killed_desc_at > STUCK_GRACE_S:
                    io.kill("all")  # bash itself is stuck in a builtin
                    killed_all = True
                elif killed_all and now - killed_desc_at > STUCK_GRACE_S + 5.0:  # type: ignore[operator]
                    raise SandboxCrashed("a timed-out shell could not be killed within 5 s")
                yield deadline - now if killed_desc_at is None else 0.05
                if not io.open and not io.ended:
                    # bash closed its streams: it is exiting, its status follows
                    gone = time.monotonic() + 5.0
                    while not io.take_frames():
                        if time.monotonic() >= gone:
                            raise SandboxCrashed("the shell closed its output but did not exit within 5 s",
                                                 hint="reset() the sandbox")  # fmt: skip
                        yield 0.05
            timed_out = killed_desc_at is not None
            if status.done:  # the command finished and bash reported on it
                # what the command wrote before bash reported is in the pipes now
                _drain(proc.out_r, out.feed)
                _drain(proc.err_r, err.feed)
                duration = time.monotonic() - start
                parsed = status.parse()
                if parsed is None or status.extra:
                    return self._restart_after(out, err, duration, timed_out, "reported a malformed status")
                code, self._cwd = parsed
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
            duration = time.monotonic() - start
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

    def _restart_after(self, out: OutputBuffer, err: OutputBuffer, duration: float, timed_out: bool,
                       why: str) -> ExecResult:  # fmt: skip
        """The session is out of step with us (something in it wrote to its status channel):
        end it and start a new one, and say so in the result."""
        if self._proc is not None:
            self._end_session()
        self._start()
        self.restarts += 1
        note = (
            f"the shell session {why}, so it was ended and a new session was started in {self._cwd} "
            "(shell variables, functions and background jobs of the old one are gone)"
        )
        return _result(out, err, duration, timed_out, 1, None, note)

    def _end_session(self) -> None:
        """Kill bash and all it started, and wait (at most 5 s) until the executor says it is gone."""
        assert self._proc is not None
        ident = self._proc.id
        jail = self._sb.jail
        jail.kill(ident, "all")
        self._close_fds()
        try:
            jail.chan.wait(ident, time.monotonic() + 5.0)
        except (TimeoutError, SandboxCrashed):
            pass
        jail.chan.discard(ident)


def _drain(fd: int, feed) -> None:
    """Read what is in the pipe now (at most DRAIN_BYTES), without waiting."""
    left = DRAIN_BYTES
    while left > 0:
        try:
            chunk = os.read(fd, min(left, 1 << 16))
        except BlockingIOError:
            return
        if not chunk:
            return
        feed(chunk)
        left -= len(chunk)


def _discard_ready(fd: int) -> None:
    _drain(fd, lambda _chunk: None)


def _result(out: OutputBuffer, err: OutputBuffer, duration: float, timed_out: bool, code: int,
            sig: int | None, note: str = "") -> ExecResult:  # fmt: skip
    return ExecResult(
        exit_code=TIMEOUT_EXIT_CODE if timed_out else code,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        duration_s=duration,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
        signal=sig,
        note=note,
    )
