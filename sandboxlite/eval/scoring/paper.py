"""The paper's own reward rules (``--scoring paper``), re-implemented from their description.

The rules are those of PyPI ``llm-in-sandbox`` 0.2.0 (``benchmark/<task>/reward.py`` and
``judge.py``); this is sandboxlite's own code, checked against that package in
``tests/test_paper_scoring.py`` (an agreement table over generated answers).  Per domain:

- **math**: the answer is the content of the *last* ``\\boxed{`` (balanced braces), else the whole
  response stripped (also when that last box never closes).  Prediction and gold are each wrapped
  in ``\\boxed{}`` and compared by math-verify: gold parsed as LaTeX, prediction as expression or
  LaTeX, ``verify`` at 6 decimal places.  Any failure scores 0.
- **chem, biomed** and the multiple-choice items of **dream** (the paper's ``instruct_pretrain``
  routes single-answer multiple choice to the same rule): the whole response equal to the gold
  (case-insensitive) wins; else the first of, in order: ``"answer": "X"``; ``answer: X``; ``answer
  is X`` / ``choice is X``; the first character of the last box, when it is a letter; the *last*
  standalone letter anywhere in the response; the response's first character, when a letter.
- **qed** (``instruct_pretrain``'s open-ended questions): the math rule first (1 when it matches),
  else ROUGE-L F1 (``rouge-score``, Porter stemming) against the reference; QED has several
  references per question, the best one counts.
- **physics, long_context**: the package's reward is a placeholder (always 0); the paper grades
  them with an LLM judge (``judge.py``): one user message, "Reply only with CORRECT or INCORRECT",
  the verdict is the last of the two words in the reply, asked ``JUDGE_REPEATS`` (4) times and
  averaged.  So these domains need ``--judge``; ``check_paper_scoring`` refuses a run without one.
- **instruct** (IFBench): prompt-level *loose* accuracy over the paper's five variants (the
  response; without ``*``; without its first line; without its last line; without both; empty
  variants skipped); every instruction must pass on some variant.  The paper runs IFBench's own
  checkers from a clone of its repository (``IFBENCH_PATH``, default ``~/IFBench``): when that
  clone is there, it is used; otherwise sandboxlite's own checkers stand in and the score is
  flagged ``approximate``.

Deliberate differences, all in how failures are reported, none in what is scored: a judge call
that fails raises (the task is recorded as errored and rerun on a resume) where the paper scores
0; math-verify runs under sandboxlite's time bound (``mathans.run_bounded``) instead of its own
``signal.alarm`` timeouts, which only work in the main thread.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, Mapping, Sequence

from ...errors import ConfigError, ModelError
from ..items import EvalItem, Scorer
from ..score import Score
from . import mathans

__all__ = ["JUDGED_DOMAINS", "JUDGE_REPEATS", "PAPER_PACKAGE", "check_paper_scoring", "judge_prompt",
           "judge_verdict", "last_box", "paper_choice", "paper_choice_letter", "paper_ifbench", "paper_judged",
           "paper_math", "paper_open_ended", "paper_scorer", "paper_variants"]  # fmt: skip

PAPER_PACKAGE = "llm-in-sandbox 0.2.0"
JUDGED_DOMAINS = frozenset({"physics", "long_context"})
JUDGE_REPEATS = 4  # judge.py's --num_repeats default
MATH_TIMEOUT_S = 10.0  # math-verify's own: 5 s to parse, 5 s to verify
BOX = "\\boxed{"


# -- math --------------------------------------------------------------------------------------
def last_box(text: str) -> tuple[str, bool]:
    """``(content of the last \\boxed{...} stripped, True)``, or ``(text.strip(), False)`` when
    there is no box or the last one never closes (the paper does not fall back to an earlier box)."""
    start = text.rfind(BOX)
    if start < 0:
        return text.strip(), False
    depth, i = 1, start + len(BOX)
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    if depth:
        return text.strip(), False
    return text[start + len(BOX) : i - 1].strip(), True


def _math_verify_match(pred: str, gold: str) -> bool:
    """math-verify on ``\\boxed{pred}`` against ``\\boxed{gold}``, configured as the paper's metric."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, grader, parse, parser

    parser.TIMEOUT_WARNING_SHOWN = grader.TIMEOUT_WARNING_SHOWN = True  # run_bounded is the timeout
    gold_parsed = parse(BOX + gold + "}", [LatexExtractionConfig()], parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed:  # the metric raises here; the paper's reward turns that into 0
        return False
    pred_parsed = parse(BOX + pred + "}", [ExprExtractionConfig(), LatexExtractionConfig()],
                        parsing_timeout=None)  # type: ignore[arg-type]  # fmt: skip
    return bool(grader.verify(gold_parsed, pred_parsed, 6, timeout_seconds=None))


def paper_math(response: str, gold: str, *, timeout_s: float = MATH_TIMEOUT_S) -> Score:
    """The paper's math reward: see the module docstring."""
    answer, boxed = last_box(response or "")
    mathans.load_math_verify()
    equal, error = mathans.run_bounded(lambda: _math_verify_match(answer, gold), timeout_s, False)
    details: dict[str, Any] = {"rule": "paper:math", "boxed": boxed}
    if error:
        details["error"] = error
    return Score(1.0 if equal else 0.0, answer[:500], details=details)


# -- multiple choice ---------------------------------------------------------------------------
_CHOICE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("json", re.compile(r'"answer"\s*:\s*"([A-Z])"', re.IGNORECASE)),
    ("answer_colon", re.compile(r"answer\s*[:：]\s*([A-Z])\b", re.IGNORECASE)),
    ("answer_is", re.compile(r"(?:answer|choice)\s+is\s+([A-Z])\b", re.IGNORECASE)),
)
_LONE_LETTER = re.compile(r"\b([A-Z])\b")


