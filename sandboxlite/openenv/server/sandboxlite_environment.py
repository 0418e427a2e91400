"""``SandboxliteEnvironment``: openenv-core's ``Environment`` over sandboxlite's ``SandboxEnv``.

How OpenEnv's concepts map onto sandboxlite:

- an environment instance is one OpenEnv session (the server makes one per WebSocket connection,
  and a throwaway one per stateless HTTP request); an episode is one task in one sandbox taken from
  a ``SandboxPool`` shared by the sessions, staged and driven by ``sandboxlite.rl.SandboxEnv``: the
  agent loop's prompts, tools (execute_bash, str_replace_editor, submit), messages, format errors,
  limits and rewards.
- ``reset(seed=, episode_id=, task=..., max_steps=, max_wall_s=, max_total_tokens=)``: ``task`` is a
  task.json dict (or a ``Task``); the previous episode's sandbox goes back to the pool, a sandbox is
  taken, the task's input files are written into it, and the observation carries the prompt
  (``messages``) and the ``tools``.
- ``step(action)``: the action (one tool call, or an assistant message) is turned into an assistant
  message for ``SandboxEnv.step``; ``done`` when the model submitted or a limit ended the episode,
  and then the reward is the task's and the sandbox goes back to the pool at once.
- ``state``: ``episode_id``, ``step_count`` (every ``step`` call), the task id and the outcome.
- ``close()`` (the server calls it when a session ends): the sandbox goes back to the pool.

Errors never raise out of ``reset`` or ``step``: an unusable task, a malformed action, a step with
no episode running, a pool with no free sandbox in time: each is an observation whose ``error``
(and ``output``) says what was wrong, as the agent loop answers a model's mistakes.

Tasks come from clients: a task's ``rootfs`` / ``network`` do not choose the sandbox (the pool's
configuration does), and by default a task may not name host paths (``input_dir``: a host
directory copied in; ``prompt``: a template file read): ``trust_tasks=True`` allows them, for a
server whose clients are trusted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from ...agent.task import Task
from ...config import SandboxConfig
from ...errors import SandboxError
from ...jail.pool import SandboxPool
from ...rl.env import SandboxEnv, as_task
from ..models import SandboxliteAction, SandboxliteObservation, SandboxliteState

__all__ = ["SandboxliteEnvironment", "RESET_OPTIONS"]

RESET_OPTIONS = ("max_steps", "max_wall_s", "max_total_tokens")  # per-episode limits reset takes beside the task


class SandboxliteEnvironment(Environment[SandboxliteAction, SandboxliteObservation, SandboxliteState]):
    """One OpenEnv session over sandboxlite (see the module docstring).

    ``pool``: the ``SandboxPool`` the sessions share (without one, the instance makes its own pool of
    one sandbox of ``config`` at the first reset and closes it in ``close()``).
    ``acquire_timeout``: seconds a reset waits for a free sandbox (then an error observation).
    ``env_options``: ``SandboxEnv``'s (``reward_fn``, ``step_penalty``, ``max_steps``, ``bash_timeout``, ...).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own sandbox; they share only the pool

    def __init__(self, pool: SandboxPool | None = None, *, config: SandboxConfig | None = None,
                 trust_tasks: bool = False, acquire_timeout: float | None = 60.0, **env_options: Any) -> None:  # fmt: skip
        super().__init__()
        if pool is not None and config is not None:
            raise ValueError("give a pool or a config, not both (the pool has its own configuration)")
        self._pool, self._own_pool = pool, None
        self._config = config
        self._trust_tasks = trust_tasks
        self._options = {"acquire_timeout": acquire_timeout, **env_options}
        self._env: SandboxEnv | None = None
        self._state = SandboxliteState()

    @property
    def state(self) -> SandboxliteState:
        return self._state

    @property
    def sandbox_env(self) -> SandboxEnv | None:
        """The ``SandboxEnv`` of the current (or last) episode."""
        return self._env

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="sandboxlite",
            description="A task in a bubblewrap sandbox: the agent's tools execute_bash, str_replace_editor and "
            "submit; the task's reward when it submits.",
        )

    # -- reset -----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, task: Task | Mapping | None = None,
              **options: Any) -> SandboxliteObservation:  # fmt: skip
        """Start an episode of ``task`` (see the module docstring); an error observation (``done``)
        when it cannot start.  A running episode ends first: its sandbox goes back to the pool."""
        self._end_env()
        self._state = SandboxliteState(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        try:
            checked = self._check_task(task, options)
            env = self._env = SandboxEnv(pool=self._sandbox_pool(), **self._options)
            messages, info = env.reset(seed=seed, options={"task": checked, **options})
        except (ValueError, TypeError, TimeoutError, SandboxError) as e:  # (TaskError, ConfigError are ValueErrors)
            self._end_env()
            text = _error_text(e)
            return SandboxliteObservation(done=True, error=text, output=text, task_id=_task_id(task))
        self._state.task_id, self._state.done = info["task_id"], False
        return SandboxliteObservation(messages=messages, tools=env.tool_schemas(), task_id=info["task_id"],
                                      done=False, reward=None)  # fmt: skip

    def _check_task(self, task: Task | Mapping | None, options: dict[str, Any]) -> Task:
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset argument(s) {unknown}; known: task, seed, episode_id, "
                             f"{', '.join(RESET_OPTIONS)}")  # fmt: skip
        if not self._trust_tasks:  # (before Task.from_dict, which looks the paths up on the host)
            get = task.get if isinstance(task, Mapping) else lambda k: getattr(task, k, None)
            named = [k for k in ("input_dir", "prompt") if get(k) is not None]
            if named:
                raise ValueError(f"task: {' and '.join(named)} name host paths, which this server does not take "
                                 "from its clients (give input_files instead)")  # fmt: skip
        checked = as_task(task)
        if checked is None:
            raise ValueError("no task: reset(task={'id': ..., 'query': ..., ...}) (a task.json object)")
        return checked

    def _sandbox_pool(self) -> SandboxPool:
        if self._pool is None:  # a pool of its own, of one sandbox, made at the first reset
            self._pool = self._own_pool = SandboxPool(self._config, size=1)
        return self._pool

    # -- step ------------------------------------------------------------------------------------
    def step(self, action: SandboxliteAction, timeout_s: float | None = None, **kwargs: Any) -> SandboxliteObservation:
        """One action in, its observation out; never raises for a bad action or a missing episode."""
        self._state.step_count += 1
        env = self._env
        if env is None or env.episode_over:
            text = "no episode is running: call reset(task=...) first (the last one has ended, or none began)"
            return SandboxliteObservation(done=True, error=text, output=text, task_id=self._state.task_id)
        if action.tool is not None and action.message is not None:
            text = "Your action could not be used: give a tool call (tool, arguments) or a message, not both."
            return SandboxliteObservation(done=False, reward=0.0, error=text, output=text, task_id=self._state.task_id)
        obs, reward, terminated, truncated, info = env.step(_assistant_message(action))
        done = terminated or truncated
        self._state.reward += reward
        if done:
            self._state.done, self._state.exit_reason = True, info.get("exit_reason")
        return _observation(obs, reward, done, info, self._state.task_id)

    # -- close -----------------------------------------------------------------------------------
    def _end_env(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            env.close()  # the sandbox goes back to the pool (the shared pool stays open)

    def close(self) -> None:
        """Give the sandbox back to the pool (and close the pool of its own, if it made one)."""
        self._end_env()
        self._state.done = True
        pool, self._own_pool = self._own_pool, None
        if pool is not None:
            self._pool = None
            pool.close()


def _task_id(task: Any) -> str | None:
    """The id a task names (as given: not checked, nothing looked up)."""
    value = task.get("id") if isinstance(task, Mapping) else getattr(task, "id", None)
    return value if isinstance(value, str) else None


def _error_text(e: BaseException) -> str:
    if isinstance(e, TimeoutError) and not isinstance(e, SandboxError):
        return "no free sandbox: every sandbox of the pool is in use (try again later)"
    return f"{type(e).__name__}: {e}"


def _assistant_message(action: SandboxliteAction) -> Any:
    """The assistant message ``SandboxEnv.step`` takes for ``action`` (a malformed one gets the agent
    loop's format-error answer there)."""
    if action.message is not None:
        return action.message
    if action.tool is None:  # an empty reply: the agent loop's no-tool-call answer
        return {"role": "assistant", "content": ""}
    call = {"type": "function", "function": {"name": action.tool, "arguments": action.arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _observation(obs: list[dict], reward: float, done: bool, info: dict, task_id: str | None) -> SandboxliteObservation:
    """The OpenEnv observation of one ``SandboxEnv.step``."""
    calls = info.get("observations") or []
    errors = [c["data"]["error"] for c in calls if isinstance(c.get("data"), dict) and c["data"].get("error")]
    error = info.get("format_error") or (errors[0] if errors else None) or info.get("error")
    codes = [c["data"]["exit_code"] for c in calls if c.get("tool") == "execute_bash"
             and isinstance(c.get("data"), dict) and isinstance(c["data"].get("exit_code"), int)]  # fmt: skip
    output = "\n\n".join(str(m.get("content") or "") for m in obs)
    return SandboxliteObservation(
        messages=obs, output=output, exit_code=codes[-1] if codes else None, error=error,
        tool_calls=list(info.get("tool_calls") or []), task_id=task_id, done=done, reward=float(reward),
        exit_reason=info.get("exit_reason") if done else None, answer=info.get("answer") if done else None,
    )  # fmt: skip
