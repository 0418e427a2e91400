"""The agent's tools (execute_bash, str_replace_editor, submit) against a real sandbox.

One sandbox and one Tools serve the module; every test uses its own paths.
Tests that need a fresh shell or their own settings make their own Tools.
"""

from __future__ import annotations

import itertools
import json
import time

import pytest

from sandboxlite import Sandbox
from sandboxlite.agent.tools import EDITOR_COMMANDS, ToolResult, Tools, clip_middle
from sandboxlite.errors import ToolError

_counter = itertools.count()


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox() as s:
        yield s


@pytest.fixture(scope="module")
def tools(sandbox):
    t = Tools(sandbox)
    yield t
    t.close()


@pytest.fixture
def fresh(sandbox):
    """A Tools with its own shell (for tests that change the shell's state)."""
    t = Tools(sandbox)
    yield t
    t.close()


@pytest.fixture
def d():
    """A directory of this test's own (made by the first file written into it)."""
    return f"/testbed/t{next(_counter)}"


def edit(tools, **args) -> str:
    return tools.call("str_replace_editor", args).output


def bash(tools, command, **kw) -> ToolResult:
    return tools.call("execute_bash", {"command": command, **kw})


# -- schemas ---------------------------------------------------------------------------------------------
def test_schemas_are_openai_functions(tools):
    schemas = tools.schemas()
    assert [s["function"]["name"] for s in schemas] == ["execute_bash", "str_replace_editor", "submit"]
    for s in schemas:
        assert s["type"] == "function"
        assert s["function"]["parameters"]["type"] == "object"
        assert len(s["function"]["description"]) > 50
    json.dumps(schemas)  # serialisable
    bash_s, editor, submit = (s["function"] for s in schemas)
    assert bash_s["parameters"]["required"] == ["command"]
    assert "/testbed" in bash_s["description"] and "/testbed/input" in bash_s["description"]
    assert "/testbed/output" in bash_s["description"]
    assert editor["parameters"]["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert"]
    assert list(EDITOR_COMMANDS) == ["view", "create", "str_replace", "insert"]
    assert set(editor["parameters"]["required"]) == {"command", "path"}
    assert "/testbed/output/answer.txt" in submit["description"]
    assert submit["parameters"]["properties"] == {}


# -- call(): dispatch and argument checking ---------------------------------------------------------------
def test_unknown_tool(tools):
    with pytest.raises(ToolError, match="unknown tool 'python'.*execute_bash, str_replace_editor, submit"):
        tools.call("python", {})


def test_invalid_json_arguments(tools):
    with pytest.raises(ToolError, match="not valid JSON"):
        tools.call("execute_bash", '{"command": "ls"')
    with pytest.raises(ToolError, match="must be a JSON object, got array"):
        tools.call("execute_bash", '["ls"]')


def test_json_string_arguments_work(tools):
    r = tools.call("execute_bash", json.dumps({"command": "echo json"}))
    assert r.output == "json\n[exit code: 0]"


def test_missing_extra_and_wrongly_typed_arguments(tools):
    with pytest.raises(ToolError, match="missing required argument 'command' \\(a string\\)"):
        tools.call("execute_bash", {})
    with pytest.raises(ToolError, match="unknown argument 'cmd'"):
        tools.call("execute_bash", {"command": "ls", "cmd": "ls"})
    with pytest.raises(ToolError, match="argument 'command' must be a string, got array"):
        tools.call("execute_bash", {"command": ["ls"]})
    with pytest.raises(ToolError, match="argument 'timeout' must be a number, got string"):
        tools.call("execute_bash", {"command": "ls", "timeout": "5"})
    insert = {"command": "insert", "path": "/testbed/x", "new_str": "a"}
    with pytest.raises(ToolError, match="argument 'insert_line' must be an integer, got string"):
        tools.call("str_replace_editor", {**insert, "insert_line": "3"})
    with pytest.raises(ToolError, match="argument 'insert_line' must be an integer, got boolean"):
        tools.call("str_replace_editor", {**insert, "insert_line": True})
    with pytest.raises(ToolError, match="argument 'view_range' must be a list of two integers"):
        tools.call("str_replace_editor", {"command": "view", "path": "/testbed", "view_range": "1,2"})
    with pytest.raises(ToolError, match="argument 'path' must be a string"):
        tools.call("str_replace_editor", {"command": "view", "path": 5})
    with pytest.raises(ToolError, match="unknown command 'delete'"):
        tools.call("str_replace_editor", {"command": "delete", "path": "/testbed/x"})


