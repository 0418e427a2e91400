"""Shared pieces of the benchmark: metrics, statistics, host spawning, the interleaved-round engine,
the leak check and the description of the machine."""

from __future__ import annotations

import gc
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TRUE = "/bin/true"
TRUE_CMD = [TRUE]
PYTHON_CMD = ["/usr/bin/python3", "-c", "pass"]
NUMPY_CMD = ["/usr/bin/python3", "-c", "import numpy"]
SLEEP_CMD = ["/bin/sleep", "infinity"]
# The host spawns get the same small environment that commands get inside the sandbox
# (sandboxlite.config.base_env), so python3 starts the same way inside and out.
HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
# Python ignores SIGPIPE and SIGXFSZ and ignored dispositions survive exec: every spawn here resets
# them, as sandboxlite does when it spawns bwrap.
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

SANDBOXLITE = "sandboxlite"

# --- metrics ---------------------------------------------------------------------------------------
FILE_SIZES = {"4KiB": 4 << 10, "1MiB": 1 << 20, "64MiB": 64 << 20}
COLD_COMMANDS = {"cold_true": TRUE_CMD, "cold_python": PYTHON_CMD, "cold_numpy": NUMPY_CMD}

# latency metrics, in the order they run in a round and appear in the table
METRIC_HELP: dict[str, str] = {
    "cold_true": "create -> first /bin/true finished (close excluded)",
    "cold_python": "create -> first `python3 -c pass` finished (close excluded)",
    "cold_numpy": "create -> first `python3 -c 'import numpy'` finished (close excluded)",
    "exec_true": "exec(['/bin/true']) in a live sandbox (containers: `exec` into a running one)",
    "warm_true": "SandboxPool.acquire() -> first /bin/true finished (release, which resets, excluded); "
                 "containers: a pre-started one, so `exec`",
    "reset": "sb.reset() of a live sandbox that has a background process and files",
    "close": "sb.close() of a sandbox that ran one command",
    **{f"{op}_{label}": f"{'write_file' if op == 'write' else 'read_file'} of {label} (host: the same "
       f"bytes to/from a file on a host tmpfs)" for label in FILE_SIZES for op in ("write", "read")},
}  # fmt: skip
LATENCY_METRICS = list(METRIC_HELP)
OTHER_METRICS = {
    "throughput": "full cycles (create + exec /bin/true + close) per second at each concurrency",
    "density": "N idle sandboxes alive at once: time to start them all, memory of each (USS/PSS of its tree)",
    "agent": "a 20-step scripted agent episode (run_task + ScriptedModel), model time excluded",
    "profile": "where a cold start spends its time (phases, Python CPU, cProfile top functions)",
}
ALL_METRICS = LATENCY_METRICS + list(OTHER_METRICS)
GROUPS = {
    "cold": ["cold_true", "cold_python", "cold_numpy"],
    "files": [m for m in LATENCY_METRICS if m.startswith(("write_", "read_"))],
    "core": ["cold_true", "cold_python", "exec_true", "warm_true", "reset", "close"],  # bench/core.py
    "scale": ["throughput", "density"],  # bench/scale.py
    "latency": LATENCY_METRICS,
    "all": ALL_METRICS,
}
# bytes moved by a file metric (for MB/s)
FILE_BYTES = {f"{op}_{label}": size for label, size in FILE_SIZES.items() for op in ("write", "read")}


def select_metrics(spec: str | None) -> list[str]:
    """``--only`` (metric or group names, comma-separated) -> metric names in run order."""
    if not spec:
        return list(ALL_METRICS)
    wanted: set[str] = set()
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        if item in GROUPS:
            wanted.update(GROUPS[item])
        elif item in ALL_METRICS:
            wanted.add(item)
        elif item in ("agent_episode", "agent_step"):
            wanted.add("agent")
        else:
            raise ValueError(f"unknown metric {item!r} (metrics: {', '.join(ALL_METRICS)}; "
                             f"groups: {', '.join(GROUPS)})")  # fmt: skip
    return [m for m in ALL_METRICS if m in wanted]


class Unavailable(Exception):
    """A runtime that cannot run here; the message is the reason."""


# --- timing and statistics ---------------------------------------------------------------------
def ms(ns: int) -> float:
    return ns / 1e6


