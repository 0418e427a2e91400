"""``sandboxlite view EVAL_DIR`` (issue 38, item 3): the eval view.

A real small eval (the scripted model through the real CLI, both modes, real sandboxes) is viewed:
its page embeds a row per record with a link to each trajectory's own page, written in the same
pass; the aggregates (Wilson intervals) are right; hostile records stay inside the JSON; the
script renders in node with a minimal DOM; a synthetic 500-record eval renders small and fast."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from sandboxlite.cli import main
from sandboxlite.errors import ConfigError
from sandboxlite.view import is_eval_dir, load_eval, resolve, wilson, write_eval
from sandboxlite.view._eval_page import EVAL_JS

HOSTILE = "</script><script>alert(1)</script><img src=x onerror=alert(2)><!-- \u2028 &"
ESC = "\x1b[31mred\x1b[0m \x1b]0;title\x07"
TASKS = [
    {"id": "zero", "question": "What is 5 - 5?", "answer": "0", "scoring": "numeric"},  # the scripted model's answer
    {"id": "add", "question": "What is 17 + 25?", "answer": "42", "scoring": "numeric"},
    {
        "id": "sum",
        "question": "Sum the numbers in numbers.txt.",
        "answer": "10",
        "scoring": "numeric",
        "files": {"numbers.txt": "1\n2\n3\n4\n"},
    },
]


def embedded(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.DOTALL)
    assert m, "the page embeds its data"
    return json.loads(m.group(1))


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def real_eval(tmp_path_factory) -> Path:
    """An eval made by the real CLI: the scripted model, both modes, in real sandboxes."""
    root = tmp_path_factory.mktemp("eval")
    tasks = root / "mine.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in TASKS) + "\n")
    out = root / "out"
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--tasks", str(tasks), "--mode", "both",
                                  "--workers", "2", "--rootfs", "lean", "--output-dir", str(out), "--no-progress"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert len(records(out)) == 6
    return out


def test_the_cli_views_a_real_eval(real_eval):
    r = CliRunner().invoke(main, ["view", str(real_eval)])
    assert r.exit_code == 0, r.output
    page_path = real_eval / "view.html"
    assert str(page_path) in r.output and "6 tasks" in r.output and "6 trajectory pages" in r.output
    page = page_path.read_text()
    assert page.startswith("<!DOCTYPE html>") and "default-src 'none'" in page and "innerHTML" not in page
    assert page.count("<script") == 2 and EVAL_JS in page
    d = embedded(page)
    assert d["kind"] == "eval" and d["modes"] == ["sandbox", "vanilla"] and d["domains"] == ["mine"]
    assert d["run"]["model"] == "scripted"
    recs = records(real_eval)
    assert sorted(r["key"] for r in d["rows"]) == sorted(r["key"] for r in recs)
    assert {(r["id"], r["mode"]) for r in d["rows"]} == {(t["id"], m) for t in TASKS for m in ("sandbox", "vanilla")}
    for row in d["rows"]:
        assert row["link"] and not row["link"].startswith("/")
        target = page_path.parent / unquote(row["link"])
        assert target.is_file(), row["link"]
        run = embedded(target.read_text())
        assert run["kind"] == "run" and run["mode"] == row["mode"]
        assert run["score"]["score"] == row["score"] and run["score"]["id"] == row["id"]  # from the record
        assert row["steps"] == (1 if row["mode"] == "vanilla" else 4)
        assert row["failure"] == (None if row["id"] == "zero" else "wrong answer")
    sandbox = next(r for r in d["rows"] if r["mode"] == "sandbox")
    assert sandbox["tools"] == {"execute_bash": 2, "str_replace_editor": 1, "submit": 1}
    acc = {(a["domain"], a["mode"]): a for a in d["summary"]["accuracy"]}
    for mode in ("sandbox", "vanilla"):
        a = acc[("mine", mode)]
        assert a["n"] == 3 and a["mean"] == pytest.approx(1 / 3)
        assert (a["lo"], a["hi"]) == pytest.approx(wilson(1, 3))
    assert d["summary"]["failures"] == {"wrong answer": {"sandbox": 2, "vanilla": 2}}
    assert d["summary"]["tools"]["sandbox"]["submit"] == 3
    assert d["summary"]["steps"]["counts"] == {"sandbox": [0, 0, 0, 3], "vanilla": [3, 0, 0, 0]}


def test_load_eval_alone_and_the_other_output(real_eval, tmp_path):
    d = load_eval(real_eval)
    assert len(d["rows"]) == 6 and all(r["tools"] is not None for r in d["rows"])
    assert next(r for r in d["rows"] if r["mode"] == "sandbox")["tools"]["submit"] == 1
    out = tmp_path / "elsewhere" / "e.html"
    out.parent.mkdir()
    r = CliRunner().invoke(main, ["view", str(real_eval), "-o", str(out)])
    assert r.exit_code == 0, r.output
    for row in embedded(out.read_text())["rows"]:
        assert (out.parent / unquote(row["link"])).resolve().is_file()  # links relative to -o's folder
    assert is_eval_dir(real_eval) and not is_eval_dir(real_eval / "trajectories")
    with pytest.raises(ConfigError, match="load_eval"):
        resolve(real_eval)


def test_wilson_interval_known_cases():
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    assert wilson(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson(0, 0) is None


def test_hostile_records_stay_inside_the_json(real_eval, tmp_path):
    ev = tmp_path / "ev"
    shutil.copytree(real_eval, ev)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "trajectory.json").write_text((ev / "trajectories/sandbox/mine/add/trajectory.json").read_text())
    bad = [
        {
            "key": "k1",
            "domain": HOSTILE,
            "id": HOSTILE + ESC,
            "mode": "sandbox",
            "score": 0.0,
            "error": "ModelError: " + HOSTILE + ESC,
            "trajectory": "../outside/trajectory.json",
        },
        {
            "key": "k2",
            "domain": "mine",
            "id": "abs",
            "mode": "vanilla",
            "score": float("nan"),
            "error": None,
            "trajectory": str(outside / "trajectory.json"),
            "response": ESC * 1000,
        },
        {
            "key": "k3",
            "domain": "mine",
            "id": "notes",
            "mode": "vanilla",
            "score": "1",
            "steps": "x",
            "usage": "nope",
            "trajectory": None,
        },
    ]
    with (ev / "results.jsonl").open("a") as f:
        f.write('{"torn": \n')
        for b in bad:
            f.write(json.dumps(b, allow_nan=True) + "\n")
    written, data, pages = write_eval(ev)
    page = written.read_text()
    assert pages == 6 and len(data["rows"]) == 9
    assert page.count("</script>") == 2 and "\x1b" not in page and "\u2028" not in page
    assert "alert(1)</script>" not in page and "<img" not in page and "<!--" not in page
    d = embedded(page)
    rows = {r["key"]: r for r in d["rows"]}
    assert rows["k1"]["id"].startswith(HOSTILE) and "red" in rows["k1"]["id"] and "\x1b" not in rows["k1"]["id"]
    assert rows["k1"]["link"] is None and rows["k2"]["link"] is None and rows["k3"]["link"] is None
    assert rows["k1"]["failure"] == "error: ModelError" and rows["k2"]["score"] is None
    assert not (outside / "view.html").exists()  # a path out of the eval's folder is never written to
    assert len(rows["k2"]["response"]) <= 300


DOM = r"""
const fs = require('fs'); const html = fs.readFileSync(process.argv[1], 'utf8');
const data = html.match(/<script type="application\/json" id="data">([\s\S]*?)<\/script>/)[1];
const js = html.match(/<script>([\s\S]*?)<\/script>/)[1];
function N(tag) { this.tagName = tag.toUpperCase(); this.children = []; this._t = ''; this.l = {}; this.attrs = {};
  this.style = {}; this.classList = {s: new Set(), add(c) { this.s.add(c) }, remove(c) { this.s.delete(c) },
    contains(c) { return this.s.has(c) }, toggle(c, f) { f ? this.s.add(c) : this.s.delete(c) }}; }
