"""Container images in the store: imported from ``docker save`` / ``podman save`` archives and OCI
layouts, and kept as images like the built ones, so a sandbox starts from one exactly as from lean.

    $SANDBOXLITE_HOME/oci/blobs/sha256/HEX   every blob (layers, configs), once, shared by images
    $SANDBOXLITE_HOME/rootfs/oci-ID/         one image (ID: the first 12 hex digits of its config's
                                             digest): root/ with its layers applied in order
                                             (flattened), manifest.json with an "oci" record
    $SANDBOXLITE_HOME/rootfs/.names          reference -> image (where.py reads it)

A name (``docker.io/library/python:3.12-slim``) names one image: importing another image under it
moves the name, and the older image stays, reachable as ``oci-ID``.  Importing an image that is
already there (the same config) only adds its names.  The layers are unpacked by unpack.py (a
hostile archive is refused with nothing kept); as root the tree is then given to the uid
sandboxes run as, as a built image is.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, NamedTuple

from .. import paths
from ..errors import ConfigError, ImageError
from . import oci, unpack
from .blobs import BlobStore
from .manage import ImageInfo, image_dir, list_images
from .credentials import Credentials
from .manifest import MANIFEST, give_to_sandbox_user, read_manifest, remove_tree, write_manifest
from .pull import Progress, pull
from .registry import is_loopback, split_host
from .where import NAMES, find, images_dir, names


def _oci_dir() -> Path:
    return paths.home() / "oci"


def files_dir() -> Path:
    """The files the images' trees share (hard links, by content and metadata: unpack.share_file)."""
    return _oci_dir() / "files"


def blob_store() -> BlobStore:
    return BlobStore(_oci_dir() / "blobs")


def image_name(record: oci.ImageRecord) -> str:
    """The store's name of an image: ``oci-`` and 12 hex digits of its config's digest."""
    return "oci-" + record.config_digest.split(":", 1)[1][:12]


def import_archive(source: str | os.PathLike | IO[bytes], *, tag: str | None = None,
                   platform: str | None = None) -> list[ImageInfo]:  # fmt: skip
    """Every image of an archive (a path, or a binary stream such as stdin), installed and named:
    by ``tag`` when given (the archive must then hold one image), else by the archive's own names."""
    name = _argument(oci.parse_reference, tag, "tag")  # (bad arguments before anything is read)
    _argument(oci.parse_platform, platform, "platform")
    with _blobs_locked(fcntl.LOCK_SH):  # (prune waits: the blobs stored here are no image's until installed)
        return _import_locked(source, name, platform)


def pull_image(reference: str, *, platform: str | None = None, credentials: Credentials | None = None,
               insecure: bool = False, progress: Progress | None = None) -> ImageInfo:  # fmt: skip
    """``reference`` pulled from its registry and installed, named by the reference and by its
    digest.  Its layers already in the store (another image's base) are not fetched again."""
    ref = _argument(oci.parse_reference, reference, "reference")
    _argument(oci.parse_platform, platform, "platform")
    host = split_host(oci.parse_reference(reference).registry)[0]
    if insecure and not is_loopback(host):
        raise ConfigError("--insecure", f"plain http is only for registries on this machine (loopback), not {host}",
                          hint="pull over TLS (drop --insecure); a registry with a private CA: add the CA to the "
                               "system's trust store")  # fmt: skip
    with _blobs_locked(fcntl.LOCK_SH):
        record = pull(ref, blob_store(), platform=platform, credentials=credentials, insecure=insecure,
                      progress=progress)  # fmt: skip
        return install(_runnable([record], platform, ref)[0])


PULL_ENV = "SANDBOXLITE_PULL"
PULL_POLICIES = ("never", "missing")


def available(reference: str, *, env: dict[str, str] | None = None) -> bool:
    """Whether the store holds the image ``reference`` names, pulling it first when it does not
    and ``$SANDBOXLITE_PULL`` is ``missing`` (the default, ``never``, pulls nothing: a dataset's
    rows must not start downloads nobody asked for).  A registry on this machine is pulled from
    over plain http, as docker treats 127.0.0.0/8.  A pull that fails raises (it was asked for)."""
    if find(reference) is not None:
        return True
    policy = (os.environ if env is None else env).get(PULL_ENV, "never").strip() or "never"
    if policy not in PULL_POLICIES:
        raise ConfigError(PULL_ENV, f"must be one of {', '.join(PULL_POLICIES)}, got {policy!r}")
    if policy == "never":
        return False
    try:
        registry = oci.parse_reference(reference).registry
    except ImageError:
        return False  # (no reference: nothing to pull)
    pull_image(reference, insecure=is_loopback(split_host(registry)[0]))
    return True


