"""isolation="landlock": the attacks a sandbox without namespaces must still lose.

A Landlock sandbox sees the host's own paths and (as a plain caller) runs as the caller's own
uid, so plain permissions protect nothing here: every canary below is readable, writable or
signalable by the sandbox's uid, and only Landlock, the seccomp filter and the executor's
process handling stand in the way.  Run as root (each sandbox a uid of its own, and with
SANDBOXLITE_UID_RANGE=off all sandboxes one uid) and as an unprivileged caller (uid 65534,
the same uid as the host process it attacks)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from sandboxlite import Host, Sandbox, SandboxFileError

from ..helpers_nonroot import (
    NOBODY_GID,
    NOBODY_UID,
    make_nobody_home,
    parse_result,
    run_as_nobody,
    unprivileged_prereqs,
)
from .landlock_attacks import ATTACKS

DENIED = {"EACCES", "EPERM"}


def attack(sb: Sandbox, request: dict) -> dict:
    r = sb.exec(["python3", "-c", ATTACKS], stdin=json.dumps(request), timeout=30)
    assert r.exit_code == 0, (r.stdout_text, r.stderr_text)
    return json.loads(r.stdout_text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def targets():
    """Host things every uid may reach by plain permissions: a world-readable and world-writable
    directory outside the sandbox's paths, a unix socket in it, a TCP and an abstract listener."""
    d = Path(tempfile.mkdtemp(prefix="sl-landlock-canary-", dir="/var/tmp"))
    os.chmod(d, 0o777)
    secret = d / "secret"
    secret.write_text("landlock canary\n")
    os.chmod(secret, 0o666)
    listeners = []
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    listeners.append(tcp)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(d / "sock"))
    os.chmod(d / "sock", 0o777)
    unix.listen(8)
    listeners.append(unix)
    abstract = socket.socket(socket.AF_UNIX)
    name = f"sl-landlock-{os.getpid()}"
    abstract.bind("\0" + name)
    abstract.listen(8)
    listeners.append(abstract)
    yield {"dir": d, "secret": str(secret), "tcp": tcp.getsockname()[1], "unix": str(d / "sock"), "abstract": name}
    for s in listeners:
        s.close()
    shutil.rmtree(d)


@pytest.fixture
def ll():
    with Sandbox(isolation="landlock") as sb:
        yield sb


def test_landlock_host_files(ll, targets, record):
    out = attack(ll, {"read": [targets["secret"], "/root/.bashrc", os.path.expanduser("~/.ssh")],
                      "write": [targets["secret"], str(targets["dir"] / "new"), "/tmp/sl-landlock-new", "/dev/shm/x",
                                "/etc/sl-new", "own"],
                      "symlink": targets["secret"]})  # fmt: skip
    record("read a world-readable host file outside the sandbox", "EACCES", out["read"][targets["secret"]])
    assert out["read"][targets["secret"]] == "EACCES"
    record("write a world-writable host file / dir, /tmp, /dev/shm", "EACCES",
           {k: v for k, v in out["write"].items() if k != "own"})
    assert all(v in DENIED for k, v in out["write"].items() if k != "own"), out["write"]
    assert out["write"]["own"] == "ok" and out["cwd"] == ll.workdir  # its own workdir is writable
    record("read a host file through a symlink planted in the workdir", "EACCES", out["symlink"])
    assert out["symlink"] == "EACCES"
    # the file API runs in the executor's own Landlock domain: the planted link leads nowhere either
    with pytest.raises(SandboxFileError) as e:
        ll.read_file("escape")
    record("the host reads the planted symlink with read_file()", "EACCES", e.value.errno)
    assert e.value.errno == 13
    dst = Path(tempfile.mkdtemp(prefix="sl-landlock-dl-"))
    try:
        with pytest.raises(SandboxFileError):
            ll.download("escape", dst / "got")
        assert not (dst / "got").exists()
    finally:
        shutil.rmtree(dst)
    assert Path(targets["secret"]).read_text() == "landlock canary\n"


