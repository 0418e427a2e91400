"""A pull's progress on a terminal: one line redrawn (bytes, total, rate, blobs), or a line per
blob when the stream is no terminal (a log keeps every line)."""

from __future__ import annotations

import threading
import time
from typing import TextIO

REDRAW = 0.1  # seconds between redraws of the line


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class ProgressBar:
    """A ``pull.Progress`` that draws on ``stream`` (thread-safe: layers arrive from worker threads)."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None, clock=time.monotonic) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.clock = clock
        self.started = clock()
        self.sizes: dict[str, int] = {}
        self.got: dict[str, int] = {}
        self.cached = 0  # bytes already in the store
        self.fetched = 0  # bytes that came over the network
        self.finished: set[str] = set()
        self._drawn = 0.0
        self._lock = threading.Lock()

    def blob(self, digest: str, size: int, what: str, *, have: int) -> None:
        with self._lock:
            if have == size:
                self.finished.add(digest)
            self.sizes[digest] = size
            self.got[digest] = have
            self.cached += have
            if not self.tty and have == size:
                self._line(f"{digest[7:19]}  {what}: already here ({_size(size)})")
            elif not self.tty and have:
                self._line(f"{digest[7:19]}  {what}: resuming at {_size(have)} of {_size(size)}")

    def advance(self, digest: str, nbytes: int) -> None:
        with self._lock:
            self.got[digest] = self.got.get(digest, 0) + nbytes
            self.fetched += nbytes
            now = self.clock()
            if self.tty and now - self._drawn >= REDRAW:
                self._drawn = now
                self._draw(now)

    def done(self, digest: str) -> None:
        with self._lock:
            self.finished.add(digest)
            if self.tty:
                self._draw(self.clock())
            else:
                self._line(f"{digest[7:19]}  done ({_size(self.sizes.get(digest, 0))})")

    def close(self) -> None:
        """The summary line (the bar's line ends here)."""
        with self._lock:
            elapsed = max(self.clock() - self.started, 1e-9)
            text = (f"{len(self.finished)} blob(s): {_size(self.fetched)} fetched in {elapsed:.1f} s "
                    f"({_size(self.fetched / elapsed)}/s), {_size(self.cached)} already here")  # fmt: skip
            if self.tty:
                self.stream.write("\r\x1b[K")
            self._line(text)

    def _draw(self, now: float) -> None:
        total = sum(self.sizes.values())
        have = sum(self.got.values())
        rate = self.fetched / max(now - self.started, 1e-9)
        width = 24
        filled = int(width * have / total) if total else 0
        self.stream.write(f"\r\x1b[K[{'#' * filled}{'.' * (width - filled)}] {_size(have)} / {_size(total)}  "
                          f"{_size(rate)}/s  {len(self.finished)}/{len(self.sizes)} blobs")  # fmt: skip
        self.stream.flush()

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