def percentile(sorted_vals: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    if not sorted_vals:
        return math.nan
    pos = (len(sorted_vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "median_ms": percentile(s, 50),
        "p90_ms": percentile(s, 90),
        "p99_ms": percentile(s, 99),
        "min_ms": s[0],
        "max_ms": s[-1],
    }


def short_error(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# --- host process spawning -------------------------------------------------------------------
def _drain(fd: int) -> str:
    os.set_blocking(fd, False)
    out = b""
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
            if len(out) > 1 << 16:
                break
    except BlockingIOError:
        pass
    return out.decode("utf-8", "replace").strip()


def spawn(path: str, argv: list[str], env: dict[str, str], *, keep_fds: tuple[int, ...] = (),
          stderr_fd: int | None = None, stdout_fd: int | None = None, setsid: bool = False) -> int:
    """posix_spawn with /dev/null stdio (unless given); returns the pid."""
    actions: list[tuple] = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)]
    for target, fd in ((1, stdout_fd), (2, stderr_fd)):
        if fd is not None:
            actions.append((os.POSIX_SPAWN_DUP2, fd, target))
        else:
            actions.append((os.POSIX_SPAWN_OPEN, target, "/dev/null", os.O_WRONLY, 0))
    # dup2 onto itself clears FD_CLOEXEC (what sandboxlite does for bwrap's fds)
    actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in keep_fds]
    return os.posix_spawn(path, argv, env, file_actions=actions, setsid=setsid, setsigdef=DEFAULT_SIGNALS)


def spawn_wait(path: str, argv: list[str], env: dict[str, str], *, keep_fds: tuple[int, ...] = (),
               stderr_fd: int | None = None, setsid: bool = False) -> int:
    """posix_spawn + waitpid; returns the exit code (negative: killed by that signal)."""
    pid = spawn(path, argv, env, keep_fds=keep_fds, stderr_fd=stderr_fd, setsid=setsid)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class Spawner:
    """Times ``posix_spawn`` + ``waitpid`` of one argv; keeps its stderr for the error message.

    The stderr pipe is made before the clock starts; only a failed run reads it."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, *, what: str | None = None,
                 keep_fds: Callable[[], tuple[int, ...]] | None = None, setsid: bool = False) -> None:
        self.argv, self.env = argv, HOST_ENV if env is None else env
        self.what = what or os.path.basename(argv[0])
        self.keep_fds, self.setsid = keep_fds, setsid

    def __call__(self) -> float:
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        fds = self.keep_fds() if self.keep_fds else ()
        try:
            t0 = time.perf_counter_ns()
            rc = spawn_wait(self.argv[0], self.argv, self.env, keep_fds=fds, stderr_fd=err_w, setsid=self.setsid)
            t1 = time.perf_counter_ns()
        finally:
            os.close(err_w)
            for fd in fds:
                os.close(fd)
        err = _drain(err_r) if rc != 0 else ""
        os.close(err_r)
        if rc != 0:
            tail = err.strip().splitlines()[-1][:200] if err.strip() else "no stderr"
            raise RuntimeError(f"{self.what} exited {rc}: {tail}")
        return ms(t1 - t0)


def run_capture(argv: list[str], timeout: float = 60.0, input: bytes | None = None) -> subprocess.CompletedProcess:
    """An untimed helper command (setup, probes, cleanup)."""
    return subprocess.run(argv, capture_output=True, timeout=timeout, input=input, check=False)


def first_line(b: bytes | str) -> str:
    s = b.decode("utf-8", "replace") if isinstance(b, bytes) else b
    lines = [x for x in s.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


# --- the interleaved rounds ---------------------------------------------------------------------
@dataclass
class Series:
    metric: str
    runtime: str
    fn: Callable[[], float] | None  # one timed sample in ms; raises on failure
    status: str = "ok"
    reps: int = 1  # samples per round
    max_rounds: int | None = None  # this metric runs in the first max_rounds rounds only
    samples: list[float] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # copied into the result row (e.g. bytes)

    @property
    def ok(self) -> bool:
        return self.fn is not None and self.status == "ok"


def not_available(metric: str, runtime: str, reason: str) -> Series:
    reason = reason if reason.startswith("not available") else f"not available: {reason}"
    return Series(metric, runtime, None, status=reason)


def run_rounds(series: list[Series], rounds: int, warmup: int, progress: Callable[[str], None] | None = None) -> None:
    """Every metric's runtimes once per round, the order rotated round by round (A B C, B C A, ...).

    A warm-up round is also the probe: a runtime that fails there is ``not available: ERROR``;
    one that fails later is ``not available: failed in round K: ERROR``."""
    metrics = list(dict.fromkeys(s.metric for s in series))

    def one_round(r: int, record: bool) -> None:
        for metric in metrics:
            group = [s for s in series if s.metric == metric and s.ok]
            if not group:
                continue
            if record and group[0].max_rounds is not None and r >= group[0].max_rounds:
                continue
            k = r % len(group)
            order = group[k:] + group[:k]  # rotate, so nobody always goes first
            for rep in range(max(s.reps for s in order)):
                for s in order:
                    if not s.ok or rep >= s.reps:
                        continue
                    try:
                        v = s.fn()  # type: ignore[misc]
                    except Exception as e:  # noqa: BLE001 - reported, not raised
                        s.status = (f"not available: failed in round {r}: {short_error(e)}" if record
                                    else f"not available: {short_error(e)}")  # fmt: skip
                        continue
                    if record:
                        s.samples.append(v)

    for r in range(warmup):
        one_round(r, record=False)
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()  # collections only between rounds, outside any timed region
    try:
        for r in range(rounds):
            one_round(r, record=True)
            gc.collect()
            if progress and (r + 1) % max(1, rounds // 10) == 0:
                progress(f"  round {r + 1}/{rounds}")
    finally:
        if gc_was:
            gc.enable()


# --- leak check ----------------------------------------------------------------------------
class LeakCheck:
    """After each close: the executor and bwrap are gone, the sandbox's cgroups hold no process."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.checked = 0
        self.problems: list[str] = []
        self.live: list = []  # sandboxes (or lists of them) still open: their groups may be reused

    def _live_pids(self) -> set[int]:
        pids = set()
        for obj in self.live:
            for sb in obj if isinstance(obj, list) else [obj]:
                for pid in (getattr(sb, "executor_pid", None), getattr(sb, "bwrap_pid", None)):
                    if pid:  # a root caller's bwrap joins the cgroup too (the launcher)
                        pids.add(pid)
        return pids

    def identity(self, pid: int | None) -> tuple[int, float] | None:
        if pid is None:
            return None
        try:
            return pid, self.psutil.Process(pid).create_time()
        except self.psutil.Error:
            return pid, -1.0

    def alive(self, ident: tuple[int, float] | None) -> bool:
        if ident is None:
            return False
        pid, created = ident
        try:
            p = self.psutil.Process(pid)
            return p.create_time() == created and p.status() != self.psutil.STATUS_ZOMBIE
        except self.psutil.Error:
            return False

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)

    def verify(self, what: str, executor, bwrap_ident, cgroup_dirs: list[str]) -> None:
        self.checked += 1
        found = []
        if self.alive(executor):
            found.append(f"executor pid {executor[0]} still running")
        if self.alive(bwrap_ident):
            found.append(f"bwrap pid {bwrap_ident[0]} still running")
        # an emptied group may be kept and reused by the next sandbox (reset() reuses its own at
        # once): only a process that belongs to no live sandbox of ours is a leak
        live = self._live_pids()
        for d in cgroup_dirs:
            try:
                procs = [int(p) for p in Path(d, "cgroup.procs").read_text().split()]
            except OSError:
                continue  # removed
            stray = [p for p in procs if p not in live]
            if stray:
                found.append(f"cgroup {d} still holds pids {' '.join(map(str, stray[:5]))}")
        if found:
            self.problem(f"{what}: " + "; ".join(found))


