"""Rule-based scorers (math, physics, multiple choice, long context) and the optional LLM judge:
hand-written tricky cases per domain, then self-consistency on the real eval data."""

from __future__ import annotations

import csv
import json
import math
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from math import comb
from pathlib import Path

import pytest

from sandboxlite.agent.model import AssistantMessage, FakeModel
from sandboxlite.errors import ModelError
from sandboxlite.eval.score import Score
from sandboxlite.eval.scoring import mathans
from sandboxlite.eval.scoring.choice import extract_choice, score_choice
from sandboxlite.eval.scoring.judge import LLMJudge, Verdict, parse_verdict
from sandboxlite.eval.scoring.longctx import extract_final_answer, normalize_answer, rouge_l, score_long_context
from sandboxlite.eval.scoring.mathans import extract_boxed, last_boxed, math_equal, pass_at_k, run_bounded, score_math
from sandboxlite.eval.scoring.physics import (
    _reference_parts,
    parse_answer_types,
    part_equal,
    score_physics,
    split_parts,
    to_number,
)


# -- data ------------------------------------------------------------------------------------------
def _data_root() -> Path:
    root = os.environ.get("SANDBOXLITE_EVAL_DATA")
    return Path(root) if root else Path(__file__).resolve().parents[2] / "shared" / "eval-data"


def _path(rel: str) -> Path:
    path = _data_root() / rel
    if not path.exists():
        pytest.fail(f"eval data not found at {path} (set SANDBOXLITE_EVAL_DATA)")
    return path


def _jsonl(rel: str) -> list[dict]:
    return [json.loads(line) for line in _path(rel).read_text(encoding="utf-8").splitlines() if line.strip()]


_UGPHYSICS: list[dict] = []


def _ugphysics() -> list[dict]:
    if not _UGPHYSICS:
        root = _path("physics/ugphysics")
        for f in sorted(root.glob("*/en.jsonl")):
            _UGPHYSICS.extend(json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip())
    return _UGPHYSICS


# ==================================================================================================
# math
# ==================================================================================================
@pytest.mark.parametrize(
    "text, boxes",
    [
        (r"so \boxed{\frac{1}{2}}.", [r"\frac{1}{2}"]),
        (r"\boxed{\frac{\sqrt{3}}{2}} then \boxed{ 7 }", [r"\frac{\sqrt{3}}{2}", "7"]),
        (r"\boxed{a_{b_{c}}} \fbox{x^{2}}", ["a_{b_{c}}", "x^{2}"]),
        (r"\boxed{\{1, 2\}}", [r"\{1, 2\}"]),  # escaped braces do not close the box
        (r"The answer is \boxed 5.", ["5"]),
        (r"\boxed {42}", ["42"]),
        (r"\boxed{12} and an unfinished \boxed{\frac{1}{", ["12"]),
        (r"\boxedtext{3} is not a box", []),
        ("no box at all", []),
        ("", []),
    ],
)
def test_extract_boxed(text, boxes):
    assert extract_boxed(text) == boxes


def test_last_boxed_takes_the_last_box():
    assert last_boxed(r"first \boxed{12}, on reflection \boxed{70}") == "70"
    assert last_boxed(r"\boxed{\boxed{3}}") == r"\boxed{3}"
    assert last_boxed("nothing here") is None


@pytest.mark.parametrize(
    "pred, gold",
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\tfrac12", "0.5"),
        ("1/2", "0.5"),
        ("1,000", "1000"),
        ("033", "33"),
        ("3.2e3", "3200"),
        (r"2\sqrt{2}", r"\sqrt{8}"),
        ("x = 5", "5"),
        (r"\left(1, 2\right]", "(1, 2]"),
        ("$70$", "70"),
        (r"70 \text{ degrees}", "70"),
    ],
)
def test_math_equal_equivalent(pred, gold):
    assert math_equal(pred, gold)


