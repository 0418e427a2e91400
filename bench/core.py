#!/usr/bin/env python3
"""sandboxlite core benchmark: cold start, exec round trip, close, reset.

Every metric is measured in interleaved rounds: in each round every runtime
of a metric runs once (in an order rotated round by round), so machine noise
hits sandboxlite and its baselines alike.  Baselines:

  raw_bwrap       bwrap with the same namespace/cap/mount/seccomp flags that
                  sandboxlite uses, running the command directly (spawn + wait)
  subprocess_run  subprocess.run(cmd) on the host
  posix_spawn     os.posix_spawn + waitpid on the host (the process floor)
  unshare         unshare -Urmpf --mount-proc CMD (the namespace floor)

A baseline that cannot run is reported as "not available: REASON", never
dropped.  Results go to a table on stdout and a JSON file (schema
"sandboxlite.bench.core/1"); see bench/README.md.

    .venv/bin/python bench/core.py [--rounds N] [--quick] [--json PATH] [--rootfs R]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = "sandboxlite.bench.core/1"
BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent

TRUE = "/bin/true"
PYTHON_CMD = ["/usr/bin/python3", "-c", "pass"]
# The host spawns get the same small environment that commands get inside the
# sandbox (sandboxlite.config.base_env), so python3 starts the same way.
HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

# Python ignores SIGPIPE and SIGXFSZ and ignored dispositions survive exec: every spawn here resets
# them, as sandboxlite does when it spawns bwrap.
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

SANDBOXLITE = "sandboxlite"
RAW_BWRAP = "raw_bwrap"
SUBPROCESS = "subprocess_run"
POSIX_SPAWN = "posix_spawn"
UNSHARE = "unshare"

# metric -> runtimes, sandboxlite first (the others are its baselines)
METRICS: dict[str, list[str]] = {
    "cold_true": [SANDBOXLITE, RAW_BWRAP, SUBPROCESS, POSIX_SPAWN, UNSHARE],
    "exec_true": [SANDBOXLITE, POSIX_SPAWN],
    "close": [SANDBOXLITE],
    "reset": [SANDBOXLITE],
    "warm_true": [SANDBOXLITE, POSIX_SPAWN],
    "cold_python": [SANDBOXLITE, RAW_BWRAP, POSIX_SPAWN],
}
METRIC_HELP = {
    "warm_true": "SandboxPool.acquire() -> first /bin/true finished (release, which resets, excluded)",
    "cold_true": "create -> first /bin/true finished (close excluded)",
    "exec_true": "exec(['/bin/true']) in a live sandbox",
    "close": "sb.close() of a sandbox that ran one command",
    "reset": "sb.reset() of a live sandbox",
    "cold_python": "create -> first `python3 -c pass` finished (close excluded)",
}
# Targets from the project issue (informational: they do not change the exit code).
TARGETS = [
    ("cold_true", "median_ms", 5.0, "cold create -> first true p50 <= 5 ms"),
    ("cold_true", "overhead_ms", 1.0, "cold overhead over raw bwrap (p50) <= 1 ms"),
    ("exec_true", "median_ms", 1.0, "exec round trip p50 <= 1 ms"),
    ("close", "median_ms", 2.0, "close p50 <= 2 ms"),
    ("reset", "median_ms", 2.0, "reset p50 <= 2 ms (issue #3)"),
    ("warm_true", "median_ms", 1.0, "warm acquire -> exec p50 <= 1 ms (issue #6)"),
]


class Unavailable(Exception):
    """A runtime that cannot run here; the message is the reason."""


# --- timing helpers ------------------------------------------------------------------------
def _ms(ns: int) -> float:
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


def _short(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# --- host process spawning -------------------------------------------------------------------
def spawn_wait(path: str, argv: list[str], env: dict[str, str], *, keep_fds: tuple[int, ...] = (),
               stderr_fd: int | None = None, setsid: bool = False) -> int:
    """posix_spawn + waitpid; returns the exit code (negative: killed by that signal)."""
    actions: list[tuple] = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
    ]
    if stderr_fd is not None:
        actions.append((os.POSIX_SPAWN_DUP2, stderr_fd, 2))
    else:
        actions.append((os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0))
    # dup2 onto itself clears FD_CLOEXEC (what sandboxlite does for bwrap's fds)
    actions += [(os.POSIX_SPAWN_DUP2, fd, fd) for fd in keep_fds]
    pid = os.posix_spawn(path, argv, env, file_actions=actions, setsid=setsid, setsigdef=DEFAULT_SIGNALS)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _drain(fd: int) -> str:
    os.set_blocking(fd, False)
    out = b""
    try:
        while chunk := os.read(fd, 65536):
            out += chunk
    except BlockingIOError:
        pass
    return out.decode("utf-8", "replace").strip()


# --- raw bwrap baseline --------------------------------------------------------------------------
@dataclass
class RawBwrap:
    """bwrap with sandboxlite's own flags, running a command instead of the executor."""

    path: str
    prefix: list[str]  # argv up to (not including) the command, with SECCOMP_FD as placeholder
    seccomp_index: int  # where the seccomp fd number goes
    source: str  # how the prefix was obtained
    note: str = ""

    def argv(self, cmd: list[str], sec_fd: int) -> list[str]:
        a = list(self.prefix)
        a[self.seccomp_index] = str(sec_fd)
        return a + cmd

    def run(self, cmd: list[str]) -> tuple[int, str]:
        """Spawn + wait, timed by the caller; returns (exit code, stderr if it failed)."""
        from sandboxlite import seccomp

        sec_fd = seccomp.filter_fd()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        try:
            rc = spawn_wait(self.path, self.argv(cmd, sec_fd), {}, keep_fds=(sec_fd,), stderr_fd=err_w, setsid=True)
        finally:
            os.close(sec_fd)
            os.close(err_w)
        err = _drain(err_r) if rc != 0 else ""
        os.close(err_r)
        return rc, err