N.prototype.appendChild = function (c) { this.children.push(c); return c };
N.prototype.removeChild = function (c) { this.children = this.children.filter(x => x !== c); return c };
Object.defineProperty(N.prototype, 'firstChild', {get() { return this.children[0] || null }});
N.prototype.setAttribute = function (k, v) { this.attrs[k] = v };
N.prototype.getAttribute = function (k) { return this.attrs[k] };
Object.defineProperty(N.prototype, 'textContent', {get() { return this._t + this.children.map(c => c.textContent).join('') },
  set(v) { this._t = v; this.children = [] }});
N.prototype.addEventListener = function (e, f) { this.l[e] = f };
N.prototype.focus = N.prototype.blur = function () {};
Object.defineProperty(N.prototype, 'innerHTML', {set() { throw new Error('innerHTML used') }});
const all = [];
const ids = {data: Object.assign(new N('script'), {_t: data}), app: new N('main'), top: new N('header')};
function walk(n, f) { f(n); n.children.forEach(c => walk(c, f)) }
function byId(i) { if (ids[i]) return ids[i]; let r = null; [ids.top, ids.app].forEach(t => walk(t, n => { if (n.id === i) r = n })); return r }
global.window = global; global.document = {getElementById: byId, createElement: t => new N(t),
  createElementNS: (ns, t) => { const n = new N(t); n.ns = ns; return n }, addEventListener: () => {}};
