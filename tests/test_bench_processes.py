"""bench/processes.py, smoke run (``--quick``): it runs end to end on real sandboxes and writes
every section with the fields the closing note quotes.  Structure only, never timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "processes.py"


def test_quick_run_writes_every_section(tmp_path):
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out)], capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    lat = doc["latency_us"]
    assert set(lat) == {"host Popen", "Sandbox.spawn stdout", "Sandbox.exec on_stdout", "AsyncSandbox.spawn stdout"}
    for row in lat.values():
        assert row["n"] >= 40 and row["median"] > 0 and row["p90"] >= row["median"] and row["ratio"] > 0
    thr = doc["throughput"]
    assert thr["Sandbox.spawn stdout"]["ratio"] > 0 and thr["sandboxlite exec head | cat"]["ratio"] > 0
    assert doc["many"]["processes"] == 20 and doc["many"]["threads_running"] >= doc["many"]["threads_before"]
    a = doc["async"]
    assert a["streams"] == 32 and a["threads_streaming"] <= a["threads_after_create"]
    rl = doc["rl"]
    assert rl["episodes"] == 8 and rl["steps_each"] == 11 and rl["step_async"]["ratio"] > 0
    assert rl["step_async"]["peak_threads"] < rl["thread per step"]["peak_threads"]  # no thread per step
    assert "first write -> reader" in r.stdout and "JSON:" in r.stdout
