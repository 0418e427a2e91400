"""Images from Dockerfiles, without a daemon (``sandboxlite image build``).

    dockerfile.py   the Dockerfile reader: instructions, variables, quoting (pure: no I/O)
    builder.py      the build: each step in a sandbox, each result a cached snapshot layer, the
                    image flattened into the store

May import: errors, paths, config, images, jail, state.
"""

from __future__ import annotations

from .builder import DEFAULT_NETWORK, BuildResult, build

__all__ = ["build", "BuildResult", "DEFAULT_NETWORK"]
