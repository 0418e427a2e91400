"""Throughput and density: how many sandboxes per second, and how many at once.

- **throughput**: full cycles (create, ``exec(["/bin/true"])``, close) per second, with C threads each
  running cycles back to back for a time window; the runtimes take turns window by window
  (A B A B ...); median and p99 of the cycle latency.
- **density**: N idle sandboxes alive at once: the time to start them all (one after the other), the
  memory of a sandbox (USS and PSS summed over its whole host process tree, from psutil: bwrap, the
  executor, the supervisor it keeps ready), and the drop of the host's MemAvailable per sandbox
  (which also counts kernel memory: namespaces, mounts, page tables; noisy on a busy machine).
"""

from __future__ import annotations

import gc
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from .baselines import Runtime
from .core import SANDBOXLITE, TRUE_CMD, Unavailable, meminfo_kib, percentile, short_error

THROUGHPUT_BASELINES = ["raw_bwrap", "unshare", "sandlock", "posix_spawn", "docker", "podman", "runc"]
DENSITY_BASELINES = ["raw_bwrap", "unshare", "posix_spawn", "docker", "podman", "runc"]
HEAVY = ("docker", "podman", "runc")  # capped by density_baseline_max
MEMORY_SAMPLE = 50  # trees whose memory is read (psutil reads every smaps: slow for 1000)


def _window(cycle: Callable[[], None], concurrency: int, seconds: float) -> tuple[list[float], list[str], float]:
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                cycle()
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(short_error(e)[:200])
                if len(errors) > 50:
                    return
                continue
            with lock:
                lat.append(time.perf_counter() - t0)

    start = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, errors, time.monotonic() - start


def sandboxlite_cycle(rootfs: str, cgroups: str) -> Callable[[], None]:
    from .. import Sandbox

    def cycle() -> None:
        with Sandbox(rootfs=rootfs, cgroups=cgroups) as sb:
            sb.exec(TRUE_CMD).check()

    return cycle


def throughput(runtimes: dict[str, Runtime], *, rootfs: str, cgroups: str, concurrencies: list[int],
               window_s: float, windows: int, log: Callable[[str], None] = print) -> list[dict]:  # fmt: skip
    cycles: dict[str, Callable[[], None] | str] = {SANDBOXLITE: sandboxlite_cycle(rootfs, cgroups)}
    for name in THROUGHPUT_BASELINES:
        rt = runtimes.get(name)
        if rt is not None:
            cycles[name] = rt.cycle if rt.reason is None else f"not available: {rt.reason}"
    rows = []
    for c in concurrencies:
        acc: dict[str, dict[str, Any]] = {n: {"lat": [], "errors": [], "wall": 0.0} for n in cycles}
        names = [n for n, f in cycles.items() if callable(f)]
        for w in range(windows):
            k = w % max(1, len(names))
            for name in names[k:] + names[:k]:
                gc.collect()
                lat, errs, wall = _window(cycles[name], c, window_s)  # type: ignore[arg-type]
                acc[name]["lat"] += lat
                acc[name]["errors"] += errs
                acc[name]["wall"] += wall
        for name, f in cycles.items():
            a = acc[name]
            row: dict[str, Any] = {"runtime": name, "concurrency": c, "cycles": len(a["lat"]),
                                   "seconds": round(a["wall"], 3), "cycles_per_s": None, "median_ms": None,
                                   "p99_ms": None, "error_count": len(a["errors"]), "errors": a["errors"][:3],
                                   "status": "ok"}  # fmt: skip
            if not callable(f):
                row["status"] = f
            elif a["lat"]:
                s = sorted(a["lat"])
                row.update(cycles_per_s=round(len(s) / a["wall"], 1), median_ms=round(percentile(s, 50) * 1e3, 3),
                           p99_ms=round(percentile(s, 99) * 1e3, 3))  # fmt: skip
                if a["errors"]:
                    row["status"] = f"errors: {len(a['errors'])} cycles failed, first: {a['errors'][0]}"
            else:
                row["status"] = "not available: " + (a["errors"][0] if a["errors"] else "no cycle finished")
            rows.append(row)
        best = {r["runtime"]: r["cycles_per_s"] for r in rows if r["concurrency"] == c}
        log(f"  throughput c={c}: " + ", ".join(f"{n} {v}/s" for n, v in best.items() if v is not None))
    return rows


def tree_memory(pid: int | None) -> tuple[int, int] | None:
    """(USS, PSS) in bytes, summed over a process and its descendants; None if it is gone."""
    import psutil

    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return None
    uss = pss = 0
    for p in procs:
        try:
            m = p.memory_full_info()
            uss += m.uss
            pss += getattr(m, "pss", 0)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return uss, pss


