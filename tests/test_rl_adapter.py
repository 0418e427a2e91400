"""The rllm adapter (rllm's BaseEnv interface, duck-typed), driven the way rllm's engine drives envs:
``from_dict`` per dataset row, ``reset``/``step`` from a thread pool, ``compute_final_reward``,
``close``.  No GPU, no rllm: a scripted agent plays the model."""

from __future__ import annotations

import inspect
import json
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from sandboxlite import SandboxPool
from sandboxlite.rl.adapters import RllmSandboxEnv, task_from_row


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=3, rootfs="host") as p:
        yield p


@pytest.fixture
def shared_pool(pool):
    RllmSandboxEnv.default_pool = pool
    yield pool
    RllmSandboxEnv.default_pool = None
    assert pool.in_use == 0


class BaseEnv(ABC):
    """rllm's BaseEnv, as its documentation describes it (written here: rllm is not installed)."""

    @property
    def idx(self):
        return getattr(self, "_idx", None)

    @idx.setter
    def idx(self, value):
        self._idx = value

    @abstractmethod
    def reset(self):
        ...

    @abstractmethod
    def step(self, action):
        ...

    def close(self):
        return

    @staticmethod
    @abstractmethod
    def from_dict(info):
        ...

    @staticmethod
    def is_multithread_safe():
        return True


def test_the_interface_is_rllms():
    for name in ("reset", "step", "close", "compute_final_reward"):
        assert callable(getattr(RllmSandboxEnv, name))
    assert isinstance(inspect.getattr_static(RllmSandboxEnv, "from_dict"), (staticmethod, classmethod))
    assert isinstance(inspect.getattr_static(RllmSandboxEnv, "is_multithread_safe"), staticmethod)
    assert RllmSandboxEnv.is_multithread_safe() is True
    assert inspect.signature(RllmSandboxEnv.reset).bind(object())  # reset() with no arguments

    class Env(RllmSandboxEnv, BaseEnv):  # what users with rllm installed write: every abstract method is there
        pass

    env = Env.from_dict({"question": "q"})
    assert isinstance(env, Env) and isinstance(env, BaseEnv)  # rllm's engines check isinstance(env, BaseEnv)
    e = Env({"question": "q"}, config=None)
    e.idx = 7
    assert e.idx == 7 and not inspect.isabstract(Env)
    e.close()
    env.close()


def test_rows_become_tasks(tmp_path):
    t = task_from_row({"question": "What is 6*7?", "ground_truth": "42", "data_source": "toy",
                       "prompt": [{"role": "user", "content": "What is 6*7?"}], "max_steps": 5})  # fmt: skip
    assert t.query == "What is 6*7?" and t.max_steps == 5 and t.id.startswith("task-")
    assert t.metadata == {"answer": "42", "data_source": "toy", "prompt": [{"role": "user", "content": "What is 6*7?"}]}
    assert t.id == task_from_row({"question": "What is 6*7?"}).id  # stable ids
    t = task_from_row({"id": "math/1 #a", "problem": "p", "answer": 3, "metadata": {"level": 2}})
    assert t.id == "math_1__a" and t.query == "p" and t.metadata == {"level": 2, "answer": 3}
    t = task_from_row({"id": "x", "query": "q", "input_files": {"a.txt": "1"}, "network": "none"})
    assert t.input_files == {"a.txt": "1"}
    with pytest.raises(ValueError, match="no query"):
        task_from_row({"answer": "1"})
    env = RllmSandboxEnv.from_dict(json.dumps({"question": "q", "step_penalty": 0.5, "max_wall_s": 9}))
    assert env.env.step_penalty == 0.5 and env.env.max_wall_s == 9 and "step_penalty" not in env.task.metadata
    env.close()