def test_landlock_network(ll, targets, record):
    out = attack(ll, {"tcp": targets["tcp"], "udp": "192.0.2.1", "unix": targets["unix"],
                      "abstract": targets["abstract"]})  # fmt: skip
    record("network='none': TCP to a host loopback listener, UDP connect, a host unix socket, an abstract one",
           "EACCES (socket(2) refused)", {k: out[k] for k in ("tcp", "udp", "unix", "abstract")})
    assert {out[k] for k in ("tcp", "udp", "unix", "abstract")} == {"EACCES"}, out
    with Sandbox(isolation="landlock", network="host") as net:
        out = attack(net, {"tcp": targets["tcp"], "abstract": targets["abstract"]})
    # the host's network is the sandbox's (as with namespaces), but abstract sockets stay scoped
    record("network='host': an abstract unix socket of the host", "EPERM (Landlock scope)", out["abstract"])
    assert out["tcp"] == "ok" and out["abstract"] == "EPERM", out


IPC_PROBE = r'''
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, call in (("msgget", lambda: libc.msgget(0x5153, 0o1666)), ("semget", lambda: libc.semget(0x5153, 1, 0o1666)),
                   ("shmget", lambda: libc.shmget(0x5153, 4096, 0o1666)), ("mq_open", lambda: libc.mq_open(b"/slq", 0o100 | 2, 0o666, None))):
    ctypes.set_errno(0)
    r = call()
    out[name] = "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(json.dumps(out))
'''


def test_landlock_no_unscoped_ipc(ll, record):
    """SysV IPC and POSIX message queues go by key or name (no path for Landlock to check), and without an
    IPC namespace they would be every process's of the uid: refused like a kernel without them."""
    r = ll.exec(["python3", "-c", IPC_PROBE])
    out = json.loads(r.stdout_text)
    record("SysV message queue, semaphore, shared memory; a POSIX message queue", "ENOSYS", out)
    assert set(out.values()) == {"ENOSYS"}, out


def test_landlock_between_sandboxes_of_one_uid(targets, record):
    host = Host.detect({**os.environ, "SANDBOXLITE_UID_RANGE": "off"})  # every sandbox one uid
    with Sandbox(isolation="landlock", host=host) as a, Sandbox(isolation="landlock", host=host) as b:
        b.write_file("mine.txt", b"b's file")
        bg = b.exec("sleep 300 >/dev/null 2>&1 & echo $!")
        victim = int(bg.stdout_text.strip())
        assert psutil.Process(victim).uids().real == psutil.Process(a.executor_pid).uids().real
        out = attack(a, {"read": [f"{b.workdir}/mine.txt"], "write": [f"{b.workdir}/planted"],
                         "environ": [victim, a.executor_pid], "kill": [victim, a.executor_pid, b.executor_pid]})
        record("read / write another sandbox's workdir (same uid)", "EACCES",
               [*out["read"].values(), *out["write"].values()])
        assert set(out["read"].values()) | set(out["write"].values()) <= DENIED
        record("signal another sandbox's process, its executor, its own executor (same uid)", "EPERM", out["kill"])
        assert set(out["kill"].values()) == {"EPERM"}, out["kill"]
        record("read /proc/PID/environ of another sandbox's process, of its executor", "EACCES", out["environ"])
        assert set(out["environ"].values()) <= DENIED, out["environ"]
        assert psutil.Process(victim).is_running() and a.exec("true").exit_code == 0


def test_landlock_process_tree_dies(record):
    with Sandbox(isolation="landlock") as sb:
        r = sb.exec("setsid sh -c 'sleep 301 & sleep 302' & sleep 100", timeout=1)
        assert r.timed_out
        time.sleep(0.3)
        left = [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] in (["sleep", "301"], ["sleep", "302"])]
        record("a daemonized process tree at the command's timeout", "all killed", left or "none left")
        assert not left
        sb.exec("nohup sleep 303 >/dev/null 2>&1 & setsid sleep 304 >/dev/null 2>&1 &")
        root = sb.plan.workdir.rsplit("/", 1)[0]
    time.sleep(0.3)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] in (["sleep", "303"], ["sleep", "304"])]
    record("background and setsid processes at close()", "all killed, directories removed",
           f"{left or 'none left'}, {'removed' if not os.path.exists(root) else 'left'}")
    assert not left and not os.path.exists(root)


