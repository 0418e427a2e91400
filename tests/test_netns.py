"""Network namespaces made ahead of time for root callers' sandboxes (sandboxlite.network.netns)."""

import os
import socket
import subprocess
import time

import pytest

from sandboxlite import ConfigError, Sandbox, executor
from sandboxlite.jail.host import Host, default_host
from sandboxlite.network import netns

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only a root caller's launcher can join a namespace")
HOST_NET = os.readlink("/proc/self/ns/net")

LOOPBACK_ROUND_TRIP = (
    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "c = socket.create_connection(s.getsockname()); a, _ = s.accept(); c.sendall(b'ping'); print(a.recv(4).decode())"
)


@pytest.mark.parametrize("raw, size", [(None, 4), ("", 4), ("0", 0), ("12", 12), (" 256 ", 256)])
def test_pool_size_from_the_environment(monkeypatch, raw, size):
    if raw is None:
        monkeypatch.delenv("SANDBOXLITE_NETNS_POOL", raising=False)
    else:
        monkeypatch.setenv("SANDBOXLITE_NETNS_POOL", raw)
    assert netns.pool_size() == size


@pytest.mark.parametrize("raw", ["-3", "lots", "1.5", "257", "100000"])
def test_a_bad_pool_size_is_a_config_error_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv("SANDBOXLITE_NETNS_POOL", raw)
    with pytest.raises(ConfigError) as e:
        netns.pool_size()
    assert e.value.field == "SANDBOXLITE_NETNS_POOL" and repr(raw) in str(e.value) and e.value.hint


@root_only
def test_a_bad_setting_stops_a_sandbox_before_it_opens_anything(monkeypatch):
    import psutil

    me = psutil.Process()
    with Sandbox(rootfs="host", network="host"):  # what a first sandbox opens once per process
        pass
    monkeypatch.setenv("SANDBOXLITE_NETNS_POOL", "lots")
    fds, children = me.num_fds(), me.children()
    with pytest.raises(ConfigError, match="SANDBOXLITE_NETNS_POOL"):
        Sandbox(rootfs="host")
    assert me.num_fds() == fds and me.children() == children
    monkeypatch.delenv("SANDBOXLITE_NETNS_POOL")
    with Sandbox(rootfs="host", network="host") as sb:  # no namespace wanted: the setting is not read
        assert sb.exec("true").exit_code == 0


@pytest.fixture
def full_pool():
    pool = default_host().netns  # the pool Sandbox() uses
    if pool is None:
        pytest.fail("SANDBOXLITE_NETNS_POOL=0 is set: these tests need the pool")
    assert pool.wait_ready(pool.size, 10), pool.broken
    assert pool.broken is None
    return pool


