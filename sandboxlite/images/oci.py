"""Container images (OCI and docker): references, image configs, and archives read into a blob store.

    parse_reference(text)        ``python:3.12-slim`` -> ``docker.io/library/python:3.12-slim``, as docker
                                 normalises it
    ImageConfig.from_json(data)  the parts of an image config a sandbox uses (env, user, cmd ...)
    read_archive(source, blobs)  every image of a ``docker save`` / ``podman save`` tar, an OCI layout
                                 (a directory, or packed as a tar), or a stream of either tar: its blobs
                                 copied into a ``BlobStore`` (each one checked against its digest), and
                                 one ``ImageRecord`` per image saying which blobs make it

An archive is hostile input until proven otherwise: every digest is validated before it becomes a
path, every blob is hashed while it is copied and refused when it is not what its name or its
descriptor says, every JSON document has a size limit, and a manifest naming a blob the archive
lacks is an error.  When any image of an archive fails, ``read_archive`` raises (an ``ImageError``
saying what and what to do) and returns no record at all; blobs already copied stay in the store,
unreferenced, for the store's prune (removing them here could race with another import of the same
blobs).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import platform as _platform
import posixpath
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from ..errors import ImageError
from .blobs import BlobStore, check_digest

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v1+prettyjws")
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
CONFIG_TYPES = frozenset({"application/vnd.oci.image.config.v1+json",
                          "application/vnd.docker.container.image.v1+json"})
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"  # an uncompressed layer (what docker save writes)

# every layer media type an image may use, and its compression ("" for a plain tar): the unpacker's
# table too.  Encrypted layers (+encrypted) and artifacts are not container layers we can apply.
LAYER_COMPRESSION = {
    OCI_LAYER: "",
    OCI_LAYER + "+gzip": "gzip",
    OCI_LAYER + "+zstd": "zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar": "",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd": "zstd",
    "application/vnd.docker.image.rootfs.diff.tar": "",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": "gzip",
}

MAX_ARCHIVE_BYTES = 64 << 30  # all the blobs one archive may put in the store (docker save layers are uncompressed)
MAX_JSON = 16 << 20  # a manifest, index or config: real ones are kilobytes
MAX_NESTING = 8  # indexes within indexes
MAX_BLOBS = 100_000  # blob members of one tar (each a file in the store: a bound on inodes, not only bytes)

REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"  # docker >= 25 and containerd name images with it

# ---------------------------------------------------------------------------------------------
# references

DEFAULT_REGISTRY = "docker.io"
DEFAULT_TAG = "latest"
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*", re.ASCII)
_HOST_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = re.compile(rf"(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?", re.ASCII)
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", re.ASCII)
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")
MAX_NAME = 255


@dataclass(frozen=True)
class Reference:
    """A container image reference in docker's canonical form (``docker.io/library/python:3.12-slim``)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        return self._with_suffix(f"{self.registry}/{self.repository}")

    def short(self) -> str:
        """The familiar form docker shows: ``python:3.12-slim``, ``user/app:latest``, ``ghcr.io/o/r:tag``."""
        name = f"{self.registry}/{self.repository}"
        if self.registry == DEFAULT_REGISTRY:
            name = self.repository
            if name.startswith("library/") and name.count("/") == 1:
                name = name[len("library/"):]
        return self._with_suffix(name)

    def _with_suffix(self, name: str) -> str:
        return name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def _bad_reference(text: str, rule: str) -> ImageError:
    return ImageError(f"invalid image reference {text!r}: {rule}",
                      hint="write it as docker does: NAME[:TAG][@sha256:DIGEST], e.g. python:3.12-slim "
                           "or ghcr.io/owner/repo:tag")  # fmt: skip


def parse_reference(text: str) -> Reference:
    """``text`` as a canonical ``Reference``, normalised as docker does: no registry means docker.io,
    a docker.io name of one component is in ``library/``, no tag and no digest means ``:latest``."""
    if not isinstance(text, str):
        raise _bad_reference(str(text), "it is not a string")
    if not text:
        raise _bad_reference(text, "it is empty")
    if _IMAGE_ID.fullmatch(text):
        raise _bad_reference(text, "64 hex digits are an image ID, not a name")
    name, at, digest = text.partition("@")
    if at:
        try:
            check_digest(digest, "its digest")
        except ImageError as e:
            raise _bad_reference(text, e.message) from None
    name, tag = _split_tag(name)
    if tag is not None and not _TAG.fullmatch(tag):
        raise _bad_reference(text, f"the tag {tag!r} must be letters, digits, '_', '.' or '-' (at most 128, "
                                   "not starting with '.' or '-')")
    registry, repository = _split_registry(name)
    _check_name(text, registry, repository)
    if tag is None and not at:
        tag = DEFAULT_TAG
    return Reference(registry, repository, tag, digest if at else None)