class _SandboxliteIdle:
    """The density interface for sandboxlite itself."""

    def __init__(self, rootfs: str, cgroups: str) -> None:
        self.rootfs, self.cgroups = rootfs, cgroups

    def idle_start(self):
        from .. import Sandbox

        return Sandbox(rootfs=self.rootfs, cgroups=self.cgroups)

    def idle_pids(self, handles):
        return [sb.bwrap_pid for sb in handles]

    def check(self, handles) -> bool:
        sample = handles[:: max(1, len(handles) // 10)]
        return all(sb.alive() for sb in handles) and all(sb.exec(TRUE_CMD).ok for sb in sample)

    def idle_stop(self, handles):
        for sb in handles:
            sb.close()


def _one_density(name: str, impl: Any, n: int, settle_s: float) -> dict:
    row: dict[str, Any] = {"runtime": name, "n": n, "started": 0, "alive": None, "start_all_s": None,
                           "per_sandbox_start_ms": None, "uss_mib_median": None, "pss_mib_median": None,
                           "mem_available_delta_mib_per": None, "close_all_s": None, "exec_after_ok": None,
                           "status": "ok"}  # fmt: skip
    handles: list[Any] = []
    gc.collect()
    avail0 = meminfo_kib()
    t0 = time.monotonic()
    try:
        for _ in range(n):
            handles.append(impl.idle_start())
    except Exception as e:  # noqa: BLE001 - reported
        row["status"] = f"not available: started {len(handles)} of {n}, then {short_error(e)}"[:300]
    start_s = time.monotonic() - t0
    try:
        row["started"] = len(handles)
        if handles:
            row["start_all_s"] = round(start_s, 3)
            row["per_sandbox_start_ms"] = round(start_s / len(handles) * 1000, 3)
        time.sleep(settle_s)  # let lazy set-up (the executor's standby supervisor ...) settle
        avail1 = meminfo_kib()
        if avail0 and avail1 and handles:
            row["mem_available_delta_mib_per"] = round((avail0 - avail1) / 1024 / len(handles), 3)
        step = max(1, len(handles) // MEMORY_SAMPLE)
        sample = handles[::step][:MEMORY_SAMPLE]
        mems = [m for m in (tree_memory(p) for p in impl.idle_pids(sample)) if m is not None]
        if mems:
            row["uss_mib_median"] = round(statistics.median(m[0] for m in mems) / 2**20, 3)
            row["pss_mib_median"] = round(statistics.median(m[1] for m in mems) / 2**20, 3)
            row["memory_sampled"] = len(mems)
        if hasattr(impl, "check"):
            ok = impl.check(handles)
            row["exec_after_ok"] = ok
            row["alive"] = len(handles) if ok else sum(1 for sb in handles if sb.alive())
        else:
            pids = impl.idle_pids(handles)
            row["alive"] = sum(1 for p in pids if p is not None and _alive(p))
    finally:
        t1 = time.monotonic()
        try:
            impl.idle_stop(handles)
        finally:
            row["close_all_s"] = round(time.monotonic() - t1, 3)
    return row


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def density(runtimes: dict[str, Runtime], *, rootfs: str, cgroups: str, counts: list[int], baseline_max: int,
            settle_s: float = 0.3, log: Callable[[str], None] = print) -> list[dict]:  # fmt: skip
    impls: dict[str, Any] = {SANDBOXLITE: _SandboxliteIdle(rootfs, cgroups)}
    for name in DENSITY_BASELINES:
        rt = runtimes.get(name)
        if rt is not None:
            impls[name] = rt if rt.reason is None else f"not available: {rt.reason}"
    rows = []
    for n in counts:
        names = list(impls)
        for name in names:
            impl = impls[name]
            if isinstance(impl, str):
                rows.append({"runtime": name, "n": n, "status": impl})
                continue
            if name in HEAVY and n > baseline_max:
                rows.append({"runtime": name, "n": n, "status": f"not available: not run, n={n} is over "
                             f"--density-baseline-max {baseline_max} (each {name} container is a full container)"})
                continue
            try:
                row = _one_density(name, impl, n, settle_s)
            except Unavailable as e:
                row = {"runtime": name, "n": n, "status": f"not available: {e}"}
            rows.append(row)
            if row.get("status") == "ok" or row.get("started"):
                log(f"  density n={n} {name}: started in {row.get('start_all_s')} s, "
                    f"PSS {row.get('pss_mib_median')} MiB, USS {row.get('uss_mib_median')} MiB each")
    return rows