# --- the machine ---------------------------------------------------------------------------
def load_avg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def meminfo_kib(key: str = "MemAvailable") -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_info() -> dict:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        from ..isolation import bwrap

        bw = bwrap.find_bwrap().version_str
    except Exception as e:  # noqa: BLE001 - reported, not raised
        bw = f"not available: {short_error(e)}"
    try:
        from ..isolation import cgroups

        sup = cgroups.detect()
        cg = {"kind": sup.kind, "detail": sup.reason}
    except Exception as e:  # noqa: BLE001 - reported, not raised
        cg = {"kind": None, "detail": f"not available: {short_error(e)}"}
    total = meminfo_kib("MemTotal")
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": model or platform.processor() or None,
        "kernel": platform.release(),
        "os": _os_release(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "bwrap_version": bw,
        "euid": os.geteuid(),
        "mem_total_mib": round(total / 1024) if total else None,
        "cgroups": cg,
        "load_avg_start": load_avg(),
    }


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def git_commit() -> str | None:
    """The commit of the source tree this package runs from (None when it is not a git checkout)."""
    repo = Path(__file__).resolve().parents[2]  # the checkout (or site-packages)
    if not (repo / ".git").exists():
        return None
    try:
        p = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                           check=False)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "sandboxlite", "rootfs"],
                               capture_output=True, text=True, timeout=5, check=False).stdout.strip()  # fmt: skip
        return p.stdout.strip() + ("+dirty-src" if dirty else "") if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None
