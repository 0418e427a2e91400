"""Attacks on processes: PID 1, the host's processes, privileges, the terminal, the pid space."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sandboxlite import Sandbox

from ..conftest import alive
from ..helpers_nonroot import FORK_LOOP
from .helpers import SC, next_sandbox_starts, nr, run_py

ZERO_CAPS = "0000000000000000"


def test_ptrace_pid_1(image_sb, record):
    script = SC + r'''
import ctypes
out = {"attach 1": sc(%d, 16, 1), "seize 1": sc(%d, 0x4206, 1, 0, 0), "traceme": sc(%d, 0)}
buf = ctypes.create_string_buffer(64)
iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 64)
out["process_vm_readv 1"] = sc(%d, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0)
pid = os.fork()
if pid == 0:
    import time; time.sleep(5); os._exit(0)
out["attach own child"] = sc(%d, 16, pid)
os.kill(pid, 9); os.waitpid(pid, 0)
print(json.dumps({k: en(v[1]) for k, v in out.items()}))
''' % (nr("ptrace"), nr("ptrace"), nr("ptrace"), nr("process_vm_readv"), nr("ptrace"))
    res = run_py(image_sb, script)
    record("ptrace/process_vm_readv PID 1 (and own child)", "EPERM", sorted(set(res.values())))
    assert set(res.values()) == {"EPERM"}, res


def test_pid_1_memory_and_secrets(image_sb, record):
    """PID 1 is not dumpable: its memory, environment, maps and descriptors are closed to commands
    (the fd *numbers* can be listed: the directory belongs to the same uid)."""
    script = r'''
import errno, json, os
def en(e): return errno.errorcode.get(e.errno, str(e.errno))
out = {}
for p in ["/proc/1/mem", "/proc/1/environ", "/proc/1/maps", "/proc/1/auxv", "/proc/1/stack", "/proc/1/syscall"]:
    try:
        with open(p, "rb") as f:
            f.read(1); out[p] = "ok"
    except OSError as e:
        out[p] = en(e)
for n in os.listdir("/proc/1/fd"):
    for what, fn in (("readlink", os.readlink), ("open", lambda p: os.close(os.open(p, os.O_RDONLY)))):
        try:
            fn(f"/proc/1/fd/{n}"); out[f"{what} fd {n}"] = "ok"
        except OSError as e:
            out[f"{what} fd {n}"] = en(e)
print(json.dumps(out))
'''
    res = run_py(image_sb, script)
    fds = sorted({k.split()[-1] for k in res if " fd " in k}, key=int)
    record(f"read /proc/1/mem, environ, maps; open its {len(fds)} fds", "EACCES/EPERM", sorted(set(res.values())))
    assert set(res.values()) <= {"EACCES", "EPERM"}, res
    assert "3" in fds or len(fds) >= 3, fds  # the control socket is among them


def test_signals_to_pid_1(image_sb, record):
    before = image_sb.executor_pid
    r = image_sb.exec("for s in KILL STOP TERM INT HUP SEGV USR1; do kill -$s 1; echo $?; done", timeout=10)
    time.sleep(0.05)
    status = psutil.Process(before).status()
    answers = image_sb.exec("echo alive").stdout == b"alive\n"
    record("kill -KILL/-STOP/-TERM... PID 1", "ignored; sandbox answers", f"kill rc {r.stdout_text.split()}, "
           f"executor {status}, answers {answers}")
    assert status not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE) and answers


@pytest.fixture
def host_sleeper(image_sb):
    """A host process running as the jail's own host uid: only the PID namespace protects it."""
    from sandboxlite.isolation.identity import run_as

    uid, gid = image_sb.info["host_uid"], (run_as() or (os.getuid(), os.getgid()))[1]
    marker = "host-sleeper-" + secrets.token_hex(4)
    p = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                          sys.executable, "-c", "import time; time.sleep(60)", marker])
    deadline = time.monotonic() + 5
    while psutil.Process(p.pid).uids().real != uid or marker not in " ".join(psutil.Process(p.pid).cmdline()):
        assert time.monotonic() < deadline, "the host sleeper did not start"
        time.sleep(0.01)
    yield p
    p.kill()
    p.wait()


