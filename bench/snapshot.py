#!/usr/bin/env python3
"""Snapshots and fork (issue 21): what they cost against the data written, and what they save.

    .venv/bin/python bench/snapshot.py [--rounds N] [--sizes empty,1m,50m,500m] [--json PATH]

Rows, all in one run, interleaved where two things are compared:
  * snapshot: ``sb.snapshot()`` of a state of each size (the copy, the check, the content hash);
  * fork(8): ``sb.fork(8)`` (one snapshot + 8 starts from it), and the 8 starts alone;
    ``sb.fork(8, share=True)`` (no copy: 8 starts over the shared writes), and into a pool's 8 warm
    sandboxes (``pool=``);
  * start: ``Sandbox(snapshot=s)`` + ``exec("true")`` against a cold ``Sandbox()`` + ``exec("true")``;
  * sandlock (PyPI, the [sandlock] extra): its fork(8) of a process that wrote 50 MB, and checkpoint();
  * group of 8: a GRPO group whose preparation is "pip install a local wheel + write 50 MB" (and a
    1-second preparation: ``sleep 1`` + 50 MB): prepared once, snapshotted, 8 episodes from it,
    against 8 episodes that each repeat the preparation.
Medians and p90 in ms; ratios against the baseline of the same run.  Writes JSON next to the table.
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
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from sandboxlite import Sandbox  # noqa: E402

SIZES = {  # name: shell command writing the state into /testbed
    "empty": "true",
    "1m": "mkdir -p /testbed/d && for i in $(seq 100); do head -c 10485 /dev/urandom > /testbed/d/f$i; done",
    "50m": "head -c 52428800 /dev/urandom > /testbed/data",
    "500m": "head -c 524288000 /dev/urandom > /testbed/data",
}


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def row(name: str, xs: list[float], base: list[float] | None = None) -> dict:
    med = statistics.median(xs)
    out = {"name": name, "n": len(xs), "median_ms": med * 1e3, "p90_ms": q(xs, 0.9) * 1e3}
    if base:
        out["ratio"] = med / statistics.median(base)
    return out


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def make_wheel(tmp: str) -> str:
    """A small pure-Python wheel, built here (no network)."""
    src = Path(tmp) / "benchpkg"
    (src / "benchpkg").mkdir(parents=True)
    (src / "benchpkg" / "__init__.py").write_text("VALUE = 42\n" + "# padding\n" * 2000)
    (src / "pyproject.toml").write_text('[project]\nname = "benchpkg"\nversion = "1.0"\n'
                                        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp, str(src)],
                   check=True, capture_output=True)  # fmt: skip
    return next(str(p) for p in Path(tmp).glob("benchpkg-*.whl"))


def sandlock_rows(rounds: int) -> list[dict]:
    """PyPI sandlock's fork and checkpoint, in the same run: a process that wrote 50 MB (its init_fn)
    forked into 8 copy-on-write clones, and checkpoint() of a running process."""
    try:
        import sandlock
    except ImportError:
        why = "not available: PyPI sandlock is not installed (pip install 'sandboxlite[sandlock]')"
        return [{"name": "sandlock fork(8), 50 MB written", "status": why}]
    forks, checkpoints, shared = [], [], 0
    for _ in range(rounds):
        d = tempfile.mkdtemp(prefix="sandlock-bench-")
        mark = os.path.join(d, "init_ns")

        def init():
            t = time.perf_counter_ns()
            with open(os.path.join(d, "data"), "wb") as f:
                f.write(os.urandom(50 << 20))
            with open(mark, "w") as f:
                f.write(str(time.perf_counter_ns() - t))

        def work(i):
            with open(os.path.join(d, f"clone-{i}"), "w") as f:  # where a clone's writes land
                f.write(str(i))

        box = sandlock.Sandbox(fs_readable=["/"], fs_writable=[d], init_fn=init, work_fn=work)
        t0 = time.perf_counter_ns()
        box.fork(8)
        total = time.perf_counter_ns() - t0
        with open(mark) as f:
            forks.append((total - int(f.read())) / 1e9)  # the preparation excluded, as for fork from a snapshot
        time.sleep(0.05)
        shared = max(shared, len([n for n in os.listdir(d) if n.startswith("clone-")]))
        live = sandlock.Sandbox(fs_readable=["/"], fs_writable=[d])
        live.spawn(["/bin/sleep", "30"])
        time.sleep(0.05)
        checkpoints.append(timed(live.checkpoint))
        live.kill()
        shutil.rmtree(d, ignore_errors=True)
    out = [row("sandlock fork(8) of a process that wrote 50 MB", forks), row("sandlock checkpoint() of a process", checkpoints)]
    out[0]["note"] = (f"its clones share one host directory: {shared} of 8 clones' files seen side by side there "
                      "(no filesystem isolation between them); its init is excluded")  # fmt: skip
    out[1]["note"] = "process state only (ptrace + /proc): the files a process wrote are not in it"
    return out


def share_rounds(size: str, rounds: int) -> tuple[list[float], list[float]]:
    """fork(8, share=True) of a state of ``size`` written in a fresh sandbox: into 8 new sandboxes,
    and into a pool's 8 warm ones (their release, a reset each, is not counted: the pool does it
    when they come back).  Alternating, a fresh sandbox each (a shared fork stacks the forked one
    on its layer)."""
    from sandboxlite import SandboxPool

    cold, warm = [], []
    with SandboxPool(size=8) as pool:
        for i in range(2 * rounds):
            into = pool if i % 2 else None
            with Sandbox() as sb:
                r = sb.exec(SIZES[size], timeout=300)
                assert r.exit_code == 0, r.stderr_text
                kids: list[Sandbox] = []
                (warm if into else cold).append(timed(lambda: kids.extend(sb.fork(8, share=True, pool=into))))
                assert kids[0].exec("ls /testbed | head -1").exit_code == 0
                for k in kids:
                    pool.release(k) if into else k.close()
    return cold, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--sizes", default="empty,1m,50m,500m")
    ap.add_argument("--json", default=str(BENCH_DIR / "results" / f"snapshot-{time.strftime('%Y%m%d-%H%M%S')}.json"))
    a = ap.parse_args()
    rows: list[dict] = []
    store = None
    for size in a.sizes.split(","):
        snaps, forks, starts, store = _snapshot_rounds(size, a.rounds)
        shared, pooled = share_rounds(size, a.rounds)
        rows += [row(f"snapshot {size}", snaps), row(f"fork(8) {size} (snapshot + 8 starts)", forks),
                 row(f"8 starts from a snapshot {size}", starts),
                 row(f"fork(8, share=True) {size} (8 starts)", shared, forks),
                 row(f"fork(8, share=True, pool=) {size} (8 warm)", pooled, forks)]  # fmt: skip
        print(*(f"{x['name']:<44} median {x['median_ms']:9.2f} ms  p90 {x['p90_ms']:9.2f} ms" for x in rows[-5:]),
              sep="\n", flush=True)  # fmt: skip
    rows += _start_rows(a.rounds)
    rows += _group_rows(a.rounds)
    rows += sandlock_rows(a.rounds)
    _print_table(rows)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"schema": "sandboxlite.bench.snapshot/1", "rows": rows,
                                        "store": str(store.root) if store else None}, indent=1))  # fmt: skip
    print(f"\nJSON: {a.json}")


def _snapshot_rounds(size: str, rounds: int) -> tuple[list[float], list[float], list[float], Any]:
    """In a sandbox holding a state of ``size``: snapshot(), fork(8), and 8 starts from the snapshot,
    ``rounds`` times; (their times, the snapshot store)."""
    with Sandbox() as sb:
        store = sb.host.snapshot_store()
        r = sb.exec(SIZES[size], timeout=300)
        assert r.exit_code == 0, r.stderr_text
        snaps, forks, starts = [], [], []
        for _ in range(rounds):
            snap = None

            def take():
                nonlocal snap
                snap = sb.snapshot()

            snaps.append(timed(take))
            kids: list[Sandbox] = []
            forks.append(timed(lambda: kids.extend(sb.fork(8))))
            for k in kids:
                k.close()
            kids.clear()
            starts.append(timed(lambda: kids.extend(Sandbox(snapshot=snap) for _ in range(8))))
            assert kids[0].exec("ls /testbed | head -1").exit_code == 0
            for k in kids:
                k.close()
        store.remove(snap.name)
    return snaps, forks, starts, store


def _start_rows(rounds: int) -> list[dict]:
    """Start from a snapshot against a cold start, interleaved."""
    with Sandbox() as sb:
        sb.exec(SIZES["1m"])
        snap = sb.snapshot()
    cold, warm = [], []
    for _ in range(rounds * 3):
        for kind, out in (("cold", cold), ("snap", warm)):
            def one():
                with Sandbox(snapshot=snap if kind == "snap" else None) as s:
                    s.exec("true")

            out.append(timed(one))
    rows = [row("cold start + exec", cold), row("start from a 1 MB snapshot + exec", warm, cold)]
    rows[-1]["diff_ms"] = (statistics.median(warm) - statistics.median(cold)) * 1e3
    return rows


def _group_rows(rounds: int) -> list[dict]:
    """A GRPO group of 8 from a prepared state, against 8 episodes that repeat the preparation."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        wheel = make_wheel(tmp)
        data = open(wheel, "rb").read()
        name = os.path.basename(wheel)
        preps = {
            "wheel + 50 MB": f"pip install -q --no-index --no-deps /testbed/{name} && {SIZES['50m']}",
            "sleep 1 + 50 MB": f"sleep 1 && {SIZES['50m']}",
        }
        episode = "python3 -c 'import os; print(os.path.getsize(\"/testbed/data\"))'"
        for label, prep in preps.items():
            replay, group = [], []
            for _ in range(max(1, rounds // 3)):
                def repeat():
                    for _ in range(8):
                        with Sandbox() as s:
                            s.write_file(name, data)
                            assert s.exec(prep, timeout=120).exit_code == 0
                            assert s.exec(episode).stdout_text.strip() == "52428800"

                def from_snapshot():
                    with Sandbox() as s:
                        s.write_file(name, data)
                        assert s.exec(prep, timeout=120).exit_code == 0
                        kids = s.fork(8)
                    try:
                        for k in kids:
                            assert k.exec(episode).stdout_text.strip() == "52428800"
                    finally:
                        for k in kids:
                            k.close()

                replay.append(timed(repeat))
                group.append(timed(from_snapshot))
            rows += [row(f"group of 8, {label}: each repeats it", replay),
                     row(f"group of 8, {label}: prepared once, forked", group, replay)]  # fmt: skip
            rows[-1]["speedup"] = 1 / rows[-1]["ratio"]
    return rows


def _print_table(rows: list[dict]) -> None:
    print(f"\n{'row':<52} {'n':>3} {'median ms':>10} {'p90 ms':>10} {'ratio':>7}")
    for x in rows:
        if "status" in x:
            print(f"{x['name']:<52} {x['status']}")
            continue
        ratio = f"{x['ratio']:.3f}" if "ratio" in x else ""
        print(f"{x['name']:<52} {x['n']:>3} {x['median_ms']:>10.2f} {x['p90_ms']:>10.2f} {ratio:>7}")
        if x.get("note"):
            print(f"    {x['note']}")


if __name__ == "__main__":
    main()
