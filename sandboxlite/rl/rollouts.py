"""Rollouts: G episodes per task (GRPO-style groups), run concurrently over a ``SandboxPool``.

    groups = run_groups(policy, tasks, group_size=8, concurrency=64)
    for g in groups:
        print(g.task.id, g.rewards, g.advantages)         # advantages: group-normalised
        for traj in g.trajectories:
            traj.messages, traj.turns, traj.reward, traj.advantage, traj.error

The policy maps the conversation to the next assistant message (anything ``SandboxEnv.step``
accepts).  It may be:

- a model object with ``complete(messages, tools)`` (``OpenAIModel``, ``LocalModel``,
  ``FakeModel``, ...), called in a worker thread;
- an ``async def policy(messages[, tools])`` coroutine function, awaited in the event loop;
- a plain function ``policy(messages[, tools])``, called in a worker thread.

``policy_factory(task, sample, seed) -> policy`` instead gives every episode its own policy
(scripted ones, e.g. a ``FakeModel`` per episode).  ``policy_concurrency`` bounds how many policy
calls run at once (1 for models that are not thread-safe, such as the in-process ``LocalModel``).

Token ids: when the policy's action carries ``token_ids`` (and optionally ``logprobs``,
``prompt_token_ids``) as keys or attributes, each ``Turn`` keeps them, and
``Trajectory.training_tokens()`` lays out one response with a loss mask of 1 on policy tokens and
0 on tool-observation tokens.  Observation tokens come from ``tokenize_observation(messages) ->
ids`` (e.g. your tokenizer's chat template applied to the tool messages), or, without it, from the
difference between consecutive ``prompt_token_ids`` (what an inference server that re-tokenises
the whole conversation reports).

Failures stay inside their episode: an exception (policy, policy factory, reward function,
tokenizer) or a sandbox failing under the tools is recorded in ``Trajectory.error`` (with the
traceback) and the rest of the group carries on; errored trajectories are left out of the
advantage statistics (advantage 0).  Cancelling a rollout (or
Ctrl-C in ``run_groups``) waits for in-flight tool calls to return, then releases every sandbox.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from ..agent.outcome import ExitReason
from ..agent.task import Task
from ..config import SandboxConfig
from ..errors import ConfigError, FormatError, SnapshotError
from ..jail.pool import SandboxPool
from ..jail.sandbox import Sandbox
from ..state.snapshot import Snapshot
from .actions import extract_tokens
from .env import SandboxEnv, as_task

log = logging.getLogger(__name__)

__all__ = [
    "Turn",
    "Trajectory",
    "Group",
    "group_advantages",
    "run_groups",
    "arun_groups",
    "rollout",
    "arollout",
]


# --------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------
@dataclass
class Turn:
    """One policy action and what the environment answered."""

    index: int
    assistant: dict | None  # the assistant message as it entered the conversation (None: nothing usable)
    observations: list[dict]  # the messages the environment added (tool answers, format errors)
    reward: float
    policy_s: float  # waiting for the policy
    env_s: float  # env.step, as seen by the rollout (tools, bookkeeping, thread hop)
    tools_s: float  # running the tool calls
    tool_calls: list[str] = field(default_factory=list)
    format_error: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None
    observation_token_ids: list[int] | None = None


@dataclass
class Trajectory:
    """One episode, trainer-ready: the whole conversation plus per-turn records."""

    task_id: str
    sample: int  # index in its group
    seed: int | None
    messages: list[dict] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0  # sum of the step rewards (task reward and step penalties)
    task_reward: float | None = None  # what the reward function gave (None: not graded)
    terminated: bool = False
    truncated: bool = False
    exit_reason: str | None = None  # how the episode ended, as text ("limits exceeded: max_steps=3 reached")
    answer: str | None = None
    usage: dict = field(default_factory=dict)
    reset_s: float = 0.0
    duration_s: float = 0.0
    advantage: float = 0.0
    error: str | None = None
    traceback: str | None = None
    prompt_token_ids: list[int] | None = None
    reason: ExitReason | None = None  # the same, machine-readable (ExitReason.MAX_STEPS)

    @property
    def ok(self) -> bool:
        """The episode ran to an end (terminated or truncated) without an exception."""
        return self.error is None and (self.terminated or self.truncated)

    @property
    def has_tokens(self) -> bool:
        return bool(self.turns) and all(t.token_ids is not None for t in self.turns)

    def training_tokens(self) -> dict[str, Any]:
        """``{"prompt_ids", "response_ids", "loss_mask", "logprobs"}``: the policy's tokens (mask 1)
        interleaved with the observation tokens (mask 0); ``logprobs`` is 0.0 on observation tokens
        (None when the policy gave none).  The observations after the last turn are left out when
        their tokens are unknown (nothing after them is trained on).  ValueError when the policy
        did not return token ids, or an observation in the middle cannot be tokenised."""
        if not self.has_tokens:
            raise ValueError(f"trajectory {self.task_id}#{self.sample}: the policy returned no token_ids")
        ids: list[int] = []
        mask: list[int] = []
        logprobs: list[float] | None = []
        for i, t in enumerate(self.turns):
            assert t.token_ids is not None
            ids += t.token_ids
            mask += [1] * len(t.token_ids)
            if logprobs is not None and t.logprobs is not None and len(t.logprobs) == len(t.token_ids):
                logprobs += t.logprobs
            else:
                logprobs = None
            obs = t.observation_token_ids
            if obs is None and i + 1 < len(self.turns):
                obs = _between_prompts(t, self.turns[i + 1])
            if obs is None:
                if i + 1 < len(self.turns):
                    raise ValueError(
                        f"trajectory {self.task_id}#{self.sample}: the tokens of the observation after turn "
                        f"{t.index} are unknown: pass tokenize_observation, or return prompt_token_ids"
                    )
                continue
            ids += obs
            mask += [0] * len(obs)
            if logprobs is not None:
                logprobs += [0.0] * len(obs)
        prompt = self.prompt_token_ids if self.prompt_token_ids is not None else self.turns[0].prompt_token_ids
        return {"prompt_ids": prompt, "response_ids": ids, "loss_mask": mask, "logprobs": logprobs}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def _between_prompts(turn: Turn, following: Turn) -> list[int] | None:
    """The observation's tokens as the next prompt shows them: next prompt = this prompt + this
    turn's tokens + the observation's tokens."""
    a, b, out = turn.prompt_token_ids, following.prompt_token_ids, turn.token_ids
    if a is None or b is None or out is None:
        return None
    head = a + out
    if b[: len(head)] != head:
        return None
    return b[len(head):]


def group_advantages(rewards: Iterable[float | None], *, scale: bool = True, eps: float = 1e-6) -> list[float]:
    """GRPO advantages: ``(r - mean) / (std + eps)`` over the group (``r - mean`` with
    ``scale=False``, as in Dr. GRPO).  ``std`` is the sample standard deviation (n - 1), as
    verl computes it.  ``None`` rewards (failed episodes) get 0 and are left out of the
    statistics; a group of one, or with identical rewards, gets zeros."""
    values = list(rewards)
    valid = [float(r) for r in values if r is not None]
    if len(valid) < 2:
        return [0.0 for _ in values]
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((r - mean) ** 2 for r in valid) / (len(valid) - 1))
    out = []
    for r in values:
        if r is None:
            out.append(0.0)
        elif scale:
            out.append((float(r) - mean) / (std + eps))
        else:
            out.append(float(r) - mean)
    return out


@dataclass
class Group:
    """The G trajectories of one task, with their group-normalised advantages."""

    task: Task
    trajectories: list[Trajectory]
    advantages: list[float] = field(default_factory=list)
    snapshot: str | None = None  # the prepared state every episode started from (run_groups(prepare=))
    prepare_s: float = 0.0  # how long the preparation and its snapshot took

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    @property
    def mean_reward(self) -> float:
        ok = [t.reward for t in self.trajectories if t.error is None]
        return sum(ok) / len(ok) if ok else 0.0

    @property
    def errors(self) -> list[Trajectory]:
        return [t for t in self.trajectories if t.error is not None]

    def compute_advantages(self, *, scale: bool = True) -> list[float]:
        self.advantages = group_advantages([t.reward if t.error is None else None for t in self.trajectories],
                                           scale=scale)  # fmt: skip
        for t, a in zip(self.trajectories, self.advantages):
            t.advantage = a
        return self.advantages


# --------------------------------------------------------------------------------------------
# calling the policy
# --------------------------------------------------------------------------------------------
def _takes_tools(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 2


class _PolicyCaller:
    """Calls one policy the right way: awaited, or in a worker thread; bounded by a semaphore."""

    def __init__(self, policy: Any, executor: Executor | None, limit: asyncio.Semaphore | None) -> None:
        if policy is None:
            raise TypeError("a policy is required (or a policy_factory)")
        complete = getattr(policy, "complete", None)
        if callable(complete):
            fn, with_tools = complete, True
        elif callable(policy):
            fn, with_tools = policy, _takes_tools(policy)
        else:
            raise TypeError(f"the policy must be callable or have complete(messages, tools), "
                            f"got {type(policy).__name__}")
        self.fn, self.with_tools = fn, with_tools
        call = getattr(fn, "__call__", None)
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)
        self.executor, self.limit = executor, limit

    async def __call__(self, messages: list[dict], tools: list[dict]) -> Any:
        args = (messages, tools) if self.with_tools else (messages,)
        if self.limit is not None:
            async with self.limit:
                return await self._call(args)
        return await self._call(args)

    async def _call(self, args: tuple) -> Any:
        try:
            if self.is_async:
                result = await self.fn(*args)
            else:
                result = await asyncio.get_running_loop().run_in_executor(self.executor, lambda: self.fn(*args))
            if inspect.isawaitable(result):
                result = await result
            return result
        except FormatError as e:  # a model's text that did not parse: the env answers it like the loop does
            reply = getattr(e, "reply", None)
            return reply if reply is not None else ""


# --------------------------------------------------------------------------------------------
# one episode
# --------------------------------------------------------------------------------------------
async def _episode(
    env: SandboxEnv,
    task: Task,
    sample: int,
    seed: int | None,
    policy: _PolicyCaller,
    executor: Executor | None,
    tokenize_observation: Callable[[list[dict]], list[int]] | None,
    snapshot: Snapshot | None = None,
) -> Trajectory:
    traj = Trajectory(task_id=task.id, sample=sample, seed=seed)
    start = time.perf_counter()
    try:
        obs, _ = await env.reset_async(seed=seed, options={"task": task, "snapshot": snapshot}, executor=executor)
        traj.reset_s = time.perf_counter() - start
        if tokenize_observation is not None:
            traj.prompt_token_ids = list(tokenize_observation(obs))
        tools = env.tool_schemas()
        while True:
            t0 = time.perf_counter()
            action = await policy(env.messages, tools)
            t1 = time.perf_counter()
            token_ids, logprobs, prompt_ids = extract_tokens(action)
            obs, reward, terminated, truncated, info = await env.step_async(action, executor=executor)
            t2 = time.perf_counter()
            turn = Turn(
                index=info["step"], assistant=info["assistant"], observations=obs, reward=reward,
                policy_s=t1 - t0, env_s=t2 - t1, tools_s=info["tools_s"], tool_calls=info["tool_calls"],
                format_error=info["format_error"], token_ids=token_ids, logprobs=logprobs,
                prompt_token_ids=prompt_ids,
            )  # fmt: skip
            if tokenize_observation is not None and token_ids is not None and obs:
                turn.observation_token_ids = list(tokenize_observation(obs))
            traj.turns.append(turn)
            traj.reward += reward
            if terminated or truncated:
                traj.terminated, traj.truncated = terminated, truncated
                traj.reason, traj.exit_reason, traj.answer = info.get("reason"), info["exit_reason"], info["answer"]
                traj.task_reward = info["task_reward"]
                if info.get("error"):
                    traj.error = info["error"]
                break
    except Exception as e:  # recorded in this trajectory; the group carries on
        traj.error = f"{type(e).__name__}: {e}"
        traj.traceback = traceback.format_exc()
    finally:
        traj.messages = env.messages
        traj.usage = env.usage
        traj.duration_s = time.perf_counter() - start
        # release the sandbox even when cancelled: close() waits for an in-flight step (the env's
        # lock), in a thread; shielded, so a second cancellation cannot skip it
        await asyncio.shield(asyncio.get_running_loop().run_in_executor(executor, env.close))
    return traj


# --------------------------------------------------------------------------------------------
# groups
# --------------------------------------------------------------------------------------------
async def arun_groups(
    policy: Any = None,
    tasks: Iterable[Task | Mapping] = (),
    group_size: int = 4,
    *,
    policy_factory: Callable[[Task, int, int], Any] | None = None,
    pool: SandboxPool | None = None,
    config: SandboxConfig | None = None,
    concurrency: int | None = None,
    policy_concurrency: int | None = None,
    tokenize_observation: Callable[[list[dict]], list[int]] | None = None,
    seed: int = 0,
    scale_advantages: bool = True,
    env_options: Mapping[str, Any] | None = None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
    prepare: Callable[..., Any] | None = None,
    keep_snapshots: bool = False,
) -> list[Group]:
    """Run ``group_size`` episodes of every task, at most ``concurrency`` at once.

    ``prepare``: ``prepare(sandbox)`` (or ``prepare(sandbox, task)``) runs once per task in a
    sandbox of the pool (install packages, stage data, reach a mid-episode state); the sandbox's
    state is snapshotted and every episode of the task's group starts from it (``Group.snapshot``,
    ``Group.prepare_s``).  When it raises, the group's episodes are recorded with the error.  The
    snapshots are removed at the end unless ``keep_snapshots``.

    ``pool``: sandboxes to use (shared, left open); without one, a pool of ``concurrency``
    sandboxes (default: the number of episodes, at most 16) is made from ``config`` (else the
    first task's rootfs and network) and closed at the end.  ``concurrency`` defaults to the
    pool's size.  ``env_options``: keyword arguments of ``SandboxEnv`` (``reward_fn``,
    ``step_penalty``, ``max_steps``, ``max_total_tokens``, ``max_wall_s``, ``bash_timeout``, ...).
    Episode ``i`` (counting over tasks, then samples) is reset with seed ``seed + i``.
    Returns one ``Group`` per task, in order, with advantages computed.
    """
    task_list = [as_task(t) for t in tasks]
    if not task_list:
        return []
    if not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if (policy is None) == (policy_factory is None):
        raise TypeError("give exactly one of policy and policy_factory")
    check_prepare(prepare)
    n = len(task_list) * group_size
    own_pool = pool is None
    if own_pool:
        size = concurrency or min(n, 16)
        cfg = config or SandboxConfig(rootfs=task_list[0].rootfs, network=task_list[0].network)
        pool = await asyncio.to_thread(SandboxPool, cfg, size=size)
    assert pool is not None
    run = _GroupRun(pool, concurrency or pool.size, len(task_list), policy, policy_factory, policy_concurrency,
                    dict(env_options or {}), tokenize_observation, on_trajectory)  # fmt: skip
    try:
        if prepare is not None:
            await asyncio.gather(*(run.prepare(prepare, i, t) for i, t in enumerate(task_list)))
        jobs = [run.episode(t, k, seed + i * group_size + k, i)
                for i, t in enumerate(task_list) for k in range(group_size)]  # fmt: skip
        # return_exceptions=True: on cancellation, gather returns only when every episode has run its
        # cleanup (with False it gives up at the first cancelled episode, sandboxes still held)
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):  # (episodes record their own errors: this is a bug)
                raise r
    finally:
        run.executor.shutdown(wait=False)
        if own_pool:
            pool.close()
        if not keep_snapshots:
            _remove_snapshots([s for s in run.prepared if isinstance(s, Snapshot)])
    groups = []
    for i, task in enumerate(task_list):
        g = Group(task, list(results[i * group_size : (i + 1) * group_size]))
        snap = run.prepared[i]
        g.snapshot, g.prepare_s = (snap.name if isinstance(snap, Snapshot) else None), run.prepare_s[i]
        g.compute_advantages(scale=scale_advantages)
        groups.append(g)
    return groups


class _GroupRun:
    """What the episodes of one ``arun_groups`` share: the pool, the worker threads, the bounds on
    episodes and policy calls at once, and each task's prepared state."""

    def __init__(self, pool: SandboxPool, concurrency: int, tasks: int, policy: Any,
                 policy_factory: Callable[[Task, int, int], Any] | None, policy_concurrency: int | None,
                 options: dict[str, Any], tokenize_observation: Callable[[list[dict]], list[int]] | None,
                 on_trajectory: Callable[[Trajectory], None] | None) -> None:  # fmt: skip
        self.pool = pool
        self.executor = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="sandboxlite-rl")
        self.running = asyncio.Semaphore(concurrency)
        self.policy_limit = asyncio.Semaphore(policy_concurrency) if policy_concurrency else None
        self.shared = _PolicyCaller(policy, self.executor, self.policy_limit) if policy is not None else None
        self.policy_factory, self.options = policy_factory, options
        self.tokenize_observation, self.on_trajectory = tokenize_observation, on_trajectory
        self.prepared: list[Snapshot | BaseException | None] = [None] * tasks  # by task: its snapshot, or the error
        self.prepare_s = [0.0] * tasks

    async def prepare(self, prepare: Callable[..., Any], i: int, task: Task) -> None:
        """Run ``prepare`` for task ``i`` in a sandbox of the pool, and keep its snapshot (or error)."""
        async with self.running:
            loop = asyncio.get_running_loop()
            sb = await self.pool.acquire_async()
            t0 = time.perf_counter()
            try:
                self.prepared[i] = await loop.run_in_executor(self.executor, _prepared, prepare, sb, task)
            except Exception as e:  # recorded in the group's episodes
                self.prepared[i] = e
            finally:
                self.prepare_s[i] = time.perf_counter() - t0
                await loop.run_in_executor(self.executor, self.pool.release, sb)

    async def episode(self, task: Task, k: int, ep_seed: int, i: int) -> Trajectory:
        """Episode ``k`` of task ``i``, from its prepared state (recorded as failed when that failed)."""
        snap = self.prepared[i]
        if isinstance(snap, BaseException):
            failed = Trajectory(task_id=task.id, sample=k, seed=ep_seed,
                                error=f"prepare failed: {type(snap).__name__}: {snap}")  # fmt: skip
            if self.on_trajectory is not None:
                self.on_trajectory(failed)
            return failed
        async with self.running:
            env = SandboxEnv(pool=self.pool, **self.options)
            try:
                if self.shared is not None:
                    caller = self.shared
                else:
                    assert self.policy_factory is not None
                    caller = _PolicyCaller(self.policy_factory(task, k, ep_seed), self.executor, self.policy_limit)
            except Exception as e:  # the factory failed for this episode
                env.close()
                return Trajectory(task_id=task.id, sample=k, seed=ep_seed, error=f"{type(e).__name__}: {e}",
                                  traceback=traceback.format_exc())  # fmt: skip
            traj = await _episode(env, task, k, ep_seed, caller, self.executor, self.tokenize_observation, snap)
            if self.on_trajectory is not None:
                self.on_trajectory(traj)
            return traj


