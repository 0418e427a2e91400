"""The data of the sandboxlite OpenEnv environment: its Action, Observation and State (pydantic
models on openenv-core's bases, as an OpenEnv environment's ``models.py`` defines them).

- ``SandboxliteAction``: one tool call, ``tool`` (execute_bash, str_replace_editor or submit) with
  its ``arguments`` (an object, or the JSON text a model wrote); or instead ``message``, a whole
  assistant message as ``SandboxEnv.step`` takes it (OpenAI chat shape, possibly with several tool
  calls, or plain text with calls written as text).  An action with neither is an empty reply.
- ``SandboxliteObservation``: after ``reset``, the prompt (``messages``: system and user) and the
  ``tools`` (OpenAI function schemas naming the sandbox's paths); after ``step``, the messages the
  environment added (tool answers, or a format error), their text (``output``), execute_bash's
  ``exit_code``, the ``error`` a bad call got (also in ``output``: it goes back to the model), and
  at the end ``exit_reason`` and the ``answer`` file's text.  ``done`` and ``reward`` are
  OpenEnv's: the reward is the task's (``reward_fn``, by default exact match against
  ``task.metadata["answer"]``) on the step that submits, 0.0 before.
- ``SandboxliteState``: OpenEnv's ``episode_id`` and ``step_count``, the task's id, whether the
  episode is over, its reward so far and how it ended.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

__all__ = ["SandboxliteAction", "SandboxliteObservation", "SandboxliteState", "TOOL_NAMES"]

TOOL_NAMES = ("execute_bash", "str_replace_editor", "submit")


class SandboxliteAction(Action):
    """One tool call, or a whole assistant message."""

    tool: str | None = Field(default=None, description="the tool to call: execute_bash, str_replace_editor or submit")
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="the tool's arguments: an object, or JSON text as the model wrote it")
    message: dict[str, Any] | str | None = Field(
        default=None, description="instead of tool: an assistant message (OpenAI chat shape) or its text")


class SandboxliteObservation(Observation):
    """What ``reset`` and ``step`` return (``done`` and ``reward`` are OpenEnv's own fields)."""

    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="reset: the system and user prompt; step: the messages the environment added")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="reset: the tools' OpenAI function schemas")
    output: str = Field(default="", description="step: the text the model sees (tool answers or the error)")
    exit_code: int | None = Field(default=None, description="step: execute_bash's exit code")
    error: str | None = Field(default=None, description="what was wrong with the action (or the reset)")
    tool_calls: list[str] = Field(default_factory=list, description="step: the tools that were called")
    task_id: str | None = Field(default=None, description="the episode's task")
    exit_reason: str | None = Field(default=None, description="when done: how the episode ended")
    answer: str | None = Field(default=None, description="when done: the text of the answer file (None: no file)")


class SandboxliteState(State):
    """OpenEnv's episode_id and step_count, and the episode's task and outcome."""

    task_id: str | None = Field(default=None, description="the episode's task")
    done: bool = Field(default=True, description="no episode is running (none started, or it ended)")
    reward: float = Field(default=0.0, description="the episode's reward so far")
    exit_reason: str | None = Field(default=None, description="how the episode ended")
