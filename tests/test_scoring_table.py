"""Answer shapes against the strict scorers, one row each: (id, response, gold, the score a human
grader gives).  The expected scores are the benchmark's intent, not what the code happens to do;
a row marked "choice" documents a case where reasonable graders could differ."""

from __future__ import annotations

import pytest

pytest.importorskip("math_verify", reason="the [eval] extra is not installed")

from sandboxlite.eval.scoring.choice import score_choice  # noqa: E402
from sandboxlite.eval.scoring.mathans import score_math  # noqa: E402
from sandboxlite.eval.scoring.physics import score_physics  # noqa: E402

TOOL_CALL = '{"name": "execute_bash", "arguments": {"command": "sleep 120", "timeout": 120}}'

# -- math (AIME: integer golds; a few symbolic ones) -----------------------------------------------
MATH = [
    ("boxed", "\\boxed{70}", "70", 1),
    ("boxed-wrong", "\\boxed{71}", "70", 0),
    ("boxed-in-prose", "So the sum is \\boxed{70}.", "70", 1),
    ("last-box-wins", "First \\boxed{12}, then corrected: \\boxed{70}", "70", 1),
    ("last-box-wrong", "\\boxed{70} ... no, \\boxed{12}", "70", 0),
    ("bare-number", "70", "70", 1),
    ("bare-number-newline", "70\n", "70", 1),
    ("answer-is", "The answer is 70.", "70", 1),
    ("final-answer-line", "Final answer: 70", "70", 1),
    ("x-equals", "x = 70", "70", 1),
    ("leading-zero", "\\boxed{070}", "70", 1),
    ("thousands-comma", "\\boxed{1,000}", "1000", 1),
    ("decimal-same", "\\boxed{70.0}", "70", 1),
    ("dollar-math", "$70$", "70", 1),
    ("display-math", "\\[ \\boxed{70} \\]", "70", 1),
    ("boxed-text", "\\boxed{\\text{70}}", "70", 1),
    ("boxed-text-frac", "\\boxed{\\text{\\frac{1}{2}}}", "\\frac{1}{2}", 1),
    ("bare-latex", "2\\sqrt{2}", "2\\sqrt{2}", 1),
    ("bare-latex-wrong", "\\sqrt{2}", "2\\sqrt{2}", 0),
    ("open-last-box-wrong", "\\boxed{70}, and then \\boxed{71", "70", 0),  # a cut reply: its final answer is 71
    ("open-last-box-right", "\\boxed{71}? No: \\boxed{70", "70", 1),
    ("open-box-only", "\\boxed{70", "70", 1),
    ("negative-gold", "\\boxed{-3}", "-3", 1),
    ("negative-wrong-sign", "\\boxed{3}", "-3", 0),
    ("fraction", "\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1),
    ("fraction-decimal", "\\boxed{0.5}", "\\frac{1}{2}", 1),
    ("dfrac", "\\boxed{\\dfrac{1}{2}}", "\\frac12", 1),
    ("sqrt", "\\boxed{2\\sqrt{2}}", "2\\sqrt{2}", 1),
    ("sqrt-numeric", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}", 1),
    ("pi", "\\boxed{2\\pi}", "2\\pi", 1),
    ("expression-equal", "\\boxed{x^2+2x+1}", "(x+1)^2", 1),
    ("expression-wrong", "\\boxed{x^2+1}", "(x+1)^2", 0),
    ("empty", "", "70", 0),
    ("whitespace", "   \n  ", "70", 0),
    ("no-number", "I could not solve it.", "70", 0),
    ("empty-box", "\\boxed{}", "70", 0),
    ("gold-as-int", "\\boxed{70}", 70, 1),
    ("think-then-box", "<think>maybe 12</think>\\boxed{70}", "70", 1),
    ("number-in-work-wrong-final", "We have 70 apples and then 5 more, so \\boxed{75}.", "70", 0),
    ("tool-call-json", TOOL_CALL, "120", 0),  # a tool call is no answer (it scored 1.0)
    ("tool-call-tags", f"<tool_call>{TOOL_CALL}</tool_call>", "120", 0),
    ("tool-call-then-answer", f"{TOOL_CALL}\nThe answer is 7.", "7", 1),
    ("units-ignored", "\\boxed{70 \\text{ degrees}}", "70", 1),
    ("percent-vs-plain", "\\boxed{70\\%}", "70", 1),  # choice: AIME answers are integers, the % is noise
    ("two-answers-boxed", "\\boxed{70, 71}", "70", 0),
    ("scientific", "\\boxed{7 \\times 10^{1}}", "70", 1),
    ("words-number", "\\boxed{seventy}", "70", 0),  # choice: math-verify does not read number words
    ("answer-before-work", "\\boxed{70}\n\nWork: 35 + 35 = 70", "70", 1),
]


@pytest.mark.parametrize("response, gold, expected", [r[1:] for r in MATH], ids=[r[0] for r in MATH])
def test_math(response, gold, expected):
    assert score_math(response, gold).value == expected


# -- multiple choice (A-D, and A-J for MedXpertQA) --------------------------------------------------
CHOICE = [
    ("letter", "B", "B", "ABCD", 1),
    ("letter-wrong", "C", "B", "ABCD", 0),
    ("lower", "b", "B", "ABCD", 1),
    ("boxed", "\\boxed{B}", "B", "ABCD", 1),
    ("boxed-text", "\\boxed{\\text{B}}", "B", "ABCD", 1),
    ("boxed-paren", "\\boxed{(B)}", "B", "ABCD", 1),
    ("boxed-with-text", "\\boxed{B. Sodium}", "B", "ABCD", 1),
    ("answer-colon", "Answer: B", "B", "ABCD", 1),
    ("answer-bold", "**Answer:** B", "B", "ABCD", 1),
    ("answer-is-paren", "The answer is (D).", "D", "ABCD", 1),
    ("final-answer-bold", "Final answer: **C**", "C", "ABCD", 1),
    ("correct-option", "The correct option is C: water.", "C", "ABCD", 1),
    ("i-choose", "I choose D", "D", "ABCD", 1),
    ("option-is-correct", "Option B is correct.", "B", "ABCD", 1),
    ("letter-is-correct", "C is correct.", "C", "ABCD", 1),
    ("option-alone", "Option C", "C", "ABCD", 1),
    ("line-b-dot", "B. Sodium chloride", "B", "ABCD", 1),
    ("line-b-paren", "B) Sodium chloride", "B", "ABCD", 1),
    ("bold-letter", "**B**", "B", "ABCD", 1),
    ("paren-only", "(C)", "C", "ABCD", 1),
    ("json", '{"answer": "B"}', "B", "ABCD", 1),
    ("json-reason-other-letters", '{"answer": "B", "reason": "A is wrong and C is too small"}', "B", "ABCD", 1),
    ("json-choice-key", '{"choice": "C"}', "C", "ABCD", 1),
    ("json-fenced", '```json\n{"answer": "D"}\n```', "D", "ABCD", 1),
    ("json-letter-and-text", '{"answer": "B. Sodium chloride"}', "B", "ABCD", 1),
    ("json-paren", '{"answer": "(C)"}', "C", "ABCD", 1),
    ("json-final-answer", '{"final_answer": "A"}', "A", "ABCD", 1),
    ("json-nested", '{"result": {"answer": "D", "confidence": 0.9}}', "D", "ABCD", 1),
    ("answer-line-then-explanation", "Answer: C\nA is wrong because it ignores B.", "C", "ABCD", 1),
    ("final-line-then-mentions", "Final answer: C\nExplanation: option A would be the answer if the gas "
     "were ideal; B is too large.", "C", "ABCD", 1),  # fmt: skip
    ("answer-line-then-answer-is", "Answer: C\n\nWhy not the others: D is the answer only at high T.", "C",
     "ABCD", 1),  # fmt: skip
    ("bold-answer-then-option", "**Answer:** B\n\nOption D is correct only when heated.", "B", "ABCD", 1),
    ("article-a", "A good answer needs care. The answer is B.", "B", "ABCD", 1),
    ("answer-a-word", "Answer: A reaction occurs, so the answer is C.", "C", "ABCD", 1),
    ("answer-a-then-explanation", "Answer: A\n\nOption C is wrong because it ignores friction.", "A", "ABCD", 1),
    ("not-a", "not A", "A", "ABCD", 0),
    ("a-is-wrong", "A is wrong.", "A", "ABCD", 0),
    ("letter-outside-set", "E", "E", "ABCD", 0),
    ("a-to-j", "\\boxed{H}", "H", "ABCDEFGHIJ", 1),
    ("a-to-j-answer", "The answer is J.", "J", "ABCDEFGHIJ", 1),
    ("i-as-letter-bold", "**I**", "I", "ABCDEFGHIJ", 1),
    ("i-as-word", "I think it is F.", "F", "ABCDEFGHIJ", 0),  # choice: "it is F" states no answer
    ("empty", "", "B", "ABCD", 0),
    ("no-letter", "I am not sure.", "B", "ABCD", 0),
    ("self-correction", "The answer is B. Wait, re-checking: the answer is C.", "C", "ABCD", 1),
    ("box-beats-prose", "The answer is B... \\boxed{C}", "C", "ABCD", 1),
    ("tool-call", '{"name": "execute_bash", "arguments": {"command": "echo B > answer.txt"}}', "B", "ABCD", 0),
    ("gold-paren", "B", "(B)", "ABCD", 1),
]


@pytest.mark.parametrize("response, gold, letters, expected", [r[1:] for r in CHOICE], ids=[r[0] for r in CHOICE])
def test_choice(response, gold, letters, expected):
    assert score_choice(response, gold, letters=letters).value == expected


# -- physics (UGPhysics: boxed references, one type per part) -----------------------------------------
PHYSICS = [
    ("nv-exact", "\\boxed{9.8}", ["\\boxed{9.8}"], "NV", None, 1),
    ("nv-within-1pct", "\\boxed{9.81}", ["\\boxed{9.8}"], "NV", None, 1),
    ("nv-outside", "\\boxed{10.5}", ["\\boxed{9.8}"], "NV", None, 0),
    ("nv-unit", "\\boxed{9.8 \\mathrm{m/s^2}}", ["\\boxed{9.8}"], "NV", "m/s^2", 1),
    ("nv-unit-text", "\\boxed{9.8\\ \\text{m/s}^2}", ["\\boxed{9.8}"], "NV", "m/s^2", 1),
    ("nv-sci-latex", "\\boxed{3.0 \\times 10^{8}}", ["\\boxed{3 \\times 10^8}"], "NV", None, 1),
    ("nv-sci-e", "\\boxed{3e8}", ["\\boxed{3 \\times 10^{8}}"], "NV", None, 1),
    ("nv-sci-wrong-exp", "\\boxed{3 \\times 10^{7}}", ["\\boxed{3 \\times 10^{8}}"], "NV", None, 0),
    ("nv-thousands", "\\boxed{1,200}", ["\\boxed{1200}"], "NV", None, 1),
    ("nv-negative", "\\boxed{-4.5}", ["\\boxed{-4.5}"], "NV", None, 1),
    ("nv-sign", "\\boxed{4.5}", ["\\boxed{-4.5}"], "NV", None, 0),
    ("nv-degrees", "\\boxed{30^\\circ}", ["\\boxed{30}"], "NV", None, 1),
    ("nv-percent", "\\boxed{25\\%}", ["\\boxed{25\\%}"], "NV", None, 1),
    ("nv-sqrt", "\\boxed{\\sqrt{2}}", ["\\boxed{1.414}"], "NV", None, 1),
    ("nv-fraction", "\\boxed{\\frac{1}{4}}", ["\\boxed{0.25}"], "NV", None, 1),
    ("nv-zero", "\\boxed{0}", ["\\boxed{0}"], "NV", None, 1),
    ("nv-label", "\\boxed{v = 12}", ["\\boxed{12}"], "NV", None, 1),
    ("nv-approx", "\\boxed{\\approx 12}", ["\\boxed{12}"], "NV", None, 1),
    # choice: the physics prompt demands a box; an unboxed statement is not read (math's fallback does read one)
    ("nv-unboxed-final", "The speed is 12 m/s.", ["\\boxed{12}"], "NV", None, 0),
    ("ex-same", "\\boxed{\\frac{mv^2}{r}}", ["\\boxed{\\frac{mv^2}{r}}"], "EX", None, 1),
    ("ex-equivalent", "\\boxed{m v^{2} / r}", ["\\boxed{\\frac{mv^2}{r}}"], "EX", None, 1),
    ("ex-wrong", "\\boxed{\\frac{mv}{r}}", ["\\boxed{\\frac{mv^2}{r}}"], "EX", None, 0),
    ("ex-sqrt", "\\boxed{\\sqrt{\\frac{2gh}{1}}}", ["\\boxed{\\sqrt{2gh}}"], "EX", None, 1),
    ("eq-same", "\\boxed{F = ma}", ["\\boxed{F = ma}"], "EQ", None, 1),
    ("tf-yes", "\\boxed{Yes}", ["\\boxed{Yes}"], "TF", None, 1),
    ("tf-true-yes", "\\boxed{True}", ["\\boxed{Yes}"], "TF", None, 1),
    ("tf-wrong", "\\boxed{No}", ["\\boxed{Yes}"], "TF", None, 0),
    ("mc-letter", "\\boxed{B}", ["\\boxed{B}"], "MC", None, 1),
    ("mc-wrong", "\\boxed{C}", ["\\boxed{B}"], "MC", None, 0),
    ("multi-both", "\\boxed{2, 4}", ["\\boxed{2, 4}"], "NV, NV", None, 1),
    ("multi-order", "\\boxed{4, 2}", ["\\boxed{2, 4}"], "NV, NV", None, 1),  # matched in any order
    ("multi-one-missing", "\\boxed{2}", ["\\boxed{2, 4}"], "NV, NV", None, 0),
    ("multi-extra-hedge", "\\boxed{2, 4, 6}", ["\\boxed{2, 4}"], "NV, NV", None, 0),
    ("multi-two-boxes", "First \\boxed{2} and then \\boxed{4}", ["\\boxed{2, 4}"], "NV, NV", None, 1),
    ("multi-mixed", "\\boxed{9.8, \\frac{mv^2}{r}}", ["\\boxed{9.8, \\frac{mv^2}{r}}"], "NV, EX", None, 1),
    ("in-interval", "\\boxed{[0, 1]}", ["\\boxed{[0, 1]}"], "IN", None, 1),
    ("in-open-vs-closed", "\\boxed{(0, 1)}", ["\\boxed{[0, 1]}"], "IN", None, 0),
    ("empty", "", ["\\boxed{9.8}"], "NV", None, 0),
    ("no-answer", "I cannot compute this.", ["\\boxed{9.8}"], "NV", None, 0),
    ("tool-call", '{"name": "execute_bash", "arguments": {"command": "python3 -c \'print(9.8)\'", "timeout": 9.8}}',
     ["\\boxed{9.8}"], "NV", None, 0),  # fmt: skip
    ("answers-as-list-strings", "\\boxed{5}", ["5"], "NV", None, 1),
]


@pytest.mark.parametrize("response, answers, answer_type, unit, expected", [r[1:] for r in PHYSICS],
                         ids=[r[0] for r in PHYSICS])  # fmt: skip
def test_physics(response, answers, answer_type, unit, expected):
    assert score_physics(response, answers, answer_type=answer_type, unit=unit).value == expected


def test_enough_rows_per_scorer():
    assert len(MATH) >= 40 and len(CHOICE) >= 40 and len(PHYSICS) >= 40
    for table in (MATH, CHOICE, PHYSICS):
        assert len({r[0] for r in table}) == len(table)  # ids are unique
