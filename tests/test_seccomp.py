"""The seccomp filter, checked by making the denied calls inside a real sandbox.

System call numbers are resolved in the test process with pyseccomp; the calls
are made inside the jail by /usr/bin/python3 through ctypes ``syscall()``.
Where the kernel alone would also refuse a call, the probes pick arguments for
which the unfiltered kernel answers with a *different* errno (EINVAL, ENOTTY,
success...), so an EPERM proves that the filter fired.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess

import pyseccomp
import pytest

from sandboxlite import Sandbox, seccomp

from .helpers_nonroot import run_py

ARCH = pyseccomp.system_arch()


def nr(name: str) -> int:
    return pyseccomp.resolve_syscall(ARCH, name)


# A ctypes syscall() helper shared by the probes: sc(nr, *args) -> [return value, errno].
SC = r'''
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(*args):
    args = list(args) + [0] * (6 - len(args))
    ctypes.set_errno(0)
    r = libc.syscall(*[ctypes.c_ulong(a & 0xFFFFFFFFFFFFFFFF) for a in args])
    return [r, ctypes.get_errno() if r == -1 else 0]
'''


@pytest.fixture(scope="module")
def sb():
    with Sandbox(rootfs="host", network="none") as box:
        yield box


# -- the compiled program (no sandbox) ---------------------------------------------------------------------
def test_filter_bytes_valid_and_cached():
    data = seccomp.filter_bytes()
    assert isinstance(data, bytes) and data
    assert len(data) % 8 == 0, "a BPF program is an array of 8-byte instructions"
    assert seccomp.filter_bytes() is data, "filter_bytes() should return the cached program"
    info = seccomp.filter_bytes.cache_info()
    assert info.hits >= 1 and info.currsize == 1


def test_filter_fd_holds_the_program():
    fd = seccomp.filter_fd()
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    assert b"".join(chunks) == seccomp.filter_bytes()


# -- the deny list ------------------------------------------------------------------------------------------
def test_every_denied_syscall_returns_eperm(sb):
    numbers = {name: nr(name) for name in seccomp.DENIED_SYSCALLS}
    numbers = {name: n for name, n in numbers.items() if n >= 0}  # negative: not on this arch
    for core in ("ptrace", "mount", "unshare", "setns", "bpf", "keyctl", "io_uring_setup", "userfaultfd"):
        assert core in numbers, f"{core} did not resolve on {ARCH}"
    script = SC + r'''
out = {name: sc(n) for name, n in json.load(sys.stdin).items()}
print(json.dumps(out))
'''
    res = run_py(sb, script, stdin=json.dumps(numbers))
    assert set(res) == set(numbers)
    wrong = {name: f"returned {r}, errno {errno.errorcode.get(e, e)}" for name, (r, e) in res.items()
             if (r, e) != (-1, errno.EPERM)}
    assert not wrong, f"{len(wrong)} denied syscalls did not fail with EPERM: {wrong}"


def test_filter_fires_before_the_kernel(sb):
    """unshare(0) is a harmless no-op that succeeds without the filter: EPERM is the filter's."""
    res = run_py(sb, SC + f"print(json.dumps(sc({nr('unshare')}, 0)))")
    assert res == [-1, errno.EPERM]


# -- clone and clone3 ---------------------------------------------------------------------------------------
def test_clone3_returns_enosys(sb):
    # without the filter, clone3(NULL, 0) fails with EINVAL
    res = run_py(sb, SC + f"print(json.dumps(sc({nr('clone3')}, 0, 0)))")
    assert res == [-1, errno.ENOSYS]


def test_clone_with_namespace_flags_is_denied(sb):
    flags = dict(seccomp.CLONE_NS_FLAGS)
    flags["none (control)"] = 0
    script = SC + r'''
NR_CLONE = %d
out = {}
for name, flag in json.load(sys.stdin).items():
    r, e = sc(NR_CLONE, flag | 17, 0, 0, 0, 0)  # flags | SIGCHLD, NULL stack: fork-like
    if r == 0:  # we are a child the filter let through: leave at once
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
        out[name] = "created"
    else:
        out[name] = e
print(json.dumps(out))
''' % nr("clone")
    res = run_py(sb, script, stdin=json.dumps(flags))
    assert res.pop("none (control)") == "created", "a plain clone(SIGCHLD) must still work"
    wrong = {name: res[name] for name in seccomp.CLONE_NS_FLAGS if res[name] != errno.EPERM}
    assert not wrong, f"clone with these namespace flags was not refused with EPERM: {wrong}"


def test_fork_and_subprocess_work(sb):
    script = r'''
import json, os, subprocess
pid = os.fork()
if pid == 0:
    os._exit(7)
_, status = os.waitpid(pid, 0)
out = {"fork": os.waitstatus_to_exitcode(status)}
out["subprocess"] = subprocess.run(["sh", "-c", "echo spawned"], capture_output=True, text=True).stdout
print(json.dumps(out))
'''
    assert run_py(sb, script) == {"fork": 7, "subprocess": "spawned\n"}


