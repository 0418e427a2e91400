"""``SandboxEnv``: one task in a pooled sandbox, as a Gymnasium-shaped environment.

    env = SandboxEnv(pool=pool)                                   # or SandboxEnv(task), own pool
    obs, info = env.reset(seed=0, options={"task": task})         # [system, user] messages
    while True:
        action = policy(env.messages)                             # an assistant message
        obs, reward, terminated, truncated, info = env.step(action)   # obs: the new tool/user messages
        if terminated or truncated:
            break
    env.close()                                                   # the sandbox goes back to the pool

The episode is the agent loop's (``sandboxlite.agent.loop.Agent``), driven one action at a time:
the same prompts (``PromptTemplate``), the same tools (``Tools``: execute_bash, str_replace_editor,
submit), the same message shapes (native calls are answered by ``role: tool`` messages, calls
written as text by ``<tool_response>`` user messages), the same format-error messages, the same
limits.  A malformed action never raises: it yields a format-error observation (and counts towards
``max_format_errors`` in a row, after which the episode is truncated).

- ``reset`` acquires a sandbox from the pool (released ones are reset in place), writes the task's
  input files to its input directory and creates its output directory, as ``run_task`` does.  Every
  path (in the prompts, the tools' descriptions, the answer file) is the sandbox's own, from its
  workdir (``Paths.of(env.sandbox)``: ``/testbed/...`` with the default configuration).
  ``options``: ``task`` (a ``Task`` or a task.json dict), ``snapshot`` (a ``Snapshot``: the
  episode starts from that filesystem state, a prepared one, instead of the pool's), and
  per-episode overrides of ``max_steps``, ``max_total_tokens``, ``max_wall_s``.
- ``step``: ``terminated`` when the model called ``submit``; ``truncated`` when a limit ended the
  episode (max steps, token budget from the actions' ``usage``, wall time, format errors in a row,
  or the sandbox failing); the last ``info["reason"]`` says which (an ``ExitReason``: the agent
  loop's ``Agent.step()`` outcome).  The reward is ``-step_penalty`` on every step, plus
  ``reward_fn(task, answer, info)`` on the step that submits (also on truncation with
  ``grade_truncated=True``); ``answer`` is the text of the sandbox's answer file
  (``<workdir>/output/answer.txt``).  When the episode ends the sandbox is released to the pool at
  once (after the reward function ran).
- ``close`` releases a sandbox still held and closes the pool if the env made it.  Idempotent.

Sandboxes from a shared pool have the pool's configuration (rootfs, network, limits): a task's
``rootfs`` and ``network`` only configure the pool an env makes for itself.

Thread-safety: one env serves one episode at a time; its methods may be called from any thread
(``reset_async`` / ``step_async`` run the blocking parts in an executor).  Share the pool, not envs.
With gymnasium installed, ``SandboxEnv`` is a ``gymnasium.Env`` and importing ``sandboxlite.rl``
registers it as ``sandboxlite/Sandbox-v0`` (``gymnasium.make("sandboxlite/Sandbox-v0", task=...,
pool=...)``, or ``gymnasium.make("sandboxlite.rl:sandboxlite/Sandbox-v0", ...)`` without the import);
its spaces are the non-standard ``MessagesSpace`` / ``AssistantActionSpace`` (see ``spaces.py``).
The registration is marked ``nondeterministic``: commands may print times or random numbers, and
``info`` carries timings (the reset observation is deterministic for a task).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import asdict, dataclass
from typing import Any

from ..agent.loop import Agent, AgentLimits
from ..agent.model import AssistantMessage
from ..agent.outcome import ExitReason, Outcome
from ..agent.paths import LAYOUTS, Paths
from ..agent.prompts import PromptTemplate
from ..agent.run import MAX_ANSWER_BYTES, stage_inputs, task_inputs
from ..agent.task import Task
from ..agent.tools import Tools, tool_schemas
from ..config import SandboxConfig
from ..errors import SandboxClosed, SandboxError
from ..jail.pool import SandboxPool
from ..jail.sandbox import Sandbox
from ..state.snapshot import Snapshot
from .actions import to_assistant_message
from .rewards import exact_match
from .spaces import AssistantActionSpace, MessagesSpace

try:
    import gymnasium as _gym

    _EnvBase: type = _gym.Env
    _ResetNeededBase: type = _gym.error.ResetNeeded
except ImportError:  # gymnasium is optional (the [rl] extra)
    _gym = None
    _EnvBase = object

    class _ResetNeededBase(RuntimeError):  # type: ignore[no-redef]
        pass

ENV_ID = "sandboxlite/Sandbox-v0"
RESET_OPTIONS = ("task", "max_steps", "max_total_tokens", "max_wall_s", "snapshot")

__all__ = ["SandboxEnv", "ResetNeeded", "ENV_ID", "register", "as_task"]


class ResetNeeded(_ResetNeededBase, RuntimeError):  # type: ignore[misc, valid-type]
    """``step`` without a running episode (before ``reset``, or after the episode ended)."""


def as_task(task: Task | Mapping | None) -> Task | None:
    if task is None or isinstance(task, Task):
        return task
    if isinstance(task, Mapping):  # (None for an optional key means "not given": Task.to_dict() output works)
        return Task.from_dict({k: v for k, v in task.items() if v is not None or k in ("model", "prompt")})
    raise TypeError(f"expected a Task or a task dict, got {type(task).__name__}")


def register() -> bool:
    """Register ``sandboxlite/Sandbox-v0`` with gymnasium (idempotent); False without gymnasium."""
    if _gym is None:
        return False
    if ENV_ID not in _gym.registry:
        # nondeterministic: commands may print times, pids, random numbers; info carries timings
        _gym.register(id=ENV_ID, entry_point="sandboxlite.rl.env:SandboxEnv", nondeterministic=True)
    return True


class _Feed:
    """The agent loop's "model": hands it the action ``step`` was given."""

    name = "sandboxlite.rl"

    def __init__(self) -> None:
        self.action: Any = None
        self.id_prefix = "call"

    def complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage:
        action, self.action = self.action, None
        return to_assistant_message(action, tools, id_prefix=self.id_prefix)


