"""bench/core.py (a wrapper of `sandboxlite bench --only core`) runs in quick mode and writes its JSON:
the bench code never rots.

Timing numbers are not asserted here (performance claims live in bench/, not in tests).
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_core_quick(tmp_path):
    out = tmp_path / "core.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "core.py"), "--quick", "--no-chart", "--json", str(out)],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "sandboxlite.bench/2"
    assert data["params"]["rootfs"] == "host" and data["params"]["quick"] is True
    assert {"cpu_count", "kernel", "python", "load_avg_start", "load_avg_end"} <= set(data["machine"])
    rows = {(x["metric"], x["runtime"]): x for x in data["results"]}
    for key in [("cold_true", "sandboxlite"), ("cold_true", "raw_bwrap"), ("exec_true", "sandboxlite"),
                ("exec_true", "posix_spawn"), ("warm_true", "sandboxlite"), ("close", "sandboxlite"),
                ("reset", "sandboxlite")]:  # fmt: skip
        row = rows[key]
        assert row["n"] > 0 and 0 < row["min_ms"] <= row["median_ms"] <= row["p99_ms"] <= row["max_ms"], row
    assert {m for m, _ in rows} == {"cold_true", "cold_python", "exec_true", "warm_true", "reset", "close"}
    assert not any(rt in ("docker", "podman", "runc") for _, rt in rows)  # --baselines local
    assert any(x["baseline"] == "raw_bwrap" and x["ratio"] for x in data["ratios"])
    assert data["leak_check"]["problems"] == [] and data["leak_check"]["checked"] > 0
    assert "cold_true" in r.stdout and "overhead over raw bwrap" in r.stdout
