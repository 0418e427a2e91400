"""What the first run shows: N runs of each demo task with a model, the share that answered and
the share that were right.

    .venv/bin/python bench/demo_runs.py                       # the embedded model, 10 runs of demo_001..004
    .venv/bin/python bench/demo_runs.py --model local:/path/model.gguf --runs 5
    .venv/bin/python bench/demo_runs.py --tasks examples/demo_004.json --runs 3 --json /tmp/d.json
    .venv/bin/python bench/demo_runs.py --constrained never --json /tmp/d.json   # without a grammar

Each run is ``run_task`` as ``sandboxlite run`` makes it (for a local model: replies capped at
512 tokens), in a fresh output folder.  **answered**: the run left a non-blank answer file;
**right**: that answer's final answer (its ``\boxed{}``, its last "answer:" line, else its last
line) equals the task's ``metadata.ground_truth``, case, spaces and a final period ignored: the
custom tasks' ``exact`` scoring; **ran a command**: the model ran at least one ``execute_bash``
command; **submitted**: the run ended as submitted (a submit call, or with the small-model
profile a plain reply); **format errors**: the replies that went back to the model as a format
error (no usable tool call, or a code block that is no command: the trajectory's steps with an
``error``), summed over the runs.  ``--profile`` picks a local model's prompt profile (default:
its own, "auto"); ``--constrained`` its grammar mode (never, always, retry; default: the
profile's own, see ``sandboxlite/agent/local.py``).  Steps and wall time are medians over the
runs.  The local model keeps its sampling
state between runs (one model, loaded once), so runs differ as consecutive samples do.

Prints a table and writes JSON (schema ``sandboxlite.bench.demo/1``) to
bench/results/latest-demo.json (``--json PATH`` to write elsewhere); ``--keep DIR`` keeps each
run's output folder (its trajectory.json) in DIR.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TASKS = [ROOT / "examples" / f"demo_00{i}.json" for i in range(1, 5)]
LOCAL_MAX_TOKENS = 512  # as `sandboxlite run` (cli.RUN_LOCAL_MAX_TOKENS)


def _revision() -> str:
    """The commit of the sandboxlite that is imported (with PYTHONPATH, maybe another checkout's)."""
    import sandboxlite

    try:
        where = Path(sandboxlite.__file__).resolve().parent
        return subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _steps(trajectory: Path) -> list[dict]:
    try:
        return json.loads(trajectory.read_text())["steps"]
    except (OSError, ValueError, KeyError):
        return []


def _ran_a_command(steps: list[dict]) -> bool:
    """Whether the run's trajectory shows an execute_bash call that was run."""
    return any(o.get("tool") == "execute_bash" and "error" not in (o.get("data") or {})
               for s in steps for o in s.get("observations", []))  # fmt: skip


def _format_errors(steps: list[dict]) -> int:
    """The replies that went back to the model as a format error (the loop sets the step's ``error``)."""
    return sum(1 for s in steps if s.get("error"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="local")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--tasks", nargs="+", type=Path, default=DEFAULT_TASKS)
    ap.add_argument("--profile", choices=["auto", "small", "standard"], default=None)
    ap.add_argument("--constrained", choices=["never", "always", "retry"], default=None,
                    help="a local model's grammar mode (default: its profile's)")  # fmt: skip
    ap.add_argument("--keep", type=Path, default=None, help="keep each run's output folder in this folder")
    ap.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "latest-demo.json")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")

    from sandboxlite.agent.profiles import resolve_model
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.task import Task
    from sandboxlite.eval.custom import score_row

    local = args.model == "local" or args.model.startswith("local:")
    options = {"profile": args.profile} if args.profile else {}  # (an older checkout has no profiles)
    if args.constrained:
        if not local:
            ap.error("--constrained applies to a local model")
        options["constrained"] = args.constrained
    model = resolve_model(args.model, max_tokens=LOCAL_MAX_TOKENS if local else None, **options)
    profile = getattr(model, "profile", None) or "standard"
    constrained = getattr(model, "constrained", None)
    rows, runs = [], []
    with tempfile.TemporaryDirectory(prefix="demo-runs-") as tmp_dir:
        tmp = args.keep or tmp_dir
        for path in args.tasks:
            task = Task.load(path)
            gold = str(task.metadata.get("ground_truth", ""))
            per = []
            for k in range(args.runs):
                t0 = time.monotonic()
                r = run_task(task, model, output_dir=Path(tmp) / f"{task.id}-{k}")
                wall = time.monotonic() - t0
                answer = (r.answer or "").strip()
                right = bool(answer) and score_row(answer, {"scoring": "exact", "answer": gold}).value == 1.0
                steps = _steps(Path(tmp) / f"{task.id}-{k}" / "trajectory.json")
                per.append({"task": task.id, "run": k, "answered": bool(answer), "right": right,
                            "ran_command": _ran_a_command(steps), "submitted": r.submitted,
                            "format_errors": _format_errors(steps), "steps": r.steps, "wall_s": round(wall, 2),
                            "exit_reason": r.exit_reason, "answer": answer[:200]})  # fmt: skip
                print(f"  {task.id} run {k + 1}/{args.runs}: {r.exit_reason}, {r.steps} steps, {wall:.1f} s, "
                      f"answer {answer[:40]!r}{' (right)' if right else ''}", file=sys.stderr, flush=True)  # fmt: skip
            runs += per
            rows.append({"task": task.id, "runs": len(per),
                         "answered": sum(p["answered"] for p in per) / len(per),
                         "right": sum(p["right"] for p in per) / len(per),
                         "ran_command": sum(p["ran_command"] for p in per) / len(per),
                         "submitted": sum(p["submitted"] for p in per) / len(per),
                         "format_errors": sum(p["format_errors"] for p in per),
                         "steps_median": statistics.median(p["steps"] for p in per),
                         "wall_s_median": round(statistics.median(p["wall_s"] for p in per), 2)})  # fmt: skip
    mode = f", constrained {constrained}" if constrained else ""
    print(f"\nmodel {args.model} (profile {profile}{mode}), {args.runs} runs per task, sandboxlite at {_revision()}")
    print(f"{'task':10} {'runs':>4} {'answered':>9} {'right':>6} {'ran cmd':>8} {'submitted':>10} {'fmt errs':>9} "
          f"{'steps':>6} {'wall s':>7}")  # fmt: skip
    for r in rows:
        print(f"{r['task']:10} {r['runs']:>4} {r['answered']:>8.0%} {r['right']:>6.0%} {r['ran_command']:>7.0%} "
              f"{r['submitted']:>9.0%} {r['format_errors']:>9} {r['steps_median']:>6g} {r['wall_s_median']:>7.1f}")  # fmt: skip
    n = len(runs)
    share = {k: sum(p[k] for p in runs) / n for k in ("answered", "right", "ran_command", "submitted")}
    print(f"{'all':10} {n:>4} {share['answered']:>8.0%} {share['right']:>6.0%} {share['ran_command']:>7.0%} "
          f"{share['submitted']:>9.0%} {sum(p['format_errors'] for p in runs):>9} "
          f"{statistics.median(p['steps'] for p in runs):>6g} {statistics.median(p['wall_s'] for p in runs):>7.1f}")  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"schema": "sandboxlite.bench.demo/1", "model": args.model, "profile": profile,
                                     "constrained": constrained, "revision": _revision(),
                                     "runs_per_task": args.runs, "tasks": rows, "runs": runs}, indent=1))  # fmt: skip
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
