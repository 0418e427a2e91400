"""Payloads and measurements shared by the attack tests."""

from __future__ import annotations

import errno
import os
import statistics
import threading
import time

import pyseccomp

from sandboxlite import Sandbox

from ..helpers_nonroot import run_py  # noqa: F401  (re-exported for the attack modules)

ARCH = pyseccomp.system_arch()

# Under attack, the best of several round trips of a *second* sandbox must stay under this.
RESPONSIVE_S = 0.050


def nr(name: str) -> int:
    """The system call number of ``name`` on this machine (negative: not on this architecture)."""
    return pyseccomp.resolve_syscall(ARCH, name)


def ename(code: int) -> str:
    return errno.errorcode.get(code, str(code)) if code else "ok"


# A ctypes syscall() helper for probes run inside: sc(nr, *args) -> [return value, errno].
SC = r'''
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(*args):
    args = list(args) + [0] * (6 - len(args))
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_ulong(a & 0xFFFFFFFFFFFFFFFF) for a in args])
    return [r, ctypes.get_errno() if r == -1 else 0]
def en(e):
    return errno.errorcode.get(e, str(e)) if e else "ok"
'''


def latencies(other: Sandbox, n: int = 9, gap_s: float = 0.03) -> list[float]:
    """Round trips of ``exec(["true"])`` in ``other``, spread over a little time."""
    out = []
    for _ in range(n):
        t = time.monotonic()
        r = other.exec(["true"], timeout=30)
        out.append(time.monotonic() - t)
        assert r.exit_code == 0, r
        time.sleep(gap_s)
    return out


def describe_latency(lat: list[float]) -> str:
    return f"best {min(lat) * 1000:.1f} ms, median {statistics.median(lat) * 1000:.1f} ms of {len(lat)}"


def under_attack(sb: Sandbox, cmd, other: Sandbox, *, timeout: float, ramp_s: float = 0.4, during=None, **kw):
    """Run ``cmd`` in ``sb`` (in a thread) and measure ``other`` while it runs.

    Returns (the attack's ExecResult, the latencies, whether the attack was still running
    when the measurement ended: a measurement taken after the attack is worthless, and
    what ``during()`` returned, called right after the measurement).
    """
    res: list = []
    errors: list = []

    def attack():
        try:
            res.append(sb.exec(cmd, timeout=timeout, **kw))
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=attack, daemon=True)
    t.start()
    time.sleep(ramp_s)
    lat = latencies(other)
    seen = during() if during is not None else None
    still_running = t.is_alive()
    t.join(timeout + 30)
    assert not t.is_alive(), "the attack's exec never returned"
    if errors:
        raise errors[0]
    return res[0], lat, still_running, seen


def jail_pids(sb: Sandbox) -> int:
    """How many processes the jail holds right now (host view: bwrap's descendants)."""
    import psutil

    try:
        return len(psutil.Process(sb.bwrap_pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return 0


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def procs_in(namespaces: set[str] | dict[str, float], before: float | None = None) -> list[int]:
    """Host pids of the living (not zombie) processes in these PID namespaces.

    Namespace inode numbers are recycled: with a dict {namespace: time}, or with
    ``before``, a process started after that time belongs to a newer namespace.
    """
    import psutil

    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{p}/ns/pid")
            if ns not in namespaces or not _alive(int(p)):
                continue
            limit = namespaces[ns] if isinstance(namespaces, dict) else before
            if limit is None or psutil.Process(int(p)).create_time() < limit:
                out.append(int(p))
        except (OSError, psutil.Error):
            continue
    return out


def still_running(procs: list[tuple[int, float]]) -> list[int]:
    """Which of these (pid, start time) are still the same living process."""
    import psutil

    out = []
    for pid, started in procs:
        try:
            if psutil.Process(pid).create_time() == started and _alive(pid):
                out.append(pid)
        except psutil.Error:
            continue
    return out


def _alive(pid: int) -> bool:
    from ..conftest import alive

    return alive(pid)


def next_sandbox_starts(**kw) -> float:
    """Open a fresh sandbox and run a command in it; returns the seconds it took."""
    t = time.monotonic()
    with Sandbox(**kw) as nxt:
        r = nxt.exec("echo fine", timeout=30)
    assert r.stdout == b"fine\n", r
    return time.monotonic() - t
