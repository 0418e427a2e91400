"""Throughput and density: how many sandboxes per second, and how many at once.

    .venv/bin/python bench/scale.py            # full: concurrency 1, 2, 8, 64; density 10, 100, 1000
    .venv/bin/python bench/scale.py --quick    # a few seconds (the test suite runs this)

- **throughput**: full cycles (create, `exec(["/bin/true"])`, close) per second, with C threads
  each running cycles back to back for a fixed time; median and p99 of the cycle latency.
- **density**: N idle sandboxes alive at once: the time to start them all, and the memory of a
  sandbox (USS and PSS summed over its whole process tree: bwrap, the executor, the standby
  supervisor), from psutil.

Prints a table and writes JSON (schema ``sandboxlite.bench.scale/1``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import psutil  # noqa: E402

from sandboxlite import Sandbox  # noqa: E402

SCHEMA = "sandboxlite.bench.scale/1"


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def throughput(concurrency: int, seconds: float, rootfs: str) -> dict:
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def worker() -> None:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                with Sandbox(rootfs=rootfs) as sb:
                    sb.exec(["/bin/true"]).check()
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(f"{type(e).__name__}: {e}"[:200])
                continue
            with lock:
                lat.append(time.perf_counter() - t0)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    return {
        "concurrency": concurrency,
        "cycles": len(lat),
        "cycles_per_s": round(len(lat) / wall, 1),
        "median_ms": round(pct(lat, 50) * 1000, 3),
        "p99_ms": round(pct(lat, 99) * 1000, 3),
        "errors": errors[:5],
        "error_count": len(errors),
    }


def tree_memory(pid: int) -> tuple[int, int]:
    uss = pss = 0
    try:
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0, 0
    for p in procs:
        try:
            m = p.memory_full_info()
            uss += m.uss
            pss += m.pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return uss, pss


def density(n: int, rootfs: str) -> dict:
    boxes: list[Sandbox] = []
    t0 = time.monotonic()
    error = None
    try:
        for _ in range(n):
            boxes.append(Sandbox(rootfs=rootfs))
    except Exception as e:  # noqa: BLE001 - reported
        error = f"{type(e).__name__}: {e}"[:300]
    start_s = time.monotonic() - t0
    try:
        time.sleep(0.2)  # let the standby supervisors settle
        mems = [tree_memory(sb.bwrap_pid) for sb in boxes[: min(len(boxes), 50)]]
        alive = sum(1 for sb in boxes if sb.alive())
        ok = all(sb.exec(["/bin/true"]).ok for sb in boxes[:: max(1, len(boxes) // 10)])
    finally:
        for sb in boxes:
            sb.close()
    return {
        "n": n,
        "started": len(boxes),
        "alive": alive,
        "start_all_s": round(start_s, 3),
        "per_sandbox_start_ms": round(start_s / max(1, len(boxes)) * 1000, 3),
        "uss_mib_median": round(statistics.median(m[0] for m in mems) / 2**20, 2) if mems else None,
        "pss_mib_median": round(statistics.median(m[1] for m in mems) / 2**20, 2) if mems else None,
        "exec_after_ok": ok,
        "error": error,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small numbers, a few seconds")
    ap.add_argument("--rootfs", default="host")
    ap.add_argument("--json", default=None, help="default bench/results/scale-<timestamp>.json")
    args = ap.parse_args(argv)
    conc, seconds, dens = ([1, 2, 8], 0.5, [5]) if args.quick else ([1, 2, 8, 64], 5.0, [10, 100, 1000])
    t_rows = [throughput(c, seconds, args.rootfs) for c in conc]
    d_rows = [density(n, args.rootfs) for n in dens]
    print(f"throughput (create + exec true + close), rootfs={args.rootfs!r}")
    print(f"{'concurrency':>11} {'cycles/s':>9} {'median ms':>10} {'p99 ms':>8} {'errors':>7}")
    for r in t_rows:
        print(f"{r['concurrency']:>11} {r['cycles_per_s']:>9} {r['median_ms']:>10} {r['p99_ms']:>8} {r['error_count']:>7}")
    print("\ndensity (idle sandboxes alive at once)")
    print(f"{'n':>5} {'alive':>6} {'start all s':>12} {'ms each':>8} {'USS MiB':>8} {'PSS MiB':>8}")
    for r in d_rows:
        print(f"{r['n']:>5} {r['alive']:>6} {r['start_all_s']:>12} {r['per_sandbox_start_ms']:>8} "
              f"{r['uss_mib_median']!s:>8} {r['pss_mib_median']!s:>8}" + (f"  ERROR {r['error']}" if r["error"] else ""))
    out = Path(args.json) if args.json else ROOT / "bench" / "results" / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "schema": SCHEMA,
        "machine": {"cpu_count": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "euid": os.geteuid()},
        "params": {"quick": args.quick, "rootfs": args.rootfs, "seconds_per_concurrency": seconds},
        "throughput": t_rows,
        "density": d_rows,
    }, indent=2) + "\n")  # fmt: skip
    print(f"\nwrote {out}")
    failed = any(r["error_count"] for r in t_rows) or any(r["error"] or not r["exec_after_ok"] for r in d_rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