def _split_tag(name: str) -> tuple[str, str | None]:
    """A tag is after the last ':' that follows the last '/' (an earlier ':' is a registry's port)."""
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        return name[:colon], name[colon + 1:]
    return name, None


def _split_registry(name: str) -> tuple[str, str]:
    """docker's rule: the first component is a registry when it has a '.' or a ':', is ``localhost``,
    or has an upper-case letter (a repository never has one); else the registry is docker.io."""
    first, slash, rest = name.partition("/")
    is_host = slash and ("." in first or ":" in first or first == "localhost" or first != first.lower())
    registry, repository = (first, rest) if is_host else (DEFAULT_REGISTRY, name)
    if registry == "index.docker.io":
        registry = DEFAULT_REGISTRY
    if registry == DEFAULT_REGISTRY and "/" not in repository:
        repository = f"library/{repository}"
    return registry, repository


def _check_name(text: str, registry: str, repository: str) -> None:
    if not _DOMAIN.fullmatch(registry):
        raise _bad_reference(text, f"the registry {registry!r} is no host name (with an optional :PORT)")
    if repository != repository.lower():
        raise _bad_reference(text, f"the repository {repository!r} must be lowercase")
    for part in repository.split("/"):
        if not _PATH_COMPONENT.fullmatch(part):
            raise _bad_reference(text, f"the repository component {part!r} must be lowercase letters and digits, "
                                       "separated by '.', '_', '__' or dashes")  # fmt: skip
    if len(registry) + 1 + len(repository) > MAX_NAME:
        raise _bad_reference(text, f"the name is longer than {MAX_NAME} characters")


# ---------------------------------------------------------------------------------------------
# image configs


@dataclass(frozen=True)
class ImageConfig:
    """What an image config says about running the image (fields absent from the JSON are empty)."""

    architecture: str = ""
    os: str = ""
    variant: str = ""
    env: list[str] = field(default_factory=list)  # "KEY=VALUE"
    working_dir: str = ""
    user: str = ""
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    exposed_ports: list[str] = field(default_factory=list)  # "80/tcp"
    labels: dict[str, str] = field(default_factory=dict)
    diff_ids: list[str] = field(default_factory=list)  # rootfs.diff_ids: each layer's uncompressed digest
    created: str | None = None

    @classmethod
    def from_json(cls, data: bytes) -> ImageConfig:
        doc = _json_document(data, "the image config", dict)
        run = _optional(doc, "config", dict, "config") or {}
        rootfs = _optional(doc, "rootfs", dict, "rootfs") or {}
        return cls(
            architecture=_optional(doc, "architecture", str, "architecture") or "",
            os=_optional(doc, "os", str, "os") or "",
            variant=_optional(doc, "variant", str, "variant") or "",
            env=_strings(run, "Env", "config.Env"),
            working_dir=_optional(run, "WorkingDir", str, "config.WorkingDir") or "",
            user=_optional(run, "User", str, "config.User") or "",
            entrypoint=_strings(run, "Entrypoint", "config.Entrypoint"),
            cmd=_strings(run, "Cmd", "config.Cmd"),
            exposed_ports=_ports(run),
            labels=_string_map(run, "Labels", "config.Labels"),
            diff_ids=[check_digest(d, f"rootfs.diff_ids[{i}]")
                      for i, d in enumerate(_strings(rootfs, "diff_ids", "rootfs.diff_ids"))],
            created=_optional(doc, "created", str, "created"),
        )

    def platform(self) -> str:
        """``os/architecture[/variant]``, as ``read_archive(platform=...)`` takes it."""
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string"}


def _config_error(where: str, kind: type) -> ImageError:
    return ImageError(f"the image config's field {where} must be {_JSON_KINDS[kind]}",
                      hint="the image config is malformed: rebuild or re-export the image")


def _optional(doc: dict, key: str, kind: type, where: str) -> Any:
    """``doc[key]`` when it is of ``kind``; None when absent or null; an ImageError naming ``where`` else."""
    value = doc.get(key)
    if value is not None and not isinstance(value, kind):
        raise _config_error(where, kind)
    return value


def _strings(doc: dict, key: str, where: str) -> list[str]:
    items = _optional(doc, key, list, where) or []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _config_error(f"{where}[{i}]", str)
    return list(items)


def _string_map(doc: dict, key: str, where: str) -> dict[str, str]:
    items = _optional(doc, key, dict, where) or {}
    for k, v in items.items():
        if not isinstance(v, str):
            raise _config_error(f"{where}[{k!r}]", str)
    return dict(items)


def _ports(run: dict) -> list[str]:
    """``config.ExposedPorts`` keys; a port without a protocol is tcp, as docker reads it."""
    ports = _optional(run, "ExposedPorts", dict, "config.ExposedPorts") or {}
    return [p if "/" in p else f"{p}/tcp" for p in ports]


