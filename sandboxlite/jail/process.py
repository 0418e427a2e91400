"""Spawned processes: ``Sandbox.spawn`` returns a ``Process`` that runs while you talk to it.

A ``Process`` holds our ends of the command's pipes (or of its terminal).  A
``Reactor`` (one thread per sandbox, while it has processes) reads every
process's output into its ``Stream``s as it comes, so a command never stalls on
a full pipe because nobody read it; each stream keeps at most ``cap`` unread
bytes and counts what it had to drop (``Stream.dropped``).  The reactor also
takes the processes' frames off the control channel (their pid and exit
status) and kills a process whose ``timeout`` has passed.  ``AsyncSandbox``
(aio.py) serves the same objects from an event loop instead of the thread.

Threads: every method of ``Process`` and ``Stream`` may be called from any
thread; a stream is meant to be iterated by one consumer.
"""

from __future__ import annotations

import codecs
import errno
import fcntl
import os
import select
import signal as signal_mod
import struct
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import CommandTimeout, ConfigError, SandboxCrashed, SandboxError
from ..executor.protocol import Channel, Op, Reply, kill_payload, signal_payload
from ..result import TIMEOUT_EXIT_CODE, ExecResult, decode_status

if TYPE_CHECKING:
    from .cmdio import Proc

READ_CHUNK = 1 << 20  # (a spawned command's pipes hold PIPE_BYTES)
PIPE_BYTES = 1 << 20  # /proc/sys/fs/pipe-max-size's default
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
KILL_GRACE_S = 5.0  # after a kill, the tree must be gone within this
RESET_STATUS = signal_mod.SIGKILL  # the wait status of a process ended by reset() or close()


