"""``SandboxliteToolEnv``: TRL's OpenEnv integration over a sandboxlite OpenEnv server.

TRL's ``GRPOTrainer(environment_factory=...)`` is how TRL trains against OpenEnv environments: a
class with no constructor arguments whose ``reset(**row)`` starts an episode and whose public
methods are the model's tools, each calling the environment's client.  This is that class for the
sandboxlite server (``python -m sandboxlite.openenv.server``)::

    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=dataset,
                          environment_factory=SandboxliteToolEnv.factory("http://127.0.0.1:8000"))

- each instance holds one ``SandboxliteEnv(...).sync()`` client: one server session, one sandbox
  (TRL keeps the instances and resets them, so the server needs as many sessions as TRL has
  rollouts in flight: its ``--sessions``);
- ``reset(**row)``: the row's task is ``row["task"]`` (a task.json object, or its JSON text), else
  the row's own task fields (``id``, ``query``, ``input_files``, ``input_path``, ``max_steps``,
  ``timeout_s``, ``metadata``; ``answer`` goes to ``metadata["answer"]``; without ``query``, the
  last user message of ``prompt``); it returns the instructions (the environment's system and user
  prompt, naming the sandbox's paths), which TRL appends to the last user message;
- ``execute_bash``, ``str_replace_editor``, ``submit``: one ``SandboxliteAction`` each, the same
  docstrings (hence the same tool schemas) as ``sandboxlite.rl.trl.SandboxEnvironment``; an error
  observation raises ``ToolError`` (TRL hands the message back to the model and counts a failed
  call), and so does a call after the episode ended (it is not sent);
- ``get_reward()``: the episode's reward from the environment (the task's reward when the model
  submitted; 0.0 when it did not).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from ..errors import ConfigError, ToolError
from ..rl.trl import SandboxEnvironment, _NotATool
from .client import SandboxliteEnv
from .models import SandboxliteAction, SandboxliteObservation

__all__ = ["SandboxliteToolEnv", "row_task"]

_TASK_KEYS = ("id", "query", "input_files", "input_path", "max_steps", "timeout_s", "metadata")


def row_task(row: Mapping[str, Any]) -> dict[str, Any]:
    """The task.json object of a TRL dataset row (see the module docstring)."""
    task = row.get("task")
    if isinstance(task, str):
        task = json.loads(task)
    if task is None:
        task = {k: row[k] for k in _TASK_KEYS if row.get(k) is not None}
        for key in ("input_files", "metadata"):  # (JSON text, so that all rows fit one dataset schema)
            if isinstance(task.get(key), str):
                task[key] = json.loads(task[key])
        if row.get("answer") is not None:
            task["metadata"] = {**task.get("metadata", {}), "answer": row["answer"]}
    if not isinstance(task, Mapping):
        raise ConfigError("task", f"expected a task.json object, got {type(task).__name__}")
    task = dict(task)
    if not task.get("query"):
        users = [m.get("content") for m in row.get("prompt") or [] if isinstance(m, Mapping) and m.get("role") == "user"]
        if not users or not isinstance(users[-1], str):
            raise ConfigError("query", "the row has no task query and no user message in its prompt")
        task["query"] = users[-1]
    task.setdefault("id", "trl")
    return task


class SandboxliteToolEnv:
    """One rollout's session on a sandboxlite OpenEnv server, for TRL's ``environment_factory``."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", **client_options: Any) -> None:
        self._client = SandboxliteEnv(base_url=base_url, **client_options).sync()
        self.reward = 0.0
        self.done = False
        self.observation: SandboxliteObservation | None = None  # the last one

    @classmethod
    def factory(cls, base_url: str, **client_options: Any) -> Callable[[], SandboxliteToolEnv]:
        """The zero-argument callable TRL's ``environment_factory`` takes."""
        return functools.partial(cls, base_url, **client_options)

    def reset(self, **row: Any) -> str:
        """Start the episode of ``row``'s task; the instructions TRL appends to the last user message."""
        result = self._client.reset(task=row_task(row))
        obs = self.observation = result.observation
        if obs.error is not None:  # (a task the server refused, or no free sandbox)
            raise RuntimeError(f"the sandboxlite OpenEnv server could not start the episode: {obs.error}")
        self.reward, self.done = 0.0, False
        text = "\n\n".join(m["content"].strip() for m in obs.messages)
        return f"\n\n{text}\n" if row.get("prompt") is not None else text

    def get_reward(self) -> float:
        """The episode's reward (the task's reward if it submitted, else 0.0)."""
        return self.reward

    def execute_bash(self, command: str, timeout: float | None = None) -> str:
        return self._call("execute_bash", command=command, timeout=timeout)

    def str_replace_editor(
        self,
        command: Literal["view", "create", "str_replace", "insert"],
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        return self._call("str_replace_editor", command=command, path=path, file_text=file_text, old_str=old_str,
                          new_str=new_str, insert_line=insert_line, view_range=view_range)  # fmt: skip

    def submit(self) -> str:
        return self._call("submit")

    execute_bash.__doc__ = SandboxEnvironment.execute_bash.__doc__  # the schemas TRL builds: the agent's
    str_replace_editor.__doc__ = SandboxEnvironment.str_replace_editor.__doc__
    submit.__doc__ = SandboxEnvironment.submit.__doc__

    def _call(self, tool: str, **arguments: Any) -> str:
        if self.done:
            raise ToolError(f"{tool}: the episode is over (submit was called, or a limit ended it); "
                            "no more tool calls are run (this one was not)")  # fmt: skip
        args = {k: v for k, v in arguments.items() if v is not None}  # None: not given
        result = self._client.step(SandboxliteAction(tool=tool, arguments=args))
        obs = self.observation = result.observation
        if result.done:
            self.done, self.reward = True, float(result.reward or 0.0)
        if obs.error is not None:
            raise ToolError(obs.error)
        return obs.output

    @_NotATool
    def close(self) -> None:
        """Close the client: the server ends the session and its sandbox goes back to the pool."""
        self._client.close()