def paper_choice_letter(text: str) -> tuple[str, str | None]:
    """``(letter, rule)`` the paper reads from ``text`` (``("", None)``: none)."""
    if not text:
        return "", None
    for rule, pattern in _CHOICE_RULES:
        m = pattern.search(text)
        if m:
            return m.group(1).upper(), rule
    inner, boxed = last_box(text)
    if boxed and inner != text.strip() and inner and inner[0].upper().isalpha():
        return inner[0].upper(), "boxed"
    letters = _LONE_LETTER.findall(text.upper())
    if letters:
        return letters[-1], "last_letter"
    first = text.strip()[:1]
    if first and first.upper().isalpha():
        return first.upper(), "first_char"
    return "", None


def paper_choice(response: str, gold: str) -> Score:
    """The paper's multiple-choice reward (chem and biomed): see the module docstring."""
    response = response or ""
    if response.strip().upper() == gold.strip().upper():
        return Score(1.0, response.strip()[:50], details={"rule": "paper:exact"})
    letter, rule = paper_choice_letter(response)
    ok = letter.strip().upper() == gold.strip().upper()
    return Score(1.0 if ok else 0.0, letter or None, details={"rule": f"paper:{rule}" if rule else "paper:none"})


# -- instruct_pretrain's open-ended questions --------------------------------------------------
def _rouge_scorer() -> Any:
    """rouge-score's ``rouge_scorer`` module; ConfigError when it is not installed."""
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise ConfigError("scoring", "the paper's open-ended rule (qed) needs rouge-score, which is not installed",
                          hint="pip install 'sandboxlite[paper]'") from None  # fmt: skip
    return rouge_scorer


def _rouge_l(reference: str, response: str) -> float:
    scorer = _rouge_scorer().RougeScorer(["rougeL"], use_stemmer=True)
    return float(scorer.score(reference, response)["rougeL"].fmeasure)


def paper_open_ended(response: str, golds: Sequence[str]) -> Score:
    """The paper's open-ended reward against each reference; the best counts."""
    response, best = (response or "").strip(), Score(0.0, None, details={"rule": "paper:rouge_l"})
    if not response:
        return best
    for gold in golds:
        gold = gold.strip()
        if not gold:
            continue
        if paper_math(response, gold).value > 0:
            return Score(1.0, gold, details={"rule": "paper:math", "reference": gold})
        value = _rouge_l(gold, response)
        if value > best.value:
            best = Score(value, gold, details={"rule": "paper:rouge_l", "reference": gold})
    return best


