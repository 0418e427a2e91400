"""Fresh network namespaces made ahead of time, for root callers' sandboxes.

Creating a network namespace is the most expensive part of starting a jail:
the kernel registers a loopback device, sysctl tables and per-protocol state
(measured here: bwrap with ``--unshare-net`` takes ~0.5 ms longer than bwrap
joining a namespace made beforehand).  A root caller's sandboxes start through
a launcher that runs as root until it drops to the sandbox's uid, so it can
join a namespace made ahead of time (``setns``) and bwrap then leaves the
network alone.  This module keeps a few such namespaces ready, refilled by a
background thread.

Each namespace is private to one sandbox and used once: it is handed out as a
descriptor, passed to exactly one launcher and closed; it contains only ``lo``
(up).  It is made by the executor's ``netns`` mode in a process of its own,
inside a user namespace of its own, and is owned by that user namespace: not by
the host's initial one (a network namespace owned by the initial user namespace
receives the host's device events on a NETLINK_KOBJECT_UEVENT socket; bwrap's
own namespaces do not, and neither do these), and not by the sandbox's (even the
sandbox's uid 0 holds no capability over it: it cannot add interfaces or change
sysctls).  Non-root callers cannot join such a namespace and keep
``--unshare-net``.

``SANDBOXLITE_NETNS_POOL=N`` sets how many are kept ready (default 4; 0 turns
the pool off; anything else is a ConfigError when a sandbox starts).  When the pool is empty a sandbox does not wait: bwrap makes
its namespace as before.
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from collections.abc import Callable, Mapping

from ..errors import ConfigError

DEFAULT_SIZE = 4


def pool_size(env: Mapping[str, str] | None = None) -> int:
    """``SANDBOXLITE_NETNS_POOL``: how many to keep ready (default 4, 0 turns the pool off, at most 256)."""
    raw = (os.environ if env is None else env).get("SANDBOXLITE_NETNS_POOL", "").strip()
    if not raw:
        return DEFAULT_SIZE
    if not raw.isdigit() or int(raw) > 256:
        raise ConfigError("SANDBOXLITE_NETNS_POOL", f"must be a whole number from 0 to 256, got {raw!r}",
                          hint="unset it for the default (4), or 0 to make every namespace in bwrap")
    return int(raw)


class NetnsPool:
    """Up to ``size`` fresh network namespaces, as descriptors; a daemon thread refills.

    One pool hangs off each root caller's ``Host``.  ``take`` only hands out: the caller wakes
    the refill thread with ``refill()`` once it has spawned its jail (the thread then makes the
    next namespace while bwrap boots, instead of competing with the start for the GIL).
    ``make`` makes one namespace (tests give one that fails)."""

    def __init__(self, size: int, make: Callable[[], int]) -> None:
        self.size = size
        self._make = make
        self._ready: list[int] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._broken: str | None = None  # why namespaces cannot be made here
        self.made = 0
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (p := ref()) is not None and p._after_fork_in_child())

    def take(self) -> int | None:
        """A descriptor of a fresh namespace (the caller closes it), or None when none is ready.
        Call ``refill()`` afterwards."""
        with self._cond:
            if self._broken is not None or self.size == 0:
                return None
            return self._ready.pop() if self._ready else None

    def refill(self) -> None:
        """Make namespaces in the background until ``size`` are ready (starts the thread once)."""
        with self._cond:
            if self._broken is None and self.size and len(self._ready) < self.size:
                self._start_refill()

    def ready(self) -> int:
        with self._cond:
            return len(self._ready)

    @property
    def broken(self) -> str | None:
        return self._broken

    def wait_ready(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` namespaces are ready (for benchmarks and tests)."""
        with self._cond:
            if self._broken is None and self.size:
                self._start_refill()
            return self._cond.wait_for(lambda: len(self._ready) >= n or self._broken is not None, timeout)

    def _start_refill(self) -> None:
        """Start the refill thread if needed and wake it (the caller holds the lock)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._refill, name="sandboxlite-netns", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _refill(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: len(self._ready) < self.size)
            try:
                fd = self._make()
            except OSError as e:
                self._stop(str(e))
                return
            with self._cond:
                self._ready.append(fd)
                self.made += 1
                self._cond.notify_all()

    def _stop(self, why: str) -> None:
        with self._cond:
            self._broken = why
            self._cond.notify_all()

    def _after_fork_in_child(self) -> None:
        # the refill thread did not survive the fork; the descriptors are this
        # process's copies (close-on-exec), each still meant for one sandbox only
        for fd in self._ready:
            try:
                os.close(fd)
            except OSError:
                pass
        self._ready = []
        self._cond = threading.Condition()
        self._thread = None


def maker(executor: str) -> Callable[[], int]:
    """``make`` for a NetnsPool: asks one long-lived ``executor netns`` process for each namespace."""
    return NetnsMaker(executor)


class NetnsMaker:
    """Fresh network namespaces with ``lo`` up, each owned by a user namespace of its own, made by
    the executor's ``netns`` mode: one process serving this Host (it forks one child per namespace,
    ~0.1 ms less than a process of its own each), started when first asked, again if it died."""

    def __init__(self, executor: str) -> None:
        self.executor = executor
        self._sock: socket.socket | None = None
        self._pid: int | None = None
        self._err_r: int | None = None
        self._lock = threading.Lock()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (m := ref()) is not None and m._forget())

    def __call__(self) -> int:
        with self._lock:
            for attempt in (1, 2):
                if self._sock is None:
                    self._start()
                assert self._sock is not None
                try:
                    self._sock.sendall(b"n")
                    msg, fds, _flags, _addr = socket.recv_fds(self._sock, 1, 1)
                except OSError:
                    msg, fds = b"", []
                if len(fds) == 1 and msg == b"N":
                    os.set_inheritable(fds[0], False)
                    return fds[0]
                for fd in fds:
                    os.close(fd)
                why = self._why()
                if msg == b"E" or attempt == 2:
                    raise OSError(f"could not make a network namespace: {why or 'the maker failed'}")
                self._stop()  # it died: start it again, once

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            self._pid = os.posix_spawn(self.executor, ["sandboxlite-executor", "netns"], {}, file_actions=[
                (os.POSIX_SPAWN_DUP2, theirs.fileno(), 0),
                (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ])  # fmt: skip
        except OSError:
            ours.close()
            os.close(err_r)
            raise
        finally:
            theirs.close()
            os.close(err_w)
        os.set_blocking(err_r, False)
        self._sock, self._err_r = ours, err_r

    def _why(self) -> str:
        try:
            return os.read(self._err_r, 4096).decode(errors="replace").strip() if self._err_r is not None else ""
        except BlockingIOError:
            return ""

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()  # it reads end of file and exits
            self._sock = None
        if self._err_r is not None:
            os.close(self._err_r)
            self._err_r = None
        if self._pid is not None:
            os.waitpid(self._pid, 0)
            self._pid = None

    def _forget(self) -> None:
        # in a forked child: the server is the parent's (its socket stays the parent's too)
        self._sock = self._pid = self._err_r = None
        self._lock = threading.Lock()
