"""Attacks on the kernel's less-travelled interfaces: every system call the seccomp filter denies.

System call numbers are resolved in the test process with pyseccomp; the calls
are made inside the jail by python3 through ctypes ``syscall()``.  Where the
kernel alone would also refuse a call, the probes pick arguments for which the
unfiltered kernel answers differently (EINVAL, ENOTTY, success...), so an EPERM
proves that the filter fired; the headline calls are also made on the host
(unfiltered, as the jail's unprivileged uid) to show what the kernel alone says.
"""

from __future__ import annotations

import errno
import json
import signal
import subprocess

import pytest

from sandboxlite.isolation import seccomp

from ..helpers_nonroot import HOST_SYSCTLS
from .helpers import SC, ename, nr, run_py


def test_every_denied_syscall(image_sb, record):
    numbers = {name: nr(name) for name in seccomp.DENIED_SYSCALLS}
    numbers = {name: n for name, n in numbers.items() if n >= 0}  # negative: not on this arch
    for core in ("ptrace", "mount", "unshare", "setns", "bpf", "keyctl", "io_uring_setup", "userfaultfd"):
        assert core in numbers, f"{core} did not resolve"
    script = SC + "print(json.dumps({name: sc(n) for name, n in json.load(sys.stdin).items()}))"
    res = run_py(image_sb, script, stdin=json.dumps(numbers))
    wrong = {name: f"{r}, {ename(e)}" for name, (r, e) in res.items() if (r, e) != (-1, errno.EPERM)}
    record(f"each of the {len(numbers)} denied syscalls (zero args)", "EPERM",
           f"{len(numbers) - len(wrong)}/{len(numbers)} EPERM" + (f"; wrong: {sorted(wrong)}" if wrong else ""))
    assert set(res) == set(numbers) and not wrong, wrong


def test_filter_fires_before_the_kernel(image_sb, record):
    """unshare(0) is a no-op that succeeds without the filter: EPERM is the filter's answer."""
    res = run_py(image_sb, SC + f"print(json.dumps(sc({nr('unshare')}, 0)))")
    record("unshare(0), a no-op for the kernel", "EPERM (the filter)", ename(res[1]))
    assert res == [-1, errno.EPERM]


HEADLINE = SC + r'''
import ctypes
b = lambda n: ctypes.create_string_buffer(n)
uring = b(120)
attr = b(128)
ctypes.memmove(attr, (1).to_bytes(4, "little") + (128).to_bytes(4, "little"), 8)   # PERF_TYPE_SOFTWARE, size
ctypes.memmove(ctypes.addressof(attr) + 40, ((1 << 0) | (1 << 5) | (1 << 6)).to_bytes(8, "little"), 8)
mapattr = b(72)
ktype, kdesc, kdata = ctypes.create_string_buffer(b"user"), ctypes.create_string_buffer(b"x"), b(1)
ctypes.memmove(mapattr, b"".join(x.to_bytes(4, "little") for x in (2, 4, 4, 1)), 16)  # ARRAY, 4, 4, 1 entry
N = json.load(sys.stdin)
calls = {
    "io_uring_setup(8, params)": (N["io_uring_setup"], 8, ctypes.addressof(uring)),
    "userfaultfd(USER_MODE_ONLY)": (N["userfaultfd"], 1 | 0o2000000),
    "bpf(BPF_MAP_CREATE array)": (N["bpf"], 0, ctypes.addressof(mapattr), 72),
    "perf_event_open(sw cpu-clock, self)": (N["perf_event_open"], ctypes.addressof(attr), 0, -1, -1, 0),
    "keyctl(JOIN_SESSION_KEYRING)": (N["keyctl"], 1, 0),
    "add_key(user, process keyring)": (N["add_key"], ctypes.addressof(ktype), ctypes.addressof(kdesc),
                                       ctypes.addressof(kdata), 1, -2),
}
out = {}
for name, args in calls.items():
    r, e = sc(*args)
    out[name] = en(e) if r == -1 else "ok"
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def host_control():
    """The same calls on the host, unfiltered, as the jails' unprivileged uid."""
    from sandboxlite.isolation.identity import run_as

    uid, gid = run_as() or (65534, 65534)
    names = {n: nr(n) for n in ("io_uring_setup", "userfaultfd", "bpf", "perf_event_open", "keyctl", "add_key")}
    p = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "/usr/bin/python3", "-c",
                        HEADLINE], input=json.dumps(names), capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), names


def test_headline_syscalls_with_real_arguments(image_sb, host_control, record):
    host, names = host_control
    res = run_py(image_sb, HEADLINE, stdin=json.dumps(names))
    for call, got in res.items():
        record(call, "EPERM", f"{got} (host, unfiltered: {host[call]})")
    assert set(res.values()) == {"EPERM"}, res
    assert any(v != "EPERM" for v in host.values()), "control: the host refuses all of these by itself"


def test_clone3_and_namespace_flags(image_sb, record):
    flags = dict(seccomp.CLONE_NS_FLAGS)
    flags["none (control)"] = 0
    script = SC + r'''
NR_CLONE, NR_CLONE3 = %d, %d
out = {"clone3": en(sc(NR_CLONE3, 0, 0)[1])}
for name, flag in json.load(sys.stdin).items():
    r, e = sc(NR_CLONE, flag | 17, 0, 0, 0, 0)  # flags | SIGCHLD, NULL stack: fork-like
    if r == 0:
        os._exit(0)
    if r > 0:
        os.waitpid(r, 0)
        out[name] = "created"
    else:
        out[name] = en(e)
import threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
out["threads"] = "ok"
print(json.dumps(out))
''' % (nr("clone"), nr("clone3"))
    res = run_py(image_sb, script, stdin=json.dumps(flags))
    ns = {k: v for k, v in res.items() if k.startswith("CLONE_")}
    record("clone3 (flags hidden in memory)", "ENOSYS: libc falls back to clone", res["clone3"])
    record(f"clone with each of {len(ns)} namespace flags", "EPERM; plain clone and threads work",
           f"{sorted(set(ns.values()))}; plain {res['none (control)']}; threads {res['threads']}")
    assert res["clone3"] == "ENOSYS"
    assert set(ns.values()) == {"EPERM"} and res["none (control)"] == "created" and res["threads"] == "ok", res


def test_unshare_and_nested_namespaces(host_sb, record):
    script = SC + r'''
out = {"unshare(NEWUSER)": en(sc(%d, 0x10000000)[1]), "unshare(NEWNS|NEWNET)": en(sc(%d, 0x40020000)[1]),
       "setns(own mnt ns)": en(sc(%d, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0)[1])}
print(json.dumps(out))
''' % (nr("unshare"), nr("unshare"), nr("setns"))
    res = run_py(host_sb, script)
    r = host_sb.exec("unshare -U true; echo $?; unshare -r true; echo $?; unshare -m true; echo $?; "
                     "bwrap --ro-bind / / true 2>/dev/null; echo $?")
    tools = r.stdout_text.split()
    record("unshare/setns; unshare(1), bwrap inside", "EPERM; tools fail", f"{sorted(set(res.values()))}; "
           f"unshare -U/-r/-m, bwrap exit {tools}")
    assert set(res.values()) == {"EPERM"}, res
    assert tools[:3] == ["1", "1", "1"] and tools[3] != "0", r


def test_mount_family(image_sb, host_sb, record):
    script = SC + r'''
import ctypes
keep = []
def cs(x):
    b = ctypes.create_string_buffer(x.encode()); keep.append(b); return ctypes.addressof(b)
N = json.load(sys.stdin)
out = {
    "mount tmpfs on /tmp": sc(N["mount"], cs("none"), cs("/tmp"), cs("tmpfs"), 0, 0),
    "mount --bind / /tmp": sc(N["mount"], cs("/"), cs("/tmp"), 0, 0x1000, 0),
    "remount / rw": sc(N["mount"], 0, cs("/"), 0, 0x20, 0),
    "umount /proc": sc(N["umount2"], cs("/proc"), 2),
    "chroot /tmp": sc(N["chroot"], cs("/tmp")),
    "pivot_root": sc(N["pivot_root"], cs("/tmp"), cs("/tmp")),
    "fsopen tmpfs": sc(N["fsopen"], cs("tmpfs"), 0),
    "open_tree / clone": sc(N["open_tree"], -100, cs("/"), 1),
}
print(json.dumps({k: en(v[1]) for k, v in out.items()}))
'''
    names = {n: nr(n) for n in ("mount", "umount2", "chroot", "pivot_root", "fsopen", "open_tree")}
    res = run_py(image_sb, script, stdin=json.dumps(names))
    r = host_sb.exec("mount -t tmpfs none /tmp 2>&1; echo rc=$?")  # the host's (setuid) mount(8)
    record("mount/umount/chroot/pivot_root/fsopen/open_tree", "EPERM", f"{sorted(set(res.values()))}; "
           f"mount(8) {r.stdout_text.split()[-1]}")
    assert set(res.values()) == {"EPERM"}, res
    assert r.stdout_text.split()[-1] != "rc=0"


def test_host_sysctls(host_sb, image_sb, record):
    """uid 0 inside is never host root: host-global sysctls (core_pattern names a program the host kernel
    runs as root) cannot even be opened for writing.  The probe only opens, never writes."""
    script = r'''
import errno, json, os, sys
out = {}
for p in json.load(sys.stdin):
    try:
        os.close(os.open(p, os.O_WRONLY)); out[p] = "ok"
    except OSError as e:
        out[p] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
'''
    targets = list(HOST_SYSCTLS) + ["/proc/sysrq-trigger", "/proc/sys/kernel/hostname"]
    for name, box in (("host", host_sb), ("image", image_sb)):
        res = run_py(box, script, stdin=json.dumps(targets))
        record(f"open host sysctls for writing ({name}, {len(res)})", "refused (EACCES/EROFS/ENOENT)",
               sorted(set(res.values())))
        assert "ok" not in res.values(), res


def test_other_abis_kill_the_process(image_sb, record):
    x32 = image_sb.exec(["python3", "-c", SC + "print(json.dumps(sc(0x40000000 | 39)))  # x32 getpid"])
    # mov eax, 20 (i386 getpid); int 0x80; ret -- returns the pid when run unfiltered
    i386 = r'''
import ctypes, mmap
code = bytes.fromhex("b814000000cd80c3")
buf = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(code)
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print(fn())
'''
    host = subprocess.run(["/usr/bin/python3", "-c", i386], capture_output=True, text=True)
    inside = image_sb.exec(["python3", "-c", i386])
    record("x32 syscall; i386 int 0x80", "killed by SIGSYS", f"x32 signal {x32.signal}, i386 signal {inside.signal} "
           f"(host control: int 0x80 {'works' if host.returncode == 0 else 'fails'})")
    assert x32.signal == signal.SIGSYS, x32
    if host.returncode == 0:  # the kernel has IA32 emulation: the filter must stop it
        assert int(host.stdout) > 0 and inside.signal == signal.SIGSYS, inside
    else:  # no IA32 emulation: the call cannot happen at all
        assert inside.exit_code != 0 and inside.signal in (signal.SIGSYS, signal.SIGSEGV, signal.SIGKILL), inside
