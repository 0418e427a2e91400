"""bench/scale.py runs in quick mode and writes its JSON (timings are not asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_scale_quick(tmp_path):
    out = tmp_path / "scale.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--quick", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "sandboxlite.bench.scale/1"
    assert [t["concurrency"] for t in data["throughput"]] == [1, 2, 8]
    assert all(t["cycles"] > 0 and t["error_count"] == 0 for t in data["throughput"])
    (d,) = data["density"]
    assert d["alive"] == d["n"] == 5 and d["uss_mib_median"] > 0 and d["exec_after_ok"]