def test_null_arguments_count_as_absent(tools, d):
    args = {"command": "create", "path": f"{d}/n.txt", "file_text": "x", "old_str": None, "view_range": None}
    assert "created" in tools.call("str_replace_editor", args).output


# -- submit ------------------------------------------------------------------------------------------------------
def test_submit(tools):
    for args in ({}, "", "{}", None):
        r = tools.call("submit", args)
        assert r == ToolResult(output="submitted", submitted=True, data={})
    with pytest.raises(ToolError, match="unknown argument 'answer'"):
        tools.call("submit", {"answer": "42"})


# -- execute_bash --------------------------------------------------------------------------------------------
def test_bash_cd_and_export_persist(fresh):
    bash(fresh, "cd /tmp && export SL_X=5 && mkdir -p here")
    r = bash(fresh, "pwd; echo $SL_X; ls -d here")
    assert r.output == "/tmp\n5\nhere\n[exit code: 0]"
    assert r.data["cwd"] == "/tmp"


def test_bash_output_format(tools):
    assert bash(tools, "echo out").output == "out\n[exit code: 0]"
    assert bash(tools, "printf 'no newline'").output == "no newline\n[exit code: 0]"
    assert bash(tools, "true").output == "[exit code: 0]"
    # only stderr: not labelled
    r = bash(tools, "echo oops >&2; (exit 3)")
    assert r.output == "oops\n[exit code: 3]"
    assert r.data == {**r.data, "exit_code": 3, "timed_out": False, "truncated": False}
    # both: stderr after a [stderr] line
    assert bash(tools, "echo a; echo b >&2").output == "a\n[stderr]\nb\n[exit code: 0]"


def test_bash_decodes_invalid_utf8_with_replacement(tools):
    r = bash(tools, r"printf 'caf\xc3\xa9 \xff\n'")
    assert r.output == "caf\u00e9 \ufffd\n[exit code: 0]"


def test_bash_timeout_keeps_partial_output(fresh):
    t = time.monotonic()
    r = bash(fresh, "echo partial; sleep 5", timeout=0.5)
    assert time.monotonic() - t < 4
    assert r.output.startswith("partial\n")
    assert "[the command timed out after 0.5 s and was killed; output so far is shown]" in r.output
    assert "Killed" not in r.output  # bash's job report is left out
    assert r.output.endswith("[exit code: 124]")
    assert r.data["timed_out"] and r.data["exit_code"] == 124
    assert bash(fresh, "echo alive").output == "alive\n[exit code: 0]"


def test_bash_default_timeout_comes_from_the_constructor(sandbox):
    with Tools(sandbox, bash_timeout=0.5) as t:
        r = bash(t, "sleep 5")
        assert r.data["timed_out"] and "after 0.5 s" in r.output
        assert "default 0.5" in t.schemas()[0]["function"]["description"]


def test_bash_bad_timeout_and_empty_command(tools):
    with pytest.raises(ToolError, match="timeout"):
        bash(tools, "ls", timeout=0)
    with pytest.raises(ToolError, match="command is empty"):
        bash(tools, "  ")


def test_bash_session_restart_note(fresh):
    r = bash(fresh, "exit 4")
    assert r.data["exit_code"] == 4
    assert "[exit code: 4]\n[the shell session exited with status 4; a new session was started" in r.output
    assert bash(fresh, "echo back").output == "back\n[exit code: 0]"


