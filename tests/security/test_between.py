"""Between sandboxes: what one sandbox takes must not be taken from another, nor from the next
episode of the same one (hardening round 2)."""

from __future__ import annotations

import json
import os
import time

import pytest

from sandboxlite import Limits, Sandbox

from .helpers import SC, nr, run_py

# Open pseudo-terminals (the master side only: one descriptor each) until the kernel refuses.
PTY_HOG = r"""
import errno, json, os, time
fds, err = [], "ok"
while len(fds) < 900:
    try:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno)); break
print(json.dumps({"opened": len(fds), "err": err}), flush=True)
time.sleep(float(os.environ.get("HOLD", "0")))
"""


def test_a_sandbox_holds_at_most_limits_ptys_ptys(record):
    """Every devpts instance but the host's first draws on one kernel.pty.max (4096 less 1024
    reserved): without a cap one sandbox took 3071 of 3072 and every other got none."""
    with Sandbox(rootfs="host", limits=Limits(ptys=6)) as sb:
        res = run_py(sb, PTY_HOG)
    record("open ptys until refused, ptys=6", "6 opened, then ENOSPC", res)
    assert res == {"opened": 6, "err": "ENOSPC"}
    with Sandbox(rootfs="host") as sb:  # the default
        res = run_py(sb, PTY_HOG)
    assert res == {"opened": Limits().ptys, "err": "ENOSPC"}


def test_ptys_held_by_one_sandbox_leave_the_others_theirs(record):
    with Sandbox(rootfs="host") as hog, Sandbox(rootfs="host") as other:
        with hog.shell() as sh:
            sh.run("HOLD=30 python3 -c '%s' > /tmp/hog.json &" % PTY_HOG.replace("'", "'\\''"))
            hogged = sh.run("for i in $(seq 100); do [ -s /tmp/hog.json ] && break; sleep 0.05; done; cat /tmp/hog.json")
            res = run_py(other, "import json, os; m, s = os.openpty(); print(json.dumps({'pty': os.ttyname(s)}))")
    record("one sandbox holds all its ptys; another opens one", "the other gets a pty", (hogged.stdout, res))
    assert b'"err": "ENOSPC"' in hogged.stdout
    assert res["pty"].startswith("/dev/pts/")


def test_native_aio_is_not_offered(image_sb, record):
    """io_setup draws on fs.aio-max-nr, one budget for the whole machine: one sandbox took all of
    it and io_setup then failed for root on the host.  ENOSYS, as on a kernel without AIO."""
    script = SC + r'''
import ctypes
ctx = ctypes.c_ulong(0)
print(json.dumps({"io_setup": en(sc(%d, 64, ctypes.addressof(ctx))[1])}))
''' % nr("io_setup")
    res = run_py(image_sb, script)
    record("io_setup(64)", "ENOSYS", res["io_setup"])
    assert res["io_setup"] == "ENOSYS"


@pytest.mark.parametrize("network", ["none", "host"])
def test_no_vsock_sockets(network, record):
    """AF_VSOCK's port space is the VM's, whatever the network namespace."""
    script = r"""
import errno, json, socket
out = {}
for name, kind in (("stream", socket.SOCK_STREAM), ("dgram", socket.SOCK_DGRAM)):
    try:
        s = socket.socket(40, kind)
        s.bind((0xFFFFFFFF, 47123))
        out[name] = "bound"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""
    with Sandbox(rootfs="host", network=network) as sb:
        res = run_py(sb, script)
    record(f"socket(AF_VSOCK) and bind, network={network}", "EAFNOSUPPORT", res)
    assert res == {"stream": "EAFNOSUPPORT", "dgram": "EAFNOSUPPORT"}


PLANT_IPC = r"""
import ctypes, json, os, subprocess
rt = ctypes.CDLL("librt.so.1", use_errno=True)
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shm = libc.shmget(0x5EC12E7, 1 << 20, 0o1000 | 0o600)  # IPC_CREAT
addr = libc.shmat(shm, None, 0)
ctypes.memmove(addr, b"the secret of episode 1", 23)
libc.shmdt(ctypes.c_void_p(addr))  # detached: lives on by itself
msq = libc.msgget(0x5EC12E8, 0o1000 | 0o600)
mq = rt.mq_open(b"/secret", os.O_CREAT | os.O_RDWR, 0o600, None)
print(json.dumps({"shm": shm, "msq": msq, "mq": mq}))
"""

LOOK_FOR_IPC = r"""
import ctypes, errno, json, os, subprocess
rt = ctypes.CDLL("librt.so.1", use_errno=True)
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x5EC12E7, 0, 0)
shm_err = ctypes.get_errno()
msq = libc.msgget(0x5EC12E8, 0)
msq_err = ctypes.get_errno()
mq = rt.mq_open(b"/secret", os.O_RDONLY, 0, None)
mq_err = ctypes.get_errno()
ipcs = subprocess.run(["ipcs", "-m", "-q"], capture_output=True, text=True).stdout
print(json.dumps({"shm": errno.errorcode.get(shm_err) if shm < 0 else "found",
                  "msq": errno.errorcode.get(msq_err) if msq < 0 else "found",
                  "mq": errno.errorcode.get(mq_err) if mq < 0 else "found",
                  "ipcs_ids": [l.split()[1] for l in ipcs.splitlines() if l.startswith("0x")]}))
