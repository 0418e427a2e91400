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

from ..errors import file_error
from ..executor.protocol import OP_MKPARENTS, OP_REQ_REG

CHUNK = 1 << 20
READ_FLAGS = os.O_RDONLY | OP_REQ_REG


def write_flags(parents: bool) -> int:
    return os.O_WRONLY | os.O_CREAT | os.O_TRUNC | OP_REQ_REG | (OP_MKPARENTS if parents else 0)


def read_fd(fd: int, path: str, max_bytes: int | None, offset: int = 0, length: int | None = None) -> bytes:
    """The bytes of the regular file open at ``fd`` (closed after): all of them, or the part of at
    most ``length`` bytes from ``offset`` (fewer at the end of the file).

    ``max_bytes`` caps the file, charged on the bytes actually read, not on its size when it was
    opened: EFBIG when it is bigger to start with, or once a read reaches past ``max_bytes`` (a file
    that grows while it is read); at most ``max_bytes`` + 1 bytes are ever read.  The holes of a
    sparse file read as zeros, and count.
    """
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # never trust the jail
            raise file_error(errno.EINVAL, path, "not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise file_error(errno.EFBIG, path, f"file is {st.st_size} bytes, over max_bytes={max_bytes}")
        chunks = []
        pos, end = offset, None if length is None else offset + length
        while end is None or pos < end:
            want = CHUNK if end is None else min(CHUNK, end - pos)
            if max_bytes is not None:
                want = min(want, max(1, max_bytes - pos + 1))  # a byte past the cap tells that it grew
            try:
                chunk = os.pread(fd, want, pos)
            except OSError as e:  # EIO from a special file, ...
                raise file_error(e.errno or errno.EIO, path) from None
            if not chunk:
                break
            pos += len(chunk)
            if max_bytes is not None and pos > max_bytes:
                raise file_error(errno.EFBIG, path, f"file grew over max_bytes={max_bytes} while it was read")
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
    sandbox paths left out (see ``Sandbox.download``).

    ``max_bytes`` is the budget of the whole copy, charged on each file's length as it is copied
    (the bytes read plus its holes), never on the size it had when it was opened: a file that
    passes what is left of the budget while it is copied is cut off there, its partial copy
    removed and its path left out, so at most ``max_bytes`` bytes ever land on the host.  Holes
    are found with SEEK_DATA/SEEK_HOLE and left holes on the host, neither read nor written (a
    chunk that reads as zeros is not written either, where the filesystem cannot tell holes): a
    sparse file costs the host's disk its data only, and its length still counts against the
    budget (a 1 TiB sparse file is left out of a 16 MiB download, at once).
    """
    skipped: list[str] = []
    budget = [max_bytes if max_bytes is not None else -1]
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            if not _copy_file(fd, st.st_size, dst, st.st_mode, path, budget):
                skipped.append(path)
        elif stat.S_ISDIR(st.st_mode):
            _copy_dir_to_host(fd, dst, path, "", skipped, symlinks, budget)
        else:
            raise file_error(errno.EINVAL, path, "not a regular file or directory")
    finally:
        os.close(fd)
    return skipped


def _copy_file(fd: int, size: int, dst: Path, mode: int, sandbox_path: str, budget: list[int]) -> bool:
    """Copy one regular file (of ``size`` bytes when opened) within what is left of ``budget``
    (-1: no limit) and charge it what was copied; False when it does not fit (nothing is kept)."""
    limit = budget[0] if budget[0] >= 0 else None
    if limit is not None and size > limit:
        return False
    copied = _copy_fd_to_host(fd, dst, mode, sandbox_path, limit)
    if copied is None:
        return False
    if limit is not None:
        budget[0] -= copied
    return True


def _host_open_for_write(dst: Path, mode: int) -> int:
    if dst.is_symlink():  # never write through a host symlink
        dst.unlink()
    return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o777 or 0o644)


def _copy_fd_to_host(fd: int, dst: Path, mode: int, sandbox_path: str, limit: int | None) -> int | None:
    """Copy the regular file open at ``fd`` to ``dst``; returns its length as copied, or None when it
    holds more than ``limit`` bytes.  Nothing past ``limit`` is ever written, and a copy that is not
    complete (over the limit, or an error) is removed."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    out = _host_open_for_write(dst, mode)
    length = None
    try:
        length = _copy_runs(fd, out, sandbox_path, limit)
        if length is not None:
            os.ftruncate(out, length)  # the file may end in a hole
    finally:
        os.close(out)
        if length is None:
            dst.unlink(missing_ok=True)
    return length


def _copy_runs(src: int, out: int, sandbox_path: str, limit: int | None) -> int | None:
    """Copy the data of ``src`` to the same offsets of ``out``, run by run, holes left unwritten;
    returns the length copied (holes included), or None as soon as it passes ``limit``."""
    pos = 0
    while True:
        run = _data_run(src, pos, sandbox_path)
        if run is None:  # no data from pos on: a hole up to the end of the file, if anything
            size = os.fstat(src).st_size
            if size > pos and _data_run(src, pos, sandbox_path) is not None:
                continue  # data was appended meanwhile
            length = max(pos, size)
            return None if limit is not None and length > limit else length
        pos, end = run
        if limit is not None and pos > limit:
            return None
        while pos < end:
            want = min(CHUNK, end - pos)
            if limit is not None:
                want = min(want, max(1, limit - pos + 1))  # a byte past the limit tells that it grew
            try:
                chunk = os.pread(src, want, pos)
            except OSError as e:  # the sandbox's side (errors writing on the host stay OSError)
                raise file_error(e.errno or errno.EIO, sandbox_path) from None
            if not chunk:
                return pos  # the end of the file (it shrank, or its filesystem has no SEEK_DATA)
            if limit is not None and pos + len(chunk) > limit:
                return None
            if chunk.count(0) < len(chunk):  # zeros stay a hole
                _pwrite_all(out, chunk, pos)
            pos += len(chunk)


def _data_run(fd: int, pos: int, sandbox_path: str) -> tuple[int, int] | None:
    """(start, end) of the next run of data at or after ``pos``; None when only a hole, or nothing,
    is left.  Where the filesystem cannot tell holes from data, the rest of the file is one run."""
    try:
        start = os.lseek(fd, pos, os.SEEK_DATA)
        return start, os.lseek(fd, start, os.SEEK_HOLE)
    except OSError as e:
        if e.errno == errno.ENXIO:  # past the last data (or the file shrank under us)
            return None
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return pos, 1 << 63
        raise file_error(e.errno or errno.EIO, sandbox_path) from None


def _pwrite_all(out: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(out, view, pos)
        view, pos = view[n:], pos + n


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
                copied = stat.S_ISREG(fst.st_mode)
                if copied:
                    os.set_blocking(fd, True)
                    copied = _copy_file(fd, fst.st_size, target_path, st.st_mode, spath, budget)
                if not copied:
                    skipped.append(spath)
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
