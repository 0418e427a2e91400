"""A sandbox's lifetime: ``limits.ttl_s`` (at most this long after it started) and
``limits.idle_s`` (ended after this long without a call, a command or a process running).

One ``Janitor`` thread per ``Host`` (made at the first sandbox that asks for either) keeps a
heap of deadlines and holds sandboxes only weakly.  A sandbox due is closed as ``close()``
does; when a call holds it (a long ``exec``), the ttl ends its jail under it (the executor,
PID 1 of its namespaces, is killed: the call gets SandboxCrashed) and it is closed once the call
returns.  An idle sandbox is never busy, by definition.  Later calls raise ``SandboxClosed``
saying why.
"""

from __future__ import annotations

import heapq
import itertools
import os
import signal
import threading
import time
import weakref

CHECK_SLACK_S = 0.05  # how late a deadline may be served


class Janitor:
    """Ends sandboxes whose ttl or idle time has passed (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, weakref.ref]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self.pid = os.getpid()

    def watch(self, sb) -> None:
        """Check ``sb`` when its next deadline comes (again and again, until it is closed)."""
        due = sb._lifetime_due()
        if due is None:
            return
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), weakref.ref(sb)))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="sandboxlite-janitor", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                due, _, ref = self._heap[0]
                left = due - time.monotonic()
                if left > 0:
                    self._cond.wait(left + CHECK_SLACK_S)
                    continue
                heapq.heappop(self._heap)
            sb = ref()
            if sb is None or sb.closed:
                continue
            try:
                end(sb)
            except Exception:  # noqa: BLE001 - a janitor must outlive any one sandbox's trouble
                pass
            if not sb.closed:
                self.watch(sb)
            del sb


def end(sb) -> None:
    """Close ``sb`` if its ttl or idle time has passed."""
    why = sb._lifetime_expired()
    if why is None:
        return
    if sb.lock.acquire(blocking=False):
        try:
            if sb._lifetime_expired() is not None:
                sb._end_note = why
                sb.close()
        finally:
            sb.lock.release()
        return
    if why.startswith("its ttl"):  # busy: end the jail under the call, close when it returns
        sb._end_note = why
        pid = sb.executor_pid
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with sb.lock:
            sb.close()
