"""Container image layers: decompress them and apply them, one after another, onto a directory of the host.

A layer is a tar stream from an untrusted source (a registry, a ``docker save`` archive), so nothing here
trusts it: every member name is normalised and checked, every parent directory is opened one component at a
time from a descriptor of the root with ``O_NOFOLLOW`` (a member that would go through a symlink is refused,
never followed), every entry is made with ``*at`` calls on that descriptor, and sizes, counts and lengths
are bounded before anything is read (a tar bomb stops at its header).

    open_layer(path, media_type)    a context manager: the layer's uncompressed tar, as a binary stream
    apply_layer(stream, root)       apply ONE layer onto ``root`` (which holds the layers below it)
    unpack_image(layers, dest)      every layer in order into a fresh directory, renamed to ``dest`` when all
                                    succeed (nothing is kept otherwise)
    UnpackLimits, LayerStats, ImageStats

The semantics are the OCI image spec's "Applying changesets": ``.wh.NAME`` removes NAME from the layers below,
``DIR/.wh..wh..opq`` removes everything the layers below had in DIR (whatever its place in the tar: what this
layer made is tracked and kept), an entry replaces what was at its path (a directory over a directory merges).
Kept: directories, regular files, symlinks (their targets verbatim: they are resolved inside the sandbox's
root, never on the host), hard links (to a regular file already in the root), FIFOs, modes, mtimes, ``user.*``
extended attributes, and as root the numeric owners.  Dropped and counted: devices, other member types,
setuid/setgid bits, every other extended attribute (``security.capability`` in particular).
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import hashlib
import lzma
import math
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import ImageError

GIB = 1 << 30

# Layer media types and what their data is declared to be (the data's magic bytes decide, as with containerd:
# docker save stores layers as plain tar, and some tools gzip them anyway).
LAYER_MEDIA_TYPES = {
    "application/vnd.oci.image.layer.v1.tar": "tar",
    "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd": "zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar": "tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.diff.tar": "tar",  # uncompressed docker layers (skopeo, containers/image)
}

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
XATTR_PAX = "SCHILY.xattr."
HOSTILE = "the layer is hostile or broken: do not use this image (or rebuild it)"
DAMAGED = "the layer is damaged or was cut short: pull (or save) the image again"

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY = 1 << 20  # bytes per read of a member's data
_NAMES_KEPT = 1000  # names kept per kind of drop in LayerStats (the counts go on)
_EXTENDED_MAX = 1 << 20  # bytes of pax / GNU long-name headers one member may carry
_EXTENDED_CHAIN = 32  # extended headers before one member
_TRAILER_MAX = 8 << 20  # bytes after the tar's end-of-archive marker (record padding: 10 KiB for GNU tar)
_RECENT = 64 << 10  # bytes of the stream kept to check the end-of-archive marker (tarfile reads ahead 10 KiB)


@dataclass(frozen=True)
class UnpackLimits:
    """Bounds on what one layer (and one ``unpack_image`` call) may make; going over is an ``ImageError``
    that names the field to raise.  File data is counted by the size each member declares, before it is
    read: a member declaring 100 GiB stops at its header."""

    max_layer_bytes: int = 8 * GIB  # file data in one layer
    max_entries: int = 1_000_000  # members of one layer (whiteouts and dropped ones included)
    max_path: int = 4096  # bytes of a member's path (and of a link's target)
    max_name: int = 255  # bytes of one path component
    max_total_bytes: int = 32 * GIB  # file data over all layers of one unpack_image call


@dataclass
class LayerStats:
    """What applying one layer did.  The lists keep the first 1000 paths; the counts count them all."""

    diff_id: str = ""  # "sha256:<hex>" of the uncompressed tar as read
    entries: int = 0
    bytes: int = 0  # file data, as the members declare it (counted before it is read)
    whiteouts: int = 0  # whiteouts and opaque markers
    dropped: list[str] = field(default_factory=list)  # "dev/null (character device)"
    dropped_count: int = 0
    setid_stripped: list[str] = field(default_factory=list)  # files whose setuid/setgid bits were cleared
    setid_count: int = 0
    xattrs_dropped: list[str] = field(default_factory=list)  # "usr/bin/ping: security.capability"
    xattrs_dropped_count: int = 0
    shared: int = 0  # file bytes found in the store's shared files already (linked, not kept again)

    def note(self, kind: str, text: str) -> None:
        """Count one drop of ``kind`` ("dropped", "setid", "xattrs_dropped"), keeping its text."""
        names = {"dropped": self.dropped, "setid": self.setid_stripped, "xattrs_dropped": self.xattrs_dropped}[kind]
        if len(names) < _NAMES_KEPT:
            names.append(text)
        counter = {"dropped": "dropped_count", "setid": "setid_count", "xattrs_dropped": "xattrs_dropped_count"}
        setattr(self, counter[kind], getattr(self, counter[kind]) + 1)


@dataclass
class ImageStats:
    """What ``unpack_image`` did: the directory made and each layer's stats, bottom first."""

    dest: Path
    layers: list[LayerStats] = field(default_factory=list)

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.layers)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.layers)

    @property
    def shared(self) -> int:
        return sum(s.shared for s in self.layers)


# ---- files shared between images ----------------------------------------------------------------
# A regular file an image unpacks is also kept, by a key of its content and metadata, in the store's
# ``files`` folder: a hard link.  The next image (or layer) that unpacks the same file links to that
# one instead of keeping its own copy, so a base that images share is stored once, as its blobs are.
# Metadata is in the key because links share their inode (mode, times, attributes); the owner is
# not: as root, every image's files are given to one uid after unpacking.  Nothing writes into a
# file once it is unpacked (a layer's file replaces the one below it: a new inode), and sandboxes
# see images read-only, so a shared inode never changes under another image.