def test_bash_long_output_keeps_head_and_tail(sandbox):
    with Tools(sandbox, max_output_chars=1000) as t:
        r = bash(t, "seq 1 10000")
        full = "".join(f"{i}\n" for i in range(1, 10001))
        head, marker, tail = r.output.partition("\n[... ")
        assert marker and full.startswith(head) and len(head) == 500
        omitted = int(tail.split(" ", 1)[0])
        assert omitted == len(full) - 1000
        assert f"{omitted} characters omitted ...]\n" in r.output
        assert r.output.endswith("\n9999\n10000\n[exit code: 0]")
        assert r.data["truncated"] is True


def test_clip_middle():
    assert clip_middle("short", 10) == ("short", 0)
    text, omitted = clip_middle("a" * 50 + "b" * 50, 20)
    assert omitted == 80
    assert text == "a" * 10 + "\n[... 80 characters omitted ...]\n" + "b" * 10


# -- str_replace_editor: paths ---------------------------------------------------------------------------
def test_relative_path_refused(tools):
    for command in EDITOR_COMMANDS:
        with pytest.raises(ToolError, match=r"path must be absolute, e\.g\. /testbed/\.\.\."):
            edit(tools, command=command, path="testbed/a.txt", file_text="x", old_str="x", new_str="y", insert_line=0)


def test_missing_file_errors_say_what_to_do(tools, d):
    with pytest.raises(ToolError, match="does not exist.*create"):
        edit(tools, command="view", path=f"{d}/nope.txt")
    with pytest.raises(ToolError, match="does not exist"):
        edit(tools, command="str_replace", path=f"{d}/nope.txt", old_str="a", new_str="b")


def test_missing_command_arguments(tools, d):
    with pytest.raises(ToolError, match="missing argument 'file_text'"):
        edit(tools, command="create", path=f"{d}/a")
    with pytest.raises(ToolError, match="missing argument 'old_str'"):
        edit(tools, command="str_replace", path=f"{d}/a")
    with pytest.raises(ToolError, match="missing argument 'insert_line'"):
        edit(tools, command="insert", path=f"{d}/a", new_str="x")
    with pytest.raises(ToolError, match="missing argument 'new_str'"):
        edit(tools, command="insert", path=f"{d}/a", insert_line=0)


# -- view -----------------------------------------------------------------------------------------------------------
def test_view_numbers_lines_like_cat_n(tools, sandbox, d):
    sandbox.write_file(f"{d}/notes.md", "first\n\tindented\nlast")
    out = edit(tools, command="view", path=f"{d}/notes.md")
    header = f"Here is the result of running `cat -n` on {d}/notes.md:\n"
    assert out == header + "     1\tfirst\n     2\t\tindented\n     3\tlast\n"
    # the same as cat -n inside the sandbox
    cat = sandbox.exec(["cat", "-n", f"{d}/notes.md"]).stdout.decode()
    assert out.split(":\n", 1)[1] == cat + "\n"


def test_view_range(tools, sandbox, d):
    sandbox.write_file(f"{d}/r.txt", "".join(f"line {i}\n" for i in range(1, 21)))
    out = edit(tools, command="view", path=f"{d}/r.txt", view_range=[3, 5])
    assert out.endswith("(lines 3-5 of 20):\n     3\tline 3\n     4\tline 4\n     5\tline 5\n")
    out = edit(tools, command="view", path=f"{d}/r.txt", view_range=[19, -1])
    assert out.endswith("    19\tline 19\n    20\tline 20\n")
    out = edit(tools, command="view", path=f"{d}/r.txt", view_range=[19, 99])
    assert "    20\tline 20\n[view_range end 99 is past the end of the file: shown up to line 20]" in out
    with pytest.raises(ToolError, match="start 0 is out of range.*20 lines.*between 1 and 20"):
        edit(tools, command="view", path=f"{d}/r.txt", view_range=[0, 5])
    with pytest.raises(ToolError, match="start 21 is out of range"):
        edit(tools, command="view", path=f"{d}/r.txt", view_range=[21, -1])
    with pytest.raises(ToolError, match="end 2 is before start 5"):
        edit(tools, command="view", path=f"{d}/r.txt", view_range=[5, 2])
    with pytest.raises(ToolError, match="view_range must be two integers"):
        edit(tools, command="view", path=f"{d}/r.txt", view_range=[5])


