"""Per-sandbox memory and pids limits through cgroups, where the caller can use them.

- cgroup v1 (hybrid hosts such as this one): only root can create groups.  We
  use ``/sys/fs/cgroup/{pids,memory}/sandboxlite/<pid>-<n>``.
- cgroup v2: a process may only manage a cgroup subtree delegated to it.  Point
  ``SANDBOXLITE_CGROUP_PARENT`` at such a directory (with ``+pids +memory`` in
  its ``cgroup.subtree_control``, e.g. from ``systemd-run --user -p Delegate=yes``)
  and sandboxes are created below it.

Where neither works, ``detect()`` says why; the sandbox then relies on rlimits
(RLIMIT_NPROC counts per user namespace for a non-root caller; RLIMIT_AS caps
each process's address space) and ``sandboxlite doctor`` reports it.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup")
GROUP = "sandboxlite"


@dataclass(frozen=True)
class Support:
    kind: str | None  # "v1", "v2" or None
    reason: str  # why not, or where


def _v1_memory(md: Path, memory_bytes: int | None) -> None:
    value = str(memory_bytes) if memory_bytes is not None else "-1"
    files = [md / "memory.limit_in_bytes"]
    if (md / "memory.memsw.limit_in_bytes").exists():
        files.append(md / "memory.memsw.limit_in_bytes")  # must stay >= the limit
    try:
        for f in files:
            f.write_text(value)
    except OSError:  # raising: memsw first
        for f in reversed(files):
            f.write_text(value)


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _writable_v1(ctrl: str) -> bool:
    d = V1_ROOT / ctrl
    return (d / "cgroup.procs").exists() and (d / "tasks").exists() and os.access(d, os.W_OK)


def detect(env: Mapping[str, str] | None = None) -> Support:
    """What this caller can use (``Host.detect()`` asks once; not cached here)."""
    parent = (os.environ if env is None else env).get("SANDBOXLITE_CGROUP_PARENT")
    if parent:
        p = Path(parent)
        try:
            ctl = (p / "cgroup.subtree_control").read_text().split()
        except OSError as e:
            return Support(None, f"SANDBOXLITE_CGROUP_PARENT={parent} is not a cgroup v2 directory ({e.strerror})")
        missing = {"pids", "memory"} - set(ctl)
        if missing:
            return Support(None, f"{parent}/cgroup.subtree_control lacks {' '.join(sorted(missing))}")
        if not os.access(p, os.W_OK):
            return Support(None, f"{parent} is not writable by this user")
        return Support("v2", parent)
    if _writable_v1("pids") and _writable_v1("memory"):
        return Support("v1", str(V1_ROOT))
    if (V1_ROOT / "cgroup.controllers").exists():
        if os.geteuid() == 0 and _read_only(V1_ROOT):
            return Support(None, "/sys/fs/cgroup is mounted read-only (as container runtimes do)")
        return Support(None, "cgroup v2 without a delegated subtree (set SANDBOXLITE_CGROUP_PARENT)")
    if (V1_ROOT / "pids").is_dir():
        if os.geteuid() == 0 and _read_only(V1_ROOT / "pids"):
            return Support(None, "the cgroup v1 controllers are mounted read-only (as container runtimes do)")
        return Support(None, "cgroup v1 host: only root can create cgroups")
    return Support(None, "no pids/memory cgroup controllers mounted")


def _cleanup_stale(parents: list[Path]) -> None:
    """Remove empty groups left behind by processes that died (kill -9)."""
    for parent in parents:
        if not parent.is_dir():
            continue
        for d in parent.iterdir():
            owner = d.name.split("-", 1)[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                try:
                    d.rmdir()
                except OSError:
                    pass


FREE_MAX = 64


class Allocator:
    """Creates sandboxes' cgroups under one ``Support``; keeps empty ones for reuse.

    Empty groups are kept (up to 64) and reused by the next sandbox: creating and
    removing a memory cgroup costs more than rewriting two limits.  One allocator
    hangs off each ``Host``; the groups it keeps are removed at exit.
    """

    def __init__(self, support: Support) -> None:
        self.support = support
        self._free: list[Cgroup] = []
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._cleaned = False
        atexit.register(self.close)

    def create(self, memory_bytes: int | None, pids: int | None) -> "Cgroup":
        with self._lock:
            cg = self._free.pop() if self._free else None
        if cg is not None:
            try:
                cg._set_limits(self.support, memory_bytes, pids)
                return cg
            except OSError:
                cg._rmdir()
        return Cgroup._new(self, memory_bytes, pids)

    def _name(self) -> str:
        return f"{os.getpid()}-{id(self) & 0xFFFFFF:x}-{next(self._counter)}"

    def _sweep_once(self, parents: list[Path]) -> None:
        if not self._cleaned:
            self._cleaned = True
            _cleanup_stale(parents)

    def _give_back(self, cg: "Cgroup") -> bool:
        with self._lock:
            if len(self._free) < FREE_MAX:
                self._free.append(cg)
                return True
        return False

    def close(self) -> None:
        """Remove the empty groups kept for reuse."""
        with self._lock:
            free, self._free = self._free, []
        for cg in free:
            cg._rmdir()


class Cgroup:
    """One sandbox's cgroup(s); ``attach`` a pid before it forks, ``destroy`` at close.

    Empty groups are kept (up to 64 per process) and reused by the next sandbox:
    creating and removing a memory cgroup costs more than rewriting two limits.
    """

    def __init__(self, dirs: list[Path], limits: tuple | None = None, owner: Allocator | None = None) -> None:
        self.dirs = dirs
        self.limits = limits
        self.owner = owner

    def _set_limits(self, support: Support, memory_bytes: int | None, pids: int | None) -> None:
        if self.limits == (support.kind, memory_bytes, pids):
            return
        if support.kind == "v1":
            pd, md = self.dirs
            (pd / "pids.max").write_text(str(pids) if pids is not None else "max")
            _v1_memory(md, memory_bytes)
        else:
            (d,) = self.dirs
            (d / "pids.max").write_text(str(pids) if pids is not None else "max")
            (d / "memory.max").write_text(str(memory_bytes) if memory_bytes is not None else "max")
        self.limits = (support.kind, memory_bytes, pids)

    @classmethod
    def _new(cls, owner: Allocator, memory_bytes: int | None, pids: int | None) -> "Cgroup":
        support = owner.support
        name = owner._name()
        dirs: list[Path] = []
        try:
            if support.kind == "v1":
                parents = [V1_ROOT / "pids" / GROUP, V1_ROOT / "memory" / GROUP]
                for p in parents:
                    p.mkdir(exist_ok=True)
                owner._sweep_once(parents)
                pd, md = parents[0] / name, parents[1] / name
                pd.mkdir()
                dirs.append(pd)
                md.mkdir()
                dirs.append(md)
                if pids is not None:
                    (pd / "pids.max").write_text(str(pids))
                _v1_memory(md, memory_bytes)
            elif support.kind == "v2":
                parent = Path(support.reason)
                owner._sweep_once([parent])
                d = parent / name
                d.mkdir()
                dirs.append(d)
                if pids is not None:
                    (d / "pids.max").write_text(str(pids))
                if memory_bytes is not None:
                    (d / "memory.max").write_text(str(memory_bytes))
                    if (d / "memory.swap.max").exists():
                        (d / "memory.swap.max").write_text("0")
            else:
                raise OSError(f"cgroups unavailable: {support.reason}")
        except BaseException:
            cls(dirs)._rmdir()
            raise
        return cls(dirs, (support.kind, memory_bytes, pids), owner)

    def tasks_files(self) -> list[str]:
        """cgroup v1 ``tasks`` files: a thread that writes "0" there joins without the global lock."""
        return [str(d / "tasks") for d in self.dirs]

    def attach(self, pid: int) -> None:
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        if not self.dirs:
            return []
        try:
            return [int(x) for x in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def destroy(self) -> None:
        """Give the group back (for reuse when it is empty), or remove it."""
        if self.dirs and self.owner is not None and not self.pids():
            if self.owner._give_back(Cgroup(self.dirs, self.limits, self.owner)):
                self.dirs = []
                return
        self._rmdir()

    def _rmdir(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                pass  # still busy: cleaned up by the next process's stale sweep
        self.dirs = []
