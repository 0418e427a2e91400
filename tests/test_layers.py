"""The shape of the package: no import cycles (lazy imports included), and the jail core depends on
nothing above it (agent, eval, rl, cli, bench import the core, never the reverse)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = "sandboxlite"
# the layers above the jail core
UPPER = ("agent", "eval", "rl", "cli", "bench", "doctor", "compat")
# the jail core: these modules, and the rootfs package
CORE = ("bwrap", "cgroups", "config", "devnodes", "errors", "executor", "host", "identity", "launch", "netns",
        "paths", "plan", "pool", "protocol", "result", "sandbox", "seccomp", "shell", "transfer", "_cmdio",
        "egress", "netpolicy", "ports", "_relay", "rootfs", "snapshot", "snapshot_io")  # fmt: skip


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / PKG).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")  # fmt: skip


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the package that ``name`` imports, at module level or inside functions
    (``if TYPE_CHECKING:`` blocks excluded: they never run)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PKG or a.name.startswith(PKG + "."):
                    found.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == PKG or mod.startswith(PKG + "."):
                subs = {f"{mod}.{a.name}" for a in node.names} & known  # "from . import x", x a module
                found.update(subs)
                if len(subs) < len(node.names):  # names defined by the module itself
                    found.add(mod)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return {m for m in found if m in known}


@functools.lru_cache(maxsize=1)
def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def layer(mod: str) -> str:
    rest = mod.split(".")[1:]
    return rest[0] if rest else ""


def test_the_checker_finds_cycles_and_lazy_imports(tmp_path):
    pkg = tmp_path / PKG
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n"
                              "def g():\n    import sandboxlite.a\n")  # fmt: skip
    known = {"sandboxlite", "sandboxlite.a", "sandboxlite.b", "sandboxlite.c"}
    g = {m: imports(m, pkg / (m.split(".")[-1] + ".py") if m != PKG else pkg / "__init__.py", known) for m in known}
    assert g["sandboxlite.b"] == {"sandboxlite.c"}  # a lazy import counts
    assert "sandboxlite.b" not in g["sandboxlite.c"]  # a TYPE_CHECKING one does not
    assert cycles(g) == [["sandboxlite.a", "sandboxlite.b", "sandboxlite.c"]]


def test_no_import_cycles():
    found = cycles(graph())
    assert found == [], "import cycles (break them: move the shared part down a layer):\n" + "\n".join(
        " <-> ".join(c) for c in found)  # fmt: skip


@pytest.mark.parametrize("core", CORE)
def test_the_core_imports_nothing_above_it(core):
    g = graph()
    mine = [m for m in g if layer(m) == core]
    assert mine, f"{core} is not a module of the package"
    bad = {m: sorted(d for d in deps if layer(d) in UPPER) for m in mine for deps in [g[m]]}
    assert {m: d for m, d in bad.items() if d} == {}


def test_sandbox_py_stays_small():
    lines = (SRC / PKG / "sandbox.py").read_text().count("\n")
    # 450: the snapshot API (snapshot, fork, base, reset(to=)) is thin wrappers over snapshot.py and launch.py
    assert lines < 450, f"sandbox.py has {lines} lines: move a concept into a module of its own"
