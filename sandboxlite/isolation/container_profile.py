"""``sandboxlite container-profile``: a seccomp profile for the container sandboxlite runs in.

A container runtime's default profile refuses the namespace and mount calls a
jail is made of (Docker's and podman's give them only with CAP_SYS_ADMIN), and
``seccomp=unconfined`` lifts every refusal at once.  This profile is the middle
way: it refuses, to every process of the container, what those defaults refuse
to a container without added capabilities (kernel modules and kexec, keyrings,
bpf and perf, clock and swap changes, reboot, quotactl, the NUMA policy calls,
io_uring, userfaultfd, file handles, ...), except exactly what a jail needs
(``JAIL_NEEDS``: unshare, setns, clone with namespace flags, mount, umount2,
pivot_root, sethostname and the new mount API's open_tree, move_mount and
mount_setattr).  Each sandbox inside keeps its own filter (``seccomp.py``),
which refuses all of those again to what runs in it.

It is a deny-list in the OCI profile format (Docker and podman read the same
JSON): what a runtime adds in later releases to its own default is not in it.
"""

from __future__ import annotations

import errno

# Refused by Docker's and podman's default profiles to a container without added capabilities
# (the names only; seccomp=unconfined allows all of them).
RUNTIME_DENIED: tuple[str, ...] = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "get_mempolicy",
    "init_module", "io_uring_enter", "io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp",
    "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind", "mount", "mount_setattr",
    "move_mount", "move_pages", "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree",
    "perf_event_open", "pivot_root", "query_module", "quotactl", "reboot", "request_key",
    "set_mempolicy", "setns", "settimeofday", "stime", "swapoff", "swapon", "_sysctl", "sysfs",
    "syslog", "umount", "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)  # fmt: skip

# What bwrap, the launcher and the executor call to build a jail (see plan.py and sandboxlite/executor/).
JAIL_NEEDS: tuple[str, ...] = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "sethostname", "open_tree", "move_mount",
    "mount_setattr",
)  # fmt: skip

RUNTIMES = ("docker", "podman")

ARCHES = {  # OCI arch names with their sub-architectures, as the runtimes list them
    "SCMP_ARCH_X86_64": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"],
    "SCMP_ARCH_AARCH64": ["SCMP_ARCH_ARM"],
}


def profile(runtime: str = "docker") -> dict:
    """The profile for ``runtime`` ("docker" or "podman": the same rules, in the format both read)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown container runtime {runtime!r}: expected one of {', '.join(RUNTIMES)}")
    denied = sorted(set(RUNTIME_DENIED) - set(JAIL_NEEDS))
    return {
        "comment": (
            "sandboxlite: the calls a container runtime's default profile refuses to a container without added "
            "capabilities, except those a jail is built with (" + ", ".join(JAIL_NEEDS) + "); every sandbox "
            "inside refuses them again with its own filter"
        ),
        "defaultAction": "SCMP_ACT_ALLOW",
        "defaultErrnoRet": errno.EPERM,
        "archMap": [{"architecture": a, "subArchitectures": sub} for a, sub in ARCHES.items()],
        "syscalls": [{"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}],
    }