def _json_document(data: bytes, what: str, kind: type) -> Any:
    """``data`` parsed as JSON of ``kind``: an ImageError saying what is wrong with ``what`` else."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError is a ValueError; nesting bombs recurse)
        raise ImageError(f"{what} is not valid JSON ({e})",
                         hint="the archive is damaged or was modified: export it again") from None
    if not isinstance(doc, kind):
        raise ImageError(f"{what} is not a JSON {_JSON_KINDS[kind].split()[1]}",
                         hint="the archive is damaged or was not written by an image tool")
    return doc


# ---------------------------------------------------------------------------------------------
# images and platforms


@dataclass(frozen=True)
class Layer:
    digest: str  # the blob as stored (compressed or not)
    media_type: str  # one of LAYER_COMPRESSION's keys
    size: int
    diff_id: str  # the digest of the uncompressed tar (for an uncompressed layer, the digest itself)


@dataclass(frozen=True)
class ImageRecord:
    """One image of an archive: which blobs of the store make it, and what its names are."""

    names: list[str]  # canonical references (docker.io/library/python:3.12-slim); [] when it has none
    manifest_digest: str  # (for a docker save archive, which has none: a manifest written from it, in the store)
    config_digest: str
    config: ImageConfig
    layers: list[Layer]
    source: str  # "oci:PATH", "oci-archive:PATH", "docker-archive:PATH" ("-" for a stream)
    tags: list[str] = field(default_factory=list)  # bare tags an OCI layout names it by ("latest", "v1")


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str = ""

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)

    def normalised(self) -> Platform:
        """With the default variants made explicit (arm64 is v8, arm v7) and amd64's v1 dropped, so
        ``linux/arm64`` matches an index's ``linux/arm64/v8``."""
        arch = _ARCH_ALIASES.get(self.architecture, self.architecture)
        variant = self.variant or {"arm64": "v8", "arm": "v7"}.get(arch, "")
        if arch == "amd64" and variant == "v1":
            variant = ""
        return Platform(self.os, arch, variant)


_ARCH_ALIASES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64", "armhf": "arm", "armel": "arm",
                 "i386": "386", "i686": "386"}  # fmt: skip
_MACHINES = {"x86_64": ("amd64", ""), "amd64": ("amd64", ""), "aarch64": ("arm64", ""), "arm64": ("arm64", ""),
             "armv8l": ("arm", "v7"), "armv7l": ("arm", "v7"), "armv6l": ("arm", "v6"), "i386": ("386", ""),
             "i686": ("386", ""), "ppc64le": ("ppc64le", ""), "s390x": ("s390x", ""), "riscv64": ("riscv64", ""),
             "loongarch64": ("loong64", ""), "mips64": ("mips64le", "")}  # fmt: skip


def host_platform() -> Platform:
    """This machine's platform as images name it (``platform.machine()`` x86_64 is amd64 ...)."""
    machine = _platform.machine()
    arch, variant = _MACHINES.get(machine, (machine.lower(), ""))
    return Platform("linux", arch, variant)


def parse_platform(text: str) -> Platform:
    parts = text.split("/") if isinstance(text, str) else []
    if not 2 <= len(parts) <= 3 or not all(re.fullmatch(r"[a-z0-9_.-]+", p) for p in parts):
        raise ImageError(f"invalid platform {text!r}: expected OS/ARCH or OS/ARCH/VARIANT",
                         hint="for example linux/amd64, linux/arm64 or linux/arm/v7")
    return Platform(*parts)


# ---------------------------------------------------------------------------------------------
# reading an archive


def read_archive(source: str | os.PathLike | IO[bytes], blobs: BlobStore, *, platform: str | None = None,
                 max_bytes: int = MAX_ARCHIVE_BYTES) -> list[ImageRecord]:  # fmt: skip
    """Every image of ``source``, its blobs copied (and checked) into ``blobs``.

    ``source``: a ``docker save`` / ``podman save`` tar (old style, or docker >= 25's with an OCI
    layout inside), an OCI image layout directory, an OCI layout packed as a tar, or a binary
    stream of either tar (read once, front to back: stdin works).  An index (multi-platform image)
    is resolved to ``platform`` (``linux/arm64``; default: this machine's).  ``max_bytes`` bounds
    everything the archive may put in the store."""
    want = (parse_platform(platform) if platform else host_platform()).normalised()
    budget = _Budget(blobs, max_bytes)
    if hasattr(source, "read"):
        archive: Archive = _read_tar(source, budget, "the stream")
        label = "-"
    else:
        path = Path(source)
        label = str(path)
        if path.is_dir():
            archive = _LayoutDir(path, budget)
        elif path.exists():
            archive = _read_tar_file(path, budget)
        else:
            raise ImageError(f"{path} does not exist", hint="give the path of a docker save tar, an OCI archive "
                                                            "or an OCI layout directory")  # fmt: skip
    return _Resolver(archive, blobs, want, budget).records(label)


