#!/usr/bin/env python3
"""Streaming processes out of a sandbox against a host process, in one run on this machine:
``bench/processes.py [--quick] [--samples N] [--gb X] [--json PATH]``.

    latency     a command writes a line holding its CLOCK_MONOTONIC time (a python3 loop, one line
                every 5 ms); the reader notes when the line reached it: host ``subprocess.Popen``
                reading the pipe (baseline), ``Sandbox.spawn`` iterating ``stdout``, ``Sandbox.exec``
                with ``on_stdout``, ``AsyncSandbox.spawn`` in an event loop.  Median, p90, p99 in
                microseconds (the sandbox shares the host's monotonic clock: no time namespace)
    throughput  ``head -c SIZE /dev/zero`` read to the end: host ``Popen`` + ``os.read`` (baseline),
                ``spawn`` + ``stdout`` iteration, ``exec`` + ``on_stdout``, and the command line
                ``sandboxlite exec -- head ... | cat >/dev/null`` against ``head ... | cat >/dev/null``
                on the host (``cat`` on the host: the issue's baseline)
    many        100 processes spawned at once in one sandbox (each waits for input, then echoes it):
                time to spawn all, to answer all; threads and RSS of this process before and after
    async       64 sandboxes x 4 streams (``AsyncSandbox``, one event loop): wall time, threads,
                RSS; the same 256 streams by threads (one ``spawn`` reactor per sandbox) for scale
    rl          64 concurrent ``SandboxEnv`` episodes (10 bash steps, one of them ``sleep 0.2``, then
                submit) on a pool of 64: each step in a worker thread of a 64-thread pool (how
                ``step_async`` ran before: baseline) against ``step_async`` on the loop (tool calls
                awaited, one worker for the episode ends); wall time, steps/s, peak threads

Ratios are medians against the baseline of the same run.  JSON: ``bench/results/processes-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from sandboxlite import AsyncSandbox, Sandbox  # noqa: E402
from sandboxlite.bench.core import machine_info, percentile  # noqa: E402
from sandboxlite.bench.report import write_json  # noqa: E402
from sandboxlite.config import Limits  # noqa: E402

STAMPER = ("import time, sys\nfor i in range({n}):\n    time.sleep(0.005)\n"
           "    sys.stdout.write(str(time.monotonic_ns()) + '\\n'); sys.stdout.flush()\n")  # fmt: skip


def _stats(vals: list[float]) -> dict:
    s = sorted(vals)
    return {"n": len(s), "median": percentile(s, 50), "p90": percentile(s, 90), "p99": percentile(s, 99)}


def _lat_from_lines(lines: list[tuple[int, bytes]]) -> list[float]:
    """(arrival ns, chunk) -> latencies in µs of every stamp (a chunk may hold several)."""
    out = []
    for t, chunk in lines:
        for line in chunk.split(b"\n"):
            if line.strip():
                out.append((t - int(line)) / 1e3)
    return out


def latency(n: int) -> dict:
    code = STAMPER.format(n=n)
    res = {}
    # host Popen reading the pipe
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    got = []
    fd = p.stdout.fileno()
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        got.append((time.monotonic_ns(), chunk))
    p.wait()
    res["host Popen"] = _stats(_lat_from_lines(got))
    with Sandbox() as sb:
        proc = sb.spawn(["python3", "-c", code])
        got = [(time.monotonic_ns(), c) for c in proc.stdout]
        proc.wait()
        res["Sandbox.spawn stdout"] = _stats(_lat_from_lines(got))
        got = []
        sb.exec(["python3", "-c", code], on_stdout=lambda c: got.append((time.monotonic_ns(), c)), timeout=120)
        res["Sandbox.exec on_stdout"] = _stats(_lat_from_lines(got))

    async def aio() -> list[tuple[int, bytes]]:
        async with await AsyncSandbox.create() as asb:
            proc = await asb.spawn(["python3", "-c", code])
            out = [(time.monotonic_ns(), c) async for c in proc.stdout]
            await proc.wait()
            return out

    res["AsyncSandbox.spawn stdout"] = _stats(_lat_from_lines(asyncio.run(aio())))
    base = res["host Popen"]["median"]
    for v in res.values():
        v["ratio"] = v["median"] / base if base else None
    return res


def throughput(size: int, rounds: int) -> dict:
    cmd = ["head", "-c", str(size), "/dev/zero"]
    sl = [sys.executable, "-c", "from sandboxlite.cli import main; main()", "exec", "--"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    times: dict[str, list[float]] = {k: [] for k in ("host Popen read", "Sandbox.spawn stdout", "Sandbox.exec on_stdout",
                                                     "host head | cat", "sandboxlite exec head | cat")}  # fmt: skip
    with Sandbox(limits=Limits(output_bytes=1 << 20, timeout_s=600)) as sb:
        for _ in range(rounds):
            t = time.perf_counter()
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
            n, fd = 0, p.stdout.fileno()
            while chunk := os.read(fd, 1 << 16):
                n += len(chunk)
            p.wait()
            assert n == size
            times["host Popen read"].append(time.perf_counter() - t)
            t = time.perf_counter()
            proc = sb.spawn(cmd, lossless=True)
            n = sum(len(c) for c in proc.stdout)
            proc.wait()
            assert n == size and proc.stdout.dropped == 0, (n, proc.stdout.dropped)
            times["Sandbox.spawn stdout"].append(time.perf_counter() - t)
            t = time.perf_counter()
            counted = [0]
            sb.exec(cmd, on_stdout=lambda c: counted.__setitem__(0, counted[0] + len(c)))
            assert counted[0] == size
            times["Sandbox.exec on_stdout"].append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(f"{' '.join(cmd)} | cat >/dev/null", shell=True, check=True)
            times["host head | cat"].append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(" ".join(map(_q, sl + cmd)) + " | cat >/dev/null", shell=True, check=True, env=env)
            times["sandboxlite exec head | cat"].append(time.perf_counter() - t)
    res = {}
    for k, v in times.items():
        st = _stats(v)
        st["MB_per_s"] = size / st["median"] / 1e6
        res[k] = st
    for k in ("Sandbox.spawn stdout", "Sandbox.exec on_stdout"):
        res[k]["ratio"] = res[k]["median"] / res["host Popen read"]["median"]
    res["sandboxlite exec head | cat"]["ratio"] = (res["sandboxlite exec head | cat"]["median"]
                                                   / res["host head | cat"]["median"])  # fmt: skip
    return res


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def many(n: int) -> dict:
    with Sandbox() as sb:
        sb.exec("true")
        threads0, rss0 = threading.active_count(), _rss_mb()
        t = time.perf_counter()
        procs = [sb.spawn(["sh", "-c", "read x; echo $x"]) for _ in range(n)]
        t_spawn = time.perf_counter() - t
        threads1, rss1 = threading.active_count(), _rss_mb()
        t = time.perf_counter()
        for i, p in enumerate(procs):
            p.write(f"{i}\n")
        outs = [p.wait(timeout=60).stdout for p in procs]
        t_answer = time.perf_counter() - t
        assert outs == [f"{i}\n".encode() for i in range(n)]
    return {"processes": n, "spawn_all_ms": t_spawn * 1e3, "per_spawn_ms": t_spawn * 1e3 / n,
            "answer_all_ms": t_answer * 1e3, "threads_before": threads0, "threads_running": threads1,
            "rss_mb_before": round(rss0, 1), "rss_mb_running": round(rss1, 1)}  # fmt: skip


def async_streams(sandboxes: int, streams: int, lines: int) -> dict:
    async def main() -> dict:
        threads0, rss0 = threading.active_count(), _rss_mb()
        t0 = time.perf_counter()
        sbs = await asyncio.gather(*(AsyncSandbox.create() for _ in range(sandboxes)))
        t_create = time.perf_counter() - t0
        peak_threads = threading.active_count()
        try:
            t = time.perf_counter()
            procs = [await sb.spawn(f"for i in $(seq {lines}); do echo {k}-$i; done") for sb in sbs for k in range(streams)]
            mid_threads, mid_rss = threading.active_count(), _rss_mb()

            async def count(p) -> int:
                return sum([1 async for _ in p.stdout.lines()])

            counts = await asyncio.gather(*(count(p) for p in procs))
            t_streams = time.perf_counter() - t
            assert counts == [lines] * len(procs)
        finally:
            await asyncio.gather(*(sb.close() for sb in sbs))
        return {"sandboxes": sandboxes, "streams": len(procs), "lines_each": lines, "create_s": t_create,
                "streams_s": t_streams, "threads_before": threads0, "threads_after_create": peak_threads,
                "threads_streaming": mid_threads, "rss_mb_before": round(rss0, 1),
                "rss_mb_streaming": round(mid_rss, 1)}  # fmt: skip

    res = asyncio.run(main())
    # the same with threads: a reactor per sandbox
    threads0 = threading.active_count()
    sbs = [Sandbox() for _ in range(sandboxes)]
    try:
        t = time.perf_counter()
        procs = [sb.spawn(f"for i in $(seq {lines}); do echo {k}-$i; done") for sb in sbs for k in range(streams)]
        threads_mid = threading.active_count()
        results = [sum(1 for _ in p.stdout.lines()) for p in procs]
        assert results == [lines] * len(procs)
        res["sync_streams_s"] = time.perf_counter() - t
        res["sync_threads_streaming"] = threads_mid - threads0
    finally:
        for sb in sbs:
            sb.close()
    return res


def rl_steps(episodes: int, steps: int) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    from sandboxlite import SandboxPool
    from sandboxlite.rl import SandboxEnv

    task = {"id": "t", "query": "q", "metadata": {"answer": "x"}}

    def action(cmd: str, name: str = "execute_bash") -> dict:
        args = json.dumps({"command": cmd} if name == "execute_bash" else {})
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": args}}]}  # fmt: skip

    plan = [action("sleep 0.2" if k == 0 else f"echo {k}") for k in range(steps)] + [action("", "submit")]

    async def episode(pool, executor, threaded: bool) -> int:
        env = SandboxEnv(pool=pool)
        loop = asyncio.get_running_loop()
        try:
            await env.reset_async(options={"task": task}, executor=executor)
            for a in plan:
                if threaded:
                    await loop.run_in_executor(executor, env.step, a)
                else:
                    await env.step_async(a, executor=executor)
            return len(plan)
        finally:
            await loop.run_in_executor(executor, env.close)

    async def run(pool, threaded: bool) -> dict:
        peak = threading.active_count()

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, threading.active_count())
                await asyncio.sleep(0.01)

        with ThreadPoolExecutor(max_workers=episodes if threaded else 1) as executor:
            w = asyncio.create_task(watch())
            t = time.perf_counter()
            n = sum(await asyncio.gather(*(episode(pool, executor, threaded) for _ in range(episodes))))
            wall = time.perf_counter() - t
            w.cancel()
        return {"wall_s": wall, "steps_per_s": n / wall, "peak_threads": peak}

    with SandboxPool(size=episodes, rootfs="host") as pool:
        asyncio.run(run(pool, True))  # warm-up: every sandbox's shell and files once
        threads0 = threading.active_count()
        rounds = {"thread per step": [], "step_async": []}
        for _ in range(3):  # interleaved
            rounds["thread per step"].append(asyncio.run(run(pool, True)))
            rounds["step_async"].append(asyncio.run(run(pool, False)))
    out: dict = {"episodes": episodes, "steps_each": len(plan), "threads_before": threads0}
    for k, rs in rounds.items():
        rs.sort(key=lambda r: r["wall_s"])
        out[k] = rs[len(rs) // 2] | {"walls": [r["wall_s"] for r in rs]}
    out["step_async"]["ratio"] = out["step_async"]["wall_s"] / out["thread per step"]["wall_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--samples", type=int, default=400, help="latency samples per reader")
    ap.add_argument("--gb", type=float, default=1.0, help="the stream's size in GB (1e9 bytes)")
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()
    if opts.quick:
        opts.samples, opts.gb, opts.rounds = 40, 0.02, 1
    size = int(opts.gb * 1e9)
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    doc: dict = {"machine": machine_info(), "args": vars(opts) | {"json": str(opts.json)}}
    doc["latency_us"] = lat = latency(opts.samples)
    print(f"first write -> reader, µs ({opts.samples} lines)")
    for k, v in lat.items():
        print(f"  {k:28} median {v['median']:8.1f}  p90 {v['p90']:8.1f}  p99 {v['p99']:8.1f}  x{v['ratio']:.2f}")
    doc["throughput"] = thr = throughput(size, opts.rounds)
    print(f"{size / 1e9:g} GB out, seconds (median of {opts.rounds})")
    for k, v in thr.items():
        ratio = f"  x{v['ratio']:.2f}" if "ratio" in v else ""
        print(f"  {k:28} median {v['median']:7.3f}  p90 {v['p90']:7.3f}  {v['MB_per_s']:8.0f} MB/s{ratio}")
    doc["many"] = m = many(20 if opts.quick else 100)
    print(f"  {m['processes']} processes in one sandbox: spawned in {m['spawn_all_ms']:.1f} ms "
          f"({m['per_spawn_ms']:.2f} ms each), answered in {m['answer_all_ms']:.1f} ms; threads "
          f"{m['threads_before']} -> {m['threads_running']}; RSS {m['rss_mb_before']} -> {m['rss_mb_running']} MB")
    doc["async"] = a = async_streams(8 if opts.quick else 64, 4, 20 if opts.quick else 200)
    print(f"  {a['sandboxes']} sandboxes x 4 streams in one loop: created in {a['create_s']:.2f} s, streamed in "
          f"{a['streams_s']:.2f} s; threads {a['threads_before']} -> {a['threads_streaming']} while streaming; RSS "
          f"{a['rss_mb_before']} -> {a['rss_mb_streaming']} MB; with threads instead: {a['sync_streams_s']:.2f} s, "
          f"{a['sync_threads_streaming']} threads")  # fmt: skip
    doc["rl"] = r = rl_steps(8 if opts.quick else 64, 10)
    print(f"  {r['episodes']} RL episodes x {r['steps_each']} steps (median of 3, interleaved; threads before: "
          f"{r['threads_before']})")
    for k in ("thread per step", "step_async"):
        v = r[k]
        ratio = f"  x{v['ratio']:.2f} wall" if "ratio" in v else ""
        print(f"    {k:16} {v['wall_s']:6.2f} s  {v['steps_per_s']:7.0f} steps/s  peak threads {v['peak_threads']}{ratio}")
    path = opts.json or HERE / "results" / f"processes-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(doc, path)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