"""


def test_reset_leaves_no_ipc_object_for_the_next_episode(record):
    """SysV shared memory and message queues and POSIX message queues of one episode were there
    for the next after reset() (a planted secret was read; the memory stayed charged)."""
    with Sandbox(rootfs="host") as sb:
        planted = run_py(sb, PLANT_IPC)
        assert min(planted.values()) >= 0, planted
        before = run_py(sb, LOOK_FOR_IPC)
        assert (before["shm"], before["msq"], before["mq"]) == ("found", "found", "found"), before
        sb.reset()
        after = run_py(sb, LOOK_FOR_IPC)
        record("plant SysV shm + msg queue + POSIX mq, reset(), look again", "all ENOENT", after)
        assert (after["shm"], after["msq"], after["mq"]) == ("ENOENT", "ENOENT", "ENOENT")
        assert after["ipcs_ids"] == []
        # and the sandbox's IPC still works in the new episode
        assert min(run_py(sb, PLANT_IPC).values()) >= 0


def test_a_pool_release_leaves_no_ipc_object_either(record):
    from sandboxlite import SandboxPool

    with SandboxPool(size=1, rootfs="host") as pool:
        with pool.sandbox() as sb:
            run_py(sb, PLANT_IPC)
        with pool.sandbox() as sb:
            after = run_py(sb, LOOK_FOR_IPC)
    record("plant IPC objects, release to the pool, acquire", "all ENOENT", after)
    assert (after["shm"], after["msq"], after["mq"]) == ("ENOENT", "ENOENT", "ENOENT")


UEVENT_LISTENER = r"""
import json, socket, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)  # NETLINK_KOBJECT_UEVENT
s.bind((0, 1))
s.settimeout(float(sys.argv[1]))
print("listening", flush=True)
try:
    got = s.recv(8192).split(b"\0")[0].decode(errors="replace")
except socket.timeout:
    got = None
print(json.dumps({"event": got}), flush=True)
"""


def _trigger_host_uevent() -> None:
    with open("/sys/class/mem/null/uevent", "w") as f:  # a "change" event for /dev/null: harmless
        f.write("change")


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces made ahead of time are a root caller's (netns.py)")
def test_a_sandbox_hears_no_host_device_events(record):
    """A network namespace owned by the host's initial user namespace receives the host's
    uevents: the pool's namespaces are owned by a user namespace of their own."""
    from sandboxlite.jail.host import default_host

    pool = default_host().netns
    assert pool is not None and pool.wait_ready(1, 10), "the netns pool is off or broken"
    with Sandbox(rootfs="host") as sb:
        assert sb.info["netns"] == "made ahead of time (netns pool)"
        proc = sb.jail.spawn(["python3", "-c", UEVENT_LISTENER, "3"])
        try:
            ready = os.read(proc.out_r, 100)
            assert ready == b"listening\n", ready
            for _ in range(5):
                _trigger_host_uevent()
                time.sleep(0.05)
            out = os.read(proc.out_r, 8192)
        finally:
            proc.close()
    record("NETLINK_KOBJECT_UEVENT socket while the host changes /dev/null", "no event", out)
    assert json.loads(out) == {"event": None}


MEMFD = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
try:
    fd = os.memfd_create("x")
    os.ftruncate(fd, 1 << 20)
    out["memfd"] = "ok"
except OSError as e:
    out["memfd"] = errno.errorcode[e.errno]
