"""``EvalItem`` (one question of a benchmark) and ``Domain`` (a loader plus a scorer).

A domain turns the rows of its data files into items, in a stable order, and scores a model's
response to one item.  The same item is asked in both modes: in sandbox mode its ``files`` are
written to ``input_path`` inside the sandbox and the agent answers in ``answer.txt``; in vanilla
mode the files are inlined into the prompt and the reply itself is the response.  ``input_path``
is a task path: ``/testbed/...`` is under the workdir of the sandbox the item runs in (see
``sandboxlite.agent.paths``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.paths import DEFAULT_WORKDIR
from ..agent.task import Task
from .score import Score

INPUT_PATH = f"{DEFAULT_WORKDIR}/input"  # a task path: <workdir>/input where the item runs


@dataclass(frozen=True)
class EvalItem:
    id: str  # unique within its domain; letters, digits, "._-"
    domain: str
    query: str  # what the model is asked, in both modes
    reference: dict[str, Any]  # what the scorer needs (answer, label, instructions, ...)
    files: dict[str, str] = field(default_factory=dict)  # name -> text
    input_path: str = INPUT_PATH
    stratum: str = ""  # samples are spread evenly over strata (UGPhysics subjects, ...)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_task(self, *, max_steps: int = 50, timeout_s: float = 1800.0, rootfs: str = "auto",
                prompt: str | None = None) -> Task:  # fmt: skip
        return Task(id=f"{self.domain}-{self.id}", query=self.query, input_files=dict(self.files),
                    input_path=self.input_path, rootfs=rootfs, max_steps=max_steps, timeout_s=timeout_s,
                    prompt=prompt, metadata={"domain": self.domain, "item": self.id, "reference": self.reference,
                                                **self.metadata})  # fmt: skip


Loader = Callable[[Path], list[EvalItem]]
# (item, response, judge or None) -> Score; ``response`` is the answer file (sandbox mode) or the reply
Scorer = Callable[[EvalItem, str, Any], Score]


@dataclass(frozen=True)
class Domain:
    name: str
    description: str
    load: Loader
    score: Scorer
    paper_n: int | None = None  # how many items the paper evaluated (a hint for --limit)
    uses_judge: bool = False  # scored by the LLM judge when one is given
