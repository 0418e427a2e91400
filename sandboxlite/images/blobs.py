"""A content-addressed blob store: ``ROOT/sha256/HEX``, one read-only file per blob.

A blob enters only through ``put``, which copies a stream into a temporary file beside the
store (the same filesystem, so the final rename is atomic), hashing as it copies, and keeps it
only when its digest and size are what the caller expected.  A blob in place is therefore always
whole and always the content its name says; two writers of the same blob both succeed (the later
rename replaces an identical file).

Digests are ``sha256:`` and 64 lowercase hex digits, nothing else: every digest that comes from
an archive or a manifest is checked by ``check_digest`` before it becomes part of a path.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..errors import ImageError

ALGORITHM = "sha256"
CHUNK = 1 << 20
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]{64}")


def check_digest(digest: object, what: str = "digest") -> str:
    """``digest`` when it is a well-formed ``sha256:<64 hex>`` digest; an ImageError naming ``what`` else."""
    if isinstance(digest, str) and _DIGEST.fullmatch(digest):
        return digest
    shown = repr(digest)[:100]
    if isinstance(digest, str) and ":" in digest and not digest.startswith(f"{ALGORITHM}:"):
        raise ImageError(f"{what} {shown} uses the algorithm {digest.split(':', 1)[0]!r}; only sha256 is supported",
                         hint="re-export the image with sha256 digests (the default of docker, podman and skopeo)")
    raise ImageError(f"{what} {shown} is not a digest (expected 'sha256:' and 64 lowercase hex digits)",
                     hint="the archive or manifest is damaged or was not written by an image tool")


class BlobStore:
    """Blobs kept by digest under ``root`` (created on the first ``put``)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def path(self, digest: str) -> Path:
        """Where blob ``digest`` is (or would be) kept."""
        return self.root / ALGORITHM / check_digest(digest).split(":", 1)[1]

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def size(self, digest: str) -> int:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            raise self._missing(digest) from None

    def open(self, digest: str) -> IO[bytes]:
        """The blob, opened for binary reading (the caller closes it)."""
        try:
            return open(self.path(digest), "rb")
        except FileNotFoundError:
            raise self._missing(digest) from None

    def remove(self, digest: str) -> None:
        """Remove the blob (already gone is fine: another process may have pruned it)."""
        self.path(digest).unlink(missing_ok=True)

    def digests(self) -> list[str]:
        """Every blob in the store, sorted (temporary files and foreign names are not blobs)."""
        try:
            names = os.listdir(self.root / ALGORITHM)
        except FileNotFoundError:
            return []
        return sorted(f"{ALGORITHM}:{n}" for n in names if _HEX.fullmatch(n))

    def verify(self, digest: str) -> bool:
        """Whether the blob's content still hashes to its name (False when damaged or missing)."""
        h = hashlib.sha256()
        try:
            with self.open(digest) as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
        except ImageError:
            return False
        return f"{ALGORITHM}:{h.hexdigest()}" == digest

    def put(self, stream: IO[bytes], *, expect: str | None = None, size: int | None = None, max_bytes: int) -> str:
        """Copy ``stream`` (read to its end) into the store and return its digest.

        Refused, with nothing kept, when the content's digest is not ``expect`` or its size is not
        ``size`` (both checked when given), or when it passes ``max_bytes`` (the copy then stops
        there: a hostile stream cannot fill the disk)."""
        if expect is not None:
            check_digest(expect, "expected digest")
        if size is not None and size > max_bytes:
            raise _too_large(expect or "a blob", max_bytes)
        limit = max_bytes if size is None else size
        blob_dir = self._blob_dir()
        fd, tmp = self._temp_file()
        try:
            digest, copied = _copy_hashing(stream, fd, limit)
            _check_copy(digest, copied, expect=expect, size=size, max_bytes=max_bytes)
            os.fchmod(fd, 0o444)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            # replace, not link: a concurrent writer of the same blob wrote identical bytes, and
            # a damaged copy left by a crash is healed by the fresh, verified one
            os.replace(tmp, blob_dir / digest.split(":", 1)[1])
        except OSError as e:
            raise self._write_error(e) from None
        finally:
            if fd >= 0:
                os.close(fd)
            _unlink_quietly(tmp)
        return digest

    @contextmanager
    def partial(self, digest: str, size: int, *, max_bytes: int) -> Iterator[Partial]:
        """The partial download of blob ``digest`` (``size`` bytes), ``ROOT/.partial-HEX``, held
        exclusively while the block runs (a second download of the same blob waits, then finds it
        whole).  What an earlier, interrupted download left is kept and continued; ``finish()``
        moves the blob into place once it is whole and hashes to its digest."""
        check_digest(digest, "blob digest")
        if size > max_bytes:
            raise _too_large(digest, max_bytes)
        self._blob_dir()
        path = self.root / f".partial-{digest.split(':', 1)[1]}"
        fd = self._lock_partial(path)
        try:
            yield Partial(self, digest, size, fd, path)
        finally:
            if self.has(digest) and _same_file(path, fd):
                _unlink_quietly(str(path))  # (the blob came another way: what we created meanwhile goes)
            os.close(fd)

    def _lock_partial(self, path: Path) -> int:
        """``path`` opened and locked; when the holder before us moved it into place (or removed it)
        while we waited, the file we hold is no longer the partial one: open again."""
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError as e:
                raise self._write_error(e) from None
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(path, fd):
                return fd
            os.close(fd)

    def partials(self) -> list[Path]:
        """The partial downloads in the store (kept to be resumed; prune removes unlocked ones)."""
        try:
            return sorted(self.root.glob(".partial-*"))
        except OSError:
            return []

    def _blob_dir(self) -> Path:
        blob_dir = self.root / ALGORITHM
        try:
            blob_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        except OSError as e:
            raise self._write_error(e) from None
        return blob_dir

    def _temp_file(self) -> tuple[int, str]:
        # in root itself (beside sha256/), so digests() never lists a half-written blob
        try:
            return tempfile.mkstemp(prefix=".put-", dir=self.root)
        except OSError as e:
            raise self._write_error(e) from None

    def _missing(self, digest: str) -> ImageError:
        return ImageError(f"blob {digest} is not in the store {self.root}",
                          hint="import the image again (its blobs were pruned or removed)")

    def _write_error(self, e: OSError) -> ImageError:
        hint = "free some space there (df -h), or point SANDBOXLITE_HOME at a disk with room"
        return ImageError(f"cannot write a blob into {self.root}: {e.strerror or e}", hint=hint)