@root_only
def test_pool_hands_out_fresh_private_namespaces_with_lo_up(full_pool):
    fds = [full_pool.take() for _ in range(3)]
    try:
        assert None not in fds
        ids = {os.fstat(fd).st_ino for fd in fds}
        assert len(ids) == 3 and os.stat("/proc/self/ns/net").st_ino not in ids
        # each contains lo, up, and nothing else (looked at from a process that joins it)
        for fd in fds:
            out = subprocess.run(
                ["nsenter", f"--net=/proc/{os.getpid()}/fd/{fd}", "cat", "/proc/net/dev", "/sys/class/net/lo/operstate"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            names = [line.split(":")[0].strip() for line in out.splitlines() if ":" in line]
            assert names == ["lo"]
            flags = subprocess.run(["nsenter", f"--net=/proc/{os.getpid()}/fd/{fd}", "cat", "/sys/class/net/lo/flags"],
                                   capture_output=True, text=True, check=True).stdout
            assert int(flags, 16) & 0x1, "lo is down"
    finally:
        for fd in fds:
            if fd is not None:
                os.close(fd)
    # this thread (and the process) stayed in the host's namespace
    assert os.readlink("/proc/self/ns/net") == HOST_NET
    assert os.readlink("/proc/thread-self/ns/net") == HOST_NET


@root_only
def test_a_sandbox_runs_in_a_pooled_namespace_with_a_working_loopback(full_pool):
    made = full_pool.made
    with Sandbox(rootfs="host") as sb:
        assert sb.info["netns"] == "made ahead of time (netns pool)"
        assert "--unshare-net" not in sb.argv
        inside = os.readlink(f"/proc/{sb.executor_pid}/ns/net")
        assert inside != HOST_NET
        r = sb.exec(["python3", "-c", LOOPBACK_ROUND_TRIP])
        assert (r.exit_code, r.stdout) == (0, b"ping\n"), r
        r = sb.exec(["cat", "/proc/net/dev"])
        assert [ln.split(":")[0].strip() for ln in r.stdout.decode().splitlines() if ":" in ln] == ["lo"]
    assert full_pool.wait_ready(full_pool.size, 10) and full_pool.made > made  # refilled


@root_only
def test_starting_a_sandbox_refills_the_pool_and_take_alone_does_not(full_pool):
    """``take`` only hands out (a refill woken then would compete with the start for the GIL);
    the start wakes the refill thread once bwrap runs, so the pool is full again soon after."""
    time.sleep(0.2)  # the refill thread, woken by the fixture's wait_ready(), back asleep
    fd = full_pool.take()
    try:
        time.sleep(0.2)
        assert full_pool.ready() == full_pool.size - 1
    finally:
        os.close(fd)
    full_pool.refill()
    assert _until(lambda: full_pool.ready() == full_pool.size)
    made = full_pool.made
    with Sandbox(rootfs="host") as sb:
        assert sb.info["netns"] == "made ahead of time (netns pool)"
        assert _until(lambda: full_pool.ready() == full_pool.size)  # no wait_ready(): nothing else wakes it
    assert full_pool.made == made + 1


def _until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@root_only
def test_sandboxes_never_share_a_namespace(full_pool):
    """Ten live sandboxes: ten namespaces; one's listening port and abstract socket are not the other's."""
    sbs = [Sandbox(rootfs="host") for _ in range(10)]
    try:
        ids = {os.readlink(f"/proc/{sb.executor_pid}/ns/net") for sb in sbs}
        assert len(ids) == 10 and HOST_NET not in ids
        a, b = sbs[0], sbs[1]
        a.exec("python3 -c \"import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 4321)); s.listen(); "
               "u=socket.socket(socket.AF_UNIX); u.bind('\\0sl-test'); u.listen(); time.sleep(60)\" "
               ">/dev/null 2>&1 &")  # fmt: skip
        probe = ("import socket,sys,time\n"
                 "for i in range(100):\n"
                 "    try: socket.create_connection(('127.0.0.1', 4321), timeout=1).close(); break\n"
                 "    except OSError: time.sleep(0.02)\n"
                 "else: sys.exit(1)\n"
                 "u=socket.socket(socket.AF_UNIX); u.connect('\\0sl-test'); print('reached')\n")  # fmt: skip
        assert a.exec(["python3", "-c", probe], timeout=10).stdout == b"reached\n"
        r = b.exec(["python3", "-c", probe.replace("range(100)", "range(5)")], timeout=10)
        assert r.exit_code != 0 and b"reached" not in r.stdout
    finally:
        for sb in sbs:
            sb.close()


@root_only
def test_the_sandbox_holds_no_power_over_its_pooled_namespace(full_pool):
    with Sandbox(rootfs="host") as sb:
        assert sb.info["netns"].startswith("made ahead")
        down = ("import fcntl,socket,struct\n"
                "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "try: fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', 0)); print('lo down')\n"
                "except OSError as e: print(e.errno)\n")  # fmt: skip
        assert sb.exec(["python3", "-c", down]).stdout == b"1\n"  # EPERM
        r = sb.exec("echo 1 > /proc/sys/net/ipv4/ip_forward")
        assert r.exit_code != 0
        assert sb.exec(["python3", "-c", LOOPBACK_ROUND_TRIP]).stdout == b"ping\n"


@root_only
def test_an_empty_or_disabled_pool_falls_back_to_bwrap():
    host = Host.detect({**os.environ, "SANDBOXLITE_NETNS_POOL": "0"})
    assert host.netns is None
    with Sandbox(rootfs="host", host=host) as sb:
        assert sb.info["netns"] == "made by bwrap" and "--unshare-net" in sb.argv
        assert os.readlink(f"/proc/{sb.executor_pid}/ns/net") != HOST_NET
        assert sb.exec(["python3", "-c", LOOPBACK_ROUND_TRIP]).stdout == b"ping\n"
    empty = Host.detect()
    assert empty.netns.ready() == 0  # a pool that has not filled yet: the start does not wait
    with Sandbox(rootfs="host", host=empty) as sb:
        assert sb.info["netns"] == "made by bwrap" and "--unshare-net" in sb.argv
    with Sandbox(rootfs="host", network="host") as sb:
        assert sb.info["netns"] == "host"
        assert os.readlink(f"/proc/{sb.executor_pid}/ns/net") == HOST_NET


@root_only
def test_a_pool_that_cannot_make_namespaces_says_why_and_hands_out_nothing():
    def refuse():
        raise OSError(1, "unshare(CLONE_NEWNET): Operation not permitted")

    pool = netns.NetnsPool(2, make=refuse)
    assert pool.take() is None
    assert pool.wait_ready(2, 5) and "not permitted" in pool.broken
    assert pool.take() is None


@root_only
def test_launcher_joins_the_namespace_then_drops_privileges(full_pool):
    prog, prefix = executor.launcher()
    fd = full_pool.take()
    try:
        want = os.fstat(fd).st_ino
        r = subprocess.run([str(prog), *prefix[1:], "-n", str(fd), "65534", "65534", "/bin/sh", "-c",
                            "readlink /proc/self/ns/net; ls /proc/self/fd"],
                           capture_output=True, text=True, pass_fds=(fd,))  # fmt: skip
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    link, *open_fds = r.stdout.split()
    assert link == f"net:[{want}]"
    assert str(fd) not in open_fds  # the launcher closed it before bwrap (here: sh) ran
    bad = subprocess.run([str(prog), *prefix[1:], "-n", "99", "65534", "65534", "/bin/true"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 111 and "network namespace" in bad.stderr


@root_only
def test_a_forked_child_starts_with_an_empty_pool_of_its_own(full_pool):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(r)
            child = full_pool  # the parent's pool object, as the fork left it
            ok = child.ready() == 0 and child.wait_ready(1, 10) and child.take() is not None
            os.write(w, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 2)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"ok"
    assert full_pool.wait_ready(full_pool.size, 10)  # ours is untouched
    with socket.socket() as s:  # and this process still talks on the host's network
        s.bind(("127.0.0.1", 0))