def reference_bwrap_prefix(config, plan, info) -> list[str]:
    """What a user would hand to bwrap for the isolation sandboxlite gives (the same namespaces,
    no capabilities, the same seccomp filter, the same read-only root and the same size-capped
    tmpfs), with SECCOMP_FD as a placeholder.  sandboxlite itself lets its executor build the
    writable mounts (so that reset can rebuild them), so its argv differs from this one."""
    from sandboxlite import bwrap

    lim = config.limits
    a = [info.path, *bwrap.NAMESPACE_FLAGS, "--unshare-net"]
    if info.disable_userns:
        a.append("--disable-userns")
    a += ["--uid", "0", "--gid", "0", "--hostname", config.hostname, "--new-session", "--as-pid-1",
          "--cap-drop", "ALL", "--clearenv", "--seccomp", "SECCOMP_FD", "--chdir", "/"]  # fmt: skip
    for src, dst in plan.binds:
        a += ["--ro-bind", src, dst]
    for target, path in plan.symlinks:
        a += ["--symlink", target, path]
    a += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    for path, mb in (("/dev/shm", lim.tmp_mb), ("/tmp", lim.tmp_mb), ("/root", lim.tmp_mb), ("/testbed", lim.testbed_mb)):
        a += ["--size", str(mb << 20), "--tmpfs", path]
    a += ["--remount-ro", "/"]
    return a


def make_raw_bwrap(rootfs_spec: str, live_argv: list[str] | None) -> RawBwrap:
    """The raw-bwrap baseline: bwrap alone, with flags equivalent to sandboxlite's isolation."""
    from sandboxlite import bwrap, rootfs
    from sandboxlite.config import SandboxConfig

    info = bwrap.find_bwrap()
    config = SandboxConfig(rootfs=rootfs_spec)
    plan = rootfs.resolve(config.rootfs)
    try:
        prefix = reference_bwrap_prefix(config, plan, info)
    except Exception as e:
        raise Unavailable(f"cannot build a bwrap argv: {_short(e)}") from None
    return RawBwrap(info.path, prefix, prefix.index("SECCOMP_FD"), "reference_bwrap_prefix")


