"""End to end over the built-in domains: a few real items each, both modes, a scripted model that
knows the answers (real sandboxes, the real data in ../shared/eval-data)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandboxlite.agent.scripted import ScriptedModel
from sandboxlite.eval import EvalConfig, get_domain, run_eval
from sandboxlite.eval.runner import read_results, select
from sandboxlite.eval.scoring.mathans import extract_boxed

DATA = Path(os.environ.get("SANDBOXLITE_EVAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "eval-data"))
LIMIT = 2


def gold_response(item) -> str:
    ref = item.reference
    if item.domain == "math":
        return f"The answer is \\boxed{{{ref['answer']}}}."
    if item.domain == "physics":
        answers = extract_boxed(ref["answers"]) if isinstance(ref["answers"], str) else ref["answers"]
        return "\\boxed{" + ", ".join(answers) + "}"
    if item.domain == "qed":
        return f"The passage says so.\nAnswer: {ref['answers'][0]}"
    if item.domain in ("chem", "biomed", "dream"):
        return f"Having weighed the options, the answer is \\boxed{{{ref['label']}}}."
    if item.domain == "long_context":
        return f"Answer: {ref['answer']}"
    raise AssertionError(item.domain)


@pytest.mark.parametrize("name", ["math", "physics", "chem", "biomed", "long_context", "dream", "qed"])
def test_domain_end_to_end_both_modes(name: str, tmp_path: Path) -> None:
    domain = get_domain(name)
    items = select(domain.load(DATA), limit=LIMIT, ids=None, seed=0, domain=name)
    by_query = {i.query: gold_response(i) for i in items}

    def oracle(messages: list[dict]) -> str:
        return next(ans for q, ans in by_query.items() if q in messages[1]["content"])

    cfg = EvalConfig(domains=[name], data_dir=DATA, out_dir=tmp_path / "out", modes=["sandbox", "vanilla"],
                     limit=LIMIT, workers=2, rootfs="lean")  # fmt: skip
    result = run_eval(cfg, ScriptedModel(oracle), model_name="oracle")
    records = list(read_results(cfg.out_dir / "results.jsonl").values())
    assert len(records) == 2 * LIMIT
    for r in records:
        assert r["error"] is None, r
        assert r["score"] == 1.0, r  # the oracle's answer is right in both modes
    cell = result.summary["domains"][name]
    assert cell["sandbox"]["mean"] == 1.0 and cell["vanilla"]["mean"] == 1.0
    assert cell["sandbox_minus_vanilla"]["mean"] == 0.0
    if name == "long_context":
        assert cell["sandbox"]["approximate"]  # no judge: labelled approximate
        sb = next(r for r in records if r["mode"] == "sandbox")
        traj = json.loads((cfg.out_dir / sb["trajectory"]).read_text())
        assert "documents" in traj["steps"][0]["observations"][0]["output"]  # files in /testbed/documents
        assert "/testbed/documents/doc_" in traj["messages"][1]["content"]  # listed, not inlined
        va = next(r for r in records if r["mode"] == "vanilla")
        vtraj = json.loads((cfg.out_dir / va["trajectory"]).read_text())
        first_doc = next(iter(items[0].files.values())) if va["id"] == items[0].id else next(iter(items[1].files.values()))
        assert first_doc[:200] in vtraj["messages"][1]["content"]  # inlined in vanilla mode


def test_wrong_answers_score_zero(tmp_path: Path) -> None:
    cfg = EvalConfig(domains=["math", "chem"], data_dir=DATA, out_dir=tmp_path / "out", modes=["vanilla"], limit=3,
                     workers=2)  # fmt: skip
    result = run_eval(cfg, ScriptedModel("\\boxed{Z}"), model_name="wrong")
    assert result.summary["domains"]["math"]["vanilla"]["mean"] == 0.0
    assert result.summary["domains"]["chem"]["vanilla"]["mean"] == 0.0
    recs = read_results(cfg.out_dir / "results.jsonl").values()
    assert all(r["error"] is None for r in recs)


def test_instruct_domain_runs_every_checker_path(tmp_path: Path) -> None:
    """IFBench through the runner: scored strict and loose, per-instruction details kept."""
    cfg = EvalConfig(domains=["instruct"], data_dir=DATA, out_dir=tmp_path / "out", modes=["sandbox", "vanilla"],
                     limit=3, workers=2, rootfs="lean")  # fmt: skip
    result = run_eval(cfg, ScriptedModel("A short reply."), model_name="plain")
    cell = result.summary["domains"]["instruct"]
    for mode in ("sandbox", "vanilla"):
        assert cell[mode]["errors"] == 0 and cell[mode]["items"] == 3
        assert set(cell[mode]["metrics"]) >= {"loose", "instruction_strict", "instruction_loose"}
    for r in read_results(cfg.out_dir / "results.jsonl").values():
        assert r["details"]["instructions"], r


def test_every_domain_loads_the_real_data() -> None:
    counts = {n: len(get_domain(n).load(DATA)) for n in ("math", "physics", "chem", "biomed", "long_context", "instruct")}
    assert counts == {"math": 30, "physics": 5520, "chem": 304, "biomed": 2450, "long_context": 100, "instruct": 300}
    assert len(get_domain("dream").load(DATA)) == 2041
    qed = get_domain("qed").load(DATA)
    assert len(qed) == 1355 and len({i.id for i in qed}) == 1355
    physics = select(get_domain("physics").load(DATA), limit=26, ids=None, seed=0, domain="physics")
    assert len({i.stratum for i in physics}) == 13  # a sample is spread over all 13 subjects


class _Judge:
    """A judge model that calls every answer correct when it names the reference, else incorrect."""

    name = "judge"

    def complete(self, messages: list[dict], tools: list[dict]):
        from sandboxlite.agent.model import AssistantMessage

        text = messages[-1]["content"]
        ok = "Paris" in text.split("Reference", 1)[0] if "Reference" in text else False
        return AssistantMessage(content=f"Reasoning...\nVERDICT: {'CORRECT' if ok else 'INCORRECT'}", tool_calls=[],
                                usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})  # fmt: skip


def test_long_context_with_a_judge_is_not_approximate(tmp_path: Path) -> None:
    from sandboxlite.eval.scoring.judge import LLMJudge

    verdicts = []

    class Counting(_Judge):
        def complete(self, messages, tools):
            reply = super().complete(messages, tools)
            verdicts.append(reply.content)
            return reply

    cfg = EvalConfig(domains=["long_context"], data_dir=DATA, out_dir=tmp_path / "out", modes=["vanilla"], limit=2,
                     workers=1)  # fmt: skip
    result = run_eval(cfg, ScriptedModel("Paris"), judge=LLMJudge(Counting()), model_name="m")
    cell = result.summary["domains"]["long_context"]["vanilla"]
    assert len(verdicts) == 2 and not cell["approximate"]
    for r in read_results(cfg.out_dir / "results.jsonl").values():
        assert r["details"]["judge"]["raw"].endswith("VERDICT: " + ("CORRECT" if r["score"] == 1.0 else "INCORRECT"))
        assert "rule_based" in r["metrics"]


def test_physics_judge_verdict_is_stored_beside_the_rule_based_score(tmp_path: Path) -> None:
    from sandboxlite.eval.scoring.judge import LLMJudge

    class AlwaysIncorrect:
        name = "judge"

        def complete(self, messages, tools):
            from sandboxlite.agent.model import AssistantMessage

            return AssistantMessage(content="VERDICT: INCORRECT", tool_calls=[])

    items = select(get_domain("physics").load(DATA), limit=2, ids=None, seed=0, domain="physics")
    by_query = {i.query: gold_response(i) for i in items}
    cfg = EvalConfig(domains=["physics"], data_dir=DATA, out_dir=tmp_path / "out", modes=["vanilla"], limit=2,
                     workers=1)  # fmt: skip
    oracle = ScriptedModel(lambda m: next(a for q, a in by_query.items() if q in m[1]["content"]))
    result = run_eval(cfg, oracle, judge=LLMJudge(AlwaysIncorrect()), model_name="m")
    cell = result.summary["domains"]["physics"]["vanilla"]
    assert cell["mean"] == 1.0 and cell["metrics"]["judge"] == 0.0  # the rule-based score stays primary
    for r in read_results(cfg.out_dir / "results.jsonl").values():
        assert r["details"]["judge"]["correct"] is False
