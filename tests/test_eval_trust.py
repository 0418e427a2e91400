"""An eval a researcher can trust: only answers are scored, both modes sample alike, failures are
loud, a resume never mixes settings, the report says what it is (issue 18; real sandboxes, the
real OpenAI client against a scripted loopback server)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.agent.model import AssistantMessage, FakeModel, OpenAIModel
from sandboxlite.agent.scripted import ScriptedModel
from sandboxlite.cli import EXIT_INCOMPLETE, _eta, main
from sandboxlite.errors import ConfigError, ModelError
from sandboxlite.eval import Domain, EvalConfig, EvalItem, Score, register_domain, run_eval
from sandboxlite.eval.custom import score_row
from sandboxlite.eval.runner import read_results

from .fake_openai import FakeOpenAIServer

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval-data"


def _domain(name: str, rows: list[tuple[str, str]], scoring: str = "numeric") -> Domain:
    """A domain of (id, gold) items scored by the custom-task rules."""

    def load(_dir: Path) -> list[EvalItem]:
        return [EvalItem(i, name, f"Question {i}: give the number.", {"answer": gold, "scoring": scoring})
                for i, gold in rows]  # fmt: skip

    return register_domain(Domain(name, "test", load, lambda item, r, judge=None: score_row(r, item.reference)),
                           replace=True)  # fmt: skip


def _cfg(tmp_path: Path, domains, **kw) -> EvalConfig:
    kw.setdefault("workers", 1)
    kw.setdefault("modes", ["sandbox"])
    kw.setdefault("rootfs", "lean")
    kw.setdefault("max_steps", 3)
    return EvalConfig(domains=domains, data_dir=tmp_path, out_dir=tmp_path / "out", **kw)


def _records(tmp_path: Path) -> dict[str, dict]:
    return {r["key"]: r for r in read_results(tmp_path / "out" / "results.jsonl").values()}


TOOL_CALL_120 = '<tool_call>{"name": "execute_bash", "arguments": {"command": "sleep 1", "timeout": 120}}</tool_call>'


# -- 1. only answers are scored ------------------------------------------------------------------------
def test_a_tool_call_is_never_scored(tmp_path: Path) -> None:
    """The fault of the issue: no answer.txt, the last message a tool call whose timeout equals the gold."""
    d = _domain("calls", [("q", "120")])
    run_eval(_cfg(tmp_path, [d]), FakeModel([TOOL_CALL_120] * 3), model_name="fake")
    rec = next(iter(_records(tmp_path).values()))
    assert rec["score"] == 0.0 and rec["response_source"] is None and rec["response"] == ""
    assert rec["submitted"] is False and rec["answer_file"] is False and rec["reason"] == "max_steps"
    assert rec["details"] == {"no_response": True}


def test_native_calls_and_malformed_calls_are_no_answer_either(tmp_path: Path) -> None:
    d = _domain("calls2", [("q", "7")])
    replies = [{"tool": "execute_bash", "arguments": {"command": "echo 7"}, "content": "Running: 7"},
               '<tool_call>{"name": "execute_bash", "arguments": {"command": "echo 7", "timeout": 7</tool_call>',
               {"tool": "execute_bash", "arguments": {"command": "true"}}]  # fmt: skip
    run_eval(_cfg(tmp_path, [d]), FakeModel(replies), model_name="fake")
    rec = next(iter(_records(tmp_path).values()))
    assert rec["score"] == 0.0 and rec["response_source"] is None


def test_a_final_text_answer_is_scored_and_says_so(tmp_path: Path) -> None:
    d = _domain("words", [("q", "42")])
    replies = [{"tool": "execute_bash", "arguments": {"command": "echo 6*7 | bc"}},
               "<think>maybe 41?</think>The answer is 42.", TOOL_CALL_120]  # fmt: skip
    run_eval(_cfg(tmp_path, [d]), FakeModel(replies), model_name="fake")
    rec = next(iter(_records(tmp_path).values()))
    assert rec["response_source"] == "final_text" and rec["response"] == "The answer is 42."
    assert rec["score"] == 1.0 and rec["answer_file"] is False and rec["submitted"] is False


def test_answer_file_wins_and_the_summary_has_the_rates(tmp_path: Path) -> None:
    d = _domain("files", [("a", "42"), ("b", "5")])
    run_eval(_cfg(tmp_path, [d], max_steps=4, modes=["sandbox", "vanilla"]),
             lambda job: ScriptedModel("42") if job.item.id == "a" else FakeModel([TOOL_CALL_120] * 4),
             model_name="mixed")  # fmt: skip
    recs = _records(tmp_path)
    a = recs["sandbox/files/a/0"]
    assert a["response_source"] == "answer.txt" and a["answer_file"] and a["submitted"] and a["score"] == 1.0
    assert recs["vanilla/files/a/0"]["response_source"] == "reply" and recs["vanilla/files/a/0"]["submitted"] is None
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    cell = summary["domains"]["files"]["sandbox"]
    assert cell["submitted"] == 0.5 and cell["answered"] == 0.5 and cell["answer_file"] == 0.5
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| submitted | answered | cut replies |" in md


# -- 2. parity between the modes ---------------------------------------------------------------------
def test_both_modes_send_the_same_sampling_and_record_it(tmp_path: Path) -> None:
    d = _domain("parity", [("q", "42")])
    script = [FakeOpenAIServer.text_reply("OK"),  # the preflight
              FakeOpenAIServer.tool_call_reply("str_replace_editor", {"command": "create", "path":
                                                                       "/testbed/output/answer.txt", "file_text": "1"}),
              FakeOpenAIServer.tool_call_reply("submit", {}),
              FakeOpenAIServer.text_reply("The answer is \\boxed{42}", finish_reason="length")]  # fmt: skip
    with FakeOpenAIServer(script) as srv:
        model = OpenAIModel("m", base_url=srv.base_url, api_key="k", temperature=0.6, top_p=0.9, max_tokens=300,
                            seed=7, backoff_s=0.01)  # fmt: skip
        run_eval(_cfg(tmp_path, [d], modes=["sandbox", "vanilla"]), model, model_name="m")
        bodies, url = srv.requests, srv.base_url
    assert bodies[0]["max_tokens"] == 1  # the preflight
    sent = [{k: b.get(k) for k in ("temperature", "top_p", "max_tokens", "seed")} for b in bodies[1:]]
    assert sent == [{"temperature": 0.6, "top_p": 0.9, "max_tokens": 300, "seed": 7}] * 3
    recs = _records(tmp_path)
    van = recs["vanilla/parity/q/0"]
    assert van["finish_reason"] == "length" and van["truncated"] is True
    assert recs["sandbox/parity/q/0"]["truncated"] is False
    for rec in recs.values():
        assert rec["sampling"] == {"temperature": 0.6, "top_p": 0.9, "max_tokens": 300, "seed": 7, "extra_body": None}
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["settings"]["model"]["sampling"]["temperature"] == 0.6
    assert run["settings"]["model"]["endpoint"] == url + "/"


def test_a_vanilla_reply_cut_by_the_budget_is_flagged(tmp_path: Path) -> None:
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.task import Task

    cut = AssistantMessage(content="Let me think step by step about", tool_calls=[], finish_reason="length")
    res = run_task(Task(id="t", query="q"), FakeModel([cut]), mode="vanilla", output_dir=tmp_path)
    assert res.finish_reason == "length" and res.truncated_replies == 1


# -- 5. failures are loud ----------------------------------------------------------------------------
def test_a_wrong_key_stops_before_any_task(tmp_path: Path) -> None:
    d = _domain("keys", [("q", "1"), ("r", "2")])
    with FakeOpenAIServer([FakeOpenAIServer.error(401, "Incorrect API key provided")]) as srv:
        model = OpenAIModel("m", base_url=srv.base_url, api_key="wrong", backoff_s=0.01)
        with pytest.raises(ModelError, match="preflight of the model.*HTTP 401.*no task was run"):
            run_eval(_cfg(tmp_path, [d]), model, model_name="m")
        assert len(srv.requests) == 1  # not retried
    assert _records(tmp_path) == {}


def test_cli_wrong_key_exits_3_with_the_reason(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "question": "1+1?", "answer": "2"}) + "\n")
    with FakeOpenAIServer([FakeOpenAIServer.error(401, "Incorrect API key provided")]) as srv:
        r = CliRunner().invoke(main, ["eval", "--model", "m", "--base-url", srv.base_url, "--tasks", str(tasks),
                                      "--output-dir", str(tmp_path / "o"), "--no-progress"])  # fmt: skip
    assert r.exit_code == 3, r.output
    assert "HTTP 401: Incorrect API key provided" in r.output and "API key" in r.output


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_unreachable_endpoint_fails_fast(tmp_path: Path) -> None:
    d = _domain("down", [("q", "1")])
    model = OpenAIModel("m", base_url=f"http://127.0.0.1:{_closed_port()}/v1", api_key="k")
    t0 = time.monotonic()
    with pytest.raises(ModelError, match="could not connect"):
        run_eval(_cfg(tmp_path, [d]), model, model_name="m")
    assert time.monotonic() - t0 < 10  # (was ~35 s of retries per task)


def test_unrecoverable_errors_are_not_retried() -> None:
    with pytest.raises(ModelError, match="not an http"):
        OpenAIModel("m", base_url="notaurl", api_key="k")
    with FakeOpenAIServer([FakeOpenAIServer.error(501, "not implemented")] * 3) as srv:
        m = OpenAIModel("m", base_url=srv.base_url, api_key="k", backoff_s=0.01)
        with pytest.raises(ModelError, match="501.*not retried"):
            m.complete([{"role": "user", "content": "hi"}], [])
        assert len(srv.requests) == 1
    with FakeOpenAIServer([FakeOpenAIServer.error(401, "no key")]) as srv:
        m = OpenAIModel("m", base_url=srv.base_url, api_key=None, backoff_s=0.01)
        with pytest.raises(ModelError) as info:
            m.complete([{"role": "user", "content": "hi"}], [])
        assert "no API key is set" in str(info.value)


def test_cli_errored_tasks_exit_4_then_a_resume_retries_them(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("".join(json.dumps({"id": i, "question": f"q {i}?", "answer": "2"}) + "\n" for i in "ab"))
    args = ["eval", "--model", "m", "--tasks", str(tasks), "--mode", "vanilla", "--workers", "1",
            "--output-dir", str(tmp_path / "o"), "--no-progress"]  # fmt: skip
    bad = FakeOpenAIServer.error(400, "this model cannot answer that")
    with FakeOpenAIServer([FakeOpenAIServer.text_reply("OK"), bad, FakeOpenAIServer.text_reply("2")]) as srv:
        r = CliRunner().invoke(main, [*args, "--base-url", srv.base_url])
        assert r.exit_code == EXIT_INCOMPLETE, r.output
        assert "1 task(s) ended in an error" in r.output and "this model cannot answer that" in r.output
        assert "run the same command again" in r.output
        srv.push(FakeOpenAIServer.text_reply("OK"), FakeOpenAIServer.text_reply("2"))
        r = CliRunner().invoke(main, [*args, "--base-url", srv.base_url])
        assert len(srv.requests) == 5  # then: the preflight and the one errored task
    assert r.exit_code == 0, r.output
    assert "1 tasks run, 1 already done" in r.output


def test_a_domain_without_data_is_skipped_loudly(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "question": "1+1?", "answer": "2"}) + "\n")
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--tasks", str(tasks), "--domains", "math",
                                  "--data-dir", str(tmp_path / "nothing"), "--mode", "vanilla",
                                  "--output-dir", str(tmp_path / "o"), "--no-progress"])  # fmt: skip
    assert r.exit_code == EXIT_INCOMPLETE, r.output
    assert "domain math skipped, no data" in r.output and "sandboxlite data pull math" in r.output
    assert len(read_results(tmp_path / "o" / "results.jsonl")) == 1  # the other domain ran


# -- 6. resume is safe --------------------------------------------------------------------------------
def test_resume_with_other_settings_refuses_and_names_them(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "question": "1+1?", "answer": "2"}) + "\n")
    base = ["eval", "--model", "scripted", "--tasks", str(tasks), "--rootfs", "lean", "--output-dir",
            str(tmp_path / "o"), "--no-progress", "--workers", "1"]  # fmt: skip
    assert CliRunner().invoke(main, base).exit_code == 0
    r = CliRunner().invoke(main, [*base, "--max-steps", "10", "--seed", "3"])
    assert r.exit_code == 2, r.output
    assert "limits.max_steps: 50 -> 10" in r.output and "seed: 0 -> 3" in r.output
    assert "--resume-anyway" in r.output and "--output-dir" in r.output
    r = CliRunner().invoke(main, [*base, "--max-steps", "10", "--resume-anyway"])
    assert r.exit_code == 0, r.output
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["settings"]["limits"]["max_steps"] == 10
    assert run["history"][0]["settings"]["limits"]["max_steps"] == 50  # nothing claimed, nothing lost


def test_the_data_is_part_of_the_settings(tmp_path: Path) -> None:
    rows = [("q", "1")]
    d = _domain("dataset", rows)
    run_eval(_cfg(tmp_path, [d], modes=["vanilla"]), ScriptedModel("1"), model_name="s")
    rows[0] = ("q", "2")  # the same ids, other golds
    with pytest.raises(ConfigError, match="data.dataset: sha256:"):
        run_eval(_cfg(tmp_path, [d], modes=["vanilla"]), ScriptedModel("1"), model_name="s")


def test_default_output_dir_has_the_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    d = _domain("fp", [("q", "1")])
    cfg = EvalConfig(domains=[d], data_dir=tmp_path, modes=["vanilla"])
    res = run_eval(cfg, ScriptedModel("1"), model_name="s")
    assert res.out_dir == Path("eval-output") / f"s-{res.fingerprint}" and len(res.fingerprint) == 8
    assert {r["fingerprint"] for r in read_results(res.out_dir / "results.jsonl").values()} == {res.fingerprint}
    other = run_eval(EvalConfig(domains=[d], data_dir=tmp_path, modes=["vanilla"], max_steps=9), ScriptedModel("1"),
                     model_name="s")  # fmt: skip
    assert other.out_dir != res.out_dir and other.ran == 1


# -- 8. a report to publish ---------------------------------------------------------------------------
def test_summary_opens_with_the_table_and_draws_the_chart(tmp_path: Path) -> None:
    a, b = _domain("alpha", [("1", "1"), ("2", "2")]), _domain("beta", [("1", "1"), ("2", "9")])
    run_eval(_cfg(tmp_path, [a, b], modes=["sandbox", "vanilla"], max_steps=4), ScriptedModel("1"), model_name="s")
    md = (tmp_path / "out" / "summary.md").read_text()
    table = md.index("| domain | sandbox | vanilla | sandbox - vanilla |")
    assert table < md.index("## Details")
    assert "| alpha | 50.0 [0.0, 100.0] | 50.0 [0.0, 100.0] | +0.0 [+0.0, +0.0] |" in md and "| **mean** | 50.0 | 50.0 | +0.0 |" in md
    assert "sandboxlite" in md.split("\n")[2] and "fingerprint" in md.split("\n")[2]
    assert "Sampling: none (deterministic)" in md and "Scoring: strict" in md
    png = tmp_path / "out" / "summary.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "![sandbox against vanilla](summary.png)" in md


def test_eta_text() -> None:
    assert _eta(None) == "ETA -" and _eta(75) == "ETA 1m15s" and _eta(3 * 3600 + 120) == "ETA 3h02m"


# -- 9. the paper's CLI habits ------------------------------------------------------------------------
def test_paper_names_and_llm_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ifb = tmp_path / "data" / "instruct_follow"
    ifb.mkdir(parents=True)
    first = (SHARED / "instruct_follow" / "IFBench_test.jsonl").read_text().splitlines()[0]
    (ifb / "IFBench_test.jsonl").write_text(first + "\n")
    with FakeOpenAIServer([FakeOpenAIServer.text_reply("OK"), FakeOpenAIServer.text_reply("hi there")]) as srv:
        monkeypatch.setenv("LLM_NAME", "served-model")
        monkeypatch.setenv("LLM_BASE_URL", srv.base_url)
        monkeypatch.setenv("LLM_API_KEY", "sk-from-env")
        monkeypatch.setenv("LLM_TEMPERATURE", "0.3")
        monkeypatch.setenv("LLM_NUM_WORKERS", "1")
        r = CliRunner().invoke(main, ["eval", "--task", "instruct_follow", "--mode", "llm", "--data-dir",
                                      str(tmp_path / "data"), "--output-dir", str(tmp_path / "o"), "--no-progress"])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert srv.requests[1]["model"] == "served-model" and srv.requests[1]["temperature"] == 0.3
        assert srv.headers[1]["authorization"] == "Bearer sk-from-env"
    rec = next(iter(read_results(tmp_path / "o" / "results.jsonl").values()))
    assert rec["domain"] == "instruct" and rec["mode"] == "vanilla" and rec["error"] is None
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert run["selection"]["workers"] == 1


def test_no_score_is_asked_of_the_scorer_without_a_response(tmp_path: Path) -> None:
    asked = []

    def score(item, response, judge=None):
        asked.append(response)
        return Score(1.0, response)

    d = register_domain(Domain("asked", "t", lambda _d: [EvalItem("q", "asked", "q", {})], score), replace=True)
    run_eval(_cfg(tmp_path, [d]), FakeModel([TOOL_CALL_120] * 3), model_name="fake")
    assert asked == [] and next(iter(_records(tmp_path).values()))["score"] == 0.0
