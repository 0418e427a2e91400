"""Isolation without namespaces: what a Landlock sandbox may touch, and its own directories.

``isolation="landlock"`` is for hosts where no namespace can be had (a container whose
seccomp profile or masked ``/proc`` the user cannot change).  The executor runs directly
on the host, confined by Landlock (see ``sandboxlite/executor/landlock.c``): it
reads and executes beneath ``READ_ONLY``, reads and writes the ``DEVICES`` and its own
directories (``Places``), and opens nothing else.  Paths are the host's: a sandbox's
workdir is a directory of its own, ``<base>/sb-XXXX/testbed``, not ``/testbed``.

``abi()`` asks the kernel (a host fact, read by ``Host.detect``); ``make_places`` and
``remove_places`` are the only filesystem side effects, run by ``launch``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import SetupError

# The ABI a Landlock sandbox needs: 6 (Linux 6.12) scopes signals and abstract unix sockets.
MIN_ABI = 6

# Read and executed beneath (a missing one is skipped): the host's programs, libraries and
# configuration, /proc (ps and many runtimes read it; another process's memory, environment
# and descriptors stay closed: Landlock denies ptrace-mode access out of the domain), and the
# CPU topology that thread pools size themselves by.
READ_ONLY = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
             "/sys/devices/system/cpu")  # fmt: skip
# Read and written: the harmless character devices programs open by name.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# Said wherever namespaces cannot be had: the way out that needs none, and what it gives up.
ALTERNATIVE = ("where the container's flags cannot change, isolation='landlock' (SANDBOXLITE_ISOLATION=landlock, "
               "--isolation landlock) needs no namespace; it gives up the image (the host's own files, read-only), "
               "/testbed (a workdir of its own: Sandbox.workdir), sockets (no network at all, not even loopback) "
               "and pseudo-terminals, and it caps no total disk use (SECURITY.md, 'Isolation modes')")

_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}


def abi() -> tuple[int, str]:
    """(the kernel's Landlock ABI version, "") or (0, why there is none)."""
    nr = _SYS_LANDLOCK_CREATE_RULESET.get(os.uname().machine)
    if nr is None:
        return 0, f"not supported on {os.uname().machine}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(nr), None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # ..._VERSION
    if v < 0:
        err = ctypes.get_errno()
        why = {errno.ENOSYS: "the kernel has no Landlock, or a seccomp profile refuses its system calls",
               errno.EOPNOTSUPP: "Landlock is built in but not enabled (boot with lsm=...,landlock)"}.get(
            err, os.strerror(err))  # fmt: skip
        return 0, why
    return int(v), ""


@dataclass(frozen=True)
class Places:
    """A Landlock sandbox's own directories: ``root`` holds ``workdir`` (for /testbed), ``tmp``
    (TMPDIR) and ``home`` (HOME).  The executor empties the three at every reset."""

    root: str
    workdir: str
    tmp: str
    home: str

    @property
    def own(self) -> tuple[str, ...]:
        return (self.workdir, self.tmp, self.home)

    def env(self) -> dict[str, str]:
        return {"HOME": self.home, "TMPDIR": self.tmp}


def base_dir(env: Mapping[str, str], euid: int) -> str:
    """Where sandboxes' directories go: ``$SANDBOXLITE_LANDLOCK_DIR``, else
    ``<tmp>/sandboxlite-<euid>`` (reachable by the uids a root caller's sandboxes run as)."""
    return env.get("SANDBOXLITE_LANDLOCK_DIR") or os.path.join(tempfile.gettempdir(), f"sandboxlite-{euid}")


def make_places(base: str, owner: tuple[int, int] | None) -> Places:
    """A new sandbox's directories under ``base`` (made 0711 and checked to be the caller's own:
    a shared /tmp may hold someone else's), owned by ``owner`` (a root caller's jail uid)."""
    try:
        os.mkdir(base, 0o711)
    except FileExistsError:
        pass
    except OSError as e:
        raise SetupError(f"cannot create {base} for Landlock sandboxes: {e.strerror}",
                         hint="point SANDBOXLITE_LANDLOCK_DIR at a writable directory") from None  # fmt: skip
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SetupError(f"{base} is not a directory of this user's that only it can write (someone else's, or a "
                         "symlink): Landlock sandboxes will not use it",
                         hint="remove it, or point SANDBOXLITE_LANDLOCK_DIR elsewhere")  # fmt: skip
    if st.st_mode & 0o777 != 0o711:
        os.chmod(base, 0o711)
    root = tempfile.mkdtemp(prefix="sb-", dir=base)
    try:
        places = Places(root, os.path.join(root, "testbed"), os.path.join(root, "tmp"), os.path.join(root, "home"))
        for d, mode in ((places.workdir, 0o755), (places.tmp, 0o700), (places.home, 0o700)):
            os.mkdir(d, mode)
            if owner is not None:
                os.chown(d, *owner)
        if owner is not None:
            os.chown(root, *owner)
            os.chmod(root, 0o500)  # its own: it cannot add to it, only to the three inside
        return places
    except BaseException:
        remove_places(root)
        raise


def remove_places(root: str) -> None:
    """Remove a sandbox's directories (never following a symlink); the executor has emptied them
    already unless it died: then whatever is left, made unreadable or deep, goes too."""

    def again(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), 0o700, follow_symlinks=False)
            func(path)
        except OSError:
            raise_later.append(path)

    raise_later: list[str] = []
    try:
        os.chmod(root, 0o700, follow_symlinks=False)
    except OSError:
        pass
    try:
        shutil.rmtree(root, onerror=again)
    except (OSError, RecursionError):
        raise_later.append(root)
    if raise_later and os.path.lexists(root):
        subprocess.run(["chmod", "-R", "u+rwx", "--", root], capture_output=True)  # -R never follows symlinks
        subprocess.run(["rm", "-rf", "--one-file-system", "--", root], capture_output=True)
