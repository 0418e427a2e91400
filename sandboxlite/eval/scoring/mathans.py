"""Math answers: read the boxed answer out of a response and compare it with the reference.

``extract_boxed`` / ``last_boxed`` pull ``\\boxed{...}`` (and ``\\fbox{...}``) contents out of a
response, nested and escaped braces included; ``math_equal`` decides whether two answer strings
are mathematically equal (plain numbers directly, everything else through math-verify);
``score_math`` scores an AIME-style response (the last box wins); ``pass_at_k`` is the unbiased
pass@k estimator for repeated samples.

Bounded time: math-verify's own timeouts use ``signal.alarm``, which only works in the main
thread (and would cancel any timer already running there, such as pytest-timeout's).  So its
timeouts are always disabled and ``run_bounded`` provides the bound instead: in the main thread,
when no interval timer is already running, a ``SIGALRM`` timer interrupts the computation; in
any other case (worker threads of the eval runner) the computation runs in a daemon watchdog
thread that is abandoned when it overruns (Python cannot kill a thread, so a runaway sympy
computation keeps one core busy until it ends; at most ``MAX_ABANDONED`` such threads may be
alive at once, after that math-verify comparisons are refused rather than stacked up).
"""

from __future__ import annotations

import json
import logging
import math
import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..score import Score

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "extract_boxed",
    "iter_boxed",
    "last_boxed",
    "load_math_verify",
    "math_equal",
    "mv_equal",
    "mv_parse",
    "pass_at_k",
    "plain_number",
    "run_bounded",
    "score_math",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 5.0
MAX_ABANDONED = 4  # watchdog threads still running past their deadline
MAX_ANSWER_CHARS = 2000  # longer "answers" are not handed to sympy at all

_BOX_CMD_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


# --------------------------------------------------------------------------------------
# boxes
# --------------------------------------------------------------------------------------
def iter_boxed(text: str) -> Iterator[tuple[int, str]]:
    """``(position, content)`` of every complete box in ``text``, in order.

    ``\\boxed{...}`` and ``\\fbox{...}`` with balanced braces (``\\{`` and ``\\}`` do not count),
    and the ``\\boxed 5`` shorthand (the next run of non-space characters, trailing ``.,;``
    dropped).  A box left open (a truncated response) is skipped.  Contents are stripped.
    """
    text = text or ""
    pos = 0
    while m := _BOX_CMD_RE.search(text, pos):
        i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            end = _matching_brace(text, i)
            if end is None:
                pos = m.end()
                continue
            yield m.start(), text[i + 1 : end].strip()
            pos = end + 1
        elif i > m.end() and (short := re.match(r"[^\s$]+", text[i:])):
            content = short.group().rstrip(".,;")
            if content and not content.startswith("\\"):
                yield m.start(), content
            pos = i + short.end()
        else:
            pos = m.end()


