#!/usr/bin/env python3
"""sandboxlite core benchmark: cold start, exec round trip, warm acquire, reset, close.

A thin wrapper over ``sandboxlite bench`` (the code lives in ``sandboxlite.bench``):

    .venv/bin/python bench/core.py [--rounds N] [--quick] [--json PATH] [--rootfs R] [--cgroups MODE]

is ``sandboxlite bench --only core --baselines local --rootfs host --json bench/results/core-<time>.json``
followed by your options (which win).  Every option of ``sandboxlite bench`` works here; see
bench/README.md.  The JSON schema is ``sandboxlite.bench/2``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))  # a checkout works without installing

from sandboxlite.cli import main


def defaults(name: str, only: str) -> list[str]:
    out = BENCH_DIR / "results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    return ["bench", "--only", only, "--baselines", "local", "--rootfs", "host", "--json", str(out)]


if __name__ == "__main__":
    main(args=defaults("core", "core") + sys.argv[1:], prog_name="bench/core.py")