def test_view_any_text_type_and_empty_file(tools, sandbox, d):
    for name in ("data.csv", "Makefile", "config.yaml", "x.json"):
        sandbox.write_file(f"{d}/{name}", "a,b\n")
        assert edit(tools, command="view", path=f"{d}/{name}").endswith("     1\ta,b\n")
    sandbox.write_file(f"{d}/empty", "")
    assert edit(tools, command="view", path=f"{d}/empty").endswith("[the file is empty]")


def test_view_directory_two_levels_without_hidden(tools, sandbox, d):
    for p in ("a.txt", "sub/b.txt", "sub/deep/c.txt", ".git/config", "sub/.hidden", "with space/f"):
        sandbox.write_file(f"{d}/tree/{p}", "x")
    out = edit(tools, command="view", path=f"{d}/tree")
    listed = out.splitlines()[1:]
    t = f"{d}/tree"
    assert listed == [
        f"{t}/",
        f"{t}/a.txt",
        f"{t}/sub/",
        f"{t}/sub/b.txt",
        f"{t}/sub/deep/",
        f"{t}/with space/",
        f"{t}/with space/f",
    ]
    assert "excluding hidden items" in out.splitlines()[0]
    assert "c.txt" not in out and ".git" not in out and ".hidden" not in out
    with pytest.raises(ToolError, match="directory"):
        edit(tools, command="view", path=f"{d}/tree", view_range=[1, 2])


