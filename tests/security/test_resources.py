"""Resource exhaustion: each attack is contained by its sandbox's limits, the host stays
responsive while it runs (a second sandbox's exec answers within 50 ms, best of 9 round
trips spread over the attack), and the next sandbox still starts."""

from __future__ import annotations

import errno
import time

import pytest

from sandboxlite import ConfigError, Sandbox

from ..conftest import jail_tree
from .helpers import (
    RESPONSIVE_S,
    describe_latency,
    jail_pids,
    next_sandbox_starts,
    rss_mb,
    run_py,
    under_attack,
)


@pytest.fixture(scope="module")
def bystander():
    """The second sandbox, whose round trips measure the host while another one is attacked."""
    with Sandbox() as box:
        box.exec(["true"])
        yield box


def check_responsive(lat: list[float], running: bool) -> None:
    assert running, "the attack was over before the measurement ended: nothing was measured under load"
    assert min(lat) < RESPONSIVE_S, f"host not responsive under attack: {describe_latency(lat)}"


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_fork_bomb(cgroups, bystander, record):
    with Sandbox(limits={"pids": 64}, cgroups=cgroups) as sb:
        how = sb.info["pids_limit"]
        r, lat, running, procs = under_attack(sb, "bomb() { bomb | bomb & }; bomb; sleep 30", bystander,
                                              timeout=1.5, during=lambda: jail_pids(sb))
        deadline = time.monotonic() + 3  # the timeout kills the bomb's whole tree
        while jail_tree(sb) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = len(jail_tree(sb))
        clean = sb.exec("echo clean").stdout == b"clean\n"
    t = next_sandbox_starts()
    record(f"fork bomb ({how})", f"≤ 64 procs; < {RESPONSIVE_S * 1000:.0f} ms; next starts",
           f"{procs} procs; killed at timeout, {left} left; {describe_latency(lat)}; next {t * 1000:.0f} ms")
    check_responsive(lat, running)
    assert procs <= 64 + 3 and r.timed_out and left == 0 and clean


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_memory_bomb(cgroups, bystander, record):
    rss = rss_mb()
    with Sandbox(limits={"memory_mb": 128}, cgroups=cgroups) as sb:
        how = sb.info["memory_limit"]
        bomb = ("for i in $(seq 100); do python3 -c 'x = bytearray(400 << 20); x[::4096] = b\"1\" * len(x[::4096])' "
                ">/dev/null 2>&1; echo $?; done")
        r, lat, running, _ = under_attack(sb, bomb, bystander, timeout=1.5)
        codes = sorted(set(r.stdout_text.split()))
        after = sb.exec("echo ok").stdout
    t = next_sandbox_starts()
    record(f"memory bomb: 400 MiB x N ({how})", "killed/MemoryError; host fine",
           f"exit codes {codes}; {describe_latency(lat)}; host RSS +{rss_mb() - rss:.0f} MiB; next {t * 1000:.0f} ms")
    check_responsive(lat, running)
    assert codes and "0" not in codes and after == b"ok\n"
    assert set(codes) <= ({"137"} if cgroups == "auto" else {"1", "137"}), codes


def test_filling_the_disks(bystander, record):
    lim = {"testbed_mb": 32, "tmp_mb": 32, "overlay_mb": 32}
    places = ("/testbed", "/tmp", "/dev/shm", "/usr/local")  # /usr/local: the copy-on-write root
    with Sandbox(limits=lim) as sb:
        fill = "; ".join(f"dd if=/dev/zero of={d}/fill bs=1M 2>/dev/null" for d in places)
        r, lat, running, _ = under_attack(sb, f"while :; do {fill}; rm -f {' '.join(d + '/fill' for d in places)}; "
                                              "done", bystander, timeout=1.5)
        sizes = run_py(sb, r'''
import errno, json, os
out = {}
for d in %r:
    os.unlink(d + "/fill") if os.path.exists(d + "/fill") else None
for d in %r:
    try:
        with open(d + "/fill2", "wb") as f:
            while True:
                f.write(b"\0" * (1 << 20))
    except OSError as e:
        out[d] = [os.path.getsize(d + "/fill2") >> 20, errno.errorcode[e.errno]]
print(json.dumps(out))
''' % (places, places))
    t = next_sandbox_starts()
    record("fill /testbed, /tmp, /dev/shm, the COW root (32 MiB caps)", "ENOSPC at the cap; host fine",
           f"{ {d.split('/')[-1]: f'{v[0]} MiB {v[1]}' for d, v in sizes.items()} }; {describe_latency(lat)}; "
           f"next {t * 1000:.0f} ms")
    check_responsive(lat, running)
    for d, (mib, err) in sizes.items():
        assert err == "ENOSPC" and mib <= 32, (d, mib, err)


