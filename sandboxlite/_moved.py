"""The old import paths of the core, from before it moved into rooms: still importable.

``import sandboxlite.sandbox``, ``from sandboxlite.snapshot import Store`` or
``mock.patch("sandboxlite.launch.X")`` go on working: a finder, first on ``sys.meta_path``, answers
an old name with the module at its new place (the same object, so patching one patches the
other).  New code imports the new places; this table only grows when a module moves again.

May import: nothing of sandboxlite (it is installed before anything else is imported).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

# old name under sandboxlite -> its place now (a prefix: sandboxlite.rootfs.build is images.build)
MOVED = {
    "seccomp": "isolation.seccomp", "landlock": "isolation.landlock", "cgroups": "isolation.cgroups",
    "idmap": "isolation.idmap", "slots": "isolation.slots", "devnodes": "isolation.devnodes",
    "identity": "isolation.identity", "bwrap": "isolation.bwrap", "containers": "isolation.containers",
    "container_profile": "isolation.container_profile",
    "netns": "network.netns", "netpolicy": "network.policy", "egress": "network.egress",
    "ports": "network.ports", "_relay": "network.relay",
    "protocol": "executor.protocol",
    "rootfs": "images",
    "snapshot": "state.snapshot", "snapshot_io": "state.archive", "share": "state.share",
    "host": "jail.host", "plan": "jail.plan", "launch": "jail.launch", "_cmdio": "jail.cmdio",
    "transfer": "jail.transfer", "sandbox": "jail.sandbox", "shell": "jail.shell", "pool": "jail.pool",
}  # fmt: skip


def new_name(name: str) -> str | None:
    """The module an old ``sandboxlite.…`` name now is, or None when ``name`` did not move."""
    head, _, rest = name.partition(".")
    if head != "sandboxlite" or not rest:
        return None
    first, _, tail = rest.partition(".")
    if first not in MOVED:
        return None
    return "sandboxlite." + MOVED[first] + (f".{tail}" if tail else "")


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target
        self.spec: object = None

    def create_module(self, spec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # (the import system set the alias's spec on it: the module keeps its own)


class Finder(importlib.abc.MetaPathFinder):
    """Finds the old names (and only those), as aliases of the modules at their new places."""

    def find_spec(self, name, path=None, target=None):
        new = new_name(name)
        if new is None:
            return None
        return importlib.util.spec_from_loader(name, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): before the path finder, which would load a
    second copy of a moved package's submodule under the old name."""
    if not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder())