@pytest.mark.parametrize(
    "pred, gold",
    [("0.5", r"\frac{1}{3}"), ("33", "34"), ("1,001", "1000"), ("", "1"), ("x+1", "x"), (r"\pi", "3.14")],
)
def test_math_equal_different(pred, gold):
    assert not math_equal(pred, gold)


@pytest.mark.parametrize("junk", [r"\frac{", "}{", r"\boxed{", "\\", "((((", "x^" * 200, "\x00", "1" * 5000])
def test_math_equal_never_raises(junk):
    assert math_equal(junk, "1") in (True, False)
    assert math_equal("1", junk) in (True, False)


def test_score_math_last_box_wins():
    s = score_math(r"Maybe \boxed{12}? No: the answer is \boxed{70}.", "70")
    assert (s.value, s.extracted) == (1.0, "70")
    s = score_math(r"\boxed{70} ... actually \boxed{12}", "70")
    assert (s.value, s.extracted) == (0.0, "12")


def test_score_math_leading_zero_and_fraction():
    assert score_math(r"\boxed{033}", "33").value == 1.0
    assert score_math(r"\boxed{\dfrac{1}{2}}", "0.5").value == 1.0
    assert score_math(r"\boxed{\frac{1}{2}}", "1/3").value == 0.0


def test_score_math_without_box_falls_back_to_math_verify():
    s = score_math("Adding them up, the final answer is 588.", "588")
    assert s.value == 1.0 and s.extracted is None
    assert s.details["method"] == "math_verify_fallback" and s.details["fallback"] == "588"
    assert score_math("the final answer is 587", "588").value == 0.0
    s = score_math("I could not solve it.", "588")
    assert s.value == 0.0 and s.details["fallback"] is None


def test_score_math_aime_answers_all_score_when_boxed():
    rows = _jsonl("math/aime25_math-ai_variant/test.jsonl")
    assert len(rows) == 30
    for row in rows:
        gold = str(row["answer"])
        right = score_math(f"Working... so the answer is $\\boxed{{{gold}}}$.", gold)
        assert right.value == 1.0 and right.extracted == gold, row
        padded = score_math(f"\\boxed{{{int(gold):03d}}}", gold)  # AIME answers are written 000-999
        assert padded.value == 1.0, row
        wrong = score_math(f"\\boxed{{{int(gold) + 1}}}", gold)
        assert wrong.value == 0.0, row


def test_pass_at_k():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(10, 8, 3) == 1.0  # every 3-subset holds a correct sample
    for n, c, k in [(10, 3, 2), (20, 5, 4), (16, 1, 8), (100, 37, 10)]:
        assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k), rel=1e-12)
    for bad in [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_math_equal_from_worker_threads():
    """math-verify's signal timeout would raise ValueError off the main thread; ours must not."""
    cases = [(r"\frac{1}{2}", "0.5", True), (r"\sqrt{2}", "2", False), ("x = 5", "5", True), ("1,000", "1000", True)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: math_equal(c[0], c[1]), cases * 3))
    assert results == [c[2] for c in cases] * 3
    with ThreadPoolExecutor(max_workers=2) as pool:
        s = pool.submit(score_physics, r"\boxed{\frac{m g}{\gamma}}", [r"\boxed{\frac{mg}{\gamma}}"], answer_type="EX")
        assert s.result().value == 1.0


def test_run_bounded_in_a_worker_thread_times_out():
    def slow():
        time.sleep(2)
        return "late"

    with ThreadPoolExecutor(max_workers=1) as pool:
        start = time.monotonic()
        result, error = pool.submit(run_bounded, slow, 0.2, "default").result()
    assert (result, "timed out" in error) == ("default", True)
    assert time.monotonic() - start < 1.5
    assert run_bounded(lambda: 1 / 0, 1.0, "default") == ("default", "ZeroDivisionError: division by zero")
    assert run_bounded(lambda: 42, 1.0, None) == (42, None)


