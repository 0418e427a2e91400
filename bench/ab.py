#!/usr/bin/env python3
"""The jail core before and after a change, in one run: ``bench/ab.py [--base REV] [--rounds N]``.

Two worker processes, one importing sandboxlite from the working tree ("new"), one from a
checkout of ``--base`` (default ``HEAD``; a ``git worktree`` made in a temporary directory, or
``--base-src DIR``: the directory holding another ``sandboxlite/``).  Rounds are interleaved (new, old, old, new, ...)
so both sides see the same machine load; each round measures, as ``bench/core.py`` does:

    cold_true  Sandbox() -> first /bin/true finished (close excluded)
    exec_true  one exec(["/bin/true"]) round trip in a live sandbox (5 per round)
    reset      reset() of a sandbox that has a background process and files
    close      close() of a sandbox that ran one command

Prints medians, p90 and p99 of each side and the ratio new/old, and writes JSON
(``bench/results/ab-<time>.json``).  Exit code 1 when a median regresses by more than
``--max-regression`` (default 5 %).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
METRICS = ("cold_true", "exec_true", "reset", "close")

WORKER = r"""
import json, sys, time
from sandboxlite import Sandbox
rootfs, cgroups = sys.argv[1], sys.argv[2]
clock = time.perf_counter
def ms(t): return round(t * 1e3, 4)
for line in sys.stdin:
    out = {}
    t0 = clock(); sb = Sandbox(rootfs=rootfs, cgroups=cgroups); r = sb.exec(["/bin/true"]); t1 = clock()
    assert r.exit_code == 0, r
    out["cold_true"] = [ms(t1 - t0)]
    ex = []
    for _ in range(5):
        t = clock(); sb.exec(["/bin/true"]); ex.append(ms(clock() - t))
    out["exec_true"] = ex
    sb.exec("sleep 60 >/dev/null 2>&1 & echo x > f; echo y > $TMPDIR/g")  # the workdir and TMPDIR, in either isolation
    t = clock(); sb.reset(); out["reset"] = [ms(clock() - t)]
    sb.exec(["/bin/true"])
    t = clock(); sb.close(); out["close"] = [ms(clock() - t)]
    print(json.dumps(out), flush=True)
"""


def write_json(result: dict, name: str, path: Path | None) -> Path:
    """Write ``result`` to ``path`` (default ``bench/results/NAME-<time>.json``) and say where."""
    path = path or HERE / "results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"JSON: {path}")
    return path


def percentile(vals: list[float], q: float) -> float:
    s = sorted(vals)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Worker:
    def __init__(self, name: str, src: Path, rootfs: str, cgroups: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, rootfs, cgroups], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir())
        self.samples: dict[str, list[float]] = {m: [] for m in METRICS}

    def round(self, record: bool) -> None:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} worker died (exit {self.proc.wait()})")
        if record:
            for k, v in json.loads(line).items():
                self.samples[k] += v

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD", help="git revision of the 'old' side (default HEAD)")
    ap.add_argument("--base-src", type=Path, help="the directory holding the 'old' side's sandboxlite/ instead of --base")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rootfs", default="host")
    ap.add_argument("--cgroups", default="auto", choices=("auto", "off", "required"))
    ap.add_argument("--max-regression", type=float, default=0.05)
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()

    tmp = None
    if opts.base_src is not None:
        old_src = opts.base_src.resolve()
        base = str(old_src)
    else:
        tmp = tempfile.mkdtemp(prefix="sandboxlite-ab-")
        r = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", tmp, opts.base],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode != 0:
            os.rmdir(tmp)
            print(f"bench/ab.py: cannot check out --base {opts.base!r}: {r.stderr.strip()}\n"
                  "Hint: give a commit of this repository, or --base-src DIR", file=sys.stderr)
            return 2
        old_src = Path(tmp) / "src" if (Path(tmp) / "src" / "sandboxlite").is_dir() else Path(tmp)  # (src/ layout before 2026-12)
        base = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", opts.base], capture_output=True,
                              text=True).stdout.strip()  # fmt: skip
    new_src = ROOT
    try:
        new, old = Worker("new", new_src, opts.rootfs, opts.cgroups), Worker("old", old_src, opts.rootfs, opts.cgroups)
        load0 = os.getloadavg()
        for r in range(opts.warmup + opts.rounds):
            order = (new, old) if r % 2 == 0 else (old, new)
            for w in order:
                w.round(record=r >= opts.warmup)
        load1 = os.getloadavg()
        new.close()
        old.close()
    finally:
        if tmp is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", tmp], capture_output=True)

    result = {"schema": "sandboxlite.bench-ab/1", "base": base, "rounds": opts.rounds, "rootfs": opts.rootfs,
              "cgroups": opts.cgroups, "euid": os.geteuid(), "load_avg": [load0, load1], "metrics": {}}  # fmt: skip
    print(f"bench/ab.py: new (working tree) vs old ({base}), {opts.rounds} interleaved rounds, "
          f"rootfs={opts.rootfs}, cgroups={opts.cgroups}, euid {os.geteuid()}, load {load0[0]:.2f} -> {load1[0]:.2f}")
    print(f"{'metric':<10} {'old median':>10} {'new median':>10} {'ratio':>6}   {'old p90':>8} {'new p90':>8}"
          f"   {'old p99':>8} {'new p99':>8}   (ms)")  # fmt: skip
    regressed = []
    for m in METRICS:
        a, b = old.samples[m], new.samples[m]
        st = {side: {"median": statistics.median(v), "p90": percentile(v, 0.9), "p99": percentile(v, 0.99),
                     "n": len(v)} for side, v in (("old", a), ("new", b))}  # fmt: skip
        ratio = st["new"]["median"] / st["old"]["median"]
        st["ratio_new_over_old"] = round(ratio, 4)
        result["metrics"][m] = st
        print(f"{m:<10} {st['old']['median']:>10.3f} {st['new']['median']:>10.3f} {ratio:>6.3f}   "
              f"{st['old']['p90']:>8.3f} {st['new']['p90']:>8.3f}   {st['old']['p99']:>8.3f} {st['new']['p99']:>8.3f}")
        if ratio > 1 + opts.max_regression:
            regressed.append(m)
    write_json(result, "ab", opts.json)
    if regressed:
        print(f"regressed by more than {opts.max_regression:.0%}: {', '.join(regressed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