def _matching_brace(text: str, open_at: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_at``, or None when it never closes."""
    depth = 0
    i = open_at
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped character (\{, \}, \\) never changes the depth
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def extract_boxed(text: str) -> list[str]:
    """The contents of every ``\\boxed{}`` / ``\\fbox{}`` in ``text``, in order."""
    return [content for _, content in iter_boxed(text)]


def last_boxed(text: str) -> str | None:
    """The content of the last box in ``text`` (the final answer), or None."""
    boxes = extract_boxed(text)
    return boxes[-1] if boxes else None


def open_final_box(text: str) -> str | None:
    """What follows a last ``\\boxed{`` that never closes (a reply cut in its final answer), when
    no complete box comes after it; else None."""
    text = text or ""
    openers = [m for m in _BOX_CMD_RE.finditer(text) if text[m.end() : m.end() + 1] == "{"]
    if not openers or _matching_brace(text, openers[-1].end()) is not None:
        return None
    content = text[openers[-1].end() + 1 :].strip()
    return content or None


_TEXT_WRAP_RE = re.compile(r"\\(?:text|mathrm|textrm|mbox|rm)\{")


def unwrap_text(answer: str) -> str:
    """``\\text{\\frac{1}{2}}`` -> ``\\frac{1}{2}``: a text wrapper around the whole answer removed."""
    s = answer.strip()
    m = _TEXT_WRAP_RE.match(s)
    if m and _matching_brace(s, m.end() - 1) == len(s) - 1:
        return s[m.end() : -1].strip()
    return s


# --------------------------------------------------------------------------------------
# bounded execution
# --------------------------------------------------------------------------------------
class _Deadline(BaseException):
    """Raised by the SIGALRM handler; a BaseException so math-verify's ``except Exception`` lets it through."""


_abandoned: set[threading.Thread] = set()
_abandoned_lock = threading.Lock()


def run_bounded(fn: Callable[[], T], timeout_s: float, default: T) -> tuple[T, str | None]:
    """Run ``fn()`` for at most about ``timeout_s`` seconds; never raises.

    Returns ``(result, None)``, or ``(default, why)`` when ``fn`` raised, ran out of time or
    could not be started.  Safe to call from any thread (see the module docstring).
    """
    if _can_use_alarm():
        return _run_with_alarm(fn, timeout_s, default)
    return _run_in_watchdog(fn, timeout_s, default)


def _can_use_alarm() -> bool:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return False
    try:
        return signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # do not clobber someone else's timer
    except (OSError, ValueError):
        return False


def _run_with_alarm(fn: Callable[[], T], timeout_s: float, default: T) -> tuple[T, str | None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise _Deadline()

    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 0.001))
        try:
            return fn(), None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Deadline:
        return default, f"timed out after {timeout_s:g}s"
    except Exception as e:  # noqa: BLE001 - a scorer must never raise
        return default, f"{type(e).__name__}: {e}"
    finally:
        signal.signal(signal.SIGALRM, old_handler)


def _run_in_watchdog(fn: Callable[[], T], timeout_s: float, default: T) -> tuple[T, str | None]:
    with _abandoned_lock:
        _abandoned.difference_update([t for t in _abandoned if not t.is_alive()])
        if len(_abandoned) >= MAX_ABANDONED:
            return default, f"refused: {len(_abandoned)} earlier computations are still running past their deadline"
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            box["error"] = f"{type(e).__name__}: {e}"

    worker = threading.Thread(target=target, name="math-verify-watchdog", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        with _abandoned_lock:
            _abandoned.add(worker)
        return default, f"timed out after {timeout_s:g}s"
    if "error" in box:
        return default, box["error"]
    return box["result"], None


# --------------------------------------------------------------------------------------
# math-verify
# --------------------------------------------------------------------------------------
def load_math_verify() -> None:
    """Import math-verify (and sympy) now, outside any time bound: a first import cut short by
    the alarm, or charged to a comparison's budget, would be wrong."""
    try:
        import latex2sympy2_extended  # noqa: F401
        import math_verify  # noqa: F401
    except Exception:  # noqa: BLE001 - the comparison itself will report the failure
        log.debug("math-verify could not be imported", exc_info=True)


def _verify(gold: list, pred: list) -> bool:
    """math-verify's ``verify`` without its signal timeout (``run_bounded`` is the timeout here)."""
    from math_verify import grader

    grader.TIMEOUT_WARNING_SHOWN = True  # its "timeout is disabled" warning does not apply
    return bool(grader.verify(gold, pred, timeout_seconds=None))


def mv_parse(text: str, *, units: bool = True) -> list:
    """math-verify's parse of an answer string (or a whole response), no signal timeout; may raise.

    ``units``: math-verify's unit removal (right for "5 \\text{cm}" in a math answer; wrong in a
    physics expression, where it eats symbols such as ``l`` or ``\\mathrm{m}``).
    """
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, parser

    parser.TIMEOUT_WARNING_SHOWN = True  # its "timeout is disabled" warning does not apply
    normalization = NormalizationConfig(
        basic_latex=True, units=units, malformed_operators=True, nits=True, boxed="all", equations=False
    )
    config = [LatexExtractionConfig(boxed_match_priority=0, normalization_config=normalization), ExprExtractionConfig()]
    return parse(text, extraction_config=config, parsing_timeout=None)  # type: ignore[arg-type]


def _as_math(answer: str) -> str:
    """An answer string made ready for math-verify: plain answers are wrapped in ``$...$``."""
    if "$" in answer or "\\boxed" in answer or "\\[" in answer or "\\(" in answer:
        return answer
    return f"${answer}$"


def mv_equal(
    pred: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, *, units: bool = True
) -> tuple[bool, str | None]:
    """math-verify's verdict on two answer strings, bounded in time: ``(equal, error or None)``."""
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False, "answer too long for math-verify"

    load_math_verify()

    def job() -> bool:
        gold_parsed = mv_parse(_as_math(gold), units=units)
        pred_parsed = mv_parse(_as_math(pred), units=units)
        return bool(gold_parsed) and bool(pred_parsed) and _verify(gold_parsed, pred_parsed)

    return run_bounded(job, timeout_s, False)


# --------------------------------------------------------------------------------------
# plain numbers and normalisation
# --------------------------------------------------------------------------------------
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))|(?<=\d)\{,\}(?=\d{3}(?!\d))")
_PLAIN_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def plain_number(text: str) -> float | None:
    """The value of a plain decimal number ("033", "1,000", "-2.5", "3.2e3"), else None."""
    s = re.sub(r"\s+|\$|\\[,;!: ]", "", text or "").rstrip(".")
    s = _THOUSANDS_RE.sub("", s).replace("{,}", ".")  # "3{,}5" is a decimal comma
    if not _PLAIN_NUMBER_RE.fullmatch(s):
        return None
    try:
        value = float(s)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def normalize_latex(text: str) -> str:
    """A light canonical form for string comparison: no spaces, ``$``, ``\\left``/``\\right``,
    ``\\dfrac``/``\\tfrac`` spelled ``\\frac``, ``\\text{...}``/``\\mathrm{...}`` unwrapped."""
    s = (text or "").strip().strip("$").strip()
    s = re.sub(r"\\(?:left|right|displaystyle)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", s)
    s = re.sub(r"\\(?:text|mathrm|textrm|mbox|rm)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\[,;!: ]|~|\s+", "", s)
    return s.rstrip(".")


