"""The eval data: where it lives by default (``sandboxlite data pull`` fills it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def default_data_dir(environ: Mapping[str, str]) -> Path:
    """``$SANDBOXLITE_EVAL_DATA``, else ``$XDG_CACHE_HOME/sandboxlite/eval-data``, else
    ``~/.cache/sandboxlite/eval-data``."""
    if environ.get("SANDBOXLITE_EVAL_DATA"):
        return Path(environ["SANDBOXLITE_EVAL_DATA"]).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "sandboxlite" / "eval-data"