# -- the LLM judge (physics, long_context) -----------------------------------------------------
def judge_prompt(question: str, gold: str, answer: str) -> str:
    """The paper judge's one user message (an answer's thinking, up to ``</think>``, removed)."""
    if "</think>" in answer:
        answer = answer.partition("</think>")[2].strip()
    return ("Assess whether the following CANDIDATE ANSWER is CORRECT or INCORRECT.\n"
            "For the CANDIDATE ANSWER to be correct, it must be consistent with the OFFICIAL ANSWER.\n\n"
            f"The question, for reference only: {question}\n"
            f"The OFFICIAL ANSWER: {gold}\n"
            f"CANDIDATE ANSWER TO ASSESS: {answer}\n\n"
            "Reply only with CORRECT or INCORRECT.")  # fmt: skip


def judge_verdict(reply: str) -> str:
    """``CORRECT``, ``INCORRECT`` or ``UNKNOWN``: whichever word comes last in ``reply``."""
    text = (reply or "").upper()
    last_correct = max((m.start() for m in re.finditer("(?=CORRECT)", text)
                        if m.start() < 2 or text[m.start() - 2 : m.start()] != "IN"), default=-1)  # fmt: skip
    last_incorrect = text.rfind("INCORRECT")
    if last_correct < 0 and last_incorrect < 0:
        return "UNKNOWN"
    return "INCORRECT" if last_incorrect > last_correct else "CORRECT"


def paper_judged(judge: Any, question: str, response: str, gold: str, *, repeats: int = JUDGE_REPEATS) -> Score:
    """The mean of ``repeats`` verdicts of ``judge`` (an ``LLMJudge`` or a model) on the paper's prompt."""
    model = getattr(judge, "model", judge)
    messages = [{"role": "user", "content": judge_prompt(question, gold, response)}]
    verdicts, usage = [], []
    for k in range(repeats):
        try:
            reply = model.complete(messages, [])
        except Exception as e:  # noqa: BLE001 - the paper scores 0; here the task is an error, rerun on resume
            raise ModelError(f"the judge failed on call {k + 1} of {repeats}: {type(e).__name__}: {e}",
                             hint="check --judge and --judge-base-url; a resume reruns this task") from None  # fmt: skip
        verdicts.append(judge_verdict(reply.content or ""))
        usage.append(dict(getattr(reply, "usage", None) or {}))
    value = sum(v == "CORRECT" for v in verdicts) / len(verdicts)
    return Score(value, None, metrics={"judge": value}, details={"rule": "paper:judge", "verdicts": verdicts,
                                                                   "judge_usage": usage})  # fmt: skip


# -- instruction following ---------------------------------------------------------------------
def paper_variants(response: str) -> list[str]:
    """The paper's five loose variants of ``response`` (in its order, empty ones kept)."""
    lines = response.split("\n")
    return [response, response.replace("*", ""), "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(),
            "\n".join(lines[1:-1]).strip()]  # fmt: skip


def _ifbench_registry(environ: Mapping[str, str]) -> dict | None:
    """IFBench's ``INSTRUCTION_DICT`` from the clone at ``IFBENCH_PATH`` (``~/IFBench``), or None."""
    path = os.path.expanduser(environ.get("IFBENCH_PATH", "~/IFBench"))
    if not os.path.isfile(os.path.join(path, "instructions_registry.py")):
        return None
    if path not in sys.path:
        sys.path.insert(0, path)
    import instructions_registry  # type: ignore[import-not-found]

    return dict(instructions_registry.INSTRUCTION_DICT)


def _ifbench_check(registry: dict) -> Callable[[str, dict, str, str | None], bool]:
    def check(iid: str, kwargs: dict, variant: str, prompt: str | None) -> bool:
        instruction = registry[iid](iid)
        instruction.build_description(**kwargs)
        return bool(instruction.check_following(variant))

    return check


def _own_check(iid: str, kwargs: dict, variant: str, prompt: str | None) -> bool:
    from .ifbench import CHECKERS

    return bool(CHECKERS[iid](variant, **{**kwargs, "prompt": prompt if prompt is not None else kwargs.get("prompt")}))


