"""Multiple-choice answers (chemistry MCQ, MedXpertQA A-J): read the chosen letter, compare it.

``extract_choice`` looks for the letter in tiers and returns the last hit of the best tier
present (``extract_choice_rule`` also says which tier found it):

1. ``boxed``: ``\\boxed{B}`` (also ``\\boxed{\\text{B}}``, ``\\boxed{(B)}``, ``\\boxed{B. ...}``);
2. ``json``: a JSON object's answer key (``{"answer": "B"}``, ``"final_answer"``, ``"choice"``,
   ``"option"``, ``"letter"``, ``"correct_answer"``; the value "B", "(B)" or "B. text"), so the
   other letters of a ``"reason"`` beside it do not count;
3. ``answer_line``: a line that starts with "Answer:" or "Final answer:" (markdown allowed,
   "**Answer:** B"): what an explanation after it mentions does not count;
4. ``explicit``: "the answer is (b)", "The correct option is C: ...", "the answer to this
   question is D", "I choose D", "option B is correct", a line "C is correct";
5. ``stated``: ``**B**``, a line that starts with "B." / "B)" / "(B)", holds only the letter, or
   only "Option C";
6. ``parenthesised``: any "(B)".

Letters outside ``letters`` are ignored.  The English words "A" and "I" are not letters: a bare
"A" or "I" (or any bare lowercase letter) followed by a word, as in "Answer: A reaction occurs"
or "the answer is I think ...", does not count; wrapped ones ("(a)", "**I**") and ones at the
end of a sentence ("the answer is b.") do.
"""

from __future__ import annotations

import re

from ..score import Score
from .mathans import iter_boxed, iter_json_objects

__all__ = ["extract_choice", "extract_choice_rule", "score_choice"]

# the letter, bare or wrapped: (B) [B] **B** *B* \text{B} \textbf{B} {B}
_TOKEN = r"""(?:
    \*\*\(?(?P<bold>[A-Za-z])\)?\*\*
  | \*(?P<italic>[A-Za-z])\*
  | \((?P<paren>[A-Za-z])\)
  | \[(?P<bracket>[A-Za-z])\]
  | \\text(?:bf|rm)?\{\(?(?P<text>[A-Za-z])\)?\}
  | (?P<bare>[A-Za-z])
)"""
_AFTER_BARE = re.compile(r"(?P<space>[ \t]*)(?P<next>[A-Za-z]*)")  # a word on the same line
_CONNECTIVES = {"because", "since", "as", "which", "given", "due", "hence", "therefore"}

_EXPLICIT_RE = re.compile(
    r"""\b(?:
        (?:final|correct|right|best|most\s+(?:appropriate|likely|accurate))\s+(?:answer|option|choice|response)
      | answer
      | (?:I\s+(?:would\s+)?|I'll\s+|we\s+)?(?:choose|select|pick|go\s+with)
    )\b
    (?:\s+(?:is|would\s+be|should\s+be|will\s+be|=))?
    \s*[:：=]?\s*
    (?:(?:option|choice|letter)\s*:?\s*)?
    """
    + _TOKEN,
    re.IGNORECASE | re.VERBOSE,
)
_ANSWER_IS_RE = re.compile(  # "the answer to this question is B"
    r"\banswer\b[^.\n:]{0,40}?\b(?:is|would\s+be|should\s+be)\s*[:：]?\s*" + _TOKEN, re.IGNORECASE | re.VERBOSE
)
_OPTION_IS_CORRECT_RE = re.compile(
    r"\b(?:option|choice)\s*" + _TOKEN + r"\s+(?:is|seems|appears)\s+(?:to\s+be\s+)?(?:the\s+)?"
    r"(?:correct|right|best|most\s+appropriate|answer)",
    re.IGNORECASE | re.VERBOSE,
)
_LETTER_IS_CORRECT_RE = re.compile(  # a line "C is correct." / "(C) is the answer"
    r"^[ \t>*#-]*\(?(?P<bare>[A-Z])\)?\s+is\s+(?:the\s+)?(?:correct|right|best|answer)\b", re.MULTILINE
)
_ANSWER_LINE_RE = re.compile(
    r"^[ \t>#*-]*(?:the\s+)?(?:final\s+|correct\s+)?answer\s*\**\s*[:：]\s*\**\s*(?:(?:option|choice)\s*:?\s*)?" + _TOKEN,
    re.IGNORECASE | re.VERBOSE | re.MULTILINE,
)
# (pattern, whether a bare letter followed by a word is refused as an English word)
_EXPLICIT = [(_EXPLICIT_RE, True), (_ANSWER_IS_RE, True), (_OPTION_IS_CORRECT_RE, False),
             (_LETTER_IS_CORRECT_RE, False)]  # fmt: skip
