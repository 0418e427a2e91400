"""Bad input: property-based fuzzing of file-API paths and of the agent tools' arguments.

Whatever the input, only the documented exceptions escape (the ``sandboxlite.errors``
hierarchy: ``ConfigError`` and ``SandboxFileError`` for the file API, ``ToolError``
for the tools), the jail survives, and nothing is ever read or written outside the
sandbox: a canary tree and the host's temporary directories, home and working
directory are checked for anything carrying the run's marker.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandboxlite import ConfigError, Sandbox, SandboxError, SandboxFileError
from sandboxlite.agent.tools import Tools
from sandboxlite.errors import ToolError

from ..test_rootfs import tiny_root  # noqa: F401  (a minimal rootfs: a download of "/" is cheap)
from .conftest import snapshot

MARKER = "sandboxlite-fuzz-" + secrets.token_hex(6)
EXAMPLES = int(os.environ.get("SANDBOXLITE_FUZZ", "200"))  # per fuzz test; raise it for a deeper run
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

COMPONENTS = st.one_of(
    st.sampled_from(["..", ".", "", "testbed", "tmp", "etc", "proc", "1", "self", "mem", "root", "fd", "dev", "null",
                     "zero", "shm", "usr", "-rf", "*", "~", "$HOME", "\\", "\n", " ", "a b", "\udcff", "\ud800",
                     "é", "日本", "\U0001f600", "x" * 256, MARKER]),
    st.text(min_size=1, max_size=12),
)
NAMES = st.one_of(st.sampled_from(["a", "b", "f.txt", "dir", "..", "."]), st.text(min_size=1, max_size=8))
PATHS = st.one_of(
    # mostly plausible: under the writable places, with odd names, dots and slashes
    st.builds(lambda lead, parts, trail: lead + "/".join(parts) + trail,
              st.sampled_from(["/testbed/", "/tmp/", "", "/dev/shm/", "/testbed/../tmp/"]),
              st.lists(NAMES, min_size=1, max_size=4), st.sampled_from(["", "", "/", "/."])),
    st.builds(lambda lead, parts, trail: lead + "/".join(parts) + trail,
              st.sampled_from(["", "/", "//", "./", "../", "/testbed/", "/tmp/", "/proc/1/"]),
              st.lists(COMPONENTS, max_size=7), st.sampled_from(["", "/", "/.", "/..", "//"])),
    st.sampled_from(["\0", "/testbed/\0x", "a" * 5000, "/" + "a/" * 2100, "/" * 5000, "/proc/self/mem",
                     "/proc/1/root/", "/dev/null", "/dev/zero", "/testbed/../../../../../etc/shadow"]),
)


@pytest.fixture(scope="module")
def host_tree(host_dir_factory, canary):
    """What uploads read: files, a nested directory, links in and out (the out-link is the host's secret)."""
    src = host_dir_factory("sandboxlite-fuzzsrc-")
    (src / "sub").mkdir()
    (src / "a.txt").write_text(MARKER)
    (src / "sub" / "b.bin").write_bytes(os.urandom(64))
    os.symlink("a.txt", src / "rel")
    os.symlink(canary["secret"], src / "abs")
    return src


@pytest.fixture(scope="module")
def tiny_sb(tiny_root):  # noqa: F811
    with Sandbox(rootfs=str(tiny_root)) as box:
        box.write_file("/testbed/sentinel", "alive")
        yield box


@pytest.fixture(scope="module")
def watch(canary, host_tree):
    """Host places that must not gain anything of ours."""
    places = [Path("/tmp"), Path("/var/tmp"), Path.cwd(), Path.home()]
    names = {p: set(os.listdir(p)) for p in places}
    before = snapshot([canary["dir"], canary["home"], host_tree])

    def check() -> list[str]:
        problems = []
        if snapshot([canary["dir"], canary["home"], host_tree]) != before:
            problems.append("a canary changed")
        for place in places:
            for name in set(os.listdir(place)) - names[place]:
                p = place / name
                files = [p] if not p.is_dir() or p.is_symlink() else [q for q in p.rglob("*")][:2000]
                for f in files:
                    if MARKER in str(f):
                        problems.append(f"{f} (named after the fuzzer's marker)")
                    elif f.is_file() and not f.is_symlink() and f.stat().st_size < (1 << 20):
                        try:
                            if MARKER.encode() in f.read_bytes():
                                problems.append(f"{f} holds the fuzzer's marker")
                        except OSError:
                            pass
        return problems

    return check


def _outcome(fn) -> str:
    try:
        fn()
        return "ok"
    except ConfigError:
        return "ConfigError"
    except SandboxFileError as e:
        return f"SandboxFileError {e.errno}"


class Seen:
    def __init__(self):
        self.outcomes: dict[str, int] = {}
        self.n = 0

    def add(self, op: str, outcome: str) -> None:
        self.n += 1
        key = f"{op}: {outcome.split()[0]}"
        self.outcomes[key] = self.outcomes.get(key, 0) + 1


def test_fuzz_file_api_paths(tiny_sb, host_tree, tmp_path, watch, record):
    seen = Seen()
    dl_base = tmp_path / "downloads"
    dl_base.mkdir()

    @FUZZ
    @given(op=st.sampled_from(["read_file", "write_file", "mkdir", "upload", "download"]), path=PATHS,
           data=st.binary(max_size=64))
    def run(op, path, data):
        sb = tiny_sb
        if op == "read_file":
            out = _outcome(lambda: sb.read_file(path, max_bytes=1 << 20))
        elif op == "write_file":
            out = _outcome(lambda: sb.write_file(path, MARKER.encode() + data))
        elif op == "mkdir":
            out = _outcome(lambda: sb.mkdir(path))
        elif op == "upload":
            out = _outcome(lambda: sb.upload(host_tree, path))
        else:
            dst = dl_base / f"d{seen.n}"
            out = _outcome(lambda: sb.download(path, dst, max_bytes=1 << 18))
            for p in [dst, *dst.rglob("*")] if os.path.lexists(dst) else []:
                assert os.path.realpath(p).startswith(str(dst)), f"download of {path!r} made {p} lead outside"
                if p.is_file():
                    assert b"canary-" not in p.read_bytes() or MARKER.encode() in p.read_bytes()
        seen.add(op, out)
        assert sb.alive() and sb.read_file("/testbed/sentinel") == b"alive", f"{op}({path!r}) broke the jail"

    run()
    problems = watch()
    record(f"fuzz file API paths ({seen.n} calls)", "documented errors only; host untouched",
           f"{dict(sorted(seen.outcomes.items()))}; host: {problems or 'untouched'}")
    assert not problems, problems


TIMEOUTS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10 ** 30),
                     max_value=10 ** 30), st.sampled_from([0, -1, 1e-300, 1e300, True, "3", None, [1]]))
