"""The house: rooms, what each may import, no import cycles, and the old import paths.

Every room (a subpackage of sandboxlite, or a top-level module) says in its docstring what it
may import ("May import: errors, executor, images."); this test reads those lines, walks every
import of every module (function-level and TYPE_CHECKING ones included: they are imports too)
and fails on an import a room did not declare, on a cycle between the declarations, and on any
cycle between modules.  Pure: no bwrap, no sandbox.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from unittest import mock

import pytest

import sandboxlite
from sandboxlite import _moved

PKG = Path(sandboxlite.__file__).resolve().parent
CORE = ("isolation", "network", "executor", "images", "state", "jail")
DECLARED = re.compile(r"^May import: (.+?)\.?$", re.M)


def module_files() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = ["sandboxlite", *path.relative_to(PKG).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


MODULES = module_files()


def room_of(module: str) -> str:
    """``sandboxlite.jail.launch`` -> ``jail``; ``sandboxlite.errors`` -> ``errors``; the package -> ``sandboxlite``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sandboxlite"


def rooms() -> dict[str, Path]:
    """Each room and the file whose docstring declares it."""
    out = {}
    for mod, path in MODULES.items():
        parts = mod.split(".")
        if len(parts) == 1 or (len(parts) == 2):
            out[room_of(mod)] = path
    return out


def declared(path: Path) -> set[str] | None:
    """The rooms a room may import (its docstring's "May import:" line); None for "anything"."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    m = DECLARED.search(doc)
    assert m, f"{path}: its docstring says nothing of what it may import (a 'May import: ...' line)"
    text = re.sub(r"\(.*?\)", "", m.group(1)).strip().rstrip(".")
    if text.startswith("anything"):
        return None
    if text.startswith("nothing"):
        return set()
    return {name.strip() for name in text.split(",")}


def imports(module: str, path: Path, source: str | None = None) -> set[str]:
    """Every sandboxlite module ``module`` imports, wherever the import statement is."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "sandboxlite":
                continue
            for alias in node.names:  # from PKG import MODULE names the module, not the package
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in MODULES else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "sandboxlite"}
    unknown = {t for t in out if t not in MODULES and _moved.new_name(t) is None}
    assert not unknown, f"{module} imports modules that do not exist: {unknown}"
    return {_moved.new_name(t) or t for t in out} - {module}