def test_output_flood(bystander, record):
    rss = rss_mb()
    with Sandbox() as sb:
        t0 = time.monotonic()
        r, lat, running, _ = under_attack(sb, "yes flood & yes flood >&2 & wait", bystander, timeout=1.5)
        took = time.monotonic() - t0
        cap = sb.config.limits.output_bytes
    grown = rss_mb() - rss
    t = next_sandbox_starts()
    record("stdout + stderr flood for 1.5 s", f"truncated at {cap >> 20} MiB each; RSS bounded",
           f"{len(r.stdout)} + {len(r.stderr)} bytes kept, truncated {r.truncated}; RSS +{grown:.0f} MiB; "
           f"{describe_latency(lat)}; next {t * 1000:.0f} ms")
    check_responsive(lat, running)
    assert r.truncated and len(r.stdout) == len(r.stderr) == cap and took < 5
    assert grown < 64, f"the controller grew by {grown:.0f} MiB reading a flood"


def test_cpu_spin_past_the_timeout(bystander, record):
    with Sandbox() as sb:
        t0 = time.monotonic()
        r, lat, running, _ = under_attack(sb, "for i in 1 2 3 4; do (while :; do :; done) & done; wait",
                                          bystander, timeout=1.5)
        took = time.monotonic() - t0
        deadline = time.monotonic() + 3
        while jail_tree(sb) and time.monotonic() < deadline:
            time.sleep(0.02)
        left = len(jail_tree(sb))
    t = next_sandbox_starts()
    record("4 CPU spinners past a 1.5 s timeout", "killed at the timeout; nothing left",
           f"exit {r.exit_code} after {took:.2f} s; {left} left; {describe_latency(lat)}; next {t * 1000:.0f} ms")
    check_responsive(lat, running)
    assert r.timed_out and r.exit_code == 124 and took < 4 and left == 0


def test_exhausting_file_descriptors(bystander, record):
    hoard = r'''
import os, time
def hoard():
    fds = []
    try:
        while True:
            fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        return len(fds), e.errno
kids = []
for i in range(30):
    pid = os.fork()
    if pid == 0:
        hoard(); time.sleep(1.2); os._exit(0)
    kids.append(pid)
n, err = hoard()
print(n, err, flush=True)
for k in kids:
    os.waitpid(k, 0)
'''
    with Sandbox(limits={"nofile": 1024}) as sb:
        r, lat, running, _ = under_attack(sb, ["python3", "-c", hoard], bystander, timeout=5)
        n, err = map(int, r.stdout_text.split())
    import os as _os

    fd = _os.open("/dev/null", _os.O_RDONLY)  # the host can still open files
    _os.close(fd)
    t = next_sandbox_starts()
    record("31 processes open files until refused", "EMFILE at RLIMIT_NOFILE; host fine",
           f"{errno.errorcode[err]} after {n} each (~{31 * n} in all); {describe_latency(lat)}; next {t * 1000:.0f} ms")
    check_responsive(lat, running)
    assert err == errno.EMFILE and n < 1024


def test_huge_argv(image_sb, record):
    inside = run_py(image_sb, r'''
import errno, json, os
out = {}
for name, argv in (("one 10 MiB argument", ["/bin/true", "x" * (10 << 20)]),
                   ("a million arguments", ["/bin/true"] + ["xxxxxxx"] * 1000000)):
    pid = os.fork()
    if pid == 0:
        try:
            os.execv(argv[0], argv)
        except OSError as e:
            os._exit(e.errno)
    out[name] = errno.errorcode.get(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), "ran")
print(json.dumps(out))
''')
    outcomes = dict(inside)
    r = image_sb.exec(["/bin/echo", "x" * (4 << 20)])
    outcomes["exec() with a 4 MiB argv"] = f"exit {r.exit_code}: {r.stderr_text.strip()[-24:]}"
    for name, kw in (("exec() with a 20 MiB argv", {"cmd": ["/bin/echo", "x" * (20 << 20)]}),
                     ("exec() with a 20 MiB env", {"cmd": "true", "env": {"X": "y" * (20 << 20)}})):
        try:
            image_sb.exec(kw.pop("cmd"), **kw)
            outcomes[name] = "ran"
        except ConfigError as e:
            outcomes[name] = "ConfigError"
    alive = image_sb.exec("echo alive").stdout == b"alive\n"
    t = next_sandbox_starts()
    record("huge argv/env: execve inside, and through exec()", "E2BIG; 126; ConfigError; jail lives",
           f"{outcomes}; alive {alive}; next sandbox {t * 1000:.0f} ms")
    assert set(inside.values()) == {"E2BIG"}, inside
    assert outcomes["exec() with a 4 MiB argv"].startswith("exit 126") and "too long" in r.stderr_text
    assert outcomes["exec() with a 20 MiB argv"] == outcomes["exec() with a 20 MiB env"] == "ConfigError"
    assert alive