_ANSWER_LINE = [(_ANSWER_LINE_RE, True)]
_JSON_KEYS = ("answer", "final_answer", "choice", "option", "letter", "correct_answer", "correct_option")
_STATED = [
    (re.compile(r"^[ \t>*#-]*(?:option|choice)\s+\(?(?P<bare>[A-Za-z])\)?[ \t.]*$", re.MULTILINE | re.IGNORECASE), False),
    (re.compile(r"\*\*\(?(?P<bold>[A-Za-z])\)?[.:)]?\*\*"), False),
    (re.compile(r"^[ \t>*#-]*\(?(?P<bare>[A-Z])(?:[.)]|\)?:)(?=\s|$)", re.MULTILINE), False),
    (re.compile(r"^[ \t>*#-]*\(?(?P<bare>[A-Za-z])\)?[ \t.]*$", re.MULTILINE), False),
]
_PARENTHESISED = [(re.compile(r"\((?P<paren>[A-Za-z])\)"), False)]


def _token_letter(m: re.Match, text: str, strict_bare: bool = True) -> str | None:
    """The letter a match stands for, or None when a bare letter reads as an English word."""
    for group in ("bold", "italic", "paren", "bracket", "text"):
        if m.groupdict().get(group):
            return m.group(group)
    letter = m.groupdict().get("bare")
    if not letter:
        return None
    after = text[m.end("bare") :]
    if after[:1].isalnum():  # part of a word ("Answering", "Bicarbonate")
        return None
    if not strict_bare:
        return letter
    nxt = _AFTER_BARE.match(after)
    next_word = nxt.group("next") if nxt else ""
    starts_word = bool(next_word[:1].isalpha()) and bool(nxt and nxt.group("space"))
    if starts_word and (letter.islower() or letter in "AI") and next_word.lower() not in _CONNECTIVES:
        return None  # "a good approach", "A reaction occurs", "I think" (but "A because ...")
    return letter


def _box_letter(content: str, letters: str) -> str | None:
    """The letter a box holds: ``B``, ``\\text{B}``, ``(B)``, ``B. text``, ``B: text``."""
    s = re.sub(r"\\(?:text|textbf|mathrm|mathbf|rm)\{([^{}]*)\}", r"\1", content).strip()
    m = re.fullmatch(r"\(?([A-Za-z])\)?(?:\s*[.:)]\s*.*)?", s, re.DOTALL)
    if m and m.group(1).upper() in letters:
        return m.group(1).upper()
    return None


def _box_hits(text: str, letters: str) -> list[tuple[int, str]]:
    return [(pos, letter) for pos, content in iter_boxed(text) if (letter := _box_letter(content, letters))]


def _pattern_hits(text: str, letters: str, patterns: list[tuple[re.Pattern, bool]]) -> list[tuple[int, str]]:
    hits = []
    for pattern, strict in patterns:
        for m in pattern.finditer(text):
            letter = _token_letter(m, text, strict_bare=strict)
            if letter and letter.upper() in letters:
                hits.append((m.start(), letter.upper()))
    return hits


def _json_hits(text: str, letters: str) -> list[tuple[int, str]]:
    """Letters under an answer key of the JSON objects in ``text`` (nested ones too)."""
    hits: list[tuple[int, str]] = []
    for pos, _end, obj in iter_json_objects(text):
        stack = [obj]
        while stack:
            o = stack.pop()
            if isinstance(o, dict):
                for key in _JSON_KEYS:
                    value = o.get(key)
                    if isinstance(value, str) and (letter := _box_letter(value, letters)):
                        hits.append((pos, letter))
                stack += [v for v in o.values() if isinstance(v, (dict, list))]
            elif isinstance(o, list):
                stack += [v for v in o if isinstance(v, (dict, list))]
    return hits


def extract_choice_rule(text: str, letters: str = "ABCD") -> tuple[str | None, str | None]:
    """(the chosen letter in upper case, the tier that found it), or (None, None); see the module
    docstring."""
    letters = letters.upper()
    text = text or ""
    tiers = (
        ("boxed", lambda: _box_hits(text, letters)),
        ("json", lambda: _json_hits(text, letters)),
        ("answer_line", lambda: _pattern_hits(text, letters, _ANSWER_LINE)),
        ("explicit", lambda: _pattern_hits(text, letters, _EXPLICIT)),
        ("stated", lambda: _pattern_hits(text, letters, _STATED)),
        ("parenthesised", lambda: _pattern_hits(text, letters, _PARENTHESISED)),
    )
    for rule, find in tiers:
        hits = find()
        if hits:
            return max(hits)[1], rule
    return None, None


def extract_choice(text: str, letters: str = "ABCD") -> str | None:
    """The chosen letter (upper case) in ``text``, or None; see the module docstring."""
    return extract_choice_rule(text, letters)[0]


def _gold_letter(gold: str, letters: str) -> str:
    s = re.sub(r"[^A-Za-z]", "", gold or "")
    return s.upper() if len(s) == 1 else (gold or "").strip().upper()


def score_choice(response: str, gold: str, letters: str = "ABCD") -> Score:
    """1.0 when the letter extracted from ``response`` is ``gold`` (any case, "(B)" accepted)."""
    letters = letters.upper()
    extracted, rule = extract_choice_rule(response, letters)
    gold_letter = _gold_letter(gold, letters)
    return Score(float(extracted is not None and extracted == gold_letter), extracted=extracted,
                 details={"gold": gold_letter, "letters": letters, "rule": rule})  # fmt: skip