def object_key(content: bytes, mode: int, mtime_ns: int, pax: dict[str, str]) -> str:
    """The shared-file name of a file: sha256 of its content's digest, mode, mtime and user xattrs."""
    h = hashlib.sha256(content)
    h.update(f" {mode:o} {mtime_ns}".encode())
    for key in sorted(k for k in pax if k.startswith(XATTR_PAX + "user.")):
        h.update(b"\0" + key.encode("utf-8", "surrogateescape") + b"=" + pax[key].encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def share_file(objects: int, key: str, pfd: int, name: str) -> bool:
    """``name`` (just written in the directory ``pfd``) shared through ``objects``: replaced by a
    link to the file of the same key when there is one (True), else linked there for the next.
    Anything in the way (a name too long for the temporary link, another filesystem) keeps the
    file as it is: sharing saves space, it is never needed."""
    temp = f".{name}.shared"
    try:
        os.link(key, temp, src_dir_fd=objects, dst_dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:  # the first of its kind: kept for the next ones
        try:
            os.link(name, key, src_dir_fd=pfd, dst_dir_fd=objects, follow_symlinks=False)
        except OSError:
            pass  # (another import kept it meanwhile, or the store is elsewhere: ours stays unshared)
        return False
    except OSError:
        return False
    try:
        os.rename(temp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
    except OSError:
        os.unlink(temp, dir_fd=pfd)
        return False
    return True


# ---- opening a layer ----------------------------------------------------------------------------


def _sniff(head: bytes) -> str:
    """The compression the first bytes show ("tar" when none): a tar starts with a member name, which
    these magic numbers are not."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd" or (len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and head[0] >> 4 == 5):
        return "zstd"  # a zstd frame, or a skippable frame (zstd:chunked layers have them)
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:3] == b"BZh" and head[4:10] == b"1AY&SY":
        return "bzip2"
    return "tar"


@contextlib.contextmanager
def open_layer(path: str | os.PathLike, media_type: str) -> Iterator[BinaryIO]:
    """Yield the uncompressed tar of the layer blob at ``path``, streamed (nothing of it is kept whole).

    ``media_type`` must be a layer type (OCI tar, tar+gzip, tar+zstd, docker's tar.gzip); the data's own
    magic bytes decide how it is decompressed (gzip, zstd, also xz and bzip2 as ``docker load`` accepts).
    zstd is streamed through the ``zstd`` command (else the ``zstandard`` module)."""
    if media_type not in LAYER_MEDIA_TYPES:
        raise ImageError(f"layer {path} has media type {media_type!r}, which is not a layer type sandboxlite unpacks",
                         hint="layers are OCI tar, tar+gzip or tar+zstd, or docker's tar.gzip "
                              "(is the descriptor an index, a manifest or a config?)")  # fmt: skip
    try:
        raw = open(path, "rb", buffering=0)
    except OSError as e:
        raise ImageError(f"cannot read layer {path}: {e.strerror}",
                         hint="is the image's blob store complete?") from None
    with raw:
        kind = _sniff(raw.read(10))
        raw.seek(0)
        if kind == "tar":
            yield raw
        elif kind == "zstd":
            with _zstd(raw, path) as stream:
                yield stream
        else:
            with _decompressor(kind, raw) as stream:
                yield stream


def _decompressor(kind: str, raw: BinaryIO) -> BinaryIO:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "xz":
        return lzma.LZMAFile(raw, "rb")  # type: ignore[return-value]
    return bz2.BZ2File(raw, "rb")  # type: ignore[return-value]


@contextlib.contextmanager
def _zstd(raw: BinaryIO, path: str | os.PathLike) -> Iterator[BinaryIO]:
    exe = shutil.which("zstd")
    if exe is None:
        try:
            import zstandard
        except ImportError:
            raise ImageError(f"layer {path} is zstd-compressed, and neither the zstd command nor the zstandard "
                             "module is installed", hint="apt-get install zstd (tools/setup.sh installs it), "
                             "or pip install zstandard") from None  # fmt: skip
        with zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as stream:
            yield stream
        return
    proc = subprocess.Popen([exe, "-q", "-d", "-c"], stdin=raw, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    done = False
    try:
        yield proc.stdout
        done = True
    finally:
        proc.stdout.close()  # zstd ends (EPIPE) if the caller stopped reading early
        err = proc.stderr.read(4096).decode(errors="replace").strip()
        proc.stderr.close()
        rc = proc.wait()
    if done and rc != 0:
        raise ImageError(f"zstd could not decompress layer {path}: {err or f'exit code {rc}'}", hint=DAMAGED)


# ---- reading the tar ----------------------------------------------------------------------------


class _Reader:
    """The uncompressed layer as tarfile reads it: hashed as it passes, its last bytes kept (to find the
    end-of-archive marker), and any error of the decompressor turned into an ``ImageError``."""

    def __init__(self, stream: BinaryIO, algorithm: str) -> None:
        self.stream = stream
        self.hash = hashlib.new(algorithm)
        self.pos = 0
        self.recent: deque[bytes] = deque()
        self.kept = 0

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.stream.read(size)
        except ImageError:
            raise
        except Exception as e:  # EOFError, zlib.error, lzma.LZMAError, OSError, zstandard.ZstdError...
            raise ImageError(f"the layer's data could not be read ({type(e).__name__}: {e})", hint=DAMAGED) from None
        data = bytes(data)
        if data:
            self.hash.update(data)
            self.pos += len(data)
            self.recent.append(data)
            self.kept += len(data)
            while self.kept - len(self.recent[0]) >= _RECENT:
                self.kept -= len(self.recent.popleft())
        return data

    def since(self, offset: int) -> bytes | None:
        """The bytes read from ``offset`` on, if they are still kept."""
        if offset < self.pos - self.kept:
            return None
        return b"".join(self.recent)[offset - (self.pos - self.kept):]


def _extended(info: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
    """Bound the extended headers (pax, GNU long names) before one member: tarfile reads each whole into
    memory, one inside the other."""
    count, size = getattr(tar, "_sl_extended", (0, 0))
    count, size = count + 1, size + max(info.size, 0)
    if info.size < 0 or size > _EXTENDED_MAX or count > _EXTENDED_CHAIN:
        raise ImageError(f"the layer's tar has {count} extended headers of {size} bytes before one member "
                         f"(at offset {info.offset}): more than {_EXTENDED_MAX} bytes or {_EXTENDED_CHAIN} headers",
                         hint=HOSTILE)  # fmt: skip
    tar._sl_extended = (count, size)  # type: ignore[attr-defined]


def _pax_records(data: bytes, offset: int) -> list[tuple[bytes, bytes]]:
    """The "LENGTH KEY=VALUE\\n" records of a pax header, parsed in one linear pass."""
    out, pos = [], 0
    while pos < len(data):
        if data[pos] == 0:  # padding, to the end (counted once: a scan per record would be quadratic)
            if data.count(0, pos) != len(data) - pos:
                raise ImageError(f"the layer's tar has a malformed pax header at offset {offset}", hint=HOSTILE)
            break
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        end = pos + int(digits) if digits.isdigit() else -1
        equals = data.find(b"=", space + 1, end) if end > space + 1 else -1
        if equals <= space + 1 or end > len(data) or data[end - 1] != 0x0A:
            raise ImageError(f"the layer's tar has a malformed pax header at offset {offset}", hint=HOSTILE)
        out.append((data[space + 1:equals], data[equals + 1:end - 1]))
        pos = end
    return out


def _decode(value: bytes, encoding: str, errors: str) -> str:
    try:
        return value.decode(encoding, "strict")
    except UnicodeDecodeError:
        return value.decode("utf-8", errors)


class _TarInfo(tarfile.TarInfo):
    """tarfile's member header, read with bounds: extended headers are capped (``_extended``), pax records
    are parsed here in linear time (CPython before 3.11.10 and 3.12.6 parses them with regular expressions
    that take quadratic time on long runs of digits, CVE-2024-6232), and sparse files are refused (tarfile
    reads their maps without a bound).  Relies on tarfile's ``_proc_*`` hooks, stable since Python 3.2."""

    def _proc_gnulong(self, tar):  # (tarfile's signatures)
        _extended(self, tar)
        return super()._proc_gnulong(tar)

    def _proc_sparse(self, tar):
        raise ImageError(f"the layer's tar holds a sparse file (at offset {self.offset}): not supported", hint=HOSTILE)

    def _proc_pax(self, tar):
        """As tarfile's own, without the regular expressions and the sparse formats."""
        _extended(self, tar)
        buf = tar.fileobj.read(self._block(self.size))
        if len(buf) < self.size:
            raise tarfile.ReadError("unexpected end of data")
        headers = tar.pax_headers if self.type == tarfile.XGLTYPE else tar.pax_headers.copy()
        records = _pax_records(buf[: self.size], self.offset)
        binary = (b"hdrcharset", b"BINARY") in records
        for key, value in records:
            name = _decode(key, "utf-8", tar.errors)
            if name.startswith("GNU.sparse."):
                raise ImageError(f"the layer's tar holds a sparse file (at offset {self.offset}): not supported",
                                 hint=HOSTILE)  # fmt: skip
            encoding = tar.encoding if binary and name in tarfile.PAX_NAME_FIELDS else "utf-8"
            headers[name] = _decode(value, encoding, tar.errors)
        try:
            nxt = self.fromtarfile(tar)
        except tarfile.HeaderError as e:
            raise tarfile.SubsequentHeaderError(str(e)) from None
        if self.type in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE):
            nxt._apply_pax_info(headers, tar.encoding, tar.errors)
            nxt.offset = self.offset
            if "size" in headers:  # the next header is after the size the pax header says
                offset = nxt.offset_data
                if nxt.isreg() or nxt.type not in tarfile.SUPPORTED_TYPES:
                    offset += nxt._block(nxt.size)
                tar.offset = offset
        return nxt


def _data_size(member: tarfile.TarInfo) -> int:
    """The bytes of data that follow the member's header (what tarfile reads or skips)."""
    return member.size if member.isreg() or member.type not in tarfile.SUPPORTED_TYPES else 0


def _over(what: str, limit: str, value: int, member: str) -> ImageError:
    return ImageError(f"the layer is over a limit at member {member!r}: {what} (UnpackLimits.{limit} = {value:,})",
                      hint=f"a tar bomb, or a very large image: if you trust it, raise the limit "
                           f"(UnpackLimits({limit}=...))")  # fmt: skip


def _parts(name: str, limits: UnpackLimits, member: str, what: str = "member") -> list[str]:
    """The components of a member name ("./a//b/" -> ["a", "b"]), refusing NUL, "..", and lengths over the
    limits.  Leading "/" and "./" are dropped: an absolute name lands inside the root, as with tar."""
    if "\0" in name:
        raise ImageError(f"{what} {name!r} contains a NUL byte", hint=HOSTILE)
    if len(name.encode("utf-8", "surrogateescape")) > limits.max_path:
        raise _over(f"the path {name[:64]!r}... is longer than {limits.max_path} bytes", "max_path", limits.max_path,
                    member)  # fmt: skip
    parts = [p for p in name.split("/") if p not in ("", ".")]
    for p in parts:
        if p == "..":
            raise ImageError(f"{what} {name!r} has a '..' component: it would reach outside the image", hint=HOSTILE)
        if len(p.encode("utf-8", "surrogateescape")) > limits.max_name:
            raise _over(f"a name in {name[:64]!r} is longer than {limits.max_name} bytes", "max_name",
                        limits.max_name, member)  # fmt: skip
    if any(p.startswith(WHITEOUT) for p in parts[:-1]):
        raise ImageError(f"{what} {name!r} goes through a whiteout name (.wh.*) as if it were a directory",
                         hint=HOSTILE)  # fmt: skip
    return parts


def _mtime_ns(member: tarfile.TarInfo) -> int:
    t = member.mtime
    if isinstance(t, float):  # a pax mtime: whole seconds and the fraction apart (a double holds no 1e18 ns exactly)
        if not math.isfinite(t) or abs(t) > 1 << 62:
            return 0
        seconds = math.floor(t)
        t = seconds * 1_000_000_000 + round((t - seconds) * 1_000_000_000)
    else:
        t = int(t) * 1_000_000_000
    return max(-(1 << 62), min(t, 1 << 62))  # a hostile pax mtime must not overflow utimensat


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


# ---- removing trees -----------------------------------------------------------------------------


def _open_to_remove(parent: int, name: str) -> int:
    """A directory under ``parent``, opened for its removal (as a user, opened up: we own it)."""
    try:
        fd = os.open(name, _DIR, dir_fd=parent)
    except PermissionError:
        # a user's own directory of mode 0o000: fchmodat follows a link, but ``name`` was just seen to be a
        # directory, and nothing else writes in this tree while it is unpacked
        os.chmod(name, 0o700, dir_fd=parent)
        fd = os.open(name, _DIR, dir_fd=parent)
    if os.geteuid() != 0 and stat.S_IMODE(os.fstat(fd).st_mode) & 0o700 != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _remove_at(parent: int, name: str) -> None:
    """Remove ``name`` under the directory ``parent``: a file, a link (never followed) or a whole tree.

    One descriptor at a time (a tree may be 2,000 deep: one each would run out), going back up by "..",
    which, in a tree nothing else changes, is the directory it came from."""
    st = _lstat(parent, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    fd = _open_to_remove(parent, name)
    stack = [(name, os.listdir(fd))]
    try:
        while stack:
            entries = stack[-1][1]
            if entries:
                child = entries.pop()
                st = _lstat(fd, child)
                if st is not None and stat.S_ISDIR(st.st_mode):
                    sub = _open_to_remove(fd, child)
                    os.close(fd)
                    fd = sub
                    stack.append((child, os.listdir(fd)))
                elif st is not None:
                    os.unlink(child, dir_fd=fd)
                continue
            done = stack.pop()[0]
            if stack:
                up = os.open("..", _DIR, dir_fd=fd)
                os.close(fd)
                fd = up
                os.rmdir(done, dir_fd=fd)
            else:
                os.close(fd)
                fd = -1
                os.rmdir(done, dir_fd=parent)
    finally:
        if fd >= 0:
            os.close(fd)


# ---- applying one layer -------------------------------------------------------------------------


class _Layer:
    """One layer being applied onto the directory open as ``root``.

    ``touched``: the paths this layer holds (made, or directories walked through to make something): an
    opaque marker or a whiteout removes only what is *not* touched, whatever the order of the members.
    ``final``: this layer's directories, whose modes and times are set at the end (their children change
    them).  ``relaxed``: as a user, directories given u+rwx to work in, and the modes they get back."""

    def __init__(self, root: int, limits: UnpackLimits, stats: LayerStats, written_before: int,
                 objects: int | None = None) -> None:  # fmt: skip
        self.root, self.limits, self.stats = root, limits, stats
        self.objects = objects  # the store's shared files (see share_file), or None
        self.written_before = written_before
        self.is_root = os.geteuid() == 0
        self.touched: set[str] = set()
        self.final: dict[str, tuple[int, int | None]] = {}
        self.relaxed: dict[str, int] = {}
        self._cache: tuple[str, int] | None = None  # the last directory walked to, and an fd of it
        self._touched_parent: str | None = None

    def close(self) -> None:
        self._drop_cache()

    def _drop_cache(self) -> None:
        if self._cache is not None:
            os.close(self._cache[1])
            self._cache = None

    # -- walking ------------------------------------------------------------------------------------

    def walk(self, parts: list[str], member: str, *, create: bool) -> int:
        """A new fd of the directory ``parts`` (the root for []), opened one component at a time with
        O_NOFOLLOW; missing directories are made (0o755) when ``create``, else FileNotFoundError.  A
        symlink or a file on the way is an ImageError."""
        key = "/".join(parts)
        start, fd = 0, None
        if self._cache is not None:
            cached, cfd = self._cache
            if key == cached:
                return os.dup(cfd)
            if key.startswith(cached + "/"):  # the members of a tar come mostly in order
                start, fd = cached.count("/") + 1, os.dup(cfd)
        if fd is None:
            fd = os.dup(self.root)
        try:
            for i in range(start, len(parts)):
                sub = self._enter(fd, parts[i], "/".join(parts[: i + 1]), member, create)
                os.close(fd)
                fd = sub
        except BaseException:
            os.close(fd)
            raise
        if parts:
            self._drop_cache()
            self._cache = (key, os.dup(fd))
        return fd

    def _enter(self, fd: int, name: str, path: str, member: str, create: bool) -> int:
        """Open the directory ``name`` under ``fd`` (``path`` from the root), never through a link."""
        try:
            sub = os.open(name, _DIR, dir_fd=fd)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(name, 0o755, dir_fd=fd)
            sub = os.open(name, _DIR, dir_fd=fd)
            os.fchmod(sub, 0o755)  # whatever the umask: the mode an implied directory gets
            return sub
        except PermissionError:
            if self.is_root:
                raise
            st = _lstat(fd, name)
            if st is None or not stat.S_ISDIR(st.st_mode):
                raise
            self.relaxed.setdefault(path, stat.S_IMODE(st.st_mode))
            os.chmod(name, 0o700, dir_fd=fd)  # a directory (just seen), in a tree only we write to
            sub = os.open(name, _DIR, dir_fd=fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise self._not_a_dir(fd, name, path, member) from None
            raise
        if not self.is_root:
            mode = stat.S_IMODE(os.fstat(sub).st_mode)
            if mode & 0o700 != 0o700:  # a user needs rwx in a directory to make things in it
                self.relaxed.setdefault(path, mode)
                os.fchmod(sub, mode | 0o700)
        return sub

    @staticmethod
    def _not_a_dir(fd: int, name: str, path: str, member: str) -> ImageError:
        try:
            what = f"a symlink (to {os.readlink(name, dir_fd=fd)!r})"
        except OSError:
            what = "not a directory"
        return ImageError(f"member {member!r} goes through {path!r}, which is {what}: a layer may not write "
                          "through a link (it could reach the host)", hint=HOSTILE)  # fmt: skip

    def _touch(self, parts: list[str]) -> None:
        """Mark ``parts`` and every directory above it as held by this layer."""
        parent = "/".join(parts[:-1])
        if parent != self._touched_parent:
            for i in range(1, len(parts)):
                self.touched.add("/".join(parts[:i]))
            self._touched_parent = parent
        if parts:
            self.touched.add("/".join(parts))

    def _clear(self, pfd: int, name: str) -> None:
        """Remove whatever is at ``name`` (a whole tree for a directory), never following a link."""
        st = _lstat(pfd, name)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            self._drop_cache()  # the cached directory may be inside
            _remove_at(pfd, name)
        else:
            os.unlink(name, dir_fd=pfd)

    # -- members ------------------------------------------------------------------------------------

    def admit(self, member: tarfile.TarInfo) -> list[str] | None:
        """Count the member against the limits and check its name: its components, or None for the root
        directory itself ("./"), which is left as it is."""
        self.stats.entries += 1
        if self.stats.entries > self.limits.max_entries:
            raise _over(f"more than {self.limits.max_entries:,} entries", "max_entries", self.limits.max_entries,
                        member.name)  # fmt: skip
        if member.size < 0:
            raise ImageError(f"member {member.name!r} declares a negative size", hint=HOSTILE)
        size = _data_size(member)
        self.stats.bytes += size
        if self.stats.bytes > self.limits.max_layer_bytes:
            raise _over(f"more than {self.limits.max_layer_bytes:,} bytes of file data (this member declares "
                        f"{size:,})", "max_layer_bytes", self.limits.max_layer_bytes, member.name)  # fmt: skip
        if self.written_before + self.stats.bytes > self.limits.max_total_bytes:
            raise _over(f"more than {self.limits.max_total_bytes:,} bytes of file data over all layers",
                        "max_total_bytes", self.limits.max_total_bytes, member.name)  # fmt: skip
        parts = _parts(member.name, self.limits, member.name)
        if not parts:
            if member.isdir():
                return None
            raise ImageError(f"member {member.name!r} names no path (nothing is left once './' and '/' are removed)",
                             hint=HOSTILE)  # fmt: skip
        return parts

    def apply(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        """Apply one member (the caller has counted it with ``admit``)."""
        parts = self.admit(member)
        if parts is None:
            return
        try:
            self._apply(tar, member, parts)
        except OSError as e:
            raise ImageError(f"could not unpack member {member.name!r}: {e.strerror or e}",
                             hint="check the space and permissions where the image is unpacked") from None

    def _apply(self, tar: tarfile.TarFile, member: tarfile.TarInfo, parts: list[str]) -> None:
        if parts[-1].startswith(WHITEOUT):
            self._whiteout(parts, member)
            return
        path = "/".join(parts)
        make = {"dir": self._make_dir, "file": self._make_file, "symlink": self._make_symlink,
                "link": self._make_link, "fifo": self._make_fifo}.get(_kind(member))  # fmt: skip
        if make is None:
            self.stats.note("dropped", f"{path} ({_kind(member)})")
            return
        self._touch(parts)
        pfd = self.walk(parts[:-1], member.name, create=True)
        try:
            make(tar, member, pfd, parts[-1], path)
        finally:
            os.close(pfd)

    def _whiteout(self, parts: list[str], member: tarfile.TarInfo) -> None:
        """``.wh.NAME``: remove NAME as the layers below have it; ``.wh..wh..opq``: the same for every entry
        of the directory.  Whatever this layer itself put there stays (the spec: a whiteout only applies to
        lower layers), so the members may come in any order."""
        self.stats.whiteouts += 1
        name, above = parts[-1], parts[:-1]
        if name != OPAQUE and name[len(WHITEOUT):].startswith(WHITEOUT):
            self.stats.note("dropped", f"{'/'.join(parts)} (aufs metadata)")  # .wh..wh.plnk and such
            return
        target = name[len(WHITEOUT):]
        if name != OPAQUE and target in ("", ".", ".."):
            raise ImageError(f"member {member.name!r} is a whiteout of {target!r}, which names no entry", hint=HOSTILE)
        self._touch(above)  # the directory holding a whiteout is this layer's (as in an overlay's upper)
        fd = self.walk(above, member.name, create=True)
        try:
            targets = [above + [child] for child in os.listdir(fd)] if name == OPAQUE else [above + [target]]
        finally:
            os.close(fd)
        self._prune(targets, member.name)

    def _prune(self, stack: list[list[str]], member: str) -> None:
        """Remove from each path what the layers below put there: all of it when this layer holds nothing
        there, else (a directory this layer holds) each entry in it this layer did not make, and so on down."""
        while stack:
            parts = stack.pop()
            path = "/".join(parts)
            try:
                pfd = self.walk(parts[:-1], member, create=False)
            except FileNotFoundError:
                continue
            try:
                if path not in self.touched:
                    self._clear(pfd, parts[-1])
                    continue
                st = _lstat(pfd, parts[-1])
                if st is None or not stat.S_ISDIR(st.st_mode):
                    continue
                fd = self._enter(pfd, parts[-1], path, member, create=False)
                try:
                    stack.extend(parts + [child] for child in os.listdir(fd))
                finally:
                    os.close(fd)
            finally:
                os.close(pfd)

    # -- making entries -----------------------------------------------------------------------------

    def _own(self, fd: int, member: tarfile.TarInfo) -> None:
        """As root, the member's numeric owner; a user's files stay the user's."""
        if self.is_root:
            os.fchown(fd, *_ids(member))

    def _mode(self, member: tarfile.TarInfo, path: str) -> int:
        mode = member.mode & 0o7777
        if mode & (stat.S_ISUID | stat.S_ISGID):
            self.stats.note("setid", path)  # nothing in a sandbox may gain privileges (rootfs/hooks/no-setuid.sh)
            mode &= ~(stat.S_ISUID | stat.S_ISGID)
        return mode

    def _xattrs(self, fd: int | None, member: tarfile.TarInfo, path: str) -> None:
        """Set the member's ``user.*`` extended attributes on ``fd``; count every other one (and all of them
        when ``fd`` is None: symlinks and FIFOs cannot hold user attributes) as dropped."""
        for key, value in member.pax_headers.items():
            if not key.startswith(XATTR_PAX):
                if key.startswith("LIBARCHIVE.xattr."):
                    self.stats.note("xattrs_dropped", f"{path}: {key} (libarchive's form is not read)")
                continue
            attr = key[len(XATTR_PAX):]
            if fd is None or not attr.startswith("user."):
                self.stats.note("xattrs_dropped", f"{path}: {attr}")
                continue
            try:
                os.setxattr(fd, attr, value.encode("utf-8", "surrogateescape"))
            except (OSError, ValueError) as e:  # a filesystem without user xattrs, a name too long...
                self.stats.note("xattrs_dropped", f"{path}: {attr} ({getattr(e, 'strerror', None) or e})")

    def _make_dir(self, tar: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, name: str, path: str) -> None:
        st = _lstat(pfd, name)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=pfd)
            st = None
        if st is None:
            os.mkdir(name, 0o700, dir_fd=pfd)
        fd = self._enter(pfd, name, path, member.name, create=False)
        try:
            self._own(fd, member)
            self._xattrs(fd, member, path)
        finally:
            os.close(fd)
        # the setgid bit of a directory only passes its group on: kept; setuid means nothing there
        self.final[path] = (member.mode & 0o3777, _mtime_ns(member))

    def _make_file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, name: str, path: str) -> None:
        self._clear(pfd, name)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=pfd)
        content = hashlib.sha256()
        with open(fd, "wb") as out:
            src = tar.extractfile(member)
            assert src is not None
            while chunk := src.read(_COPY):
                content.update(chunk)
                out.write(chunk)
            out.flush()
            self._own(fd, member)
            self._xattrs(fd, member, path)
            mode = self._mode(member, path)
            os.fchmod(fd, mode)
            t = _mtime_ns(member)
            os.utime(fd, ns=(t, t))
            if self.objects is not None:
                key = object_key(content.digest(), mode, t, member.pax_headers)
                if share_file(self.objects, key, pfd, name):
                    self.stats.shared += member.size

    def _make_symlink(self, tar: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, name: str, path: str) -> None:
        target = member.linkname
        if not target or "\0" in target:
            raise ImageError(f"member {member.name!r} is a symlink to {target!r}: no valid target", hint=HOSTILE)
        if len(target.encode("utf-8", "surrogateescape")) > self.limits.max_path:
            raise _over(f"a symlink target longer than {self.limits.max_path} bytes", "max_path", self.limits.max_path,
                        member.name)  # fmt: skip
        self._clear(pfd, name)
        os.symlink(target, name, dir_fd=pfd)  # verbatim: resolved inside the sandbox's root, never here
        if self.is_root:
            os.chown(name, *_ids(member), dir_fd=pfd, follow_symlinks=False)
        t = _mtime_ns(member)
        os.utime(name, ns=(t, t), dir_fd=pfd, follow_symlinks=False)
        self._xattrs(None, member, path)

    def _make_link(self, tar: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, name: str, path: str) -> None:
        """A hard link, to a regular file already in the root (this layer's or a lower one's).  The link
        shares the file's inode, so the file's own mode, owner and attributes are the link's."""
        what = f"the target of hard link {member.name!r}"
        tparts = _parts(member.linkname, self.limits, member.name, what)
        if not tparts or tparts == path.split("/"):
            raise ImageError(f"member {member.name!r} is a hard link to {member.linkname!r}: to itself or nothing",
                             hint=HOSTILE)  # fmt: skip
        try:
            tfd = self.walk(tparts[:-1], member.name, create=False)
        except FileNotFoundError:
            tfd = None
        try:
            st = _lstat(tfd, tparts[-1]) if tfd is not None else None
            if st is None or not stat.S_ISREG(st.st_mode):
                kind = "not in the image" if st is None else f"a {_file_kind(st.st_mode)}"
                raise ImageError(f"member {member.name!r} is a hard link to {member.linkname!r}, which is {kind}: "
                                 "only a regular file already unpacked may be linked to", hint=HOSTILE)  # fmt: skip
            self._clear(pfd, name)
            os.link(tparts[-1], name, src_dir_fd=tfd, dst_dir_fd=pfd, follow_symlinks=False)
        finally:
            if tfd is not None:
                os.close(tfd)

    def _make_fifo(self, tar: tarfile.TarFile, member: tarfile.TarInfo, pfd: int, name: str, path: str) -> None:
        self._clear(pfd, name)
        os.mkfifo(name, 0o600, dir_fd=pfd)
        # opened (without waiting for a writer) to set its metadata by descriptor, not by a path
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        try:
            self._own(fd, member)
            os.fchmod(fd, self._mode(member, path))
            t = _mtime_ns(member)
            os.utime(fd, ns=(t, t))
        finally:
            os.close(fd)
        self._xattrs(None, member, path)

    # -- the end ------------------------------------------------------------------------------------

    def finish(self) -> None:
        """Set the modes and times of this layer's directories and give back the modes of those opened up
        to work in: deepest first (a parent's mode may close it to a user, and a child's change would move
        its parent's mtime)."""
        todo: dict[str, tuple[int, int | None]] = {path: (mode, None) for path, mode in self.relaxed.items()}
        todo.update(self.final)
        self._drop_cache()
        for path in sorted(todo, key=lambda p: p.count("/"), reverse=True):
            self._set_dir(path, *todo[path])

    def _set_dir(self, path: str, mode: int, mtime: int | None) -> None:
        parts = path.split("/")
        try:
            pfd = self.walk(parts[:-1], path, create=False)
        except (FileNotFoundError, ImageError):
            return  # removed later in the layer, or a link now stands on the way: nothing to set
        try:
            fd = os.open(parts[-1], _DIR, dir_fd=pfd)
        except OSError:
            return  # gone, or no longer a directory
        finally:
            os.close(pfd)
        try:
            os.fchmod(fd, mode)
            if mtime is not None:
                os.utime(fd, ns=(mtime, mtime))
        finally:
            os.close(fd)
        if not self.is_root:
            self._drop_cache()  # the mode just set may close a cached directory to a user


def _kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "dir"
    if member.isreg():
        return "file"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "link"
    if member.isfifo():
        return "fifo"
    if member.ischr():
        return "character device"
    if member.isblk():
        return "block device"
    return f"unsupported member type {member.type!r}"


def _file_kind(mode: int) -> str:
    return "directory" if stat.S_ISDIR(mode) else "symlink" if stat.S_ISLNK(mode) else "special file"


def _ids(member: tarfile.TarInfo) -> tuple[int, int]:
    uid, gid = member.uid, member.gid
    if not (0 <= uid < 0xFFFFFFFF and 0 <= gid < 0xFFFFFFFF):  # (uid_t)-1 means "unchanged" to chown
        raise ImageError(f"member {member.name!r} has owner {uid}:{gid}, which is no valid uid:gid", hint=HOSTILE)
    return uid, gid


def _digest_of(diff_id: str | None) -> str:
    if diff_id is None:
        return "sha256"
    algorithm, _, hexdigest = diff_id.partition(":")
    if algorithm not in ("sha256", "sha384", "sha512") or not hexdigest:
        raise ImageError(f"diff_id {diff_id!r} is not a digest sandboxlite can check (sha256:<hex>)",
                         hint="the image's config is damaged")  # fmt: skip
    return algorithm


def _members(reader: _Reader, layer: _Layer) -> int:
    """Apply every member of the tar read from ``reader``; the offset of its end-of-archive block."""
    last = None
    try:
        with tarfile.open(fileobj=reader, mode="r|", tarinfo=_TarInfo, encoding="utf-8",
                          errors="surrogateescape") as tar:  # fmt: skip
            while (member := tar.next()) is not None:
                tar.members.clear()  # the stream is read once: keep no index of a million members
                tar._sl_extended = (0, 0)  # type: ignore[attr-defined]
                last = member.name
                layer.apply(tar, member)
            return tar.offset
    except (tarfile.TarError, EOFError, ValueError, IndexError, RecursionError) as e:
        where = f"at or after member {last!r}" if last is not None else "at its start"
        raise ImageError(f"the layer is not a complete tar: {e or type(e).__name__} ({where})", hint=DAMAGED) from None


def _check_end(reader: _Reader, offset: int) -> None:
    """Read the stream to its end (the digest covers every byte) and check the tar ended with its
    end-of-archive block: tarfile takes a stream cut at a member's boundary, or garbage, for the end."""
    tail = reader.since(offset)
    if tail is None:
        raise ImageError("the end of the layer's tar could not be checked (the stream read too far ahead)",
                         hint="pass apply_layer a stream whose read(n) returns at most n bytes")
    extra = 0
    while chunk := reader.read(1 << 16):
        extra += len(chunk)
        if len(tail) < tarfile.BLOCKSIZE:
            tail += chunk[: tarfile.BLOCKSIZE]
        if extra > _TRAILER_MAX:
            raise ImageError(f"the layer has more than {_TRAILER_MAX} bytes after the end of its tar", hint=HOSTILE)
    block = tail[: tarfile.BLOCKSIZE]
    if len(block) < tarfile.BLOCKSIZE or block.count(0) != tarfile.BLOCKSIZE:
        raise ImageError(f"the layer's tar has no end-of-archive block at offset {offset}: it was cut short or "
                         "is damaged", hint=DAMAGED)  # fmt: skip


def apply_layer(stream: BinaryIO, root: str | os.PathLike, *, diff_id: str | None = None,
                limits: UnpackLimits = UnpackLimits(), written_before: int = 0,
                objects: str | os.PathLike | None = None) -> LayerStats:  # fmt: skip
    """Apply ONE layer, the uncompressed tar read from ``stream`` (read once, start to end: a pipe will do),
    onto the directory ``root``, which holds the layers below it already applied.

    ``diff_id`` ("sha256:<hex>" of the uncompressed tar), when given, is checked at the end.
    ``written_before``: file bytes the earlier layers of the same image wrote (for
    ``limits.max_total_bytes``).  Any problem is an ``ImageError``; ``root`` is then half-applied and must
    be thrown away (``unpack_image`` does).  ``objects``: the store's shared files (a folder on the
    same filesystem): every regular file is linked there, or to the same file found there."""
    algorithm = _digest_of(diff_id)
    reader = _Reader(stream, algorithm)
    stats = LayerStats()
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the caller's own directory
    objects_fd = os.open(objects, _DIR) if objects is not None else None
    layer = _Layer(root_fd, limits, stats, written_before, objects_fd)
    try:
        end = _members(reader, layer)
        _check_end(reader, end)
        try:
            layer.finish()
        except OSError as e:
            raise ImageError(f"could not set the modes of the layer's directories: {e}",
                             hint="check the permissions where the image is unpacked") from None
    finally:
        layer.close()
        os.close(root_fd)
        if objects_fd is not None:
            os.close(objects_fd)
    stats.diff_id = f"{algorithm}:{reader.hash.hexdigest()}"
    if diff_id is not None and stats.diff_id != diff_id.lower():
        raise ImageError(f"the layer does not match its diff_id: expected {diff_id}, its tar is {stats.diff_id}",
                         hint="the layer is damaged or was tampered with: pull (or save) the image again")  # fmt: skip
    return stats


# ---- a whole image ------------------------------------------------------------------------------

Opener = Callable[[], contextlib.AbstractContextManager[BinaryIO]]


def unpack_image(layers: Sequence[tuple[Opener, str | None]], dest: str | os.PathLike,
                 limits: UnpackLimits = UnpackLimits(), objects: str | os.PathLike | None = None) -> ImageStats:  # fmt: skip
    """Apply ``layers`` (bottom first; each an opener, e.g. ``functools.partial(open_layer, path, type)``,
    and its diff_id) into a fresh directory next to ``dest``, renamed to ``dest`` once every layer applied.
    On any error (Ctrl-C included) that directory is removed: nothing is kept.  ``dest`` must not exist."""
    dest = Path(dest)
    if os.path.lexists(dest):
        raise ImageError(f"{dest} already exists", hint="remove it first, or unpack the image elsewhere")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.unpack-", dir=dest.parent))
    stats = ImageStats(dest)
    try:
        os.chmod(work, 0o755)  # an image's root (mkdtemp made it 0o700)
        for i, (opener, diff_id) in enumerate(layers, 1):
            stats.layers.append(_apply_one(opener, diff_id, work, limits, stats.bytes, f"{i} of {len(layers)}",
                                           objects))  # fmt: skip
        try:
            os.rename(work, dest)
        except OSError as e:
            raise ImageError(f"could not move the unpacked image to {dest}: {e.strerror}",
                             hint="was it made meanwhile? remove it, or unpack the image elsewhere") from None
    except BaseException:
        _discard(work)
        raise
    return stats


def _discard(work: Path) -> None:
    """Remove a half-unpacked image; a failure here must not hide the error that brought us here."""
    try:
        parent = os.open(work.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _remove_at(parent, work.name)
        finally:
            os.close(parent)
    except OSError:
        pass


def _apply_one(opener: Opener, diff_id: str | None, root: Path, limits: UnpackLimits, before: int,
               which: str, objects: str | os.PathLike | None = None) -> LayerStats:  # fmt: skip
    try:
        with opener() as stream:
            return apply_layer(stream, root, diff_id=diff_id, limits=limits, written_before=before, objects=objects)
    except ImageError as e:
        raise ImageError(f"layer {which} ({diff_id or 'no diff_id'}): {e.message}", hint=e.hint) from None
