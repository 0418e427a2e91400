"""bench/scale.py (a wrapper of `sandboxlite bench --only scale`) runs in quick mode and writes its JSON
(timings are not asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_scale_quick(tmp_path):
    out = tmp_path / "scale.json"
    argv = [sys.executable, str(ROOT / "bench" / "scale.py"), "--quick", "--no-chart", "--json", str(out),
            "--baselines", "posix_spawn,raw_bwrap"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "sandboxlite.bench/2"
    assert data["results"] == []  # no latency metric asked for
    mine = [t for t in data["throughput"] if t["runtime"] == "sandboxlite"]
    assert [t["concurrency"] for t in mine] == [1, 4]
    assert all(t["cycles"] > 0 and t["error_count"] == 0 and t["cycles_per_s"] > 0 for t in mine)
    assert {t["runtime"] for t in data["throughput"]} == {"sandboxlite", "posix_spawn", "raw_bwrap"}
    (d,) = [x for x in data["density"] if x["runtime"] == "sandboxlite"]
    assert d["alive"] == d["n"] == 5 and d["uss_mib_median"] > 0 and d["pss_mib_median"] > 0 and d["exec_after_ok"]
    assert "throughput" in r.stdout and "density" in r.stdout
