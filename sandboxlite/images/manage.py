"""Manage built images: list, verify, export, import, adopt, remove.

Images live in ``$SANDBOXLITE_HOME/rootfs/NAME/`` (``root/``, ``manifest.json``,
``files.tsv``).  Nothing here ever writes into an image's ``root/`` except
``import`` and ``adopt`` creating it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import RootfsError, SetupError
from . import images_dir
from .manifest import (
    FILES,
    MANIFEST,
    Verification,
    extract,
    give_to_sandbox_user,
    read_manifest,
    remove_tree,
    verify_tree,
    write_manifest,
)


@dataclass
class ImageInfo:
    name: str
    path: Path
    manifest: dict


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith(".") or name in ("host", "auto"):
        raise RootfsError(f"invalid image name {name!r} (no '/', no leading '.', not 'host' or 'auto')")


def image_dir(name: str) -> Path:
    _check_name(name)
    d = images_dir() / name
    if not d.is_dir():
        raise RootfsError(f"no rootfs image named {name!r} in {images_dir()}",
                          hint=f"sandboxlite rootfs build {name}   (or: sandboxlite rootfs import FILE)")  # fmt: skip
    return d


def list_images() -> list[ImageInfo]:
    out = []
    if images_dir().is_dir():
        for d in sorted(images_dir().iterdir()):
            if d.is_dir() and not d.name.startswith("."):
                try:
                    out.append(ImageInfo(d.name, d, read_manifest(d)))
                except RootfsError as e:
                    out.append(ImageInfo(d.name, d, {"error": e.message}))
    return out


def verify(name: str) -> Verification:
    return verify_tree(image_dir(name))


def stale_recipe(name: str) -> str:
    """Why image ``name`` is not what its profile builds now ("" when it is, or when it was not
    built from a profile of that name: an adopted or imported image of another name)."""
    from .build import load_profile, profile_names, recipe_digest

    manifest = read_manifest(image_dir(name))
    profile = manifest.get("profile")
    if profile not in profile_names() or manifest.get("source") != "mmdebstrap":
        return ""
    want = recipe_digest(load_profile(profile))
    have = manifest.get("recipe")
    if have == want:
        return ""
    return f"it was built from {'an older' if have is None else 'another'} recipe of profile {profile!r} ({have or 'unrecorded'}, now {want})"


def give(name: str) -> None:
    """Hand an image to the uid sandboxes run as (a root caller's copy-on-write root needs it)."""
    give_to_sandbox_user(image_dir(name) / "root")


def remove(name: str) -> None:
    remove_tree(image_dir(name))


def export(name: str, dest: str | os.PathLike) -> Path:
    """Write the image (tree and manifest) as a zstd-compressed tarball."""
    d = image_dir(name)
    read_manifest(d)
    dest = Path(dest).absolute()
    if not shutil.which("zstd"):
        raise SetupError("exporting needs zstd", hint="apt-get install zstd")
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    argv = ["tar", "--zstd", "-C", str(d), "--numeric-owner", "-cf", str(tmp), MANIFEST, FILES, "root"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RootfsError(f"export failed: {r.stderr.strip()[-2000:]}")
    os.replace(tmp, dest)
    return dest


def import_(archive: str | os.PathLike, name: str | None = None, *, force: bool = False) -> ImageInfo:
    """Unpack an exported image and check its digest before it becomes usable."""
    archive = Path(archive)
    if not archive.is_file():
        raise RootfsError(f"{archive} does not exist")
    if not shutil.which("zstd"):
        raise SetupError("importing needs zstd", hint="apt-get install zstd")
    images_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".import-", dir=images_dir()))
    os.chmod(work, 0o755)
    try:
        extract(archive, work)
        give_to_sandbox_user(work / "root")
        manifest = read_manifest(work)
        name = name or manifest.get("name")
        _check_name(name)
        v = verify_tree(work)
        if not v.ok:
            shown = (v.changed + v.added + v.removed)[:10]
            raise RootfsError(
                f"{archive} does not match its manifest (digest {v.actual}, expected {v.expected}); "
                f"differences: {', '.join(shown) or 'none listed'}",
                hint="the file is damaged or was modified: export it again",
            )
        final = images_dir() / name
        if final.exists():
            if not force:
                raise RootfsError(f"an image named {name!r} already exists", hint=f"sandboxlite rootfs rm {name}")
            remove_tree(final)
        os.rename(work, final)
    except BaseException:
        remove_tree(work)
        raise
    return ImageInfo(name, final, read_manifest(final))


def adopt(tree: str | os.PathLike, name: str, *, description: str = "") -> ImageInfo:
    """Copy an existing root filesystem tree in as an image (with a manifest)."""
    _check_name(name)
    src = Path(tree)
    if not (src / "usr").is_dir():
        raise RootfsError(f"{src} does not look like a root filesystem (no usr/)")
    final = images_dir() / name
    if final.exists():
        raise RootfsError(f"an image named {name!r} already exists", hint=f"sandboxlite rootfs rm {name}")
    images_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.adopt-", dir=images_dir()))
    os.chmod(work, 0o755)
    try:
        shutil.copytree(src, work / "root", symlinks=True)
        give_to_sandbox_user(work / "root")
        write_manifest(work, name=name, profile=name, source=f"adopted from {src}")
        os.rename(work, final)
    except BaseException:
        remove_tree(work)
        raise
    return ImageInfo(name, final, read_manifest(final))