r = libc.shmget(0, 1 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
out["shmget"] = "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(out))
"""


def test_uncounted_memory_is_offered_only_where_a_cgroup_counts_it(record):
    """The pages of a memfd or a detached SysV segment are in no address space: with cgroups off
    RLIMIT_AS missed them (5 GiB held under a 1 GiB limit)."""
    with Sandbox(rootfs="host", cgroups="off") as sb:
        off = run_py(sb, MEMFD)
    with Sandbox(rootfs="host", cgroups="required") as sb:
        on = run_py(sb, MEMFD)
    with Sandbox(rootfs="host", cgroups="off", limits=Limits(memory_mb=None)) as sb:
        unlimited = run_py(sb, MEMFD)  # no limit to get around
    record("memfd_create, shmget: cgroups off / on / off without a memory limit", "ENOSYS / ok / ok",
           (off, on, unlimited))  # fmt: skip
    assert off == {"memfd": "ENOSYS", "shmget": "ENOSYS"}
    assert on == unlimited == {"memfd": "ok", "shmget": "ok"}


INOTIFY_HOG = r"""
import ctypes, errno, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 1000:
    fd = libc.inotify_init1(0o2000000)  # IN_CLOEXEC
    if fd < 0:
        err = errno.errorcode[ctypes.get_errno()]
        break
    fds.append(fd)
print(json.dumps({"instances": len(fds), "then": err}), flush=True)
time.sleep(float(sys.argv[1]))
"""

ONE_INOTIFY = r"""
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
print(json.dumps({"inotify": "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()]}))
"""


def _hold(sb: Sandbox, script: str, *args: str) -> bytes:
    """Run ``script`` in the background of ``sb`` and return the first line it prints."""
    proc = sb.jail.spawn(["python3", "-c", script, *args])
    line = b""
    deadline = time.monotonic() + 20
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        chunk = os.read(proc.out_r, 4096)
        if not chunk:
            break
        line += chunk
    proc.close()
    return line


@pytest.mark.skipif(os.geteuid() != 0, reason="a root caller's sandboxes each get a host uid (slots.py)")
def test_per_uid_kernel_budgets_are_each_sandbox_s_own(record):
    """inotify instances are counted per host uid across user namespaces: one sandbox that took
    its whole budget made every other's file watchers fail (and likewise RLIMIT_NPROC's count)."""
    with Sandbox(rootfs="host") as hog, Sandbox(rootfs="host") as other:
        uids = hog.info["host_uid"], other.info["host_uid"]
        held = json.loads(_hold(hog, INOTIFY_HOG, "30"))
        assert held["then"] == "EMFILE" and held["instances"] > 0, held
        res = run_py(other, ONE_INOTIFY)
        # processes: the hog keeps 400 alive (its cgroup allows 512); the other must get 200
        hog.exec("for i in $(seq 400); do sleep 60 & done; true", timeout=60)
        forks = other.exec("n=0; for i in $(seq 200); do sleep 60 & n=$((n+1)); done 2>/dev/null; echo $n", timeout=60)
    record("one sandbox takes all its inotify instances and 400 processes; another starts one and 200",
           "the other gets both", (held, res, forks.stdout))  # fmt: skip
    assert res == {"inotify": "ok"}
    assert forks.stdout == b"200\n" and b"fork" not in forks.stderr, forks
    assert uids[0] != uids[1]


DEV_WATCH = r"""
import ctypes, json, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0o4000)  # IN_NONBLOCK
assert libc.inotify_add_watch(fd, b"/dev/null", 0x1 | 0x2 | 0x20) >= 0  # ACCESS | MODIFY | OPEN
print("watching", flush=True)
time.sleep(float(sys.argv[1]))
n = 0
while True:
    try:
        n += len(os.read(fd, 65536)) // 16
    except BlockingIOError:
        break
print(json.dumps({"events": n}), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the ready-made /dev is a root caller's (devnodes.py)")
def test_one_sandbox_cannot_watch_another_s_dev_null(record):
    with Sandbox(rootfs="host") as watcher, Sandbox(rootfs="host") as other:
        proc = watcher.jail.spawn(["python3", "-c", DEV_WATCH, "1.5"])
        try:
            assert os.read(proc.out_r, 100) == b"watching\n"
            other.exec("for i in $(seq 50); do echo x > /dev/null; done")
            out = b""
            while not out.endswith(b"\n"):
                chunk = os.read(proc.out_r, 4096)
                if not chunk:
                    break
                out += chunk
        finally:
            proc.close()
    record("inotify on /dev/null while another sandbox writes it 50 times", "no event", out)
    assert json.loads(out) == {"events": 0}