def _argument(parse, value: str | None, field: str) -> str | None:
    """``value`` parsed (canonical), or a ConfigError naming the argument."""
    if value is None:
        return None
    try:
        return str(parse(value))
    except ImageError as e:
        raise ConfigError(field, e.message, hint=e.hint) from None


def _import_locked(source, name: str | None, platform: str | None) -> list[ImageInfo]:
    records = _runnable(oci.read_archive(source, blob_store(), platform=platform), platform, source)
    if name is not None:
        if len(records) != 1:
            raise ImageError(f"--tag names one image, and {_shown(source)} holds {len(records)}",
                             hint="import it without --tag: each image keeps the archive's own names")  # fmt: skip
        records = [dataclasses.replace(records[0], names=[name])]
    return [install(r) for r in records]


def _runnable(records: list[oci.ImageRecord], platform: str | None, source) -> list[oci.ImageRecord]:
    """The records for ``platform`` (default: this machine's); an image of another one would not
    run here.  None left: ImageError naming what the archive holds."""
    if not records:
        raise ImageError(f"{_shown(source)} holds no image", hint="is it a docker save, podman save or OCI archive?")
    want = (oci.parse_platform(platform) if platform else oci.host_platform()).normalised()
    fits = [r for r in records if not r.config.architecture or want == oci.Platform(
        r.config.os or "linux", r.config.architecture, r.config.variant or "").normalised()]  # fmt: skip
    if not fits:
        have = ", ".join(sorted({r.config.platform() for r in records}))
        raise ImageError(f"{_shown(source)} holds images for {have}, none for {want}",
                         hint="import the image built for this machine (docker save --platform, skopeo copy "
                         "--override-arch)")  # fmt: skip
    return fits


def install(record: oci.ImageRecord) -> ImageInfo:
    """The image of ``record`` in the store (unpacked from the blob store unless it is there already),
    with the record's names moved to it."""
    name = image_name(record)
    final = images_dir() / name
    if not (final / MANIFEST).is_file():
        _unpack(record, final)
    with _locked():
        _take_names(name, record.names)
    return ImageInfo(name, final, read_manifest(final))


def _unpack(record: oci.ImageRecord, final: Path) -> None:
    images_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.import-", dir=images_dir()))
    os.chmod(work, 0o755)
    blobs = blob_store()
    try:
        layers = [(_opener(blobs, layer), layer.diff_id) for layer in record.layers]
        files = files_dir()
        files.mkdir(parents=True, exist_ok=True)
        unpack.unpack_image(layers, work / "root", objects=files)  # (each file shared with the images that have it)
        give_to_sandbox_user(work / "root")
        write_manifest(work, name=final.name, profile=None, source="oci", extra={"oci": _oci_record(record)})
        try:
            os.rename(work, final)
        except OSError:
            if not (final / MANIFEST).is_file():  # (another process installed the same image meanwhile: fine)
                raise
            remove_tree(work)
    except BaseException:
        remove_tree(work)
        raise


def _opener(blobs: BlobStore, layer: oci.Layer):
    return lambda: unpack.open_layer(blobs.path(layer.digest), layer.media_type)


def _oci_record(record: oci.ImageRecord) -> dict:
    return {
        "names": list(record.names),
        "manifest_digest": record.manifest_digest,
        "config_digest": record.config_digest,
        "source": record.source,
        "layers": [dataclasses.asdict(layer) for layer in record.layers],
        "config": dataclasses.asdict(record.config),
    }


@contextmanager
def _flocked(path: Path, kind: int) -> Iterator[None]:
    """The lock file ``path`` (made if missing) flocked ``kind`` for the block: other processes wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, kind)
        yield
    finally:
        os.close(fd)


def _blobs_locked(kind: int):
    """The blob store's lock: shared by imports, exclusive for prune."""
    return _flocked(_oci_dir() / ".blobs.lock", kind)


