"""SandboxEnv against real sandboxes: prompts, actions, observations, rewards, limits, release, check_env."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandboxlite import SandboxPool
from sandboxlite.agent.loop import NO_TOOL_CALL
from sandboxlite.agent.model import AssistantMessage, FakeModel, ToolCall
from sandboxlite.agent.prompts import PromptTemplate
from sandboxlite.agent.run import run_task
from sandboxlite.agent.task import Task
from sandboxlite.errors import SandboxClosed
from sandboxlite.rl import (
    ENV_ID,
    EnvCheckError,
    ResetNeeded,
    SandboxEnv,
    check_env,
    exact_match,
    normalize_answer,
)

from .conftest import alive

ROOT = Path(__file__).resolve().parents[1]
SUM = Task.from_dict({"id": "sum", "query": "Add the two numbers in /testbed/input/n.txt.",
                      "input_files": {"n.txt": "17\n25\n"}, "metadata": {"answer": "42"}})  # fmt: skip
AWK = "awk '{s+=$1} END {print s}' /testbed/input/n.txt > /testbed/output/answer.txt; cat /testbed/output/answer.txt"


def call(name, args=None, call_id="c1", raw=None):
    arguments = raw if raw is not None else json.dumps(args or {})
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}  # fmt: skip


def bash(cmd, call_id="c1"):
    return call("execute_bash", {"command": cmd}, call_id)


SUBMIT = call("submit", {}, "c_submit")


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=2, rootfs="host") as p:
        yield p


@pytest.fixture
def env(pool):
    e = SandboxEnv(pool=pool)
    yield e
    e.close()
    assert pool.in_use == 0


# -- reset --------------------------------------------------------------------------------------------
def test_reset_gives_the_agents_prompts_and_a_prepared_sandbox(env, pool):
    obs, info = env.reset(seed=3, options={"task": SUM})
    system, instance = PromptTemplate.load(None).render(SUM.query, dict(SUM.input_files), network="none")
    assert "there is no network" in system
    assert obs == [{"role": "system", "content": system}, {"role": "user", "content": instance}]
    assert "/testbed/input/n.txt (6 bytes)" in instance
    assert info["task_id"] == "sum" and info["limits"]["max_steps"] == SUM.max_steps and info["reset_s"] > 0
    sb = env.sandbox
    assert sb is not None and pool.in_use == 1
    assert sb.read_file("/testbed/input/n.txt") == b"17\n25\n"
    assert sb.exec("test -d /testbed/output").exit_code == 0
    obs[0]["content"] = "changed"  # the observation is the caller's: the history is not affected
    assert env.messages[0]["content"] == system
    # a task given as a dict, and a reset in the middle of an episode: a new, pristine sandbox state
    env.step(bash("echo leftover > /testbed/output/x; sleep 1000 >/dev/null 2>&1 &"))
    obs2, _ = env.reset(options={"task": SUM.to_dict()})
    assert obs2[0]["content"] == system and pool.in_use == 1
    assert env.sandbox.exec("ls -A /testbed/output").stdout == b""


def test_reset_needs_a_task_and_known_options(pool):
    env = SandboxEnv(pool=pool)
    with pytest.raises(ValueError, match="no task"):
        env.reset()
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"task": SUM, "bogus": 1})
    with pytest.raises(ResetNeeded):
        env.step(SUBMIT)
    env.close()
    with pytest.raises(SandboxClosed):
        env.reset(options={"task": SUM})


# -- an episode -----------------------------------------------------------------------------------------
def test_an_episode_that_submits_is_graded_and_releases_its_sandbox(env, pool):
    env.reset(options={"task": SUM})
    obs, reward, terminated, truncated, info = env.step(bash(AWK))
    assert obs == [{"role": "tool", "tool_call_id": "c1", "content": "42\n[exit code: 0]"}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool_calls"] == ["execute_bash"] and info["observations"][0]["data"]["exit_code"] == 0
    assert info["env_s"] >= info["tools_s"] > 0 and info["format_error"] is None
    obs, reward, terminated, truncated, info = env.step(SUBMIT)
    assert obs == [{"role": "tool", "tool_call_id": "c_submit", "content": "submitted"}]
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["exit_reason"] == "submitted" and info["answer"] == "42\n" and info["task_reward"] == 1.0
    assert env.sandbox is None and pool.in_use == 0  # released as soon as the episode ended
    assert [m["role"] for m in env.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    with pytest.raises(ResetNeeded):
        env.step(SUBMIT)


def test_reward_function_step_penalty_and_grading(pool):
    seen = {}

    def reward_fn(task, answer, info):  # runs while the sandbox is still held
        seen.update(answer=answer, reason=info["exit_reason"], steps=info["steps"])
        return 0.25 if info["sandbox"].exec("test -f /testbed/output/proof").exit_code == 0 else -1.0

    env = SandboxEnv(pool=pool, reward_fn=reward_fn, step_penalty=0.1)
    try:
        env.reset(options={"task": SUM})
        assert env.step(bash("echo 41 > /testbed/output/answer.txt; touch /testbed/output/proof"))[1] == pytest.approx(-0.1)
        _, reward, terminated, _, info = env.step(SUBMIT)
        assert terminated and reward == pytest.approx(0.15) and info["episode_reward"] == pytest.approx(0.05)
        assert seen == {"answer": "41\n", "reason": "submitted", "steps": 2}
        # the default reward: exact match after normalisation; no reference answer gives 0
        env2 = SandboxEnv(pool=pool)
        env2.reset(options={"task": {"id": "t", "query": "q", "metadata": {"answer": "1,234.0"}}})
        env2.step(bash("printf '  $1234$.\\n' > /testbed/output/answer.txt"))
        assert env2.step(SUBMIT)[1] == 1.0
        env2.reset(options={"task": {"id": "t", "query": "q"}})
        env2.step(bash("echo 1 > /testbed/output/answer.txt"))
        assert env2.step(SUBMIT)[1] == 0.0
        env2.close()
    finally:
        env.close()


def test_a_failing_reward_function_still_releases_the_sandbox(pool):
    def broken(task, answer, info):
        raise RuntimeError("grader down")

    env = SandboxEnv(pool=pool, reward_fn=broken)
    env.reset(options={"task": SUM})
    with pytest.raises(RuntimeError, match="grader down"):
        env.step(SUBMIT)
    assert env.sandbox is None and pool.in_use == 0 and env.episode_over
    env.close()


# -- actions ---------------------------------------------------------------------------------------------
def test_every_action_shape_is_understood(env):
    env.reset(options={"task": SUM})
    shapes = [
        AssistantMessage(content=None, tool_calls=[ToolCall("m1", "execute_bash", '{"command": "echo a"}')]),
        {"role": "assistant", "content": "thinking", "tool_calls": [
            {"id": "d1", "type": "function", "function": {"name": "execute_bash", "arguments": {"command": "echo b"}}}]},
        [{"id": "l1", "function": {"name": "execute_bash", "arguments": '{"command": "echo c"}'}}],  # rllm ToolAgent
        SimpleNamespace(role="assistant", content=None, tool_calls=[  # an openai message object
            SimpleNamespace(id="o1", type="function", function=SimpleNamespace(name="execute_bash",
                                                                               arguments='{"command": "echo d"}'))]),
        {"content": [{"type": "text", "text": 'ok\n<tool_call>{"name": "execute_bash", '},
                     {"type": "text", "text": '"arguments": {"command": "echo e"}}</tool_call>'}]},
    ]  # fmt: skip
    outputs = []
    for action in shapes:
        obs, _, term, trunc, info = env.step(action)
        assert not term and not trunc and info["format_error"] is None, info
        (msg,) = obs
        outputs.append(msg)
    assert [m.get("tool_call_id") for m in outputs[:4]] == ["m1", "d1", "l1", "o1"]
    assert [m["content"] for m in outputs[:4]] == [f"{c}\n[exit code: 0]" for c in "abcd"]
    # a call written as text is answered in kind, as the agent loop does
    assert outputs[4]["role"] == "user" and outputs[4]["content"].startswith("<tool_response>") and "e\n[exit" in outputs[4]["content"]
    # text: plain string; several calls in one action: all answered, in order
    obs, *_ = env.step('<tool_call>{"name": "execute_bash", "arguments": {"command": "echo f"}}</tool_call>')
    assert "f\n[exit code: 0]" in obs[0]["content"]
    two = {"role": "assistant", "tool_calls": [bash("echo g", "x1")["tool_calls"][0], bash("echo h", "x2")["tool_calls"][0]]}
    obs, *_ = env.step(two)
    assert [(m["tool_call_id"], m["content"]) for m in obs] == [("x1", "g\n[exit code: 0]"), ("x2", "h\n[exit code: 0]")]
    # the action objects were not modified
    assert shapes[0].tool_calls[0].id == "m1" and shapes[1]["tool_calls"][0]["function"]["arguments"] == {"command": "echo b"}


def test_malformed_actions_become_format_errors_never_exceptions(pool):
    env = SandboxEnv(pool=pool, max_format_errors=3)
    env.reset(options={"task": SUM})
    good = bash("echo fine")
    cases = [None, 42, b"bytes", "<tool_call>{not json", {"role": "assistant", "tool_calls": [{"function": {}}]},
             {"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "execute_bash"}]  # fmt: skip
    for bad in cases:
        obs, reward, term, trunc, info = env.step(bad)
        assert not term and not trunc and reward == 0.0
        assert obs[-1]["role"] == "user" and info["format_error"] == obs[-1]["content"], (bad, obs)
        assert "tool" in obs[-1]["content"]
        env.step(good)  # resets the run of format errors
    # plain text without a call: the loop's nudge, and the text stays in the history
    obs, *_ = env.step("The answer is 42.")
    assert obs == [{"role": "user", "content": NO_TOOL_CALL}]
    assert env.messages[-2] == {"role": "assistant", "content": "The answer is 42."}
    # bad arguments or an unknown tool are tool errors (answered by the tool), not format errors
    obs, _, _, _, info = env.step(call("no_such_tool", {}))
    assert obs[0]["role"] == "tool" and obs[0]["content"].startswith("Error: unknown tool") and info["format_error"] is None
    obs, *_ = env.step(call("execute_bash", raw="{broken"))
    assert obs[0]["content"].startswith("Error:") and "JSON" in obs[0]["content"]
    # format errors in a row end the episode (truncated), as max_format_errors says
    env.step(None)
    env.step(None)
    obs, _, term, trunc, info = env.step(None)
    assert trunc and not term and info["exit_reason"].startswith("limits exceeded: 3 replies in a row")
    assert env.sandbox is None
    env.close()


# -- the agent loop, step by step -----------------------------------------------------------------------------
def test_the_env_reproduces_the_agent_loop(pool, tmp_path):
    """The same replies through run_task and through SandboxEnv give the same conversation."""
    script = [
        {"tool": "execute_bash", "arguments": {"command": "cd /testbed/input && cat n.txt"}},
        {"tool": "no_such_tool", "arguments": {}},
        "I think it is 42.",
        '<tool_call>{"name": "str_replace_editor", "arguments": {"command": "create", '
        '"path": "/testbed/output/answer.txt", "file_text": "42"}}</tool_call>',
        "<tool_call>{broken",
        {"tool": "execute_bash", "arguments": {"command": "pwd; cat /testbed/output/answer.txt"}},
        {"tool": "submit", "arguments": {}},
    ]
    r = run_task(SUM, FakeModel(script), output_dir=tmp_path, config=pool.config)
    loop_messages = json.loads((tmp_path / "trajectory.json").read_text())["messages"]
    env = SandboxEnv(pool=pool)
    obs, _ = env.reset(options={"task": SUM})
    model = FakeModel([s for s in script if not isinstance(s, str)])  # the same call ids as run_task's
    for item in script:  # text goes in as it is: the env parses it as the loop does
        action = item if isinstance(item, str) else model.complete(env.messages, env.tool_schemas())
        _, _, term, trunc, info = env.step(action)
    assert term and info["answer"] == r.answer == "42"
    assert env.messages == loop_messages
    env.close()


# -- limits -----------------------------------------------------------------------------------------
def test_truncation_by_steps_tokens_and_wall_time(pool):
    env = SandboxEnv(pool=pool, max_total_tokens=100)
    env.reset(options={"task": SUM, "max_steps": 2})
    assert env.step(bash("echo 1"))[3] is False
    _, _, term, trunc, info = env.step(bash("echo 2"))
    assert trunc and not term and info["exit_reason"] == "limits exceeded: max_steps=2 reached" and env.sandbox is None
    # submitting on the last allowed step terminates (it is not a truncation)
    env.reset(options={"task": SUM, "max_steps": 1})
    assert env.step(SUBMIT)[2:4] == (True, False)
    # the token budget counts the usage the actions report
    env.reset(options={"task": SUM})
    a = {**bash("echo 1"), "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}
    assert env.step(a)[3] is False
    _, _, _, trunc, info = env.step(a)
    assert trunc and "token budget 100" in info["exit_reason"] and info["usage"]["total_tokens"] == 120
    # wall time
    env.reset(options={"task": SUM, "max_wall_s": 0.3})
    _, _, _, trunc, info = env.step(bash("sleep 0.4"))
    assert trunc and "wall time" in info["exit_reason"]
    # an episode truncated is not graded unless asked
    graded = SandboxEnv(pool=pool, grade_truncated=True)
    graded.reset(options={"task": SUM, "max_steps": 1})
    _, reward, _, trunc, info = graded.step(bash("echo 42 > /testbed/output/answer.txt"))
    assert trunc and reward == 1.0 and info["task_reward"] == 1.0
    env.close()
    graded.close()


def test_a_sandbox_that_dies_mid_episode_truncates_it(pool):
    env = SandboxEnv(pool=pool)
    env.reset(options={"task": SUM})
    env.step(bash("echo warm"))
    os.kill(env.sandbox.executor_pid, 9)
    time.sleep(0.05)
    obs, _, term, trunc, info = env.step(bash("echo after"))
    assert trunc and not term and info["exit_reason"].startswith("sandbox error") and "error" in info
    assert all(m["role"] != "assistant" for m in obs) and info["assistant"]["tool_calls"][0]["id"] == "c1"
    assert pool.in_use == 0
    env.reset(options={"task": SUM})  # the pool replaced or restarted it
    assert env.step(bash("echo again"))[0][0]["content"] == "again\n[exit code: 0]"
    env.close()


# -- close --------------------------------------------------------------------------------------------
def test_close_releases_and_an_own_pool_is_closed():
    task = dataclasses.replace(SUM, rootfs="host")
    env = SandboxEnv(task)
    env.reset()
    env.step(bash("sleep 1000 >/dev/null 2>&1 &"))
    sb = env.sandbox
    pids = [sb.bwrap_pid, sb.executor_pid]
    env.close()
    env.close()
    assert env.sandbox is None and sb.closed and env.pool.closed
    assert not any(alive(p) for p in pids)


def test_async_reset_and_step_share_a_pool_of_one():
    async def episode(pool, tag, log):
        env = SandboxEnv(pool=pool)
        try:
            await env.reset_async(options={"task": SUM})
            log.append(f"{tag} start")
            obs, *_ = await env.step_async(bash(f"sleep 0.1; echo {tag}"))
            await env.step_async(SUBMIT)
            log.append(f"{tag} end")
            return obs[0]["content"]
        finally:
            env.close()

    async def main():
        with SandboxPool(size=1, rootfs="host") as pool:
            log: list[str] = []
            ticks = 0

            async def ticker():  # the loop stays free while an env waits for the sandbox
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            t = asyncio.create_task(ticker())
            outs = await asyncio.gather(episode(pool, "a", log), episode(pool, "b", log))
            t.cancel()
            return outs, log, ticks, pool.in_use

    outs, log, ticks, in_use = asyncio.run(main())
    assert outs == ["a\n[exit code: 0]", "b\n[exit code: 0]"] and in_use == 0
    assert log in (["a start", "a end", "b start", "b end"], ["b start", "b end", "a start", "a end"])
    assert ticks >= 10


def test_async_steps_take_no_thread_per_step():
    """16 episodes' commands overlap on a single worker thread: step_async awaits the tool calls in
    the loop (with a thread per step they would run one after another: 16 x 0.4 s)."""

    async def episode(pool, executor, i):
        env = SandboxEnv(pool=pool)
        try:
            await env.reset_async(options={"task": SUM}, executor=executor)
            obs, *_ = await env.step_async(bash(f"sleep 0.4; echo {i}; cd /tmp"), executor=executor)
            obs2, *_ = await env.step_async(bash("pwd"), executor=executor)  # the same session
            _o, _r, terminated, _t, info = await env.step_async(SUBMIT, executor=executor)
            return obs[0]["content"], obs2[0]["content"], terminated, info["reason"]
        finally:
            env.close()

    async def main():
        from concurrent.futures import ThreadPoolExecutor

        with SandboxPool(size=16, rootfs="host") as pool, ThreadPoolExecutor(max_workers=1) as executor:
            t0 = time.monotonic()
            outs = await asyncio.gather(*(episode(pool, executor, i) for i in range(16)))
            return outs, time.monotonic() - t0, pool.in_use

    outs, wall, in_use = asyncio.run(main())
    assert [o[0] for o in outs] == [f"{i}\n[exit code: 0]" for i in range(16)] and in_use == 0
    assert all(o[1] == "/tmp\n[exit code: 0]" and o[2] for o in outs)
    assert wall < 4.0, wall  # one after the other: 6.4 s and more


def test_a_cancelled_async_step_leaves_the_env_usable(pool):
    async def main():
        env = SandboxEnv(pool=pool)
        try:
            await env.reset_async(options={"task": SUM})
            await env.step_async(bash("cd /tmp"))
            task = asyncio.create_task(env.step_async(bash("sleep 30")))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            obs, *_ = await env.step_async(bash("pwd; echo next"))
            return obs[0]["content"]
        finally:
            env.close()

    out = asyncio.run(main())
    assert out.startswith("/tmp\nnext\n[exit code: 0]") and "interrupted" in out, out


# -- check_env --------------------------------------------------------------------------------------------
def test_check_env_passes_for_sandbox_env(pool):
    report = check_env(SandboxEnv(pool=pool), SUM)
    assert report["rules"][0] == "api" and "no-leak" in report["rules"]
    assert pool.in_use == 0
    check_env(SandboxEnv(dataclasses.replace(SUM, rootfs="host")))  # its own pool


class _Leaky(SandboxEnv):
    def close(self):  # forgets to give the sandbox back
        self._closed = True


class _Clock(SandboxEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        obs[0]["content"] += f" {time.monotonic_ns()}"
        return obs, info


class _FourTuple(SandboxEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class _Strict(SandboxEnv):
    def step(self, action):
        if not isinstance(action, dict):
            raise TypeError("dicts only")
        return super().step(action)


class _Dirty(SandboxEnv):
    """Keeps its sandbox from episode to episode without resetting it."""

    def _release(self):
        if self._episode is not None:
            self._episode.done = True

    def reset(self, *, seed=None, options=None):
        if self._sb is None:
            return super().reset(seed=seed, options=options)
        task, limits, _snapshot = self._prepare_reset(seed, options)
        return self._begin(task, limits, time.perf_counter(), 0.0)

    def close(self):
        sb, self._sb, self._closed = self._sb, None, True
        if sb is not None:
            self.pool.release(sb)


class _NoRelease(SandboxEnv):
    def _release(self):
        self._sb = None  # drops the sandbox without resetting it


@pytest.mark.parametrize("cls, rule", [(_Leaky, "no-leak"), (_Clock, "reset-determinism"),
                                       (_FourTuple, "step-return"), (_Strict, "malformed-action"),
                                       (_Dirty, "reset-fresh")])  # fmt: skip
def test_check_env_names_the_broken_rule(cls, rule):
    with SandboxPool(size=2, rootfs="host") as pool:
        env = cls(pool=pool, acquire_timeout=5)
        with pytest.raises(EnvCheckError) as e:
            check_env(env, SUM)
        assert e.value.rule == rule and isinstance(e.value, AssertionError) and f"[{rule}]" in str(e.value)



def test_check_env_does_not_hang_on_an_env_that_loses_sandboxes():
    with SandboxPool(size=1, rootfs="host") as pool:
        with pytest.raises(EnvCheckError) as e:
            check_env(_NoRelease(pool=pool), SUM, acquire_timeout=0.5)
        assert e.value.rule == "reset-determinism" and "TimeoutError" in str(e.value)


# -- gymnasium ----------------------------------------------------------------------------------------------
def test_registered_with_gymnasium_and_its_checker_passes(pool):
    gym = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env as gym_check_env

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium's passive checker warns through warnings
        env = gym.make(ENV_ID, task=SUM, pool=pool)
        assert isinstance(env.unwrapped, gym.Env) and isinstance(env.unwrapped, SandboxEnv)
        assert isinstance(env.observation_space, gym.spaces.Space) and isinstance(env.action_space, gym.spaces.Space)
        obs, _ = env.reset(seed=1)
        assert obs in env.observation_space
        env.action_space.seed(7)
        action = env.action_space.sample()
        assert action in env.action_space and env.action_space.sample() != action
        obs, reward, term, trunc, _ = env.step(action)
        assert obs[0]["content"].endswith("[exit code: 0]") and not term and not trunc
        env.close()
        assert pool.in_use == 0
        own = gym.make(ENV_ID, task=dataclasses.replace(SUM, rootfs="host"))
        gym_check_env(own.unwrapped, skip_render_check=True)
        own.close()
        check_env(gym.make(ENV_ID, task=SUM, pool=pool))


def test_everything_works_without_gymnasium():
    code = r"""
