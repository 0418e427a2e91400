"""Pulling an image from a registry into the blob store.

    pull(reference, blobs, ...)   the ``ImageRecord`` of ``reference`` (``python:3.12-slim``,
                                  ``127.0.0.1:5000/app@sha256:...``), its manifest, config and layers
                                  in ``blobs``, each one checked against its digest

The manifest (or index, resolved to the host's platform) is read first, then the config, then
the layers, ``JOBS`` at once.  A blob already in the store is not fetched again (images share
their base layers).  A layer download that breaks off is resumed from where it stopped, here
(``ATTEMPTS`` tries, with a range request) and by the next pull (the partial download stays in
the store, ``.partial-HEX``, until it is whole or pruned).  ``progress`` hears of every blob and
every chunk, so a caller can draw a bar.
"""

from __future__ import annotations

import dataclasses
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ..errors import ImageError
from . import oci
from .blobs import BlobStore
from .credentials import Credentials, find_credentials
from .oci import INDEX_TYPES, MANIFEST_TYPES, ImageRecord, Reference
from .registry import Registry, TransientError

JOBS = 4
ATTEMPTS = 5
BACKOFF = 0.5  # seconds before the second try, doubled each time
MAX_PULL_BYTES = oci.MAX_ARCHIVE_BYTES


class Progress(Protocol):
    """What a pull reports, from its worker threads (a receiver must be thread-safe)."""

    def blob(self, digest: str, size: int, what: str, *, have: int) -> None:
        """A blob to fetch: ``size`` bytes, ``have`` of them already here (resumed, or all when cached)."""

    def advance(self, digest: str, nbytes: int) -> None:
        """``nbytes`` more of ``digest`` arrived."""

    def done(self, digest: str) -> None:
        """``digest`` is whole and verified in the store."""


def pull(reference: str | Reference, blobs: BlobStore, *, platform: str | None = None,
         credentials: Credentials | None = None, insecure: bool = False, progress: Progress | None = None,
         max_bytes: int = MAX_PULL_BYTES, jobs: int = JOBS, attempts: int | None = None) -> ImageRecord:  # fmt: skip
    """``reference`` pulled into ``blobs``: its record, named by the reference (and by the
    manifest's digest).  ``credentials``: default, those saved by docker login / podman login for
    the registry (none: anonymous).  ``insecure``: plain http, loopback registries only."""
    ref = reference if isinstance(reference, Reference) else oci.parse_reference(reference)
    attempts = ATTEMPTS if attempts is None else attempts
    if credentials is None:
        credentials = find_credentials(ref.registry)
    registry = Registry(ref.registry, credentials=credentials, insecure=insecure)
    body, media_type, digest = _retrying(lambda: registry.manifest(ref.repository, ref.digest or ref.tag or "latest"),
                                         attempts)  # fmt: skip
    blobs.put(io.BytesIO(body), expect=digest, size=len(body), max_bytes=oci.MAX_JSON)
    archive = _RegistryArchive(registry, ref.repository, blobs, progress=progress, max_bytes=max_bytes, jobs=jobs,
                               attempts=attempts)  # fmt: skip
    desc = {"mediaType": media_type if media_type in MANIFEST_TYPES | INDEX_TYPES else "", "digest": digest,
            "size": len(body)}  # fmt: skip
    record = oci.resolve(archive, blobs, desc, str(ref), platform=platform, max_bytes=max_bytes)
    pinned = f"{ref.registry}/{ref.repository}@{digest}"
    names = [str(Reference(ref.registry, ref.repository, ref.tag))] if ref.tag else []
    return dataclasses.replace(record, names=list(dict.fromkeys([*names, pinned])),
                                   source=f"registry:{ref}")  # fmt: skip


def _retrying(call, attempts: int):
    for attempt in range(attempts):
        try:
            return call()
        except TransientError:
            if attempt == attempts - 1:
                raise
            time.sleep(BACKOFF * 2**attempt)
    raise AssertionError("unreachable")


class _RegistryArchive:
    """A registry as the resolver's archive: every blob it needs fetched (verified) into the store."""

    kind = "registry"

    def __init__(self, registry: Registry, repository: str, blobs: BlobStore, *, progress: Progress | None,
                 max_bytes: int, jobs: int, attempts: int) -> None:  # fmt: skip
        self.registry = registry
        self.repository = repository
        self.blobs = blobs
        self.progress = progress
        self.left = max_bytes
        self.max_bytes = max_bytes
        self.jobs = max(1, jobs)
        self.attempts = attempts
        self._lock = threading.Lock()

    def document(self, name: str) -> bytes | None:
        return None

    def member_blob(self, name: str) -> str:
        raise ImageError(f"a registry has no member {name!r}", hint="this is a bug in sandboxlite: please report it")

    def prefetch(self, wanted: list[tuple[str, int, str]]) -> None:
        missing = [w for w in dict.fromkeys(wanted) if not self.blobs.has(w[0])]
        if len(missing) < 2:
            return  # (need() fetches it)
        with ThreadPoolExecutor(max_workers=min(self.jobs, len(missing)), thread_name_prefix="pull") as pool:
            futures = [pool.submit(self.need, *w) for w in missing]
            errors = [e for f in futures if (e := f.exception()) is not None]
        if errors:
            raise errors[0]

    def need(self, digest: str, size: int, what: str, *, manifest: bool = False) -> None:
        if manifest and not self.blobs.has(digest):
            body, _, _ = _retrying(lambda: self.registry.manifest(self.repository, digest), self.attempts)
            self.blobs.put(io.BytesIO(body), expect=digest, size=size, max_bytes=oci.MAX_JSON)
        elif not self.blobs.has(digest):
            self._charge(size, what)
            self._download(digest, size, what)
        elif self.progress is not None and not manifest:
            self.progress.blob(digest, size, what, have=size)
        if self.blobs.size(digest) != size:
            raise ImageError(f"blob {digest} ({what}) has {self.blobs.size(digest)} bytes, not the {size} its "
                             "descriptor says", hint="the store's copy is damaged: image prune, then pull again")  # fmt: skip

    def _charge(self, size: int, what: str) -> None:
        with self._lock:
            if size > self.left:
                raise ImageError(f"{what} would take the pull past its limit of {self.max_bytes} bytes",
                                 hint="raise max_bytes if the image is trusted and that large")  # fmt: skip
            self.left -= size

    def _download(self, digest: str, size: int, what: str) -> None:
        with self.blobs.partial(digest, size, max_bytes=self.max_bytes) as part:
            if self.blobs.has(digest):
                return  # (another pull fetched it while we waited)
            if self.progress is not None:
                self.progress.blob(digest, size, what, have=part.have)
            advance = (lambda n: self.progress.advance(digest, n)) if self.progress is not None else None
            for attempt in range(self.attempts):
                try:
                    stream, start = self.registry.blob(self.repository, digest, part.have)
                    with stream:
                        part.append(stream, start, advance)
                except TransientError:
                    if attempt == self.attempts - 1:
                        raise
                if part.have == size:
                    break
                time.sleep(BACKOFF * 2**attempt)
            part.finish()
        if self.progress is not None:
            self.progress.done(digest)