# --- the runtimes, one callable per (metric, runtime) ----------------------------------------------
@dataclass
class Series:
    metric: str
    runtime: str
    fn: Callable[[], float] | None  # one timed sample in ms; raises on failure
    samples: list[float] = field(default_factory=list)
    status: str = "ok"

    @property
    def ok(self) -> bool:
        return self.fn is not None and self.status == "ok"


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
                if sb.executor_pid:
                    pids.add(sb.executor_pid)
                if sb.bwrap_pid:  # a root caller's bwrap joins the cgroup too (the launcher)
                    pids.add(sb.bwrap_pid)
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
        if found and len(self.problems) < 20:
            self.problems.append(f"{what}: " + "; ".join(found))


def build_series(args, leak: LeakCheck, raw: RawBwrap | None, raw_reason: str,
                 unshare_reason: str | None, python_reason: str | None) -> tuple[list[Series], list]:
    from sandboxlite import Sandbox

    clock = time.perf_counter_ns
    rootfs_spec, cg_mode = args.rootfs, args.cgroups
    keep: list = []  # live sandboxes to close at the end
    pending_close: list = []  # sandboxes from cold_true, closed (and timed) by the close series

    def check(res, what: str) -> None:
        if res.exit_code != 0:
            raise RuntimeError(f"{what} exited {res.exit_code}: {res.stderr.decode(errors='replace').strip()[:200]}")

    # cold: create -> first command finished
    def sl_cold(cmd: list[str], hand_over: bool) -> Callable[[], float]:
        def run() -> float:
            t0 = clock()
            sb = Sandbox(rootfs=rootfs_spec, cgroups=cg_mode)
            res = sb.exec(cmd)
            t1 = clock()
            if hand_over:
                pending_close.append(sb)
            else:
                sb.close()
            check(res, " ".join(cmd))
            return _ms(t1 - t0)
        return run

    def raw_cold(cmd: list[str]) -> Callable[[], float]:
        def run() -> float:
            t0 = clock()
            rc, err = raw.run(cmd)  # type: ignore[union-attr]
            t1 = clock()
            if rc != 0:
                raise RuntimeError(f"bwrap exited {rc}: {err[:200]}")
            return _ms(t1 - t0)
        return run

    def spawn_cold(cmd: list[str]) -> Callable[[], float]:
        def run() -> float:
            t0 = clock()
            rc = spawn_wait(cmd[0], cmd, HOST_ENV)
            t1 = clock()
            if rc != 0:
                raise RuntimeError(f"{cmd[0]} exited {rc}")
            return _ms(t1 - t0)
        return run

    def subprocess_cold() -> float:
        t0 = clock()
        rc = subprocess.run([TRUE]).returncode
        t1 = clock()
        if rc != 0:
            raise RuntimeError(f"{TRUE} exited {rc}")
        return _ms(t1 - t0)

    unshare_path = shutil.which("unshare")

    def unshare_cold() -> float:
        argv = [unshare_path, "-Urmpf", "--mount-proc", TRUE]
        t0 = clock()
        rc = spawn_wait(unshare_path, argv, HOST_ENV)  # type: ignore[arg-type]
        t1 = clock()
        if rc != 0:
            raise RuntimeError(f"unshare exited {rc}")
        return _ms(t1 - t0)

    # exec round trip in a live sandbox
    exec_sb = Sandbox(rootfs=rootfs_spec, cgroups=cg_mode)
    keep.append(exec_sb)

    def sl_exec() -> float:
        t0 = clock()
        res = exec_sb.exec([TRUE])
        t1 = clock()
        check(res, TRUE)
        return _ms(t1 - t0)

    # close: of the sandbox the cold_true sample of this round created (one command run)
    def sl_close() -> float:
        sb = pending_close.pop() if pending_close else _fresh(Sandbox, rootfs_spec, cg_mode)
        ex = leak.identity(sb.executor_pid)
        bw = leak.identity(sb.bwrap_pid)
        cg = list(sb.info.get("cgroup") or [])
        t0 = clock()
        sb.close()
        t1 = clock()
        leak.verify("close", ex, bw, cg)
        return _ms(t1 - t0)

    # reset: of a dedicated live sandbox
    reset_sb = Sandbox(rootfs=rootfs_spec, cgroups=cg_mode)
    keep.append(reset_sb)
    leak.live += [exec_sb, reset_sb, pending_close]

    def sl_reset() -> float:
        # give reset some work (untimed): a background process and files in /tmp and /testbed
        check(reset_sb.exec(["/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo x > /tmp/x; echo y > /testbed/y"]),
              "setting up before reset")  # fmt: skip
        try:
            old = [leak.identity(p.pid) for p in leak.psutil.Process(reset_sb.executor_pid).children(recursive=True)]
        except leak.psutil.Error:
            old = []
        t0 = clock()
        reset_sb.reset()
        t1 = clock()
        leak.checked += 1
        stray = [i for i in old if leak.alive(i)]
        if stray and len(leak.problems) < 20:
            leak.problems.append(f"reset: processes of the old state still running: {[i[0] for i in stray]}")
        after = reset_sb.exec(["/bin/sh", "-c", "find /tmp /testbed -mindepth 1"])
        if after.stdout and len(leak.problems) < 20:
            leak.problems.append(f"reset: files survived: {after.stdout!r}")
        return _ms(t1 - t0)

    # warm: a pool of ready sandboxes (release resets in place, outside the timed region)
    from sandboxlite import SandboxPool

    pool = SandboxPool(size=2, rootfs=rootfs_spec, cgroups=cg_mode)
    keep.append(pool)

    def sl_warm() -> float:
        t0 = clock()
        sb = pool.acquire()
        check(sb.exec([TRUE]), f"{TRUE} in a pooled sandbox")
        t1 = clock()
        pool.release(sb)
        return _ms(t1 - t0)

    def na(reason: str) -> tuple[None, str]:
        return None, f"not available: {reason}"

    table = {
        ("cold_true", SANDBOXLITE): sl_cold([TRUE], hand_over=True),
        ("cold_true", RAW_BWRAP): raw_cold([TRUE]) if raw else na(raw_reason),
        ("cold_true", SUBPROCESS): subprocess_cold,
        ("cold_true", POSIX_SPAWN): spawn_cold([TRUE]),
        ("cold_true", UNSHARE): unshare_cold if unshare_reason is None else na(unshare_reason),
        ("exec_true", SANDBOXLITE): sl_exec,
        ("exec_true", POSIX_SPAWN): spawn_cold([TRUE]),
        ("close", SANDBOXLITE): sl_close,
        ("reset", SANDBOXLITE): sl_reset,
        ("warm_true", SANDBOXLITE): sl_warm,
        ("warm_true", POSIX_SPAWN): spawn_cold([TRUE]),
        ("cold_python", SANDBOXLITE): sl_cold(PYTHON_CMD, hand_over=False) if python_reason is None
        else na(python_reason),
        ("cold_python", RAW_BWRAP): (raw_cold(PYTHON_CMD) if python_reason is None else na(python_reason))
        if raw else na(raw_reason),
        ("cold_python", POSIX_SPAWN): spawn_cold(PYTHON_CMD) if python_reason is None else na(python_reason),
    }
    series = []
    for metric, runtimes in METRICS.items():
        for rt in runtimes:
            v = table[(metric, rt)]
            if isinstance(v, tuple):
                series.append(Series(metric, rt, None, status=v[1]))
            else:
                series.append(Series(metric, rt, v))
    return series, keep + [pending_close]