@dataclass
class _Episode:
    task: Task
    agent: Agent
    tools: Tools
    feed: _Feed
    limits: AgentLimits
    index: int
    steps: int = 0
    reward: float = 0.0
    done: bool = False
    outcome: Outcome | None = None
    answer: str | None = None
    task_reward: float | None = None


class SandboxEnv(_EnvBase):  # type: ignore[misc, valid-type]
    """A task in a sandbox, one assistant message per step (see the module docstring).

    ``pool``: the ``SandboxPool`` to take sandboxes from (shared between envs); without one, the
    env makes a pool of one sandbox at the first reset (from ``config``, else the task's rootfs
    and network) and closes it in ``close()``.
    ``reward_fn(task, answer, info) -> float``: the episode's reward when it submits (default
    :func:`~sandboxlite.rl.rewards.exact_match` against ``task.metadata["answer"]``).
    ``max_steps`` / ``max_wall_s`` default to the task's ``max_steps`` / ``timeout_s``.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        task: Task | Mapping | None = None,
        *,
        pool: SandboxPool | None = None,
        config: SandboxConfig | None = None,
        reward_fn: Callable[[Task, str | None, dict], float] | None = None,
        step_penalty: float = 0.0,
        grade_truncated: bool = False,
        max_steps: int | None = None,
        max_total_tokens: int | None = None,
        max_wall_s: float | None = None,
        max_format_errors: int = 3,
        bash_timeout: float = 120.0,
        max_output_chars: int = 20000,
        acquire_timeout: float | None = None,
        render_mode: str | None = None,
        layout: str = "sandboxlite",
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if not isinstance(step_penalty, (int, float)) or not math.isfinite(step_penalty):
            raise ValueError(f"step_penalty must be a finite number, got {step_penalty!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        self.layout = layout
        self.task = as_task(task)
        self.pool = pool
        self._own_pool = pool is None
        self.config = config
        self.reward_fn = reward_fn or exact_match
        self.step_penalty = float(step_penalty)
        self.grade_truncated = grade_truncated
        self.max_steps, self.max_total_tokens, self.max_wall_s = max_steps, max_total_tokens, max_wall_s
        self.max_format_errors = max_format_errors
        self.tool_options = {"bash_timeout": bash_timeout, "max_output_chars": max_output_chars}
        self.acquire_timeout = acquire_timeout
        self.render_mode = render_mode
        self.observation_space = MessagesSpace()
        self.action_space = AssistantActionSpace()
        self._lock = threading.RLock()
        self._stepping = False  # a step_async is awaiting its tool calls
        self._sb: Sandbox | None = None
        self._episode: _Episode | None = None
        self._episodes = 0
        self._closed = False
        self._templates: dict[str | None, PromptTemplate] = {}

    # -- public state --------------------------------------------------------------------------
    @property
    def sandbox(self) -> Sandbox | None:
        """The sandbox of the running episode (None between episodes)."""
        return self._sb

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def messages(self) -> list[dict]:
        """The conversation so far (system, user, then assistant and tool/user messages): what a
        policy is given.  A new list each time; do not modify the messages in it."""
        ep = self._episode
        return list(ep.agent.messages) if ep is not None else []

    @property
    def steps(self) -> list:
        """The agent loop's ``Step`` records of the current (or last) episode."""
        ep = self._episode
        return list(ep.agent.steps) if ep is not None else []

    @property
    def usage(self) -> dict[str, int]:
        ep = self._episode
        return dict(ep.agent.usage) if ep is not None else {}

    @property
    def outcome(self) -> Outcome | None:
        """How the current (or last) episode ended: None while it runs; ``ExitReason.ABANDONED``
        when a ``reset`` or ``close`` came first."""
        ep = self._episode
        return ep.outcome if ep is not None else None

    @property
    def episode_over(self) -> bool:
        return self._episode is None or self._episode.done

    @property
    def current_task(self) -> Task | None:
        ep = self._episode
        return ep.task if ep is not None else self.task

    def tool_schemas(self) -> list[dict]:
        """The OpenAI ``tools`` list a policy should be given (execute_bash, str_replace_editor, submit),
        naming the paths of the current (or last) episode's sandbox; before the first reset, those
        of the default workdir (a sandbox's workdir is known once it is acquired)."""
        ep = self._episode
        return ep.tools.schemas() if ep is not None else tool_schemas(self.tool_options["bash_timeout"])

    # -- reset ---------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[list[dict], dict]:
        """Start an episode: ``(observation, info)``, the observation being [system, user] messages."""
        task, limits, snap = self._prepare_reset(seed, options)
        with self._lock:
            t0 = time.perf_counter()
            self._release()
            pool = self._ensure_pool(task)
            t1 = time.perf_counter()
            sb = pool.acquire(self.acquire_timeout)
            self._sb = sb
            acquire_s = time.perf_counter() - t1
            return self._begin(task, limits, t0, acquire_s, snap)

    async def reset_async(
        self, *, seed: int | None = None, options: dict | None = None, executor: Executor | None = None
    ) -> tuple[list[dict], dict]:
        """``reset`` for asyncio: waits for a free sandbox without holding a thread, and runs the
        blocking parts (the in-place reset of a released sandbox, the task's files) in ``executor``."""
        task, limits, snap = self._prepare_reset(seed, options)
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        await loop.run_in_executor(executor, self._release)
        pool = self.pool if self.pool is not None else await loop.run_in_executor(executor, self._ensure_pool, task)
        t1 = time.perf_counter()
        sb = await pool.acquire_async(self.acquire_timeout)
        with self._lock:  # held only for an instant: nothing blocking happens under it here
            if self._sb is not None or self._closed:  # raced with another reset / a close
                pool.release(sb)
                raise RuntimeError("SandboxEnv: concurrent reset/close on one env")
            self._sb = sb  # from here on close() releases it, whatever happens to this coroutine
        acquire_s = time.perf_counter() - t1
        return await loop.run_in_executor(executor, self._begin_locked, task, limits, t0, acquire_s, snap)

    def _prepare_reset(self, seed: int | None, options: dict | None) -> tuple[Task, AgentLimits, Snapshot | None]:
        if self._closed:
            raise SandboxClosed("this SandboxEnv is closed")
        if _gym is not None:
            super().reset(seed=seed)  # seeds self.np_random (the env itself draws nothing at random)
        opts = dict(options or {})
        unknown = set(opts) - set(RESET_OPTIONS)
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; known: {', '.join(RESET_OPTIONS)}")
        task = as_task(opts.get("task")) or self.task
        if task is None:
            raise ValueError("no task: pass reset(options={'task': Task or dict}) or SandboxEnv(task)")
        snap = opts.get("snapshot")
        if snap is not None and not isinstance(snap, Snapshot):
            raise ValueError(f"reset option 'snapshot' must be a Snapshot (Sandbox.snapshot()), got {type(snap).__name__}")

        def pick(key: str, own: Any, default: Any) -> Any:  # reset option, else the env's, else the task's
            return opts[key] if opts.get(key) is not None else (own if own is not None else default)

        limits = AgentLimits(
            max_steps=pick("max_steps", self.max_steps, task.max_steps),
            max_total_tokens=pick("max_total_tokens", self.max_total_tokens, None),
            max_wall_s=pick("max_wall_s", self.max_wall_s, task.timeout_s),
            max_format_errors=self.max_format_errors,
        )
        return task, limits, snap

    def _ensure_pool(self, task: Task) -> SandboxPool:
        with self._lock:
            if self.pool is None:
                config = self.config or SandboxConfig(rootfs=task.rootfs, network=task.network)
                self.pool = SandboxPool(config, size=1)
            return self.pool

    def _template(self, path: str | None) -> PromptTemplate:
        t = self._templates.get(path)
        if t is None:
            t = self._templates[path] = PromptTemplate.load(path, mode="sandbox")
        return t

    def _begin_locked(self, task: Task, limits: AgentLimits, t0: float, acquire_s: float,
                      snap: Snapshot | None) -> tuple[list[dict], dict]:  # fmt: skip
        with self._lock:
            return self._begin(task, limits, t0, acquire_s, snap)

    def _begin(self, task: Task, limits: AgentLimits, t0: float, acquire_s: float,
               snap: Snapshot | None = None) -> tuple[list[dict], dict]:  # fmt: skip
        """Set up the acquired sandbox (from ``snap`` when given) and the loop for ``task`` (called
        with the lock held); the pool resets it to its own state when it is released."""
        sb = self._sb
        assert sb is not None
        try:
            if snap is not None:
                sb.reset(to=snap)
            paths = Paths.of(sb, self.layout)
            input_dir = stage_inputs(sb, task, paths)
            system, instance = self._template(task.prompt).render(task.query, task_inputs(task), paths=paths,
                                                                  input_dir=input_dir,
                                                                  network=sb.config.network)  # fmt: skip
        except BaseException:
            self._release()
            raise
        feed = _Feed()
        tools = Tools(sb, paths=paths, **self.tool_options)
        agent = Agent(feed, tools, limits, remind_submit=False)  # an action's submit always terminates
        obs = [dict(m) for m in agent.start(system, instance)]
        self._episodes += 1
        self._episode = _Episode(task, agent, tools, feed, limits, self._episodes)
        info = {
            "task_id": task.id,
            "episode": self._episodes,
            "limits": asdict(limits),
            "acquire_s": acquire_s,
            "reset_s": time.perf_counter() - t0,
        }
        return obs, info

    # -- step ----------------------------------------------------------------------------------
    def step(self, action: Any) -> tuple[list[dict], float, bool, bool, dict]:
        """One assistant message in, ``(observation, reward, terminated, truncated, info)`` out.

        The observation is the list of messages the environment added after the assistant
        message: the tool answers (``role: tool``, or ``<tool_response>`` user messages for calls
        written as text), or a format-error / no-tool-call user message.

        ``info``: ``step`` (1, 2, ...), ``assistant`` (the message as it entered the conversation,
        None when nothing usable was sent), ``tool_calls`` (names), ``observations`` (per call:
        tool, call_id, arguments, output and structured data such as exit_code), ``format_error``,
        ``tools_s``, ``env_s``, ``usage`` (summed); on the last step also ``reason`` (an
        ``ExitReason``: ``terminated`` is ``reason is SUBMITTED``), ``exit_reason`` (the same as text,
        with the detail), ``answer``, ``task_reward``, ``steps``, ``episode_reward`` (and ``error``
        when the sandbox failed).
        """
        with self._lock:
            ep, n_messages, t0 = self._step_begin(action)
            try:
                result = ep.agent.step()  # done on the turn that submits or reaches a limit
            finally:
                ep.feed.action = None
            obs, reward, info = self._step_observe(ep, result, n_messages)
            if result.outcome is not None:
                reward += self._end_episode(ep, result.outcome)
            return self._step_close(ep, result.outcome, obs, reward, info, t0)

    async def step_async(
        self, action: Any, *, executor: Executor | None = None
    ) -> tuple[list[dict], float, bool, bool, dict]:
        """``step`` for asyncio: the tool calls are driven by the running loop (``Agent.astep``: no
        thread per step, whatever the number of episodes); only the episode's end (the answer,
        the reward function, giving the sandbox back) runs in ``executor``."""
        with self._lock:  # (only for the instant of each part: the command holds the sandbox's own lock)
            ep, n_messages, t0 = self._step_begin(action)
            self._stepping = True
        try:
            result = await ep.agent.astep()
        finally:
            ep.feed.action = None
            self._stepping = False
        with self._lock:
            obs, reward, info = self._step_observe(ep, result, n_messages)
        if result.outcome is not None:
            reward += await asyncio.get_running_loop().run_in_executor(executor, self._end_episode_locked, ep,
                                                                       result.outcome)  # fmt: skip
        return self._step_close(ep, result.outcome, obs, reward, info, t0)

    def _step_begin(self, action: Any) -> tuple[_Episode, int, float]:
        """Check that a step can be taken, and hand ``action`` to the loop's feed (lock held)."""
        ep = self._episode
        if self._closed:
            raise SandboxClosed("this SandboxEnv is closed")
        if ep is None or ep.done:
            raise ResetNeeded("no running episode: call reset() first (the last one has ended)")
        if self._stepping:
            raise RuntimeError("SandboxEnv: a step is already running on this env (one step at a time)")
        t0 = time.perf_counter()
        n_messages = len(ep.agent.messages)
        ep.steps += 1
        ep.feed.action, ep.feed.id_prefix = action, f"call_{ep.steps}"
        return ep, n_messages, t0

    def _step_observe(self, ep: _Episode, result: Any, n_messages: int) -> tuple[list[dict], float, dict]:
        """The observation, the step's own reward and its info, from the loop's step."""
        agent = ep.agent
        record = result.step
        new = agent.messages[n_messages:]
        if record is not None:
            assistant = record.assistant
            if not any(m is assistant for m in new):  # a malformed action with no text: nothing kept
                assistant = None
        else:  # the step broke off (the sandbox failed) before the loop recorded it
            assistant = new[0] if new and new[0].get("role") == "assistant" else None
        obs = [dict(m) for m in new if m is not assistant]
        info: dict[str, Any] = {
            "step": ep.steps,
            "assistant": dict(assistant) if assistant is not None else None,
            "tool_calls": [o["tool"] for o in record.observations] if record is not None else [],
            "observations": [dict(o) for o in record.observations] if record is not None else [],
            "format_error": record.error if record is not None else None,
            "tools_s": record.tools_s if record is not None else 0.0,
            "usage": dict(agent.usage),
        }
        return obs, 0.0 - self.step_penalty, info

    def _end_episode(self, ep: _Episode, outcome: Outcome) -> float:
        """The task's reward (when graded), then the sandbox goes back to the pool."""
        try:
            return self._finish(ep, outcome, graded=outcome.reason is ExitReason.SUBMITTED or self.grade_truncated)
        finally:
            self._release()

    def _end_episode_locked(self, ep: _Episode, outcome: Outcome) -> float:
        with self._lock:
            return self._end_episode(ep, outcome)

    def _step_close(self, ep: _Episode, outcome: Outcome | None, obs: list[dict], reward: float, info: dict,
                    t0: float) -> tuple[list[dict], float, bool, bool, dict]:  # fmt: skip
        terminated = outcome is not None and outcome.reason is ExitReason.SUBMITTED
        truncated = outcome is not None and not terminated
        if outcome is not None:
            info.update(reason=outcome.reason, exit_reason=outcome.exit_reason, answer=ep.answer,
                        task_reward=ep.task_reward, steps=ep.steps)  # fmt: skip
            if outcome.error is not None:  # the sandbox failed
                info["error"] = f"{type(outcome.error).__name__}: {outcome.error}"
        ep.reward += reward
        if terminated or truncated:
            info["episode_reward"] = ep.reward
        info["env_s"] = time.perf_counter() - t0
        return obs, float(reward), terminated, truncated, info

    def _finish(self, ep: _Episode, outcome: Outcome, graded: bool) -> float:
        """End the episode: read the answer, run the reward function (sandbox still held)."""
        ep.done, ep.outcome = True, outcome
        sb = self._sb
        if sb is not None:
            try:
                answer_file = ep.tools.paths.answer_file
                ep.answer = sb.read_file(answer_file, max_bytes=MAX_ANSWER_BYTES).decode("utf-8", "replace")
            except SandboxError:
                ep.answer = None
        if not graded:
            return 0.0
        return self._grade(ep, outcome, sb)

    def _grade(self, ep: _Episode, outcome: Outcome, sb: Sandbox | None) -> float:
        context = {
            "reason": outcome.reason,
            "exit_reason": outcome.exit_reason,
            "steps": ep.steps,
            "usage": dict(ep.agent.usage),
            "messages": ep.agent.messages,
            "sandbox": sb,
        }
        value = float(self.reward_fn(ep.task, ep.answer, context))
        if not math.isfinite(value):
            raise ValueError(f"reward_fn returned {value} for task {ep.task.id!r}")
        ep.task_reward = value
        return value

    def grade(self) -> float:
        """The task reward of the current (or just finished) episode, graded now if it was not: for
        engines that end an episode themselves (their own step limit, a timeout) and then ask for the
        final reward.  An episode still running ends here (``ExitReason.ABANDONED``; its sandbox must
        still be held: grade before ``close()`` or the next ``reset()``); one that ended on its own
        is graded from the answer read when it ended (``info["sandbox"]`` is then None)."""
        with self._lock:
            ep = self._episode
            if ep is None:
                raise RuntimeError("no episode to grade: call reset() first")
            if ep.task_reward is not None:
                return ep.task_reward
            if not ep.done:
                if self._sb is None:
                    raise RuntimeError("the episode's sandbox was given back: grade() before close() or reset()")
                try:
                    return self._finish(ep, Outcome(ExitReason.ABANDONED, "ended by the caller before it submitted"),
                                        graded=True)  # fmt: skip
                finally:
                    self._release()
            assert ep.outcome is not None
            return self._grade(ep, ep.outcome, self._sb)

    # -- close ---------------------------------------------------------------------------------
    def _release(self) -> None:
        """Give the held sandbox back to the pool (it is reset in place there)."""
        with self._lock:
            sb, self._sb = self._sb, None
            if self._episode is not None and not self._episode.done:
                self._episode.done = True
                self._episode.outcome = self._episode.outcome or Outcome(
                    ExitReason.ABANDONED, "reset or closed before the episode ended")
            if sb is not None and self.pool is not None:
                self.pool.release(sb)
            elif sb is not None:
                sb.close()

    def close(self) -> None:
        """Release the sandbox (and close the env's own pool).  Safe to call more than once."""
        with self._lock:
            try:
                self._release()
            finally:
                if self._own_pool and self.pool is not None:
                    self.pool.close()
                self._closed = True

    def __del__(self) -> None:
        try:
            if not self._closed and self._sb is not None:
                self.close()
        except Exception:
            pass

    def render(self) -> str | None:
        """With ``render_mode="ansi"``: the conversation so far as text."""
        if self.render_mode != "ansi":
            return None
        lines = []
        for m in self.messages:
            text = m.get("content") or ""
            for c in m.get("tool_calls") or []:
                text += f"\n-> {c['function']['name']}({c['function']['arguments']})"
            lines.append(f"[{m['role']}] {text}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("idle" if self.episode_over else f"episode {self._episodes}")
        return f"<SandboxEnv {state}>"