def test_landlock_reset_follows_no_link(targets, record):
    keep = targets["dir"] / "keep"
    keep.mkdir(exist_ok=True)
    (keep / "f").write_text("host data")
    os.chmod(keep, 0o777)
    with Sandbox(isolation="landlock") as sb:
        r = sb.exec(f"ln -s {keep} link && ln -s {keep}/f flink && mkdir -p locked/deep && touch locked/deep/x "
                    "&& chmod 000 locked && echo data > $TMPDIR/t && echo data > $HOME/h && sleep 300 & sleep 0.2; ls")
        assert "link" in r.stdout_text
        sb.reset()
        listing = sb.exec("ls -A . $TMPDIR $HOME").stdout_text
        record("reset: a symlink to a host dir, a mode-000 dir, TMPDIR and HOME files", "emptied, the link's target untouched",
               f"left: {listing.split()!r}; host file: {(keep / 'f').read_text()!r}")
        assert (keep / "f").read_text() == "host data"
        assert [ln for ln in listing.split() if not ln.endswith(":")] == []


def test_landlock_executor_killed_from_outside(record):
    """The executor SIGKILLed from outside (not close()): its supervisors and commands die with it
    (parent-death signals); what those started is re-parented out of the sandbox, and a root
    caller's close() kills it by the sandbox's own uid.  (A plain caller's sandboxes share its
    uid: there, such grandchildren outlive the executor; SECURITY.md says so.)"""
    if Host.detect().uids is None:
        pytest.skip("needs a root caller's uid range (SANDBOXLITE_UID_RANGE)")
    sb = Sandbox(isolation="landlock")
    try:
        t = threading.Thread(target=lambda: pytest.raises(Exception, sb.exec, "sleep 305; true", timeout=60))
        t.start()
        deadline = time.monotonic() + 5
        while not (cmds := [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "305"]]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(sb.executor_pid, signal.SIGKILL)
        t.join(10)
    finally:
        sb.close()
    time.sleep(0.2)
    left = [p.pid for p in cmds if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    record("the executor killed from outside: a command's child (re-parented out)", "killed at close() by uid",
           left or "none left")
    assert not left


NOBODY_DRIVER = r'''
import json, os, sys
from sandboxlite import Sandbox
req = json.loads(sys.argv[2])
req["environ"] = [os.getpid()]
req["kill"] = [os.getpid()]
with Sandbox(isolation="landlock") as sb, Sandbox(isolation="landlock") as other:
    other.write_file("mine.txt", b"x")
    req["read"].append(other.workdir + "/mine.txt")
    r = sb.exec(["python3", "-c", sys.argv[1]], stdin=json.dumps(req), timeout=30)
    res = {"exit": r.exit_code, "stdout": r.stdout_text, "stderr": r.stderr_text[-2000:], "me": os.getuid()}
print("RESULT " + json.dumps(res))
'''


def test_landlock_unprivileged_caller(targets, record):
    """uid 65534 on the host, as in a container run with --user: the sandbox has the caller's uid,
    so its secrets, its process and its home are reachable by plain permissions."""
    why = unprivileged_prereqs()
    if why:
        pytest.fail(f"cannot run sandboxlite as an unprivileged user here: {why}")
    home = make_nobody_home()
    try:
        secret = home / "secret.txt"
        secret.write_text("nobody's secret")
        os.chown(secret, NOBODY_UID, NOBODY_GID)
        script = home / "driver.py"
        script.write_text(NOBODY_DRIVER)
        req = {"read": [str(secret)], "write": [str(home / "planted"), targets["secret"]], "tcp": targets["tcp"],
               "abstract": targets["abstract"]}  # fmt: skip
        res = parse_result(run_as_nobody(script, [ATTACKS, json.dumps(req)], home))
        assert res["exit"] == 0, res
        out = json.loads(res["stdout"].strip().splitlines()[-1])
        assert out["uid"] == NOBODY_UID == res["me"]  # the caller's own uid: plain permissions allow all below
        record("unprivileged caller: its own secret, another sandbox's file, write its home", "EACCES",
               [*out["read"].values(), *out["write"].values()])
        assert set(out["read"].values()) | set(out["write"].values()) <= DENIED, out
        record("unprivileged caller: signal it, read its /proc/PID/environ (same uid)", "EPERM / EACCES",
               [*out["kill"].values(), *out["environ"].values()])
        assert set(out["kill"].values()) == {"EPERM"} and set(out["environ"].values()) <= DENIED, out
        assert out["tcp"] == "EACCES" and out["abstract"] == "EACCES"
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)
