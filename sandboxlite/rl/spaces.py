"""Observation and action spaces of ``SandboxEnv``: chat messages, not arrays.

Gymnasium has no space for chat messages, so these are custom ``gymnasium.spaces.Space``
subclasses when gymnasium is installed (plain classes with the same ``contains`` / ``sample`` /
``seed`` methods when it is not).  They are *non-standard*: they cannot be flattened into numpy
arrays, and vector wrappers that batch observations do not apply.

- ``MessagesSpace``: a list of chat messages, each a dict with a ``role`` (system, user,
  assistant, tool) and a ``content`` that is text or None.
- ``AssistantActionSpace``: what ``SandboxEnv.step`` accepts: an assistant message dict (OpenAI
  shape), an ``AssistantMessage``, a list of tool calls, or text.  ``sample()`` returns a random
  (harmless) ``execute_bash`` call.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from ..agent.model import AssistantMessage

try:
    import gymnasium as _gym

    _SpaceBase: type = _gym.spaces.Space
except ImportError:  # gymnasium is optional (the [rl] extra)
    _gym = None
    _SpaceBase = object

ROLES = frozenset({"system", "user", "assistant", "tool"})

__all__ = ["MessagesSpace", "AssistantActionSpace", "is_message"]


def is_message(m: Any) -> bool:
    """A chat message dict: a known role and text (or None) content."""
    return (
        isinstance(m, dict)
        and m.get("role") in ROLES
        and (m.get("content") is None or isinstance(m.get("content"), str))
    )


class _ChatSpace(_SpaceBase):  # type: ignore[misc, valid-type]
    def __init__(self, seed: int | None = None) -> None:
        if _gym is not None:
            super().__init__(shape=None, dtype=None, seed=seed)
        else:
            self._rng = random.Random(seed)

    # without gymnasium: the same small surface
    if _gym is None:

        def seed(self, seed: int | None = None) -> int | None:
            self._rng = random.Random(seed)
            return seed

        def __contains__(self, x: Any) -> bool:
            return self.contains(x)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def _randint(self, n: int) -> int:
        if _gym is not None:
            return int(self.np_random.integers(0, n))
        return self._rng.randrange(n)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self).__name__)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MessagesSpace(_ChatSpace):
    """Lists of chat messages (what ``reset`` and ``step`` return as observations)."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(is_message(m) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict]:
        return [{"role": "user", "content": f"sample observation {self._randint(1 << 30)}"}]


class AssistantActionSpace(_ChatSpace):
    """Assistant messages (what ``step`` takes).  Membership checks the shape only: an action can
    belong to the space and still be refused as malformed (it then yields a format-error
    observation, never an exception)."""

    def contains(self, x: Any) -> bool:
        if isinstance(x, (str, AssistantMessage)):
            return True
        if isinstance(x, list):
            return all(isinstance(c, Mapping) for c in x)
        if isinstance(x, Mapping):
            content, calls = x.get("content"), x.get("tool_calls")
            return (
                x.get("role", "assistant") == "assistant"
                and (content is None or isinstance(content, (str, list)))
                and (calls is None or (isinstance(calls, list) and all(isinstance(c, Mapping) for c in calls)))
            )
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> dict:
        n = self._randint(1 << 30)
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"call_sample_{n}", "type": "function",
                            "function": {"name": "execute_bash", "arguments": f'{{"command": "echo {n}"}}'}}],
        }  # fmt: skip
