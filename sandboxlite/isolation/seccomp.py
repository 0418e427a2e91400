"""The seccomp filter every sandbox runs under, built with pyseccomp.

Default allow, with a deny list of the kernel interfaces a sandboxed program
has no business touching (the attack surface of most container escapes).
Denied calls fail with EPERM, except those in ``NOSYS_SYSCALLS``, which fail
with ENOSYS as on a kernel without them, so that programs fall back: ``clone3``
(a filter cannot read its flags, which live in a struct in memory; ENOSYS makes
libc fall back to ``clone``, whose flags we *can* check, where EPERM would break
every thread start) and native AIO's ``io_setup`` (its budget, fs.aio-max-nr,
is one for the whole machine: one sandbox could take all of it).  Sockets of
families that reach beyond the sandbox's network namespace fail with
EAFNOSUPPORT (``DENIED_SOCKET_FAMILIES``).

System calls of other ABIs (i386 ``int 0x80``, x32) kill the process: the
filter only speaks the native one.

The compiled BPF program is cached per process; ``filter_bytes()`` returns it
and bwrap loads it with ``--seccomp FD``.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile

from ..errors import SetupError

# Denied with EPERM.
DENIED_SYSCALLS: tuple[str, ...] = (
    # debugging other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    # mounts and namespaces
    "mount",
    "umount2",
    "pivot_root",
    "unshare",
    "setns",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "chroot",
    # kernel keyring
    "keyctl",
    "add_key",
    "request_key",
    # kernel programs, profiling, modules
    "bpf",
    "perf_event_open",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    # memory and io tricks used by kernel exploits
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    # file handles bypass path checks
    "open_by_handle_at",
    "name_to_handle_at",
    # host administration
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "iopl",
    "ioperm",
    "uselib",
    "lookup_dcookie",
    "fanotify_init",
    "vhangup",
    "nfsservctl",
    "memfd_secret",  # memory locked away from everyone, the kernel's own page tables included
)

# Denied with ENOSYS (see above).
NOSYS_SYSCALLS: tuple[str, ...] = ("clone3", "io_setup")

# socket() families denied with EAFNOSUPPORT: AF_VSOCK's port space is the VM's, shared by every
# sandbox and the host whatever the network namespace (and a channel towards the hypervisor).
DENIED_SOCKET_FAMILIES: dict[str, int] = {"AF_VSOCK": 40}

# clone() flags that create namespaces: clone with any of them fails with EPERM.
CLONE_NS_FLAGS: dict[str, int] = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}

# ioctls that push input into a terminal (TIOCSTI) or drive the console (TIOCLINUX).
DENIED_IOCTLS: dict[str, int] = {"TIOCSTI": 0x5412, "TIOCLINUX": 0x541C}


def _import():
    try:
        import pyseccomp
    except (ImportError, OSError) as e:  # OSError: libseccomp.so.2 missing
        raise SetupError(
            f"cannot load pyseccomp/libseccomp: {e}",
            hint="apt-get install libseccomp2 && pip install pyseccomp",
        ) from None
    return pyseccomp


# Denied (ENOSYS, as on a kernel without them) only where no memory cgroup counts what they
# hold: the pages of a memfd or of a detached SysV segment are in no process's address space, so
# RLIMIT_AS does not see them (programs fall back to files in /dev/shm or /tmp, size-capped).
UNCOUNTED_MEMORY_SYSCALLS: tuple[str, ...] = ("memfd_create", "shmget")

# Denied (ENOSYS) without an IPC namespace of the sandbox's own (isolation="landlock"): SysV IPC
# and POSIX message queues are found by key or name, not by path, so Landlock does not govern
# them, and they would be shared with every process of the uid (other sandboxes, the caller).
UNSCOPED_IPC_SYSCALLS: tuple[str, ...] = (
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget", "shmat", "shmdt",
    "shmctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
)  # fmt: skip


# Made to succeed without doing anything with ``ignore_chown`` (a Dockerfile build's RUN steps): a
# sandbox maps one id, so a chown to any other fails with EINVAL, and files have one owner anyway.
CHOWN_SYSCALLS = ("chown", "fchown", "lchown", "fchownat")


@functools.lru_cache(maxsize=8)
def filter_bytes(memfd: bool = True, sockets: bool = True, ipc: bool = True, ignore_chown: bool = False) -> bytes:
    """The compiled BPF program (cached; building it takes a few milliseconds).
    ``memfd=False``: also UNCOUNTED_MEMORY_SYSCALLS get ENOSYS (for sandboxes without a memory cgroup).
    ``sockets=False``: socket(2) fails with EACCES for every family (socketpair(2) still works): a
    Landlock sandbox without network has no network namespace of its own, and Landlock
    governs neither UDP nor connecting to a host's named unix socket (a daemon's).
    ``ipc=False``: UNSCOPED_IPC_SYSCALLS get ENOSYS (a sandbox without an IPC namespace).
    ``ignore_chown``: CHOWN_SYSCALLS return 0 and change nothing."""
    sc = _import()
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED_SYSCALLS:
        try:
            f.add_rule(eperm, name)
        except (ValueError, OSError):  # not on this architecture
            continue
    nosys = NOSYS_SYSCALLS + (() if memfd else UNCOUNTED_MEMORY_SYSCALLS) + (() if ipc else UNSCOPED_IPC_SYSCALLS)
    for name in dict.fromkeys(nosys):
        try:
            f.add_rule(sc.ERRNO(errno.ENOSYS), name)
        except (ValueError, OSError):  # not on this architecture
            continue
    if ignore_chown:
        for name in CHOWN_SYSCALLS:
            f.add_rule(sc.ERRNO(0), name)
    for flag in CLONE_NS_FLAGS.values():
        f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for req in DENIED_IOCTLS.values():
        f.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, req))
    if sockets:
        # AF_PACKET sockets sniff interfaces; there is nothing to sniff, deny anyway.
        f.add_rule(eperm, "socket", sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, 17))  # the kernel reads an int
    else:
        f.add_rule(sc.ERRNO(errno.EACCES), "socket")
    for family in DENIED_SOCKET_FAMILIES.values():
        for call in ("socket", "socketpair") if sockets else ("socketpair",):
            f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), call, sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, family))
    with tempfile.TemporaryFile() as tmp:
        f.export_bpf(tmp)
        tmp.seek(0)
        data = tmp.read()
    if not data or len(data) % 8:
        raise SetupError(f"libseccomp produced an invalid filter ({len(data)} bytes)")
    return data


def filter_fd() -> int:
    """A readable pipe holding the filter, for ``bwrap --seccomp FD`` (caller closes it)."""
    data = filter_bytes()
    r, w = os.pipe()
    try:
        os.write(w, data)  # far below the 64 KiB pipe buffer
    finally:
        os.close(w)
    return r
