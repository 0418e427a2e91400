"""The image recipes: data, kept in ``rootfs/`` at the repository's root.

    rootfs/profiles/NAME.json   an image: suite, variant, packages, hooks, ``extends``
    rootfs/hooks/NAME.sh        an mmdebstrap --customize-hook ("$1" is the new root)
    rootfs/dpkg-excludes        dpkg path options every image is built with

In a checkout they are read where they are; a wheel carries them as
``sandboxlite/images/recipes/`` (setup.py copies ``rootfs/`` there), so an installed
sandboxlite builds the same images.  Lines starting with ``#`` in a hook or in
dpkg-excludes are comments, not part of what mmdebstrap gets.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import RootfsError

HERE = Path(__file__).resolve().parent


def recipes_dir() -> Path:
    """Where the recipes are: the wheel's copy, else ``rootfs/`` beside the package (a checkout)."""
    for d in (HERE / "recipes", HERE.parent.parent / "rootfs"):
        if (d / "profiles").is_dir():
            return d
    raise RootfsError("the image recipes are missing (no rootfs/profiles beside the package, no "
                      f"{HERE / 'recipes'})", hint="reinstall sandboxlite (pip install sandboxlite, or "
                      "pip install -e . in a checkout)")  # fmt: skip


def profile_names() -> list[str]:
    return sorted(p.name[:-5] for p in (recipes_dir() / "profiles").iterdir() if p.name.endswith(".json"))


def profile_data(name: str) -> dict:
    """The JSON of profile ``name`` (``extends`` not merged: ``build.load_profile`` does that)."""
    path = recipes_dir() / "profiles" / f"{name}.json"
    if "/" in name or name.startswith(".") or not path.is_file():
        raise RootfsError(f"no rootfs profile named {name!r}", hint=f"choose one of: {', '.join(profile_names())}")
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise RootfsError(f"profile {name}: {path} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise RootfsError(f"profile {name}: {path} holds {type(data).__name__}, expected an object")
    return data


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def hooks() -> dict[str, str]:
    """Hook name -> the shell snippet mmdebstrap runs (its lines joined, comments left out)."""
    return {p.name[:-3]: "\n".join(_lines(p)) for p in sorted((recipes_dir() / "hooks").glob("*.sh"))}


def dpkg_excludes() -> tuple[str, ...]:
    return tuple(_lines(recipes_dir() / "dpkg-excludes"))