class Stream:
    """One output stream of a ``Process``: an iterator of ``bytes`` chunks as the command writes
    them, ending when the stream closes (the command and everything that held it ended).

    At most ``cap`` bytes wait unread.  Until someone reads the stream, what comes while the
    buffer is full is dropped and counted in ``dropped`` (``total`` counts everything the command
    wrote): a server whose log nobody reads never stalls.  Once read from (``read``, iteration,
    ``lines``), the stream is read no faster than its reader, as a pipe is: the command waits
    while the buffer is full, and the reader loses nothing.  ``read()`` takes one chunk,
    ``lines()`` iterates text lines, ``take()`` takes everything buffered now."""

    def __init__(self, cap: int, cond: threading.Condition, name: str) -> None:
        self.cap, self.name = cap, name
        self._cond = cond
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.dropped = 0
        self.total = 0
        self.eof = False
        self.reading = False  # someone reads it: the reactor waits for room instead of dropping
        self._on_room: Callable[[], None] | None = None  # the reactor's: the buffer has room again

    @property
    def paused(self) -> bool:
        """Read from, and full: the reactor leaves the pipe alone until the reader takes a chunk."""
        return self.reading and self._size >= self.cap and not self.eof

    def __repr__(self) -> str:
        return f"<Stream {self.name} buffered={self._size} total={self.total} dropped={self.dropped} eof={self.eof}>"

    # -- the reactor's side (under the condition) ------------------------------------------------
    def _feed(self, chunk: bytes, force: bool = False) -> None:
        self.total += len(chunk)
        room = self.cap - self._size
        if force or self.reading:  # (a reader's stream is paused when full: what comes still fits)
            room = len(chunk)
        if room <= 0:
            self.dropped += len(chunk)
            return
        if len(chunk) > room:
            self.dropped += len(chunk) - room
            chunk = chunk[:room]
        self._chunks.append(chunk)
        self._size += len(chunk)

    # -- the consumer's side ---------------------------------------------------------------------
    def read(self, timeout: float | None = None) -> bytes:
        """The next chunk (waiting for it), or ``b""`` once the stream has ended.  ``timeout``:
        ``CommandTimeout`` when nothing came in that many seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self.reading = True
            while not self._chunks and not self.eof:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandTimeout(f"no output on {self.name} within {timeout}s (the process runs on)")
                self._cond.wait(left)
            if not self._chunks:
                return b""
            return self._pop()

    def _pop(self) -> bytes:
        """The oldest chunk (under the condition, one there); the reactor told when room is back."""
        was_full = self._size >= self.cap
        chunk = self._chunks.popleft()
        self._size -= len(chunk)
        if was_full and self._size < self.cap and self._on_room is not None:
            self._on_room()
        return chunk

    def take(self) -> bytes:
        """Everything buffered now (possibly ``b""``), without waiting."""
        with self._cond:
            data = b"".join(self._chunks)
            was_full = self._size >= self.cap
            self._chunks.clear()
            self._size = 0
            if was_full and self._on_room is not None:
                self._on_room()
            return data

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.read()
            if not chunk:
                return
            yield chunk

    def lines(self, encoding: str = "utf-8", errors: str = "replace", keepends: bool = False) -> Iterator[str]:
        """Text lines as they complete (the last one also without a newline)."""
        split = LineSplitter(encoding, errors, keepends)
        for chunk in self:
            yield from split.feed(chunk)
        yield from split.end()


class LineSplitter:
    """Chunks of bytes in, complete text lines out (a character or a line cut between chunks is
    joined; a long line is kept in parts, never re-split)."""

    def __init__(self, encoding: str = "utf-8", errors: str = "replace", keepends: bool = False) -> None:
        self._decoder = codecs.getincrementaldecoder(encoding)(errors)
        self._parts: list[str] = []
        self._keepends = keepends

    def feed(self, chunk: bytes) -> list[str]:
        text = self._decoder.decode(chunk)
        if "\n" not in text:
            if text:
                self._parts.append(text)
            return []
        *done, rest = text.split("\n")
        done[0] = "".join(self._parts) + done[0]
        self._parts = [rest] if rest else []
        return [line + "\n" for line in done] if self._keepends else done

    def end(self) -> list[str]:
        """The last line, when the stream did not end with a newline."""
        last = "".join(self._parts) + self._decoder.decode(b"", final=True)
        self._parts = []
        return [last] if last else []


class Process:
    """A command running in a sandbox (``Sandbox.spawn``).

    ``pid``: its pid inside the sandbox.  ``stdout``/``stderr``: ``Stream``s (with ``pty=True``
    the terminal's output is ``stdout`` and ``stderr`` is empty).  ``write``/``close_stdin`` feed
    it; ``wait`` returns an ``ExecResult`` (its output: what was not read from the streams);
    ``poll``/``returncode`` tell whether it ended; ``signal``/``kill`` stop it (its whole tree
    for ``kill``).  ``reset()`` and ``close()`` of the sandbox end it (exit code 137)."""

    def __init__(self, sandbox, proc: "Proc", argv: list[str], cap: int, *, pty_fd: int | None = None,
                 timeout: float | None = None) -> None:  # fmt: skip
        # (no reference to the sandbox: one dropped with its processes running is still closed by
        # its __del__, which ends them; keep the sandbox while you use its processes)
        self._chan: Channel = sandbox.jail.chan
        self._proc = proc
        self.id = proc.id
        self.argv = argv
        self.pid: int | None = None
        self.pty = pty_fd is not None
        self._pty_fd = pty_fd
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self._cond = threading.Condition()
        self.stdout = Stream(cap, self._cond, "stdout")
        self.stderr = Stream(cap, self._cond, "stderr")
        self.status: int | None = None  # the wait status, once ended
        self.spawn_errno: int | None = None
        self.timed_out = False
        self.killed_at: float | None = None
        self.note = ""
        self.ended_at: float | None = None
        self._write_lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []  # called (under the condition) at every change
        self._stdin = pty_fd if pty_fd is not None else proc.in_w
        # the read ends the reactor serves, each to its stream
        self._outs: dict[int, Stream] = {}
        if pty_fd is not None:
            self._outs[pty_fd] = self.stdout
            self.stderr.eof = True
        else:
            self._outs[proc.out_r] = self.stdout
            self._outs[proc.err_r] = self.stderr

    def __repr__(self) -> str:
        state = "running" if self.status is None else f"exited {self.returncode}"
        return f"<Process pid={self.pid} {self.argv!r} {state}>"

    # -- state -----------------------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        """None while it runs; then its exit code (``128 + N`` for signal N, 124 after its
        ``timeout``, 126 when it could not start)."""
        with self._cond:
            if self.spawn_errno is not None:
                return 126
            if self.status is None:
                return None
            return TIMEOUT_EXIT_CODE if self.timed_out else decode_status(self.status)[0]

    def poll(self) -> int | None:
        """``returncode``, without waiting."""
        return self.returncode

    @property
    def done(self) -> bool:
        """Ended, and its output streams closed (what the reactor will ever deliver is buffered)."""
        with self._cond:
            return self.ended_at is not None

    def wait(self, timeout: float | None = None) -> ExecResult:
        """Wait until it has ended (and its output is in), and return its result: exit code and
        the output not read from its streams.  ``timeout``: ``CommandTimeout`` when it still
        runs after that many seconds (it keeps running: ``kill()`` it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.ended_at is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandTimeout(f"the process {self.argv[0]!r} still runs after {timeout}s", None)
                self._cond.wait(left)
        return self.result()

    def result(self) -> ExecResult:
        """The result so far (``exit_code`` -1 while it runs): what ``wait`` returns."""
        with self._cond:
            code = self.returncode
            sig = None if self.status is None or self.timed_out else decode_status(self.status)[1]
            end = self.ended_at if self.ended_at is not None else time.monotonic()
        err = self.stderr.take()
        if self.spawn_errno is not None:
            err += f"sandboxlite: cannot start the command: {os.strerror(self.spawn_errno)}\n".encode()
        return ExecResult(
            exit_code=-1 if code is None else code,
            stdout=self.stdout.take(),
            stderr=err,
            duration_s=end - self.started,
            timed_out=self.timed_out,
            truncated=bool(self.stdout.dropped or self.stderr.dropped),
            signal=sig,
            note=self.note,
        )

    # -- input -----------------------------------------------------------------------------------
    def write(self, data: bytes | str) -> None:
        """Send ``data`` to its stdin (or terminal), all of it: waits while the pipe is full.
        ``BrokenPipeError`` once it closed its stdin or ended; ``ValueError`` after
        ``close_stdin()`` or without ``stdin=True``."""
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
        with self._write_lock:
            fd = self._stdin
            if fd is None:
                raise ValueError("this process's stdin is closed (or was not asked for: spawn(stdin=True))")
            view = memoryview(raw)
            while view:
                try:
                    n = os.write(fd, view)
                except BlockingIOError:
                    select.select([], [fd], [], 1.0)
                    continue
                except OSError as e:
                    if e.errno in (errno.EPIPE, errno.EIO):
                        raise BrokenPipeError(errno.EPIPE, "the process no longer reads its stdin") from None
                    raise
                view = view[n:]

    def close_stdin(self) -> None:
        """End of input: the command reads end of file (a terminal gets its EOF character)."""
        with self._write_lock:
            if self._stdin is None:
                return
            if self.pty:
                try:
                    os.write(self._stdin, bytes([termios.tcgetattr(self._stdin)[6][termios.VEOF][0]]))
                except (OSError, termios.error):
                    pass
                return
            fd, self._stdin = self._stdin, None
            self._proc.in_w = None
        os.close(fd)

    def resize(self, rows: int, cols: int) -> None:
        """A terminal's window size (``pty=True``): the command gets SIGWINCH."""
        if self._pty_fd is None:
            raise ValueError("resize() is for a process with a terminal (spawn(pty=True))")
        if not (0 < rows < 65536 and 0 < cols < 65536):
            raise ConfigError("size", f"rows and cols must be 1-65535, got {rows}x{cols}")
        with self._write_lock:
            if self._stdin is not None:
                fcntl.ioctl(self._pty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    # -- signals ---------------------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        """Send ``sig`` to its process group (nothing once it has ended)."""
        sig = check_signal(sig)
        if self.returncode is not None:
            return
        self._send_kill(signal_payload(sig))

    def kill(self) -> None:
        """Kill it and everything it started (SIGKILL to the whole tree)."""
        if self.returncode is not None:
            return
        with self._cond:
            if self.killed_at is None:
                self.killed_at = time.monotonic()
        self._send_kill(kill_payload("all"))

    def terminate(self) -> None:
        self.signal(signal_mod.SIGTERM)

    def _send_kill(self, payload: bytes) -> None:
        try:
            self._chan.send(Op.KILL, self.id, payload)
        except SandboxCrashed:
            pass  # the sandbox is gone, and the process with it

    # -- the reactor's side ----------------------------------------------------------------------
    def _take_frames(self) -> None:
        """Its frames (pid, exit, a start error) off the channel; under the condition."""
        while True:
            f = self._chan.take(self.id)
            if f is None:
                return
            if f.type == Reply.OK and self.pid is None:
                self.pid = f.number()
            elif f.type == Reply.EXIT:
                self.status = f.number()
            elif f.type == Reply.ERROR:
                self.spawn_errno = f.number()

    @property
    def _exited(self) -> bool:
        return self.status is not None or self.spawn_errno is not None

    def _close_fds(self) -> None:
        for fd in list(self._outs):
            self._close_out(fd)
        with self._write_lock:
            fd, self._stdin = self._stdin, None
            self._proc.in_w = None
            if fd is not None and fd not in (self._proc.out_r, self._pty_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _close_out(self, fd: int) -> None:
        stream = self._outs.pop(fd, None)
        if stream is not None:
            stream.eof = True
        if fd == self._pty_fd:
            with self._write_lock:
                if self._stdin == fd:
                    self._stdin = None
                self._pty_fd = None
        try:
            os.close(fd)
        except OSError:
            pass

    def _finish(self, *, status: int | None = None, note: str = "") -> None:
        """It has ended (or was ended): every stream closed, waiters woken.  Under the condition."""
        if status is not None and self.status is None and self.spawn_errno is None:
            self.status = status
        if note and not self.note:
            self.note = note
        self._close_fds()
        self.ended_at = time.monotonic()
        self._changed()

    def _changed(self) -> None:
        """Wake whoever waits for output or the end (threads, and event loops: aio.py)."""
        self._cond.notify_all()
        for wake in self._wakers:
            wake()


class Reactor:
    """The thread that serves a sandbox's spawned processes (module docstring).  It runs while
    there are processes, and counts itself among the channel's other ``readers`` meanwhile."""

    def __init__(self, chan: Channel, name: str) -> None:
        self.chan = chan
        self.name = name
        self._procs: dict[int, Process] = {}
        self._lock = threading.Lock()
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None  # the running thread's
        self.error: BaseException | None = None

    def add(self, proc: Process) -> None:
        with self._lock:
            self._procs[proc.id] = proc
            if self._thread is None:
                self.chan.readers += 1
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._stop,), daemon=True,
                                                name=f"sandboxlite-processes-{self.name}")  # fmt: skip
                self._thread.start()
        for stream in proc._outs.values():
            stream._on_room = self.poke
        self.chan.listen(proc.id, self.poke)
        self.poke()

    def processes(self) -> list[Process]:
        with self._lock:
            return list(self._procs.values())

    def poke(self) -> None:
        if self._wake < 0:  # closed
            return
        try:
            os.eventfd_write(self._wake, 1)
        except OSError:
            pass

    def end_all(self, note: str) -> None:
        """The sandbox reset or closed: every process has been killed with it.  Mark them ended
        (exit 137) and stop the thread; waits for it."""
        with self._lock:
            procs = list(self._procs.values())
            self._procs.clear()
            thread, self._thread = self._thread, None
            if self._stop is not None:
                self._stop.set()
        self.poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
        for p in procs:
            self.chan.unlisten(p.id)
            with p._cond:
                if p.ended_at is None:
                    p._finish(status=RESET_STATUS, note=note)

    def close(self) -> None:
        """Release the wakeup descriptor (after ``end_all``); again: nothing."""
        fd, self._wake = self._wake, -1
        if fd >= 0:
            os.close(fd)

    # -- the thread ------------------------------------------------------------------------------
    def _run(self, stop: threading.Event) -> None:
        try:
            self._loop(stop)
        except BaseException as e:  # noqa: BLE001 - kept for the waiters, never lost silently
            self.error = e
            for p in self.processes():
                with p._cond:
                    if p.ended_at is None:
                        p._finish(status=RESET_STATUS, note=f"sandboxlite: serving this process failed: {e!r}")
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
                self.chan.readers -= 1

    def _loop(self, stop: threading.Event) -> None:
        chan = self.chan
        while True:
            with self._lock:
                if stop.is_set() or not self._procs:
                    if self._thread is threading.current_thread():
                        self._thread = None  # (the next add starts a new one)
                    return
                procs = list(self._procs.values())
            poller = select.poll()
            poller.register(self._wake, select.POLLIN)
            poller.register(chan.fileno(), select.POLLIN)
            fds: dict[int, Process] = {}
            now = time.monotonic()
            timeout: float | None = None
            for p in procs:
                with p._cond:
                    outs = [fd for fd, stream in p._outs.items() if not stream.paused]
                for fd in outs:
                    poller.register(fd, select.POLLIN)
                    fds[fd] = p
                for t in (p.deadline if p.killed_at is None else None,
                          p.killed_at + KILL_GRACE_S if p.killed_at is not None else None):  # fmt: skip
                    if t is not None:
                        timeout = max(0.0, t - now) if timeout is None else min(timeout, max(0.0, t - now))
            ready = poller.poll(None if timeout is None else int(timeout * 1000) + 1)
            for fd, _ev in ready:
                if fd == self._wake:
                    try:
                        os.eventfd_read(fd)
                    except BlockingIOError:
                        pass
                elif fd == chan.fileno():
                    chan.pump()
                elif fd in fds:
                    self._read(fds[fd], fd)
            now = time.monotonic()
            for p in procs:
                self._service(p, now)

    def _read(self, p: Process, fd: int) -> None:
        chunk = read_chunk(fd)
        if chunk is not None:
            self._deliver(p, fd, chunk)

    def _deliver(self, p: Process, fd: int, chunk: bytes) -> None:
        """A chunk read from ``fd`` to its stream; ``b""``: its end (the descriptor is closed)."""
        with p._cond:
            if chunk:
                p._outs[fd]._feed(chunk)
            else:
                p._close_out(fd)
            p._changed()

    def _service(self, p: Process, now: float) -> None:
        with p._cond:
            p._take_frames()
            if p.deadline is not None and p.killed_at is None and now >= p.deadline and not p._exited:
                p.killed_at = now
                p.timed_out = True
                p._send_kill(kill_payload("all"))
            if p._exited:
                self._drain(p)
                p._finish()
            elif p.killed_at is not None and now - p.killed_at > KILL_GRACE_S:
                p._finish(status=RESET_STATUS, note="the process could not be killed within 5 s")
            elif self.chan.closed:
                p._finish(status=RESET_STATUS, note="the sandbox died")
            else:
                return
        with self._lock:
            self._procs.pop(p.id, None)
        self.chan.unlisten(p.id)

    def _drain(self, p: Process) -> None:
        """After its exit: what is in its pipes now; what background processes still hold is
        handed to the executor to drain (as exec does)."""
        held = []
        for fd, stream in list(p._outs.items()):
            os.set_blocking(fd, False)
            while True:
                try:
                    chunk = os.read(fd, READ_CHUNK)
                except BlockingIOError:
                    held.append(fd)
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                stream._feed(chunk, force=stream.reading)  # (at most what a pipe holds)
        pipes = [fd for fd in held if fd != p._pty_fd]
        if pipes:
            try:
                self.chan.send(Op.SINK, 0, b"", sorted(pipes))
            except SandboxError:
                pass


def read_chunk(fd: int) -> bytes | None:
    """What ``fd`` has (``b""``: its end; None: nothing now)."""
    try:
        return os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError as e:
        if e.errno != errno.EIO:  # EIO: a terminal whose other side is closed, its end of file
            raise
        return b""


def check_signal(sig: int) -> int:
    if isinstance(sig, bool) or not isinstance(sig, int) or not 0 < sig < 65:
        raise ConfigError("sig", f"a signal is a number from 1 to 64 (signal.SIGINT, ...), got {sig!r}")
    return int(sig)



TIOCSPTLCK = 0x40045431  # unlock a terminal's other side (unlockpt)
TIOCGPTPEER = 0x5441  # open it from the master, whatever its path in the jail (Linux 4.13)
START_TIMEOUT_S = 10.0  # the executor reports the command's pid well within this


def open_terminal(jail, size: tuple[int, int]) -> tuple[int, int]:
    """A new terminal of the jail's own devpts instance: (master, other side), the size set."""
    master = jail.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    try:
        fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
        peer = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    except BaseException:
        os.close(master)
        raise
    os.set_blocking(master, False)
    return master, peer


def spawn(sb, argv: list[str], *, cwd: str | None, env, stdin: bool, pty: bool | tuple[int, int],
          timeout: float | None, cap: int, reactor: Reactor | None = None, lossless: bool = False) -> Process:  # fmt: skip
    """``Sandbox.spawn`` (under its lock): start the command, learn its pid, hand it to the reactor
    (``reactor``, else the sandbox's thread)."""
    jail = sb.jail
    master = None
    if pty:
        size = (24, 80) if pty is True else pty
        if not (isinstance(size, tuple) and len(size) == 2 and all(isinstance(n, int) and 0 < n < 65536 for n in size)):
            raise ConfigError("pty", f"True or a (rows, cols) window size, got {pty!r}")
        master, peer = open_terminal(jail, size)
        try:
            proc = jail.spawn(argv, cwd=cwd, env=env, tty=peer, report_pid=True)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(peer)
    else:
        proc = jail.spawn(argv, cwd=cwd, env=env, stdin_pipe=stdin, report_pid=True)
    for fd in (proc.out_r, proc.err_r):
        if fd >= 0:
            os.set_blocking(fd, False)
            try:  # a bigger pipe: fewer, bigger reads for a fast writer (the machine's cap may refuse it)
                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:
                pass
    p = Process(sb, proc, argv, cap, pty_fd=master, timeout=timeout)
    p.stdout.reading = p.stderr.reading = lossless  # (before the reactor sees them)
    try:
        first = jail.chan.wait(proc.id, time.monotonic() + START_TIMEOUT_S)
    except TimeoutError:
        jail.kill(proc.id, "all")
        p._close_fds()
        raise SandboxCrashed(f"the executor did not report the start of {argv[0]!r}") from None
    except BaseException:
        p._close_fds()
        raise
    if first.type == Reply.ERROR:
        p._close_fds()
        err = first.number()
        hint = "reset() clears the sandbox's processes (its process limit is reached)" if err == errno.EAGAIN else None
        raise SandboxError(f"cannot start {argv[0]!r} in the sandbox: {os.strerror(err)}", hint=hint)
    if first.type == Reply.OK:
        p.pid = first.number()
    elif first.type == Reply.EXIT:
        p.status = first.number()
    (reactor or sb._reactor_for()).add(p)
    return p
