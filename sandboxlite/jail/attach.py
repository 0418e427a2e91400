"""A spawned ``Process`` joined to the host's own descriptors: what ``sandboxlite exec`` and
``sandboxlite shell`` do for a person at a terminal (or a pipe).

``pipe_through``: the command's stdout and stderr written to ours as they come, our stdin
copied to it until end of file.  ``terminal``: the process has a terminal of the sandbox's
(``spawn(pty=True)``); ours is put in raw mode so that every key (Ctrl-C, Ctrl-Z, arrows)
reaches it, its window follows ours (SIGWINCH), and everything is put back at the end.
Both return the process's ``ExecResult``; a KeyboardInterrupt (Ctrl-C where the command has
no terminal of its own) kills the process tree and propagates.
"""

from __future__ import annotations

import os
import select
import signal
import termios
import threading
import tty
from collections.abc import Callable
from typing import BinaryIO

from ..result import ExecResult
from .process import Process


def _write_all(out: BinaryIO | int, data: bytes) -> bool:
    """``data`` to a descriptor or a binary file; False once the other side is gone (`| head`)."""
    try:
        if isinstance(out, int):
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(out, view) :]
                except BlockingIOError:
                    select.select([], [out], [])
        else:
            out.write(data)
            out.flush()
    except BrokenPipeError:
        return False
    return True


def _copy_out(stream, out: BinaryIO | int, proc: Process) -> None:
    for chunk in stream:
        if not _write_all(out, chunk):
            # our reader has gone (`| head`): as in a pipeline, the writers get SIGPIPE
            proc.signal(signal.SIGPIPE)
            for _ in stream:  # keep draining: nothing may stall on its output meanwhile
                pass
            return


def _reader(src: BinaryIO | int, stop: threading.Event) -> Callable[[], bytes | None]:
    """A function giving the next chunk of ``src`` (b"": its end; None: stop was asked)."""
    fd = src if isinstance(src, int) else _fileno(src)
    if fd is None:  # a file object of Python's own (tests' CliRunner): plain blocking reads
        read = getattr(src, "read1", None) or src.read  # type: ignore[union-attr]
        return lambda: None if stop.is_set() else read(1 << 16)

    def next_chunk() -> bytes | None:
        while not stop.is_set():
            if select.select([fd], [], [], 0.2)[0]:
                return os.read(fd, 1 << 16)
        return None

    return next_chunk


def _fileno(f) -> int | None:
    try:
        return f.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return None


def _feed(proc: Process, src: BinaryIO | int, stop: threading.Event, *, close: bool = True) -> None:
    """``src`` to the process's stdin until its end (then its stdin is closed, with ``close``)."""
    next_chunk = _reader(src, stop)
    try:
        while True:
            chunk = next_chunk()
            if chunk is None:
                return
            if not chunk:
                break
            proc.write(chunk)
    except (BrokenPipeError, ValueError, OSError):
        return
    if close:
        try:
            proc.close_stdin()
        except OSError:
            pass


def pipe_through(proc: Process, *, stdin: BinaryIO | int | None, stdout: BinaryIO | int = 1,
                 stderr: BinaryIO | int = 2) -> ExecResult:  # fmt: skip
    """Stream ``proc``'s output to ``stdout``/``stderr`` (descriptors or binary files) and ``stdin``
    (None: nothing) to it, until it has ended; its result (exit code; the output, streamed
    already, is not in it)."""
    stop = threading.Event()
    threads = [threading.Thread(target=_copy_out, args=(proc.stderr, stderr, proc), daemon=True)]
    if stdin is not None:
        threads.append(threading.Thread(target=_feed, args=(proc, stdin, stop), daemon=True))
    for t in threads:
        t.start()
    try:
        _copy_out(proc.stdout, stdout, proc)
        result = proc.wait()
    except BaseException:
        proc.kill()
        raise
    finally:
        stop.set()
    threads[0].join()
    return result


def terminal(proc: Process, *, stdin_fd: int = 0, stdout_fd: int = 1) -> ExecResult:
    """Join ``proc`` (spawned with ``pty=``) to our terminal (or pipes) until it has ended."""
    is_tty = os.isatty(stdin_fd)
    saved = termios.tcgetattr(stdin_fd) if is_tty else None
    old_winch = None
    if is_tty:
        def on_winch(_sig, _frame) -> None:
            size = os.get_terminal_size(stdout_fd if os.isatty(stdout_fd) else stdin_fd)
            proc.resize(size.lines, size.columns)

        old_winch = signal.signal(signal.SIGWINCH, on_winch)
        tty.setraw(stdin_fd)
    stop = threading.Event()
    # keys to the terminal; our end of file is not the terminal's (it ends when the shell does)
    feeder = threading.Thread(target=_feed, args=(proc, stdin_fd, stop), kwargs={"close": False}, daemon=True)
    feeder.start()
    try:
        _copy_out(proc.stdout, stdout_fd, proc)
        return proc.wait()
    except BaseException:
        proc.kill()
        raise
    finally:
        stop.set()
        if saved is not None:
            termios.tcsetattr(stdin_fd, termios.TCSAFLUSH, saved)
        if old_winch is not None:
            signal.signal(signal.SIGWINCH, old_winch)

