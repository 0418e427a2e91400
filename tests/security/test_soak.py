"""Soak: create / exec / close, again and again (1,000 cycles; SANDBOXLITE_SOAK=10000 for more).

Nothing may leak: processes, descriptors, host mounts, temporary files and directories,
cgroups; and the controller's memory stays flat (within 10 % after a warm-up).
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from pathlib import Path

import psutil

from sandboxlite import Sandbox, paths
from sandboxlite.isolation import cgroups
from sandboxlite.jail.host import default_host

from .helpers import procs_in, rss_mb, still_running

CYCLES = int(os.environ.get("SANDBOXLITE_SOAK", "1000"))
WARMUP = max(20, min(100, CYCLES // 10))


def cycle(i: int, namespaces: dict[str, float], jails: list[tuple[int, float]]) -> None:
    with Sandbox() as sb:
        for pid in (sb.bwrap_pid, sb.executor_pid):
            jails.append((pid, psutil.Process(pid).create_time()))
        if i % 10 == 0:  # now and then: background processes (a daemon too) and a shell to leave behind
            r = sb.exec("sleep 1000 >/dev/null 2>&1 & (setsid sleep 999 >/dev/null 2>&1 &); echo ok")
            sb.shell().run("sleep 998 >/dev/null 2>&1 &")
            ns = os.readlink(f"/proc/{sb.executor_pid}/ns/pid")
        else:
            r = sb.exec(["true"])
        assert r.exit_code == 0, r
    if i % 10 == 0:
        namespaces[ns] = time.time() - 0.05  # (its processes all started before it closed)


def state(tmp: Path) -> dict:
    gc.collect()
    pool = default_host().netns  # its ready namespaces are descriptors too: count them with the pool full
    if pool is not None:
        pool.wait_ready(pool.size, 5)
    me = psutil.Process()
    cache = paths.home()
    mine = [d / n for d in (cgroups.V1_ROOT / "pids" / cgroups.GROUP, cgroups.V1_ROOT / "memory" / cgroups.GROUP)
            if d.is_dir() for n in os.listdir(d) if n.startswith(f"{os.getpid()}-")]
    return {
        "children": sorted(c.pid for c in me.children(recursive=True) if c.status() != psutil.STATUS_ZOMBIE),
        "fds": me.num_fds(),
        # a jail's mounts (the executor's tmpfs are named "sandboxlite", bwrap's root is /newroot)
        "host mounts": [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                        if " - tmpfs sandboxlite " in line or "/.sl/" in line or "/newroot" in line],
        "temp files": sorted(os.listdir(tmp)),
        # unfinished executor builds and /etc copies (.build-*, .tmp-*)
        "cache temp dirs": sorted(str(p.relative_to(cache)) for d in ("bin", "host-etc") if (cache / d).is_dir()
                                  for p in (cache / d).iterdir() if p.name.startswith(".")),
        "shm": sorted(n for n in os.listdir("/dev/shm") if "sandboxlite" in n),
        "cgroups": len(mine),
        "busy cgroups": [str(d) for d in mine if (d / "cgroup.procs").read_text().strip()],
        "rss": rss_mb(),
    }


def test_soak(record):
    tmp = Path(tempfile.mkdtemp(prefix="sandboxlite-soak-"))
    saved, tempfile.tempdir = tempfile.tempdir, str(tmp)  # anything sandboxlite leaves in TMPDIR lands here
    namespaces: dict[str, float] = {}
    jails: list[tuple[int, float]] = []
    try:
        for i in range(WARMUP):
            cycle(i, namespaces, jails)
        before = state(tmp)
        t = time.monotonic()
        for i in range(CYCLES):
            cycle(i, namespaces, jails)
        took = time.monotonic() - t
        after = state(tmp)
    finally:
        tempfile.tempdir = saved
    left = still_running(jails) + procs_in(namespaces)
    growth = after["rss"] / before["rss"] - 1
    diff = {k: (before[k], after[k]) for k in before if k != "rss" and before[k] != after[k]}
    record(f"soak: {CYCLES} create/exec/close cycles ({CYCLES / took:.0f}/s)",
           "no leak; RSS within 10 %",
           f"changed: {sorted(diff) or 'nothing'}; {len(left)} of {len(jails)} bwrap/executors + their "
           f"namespaces' procs left; fds {after['fds']}; "
           f"cgroups {after['cgroups']}; RSS {before['rss']:.1f} -> {after['rss']:.1f} MiB ({growth:+.1%})")
    assert not left, f"processes left in {len(namespaces)} sandboxes' PID namespaces: {left}"
    assert after["children"] == before["children"], diff
    assert after["fds"] <= before["fds"], diff
    assert after["host mounts"] == [] and after["temp files"] == [], diff
    assert after["cache temp dirs"] == before["cache temp dirs"], diff
    assert after["shm"] == before["shm"], diff
    assert after["cgroups"] <= max(before["cgroups"], cgroups.FREE_MAX) and after["busy cgroups"] == [], diff
    assert growth <= 0.10, f"the controller's RSS grew by {growth:.1%} over {CYCLES} cycles"
    os.rmdir(tmp)


def test_soak_landlock(record):
    """isolation="landlock": CYCLES // 4 create / exec / reset / close cycles (background processes, daemons and a
    shell left behind every tenth): no process, directory, descriptor or uid lease outlives its sandbox."""
    n = max(50, CYCLES // 4)
    host = default_host()
    base = host.landlock_dir
    me = psutil.Process()
    fds0 = me.num_fds()
    before = set(os.listdir(base)) if os.path.isdir(base) else set()
    marks = []
    t0 = time.monotonic()
    for i in range(n):
        with Sandbox(isolation="landlock") as sb:
            tag = f"sleep {2000 + i % 10}"
            if i % 10 == 0:
                r = sb.exec(f"{tag} >/dev/null 2>&1 & (setsid {tag} >/dev/null 2>&1 &); echo ok")
                sb.shell().run(f"{tag} >/dev/null 2>&1 &")
                sb.reset()
                marks.append(tag)
            r = sb.exec(["true"])
            assert r.exit_code == 0, r
    rate = n / (time.monotonic() - t0)
    time.sleep(0.2)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if " ".join(p.info["cmdline"] or []) in marks]
    dirs = set(os.listdir(base)) - before
    pool = host.uids
    as_pool_uids = [] if pool is None else [
        p.pid for p in psutil.process_iter(["uids"]) if pool.first <= p.info["uids"].real < pool.first + pool.count]
    fds = me.num_fds()
    record(f"soak (landlock): {n} create/exec/reset/close cycles ({rate:.0f}/s)", "nothing left",
           f"{len(left)} processes, {len(dirs)} directories, fds {fds0} -> {fds}, "
           f"{len(as_pool_uids)} processes of the sandbox uid range")
    assert not left and not dirs and fds <= fds0 + 2 and not as_pool_uids