@pytest.mark.timeout(0)  # pytest-timeout's own SIGALRM timer would (rightly) make run_bounded avoid the alarm
def test_run_bounded_in_the_main_thread_uses_an_alarm_and_restores_it():
    assert threading.current_thread() is threading.main_thread()
    assert mathans._can_use_alarm()
    handler_before = signal.getsignal(signal.SIGALRM)
    start = time.monotonic()
    result, error = run_bounded(lambda: time.sleep(5), 0.2, "default")
    assert result == "default" and "timed out" in error
    assert time.monotonic() - start < 1.0
    assert signal.getsignal(signal.SIGALRM) is handler_before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.timeout(0)
def test_run_bounded_leaves_a_running_timer_alone():
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 60)
    try:
        assert not mathans._can_use_alarm()
        assert run_bounded(lambda: "ok", 1.0, None) == ("ok", None)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 55 < remaining <= 60
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not fired


# ==================================================================================================
# physics
# ==================================================================================================
@pytest.mark.parametrize(
    "text, value",
    [
        ("3.2", 3.2),
        ("3.2 m/s", 3.2),
        (r"3.2\,\text{m/s}", 3.2),
        (r"3.2 \times 10^{3}", 3200.0),
        (r"3.2\times10^3\ \mathrm{J}", 3200.0),
        ("3.2e3", 3200.0),
        ("3.2E-3", 0.0032),
        (r"-1.9 \times 10^{-4}", -1.9e-4),
        ("10^{9}", 1e9),
        (r"133^\circ", 133.0),
        ("23,000", 23000.0),
        (r"23{,}000", 23000.0),
        ("v_0 = 11.8", 11.8),
        ("−0.593", -0.593),
        (r"5 \times 10^{-3} \mathrm{m}^{-1}", 5e-3),
    ],
)
def test_to_number_reads_numbers_with_units(text, value):
    got = to_number(text)
    assert got is not None and got[0] == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", [r"2\pi", r"\frac{1}{2}", "3/2", "x + 1", r"2^{1/2}", r"\sqrt{2}", "", "m/s"])
def test_to_number_refuses_expressions(text):
    assert to_number(text) is None


def test_to_number_percent_and_strict_units():
    assert to_number(r"5\%") == (5.0, True)
    assert to_number("4 k T") == (4.0, False)  # bare letters read as a unit by default ...
    assert to_number("4 k T", bare_units=False) is None  # ... but not where a symbol is likely
    assert to_number(r"4\,\mathrm{K}", bare_units=False) == (4.0, False)


@pytest.mark.parametrize(
    "text, parts",
    [
        ("3, 5", ["3", "5"]),
        (r"(1, 2], [3, 4)", ["(1, 2]", "[3, 4)"]),
        (r"\left(\frac{a}{b}, \infty\right)", [r"\left(\frac{a}{b}, \infty\right)"]),
        (r"f(x, y), \{1, 2\}", ["f(x, y)", r"\{1, 2\}"]),
        (r"m = 11.8, \, k = 294", ["m = 11.8", "k = 294"]),
        ("23,000, 4", ["23000", "4"]),
        ("", []),
    ],
)
def test_split_parts(text, parts):
    assert split_parts(text) == parts


@pytest.mark.parametrize(
    "answer_type, codes",
    [
        ("NV", ["NV"]),
        ("EX, NV, TF", ["EX", "NV", "TF"]),
        ("\\\nMC", ["MC"]),
        ("NV\n   \nThe final answer is a numerical value represented in LaTeX, so it is classified as NV.", ["NV"]),
        ("EX\n```", ["EX"]),
        (None, []),
        ("", []),
    ],
)
def test_parse_answer_types(answer_type, codes):
    assert parse_answer_types(answer_type) == codes


