"""bench/rl.py runs in quick mode and writes its JSON (timings are not asserted: targets live in bench/)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_rl_quick(tmp_path):
    out = tmp_path / "rl.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "rl.py"), "--quick", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "sandboxlite.bench.rl/1" and data["params"]["quick"] is True
    rows = {x["metric"]: x for x in data["results"]}
    assert set(rows) == {"acquire", "release_reset", "pooled_reset", "reset_after_done", "step_overhead", "first_step"}
    for row in rows.values():
        assert row["n"] > 0 and 0 < row["min_ms"] <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"], row
    c = data["concurrent"]
    assert c["episodes"] == 8 and c["submitted"] == 8 and c["error_count"] == 0 and c["sandboxes_in_use_after"] == 0
    assert c["mean_reward"] == 1.0 and c["turn_env"]["n"] == 24
    assert [t["metric"] for t in data["targets"]] == ["acquire", "pooled_reset", "step_overhead", "concurrent_episodes"]
    assert "pooled_reset" in r.stdout and "concurrent episodes: 8" in r.stdout
