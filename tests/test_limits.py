"""Limits: fork bombs, memory hogs, output floods and CPU spins are contained; the host stays responsive."""

import os
import time

import pytest

from sandboxlite import Sandbox


def responsive_within(sb: Sandbox, seconds: float) -> float:
    t = time.monotonic()
    assert sb.exec(["true"]).exit_code == 0
    dt = time.monotonic() - t
    assert dt < seconds, f"a second sandbox took {dt * 1000:.0f} ms to answer"
    return dt


def test_fork_bomb_is_stopped():
    with Sandbox(limits={"pids": 64}) as sb, Sandbox() as other:
        t = time.monotonic()
        r = sb.exec("bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", timeout=3)
        assert time.monotonic() - t < 10
        responsive_within(other, 0.5)
        # the bomb hit the pids limit: the jail holds at most the limit (plus the executor)
        n = int(sb.exec("ls /proc | grep -c '^[0-9]'").stdout or 0) if sb.exec("true").exit_code == 0 else 0
        assert n <= 64 + 2
    # and a fresh sandbox still starts
    with Sandbox() as after:
        assert after.exec("echo fine").stdout == b"fine\n"


def test_fork_bomb_in_background_is_cleared_by_reset():
    with Sandbox(limits={"pids": 32}) as sb:
        sb.exec("(bomb() { bomb | bomb & }; bomb) >/dev/null 2>&1 &")
        time.sleep(0.5)
        sb.reset()
        assert sb.exec("echo clean").stdout == b"clean\n"


def test_memory_hog_is_killed():
    with Sandbox(limits={"memory_mb": 128}) as sb:
        r = sb.exec(["python3", "-c", "x = bytearray(512 << 20); x[::4096] = b'1' * len(x[::4096]); print('alive')"])
        assert r.exit_code != 0 and b"alive" not in r.stdout
        assert sb.exec("echo ok").stdout == b"ok\n"


def test_output_flood_is_truncated():
    with Sandbox(limits={"output_bytes": 4096}) as sb:
        t = time.monotonic()
        r = sb.exec("yes flood | head -c 50000000; echo tail >&2")
        assert r.truncated and len(r.stdout) == 4096 and r.stdout.startswith(b"flood\n")
        assert r.stderr == b"tail\n" and r.exit_code == 0
        assert time.monotonic() - t < 10


def test_cpu_spin_past_timeout_and_host_responsive():
    with Sandbox() as sb, Sandbox() as other:
        t = time.monotonic()
        r = sb.exec("while :; do :; done", timeout=1)
        assert r.timed_out and time.monotonic() - t < 3
        responsive_within(other, 0.5)


def test_cpu_rlimit():
    with Sandbox(limits={"cpu_s": 1}) as sb:
        r = sb.exec("while :; do :; done", timeout=10)
        assert not r.timed_out and r.signal in (9, 24)  # SIGXCPU, then SIGKILL at the hard limit


def test_file_size_rlimit_and_tmp_cap():
    with Sandbox(limits={"fsize_mb": 1, "tmp_mb": 4}) as sb:
        r = sb.exec("head -c 2000000 /dev/zero > /testbed/f; echo rc=$?; stat -c %s /testbed/f")
        assert b"1048576" in r.stdout
        r = sb.exec("for i in 1 2 3 4 5 6; do head -c 1000000 /dev/zero > /tmp/f$i || echo full; done")
        assert b"full" in r.stdout


def test_open_files_limit():
    with Sandbox(limits={"nofile": 64}) as sb:
        r = sb.exec(["python3", "-c", "import os\nn=0\ntry:\n  while True: os.open('/dev/null', 0); n+=1\nexcept OSError: print(n)"])
        assert r.exit_code == 0 and int(r.stdout) < 64


def test_cgroup_limits_follow_each_sandbox_when_groups_are_reused():
    from sandboxlite.isolation import cgroups

    if os.geteuid() != 0:
        pytest.skip("cgroup v1 groups need root (CI runs as root)")
    if cgroups.detect().kind != "v1":
        pytest.fail(f"root, but cgroup v1 pids/memory are unusable: {cgroups.detect().reason}")
    for mem, pids in ((128, 40), (4096, 512), (256, 64)):
        with Sandbox(limits={"memory_mb": mem, "pids": pids}) as sb:
            pd, md = sb.info["cgroup"]
            assert open(f"{pd}/pids.max").read().strip() == str(pids)
            assert open(f"{md}/memory.limit_in_bytes").read().strip() == str(mem << 20)
            assert str(sb.executor_pid) in open(f"{pd}/cgroup.procs").read().split()