def _fresh(Sandbox, rootfs_spec, cg_mode):
    sb = Sandbox(rootfs=rootfs_spec, cgroups=cg_mode)
    sb.exec([TRUE])
    return sb


# --- probes: can a baseline run at all? -----------------------------------------------------------
def probe_unshare() -> str | None:
    path = shutil.which("unshare")
    if not path:
        return "`unshare` is not installed (util-linux)"
    try:
        p = subprocess.run([path, "-Urmpf", "--mount-proc", TRUE], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return _short(e)
    if p.returncode != 0:
        return f"unshare -Urmpf --mount-proc exited {p.returncode}: {p.stderr.strip()[:200]}"
    return None


def probe_python(sb) -> str | None:
    if not os.access(PYTHON_CMD[0], os.X_OK):
        return f"{PYTHON_CMD[0]} not found on the host"
    try:
        res = sb.exec(PYTHON_CMD)
    except Exception as e:
        return f"sandbox exec of {PYTHON_CMD[0]} failed: {_short(e)}"
    if res.exit_code != 0:
        return f"{PYTHON_CMD[0]} inside the sandbox exited {res.exit_code}: {res.stderr.decode(errors='replace')[:200]}"
    return None


def probe_raw(raw: RawBwrap) -> str | None:
    try:
        rc, err = raw.run([TRUE])
    except OSError as e:
        return _short(e)
    return None if rc == 0 else f"bwrap exited {rc}: {err[:200]}"


# --- machine description ----------------------------------------------------------------------
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
        from sandboxlite import bwrap

        bw = bwrap.find_bwrap().version_str
    except Exception as e:
        bw = f"not available: {_short(e)}"
    try:
        from sandboxlite import cgroups

        sup = cgroups.detect()
        cg = {"kind": sup.kind, "detail": sup.reason}
    except Exception as e:
        cg = {"kind": None, "detail": f"not available: {_short(e)}"}
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": model or platform.processor() or None,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "bwrap_version": bw,
        "euid": os.geteuid(),
        "cgroups": cg,
    }