@pytest.mark.parametrize(
    "response, answers, answer_type, value",
    [
        (r"v = \boxed{3.21 \text{ m/s}}", [r"\boxed{3.2}"], "NV", 1.0),  # within 1%, unit stripped
        (r"\boxed{3.25}", [r"\boxed{3.2}"], "NV", 0.0),  # 1.6% off
        (r"\boxed{3.2e3}", [r"\boxed{3.2 \times 10^{3}}"], "NV", 1.0),
        (r"\boxed{3200\,\mathrm{J}}", [r"\boxed{3.2 \times 10^{3}}"], "NV", 1.0),
        (r"\boxed{2.7 \times 10^{-22}}", [r"\boxed{2.9 \times 10^{-22}}"], "NV", 0.0),  # tiny, not 'close to 0'
        (r"\boxed{0}", [r"\boxed{0}"], "NV", 1.0),
        (r"\boxed{1.414}", [r"\boxed{\sqrt{2}}"], "NV", 1.0),  # symbolic reference evaluated
        (r"\boxed{\sqrt{2}}", [r"\boxed{1.414}"], "NV", 1.0),
        (r"\boxed{5\%}", [r"\boxed{0.05}"], "NV", 1.0),
        (r"\boxed{\frac{g m}{\gamma}}", [r"\boxed{\frac{mg}{\gamma}}"], "EX", 1.0),
        (r"\boxed{4 m T}", [r"\boxed{4 k T}"], "EX", 0.0),  # not "4 with a unit"
        (r"\boxed{\rho_1 = 2 \rho_s}", [r"\boxed{\rho_{1}=2\rho_{s}}"], "EQ", 1.0),
        (r"\boxed{2 \rho_s}", [r"\boxed{\rho_{1}=2\rho_{s}}"], "EQ", 1.0),  # label dropped
        (r"\boxed{\rho_1 = 3 \rho_s}", [r"\boxed{\rho_{1}=2\rho_{s}}"], "EQ", 0.0),
        (r"\boxed{\frac{l}{2}}", [r"\boxed{0.5 l}"], "EX", 1.0),  # 'l' is a symbol, not litres
        (r"\boxed{\text{Yes}}", [r"\boxed{Yes}"], "TF", 1.0),
        (r"\boxed{True}", [r"\boxed{Yes}"], "TF", 1.0),
        (r"\boxed{No}", [r"\boxed{Yes}"], "TF", 0.0),
        (r"\boxed{(B)}", [r"\boxed{b}"], "MC", 1.0),
        (r"\boxed{C}", [r"\boxed{b}"], "MC", 0.0),
        (r"\boxed{(-\infty, 22.81)}", [r"\boxed{(-\infty, 22.8)}"], "IN", 1.0),
        (r"\boxed{(-\infty, 22.8]}", [r"\boxed{(-\infty, 22.8)}"], "IN", 0.0),  # bracket matters
        (r"\boxed{\left[\frac{2}{3}, 1\right)}", [r"\boxed{\left[\frac{2}{3}, 1\right)}"], "IN", 1.0),
        (r"\boxed{[0.6667, 1)}", [r"\boxed{\left[\frac{2}{3}, 1\right)}"], "IN", 1.0),
        ("Answer: 42 J", [r"\boxed{42}"], "NV", 1.0),  # no box: the answer line
        ("I am not sure.", [r"\boxed{42}"], "NV", 0.0),
    ],
)
def test_score_physics_cases(response, answers, answer_type, value):
    s = score_physics(response, answers, answer_type=answer_type)
    assert s.value == value, s.details
    assert s.metrics["parts"] == value


