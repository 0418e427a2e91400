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

import hashlib
import os
import re
import tempfile
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

