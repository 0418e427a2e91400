"""Moving bytes between the host and a sandbox, on descriptors the executor opened inside.

The executor resolves every path within the jail's root and passes the open
descriptor back, so a symlink inside the sandbox can never lead onto the host.
Copies *out* never follow symlinks on either side: a link in the sandbox's tree
is recreated only when it stays inside the tree, a host symlink at a target is
replaced, never written through.

``jail`` below is anything with ``open(path, flags, mode) -> fd``, ``mkdir(path,
mode)`` and ``symlink(target, path)`` (``launch.Jail``).
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import struct
from pathlib import Path

from .errors import file_error
from .protocol import OP_MKPARENTS, OP_REQ_REG

CHUNK = 1 << 20
READ_FLAGS = os.O_RDONLY | OP_REQ_REG


def write_flags(parents: bool) -> int:
    return os.O_WRONLY | os.O_CREAT | os.O_TRUNC | OP_REQ_REG | (OP_MKPARENTS if parents else 0)


def read_fd(fd: int, path: str, max_bytes: int | None) -> bytes:
    """All bytes of the regular file open at ``fd`` (closed after), at most ``max_bytes``."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # never trust the jail
            raise file_error(errno.EINVAL, path, "not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise file_error(errno.EFBIG, path, f"file is {st.st_size} bytes, over max_bytes={max_bytes}")
        chunks = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, CHUNK)
            except OSError as e:  # EIO from a special file, ...
                raise file_error(e.errno or errno.EIO, path) from None
            if not chunk:
                break
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise file_error(errno.EFBIG, path, f"file grew over max_bytes={max_bytes}")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_fd(fd: int, path: str, raw: bytes, mode: int) -> None:
    """Write ``raw`` to the regular file open at ``fd`` (closed after) and set its mode."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise file_error(errno.EINVAL, path, "not a regular file")
        view = memoryview(raw)
        while view:
            try:
                n = os.write(fd, view[:CHUNK])
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise file_error(e.errno, path, "no space left (the sandbox's tmpfs size limit)") from None
                raise file_error(e.errno or errno.EIO, path) from None
            view = view[n:]
        if mode & 0o7000 == 0:
            try:
                os.fchmod(fd, mode & 0o777)  # O_CREAT honours mode only for new files
            except OSError as e:
                raise file_error(e.errno or errno.EPERM, path) from None
    finally:
        os.close(fd)


def write_file(jail, path: str, raw: bytes, mode: int = 0o644, parents: bool = True) -> None:
    write_fd(jail.open(path, write_flags(parents), mode), path, raw, mode)


def upload(jail, src: Path, dst: str) -> None:
    """Copy a host file or directory tree to ``dst`` inside (modes kept, symlinks as links;
    sockets, fifos and devices are not copied).  A top-level host symlink is followed."""
    if not src.exists() and not src.is_symlink():
        raise FileNotFoundError(errno.ENOENT, "no such host file or directory", str(src))
    if not src.is_dir():
        write_file(jail, dst, src.read_bytes(), src.stat().st_mode & 0o777)
        return
    jail.mkdir(dst, 0o755)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        base = dst if rel == "." else os.path.join(dst, rel)
        for name in dirnames + filenames:
            hp = os.path.join(dirpath, name)
            sp = os.path.join(base, name)
            st = os.lstat(hp)
            if stat.S_ISLNK(st.st_mode):
                jail.symlink(os.readlink(hp), sp)
            elif stat.S_ISDIR(st.st_mode):
                jail.mkdir(sp, st.st_mode & 0o777)
            elif stat.S_ISREG(st.st_mode):
                with open(hp, "rb") as fh:
                    write_file(jail, sp, fh.read(), st.st_mode & 0o777)


def download(fd: int, path: str, dst: Path, *, symlinks: bool, max_bytes: int | None) -> list[str]:
    """Copy the file or tree open at ``fd`` (closed after) to ``dst`` on the host; returns the
    sandbox paths left out (see ``Sandbox.download``)."""
    skipped: list[str] = []
    budget = [max_bytes if max_bytes is not None else -1]
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if budget[0] >= 0 and st.st_size > budget[0]:
                skipped.append(path)
            else:
                _copy_fd_to_host(fd, dst, st.st_mode, path)
        elif stat.S_ISDIR(st.st_mode):
            _copy_dir_to_host(fd, dst, path, "", skipped, symlinks, budget)
        else:
            raise file_error(errno.EINVAL, path, "not a regular file or directory")
    finally:
        os.close(fd)
    return skipped


def _host_open_for_write(dst: Path, mode: int) -> int:
    if dst.is_symlink():  # never write through a host symlink
        dst.unlink()
    return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o777 or 0o644)


def _copy_fd_to_host(fd: int, dst: Path, mode: int, sandbox_path: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    out = _host_open_for_write(dst, mode)
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as e:  # the sandbox's side (errors writing on the host stay OSError)
                raise file_error(e.errno or errno.EIO, sandbox_path) from None
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(out)


def _inside(rel_dir: str, target: str) -> bool:
    """Is a relative symlink target, seen from rel_dir, still inside the tree?

    Only a leading run of ".." is allowed (at most as deep as the link): a ".." after
    a name may climb out of a link (``l -> .`` makes ``l/..`` the tree's parent).
    """
    if target.startswith("/"):
        return False
    depth = 0 if not rel_dir else rel_dir.count("/") + 1
    named = False
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0 or named:
                return False
        elif part not in ("", "."):
            named = True
    return True


MAX_DOWNLOAD_DEPTH = 128  # deeper directories are left out (and reported), not recursed into
# Kernel filesystems a download never walks into (a link to "/" makes the jail's /proc part of
# the tree; we are the host, maybe root: /proc/kmsg would be read, and block).
_KERNEL_FS = (0x9FA0, 0x62656572)  # PROC_SUPER_MAGIC, SYSFS_MAGIC


@functools.lru_cache(maxsize=1)
def _fstatfs():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return ctypes, libc.fstatfs


def _kernel_fs(fd: int) -> bool:
    """Is ``fd`` on procfs or sysfs (or of a kind we cannot tell)?"""
    ctypes, fstatfs = _fstatfs()
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type (a long) comes first
    if fstatfs(fd, buf) != 0:
        return True
    return struct.unpack_from("l", buf)[0] in _KERNEL_FS


def _copy_dir_to_host(
    dfd: int, dst: Path, sandbox_path: str, rel: str, skipped: list[str], symlinks: bool, budget: list[int]
) -> None:
    if (rel and rel.count("/") + 1 > MAX_DOWNLOAD_DEPTH) or _kernel_fs(dfd):
        skipped.append(sandbox_path)
        return
    # The sandbox may change its tree while we walk it (a name can even be listed twice, as a
    # file and as a directory): every step that looks at it again may find something else,
    # and what changed is left out (reported), never followed.
    if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
        dst.unlink()
    dst.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(dfd):
        name = entry.name
        spath = f"{sandbox_path.rstrip('/')}/{name}"
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            skipped.append(spath)
            continue
        target_path = dst / name
        if not stat.S_ISDIR(st.st_mode) and target_path.is_dir() and not target_path.is_symlink():
            skipped.append(spath)  # the same name was a directory a moment ago
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                link = os.readlink(name, dir_fd=dfd)
            except OSError:  # swapped for something else under us
                skipped.append(spath)
                continue
            if symlinks and _inside(rel, link):
                if target_path.is_symlink() or target_path.is_file():
                    target_path.unlink()
                os.symlink(link, target_path)
            else:
                skipped.append(spath)
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:  # swapped for a symlink or a fifo under us
                skipped.append(spath)
                continue
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode) or (budget[0] >= 0 and fst.st_size > budget[0]):
                    skipped.append(spath)
                    continue
                if budget[0] >= 0:
                    budget[0] -= fst.st_size
                os.set_blocking(fd, True)
                _copy_fd_to_host(fd, target_path, st.st_mode, spath)
            finally:
                os.close(fd)
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                skipped.append(spath)
                continue
            try:
                _copy_dir_to_host(sub, target_path, spath, f"{rel}/{name}" if rel else name, skipped, symlinks, budget)
            finally:
                os.close(sub)
        else:
            skipped.append(spath)
