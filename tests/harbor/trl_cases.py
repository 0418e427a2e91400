"""TRL's Harbor integration (trl.experimental.harbor, TRL 1.16) on sandboxlite, run in the Harbor
runner (Python 3.13 with harbor and trl installed; tests/test_harbor.py runs this file there).

These drive TRL's own HarborSpec / HarborEnv as GRPOTrainer does with ``environment_factory``:
the factory makes an env, ``reset(task_dir=row["task_dir"])`` starts the task's sandbox and returns
the prompt, the harness's tool methods run commands in it, and ``reward_funcs(environments=...)``
runs Harbor's verifier.  The model is left out (the runner has no torch): the tool calls are the
tasks' own solutions, and nothing for the failing case."""

from __future__ import annotations

import gc
import inspect
import os
import pickle
from pathlib import Path

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from trl.experimental.harbor import HarborEnv as TRLHarborEnv  # noqa: E402
from trl.experimental.harbor import HarborSpec  # noqa: E402

from sandboxlite.harbor import SandboxliteEnvironment  # noqa: E402
from sandboxlite.harbor.trl import HarborBashEnv, SandboxliteHarbor, on_sandboxlite  # noqa: E402

TASKS = Path(__file__).resolve().parent / "tasks"
AGENT = "sandboxlite.harbor.trl:HarborBashEnv"


def spec(**kw) -> HarborSpec:
    return HarborSpec(str(TASKS), agent=AGENT, environment_type="sandboxlite", **kw)


def solution(task_dir: str) -> str:
    return (Path(task_dir) / "solution" / "solve.sh").read_text()


def test_the_spec_resolves_the_import_path_and_its_dataset_lists_the_tasks():
    s = spec()
    rows = s.train_dataset
    assert sorted(Path(d).name for d in rows["task_dir"]) == sorted(p.parent.name for p in TASKS.glob("*/task.toml"))
    env = s.environment_factory()
    assert isinstance(env, HarborBashEnv) and isinstance(env, TRLHarborEnv)
    # the trainer lists tool methods on the class: the bash tool, and nothing of the mixin's
    tools = [n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]  # fmt: skip
    assert tools == ["bash"]
    assert pickle.loads(pickle.dumps(s.environment_factory))().__class__ is HarborBashEnv  # AsyncGRPOTrainer pickles it


def test_solved_tasks_score_one_and_an_idle_rollout_scores_zero():
    s = spec()
    rows = s.train_dataset
    solved, idle = [], []
    for task_dir in rows["task_dir"]:
        env = s.environment_factory()
        prompt = env.reset(task_dir=task_dir)
        assert (Path(task_dir) / "instruction.md").read_text().strip() in prompt
        assert isinstance(env._env, SandboxliteEnvironment)
        assert "rc=0" in env.bash("test -d /workdir && test -d /home/user/input")  # what TRL's start makes
        env.bash(solution(task_dir))
        solved.append(env)
        other = s.environment_factory()
        other.reset(task_dir=task_dir)
        idle.append(other)
    assert s.reward_funcs(environments=solved) == [1.0] * len(solved)
    assert s.reward_funcs(environments=idle) == [0.0] * len(idle)


def test_a_reset_closes_the_previous_sandbox_and_the_next_one_starts_clean():
    env = spec().environment_factory()
    env.reset(task_dir=str(TASKS / "hello-file"))
    env.bash(solution(str(TASKS / "hello-file")))
    first = env._env
    sandbox = first._sandbox
    env.reset(task_dir=str(TASKS / "hello-file"))
    assert first._sandbox is None and sandbox.closed
    assert "No such file" in env.bash("cat /app/hello.txt")
    assert env.reward == 0.0


UDP_OUT = ("python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
           "s.connect((\"192.0.2.1\", 53)); print(\"rou\" + \"ted\")'")


def test_each_task_gets_its_own_network_not_the_public_one():
    # TRL passes Harbor no network policy, which Harbor reads as public; the task says no-network
    env = spec().environment_factory()
    env.reset(task_dir=str(TASKS / "hello-file"))
    assert env._env._network(env._env._network_policy) == "none"
    out = env.bash(UDP_OUT)
    assert "routed" not in out and "unreachable" in out, out
    env.reset(task_dir=str(TASKS / "allowlist"))
    assert env._env._network(env._env._network_policy).startswith("allow:pypi.org")


def test_another_backend_name_is_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="environment_type='sandboxlite'"):
        HarborSpec(str(TASKS), agent=AGENT).environment_factory()  # HarborSpec's default: docker


class EchoHarness(TRLHarborEnv):
    """A harness of one's own: its tool methods are what the model may call."""

    def shout(self, text: str) -> str:
        """Upper-case ``text`` in the sandbox."""
        return self._exec(f"printf %s {text!r} | tr a-z A-Z")


def test_a_harness_of_ones_own_on_sandboxlite():
    cls = on_sandboxlite(EchoHarness, public_network="refuse")
    assert issubclass(cls, SandboxliteHarbor) and cls.environment_options == {"public_network": "refuse"}
    env = cls(environment_type="sandboxlite")
    env.reset(task_dir=str(TASKS / "hello-file"))
    assert env.shout("hello") == "HELLO"
    assert env._env._sandbox is not None
    with pytest.raises(TypeError, match="HarborEnv subclass"):
        on_sandboxlite(object)


def test_a_dropped_env_closes_its_sandbox():
    env = spec().environment_factory()
    env.reset(task_dir=str(TASKS / "hello-file"))
    sandbox = env._env._sandbox
    del env
    gc.collect()
    assert sandbox.closed
