"""How an agent run ends, as values: ``ExitReason`` (machine-readable) and ``Outcome`` (reason + detail);
the record of each turn (``Step``) and what a step did (``StepOutcome``).

::

    ExitReason        ends    exit_reason text (recorded data, unchanged)
    SUBMITTED         well    "submitted"                      the model called submit
    ANSWERED          well    "answered"                       vanilla mode: the one reply arrived
    MAX_STEPS         limit   "limits exceeded: max_steps=N reached"
    TOKEN_BUDGET      limit   "limits exceeded: token budget N used up"
    WALL_TIME         limit   "limits exceeded: wall time Ns used up"
    FORMAT_ERRORS     limit   "limits exceeded: N replies in a row without a usable tool call; ..."
    CONTEXT_OVERFLOW  limit   "limits exceeded: the conversation no longer fits the model's context (...)"
    STUCK             limit   "limits exceeded: the same tool calls and results N times in a row"
    MODEL_ERROR       error   "model error: ..."               the endpoint failed (after its retries)
    SANDBOX_ERROR     error   "sandbox error: ..."             the jail failed under the tools
    INTERRUPTED       broken  "interrupted"                    Ctrl-C or an exception stopped run_task
    ABANDONED         broken  "abandoned"                      an RL episode reset or closed mid-way

``ExitReason`` is a ``str`` enum: it compares equal to, and serialises (JSON) as, its value
(``"max_steps"``).  Branch on it, never on the text: ``outcome.reason is ExitReason.MODEL_ERROR``,
``outcome.reason.is_limit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class ExitReason(str, Enum):
    SUBMITTED = "submitted"
    ANSWERED = "answered"
    MAX_STEPS = "max_steps"
    TOKEN_BUDGET = "token_budget"
    WALL_TIME = "wall_time"
    FORMAT_ERRORS = "format_errors"
    CONTEXT_OVERFLOW = "context_overflow"
    STUCK = "stuck"
    MODEL_ERROR = "model_error"
    SANDBOX_ERROR = "sandbox_error"
    INTERRUPTED = "interrupted"
    ABANDONED = "abandoned"

    def __str__(self) -> str:  # the value, on every Python version (as StrEnum does)
        return self.value

    @property
    def is_limit(self) -> bool:
        """A limit ended the run (steps, tokens, wall time, format errors or repetitions in a row,
        context)."""
        return self in _LIMITS


_LIMITS = frozenset({ExitReason.MAX_STEPS, ExitReason.TOKEN_BUDGET, ExitReason.WALL_TIME,
                     ExitReason.FORMAT_ERRORS, ExitReason.CONTEXT_OVERFLOW, ExitReason.STUCK})  # fmt: skip
_PREFIX = {ExitReason.MODEL_ERROR: "model error", ExitReason.SANDBOX_ERROR: "sandbox error",
           **{r: "limits exceeded" for r in _LIMITS}}  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """How a run ended: ``reason``, and ``detail`` saying what exactly (e.g. "max_steps=3 reached").

    ``exit_reason`` is the human-readable text recorded in trajectory.json, results.jsonl and RL
    info dicts.  ``error`` is the exception behind a MODEL_ERROR or SANDBOX_ERROR (not compared).
    """

    reason: ExitReason
    detail: str = ""
    error: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def exit_reason(self) -> str:
        prefix = _PREFIX.get(self.reason)
        return f"{prefix}: {self.detail}" if prefix else self.reason.value

    def __str__(self) -> str:
        return self.exit_reason


@dataclass
class Step:
    """One model turn, as the trajectory records it."""

    index: int
    model_s: float
    tools_s: float
    assistant: dict[str, Any]
    observations: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    finish_reason: str | None = None  # the backend's: "stop", "tool_calls", "length" (the reply was cut)
    # replies the backend generated and threw away before this one (a local model's reply that did not
    # parse, before its grammar-constrained retry): [{"content": ..., "error": why}]
    discarded: list[dict[str, Any]] = field(default_factory=list)
    # on the first step only: the prompt as the model saw it (see Agent._prompt_seen)
    prompt: dict[str, Any] | None = None
    note: str | None = None  # what the loop added after the results (the repetition nudge)


@dataclass(frozen=True)
class StepOutcome:
    """What one ``Agent.step()`` did: ``step``, the turn's record (None when no turn was recorded:
    a limit was already reached, or the jail failed mid-turn), and ``outcome``, set when the run
    ended (``done``)."""

    step: Step | None
    outcome: Outcome | None = None

    @property
    def done(self) -> bool:
        return self.outcome is not None

    @property
    def reason(self) -> ExitReason | None:
        return self.outcome.reason if self.outcome is not None else None

    @property
    def detail(self) -> str | None:
        return self.outcome.detail if self.outcome is not None else None
