"""An rllm environment: ``RllmSandboxEnv`` follows rllm's ``BaseEnv`` interface without importing rllm.

rllm (https://github.com/rllm-org/rllm) drives multi-turn RL through environments that implement
``rllm.environments.base.base_env.BaseEnv``:

- ``reset() -> (observation, info)``
- ``step(action) -> (observation, reward, done, info)``  (one ``done``, not terminated/truncated)
- ``close()``
- ``from_dict(info: dict) -> env`` (called on the class): builds an env from one dataset row
- ``is_multithread_safe() -> bool`` (static): may the async engine step envs from a thread pool
- an ``idx`` property the engine sets, and optionally ``compute_final_reward() -> float``, which the
  engine calls after the trajectory (its value replaces the last step's reward).

Where rllm is importable, ``RllmSandboxEnv`` subclasses its real ``BaseEnv`` (rllm's engine asserts
``isinstance(env, BaseEnv)``); without rllm it is a plain class with the same methods.

Use it with rllm's ``AgentExecutionEngine`` / trainer as ``env_class=RllmSandboxEnv`` (set
``RllmSandboxEnv.default_pool = SandboxPool(size=...)`` once so that every env shares warm
sandboxes).  Dataset rows are task.json dicts; rllm-style rows and the paper's rows (``id, domain,
problem_statement, ground_truth, input_files`` as JSON text, ``qa_type``, ``docker_image``) work too
(see ``from_dict``); ``layout="paper"`` puts inputs in ``/testbed/documents`` and grades
``/testbed/answer.txt`` as the paper's own environment does.  ``compute_final_reward()`` grades
the episode if it was not graded yet, also when the engine ended it (its step limit, a timeout).

Observations (dicts):

- after ``reset``: ``{"messages": [system, user], "question": <the instance prompt>, "tools": [...]}``;
  ``messages`` are the exact prompts of the agent loop, ``tools`` the OpenAI schemas of
  execute_bash, str_replace_editor and submit (both name the paths of the episode's sandbox, from
  its workdir; the answer graded is that sandbox's answer file).
- after ``step``: ``{"messages": [...], "tool_outputs": {call_id: text}}``: ``messages`` are the
  chat messages to append (tool answers, or a format-error user message), ``tool_outputs`` the
  shape rllm's ``ToolAgent.update_from_env`` reads.

Actions: whatever ``SandboxEnv.step`` accepts: the model's text (tool calls written as text are
parsed), an OpenAI assistant message dict, a list of tool-call dicts (rllm's ``ToolAgent``), or an
rllm ``Action`` (its ``.action`` is unwrapped).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from ...agent.task import _FIELDS as TASK_FIELDS
from ...agent.task import Task
from ...images import store
from ...jail.pool import SandboxPool
from ..env import SandboxEnv

__all__ = ["RllmSandboxEnv", "task_from_row"]

ENV_KEYS = ("reward_fn", "step_penalty", "grade_truncated", "max_total_tokens", "max_wall_s", "max_format_errors",
            "bash_timeout", "max_output_chars", "acquire_timeout", "config", "pool", "layout")  # fmt: skip
_QUERY_KEYS = ("query", "question", "problem", "problem_statement")
_ANSWER_KEYS = ("answer", "ground_truth")
_ID_KEYS = ("id", "task_id", "uid", "instance_id")


def task_from_row(row: Mapping[str, Any]) -> Task:
    """A ``Task`` from a dataset row: a task.json dict, or an rllm-style row where the query is
    ``question`` or ``problem``, the reference answer ``answer`` or ``ground_truth`` (it becomes
    ``metadata["answer"]``), the id ``id``/``task_id``/``uid`` (made from the query when absent,
    and made valid); every other key lands in ``metadata``."""
    data = dict(row)
    files = data.get("input_files")
    if isinstance(files, str):  # the paper's rows carry them as JSON text
        try:
            data["input_files"] = json.loads(files) if files.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"input_files is text but not JSON ({e.msg}): {files[:80]!r}") from None
    if isinstance(data.get("input_files"), Mapping):
        data["input_files"] = {k: v for k, v in data["input_files"].items() if v is not None}
    query = next((data.pop(k) for k in _QUERY_KEYS if isinstance(data.get(k), str)), None)
    if query is None:
        raise ValueError(f"the row has no query (one of {', '.join(_QUERY_KEYS)}): keys {sorted(row)}")
    raw_id = next((data.pop(k) for k in _ID_KEYS if data.get(k) not in (None, "")), None)
    if raw_id is None:
        raw_id = "task-" + hashlib.sha1(query.encode()).hexdigest()[:12]
    task_id = re.sub(r"[^A-Za-z0-9._-]", "_", str(raw_id))[:128]
    if not task_id[0].isalnum():
        task_id = ("t" + task_id)[:128]
    values: dict[str, Any] = {"id": task_id, "query": query}
    metadata = dict(data.pop("metadata", None) or {})
    prompt = data.get("prompt")
    if prompt is not None and not (isinstance(prompt, str) and os.path.isfile(prompt)):
        metadata["prompt"] = data.pop("prompt")  # rllm/verl rows: the chat prompt, not a template file
    for key in list(data):
        if key in TASK_FIELDS:
            values[key] = data.pop(key)
    _root_of_row(values, data.get("docker_image"))
    for key in _ANSWER_KEYS:
        if key in data and "answer" not in metadata:
            metadata["answer"] = data.pop(key)
    metadata.update(data)  # the rest (data_source, ...) is kept
    values["metadata"] = metadata
    return Task.from_dict(values)


def _root_of_row(values: dict[str, Any], docker_image: Any) -> None:
    """The paper's rows name a ``docker_image``: the task's root when sandboxlite's store holds it
    (``sandboxlite image pull`` / ``import``, or pulled now with ``SANDBOXLITE_PULL=missing``) and the
    row names no root of its own; otherwise the default root,
    said once per image.  (An env over a shared pool runs the pool's root whatever the task says.)"""
    if not isinstance(docker_image, str) or not docker_image or "rootfs" in values or "image" in values:
        return
    if store.available(docker_image):  # (pulled first with SANDBOXLITE_PULL=missing)
        values["rootfs"] = docker_image
    else:  # (a warning: Python shows each text once, and a dataset repeats one image in every row)
        warnings.warn(f"the row's docker_image {docker_image} is not in sandboxlite's store (sandboxlite image "
                      "pull or import it, or set SANDBOXLITE_PULL=missing): its tasks run on the default root",
                      RuntimeWarning, stacklevel=3)  # fmt: skip


try:  # the real base class where rllm is installed (its engine checks isinstance)
    from rllm.environments.base.base_env import BaseEnv as _Base
except ImportError:  # rllm is not on PyPI: without it, a plain class with the same methods
    _Base = object


class RllmSandboxEnv(_Base):  # type: ignore[misc, valid-type]
    """rllm's ``BaseEnv`` over a ``SandboxEnv`` (see the module docstring)."""

    default_pool: ClassVar[SandboxPool | None] = None  # shared by envs made without a pool

    def __init__(self, task: Task | Mapping, *, pool: SandboxPool | None = None, **env_options: Any) -> None:
        self.task = task if isinstance(task, Task) else task_from_row(task)
        self.env = SandboxEnv(self.task, pool=pool or type(self).default_pool, **env_options)
        self._idx: Any = None
        self._last_info: dict = {}
        self._started = False

    @property
    def idx(self) -> Any:
        return self._idx

    @idx.setter
    def idx(self, value: Any) -> None:
        self._idx = value

    @property
    def supports_parallel_step(self) -> bool:
        return False  # the tool calls of one episode share a shell: run them in order

    def reset(self, seed: int | None = None, **kwargs: Any) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options={"task": self.task})
        self._last_info = {}
        self._started = True
        return {"messages": obs, "question": obs[-1]["content"], "tools": self.env.tool_schemas()}, info

    def step(self, action: Any) -> tuple[dict, float, bool, dict]:
        inner = getattr(action, "action", None)
        if inner is not None and not isinstance(action, Mapping):
            action = inner  # an rllm Action
        obs, reward, terminated, truncated, info = self.env.step(action)
        outputs = {o["call_id"]: o["output"] for o in info["observations"]}
        info = {**info, "terminated": terminated, "truncated": truncated}
        self._last_info = info
        return {"messages": obs, "tool_outputs": outputs}, reward, terminated or truncated, info

    def compute_final_reward(self) -> float:
        """The task reward of the episode: graded now if it was not (the engine may end an episode
        itself, at its step limit or a timeout, without the model submitting); 0.0 before reset."""
        if not self._started:
            return 0.0
        return float(self.env.grade())

    def close(self) -> None:
        self.env.close()

    @classmethod
    def from_dict(cls, info: Mapping[str, Any] | str) -> "RllmSandboxEnv":
        """An env from a dataset row (a dict, or its JSON text).  The keys of ``SandboxEnv``'s
        options (``reward_fn``, ``step_penalty``, ``max_wall_s``, ``pool``, ...) configure the env;
        the rest describes the task (see ``task_from_row``).

        (A classmethod where rllm declares a staticmethod: called the same way,
        ``env_class.from_dict(row)``, and a subclass gets instances of itself.)"""
        row = dict(json.loads(info) if isinstance(info, str) else info)
        options = {k: row.pop(k) for k in ENV_KEYS if k in row}
        return cls(task_from_row(row), **options)

    @staticmethod
    def is_multithread_safe() -> bool:
        return True  # each env holds its own sandbox; the pool is thread-safe