def check_prepare(prepare: Any) -> None:
    """ConfigError unless ``prepare`` is None or a callable (of the sandbox, or the sandbox and the task)."""
    if prepare is not None and not callable(prepare):
        raise ConfigError("prepare", f"expected a function of the sandbox (or of the sandbox and the task), "
                          f"got {prepare!r}")  # fmt: skip


def _prepared(prepare: Callable[..., Any], sb: Sandbox, task: Task) -> Snapshot:
    """Run ``prepare`` in ``sb`` (with the task when it takes two arguments), then snapshot it."""
    try:
        two = len(inspect.signature(prepare).parameters) >= 2
    except (TypeError, ValueError):  # a builtin, say
        two = False
    if two:
        prepare(sb, task)
    else:
        prepare(sb)
    return sb.snapshot()


def _remove_snapshots(snaps: list[Snapshot]) -> None:
    for name in {s.name for s in snaps}:  # two tasks may have prepared the same state
        snap = next(s for s in snaps if s.name == name)
        try:
            snap.store.remove(name)
        except SnapshotError as e:  # in use elsewhere (a sandbox the caller still holds): left
            log.info("run_groups: snapshot %s left in the store: %s", snap, e.message)


def run_groups(
    policy: Any = None, tasks: Iterable[Task | Mapping] = (), group_size: int = 4, **kwargs: Any
) -> list[Group]:
    """``arun_groups`` from synchronous code (its own event loop; Ctrl-C releases every sandbox)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_groups(policy, tasks, group_size, **kwargs))
    raise RuntimeError("run_groups() was called from a running event loop: await arun_groups() instead")


async def arollout(
    policy: Any,
    task: Task | Mapping,
    *,
    env: SandboxEnv | None = None,
    pool: SandboxPool | None = None,
    seed: int | None = None,
    tokenize_observation: Callable[[list[dict]], list[int]] | None = None,
    executor: Executor | None = None,
    snapshot: Snapshot | None = None,
    **env_options: Any,
) -> Trajectory:
    """One episode of ``task``.  ``env`` (closed afterwards) or ``pool`` (an env is made on it;
    without either, the env makes its own one-sandbox pool); ``snapshot``: the state it starts
    from (``reset(options={"snapshot": ...})``), else the pool's."""
    t = as_task(task)
    assert t is not None
    if env is None:
        env = SandboxEnv(pool=pool, **env_options)
    elif env_options:
        raise TypeError("give env options either to the env or here, not both")
    return await _episode(env, t, 0, seed, _PolicyCaller(policy, executor, None), executor, tokenize_observation,
                          snapshot)  # fmt: skip


def rollout(policy: Any, task: Task | Mapping, **kwargs: Any) -> Trajectory:
    """``arollout`` from synchronous code."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arollout(policy, task, **kwargs))
    raise RuntimeError("rollout() was called from a running event loop: await arollout() instead")
