"""``run_bench``: the whole benchmark, as ``sandboxlite bench`` (and bench/core.py, bench/scale.py) run it."""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import SCHEMA
from .baselines import Context, make_runtimes, select_baselines
from .core import (
    COLD_COMMANDS,
    HOST_ENV,
    LATENCY_METRICS,
    METRIC_HELP,
    OTHER_METRICS,
    SANDBOXLITE,
    TRUE_CMD,
    LeakCheck,
    git_commit,
    load_avg,
    machine_info,
    ms,
    run_rounds,
    select_metrics,
    short_error,
)
from .latency import Latency, baselines_of
from .report import check_targets, draw_chart, format_table, ratios_of, row_of, rows_of_series, write_json

EXIT_OK, EXIT_FAILED, EXIT_NO_SANDBOX = 0, 1, 2


@dataclass
class BenchOptions:
    quick: bool = False
    rounds: int | None = None  # interleaved rounds (default 200; quick 5)
    warmup: int | None = None  # untimed rounds first (default 3; quick 1)
    exec_per_round: int | None = None  # exec_true samples per round for sandboxlite/posix_spawn (5; quick 2)
    rootfs: str = "auto"
    cgroups: str = "auto"
    baselines: str | None = None  # all, none, local, containers, or names
    only: str | None = None  # metrics or groups (core, cold, files, scale, ...), comma-separated
    json_path: str | None = None
    chart: bool = True
    chart_path: str | None = None
    concurrency: list[int] | None = None  # default 1,2,8,64 (quick 1,4)
    density: list[int] | None = None  # default 10,100,1000 (quick 5)
    density_baseline_max: int = 100  # docker/podman/runc density runs only up to this N
    window_s: float | None = None  # throughput window (default 2 s; quick 0.25 s)
    agent_rounds: int | None = None  # episodes per runtime (default 30; quick 2)
    profile_samples: int | None = None  # instrumented cold starts (default 30; quick 3)
    name: str = "bench"  # default file name prefix
    command: str = "sandboxlite bench"  # recorded in the JSON
    samples_in_json: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self) -> BenchOptions:
        q = self.quick
        d = {"rounds": 5 if q else 200, "warmup": 1 if q else 3, "exec_per_round": 2 if q else 5,
             "concurrency": [1, 4] if q else [1, 2, 8, 64], "density": [5] if q else [10, 100, 1000],
             "window_s": 0.25 if q else 2.0, "agent_rounds": 2 if q else 30, "profile_samples": 3 if q else 30}
        for k, v in d.items():
            if getattr(self, k) is None:
                setattr(self, k, v)
        return self


def default_json_path(name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = Path.cwd() / "bench" / "results"
    if results.is_dir():  # in a checkout of the project
        return results / f"{name}-{stamp}.json"
    return Path.cwd() / f"sandboxlite-{name}-{stamp}.json"


def _log(text: str) -> None:
    print(text, flush=True)


def run_bench(opts: BenchOptions, log=_log) -> int:
    opts = opts.resolved()
    if opts.rounds < 1:
        raise ValueError("--rounds must be >= 1")
    metrics = select_metrics(opts.only)
    requested = select_baselines(opts.baselines)
    json_path = Path(opts.json_path) if opts.json_path else default_json_path(opts.name)
    wall0 = time.monotonic()
    machine = machine_info()
    _log_setup(opts, metrics, requested, machine, log)
    started = _first_sandbox(opts, log)
    if started is None:
        return EXIT_NO_SANDBOX
    first, live_argv, plan = started
    machine["cgroups"]["used_by_sandboxes"] = first["sandbox_uses_cgroup"]
    rootfs_spec = plan.name if opts.rootfs == "auto" else opts.rootfs  # "auto" -> the image it chose
    if first["sandbox_host_uid"] != os.geteuid():
        log(f"note: sandboxlite runs bwrap as host uid {first['sandbox_host_uid']} (through its launcher); "
            f"raw bwrap, unshare and the container engines run as the caller, uid {os.geteuid()}")

    from .. import images

    needed = _needed_baselines(metrics)
    ctx = Context(rootfs=rootfs_spec, plan=images.resolve(rootfs_spec), cgroups=opts.cgroups, log=log)
    runtimes = make_runtimes([n for n in requested if n in needed], ctx)
    for rt in runtimes.values():  # a baseline weaker than sandboxlite says how, beside its numbers
        for lack in rt.info.get("isolation_lacks", ()):
            log(f"note: {rt.name}'s isolation: {lack}")

    leak = LeakCheck()
    doc: dict[str, Any] = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": opts.command,
                           "machine": machine}  # fmt: skip
    try:
        got = _measure(opts, metrics, runtimes, rootfs_spec, leak, log)
    finally:
        for rt in runtimes.values():
            try:
                rt.cleanup()
            except Exception as e:  # noqa: BLE001
                log(f"{rt.name}: cleanup failed: {short_error(e)}")
        shutil.rmtree(ctx.scratch, ignore_errors=True)

    machine["load_avg_end"] = load_avg()
    doc["params"] = _params(opts, metrics, requested, rootfs_spec, plan.path, live_argv)
    doc["first_sandbox"] = first
    doc["runtimes"] = [rt.describe() for rt in runtimes.values()]
    doc["results"] = got.results
    doc["ratios"] = ratios_of(got.results)
    doc["throughput"] = got.throughput_rows
    doc["density"] = got.density_rows
    doc["agent"] = {"detail": got.agent["detail"]} if got.agent else None
    doc["profile"] = got.profile
    doc["targets"] = check_targets(doc)
    doc["leak_check"] = {"checked": leak.checked, "problems": leak.problems}
    doc["params"]["wall_s"] = round(time.monotonic() - wall0, 2)
    if opts.samples_in_json:
        doc["samples"] = got.samples
    _report(doc, got.samples, leak, json_path, opts, log)
    failures = _failures(got)
    for f in failures:
        log(f"FAILED: {f}")
    return EXIT_FAILED if failures or leak.problems else EXIT_OK


