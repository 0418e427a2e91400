"""How runs end, as values: every ExitReason produced by a real scripted run (real sandboxes),
Agent.start()/step() one turn at a time, and the reason in RunResult, trajectory.json and env info."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sandboxlite import Sandbox, SandboxPool
from sandboxlite.agent.loop import NO_TOOL_CALL, Agent, AgentLimits
from sandboxlite.agent.model import FakeModel
from sandboxlite.agent.outcome import ExitReason, Outcome
from sandboxlite.agent.run import run_task
from sandboxlite.agent.task import Task
from sandboxlite.agent.tools import Tools
from sandboxlite.errors import ContextOverflow, ModelError, SandboxError
from sandboxlite.rl import SandboxEnv

E = ExitReason
SUM = Task.from_dict({"id": "sum", "query": "Add the two numbers in /testbed/input/n.txt.",
                      "input_files": {"n.txt": "17\n25\n"}, "max_steps": 8, "metadata": {"answer": "42"}})  # fmt: skip
TOKENS = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}


def bash(cmd, **extra):
    return {"tool": "execute_bash", "arguments": {"command": cmd}, **extra}


def submit():
    return {"tool": "submit", "arguments": {}}


def traj(path) -> dict:
    return json.loads((Path(path) / "trajectory.json").read_text())


# id, script, run_task keywords, reason, exit_reason (the recorded text), steps
CASES = [
    ("submitted", [bash("echo 42 > /testbed/output/answer.txt"), submit()], {}, E.SUBMITTED, "submitted", 2),
    ("answered", ["The sum is 42."], {"mode": "vanilla"}, E.ANSWERED, "answered", 1),
    ("max_steps", [bash("true")] * 3, {"limits": AgentLimits(max_steps=2)}, E.MAX_STEPS,
     "limits exceeded: max_steps=2 reached", 2),
    ("token_budget", [bash("true", usage=TOKENS)] * 3, {"limits": AgentLimits(max_total_tokens=100)},
     E.TOKEN_BUDGET, "limits exceeded: token budget 100 used up", 2),
    ("wall_time", [bash("sleep 0.3")] * 2, {"limits": AgentLimits(max_wall_s=0.2)}, E.WALL_TIME,
     "limits exceeded: wall time 0s used up", 1),
    ("format_errors", ["thinking..."] * 3, {"limits": AgentLimits(max_format_errors=3)}, E.FORMAT_ERRORS,
     f"limits exceeded: 3 replies in a row without a usable tool call; last: {NO_TOOL_CALL}", 3),
    ("stuck", [bash("true")] * 5, {}, E.STUCK, "limits exceeded: the same tool calls and results 4 times in a row", 4),
    ("context_overflow", [ContextOverflow("maximum context length exceeded")], {}, E.CONTEXT_OVERFLOW,
     "limits exceeded: the conversation no longer fits the model's context (maximum context length exceeded)", 0),
    ("model_error", [bash("true"), ModelError("endpoint down", hint="retry later")], {}, E.MODEL_ERROR,
     "model error: endpoint down", 1),
    ("vanilla_model_error", [ModelError("endpoint down")], {"mode": "vanilla"}, E.MODEL_ERROR,
     "model error: endpoint down", 1),
]  # fmt: skip
ELSEWHERE = {E.SANDBOX_ERROR, E.INTERRUPTED, E.ABANDONED}  # tested below: they need a crash, Ctrl-C, an env


def test_every_exit_reason_has_a_case():
    assert {c[3] for c in CASES} | ELSEWHERE == set(ExitReason)


@pytest.mark.parametrize(("script", "kwargs", "reason", "text", "steps"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_a_scripted_run_ends_with_the_reason(tmp_path, script, kwargs, reason, text, steps):
    r = run_task(SUM, FakeModel(script), output_dir=tmp_path, **kwargs)
    assert r.reason is reason and r.exit_reason == text and r.steps == steps
    assert r.submitted == r.ok == (reason in (E.SUBMITTED, E.ANSWERED))
    t = traj(tmp_path)
    assert t["reason"] == reason.value and t["exit_reason"] == text


def test_a_sandbox_failure_is_recorded_then_raised(tmp_path):
    with Sandbox() as sb:

        def kill_then_call(messages, tools):
            os.kill(sb.executor_pid, 9)
            time.sleep(0.05)
            return bash("echo after")

        with pytest.raises(SandboxError):
            run_task(SUM, FakeModel([bash("echo warm"), kill_then_call]), output_dir=tmp_path, sandbox=sb)
    t = traj(tmp_path)
    assert t["reason"] == "sandbox_error" and t["exit_reason"].startswith("sandbox error: ")


def test_ctrl_c_is_recorded_as_interrupted(tmp_path):
    def interrupt(messages, tools):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_task(SUM, FakeModel([bash("true"), interrupt]), output_dir=tmp_path)
    t = traj(tmp_path)
    assert t["reason"] == "interrupted" and t["exit_reason"] == "interrupted"


# -- Agent.start() / step() -------------------------------------------------------------------------
def test_start_and_step_drive_the_loop_one_turn_at_a_time(sb):
    tools = Tools(sb)
    try:
        model = FakeModel([bash("echo 42"), "no call here", submit()] + [bash("true")] * 3)
        agent = Agent(model, tools, AgentLimits(max_steps=3), remind_submit=False)  # (no answer file here)
        with pytest.raises(RuntimeError, match="start"):
            agent.step()
        assert agent.start("sys", "inst") == [{"role": "system", "content": "sys"}, {"role": "user", "content": "inst"}]
        s = agent.step()
        assert not s.done and s.outcome is None and s.reason is None and s.detail is None
        assert s.step is agent.steps[-1] and s.step.index == 1 and s.step.observations[0]["data"]["exit_code"] == 0
        s = agent.step()  # no tool call: back to the model, the run goes on
        assert not s.done and s.step.index == 2 and s.step.error == NO_TOOL_CALL
        s = agent.step()  # submit on the last allowed turn: submitted, not a limit
        assert s.done and s.outcome == Outcome(E.SUBMITTED, "the model called submit") == agent.outcome
        assert s.step.index == 3 and s.step.observations[0]["tool"] == "submit"
        with pytest.raises(RuntimeError):
            agent.step()
        # start() begins afresh; the turn that reaches max_steps reports it (no extra call needed)
        agent.start("sys", "inst")
        assert agent.steps == [] and agent.outcome is None and len(agent.messages) == 2
        outs = [agent.step() for _ in range(3)]
        assert [o.done for o in outs] == [False, False, True] and [o.step.index for o in outs] == [1, 2, 3]
        assert outs[2].reason is E.MAX_STEPS and outs[2].detail == "max_steps=3 reached"
        assert outs[2].outcome.exit_reason == "limits exceeded: max_steps=3 reached"
        assert len(model.calls) == 6
        # a limit already reached before the turn (wall time ran out between calls): no turn is taken
        idle = FakeModel([bash("true")])
        agent = Agent(idle, tools, AgentLimits(max_wall_s=0.05))
        agent.start("sys", "inst")
        time.sleep(0.1)
        s = agent.step()
        assert s.done and s.reason is E.WALL_TIME and s.step is None and idle.calls == []
        # run() is start() + step() until done
        assert Agent(FakeModel([submit()]), tools, remind_submit=False).run("sys", "inst") == \
            Outcome(E.SUBMITTED, "the model called submit")  # fmt: skip
        reminded = Agent(FakeModel([submit(), submit()]), tools)  # without an answer file: sent back once
        assert reminded.run("sys", "inst") == Outcome(E.SUBMITTED, "the model called submit")
        assert len(reminded.steps) == 2 and reminded.steps[0].observations[0]["data"]["reminder"] == "no_answer_file"
        out = Agent(FakeModel([]), tools).run("sys", "inst")
        assert out.reason is E.MODEL_ERROR and out.detail == "fake model script exhausted"
        assert isinstance(out.error, ModelError)
    finally:
        tools.close()


# -- the RL environment --------------------------------------------------------------------------------
def test_the_env_reports_the_reason_and_abandoned_episodes():
    seen = []

    def reward_fn(task, answer, info):
        seen.append((info["reason"], info["exit_reason"]))
        return 1.0

    with SandboxPool(size=1, rootfs="host") as pool:
        env = SandboxEnv(pool=pool, reward_fn=reward_fn, grade_truncated=True)
        try:
            env.reset(options={"task": SUM, "max_steps": 1})
            *_, trunc, info = env.step(bash("true"))
            assert trunc and info["reason"] is E.MAX_STEPS
            assert info["exit_reason"] == "limits exceeded: max_steps=1 reached"
            assert env.outcome == Outcome(E.MAX_STEPS, "max_steps=1 reached")
            assert json.loads(json.dumps(info["reason"])) == "max_steps"
            env.reset(options={"task": SUM})
            assert env.outcome is None
            _, _, term, _, info = env.step(call_submit())
            assert term and info["reason"] is E.SUBMITTED and info["exit_reason"] == "submitted"
            assert seen == [(E.MAX_STEPS, "limits exceeded: max_steps=1 reached"), (E.SUBMITTED, "submitted")]
            env.reset(options={"task": SUM})
            env.step(bash("true"))
            env.close()  # mid-episode
            assert env.outcome.reason is E.ABANDONED and pool.in_use == 0
        finally:
            env.close()


def call_submit():
    call = {"id": "s1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}