def test_signals_to_host_processes(image_sb, host_sleeper, record):
    hp = host_sleeper.pid
    script = SC + r'''
hp = int(sys.argv[1])
out = {"kill host pid": sc(%d, hp, 9), "pidfd_open host pid": sc(%d, hp, 0), "kill host pid 0": sc(%d, hp, 0)}
print(json.dumps({k: en(v[1]) for k, v in out.items()}))
''' % (nr("kill"), nr("pidfd_open"), nr("kill"))
    r = image_sb.exec(["python3", "-c", script, str(hp)])
    res = json.loads(r.stdout_text.strip().splitlines()[-1])
    # then the broadest signal there is: kill -9 -1 (everything the caller may signal)
    r2 = image_sb.exec("kill -9 -1; sleep 1", timeout=10)
    time.sleep(0.05)
    survived = alive(hp)
    usable = image_sb.exec("echo alive").stdout == b"alive\n"
    record("kill/pidfd_open a host pid of the same uid; kill -9 -1", "ESRCH; host process lives",
           f"{sorted(set(res.values()))}; kill -1 exit {r2.exit_code}; host alive {survived}; sandbox ok {usable}")
    assert set(res.values()) == {"ESRCH"}, res
    assert survived and usable and psutil.Process(hp).uids().real == psutil.Process(image_sb.executor_pid).uids().real


def test_host_processes_are_invisible(image_sb, host_sleeper, record):
    marker = " ".join(psutil.Process(host_sleeper.pid).cmdline())
    script = r'''
import json, os
procs = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                procs[p] = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            pass
print(json.dumps(procs))
'''
    procs = run_py(image_sb, script)
    me = " ".join(psutil.Process().cmdline())
    host_init = Path("/proc/1/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    visible = [c for c in procs.values() if c in (marker, me) or (c == host_init and c)]
    record(f"list processes ({len(procs)} visible)", "only the sandbox's own", visible or "none of the host's")
    assert 1 <= len(procs) <= 8 and not visible, procs


def test_setuid_binaries(host_dir_factory, image_sb, record):
    """A setuid-root program (a copy of cat) handed in through a mount cannot read a root-only file."""
    from sandboxlite.isolation.identity import run_as

    d = host_dir_factory("sandboxlite-setuid-")
    shutil.copy2("/usr/bin/cat", d / "suid-cat")
    os.chown(d / "suid-cat", 0, 0)
    os.chmod(d / "suid-cat", 0o4755)
    token = "setuid-" + secrets.token_hex(6)
    (d / "root-only").write_text(token)
    os.chmod(d / "root-only", 0o600)
    uid, gid = run_as() or (65534, 65534)
    control = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                              str(d / "suid-cat"), str(d / "root-only")], capture_output=True, text=True)
    assert control.stdout == token, f"control: setuid does not work on the host here ({control.stderr})"
    with Sandbox(rootfs="host", mounts=[f"{d}:/suid:ro"]) as box:
        r = box.exec("/suid/suid-cat /suid/root-only; echo rc=$?; grep -E '^(Uid|CapEff|NoNewPrivs)' /proc/self/status")
    found = image_sb.exec("find / -xdev -perm /6000 -type f 2>/dev/null | wc -l").stdout_text.strip()
    record("setuid-root binary reads a root-only host file", "Permission denied (NNP, nosuid)",
           f"{r.stdout_text.splitlines()[0][:40]} (host control: read ok); setuid files in image: {found}")
    assert token not in r.stdout_text and "rc=1" in r.stdout_text, r
    assert found == "0"


def test_capabilities(image_sb, record):
    script = SC + r'''
out = {}
with open("/proc/self/status") as f:
    st = dict(l.rstrip("\n").split(":\t", 1) for l in f if ":\t" in l)
out["caps"] = sorted({st[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")})
open("/tmp/mode000", "w").write("x"); os.chmod("/tmp/mode000", 0)
try:
    open("/tmp/mode000").read(); out["read mode-000 file (DAC_OVERRIDE)"] = "ok"
except OSError as e:
    out["read mode-000 file (DAC_OVERRIDE)"] = en(e.errno)
for name, fn in (("chown to uid 0:1000 (CHOWN)", lambda: os.chown("/tmp/mode000", 0, 1000)),
                 ("setuid(1000) (SETUID)", lambda: os.setuid(1000)),
                 ("setgroups (SETGID)", lambda: os.setgroups([1, 2])),
                 ("nice -10 (SYS_NICE)", lambda: os.setpriority(os.PRIO_PROCESS, 0, -10)),
                 ("raise RLIMIT_NOFILE hard (SYS_RESOURCE)", lambda: __import__("resource").setrlimit(7, (1 << 20, 1 << 20)))):
    try:
        fn(); out[name] = "ok"
    except OSError as e:
        out[name] = en(e.errno)
    except ValueError as e:
        out[name] = "ValueError"
print(json.dumps(out))
'''
    res = run_py(image_sb, script)
    caps = res.pop("caps")
    record("capability sets; 6 ops needing a capability", "all empty; EPERM/EACCES/EINVAL",
           f"caps {caps}; {sorted(set(res.values()))}")
    assert caps == [ZERO_CAPS], caps
    assert not [k for k, v in res.items() if v == "ok"], res