GRAPH = {mod: imports(mod, path) for mod, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_core_is_in_rooms_and_the_top_level_is_small():
    top = sorted(p.name for p in PKG.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file())
    assert set(CORE) <= set(top)
    modules = [n for n in top if n.endswith(".py")]
    assert len(modules) <= 9, f"the top level holds {modules}: a module there belongs in a room"
    for room in CORE:
        assert declared(PKG / room / "__init__.py") is not None


def test_every_import_goes_to_a_room_it_declares():
    declarations = {room: declared(path) for room, path in rooms().items()}
    wrong = []
    for mod, targets in GRAPH.items():
        allowed = declarations[room_of(mod)]
        if allowed is None:
            continue
        for t in sorted(targets):
            if room_of(t) != room_of(mod) and room_of(t) not in allowed:
                wrong.append(f"{mod} imports {t} (room {room_of(mod)} declares: {sorted(allowed)})")
    assert not wrong, "\n".join(wrong)


def test_the_declared_rooms_exist_and_point_one_way():
    declarations = {room: declared(path) for room, path in rooms().items()}
    for room, allowed in declarations.items():
        assert allowed is None or allowed <= set(declarations) - {room}, (room, allowed - set(declarations))
    graph = {room: (allowed or set()) for room, allowed in declarations.items() if allowed is not None}
    assert cycles(graph) == []
    # the core never reaches up: no core room declares an upper layer or the CLI
    for room in CORE:
        assert not (declarations[room] & {"agent", "eval", "rl", "bench", "compat", "cli", "doctor", "sandboxlite"})


def test_no_import_cycles_between_modules():
    assert cycles(GRAPH) == []


def test_the_checks_see_a_cycle_and_a_wrong_way_import():
    """The walker itself: a function-level import counts, and a cycle through it is found."""
    fake = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(fake) == [["a", "b", "c"]]
    src = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..jail import pool\n" \
          "def f():\n    from ..jail.sandbox import Sandbox\n    import sandboxlite.snapshot\n"
    found = imports("sandboxlite.state.share", PKG / "state" / "share.py", src)
    assert found == {"sandboxlite.jail.sandbox", "sandboxlite.jail.pool", "sandboxlite.state.snapshot"}


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_old_import_paths_name_the_same_modules(old):
    new = "sandboxlite." + _moved.MOVED[old]
    mod = importlib.import_module(f"sandboxlite.{old}")
    assert mod is importlib.import_module(new)
    assert mod.__spec__.name == new  # the module keeps its own spec


def test_old_import_paths_work_as_users_wrote_them():
    import sandboxlite.launch
    from sandboxlite.rootfs.build import load_profile
    from sandboxlite.sandbox import Sandbox
    from sandboxlite.snapshot import Store

    assert Sandbox is sandboxlite.Sandbox and Store is importlib.import_module("sandboxlite.state.snapshot").Store
    assert load_profile("lean").name == "lean"
    with mock.patch("sandboxlite.launch.Jail") as fake:
        assert importlib.import_module("sandboxlite.jail.launch").Jail is fake
    assert sandboxlite.launch.__name__ == "sandboxlite.jail.launch"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sandboxlite.no_such_module")


def test_the_public_api_is_unchanged():
    assert sorted(sandboxlite.__all__) == sorted([
        "Sandbox", "AsyncSandbox", "AsyncShell", "Process", "FileInfo", "FileEvent", "SandboxPool", "Host", "SandboxConfig", "Limits", "Mount", "ExecResult", "Shell", "Snapshot",
        "SandboxError", "ConfigError", "SetupError", "RootfsError", "SandboxClosed", "SandboxCrashed",
        "CommandTimeout", "CommandFailed", "SandboxFileError", "SnapshotError", "__version__", "run_task",
        "RunResult", "ExitReason", "Task", "FakeModel", "OpenAIModel", "resolve_model", "find_models", "choose_model"])  # fmt: skip
    for name in sandboxlite.__all__:
        assert getattr(sandboxlite, name) is not None
    for upper in ("sandboxlite.rl", "sandboxlite.agent", "sandboxlite.eval", "sandboxlite.bench",
                  "sandboxlite.compat", "sandboxlite.cli"):
        importlib.import_module(upper)


def test_sandbox_py_stays_small():
    lines = (PKG / "jail" / "sandbox.py").read_text().count("\n")
    # 460: the snapshot API (snapshot, fork, base, reset(to=)) is thin wrappers over state/ and launch.py;
    # the files API grows with the processes issue: then it moves to a module of its own
    assert lines < 460, f"jail/sandbox.py has {lines} lines: move a concept into a module of its own"


LONGEST = 80  # lines of a function, def (or its C signature) to its end


def test_no_python_function_is_longer_than_80_lines():
    long = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LONGEST:
                    long.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.name}: {n} lines")
    assert not long, "split these where a name would explain a part:\n" + "\n".join(long)


def c_functions(text: str) -> dict[str, int]:
    """Top-level C function definitions (a signature at column 0, the body to the next '}' at
    column 0) and their lengths."""
    out, start, name = {}, None, None
    for i, line in enumerate(text.splitlines()):
        m = re.match(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w\s\*]*?\b(\w+)\(.*\)\s*\{\s*$", line)
        if start is None and m and not line.startswith(("typedef", "struct", "enum")):
            start, name = i, m.group(1)
        elif start is not None and line.startswith("}"):
            out[name] = i - start + 1
            start = None
    return out


def test_no_c_function_of_the_executor_is_longer_than_80_lines():
    found = {}
    for path in sorted((PKG / "executor").glob("*.c")):
        found.update({f"{path.name}:{k}": v for k, v in c_functions(path.read_text()).items()})
    assert len(found) > 100  # the reader sees the functions (a signature style it misses would hide them)
    assert c_functions("static int f(int a) {\n  return a;\n}\nint main(void) {\n}\n") == {"f": 3, "main": 2}
    long = {k: v for k, v in found.items() if v > LONGEST}
    assert not long, long
