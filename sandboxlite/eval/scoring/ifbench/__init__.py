"""IFBench instruction following, scored by the project's own checkers (standard library only).

``score_ifbench(response, instruction_id_list, kwargs, prompt=None)`` returns a ``Score`` whose
``value`` is the prompt-level *strict* accuracy (1.0 only if every instruction is followed) and
whose ``metrics`` hold the prompt-level *loose* accuracy and the instruction-level fractions, as
in IFEval.  *Loose* accepts an instruction when any of eight variants of the response passes:
the response itself, without its first line, without its last line, without both, and each of
those four with every ``*`` (markdown emphasis) removed.

``CHECKERS`` maps each instruction id to a small function ``(response, **kwargs) -> bool``; the
row's kwargs are passed with null values dropped, plus ``prompt`` (used by the ``repeat:``
checkers when ``prompt_to_repeat`` is missing).  An id without a checker raises ``KeyError``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...score import Score
from .checkers import CHECKERS, Checker

__all__ = ["CHECKERS", "Checker", "HEURISTIC_IDS", "check", "loose_variants", "score_ifbench",
           "supported_ids"]

# checkers that stand in for an NLP model (POS tagger, pronunciation dictionary) with a word list
# or a rule: a Score containing one of them is flagged ``approximate``
HEURISTIC_IDS = frozenset({"words:start_verb", "words:odd_even_syllables"})


def supported_ids() -> list[str]:
    """Every instruction id that has a checker, sorted."""
    return sorted(CHECKERS)


def _checker(instruction_id: str) -> Checker:
    try:
        return CHECKERS[instruction_id]
    except KeyError:
        raise KeyError(f"no checker exists for IFBench instruction id {instruction_id!r}") from None


def _clean_kwargs(kw: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (kw or {}).items() if v is not None}


def _with_prompt(args: dict[str, Any], prompt: str | None) -> dict[str, Any]:
    return {**args, "prompt": prompt if prompt is not None else args.get("prompt")}


def check(instruction_id: str, response: str, prompt: str | None = None, **kwargs: Any) -> bool:
    """Strict check of one instruction (null kwargs ignored); an empty response never passes."""
    fn = _checker(instruction_id)
    if not response or not response.strip():
        return False
    return bool(fn(response, **_with_prompt(_clean_kwargs(kwargs), prompt)))


def loose_variants(response: str) -> list[str]:
    """The eight IFEval loose variants of ``response`` (duplicates and empty ones dropped)."""
    lines = response.split("\n")
    base = [response,
            "\n".join(lines[1:]).strip(),
            "\n".join(lines[:-1]).strip(),
            "\n".join(lines[1:-1]).strip()]
    out: list[str] = []
    for v in base + [b.replace("*", "") for b in base]:
        if v.strip() and v not in out:
            out.append(v)
    return out


def score_ifbench(response: str, instruction_id_list: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None],
                  prompt: str | None = None) -> Score:
    """Score one IFBench row: strict prompt-level accuracy as ``value``; loose and instruction-level in ``metrics``."""
    ids = list(instruction_id_list)
    kw_list = list(kwargs or [])
    if len(kw_list) < len(ids):
        kw_list += [{}] * (len(ids) - len(kw_list))
    checkers = [_checker(i) for i in ids]  # an unknown id fails before anything is scored
    response = response or ""
    variants = loose_variants(response)

    results: dict[str, dict[str, bool]] = {}
    strict_flags: list[bool] = []
    loose_flags: list[bool] = []
    for k, (iid, fn, kw) in enumerate(zip(ids, checkers, kw_list)):
        args = _with_prompt(_clean_kwargs(kw), prompt)
        strict = bool(response.strip()) and bool(fn(response, **args))
        loose = strict or any(bool(fn(v, **args)) for v in variants if v != response)
        strict_flags.append(strict)
        loose_flags.append(loose)
        key = iid if iid not in results else f"{iid}#{k}"
        results[key] = {"strict": strict, "loose": loose}

    n = len(ids)
    strict_all = n > 0 and all(strict_flags)
    loose_all = n > 0 and all(loose_flags)
    metrics = {
        "loose": 1.0 if loose_all else 0.0,
        "instruction_strict": sum(strict_flags) / n if n else 0.0,
        "instruction_loose": sum(loose_flags) / n if n else 0.0,
    }
    return Score(value=1.0 if strict_all else 0.0, extracted=None, metrics=metrics,
                 details={"instructions": results}, approximate=any(i in HEURISTIC_IDS for i in ids))