def tool_agent(observation, turn):
    """A scripted stand-in for rllm's ToolAgent: its actions are lists of OpenAI tool calls."""
    answer = observation["answer_to_write"]
    if turn == 0:
        return [{"id": "t0", "type": "function", "function": {"name": "execute_bash", "arguments": json.dumps(
            {"command": f"echo {answer} > /testbed/output/answer.txt"})}}]  # fmt: skip
    return [{"id": "t1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]


def run_like_rllm(row, answer, executor):
    """What rllm's AgentExecutionEngine does with one env (reset, step until done, final reward,
    close), each env call in the executor."""
    env = RllmSandboxEnv.from_dict(row)
    env.idx = row["question"]
    obs, info = executor.submit(env.reset).result()
    assert [m["role"] for m in obs["messages"]] == ["system", "user"] and obs["question"] == obs["messages"][1]["content"]
    assert [t["function"]["name"] for t in obs["tools"]] == ["execute_bash", "str_replace_editor", "submit"]
    steps, done, turn = [], False, 0
    while not done:
        action = SimpleNamespace(action=tool_agent({"answer_to_write": answer}, turn))  # an rllm Action
        obs, reward, done, info = executor.submit(env.step, action).result()
        steps.append((obs, reward, done, info))
        turn += 1
    final = executor.submit(env.compute_final_reward).result()
    executor.submit(env.close).result()
    return steps, final


def test_an_engine_style_run_over_a_shared_pool(shared_pool):
    rows = [{"question": f"What is {i} + {i}?", "ground_truth": str(2 * i)} for i in range(6)]
    # rllm runs its trajectories concurrently and every env call in a thread pool
    with ThreadPoolExecutor(max_workers=6) as runners, ThreadPoolExecutor(max_workers=4) as env_calls:
        futures = [runners.submit(run_like_rllm, row, 2 * i + (i % 2), env_calls) for i, row in enumerate(rows)]
        results = [f.result() for f in futures]
    for i, (steps, final) in enumerate(results):
        (obs0, r0, d0, _), (obs1, r1, d1, info1) = steps
        assert obs0["tool_outputs"] == {"t0": "[exit code: 0]"} and obs0["messages"][0]["role"] == "tool"
        assert (r0, d0, d1) == (0.0, False, True) and info1["terminated"] and not info1["truncated"]
        assert final == r1 == (0.0 if i % 2 else 1.0)
    assert shared_pool.stats.acquires >= 6


def test_text_actions_and_truncation(shared_pool):
    env = RllmSandboxEnv({"question": "q", "ground_truth": "1"}, max_format_errors=2)
    env.reset()
    obs, reward, done, info = env.step('<tool_call>{"name": "execute_bash", "arguments": {"command": "echo hi"}}</tool_call>')
    assert obs["messages"][0]["role"] == "user" and "hi" in obs["messages"][0]["content"] and not done
    assert list(obs["tool_outputs"].values()) == ["hi\n[exit code: 0]"]
    obs, _, done, _ = env.step("no call here")
    assert not done and obs["tool_outputs"] == {} and obs["messages"][0]["role"] == "user"
    obs, _, done, info = env.step("still no call")
    assert done and info["truncated"] and not info["terminated"] and env.compute_final_reward() == 0.0
    env.close()


PAPER_ROW = {  # a row of the paper's RL data (llm-in-sandbox-rl): input_files as JSON text, the image it names
    "id": "math-0007", "domain": "math", "qa_type": "open_ended", "ground_truth": "42",
    "problem_statement": "Multiply the two numbers of numbers.txt; write only the product.",
    "input_files": json.dumps({"numbers.txt": "6\n7\n", "unused.txt": None}), "docker_image": "cdx123/llm-in-sandbox:v0.1",
}  # fmt: skip


def bash(cmd: str, i: int = 0) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": "execute_bash", "arguments": json.dumps({"command": cmd})}}]}


def test_paper_rows_are_accepted(shared_pool):
    t = task_from_row(PAPER_ROW)
    assert t.id == "math-0007" and t.query.startswith("Multiply") and t.input_files == {"numbers.txt": "6\n7\n"}
    assert t.metadata == {"answer": "42", "domain": "math", "qa_type": "open_ended",
                          "docker_image": "cdx123/llm-in-sandbox:v0.1"}  # fmt: skip
    with pytest.raises(ValueError, match="not JSON"):
        task_from_row({**PAPER_ROW, "input_files": "{oops"})


@pytest.mark.parametrize("layout, inputs, answer", [
    ("sandboxlite", "/testbed/input", "/testbed/output/answer.txt"),
    ("paper", "/testbed/documents", "/testbed/answer.txt"),  # the paper's own env's paths
])  # fmt: skip
def test_the_layout_decides_where_inputs_and_the_answer_are(shared_pool, layout, inputs, answer):
    env = RllmSandboxEnv.from_dict({**PAPER_ROW, "layout": layout})
    obs, _ = env.reset()
    text = json.dumps(obs["messages"]) + json.dumps(obs["tools"])
    assert f"{inputs}/numbers.txt" in text and answer in text
    _, _, done, _ = env.step(bash(f"echo $(( $(paste -sd'*' {inputs}/numbers.txt) )) > {answer}"))
    assert not done
    # the engine stops here (its own step limit): the model never submitted, the final reward grades anyway
    assert env.compute_final_reward() == 1.0
    env.close()


def test_final_reward_grades_an_episode_the_engine_ended(shared_pool):
    """rllm's engine ends an episode itself at max steps or a timeout and then asks compute_final_reward:
    the answer written by then is graded (it used to give 0.0: only an episode that submitted was graded)."""
    env = RllmSandboxEnv({"question": "6*7?", "ground_truth": "42"})
    env.reset()
    env.step(bash("echo 42 > /testbed/output/answer.txt"))
    assert env.compute_final_reward() == 1.0
    assert env.compute_final_reward() == 1.0  # graded once, the same value after
    env.close()
    fresh = RllmSandboxEnv({"question": "q", "ground_truth": "1"})
    assert fresh.compute_final_reward() == 0.0  # before any reset: nothing to grade
    fresh.close()


def test_a_real_rllm_base_env_is_the_base_class_when_importable(monkeypatch):
    """With rllm installed the adapter subclasses its BaseEnv (rllm's engine asserts isinstance).  rllm is not on
    PyPI, so the module path is given here by a stand-in holding the BaseEnv above, and the adapter re-imported."""
    import importlib
    import sys
    import types

    import sandboxlite.rl.adapters.rllm as adapter

    names = ["rllm", "rllm.environments", "rllm.environments.base", "rllm.environments.base.base_env"]
    for n in names:
        monkeypatch.setitem(sys.modules, n, types.ModuleType(n))
    sys.modules["rllm.environments.base.base_env"].BaseEnv = BaseEnv
    try:
        fresh = importlib.reload(adapter)
        assert issubclass(fresh.RllmSandboxEnv, BaseEnv) and not inspect.isabstract(fresh.RllmSandboxEnv)
    finally:
        for n in names:
            monkeypatch.delitem(sys.modules, n)
        importlib.reload(adapter)
    assert not issubclass(adapter.RllmSandboxEnv, BaseEnv)