class Partial:
    """One blob being downloaded (see ``BlobStore.partial``): its bytes so far, hashed as they come."""

    def __init__(self, blobs: BlobStore, digest: str, size: int, fd: int, path: Path) -> None:
        self.blobs, self.digest, self.size, self.fd, self.path = blobs, digest, size, fd, path
        self.hash = hashlib.sha256()
        self.have = 0
        self._rehash()

    def _rehash(self) -> None:
        """Hash what an earlier download left (more than the blob: garbage, dropped)."""
        length = os.fstat(self.fd).st_size
        if length > self.size:
            os.ftruncate(self.fd, 0)
            length = 0
        os.lseek(self.fd, 0, os.SEEK_SET)
        while self.have < length:
            chunk = os.read(self.fd, min(CHUNK, length - self.have))
            if not chunk:
                break
            self.hash.update(chunk)
            self.have += len(chunk)

    def append(self, stream: IO[bytes], start: int, on_bytes: Callable[[int], None] | None = None) -> None:
        """Write ``stream`` (the blob from byte ``start``, which is 0 or ``self.have``) to the end of
        the download, never past the blob's size."""
        if start != self.have:
            if start != 0:
                raise ImageError(f"a download of {self.digest} resumed at byte {start}, not {self.have}",
                                 hint="pull again")  # fmt: skip
            os.ftruncate(self.fd, 0)
            self.hash, self.have = hashlib.sha256(), 0
        os.lseek(self.fd, self.have, os.SEEK_SET)
        while self.have < self.size:
            chunk = stream.read(min(CHUNK, self.size - self.have))
            if not chunk:
                break
            self.hash.update(chunk)
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError as e:
                raise self.blobs._write_error(e) from None
            self.have += len(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
        if self.have == self.size and stream.read(1):
            self.discard()
            raise ImageError(f"blob {self.digest} is longer than the {self.size} bytes its descriptor says",
                             hint="the registry served other content than it names: do not trust it")  # fmt: skip

    def finish(self) -> None:
        """Move the whole, verified blob into the store (a wrong one is removed, and refused)."""
        if self.have != self.size:
            raise ImageError(f"blob {self.digest} ended after {self.have} of {self.size} bytes",
                             hint="pull again: it resumes where it stopped")  # fmt: skip
        got = f"{ALGORITHM}:{self.hash.hexdigest()}"
        if got != self.digest:
            self.discard()
            raise ImageError(f"blob {self.digest} does not match its digest (its content hashes to {got})",
                             hint="the registry (or something between) served other content than it names: "
                                  "do not trust it")  # fmt: skip
        try:
            os.fchmod(self.fd, 0o444)
            os.fsync(self.fd)
            os.replace(self.path, self.blobs.path(self.digest))
        except OSError as e:
            raise self.blobs._write_error(e) from None

    def discard(self) -> None:
        os.ftruncate(self.fd, 0)
        self.hash, self.have = hashlib.sha256(), 0
        _unlink_quietly(str(self.path))


def _same_file(path: Path, fd: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _copy_hashing(stream: IO[bytes], fd: int, limit: int) -> tuple[str, int]:
    """Copy at most ``limit`` + 1 bytes of ``stream`` to ``fd``: (digest, bytes copied).  One byte
    past the limit is enough to know the stream is too long, so a longer one is never read on."""
    h = hashlib.sha256()
    copied = 0
    while copied <= limit:
        chunk = stream.read(min(CHUNK, limit + 1 - copied))
        if not chunk:
            break
        h.update(chunk)
        copied += len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view):]
    return f"{ALGORITHM}:{h.hexdigest()}", copied


def _too_large(what: str, max_bytes: int) -> ImageError:
    return ImageError(f"{what} is larger than the limit of {max_bytes} bytes",
                      hint="raise the limit (max_bytes) if the archive is trusted and that large")


def _check_copy(digest: str, copied: int, *, expect: str | None, size: int | None, max_bytes: int) -> None:
    if size is None and copied > max_bytes:
        raise _too_large("a blob", max_bytes)
    if size is not None and copied != size:
        have = f"more than {size}" if copied > size else str(copied)
        raise ImageError(f"blob {expect or digest} has {have} bytes, not the {size} its descriptor says",
                         hint="the archive is truncated or was modified: export it again")
    if expect is not None and digest != expect:
        raise ImageError(f"blob {expect} does not match its digest (its content hashes to {digest})",
                         hint="the archive is damaged or was tampered with: export it again from a trusted source")


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