def test_score_physics_multi_part():
    gold = [r"\boxed{3, 5}"]
    in_order = score_physics(r"\boxed{3, 5}", gold, answer_type="NV, NV")
    assert in_order.value == 1.0 and in_order.details["in_order"] is True
    swapped = score_physics(r"\boxed{5, 3}", gold, answer_type="NV, NV")  # parts matched in any order
    assert swapped.value == 1.0 and swapped.details["in_order"] is False
    separate = score_physics(r"(a) \boxed{3.0} and (b) \boxed{5.0\,\text{s}}", gold, answer_type="NV, NV")
    assert separate.value == 1.0 and separate.extracted == r"3.0, 5.0\,\text{s}"
    half = score_physics(r"\boxed{3, 6}", gold, answer_type="NV, NV")
    assert half.value == 0.0 and half.metrics["parts"] == 0.5 and half.details["matched"] == [True, False]
    missing = score_physics(r"\boxed{3}", gold, answer_type="NV, NV")
    assert missing.value == 0.0 and missing.metrics["parts"] == 0.5
    hedged = score_physics(r"\boxed{3, 5, 7}", gold, answer_type="NV, NV")  # an extra guess costs credit
    assert hedged.value == 0.0 and hedged.metrics["parts"] == pytest.approx(2 / 3)
    # the reference as a list of boxes, and as a plain string
    assert score_physics(r"\boxed{3, 5}", [r"\boxed{3}", r"\boxed{5}"]).value == 1.0
    assert score_physics(r"\boxed{3, 5}", r"\boxed{3, 5}").value == 1.0
    # labelled parts and per-part types
    labelled = score_physics(
        r"\boxed{m = 11.8\,\text{kg}, k = 295}", [r"\boxed{m = 11.8, \, k = 294}"], answer_type="NV"
    )
    assert labelled.value == 1.0
    mixed = score_physics(r"\boxed{Yes, 2 a}", [r"\boxed{Yes, 2a}"], answer_type="TF, EX")
    assert mixed.value == 1.0 and mixed.details["types"] == ["TF", "EX"]


def test_score_physics_malformed_reference():
    s = score_physics(r"\boxed{1}", [r"\boxed{}"], answer_type="NV")
    assert s.value == 0.0 and "error" in s.details


def test_ugphysics_self_consistency_sample():
    """Every well-formed reference scored against itself must be right (measured: 300/300)."""
    rows = random.Random(0).sample(_ugphysics(), 300)
    well_formed = [r for r in rows if _reference_parts(r["answers"]) and extract_boxed(r["answers"])]
    assert len(well_formed) >= 290
    right = sum(
        score_physics(r["answers"], [r["answers"]], answer_type=r["answer_type"], unit=r["unit"]).value == 1.0
        for r in well_formed
    )
    assert right / len(well_formed) >= 0.98, f"{right}/{len(well_formed)}"


def test_ugphysics_reference_parts_in_separate_boxes():
    """The same answers written one box per part, with prose around them (measured: 300/300)."""
    rows = random.Random(1).sample(_ugphysics(), 300)
    checked = right = 0
    for r in rows:
        parts = _reference_parts(r["answers"])
        if not parts or not extract_boxed(r["answers"]):
            continue
        checked += 1
        response = "Solution.\n" + "\n".join(f"Part {i + 1}: $\\boxed{{{p}}}$" for i, p in enumerate(parts))
        right += score_physics(response, [r["answers"]], answer_type=r["answer_type"]).value == 1.0
    assert right / checked >= 0.98, f"{right}/{checked}"


def test_ugphysics_numeric_tolerance_on_every_numeric_row():
    """Each all-numeric reference, 0.4% off -> right, 5% off -> wrong (measured: 1413/1413 both)."""
    checked = close_ok = far_ok = 0
    for r in _ugphysics():
        parts = _reference_parts(r["answers"])
        if not parts or set(parse_answer_types(r["answer_type"])) != {"NV"}:
            continue
        numbers = [to_number(p) for p in parts]
        if any(n is None or n[0] == 0 for n in numbers):
            continue
        checked += 1

        def scaled(f: float) -> str:
            return r"\boxed{" + ", ".join(f"{v * f:.6g}" + (r"\%" if pct else "") for v, pct in numbers) + "}"

        close_ok += score_physics(scaled(1.004), r["answers"], answer_type=r["answer_type"]).value == 1.0
        far_ok += score_physics(scaled(1.05), r["answers"], answer_type=r["answer_type"]).value == 0.0
    assert checked > 1000
    assert close_ok == checked and far_ok == checked, (checked, close_ok, far_ok)