def _log_setup(opts: BenchOptions, metrics: list[str], requested: list[str], machine: dict, log) -> None:
    """What is measured, on what machine, and a warning when the machine is busy."""
    log(f"sandboxlite bench: {', '.join(metrics)}")
    log(f"  {opts.rounds} interleaved rounds (+{opts.warmup} warm-up), rootfs={opts.rootfs!r}, "
        f"cgroups={opts.cgroups!r}, baselines: {', '.join(requested) or 'none'}")  # fmt: skip
    log(f"machine: {machine['cpu_count']} cpus ({machine['cpu_model']}), kernel {machine['kernel']}, python "
        f"{machine['python']}, bwrap {machine['bwrap_version']}, euid {machine['euid']}, cgroups "
        f"{machine['cgroups']['kind'] or 'none'}; load average {machine['load_avg_start']}")  # fmt: skip
    la = machine["load_avg_start"]
    if la and la[0] > 1.5 and not opts.quick:
        log(f"warning: load average {la[0]} > 1.5: this machine is busy, the numbers will be noisy")


def _first_sandbox(opts: BenchOptions, log) -> tuple[dict[str, Any], list[str], Any] | None:
    """The process's first sandbox, timed on its own: (what it showed, its argv, its rootfs plan),
    or None (logged) when sandboxlite cannot run here."""
    # The first sandbox of a process also finds bwrap, compiles the seccomp filter, locates (or
    # builds) the executor and the host /etc: reported on its own, not in the rounds.
    from .. import Sandbox
    from ..jail.host import default_host

    first: dict[str, Any] = {}
    try:
        t0 = time.perf_counter_ns()
        host = default_host()
        t_host = time.perf_counter_ns()
        first["host_detect_ms"] = round(ms(t_host - t0), 3)
        # a root caller's pool of network namespaces starts with the first sandbox; let it fill first
        # (not timed), as it has in any process that has run a sandbox before (the rounds all find it full)
        if host.netns is not None:
            host.netns.wait_ready(host.netns.size, 5)
        t1 = time.perf_counter_ns()
        sb = Sandbox(rootfs=opts.rootfs, cgroups=opts.cgroups, host=host)
        res = sb.exec(TRUE_CMD)
        first["first_cold_true_ms"] = round(ms(time.perf_counter_ns() - t1 + t_host - t0), 3)
        first["sandbox_uses_cgroup"] = bool(sb.info.get("cgroup"))
        first["sandbox_host_uid"] = sb.info.get("host_uid", os.geteuid())
        first["copy_on_write_root"] = sb.info.get("copy_on_write_root")
        # a root caller's start-up shortcuts (netns.py, devnodes.py): what the cold numbers include
        first["netns"] = sb.info.get("netns")
        first["dev"] = sb.info.get("dev")
        live_argv = list(sb.argv)
        plan = sb.rootfs_plan
        sb.close()
        if res.exit_code != 0:
            raise RuntimeError(f"/bin/true exited {res.exit_code}: {res.stderr[:200]!r}")
    except Exception as e:  # noqa: BLE001
        log(f"sandboxlite not available: {short_error(e)}")
        return None
    return first, live_argv, plan