def _sci_to_latex(text: str) -> str:
    """``3.2e3`` -> ``3.2\\times10^{3}`` (math-verify reads ``e`` as Euler's number)."""
    return re.sub(r"(\d)[eE]([+-]?\d+)(?![\w.])", r"\1\\times10^{\2}", text)


def math_equal(pred: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, units: bool = True) -> bool:
    """Whether answer ``pred`` equals reference ``gold`` mathematically; never raises.

    Identical after ``normalize_latex`` -> equal; two plain numbers -> compared as numbers
    (leading zeros and thousands separators ignored); otherwise math-verify decides
    (``\\frac{1}{2}`` equals 0.5), within ``timeout_s`` seconds (False when it runs out).
    ``units=False`` keeps math-verify from removing unit-like words (see ``mv_parse``).
    """
    try:
        return _math_equal(pred, gold, timeout_s, units)
    except Exception:  # noqa: BLE001 - never raise out of a scorer
        log.debug("math_equal failed", exc_info=True)
        return False


def _math_equal(pred: str, gold: str, timeout_s: float, units: bool) -> bool:
    if pred is None or gold is None:
        return False
    pred, gold = unwrap_text(str(pred)), unwrap_text(str(gold))
    p, g = normalize_latex(pred), normalize_latex(gold)
    if not p or not g:
        return False
    if p == g:
        return True
    pn, gn = plain_number(p), plain_number(g)
    if pn is not None and gn is not None:
        return math.isclose(pn, gn, rel_tol=1e-9)
    equal, _ = mv_equal(_sci_to_latex(pred.strip()), _sci_to_latex(gold.strip()), timeout_s, units=units)
    return equal


