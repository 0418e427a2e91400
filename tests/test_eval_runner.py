"""The eval runner: custom JSONL tasks, selection, both modes, resume, errors, the CLI (real sandboxes)."""

from __future__ import annotations

import _thread
import json
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.agent.scripted import ScriptedModel
from sandboxlite.cli import main
from sandboxlite.errors import ConfigError, ModelError, TaskError
from sandboxlite.eval import Domain, EvalConfig, EvalItem, Score, load_tasks_file, register_domain, run_eval
from sandboxlite.eval.custom import final_answer, score_row
from sandboxlite.eval.runner import read_results, select

TASKS = [
    {"id": "add", "question": "What is 17 + 25?", "answer": "42", "scoring": "numeric"},
    {"id": "cap", "question": "Capital of France?", "answer": "Paris"},
    {"id": "sum", "question": "Sum the numbers in numbers.txt.", "answer": "10", "scoring": "numeric",
     "files": {"numbers.txt": "1\n2\n3\n4\n"}},
    {"id": "gas", "question": "Which is a noble gas?\nA. N\nB. Ar", "answer": "B", "scoring": "choice"},
    {"id": "pi", "question": "Pi to 2 decimals?", "answer": "3.14", "scoring": "numeric", "tolerance": 0.01},
    {"id": "ne", "question": "Name a noble gas that starts with N.", "answer": "neon", "scoring": "contains"},
]
# the oracle knows the answers of these ids and gets the others wrong
RIGHT = {"add": "\\boxed{42}", "cap": "Paris", "sum": "The sum is \\boxed{10}"}


def oracle(messages: list[dict]) -> str:
    text = messages[1]["content"]
    for row in TASKS:
        if row["question"].split("\n")[0] in text:
            return RIGHT.get(row["id"], "\\boxed{wrong}")
    raise AssertionError("question not found in the prompt")


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    p = tmp_path / "mine.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in TASKS) + "\n")
    return p


def _cfg(tmp_path: Path, domains, **kw) -> EvalConfig:
    kw.setdefault("workers", 2)
    kw.setdefault("modes", ["sandbox", "vanilla"])
    kw.setdefault("rootfs", "lean")
    return EvalConfig(domains=domains, data_dir=tmp_path, out_dir=tmp_path / "out", **kw)


def _stable(summary: dict) -> dict:
    """The summary without timings."""
    out = json.loads(json.dumps(summary))
    out.pop("sandbox_overhead_ms", None)
    out.pop("run", None)  # when it was written
    for entry in out["domains"].values():
        for cell in entry.values():
            if isinstance(cell, dict):
                for k in ("wall_s", "overhead_ms_p50", "overhead_ms_p90"):
                    cell.pop(k, None)
    return out


# -- custom tasks ---------------------------------------------------------------------------------------
def test_custom_file_errors_name_the_line_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    cases = [
        ({"id": "a", "question": "q"}, "missing 'answer'"),
        ({"id": "a", "question": "q", "answer": "1", "colour": "red"}, "unknown key(s) colour"),
        ({"id": "a", "question": "q", "answer": "1", "scoring": "fuzzy"}, "expected one of exact"),
        ({"id": "a", "question": "q", "answer": "1", "tolerance": -1}, "non-negative"),
    ]
    for row, msg in cases:
        bad.write_text(json.dumps({"id": "ok", "question": "q", "answer": "1"}) + "\n" + json.dumps(row) + "\n")
        with pytest.raises(TaskError) as e:
            load_tasks_file(bad)
        assert "bad.jsonl:2" in str(e.value) and msg in str(e.value)
    bad.write_text('{"id": "a", "question": "q", "answer": "1"}\n{"id": "a", "question": "r", "answer": "2"}\n')
    with pytest.raises(TaskError, match="duplicate id"):
        load_tasks_file(bad)
    bad.write_text("{not json\n")
    with pytest.raises(TaskError, match="bad.jsonl:1"):
        load_tasks_file(bad)


def test_custom_scoring_kinds() -> None:
    assert final_answer("work...\n\\boxed{1} then \\boxed{2}") == "2"
    assert final_answer("blah\nAnswer: Paris.\nthanks") == "Paris."
    assert final_answer("one\ntwo\n\n") == "two"
    num = {"answer": "42", "scoring": "numeric", "tolerance": 1e-6}
    assert score_row("\\boxed{42.0}", num).value == 1.0
    assert score_row("Answer: 1,042", {**num, "answer": "1042"}).value == 1.0
    assert score_row("\\boxed{41.9}", num).value == 0.0
    assert score_row("\\boxed{41.9}", {**num, "tolerance": 0.01}).value == 1.0
    assert score_row("no number here", num).value == 0.0
    exact = {"answer": "Paris", "scoring": "exact"}
    assert score_row("Answer: paris.", exact).value == 1.0
    assert score_row("Answer: Paris, France", exact).value == 0.0
    assert score_row("Answer: it is Neon", {"answer": "neon", "scoring": "contains"}).value == 1.0
    assert score_row("I think \\boxed{B}", {"answer": "b", "scoring": "choice", "letters": None}).value == 1.0


