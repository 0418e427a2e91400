"""Ray overhead per episode, against the in-process pool, in the same run.

    .venv/bin/python bench/rl_ray.py            # 5 interleaved rounds of 64 episodes each way
    .venv/bin/python bench/rl_ray.py --quick    # 2 rounds of 16

Both sides run the same groups (tasks x samples, 4-turn scripted episodes) on the same number of
warm sandboxes: ``rl.run_groups`` over a ``SandboxPool`` in this process, and ``RayRollouts`` with
one pool actor on this node (a local Ray cluster).  Rounds alternate (A B A B ...).  Reported:
per-episode wall time (round wall / episodes) p50 over rounds, and the difference per episode
(the Ray overhead: pickling, the object store, scheduling, the actor's thread pool).  Ray's and
the pools' start-up are timed apart.  JSON: bench/results/latest-rl-ray.json (schema
``sandboxlite.bench.rl_ray/1``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandboxlite import SandboxPool  # noqa: E402
from sandboxlite.agent.scripted import ScriptedModel  # noqa: E402
from sandboxlite.rl import run_groups  # noqa: E402

SCHEMA = "sandboxlite.bench.rl_ray/1"


def tasks(n: int) -> list[dict]:
    return [{"id": f"t{i}", "query": f"What is {i} + 1?", "metadata": {"answer": str(i + 1)}} for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rootfs", default="lean")
    ap.add_argument("--sandboxes", type=int, default=8)
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "latest-rl-ray.json"))
    args = ap.parse_args(argv)
    rounds, n_tasks, group = (2, 4, 4) if args.quick else (5, 16, 4)
    import ray

    from sandboxlite.rl.cluster import RayRollouts

    t0 = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray_init_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    cluster = RayRollouts(rootfs=args.rootfs, sandboxes_per_actor=args.sandboxes)
    actor_start_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool = SandboxPool(size=args.sandboxes, rootfs=args.rootfs)
    pool_start_s = time.perf_counter() - t0
    policy = ScriptedModel("1", steps=4)
    per_episode: dict[str, list[float]] = {"in_process": [], "ray": []}
    try:
        for r in range(rounds + 1):  # round 0 warms both sides up
            for side in (("in_process", "ray") if r % 2 else ("ray", "in_process")):
                t = time.perf_counter()
                if side == "ray":
                    groups = cluster.run_groups(policy, tasks(n_tasks), group_size=group)
                else:
                    groups = run_groups(policy, tasks(n_tasks), group_size=group, pool=pool)
                wall = time.perf_counter() - t
                bad = [tr.error for g in groups for tr in g.trajectories if tr.error]
                if bad:
                    print(f"{side}: {len(bad)} episodes failed: {bad[0]}", file=sys.stderr)
                    return 1
                if r:
                    per_episode[side].append(wall / (n_tasks * group))
    finally:
        cluster.close()
        pool.close()
        ray.shutdown()
    p50 = {k: statistics.median(v) * 1000 for k, v in per_episode.items()}
    doc = {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "ray": ray.__version__, "loadavg": os.getloadavg()},  # fmt: skip
        "params": {"rounds": rounds, "episodes_per_round": n_tasks * group, "turns": 4, "sandboxes": args.sandboxes,
                   "rootfs": args.rootfs},  # fmt: skip
        "startup_s": {"ray_init": round(ray_init_s, 3), "ray_actor_pool": round(actor_start_s, 3),
                      "in_process_pool": round(pool_start_s, 3)},  # fmt: skip
        "per_episode_ms": {k: {"p50": round(p50[k], 3), "samples": [round(x * 1000, 3) for x in v]}
                           for k, v in per_episode.items()},  # fmt: skip
        "ray_overhead_ms_per_episode": round(p50["ray"] - p50["in_process"], 3),
        "ratio_ray_to_in_process": round(p50["ray"] / p50["in_process"], 3),
    }
    print(f"{'side':<12} {'per episode p50 (ms)':>22}")
    for k in per_episode:
        print(f"{k:<12} {p50[k]:>22.2f}")
    print(f"Ray overhead per episode: {doc['ray_overhead_ms_per_episode']:+.2f} ms "
          f"(ratio {doc['ratio_ray_to_in_process']:.2f}x); start-up: ray.init {ray_init_s:.1f} s, "
          f"actor pool {actor_start_s:.2f} s, in-process pool {pool_start_s:.2f} s")  # fmt: skip
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