def test_threads_work(sb):
    script = r'''
import json, threading
from concurrent.futures import ThreadPoolExecutor
results = [None] * 8
def work(i):
    results[i] = sum(range(10000 * (i + 1)))
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with ThreadPoolExecutor(4) as pool:
    pooled = list(pool.map(lambda x: x * x, range(16)))
ok = all(r == sum(range(10000 * (i + 1))) for i, r in enumerate(results)) and pooled[-1] == 225
print(json.dumps("ok" if ok else results))
'''
    assert run_py(sb, script) == "ok"


def test_numpy_with_threads_if_available(sb):
    has_numpy = sb.exec(["python3", "-c", "import numpy"]).exit_code == 0
    if not has_numpy:
        # numpy is not installed for the host's /usr/bin/python3: the thread check above stands alone
        return
    script = r'''
import json, threading
import numpy as np
a = np.random.default_rng(0).random((300, 300))
out = []
def work():
    out.append(float(np.linalg.norm(a @ a)))
ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(len(out) == 4 and len(set(out)) == 1))
'''
    assert run_py(sb, script, timeout=60) is True


# -- ioctl --------------------------------------------------------------------------------------------------
def test_tiocsti_denied(sb):
    script = SC + r'''
import ctypes
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
import fcntl, termios
try:
    fcntl.ioctl(slave, termios.TIOCSTI, b"x")
    out["fcntl_tiocsti"] = "ok"
except OSError as e:
    out["fcntl_tiocsti"] = e.errno
print(json.dumps(out))
''' % nr("ioctl")
    res = run_py(sb, script, stdin="")
    eperm = [-1, errno.EPERM]
    # /dev/null is no tty: without the filter these would be ENOTTY
    assert res["tiocgwinsz_devnull"] == [-1, errno.ENOTTY], "control: the driver answers ENOTTY"
    assert res["tiocsti_fd0"] == eperm, res
    assert res["tiocsti_devnull"] == eperm, res
    assert res["tioclinux_devnull"] == eperm, res
    # on a real terminal TIOCSTI would inject input; the filter refuses it first
    assert res["tiocgwinsz_pty"] == [0, 0], "control: other ioctls on the pty work"
    assert res["tiocsti_pty"] == eperm, res
    assert res["tiocsti_pty_high_bits"] == eperm, "the kernel ignores the upper 32 bits of the request"
    assert res["fcntl_tiocsti"] == errno.EPERM


# -- sockets ------------------------------------------------------------------------------------------------
def test_af_packet_socket_denied(sb):
    script = SC + r'''
import socket
NR_SOCKET = %d
out = {
    "packet_raw": sc(NR_SOCKET, 17, 3, 0),
    "packet_dgram": sc(NR_SOCKET, 17, 2, 0),
    "packet_bad_type": sc(NR_SOCKET, 17, 999, 0),   # unfiltered: EINVAL (type checked first)
    "inet_bad_type": sc(NR_SOCKET, 2, 999, 0),      # control: EINVAL
}
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    out["python_af_packet"] = "ok"
except OSError as e:
    out["python_af_packet"] = e.errno
for fam in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.close()
out["others"] = "ok"
print(json.dumps(out))
''' % nr("socket")
    res = run_py(sb, script)
    assert res["inet_bad_type"] == [-1, errno.EINVAL], "control"
    for key in ("packet_raw", "packet_dgram", "packet_bad_type"):
        assert res[key] == [-1, errno.EPERM], f"{key}: {res[key]}"
    assert res["python_af_packet"] == errno.EPERM
    assert res["others"] == "ok"


def test_af_packet_denied_whatever_the_upper_argument_bits(sb):
    """socket()'s family is an int: the kernel ignores the upper 32 bits of the register.

    A rule that compares all 64 bits (``EQ 17``) is skipped by passing
    ``(1 << 32) | AF_PACKET``; the ioctl rules mask to 32 bits for this reason.
    With an invalid type the unfiltered kernel answers EINVAL, so EPERM here
    can only come from the filter.
    """
    script = SC + f"print(json.dumps(sc({nr('socket')}, (1 << 32) | 17, 999, 0)))"
    res = run_py(sb, script)
    assert res == [-1, errno.EPERM], (
        f"socket((1<<32)|AF_PACKET, ...) returned {res}: the AF_PACKET rule is bypassed by high bits"
    )


# -- other ABIs ---------------------------------------------------------------------------------------------
def test_x32_syscall_kills_the_process(sb):
    script = SC + "print(json.dumps(sc(0x40000000 | 39)))  # x32 getpid"
    r = sb.exec(["python3", "-c", script])
    assert r.signal == signal.SIGSYS, (r.exit_code, r.stdout_text, r.stderr_text)


def test_i386_int80_kills_the_process(sb):
    # mov eax, 20 (i386 getpid); int 0x80; ret -- returns the pid when run unfiltered
    script = r'''
import ctypes, mmap
code = bytes.fromhex("b814000000cd80c3")
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print(fn())
'''
    host = subprocess.run(["/usr/bin/python3", "-c", script], capture_output=True, text=True)
    if host.returncode != 0:  # control: this kernel has no i386 emulation, nothing to filter
        pytest.skip(f"int 0x80 does not work on this host (exit {host.returncode}): no IA32 emulation")
    assert int(host.stdout) > 0, "control: unfiltered, int 0x80 getpid returns a pid"
    r = sb.exec(["python3", "-c", script])
    assert r.signal == signal.SIGSYS, (r.exit_code, r.stdout_text, r.stderr_text)
