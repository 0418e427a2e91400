"""``AsyncSandbox``: a sandbox for asyncio, served by the event loop, not by threads.

Commands and processes are driven by the loop itself: their pipes and the
executor's control socket are registered with ``loop.add_reader`` (one
``AsyncReactor`` per sandbox and loop), so a thousand concurrent ``exec``s or
streams cost no thread at all.  File calls are one request to the executor and
a read or write of a descriptor it hands over (tmpfs or overlay: memory speed),
done inline.  Starting, resetting and closing a sandbox (a few milliseconds,
more when a snapshot or image is set up) run in the loop's default executor so
that they never block the loop.

    async with await AsyncSandbox.create() as sb:
        r = await sb.exec("echo hi")
        proc = await sb.spawn(["python3", "-u", "server.py"])
        async for line in proc.stdout.lines():
            ...

Every ``AsyncSandbox`` belongs to the loop it was created in.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ..config import check_timeout
from ..errors import CommandTimeout, SandboxCrashed
from ..result import ExecResult
from . import process as process_mod
from .cmdio import READ_CHUNK, CommandIO, Proc
from .process import LineSplitter, Process, Reactor, Stream, read_chunk
from .sandbox import Sandbox
from .shell import Shell


class AsyncReactor(Reactor):
    """``Reactor`` driven by an event loop: ``add_reader`` for every process's output and for the
    control channel while processes run; deadlines by ``call_later``."""

    def __init__(self, chan, name: str, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(chan, name)
        self.loop = loop
        self._watching_chan = False
        self._holds = 0  # shell commands (AsyncShell.run) that need the channel watched
        self._fds: dict[int, Process] = {}

    def _watch_chan(self) -> None:
        if not self._watching_chan:
            self.loop.add_reader(self.chan.fileno(), self._on_chan)
            self.chan.readers += 1
            self._watching_chan = True

    def hold(self) -> None:
        """Keep the channel watched (pumped by the loop) until ``release()``: a shell command's
        frames come through it."""
        self._holds += 1
        self._watch_chan()

    def release(self) -> None:
        self._holds -= 1
        self._maybe_idle()

    @property
    def busy(self) -> bool:
        return self._watching_chan or bool(self._procs)

    def add(self, proc: Process) -> None:
        with self._lock:
            self._procs[proc.id] = proc
        self._watch_chan()
        for fd, stream in list(proc._outs.items()):
            self._fds[fd] = proc
            self.loop.add_reader(fd, self._on_out, fd)
            stream._on_room = functools.partial(self.loop.call_soon_threadsafe, self._resume, fd)
        self.chan.listen(proc.id, functools.partial(self.loop.call_soon_threadsafe, self._check, proc))
        if proc.deadline is not None:
            self.loop.call_later(max(0.0, proc.deadline - time.monotonic()), self._check, proc)

    def _on_chan(self) -> None:
        self.chan.pump()  # (listeners schedule _check of the processes whose frames came)
        if self.chan.closed:
            for p in self.processes():
                self._check(p)

    def _on_out(self, fd: int) -> None:
        p = self._fds.get(fd)
        if p is None:
            return
        chunk = read_chunk(fd)
        if chunk is None:
            return
        if not chunk:
            self._unwatch(fd)
        self._deliver(p, fd, chunk)
        stream = p._outs.get(fd)
        if stream is not None and stream.paused:  # its reader is behind: the command waits for it
            self.loop.remove_reader(fd)

    def _resume(self, fd: int) -> None:
        p = self._fds.get(fd)
        if p is not None and fd in p._outs and not p._outs[fd].paused:
            self.loop.add_reader(fd, self._on_out, fd)

    def _unwatch(self, fd: int) -> None:
        if self._fds.pop(fd, None) is not None:
            self.loop.remove_reader(fd)

    def _check(self, p: Process) -> None:
        if p.ended_at is not None:
            return
        now = time.monotonic()
        with p._cond:
            p._take_frames()
            ending = p._exited or self.chan.closed or (p.killed_at is not None and now - p.killed_at > 5.0)
        if ending:
            for fd in list(p._outs):
                self._unwatch(fd)
        self._service(p, now)
        if p.ended_at is None and p.killed_at is not None:  # killed at its deadline: the exit is due soon
            self.loop.call_later(process_mod.KILL_GRACE_S + 0.1, self._check, p)
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        with self._lock:
            idle = not self._procs and self._holds <= 0
        if idle and self._watching_chan:
            self.loop.remove_reader(self.chan.fileno())
            self.chan.readers -= 1
            self._watching_chan = False

    def end_all(self, note: str) -> None:
        for fd in list(self._fds):
            self._unwatch(fd)
        super().end_all(note)
        self._maybe_idle()


class AsyncCommandIO(CommandIO):
    """``CommandIO`` for an event loop: the command's pipes are the loop's readers (each chunk
    goes to its sink as it comes), its frames come through the loop's ``AsyncReactor`` (which
    pumps the channel meanwhile), and a round (``poll``) is awaited."""

    def __init__(self, chan, proc: Proc, sinks: dict[int, Callable[[bytes], None]], stdin: bytes | None = None,
                 keep_stdin: bool = False, *, reactor: AsyncReactor) -> None:  # fmt: skip
        # (not CommandIO.__init__: no poll object, no eventfd; the same state otherwise)
        self.chan, self.proc, self.sinks, self.keep_stdin = chan, proc, sinks, keep_stdin
        self.status: int | None = None
        self.spawn_errno: int | None = None
        self.open = set(sinks)
        self._wake = None
        self._pending = memoryview(stdin) if stdin else memoryview(b"")
        self._loop, self._reactor = reactor.loop, reactor
        self._thread = threading.get_ident()
        self._ready = False  # something happened since the last round
        self._waiter: asyncio.Future | None = None
        self._writing: int | None = None
        reactor.hold()
        self._held = True
        for fd in self.open:
            self._loop.add_reader(fd, self._on_read, fd)
        if proc.in_w is not None:
            if self._pending:
                os.set_blocking(proc.in_w, False)
                self._writing = proc.in_w
                self._loop.add_writer(proc.in_w, self._write_stdin, proc.in_w)
            elif not keep_stdin:
                os.close(proc.in_w)
                proc.in_w = None
        chan.listen(proc.id, self._on_frame)

    def _note(self) -> None:
        self._ready = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _on_frame(self) -> None:  # (in whichever thread pumps the channel)
        if threading.get_ident() == self._thread:
            self._note()
        else:
            self._loop.call_soon_threadsafe(self._note)

    def _on_read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        if chunk:
            self.sinks[fd](chunk)
        else:
            self._unwatch(fd)
            self.open.discard(fd)
        self._note()

    def _unwatch(self, fd: int) -> None:
        if fd == self._writing:
            self._writing = None
            self._loop.remove_writer(fd)
        else:
            self._loop.remove_reader(fd)

    async def poll(self, timeout_s: float, died: str) -> None:  # type: ignore[override]
        """One round: wait (without blocking the loop) up to ``timeout_s`` for the next chunk,
        frame or end of file, unless one came since the last round."""
        if not self._ready and timeout_s > 0:
            w = self._waiter = self._loop.create_future()
            timer = self._loop.call_later(timeout_s, lambda: w.done() or w.set_result(None))
            try:
                await w
            finally:
                timer.cancel()
                self._waiter = None
        self._ready = False
        if self.chan.closed and not self.take_frames():
            raise SandboxCrashed(died, hint="call reset() to start a fresh one")
        self.take_frames()

    def close(self) -> None:
        """Stop watching (before the pipes are closed: a number reused by the next command's
        pipes must not meet a stale registration); again: nothing."""
        if not self._held:
            return
        self._held = False
        self.chan.unlisten(self.proc.id)
        for fd in list(self.open):
            self._loop.remove_reader(fd)
        if self._writing is not None:
            self._unwatch(self._writing)
        self._reactor.release()


class AsyncShell:
    """A persistent shell session (``Shell``) whose commands the event loop drives: ``await
    run(command, timeout=)`` costs no thread.  From ``AsyncSandbox.shell()``.  The session is the
    same object as ``shell`` (sync ``run`` works on it too, one command at a time)."""

    def __init__(self, shell: Shell, sandbox: "AsyncSandbox") -> None:
        self.shell = shell
        self._asb = sandbox
        self.loop = sandbox._loop

    cwd = property(lambda self: self.shell.cwd)
    restarts = property(lambda self: self.shell.restarts)

    def close(self) -> None:
        self.shell.close()

    async def run(self, command: str, *, timeout: float | None = None) -> ExecResult:
        """As ``Shell.run``.  The sandbox's lock is held by the loop's thread for the command,
        so other threads wait for it as they do for a ``Shell.run``; a second command on this
        session meanwhile is a RuntimeError (open another shell)."""
        sh = self.shell
        payload, timeout = sh._prepare(command, timeout)
        with sh._sb.lock:
            sh._check_open()
            make_io = functools.partial(AsyncCommandIO, reactor=self._asb._reactor_for())
            sh.busy = True
            steps = sh._steps(payload, timeout, make_io)
            try:
                wait = next(steps)
                while True:
                    await sh._io.poll(wait, "the sandbox died during a shell command")  # type: ignore[union-attr]
                    wait = steps.send(None)
            except StopIteration as done:
                return sh._noted(done.value)
            except BaseException:
                sh._interrupted(steps)
                raise
            finally:
                sh._ended(steps)


class AsyncStream:
    """A process's output stream for ``async for``: chunks (``bytes``) as they come."""

    def __init__(self, stream: Stream, proc: "AsyncProcess") -> None:
        self._s, self._p = stream, proc

    @property
    def dropped(self) -> int:
        return self._s.dropped

    @property
    def total(self) -> int:
        return self._s.total

    async def read(self, timeout: float | None = None) -> bytes:
        """The next chunk, or ``b""`` at its end; ``CommandTimeout`` when none came in ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        s = self._s
        while True:
            with s._cond:
                s.reading = True
                if s._chunks:
                    return s._pop()
                if s.eof:
                    return b""
                event = self._p._event()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise CommandTimeout(f"no output on {s.name} within {timeout}s (the process runs on)")
            try:
                await asyncio.wait_for(event.wait(), left)
            except asyncio.TimeoutError:
                pass

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.read()
            if not chunk:
                return
            yield chunk

    async def lines(self, encoding: str = "utf-8", errors: str = "replace",
                    keepends: bool = False) -> AsyncIterator[str]:  # fmt: skip
        """Text lines as they complete (the last one also without a newline)."""
        split = LineSplitter(encoding, errors, keepends)
        async for chunk in self:
            for line in split.feed(chunk):
                yield line
        for line in split.end():
            yield line


class AsyncProcess:
    """``Process`` for asyncio: ``await wait()``, ``async for chunk in stdout``, ``await write()``."""

    def __init__(self, proc: Process, loop: asyncio.AbstractEventLoop) -> None:
        self._proc = proc
        self._loop = loop
        self._events: list[asyncio.Event] = []
        self._loop_thread = threading.get_ident()  # (made in the loop: AsyncSandbox.spawn)
        self.stdout = AsyncStream(proc.stdout, self)
        self.stderr = AsyncStream(proc.stderr, self)
        proc._wakers.append(self._wake)

    def __repr__(self) -> str:
        return repr(self._proc).replace("<Process", "<AsyncProcess", 1)

    def _event(self) -> asyncio.Event:
        """A fresh event set at the process's next change (called under its condition)."""
        event = asyncio.Event()
        self._events.append(event)
        return event

    def _wake(self) -> None:  # (under the process's condition, in the loop's thread or another)
        events, self._events = self._events, []
        if not events:
            return
        if threading.get_ident() == self._loop_thread:  # the loop's reactor: no self-pipe round
            for e in events:
                e.set()
        else:
            for e in events:
                self._loop.call_soon_threadsafe(e.set)

    pid = property(lambda self: self._proc.pid)
    returncode = property(lambda self: self._proc.returncode)
    argv = property(lambda self: self._proc.argv)

    def poll(self) -> int | None:
        return self._proc.poll()

    def signal(self, sig: int) -> None:
        self._proc.signal(sig)

    def kill(self) -> None:
        self._proc.kill()

    def terminate(self) -> None:
        self._proc.terminate()

    def resize(self, rows: int, cols: int) -> None:
        self._proc.resize(rows, cols)

    async def wait(self, timeout: float | None = None) -> ExecResult:
        """As ``Process.wait``, without blocking the loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        p = self._proc
        while True:
            with p._cond:
                if p.ended_at is not None:
                    break
                event = self._event()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise CommandTimeout(f"the process {p.argv[0]!r} still runs after {timeout}s", None)
            try:
                await asyncio.wait_for(event.wait(), left)
            except asyncio.TimeoutError:
                pass
        return p.result()

    async def write(self, data: bytes | str) -> None:
        """All of ``data`` to its stdin, waiting (without blocking the loop) while the pipe is full."""
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
        p = self._proc
        view = memoryview(raw)
        while view:
            fd = p._stdin
            if fd is None:
                raise ValueError("this process's stdin is closed (or was not asked for: spawn(stdin=True))")
            os.set_blocking(fd, False)
            try:
                with p._write_lock:
                    n = os.write(fd, view)
            except BlockingIOError:
                ready = self._loop.create_future()
                self._loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
                try:
                    await ready
                finally:
                    self._loop.remove_writer(fd)
                continue
            except OSError as e:
                raise BrokenPipeError(e.errno, "the process no longer reads its stdin") from None
            view = view[n:]

    def close_stdin(self) -> None:
        self._proc.close_stdin()


class AsyncSandbox:
    """A ``Sandbox`` for asyncio (module docstring).  ``await AsyncSandbox.create(config, **fields)``
    takes what ``Sandbox()`` takes; ``AsyncSandbox(sandbox)`` wraps one that is already started.
    ``sandbox``: the synchronous one underneath (snapshots, fork, ports, info)."""

    def __init__(self, sandbox: Sandbox, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.sandbox = sandbox
        self._loop = loop or asyncio.get_running_loop()
        self._reactor: AsyncReactor | None = None
        self._procs: dict[int, AsyncProcess] = {}

    @classmethod
    async def create(cls, config=None, **fields: Any) -> "AsyncSandbox":
        loop = asyncio.get_running_loop()
        sb = await loop.run_in_executor(None, functools.partial(Sandbox, config, **fields))
        return cls(sb, loop=loop)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return repr(self.sandbox).replace("<Sandbox", "<AsyncSandbox", 1)

    @property
    def closed(self) -> bool:
        return self.sandbox.closed

    async def close(self) -> None:
        self._end("the sandbox was closed")
        await self._loop.run_in_executor(None, self.sandbox.close)

    async def reset(self, to=None) -> None:
        self._end("the sandbox was reset")
        await self._loop.run_in_executor(None, self.sandbox.reset, to)

    def _end(self, why: str) -> None:
        r = self._reactor
        if r is not None:
            r.end_all(why)
            r.close()
            if r.chan.loop_reactor is r:
                r.chan.loop_reactor = None
            self._reactor = None
        self._procs.clear()

    def _reactor_for(self) -> AsyncReactor:
        """The loop's reactor for the sandbox's current channel: one per channel, shared by every
        ``AsyncSandbox`` of the sandbox (two would each take the channel's descriptor from the
        other's ``add_reader``)."""
        chan = self.sandbox.jail.chan
        r = chan.loop_reactor
        if r is None or r.loop is not self._loop:
            if r is not None and r.busy and not r.loop.is_closed():
                raise RuntimeError("this sandbox's processes are served by another event loop; use the "
                                   "sandbox from one loop at a time (or the blocking Sandbox API from threads)")
            r = chan.loop_reactor = AsyncReactor(chan, str(self.sandbox.executor_pid), self._loop)
        self._reactor = r
        return r

    def shell(self, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> AsyncShell:
        """A persistent shell session (``Sandbox.shell``) whose commands this loop drives."""
        return AsyncShell(self.sandbox.shell(cwd=cwd, env=env), self)

    # -- processes -------------------------------------------------------------------------------
    async def spawn(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None,
                    cwd: str | None = None, stdin: bool = True, pty: bool | tuple[int, int] = False,
                    timeout: float | None = None, lossless: bool = False) -> AsyncProcess:  # fmt: skip
        """As ``Sandbox.spawn``; the process is served by this loop."""
        sb = self.sandbox
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if timeout is not None:
            timeout = check_timeout(timeout)
        with sb.lock:  # (held only while the request goes out and the pid comes back: no await here)
            proc = process_mod.spawn(sb, argv, cwd=cwd, env=env, stdin=stdin, pty=pty, timeout=timeout,
                                     cap=sb.config.limits.output_bytes, reactor=self._reactor_for(),
                                     lossless=lossless)  # fmt: skip
        aproc = AsyncProcess(proc, self._loop)
        self._procs[proc.id] = aproc
        proc._wakers.append(lambda: proc.ended_at is not None and self._procs.pop(proc.id, None))
        return aproc

    async def exec(self, cmd: str | Sequence[str], *, timeout: float | None = None, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                   on_stdout: Callable[[bytes], object] | None = None,
                   on_stderr: Callable[[bytes], object] | None = None) -> ExecResult:  # fmt: skip
        """As ``Sandbox.exec``: run to completion (timeout as there), without blocking the loop."""
        timeout = check_timeout(self.sandbox.config.limits.timeout_s if timeout is None else timeout)
        data = stdin.encode("utf-8", "surrogateescape") if isinstance(stdin, str) else stdin
        proc = await self.spawn(cmd, env=env, cwd=cwd, stdin=data is not None, timeout=timeout, lossless=True)
        cap = self.sandbox.config.limits.output_bytes
        outs = await asyncio.gather(
            self._collect(proc.stdout, on_stdout, cap),
            self._collect(proc.stderr, on_stderr, cap),
            self._feed(proc, data),
        )
        result = await proc.wait()
        return ExecResult(result.exit_code, outs[0][0], outs[1][0], result.duration_s,
                          timed_out=result.timed_out, truncated=outs[0][1] or outs[1][1] or result.truncated,
                          signal=result.signal, note=result.note)  # fmt: skip

    @staticmethod
    async def _collect(stream: AsyncStream, cb, cap: int) -> tuple[bytes, bool]:
        buf = bytearray()
        cut = False
        async for chunk in stream:
            if cb is not None:
                cb(chunk)
            room = cap - len(buf)
            if len(chunk) > room:
                cut = True
            buf += chunk[: max(0, room)]
        return bytes(buf), cut

    @staticmethod
    async def _feed(proc: AsyncProcess, data: bytes | None) -> None:
        if data is None:
            return
        try:
            await proc.write(data)
        except BrokenPipeError:
            pass
        proc.close_stdin()

    @property
    def processes(self) -> list[AsyncProcess]:
        """The spawned processes still running (or whose output is still being read)."""
        return list(self._procs.values())

    # -- files (one request each, served inline) -------------------------------------------------
    async def read_file(self, path, **kw: Any) -> bytes:
        return self.sandbox.read_file(path, **kw)

    async def write_file(self, path, data, **kw: Any) -> None:
        self.sandbox.write_file(path, data, **kw)

    async def is_file(self, path) -> bool:
        return self.sandbox.is_file(path)

    async def mkdir(self, path, **kw: Any) -> None:
        self.sandbox.mkdir(path, **kw)

    async def list(self, path=".", **kw: Any):
        return self.sandbox.list(path, **kw)

    async def stat(self, path, **kw: Any):
        return self.sandbox.stat(path, **kw)

    async def remove(self, path, **kw: Any) -> None:  # (a big tree: the executor's time, not ours)
        await self._loop.run_in_executor(None, functools.partial(self.sandbox.remove, path, **kw))

    async def rename(self, src, dst) -> None:
        self.sandbox.rename(src, dst)

    async def upload(self, host_path, path) -> None:
        await self._loop.run_in_executor(None, self.sandbox.upload, host_path, path)

    async def download(self, path, host_path, **kw: Any) -> list[str]:
        return await self._loop.run_in_executor(None, functools.partial(self.sandbox.download, path, host_path, **kw))
