"""The sandbox side of an agent episode: ``run_task`` with ``ScriptedModel(steps=20)``.

The scripted model answers at once (its time is measured per step and subtracted anyway), so what
is left is what the sandbox side costs an episode: starting the sandbox (or taking one from a pool
and resetting it afterwards), the tool calls (a persistent bash, a python3 run, a file written,
the outputs copied back), the agent loop and its trajectory file rewritten after every step.
Two runtimes take turns episode by episode:

- ``sandboxlite``: ``run_task`` opens a fresh sandbox and closes it (what ``sandboxlite run`` does);
- ``sandboxlite_pool``: ``pool.acquire()`` -> ``run_task(sandbox=sb)`` -> ``pool.release(sb)`` (which
  resets it), as ``sandboxlite eval`` and RL rollouts do.
"""

from __future__ import annotations

import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS = 20
OUT_PREFIX = {"sandboxlite": "fresh", "sandboxlite_pool": "pool", "sandlock": "sandlock"}


class _TrajectoryClock:
    """Times ``TrajectoryWriter.update`` (the trajectory file rewritten after every step) while installed."""

    def __init__(self) -> None:
        self.total = 0.0

    def __enter__(self):
        from ..agent import run as run_mod

        self.cls = run_mod.TrajectoryWriter
        self.orig = self.cls.update
        clock, orig = self, self.orig

        def update(writer, *a, **k):
            t0 = time.perf_counter()
            try:
                return orig(writer, *a, **k)
            finally:
                clock.total += time.perf_counter() - t0

        self.cls.update = update  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.cls.update = self.orig  # type: ignore[method-assign]


def _episode(task, model, out_dir: Path, sandbox=None, config=None) -> dict[str, Any]:
    from ..agent.run import run_task

    model_s = 0.0
    tools: list[float] = []

    def on_step(agent, step) -> None:
        nonlocal model_s
        model_s += step.model_s
        tools.append(step.tools_s)

    with _TrajectoryClock() as traj:
        t0 = time.perf_counter()
        res = run_task(task, model, output_dir=out_dir, sandbox=sandbox, config=config, on_step=on_step)
        wall = time.perf_counter() - t0
    if not res.submitted or res.steps != model.steps:
        raise RuntimeError(f"the scripted episode ended with {res.exit_reason!r} after {res.steps} steps")
    return {"wall_s": wall, "model_s": model_s, "tools_s": sum(tools), "trajectory_s": traj.total, "steps": res.steps,
            "first_tool_s": tools[0] if tools else 0.0,
            "other_tool_s": statistics.median(tools[1:-1]) if len(tools) > 2 else 0.0}


def agent_episodes(*, rootfs: str, cgroups: str, rounds: int, warmup: int = 1,
                   log: Callable[[str], None] = print, sandlock: Any = None) -> dict[str, Any]:  # fmt: skip
    """Returns {"series": {runtime: [overhead ms per episode]}, "steps": {...}, "detail": {...}}.
    ``sandlock``: the bench's prepared sandlock baseline (``baselines.Sandlock``) to take turns
    with too (each episode a fresh ``SandlockBox``), or None."""
    from .. import SandboxPool
    from ..agent.scripted import ScriptedModel
    from ..agent.task import Task
    from ..config import SandboxConfig

    model = ScriptedModel(steps=STEPS)
    task = Task(id="bench-episode", query="Compute 6*7 and write the answer.", rootfs=rootfs, max_steps=STEPS)
    config = SandboxConfig(rootfs=rootfs, cgroups=cgroups)
    out_root = Path(tempfile.mkdtemp(prefix="sandboxlite-bench-agent-"))
    pool = SandboxPool(size=1, config=config)
    runs: dict[str, list[dict]] = {"sandboxlite": [], "sandboxlite_pool": []}
    status = {k: "ok" for k in runs}

    def fresh(i: int) -> dict:
        return _episode(task, model, out_root / f"fresh-{i}", config=config)

    def pooled(i: int) -> dict:
        t0 = time.perf_counter()
        sb = pool.acquire()
        try:
            r = _episode(task, model, out_root / f"pool-{i}", sandbox=sb)
        finally:
            pool.release(sb)  # resets it: part of an episode's cost here
        r["wall_s"] = time.perf_counter() - t0
        return r

    fns = {"sandboxlite": fresh, "sandboxlite_pool": pooled}
    if sandlock is not None:
        runs["sandlock"], status["sandlock"] = [], "ok" if sandlock.reason is None else f"not available: {sandlock.reason}"

        def boxed(i: int) -> dict:
            t0 = time.perf_counter()
            with sandlock.box() as box:
                r = _episode(task, model, out_root / f"sandlock-{i}", sandbox=box)
            r["wall_s"] = time.perf_counter() - t0  # its start and close included, as for a fresh sandbox
            return r

        fns["sandlock"] = boxed
    try:
        _take_turns(fns, runs, status, rounds=rounds, warmup=warmup, out_root=out_root)
    finally:
        pool.close()
        shutil.rmtree(out_root, ignore_errors=True)
    series = {name: [_overhead_ms(r) for r in rs] for name, rs in runs.items()}
    steps = {name: [_overhead_ms(r) / r["steps"] for r in rs] for name, rs in runs.items()}
    detail = _detail(runs)
    log(f"  agent: {' + '.join(str(len(rs)) for rs in runs.values())} episodes of {STEPS} steps ({', '.join(runs)})")
    return {"series": series, "steps": steps, "status": status, "detail": detail}


