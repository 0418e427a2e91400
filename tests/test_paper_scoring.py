"""``--scoring paper`` against the paper's own reward functions (PyPI ``llm-in-sandbox`` 0.2.0, the
``[paper]`` extra): an agreement table over generated answer variants and the hand-graded rows of
tests/test_scoring_table.py.  sandboxlite's re-implementation must agree with the package on every
row; where the strict scorer (the default) disagrees with the package, ``STRICT_DIFFERS`` says who
is right and why, and the test fails when a disagreement is unexplained or an explanation is stale.

Run with ``-s`` to see the table."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
from llm_in_sandbox.benchmark.biomed.reward import compute_score as package_biomed
from llm_in_sandbox.benchmark.chem.reward import compute_score as package_chem
from llm_in_sandbox.benchmark.instruct_pretrain.reward import compute_score as package_pretrain
from llm_in_sandbox.benchmark.math.reward import compute_score as package_math
from llm_in_sandbox.benchmark.physics import judge as package_judge

from sandboxlite.agent.model import FakeModel
from sandboxlite.errors import ConfigError
from sandboxlite.eval import EvalConfig, run_eval
from sandboxlite.eval.runner import read_results
from sandboxlite.eval.scoring import paper
from sandboxlite.eval.scoring.choice import score_choice
from sandboxlite.eval.scoring.ifbench import score_ifbench
from sandboxlite.eval.scoring.longctx import score_long_context
from sandboxlite.eval.scoring.mathans import score_math

from . import test_scoring_table as graded

TOOL_CALL = '{"name": "execute_bash", "arguments": {"command": "python3 -c \'print(%s)\'", "timeout": 120}}'

# -- generated answer variants -------------------------------------------------------------------
MATH_GOLDS = [("70", "71"), ("204", "240"), ("-3", "3"), ("0", "1"), ("1000", "100"),
              ("\\frac{1}{2}", "\\frac{1}{3}"), ("2\\sqrt{2}", "\\sqrt{2}"), ("\\frac{9}{4}", "2.25")]  # fmt: skip
MATH_TEMPLATES = {
    "boxed": "\\boxed{%(g)s}",
    "boxed_wrong": "\\boxed{%(w)s}",
    "bare": "%(g)s",
    "bare_newline": "%(g)s\n",
    "dollars": "$%(g)s$",
    "answer_is": "The answer is %(g)s.",
    "answer_line": "Answer: %(g)s",
    "prose_then_box": "We first guessed %(w)s, but the sum is \\boxed{%(g)s}.",
    "last_box_right": "\\boxed{%(w)s} is wrong; the answer is \\boxed{%(g)s}",
    "last_box_wrong": "\\boxed{%(g)s}? No: \\boxed{%(w)s}",
    "unclosed_last_box": "\\boxed{%(g)s} and then \\boxed{%(w)s",
    "box_equation": "\\boxed{x = %(g)s}",
    "box_text": "\\boxed{\\text{%(g)s}}",
    "box_units": "\\boxed{%(g)s \\text{ cm}}",
    "box_period": "\\boxed{%(g)s}.",
    "display": "\\[\\boxed{%(g)s}\\]",
    "think_wrong_then_box": "<think>maybe %(w)s</think>\n\\boxed{%(g)s}",
    "steps_then_value": "Step 1: 2 + 2 = 4\nStep 2: multiply\nSo the value is %(g)s",
    "value_then_check": "%(g)s\n(check: 2 + 2 = 4)",
    "tool_call": TOOL_CALL % "%(g)s",
    "two_answers": "It is either %(w)s or %(g)s.",
    "empty_box": "\\boxed{}",
    "no_answer": "I could not solve this.",
}

CHOICE_GOLDS = [("B", "D", "ABCD"), ("A", "C", "ABCD"), ("D", "A", "ABCD"), ("H", "B", "ABCDEFGHIJ"),
                ("C", "J", "ABCDEFGHIJ")]  # fmt: skip
CHOICE_TEMPLATES = {
    "letter": "%(g)s",
    "lower": "%(gl)s",
    "letter_wrong": "%(w)s",
    "boxed": "\\boxed{%(g)s}",
    "boxed_text": "\\boxed{\\text{%(g)s}}",
    "boxed_option_text": "\\boxed{%(g)s. the second option}",
    "answer_colon": "Answer: %(g)s",
    "answer_fullwidth": "答案 answer：%(g)s",
    "answer_bold": "**Answer:** %(g)s",
    "json": '{"answer": "%(g)s"}',
    "json_reason": '{"answer": "%(g)s", "reason": "%(w)s is a distractor"}',
    "json_other_key": '{"final_answer": "%(g)s"}',
    "answer_is": "The answer is %(g)s.",
    "choice_is": "The correct choice is %(g)s",
    "answer_is_paren": "The answer is (%(g)s).",
    "answer_is_article": "The answer is a tricky one, but %(g)s.",
    "paren": "(%(g)s)",
    "option": "Option %(g)s",
    "is_correct": "%(g)s is correct.",
    "letter_dot_text": "%(g)s. because the others fail",
    "answer_then_expl": "Answer: %(g)s\n\nOption %(w)s is wrong because it ignores friction.",
    "expl_then_answer": "%(w)s looks tempting, but the answer is %(g)s.",
    "pick_then_mention": "I pick %(g)s; %(w)s is wrong.",
    "boxed_then_note": "\\boxed{%(g)s}\nNote: option %(w)s is wrong.",
    "answer_boxed": "Answer: \\boxed{%(g)s}",
    "its": "I think it's %(g)s",
    "final_bold": "Final: **%(g)s**",
    "no_letter": "I am not sure.",
    "tool_call": '{"name": "execute_bash", "arguments": {"command": "echo %(g)s"}}',
    "both_letters": "%(w)s or %(g)s",
}

QED_CASES = [  # (id, response, gold)
    ("exact", "1997", "1997"),
    ("in_prose", "It was released in 1997.", "1997"),
    ("answer_line", "The passage says so.\nAnswer: Los Angeles", "Los Angeles"),
    ("paraphrase", "the city of LA", "Los Angeles"),
    ("stemmed", "running dogs", "the dog runs"),
    ("wrong", "1998", "1997"),
    ("math_equal", "\\boxed{0.5}", "1/2"),
    ("long_span", "George Washington was the first president of the United States.",
     "George Washington"),  # fmt: skip
    ("no_answer", "I don't know.", "Marie Curie"),
]

# Where the strict scorer (the default) disagrees with the paper's rules: who is right, and why.
# Keys are (domain, case); "table:<id>" cases are hand-graded rows of tests/test_scoring_table.py.
STRICT_DIFFERS: dict[tuple[str, str], str] = {
    # math
    ("math", "answer_line"): "strict is right: 'Answer: 70' states the answer; the paper wraps the whole text in "
    "\\boxed{} and math-verify cannot parse 'Answer: 70' as one expression",
    ("math", "table:final-answer-line"): "strict is right: the same as answer_line ('Final answer: 70')",
    ("math", "steps_then_value"): "strict is right: an unboxed final value after the steps is the answer (the "
    "strict fallback lets math-verify pick the last expression); the paper parses the whole text as one expression",
    ("math", "box_text"): "strict is right: \\boxed{\\text{2\\sqrt{2}}} holds the gold; the paper's math-verify "
    "reads \\text{...} as a word",
    ("math", "table:open-last-box-right"): "strict is right: a reply cut inside its final box, '\\boxed{70', gives "
    "70; the paper falls back to the whole text, where the earlier \\boxed{71} wins",
    ("math", "table:gold-as-int"): "strict is right: an int gold (70) is an AIME answer; the paper's reward "
    "concatenates it as a string and its exception handler scores 0 (the runner passes str golds, so only a "
    "direct call hits this)",
    ("math", "table:tool-call-json"): "strict is right: a tool call is not an answer; the paper's math-verify finds "
    "120 (the call's timeout) in it (the runner never scores a tool call in either mode)",
    ("math", "table:tool-call-tags"): "strict is right: as table:tool-call-json, in <tool_call> tags",
    # multiple choice
    ("choice", "pick_then_mention"): "strict is right: 'I pick B; D is wrong.' chooses B; the paper takes the "
    "last standalone letter of the text (D)",
    ("choice", "its"): "the paper is right: 'I think it's B' chooses B; strict reads no letter from a bare "
    "in-prose mention without an answer keyword (a deliberate choice, see table:i-as-word; it costs such answers)",
    ("choice", "table:i-as-word"): "a judgement call, graded 0: 'I think it is F.' (strict: no stated answer); "
    "the paper reads the last letter, F",
    ("choice", "both_letters"): "strict is right: 'D or B' hedges between two options; the paper takes the last one",
    ("choice", "answer_is_article"): "strict gives 0 and the paper 1 only when the gold is A: the paper's "
    "'answer is X' rule reads the article in 'The answer is a tricky one' as the letter A (any other gold "
    "scores 0 under both); the paper is right here by accident",
    ("choice", "tool_call"): "strict is right: a tool call ('echo B') chooses nothing; the paper takes its last "
    "standalone letter",
    ("choice", "table:tool-call"): "strict is right: as tool_call",
    ("choice", "table:bold-answer-then-option"): "strict is right: '**Answer:** B' then an explanation that "
    "mentions D; the paper's 'answer:' rule does not allow the '**' and its last-letter rule picks D",
    ("choice", "table:answer-a-word"): "strict is right: 'Answer: A reaction occurs, so the answer is C.' "
    "chooses C; the paper's 'answer: X' rule reads the article A",
    ("choice", "table:self-correction"): "strict is right: 'The answer is B. Wait, ...: the answer is C.' ends on "
    "C; the paper takes the first 'answer is'",
    ("choice", "table:box-beats-prose"): "strict is right: 'The answer is B... \\boxed{C}': the box is the final "
    "answer; the paper's 'answer is' rule comes before its box rule",
    ("choice", "table:not-a"): "strict is right: 'not A' rejects A; the paper reads the letter",
    ("choice", "table:a-is-wrong"): "strict is right: 'A is wrong.' rejects A; the paper reads the letter",
    ("choice", "table:letter-outside-set"): "strict is right: E is no option of an A-D question (a broken item); "
    "the paper's exact-match rule accepts it",
    ("choice", "table:gold-paren"): "strict is right: a gold written '(B)' is the letter B; the paper compares "
    "'B' with '(B)' as strings",
    # open-ended (QED under the paper's instruct_pretrain rule: ROUGE-L F1, a similarity, not a verdict)
    ("qed", "answer_line"): "strict is right: the final 'Answer: Los Angeles' is the reference span; ROUGE-L over "
    "the whole reply gives 0.44",
    ("qed", "long_span"): "strict is right: the reply contains the span (George Washington); ROUGE-L gives 0.33",
    ("qed", "stemmed"): "strict is right: 'running dogs' is not the answer 'the dog runs'; ROUGE-L with "
    "stemming gives partial credit (0.4)",
    ("qed", "math_equal"): "the paper is right: \\boxed{0.5} equals 1/2; strict's span match compares text "
    "(QED's answers are text spans, so this case does not arise there)",
}


@dataclass
class Row:
    domain: str
    case: str
    response: str
    gold: str
    letters: str = ""
    human: float | None = None  # the grader's verdict (hand-graded rows only)


def _math_rows() -> list[Row]:
    rows = [Row("math", name, t % {"g": g, "w": w}, g) for g, w in MATH_GOLDS for name, t in MATH_TEMPLATES.items()]
    rows += [Row("math", f"table:{i}", r, g, human=h) for i, r, g, h in graded.MATH]
    return rows


def _choice_rows() -> list[Row]:
    rows = [Row("choice", name, t % {"g": g, "gl": g.lower(), "w": w}, g, letters)
            for g, w, letters in CHOICE_GOLDS for name, t in CHOICE_TEMPLATES.items()]  # fmt: skip
    rows += [Row("choice", f"table:{i}", r, g, letters, human=h) for i, r, g, letters, h in graded.CHOICE]
    return rows


def _verdicts(row: Row) -> tuple[float, float, float]:
    """(package, sandboxlite paper, sandboxlite strict) scores of one row."""
    if row.domain == "math":
        return package_math(row.response, row.gold), paper.paper_math(row.response, row.gold).value, \
            score_math(row.response, row.gold).value  # fmt: skip
    if row.domain == "choice":
        pkg = package_chem(row.response, row.gold)
        assert package_biomed(row.response, row.gold) == pkg  # the package's two rules are one
        return pkg, paper.paper_choice(row.response, row.gold).value, \
            score_choice(row.response, row.gold, letters=row.letters).value  # fmt: skip
    pkg = package_pretrain(row.response, row.gold, domain="instruct_pretrain", qa_type="free-form")
    return pkg, paper.paper_open_ended(row.response, [row.gold]).value, score_long_context(row.response, row.gold).value


@pytest.fixture(scope="module")
def table() -> list[tuple[Row, float, float, float]]:
    rows = _math_rows() + _choice_rows() + [Row("qed", i, r, g) for i, r, g in QED_CASES]
    out = [(row, *_verdicts(row)) for row in rows]
    _print_table(out)
    return out


def _print_table(out: list[tuple[Row, float, float, float]]) -> None:
    by_domain: dict[str, list] = defaultdict(list)
    for entry in out:
        by_domain[entry[0].domain].append(entry)
    print("\n\nAgreement with llm-in-sandbox 0.2.0's reward functions")
    print(f"{'domain':8} {'rows':>5} {'paper=package':>14} {'strict=package':>15} {'strict>pkg':>11} {'strict<pkg':>11}"
          f" {'graded':>7} {'strict right':>13} {'paper right':>12}")  # fmt: skip
    for domain, entries in by_domain.items():
        n = len(entries)
        same = sum(abs(p - o) < 1e-9 for _, p, o, _ in entries)
        strict_same = sum(abs(p - s) < 1e-9 for _, p, _, s in entries)
        up = sum(s > p + 1e-9 for _, p, _, s in entries)
        down = sum(s < p - 1e-9 for _, p, _, s in entries)
        graded_rows = [(r, p, s) for r, p, _, s in entries if r.human is not None]
        s_right = sum(s == r.human for r, _, s in graded_rows)
        p_right = sum(p == r.human for r, p, _ in graded_rows)
        print(f"{domain:8} {n:>5} {same:>9}/{n:<4} {strict_same:>10}/{n:<4} {up:>11} {down:>11} {len(graded_rows):>7}"
              f" {s_right:>13} {p_right:>12}")  # fmt: skip
    print("\nstrict and paper differ:")
    for row, pkg, _, strict in out:
        if abs(pkg - strict) > 1e-9:
            human = "" if row.human is None else f" graded {row.human:g}"
            print(f"  {row.domain:6} {row.case:28} gold={row.gold!r:16} paper={pkg:.3g} strict={strict:.3g}{human}"
                  f"  {row.response[:70]!r}")  # fmt: skip


def test_the_paper_rules_agree_with_the_package_on_every_row(table) -> None:
    wrong = [(r.domain, r.case, r.response, r.gold, pkg, ours) for r, pkg, ours, _ in table if abs(pkg - ours) > 1e-9]
    assert not wrong, wrong
    assert len(table) >= 400


def test_every_disagreement_of_the_strict_scorer_is_explained(table) -> None:
    differs = {(r.domain, r.case) for r, pkg, _, strict in table if abs(pkg - strict) > 1e-9}
    unexplained = sorted(differs - set(STRICT_DIFFERS))
    stale = sorted(set(STRICT_DIFFERS) - differs)
    assert not unexplained, f"explain these in STRICT_DIFFERS: {unexplained}"
    assert not stale, f"these no longer differ: {stale}"


# -- the judge (physics, long_context) -----------------------------------------------------------
JUDGE_REPLIES = ["CORRECT", "INCORRECT", "correct", "The answer is CORRECT.", "INCORRECT. Not CORRECT at all",
                 "CORRECT, not INCORRECT", "It is incorrect... actually correct", "no idea", "", "INCORRECTCORRECT",
                 "xCORRECT", "NCORRECT", "<think>INCORRECT?</think> CORRECT", "correctness: INCORRECT"]  # fmt: skip


@pytest.mark.parametrize("reply", JUDGE_REPLIES)
def test_the_judge_verdict_is_read_as_the_package_reads_it(reply: str) -> None:
    assert paper.judge_verdict(reply) == package_judge.extract_verdict(reply)


@pytest.mark.parametrize("answer", ["\\boxed{9.8}", "<think>hm</think>\n\\boxed{3 m/s}", "</think>", "plain"])
def test_the_judge_prompt_is_the_packages(answer: str) -> None:
    assert paper.judge_prompt("What is g?", "9.8 m/s^2", answer) == package_judge.create_judge_prompt(
        "What is g?", "9.8 m/s^2", answer)  # fmt: skip


def test_the_judge_score_is_the_mean_of_four_verdicts() -> None:
    judge = FakeModel(["CORRECT", "INCORRECT", "I say CORRECT", "hmm"])
    score = paper.paper_judged(judge, "q", "\\boxed{1}", "1")
    assert score.value == 0.5 and score.details["verdicts"] == ["CORRECT", "INCORRECT", "CORRECT", "UNKNOWN"]
    assert [m[-1]["content"] for m in judge.calls] == [paper.judge_prompt("q", "1", "\\boxed{1}")] * 4


# -- instruction following: the paper's five loose variants -----------------------------------
def test_the_paper_loose_rule_with_sandboxlites_checkers() -> None:
    """Five variants (IFEval's loose has eight: it also strips '*' from the cut ones); every
    instruction on some variant; an instruction id without a checker scores 0 (as the paper's)."""
    assert paper.paper_variants("a\n*b*\nc") == ["a\n*b*\nc", "a\nb\nc", "*b*\nc", "a\n*b*", "*b*"]
    ids, kw = ["words:alphabet"], [{}]
    assert paper.paper_ifbench("Apple banana cherry", ids, kw, environ={}).value == 1.0
    assert paper.paper_ifbench("Sure, here it is:\nApple banana cherry", ids, kw, environ={}).value == 1.0
    assert paper.paper_ifbench("Sure, here:\nApple banana cherry\nHope it helps", ids, kw, environ={}).value == 1.0
    assert paper.paper_ifbench("Apple cherry banana", ids, kw, environ={}).value == 0.0
    two = paper.paper_ifbench("Apple banana cherry", ids + ["change_case:english_lowercase"], kw + [{}], environ={})
    assert two.value == 0.0 and two.details["instructions"] == {"words:alphabet": True,
                                                                "change_case:english_lowercase": False}
    assert two.details["checkers"] == "sandboxlite"


def test_the_paper_rules_use_ifbench_itself_when_its_clone_is_there(tmp_path: Path) -> None:
    """IFBENCH_PATH (the paper's setting) pointing at a clone: its registry decides, unflagged."""
    (tmp_path / "instructions_registry.py").write_text(
        "class Always:\n    def __init__(self, iid): self.iid = iid\n"
        "    def build_description(self, **kw): self.kw = kw\n"
        "    def check_following(self, text): return text.startswith('ok')\n"
        "INSTRUCTION_DICT = {'x:always': Always}\n")  # fmt: skip
    score = paper.paper_ifbench("ok then", ["x:always"], [{"n": None}], environ={"IFBENCH_PATH": str(tmp_path)})
    assert score.value == 1.0 and score.details["checkers"] == "IFBench"
    assert paper.paper_ifbench("no", ["x:always"], [{}], environ={"IFBENCH_PATH": str(tmp_path)}).value == 0.0
    unknown = paper.paper_ifbench("ok", ["y:unknown"], [{}], environ={"IFBENCH_PATH": str(tmp_path)})
    assert unknown.value == 0.0 and unknown.details["instructions"] == {"y:unknown": False}


# -- the runner ------------------------------------------------------------------------------
def _math_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "math" / "aime25_math-ai_variant").mkdir(parents=True)
    rows = [{"id": 1, "problem": "What is 69 + 1?", "answer": "70"}, {"id": 2, "problem": "2 + 2?", "answer": "4"}]
    (data / "math" / "aime25_math-ai_variant" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


def test_an_eval_with_paper_scoring_records_the_paper_rule(tmp_path: Path) -> None:
    """Vanilla replies scored by the paper's rule: its unclosed-last-box fallback reads the whole text."""
    data = _math_data(tmp_path)
    cfg = EvalConfig(domains=["math"], data_dir=data, out_dir=tmp_path / "out", modes=["vanilla"], workers=1,
                     scoring="paper")  # fmt: skip
    replies = {"aime25-00": "The answer is 70.", "aime25-01": "\\boxed{4"}
    result = run_eval(cfg, lambda job: FakeModel([replies[job.item.id]]), model_name="fake")
    records = sorted(read_results(tmp_path / "out" / "results.jsonl").values(), key=lambda r: r["id"])
    assert [r["scoring"] for r in records] == ["paper", "paper"]
    assert all(r["details"]["rule"] == "paper:math" for r in records)
    assert [r["score"] for r in records] == [package_math(replies["aime25-00"], "70"),
                                             package_math(replies["aime25-01"], "4")] == [1.0, 1.0]
    assert result.complete


def test_paper_scoring_without_a_judge_refuses_the_judged_domains(tmp_path: Path) -> None:
    data = _math_data(tmp_path)
    (data / "physics" / "ugphysics" / "Optics").mkdir(parents=True)
    (data / "physics" / "ugphysics" / "Optics" / "en.jsonl").write_text(json.dumps(
        {"index": 1, "problem": "p", "answers": "\\boxed{1}", "subject": "Optics", "answer_type": "NV",
         "unit": [None], "solution": ""}) + "\n")  # fmt: skip
    cfg = EvalConfig(domains=["math", "physics"], data_dir=data, out_dir=tmp_path / "out", modes=["vanilla"],
                     workers=1, scoring="paper")  # fmt: skip
    model = FakeModel(["\\boxed{70}"] * 3)
    with pytest.raises(ConfigError, match="grades physics with an LLM judge") as e:
        run_eval(cfg, model, model_name="fake")
    assert "--judge" in (e.value.hint or "") and model.calls == []


def test_cli_paper_scoring_without_a_judge_exits_2_and_says_why(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sandboxlite.cli import main

    data = tmp_path / "data"
    (data / "long_context" / "aa_lcr" / "documents" / "set_00").mkdir(parents=True)
    (data / "long_context" / "aa_lcr" / "documents" / "set_00" / "doc_01.txt").write_text("text")
    (data / "long_context" / "aa_lcr" / "aa_lcr_questions.jsonl").write_text(json.dumps(
        {"id": 0, "question": "q?", "answer": "a", "document_set": "set_00"}) + "\n")  # fmt: skip
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--domains", "long_context", "--data-dir", str(data),
                                  "--scoring", "paper", "--mode", "vanilla", "--output-dir", str(tmp_path / "o"),
                                  "--no-progress"])  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "grades long_context with an LLM judge" in r.output and "--judge MODEL" in r.output
    assert not (tmp_path / "o" / "results.jsonl").exists()
