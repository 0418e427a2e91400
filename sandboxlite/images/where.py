"""Where images live, and which image a container reference names.

    $SANDBOXLITE_HOME/rootfs/NAME/     an image: root/ and manifest.json (built, imported or adopted)
    $SANDBOXLITE_HOME/rootfs/.names    which image each container reference names (JSON: canonical
                                       reference -> NAME), written by store.py under its lock

Kept apart from the room's ``__init__`` (``resolve``) and from store.py (which writes images) so
that both can ask it, and a sandbox's start reads one small file (cached while it does not change)
to turn ``python:3.12-slim`` into an image.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
from pathlib import Path

from .. import paths
from ..errors import ImageError, RootfsError

NAMES = ".names"


def images_dir() -> Path:
    return paths.home() / "rootfs"


def image_root(name: str) -> Path:
    """The root directory of an image (``$SANDBOXLITE_HOME/rootfs/NAME/root``)."""
    return images_dir() / name / "root"


def names() -> dict[str, str]:
    """Every container reference the store knows (canonical form) and the image it names."""
    path = images_dir() / NAMES
    try:
        st = path.stat()
    except OSError:
        return {}
    return dict(_read_names(str(path), st.st_mtime_ns, st.st_size, st.st_ino))


@functools.lru_cache(maxsize=4)
def _read_names(path: str, _mtime_ns: int, _size: int, _ino: int) -> tuple[tuple[str, str], ...]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ()  # a damaged index names nothing (store.py writes it again on the next import)
    if not isinstance(data, dict):
        return ()
    return tuple((k, v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str))


def find(spec: str) -> str | None:
    """The image a container reference names (``python:3.12-slim``, ``docker.io/library/python``,
    ``localhost:5000/x@sha256:...``), or None when the store knows no such name.  A spec that is
    no reference at all is None too (the caller says what it looked for)."""
    if spec.startswith(("/", ".")):
        return None  # a path: no reference (and no stat of the index on a directory's start)
    known = names()
    if not known:
        return None
    from .oci import parse_reference  # (here: a start that names no reference loads no OCI code)

    try:
        ref = parse_reference(spec)
    except ImageError:
        return None
    name = known.get(str(ref))
    if name is not None and os.path.isdir(images_dir() / name):
        return name
    return None


def hold(name: str | None) -> int | None:
    """Mark the container image ``name`` in use by a starting sandbox (a shared lock on its
    manifest, until the descriptor returned is closed): ``image rm`` refuses it meanwhile, from any
    process.  None for anything else (built images, directories, the host)."""
    if not name or not name.startswith("oci-"):
        return None
    path = images_dir() / name / "manifest.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RootfsError(f"the image {name} was removed as the sandbox was starting",
                          hint="import it again: sandboxlite image import FILE") from None  # fmt: skip
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        if not path.exists():  # removed while we waited for the lock
            raise RootfsError(f"the image {name} was removed as the sandbox was starting",
                              hint="import it again: sandboxlite image import FILE")  # fmt: skip
    except BaseException:
        os.close(fd)
        raise
    return fd