def resolve(archive: Archive, blobs: BlobStore, descriptor: dict, what: str, *, platform: str | None = None,
            max_bytes: int = MAX_ARCHIVE_BYTES) -> ImageRecord:  # fmt: skip
    """The image a manifest or index ``descriptor`` (mediaType, digest, size) names, its blobs
    fetched through ``archive.need`` (a registry's pull); an index resolved to ``platform``."""
    want = (parse_platform(platform) if platform else host_platform()).normalised()
    return _Resolver(archive, blobs, want, _Budget(blobs, max_bytes))._image(_descriptor(descriptor, what), what, 0)


class _Budget:
    """The bytes an archive may still put into the store: one limit for all its blobs."""

    def __init__(self, blobs: BlobStore, max_bytes: int) -> None:
        self.blobs = blobs
        self.left = max_bytes

    def put(self, stream: IO[bytes], *, expect: str | None = None, size: int | None = None) -> str:
        digest = self.blobs.put(stream, expect=expect, size=size, max_bytes=max(self.left, 0))
        self.left -= self.blobs.size(digest)
        return digest


class Archive(Protocol):
    """What the resolver asks of an archive, whatever its form."""

    kind: str  # "tar" or "dir"

    def document(self, name: str) -> bytes | None:
        """A small JSON member at the top (manifest.json, index.json, oci-layout), None when absent."""

    def member_blob(self, name: str) -> str:
        """The digest of the member ``name`` (a docker save layer or config), copied into the store."""

    def need(self, digest: str, size: int, what: str, *, manifest: bool = False) -> None:
        """Make sure blob ``digest`` of ``size`` bytes is in the store, copied from this archive
        (``manifest``: it is a manifest or an index, which a registry serves apart from blobs)."""

    def prefetch(self, wanted: list[tuple[str, int, str]]) -> None:
        """A hint: these blobs (digest, size, what) will be needed next (a registry fetches them at once)."""


# the members a tar pass keeps in memory; everything else that may be a blob goes to the store
DOCUMENTS = frozenset({"manifest.json", "index.json", "oci-layout", "repositories"})
_BLOB_NAME = re.compile(r"blobs/sha256/([0-9a-f]{64})")


def _is_blob_member(name: str) -> bool:
    """Members that may hold a blob: an OCI layout's blobs, docker save's layers (``ID/layer.tar``,
    ``HEX.tar``) and configs (``HEX.json``)."""
    return bool(_BLOB_NAME.fullmatch(name)) or name.endswith(".tar") or ("/" not in name and name.endswith(".json"))


def _member_name(name: str) -> str:
    """A member's name as manifests write it: no leading ``./`` or ``/``, no ``a/../``."""
    return posixpath.normpath("/" + name).lstrip("/")


@dataclass
class _TarArchive:
    """What one pass over a tar left: the small JSON documents, and each blob member's digest (its
    content is in the store)."""

    blobs: BlobStore
    documents: dict[str, bytes] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)  # member name -> digest of its content
    links: dict[str, str] = field(default_factory=dict)  # member name -> the member it links to
    puts: int = 0  # blob members copied into the store
    kind: str = "tar"

    def document(self, name: str) -> bytes | None:
        return self.documents.get(name)

    def member_blob(self, name: str) -> str:
        wanted = _member_name(name)
        for _ in range(16):  # skopeo's ID/layer.tar is a symlink to ../HEX.tar; a loop ends here
            if wanted in self.contents:
                return self.contents[wanted]
            if wanted not in self.links:
                break
            wanted = self.links[wanted]
        raise ImageError(f"the archive has no member {name!r}, which its manifest.json names",
                         hint="the archive is incomplete or was modified: export it again")

    def prefetch(self, wanted: list[tuple[str, int, str]]) -> None:
        pass  # (read in one pass already)

    def need(self, digest: str, size: int, what: str, *, manifest: bool = False) -> None:
        # any member that hashed to the digest holds the blob, whatever its name
        if digest not in self._held():
            raise _lacks(digest, what)
        _check_size(self.blobs, digest, size, what)

    def _held(self) -> set[str]:
        return set(self.contents.values())


def _lacks(digest: str, what: str) -> ImageError:
    return ImageError(f"the archive lacks blob {digest} ({what})",
                      hint="the archive is incomplete or was modified: export it again")


def _check_size(blobs: BlobStore, digest: str, size: int, what: str) -> None:
    if blobs.size(digest) != size:
        raise ImageError(f"blob {digest} ({what}) has {blobs.size(digest)} bytes, not the {size} its descriptor says",
                         hint="the archive is damaged or was modified: export it again")