INTS = st.one_of(st.integers(min_value=-(10 ** 30), max_value=10 ** 30), st.floats(), st.booleans(), st.text(max_size=3))
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text(max_size=20)),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                    max_leaves=6)
COMMANDS = st.one_of(st.sampled_from(["echo hi", "pwd", "cd /tmp", "ls /", "exit 3", "echo $HOME", "true", "",
                                      "   ", "cat /etc/hostname", "cd ..; pwd", "\ud800", "echo é", "x\0y",
                                      f"echo {MARKER} > /tmp/m; cat /tmp/m"]),
                     st.text(max_size=30))
GOOD_EDITOR = st.one_of(
    st.fixed_dictionaries({"command": st.just("view"), "path": st.sampled_from(["/testbed/f.txt", "/testbed", "/tmp"])},
                          optional={"view_range": st.lists(st.integers(-3, 5), min_size=2, max_size=2)}),
    st.fixed_dictionaries({"command": st.just("create"), "path": PATHS, "file_text": st.text(max_size=40)}),
    st.fixed_dictionaries({"command": st.just("str_replace"), "path": st.just("/testbed/f.txt"),
                           "old_str": st.sampled_from(["line 1", "line", "2\n", "\n"]), "new_str": st.text(max_size=10)}),
    st.fixed_dictionaries({"command": st.just("insert"), "path": st.just("/testbed/f.txt"),
                           "insert_line": st.integers(-2, 6), "new_str": st.text(max_size=10)}),
)
EDITOR = st.fixed_dictionaries(
    {"command": st.one_of(st.sampled_from(["view", "create", "str_replace", "insert"]), st.text(max_size=8)),
     "path": st.one_of(PATHS, st.sampled_from(["/testbed/f.txt", "/testbed", "/tmp/t.txt", "/etc/passwd"]))},
    optional={"file_text": st.one_of(st.text(max_size=40), JSON), "old_str": st.one_of(st.text(max_size=10), JSON),
              "new_str": st.one_of(st.text(max_size=10), JSON), "insert_line": INTS,
              "view_range": st.one_of(st.lists(INTS, max_size=3), JSON), "bogus": JSON},
)
CALLS = st.one_of(
    st.tuples(st.just("execute_bash"), st.fixed_dictionaries({"command": st.one_of(COMMANDS, JSON)},
                                                              optional={"timeout": TIMEOUTS})),
    st.tuples(st.just("str_replace_editor"), GOOD_EDITOR),
    st.tuples(st.just("str_replace_editor"), EDITOR),
    st.tuples(st.sampled_from(["execute_bash", "str_replace_editor", "submit"]),
              st.one_of(JSON, st.text(max_size=40), st.sampled_from(['{"command": "ls", "timeout": NaN}',
                                                                     '{"command": "ls", "timeout": Infinity}',
                                                                     '{"command": "ls", "timeout": 1e999}',
                                                                     "null", "[]", '"x"', "{", "{}"]))),
    st.tuples(st.text(max_size=15), JSON),
)