import sys
sys.modules["gymnasium"] = None   # import gymnasium fails
import sandboxlite.rl as rl
from sandboxlite import SandboxPool
assert rl.register() is False and rl.SandboxEnv.__mro__[1] is object
with SandboxPool(size=1, rootfs="host") as pool:
    env = rl.SandboxEnv(pool=pool)
    obs, info = env.reset(seed=0, options={"task": {"id": "t", "query": "q", "metadata": {"answer": "7"}}})
    assert obs in env.observation_space and env.action_space.sample() in env.action_space
    env.step({"role": "assistant", "tool_calls": [{"function": {"name": "execute_bash",
              "arguments": {"command": "echo 7 > /testbed/output/answer.txt"}}}]})
    print(env.step("<tool_call>{\"name\": \"submit\", \"arguments\": {}}</tool_call>")[1:4])
    rl.check_env(env, {"id": "t", "query": "q"})
    print("in use", pool.in_use)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["(1.0, True, False)", "in use 0"]


# -- rewards ---------------------------------------------------------------------------------------------
def test_exact_match_normalises():
    t = Task.from_dict({"id": "t", "query": "q", "metadata": {"answer": "42"}})
    for good in ["42", " 42\n", "42.", "$42$", "\\boxed{42}", "42.0", "4.2e1"]:
        assert exact_match(t, good, {}) == 1.0, good
    for bad in ["41", "", None, "42 apples", "forty-two"]:
        assert exact_match(t, bad, {}) == 0.0, bad
    assert exact_match(Task.from_dict({"id": "t", "query": "q", "metadata": {"answer": ["Paris", "paris, france"]}}),
                       "Paris, France", {}) == 1.0  # fmt: skip
    assert exact_match(Task.from_dict({"id": "t", "query": "q"}), "42", {}) == 0.0
    assert normalize_answer("  Hello   World. ") == "hello world" and normalize_answer("1,234,567") == "1234567"