def test_view_binary_file_refused(tools, sandbox, d):
    sandbox.write_file(f"{d}/blob.bin", b"\x7fELF\x00\x01\x02")
    with pytest.raises(ToolError, match=r"binary file.*execute_bash.*xxd"):
        edit(tools, command="view", path=f"{d}/blob.bin")
    sandbox.write_file(f"{d}/latin1.txt", "caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ToolError, match=r"not valid UTF-8.*execute_bash.*file"):
        edit(tools, command="view", path=f"{d}/latin1.txt")
    with pytest.raises(ToolError, match="binary"):
        edit(tools, command="str_replace", path=f"{d}/blob.bin", old_str="ELF", new_str="x")


def test_view_huge_file_is_clipped(sandbox, d):
    with Tools(sandbox, max_view_chars=2000) as t:
        sandbox.write_file(f"{d}/big.txt", "".join(f"row {i}\n" for i in range(1, 5001)))
        out = edit(t, command="view", path=f"{d}/big.txt")
        assert len(out) < 2600
        assert "     1\trow 1\n" in out and "row 5000" not in out
        last = int(out.split("[output clipped")[0].rstrip("\n").rsplit("\n", 1)[1].split("\t")[0])
        assert f"after line {last} of 5000; view the rest with view_range, e.g. [{last + 1}, -1]" in out


def test_view_crlf_file(tools, sandbox, d):
    sandbox.write_file(f"{d}/w.txt", b"a\r\nb\r\n")
    out = edit(tools, command="view", path=f"{d}/w.txt")
    assert "CRLF" in out and out.endswith("     1\ta\n     2\tb\n")


# -- create ------------------------------------------------------------------------------------------------------
def test_create_is_byte_exact_and_makes_parents(tools, sandbox, d):
    path = f"{d}/new/dir/file.py"
    out = edit(tools, command="create", path=path, file_text="print('x')")
    assert out == f"File created successfully at: {path} (10 bytes)"
    assert sandbox.read_file(path) == b"print('x')"  # no newline added


def test_create_refuses_existing_path(tools, sandbox, d):
    sandbox.write_file(f"{d}/keep.txt", "original")
    with pytest.raises(ToolError) as e:
        edit(tools, command="create", path=f"{d}/keep.txt", file_text="new")
    assert e.value.message == f"file already exists at {d}/keep.txt; use str_replace or delete it first"
    assert sandbox.read_file(f"{d}/keep.txt") == b"original"
    sandbox.write_file(f"{d}/empty.txt", "")
    with pytest.raises(ToolError, match="already exists"):
        edit(tools, command="create", path=f"{d}/empty.txt", file_text="new")
    with pytest.raises(ToolError, match="already exists"):
        edit(tools, command="create", path=d, file_text="new")  # a directory


def test_create_special_content_and_answer_file(tools, sandbox, d):
    text = "-e\n\\n $HOME `id` \"q\" 'x' \u00e9\U0001f600\n"
    edit(tools, command="create", path=f"{d}/odd name/-e.txt", file_text=text)
    assert sandbox.read_file(f"{d}/odd name/-e.txt") == text.encode()
    edit(tools, command="create", path=f"{d}/output/answer.txt", file_text="42")
    assert sandbox.read_file(f"{d}/output/answer.txt") == b"42"


# -- str_replace ---------------------------------------------------------------------------------------------------
def test_str_replace_once_shows_snippet(tools, sandbox, d):
    sandbox.write_file(f"{d}/a.py", "".join(f"x{i} = {i}\n" for i in range(1, 21)))
    out = edit(
        tools, command="str_replace", path=f"{d}/a.py", old_str="x10 = 10\n", new_str="x10 = 'ten'\nextra = 1\n"
    )
    assert sandbox.read_file(f"{d}/a.py").decode().splitlines()[9:11] == ["x10 = 'ten'", "extra = 1"]
    assert "has been edited" in out
    assert "     6\tx6 = 6\n" in out and "    10\tx10 = 'ten'\n    11\textra = 1\n" in out
    assert "    15\tx14 = 14\n" in out and "x16" not in out and "x5 " not in out


def test_str_replace_zero_matches(tools, sandbox, d):
    sandbox.write_file(f"{d}/z.txt", "alpha\n")
    with pytest.raises(ToolError, match="old_str did not occur in .*z.txt"):
        edit(tools, command="str_replace", path=f"{d}/z.txt", old_str="beta", new_str="x")
    assert sandbox.read_file(f"{d}/z.txt") == b"alpha\n"


def test_str_replace_two_matches_names_count_and_lines(tools, sandbox, d):
    sandbox.write_file(f"{d}/two.txt", "a = 1\nb = 2\na = 1\n")
    with pytest.raises(ToolError, match=r"occurred 2 times .*lines 1, 3"):
        edit(tools, command="str_replace", path=f"{d}/two.txt", old_str="a = 1", new_str="a = 0")
    assert sandbox.read_file(f"{d}/two.txt") == b"a = 1\nb = 2\na = 1\n"


def test_str_replace_empty_old_str_and_identical(tools, sandbox, d):
    sandbox.write_file(f"{d}/e.txt", "abc\n")
    with pytest.raises(ToolError, match="old_str is empty"):
        edit(tools, command="str_replace", path=f"{d}/e.txt", old_str="", new_str="x")
    with pytest.raises(ToolError, match="identical"):
        edit(tools, command="str_replace", path=f"{d}/e.txt", old_str="abc", new_str="abc")


def test_str_replace_deletion(tools, sandbox, d):
    sandbox.write_file(f"{d}/del.txt", "keep\ndrop me\nkeep too\n")
    edit(tools, command="str_replace", path=f"{d}/del.txt", old_str="drop me\n", new_str="")
    assert sandbox.read_file(f"{d}/del.txt") == b"keep\nkeep too\n"
    edit(tools, command="str_replace", path=f"{d}/del.txt", old_str="keep too\n")  # new_str omitted: delete
    assert sandbox.read_file(f"{d}/del.txt") == b"keep\n"


@pytest.mark.parametrize(
    "before, old, new, after",
    [
        (b"def f():\n\treturn 1\n", "\treturn 1", "\treturn\t2", b"def f():\n\treturn\t2\n"),  # tabs
        (b"a\r\nb\r\nc\r\n", "b", "B", b"a\r\nB\r\nc\r\n"),  # CRLF kept
        (b"a\r\nb\r\nc\r\n", "a\r\nb", "x\r\ny", b"x\r\ny\r\nc\r\n"),  # CRLF given
        (b"no final newline", "final", "FINAL", b"no FINAL newline"),
        (b"-e\n-n\n", "-e", "-e -E \\n", b"-e -E \\n\n-n\n"),
        (b"echo $HOME \\\\ done\n", "$HOME \\\\", "${HOME} \\", b"echo ${HOME} \\ done\n"),
        ("\u00e9t\u00e9\n".encode(), "\u00e9t\u00e9", "summer \U0001f31e", "summer \U0001f31e\n".encode()),
    ],
)
def test_str_replace_is_byte_exact(tools, sandbox, d, before, old, new, after):
    sandbox.write_file(f"{d}/exact.txt", before)
    edit(tools, command="str_replace", path=f"{d}/exact.txt", old_str=old, new_str=new)
    assert sandbox.read_file(f"{d}/exact.txt") == after


def test_str_replace_lf_old_str_in_crlf_file(tools, sandbox, d):
    """A model writes "\\n": in a CRLF file it is matched and written as "\\r\\n"."""
    sandbox.write_file(f"{d}/w.txt", b"one\r\ntwo\r\nthree\r\n")
    out = edit(tools, command="str_replace", path=f"{d}/w.txt", old_str="one\ntwo", new_str="1\n2")
    assert sandbox.read_file(f"{d}/w.txt") == b"1\r\n2\r\nthree\r\n"
    assert "line endings" in out


def test_str_replace_200_kib_file(tools, sandbox, d):
    lines = [f"line {i:06d} " + "x" * 40 + "\n" for i in range(4000)]
    data = "".join(lines).encode()
    assert len(data) > 200 * 1024
    sandbox.write_file(f"{d}/big.txt", data)
    edit(tools, command="str_replace", path=f"{d}/big.txt", old_str="line 003999 ", new_str="LAST ")
    got = sandbox.read_file(f"{d}/big.txt")
    assert got == data.replace(b"line 003999 ", b"LAST ")
    assert len(got) == len(data) - 7


def test_str_replace_path_with_spaces(tools, sandbox, d):
    path = f"{d}/my dir/a file.txt"
    sandbox.write_file(path, "hello world\n")
    out = edit(tools, command="str_replace", path=path, old_str="world", new_str="sandbox")
    assert sandbox.read_file(path) == b"hello sandbox\n"
    assert path in out


def test_edits_keep_the_file_mode(tools, sandbox, d):
    p = f"{d}/run.sh"
    sandbox.write_file(p, "#!/bin/sh\necho one\n", mode=0o755)
    edit(tools, command="str_replace", path=p, old_str="one", new_str="two")
    edit(tools, command="insert", path=p, insert_line=2, new_str="echo three")
    assert sandbox.exec(["stat", "-c", "%a", p]).stdout == b"755\n"
    assert sandbox.exec([p]).stdout == b"two\nthree\n"


# -- insert ---------------------------------------------------------------------------------------------------------
def test_insert_at_top_middle_end(tools, sandbox, d):
    p = f"{d}/ins.txt"
    sandbox.write_file(p, "a\nb\nc\n")
    edit(tools, command="insert", path=p, insert_line=0, new_str="top")
    assert sandbox.read_file(p) == b"top\na\nb\nc\n"
    out = edit(tools, command="insert", path=p, insert_line=2, new_str="mid1\nmid2\n")
    assert sandbox.read_file(p) == b"top\na\nmid1\nmid2\nb\nc\n"
    assert "after line 2" in out and "     3\tmid1\n     4\tmid2\n" in out
    edit(tools, command="insert", path=p, insert_line=6, new_str="end")
    assert sandbox.read_file(p) == b"top\na\nmid1\nmid2\nb\nc\nend\n"


def test_insert_out_of_range(tools, sandbox, d):
    p = f"{d}/ins.txt"
    sandbox.write_file(p, "a\nb\n")
    with pytest.raises(ToolError, match="insert_line 3 is out of range.*2 lines.*between 0 .* and 2"):
        edit(tools, command="insert", path=p, insert_line=3, new_str="x")
    with pytest.raises(ToolError, match="insert_line -1 is out of range"):
        edit(tools, command="insert", path=p, insert_line=-1, new_str="x")
    assert sandbox.read_file(p) == b"a\nb\n"


def test_insert_without_final_newline(tools, sandbox, d):
    p = f"{d}/nofinal.txt"
    sandbox.write_file(p, "a\nb")
    edit(tools, command="insert", path=p, insert_line=1, new_str="mid")
    assert sandbox.read_file(p) == b"a\nmid\nb"  # still no final newline
    edit(tools, command="insert", path=p, insert_line=3, new_str="end")
    assert sandbox.read_file(p) == b"a\nmid\nb\nend"  # the new last line has none either
    edit(tools, command="insert", path=p, insert_line=4, new_str="fin\n")
    assert sandbox.read_file(p) == b"a\nmid\nb\nend\nfin\n"  # unless new_str brings one


def test_insert_keeps_crlf_tabs_and_special_text(tools, sandbox, d):
    p = f"{d}/crlf.txt"
    sandbox.write_file(p, b"a\r\nb\r\n")
    edit(tools, command="insert", path=p, insert_line=1, new_str="x\n\ty")
    assert sandbox.read_file(p) == b"a\r\nx\r\n\ty\r\nb\r\n"
    q = f"{d}/lf.txt"
    sandbox.write_file(q, b"a\n")
    edit(tools, command="insert", path=q, insert_line=1, new_str="-e $HOME \\n")
    assert sandbox.read_file(q) == b"a\n-e $HOME \\n\n"


def test_insert_into_empty_file(tools, sandbox, d):
    p = f"{d}/empty.txt"
    sandbox.write_file(p, "")
    edit(tools, command="insert", path=p, insert_line=0, new_str="first")
    assert sandbox.read_file(p) == b"first\n"


# -- lifecycle -------------------------------------------------------------------------------------------------------
def test_shell_is_lazy_persistent_and_reopened_after_reset():
    with Sandbox() as sb:
        t = Tools(sb)
        assert t._shell is None  # nothing opened before the first execute_bash
        bash(t, "export KEEP=1")
        shell = t._shell
        assert bash(t, "echo $KEEP").output == "1\n[exit code: 0]"
        assert t._shell is shell
        sb.reset()
        assert bash(t, "echo reset${KEEP}").output == "reset\n[exit code: 0]"
        t.close()
        t.close()  # idempotent


def test_view_directory_needs_no_command_and_never_follows_links():
    """The listing comes from the file API: no find in the image, a link to / listed, not walked."""
    with Sandbox() as sb, Tools(sb) as t:
        sb.write_file("/testbed/L/real/inner.txt", "x")
        sb.exec(["ln", "-s", "/", "/testbed/L/root-link"]).check()
        sb.exec(["sh", "-c", "printf x > /testbed/L/$(printf 'caf\\351')"]).check()
        sb.exec(["sh", "-c", "rm -f $(command -v find)"]).check()
        out = edit(t, command="view", path="/testbed/L")
        assert out.splitlines()[1:] == ["/testbed/L/", "/testbed/L/caf\\xe9", "/testbed/L/real/",
                                        "/testbed/L/real/inner.txt", "/testbed/L/root-link"]  # fmt: skip