def paper_ifbench(response: str, instruction_id_list: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None],
                  prompt: str | None = None, *, environ: Mapping[str, str] | None = None) -> Score:  # fmt: skip
    """The paper's IFBench reward: 1 when every instruction passes on one of ``paper_variants``."""
    from .ifbench import CHECKERS, HEURISTIC_IDS

    registry = _ifbench_registry(os.environ if environ is None else environ)
    check = _ifbench_check(registry) if registry is not None else _own_check
    known = registry if registry is not None else CHECKERS
    ids, kw_list = list(instruction_id_list), list(kwargs or [])
    kw_list += [{}] * (len(ids) - len(kw_list))
    variants = [v for v in paper_variants(response or "") if v.strip()]
    followed: dict[str, bool] = {}
    ok, error = True, None
    for k, (iid, kw) in enumerate(zip(ids, kw_list)):
        key = iid if iid not in followed else f"{iid}#{k}"
        args = {name: v for name, v in (kw or {}).items() if v is not None}
        try:
            # the paper: an unknown instruction, or a checker that fails, scores 0
            passed = iid in known and any(check(iid, args, v, prompt) for v in variants)
        except Exception as e:  # noqa: BLE001
            passed, error = False, f"{iid}: {type(e).__name__}: {e}"
        followed[key] = passed
        if not passed:
            ok = False
            break  # the paper stops at the first instruction not followed
    details: dict[str, Any] = {"rule": "paper:ifbench_loose", "instructions": followed,
                               "checkers": "IFBench" if registry is not None else "sandboxlite"}  # fmt: skip
    if error:
        details["error"] = error
    return Score(1.0 if ok else 0.0, None, details=details,
                 approximate=registry is None and any(i in HEURISTIC_IDS for i in ids))  # fmt: skip


# -- per domain --------------------------------------------------------------------------------
def _math(item: EvalItem, response: str, judge: Any = None) -> Score:
    return paper_math(response, str(item.reference["answer"]))


def _choice(item: EvalItem, response: str, judge: Any = None) -> Score:
    return paper_choice(response, item.reference["label"])


def _qed(item: EvalItem, response: str, judge: Any = None) -> Score:
    return paper_open_ended(response, item.reference["answers"])


def _instruct(item: EvalItem, response: str, judge: Any = None) -> Score:
    ref = item.reference
    return paper_ifbench(response, ref["instruction_id_list"], ref["kwargs"], prompt=ref.get("prompt"))


def _physics_gold(reference: Mapping[str, Any]) -> str:
    answers = reference["answers"]
    return answers if isinstance(answers, str) else ", ".join(str(a) for a in answers)


def _judged(gold: Callable[[Mapping[str, Any]], str]) -> Scorer:
    def score(item: EvalItem, response: str, judge: Any = None) -> Score:
        if judge is None:
            raise ConfigError("judge", f"the paper grades {item.domain} with an LLM judge, and none was given",
                              hint="pass --judge MODEL (and --judge-base-url), or --scoring strict")  # fmt: skip
        return paper_judged(judge, str(item.reference.get("question", "")), response, gold(item.reference))

    return score


_SCORERS: dict[str, Scorer] = {
    "math": _math,
    "chem": _choice,
    "biomed": _choice,
    "dream": _choice,
    "qed": _qed,
    "instruct": _instruct,
    "physics": _judged(_physics_gold),
    "long_context": _judged(lambda ref: str(ref["answer"])),
}


def paper_scorer(domain: str) -> Scorer | None:
    """The paper's scorer for a built-in domain, or None (a domain the paper does not have)."""
    return _SCORERS.get(domain)


def check_paper_scoring(domains: Sequence[str], *, has_judge: bool) -> None:
    """Refuse, before any task runs, a paper-scored run that would need a judge it does not have."""
    if "qed" in domains:
        _rouge_scorer()
    judged = [d for d in domains if d in JUDGED_DOMAINS]
    if judged and not has_judge:
        raise ConfigError("scoring", f"--scoring paper grades {', '.join(judged)} with an LLM judge (the paper's "
                          "judge.py), and no judge was given",
                          hint="pass --judge MODEL (with --judge-base-url), leave those domains out, "
                          "or use --scoring strict")  # fmt: skip