def git_commit() -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return p.stdout.strip() + ("+dirty-src" if dirty else "") if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


# --- reporting --------------------------------------------------------------------------------
def summarize(series: list[Series]) -> tuple[list[dict], list[dict]]:
    results, ratios = [], []
    by_metric: dict[str, dict[str, dict]] = {}
    for s in series:
        row = {"metric": s.metric, "runtime": s.runtime, "n": len(s.samples) if s.ok else 0, "status": s.status}
        if s.ok and s.samples:
            row.update(stats(s.samples))
        else:
            row.update({k: None for k in ("median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms")})
            if s.ok:
                row["status"] = "not available: no samples"
        results.append(row)
        by_metric.setdefault(s.metric, {})[s.runtime] = row
    for metric, rows in by_metric.items():
        mine = rows.get(SANDBOXLITE)
        for rt, row in rows.items():
            if rt == SANDBOXLITE:
                continue
            entry = {"metric": metric, "runtime": SANDBOXLITE, "baseline": rt, "ratio": None, "overhead_ms": None,
                     "status": row["status"]}
            if mine and mine["median_ms"] is not None and row["median_ms"]:
                entry["ratio"] = mine["median_ms"] / row["median_ms"]
                entry["overhead_ms"] = mine["median_ms"] - row["median_ms"]
            elif mine and mine["median_ms"] is None:
                entry["status"] = f"sandboxlite {mine['status']}"
            ratios.append(entry)
    return results, ratios


def print_table(results: list[dict], ratios: list[dict]) -> None:
    ratio_of = {(r["metric"], r["baseline"]): r for r in ratios}
    hdr = f"{'metric':<12} {'runtime':<15} {'median':>8} {'p90':>8} {'p99':>8} {'min':>8} {'max':>8} {'N':>5}  " \
          f"{'sl/this':>8}"
    print(hdr)
    print("-" * len(hdr))
    last = None
    for r in results:
        if last is not None and r["metric"] != last:
            _print_overhead(last, ratio_of)
            print()
        last = r["metric"]
        if r["median_ms"] is None:
            print(f"{r['metric']:<12} {r['runtime']:<15} {r['status']}")
            continue
        ratio = ratio_of.get((r["metric"], r["runtime"]))
        rs = f"{ratio['ratio']:.2f}x" if ratio and ratio["ratio"] is not None else ("" if r["runtime"] == SANDBOXLITE
                                                                                      else "-")
        print(f"{r['metric']:<12} {r['runtime']:<15} {r['median_ms']:8.3f} {r['p90_ms']:8.3f} {r['p99_ms']:8.3f} "
              f"{r['min_ms']:8.3f} {r['max_ms']:8.3f} {r['n']:5d}  {rs:>8}")
    if last is not None:
        _print_overhead(last, ratio_of)
    print("\n(all times in ms; sl/this = sandboxlite median / this runtime's median)")


