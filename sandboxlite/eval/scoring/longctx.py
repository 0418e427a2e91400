"""Long-context answers (AA-LCR), scored by rules as a stand-in for the paper's LLM judge.

``normalize_answer`` is the SQuAD normalisation, ``eval.normalize`` mode "squad" (lowercase, no
punctuation, no articles, single spaces; numbers and dotted acronyms kept whole); ``rouge_l`` is
the LCS-based F1 over normalised tokens; ``extract_final_answer`` reads the response's final
answer (the last ``\\boxed{}``, else what follows the last "Answer:" / "Final answer:" marker,
else the whole text); ``score_long_context`` gives 1.0 when the normalised reference equals, or
appears as a whole-token run inside, the normalised final answer.  Every score is
``approximate``: containment misses correct paraphrases (a judge would accept them) and accepts a
long answer that merely mentions the reference.
"""

from __future__ import annotations

import re

from ..normalize import normalize
from ..score import Score
from .mathans import last_boxed

__all__ = ["answer_after_marker", "extract_final_answer", "normalize_answer", "rouge_l", "score_long_context"]

MAX_EXTRACTED_CHARS = 2000  # what ``Score.extracted`` keeps of a long final answer

_MARKER_RE = re.compile(r"(?:final\s+answer|answer)\s*(?:is\s*)?[:：]", re.IGNORECASE)


def normalize_answer(text: str) -> str:
    """``normalize(text, "squad")``: lowercase, punctuation to spaces (but "3.14", "-76" and
    "U.S.A." -> "usa" stay one token), articles (a/an/the) dropped, whitespace collapsed."""
    return normalize(text, "squad")


def _lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two token lists (one DP row at a time)."""
    if len(a) < len(b):
        a, b = b, a
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(pred: str, ref: str) -> float:
    """ROUGE-L F1 between ``pred`` and ``ref`` over ``normalize_answer`` tokens.

    Both empty -> 1.0; exactly one empty -> 0.0.
    """
    p, r = normalize_answer(pred).split(), normalize_answer(ref).split()
    if not p and not r:
        return 1.0
    if not p or not r:
        return 0.0
    lcs = _lcs_length(p, r)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(p), lcs / len(r)
    return 2 * precision * recall / (precision + recall)


def answer_after_marker(text: str) -> str | None:
    """Everything after the last "Answer:" / "Final answer:" / "The answer is:" marker, or None.

    The whole rest, not one line: long-context answers are often lists that start on the
    marker's line or the next one.
    """
    marks = list(_MARKER_RE.finditer(text or ""))
    if not marks:
        return None
    answer = text[marks[-1].end() :].strip().strip("*").strip()
    return answer or None


def extract_final_answer(response: str) -> str:
    """The last ``\\boxed{}``, else the text after the last answer marker, else the whole response."""
    boxed = last_boxed(response or "")
    if boxed:
        return boxed
    return answer_after_marker(response or "") or (response or "").strip()


def score_long_context(response: str, answer: str) -> Score:
    """1.0 when the normalised reference equals or is contained (whole tokens) in the normalised
    final answer, else 0.0; ``metrics["rouge_l"]`` against the final answer; always approximate."""
    final = extract_final_answer(response)
    pred_norm, ref_norm = normalize_answer(final), normalize_answer(answer)
    hit = bool(ref_norm) and (pred_norm == ref_norm or f" {ref_norm} " in f" {pred_norm} ")
    details = {"match": "exact" if pred_norm == ref_norm and ref_norm else "contained" if hit else "none"}
    if len(final) > MAX_EXTRACTED_CHARS:
        details["extracted_truncated_from"] = len(final)
    return Score(
        1.0 if hit else 0.0,
        extracted=final[:MAX_EXTRACTED_CHARS],
        metrics={"rouge_l": rouge_l(final, answer)},
        details=details,
        approximate=True,
    )
