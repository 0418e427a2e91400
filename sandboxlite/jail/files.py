"""The file API of a sandbox: ``read_file``, ``write_file``, ``is_file``, ``mkdir``, ``upload``,
``download``, ``list``, ``stat``, ``remove``, ``rename`` and ``watch``.

``SandboxFiles`` is mixed into ``Sandbox``: its methods need ``lock``, ``jail``, ``workdir``,
``closed`` and ``generation``.  Every path is resolved by the executor inside the sandbox's root
(symlinks and ".." stay there), and the host only ever holds descriptors it was handed
(transfer.py).

``list``, ``stat``, ``remove`` and ``rename`` are requests the executor serves itself (protocol.py:
LIST, STAT, REMOVE, RENAME): it resolves the path in the root, looks at and changes things by name
relative to a directory descriptor (fstatat with AT_SYMLINK_NOFOLLOW, unlinkat, renameat), and
reports owners as the sandbox sees them (uid 0 is the sandbox's root).  A recursive ``remove``
never follows a link and never enters another mount.

``watch``: inotify on the host, never a polling fallback.  The executor opens the directory inside
the root (an OPEN with OP_REQ_DIR) and hands the descriptor over; the host adds its watch through
``/proc/self/fd/N`` of that descriptor, a jump to the very inode the executor opened, not a path
lookup, so no name the sandbox controls is ever resolved by the host.  A recursive watch opens
each subdirectory on the host by its single name relative to its parent's descriptor, with
O_NOFOLLOW|O_DIRECTORY: a symlink (or anything swapped in for the directory) is refused, never
followed, so the sandbox cannot point the host at a host path.  It stays on the watched directory's
filesystem (like ``find -xdev``: other mounts inside are not entered) and watches at most
``WATCH_MAX_DIRS`` directories (one descriptor each).  inotify and ctypes are the standard
library's way to it (libc's ``inotify_init1``/``inotify_add_watch``); where the kernel or libc
lacks inotify, ``watch`` raises ``SandboxError`` saying so.  Changes are seen whoever makes them
(commands, or this API); they are the changes of the generation the watch started in: a
``reset()`` or ``close()`` ends the iteration.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import posixpath
import select
import stat as _stat
import struct
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..config import resolve_path
from ..errors import ConfigError, SandboxCrashed, SandboxError, SandboxFileError, file_error
from ..executor.protocol import OP_REQ_DIR
from . import transfer

LIST_MAX_ENTRIES = 100_000  # list() refuses a bigger directory (max_entries=)
LIST_MAX_BYTES = 64 << 20  # and more than this many bytes of entries (long names and link targets)
REMOVE_TIMEOUT_S = 600.0  # a recursive remove of a big tree (the executor serves nothing else meanwhile)
WATCH_MAX_DIRS = 1000  # directories one recursive watch follows (a host descriptor each)

_TYPES = {b"f": "file", b"d": "dir", b"l": "symlink", b"p": "fifo", b"s": "socket", b"c": "char", b"b": "block",
          b"?": "unknown"}  # fmt: skip


@dataclass(frozen=True)
class FileInfo:
    """One file inside the sandbox, as ``list`` and ``stat`` describe it (a link itself, unless
    ``stat(..., follow_symlinks=True)``).

    ``type``: "file", "dir", "symlink", "fifo", "socket", "char", "block" (or "unknown");
    ``mode``: the permission bits (``0o644``); ``mtime``: the last modification, in seconds since
    the epoch; ``target``: a symlink's target, as written (never followed), else None; ``uid`` and
    ``gid``: the owner as the sandbox sees it (0: its root)."""

    name: str
    path: str
    type: str
    size: int
    mode: int
    mtime: float
    target: str | None = None
    uid: int | None = None
    gid: int | None = None

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @property
    def is_symlink(self) -> bool:
        return self.type == "symlink"


@dataclass(frozen=True)
class FileEvent:
    """A change ``watch`` saw: ``kind`` is "created", "modified", "deleted", "moved_from" or
    "moved_to" (a rename within the watch gives both, with the same ``cookie``); ``is_dir``: the
    thing changed is a directory."""

    path: str
    kind: str
    is_dir: bool
    cookie: int = 0


def _norm(path: str) -> str:
    """``path`` (absolute) without ".", "..", doubled or trailing slashes (lexically)."""
    p = posixpath.normpath(path)
    return "/" + p.lstrip("/") if p.startswith("//") else p


def _records(raw: bytes, where: str) -> list[tuple[str, str, int, int, float, str | None, int, int]]:
    """The records of a STAT or LIST answer (protocol.py: ``stat_payload``), checked: (name, type,
    size, mode, mtime, target, uid, gid) each.  Anything malformed is a broken executor."""
    parts = raw.split(b"\0")
    if parts[-1] != b"" or (len(parts) - 1) % 3:
        raise SandboxCrashed(f"the sandbox's executor described {where} in a malformed answer")
    out = []
    for i in range(0, len(parts) - 1, 3):
        head, name, target = parts[i : i + 3]
        fields = head.split(b" ")
        try:
            if len(fields) != 7 or fields[0] not in _TYPES or not all(f.isdigit() or f[:1] == b"-" and f[1:].isdigit()
                                                                        for f in fields[1:]):  # fmt: skip
                raise ValueError
            mode, size, sec, nsec, uid, gid = (int(f) for f in fields[1:])
            kind = _TYPES[fields[0]]
            if not (0 <= mode <= 0o7777 and size >= 0 and 0 <= nsec < 10**9 and uid >= 0 and gid >= 0):
                raise ValueError
            if b"/" in name or name in (b".", b"..") or (target and kind != "symlink"):
                raise ValueError
        except ValueError:
            raise SandboxCrashed(f"the sandbox's executor described {where} in a malformed record: {head[:60]!r}") from None
        out.append((os.fsdecode(name), kind, size, mode, sec + nsec / 1e9,
                    os.fsdecode(target) if kind == "symlink" else None, uid, gid))  # fmt: skip
    return out


@contextlib.contextmanager
def _explained(path: str, why: dict[int, str]) -> Iterator[None]:
    """A SandboxFileError whose errno ``why`` explains comes out with that message instead."""
    try:
        yield
    except SandboxFileError as e:
        message = why.get(e.errno or 0)
        if message is None:
            raise
        raise file_error(e.errno, path, message) from None


class SandboxFiles:
    """Files inside the sandbox (relative paths start at its workdir)."""

    def _abs(self, path: str | os.PathLike, field: str = "path") -> str:
        return resolve_path(path, self.workdir, field)

    def read_file(
        self, path: str | os.PathLike, *, max_bytes: int | None = None, offset: int = 0, length: int | None = None
    ) -> bytes:
        """The exact bytes of a file inside the sandbox (relative paths start at workdir).

        ``max_bytes`` caps the file, charged on the bytes read (not on its size when opened):
        EFBIG (a ``SandboxFileError``) when it is bigger, or grows bigger while it is read; at
        most ``max_bytes`` + 1 bytes are read.  The holes of a sparse file read as zeros and count.
        ``offset``, ``length``: only the part of at most ``length`` bytes that starts at ``offset``
        (fewer at the end of the file), to read a big file piece by piece.
        """
        for name, value in (("offset", offset), ("length", length)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ConfigError(name, f"must be a number of bytes >= 0, got {value!r}")
        p = self._abs(path)
        with self.lock:
            fd = self.jail.open(p, transfer.READ_FLAGS)
        return transfer.read_fd(fd, p, max_bytes, offset, length)

    def write_file(
        self, path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        """Create or replace a file with exactly ``data`` (str is written as UTF-8)."""
        p = self._abs(path)
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        with self.lock:
            fd = self.jail.open(p, transfer.write_flags(parents), mode)
        transfer.write_fd(fd, p, raw, mode)

    def is_file(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` is a regular file inside the sandbox (symlinks followed within its root)."""
        try:
            with self.lock:
                os.close(self.jail.open(self._abs(path), transfer.READ_FLAGS))
        except SandboxFileError:
            return False
        return True

    def mkdir(self, path: str | os.PathLike, *, mode: int = 0o755) -> None:
        """``mkdir -p`` inside the sandbox."""
        p = self._abs(path)
        with self.lock:
            self.jail.mkdir(p, mode)

    def upload(self, host_path: str | os.PathLike, path: str | os.PathLike) -> None:
        """Copy a host file or directory tree to ``path`` inside the sandbox.

        Directory trees keep their layout, file modes and symlinks (as links).
        """
        dst = self._abs(path)
        with self.lock:
            transfer.upload(self.jail, Path(host_path), dst)

    def download(
        self,
        path: str | os.PathLike,
        host_path: str | os.PathLike,
        *,
        symlinks: bool = True,
        max_bytes: int | None = None,
    ) -> list[str]:
        """Copy a file or directory tree out of the sandbox to ``host_path``.

        Symlinks are never followed: a link inside the tree is recreated only when it is
        relative, stays inside the tree (only leading ".." allowed) and ``symlinks`` is true;
        any other link is left out, and so are directories nested over 128 deep.  With
        ``max_bytes``, files that would take the total over it are left out: charged on the
        bytes actually copied (holes included), so a file that grows while it is copied is cut
        off at the cap and left out, its partial copy removed; at most ``max_bytes`` land on the
        host.  Holes of sparse files stay holes on the host (SEEK_DATA/SEEK_HOLE): they take no
        disk, but their length counts.  Returns the sandbox paths that were left out (links,
        fifos, sockets, devices, files over the cap), so nothing is lost silently; names that
        are not UTF-8 come surrogate-escaped, as ``os.fsdecode`` gives them.
        """
        p = self._abs(path)
        with self.lock:
            fd = self.jail.open(p, os.O_RDONLY)
        return transfer.download(fd, p, Path(host_path), symlinks=symlinks, max_bytes=max_bytes)

    # -- list, stat, remove, rename, watch ------------------------------------------------------
    def list(self, path: str | os.PathLike = ".", *, max_entries: int = LIST_MAX_ENTRIES) -> list[FileInfo]:
        """The entries of a directory inside the sandbox (not "." and ".."), sorted by name.

        Links are described, never followed (``target`` holds what they point to); ``path``
        itself may be a link to a directory (followed within the sandbox's root).  More than
        ``max_entries`` entries (or over ``LIST_MAX_BYTES`` of names and link targets) is an
        error, E2BIG / EFBIG: nothing is returned then."""
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ConfigError("max_entries", f"must be a number of entries >= 0, got {max_entries!r}")
        p = _norm(self._abs(path))
        with _explained(p, {
            errno.E2BIG: f"the directory has more than max_entries={max_entries} entries. "
                         "Hint: list a subdirectory, pass a larger max_entries, or exec('ls ...')",
            errno.EFBIG: f"the directory's names and link targets take over {LIST_MAX_BYTES} bytes. "
                         "Hint: list a subdirectory, or exec('ls ...')",
        }), self.lock:  # fmt: skip
            raw = self.jail.listdir(p, max_entries, LIST_MAX_BYTES)
        infos = [FileInfo(name, posixpath.join(p, name), kind, size, mode, mtime, target, uid, gid)
                 for name, kind, size, mode, mtime, target, uid, gid in _records(raw, p)]  # fmt: skip
        if any(not i.name for i in infos):
            raise SandboxCrashed(f"the sandbox's executor listed an entry without a name in {p}")
        return sorted(infos, key=lambda i: i.name)

    def stat(self, path: str | os.PathLike, *, follow_symlinks: bool = False) -> FileInfo:
        """What ``path`` is inside the sandbox: a link itself (its ``target`` shown, never
        followed), or with ``follow_symlinks`` what it points to, resolved within the sandbox's
        root.  ``uid``/``gid``: the owner as the sandbox sees it.  SandboxFileNotFound when missing."""
        p = _norm(self._abs(path))
        with self.lock:
            raw = self.jail.stat(p, bool(follow_symlinks))
        recs = _records(raw, p)
        if len(recs) != 1:
            raise SandboxCrashed(f"the sandbox's executor sent {len(recs)} records for a stat of {p}")
        _, kind, size, mode, mtime, target, uid, gid = recs[0]
        return FileInfo(posixpath.basename(p) or "/", p, kind, size, mode, mtime, target, uid, gid)

    def _refuse_vital(self, p: str, what: str, field: str) -> None:
        """ConfigError when ``p`` is "/" or the workdir (or a directory holding it)."""
        wd = _norm(self.workdir)
        if p == "/" or wd == p or wd.startswith(p + "/"):
            raise ConfigError(field, f"refusing to {what} {p}: it is the sandbox's root or holds its workdir ({wd})",
                              hint="name what is inside instead, or reset() for a fresh sandbox")  # fmt: skip

    def remove(self, path: str | os.PathLike, *, recursive: bool = False) -> None:
        """Remove a file, a symlink (never what it points to) or an empty directory inside the sandbox.

        ``recursive``: a directory and everything in it; links inside are removed, never followed,
        and other mounts inside are not entered (EBUSY).  The root and the workdir (and the
        directories holding it) are refused with ConfigError.  SandboxFileNotFound when missing;
        a non-empty directory without ``recursive`` is ENOTEMPTY (a SandboxFileError).  The tree is
        removed as it is walked: after an error (a mount point inside: EBUSY; over 128 levels
        deep: ELOOP), what went before it stays removed.  A mount point itself is refused (EBUSY)
        before anything in it is removed."""
        p = _norm(self._abs(path))
        self._refuse_vital(p, "remove", "path")
        with _explained(p, {
            errno.ENOTEMPTY: "directory not empty. Hint: remove(path, recursive=True) removes a tree",
            errno.EBUSY: "a mount point (the path, or one inside the tree) cannot be removed",
            errno.ELOOP: "the tree is nested too deep to remove (over 128 levels)",
        }), self.lock:  # fmt: skip
            self.jail.remove(p, bool(recursive), REMOVE_TIMEOUT_S)

    def rename(self, src: str | os.PathLike, dst: str | os.PathLike) -> None:
        """Rename ``src`` to ``dst`` inside the sandbox (``dst`` replaced as ``os.rename`` does; a
        link is moved, never followed).  Both must be on the same mount: /tmp and the workdir are
        separate ones (EXDEV, a SandboxFileError).  "/", the workdir and the directories holding it
        are refused (ConfigError)."""
        s, d = _norm(self._abs(src, "src")), _norm(self._abs(dst, "dst"))
        self._refuse_vital(s, "rename", "src")
        with _explained(s, {
            errno.EXDEV: f"cannot rename to {d}: not on the same mount inside the sandbox (e.g. /tmp and the "
                         "workdir). Hint: copy (read_file/write_file) and remove",
            errno.ENOENT: f"no such file or directory (renaming {s} to {d}: the source, or the destination's "
                          "directory, is missing)",
        }), self.lock:  # fmt: skip
            self.jail.rename(s, d)

    def watch(self, path: str | os.PathLike = ".", *, recursive: bool = False,
              timeout: float | None = None) -> FileWatch:  # fmt: skip
        """Changes of a directory inside the sandbox, as they happen: an iterator of ``FileEvent``.

        The watch is in place when this returns (changes made after it are seen).  ``recursive``:
        its subdirectories too, those created later included (what they already hold when seen
        comes as "created" events); it stays on the directory's filesystem and follows at most
        ``WATCH_MAX_DIRS`` directories (SandboxError beyond).  ``timeout``: seconds to wait for
        the next event, after which the iteration ends; None waits until the directory is
        deleted or moved away, or the sandbox is reset or closed.  Close it (``close()``, or use
        it as a context manager) to let go of its descriptors.  SandboxError when the host has
        no inotify (see the module's docstring: inotify on the host, no polling)."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ConfigError("timeout", f"must be seconds >= 0 or None, got {timeout!r}")
        p = _norm(self._abs(path))
        with self.lock:
            fd = self.jail.open(p, os.O_RDONLY | os.O_DIRECTORY | OP_REQ_DIR)
        return FileWatch(self, fd, p, recursive=bool(recursive), timeout=timeout)


# ---- watch: inotify on the host, through descriptors the executor opened --------------------------

_IN_MODIFY, _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x2, 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_UNMOUNT, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
_IN_ONLYDIR, _IN_EXCL_UNLINK, _IN_ISDIR = 0x01000000, 0x04000000, 0x40000000
_WATCH_MASK = (_IN_MODIFY | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF
               | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_EXCL_UNLINK)  # fmt: skip
_KINDS = ((_IN_CREATE, "created"), (_IN_MODIFY, "modified"), (_IN_DELETE, "deleted"),
          (_IN_MOVED_FROM, "moved_from"), (_IN_MOVED_TO, "moved_to"))  # fmt: skip
_EVENT = struct.Struct("iIII")  # struct inotify_event, then its name (NUL-padded)
_TICK_S = 0.2  # how often a waiting watch looks whether the sandbox was reset or closed
_libc = None


def _inotify():
    """libc's inotify functions (ctypes), or SandboxError when this host has none."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        except (OSError, AttributeError) as e:
            raise SandboxError(f"watch() needs inotify, which this host's C library does not offer ({e})",
                               hint="run exec() to poll instead (e.g. ls -l --time-style=+%s)") from None  # fmt: skip
        _libc = lib
    return _libc


