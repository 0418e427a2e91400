"""``sandboxlite view`` (issue 38, first slice): one self-contained HTML page for a run.

A real run (the scripted model through the real CLI, in a real sandbox) is loaded and rendered; a
hostile trajectory (script tags, HTML, terminal escapes, a 10 MB output, bytes that are not UTF-8,
a symlink out of the folder) gives a page whose embedded data cannot break out, that names no URL
of its own and stays small; the CLI writes where it says and fails clearly on a bad PATH."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.agent.run import run_task
from sandboxlite.agent.scripted import ScriptedModel
from sandboxlite.agent.task import Task
from sandboxlite.cli import EXIT_USAGE, main
from sandboxlite.errors import ConfigError
from sandboxlite.view import load_run, render_html, write_html
from sandboxlite.view._page import CSS, JS

HOSTILE = "</script><script>alert(1)</script><img src=x onerror=alert(2)><!-- \u2028\u2029 & https://evil.example/x"
ESC = "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b[2J"


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL)
    assert m, "the page embeds its data"
    return json.loads(m.group(1))


def outside_data(page: str) -> str:
    return re.sub(r'(<script type="application/json" id="data">).*?(</script>)', r"\1\2", page, flags=re.DOTALL)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A run made by the real CLI: the scripted model in a real sandbox."""
    out = tmp_path_factory.mktemp("run") / "o"
    r = CliRunner().invoke(main, ["run", "--query", "What is 6*7?", "--model", "scripted", "--quiet",
                                  "--output-dir", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    return out


def test_a_real_run_loads_with_every_step(real_run):
    d = load_run(real_run)
    t = json.loads((real_run / "trajectory.json").read_text())
    assert d["kind"] == "run" and d["model"] == "scripted" and d["mode"] == "sandbox"
    assert len(d["steps"]) == len(t["steps"]) == 4
    assert "What is 6*7?" in d["query"]
    first = d["steps"][0]["calls"][0]
    assert first["name"] == "execute_bash" and "print(6 * 7)" in first["arguments"]["command"]
    assert first["exit_code"] == 0 and "42" in first["output"] and first["duration_s"] is not None
    edit = d["steps"][2]["calls"][0]
    assert edit["name"] == "str_replace_editor" and "+\\boxed{0}" in edit["diff"]
    assert d["steps"][3]["calls"][0]["name"] == "submit"
    assert d["answer"] == "\\boxed{0}" and d["exit_reason"] == "submitted" and d["reason"] == "submitted"
    assert [f["name"] for f in d["files"]] == ["answer.txt"] and d["files"][0]["text"] == "\\boxed{0}"
    assert load_run(real_run / "trajectory.json")["steps"] == d["steps"]


def test_the_page_of_a_real_run(real_run, tmp_path):
    out = write_html(load_run(real_run), tmp_path / "v.html")
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert embedded(page)["steps"][0]["calls"][0]["output"].endswith("[exit code: 0]")
    assert page.count("<script") == 2 and "innerHTML" not in page
    assert CSS in page and JS in page and "{CSS}" not in page
    assert not re.search(r"https?://", page), "a run without URLs gives a page without URLs"


def test_a_vanilla_run_has_its_one_reply_as_a_step(tmp_path):
    run_task(Task(id="v", query="What is 6*7?"), ScriptedModel("\\boxed{42}"), output_dir=tmp_path / "v",
             mode="vanilla")  # fmt: skip
    d = load_run(tmp_path / "v")
    assert len(d["steps"]) == 1 and d["steps"][0]["text"] == "Answer: \\boxed{42}" and d["reason"] == "answered"


def hostile_run(root: Path) -> Path:
    """A hand-made trajectory with hostile content everywhere, and a files/ folder to match."""
    big = "x" * (10 << 20)
    call = {"id": "c1", "type": "function", "function": {"name": "execute_bash",
            "arguments": json.dumps({"command": f"echo '{HOSTILE}'"})}}  # fmt: skip
    edit = {"id": "c2", "type": "function", "function": {"name": "str_replace_editor", "arguments": json.dumps(
        {"command": "str_replace", "path": "/testbed/a.html", "old_str": "<b>old</b>", "new_str": HOSTILE})}}
    steps = [
        {"index": 1, "model_s": 0.1, "tools_s": 2.0, "usage": {"total_tokens": 5},
         "assistant": {"role": "assistant", "content": HOSTILE + ESC, "reasoning_content": ESC + HOSTILE,
                       "tool_calls": [call, edit]},
         "observations": [
             {"tool": "execute_bash", "call_id": "c1", "output": big + ESC + HOSTILE,
              "data": {"exit_code": 124, "timed_out": True, "truncated": True, "duration_s": 120.0}},
             {"tool": "str_replace_editor", "call_id": "c2", "output": "edited " + HOSTILE, "data": {}}]},
    ]  # fmt: skip
    t = {"task": {"id": HOSTILE, "query": "q " + HOSTILE, "input_files": {HOSTILE: ESC}}, "model": HOSTILE,
         "mode": "sandbox", "messages": [], "steps": steps, "exit_reason": HOSTILE, "reason": "max_steps",
         "answer": HOSTILE, "network_requests": [{"method": "CONNECT", "host": HOSTILE, "port": 443,
                                                  "allowed": False, "why": HOSTILE}]}  # fmt: skip
    run = root / "hostile"
    (run / "files" / "sub").mkdir(parents=True)
    (run / "trajectory.json").write_text(json.dumps(t))
    (run / "files" / "bad-utf8.txt").write_bytes(b"ok \xff\xfe\xc3( " + HOSTILE.encode() + b"\x1b[1mbold")
    (run / "files" / "sub" / "blob.bin").write_bytes(b"\x00\x01\x02" * 1000)
    (run / "files" / "big.txt").write_bytes(b"y" * (1 << 20))
    secret = root / "secret.txt"
    secret.write_text("SECRET-OUTSIDE-THE-RUN")
    os.symlink(secret, run / "files" / "link.txt")
    return run


def test_hostile_content_cannot_break_out_of_the_page(tmp_path):
    run = hostile_run(tmp_path)
    page = write_html(load_run(run), tmp_path / "h.html").read_text(encoding="utf-8")
    # the page's own two script elements, nothing else: the data closes and opens none
    assert page.count("<script") == 2 and len(re.findall(r"</script", page, re.IGNORECASE)) == 2
    assert "<img" not in page and "<!--" not in page and "\u2028" not in page and "\u2029" not in page
    assert "\x1b" not in page and "\x9b" not in page
    # the template names no URL: every http(s):// is in the data the user supplied
    assert not re.search(r"https?://", outside_data(page)) and not re.search(r"https?://", CSS + JS)
    # bounded: the 10 MB output is cut, and says so
    assert len(page.encode()) < 2 << 20, len(page)
    d = embedded(page)
    call = d["steps"][0]["calls"][0]
    assert call["clipped"] and "characters left out by the viewer" in call["output"]
    assert call["timed_out"] and call["truncated"] and call["exit_code"] == 124
    # the data reads back as text: the hostile strings intact, escapes gone or visible
    assert HOSTILE in d["steps"][0]["text"] and "[31m" not in d["steps"][0]["text"]
    assert d["answer"] == HOSTILE and d["network"][0]["host"] == HOSTILE
    assert "-<b>old</b>" in d["steps"][0]["calls"][1]["diff"] and "+" + HOSTILE in d["steps"][0]["calls"][1]["diff"]
    files = {f["name"]: f for f in d["files"]}
    assert "\ufffd" in files["bad-utf8.txt"]["text"] and "\x1b" not in files["bad-utf8.txt"]["text"]
    assert files["sub/blob.bin"]["kind"] == "binary" and files["sub/blob.bin"]["text"] is None
    assert files["sub/blob.bin"]["size"] == 3000
    assert files["big.txt"]["truncated"] and len(files["big.txt"]["text"]) <= 64 << 10
    assert files["link.txt"]["kind"] == "symlink" and "SECRET-OUTSIDE-THE-RUN" not in page


def test_a_symlinked_trajectory_in_a_folder_is_not_followed(tmp_path):
    real = hostile_run(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    os.symlink(real / "trajectory.json", other / "trajectory.json")
    with pytest.raises(ConfigError, match="symlink"):
        load_run(other)


def test_render_cleans_a_dict_it_did_not_load():
    page = render_html({"kind": "run", "task": {"id": 3}, "steps": [], "x": float("nan"), "y": "\ud800" + ESC})
    d = embedded(page)
    assert d["x"] == "nan" and d["y"].startswith("\ufffd") and "\x1b" not in d["y"]


# -- the CLI --------------------------------------------------------------------------------------
def test_cli_view_writes_the_default_file(real_run):
    target = real_run / "view.html"
    target.unlink(missing_ok=True)
    r = CliRunner().invoke(main, ["view", str(real_run)])
    assert r.exit_code == 0, r.output
    assert target.is_file() and str(target) in r.output and "4 steps" in r.output
    assert embedded(target.read_text())["exit_reason"] == "submitted"


def test_cli_view_of_a_trajectory_file_and_an_output_option(real_run, tmp_path):
    copy = tmp_path / "t.json"
    shutil.copy(real_run / "trajectory.json", copy)
    r = CliRunner().invoke(main, ["view", str(copy)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "t.html").is_file()
    r = CliRunner().invoke(main, ["view", str(real_run), "-o", str(tmp_path / "mine.html")])
    assert r.exit_code == 0 and (tmp_path / "mine.html").is_file()


@pytest.mark.parametrize("what", ["missing", "empty-folder", "not-json", "not-a-trajectory"])
def test_cli_view_of_a_bad_path_says_what_to_do(tmp_path, what):
    path = tmp_path / what
    if what == "empty-folder":
        path.mkdir()
    elif what == "not-json":
        path.write_text("{nope")
    elif what == "not-a-trajectory":
        path.write_text('{"a": 1}')
    r = CliRunner().invoke(main, ["view", str(path)])
    assert r.exit_code == EXIT_USAGE, r.output
    assert str(path) in r.output and "Hint:" in r.output and "trajectory.json" in r.output
    assert not list(tmp_path.glob("*.html"))


def test_cli_view_open_uses_the_file_url(real_run, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    r = CliRunner().invoke(main, ["view", str(real_run), "--open"])
    assert r.exit_code == 0, r.output
    assert opened == [(real_run / "view.html").resolve().as_uri()] and opened[0].startswith("file://")


# -- the script runs (node and a minimal DOM; the real browser test is the next slice) ------
DOM = r"""
const fs = require('fs'); const html = fs.readFileSync(process.argv[1], 'utf8');
const data = html.match(/<script type="application\/json" id="data">([\s\S]*?)<\/script>/)[1];
const js = html.match(/<script>([\s\S]*?)<\/script>/)[1];
function N(tag) { this.tagName = tag.toUpperCase(); this.children = []; this._t = ''; this.l = {};
  this.classList = {s: new Set(), add(c) { this.s.add(c) }, remove(c) { this.s.delete(c) },
    contains(c) { return this.s.has(c) }, toggle(c, f) { f ? this.s.add(c) : this.s.delete(c) }}; }
N.prototype.appendChild = function (c) { this.children.push(c); return c };
Object.defineProperty(N.prototype, 'textContent', {get() { return this._t + this.children.map(c => c.textContent).join('') },
  set(v) { this._t = v; this.children = [] }});
N.prototype.addEventListener = function (e, f) { this.l[e] = f };
N.prototype.scrollIntoView = N.prototype.focus = function () {};
Object.defineProperty(N.prototype, 'innerHTML', {set() { throw new Error('innerHTML used') }});
const ids = {data: Object.assign(new N('script'), {_t: data}), app: new N('main'), top: new N('header')};
function find(n, t) { if (n.tagName === t) return n; for (const c of n.children) { const r = find(c, t); if (r) return r } }
let key; global.window = global; global.document = {getElementById: i => i === 'search' ? find(ids.top, 'INPUT') : ids[i],
  createElement: t => new N(t), addEventListener: (e, f) => { key = f }};
eval(js);
const secs = []; (function w(n) { if (n.tagName === 'SECTION') secs.push(n); n.children.forEach(w) })(ids.app);
key({key: 'j', target: ids.app}); key({key: 'j', target: ids.app});
const cur = secs.findIndex(s => s.classList.contains('current'));
const q = find(ids.top, 'INPUT'); q.value = 'zzz-no-such-text'; q.l.input();
console.log(JSON.stringify({steps: secs.length, current: cur, hidden: secs.filter(s => s.classList.contains('hidden')).length,
  text: ids.app.textContent.length}));
"""


@pytest.mark.parametrize("which", ["real", "hostile"])
def test_the_script_renders_steps_keys_and_search(real_run, tmp_path, which):
    run = real_run if which == "real" else hostile_run(tmp_path)
    page = write_html(load_run(run), tmp_path / "p.html")
    if shutil.which("node") is None:  # tools/setup.sh installs it with the test packages
        pytest.fail("node is missing: apt-get install nodejs (tools/setup.sh does)", pytrace=False)
    got = subprocess.run(["node", "-e", DOM, str(page)], capture_output=True, text=True, timeout=60, check=False)
    assert got.returncode == 0, got.stderr
    res = json.loads(got.stdout)
    n = 4 if which == "real" else 1
    assert res["steps"] == n and res["current"] == min(1, n - 1) and res["hidden"] == n and res["text"] > 100