def test_ugphysics_symbolic_sample():
    """Single-part EX references: 'ref + 1' must be wrong for all; an equivalent rewrite
    (rhs -> 2 (rhs) / 2) is recognised for most (measured: 11/12, math-verify cannot parse
    reactions, bra-kets or \\propto)."""
    rows = [r for r in random.Random(0).sample(_ugphysics(), 300) if parse_answer_types(r["answer_type"]) == ["EX"]]
    rows = [r for r in rows if len(_reference_parts(r["answers"])) == 1][:12]
    equivalent = 0
    for r in rows:
        ref = _reference_parts(r["answers"])[0]
        lhs, eq, rhs = ref.rpartition("=")
        rewrite = f"{lhs}{eq} 2 \\cdot \\left({rhs}\\right) / 2"
        assert score_physics(f"\\boxed{{{ref} + 1}}", r["answers"], answer_type="EX", timeout_s=2).value == 0.0, ref
        equivalent += score_physics(f"\\boxed{{{rewrite}}}", r["answers"], answer_type="EX", timeout_s=2).value
    assert equivalent >= 0.7 * len(rows), f"{equivalent}/{len(rows)}"


def test_part_equal_types():
    assert part_equal("yes", r"\text{Yes}", "TF")
    assert not part_equal("maybe", "Yes", "TF")
    assert part_equal("d", "D", "MC")
    assert part_equal("3.0", "3", None)
    assert not part_equal("", "3", "NV")