def test_select_is_seeded_stratified_and_limited() -> None:
    items = [EvalItem(f"{s}-{i}", "d", "q", {}, stratum=s) for s in "xyz" for i in range(10)]
    a = select(items, limit=6, ids=None, seed=1, domain="d")
    assert [i.stratum for i in a] == ["x", "y", "z"] * 2  # spread over the strata
    assert a == select(items, limit=6, ids=None, seed=1, domain="d")
    assert a != select(items, limit=6, ids=None, seed=2, domain="d")
    assert [i.id for i in select(items, limit=None, ids=["y-3", "d/z-0"], seed=0, domain="d")] == ["y-3", "z-0"]


# -- end to end -----------------------------------------------------------------------------------------
def test_eval_both_modes_scores_and_writes_everything(tmp_path: Path, tasks_file: Path) -> None:
    domains = load_tasks_file(tasks_file)
    result = run_eval(_cfg(tmp_path, domains), ScriptedModel(oracle), model_name="oracle")
    out = tmp_path / "out"
    records = read_results(out / "results.jsonl")
    assert len(records) == 2 * len(TASKS) and result.ran == 12 and result.skipped == 0
    for key, r in records.items():
        assert r["error"] is None, r
        assert r["score"] == (1.0 if r["id"] in RIGHT else 0.0), r
        assert (out / r["trajectory"]).is_file()
    sb = {r["id"]: r for r in records.values() if r["mode"] == "sandbox"}
    assert sb["add"]["response_source"] == "answer.txt" and sb["add"]["submitted"] and sb["add"]["steps"] == 4
    # the input file was in the sandbox: the scripted model's first look lists /testbed
    traj = json.loads((out / sb["sum"]["trajectory"]).read_text())
    assert "input" in traj["steps"][0]["observations"][0]["output"]
    assert traj["task"]["input_files"] == {"numbers.txt": "1\n2\n3\n4\n"}
    cell = result.summary["domains"]["mine"]
    assert cell["sandbox"]["mean"] == pytest.approx(0.5) and cell["vanilla"]["mean"] == pytest.approx(0.5)
    assert cell["sandbox_minus_vanilla"]["mean"] == 0.0 and cell["sandbox_minus_vanilla"]["paired_items"] == 6
    assert cell["sandbox"]["items"] == 6 and cell["sandbox"]["errors"] == 0
    assert result.summary["sandbox_overhead_ms"]["n"] == 6 and result.summary["sandbox_overhead_ms"]["p50"] > 0
    md = (out / "summary.md").read_text()
    assert "## mine" in md and "| sandbox | 50.0 |" in md and "Sandbox minus vanilla" in md
    assert json.loads((out / "summary.json").read_text())["runs"] == 12


def test_resume_after_interrupt_gives_the_same_summary(tmp_path: Path, tasks_file: Path) -> None:
    domains = load_tasks_file(tasks_file)
    full = run_eval(_cfg(tmp_path / "a", domains), ScriptedModel(oracle), model_name="oracle")

    calls = {"n": 0}
    lock = threading.Lock()

    def interrupting(messages: list[dict]) -> str:
        with lock:
            calls["n"] += 1
            if calls["n"] == 5:  # Ctrl-C in the middle of the run
                _thread.interrupt_main()
        return oracle(messages)

    cfg = _cfg(tmp_path / "b", domains)
    with pytest.raises(KeyboardInterrupt):
        run_eval(cfg, ScriptedModel(interrupting), model_name="oracle")
    kept = read_results(cfg.out_dir / "results.jsonl")
    assert 0 < len(kept) < 12
    with (cfg.out_dir / "results.jsonl").open("a") as f:
        f.write('{"key": "torn')  # a run killed mid-write
    again = run_eval(cfg, ScriptedModel(oracle), model_name="oracle")
    assert again.skipped == len(kept) and again.ran == 12 - len(kept)
    assert _stable(again.summary) == _stable(full.summary)
    third = run_eval(cfg, ScriptedModel(oracle), model_name="oracle")  # nothing left to do
    assert third.ran == 0 and third.skipped == 12
    with pytest.raises(ConfigError, match='holds a run with other settings(.|\n)*model.name: "oracle" -> "another"'):
        run_eval(cfg, ScriptedModel(oracle), model_name="another")


