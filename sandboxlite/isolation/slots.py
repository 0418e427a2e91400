"""One host uid per live sandbox, for root callers: leased from a range.

The kernel counts several budgets per host uid across user namespaces: inotify
instances and watches, pending signals, POSIX message-queue bytes, pipe buffer
pages, processes (RLIMIT_NPROC's count).  Sandboxes that share a host uid share
them: one that uses up its budget breaks the others.  So each live sandbox of a
root caller runs as a uid of its own, leased from a range the way subordinate
ids are (``SANDBOXLITE_UID_RANGE=FIRST:COUNT``; by default the run_as user's
range in /etc/subuid, else 1879048192:65536, above systemd's container range
and below 2^31).  A lease is an exclusive ``flock`` on a file per uid under the
cache directory, so that processes sharing the machine never hand out the same
uid twice (each takes the lowest free one); a process keeps the leases its
closed sandboxes gave back for its next ones (nothing of a closed sandbox runs as that uid any more).  The gid
stays the run_as user's group: the kernel's budgets are per uid.

Images stay owned by the run_as user: each sandbox sees its image through an
idmapped mount (``idmap.py``).  ``SANDBOXLITE_UID_RANGE=off`` keeps every
sandbox on the run_as uid (the budgets are then shared: ``doctor`` says so).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError, SetupError

DEFAULT_RANGE = (1879048192, 65536)
MAX_IDLE = 64  # leases a process keeps for its next sandboxes


def uid_range(env: Mapping[str, str], user: str | None) -> tuple[int, int] | None:
    """``(first, count)`` of the uids sandboxes get, or None (``SANDBOXLITE_UID_RANGE=off``)."""
    raw = env.get("SANDBOXLITE_UID_RANGE", "").strip()
    if raw == "off":
        return None
    if raw:
        first, sep, count = raw.partition(":")
        if not (sep and first.isdigit() and count.isdigit()) or int(count) < 1 or int(first) < 1 \
                or int(first) + int(count) > 1 << 31:  # fmt: skip
            raise ConfigError("SANDBOXLITE_UID_RANGE", f"must be FIRST:COUNT (uids below 2^31) or off, got {raw!r}",
                              hint="for example 1879048192:65536, or unset it for the default")  # fmt: skip
        return int(first), int(count)
    if user:
        found = _subuid_range(user)
        if found is not None:
            return found
    return DEFAULT_RANGE


def _subuid_range(user: str, path: str = "/etc/subuid") -> tuple[int, int] | None:
    try:
        with open(path) as f:
            for line in f:
                name, _, rest = line.strip().partition(":")
                first, _, count = rest.partition(":")
                if name == user and first.isdigit() and count.isdigit() and int(count) > 0:
                    return int(first), int(count)
    except OSError:
        return None
    return None


class Lease:
    """One uid, held until ``release()`` (the pool keeps it for the next sandbox)."""

    __slots__ = ("uid", "_fd", "_pool")

    def __init__(self, uid: int, fd: int, pool: "UidPool") -> None:
        self.uid, self._fd, self._pool = uid, fd, pool

    def release(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool._give_back(self.uid, self._fd)


class UidPool:
    """Leases uids of ``[first, first + count)``, exclusive across processes (flock in ``lock_dir``)."""

    def __init__(self, first: int, count: int, lock_dir: Path) -> None:
        self.first, self.count, self.lock_dir = first, count, lock_dir
        self._idle: list[tuple[int, int]] = []  # (uid, lock fd)
        self._lock = threading.Lock()
        self._made_dir = False
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def lease(self) -> Lease:
        with self._lock:
            if self._idle:
                uid, fd = self._idle.pop()
                return Lease(uid, fd, self)
        try:
            return self._lease_new()
        except OSError as e:
            raise SetupError(f"cannot lease a sandbox uid (lock files in {self.lock_dir}): {e.strerror or e}",
                             hint="point SANDBOXLITE_HOME at a writable directory, or SANDBOXLITE_UID_RANGE=off "
                             "(every sandbox then runs as one uid)") from None  # fmt: skip

    def _lease_new(self) -> Lease:
        if not self._made_dir:
            self.lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._made_dir = True
        # the lowest free uid: the uids (and the /dev made for each) in use stay as few as the most
        # sandboxes ever alive at once on the machine
        for i in range(self.count):
            uid = self.first + i
            fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            return Lease(uid, fd, self)
        raise SetupError(f"all {self.count} sandbox uids from {self.first} are in use",
                         hint="close sandboxes, or give a larger SANDBOXLITE_UID_RANGE=FIRST:COUNT")  # fmt: skip

    def _give_back(self, uid: int, fd: int) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((uid, fd))
                return
        os.close(fd)  # the flock goes with it

    def _after_fork_in_child(self) -> None:
        # the child shares the parent's lock descriptions: it must not hand those uids out again
        self._idle = []
        self._lock = threading.Lock()
