"""``check_env``: does an environment keep ``SandboxEnv``'s contract?  (After Gymnasium's ``check_env``.)

It drives the env through a few episodes of ``task`` with scripted actions and raises
``EnvCheckError`` (an ``AssertionError``) naming the first rule that does not hold:

========================  ======================================================================
rule                      what must hold
========================  ======================================================================
``api``                   reset/step/close exist; reset takes ``seed`` and ``options``; the env has
                          observation and action spaces; ``sandbox`` and ``pool`` attributes
``reset-return``          reset returns ``(observation, info)``: a list of chat messages (system
                          first, user last) inside ``observation_space``, and a dict
``reset-sandbox``         after reset the env holds a live sandbox
``step-return``           step returns ``(list of messages, finite float reward, bool, bool, dict)``
                          and an ordinary tool call neither terminates nor truncates
``reset-determinism``     the same seed and task give equal reset observations, which share no
                          object with earlier ones (modifying one does not change the next)
``reset-fresh``           a new episode sees none of the last one's files or processes
``malformed-action``      a malformed action (None, a number, broken JSON, a call without a name,
                          a user message) raises nothing and is answered by a user message
``terminated-on-submit``  calling ``submit`` terminates (terminated=True, truncated=False)
``step-after-end``        step after the episode ended raises (it must not act in a released sandbox)
``truncation``            with ``options={"max_steps": 1}`` the first non-submit step truncates
``close-idempotent``      close() twice raises nothing
``no-leak``               after close the sandbox is back in the pool (or closed with the env's own
                          pool) and the processes started in it are gone
========================  ======================================================================

The env is closed at the end (``close`` is part of what is checked).  ``no-leak`` assumes nobody
else uses the pool during the check.
"""

from __future__ import annotations

import inspect
import json
import math
import posixpath
import re
import shlex
import time
from typing import Any, NamedTuple

import psutil

from ..agent.paths import Paths
from .spaces import is_message

__all__ = ["check_env", "EnvCheckError", "RULES"]

RULES = (
    "api",
    "reset-return",
    "reset-sandbox",
    "step-return",
    "reset-determinism",
    "reset-fresh",
    "malformed-action",
    "terminated-on-submit",
    "step-after-end",
    "truncation",
    "close-idempotent",
    "no-leak",
)

MARKER_NAME = ".sandboxlite_check_env"  # left in the first sandbox's workdir (reset-fresh looks for it)


