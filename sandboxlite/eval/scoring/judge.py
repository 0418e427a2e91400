"""An optional LLM judge: asks a model whether a response answers a question like the reference.

``LLMJudge(model)`` takes anything with the ``complete(messages, tools)`` interface of
``sandboxlite.agent.model.OpenAIModel`` (``FakeModel`` in tests).  ``judge(...)`` returns a
``Verdict``; it never raises: a failed call or a reply without a well-formed final verdict line
gives ``correct=None`` and the reason in ``error``.

The judge must end its reply with exactly ``VERDICT: CORRECT`` or ``VERDICT: INCORRECT`` on the
last non-empty line (surrounding whitespace aside); anything else is refused.  Long responses
are cut to their head and tail (the final answer sits at the end).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DOMAIN_GUIDANCE", "LLMJudge", "Verdict", "parse_verdict"]

SYSTEM_PROMPT = (
    "You are a strict grader. You compare a candidate's final answer with a reference answer and "
    "decide whether the candidate is correct. Judge only the final answer, not the reasoning or its "
    "style. Explain briefly, then end your reply with one line that is exactly\n"
    "VERDICT: CORRECT\nor\nVERDICT: INCORRECT"
)

DOMAIN_GUIDANCE: dict[str, str] = {
    "math": "Mathematically equivalent forms count as equal (1/2 = 0.5 = \\frac{1}{2}).",
    "physics": (
        "Numerical values within 1% of the reference count as equal; units may be written differently. "
        "Symbolic answers must be equivalent. If the reference has several parts, every part must be right."
    ),
    "chem": "The candidate must choose the same option as the reference.",
    "biomed": "The candidate must choose the same option as the reference.",
    "long_context": (
        "The candidate must state every key fact of the reference (names, numbers, order where it matters); "
        "paraphrase is fine, extra correct detail is fine, any contradiction or missing item is incorrect."
    ),
}
GENERIC_GUIDANCE = "Equivalent answers count as equal; a missing, ambiguous or hedged answer is incorrect."

_VERDICT_RE = re.compile(r"VERDICT: (CORRECT|INCORRECT)")
_THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)


@dataclass
class Verdict:
    correct: bool | None  # None: no verdict (the call failed or the reply was malformed)
    raw: str  # the judge's reply as received
    usage: dict = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "raw": self.raw, "usage": dict(self.usage), "error": self.error}


def parse_verdict(reply: str) -> tuple[bool | None, str | None]:
    """``(correct, error)`` from a judge's reply: its last non-empty line must be the verdict."""
    text = _THINK_RE.sub("", reply or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None, "the judge's reply is empty"
    m = _VERDICT_RE.fullmatch(lines[-1])
    if not m:
        return None, f"the judge's last line is not 'VERDICT: CORRECT' or 'VERDICT: INCORRECT': {lines[-1][:200]!r}"
    return m.group(1) == "CORRECT", None


def _clip(text: str, limit: int) -> str:
    """``text`` cut to its first and last ``limit // 2`` characters when longer than ``limit``."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


class LLMJudge:
    """Grade responses with a model; see the module docstring."""

    def __init__(self, model: Any, *, max_response_chars: int = 20_000, max_question_chars: int = 20_000) -> None:
        self.model = model
        self.max_response_chars = max_response_chars
        self.max_question_chars = max_question_chars

    def messages(self, question: str, response: str, reference: str, *, domain: str) -> list[dict]:
        """The chat messages sent to the judge model."""
        guidance = DOMAIN_GUIDANCE.get(domain, GENERIC_GUIDANCE)
        user = (
            f"Domain: {domain}\nGrading rule: {guidance}\n\n"
            f"## Question\n{_clip(question or '', self.max_question_chars)}\n\n"
            f"## Reference answer\n{reference or ''}\n\n"
            f"## Candidate response\n{_clip(response or '', self.max_response_chars)}\n\n"
            "Is the candidate's final answer correct? End with 'VERDICT: CORRECT' or 'VERDICT: INCORRECT'."
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def judge(self, question: str, response: str, reference: str, *, domain: str) -> Verdict:
        """One verdict; failures are recorded in ``Verdict.error``, never raised."""
        try:
            reply = self.model.complete(self.messages(question, response, reference, domain=domain), [])
        except Exception as e:  # noqa: BLE001 - ModelError, FormatError, anything: a judge failure is data
            return Verdict(None, "", {}, f"{type(e).__name__}: {e}")
        raw = reply.content or ""
        usage = dict(getattr(reply, "usage", None) or {})
        correct, error = parse_verdict(raw)
        return Verdict(correct, raw, usage, error)