def test_no_new_privs(image_sb, record):
    script = SC + r'''
PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 38, 39
print(json.dumps({"get": sc(%d, PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)[0], "clear": en(sc(%d, PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0)[1]),
                  "seccomp": open("/proc/self/status").read().split("Seccomp:")[1].split()[0]}))
''' % (nr("prctl"), nr("prctl"))
    res = run_py(image_sb, script)
    record("clear no_new_privs", "set, cannot be cleared", f"NoNewPrivs {res['get']}, clear {res['clear']}, "
           f"Seccomp mode {res['seccomp']}")
    assert res == {"get": 1, "clear": "EINVAL", "seccomp": "2"}, res


def test_tiocsti_and_the_terminal(image_sb, record):
    script = SC + r'''
import ctypes, fcntl, termios
NR_IOCTL = %d
TIOCSTI, TIOCLINUX, TIOCGWINSZ = 0x5412, 0x541C, 0x5413
buf = ctypes.create_string_buffer(b"x", 16)
p = ctypes.addressof(buf)
null = os.open("/dev/null", os.O_RDWR)
master, slave = os.openpty()
out = {
    "tiocsti_fd0": sc(NR_IOCTL, 0, TIOCSTI, p),
    "tiocsti_devnull": sc(NR_IOCTL, null, TIOCSTI, p),
    "tiocsti_pty": sc(NR_IOCTL, slave, TIOCSTI, p),
    "tiocsti_pty_high_bits": sc(NR_IOCTL, slave, 0xFFFFFFFF00000000 | TIOCSTI, p),
    "tioclinux_devnull": sc(NR_IOCTL, null, TIOCLINUX, p),
    "tiocgwinsz_devnull": sc(NR_IOCTL, null, TIOCGWINSZ, p),
    "tiocgwinsz_pty": sc(NR_IOCTL, slave, TIOCGWINSZ, p),
}
try:
    fcntl.ioctl(slave, termios.TIOCSTI, b"x"); out["fcntl_tiocsti"] = [0, 0]
except OSError as e:
    out["fcntl_tiocsti"] = [-1, e.errno]
try:
    os.open("/dev/tty", os.O_RDWR); out["open /dev/tty"] = [0, 0]
except OSError as e:
    out["open /dev/tty"] = [-1, e.errno]
print(json.dumps({k: en(v[1]) for k, v in out.items()}))
''' % nr("ioctl")
    res = run_py(image_sb, script, stdin="")
    record("TIOCSTI/TIOCLINUX into a terminal; open /dev/tty", "EPERM; no controlling tty",
           f"TIOCSTI {res['tiocsti_pty']} (high bits {res['tiocsti_pty_high_bits']}), /dev/tty {res['open /dev/tty']}")
    assert res["tiocgwinsz_devnull"] == "ENOTTY" and res["tiocgwinsz_pty"] == "ok", "controls"
    for key in ("tiocsti_fd0", "tiocsti_devnull", "tiocsti_pty", "tiocsti_pty_high_bits", "tioclinux_devnull",
                "fcntl_tiocsti"):
        assert res[key] == "EPERM", (key, res)
    assert res["open /dev/tty"] == "ENXIO", "a command has a controlling terminal"


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_pid_exhaustion(cgroups, record):
    with Sandbox(limits={"pids": 64}, cgroups=cgroups) as box:
        how = box.info["pids_limit"]
        r = box.exec(["python3", "-c", FORK_LOOP], env={"FORK_CAP": "400"}, timeout=60)
        res = json.loads(r.stdout_text.strip().splitlines()[-1])
        after = box.exec("echo alive").stdout
    host_ok = subprocess.run(["true"]).returncode == 0
    t = next_sandbox_starts()
    record(f"fork until the pid space runs out ({how})", "EAGAIN below the limit; host fine",
           f"{res['error']} after {res['forked']} forks; host fork ok {host_ok}; next sandbox {t * 1000:.0f} ms")
    assert res["error"] == "EAGAIN" and 1 <= res["forked"] < 64, res
    assert after == b"alive\n" and host_ok
