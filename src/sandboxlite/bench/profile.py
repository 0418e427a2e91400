"""Where a cold start (``Sandbox()`` -> first ``exec(["/bin/true"])`` finished) spends its time.

Three views, taken outside the timed rounds:

- **phases**: wall-clock time stamps at the seams of ``Sandbox.__init__`` (wrappers installed for
  the measurement only: ``os.posix_spawn``, ``Sandbox._create_cgroup`` / ``_attach_cgroup``,
  ``Sandbox._read_child_pid``, the executor's hello), with cgroups as configured and with
  ``cgroups="off"``, alternating, next to raw bwrap running ``/bin/true``;
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
from contextlib import contextmanager
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


@contextmanager
def _instrumented(marks: dict[str, float]):
    """Time stamps at the seams of Sandbox() (patched for the measurement only, then restored)."""
    from .. import sandbox as sbmod
    from ..protocol import Channel

    clock = time.perf_counter
    orig_spawn = os.posix_spawn
    orig_child = sbmod.Sandbox._read_child_pid
    orig_create = sbmod.Sandbox._create_cgroup
    orig_attach = sbmod.Sandbox._attach_cgroup
    orig_wait = Channel.wait

    def spawn(*a, **k):
        marks["spawn_start"] = clock()
        try:
            return orig_spawn(*a, **k)
        finally:
            marks["spawn_end"] = clock()

    def read_child(self, fd):
        try:
            return orig_child(self, fd)
        finally:
            marks["child"] = clock()

    def create(self, support):
        t = clock()
        try:
            return orig_create(self, support)
        finally:
            marks["cgroup"] = marks.get("cgroup", 0.0) + clock() - t

    def attach(self, support, pid):
        t = clock()
        try:
            return orig_attach(self, support, pid)
        finally:
            # _attach_cgroup calls _create_cgroup, already counted: count only the rest
            marks["attach"] = marks.get("attach", 0.0) + clock() - t

    def wait(self, id_, deadline=None):
        try:
            return orig_wait(self, id_, deadline)
        finally:
            if id_ == 0 and "hello" not in marks:
                marks["hello"] = clock()

    os.posix_spawn = spawn
    sbmod.Sandbox._read_child_pid = read_child
    sbmod.Sandbox._create_cgroup = create
    sbmod.Sandbox._attach_cgroup = attach
    Channel.wait = wait
    try:
        yield
    finally:
        os.posix_spawn = orig_spawn
        sbmod.Sandbox._read_child_pid = orig_child
        sbmod.Sandbox._create_cgroup = orig_create
        sbmod.Sandbox._attach_cgroup = orig_attach
        Channel.wait = orig_wait


def _phases_once(rootfs: str, cgroups: str) -> dict[str, float]:
    from .. import Sandbox

    marks: dict[str, float] = {}
    with _instrumented(marks):
        t0 = time.perf_counter()
        sb = Sandbox(rootfs=rootfs, cgroups=cgroups)
        t_created = time.perf_counter()
        res = sb.exec(TRUE_CMD)
        t_exec = time.perf_counter()
    sb.close()
    if res.exit_code != 0:
        raise RuntimeError(f"/bin/true exited {res.exit_code}")
    cg_create = marks.get("cgroup", 0.0)
    attach_total = marks.get("attach", 0.0)
    pre_spawn_cgroup = cg_create if attach_total == 0.0 else 0.0  # root + v1: created before the spawn
    out = {
        "python_setup": marks["spawn_start"] - t0 - pre_spawn_cgroup,
        "cgroup": cg_create if attach_total == 0.0 else attach_total,
        "spawn": marks["spawn_end"] - marks["spawn_start"],
        "until_clone": marks["child"] - marks["spawn_end"],
        "until_hello": marks["hello"] - marks["child"] - attach_total,
        "after_hello": t_created - marks["hello"],
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