# ==================================================================================================
# multiple choice
# ==================================================================================================
@pytest.mark.parametrize(
    "text, letter",
    [
        ("Answer: B", "B"),
        ("the answer is (b)", "B"),
        ("the answer is b", "B"),
        ("The answer is b.", "B"),
        ("(B)", "B"),
        (r"\boxed{B}", "B"),
        (r"\boxed{\text{B}}", "B"),
        (r"The final answer is $\boxed{(C)}$.", "C"),
        (r"\boxed{D. 5 mol}", "D"),
        ("**B**", "B"),
        ("**Answer:** (C)", "C"),
        ("B. Because the reaction is exothermic.", "B"),
        ("The correct option is C: sodium chloride", "C"),
        ("The answer to this question is C.", "C"),
        ("Option A is correct.", "A"),
        ("The answer is A because its radius is largest.", "A"),
        ("I think a good approach is to compare radii. Answer: D", "D"),
        ("A reaction occurs when heated, so the answer is C.", "C"),
        ("The answer is B. Wait, that ignores entropy. The answer is D.", "D"),
        (r"Initially (A) looked right, but: \boxed{C}", "C"),  # explicit beats a stray mention
        ("Comparing (A) with (B), I prefer (B) here.", "B"),
        ("Answer: A", "A"),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    "text",
    [
        "I think a good approach is to look at each option.",
        "A reaction occurs.",
        "Answer: A reaction occurs when the two are mixed.",
        "The answer is I think unclear.",
        "Answering needs care.",
        "",
    ],
)
def test_extract_choice_refuses_english_words(text):
    assert extract_choice(text, "ABCDEFGHIJ") is None


def test_extract_choice_letters_outside_the_set():
    assert extract_choice("Answer: E") is None
    assert extract_choice("Answer: E", "ABCDE") == "E"
    assert extract_choice("Answer: J", "ABCDEFGHIJ") == "J"
    assert extract_choice("Answer: I", "ABCDEFGHIJ") == "I"
    assert extract_choice("Answer: (i)", "ABCDEFGHIJ") == "I"
    assert extract_choice(r"\boxed{J} then Answer: K", "ABCDEFGHIJ") == "J"


def test_score_choice():
    s = score_choice("so the answer is (b)", "B")
    assert (s.value, s.extracted) == (1.0, "B")
    assert score_choice("Answer: C", "(c)").value == 1.0
    miss = score_choice("no idea", "A")
    assert (miss.value, miss.extracted) == (0.0, None)
    assert score_choice("Answer: J", "J", letters="ABCDEFGHIJ").value == 1.0


def test_mmlu_chemistry_gold_letters_extracted():
    for name in ("college_chemistry_test.csv", "high_school_chemistry_test.csv"):
        with open(_path(f"chem/mmlu_chemistry_fallback/{name}"), newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        assert len(rows) in (100, 204)
        for row in rows:
            question, options, gold = row[0], row[1:5], row[5]
            listing = "\n".join(f"({k}) {v}" for k, v in zip("ABCD", options))
            assert score_choice(f"Answer: {gold}", gold).value == 1.0, row
            response = f"{question}\n{listing}\nLet me weigh each option.\nThe answer is ({gold.lower()})"
            assert score_choice(response, gold).value == 1.0, row


def test_medxpertqa_gold_letters_extracted():
    rows = _jsonl("biomed/medxpertqa_text.jsonl")
    assert len(rows) == 2450
    for row in rows:
        gold = row["label"]
        assert extract_choice(f"Answer: {gold}", "ABCDEFGHIJ") == gold, row["id"]
        # the question restates every option as "(A) ..."; the final explicit answer must win
        response = f"{row['question']}\n\nI think the history points one way.\nAnswer: {gold}"
        assert extract_choice(response, "ABCDEFGHIJ") == gold, row["id"]


# ==================================================================================================
# long context
# ==================================================================================================
@pytest.mark.parametrize(
    "text, normal",
    [
        ("The Cat sat on a mat.", "cat sat on mat"),
        ("  An   apple,\tthe\norange!  ", "apple orange"),
        ("Apple v. Samsung", "apple v samsung"),
        ("“Quoted” — text", "quoted text"),
        ("", ""),
    ],
)
def test_normalize_answer(text, normal):
    assert normalize_answer(text) == normal


def test_rouge_l():
    assert rouge_l("the cat sat on the mat", "cat on the mat") == pytest.approx(2 * 0.75 * 1 / 1.75)
    assert rouge_l("w x y z", "z y x w") == pytest.approx(0.25)  # LCS 1 of 4 and 4
    assert rouge_l("a b c d", "d c b a") == pytest.approx(1 / 3)  # the article "a" is dropped
    assert rouge_l("same words here", "Same words, here.") == 1.0
    assert rouge_l("", "") == 1.0 and rouge_l("x", "") == 0.0 and rouge_l("", "x") == 0.0
    assert rouge_l("alpha beta", "gamma delta") == 0.0
    assert rouge_l("x y z", "x z") == rouge_l("x z", "x y z")  # F1 is symmetric


def test_extract_final_answer():
    assert extract_final_answer(r"blah \boxed{Nasdaq} more") == "Nasdaq"
    assert extract_final_answer("Reasoning...\nFinal answer: 7.1 billion") == "7.1 billion"
    assert extract_final_answer("Answer:\n1. Airline (12)\n2. Hotels (4)") == "1. Airline (12)\n2. Hotels (4)"
    assert extract_final_answer("just the text") == "just the text"


def test_score_long_context():
    s = score_long_context("After reading, **Answer:** The company is listed on the NASDAQ.", "Nasdaq")
    assert s.value == 1.0 and s.approximate is True and 0 < s.metrics["rouge_l"] < 1
    exact = score_long_context("Answer: $55.2 million", "$55.2 million")
    assert exact.value == 1.0 and exact.metrics["rouge_l"] == 1.0 and exact.details["match"] == "exact"
    assert score_long_context("Answer: 120", "12").value == 0.0  # whole tokens only
    wrong = score_long_context("Answer: NYSE", "Nasdaq")
    assert wrong.value == 0.0 and wrong.approximate is True and wrong.metrics["rouge_l"] == 0.0
    assert score_long_context("", "Nasdaq").value == 0.0


def test_aa_lcr_references_score_against_themselves_only():
    rows = _jsonl("long_context/aa_lcr/aa_lcr_questions.jsonl")
    assert len(rows) == 100
    for i, row in enumerate(rows):
        own = score_long_context(f"I read all documents.\n\nAnswer: {row['answer']}", row["answer"])
        assert own.value == 1.0 and own.metrics["rouge_l"] == 1.0, row["id"]
        other = rows[(i + 1) % len(rows)]["answer"]
        assert score_long_context(f"Answer: {other}", row["answer"]).value == 0.0, row["id"]


# ==================================================================================================
# LLM judge
# ==================================================================================================
def _judge(*replies) -> tuple[LLMJudge, FakeModel]:
    model = FakeModel(list(replies))
    return LLMJudge(model), model


def test_judge_correct_and_incorrect():
    reply = AssistantMessage(content="Both say 70.\nVERDICT: CORRECT\n", tool_calls=[], usage={"total_tokens": 42})
    judge, model = _judge(reply, "The numbers differ.\n\n  VERDICT: INCORRECT  ")
    v = judge.judge("Find x.", "x = 70", "70", domain="math")
    assert v == Verdict(True, "Both say 70.\nVERDICT: CORRECT\n", {"total_tokens": 42}, None)
    v = judge.judge("Find x.", "x = 71", "70", domain="math")
    assert v.correct is False and v.error is None
    system, user = model.calls[0]
    assert system["role"] == "system" and "VERDICT: CORRECT" in system["content"]
    assert "Find x." in user["content"] and "x = 70" in user["content"] and "## Reference answer\n70" in user["content"]
    assert "equivalent" in user["content"]  # the math guidance


@pytest.mark.parametrize(
    "reply",
    [
        "VERDICT: correct",
        "**VERDICT: CORRECT**",
        "VERDICT: CORRECT\nHope this helps!",
        "VERDICT: CORRECT or INCORRECT",
        "The answer is correct.",
        "VERDICT:CORRECT",
        "",
    ],
)
def test_judge_strict_parser(reply):
    judge, _ = _judge(reply)
    v = judge.judge("q", "r", "ref", domain="chem")
    assert v.correct is None and v.error and v.raw == reply


def test_parse_verdict_ignores_think_blocks():
    assert parse_verdict("<think>VERDICT: INCORRECT</think>\nFine.\nVERDICT: CORRECT") == (True, None)
    assert parse_verdict("ok\nVERDICT: CORRECT\n<think>unfinished")[0] is True


def test_judge_failures_are_recorded_not_raised():
    judge, _ = _judge(ModelError("endpoint down"))
    v = judge.judge("q", "r", "ref", domain="physics")
    assert v.correct is None and v.raw == "" and "ModelError" in v.error and "endpoint down" in v.error
    judge, _ = _judge()  # an exhausted script raises ModelError too
    assert judge.judge("q", "r", "ref", domain="physics").correct is None
    judge, _ = _judge(RuntimeError("boom"))
    assert "RuntimeError" in judge.judge("q", "r", "ref", domain="physics").error


def test_judge_clips_long_responses_keeping_the_tail():
    judge, model = _judge("VERDICT: INCORRECT")
    judge.max_response_chars = 1000
    response = "x" * 50_000 + " FINAL ANSWER 42"
    judge.judge("q", response, "42", domain="long_context")
    user = model.calls[0][1]["content"]
    assert "FINAL ANSWER 42" in user and len(user) < 5000 and "characters cut" in user
    assert "key fact" in user  # the long-context guidance
    judge, model = _judge("VERDICT: CORRECT")
    assert judge.judge("q", "r", "ref", domain="unknown-domain").correct is True  # generic guidance


def test_scores_are_valid_and_serialisable():
    scores = [
        score_math(r"\boxed{1}", "1"),
        score_physics(r"\boxed{1, 2}", [r"\boxed{1, 3}"], answer_type="NV, NV"),
        score_choice("Answer: A", "A"),
        score_long_context("Answer: x", "x"),
    ]
    for s in scores:
        assert isinstance(s, Score) and 0.0 <= s.value <= 1.0
        assert all(0.0 <= v <= 1.0 and not math.isnan(v) for v in s.metrics.values())
        json.dumps(s.to_dict())