def _read_tar_file(path: Path, budget: _Budget) -> _TarArchive:
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ImageError(f"cannot read {path}: {e.strerror}", hint="check the path and its permissions") from None
    with f:
        return _read_tar(f, budget, str(path))


def _read_tar(stream: IO[bytes], budget: _Budget, label: str) -> _TarArchive:
    """One pass, front to back (a pipe cannot seek): documents to memory, blobs to the store."""
    archive = _TarArchive(budget.blobs)
    try:
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for member in tar:
                _take_member(tar, member, archive, budget)
    except (tarfile.TarError, EOFError, zlib.error) as e:
        hint = "give a docker save / podman save tar or an OCI archive (skopeo copy ... oci-archive:FILE)"
        raise ImageError(f"{label} is not a readable tar archive ({e})", hint=hint) from None
    return archive


def _take_member(tar: tarfile.TarFile, member: tarfile.TarInfo, archive: _TarArchive, budget: _Budget) -> None:
    name = _member_name(member.name)
    if member.issym():
        archive.links[name] = _member_name(posixpath.join(posixpath.dirname(name), member.linkname))
    elif member.islnk():
        archive.links[name] = _member_name(member.linkname)
    elif not member.isfile():
        return
    elif name in DOCUMENTS:
        if member.size > MAX_JSON:
            raise ImageError(f"the archive's {name} has {member.size} bytes (more than {MAX_JSON})",
                             hint="this is no archive an image tool wrote")
        archive.documents[name] = _extracted(tar, member).read()
    elif _is_blob_member(name):
        archive.puts += 1
        if archive.puts > MAX_BLOBS:
            raise ImageError(f"the archive holds more than {MAX_BLOBS} blobs",
                             hint="this is no archive an image tool wrote")
        named = _BLOB_NAME.fullmatch(name)
        # a blob named by its digest must hash to it; docker save's names are checked through the
        # config instead (a layer's digest is its diff_id)
        digest = budget.put(_extracted(tar, member), expect=f"sha256:{named.group(1)}" if named else None,
                            size=member.size)
        archive.contents[name] = digest