eval(js);
function rows() { const t = byId('tasks'); return t.children.slice(1) }
const out = {rows: rows().length, rects: 0, cis: 0, links: []};
walk(ids.app, n => { if (n.tagName === 'RECT') out.rects++; if (n.attrs['class'] === 'ci') out.cis++ });
rows().forEach(r => walk(r, n => { if (n.tagName === 'A') out.links.push(n.href) }));
const mode = byId('f-mode'); mode.value = 'vanilla'; mode.l.change(); out.vanilla = rows().length;
mode.value = ''; mode.l.change();
const q = byId('f-text'); q.value = 'zzz-no-such-task'; q.l.input(); out.none = rows().length; q.value = ''; q.l.input();
const th = byId('tasks').children[0].children.find(c => c.attrs['data-key'] === 'steps'); th.l.click();
out.firstSteps = rows()[0].textContent; byId('tasks').children[0].children.find(c => c.attrs['data-key'] === 'steps').l.click();
out.firstStepsDesc = rows()[0].textContent;
const p = byId('f-paired'); p.checked = true; p.l.change();
out.paired = rows().map(r => r.attrs['data-key']);
console.log(JSON.stringify(out));
"""


def _node(page: Path) -> dict:
    if shutil.which("node") is None:  # tools/setup.sh installs it with the test packages
        pytest.fail("node is missing: apt-get install nodejs (tools/setup.sh does)", pytrace=False)
    got = subprocess.run(["node", "-e", DOM, str(page)], capture_output=True, text=True, timeout=60, check=False)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_the_script_renders_the_table_charts_filters_and_pairs(real_eval, tmp_path):
    written, data, _ = write_eval(real_eval, tmp_path / "p.html")
    res = _node(written)
    assert res["rows"] == 6 and res["vanilla"] == 3 and res["none"] == 0
    assert res["cis"] == 2  # accuracy: one domain ("all" only with more), two modes, each with its interval bar
    assert res["rects"] >= 4 and len(res["links"]) == 6
    assert sorted(res["links"]) == sorted(r["link"] for r in data["rows"])
    pairs = res["paired"]
    assert len(pairs) == 6
    for i in range(0, 6, 2):  # each task's sandbox run right before its vanilla run
        a, b = pairs[i].split("/"), pairs[i + 1].split("/")
        assert a[0] == "sandbox" and b[0] == "vanilla" and a[1:] == b[1:]


def synthetic_eval(root: Path, n_items: int = 250, domains: int = 5) -> Path:
    """An eval folder following the real layout and schema: results.jsonl and one trajectory per record."""
    root.mkdir(parents=True)
    lines = []
    for i in range(n_items):
        domain = f"dom{i % domains}"
        for mode in ("sandbox", "vanilla"):
            item = f"item-{i:04d}"
            rel = Path("trajectories") / mode / domain / item
            folder = root / rel
            folder.mkdir(parents=True)
            steps = 1 + (i * 7) % 30 if mode == "sandbox" else 1
            score = float((i + (mode == "sandbox")) % 3 == 0)
            usage = {
                "prompt_tokens": 900 + i,
                "completion_tokens": 100 + steps * 50,
                "total_tokens": 1000 + i + steps * 50,
            }
            msgs = [
                {"role": "system", "content": "You are a capable assistant."},
                {"role": "user", "content": f"Question {i}: " + "x " * 200},
            ]
            traj_steps = []
            for s in range(steps if mode == "sandbox" else 0):
                call = {
                    "id": f"c{s}",
                    "type": "function",
                    "function": {"name": "execute_bash", "arguments": json.dumps({"command": f"echo {s}"})},
                }
                traj_steps.append(
                    {
                        "index": s + 1,
                        "model_s": 0.1,
                        "tools_s": 0.01,
                        "assistant": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "observations": [
                            {
                                "tool": "execute_bash",
                                "call_id": f"c{s}",
                                "output": f"{s}\n" * 20,
                                "data": {"exit_code": 0, "duration_s": 0.01},
                            }
                        ],
                        "usage": usage,
                        "error": None,
                        "finish_reason": "tool_calls",
                        "discarded": [],
                    }
                )
            if mode == "vanilla":
                msgs.append({"role": "assistant", "content": "Answer: \\boxed{1}"})
            t = {
                "task": {"id": f"{domain}-{item}", "metadata": {"domain": domain, "item": item}},
                "model": "synthetic",
                "mode": mode,
                "messages": msgs,
                "steps": traj_steps,
                "exit_reason": "submitted",
                "reason": "submitted",
                "usage": usage,
                "duration_s": 1.5,
                "answer": "\\boxed{1}",
            }
            (folder / "trajectory.json").write_text(json.dumps(t))
            reason = "max_steps" if steps == 30 else ("submitted" if mode == "sandbox" else "answered")
            score = 0.0 if reason == "max_steps" else score
            lines.append(json.dumps({"key": f"{mode}/{domain}/{item}/0", "domain": domain, "id": item, "mode": mode,
                                     "repeat": 0, "score": score, "error": None, "trajectory": str(rel / "trajectory.json"),
                                     "exit_reason": reason, "reason": reason, "steps": steps, "usage": usage,
                                     "response": "\\boxed{1}", "response_source": "reply", "extracted": "1",
                                     "wall_s": 1.5, "model_s": 1.2}))  # fmt: skip
    (root / "results.jsonl").write_text("\n".join(lines) + "\n")
    (root / "run.json").write_text(
        json.dumps({"fingerprint": "synthetic", "settings": {"model": {"name": "synthetic"}}})
    )
    return root


def test_a_500_record_eval_renders_small_and_fast(tmp_path):
    ev = synthetic_eval(tmp_path / "big")
    t0 = time.monotonic()
    written, data, pages = write_eval(ev)
    took = time.monotonic() - t0
    size = written.stat().st_size
    print(f"\n500-record eval: page {size:,} bytes, {pages} trajectory pages, {took:.2f} s")
    assert pages == 500 and len(data["rows"]) == 500 and size < 20 << 20
    d = embedded(written.read_text())
    assert {r["mode"] for r in d["rows"]} == {"sandbox", "vanilla"} and len(d["domains"]) == 5
    assert all((written.parent / unquote(r["link"])).is_file() for r in d["rows"])
    assert d["summary"]["failures"]["max_steps"]["sandbox"] > 0
    bins = d["summary"]["steps"]["bins"]
    assert len(bins) <= 20 and bins[0]["lo"] == 1 and bins[-1]["hi"] == 30
    assert sum(d["summary"]["steps"]["counts"]["sandbox"]) == 250
    res = _node(written)
    assert res["rows"] == 500 and res["vanilla"] == 250 and len(res["paired"]) == 500