def _needed_baselines(metrics: list[str]) -> set[str]:
    """Only the baselines some selected metric uses."""
    needed: set[str] = set()
    for m in metrics:
        needed.update(baselines_of(m))
    if "throughput" in metrics or "density" in metrics:
        from .scale import DENSITY_BASELINES, THROUGHPUT_BASELINES

        needed.update(THROUGHPUT_BASELINES + DENSITY_BASELINES)
    if "profile" in metrics:
        needed.add("raw_bwrap")
    if "agent" in metrics:
        needed.add("sandlock")  # (the one baseline with an agent episode: over SandlockBox)
    return needed


@dataclass
class _Measured:
    """What the selected metrics gave: result rows and their samples, the scale rows, the agent and
    profile sections (None when not selected)."""

    results: list[dict] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    throughput_rows: list[dict] = field(default_factory=list)
    density_rows: list[dict] = field(default_factory=list)
    agent: dict[str, Any] | None = None
    profile: dict[str, Any] | None = None


def _measure(opts: BenchOptions, metrics: list[str], runtimes: dict, rootfs_spec: str, leak: LeakCheck,
             log) -> _Measured:  # fmt: skip
    """Every selected metric, in turn: latency, agent, profile, throughput, density."""
    got = _Measured()
    lat_metrics = [m for m in metrics if m in LATENCY_METRICS]
    if lat_metrics:
        _measure_latency(got, opts, lat_metrics, runtimes, rootfs_spec, leak, log)
    if "agent" in metrics:
        _measure_agent(got, opts, runtimes, rootfs_spec, log)
    if "profile" in metrics:  # before throughput and density: they leave the machine busy for a while
        from .profile import cold_profile

        raw = runtimes.get("raw_bwrap")
        raw_fn = raw.cold(TRUE_CMD) if raw is not None and raw.reason is None else None
        log(f"profile: {opts.profile_samples} instrumented cold starts")
        try:
            got.profile = cold_profile(rootfs=rootfs_spec, cgroups=opts.cgroups, samples=opts.profile_samples,
                                       raw_bwrap=raw_fn, log=log)  # fmt: skip
        except Exception as e:  # noqa: BLE001 - reported
            got.profile = {"error": short_error(e)}
    if "throughput" in metrics:
        from .scale import throughput

        log(f"throughput: concurrency {opts.concurrency}, {opts.window_s} s windows")
        got.throughput_rows = throughput(runtimes, rootfs=rootfs_spec, cgroups=opts.cgroups,
                                         concurrencies=opts.concurrency, window_s=opts.window_s,
                                         windows=1 if opts.quick else 2, log=log)  # fmt: skip
    if "density" in metrics:
        from .scale import density

        log(f"density: {opts.density} idle sandboxes at once")
        got.density_rows = density(runtimes, rootfs=rootfs_spec, cgroups=opts.cgroups, counts=opts.density,
                                   baseline_max=opts.density_baseline_max, settle_s=0.1 if opts.quick else 0.5,
                                   log=log)  # fmt: skip
    return got


def _measure_latency(got: _Measured, opts: BenchOptions, lat_metrics: list[str], runtimes: dict, rootfs_spec: str,
                     leak: LeakCheck, log) -> None:  # fmt: skip
    """The interleaved rounds of the latency metrics: their rows and samples into ``got``."""
    log(f"latency: {', '.join(lat_metrics)}")
    lat = Latency(lat_metrics, runtimes, rootfs=rootfs_spec, cgroups=opts.cgroups,
                  exec_per_round=opts.exec_per_round, file_rounds=2 if opts.quick else 50, leak=leak)
    try:
        series = lat.build()
        run_rounds(series, opts.rounds, opts.warmup, progress=log)
    finally:
        lat.close()
    got.results += rows_of_series(series)
    for s in series:
        if s.ok and s.samples:
            got.samples[f"{s.metric}/{s.runtime}"] = [round(v, 4) for v in s.samples]