def _print_overhead(metric: str, ratio_of: dict) -> None:
    r = ratio_of.get((metric, RAW_BWRAP))
    if r is None:
        return
    if r["overhead_ms"] is None:
        print(f"{'':<12} overhead over raw bwrap: {r['status']}")
    else:
        print(f"{'':<12} overhead over raw bwrap: {r['overhead_ms']:+.3f} ms (median)")


def check_targets(results: list[dict], ratios: list[dict]) -> list[dict]:
    res = {(r["metric"], r["runtime"]): r for r in results}
    rat = {(r["metric"], r["baseline"]): r for r in ratios}
    out = []
    for metric, key, limit, text in TARGETS:
        if key == "overhead_ms":
            value = (rat.get((metric, RAW_BWRAP)) or {}).get("overhead_ms")
        else:
            value = (res.get((metric, SANDBOXLITE)) or {}).get(key)
        out.append({"target": text, "metric": metric, "stat": key, "limit_ms": limit, "value_ms": value,
                    "met": None if value is None else value <= limit})
    return out


# --- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200, help="interleaved rounds (default 200)")
    ap.add_argument("--quick", action="store_true", help="a few rounds, for CI (well under 15 s)")
    ap.add_argument("--json", metavar="PATH", help="default bench/results/core-<timestamp>.json")
    ap.add_argument("--rootfs", default="host", help='rootfs of the sandboxes (default "host")')
    ap.add_argument("--cgroups", default="auto", choices=["auto", "off", "required"],
                    help="the sandboxes' cgroups setting (default auto, as users get it)")
    ap.add_argument("--exec-per-round", type=int, default=5,
                    help="exec_true samples per runtime per round (default 5; cheap, so more of them)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.exec_per_round, args.warmup = min(args.rounds, 30), min(args.exec_per_round, 3), 1
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    json_path = Path(args.json) if args.json else BENCH_DIR / "results" / f"core-{stamp}.json"
    wall0 = time.monotonic()

    machine = machine_info()
    print(f"sandboxlite core benchmark: {args.rounds} rounds (+{args.warmup} warm-up), rootfs={args.rootfs!r}, "
          f"cgroups={args.cgroups!r}")
    print(f"machine: {machine['cpu_count']} cpus ({machine['cpu_model']}), kernel {machine['kernel']}, "
          f"python {machine['python']}, bwrap {machine['bwrap_version']}, euid {machine['euid']}, "
          f"cgroups {machine['cgroups']['kind'] or 'none'} ({machine['cgroups']['detail']})")

    # The first sandbox of a process also finds bwrap, compiles the seccomp filter, locates (or
    # builds) the executor and the host /etc: reported on its own, not in the rounds.
    from sandboxlite import Sandbox

    first: dict = {}
    try:
        t0 = time.perf_counter_ns()
        sb = Sandbox(rootfs=args.rootfs, cgroups=args.cgroups)
        res = sb.exec([TRUE])
        first["first_cold_true_ms"] = _ms(time.perf_counter_ns() - t0)
        first["sandbox_uses_cgroup"] = bool(sb.info.get("cgroup"))
        first["sandbox_host_uid"] = sb.info.get("host_uid", os.geteuid())
        live_argv = list(sb.argv)
        if res.exit_code != 0:
            raise RuntimeError(f"{TRUE} exited {res.exit_code}: {res.stderr[:200]!r}")
    except Exception as e:
        print(f"sandboxlite not available: {_short(e)}", file=sys.stderr)
        return 2
    machine["cgroups"]["used_by_sandboxes"] = first["sandbox_uses_cgroup"]
    python_reason = probe_python(sb)
    sb.close()

    try:
        raw = make_raw_bwrap(args.rootfs, live_argv)
        raw_reason = probe_raw(raw) or ""
        if raw_reason:
            raw = None
    except Unavailable as e:
        raw, raw_reason = None, str(e)
    except Exception as e:
        raw, raw_reason = None, _short(e)
    unshare_reason = probe_unshare()
    if raw and raw.note:
        print(raw.note)
    if raw and first["sandbox_host_uid"] != os.geteuid():
        print(f"note: sandboxlite runs bwrap as host uid {first['sandbox_host_uid']} (through its launcher); "
              f"the raw bwrap baseline runs as the caller, uid {os.geteuid()}")

    leak = LeakCheck()
    series, keep = build_series(args, leak, raw, raw_reason, unshare_reason, python_reason)
    reps = {"exec_true": args.exec_per_round}

    def one_round(r: int, record: bool) -> None:
        for metric in METRICS:
            group = [s for s in series if s.metric == metric and s.ok]
            if not group:
                continue
            k = r % len(group)
            order = group[k:] + group[:k]  # rotate, so nobody always goes first
            for _ in range(reps.get(metric, 1)):
                for s in order:
                    if not s.ok:
                        continue
                    try:
                        v = s.fn()  # type: ignore[misc]
                    except Exception as e:
                        s.status = f"not available: failed in round {r}: {_short(e)}"
                        continue
                    if record:
                        s.samples.append(v)

    # close must follow cold_true in a round (it closes that round's sandbox): keep METRICS order
    try:
        for r in range(args.warmup):
            one_round(r, record=False)
        gc.collect()
        for r in range(args.rounds):
            one_round(r, record=True)
            if r % 20 == 19:
                gc.collect()  # outside any timed region
    finally:
        for obj in keep:
            for sb_ in obj if isinstance(obj, list) else [obj]:
                try:
                    sb_.close()
                except Exception:
                    pass

    results, ratios = summarize(series)
    targets = check_targets(results, ratios)
    print()
    print_table(results, ratios)
    print("\ntargets (project issue):")
    for t in targets:
        mark = "n/a " if t["met"] is None else ("PASS" if t["met"] else "MISS")
        val = "-" if t["value_ms"] is None else f"{t['value_ms']:.3f} ms"
        print(f"  [{mark}] {t['target']:<45} got {val}")
    print(f"\nleak check: {leak.checked} closes/resets checked, "
          f"{'nothing left behind' if not leak.problems else str(len(leak.problems)) + ' problem(s)'}")
    for p in leak.problems:
        print(f"  LEAK: {p}")
    print(f"first sandbox of the process (untimed in rounds): {first['first_cold_true_ms']:.1f} ms")

    doc = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "params": {
            "rounds": args.rounds,
            "quick": args.quick,
            "rootfs": args.rootfs,
            "cgroups": args.cgroups,
            "warmup_rounds": args.warmup,
            "exec_per_round": args.exec_per_round,
            "interleaving": "per round, every runtime of a metric once (exec_true: exec_per_round times), "
                            "order rotated each round",
            "timer": "time.perf_counter_ns",
            "commands": {"true": [TRUE], "python": PYTHON_CMD},
            "host_env": HOST_ENV,
            "raw_bwrap_argv": raw.argv(["CMD"], -1) if raw else None,
            "raw_bwrap_argv_source": raw.source if raw else None,
            "raw_bwrap_uid": os.geteuid(),
            "sandboxlite_argv": live_argv,
            "metrics": METRIC_HELP,
            "git_commit": git_commit(),
            "wall_s": round(time.monotonic() - wall0, 2),
        },
        "first_sandbox": first,
        "results": results,
        "ratios": ratios,
        "targets": targets,
        "leak_check": {"checked": leak.checked, "problems": leak.problems},
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {json_path}  ({doc['params']['wall_s']} s)")
    sl_failed = [r for r in results if r["runtime"] == SANDBOXLITE and r["median_ms"] is None]
    return 1 if sl_failed or leak.problems else 0


if __name__ == "__main__":
    sys.exit(main())