def _locked():
    """The names index's lock (imports and removals)."""
    return _flocked(images_dir() / ".names.lock", fcntl.LOCK_EX)


def _write_names(table: dict[str, str]) -> None:
    path = images_dir() / NAMES
    tmp = path.with_name(f"{NAMES}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _take_names(name: str, refs: list[str]) -> None:
    table = names()
    table.update({ref: name for ref in refs})
    _write_names({ref: image for ref, image in table.items() if (images_dir() / image).is_dir()})


def name_image(image: str, refs: list[str]) -> None:
    """Give the store's image ``image`` (``oci-ID``) the names ``refs`` (canonical references),
    moving each from the image that had it."""
    with _locked():
        _take_names(image, refs)


def oci_images() -> list[ImageInfo]:
    """The container images in the store (the built ones are ``rootfs list``'s)."""
    return [i for i in list_images() if isinstance(i.manifest.get("oci"), dict)]


def find_image(spec: str) -> ImageInfo:
    """The container image ``spec`` names: a reference the store knows, or ``oci-ID``."""
    name = spec if spec.startswith("oci-") else find(spec)
    if name is None:
        raise ImageError(f"no image named {spec!r} in the store",
                         hint="sandboxlite image list shows them; sandboxlite image import FILE adds one")  # fmt: skip
    d = image_dir(name)
    manifest = read_manifest(d)
    if not isinstance(manifest.get("oci"), dict):
        raise ImageError(f"{name!r} is a built image, not a container image", hint=f"sandboxlite rootfs rm {name}")
    return ImageInfo(name, d, manifest)


def remove(spec: str) -> list[str]:
    """Remove the image ``spec`` names and every name it had; the names removed."""
    info = find_image(spec)
    with _locked(), _unused(info):
        table = names()
        gone = sorted(ref for ref, image in table.items() if image == info.name)
        _write_names({ref: image for ref, image in table.items() if image != info.name})
        remove_tree(info.path)
    return gone


@contextmanager
def _unused(info: ImageInfo) -> Iterator[None]:
    """The image's manifest locked for its removal: ImageError while a sandbox uses the image (each
    holds a shared lock while it lives: where.hold); a sandbox starting meanwhile waits, then fails."""
    fd = os.open(info.path / MANIFEST, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ImageError(f"{info.name} is in use by a running sandbox",
                             hint="close the sandboxes (and pools) that use it, then remove it") from None  # fmt: skip
        yield
    finally:
        os.close(fd)


class Pruned(NamedTuple):
    blobs: int  # blobs removed (and partial downloads)
    freed: int  # bytes
    files: int = 0  # shared files no image links to any more


def prune() -> Pruned:
    """Remove the blobs no image in the store uses, and the shared files no image links to.  Waits
    for the imports in progress (theirs are no image's yet)."""
    with _blobs_locked(fcntl.LOCK_EX):
        return _prune_locked()


def _prune_locked() -> Pruned:
    used = set()
    for info in oci_images():
        rec = info.manifest["oci"]
        used.update((rec.get("config_digest"), rec.get("manifest_digest")))
        used.update(layer.get("digest") for layer in rec.get("layers", []))
    blobs = blob_store()
    count = freed = 0
    for partial in blobs.partials():  # (downloads no pull is resuming now: a pull holds its lock)
        freed += _remove_unlocked(partial)
    files, freed = _prune_files(0, freed)
    for digest in blobs.digests():
        if digest not in used:
            freed += blobs.size(digest)
            blobs.remove(digest)
            count += 1
    return Pruned(count, freed, files)


def _prune_files(count: int, freed: int) -> tuple[int, int]:
    """Remove the shared files no image links to any more (a link count of 1: only ours)."""
    try:
        entries = list(os.scandir(files_dir()))
    except FileNotFoundError:
        return count, freed
    for entry in entries:
        st = entry.stat(follow_symlinks=False)
        if st.st_nlink == 1:
            os.unlink(entry.path)
            count += 1
            freed += st.st_size
    return count, freed


def _remove_unlocked(path: Path) -> int:
    """Remove ``path`` unless another process holds its lock: the bytes freed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        size = os.fstat(fd).st_size
        path.unlink(missing_ok=True)
        return size
    except OSError:
        return 0
    finally:
        os.close(fd)


def _shown(source) -> str:
    return "the stream" if hasattr(source, "read") else str(source)