class FileWatch:
    """The iterator ``SandboxFiles.watch`` returns (see there); ``close()`` ends it."""

    def __init__(self, sb, fd: int, path: str, *, recursive: bool, timeout: float | None) -> None:
        self._sb, self._generation = sb, sb.generation
        self.path, self.recursive, self.timeout = path, recursive, timeout
        self._dirs: dict[int, tuple[int, str]] = {}  # wd -> (our descriptor of it, its path)
        self._pending: deque[FileEvent] = deque()
        self._ifd = -1
        self._top = -1
        self._ended = False
        try:
            st = os.fstat(fd)
            if not _stat.S_ISDIR(st.st_mode):  # never trust the jail
                raise file_error(errno.ENOTDIR, path)
            self._dev = st.st_dev
            lib = _inotify()
            ifd = lib.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
            if ifd < 0:
                err = ctypes.get_errno()
                hint = ("raise fs.inotify.max_user_instances, or close() other watches" if err == errno.EMFILE
                        else None)  # fmt: skip
                raise SandboxError(f"watch() needs inotify, and the host refused one: {os.strerror(err)}", hint=hint)
            self._ifd = ifd
            own, fd = fd, -1  # _add keeps it, or closes it
            self._top = self._add(own, path)
            if recursive:
                self._scan(self._top, emit=False)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            self.close()
            raise

    # -- the watches -------------------------------------------------------------------------
    def _add(self, fd: int, path: str) -> int:
        """Watch the directory open at ``fd`` (kept, closed with the watch): its wd.  The path given
        to inotify is our own descriptor's magic link, a jump to that inode, never a lookup."""
        wd = _inotify().inotify_add_watch(self._ifd, f"/proc/self/fd/{fd}".encode(), _WATCH_MASK)
        if wd < 0:
            err = ctypes.get_errno()
            os.close(fd)
            if err == errno.ENOSPC:
                raise SandboxError(f"watch() of {path}: the host's inotify watch limit is reached",
                                   hint="raise fs.inotify.max_user_watches, or watch fewer directories")  # fmt: skip
            raise file_error(err, path, f"inotify_add_watch: {os.strerror(err)}")
        if wd in self._dirs:  # the same directory again (seen by a scan and an event): keep one
            os.close(self._dirs[wd][0])
        self._dirs[wd] = (fd, path)
        return wd

    def _scan(self, wd: int, emit: bool) -> None:
        """Watch the subdirectories under ``wd``'s directory (already watched), on its filesystem:
        opened by one name relative to it, O_NOFOLLOW (a link is never followed).  ``emit``: queue a
        "created" event for everything found (it came before its directory was watched)."""
        todo = [wd]
        while todo:
            dfd, dpath = self._dirs[todo.pop()]
            try:
                names = sorted(os.listdir(dfd))
            except OSError:
                continue  # gone meanwhile, or unreadable: its own events still come
            for name in names:
                child = posixpath.join(dpath, name)
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
                isdir = _stat.S_ISDIR(st.st_mode)
                if emit:
                    self._pending.append(FileEvent(child, "created", isdir))
                if isdir and st.st_dev == self._dev:
                    sub = self._open_sub(dfd, name, child)
                    if sub is not None:
                        todo.append(self._add(sub, child))

    def _open_sub(self, dfd: int, name: str, path: str) -> int | None:
        if len(self._dirs) >= WATCH_MAX_DIRS:
            raise SandboxError(f"watch() of {self.path}: more than {WATCH_MAX_DIRS} directories to follow",
                               hint="watch a smaller tree, or without recursive=True")  # fmt: skip
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:  # gone, swapped for a link, unreadable: not followed
            return None
        st = os.fstat(sub)
        if not _stat.S_ISDIR(st.st_mode) or st.st_dev != self._dev:
            os.close(sub)
            return None
        return sub

    # -- events ----------------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            buf = os.read(self._ifd, 1 << 16)
        except BlockingIOError:
            return
        i = 0
        while i + _EVENT.size <= len(buf):
            wd, mask, cookie, length = _EVENT.unpack_from(buf, i)
            raw = buf[i + _EVENT.size : i + _EVENT.size + length].split(b"\0", 1)[0]
            i += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                raise SandboxError(f"watch() of {self.path} lost events: more changes came than the host's "
                                   "inotify queue holds", hint="raise fs.inotify.max_queued_events")  # fmt: skip
            known = self._dirs.get(wd)
            if known is None:
                continue
            dfd, dpath = known
            if mask & _IN_IGNORED:  # the directory is gone (or unmounted): its watch went with it
                os.close(self._dirs.pop(wd)[0])
                if wd == self._top:
                    self._ended = True
                continue
            if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT):
                if wd == self._top:  # nothing watches its parent: say it here, and end
                    self._pending.append(FileEvent(dpath, "deleted" if mask & _IN_DELETE_SELF else "moved_from", True))
                    self._ended = True
                continue
            if not raw or b"/" in raw or raw in (b".", b".."):
                continue
            name = os.fsdecode(raw)
            path = posixpath.join(dpath, name)
            isdir = bool(mask & _IN_ISDIR)
            for bit, kind in _KINDS:
                if mask & bit:
                    self._pending.append(FileEvent(path, kind, isdir, cookie))
            if self.recursive and isdir and mask & (_IN_CREATE | _IN_MOVED_TO):
                sub = self._open_sub(dfd, name, path)
                if sub is not None:
                    self._scan(self._add(sub, path), emit=True)

    def _alive(self) -> bool:
        sb = self._sb
        return not sb.closed and sb.generation == self._generation

    def __iter__(self) -> FileWatch:
        return self

    def __next__(self) -> FileEvent:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            if self._pending:
                return self._pending.popleft()
            if self._ended or self._ifd < 0 or not self._alive():
                self.close()
                raise StopIteration
            wait = _TICK_S if deadline is None else min(_TICK_S, deadline - time.monotonic())
            if wait <= 0:
                raise StopIteration  # nothing within the timeout (iterating again waits anew)
            poll = select.poll()
            poll.register(self._ifd, select.POLLIN)
            if poll.poll(int(wait * 1000) + 1):
                self._read()

    def close(self) -> None:
        """Stop watching and let go of every descriptor (idempotent)."""
        for fd, _path in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        if self._ifd >= 0:
            os.close(self._ifd)
            self._ifd = -1

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
