"""``SandboxliteEnv``: the OpenEnv client of the sandboxlite environment (an ``EnvClient``, as an
OpenEnv environment's ``client.py`` defines it).

It keeps one WebSocket connection, hence one server session, hence one sandbox, for its lifetime.
Async as openenv-core's clients are; ``.sync()`` gives the blocking wrapper::

    async with SandboxliteEnv(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(task={"id": "sum", "query": "...", "input_files": {...}})
        result = await env.step(SandboxliteAction(tool="execute_bash", arguments={"command": "ls"}))

    with SandboxliteEnv(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(task=task)                  # a Task or a task.json dict
        result = env.step(SandboxliteAction(tool="submit"))
        result.done, result.reward, result.observation.answer
        env.state()                                    # SandboxliteState

``step`` takes a ``SandboxliteAction`` or the same fields as a dict (sent as it is).  A server-side error that is
not the environment's (the session limit reached, an action that does not fit the schema) raises
``RuntimeError`` as openenv-core's client does; the environment's own errors are observations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from ..agent.task import Task
from .models import SandboxliteAction, SandboxliteObservation, SandboxliteState

__all__ = ["SandboxliteEnv"]


class SandboxliteEnv(EnvClient[SandboxliteAction, SandboxliteObservation, SandboxliteState]):
    """Client of a sandboxlite OpenEnv server (see the module docstring)."""

    async def reset(self, task: Task | Mapping | None = None, **kwargs: Any) -> StepResult[SandboxliteObservation]:
        """Start an episode of ``task`` (``seed``, ``episode_id``, ``max_steps``, ``max_wall_s``,
        ``max_total_tokens`` may follow)."""
        if isinstance(task, Task):
            task = task.to_dict()
        if task is not None:
            kwargs["task"] = dict(task)
        return await super().reset(**kwargs)

    def _step_payload(self, action: SandboxliteAction | Mapping) -> dict[str, Any]:
        if isinstance(action, Mapping):  # (as sent: the server validates it)
            return dict(action)
        return action.model_dump(mode="json", exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SandboxliteObservation]:
        done, reward = bool(payload.get("done", False)), payload.get("reward")
        observation = SandboxliteObservation(**payload.get("observation", {}), done=done, reward=reward)
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> SandboxliteState:
        return SandboxliteState.model_validate(payload)