class EnvCheckError(AssertionError):
    """A rule of ``check_env`` does not hold; ``.rule`` names it."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"[{rule}] {message}")
        self.rule = rule


def _expect(ok: Any, rule: str, message: str) -> None:
    if not ok:
        raise EnvCheckError(rule, message)


def _call(name: str, args: dict, call_id: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


def _bash(command: str, call_id: str = "check_bash") -> dict:
    return _call("execute_bash", {"command": command}, call_id)


def _text(obs: list[dict]) -> str:
    return "\n".join(m.get("content") or "" for m in obs)


def _check_step_result(result: Any, env: Any, rule: str = "step-return") -> tuple[list, float, bool, bool, dict]:
    _expect(isinstance(result, tuple) and len(result) == 5, rule,
            f"step must return (observation, reward, terminated, truncated, info), got {type(result).__name__}"
            + (f" of length {len(result)}" if isinstance(result, tuple) else ""))  # fmt: skip
    obs, reward, terminated, truncated, info = result
    _expect(isinstance(obs, list) and all(is_message(m) for m in obs), rule,
            f"the observation must be a list of chat messages, got {obs!r:.200}")  # fmt: skip
    _expect(obs in env.observation_space, rule, "the observation is not in observation_space")
    _expect(isinstance(reward, (int, float)) and not isinstance(reward, bool), rule,
            f"the reward must be a float, got {type(reward).__name__}")  # fmt: skip
    _expect(math.isfinite(reward), rule, f"the reward must be finite, got {reward}")
    kinds = f"{type(terminated).__name__}, {type(truncated).__name__}"
    _expect(type(terminated) is bool and type(truncated) is bool, rule, f"terminated and truncated must be bool, got {kinds}")
    _expect(isinstance(info, dict), rule, f"info must be a dict, got {type(info).__name__}")
    return obs, float(reward), terminated, truncated, info


def _reset(env: Any, seed: int, options: dict, rule: str = "reset-return") -> tuple[list, dict]:
    result = env.reset(seed=seed, options=options)
    _expect(isinstance(result, tuple) and len(result) == 2, rule,
            f"reset must return (observation, info), got {type(result).__name__}")  # fmt: skip
    obs, info = result
    _expect(isinstance(obs, list) and obs and all(is_message(m) for m in obs), rule,
            f"the reset observation must be a non-empty list of chat messages, got {obs!r:.200}")  # fmt: skip
    _expect(obs[0]["role"] == "system" and obs[-1]["role"] == "user", rule,
            f"the reset observation must start with the system prompt and end with the user's, got roles "
            f"{[m['role'] for m in obs]}")  # fmt: skip
    _expect(obs in env.observation_space, rule, "the reset observation is not in observation_space")
    _expect(isinstance(info, dict), rule, f"the reset info must be a dict, got {type(info).__name__}")
    return obs, info


def _jail_processes(sb: Any, needle: str, timeout: float = 2.0) -> list[psutil.Process]:
    """Host processes of a sandbox whose command line contains ``needle`` (waiting up to ``timeout``
    for one to show up: a background command is forked before it executes)."""
    deadline = time.monotonic() + timeout
    while True:
        found = _find(sb, needle)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def _find(sb: Any, needle: str) -> list[psutil.Process]:
    try:
        root = psutil.Process(sb.bwrap_pid)
        procs = root.children(recursive=True)
    except (psutil.NoSuchProcess, TypeError, ValueError):
        return []
    out = []
    for p in procs:
        try:
            if needle in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def _gone(procs: list[psutil.Process], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            return not alive
        time.sleep(0.02)


class _Run:
    """Calls the env under the name of the rule being checked: an unexpected exception from the
    env becomes an ``EnvCheckError`` of that rule."""

    def __init__(self, env: Any, seed: int, options: dict) -> None:
        self.env, self.seed, self.options, self.rule = env, seed, options, "api"

    def reset(self, rule: str, **extra: Any) -> tuple[list, dict]:
        self.rule = rule
        options = {**self.options, **extra}
        try:
            return _reset(self.env, self.seed, options, rule)
        except EnvCheckError:
            raise
        except Exception as e:
            raise EnvCheckError(rule, f"reset(options={options!r:.100}) raised {type(e).__name__}: {e}") from e

    def step(self, rule: str, action: Any) -> tuple[list, float, bool, bool, dict]:
        self.rule = rule
        try:
            result = self.env.step(action)
        except Exception as e:
            raise EnvCheckError(rule, f"step({action!r:.100}) raised {type(e).__name__}: {e}") from e
        return _check_step_result(result, self.env, rule)


def check_env(env: Any, task: Any = None, *, seed: int = 0, acquire_timeout: float = 30.0) -> dict:
    """Check ``env`` (a ``SandboxEnv``, possibly wrapped by gymnasium) with ``task`` (a ``Task`` or
    a dict; None: the env's own).  Returns ``{"rules": [...], "seconds": ...}`` when every rule
    holds, raises ``EnvCheckError`` naming the first that does not.  Closes ``env``.

    An env that waits for sandboxes without a timeout gets ``acquire_timeout`` for the check, so
    that one that never gives its sandbox back fails instead of hanging."""
    start = time.monotonic()
    base = getattr(env, "unwrapped", env)
    options: dict = {"task": task} if task is not None else {}
    _check_api(env, base)
    if getattr(base, "acquire_timeout", 0) is None:
        base.acquire_timeout = acquire_timeout
    run = _Run(env, seed, options)

    try:
        snapshot, marker, pid, left = _check_first_episode(run, base)
        _check_reset_determinism(run, snapshot)
        _check_reset_fresh(run, left, marker, pid)
        _check_malformed_actions(run)
        _check_episode_end(run, env)
        held = _hold_for_close(run, base)
    except BaseException:
        try:
            env.close()
        except Exception:
            pass
        raise
    _check_close(env, base, held)
    return {"rules": list(RULES), "seconds": round(time.monotonic() - start, 3)}


def _check_api(env: Any, base: Any) -> None:
    """Rule api: the methods, reset's parameters, the spaces, and the sandbox and pool attributes."""
    for name in ("reset", "step", "close"):
        _expect(callable(getattr(env, name, None)), "api", f"the env has no {name}() method")
    try:
        params = inspect.signature(env.reset).parameters
    except (TypeError, ValueError):
        params = {}
    has_kwargs = any(p.kind == p.VAR_KEYWORD for p in params.values())
    _expect(has_kwargs or ("seed" in params and "options" in params), "api",
            f"reset must accept seed= and options=, its parameters are {list(params)}")  # fmt: skip
    for space in ("observation_space", "action_space"):
        _expect(callable(getattr(getattr(env, space, None), "contains", None)), "api",
                f"the env has no {space} with contains()")  # fmt: skip
    _expect(hasattr(base, "sandbox") and hasattr(base, "pool"), "api",
            "the env must expose .sandbox (the held sandbox) and .pool (where it comes from)")  # fmt: skip


def _check_first_episode(run: _Run, base: Any) -> tuple[str, str, str, list[psutil.Process]]:
    """Rules reset-return, reset-sandbox, step-return: the first reset's observation (as JSON), and
    what the first step left behind for reset-fresh (the marker file's quoted path, the background
    pid and its host processes)."""
    obs0, _ = run.reset("reset-return")
    snapshot = json.dumps(obs0, sort_keys=True)
    sb = base.sandbox
    _expect(sb is not None and sb.alive(), "reset-sandbox", "after reset the env holds no live sandbox")
    marker = shlex.quote(posixpath.join(Paths.of(sb).workdir, MARKER_NAME))

    # -- step-return (leaves a file and a background process behind)
    obs, _, terminated, truncated, _ = run.step(
        "step-return", _bash(f"echo left-behind > {marker}; sleep 1717 >/dev/null 2>&1 & echo pid=$!"))
    _expect(not terminated and not truncated, "step-return",
            f"an ordinary tool call ended the episode (terminated={terminated}, truncated={truncated})")
    m = re.search(r"pid=(\d+)", _text(obs))
    _expect(m is not None, "step-return", f"the tool's output is not in the observation: {_text(obs)!r:.300}")
    pid = m.group(1)
    left = _jail_processes(sb, "sleep 1717")
    _expect(left, "step-return", "the background process the tool call started is not running")
    return snapshot, marker, pid, left


def _check_reset_determinism(run: _Run, snapshot: str) -> None:
    """Rule reset-determinism: equal observations, sharing no object with earlier ones."""
    obs1, _ = run.reset("reset-determinism")
    _expect(json.dumps(obs1, sort_keys=True) == snapshot, "reset-determinism",
            "two resets with the same seed and task gave different observations")  # fmt: skip
    obs1[0]["content"] = (obs1[0]["content"] or "") + " (modified by check_env)"
    obs1.append({"role": "user", "content": "appended by check_env"})
    obs2, _ = run.reset("reset-determinism")
    _expect(json.dumps(obs2, sort_keys=True) == snapshot, "reset-determinism",
            "a reset observation shares objects with an earlier one (modifying it changed the next)")  # fmt: skip


def _check_reset_fresh(run: _Run, left: list[psutil.Process], marker: str, pid: str) -> None:
    """Rule reset-fresh: the first episode's file and process are gone."""
    _expect(_gone(left), "reset-fresh", "a process of the previous episode is still running after reset")
    obs, *_ = run.step("reset-fresh", _bash(
        f"test -e {marker} && echo file=present || echo file=absent; "
        f"kill -0 {pid} 2>/dev/null && echo proc=alive || echo proc=gone"))  # fmt: skip
    text = _text(obs)
    _expect("file=absent" in text, "reset-fresh", "a file written in the previous episode is still there")
    _expect("proc=gone" in text, "reset-fresh", "a process of the previous episode is visible after reset")


def _check_malformed_actions(run: _Run) -> None:
    """Rule malformed-action (each in a fresh episode: format errors in a row may truncate)."""
    bad_actions = [None, 12345, "<tool_call>{not json", {"role": "assistant", "tool_calls": [{"function": {}}]},
                   {"role": "user", "content": "hello"}]  # fmt: skip
    for bad in bad_actions:
        run.reset("malformed-action")
        obs, _, terminated, _, _ = run.step("malformed-action", bad)
        _expect(obs and obs[-1]["role"] == "user" and obs[-1].get("content"), "malformed-action",
                f"step({bad!r}) was not answered by a user message, got {obs!r:.200}")  # fmt: skip
        _expect(not terminated, "malformed-action", f"step({bad!r}) terminated the episode")


def _check_episode_end(run: _Run, env: Any) -> None:
    """Rules terminated-on-submit, step-after-end, truncation."""
    run.reset("terminated-on-submit")
    _, _, terminated, truncated, _ = run.step("terminated-on-submit", _call("submit", {}, "check_submit"))
    _expect(terminated and not truncated, "terminated-on-submit",
            f"submit gave terminated={terminated}, truncated={truncated}")  # fmt: skip
    try:
        env.step(_bash("echo after-the-end"))
    except Exception:
        pass
    else:
        raise EnvCheckError("step-after-end", "step after a terminated episode did not raise")

    run.reset("truncation", max_steps=1)
    _, _, terminated, truncated, _ = run.step("truncation", _bash("echo one"))
    _expect(truncated and not terminated, "truncation",
            f"with max_steps=1 the first step gave terminated={terminated}, truncated={truncated}")  # fmt: skip


class _Held(NamedTuple):
    """The episode that close() ends in the no-leak rule."""

    sandbox: Any  # the sandbox it holds
    pool: Any  # where that comes from
    procs: list[psutil.Process]  # the background process started in it
    in_use: int | None  # the pool's sandboxes in use then (None: the pool does not say)
    own: bool  # the pool is the env's own (close() closes the sandbox rather than giving it back)


def _hold_for_close(run: _Run, base: Any) -> _Held:
    """An episode holding a sandbox with a process in it, for close() to end (rule no-leak)."""
    run.reset("no-leak")
    run.step("no-leak", _bash("sleep 1718 >/dev/null 2>&1 & echo started"))
    held, pool = base.sandbox, base.pool
    _expect(held is not None, "no-leak", "the env holds no sandbox during an episode")
    procs = _jail_processes(held, "sleep 1718")
    _expect(procs, "no-leak", "the background process the episode started is not running")
    in_use = pool.in_use if pool is not None and hasattr(pool, "in_use") else None
    own = getattr(base, "_own_pool", False)
    return _Held(held, pool, procs, in_use, own)


def _check_close(env: Any, base: Any, episode: _Held) -> None:
    """Rules close-idempotent, no-leak: close twice while ``episode`` holds a sandbox."""
    held, pool, procs, in_use, own = episode
    try:
        env.close()
        env.close()
    except Exception as e:
        raise EnvCheckError("close-idempotent", f"close() raised {type(e).__name__}: {e}") from None
    _expect(base.sandbox is None, "no-leak", "the env still holds a sandbox after close()")
    if own:
        _expect(held.closed, "no-leak", "the env's own pool left its sandbox open after close()")
    elif in_use is not None:
        _expect(pool.in_use == in_use - 1, "no-leak", "close() did not give the sandbox back to the pool "
                f"(in use: {in_use} before, {pool.in_use} after)")
    _expect(_gone(procs), "no-leak", "a process started in the episode survived close()")
