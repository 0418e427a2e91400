"""Reward functions for ``SandboxEnv``: ``reward_fn(task, answer, info) -> float``.

``answer`` is the text of the sandbox's answer file when the episode ends
(``Paths.of(sandbox).answer_file``: ``<workdir>/output/answer.txt``, ``/testbed/output/answer.txt``
by default; None when there is no such file); ``info`` holds ``exit_reason``, ``steps``,
``usage``, ``messages`` and the live ``sandbox`` (still acquired: a reward function may run checks
in it, e.g. a test suite; ``Paths.of(info["sandbox"])`` says where the files are).

The default, :func:`exact_match`, compares the answer with ``task.metadata["answer"]`` after
normalisation (whitespace, case, NFKC, a trailing period, surrounding ``$``/``\\boxed{}``,
thousands separators; numbers compare by value), and gives 0 when the task has no reference answer.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

__all__ = ["RewardFn", "domain_reward", "domain_tasks", "exact_match", "normalize_answer", "zero_reward"]


class RewardFn(Protocol):
    def __call__(self, task: Any, answer: str | None, info: dict) -> float: ...


def normalize_answer(text: str) -> str:
    """The comparable form of an answer: stripped, casefolded, single spaces, no wrapping
    (``sandboxlite.eval.normalize.normalize(text, "reward")``)."""
    from ..eval.normalize import normalize

    return normalize(text, "reward")


def _number(s: str) -> float | None:
    try:
        x = float(s)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def exact_match(task: Any, answer: str | None, info: dict | None = None) -> float:
    """1.0 when ``answer`` matches ``task.metadata["answer"]`` (normalised, or equal as numbers),
    else 0.0; 0.0 when the task has no reference answer or there is no answer."""
    metadata = getattr(task, "metadata", None) or {}
    if answer is None or "answer" not in metadata or metadata["answer"] is None:
        return 0.0
    expected = metadata["answer"]
    refs = expected if isinstance(expected, list) else [expected]
    got = normalize_answer(answer)
    for ref in refs:
        want = normalize_answer(str(ref))
        if got == want:
            return 1.0
        a, b = _number(got), _number(want)
        if a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            return 1.0
    return 0.0


def zero_reward(task: Any, answer: str | None, info: dict | None = None) -> float:
    return 0.0


def domain_tasks(domain: str, data_dir: Any, *, limit: int | None = None, seed: int = 0, ids: list[str] | None = None,
                 **task_options: Any) -> list:  # fmt: skip
    """The items of an eval domain (``math``, ``qed``, ``dream``, ...) as ``Task`` objects whose
    metadata carries what :func:`domain_reward` needs; a seeded sample spread over the strata."""
    from pathlib import Path

    from ..eval.domains import get_domain
    from ..eval.runner import select

    d = get_domain(domain)
    items = select(d.load(Path(data_dir)), limit=limit, ids=ids, seed=seed, domain=d.name)
    return [item.to_task(**task_options) for item in items]


def domain_reward(domain: str | None = None, *, judge: Any = None) -> RewardFn:
    """A reward function that scores the answer with an eval domain's scorer (``Score.value``).

    The task must come from :func:`domain_tasks` (or carry ``metadata["domain"]`` and
    ``metadata["reference"]``); ``domain`` overrides the task's own.  No answer file scores 0.
    """
    from ..eval.domains import get_domain
    from ..eval.items import EvalItem

    def reward(task: Any, answer: str | None, info: dict) -> float:
        meta = task.metadata or {}
        name = domain or meta.get("domain")
        if name is None or "reference" not in meta:
            raise ValueError(f"task {task.id} has no eval reference (make it with domain_tasks())")
        d = get_domain(name)
        item = EvalItem(str(meta.get("item", task.id)), d.name, task.query, meta["reference"])
        return d.score(item, answer or "", judge).value

    return reward
