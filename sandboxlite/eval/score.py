"""``Score``: what every scorer returns.

``value`` is the primary metric in [0, 1] (the one the summary tables average); ``metrics`` holds
secondary ones by name (also in [0, 1], averaged beside it: IFBench's ``loose``, a long-context
``rouge_l``, ...); ``extracted`` is what the scorer read from the response (the boxed answer, the
letter) so a reader of ``results.jsonl`` sees why; ``details`` is free-form JSON-serialisable data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Score:
    value: float
    extracted: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    approximate: bool = False  # True when a rule-based stand-in replaced the proper judge

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.value) <= 1.0:
            raise ValueError(f"Score.value must lie in [0, 1], got {self.value!r}")
        self.value = float(self.value)

    @property
    def correct(self) -> bool:
        return self.value >= 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "extracted": self.extracted, "metrics": dict(self.metrics),
                "details": self.details, "approximate": self.approximate}  # fmt: skip
