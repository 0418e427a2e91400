"""A sandbox left behind ends: Sandbox(ttl=, idle_timeout=) (limits.ttl_s, limits.idle_s); sb.info."""

from __future__ import annotations

import time

import psutil
import pytest

from sandboxlite import Sandbox
from sandboxlite.errors import ConfigError, SandboxClosed, SandboxCrashed


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:  # (also when it went between a look and the next)
            return True
        time.sleep(0.02)
    return False


def test_ttl_ends_a_sandbox_left_behind():
    sb = Sandbox(ttl=0.5)
    pid = sb.executor_pid
    assert sb.exec("echo hi").stdout == b"hi\n"
    assert sb.config.limits.ttl_s == 0.5
    assert _gone(pid)
    deadline = time.monotonic() + 5
    while not sb.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sb.closed
    with pytest.raises(SandboxClosed) as info:
        sb.exec("true")
    assert "ttl" in str(info.value)


def test_ttl_ends_even_a_running_command():
    sb = Sandbox(ttl=1.0)
    t0 = time.monotonic()
    with pytest.raises((SandboxCrashed, SandboxClosed)):
        sb.exec("sleep 60", timeout=60)
    assert time.monotonic() - t0 < 10
    assert _gone(sb.executor_pid or 0) and (sb.closed or _wait_closed(sb))


def _wait_closed(sb, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not sb.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    return sb.closed


def test_idle_timeout_counts_from_the_last_call_and_spares_running_processes():
    sb = Sandbox(idle_timeout=0.6)
    try:
        for _ in range(5):  # calls keep it alive past its idle time
            time.sleep(0.3)
            assert sb.exec("true").exit_code == 0
        p = sb.spawn(["sleep", "1.5"])  # a process running is not idle
        time.sleep(1.0)
        assert not sb.closed and p.poll() is None
        assert p.wait(timeout=10).exit_code == 0
        assert _wait_closed(sb, 5.0)  # then nothing happens: it ends
        with pytest.raises(SandboxClosed) as info:
            sb.read_file("/etc/hostname")
        assert "idle" in str(info.value)
    finally:
        sb.close()


def test_no_lifetime_by_default_and_bad_values_refused():
    with Sandbox() as sb:
        assert sb.info["ttl_s"] is None and sb.info["idle_s"] is None
    with pytest.raises(ConfigError):
        Sandbox(ttl=0)
    with pytest.raises(ConfigError):
        Sandbox(idle_timeout=-1)


def test_info_says_what_runs():
    with Sandbox() as sb:
        p = sb.spawn(["sleep", "30"])
        time.sleep(0.2)
        procs = sb.info["processes"]
        assert [(x["pid"], x["argv"]) for x in procs] == [(p.pid, ["sleep", "30"])]
        assert procs[0]["age_s"] >= 0.2 and procs[0]["pty"] is False
        assert sb.info["age_s"] >= 0.2
        p.kill()
        p.wait(timeout=10)
        assert sb.info["processes"] == []
