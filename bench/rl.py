"""The RL surface: what the environment costs around the policy.

    .venv/bin/python bench/rl.py            # full: 256 concurrent episodes (about half a minute)
    .venv/bin/python bench/rl.py --quick    # a few seconds (the test suite runs this)

- **acquire**: ``SandboxPool.acquire()`` with idle sandboxes (the release is not timed).
- **release_reset**: ``SandboxPool.release()`` of a used sandbox (a shell, a background process and
  files in it): the in-place reset that makes it pristine.
- **pooled_reset**: ``SandboxEnv.reset()`` in the middle of an episode whose sandbox has a shell, a
  background process and files: release (in-place reset), acquire, the task's input file written,
  /testbed/input and /testbed/output made, the prompts rendered.
- **reset_after_done**: ``SandboxEnv.reset()`` after an episode that ended (the step that ended it
  already released the sandbox, paying for the in-place reset): the common case in training.
- **step_overhead**: ``SandboxEnv.step()`` with a scripted policy (the actions are prepared in
  advance, so the policy costs nothing): action parsing, the tool call in the sandbox
  (``execute_bash`` of a shell builtin, or ``str_replace_editor`` create/view), observation
  formatting, limits, reward.  All steps count; the first step of an episode also starts the
  persistent shell (reported apart as **first_step**).
- **concurrent**: N episodes (32 tasks x 8 samples: 256 in the full run) through ``run_groups`` with
  N sandboxes and N episodes in flight, each 3 turns (bash arithmetic into the answer file, view it,
  submit); the pool's start-up is timed apart.  ``turn_env`` is the per-turn env time seen by
  the rollout (thread hops included).

Prints a table and writes JSON (schema ``sandboxlite.bench.rl/1``) to bench/results/latest-rl.json
(``--json PATH`` to write elsewhere).  Exit code 1 when an episode failed; a missed target is
printed and recorded, not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandboxlite import SandboxPool  # noqa: E402
from sandboxlite.agent.task import Task  # noqa: E402
from sandboxlite.rl import SandboxEnv, run_groups  # noqa: E402

SCHEMA = "sandboxlite.bench.rl/1"
TARGETS_MS = {"pooled_reset": 2.0, "acquire": 1.0, "step_overhead": 2.0}  # p50, from issue #9
TARGET_CONCURRENT = 256


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary(name: str, seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {"metric": name, "n": len(ms), "p50_ms": round(pct(ms, 50), 4), "p90_ms": round(pct(ms, 90), 4),
            "p99_ms": round(pct(ms, 99), 4), "min_ms": round(min(ms), 4), "max_ms": round(max(ms), 4)}  # fmt: skip


def call(name: str, args: dict, i: int) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip


TASK = Task.from_dict({"id": "bench", "query": "Add the numbers in /testbed/input/n.txt.",
                       "input_files": {"n.txt": "17\n25\n"}, "metadata": {"answer": "42"}})  # fmt: skip
DIRTY = call("execute_bash", {"command": "echo x > /testbed/f; mkdir -p /tmp/d; sleep 100 >/dev/null 2>&1 &"}, 0)


def bench_acquire(pool: SandboxPool, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = pool.acquire()
        out.append(time.perf_counter() - t0)
        pool.release(sb)
    return out


def bench_release(pool: SandboxPool, n: int) -> list[float]:
    out = []
    for _ in range(n):
        sb = pool.acquire()
        sh = sb.shell()
        sh.run("echo x > /testbed/f; sleep 100 >/dev/null 2>&1 &")
        t0 = time.perf_counter()
        pool.release(sb)
        out.append(time.perf_counter() - t0)
    return out


def bench_reset(pool: SandboxPool, n: int, *, after_done: bool = False) -> list[float]:
    """Time env.reset() mid-episode, or (after_done) after an episode whose final step
    (submit) already gave the sandbox back."""
    env = SandboxEnv(pool=pool)
    out = []
    try:
        env.reset(options={"task": TASK})
        for _ in range(n):
            env.step(DIRTY)
            if after_done:
                env.step(call("submit", {}, 1))
            t0 = time.perf_counter()
            env.reset(options={"task": TASK})
            out.append(time.perf_counter() - t0)
    finally:
        env.close()
    return out


def scripted_actions(k: int) -> list[dict]:
    actions = []
    for i in range(k):
        if i % 4 == 1:
            actions.append(call("str_replace_editor", {"command": "create", "path": f"/testbed/f{i}.txt",
                                                       "file_text": f"line {i}\n"}, i))  # fmt: skip
        elif i % 4 == 3:
            actions.append(call("str_replace_editor", {"command": "view", "path": f"/testbed/f{i - 2}.txt"}, i))
        else:
            actions.append(call("execute_bash", {"command": f"echo step {i}"}, i))
    return actions


def bench_steps(pool: SandboxPool, episodes: int, steps: int) -> tuple[list[float], list[float]]:
    env = SandboxEnv(pool=pool, max_steps=steps + 1)
    actions = scripted_actions(steps)
    all_steps, first = [], []
    try:
        for _ in range(episodes):
            env.reset(options={"task": TASK})
            for i, a in enumerate(actions):
                t0 = time.perf_counter()
                _, _, term, trunc, info = env.step(a)
                dt = time.perf_counter() - t0
                assert not (term or trunc) and info["format_error"] is None, info
                all_steps.append(dt)
                if i == 0:
                    first.append(dt)
    finally:
        env.close()
    return all_steps, first


def arithmetic_tasks(n: int) -> list[Task]:
    return [Task.from_dict({"id": f"sum{i}", "query": f"What is {i} + {2 * i + 1}?", "max_steps": 6,
                            "metadata": {"answer": str(3 * i + 1), "a": i, "b": 2 * i + 1}})
            for i in range(n)]  # fmt: skip


def scripted_policy(messages: list[dict]) -> dict:
    """Turn 1: bash arithmetic into the answer file; turn 2: view it; turn 3: submit."""
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if turn == 0:
        nums = [int(x) for x in messages[1]["content"].split("?")[0].split() if x.isdigit()]
        return call("execute_bash", {"command": f"echo $(({nums[0]} + {nums[1]})) > /testbed/output/answer.txt"}, 0)
    if turn == 1:
        return call("str_replace_editor", {"command": "view", "path": "/testbed/output/answer.txt"}, 1)
    return call("submit", {}, 2)


def bench_concurrent(n_tasks: int, group: int, rootfs: str) -> dict:
    n = n_tasks * group
    t0 = time.perf_counter()
    pool = SandboxPool(size=n, rootfs=rootfs)
    pool_s = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        groups = run_groups(scripted_policy, arithmetic_tasks(n_tasks), group, pool=pool, concurrency=n)
        total = time.perf_counter() - t1
        leaked = pool.in_use
    finally:
        pool.close()
    trajs = [t for g in groups for t in g.trajectories]
    turn_env = [turn.env_s for t in trajs for turn in t.turns]
    errors = [t.error for t in trajs if t.error]
    return {
        "episodes": n, "tasks": n_tasks, "group_size": group, "concurrency": n,
        "pool_start_s": round(pool_s, 3), "total_s": round(total, 3),
        "episodes_per_s": round(n / total, 1), "mean_episode_s": round(sum(t.duration_s for t in trajs) / n, 4),
        "submitted": sum(1 for t in trajs if t.terminated), "mean_reward": round(sum(t.reward for t in trajs) / n, 4),
        "turn_env": summary("turn_env", turn_env), "errors": errors[:5], "error_count": len(errors),
        "sandboxes_in_use_after": leaked,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small numbers, a few seconds")
    ap.add_argument("--rootfs", default="host")
    ap.add_argument("--json", default=None, help="default bench/results/latest-rl.json")
    args = ap.parse_args(argv)
    q = args.quick
    n_acq, n_reset, episodes, steps = (100, 30, 5, 10) if q else (2000, 300, 40, 20)
    n_tasks, group = (2, 4) if q else (32, 8)

    with SandboxPool(size=4, rootfs=args.rootfs) as pool:
        bench_reset(pool, 5)  # warm-up: the first shell, template and file requests
        rows = [
            summary("acquire", bench_acquire(pool, n_acq)),
            summary("release_reset", bench_release(pool, n_reset)),
            summary("pooled_reset", bench_reset(pool, n_reset)),
            summary("reset_after_done", bench_reset(pool, n_reset, after_done=True)),
        ]
        all_steps, first = bench_steps(pool, episodes, steps)
        rows += [summary("step_overhead", all_steps), summary("first_step", first)]
    conc = bench_concurrent(n_tasks, group, args.rootfs)

    targets = []
    for r in rows:
        if r["metric"] in TARGETS_MS:
            t = TARGETS_MS[r["metric"]]
            targets.append({"metric": r["metric"], "stat": "p50", "target_ms": t, "value_ms": r["p50_ms"],
                            "met": r["p50_ms"] <= t})  # fmt: skip
    targets.append({"metric": "concurrent_episodes", "target": TARGET_CONCURRENT, "value": conc["episodes"],
                    "met": conc["episodes"] >= TARGET_CONCURRENT and conc["error_count"] == 0})  # fmt: skip

    print(f"SandboxEnv / SandboxPool, rootfs={args.rootfs!r}{' (quick)' if q else ''}")
    print(f"{'metric':<16} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} {'min ms':>9} {'max ms':>9} {'N':>6}  target")
    for r in rows + [conc["turn_env"]]:
        t = TARGETS_MS.get(r["metric"])
        verdict = "" if t is None else f"p50 <= {t:g} ms: {'met' if r['p50_ms'] <= t else 'MISSED'}"
        print(f"{r['metric']:<16} {r['p50_ms']:>9.3f} {r['p90_ms']:>9.3f} {r['p99_ms']:>9.3f} {r['min_ms']:>9.3f} "
              f"{r['max_ms']:>9.3f} {r['n']:>6}  {verdict}")  # fmt: skip
    print(f"\nconcurrent episodes: {conc['episodes']} ({conc['tasks']} tasks x {conc['group_size']}), "
          f"concurrency {conc['concurrency']}: {conc['total_s']} s total, {conc['episodes_per_s']} episodes/s, "
          f"mean episode {conc['mean_episode_s'] * 1000:.1f} ms; pool start {conc['pool_start_s']} s; "
          f"submitted {conc['submitted']}, mean reward {conc['mean_reward']}, errors {conc['error_count']}, "
          f"sandboxes still in use {conc['sandboxes_in_use_after']}")  # fmt: skip
    if conc["episodes"] < TARGET_CONCURRENT:
        print(f"(the full run does {TARGET_CONCURRENT}: the issue's target)")

    out = Path(args.json) if args.json else ROOT / "bench" / "results" / "latest-rl.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "schema": SCHEMA,
        "machine": {"cpu_count": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "euid": os.geteuid()},
        "params": {"quick": q, "rootfs": args.rootfs, "acquires": n_acq, "resets": n_reset,
                   "step_episodes": episodes, "steps_per_episode": steps},
        "results": rows,
        "concurrent": conc,
        "targets": targets,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }, indent=2) + "\n")  # fmt: skip
    print(f"\nwrote {out}")
    return 1 if conc["error_count"] or conc["sandboxes_in_use_after"] else 0


if __name__ == "__main__":
    sys.exit(main())
