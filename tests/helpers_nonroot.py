"""Shared pieces of the isolation tests: the in-sandbox probe, and running
sandboxlite as an unprivileged host user.

``PROBE`` is a Python program run *inside* a sandbox (by /usr/bin/python3 of
the host rootfs).  It reads a JSON request on stdin and prints one JSON line
describing what the jail looks like from inside: credentials, capabilities,
seccomp state, which host paths are visible, what is writable, the network
interfaces and the visible processes.  The root and the non-root tests use
the same probe, so both callers are held to the same standard.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sysconfig
import tempfile
from pathlib import Path


def run_py(box, script: str, stdin: str | None = None, timeout: float = 30) -> dict:
    """Run a Python script inside ``box`` and return the JSON it printed last."""
    r = box.exec(["python3", "-c", script], stdin=stdin, timeout=timeout)
    assert r.exit_code == 0 and not r.timed_out, (
        f"probe failed in the sandbox: exit {r.exit_code} (signal {r.signal})\n"
        f"stdout: {r.stdout_text[-2000:]}\nstderr: {r.stderr_text[-3000:]}"
    )
    return json.loads(r.stdout_text.strip().splitlines()[-1])


NOBODY_UID = 65534
NOBODY_GID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
SRC_DIR = Path(__file__).resolve().parent.parent  # the checkout: sandboxlite/ is at its top

# Host-global sysctls (not namespaced).  Opening one for writing from inside a
# sandbox must fail: kernel.core_pattern / kernel.modprobe name programs the
# host kernel runs as real root.  The probe only *opens* them, never writes.
HOST_SYSCTLS = tuple(
    p for p in (
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/modprobe",  # absent on kernels without module support
        "/proc/sys/vm/swappiness",
        "/proc/sys/kernel/printk",
        "/proc/sys/fs/file-max",
    )
    if os.path.exists(p)
)

PROBE = r'''
import ctypes, errno, json, os, socket, sys

req = json.load(sys.stdin)
tag = req.get("tag", "probe")
out = {}

def status(path):
    fields = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return {k: fields.get(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                                         "NoNewPrivs", "Seccomp", "Uid", "Gid", "NSpid")}

out["status"] = status("/proc/self/status")
out["pid1_status"] = status("/proc/1/status")
with open("/proc/1/cmdline", "rb") as f:
    out["pid1_cmdline"] = f.read().decode("utf-8", "replace")
out["uid"], out["euid"], out["gid"] = os.getuid(), os.geteuid(), os.getgid()
out["hostname"] = socket.gethostname()
out["uname_nodename"] = os.uname().nodename

def try_read(path):
    try:
        with open(path, "rb") as f:
            f.read(1)
        return "READABLE"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

out["shadow"] = try_read("/etc/shadow")
out["hidden"] = {p: {"exists": os.path.lexists(p), "read": try_read(p)} for p in req.get("hidden", [])}
out["home_exists"] = os.path.lexists("/home")
out["root_listing"] = sorted(os.listdir("/root"))
mounts = {}
with open("/proc/self/mountinfo") as f:
    for line in f:
        left, _, right = line.partition(" - ")
        mounts[left.split()[4]] = right.split()[0]
out["mount_fstypes"] = mounts

def try_create(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
        os.unlink(path)  # never leave anything behind, wherever it landed
    return "ok"

def try_mkdir(path):
    try:
        os.mkdir(path)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    os.rmdir(path)
    return "ok"

def try_open_w(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    os.close(fd)  # opened, nothing written
    return "ok"

out["create"] = {d: try_create(f"{d.rstrip('/')}/.{tag}-probe") for d in
                 ("/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/bin",
                  "/testbed", "/tmp", "/root", "/dev/shm")}
out["mkdir"] = {d: try_mkdir(f"{d.rstrip('/')}/.{tag}-dir") for d in ("/", "/usr", "/etc")}
out["open_w"] = {p: try_open_w(p) for p in ["/etc/passwd", "/usr/bin/env"] + req.get("sysctls", [])}

with open("/proc/net/dev") as f:
    out["ifaces"] = sorted(l.split(":")[0].strip() for l in f.readlines()[2:] if ":" in l)
out["sys_exists"] = os.path.lexists("/sys")
out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())

libc = ctypes.CDLL(None, use_errno=True)
ctypes.set_errno(0)
r = libc.unshare(0x10000000)  # CLONE_NEWUSER
out["unshare_user"] = [r, ctypes.get_errno()]
print(json.dumps(out))
'''

# Forks sleeping children until fork fails (or a safety cap is hit), inside a sandbox.
FORK_LOOP = r'''
import os, time, errno, json, signal
pids, err = [], None
for i in range(int(os.environ.get("FORK_CAP", "300"))):
    try:
        pid = os.fork()
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e.errno))
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.kill(p, signal.SIGKILL)
for p in pids:
    os.waitpid(p, 0)
print(json.dumps({"forked": len(pids), "error": err}))
'''

# Run by /usr/bin/python3 as the unprivileged user: opens sandboxes, runs the probes.
NOBODY_DRIVER = r'''
import json, os, sys
import sandboxlite
from sandboxlite import Sandbox
probe, fork_loop, request = sys.argv[1], sys.argv[2], sys.argv[3]
out = {"host_uid": os.getuid(), "host_euid": os.geteuid(), "sandboxlite_file": sandboxlite.__file__}
with Sandbox(rootfs="host") as sb:
    r = sb.exec(["python3", "-c", probe], stdin=request, timeout=60)
    out["probe"] = {"exit": r.exit_code, "stdout": r.stdout_text, "stderr": r.stderr_text}
    with open(f"/proc/{sb.executor_pid}/status") as f:
        out["executor_host_status"] = {k: v.strip() for k, _, v in (l.partition(":") for l in f)}
with Sandbox(rootfs="host", limits={"pids": 32}) as sb:
    out["pids_info"] = sb.info["pids_limit"]
    r = sb.exec(["python3", "-c", fork_loop], timeout=60)
    out["fork"] = {"exit": r.exit_code, "stdout": r.stdout_text, "stderr": r.stderr_text}
    r = sb.exec("echo alive", timeout=30)
    out["after_fork"] = {"exit": r.exit_code, "stdout": r.stdout_text, "stderr": r.stderr_text}
print("RESULT " + json.dumps(out))
'''


def site_dirs() -> list[str]:
    """The site-packages of the interpreter running the tests (sandboxlite's dependencies)."""
    paths = sysconfig.get_paths()
    dirs = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    out: list[str] = []
    for d in dirs:
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def nobody_pythonpath() -> str:
    return os.pathsep.join([str(SRC_DIR), *site_dirs()])


def make_nobody_home() -> Path:
    """A temp dir owned by the unprivileged user (its SANDBOXLITE_HOME and HOME)."""
    d = Path(tempfile.mkdtemp(prefix="sandboxlite-nobody-"))
    os.chown(d, NOBODY_UID, NOBODY_GID)
    os.chmod(d, 0o700)
    return d


def unprivileged_prereqs() -> str | None:
    """Why the unprivileged run cannot happen here, or None."""
    if os.geteuid() != 0:
        return "the tests must run as root to switch to an unprivileged user (uid 65534)"
    if not shutil.which("setpriv"):
        return "setpriv (util-linux) is not installed"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"{SYSTEM_PYTHON} is missing (the unprivileged run needs the system Python)"
    return None


def run_as_nobody(script: Path, args: list[str], home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    argv = [
        "setpriv", f"--reuid={NOBODY_UID}", f"--regid={NOBODY_GID}", "--clear-groups",
        SYSTEM_PYTHON, str(script), *args,
    ]  # fmt: skip
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "SANDBOXLITE_HOME": str(home),
        "PYTHONPATH": nobody_pythonpath(),
        "LANG": "C.UTF-8",
    }
    return subprocess.run(argv, env=env, cwd=str(home), capture_output=True, text=True, timeout=timeout)


def parse_result(proc: subprocess.CompletedProcess) -> dict:
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(
        f"the unprivileged run printed no result (exit {proc.returncode})\n"
        f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