def test_errors_are_recorded_not_fatal(tmp_path: Path) -> None:
    def load(_dir: Path) -> list[EvalItem]:
        return [EvalItem(n, "errs", f"question {n}", {"n": n}) for n in ("ok", "model", "scorer")]

    def score(item: EvalItem, response: str, judge=None) -> Score:
        if item.id == "scorer":
            raise ValueError("the scorer broke")
        return Score(1.0 if "42" in response else 0.0, response)

    def model_for(job):
        if job.item.id == "model":
            from sandboxlite.agent.model import FakeModel

            return FakeModel([ModelError("endpoint down", hint="retry later")])
        return ScriptedModel("\\boxed{42}")

    domain = register_domain(Domain("errs", "test domain", load, score), replace=True)
    result = run_eval(_cfg(tmp_path, [domain], modes=["sandbox"]), model_for, model_name="mixed")
    recs = {r["id"]: r for r in read_results(tmp_path / "out" / "results.jsonl").values()}
    assert recs["ok"]["score"] == 1.0 and recs["ok"]["error"] is None
    assert "endpoint down" in recs["model"]["error"] and recs["model"]["score"] == 0.0
    assert recs["model"]["reason"] == "model_error" and recs["ok"]["reason"] == "submitted"
    assert recs["scorer"]["error"] == "ValueError: the scorer broke" and recs["scorer"]["score"] == 0.0
    cell = result.summary["domains"]["errs"]["sandbox"]
    assert cell["errors"] == 2 and cell["mean"] == pytest.approx(1 / 3)
    assert result.errors == 2 and not result.complete and result.first_errors[0][0].startswith("sandbox/errs/")
    # retry_errors=False keeps them; a resume runs just those again by default
    kept = run_eval(_cfg(tmp_path, [domain], modes=["sandbox"], retry_errors=False), model_for, model_name="mixed")
    assert kept.ran == 0 and kept.skipped == 3 and kept.errors == 2
    again = run_eval(_cfg(tmp_path, [domain], modes=["sandbox"]), model_for, model_name="mixed")
    assert again.ran == 2 and again.skipped == 1


def test_repeats_report_pass_at_k(tmp_path: Path) -> None:
    def load(_dir: Path) -> list[EvalItem]:
        return [EvalItem("q", "rep", "question", {})]

    seen = {"n": 0}
    lock = threading.Lock()

    def flaky(messages: list[dict]) -> str:  # right on every other vanilla call
        with lock:
            seen["n"] += 1
            return "\\boxed{42}" if seen["n"] % 2 else "\\boxed{0}"

    domain = Domain("rep", "repeats", load, lambda item, r, judge=None: Score(1.0 if "42" in r else 0.0, r))
    result = run_eval(_cfg(tmp_path, [domain], modes=["vanilla"], repeats=4, workers=1), ScriptedModel(flaky),
                      model_name="flaky")  # fmt: skip
    cell = result.summary["domains"]["rep"]["vanilla"]
    assert cell["runs"] == 4 and cell["items"] == 1 and cell["mean"] == 0.5
    assert cell["pass@k"] == {"1": 0.5, "4": 1.0}


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mode"):
        EvalConfig(domains=["math"], data_dir=tmp_path, out_dir=tmp_path, modes=["both"])
    with pytest.raises(ConfigError, match="workers"):
        EvalConfig(domains=["math"], data_dir=tmp_path, out_dir=tmp_path, workers=0)


# -- CLI --------------------------------------------------------------------------------------------------
def test_cli_eval_custom_tasks_both_modes(tmp_path: Path, tasks_file: Path) -> None:
    out = tmp_path / "cli"
    args = ["eval", "--model", "scripted", "--tasks", str(tasks_file), "--mode", "both", "--workers", "2",
            "--rootfs", "lean", "--output-dir", str(out), "--no-progress"]  # fmt: skip
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "## mine" in r.output and "Sandbox minus vanilla" in r.output
    assert len(read_results(out / "results.jsonl")) == 12
    r2 = CliRunner().invoke(main, args)  # the same command again: resumes, nothing left
    assert r2.exit_code == 0 and "0 tasks run, 12 already done" in r2.output


def test_cli_eval_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXLITE_EVAL_DATA", str(tmp_path / "empty"))
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--domains", "math"])
    assert r.exit_code == 2 and "no data for any selected domain" in r.output and "data pull math" in r.output
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--domains", "nope", "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and "unknown domain 'nope'" in r.output
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps(TASKS[0]) + "\n")
    out = tmp_path / "never"
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--tasks", str(tasks), "--ids", "nope",
                                  "--output-dir", str(out)])  # fmt: skip
    assert r.exit_code == 2 and "no item of t matches ['nope']" in r.output and not out.exists()


def test_cli_domain_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_domains.py").write_text(
        "from sandboxlite.eval import Domain, EvalItem, Score\n"
        "def load(d):\n    return [EvalItem('one', 'plug', 'Say 42.', {})]\n"
        "def score(item, response, judge=None):\n    return Score(1.0 if '42' in response else 0.0, response)\n"
        "PLUG = Domain('plug', 'a plugin domain', load, score)\n"
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--domain-module", "my_domains:PLUG", "--domains",
                                  "plug", "--data-dir", str(tmp_path), "--mode", "vanilla", "--output-dir", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    rec = next(iter(read_results(out / "results.jsonl").values()))
    assert rec["domain"] == "plug" and rec["score"] == 0.0  # the scripted model answers \boxed{0}
    sys.modules.pop("my_domains", None)
