"""A small end-to-end RL-style loop over sandboxes: G rollouts per task, rewards, group-normalised
advantages (GRPO), iteration after iteration.

    .venv/bin/python examples/rl_loop.py --policy scripted    # deterministic, about a second
    .venv/bin/python examples/rl_loop.py                      # the embedded local model (slow, tiny)

Policies:

- ``scripted``: a toy policy with one parameter, the probability of *computing* the answer in
  the sandbox (``python3 -c 'print(EXPR)'`` into the answer file, then submit) rather than
  *guessing* it (writing a round number).  Each episode is a ``FakeModel`` replaying the chosen
  strategy; after every iteration a REINFORCE step with the group-normalised advantages moves the
  parameter, so the mean reward climbs.  (A stand-in for a trainer: real training updates the
  model's weights from the same trajectories and advantages.)
- ``local``: the embedded local model (``resolve_model("local")``: SmolLM2-135M, in-process, far
  too small to solve much; it shows the loop).  Its calls are serialised (``policy_concurrency=1``:
  llama.cpp is not thread-safe); nothing is updated between iterations.

``--json PATH`` writes every iteration's rewards, advantages and trajectories' summaries.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandboxlite import SandboxPool  # noqa: E402
from sandboxlite.agent.model import FakeModel  # noqa: E402
from sandboxlite.agent.task import Task  # noqa: E402
from sandboxlite.rl import run_groups  # noqa: E402

TASKS = [
    Task.from_dict({"id": "mul", "query": "What is 17 * 23? Write only the number.", "max_steps": 6,
                    "metadata": {"answer": "391", "expression": "17 * 23"}}),
    Task.from_dict({"id": "add", "query": "What is 1234 + 5678? Write only the number.", "max_steps": 6,
                    "metadata": {"answer": "6912", "expression": "1234 + 5678"}}),
    Task.from_dict({"id": "pow", "query": "What is 2**10 - 24? Write only the number.", "max_steps": 6,
                    "metadata": {"answer": "1000", "expression": "2**10 - 24"}}),
]  # fmt: skip

ANSWER = "/testbed/output/answer.txt"


class ScriptedPolicy:
    """p(compute) = sigmoid(theta); each episode draws its strategy from its own seed."""

    def __init__(self, theta: float = 0.0, lr: float = 2.0, iteration_seed: int = 0) -> None:
        self.theta, self.lr = theta, lr
        self.iteration_seed = iteration_seed
        self.choices: dict[tuple[str, int], bool] = {}  # (task id, sample) -> computed?

    @property
    def p_compute(self) -> float:
        return 1 / (1 + math.exp(-self.theta))

    def factory(self, task: Task, sample: int, seed: int) -> FakeModel:
        rng = random.Random(f"{self.iteration_seed}/{task.id}/{sample}/{seed}")
        compute = rng.random() < self.p_compute
        self.choices[(task.id, sample)] = compute
        if compute:
            command = f"python3 -c 'print({task.metadata['expression']})' > {ANSWER}"
            first = {"tool": "execute_bash", "arguments": {"command": command}}
        else:
            guess = rng.choice([100, 500, 2000, 5000])
            first = {"tool": "str_replace_editor", "arguments": {"command": "create", "path": ANSWER,
                                                                 "file_text": f"{guess}\n"}}  # fmt: skip
        return FakeModel([first, {"tool": "execute_bash", "arguments": {"command": f"cat {ANSWER}"}},
                          {"tool": "submit", "arguments": {}}])  # fmt: skip

    def update(self, groups: list) -> None:
        """REINFORCE with the group-normalised advantages: d log p(choice) / d theta = 1[compute] - p."""
        p = self.p_compute
        grad = 0.0
        n = 0
        for g in groups:
            for traj, adv in zip(g.trajectories, g.advantages):
                if traj.error is None:
                    grad += adv * ((1.0 if self.choices[(g.task.id, traj.sample)] else 0.0) - p)
                    n += 1
        self.theta += self.lr * grad / max(1, n)


def fmt(values: list[float], signed: bool = False) -> str:
    return "[" + ", ".join(f"{v:+.2f}" if signed else f"{v:.2f}" for v in values) + "]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", choices=["local", "scripted"], default="local")
    ap.add_argument("--group-size", "-G", type=int, default=None, help="rollouts per task (4 scripted, 2 local)")
    ap.add_argument("--iterations", type=int, default=None, help="(5 scripted, 1 local)")
    ap.add_argument("--tasks", type=int, default=len(TASKS), help=f"how many of the {len(TASKS)} tasks")
    ap.add_argument("--max-steps", type=int, default=None, help="turns per episode (6 scripted, 4 local)")
    ap.add_argument("--rootfs", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    local = args.policy == "local"
    group = args.group_size or (2 if local else 4)
    iterations = args.iterations or (1 if local else 5)
    max_steps = args.max_steps or (4 if local else 6)
    tasks = TASKS[: max(1, args.tasks)]

    scripted = ScriptedPolicy(iteration_seed=args.seed)
    run_kwargs: dict = {"env_options": {"max_steps": max_steps, "step_penalty": 0.01}}
    if local:
        from sandboxlite.agent.profiles import resolve_model

        print("loading the embedded local model ...", flush=True)
        model = resolve_model("local", max_tokens=256)
        run_kwargs.update(policy=model, policy_concurrency=1)

    history = []
    with SandboxPool(size=min(8, group * len(tasks)), rootfs=args.rootfs) as pool:
        for it in range(1, iterations + 1):
            t0 = time.monotonic()
            if not local:
                scripted.iteration_seed = args.seed * 1000 + it
                run_kwargs["policy_factory"] = scripted.factory
            groups = run_groups(tasks=tasks, group_size=group, pool=pool, seed=args.seed * 1000 + it * 100,
                                **run_kwargs)  # fmt: skip
            took = time.monotonic() - t0
            head = f"iteration {it}" + ("" if local else f"  p(compute)={scripted.p_compute:.3f}")
            print(f"{head}  ({took:.2f} s, {sum(len(g.trajectories) for g in groups)} episodes)")
            record = {"iteration": it, "seconds": round(took, 3), "groups": []}
            if not local:
                record["p_compute"] = scripted.p_compute
            for g in groups:
                turns = [len(t.turns) for t in g.trajectories]
                print(f"  {g.task.id:<5} rewards {fmt(g.rewards)}  advantages {fmt(g.advantages, True)}  turns {turns}"
                      + (f"  errors {[t.error for t in g.errors]}" if g.errors else ""))  # fmt: skip
                record["groups"].append({
                    "task": g.task.id, "rewards": g.rewards, "advantages": g.advantages,
                    "trajectories": [{"sample": t.sample, "reward": t.reward, "task_reward": t.task_reward,
                                      "exit_reason": t.exit_reason, "answer": t.answer, "turns": len(t.turns),
                                      "error": t.error} for t in g.trajectories],
                })  # fmt: skip
            mean = sum(sum(g.rewards) for g in groups) / sum(len(g.rewards) for g in groups)
            print(f"  mean reward {mean:.3f}")
            record["mean_reward"] = mean
            history.append(record)
            if not local:
                scripted.update(groups)
    if args.json:
        Path(args.json).write_text(json.dumps({"policy": args.policy, "group_size": group, "iterations": history},
                                              indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
