"""``SandboxPool``: sandboxes kept warm, for many short episodes (RL rollouts, evals).

``acquire()`` hands out a ready sandbox; ``release()`` resets it in place (about a millisecond)
and takes it back.  A sandbox that crashed or cannot be reset is closed and replaced; if the
replacement cannot start, its slot is kept empty and the next ``acquire()`` tries again (raising
why it failed), so the pool never shrinks or hangs.  Thread-safe; ``acquire_async`` /
``release_async`` for asyncio code.

    pool = SandboxPool(size=8, rootfs="science")
    with pool.sandbox() as sb:          # acquire ... release, also on exceptions
        sb.exec("python3 -c 'print(1)'")
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import images
from ..config import SandboxConfig, image_as_rootfs
from ..errors import ConfigError, SandboxClosed, SandboxError
from ..state.snapshot import Snapshot
from .sandbox import Sandbox

log = logging.getLogger(__name__)


@dataclass
class PoolStats:
    acquires: int = 0
    releases: int = 0
    resets: int = 0
    replacements: int = 0
    acquire_wait_s: float = 0.0  # total time callers waited in acquire()

    @property
    def mean_acquire_wait_s(self) -> float:
        return self.acquire_wait_s / self.acquires if self.acquires else 0.0


class SandboxPool:
    def __init__(self, config: SandboxConfig | None = None, *, size: int = 4, snapshot: Snapshot | None = None,
                 **overrides: Any) -> None:  # fmt: skip
        """``size`` sandboxes of ``config`` (or the ``SandboxConfig`` fields in ``overrides``), each
        started from ``snapshot`` when given: every release resets it to the snapshot."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ConfigError("size", f"must be a positive integer, got {size!r}")
        overrides = images.expose_from_image(image_as_rootfs(overrides))  # image=REF: rootfs=REF (a container image in the store)
        self.config = config.replace(**overrides) if config is not None and overrides else (
            config or SandboxConfig(**overrides))  # fmt: skip
        self.size = size
        self.snapshot = snapshot
        self.stats = PoolStats()
        self._cond = threading.Condition()
        self._idle: deque[Sandbox] = deque()
        self._busy: set[int] = set()
        self._all: list[Sandbox] = []
        self._empty = 0  # slots whose sandbox crashed and could not be replaced: acquire() refills them
        self._closed = False
        self._waiters: deque = deque()  # (loop, future) of acquire_async callers
        try:
            for _ in range(size):
                sb = Sandbox(self.config, snapshot=self.snapshot)
                self._all.append(sb)
                self._idle.append(sb)
        except BaseException:
            self.close()
            raise

    # -- sync API ----------------------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> Sandbox:
        """A ready sandbox, waiting up to ``timeout`` seconds for one (TimeoutError after)."""
        start = time.monotonic()
        with self._cond:
            while not self._idle and not self._empty:
                if self._closed:
                    raise SandboxClosed("the pool is closed")
                left = None if timeout is None else timeout - (time.monotonic() - start)
                if left is not None and left <= 0:
                    raise TimeoutError(f"no sandbox became free within {timeout}s (pool size {self.size})")
                self._cond.wait(left)
            if self._closed:
                raise SandboxClosed("the pool is closed")
            if self._idle:
                sb: Sandbox | None = self._idle.popleft()
                self._busy.add(id(sb))
            else:
                sb = None
                self._empty -= 1
        if sb is None or not sb.alive():  # an empty slot, or crashed while idle
            sb = self._replace(sb)
        with self._cond:
            self.stats.acquires += 1
            self.stats.acquire_wait_s += time.monotonic() - start
        return sb

    def release(self, sb: Sandbox) -> None:
        """Give a sandbox back: it is reset in place (or replaced if that fails).

        If the replacement cannot start either, the slot is kept empty (the next acquire() tries
        again) and the error is raised."""
        with self._cond:
            if id(sb) not in self._busy:
                raise ValueError("this sandbox was not acquired from this pool (or was released already)")
            self.stats.releases += 1
        try:
            if self._closed:
                raise SandboxClosed()
            sb.reset(to=self.snapshot if self.snapshot is not None else "image")  # what the pool's sandboxes start as
            self.stats.resets += 1
        except Exception:  # closed, crashed, or could not be restarted (e.g. a mount source is gone)
            if not self._closed:
                sb = self._replace(sb)  # if that fails too, the slot is kept empty and this raises
        with self._cond:
            self._busy.discard(id(sb))
            if self._closed:
                sb.close()
            else:
                self._idle.append(sb)
                self._cond.notify()
                self._wake_async()

    @property
    def in_use(self) -> int:
        """How many sandboxes are acquired and not yet released."""
        with self._cond:
            return len(self._busy)

    @property
    def idle(self) -> int:
        """How many sandboxes are ready to be acquired."""
        with self._cond:
            return len(self._idle)

    @property
    def closed(self) -> bool:
        return self._closed

    @contextmanager
    def sandbox(self, timeout: float | None = None) -> Iterator[Sandbox]:
        sb = self.acquire(timeout)
        try:
            yield sb
        except BaseException:
            try:
                self.release(sb)
            except Exception:  # never mask the caller's exception; the slot is kept anyway
                log.warning("releasing a sandbox failed (while an exception propagated)", exc_info=True)
            raise
        self.release(sb)

    def close(self) -> None:
        """Close every sandbox (busy ones when they are released)."""
        with self._cond:
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()
            self._cond.notify_all()
            while self._waiters:
                self._wake_async()
        for sb in idle:
            sb.close()

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- asyncio -----------------------------------------------------------------------------
    async def acquire_async(self, timeout: float | None = None) -> Sandbox:
        """Like acquire(), without holding a thread while it waits."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:
                return self.acquire(timeout=0)
            except TimeoutError:
                pass
            fut = loop.create_future()
            with self._cond:
                if self._idle or self._empty or self._closed:  # freed meanwhile: try again at once
                    continue
                self._waiters.append((loop, fut))
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise TimeoutError(f"no sandbox became free within {timeout}s (pool size {self.size})")
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no sandbox became free within {timeout}s (pool size {self.size})") from None

    async def release_async(self, sb: Sandbox) -> None:
        await asyncio.to_thread(self.release, sb)

    # -- helpers -------------------------------------------------------------------------------
    def _wake_async(self) -> None:
        """Wake one asyncio waiter (called with the lock held)."""
        while self._waiters:
            loop, fut = self._waiters.popleft()
            if not fut.done():
                loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))
                return

    def _replace(self, broken: Sandbox | None) -> Sandbox:
        """A new sandbox, marked busy, for the slot the caller holds: ``broken``'s (acquired), or
        an empty one (None).  If it cannot start, the slot goes back as empty and this raises."""
        if broken is not None:
            try:
                broken.close()
            except SandboxError:
                pass
        try:
            fresh = Sandbox(self.config, snapshot=self.snapshot)
        except BaseException as e:
            with self._cond:
                self._all = [s for s in self._all if s is not broken]
                self._busy.discard(id(broken))
                self._empty += 1
                self._cond.notify()
                self._wake_async()
            if not isinstance(e, Exception):
                raise
            why, hint = (e.message, e.hint) if isinstance(e, SandboxError) else (f"{type(e).__name__}: {e}", None)
            raise SandboxError(
                f"the pool could not replace a crashed sandbox: {why}",
                hint=(f"{hint}; " if hint else "") + "the slot is kept and the next acquire() tries again",
            ) from e
        with self._cond:
            self._all = [s for s in self._all if s is not broken] + [fresh]
            self._busy.discard(id(broken))
            self._busy.add(id(fresh))
            self.stats.replacements += 1
        return fresh