def _extracted(tar: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    f = tar.extractfile(member)
    assert f is not None  # (a regular member always has content)
    return f


def _escapes(name: str) -> bool:
    """Whether a name in a manifest points above the archive's top (``../x``, ``/etc/x``)."""
    norm = posixpath.normpath(name)
    return norm.startswith("/") or norm == ".." or norm.startswith("../")


class _LayoutDir:
    """A directory: an OCI image layout (or an unpacked docker save).  Only the blobs its manifests
    name are copied, each checked against its digest as it is."""

    kind = "dir"

    def __init__(self, root: Path, budget: _Budget) -> None:
        self.root = root.resolve()
        self.budget = budget
        self.copied: dict[str, str] = {}  # member name -> digest, for the blobs this read copied

    def document(self, name: str) -> bytes | None:
        f = self._open(name, missing_ok=True)
        if f is None:
            return None
        with f:
            data = f.read(MAX_JSON + 1)
        if len(data) > MAX_JSON:
            raise ImageError(f"{self.root / name} is larger than {MAX_JSON} bytes", hint="this is no image layout")
        return data

    def member_blob(self, name: str) -> str:
        key = _member_name(name)
        if key not in self.copied:
            with self._open(name) as f:
                self.copied[key] = self.budget.put(f)
        return self.copied[key]

    def prefetch(self, wanted: list[tuple[str, int, str]]) -> None:
        pass  # (copied one by one as needed)

    def need(self, digest: str, size: int, what: str, *, manifest: bool = False) -> None:
        key = "blobs/sha256/" + check_digest(digest, what).split(":", 1)[1]
        if self.copied.get(key) == digest:
            _check_size(self.budget.blobs, digest, size, what)
            return
        f = self._open(key, missing_ok=True)
        if f is None:
            raise _lacks(digest, what)
        with f:
            self.copied[key] = self.budget.put(f, expect=digest, size=size)

    def _open(self, name: str, *, missing_ok: bool = False) -> IO[bytes] | None:
        """A regular file of the layout, opened; never one outside it (a hostile name or symlink),
        never a FIFO or device (which would block or never end)."""
        path = os.path.realpath(self.root / _member_name(name))
        if _escapes(name) or os.path.commonpath([path, self.root]) != str(self.root):
            raise ImageError(f"{name!r} points outside the layout {self.root}", hint="this is no image layout")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise ImageError(f"{self.root} has no {name!r}, which its manifest names",
                             hint="the layout is incomplete: copy or export it again") from None
        except OSError as e:
            raise ImageError(f"cannot read {path}: {e.strerror}", hint="check its permissions") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ImageError(f"{path} is not a regular file", hint="this is no image layout")
        return os.fdopen(fd, "rb")


# ---------------------------------------------------------------------------------------------
# from an archive's documents to image records


def _descriptor(value: Any, what: str) -> dict:
    """A content descriptor (mediaType, digest, size), its digest and size checked."""
    if not isinstance(value, dict):
        raise _malformed(f"{what} is not a descriptor (a JSON object)")
    check_digest(value.get("digest"), f"the digest of {what}")
    size = value.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _malformed(f"{what} has no valid size")
    if not isinstance(value.get("mediaType", ""), str) or not isinstance(value.get("annotations") or {}, dict):
        raise _malformed(f"{what} has a malformed mediaType or annotations")
    return value


def _malformed(message: str) -> ImageError:
    return ImageError(message, hint="the archive's manifests are malformed: export it again (docker, podman, skopeo)")


def _unsupported(media_type: str, what: str) -> ImageError:
    if media_type in DOCKER_SCHEMA1:
        return ImageError(f"{what} is a docker schema 1 manifest ({media_type}), which is not supported",
                          hint="convert it: skopeo copy --format v2s2 SOURCE docker-archive:FILE")
    return ImageError(f"{what} has the media type {media_type!r}, which is no container image manifest or index",
                      hint="give an OCI or docker (schema 2) image")


def _platform_of(desc: dict) -> Platform | None:
    p = desc.get("platform")
    if not isinstance(p, dict) or not isinstance(p.get("os"), str) or not isinstance(p.get("architecture"), str):
        return None
    variant = p.get("variant") if isinstance(p.get("variant"), str) else ""
    return Platform(p["os"], p["architecture"], variant)


class _Resolver:
    """Turns an archive's index.json / manifest.json into image records, fetching each blob it names."""

    def __init__(self, archive: Archive, blobs: BlobStore, want: Platform, budget: _Budget) -> None:
        self.archive = archive
        self.blobs = blobs
        self.want = want
        self.budget = budget

    def records(self, label: str) -> list[ImageRecord]:
        index = self.archive.document("index.json")
        manifest = self.archive.document("manifest.json")
        if index is None and manifest is None:
            where = "the stream" if label == "-" else label
            raise ImageError(f"{where} holds neither an index.json (OCI) nor a manifest.json (docker save)",
                             hint="give a docker save / podman save tar or an OCI layout; a layout tarred with its "
                                  "directory must be packed from inside it (tar -C DIR -cf FILE .)")  # fmt: skip
        if index is not None:
            self._check_layout_version()
            docker_names = self._docker_names(manifest) if manifest is not None else {}
            kind = "docker-archive" if manifest is not None else "oci" if self.archive.kind == "dir" else "oci-archive"
            records = [dataclasses.replace(r, names=_unique(r.names + docker_names.get(r.config_digest, [])))
                       for r in self._from_index(index)]
        else:
            kind = "docker-archive"
            records = self._from_docker_manifest(manifest)
        return [dataclasses.replace(r, source=f"{kind}:{label}") for r in _merged(records)]

    def _check_layout_version(self) -> None:
        data = self.archive.document("oci-layout")
        if data is None:
            return  # required by the spec, yet the index says all that matters: tolerated
        doc = _json_document(data, "the archive's oci-layout", dict)
        version = doc.get("imageLayoutVersion")
        if not isinstance(version, str) or not version.startswith("1."):
            raise ImageError(f"the OCI layout has the version {version!r}; only 1.x is supported",
                             hint="convert it with skopeo copy oci:DIR oci-archive:FILE")

    # -- OCI --------------------------------------------------------------------------------

    def _from_index(self, data: bytes) -> list[ImageRecord]:
        index = _json_document(data, "the archive's index.json", dict)
        descriptors = self._manifests_of(index, "index.json")
        chosen = [d for d in descriptors if _platform_of(d) is None or self._fits(d)]
        if descriptors and not chosen:
            raise self._no_platform(descriptors, "index.json")
        records = []
        for desc in chosen:
            names, tags = _names_of(desc.get("annotations") or {})
            record = self._image(desc, f"{desc['digest']} (in index.json)", depth=0)
            records.append(dataclasses.replace(record, names=names, tags=tags))
        return records

    def _manifests_of(self, index: dict, what: str) -> list[dict]:
        if index.get("schemaVersion") != 2:
            raise _malformed(f"{what} has schemaVersion {index.get('schemaVersion')!r}, not 2")
        manifests = index.get("manifests")
        if not isinstance(manifests, list):
            raise _malformed(f"{what} has no list of manifests")
        return [_descriptor(d, f"manifests[{i}] of {what}") for i, d in enumerate(manifests)]

    def _fits(self, desc: dict) -> bool:
        p = _platform_of(desc)
        return p is not None and p.normalised() == self.want

    def _no_platform(self, descriptors: list[dict], what: str) -> ImageError:
        offered = sorted({str(p) for d in descriptors if (p := _platform_of(d)) and p.os != "unknown"})
        return ImageError(f"{what} has no image for {self.want}; it offers: {', '.join(offered) or 'no platform'}",
                          hint="choose one of those platforms (platform=... / --platform)")

    def _image(self, desc: dict, what: str, depth: int) -> ImageRecord:
        media_type = desc.get("mediaType", "")
        if media_type and media_type not in MANIFEST_TYPES | INDEX_TYPES:
            raise _unsupported(media_type, what)
        doc = _json_document(self._json_blob(desc, what, manifest=True), what, dict)
        media_type = self._media_type(desc, doc, what)
        if media_type in MANIFEST_TYPES:
            return self._from_manifest(desc, doc, what)
        if depth >= MAX_NESTING:
            raise _malformed(f"{what}: indexes nest deeper than {MAX_NESTING}")
        descriptors = self._manifests_of(doc, what)
        chosen = next((d for d in descriptors if self._fits(d)), None)
        if chosen is None:
            chosen = descriptors[0] if len(descriptors) == 1 and _platform_of(descriptors[0]) is None else None
        if chosen is None:
            raise self._no_platform(descriptors, f"the index {desc['digest']}")
        return self._image(chosen, f"{chosen['digest']} (for {self.want} in the index {desc['digest']})", depth + 1)

    @staticmethod
    def _media_type(desc: dict, doc: dict, what: str) -> str:
        """The one media type of a manifest or index: its descriptor's and its own must agree (a blob
        read as another type than it says is how confusion attacks work)."""
        declared, own = desc.get("mediaType") or "", doc.get("mediaType") or ""
        if declared and own and declared != own:
            raise _malformed(f"{what} is described as {declared} but says it is {own}")
        shape = OCI_INDEX if "manifests" in doc else OCI_MANIFEST if "config" in doc or "layers" in doc else ""
        if declared and shape and (declared in INDEX_TYPES) != (shape in INDEX_TYPES):
            kind = "an index" if shape in INDEX_TYPES else "a manifest"
            raise _malformed(f"{what} is described as {declared} but is {kind}")
        media_type = declared or own or shape or OCI_MANIFEST
        if media_type not in MANIFEST_TYPES | INDEX_TYPES:
            raise _unsupported(media_type, what)
        return media_type

    def _json_blob(self, desc: dict, what: str, *, manifest: bool = False) -> bytes:
        if desc["size"] > MAX_JSON:
            raise _malformed(f"{what} says it has {desc['size']} bytes (a JSON document of more than {MAX_JSON})")
        self.archive.need(desc["digest"], desc["size"], what, manifest=manifest)
        with self.blobs.open(desc["digest"]) as f:
            return f.read()

    def _from_manifest(self, desc: dict, doc: dict, what: str) -> ImageRecord:
        if doc.get("schemaVersion") != 2:
            raise _unsupported(DOCKER_SCHEMA1[0] if doc.get("schemaVersion") == 1 else str(doc.get("mediaType")), what)
        config_desc = _descriptor(doc.get("config"), f"the config of {what}")
        if config_desc.get("mediaType") not in CONFIG_TYPES:
            raise ImageError(f"{what} is no container image: its config is {config_desc.get('mediaType')!r}",
                             hint="give a container image (an artifact such as a signature or a chart is not one)")
        config = ImageConfig.from_json(self._json_blob(config_desc, f"the config of {what}"))
        layer_descs = doc.get("layers")
        if not isinstance(layer_descs, list):
            raise _malformed(f"{what} has no list of layers")
        if len(layer_descs) != len(config.diff_ids):
            raise _malformed(f"{what} has {len(layer_descs)} layers and its config {len(config.diff_ids)} diff_ids")
        layer_descs = [_descriptor(d, f"layer {i} of {what}") for i, d in enumerate(layer_descs)]
        self.archive.prefetch([(d["digest"], d["size"], f"layer {i} of {what}") for i, d in enumerate(layer_descs)
                               if d.get("mediaType", "") in LAYER_COMPRESSION])  # fmt: skip
        layers = [self._layer(d, diff_id, f"layer {i} of {what}")
                  for i, (d, diff_id) in enumerate(zip(layer_descs, config.diff_ids))]
        return ImageRecord(names=[], manifest_digest=desc["digest"], config_digest=config_desc["digest"],
                           config=config, layers=layers, source="")

    def _layer(self, desc: dict, diff_id: str, what: str) -> Layer:
        media_type = desc.get("mediaType", "")
        if media_type not in LAYER_COMPRESSION:
            raise ImageError(f"{what} has the media type {media_type!r}, which is no layer we can apply",
                             hint="give an image with tar, tar+gzip or tar+zstd layers (not encrypted ones)")
        self.archive.need(desc["digest"], desc["size"], what)
        if not LAYER_COMPRESSION[media_type] and desc["digest"] != diff_id:
            raise ImageError(f"{what} is an uncompressed layer {desc['digest']}, yet its config says {diff_id}",
                             hint="the archive is damaged or was modified: export it again")
        return Layer(desc["digest"], media_type, desc["size"], diff_id)

    # -- docker save ------------------------------------------------------------------------

    def _docker_entries(self, data: bytes) -> list[dict]:
        entries = _json_document(data, "the archive's manifest.json", list)
        for i, entry in enumerate(entries):
            if not _is_docker_entry(entry):
                raise _malformed(f"manifest.json entry {i} has no Config (a name) and Layers (a list of names)")
        return entries

    def _docker_names(self, data: bytes) -> dict[str, list[str]]:
        """config digest -> names, from docker >= 25's manifest.json (beside its OCI layout)."""
        return {self.archive.member_blob(e["Config"]): _repo_tags(e) for e in self._docker_entries(data)}

    def _from_docker_manifest(self, data: bytes) -> list[ImageRecord]:
        return [self._docker_image(entry, f"image {i} of manifest.json")
                for i, entry in enumerate(self._docker_entries(data))]

    def _docker_image(self, entry: dict, what: str) -> ImageRecord:
        config_digest = self.archive.member_blob(entry["Config"])
        if self.blobs.size(config_digest) > MAX_JSON:
            raise _malformed(f"the config of {what} is larger than {MAX_JSON} bytes")
        with self.blobs.open(config_digest) as f:
            config = ImageConfig.from_json(f.read())
        if len(entry["Layers"]) != len(config.diff_ids):
            raise _malformed(f"{what} has {len(entry['Layers'])} layers and its config {len(config.diff_ids)} diff_ids")
        layers = []
        for name, diff_id in zip(entry["Layers"], config.diff_ids):
            digest = self.archive.member_blob(name)
            # a docker save layer is the uncompressed tar: its digest is the diff_id its config names
            if digest != diff_id:
                raise ImageError(f"layer {name!r} of {what} hashes to {digest}, not its config's diff_id {diff_id}",
                                 hint="the archive is damaged or was modified: export it again")
            layers.append(Layer(digest, OCI_LAYER, self.blobs.size(digest), diff_id))
        manifest_digest = self._write_manifest(config_digest, layers)
        return ImageRecord(names=_repo_tags(entry), manifest_digest=manifest_digest, config_digest=config_digest,
                           config=config, layers=layers, source="")

    def _write_manifest(self, config_digest: str, layers: list[Layer]) -> str:
        """docker save keeps no manifest: write the OCI manifest of what it holds, so every image in
        the store is a manifest, a config and layers, whatever archive it came from."""
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                       "size": self.blobs.size(config_digest)},
            "layers": [{"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size} for layer in layers],
        }
        return self.budget.put(io.BytesIO(json.dumps(manifest, separators=(",", ":")).encode()))


def _is_docker_entry(entry: Any) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("Config"), str) and isinstance(entry.get("Layers"), list) \
        and all(isinstance(x, str) for x in entry["Layers"])