def _take_turns(fns: dict[str, Callable[[int], dict]], runs: dict[str, list[dict]], status: dict[str, str], *,
                rounds: int, warmup: int, out_root: Path) -> None:  # fmt: skip
    """``warmup + rounds`` rounds, every runtime once a round, the order flipped every other round;
    a runtime that fails is dropped, its ``status`` says why."""
    for i in range(warmup + rounds):
        order = list(fns) if i % 2 == 0 else list(fns)[::-1]
        for name in order:
            if status[name] != "ok":
                continue
            gc.collect()
            try:
                r = fns[name](i)
            except Exception as e:  # noqa: BLE001 - reported
                when = f"failed in round {i - warmup}: " if i >= warmup else ""
                status[name] = f"not available: {when}{type(e).__name__}: {e}"[:300]
                continue
            if i >= warmup:
                runs[name].append(r)
            shutil.rmtree(out_root / f"{OUT_PREFIX[name]}-{i}", ignore_errors=True)


def _overhead_ms(r: dict) -> float:
    return (r["wall_s"] - r["model_s"]) * 1e3


def _detail(runs: dict[str, list[dict]]) -> dict[str, Any]:
    """The medians of an episode's parts per runtime, and what each part is."""
    detail: dict[str, Any] = {"steps_per_episode": STEPS, "model": "ScriptedModel(steps=20)",
                              "model_ms_median": {}, "tools_ms_median": {}, "trajectory_ms_median": {},
                              "rest_ms_median": {}, "first_step_tools_ms_median": {},
                              "bash_step_tools_ms_median": {},
                              "help": {"tools": "the tool calls: bash commands in the persistent shell (the "
                                                "first runs python3), the answer file written",
                                       "first_step_tools": "step 1: `ls -la /testbed; python3 -c 'print(6 * 7)'`",
                                       "bash_step_tools": "a middle step: `echo turn N; ls /testbed/output` "
                                                          "(median over steps 2..19)",
                                       "trajectory": "trajectory.json rewritten after every step (TrajectoryWriter)",
                                       "rest": "the sandbox's start and close (pool: acquire and reset), the "
                                               "prompt, the loop, the outputs copied back"}}  # fmt: skip
    for name, rs in runs.items():
        if rs:
            def med(f, rs=rs) -> float:
                return round(statistics.median(f(r) for r in rs) * 1e3, 3)

            detail["model_ms_median"][name] = med(lambda r: r["model_s"])
            detail["tools_ms_median"][name] = med(lambda r: r["tools_s"])
            detail["trajectory_ms_median"][name] = med(lambda r: r["trajectory_s"])
            detail["first_step_tools_ms_median"][name] = med(lambda r: r["first_tool_s"])
            detail["bash_step_tools_ms_median"][name] = med(lambda r: r["other_tool_s"])
            detail["rest_ms_median"][name] = med(
                lambda r: r["wall_s"] - r["model_s"] - r["tools_s"] - r["trajectory_s"])
    return detail
