"""Where a cold start (``Sandbox()`` -> first ``exec(["/bin/true"])`` finished) spends its time.

Three views, taken outside the timed rounds:

- **phases**: the time stamps every start records at its seams (``Jail.timings``: see
  ``launch.PHASES``; nothing is patched), with cgroups as configured and with ``cgroups="off"``,
  alternating, next to raw bwrap running ``/bin/true``;
- **CPU**: this process's CPU time (the Python side) and the CPU time of the reaped children (the
  launcher, bwrap, the executor and the command) per create + exec + close;
- **cProfile**: the Python functions with the most own time over the same cycles.
"""

from __future__ import annotations

import cProfile
import gc
import os
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

from .core import TRUE_CMD, short_error

PHASES = [
    ("python_setup", "Python before the spawn: config, rootfs plan, seccomp fd, argv"),
    ("cgroup", "creating the cgroup (and, without the launcher, moving the jail's init into it)"),
    ("spawn", "os.posix_spawn of the launcher (root) or bwrap (fork + exec)"),
    ("until_clone", "launcher + bwrap start until bwrap has cloned the jail's init (its namespaces)"),
    ("until_hello", "bwrap's mounts, pivot_root, seccomp, then the executor's start until its hello"),
    ("after_hello", "the rest of Sandbox() after the hello"),
    ("first_exec", "the first exec round trip (fork + exec of /bin/true inside, exit status back)"),
]


def _phases_once(rootfs: str, cgroups: str) -> dict[str, float]:
    """One cold start, split at the phase stamps the launch records (``Jail.timings``)."""
    from .. import Sandbox

    t0 = time.perf_counter()
    sb = Sandbox(rootfs=rootfs, cgroups=cgroups)
    t_created = time.perf_counter()
    res = sb.exec(TRUE_CMD)
    t_exec = time.perf_counter()
    m = dict(sb.jail.timings)
    sb.close()
    if res.exit_code != 0:
        raise RuntimeError(f"/bin/true exited {res.exit_code}")
    made = m["cgroup"] - m["planned"]  # launcher mode: made before the spawn (else 0)
    attached = m["attached"] - m["cloned"]  # attach mode: made and attached after the clone (else ~0)
    out = {
        "python_setup": m["wired"] - t0 - made,
        "cgroup": made + attached,
        "spawn": m["spawned"] - m["wired"],
        "until_clone": m["cloned"] - m["spawned"],
        "until_hello": m["hello"] - m["attached"],
        "after_hello": t_created - m["hello"],
        "first_exec": t_exec - t_created,
        "total": t_exec - t0,
    }
    return {k: v * 1e3 for k, v in out.items()}


def cold_profile(*, rootfs: str, cgroups: str, samples: int, raw_bwrap: Callable[[], float] | None,
                 log: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    from .. import Sandbox

    variants = [cgroups] if cgroups == "off" else [cgroups, "off"]
    got: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    raw: list[float] = []
    errors: list[str] = []
    gc.collect()
    for i in range(samples + 1):  # the first is a warm-up
        for v in variants:
            try:
                p = _phases_once(rootfs, v)
            except Exception as e:  # noqa: BLE001 - reported
                errors.append(f"cgroups={v}: {short_error(e)}")
                continue
            if i:
                got[v].append(p)
        if raw_bwrap is not None:
            try:
                t = raw_bwrap()
                if i:
                    raw.append(t)
            except Exception as e:  # noqa: BLE001
                errors.append(f"raw bwrap: {short_error(e)}")
                raw_bwrap = None
    phases = {}
    for v, rows in got.items():
        if rows:
            phases[f"cgroups={v}"] = {k: round(statistics.median(r[k] for r in rows), 3)
                                      for k in [*(p for p, _ in PHASES), "total"]}  # fmt: skip

    # CPU: this process (Python) and the reaped children (launcher, bwrap, executor, /bin/true)
    n = max(3, samples)
    gc.collect()
    c0, t0, w0 = os.times(), time.process_time(), time.perf_counter()
    for _ in range(n):
        with Sandbox(rootfs=rootfs, cgroups=cgroups) as sb:
            sb.exec(TRUE_CMD)
    c1, t1, w1 = os.times(), time.process_time(), time.perf_counter()
    children = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    cpu = {
        "cycles": n,
        "wall_ms_per_cycle": round((w1 - w0) / n * 1e3, 3),
        "python_cpu_ms_per_cycle": round((t1 - t0) / n * 1e3, 3),
        "children_cpu_ms_per_cycle": round(children / n * 1e3, 3),
        "note": "create + exec /bin/true + close; children = launcher, bwrap, executor, /bin/true (reaped)",
    }

    # cProfile of the same cycles: the Python functions with the most own time
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        with Sandbox(rootfs=rootfs, cgroups=cgroups) as sb:
            sb.exec(TRUE_CMD)
    prof.disable()
    st = pstats.Stats(prof)
    top = []
    by_own_time = sorted(st.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    for (file, line, func), (_cc, nc, tt, ct, _callers) in by_own_time[:15]:
        where = f"{os.path.basename(file)}:{line}" if line else file
        top.append({"function": f"{func} ({where})", "calls_per_cycle": round(nc / n, 1),
                    "own_ms_per_cycle": round(tt / n * 1e3, 3), "cumulative_ms_per_cycle": round(ct / n * 1e3, 3)})
    out = {
        "samples": samples,
        "phases_help": dict(PHASES),
        "phases_median_ms": phases,
        "raw_bwrap_true_median_ms": round(statistics.median(raw), 3) if raw else None,
        "cpu": cpu,
        "cprofile_top": top,
        "errors": errors[:5],
    }
    log(f"  profile: {samples} instrumented cold starts per variant")
    return out