def _repo_tags(entry: dict) -> list[str]:
    tags = entry.get("RepoTags") or []
    if not isinstance(tags, list):
        raise _malformed("a RepoTags of manifest.json is not a list")
    return _unique([name for t in tags if (name := _canonical(t))])


def _canonical(name: object) -> str | None:
    """An archive's name for an image, canonical; None when it is no valid reference.  A bad name
    does not make the image unreadable: the caller can still name it (``--tag``)."""
    try:
        return str(parse_reference(name))  # type: ignore[arg-type]
    except ImageError:
        return None


def _names_of(annotations: dict) -> tuple[list[str], list[str]]:
    """(canonical names, bare tags) from an OCI descriptor's annotations.  A ref.name may be a whole
    reference (skopeo oci:DIR:example.com/app:1) or just a tag (umoci, docker save: ``latest``):
    without a '/', ':' or '@' it is a tag, which names no repository."""
    names, tags = [], []
    for key in (CONTAINERD_NAME, REF_NAME):
        value = annotations.get(key)
        if not isinstance(value, str) or not value:
            continue
        if not any(c in value for c in "/:@"):
            if _TAG.fullmatch(value):  # (another bare word names nothing we could use)
                tags.append(value)
        elif name := _canonical(value):
            names.append(name)
    return _unique(names), _unique(tags)


def _merged(records: list[ImageRecord]) -> list[ImageRecord]:
    """One record per manifest (a layout that tags one manifest twice lists it twice), names joined."""
    by_manifest: dict[str, ImageRecord] = {}
    for r in records:
        seen = by_manifest.get(r.manifest_digest)
        by_manifest[r.manifest_digest] = r if seen is None else dataclasses.replace(
            seen, names=_unique(seen.names + r.names), tags=_unique(seen.tags + r.tags))
    return list(by_manifest.values())


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
