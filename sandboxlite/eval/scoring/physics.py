"""Physics answers (UGPhysics): multi-part, numeric with a relative tolerance, symbolic, yes/no,
multiple choice and intervals.

The reference is one string (or a list of them) holding ``\\boxed{...}``; a multi-part reference
is one box whose parts are separated by top-level commas (``\\boxed{a, b}``), and UGPhysics'
``answer_type`` lists one type per part ("NV, EX").  Types: NV numeric value, EX expression,
EQ equation, MC multiple choice, TF true/false, IN interval (or inequality).

The response's parts are the top-level parts of its last box; when that box holds fewer parts
than the reference, earlier boxes supply the missing ones (``\\boxed{a}`` ... ``\\boxed{b}``).
Parts are paired with reference parts by a maximum matching, in any order (a model may answer
the sub-questions in another order; ``details["in_order"]`` says whether the given order already
matched).  ``metrics["parts"]`` = matched parts / max(reference parts, response parts), so extra
hedging answers cost credit; the primary ``value`` is all-or-nothing: 1.0 only when every part
matches and no extra part was given.

One part against one reference part: equal after light LaTeX normalisation; else by type:
TF yes/no/true/false; MC the same letter(s); NV numbers within ``rel_tol`` (units, ``\\times
10^{n}``, ``e``-notation, thousands separators, ``^\\circ`` and ``\\%`` handled; symbolic numbers
such as ``\\sqrt{2}`` evaluated through math-verify); IN the same brackets with matching ends;
anything else (and every fallback) through math-verify, also with a ``lhs =`` label dropped on
either side.  ``unit`` is only recorded: answers given in another unit than the reference's
are not converted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from ..score import Score
from .longctx import answer_after_marker
from .mathans import DEFAULT_TIMEOUT_S, extract_boxed, load_math_verify, mv_parse, normalize_latex, run_bounded
from .mathans import math_equal as _math_equal

__all__ = ["ANSWER_TYPES", "parse_answer_types", "part_equal", "score_physics", "split_parts", "to_number"]

ANSWER_TYPES = ("NV", "EX", "EQ", "MC", "TF", "IN")
MAX_FULL_MATRIX = 64  # beyond this many part pairs only the given order is tried


# --------------------------------------------------------------------------------------
# parts and types
# --------------------------------------------------------------------------------------
_SPACING_EDGES_RE = re.compile(r"^(?:\s|\\[,;!: ]|\\q?quad|~)+|(?:\s|\\[,;!: ]|\\q?quad|~)+$")


def split_parts(text: str) -> list[str]:
    """``text`` split at commas outside any ``() [] {}`` (``\\left(``, escaped braces and
    intervals such as ``(1, 2]`` stay whole); thousands separators ("23,000") do not split."""
    text = re.sub(r"(?<=\d),(?=\d{3}(?![\d.]))", "", text or "")
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):  # \, is a space; \{ \} are set braces, counted below
            if text[i + 1] not in "([{}])":
                i += 2
                continue
            i, ch = i + 1, text[i + 1]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    parts = [_SPACING_EDGES_RE.sub("", p) for p in parts]
    return [p for p in parts if p]


def parse_answer_types(answer_type: str | None) -> list[str]:
    """The type codes of UGPhysics' ``answer_type`` ("NV, EX" -> ["NV", "EX"]).

    A few values carry commentary after the codes ("NV\\n ... classified as NV."): the first
    line that holds a code is the one read.
    """
    for line in (answer_type or "").splitlines():
        codes = re.findall(r"\b(" + "|".join(ANSWER_TYPES) + r")\b", line)
        if codes:
            return codes
    return []


def _reference_parts(answers: str | Sequence[str]) -> list[str]:
    items = [answers] if isinstance(answers, str) else list(answers)
    parts: list[str] = []
    for item in items:
        boxes = extract_boxed(item)
        for content in boxes or [item]:
            parts += split_parts(content)
    return parts


def _response_parts(response: str, n_wanted: int) -> tuple[list[str], str | None]:
    """The response's answer parts and where they came from (the boxes, else an answer line)."""
    boxes = extract_boxed(response)
    if not boxes:
        after = answer_after_marker(response)
        line = after.splitlines()[0].strip().rstrip(".") if after else ""
        return (split_parts(line) if line else []), ("answer line" if line else None)
    parts = split_parts(boxes[-1])
    for earlier in reversed(boxes[:-1]):
        if len(parts) >= n_wanted:
            break
        parts = split_parts(earlier) + parts
    return parts, "boxed"


# --------------------------------------------------------------------------------------
# numbers
# --------------------------------------------------------------------------------------
_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_NUMBER_RE = re.compile(
    rf"(?P<mant>{_NUM})"
    r"(?:[eE](?P<e>[+-]?\d+))?"
    r"(?:\s*(?:\\times|\\cdot|\*|×|x)\s*10\s*\^\s*\{?\s*(?P<pow10>[+-]?\s*\d+(?:\.\d+)?)\s*\}?)?"
    r"(?:\s*\^\s*\{?\s*(?P<pow>[+-]?\d+)\s*\}?)?"
)
_INFINITY_RE = re.compile(r"([+-]?)\\infty|([+-]?)∞|([+-]?)\binf(?:inity)?\b", re.IGNORECASE)


def _clean_number_text(text: str) -> str:
    s = (text or "").strip().strip("$").strip()
    s = s.replace("−", "-").replace("–", "-")
    s = re.sub(r"\\(?:left|right|displaystyle)(?![A-Za-z])", "", s)
    s = re.sub(r"(?<=\d)\{,\}(?=\d{3}(?!\d))|(?<=\d),(?=\d{3}(?![\d.]))", "", s)  # thousands
    s = s.replace("{,}", ".")  # decimal comma written \{,\}
    s = re.sub(r"(?<=\d)\\[,;! ](?=\d{3}(?!\d))", "", s)  # 23\,000
    s = re.sub(r"\\[,;!: ]|~|\\quad|\\qquad", " ", s)
    s = re.sub(r"^\s*[A-Za-z\\][\w\\{}^_()']*\s*(?:=|\\approx|≈)\s*", "", s)  # a "v_0 =" label
    return s.strip().rstrip(".").strip()


def to_number(text: str, *, bare_units: bool = True) -> tuple[float, bool] | None:
    """``(value, is_percent)`` of a number with an optional unit ("3.2 m/s",
    "3.2\\,\\text{m/s}", "3.2 \\times 10^{3}", "3.2e3", "10^{9}", "133^\\circ", "5\\%"),
    or None when the text is not just a number (``2\\pi``, ``\\frac{1}{2}``, ``3/2``, ``x + 1``).

    With ``bare_units=False`` a unit must be wrapped (``\\text{}``, ``\\mathrm{}``, ...), so
    that ``4 k T`` is not read as the number 4.
    """
    s = _clean_number_text(text)
    m = _NUMBER_RE.match(s)
    if not m:
        return None
    rest = s[m.end() :].strip()
    if rest and not _is_unit(rest, bare_units):
        return None
    try:
        value = float(m.group("mant"))
        if m.group("e"):
            value *= 10.0 ** int(m.group("e"))
        if m.group("pow10"):
            value *= 10.0 ** float(m.group("pow10").replace(" ", ""))
        if m.group("pow"):
            value **= int(m.group("pow"))
    except (OverflowError, ValueError, ZeroDivisionError):
        return None
    if not math.isfinite(value):
        return None
    return value, "%" in rest


_UNIT_WRAPPER_RE = re.compile(r"\\(?:text|mathrm|rm|mbox|operatorname|textrm|mathit)\s*\{[^{}]*\}")
_UNIT_MACRO_RE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\(?:mu|Omega|AA|circ|degree|%)(?![A-Za-z])")


def _is_unit(rest: str, bare_units: bool) -> bool:
    """Whether what follows a number reads as a unit: ``\\text{..}``, ``^\\circ``, ``\\%``,
    or (``bare_units``) plain letters such as ``m/s^2``, ``eV``, ``K``."""
    wrapped = bool(_UNIT_WRAPPER_RE.match(rest) or _UNIT_MACRO_RE.match(rest)) or rest[0] in "%°"
    if not wrapped and not (bare_units and re.match(r"[A-Za-zµμΩÅ]", rest)):
        return False
    s = _UNIT_MACRO_RE.sub("#", _UNIT_WRAPPER_RE.sub("#", rest))
    if not bare_units and re.search(r"[A-Za-zµμΩÅ]", s):
        return False
    return re.fullmatch(r"[\s#A-Za-zµμΩÅ°%/.\-^{}()0-9*·]*", s) is not None


def _numbers_close(pred: tuple[float, bool], gold: tuple[float, bool], rel_tol: float) -> bool:
    (p, p_pct), (g, g_pct) = pred, gold
    candidates = [(p, g)]
    if p_pct != g_pct:  # "5 %" against 0.05: also compare as fractions
        candidates.append((p / 100 if p_pct else p, g / 100 if g_pct else g))
    return any(_close(a, b, rel_tol) for a, b in candidates)


def _close(pred: float, gold: float, rel_tol: float) -> bool:
    if gold == 0:
        return abs(pred) <= 1e-12
    return abs(pred - gold) <= rel_tol * abs(gold)


def _symbolic_number(text: str, timeout_s: float) -> float | None:
    """The value of a constant expression (``\\frac{\\sqrt{3}}{2}``, ``2\\pi``) via math-verify, or None."""
    if not text or len(text) > 500:
        return None
    load_math_verify()

    def job() -> float | None:
        parsed = mv_parse(f"${_clean_number_text(text)}$", units=False)
        expr = parsed[0] if parsed else None
        if expr is None or isinstance(expr, str) or not getattr(expr, "is_number", False):
            return None
        value = complex(expr.evalf())
        return value.real if abs(value.imag) < 1e-12 and math.isfinite(value.real) else None

    value, _ = run_bounded(job, timeout_s, None)
    return value


def _numeric_value(text: str, timeout_s: float, *, bare_units: bool) -> tuple[float, bool] | None:
    found = to_number(text, bare_units=bare_units)
    if found is not None:
        return found
    value = _symbolic_number(text, timeout_s)
    return None if value is None else (value, False)


# --------------------------------------------------------------------------------------
# one part against one reference part
# --------------------------------------------------------------------------------------
_YES = {"yes", "true", "correct", "right"}
_NO = {"no", "false", "incorrect", "wrong"}


def _truth(text: str) -> bool | None:
    word = re.sub(r"[^a-z]", "", normalize_latex(text).lower())
    return True if word in _YES else False if word in _NO else None


def _choice_letters(text: str) -> str | None:
    s = normalize_latex(text)
    s = re.sub(r"\\text(?:bf)?\{([^{}]*)\}", r"\1", s).strip("()[]*.")
    return s.upper() if re.fullmatch(r"[A-Za-z]", s) else None


def _interval(text: str) -> tuple[str, str, str, str] | None:
    """``(open, low, high, close)`` of an interval such as ``(-\\infty, 2]``, else None."""
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", text or "").strip().strip("$").strip()
    if len(s) < 5 or s[0] not in "([" or s[-1] not in ")]":
        return None
    ends = split_parts(s[1:-1])
    if len(ends) != 2:
        return None
    return s[0], ends[0], ends[1], s[-1]


def _infinity(text: str) -> float | None:
    m = _INFINITY_RE.fullmatch(re.sub(r"\s+", "", text))
    if not m:
        return None
    sign = next((g for g in m.groups() if g is not None), "")
    return -math.inf if sign == "-" else math.inf


def _ends_equal(pred: str, gold: str, rel_tol: float, timeout_s: float) -> bool:
    p_inf, g_inf = _infinity(pred), _infinity(gold)
    if p_inf is not None or g_inf is not None:
        return p_inf == g_inf
    return _values_equal(pred, gold, rel_tol, timeout_s)


def _intervals_equal(pred: str, gold: str, rel_tol: float, timeout_s: float) -> bool | None:
    p, g = _interval(pred), _interval(gold)
    if p is None or g is None:
        return None
    if (p[0], p[3]) != (g[0], g[3]):
        return False
    return _ends_equal(p[1], g[1], rel_tol, timeout_s) and _ends_equal(p[2], g[2], rel_tol, timeout_s)


def _values_equal(pred: str, gold: str, rel_tol: float, timeout_s: float, *, numeric: bool = False) -> bool:
    """Numbers within ``rel_tol`` when both are numbers; else math-verify.

    ``numeric`` (the part is typed NV): a reference such as "4 K" may carry a bare unit.
    """
    g_num = _numeric_value(gold, timeout_s, bare_units=numeric)
    if g_num is not None:
        p_num = _numeric_value(pred, timeout_s, bare_units=True)
        if p_num is not None:
            return _numbers_close(p_num, g_num, rel_tol)
    return _symbolic_equal(pred, gold, timeout_s)


_RELATION_RE = re.compile(r"=|\\approx(?![A-Za-z])|≈")


def _sides(text: str) -> tuple[str, str] | None:
    """``(lhs, rhs)`` split at the last ``=`` / ``\\approx``, or None without one."""
    pieces = _RELATION_RE.split(text)
    if len(pieces) < 2 or not pieces[-1].strip():
        return None
    lhs = text[: len(text) - len(pieces[-1])]
    return _RELATION_RE.sub("", lhs).strip(), pieces[-1].strip()


def _canonical(text: str) -> str:
    """``normalize_latex`` plus ``x_{1}`` spelled ``x_1``: for comparing equation labels."""
    return re.sub(r"([_^])\{(\w)\}", r"\1\2", normalize_latex(text))


def _strip_trailing_text(text: str) -> str:
    """``v_0 \\, \\text{m/s}`` -> ``v_0``: a trailing ``\\text{...}`` is a unit or a remark."""
    return re.sub(r"(?:\\[,;! ]|\s)*\\(?:text|mbox)\{[^{}]*\}\s*$", "", text).strip() or text


def _symbolic_equal(pred: str, gold: str, timeout_s: float) -> bool:
    """math-verify on the two answers; an equation's label (``v_0 = ...``) is dropped when only
    one side has one or both have the same one, so only the right-hand sides are compared."""
    pred, gold = _strip_trailing_text(pred), _strip_trailing_text(gold)
    p_sides, g_sides = _sides(pred), _sides(gold)
    if p_sides and g_sides and _canonical(p_sides[0]) == _canonical(g_sides[0]):
        pred, gold = p_sides[1], g_sides[1]
    elif g_sides and not p_sides:
        gold = g_sides[1]
    elif p_sides and not g_sides:
        pred = p_sides[1]
    return _canonical(pred) == _canonical(gold) or _math_equal(pred, gold, timeout_s=timeout_s, units=False)


def part_equal(
    pred: str, gold: str, answer_type: str | None = None, *, rel_tol: float = 1e-2, timeout_s: float = DEFAULT_TIMEOUT_S
) -> bool:
    """Whether one response part matches one reference part of the given UGPhysics type."""
    if not pred or not gold:
        return False
    if normalize_latex(pred) == normalize_latex(gold):
        return True
    if answer_type == "TF" or (answer_type is None and _truth(gold) is not None):
        truth = _truth(gold)
        if truth is not None:
            return _truth(pred) == truth
    letter = _choice_letters(gold)
    if answer_type == "MC" and letter is not None:
        return _choice_letters(pred) == letter
    if answer_type in (None, "IN"):
        same = _intervals_equal(pred, gold, rel_tol, timeout_s)
        if same is not None:
            return same or _symbolic_equal(pred, gold, timeout_s)
    return _values_equal(pred, gold, rel_tol, timeout_s, numeric=answer_type == "NV")


# --------------------------------------------------------------------------------------
# matching
# --------------------------------------------------------------------------------------
def _max_matching(n_pred: int, n_gold: int, equal: Callable[[int, int], bool]) -> list[int | None]:
    """For each reference part, the response part matched to it (Kuhn's augmenting paths)."""
    cache: dict[tuple[int, int], bool] = {}

    def eq(i: int, j: int) -> bool:
        if (i, j) not in cache:
            cache[(i, j)] = equal(i, j)
        return cache[(i, j)]

    owner: dict[int, int] = {}  # pred index -> gold index

    def augment(j: int, seen: set[int]) -> bool:
        for i in range(n_pred):
            if i not in seen and eq(i, j):
                seen.add(i)
                if i not in owner or augment(owner[i], seen):
                    owner[i] = j
                    return True
        return False

    for j in range(n_gold):
        augment(j, set())
    match: list[int | None] = [None] * n_gold
    for i, j in owner.items():
        match[j] = i
    return match


def _match_parts(
    pred: list[str], gold: list[str], types: list[str | None], rel_tol: float, timeout_s: float
) -> tuple[list[int | None], bool]:
    """The matching of reference parts to response parts, and whether the given order matched."""

    def equal(i: int, j: int) -> bool:
        return part_equal(pred[i], gold[j], types[j], rel_tol=rel_tol, timeout_s=timeout_s)

    in_order = len(pred) == len(gold) and all(equal(j, j) for j in range(len(gold)))
    if in_order:
        return list(range(len(gold))), True
    if len(pred) * len(gold) > MAX_FULL_MATRIX:
        return [j if j < len(pred) and equal(j, j) else None for j in range(len(gold))], False
    return _max_matching(len(pred), len(gold), equal), False


def _part_types(codes: list[str], n_parts: int) -> list[str | None]:
    """One type per reference part: as listed, or the single listed type for all, else unknown."""
    if len(codes) == n_parts:
        return list(codes)
    if len(codes) == 1:
        return [codes[0]] * n_parts
    return [None] * n_parts


def score_physics(
    response: str,
    answers: str | Sequence[str],
    *,
    answer_type: str | None = None,
    unit: str | None = None,
    rel_tol: float = 1e-2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Score:
    """Score a physics response against UGPhysics ``answers`` (see the module docstring).

    ``value`` is 1.0 only when every part is right (and nothing extra was given);
    ``metrics["parts"]`` is the fraction of parts right.
    """
    gold = _reference_parts(answers)
    codes = parse_answer_types(answer_type)
    types = _part_types(codes, len(gold))
    details: dict[str, Any] = {"gold_parts": gold, "types": types, "unit": unit}
    if not gold:
        details["error"] = "the reference holds no answer"
        return Score(0.0, extracted=None, metrics={"parts": 0.0}, details=details)
    pred, source = _response_parts(response or "", len(gold))
    details.update(pred_parts=pred, source=source)
    extracted = ", ".join(pred) if pred else None
    if not pred:
        return Score(0.0, extracted=None, metrics={"parts": 0.0}, details=details)
    match, in_order = _match_parts(pred, gold, types, rel_tol, timeout_s)
    matched = sum(m is not None for m in match)
    parts = matched / max(len(gold), len(pred))
    details.update(matched=[m is not None for m in match], in_order=in_order)
    return Score(1.0 if parts >= 1.0 else 0.0, extracted=extracted, metrics={"parts": parts}, details=details)
