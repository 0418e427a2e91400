#!/usr/bin/env python3
"""Harbor jobs on sandboxlite against Harbor's own docker backend, in one run:
``sudo bench/harbor.py [--trials N] [--concurrency C] [--rounds R] [--json PATH]``.

Both backends run ``harbor run`` (PyPI harbor 0.26) in the Harbor runner (tools/harbor/run: Debian
13's Python over this Debian 12 host) with Harbor's oracle agent, over two of the test tasks
(tests/harbor/tasks: hello-file and multistage, adapted so that Harbor's docker backend can run
them on this machine: ``_for_both`` says how),
repeated to N trials (``-k``), C at once (``-n``).  Per backend and round: the job's wall time
(``harbor run`` from start to exit), trials per minute, each trial's environment setup (Harbor's
own ``environment_setup`` span in its result.json: build or cache, start, directories) as p50,
p90 and p99, the trials lost to infrastructure errors (an ``exception_info``), and the rewards.

Each backend first runs a warm-up job of one trial per task, which builds the tasks' images into
its own cache (its wall time is reported as the cold start); the measured rounds then alternate
between the backends (docker, sandboxlite, sandboxlite, docker, ...) so machine noise hits both.

Needs root, a Docker daemon (bench/setup_docker.sh starts one) and the image ``trixie`` in it (this
script imports it from the ``trixie`` rootfs when missing).  JSON: bench/results/harbor-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RUN = ROOT / "tools" / "harbor" / "run"
TASKS = ROOT / "tests" / "harbor" / "tasks"
OFFLINE_TASKS = ("hello-file", "multistage")
BACKENDS = {"docker": ["-e", "docker"], "sandboxlite": ["-e", "sandboxlite.harbor:SandboxliteEnvironment"]}

sys.path.insert(0, str(ROOT))
from sandboxlite.bench.core import machine_info  # noqa: E402
from sandboxlite.bench.report import write_json  # noqa: E402


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def ensure_docker_image() -> None:
    if subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True).returncode != 0:
        sys.exit("bench/harbor.py: no Docker daemon answers: sudo bench/setup_docker.sh")
    if subprocess.run(["docker", "image", "inspect", "trixie:latest"], capture_output=True).returncode == 0:
        return
    from sandboxlite.images import image_root

    tree = image_root("trixie")
    tar = subprocess.Popen(["tar", "-C", str(tree), "--numeric-owner", "--owner=0", "--group=0", "-cf", "-", "."],
                           stdout=subprocess.PIPE)  # fmt: skip
    subprocess.run(["docker", "import", "-", "trixie:latest"], stdin=tar.stdout, check=True, capture_output=True)
    tar.wait()


GREET = '#!/bin/sh\necho "greetings from the build stage"\n'
MULTISTAGE_COPY_ONLY = """FROM trixie AS build
COPY greet /src/greet
COPY build-only.txt /src/scratch.txt
FROM trixie
COPY --from=build /src/greet /usr/local/bin/greet
WORKDIR /app
"""


def _for_both(task: Path) -> None:
    """The task as both backends can run it here: Harbor's docker backend supports neither
    network_mode "no-network" nor an allowlist without its egress sidecar (an image from Docker
    Hub), so both get the public network (sandboxlite: the host's); and this machine's dockerd
    has no default bridge (bench/setup_docker.sh), which BuildKit's RUN steps need, so the
    multi-stage task's build stage copies its tool instead of writing it in a RUN."""
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('network_mode = "no-network"', 'network_mode = "public"'))
    if task.name == "multistage":
        env = task / "environment"
        (env / "Dockerfile").write_text(MULTISTAGE_COPY_ONLY)
        (env / "greet").write_text(GREET)
        (env / "greet").chmod(0o755)
        (env / "build-only.txt").write_text("build-only\n")