def _measure_agent(got: _Measured, opts: BenchOptions, runtimes: dict, rootfs_spec: str, log) -> None:
    """The scripted agent episodes: ``got.agent``, and their episode and step rows and samples."""
    from .episode import agent_episodes

    log(f"agent: {opts.agent_rounds} scripted 20-step episodes per runtime")
    try:
        agent = agent_episodes(rootfs=rootfs_spec, cgroups=opts.cgroups, rounds=opts.agent_rounds,
                               warmup=1, log=log, sandlock=runtimes.get("sandlock"))  # fmt: skip
    except Exception as e:  # noqa: BLE001 - reported
        agent = {"series": {}, "steps": {}, "status": {SANDBOXLITE: f"not available: {short_error(e)}"},
                 "detail": {}}  # fmt: skip
    got.agent = agent
    for name, st in agent["status"].items():
        got.results.append(row_of("agent_episode", name, agent["series"].get(name, []), st))
    for name, st in agent["status"].items():
        got.results.append(row_of("agent_step", name, agent["steps"].get(name, []), st))
    for name, vals in agent["series"].items():
        if vals:
            got.samples[f"agent_episode/{name}"] = [round(v, 4) for v in vals]


def _params(opts: BenchOptions, metrics: list[str], requested: list[str], rootfs_spec: str, rootfs_path: Any,
            live_argv: list[str]) -> dict[str, Any]:  # fmt: skip
    """The JSON's ``params``: how the run was made (``wall_s`` is added once it is over)."""
    return {
        "rounds": opts.rounds,
        "quick": opts.quick,
        "rootfs": rootfs_spec,
        "rootfs_path": rootfs_path,
        "cgroups": opts.cgroups,
        "warmup_rounds": opts.warmup,
        "exec_per_round": opts.exec_per_round,
        "metrics_selected": metrics,
        "baselines_requested": requested,
        "throughput_concurrency": opts.concurrency if "throughput" in metrics else None,
        "throughput_window_s": opts.window_s if "throughput" in metrics else None,
        "density_counts": opts.density if "density" in metrics else None,
        "density_baseline_max": opts.density_baseline_max,
        "agent_episodes_per_runtime": opts.agent_rounds if "agent" in metrics else None,
        "interleaving": "per round, every runtime of a metric once (sandboxlite and posix_spawn exec_true: "
                        "exec_per_round times), order rotated each round; throughput: runtimes take turns "
                        "window by window; agent: runtimes alternate episode by episode",
        "timer": "time.perf_counter_ns",
        "commands": {m: c for m, c in COLD_COMMANDS.items()},
        "host_env": HOST_ENV,
        "sandboxlite_argv": live_argv,
        "metrics": {**METRIC_HELP, **OTHER_METRICS},
        "git_commit": git_commit(),
        "python_executable": sys.executable,
        **opts.extra,
    }


def _report(doc: dict[str, Any], samples: dict[str, list[float]], leak: LeakCheck, json_path: Path,
            opts: BenchOptions, log) -> None:  # fmt: skip
    """The table, the leak check and the first sandbox in the log; the JSON and the chart written."""
    first, machine = doc["first_sandbox"], doc["machine"]
    log("")
    log(format_table(doc))
    log(f"\nleak check: {leak.checked} closes/resets checked, "
        f"{'nothing left behind' if not leak.problems else str(len(leak.problems)) + ' problem(s)'}")  # fmt: skip
    for p in leak.problems:
        log(f"  LEAK: {p}")
    log(f"first sandbox of the process (untimed in rounds): {first['first_cold_true_ms']:.1f} ms; "
        f"load average at the end {machine['load_avg_end']}")
    log(f"sandboxlite's network namespace: {first['netns']}; /dev: {first['dev']}")
    write_json(doc, json_path)
    log(f"wrote {json_path}  ({doc['params']['wall_s']} s)")
    if opts.chart:
        chart = Path(opts.chart_path) if opts.chart_path else json_path.with_suffix(".png")
        try:
            log(draw_chart({**doc, "samples": samples}, chart))
        except Exception as e:  # noqa: BLE001 - a chart must not fail the run
            log(f"chart failed: {short_error(e)}")


def _failures(got: _Measured) -> list[str]:
    """What failed for sandboxlite itself (a baseline that is not available does not fail the run)."""
    failures: list[str] = []
    sl_failed = [r for r in got.results if r["runtime"] == SANDBOXLITE and r["median_ms"] is None]
    sl_failed += [r for r in got.throughput_rows if r["runtime"] == SANDBOXLITE and r["status"] != "ok"]
    sl_failed += [r for r in got.density_rows if r["runtime"] == SANDBOXLITE and r["status"] != "ok"]
    for r in sl_failed:
        failures.append(f"{r.get('metric', 'scale')} {r['runtime']}: {r['status']}")
    if got.profile and got.profile.get("error"):
        failures.append(f"profile: {got.profile['error']}")
    return failures