# --------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------
_WORD_RE = re.compile(r"[A-Za-z]{3,}")
_LATEX_CMD_RE = re.compile(r"\\[A-Za-z]+")


def _is_expression(text: str) -> bool:
    """One short line with no word of three letters or more outside LaTeX commands."""
    return 0 < len(text) <= 200 and "\n" not in text and not _WORD_RE.search(_LATEX_CMD_RE.sub("", text))


def score_math(response: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Score:
    """1.0 when the response's final answer equals ``gold``, else 0.0.

    The final answer is the last box, or a last box left open (a reply cut in it: what follows
    its brace); ``extracted`` holds it.  A response that is one short expression and nothing
    else ("2\\sqrt{2}") is the answer itself.  Otherwise math-verify's own extraction of the
    response (its "final answer is" anchors, then the last expression) is compared instead, and
    recorded in ``details["fallback"]``.
    """
    gold = "" if gold is None else str(gold)  # AIME answers may arrive as ints
    gold_answer = (last_boxed(gold) if "\\boxed" in gold else gold) or ""
    gold_answer = gold_answer.strip()
    response = response or ""
    cut = open_final_box(response)
    boxed = cut if cut is not None else last_boxed(response)
    if boxed is not None:
        correct = math_equal(boxed, gold_answer, timeout_s=timeout_s)
        method = "open_box" if cut is not None else "boxed"
        return Score(float(correct), extracted=boxed, details={"gold": gold_answer, "method": method})
    bare = response.strip()
    if _is_expression(bare):  # the whole response is one expression ("2\\sqrt{2}"): compared as an answer
        correct = math_equal(bare, gold_answer, timeout_s=timeout_s)
        return Score(float(correct), extracted=bare, details={"gold": gold_answer, "method": "bare"})
    correct, found, error = _fallback_compare(response or "", gold_answer, timeout_s)
    details: dict[str, Any] = {"gold": gold_answer, "method": "math_verify_fallback", "fallback": found}
    if error:
        details["error"] = error
    return Score(float(correct), extracted=None, details=details)


_TOOL_TAG_RE = re.compile(r"<tool_call>.*?(?:</tool_call>|\Z)", re.DOTALL)
_JSON_DECODER = json.JSONDecoder()


def iter_json_objects(text: str) -> Iterator[tuple[int, int, Any]]:
    """``(start, end, value)`` of every JSON value that starts with ``{`` in ``text``, left to right
    (one that does not parse is skipped; the search goes on after each value found)."""
    start = text.find("{")
    while start != -1:
        try:
            obj, end = _JSON_DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        yield start, end, obj
        start = text.find("{", end)


def strip_tool_calls(text: str) -> str:
    """``text`` without the tool calls written in it (``<tool_call>`` blocks, JSON objects with a
    "name" and "arguments" or "parameters"): a call's arguments are never an answer (a
    ``"timeout": 120`` once scored against the gold 120)."""
    text = _TOOL_TAG_RE.sub(" ", text)
    out, pos = [], 0
    for start, end, obj in iter_json_objects(text):
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            out.append(text[pos:start] + " ")
            pos = end
    return "".join(out) + text[pos:]


def _fallback_compare(response: str, gold: str, timeout_s: float) -> tuple[bool, str | None, str | None]:
    """No box: let math-verify extract the answer from the response without its tool calls (its
    tail when long)."""
    tail = strip_tool_calls(response)[-MAX_ANSWER_CHARS:]
    load_math_verify()

    def job() -> tuple[bool, str | None]:
        pred_parsed = mv_parse(tail)
        if not pred_parsed:
            return False, None
        found = str(pred_parsed[-1])
        gold_parsed = mv_parse(_as_math(_sci_to_latex(gold)))
        return bool(gold_parsed) and _verify(gold_parsed, pred_parsed), found

    (correct, found), error = run_bounded(job, timeout_s, (False, None))
    return correct, found, error


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: 1 - C(n-c, k) / C(n, k)."""
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) as a stable product
        miss *= 1.0 - k / i
    return 1.0 - miss
