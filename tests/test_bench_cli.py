"""`sandboxlite bench` (click's CliRunner, real sandboxes): the quick mode runs every metric, writes the
JSON schema, and every baseline either has numbers or says why not.  Timings are not asserted."""

import json
import sys

import pytest
from click.testing import CliRunner

from sandboxlite.bench import SCHEMA
from sandboxlite.bench.core import LATENCY_METRICS
from sandboxlite.bench.report import CHART_SKIPPED, draw_chart
from sandboxlite.cli import main
from sandboxlite.images import image_root

STAT_KEYS = ("median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms")
BASELINES = {"raw_bwrap", "unshare", "sandlock", "posix_spawn", "subprocess_run", "host", "docker", "podman", "runc"}


def run(*args):
    return CliRunner().invoke(main, ["bench", *args], catch_exceptions=False)


def _measured_or_reason(row: dict) -> None:
    if row["status"] == "ok":
        assert row["n"] > 0 and all(row[k] is not None for k in STAT_KEYS), row
        assert row["min_ms"] <= row["median_ms"] <= row["p90_ms"] <= row["p99_ms"] <= row["max_ms"], row
    else:
        assert row["status"].startswith("not available: ") and len(row["status"]) > len("not available: ") + 3, row
        assert row["n"] == 0 and all(row[k] is None for k in STAT_KEYS), row


def test_bench_quick_on_lean(tmp_path):
    if not (image_root("lean").parent / "manifest.json").is_file():
        pytest.skip("the lean image is not built (sandboxlite rootfs build lean)")
    out, chart = tmp_path / "bench.json", tmp_path / "bench.png"
    # 2 rounds: with Docker and podman present, each round costs about 3 s of container starts
    r = run("--quick", "--rounds", "2", "--rootfs", "lean", "--json", str(out), "--chart", str(chart),
            "--concurrency", "2", "--density", "3")  # fmt: skip
    assert r.exit_code == 0, r.output[-4000:]
    doc = json.loads(out.read_text())
    assert doc["schema"] == SCHEMA == "sandboxlite.bench/2"
    assert {"schema", "created", "command", "machine", "params", "first_sandbox", "runtimes", "results", "ratios",
            "throughput", "density", "agent", "profile", "targets", "leak_check", "samples"} <= set(doc)  # fmt: skip
    m = doc["machine"]
    assert {"cpu_count", "cpu_model", "kernel", "python", "bwrap_version", "euid", "mem_total_mib", "cgroups",
            "load_avg_start", "load_avg_end"} <= set(m)  # fmt: skip
    assert doc["params"]["rootfs"] == "lean" and doc["params"]["quick"] is True

    # every baseline is there, with numbers or with the reason it could not run
    runtimes = {rt["name"]: rt for rt in doc["runtimes"]}
    assert set(runtimes) == BASELINES
    for rt in runtimes.values():
        assert rt["status"] == "ok" or (rt["status"].startswith("not available: ") and len(rt["status"]) > 20), rt
    for row in doc["results"]:
        _measured_or_reason(row)
    rows = {(x["metric"], x["runtime"]): x for x in doc["results"]}
    for metric in LATENCY_METRICS:
        assert rows[(metric, "sandboxlite")]["n"] > 0, metric
    for rt in ("raw_bwrap", "unshare", "posix_spawn", "docker", "podman", "runc"):
        assert (("cold_true", rt)) in rows  # measured, or "not available: REASON": never dropped
        if runtimes[rt]["status"] != "ok":
            assert rows[("cold_true", rt)]["status"] == runtimes[rt]["status"]
    assert rows[("cold_numpy", "raw_bwrap")]["n"] > 0  # the same rootfs: the image's numpy
    # sandlock (the [sandlock] extra, installed by setup): measured, its missing isolation said
    assert runtimes["sandlock"]["status"] == "ok" and rows[("cold_true", "sandlock")]["n"] > 0
    assert rows[("exec_true", "sandlock")]["n"] > 0 and "confined /bin/sh" in runtimes["sandlock"]["exec"]
    assert rows[("agent_episode", "sandlock")]["n"] > 0  # over SandlockBox
    assert any("no user namespace" in x for x in runtimes["sandlock"]["isolation_lacks"])
    assert "note: sandlock's isolation:" in r.output
    assert rows[("write_1MiB", "host")]["mb_per_s"] > 0 and rows[("read_1MiB", "sandboxlite")]["mb_per_s"] > 0
    for metric in ("agent_episode", "agent_step"):
        assert rows[(metric, "sandboxlite")]["n"] > 0 and rows[(metric, "sandboxlite_pool")]["n"] > 0
    ratio = {(x["metric"], x["baseline"]): x for x in doc["ratios"]}
    assert ratio[("cold_true", "raw_bwrap")]["ratio"] > 0 and ratio[("cold_true", "raw_bwrap")]["speedup"] > 0

    tp = [x for x in doc["throughput"] if x["runtime"] == "sandboxlite"]
    assert [x["concurrency"] for x in tp] == [2] and tp[0]["cycles_per_s"] > 0
    assert {x["runtime"] for x in doc["throughput"]} >= {"sandboxlite", "raw_bwrap", "docker", "runc"}
    for x in doc["throughput"] + doc["density"]:
        assert x["status"] == "ok" or x["status"].startswith(("not available: ", "errors: ")), x
    (d,) = [x for x in doc["density"] if x["runtime"] == "sandboxlite"]
    assert d["n"] == d["alive"] == 3 and d["pss_mib_median"] > 0
    assert doc["profile"]["phases_median_ms"] and doc["profile"]["cpu"]["python_cpu_ms_per_cycle"] > 0
    assert doc["agent"]["detail"]["steps_per_episode"] == 20
    assert {t["key"] for t in doc["targets"]} >= {"cold_true", "cold_vs_docker", "warm_true", "reset", "throughput",
                                                  "density_pss", "density_n", "agent"}  # fmt: skip
    assert doc["leak_check"]["problems"] == []
    assert doc["samples"]["cold_true/sandboxlite"]
    for word in ("cold_true", "throughput", "density", "targets", "where the time goes"):
        assert word in r.output
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert CHART_SKIPPED in r.output
    else:
        assert chart.stat().st_size > 1000 and chart.read_bytes()[:4] == b"\x89PNG"


def test_unavailable_baselines_carry_a_reason(tmp_path):
    out = tmp_path / "b.json"
    r = run("--quick", "--rootfs", "host", "--only", "cold_true", "--baselines", "docker,podman,runc", "--rounds", "2",
            "--no-chart", "--json", str(out))  # fmt: skip
    assert r.exit_code == 0, r.output[-3000:]
    doc = json.loads(out.read_text())
    rows = {x["runtime"]: x for x in doc["results"]}
    assert set(rows) == {"sandboxlite", "docker", "podman", "runc"}
    for name in ("docker", "podman", "runc"):
        # the host rootfs is no image a container engine could run: said, not dropped
        assert rows[name]["status"].startswith("not available: ") and rows[name]["n"] == 0, rows[name]
        assert f"{name:<16} not available: " in r.output
    assert rows["sandboxlite"]["n"] == 2


def test_bad_options_are_usage_errors():
    assert run("--only", "nonsense").exit_code == 2
    assert run("--baselines", "vmware").exit_code == 2
    assert run("--concurrency", "a,b").exit_code == 2


def test_chart_skipped_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert draw_chart({"results": []}, tmp_path / "c.png") == CHART_SKIPPED
    assert not (tmp_path / "c.png").exists()