def job(backend: str, tasks: Path, jobs: Path, name: str, attempts: int, concurrency: int,
        agent: str = "oracle") -> dict:
    argv = [str(RUN), "harbor", "run", "-p", str(tasks), "-a", agent, *BACKENDS[backend], "-k", str(attempts),
            "-n", str(concurrency), "-o", str(jobs), "--job-name", name]  # fmt: skip
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    wall = time.perf_counter() - t0
    trials = []
    for d in sorted((jobs / name).iterdir()) if (jobs / name).is_dir() else []:
        f = d / "result.json"
        if not f.is_file():
            continue
        r = json.loads(f.read_text())
        setup = r.get("environment_setup") or {}
        span = _ts(setup["finished_at"]) - _ts(setup["started_at"]) if setup.get("finished_at") else None
        trials.append({"task": r.get("task_name"), "setup_s": span,
                       "reward": ((r.get("verifier_result") or {}).get("rewards") or {}).get("reward"),
                       "error": (r.get("exception_info") or {}).get("exception_type")})  # fmt: skip
    setups = [t["setup_s"] for t in trials if t["setup_s"] is not None]
    lost = [t for t in trials if t["error"]]
    return {
        "backend": backend, "exit_code": p.returncode, "wall_s": wall, "trials": len(trials),
        "trials_per_min": 60 * len(trials) / wall if wall else 0.0,
        "setup_p50_s": _pct(setups, 0.5), "setup_p90_s": _pct(setups, 0.9), "setup_p99_s": _pct(setups, 0.99),
        "lost": len(lost), "errors": sorted({t["error"] for t in lost}),
        "reward_1": sum(1 for t in trials if t["reward"] == 1.0),
        "rewards": {t["task"]: t["reward"] for t in trials},
        "stderr_tail": p.stderr[-1500:] if p.returncode else "",
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=64, help="trials per job (rounded up to a multiple of the tasks)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="measured jobs per backend")
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/harbor.py: needs root (the Harbor runner and Docker)")
    ensure_docker_image()
    work = Path(tempfile.mkdtemp(prefix="sandboxlite-bench-harbor-"))
    try:
        tasks = work / "tasks"
        for name in OFFLINE_TASKS:
            shutil.copytree(TASKS / name, tasks / name)
            _for_both(tasks / name)
        attempts = -(-opts.trials // len(OFFLINE_TASKS))
        doc: dict = {"machine": machine_info(), "args": {**vars(opts), "json": str(opts.json)},
                     "tasks": list(OFFLINE_TASKS), "attempts": attempts, "warmup": {}, "rounds": []}  # fmt: skip
        for backend in BACKENDS:  # the tasks' images built into each backend's cache
            doc["warmup"][backend] = w = job(backend, tasks, work / "jobs", f"warm-{backend}", 1, opts.concurrency)
            print(f"warm-up {backend:11} {w['wall_s']:6.1f} s  ({w['trials']} trials, lost {w['lost']})")
        order = list(BACKENDS)
        for i in range(opts.rounds):
            for backend in order if i % 2 == 0 else order[::-1]:
                r = job(backend, tasks, work / "jobs", f"{backend}-{i}", attempts, opts.concurrency)
                doc["rounds"].append(r)
                print(f"round {i} {backend:11} {r['trials']} trials in {r['wall_s']:6.1f} s = {r['trials_per_min']:7.1f}/min"
                      f"  setup p50 {r['setup_p50_s']:.3f} p99 {r['setup_p99_s']:.3f} s  lost {r['lost']}"
                      f"  reward 1.0: {r['reward_1']}")  # fmt: skip
        summary = {}
        for backend in BACKENDS:
            rs = [r for r in doc["rounds"] if r["backend"] == backend]
            summary[backend] = {
                "trials_per_min": statistics.median(r["trials_per_min"] for r in rs),
                "setup_p50_s": statistics.median(r["setup_p50_s"] for r in rs),
                "setup_p99_s": max(r["setup_p99_s"] for r in rs),
                "lost": sum(r["lost"] for r in rs), "trials": sum(r["trials"] for r in rs),
            }  # fmt: skip
        ratio = summary["sandboxlite"]["trials_per_min"] / summary["docker"]["trials_per_min"]
        doc["summary"] = {**summary, "trials_per_min_ratio": ratio}
        print(f"\n{'backend':12} {'trials/min':>10} {'setup p50':>10} {'setup p99':>10} {'lost':>8}")
        for backend, s in summary.items():
            print(f"{backend:12} {s['trials_per_min']:10.1f} {s['setup_p50_s']:10.3f} {s['setup_p99_s']:10.3f} "
                  f"{s['lost']:>3}/{s['trials']:<4}")  # fmt: skip
        print(f"sandboxlite / docker trials per minute: x{ratio:.1f}")
        path = opts.json or HERE / "results" / f"harbor-{time.strftime('%Y%m%d-%H%M%S')}.json"
        write_json(doc, path)
        print(f"JSON: {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
