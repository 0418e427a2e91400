"""Idmapped images: the image's owner shown as a sandbox's own host uid.

A root caller's sandboxes each run as a host uid of their own (``slots.py``),
but an image is owned by one uid (``sandboxlite``): a copy-on-write overlay
needs the image's files to be owned by the jail's uid 0, that is by the
sandbox's host uid.  An idmapped mount does exactly that without touching the
image: a user namespace whose map says "the owner's uid is this sandbox's uid"
(made once per uid), applied with ``mount_setattr(MOUNT_ATTR_IDMAP)`` to a
detached copy of the image's tree (made once per uid and image), cloned for
each start (``open_tree(OPEN_TREE_CLONE)``, a few microseconds).  The launcher
attaches the clone in a private mount namespace before it drops privileges,
and bwrap binds it from there: attached by root before the jail's user
namespace exists, it is locked read-only for the jail.

Linux 5.12 or later, on a filesystem that supports idmapped mounts (ext4,
xfs, btrfs, tmpfs, ...).  ``IdmapError`` says why not; the caller falls back.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

# x86_64 and aarch64 share these numbers (the new mount API came after the tables converged)
SYS_OPEN_TREE, SYS_MOUNT_SETATTR = 428, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, AT_EMPTY_PATH, AT_RECURSIVE = 1, 0o2000000, 0x1000, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_IDMAP = 0x1, 0x2, 0x4, 0x100000
AT_FDCWD = -100


class IdmapError(OSError):
    """An idmapped tree could not be made (the message says why)."""

    def __str__(self) -> str:
        return str(self.strerror or (self.args[0] if self.args else ""))


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]  # fmt: skip


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(r: int, what: str) -> int:
    if r < 0:
        err = ctypes.get_errno()
        raise IdmapError(err, f"{what}: {os.strerror(err)}")
    return r


def make_userns(executor: str, owner: tuple[int, int], to: tuple[int, int]) -> int:
    """A user namespace mapping ``owner`` (uid, gid) to ``to`` (uid, gid), as a descriptor.

    Made by the executor's ``userns`` mode in a child process (a threaded process cannot
    unshare a user namespace); nothing runs in it after this returns."""
    in_r, in_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.posix_spawn(executor, ["sandboxlite-executor", "userns"], {}, file_actions=[
            (os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0),
        ])  # fmt: skip
    except OSError as e:
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)
        raise IdmapError(e.errno, f"cannot run {executor}: {e.strerror}") from None
    os.close(in_r)
    os.close(out_w)
    try:
        if os.read(out_r, 1) != b"u":
            raise IdmapError(0, "could not make a user namespace for an idmapped image (unshare refused)")
        with open(f"/proc/{pid}/uid_map", "w") as f:
            f.write(f"{owner[0]} {to[0]} 1\n")
        with open(f"/proc/{pid}/gid_map", "w") as f:
            f.write(f"{owner[1]} {to[1]} 1\n")
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        if isinstance(e, IdmapError):
            raise
        raise IdmapError(e.errno, f"could not map a user namespace for an idmapped image: {e.strerror}") from None
    finally:
        os.close(in_w)  # the child sees end of file and exits
        os.close(out_r)
        os.waitpid(pid, 0)


def idmapped_tree(path: str, userns_fd: int, libc: ctypes.CDLL | None = None) -> int:
    """A detached, read-only (nosuid, nodev) copy of the tree at ``path``, idmapped by ``userns_fd``."""
    libc = libc or _libc()
    fd = _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, path.encode(),
                             OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE), f"open_tree({path})")  # fmt: skip
    attr = _MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, userns_fd)
    try:
        _check(libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr),
                            ctypes.sizeof(attr)), f"an idmapped mount of {path}")  # fmt: skip
    except IdmapError:
        os.close(fd)
        raise
    return fd


def clone_tree(tree_fd: int, libc: ctypes.CDLL | None = None) -> int:
    """A fresh detached copy of a detached tree (keeps its idmap): one per start."""
    return _check((libc or _libc()).syscall(SYS_OPEN_TREE, tree_fd, b"", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH
                                  | AT_RECURSIVE), "open_tree(clone)")  # fmt: skip


def idmap_detached(fd: int, userns_fd: int, libc: ctypes.CDLL | None = None) -> None:
    """Idmap the detached mount ``fd`` (one nobody has attached yet) by ``userns_fd``."""
    attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
    _check((libc or _libc()).syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr),
                                     ctypes.sizeof(attr)), "an idmapped shared layer")  # fmt: skip


class IdmapCache:
    """The user namespace of each uid and the idmapped tree of each (uid, image), kept open for
    this Host's lifetime (one namespace and one tree per uid a sandbox of this process ran as)."""

    def __init__(self, executor: str, owner: tuple[int, int]) -> None:
        self.executor = executor
        self.owner = owner  # the images' owner (uid, gid): the run_as user
        self._userns: dict[tuple, int] = {}  # by the uid shown; ("jail-root", uid): for shared layers
        self._trees: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self.supported = platform.machine() in ("x86_64", "aarch64")
        self._libc = _libc()  # (a dlopen: ~20 us, not on every start)

    def share_to(self, fd: int, to: tuple[int, int]) -> None:
        """Idmap a shared layer's mount (another jail's writes, owned by its uid 0) to show as ``to``'s own."""
        with self._lock:
            ns = self._userns.get(("jail-root", to))
            if ns is None:
                ns = self._userns[("jail-root", to)] = make_userns(self.executor, (0, 0), to)
        idmap_detached(fd, ns, self._libc)

    def tree(self, path: str, to: tuple[int, int]) -> int:
        """A clone of ``path``'s tree idmapped so that its owner is ``to`` (the caller closes it)."""
        if not self.supported:
            raise IdmapError(0, f"idmapped images are not wired up on {platform.machine()}")
        st = os.stat(path)
        key = (path, st.st_dev, st.st_ino, to)
        with self._lock:
            tree = self._trees.get(key)
            if tree is None:
                ns = self._userns.get(to)
                if ns is None:
                    ns = self._userns[to] = make_userns(self.executor, self.owner, to)
                tree = self._trees[key] = idmapped_tree(path, ns, self._libc)
        return clone_tree(tree, self._libc)
