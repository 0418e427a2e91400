"""Your own tasks without code: a JSONL file, one task per line.

::

    {"id": "q1", "question": "What is 6*7?", "answer": "42", "scoring": "numeric"}
    {"id": "q2", "question": "Capital of France?", "answer": "Paris"}
    {"id": "q3", "question": "Sum the numbers in numbers.txt.", "answer": "42",
     "files": {"numbers.txt": "17\\n25"}, "scoring": "numeric", "tolerance": 0.001}
    {"id": "q4", "question": "Which is a noble gas?\\nA. N\\nB. Ar", "answer": "B", "scoring": "choice"}

Keys: ``id`` and ``question`` and ``answer`` (required); ``scoring``: ``exact`` (the default:
case, spaces, thousands separators and punctuation at the ends ignored: ``normalize`` mode
"exact"), ``numeric`` (relative ``tolerance``, default 1e-6), ``contains`` (the reference appears in the final answer), ``choice`` (a letter; ``letters``
default "ABCD"), ``math`` (math-verify); ``files``: name -> text, put in the sandbox's input
directory (``<workdir>/input``, sandbox mode) or inlined (vanilla mode); ``domain``: the name in
the tables (default: the file's stem).

The final answer is read from the response as: the last ``\\boxed{...}``, else the last
"Answer: ..." line, else the last non-empty line.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from ..errors import TaskError
from .domains import safe_id
from .items import Domain, EvalItem
from .normalize import normalize
from .score import Score

SCORINGS = ("exact", "numeric", "contains", "choice", "math")
_KEYS = {"id", "question", "answer", "scoring", "tolerance", "letters", "files", "domain"}
_ANSWER_LINE = re.compile(r"^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:：]\s*(.+?)\s*$", re.I | re.M)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:,\d{3})*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def final_answer(response: str) -> str:
    from .scoring.mathans import last_boxed

    boxed = last_boxed(response)
    if boxed is not None:
        return boxed.strip()
    lines = _ANSWER_LINE.findall(response)
    if lines:
        return lines[-1].strip()
    rest = [line.strip() for line in response.strip().splitlines() if line.strip()]
    return rest[-1] if rest else ""


def _number(text: str) -> float | None:
    found = _NUMBER.findall(text.replace("\u2212", "-"))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def score_row(response: str, ref: dict[str, Any]) -> Score:
    kind, gold = ref["scoring"], str(ref["answer"])
    if kind == "choice":
        from .scoring.choice import score_choice

        return score_choice(response, gold.strip().upper(), letters=ref.get("letters") or "ABCD")
    if kind == "math":
        from .scoring.mathans import score_math

        return score_math(response, gold)
    got = final_answer(response)
    if kind == "numeric":
        a, b = _number(got), _number(gold)
        ok = a is not None and b is not None and math.isclose(a, b, rel_tol=ref.get("tolerance", 1e-6), abs_tol=1e-12)
    elif kind == "contains":
        want = normalize(gold, "exact")
        ok = bool(want) and want in normalize(got, "exact")
    else:
        ok = normalize(got, "exact") == normalize(gold, "exact")
    return Score(1.0 if ok else 0.0, got, details={"scoring": kind})


def _check(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise TaskError(where, f"expected a JSON object, got {type(row).__name__}")
    unknown = set(row) - _KEYS
    if unknown:
        raise TaskError(where, f"unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(_KEYS))})")
    for key in ("id", "question", "answer"):
        if key not in row or row[key] in (None, ""):
            raise TaskError(where, f"missing {key!r}")
    if not isinstance(row["question"], str):
        raise TaskError(f"{where}.question", "expected a string")
    if row.get("scoring", "exact") not in SCORINGS:
        raise TaskError(f"{where}.scoring", f"expected one of {', '.join(SCORINGS)}, got {row['scoring']!r}")
    files = row.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise TaskError(f"{where}.files", "expected an object mapping file names to text")
    tol = row.get("tolerance", 1e-6)
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or tol < 0:
        raise TaskError(f"{where}.tolerance", f"expected a non-negative number, got {tol!r}")
    return row


def load_tasks_file(path: str | Path) -> list[Domain]:
    """One ``Domain`` per ``domain`` value in the file (default: the file's stem)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TaskError("tasks", f"cannot read {p}: {e.strerror}") from None
    grouped: dict[str, list[EvalItem]] = {}
    seen: set[tuple[str, str]] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p.name}:{n}"
        try:
            row = _check(json.loads(line), where)
        except json.JSONDecodeError as e:
            raise TaskError(where, f"not valid JSON: {e.msg}") from None
        domain = safe_id(row.get("domain") or p.stem)
        item_id = safe_id(row["id"])
        if (domain, item_id) in seen:
            raise TaskError(f"{where}.id", f"duplicate id {row['id']!r} in domain {domain!r}")
        seen.add((domain, item_id))
        kind = row.get("scoring", "exact")
        suffix = "\n\nPut your final answer within \\boxed{}." if kind != "choice" else (
            "\n\nAnswer with the letter of the correct option, as \\boxed{X}.")  # fmt: skip
        ref = {"answer": row["answer"], "scoring": kind, "tolerance": row.get("tolerance", 1e-6),
               "letters": row.get("letters")}  # fmt: skip
        grouped.setdefault(domain, []).append(
            EvalItem(item_id, domain, row["question"] + suffix, ref, files=dict(row.get("files", {}))))
    if not grouped:
        raise TaskError("tasks", f"{p} holds no tasks")
    return [Domain(name, f"custom tasks from {p.name}", (lambda _dir, items=items: list(items)),
                   lambda item, response, judge=None: score_row(response, item.reference))
            for name, items in grouped.items()]  # fmt: skip
