#!/usr/bin/env python3
"""Throughput and density: how many sandboxes per second, and how many at once.

A thin wrapper over ``sandboxlite bench`` (the code lives in ``sandboxlite.bench.scale``):

    .venv/bin/python bench/scale.py            # full: concurrency 1, 2, 8, 64; density 10, 100, 1000
    .venv/bin/python bench/scale.py --quick    # a few seconds (the test suite runs this)

is ``sandboxlite bench --only scale --baselines local --rootfs host --json bench/results/scale-<time>.json``
followed by your options (which win).

- **throughput**: full cycles (create, ``exec(["/bin/true"])``, close) per second, with C threads
  each running cycles back to back, the runtimes taking turns window by window; median and p99 of
  the cycle latency.
- **density**: N idle sandboxes alive at once: the time to start them, and the memory of a sandbox
  (USS and PSS summed over its whole process tree: bwrap, the executor, its standby supervisor).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core import defaults, main

if __name__ == "__main__":
    main(args=defaults("scale", "scale") + sys.argv[1:], prog_name="bench/scale.py")