def test_fuzz_agent_tool_arguments(image_sb, watch, record):
    seen = Seen()
    image_sb.write_file("/testbed/f.txt", "line 1\nline 2\n")
    tools = Tools(image_sb, bash_timeout=5, max_output_chars=2000)

    @FUZZ
    @given(call=CALLS)
    def run(call):
        name, args = call
        try:
            res = tools.call(name, args)
            out = "ok" + (" (submitted)" if res.submitted else "")
        except ToolError:
            out = "ToolError"
        seen.add(name if name in ("execute_bash", "str_replace_editor", "submit") else "unknown", out)
        assert image_sb.alive(), f"{name}({args!r}) broke the jail"

    try:
        run()
    finally:
        tools.close()
    problems = watch()
    record(f"fuzz agent tool calls ({seen.n} calls)", "ToolError or a result; host untouched",
           f"{dict(sorted(seen.outcomes.items()))}; host: {problems or 'untouched'}")
    assert not problems, problems


def test_bad_api_input(image_sb, record):
    """The inputs that escaped as bare ValueError/OverflowError/UnicodeEncodeError or killed the jail."""
    cases = {
        "exec timeout=nan": lambda: image_sb.exec("true", timeout=math.nan),
        "exec timeout=inf": lambda: image_sb.exec("true", timeout=math.inf),
        "exec timeout=1e300": lambda: image_sb.exec("true", timeout=1e300),
        "shell timeout=1e300": lambda: image_sb.shell().run("true", timeout=1e300),
        "shell command '\\ud800'": lambda: image_sb.shell().run("echo \ud800"),
        "exec argv with NUL": lambda: image_sb.exec(["echo", "a\0b"]),
        "exec argv '\\ud800'": lambda: image_sb.exec(["echo", "\ud800"]),
        "exec stdin '\\ud800'": lambda: image_sb.exec("cat", stdin="\ud800"),
        "read_file('/tmp/\\ud800')": lambda: image_sb.read_file("/tmp/\ud800"),
        "read_file(70 MiB path)": lambda: image_sb.read_file("a" * (70 << 20)),
        "mkdir(70 MiB path)": lambda: image_sb.mkdir("/" + "a" * (70 << 20)),
        "exec cwd=70 MiB": lambda: image_sb.exec("true", cwd="/" + "a" * (70 << 20)),
        "exec 70 MiB argv": lambda: image_sb.exec(["echo", "x" * (70 << 20)]),
        "read_file('/proc/1/mem')": lambda: image_sb.read_file("/proc/1/mem"),
        "write_file('/proc/self/oom_score_adj')": lambda: image_sb.write_file("/proc/self/oom_score_adj", "0"),
    }
    seen = {}
    for name, fn in cases.items():
        try:
            r = fn()
            seen[name] = f"ok (exit {r.exit_code})" if hasattr(r, "exit_code") else "ok"
        except SandboxError as e:
            seen[name] = type(e).__name__
        except Exception as e:  # what must not happen
            seen[name] = f"ESCAPED {type(e).__name__}"
        assert image_sb.alive(), f"{name} killed the jail"
    kinds = {}
    for name, what in seen.items():
        kinds.setdefault(what, []).append(name)
    record(f"bad API input ({len(cases)} cases)", "SandboxError subclasses; jail lives",
           {k: len(v) for k, v in kinds.items()})
    assert not [n for n, w in seen.items() if w.startswith("ESCAPED")], seen
    assert seen["exec timeout=inf"] == seen["exec timeout=1e300"] == "ok (exit 0)", seen
    assert image_sb.exec("echo alive").stdout == b"alive\n"
