"""Rollouts over a real pool: GRPO groups, policies of every kind, token masks, failures, cancellation."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import psutil
import pytest

from sandboxlite import SandboxPool
from sandboxlite.agent.model import AssistantMessage, FakeModel, ToolCall
from sandboxlite.agent.task import Task
from sandboxlite.errors import ModelError
from sandboxlite.rl import Trajectory, Turn, arun_groups, group_advantages, rollout, run_groups

from .conftest import alive, jail_tree


def task(i: int) -> Task:
    return Task.from_dict({"id": f"add{i}", "query": f"What is {i} + {i}?", "max_steps": 6, "rootfs": "host",
                           "metadata": {"answer": str(2 * i)}})  # fmt: skip


def call(name, args=None, call_id="c"):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args or {})}}]}  # fmt: skip


def answer_then_submit(value):
    return FakeModel([{"tool": "execute_bash", "arguments": {"command": f"echo {value} > /testbed/output/answer.txt"}},
                      {"tool": "submit", "arguments": {}}])  # fmt: skip


def turn_of(messages):
    return sum(1 for m in messages if m["role"] == "assistant")


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=4, rootfs="host") as p:
        yield p


# -- advantages --------------------------------------------------------------------------------------
def test_group_advantages():
    adv = group_advantages([1.0, 0.0, 1.0, 0.0])
    std = (4 * 0.25 / 3) ** 0.5  # sample standard deviation, as verl computes it
    assert adv == pytest.approx([0.5 / (std + 1e-6), -0.5 / (std + 1e-6)] * 2)
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert group_advantages([3.0]) == [0.0]
    assert group_advantages([2.0, 0.0], scale=False) == [1.0, -1.0]
    assert group_advantages([1.0, None, 0.0]) == pytest.approx([0.7071, 0.0, -0.7071], abs=1e-3)


# -- groups ------------------------------------------------------------------------------------------
def test_groups_of_scripted_episodes(pool):
    seen = []

    def factory(t, k, seed):
        seen.append((t.id, k, seed))
        return answer_then_submit(int(t.metadata["answer"]) + (k % 2))  # odd samples answer wrong

    groups = run_groups(tasks=[task(1), task(2)], group_size=4, policy_factory=factory, pool=pool, seed=100)
    assert sorted(seen) == sorted([("add1", k, 100 + k) for k in range(4)] + [("add2", k, 104 + k) for k in range(4)])
    assert [g.task.id for g in groups] == ["add1", "add2"]
    for g in groups:
        assert g.rewards == [1.0, 0.0, 1.0, 0.0] and not g.errors
        assert g.advantages == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)
        assert sum(g.advantages) == pytest.approx(0.0, abs=1e-9)
        for t, adv in zip(g.trajectories, g.advantages):
            assert t.advantage == adv and t.ok and t.terminated and t.exit_reason == "submitted"
            assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
            assert [turn.tool_calls for turn in t.turns] == [["execute_bash"], ["submit"]]
            assert t.turns[0].observations == [t.messages[3]] and t.turns[1].reward == t.reward
            assert all(turn.env_s > 0 and turn.policy_s >= 0 and turn.env_s >= turn.tools_s for turn in t.turns)
            assert t.reset_s > 0 and t.duration_s >= t.reset_s
            json.dumps(t.to_dict())  # trainer-ready: plain data
    assert pool.in_use == 0


def test_shared_policies_of_every_kind(pool):
    def plan(messages):
        n = turn_of(messages)
        query = messages[1]["content"]
        value = 2 * int(query.split()[2])
        return [call("execute_bash", {"command": f"echo {value} > /testbed/output/answer.txt"}),
                call("submit")][n]  # fmt: skip

    async def async_policy(messages):
        await asyncio.sleep(0.01)
        return plan(messages)

    def with_tools(messages, tools):
        assert [t["function"]["name"] for t in tools] == ["execute_bash", "str_replace_editor", "submit"]
        return plan(messages)

    class Model:  # the Model protocol: complete(messages, tools) -> AssistantMessage
        name = "m"

        def complete(self, messages, tools):
            c = plan(messages)["tool_calls"][0]["function"]
            return AssistantMessage(content=None, tool_calls=[ToolCall(f"id{turn_of(messages)}", c["name"], c["arguments"])])

    for policy in (plan, async_policy, with_tools, Model()):
        (g,) = run_groups(policy, [task(3)], group_size=3, pool=pool)
        assert g.rewards == [1.0, 1.0, 1.0] and g.advantages == [0.0, 0.0, 0.0], policy


def test_one_failing_episode_does_not_sink_the_group(pool):
    def factory(t, k, seed):
        if k == 1:
            return FakeModel([ModelError("endpoint down")])
        if k == 2:
            raise RuntimeError("no policy for you")
        return answer_then_submit(6 if k == 0 else 7)

    (g,) = run_groups(tasks=[task(3)], group_size=4, policy_factory=factory, pool=pool)
    t0, t1, t2, t3 = g.trajectories
    assert t0.ok and t0.reward == 1.0 and t3.ok and t3.reward == 0.0
    assert t1.error == "ModelError: endpoint down" and "Traceback" in t1.traceback and not t1.ok
    assert t1.messages[:2] and t1.messages[0]["role"] == "system"  # what it had is kept
    assert t2.error == "RuntimeError: no policy for you" and t2.turns == []
    assert g.advantages[1] == g.advantages[2] == 0.0 and g.advantages[0] > 0 > g.advantages[3]
    assert pool.in_use == 0


def test_a_failing_reward_function_is_recorded(pool):
    def reward_fn(t, answer, info):
        if answer.strip() == "7":
            raise ValueError("cannot grade 7")
        return 1.0

    (g,) = run_groups(tasks=[task(3)], group_size=2, pool=pool, env_options={"reward_fn": reward_fn},
                      policy_factory=lambda t, k, s: answer_then_submit(6 + k))  # fmt: skip
    assert g.trajectories[0].ok and g.trajectories[1].error == "ValueError: cannot grade 7"
    assert pool.in_use == 0


def test_limits_reach_the_trajectories(pool):
    def chatty(messages):
        return call("execute_bash", {"command": "echo still working"})

    (g,) = run_groups(chatty, [task(1)], group_size=2, pool=pool, env_options={"max_steps": 3, "step_penalty": 0.5})
    for t in g.trajectories:
        assert t.truncated and not t.terminated and len(t.turns) == 3 and t.reward == pytest.approx(-1.5)
        assert t.exit_reason == "limits exceeded: max_steps=3 reached" and t.task_reward is None
        assert t.reason == "max_steps"  # an ExitReason (a str enum)


def test_concurrency_and_policy_concurrency_are_bounded():
    with SandboxPool(size=4, rootfs="host") as pool:
        lock = threading.Lock()
        now = peak = 0
        peak_in_use = 0

        def slow(messages):
            nonlocal now, peak, peak_in_use
            with lock:
                now += 1
                peak = max(peak, now)
                peak_in_use = max(peak_in_use, pool.in_use)
            time.sleep(0.02)
            with lock:
                now -= 1
            return call("submit") if turn_of(messages) else call("execute_bash", {"command": "echo 0 > /testbed/output/answer.txt"})

        groups = run_groups(slow, [task(0), task(1)], group_size=4, pool=pool, concurrency=3, policy_concurrency=1)
        assert peak == 1 and peak_in_use <= 3
        assert [g.rewards for g in groups] == [[1.0] * 4, [0.0] * 4]
        peak = peak_in_use = 0
        run_groups(slow, [task(0)], group_size=8, pool=pool, concurrency=4)
        assert peak_in_use == 4 and peak > 1


# -- tokens ----------------------------------------------------------------------------------------------
def test_token_ids_get_a_loss_mask(pool):
    def tokenize(messages):  # a stand-in tokenizer: one token per character
        return [ord(c) % 256 for m in messages for c in (m.get("content") or "")]

    def policy(messages):
        n = turn_of(messages)
        action = call("execute_bash", {"command": "echo 6 > /testbed/output/answer.txt"}) if n == 0 else call("submit")
        return {**action, "token_ids": [1000 + n] * (n + 2), "logprobs": [-0.5] * (n + 2)}

    (g,) = run_groups(policy, [task(3)], group_size=1, pool=pool, tokenize_observation=tokenize)
    (t,) = g.trajectories
    assert t.has_tokens and [turn.token_ids for turn in t.turns] == [[1000, 1000], [1001, 1001, 1001]]
    out = t.training_tokens()
    obs1 = tokenize(t.turns[0].observations)
    obs2 = tokenize(t.turns[1].observations)
    assert out["prompt_ids"] == tokenize(t.messages[:2])
    assert out["response_ids"] == [1000, 1000] + obs1 + [1001] * 3 + obs2
    assert out["loss_mask"] == [1, 1] + [0] * len(obs1) + [1, 1, 1] + [0] * len(obs2)
    assert out["logprobs"] == [-0.5] * 2 + [0.0] * len(obs1) + [-0.5] * 3 + [0.0] * len(obs2)


def test_observation_tokens_from_consecutive_prompts():
    """Without a tokenizer: an inference server's prompt_token_ids tell the observation's tokens."""
    t = Trajectory(task_id="t", sample=0, seed=0)
    t.turns = [
        Turn(1, None, [{"role": "tool", "content": "x"}], 0.0, 0, 0, 0, token_ids=[5, 6], prompt_token_ids=[1, 2]),
        Turn(2, None, [{"role": "tool", "content": "y"}], 1.0, 0, 0, 0, token_ids=[9], prompt_token_ids=[1, 2, 5, 6, 7, 8]),
    ]
    out = t.training_tokens()
    assert out == {"prompt_ids": [1, 2], "response_ids": [5, 6, 7, 8, 9], "loss_mask": [1, 1, 0, 0, 1], "logprobs": None}
    t.turns[1].prompt_token_ids = [1, 2, 99]  # not a continuation: the observation's tokens are unknown
    with pytest.raises(ValueError, match="tokenize_observation"):
        t.training_tokens()
    t.turns[1].token_ids = None
    with pytest.raises(ValueError, match="no token_ids"):
        t.training_tokens()


def test_tokens_from_message_attributes(pool):
    def policy(messages):
        msg = AssistantMessage(content='<tool_call>{"name": "submit", "arguments": {}}</tool_call>', tool_calls=[])
        msg.token_ids, msg.logprobs = [7, 8, 9], [-1.0, -2.0, -3.0]  # as attributes
        return msg

    t = rollout(policy, task(1), pool=pool)
    assert t.terminated and t.turns[0].token_ids == [7, 8, 9] and t.turns[0].logprobs == [-1.0, -2.0, -3.0]
    assert t.training_tokens()["loss_mask"] == [1, 1, 1]  # the last observation is left out


# -- single episodes, cancellation -------------------------------------------------------------------------------
def test_rollout_with_its_own_pool():
    t = rollout(answer_then_submit(2), task(1), seed=5)
    assert t.ok and t.reward == 1.0 and t.seed == 5 and t.answer == "2\n"


def test_run_groups_refuses_a_running_loop(pool):
    async def inside():
        with pytest.raises(RuntimeError, match="await arun_groups"):
            run_groups(answer_then_submit(1), [task(1)], 1, pool=pool)

    asyncio.run(inside())


def describe(pids: list[int]) -> list:
    """What the processes ``pids`` are (cmdline, status, parent's cmdline), for a failure message."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append((pid, p.cmdline(), p.status(), p.parent().cmdline() if p.parent() else None))
        except psutil.NoSuchProcess:
            out.append((pid, "gone"))
    return out


def test_cancellation_releases_every_sandbox():
    """Cancelled mid-policy and mid-tool-call: every sandbox goes back to the pool, processes killed."""
    with SandboxPool(size=4, rootfs="host") as pool:
        started = []

        async def policy(messages):
            n = turn_of(messages)
            if n == 0:
                return call("execute_bash", {"command": "echo x > /testbed/output/leftover; sleep 1000 >/dev/null 2>&1 &"})
            if "stuck" in messages[1]["content"]:
                started.append(1)
                return call("execute_bash", {"command": "sleep 0.5; echo late"})  # in flight when cancelled
            await asyncio.sleep(1000)  # hangs: cancelled while waiting for the policy

        tasks = [Task.from_dict({"id": f"t{i}", "query": "stuck" if i % 2 else "hang", "rootfs": "host"})
                 for i in range(4)]  # fmt: skip

        async def main():
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(arun_groups(policy, tasks, 1, pool=pool), timeout=0.3)

        t0 = time.monotonic()
        asyncio.run(main())
        assert started and time.monotonic() - t0 < 5
        assert pool.in_use == 0 and pool.idle == 4
        boxes = [pool.acquire() for _ in range(4)]
        for sb in boxes:  # every sandbox is pristine again: no files, no processes
            assert sb.exec("ls -A /testbed").stdout == b""
            left = jail_tree(sb)
            assert left == [], describe(left)  # (it failed now and then: say what was left)
        for sb in boxes:
            pool.release(sb)


def test_an_own_pool_is_closed_after_the_run():
    def jails():
        return {p.pid for p in psutil.Process().children(recursive=True) if p.name() == "bwrap" and alive(p.pid)}

    before = jails()
    groups = run_groups(lambda m: call("submit"), [task(1)], group_size=2)
    assert [t.ok for t in groups[0].trajectories] == [True, True]
    assert jails() <= before


def test_ctrl_c_in_run_groups_releases_every_sandbox():
    import os
    import signal

    with SandboxPool(size=2, rootfs="host") as pool:
        async def hang(messages):
            if turn_of(messages) == 0:
                return call("execute_bash", {"command": "sleep 1000 >/dev/null 2>&1 &"})
            await asyncio.sleep(1000)

        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                run_groups(hang, [task(1)], group_size=2, pool=pool)
        finally:
            timer.cancel()
        assert pool.in_use == 0 and pool.idle == 2


def test_eval_scorers_as_rewards() -> None:
    """Tasks from an eval domain, rewarded by that domain's scorer (math-verify here)."""
    import os
    from pathlib import Path

    from sandboxlite.agent.scripted import ScriptedModel
    from sandboxlite.rl import domain_reward, domain_tasks, run_groups

    data = Path(os.environ.get("SANDBOXLITE_EVAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "eval-data"))
    tasks = domain_tasks("math", data, limit=2, max_steps=6)
    gold = {t.query: t.metadata["reference"]["answer"] for t in tasks}

    def policy_factory(task, sample, seed):  # even samples answer right, odd ones wrong
        answer = f"\\boxed{{{gold[task.query]}}}" if sample % 2 == 0 else "\\boxed{-1}"
        return ScriptedModel(answer)

    groups = run_groups(policy_factory=policy_factory, tasks=tasks, group_size=2, env_options={"reward_fn": domain_reward()},
                        config=None)  # fmt: skip
    for g in groups:
        assert [t.error for t in g.trajectories] == [None, None]
        assert [t.task_reward for t in g.trajectories] == [1.0, 0.0]
        assert g.advantages[0] > 0 > g.advantages[1]


# -- prepared states (snapshots) ---------------------------------------------------------------------
def test_groups_start_from_a_prepared_state(pool):
    """prepare runs once per task; every episode of the group starts from its snapshot, and what an
    episode writes does not reach the others; the pool's sandboxes go back to the image after."""
    prepared = []

    def prepare(sb, t):
        prepared.append(t.id)
        sb.exec(f"echo {t.metadata['answer']} > /testbed/prepared; echo left > /tmp/mark")

    def cheat_then_dirty():  # answers what the preparation left, then spoils it for anyone after
        return FakeModel([{"tool": "execute_bash", "arguments": {"command": "cat /testbed/prepared > /testbed/output/"
                                                                             "answer.txt; echo spoiled > /testbed/prepared"}},
                          {"tool": "submit", "arguments": {}}])  # fmt: skip

    groups = run_groups(tasks=[task(1), task(2)], group_size=3, policy_factory=lambda t, k, s: cheat_then_dirty(),
                        pool=pool, prepare=prepare)  # fmt: skip
    assert sorted(prepared) == ["add1", "add2"]
    for g in groups:
        assert g.rewards == [1.0, 1.0, 1.0] and not g.errors, [t.error for t in g.trajectories]
        assert g.snapshot is not None and g.prepare_s > 0
    store = pool._all[0].host.snapshot_store()
    assert not any(s.name == g.snapshot for s in store.list() for g in groups)  # removed at the end
    with pool.sandbox() as sb:
        assert sb.base is None and sb.exec("ls /testbed; test -e /tmp/mark || echo clean").stdout_text == "clean\n"


def test_a_failing_preparation_is_recorded_in_its_group(pool):
    def prepare(sb):
        raise RuntimeError("no wheel here")

    seen = []
    (g,) = run_groups(answer_then_submit(2), [task(1)], group_size=2, pool=pool, prepare=prepare,
                      on_trajectory=seen.append)  # fmt: skip
    assert [t.error for t in g.trajectories] == ["prepare failed: RuntimeError: no wheel here"] * 2
    assert seen == g.trajectories  # reported as every other trajectory is
    assert g.snapshot is None and pool.in_use == 0


def test_reset_takes_a_snapshot_option(pool):
    from sandboxlite.rl import SandboxEnv

    with pool.sandbox() as sb:
        sb.exec("echo from-snapshot > /testbed/s")
        snap = sb.snapshot()
    env = SandboxEnv(pool=pool)
    try:
        env.reset(options={"task": task(1), "snapshot": snap})
        assert env.sandbox.exec("cat /testbed/s").stdout_text == "from-snapshot\n"
        env.reset(options={"task": task(1)})
        assert env.sandbox.exec("ls /testbed/s 2>/dev/null; echo $?").stdout_text.strip() != "0"
        with pytest.raises(ValueError, match="snapshot"):
            env.reset(options={"task": task(1), "snapshot": "abc"})
    finally:
        env.close()
    snap.store.remove(snap.name)


def test_a_prepare_that_is_no_function_is_refused_before_any_episode(pool):
    from sandboxlite.errors import ConfigError

    with pytest.raises(ConfigError, match="prepare"):
        run_groups(answer_then_submit(2), [task(1)], group_size=2, pool=pool, prepare="pip install x")
    assert pool.in_use == 0
