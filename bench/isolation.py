#!/usr/bin/env python3
"""Landlock against namespaces, in one run: ``bench/isolation.py [--rounds N] [--cgroups MODE]``.

Two worker processes of the working tree, one with ``SANDBOXLITE_ISOLATION=namespaces``, one with
``SANDBOXLITE_ISOLATION=landlock``, both over ``rootfs="host"`` (the only root a Landlock sandbox
has).  Rounds are interleaved (namespaces, landlock, landlock, namespaces, ...) so both see the same
machine load; each round measures what ``bench/ab.py`` does (cold start to the first ``/bin/true``,
five exec round trips, a reset, a close).  Prints medians, p90 and p99 and the ratio
landlock/namespaces; writes JSON (``bench/results/isolation-<time>.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab import METRICS, ROOT, Worker, percentile, write_json  # noqa: E402

MODES = ("namespaces", "landlock")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--cgroups", default="auto", choices=("auto", "off", "required"))
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()
    src = ROOT
    workers = {m: Worker(m, src, "host", opts.cgroups, {"SANDBOXLITE_ISOLATION": m}) for m in MODES}
    load0 = os.getloadavg()
    for r in range(opts.warmup + opts.rounds):
        for m in MODES if r % 2 == 0 else MODES[::-1]:
            workers[m].round(record=r >= opts.warmup)
    load1 = os.getloadavg()
    for w in workers.values():
        w.close()
    result = {"schema": "sandboxlite.bench-isolation/1", "rounds": opts.rounds, "rootfs": "host",
              "cgroups": opts.cgroups, "euid": os.geteuid(), "load_avg": [load0, load1], "metrics": {}}  # fmt: skip
    print(f"bench/isolation.py: landlock vs namespaces, {opts.rounds} interleaved rounds, rootfs=host, "
          f"cgroups={opts.cgroups}, euid {os.geteuid()}, load {load0[0]:.2f} -> {load1[0]:.2f}")
    print(f"{'metric':<10} {'ns median':>10} {'ll median':>10} {'ratio':>6}   {'ns p90':>8} {'ll p90':>8}"
          f"   {'ns p99':>8} {'ll p99':>8}   (ms; ratio = landlock / namespaces)")  # fmt: skip
    for m in METRICS:
        st = {mode: {"median": statistics.median(v), "p90": percentile(v, 0.9), "p99": percentile(v, 0.99),
                     "n": len(v)} for mode, v in ((k, workers[k].samples[m]) for k in MODES)}  # fmt: skip
        ratio = st["landlock"]["median"] / st["namespaces"]["median"]
        st["ratio_landlock_over_namespaces"] = round(ratio, 4)
        result["metrics"][m] = st
        ns, ll = st["namespaces"], st["landlock"]
        print(f"{m:<10} {ns['median']:>10.3f} {ll['median']:>10.3f} {ratio:>6.3f}   {ns['p90']:>8.3f} {ll['p90']:>8.3f}"
              f"   {ns['p99']:>8.3f} {ll['p99']:>8.3f}")
    write_json(result, "isolation", opts.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
