"""bench/core.py (a wrapper of `sandboxlite bench --only core`) runs in quick mode and writes its JSON:
the bench code never rots.

Timing numbers are not asserted here (performance claims live in bench/, not in tests).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_bench_demo_runs_counts_answered_and_right(tmp_path):
    """bench/demo_runs.py with the scripted model (it writes \\boxed{0}): answered, and right only
    where the ground truth is that answer."""
    task = json.loads((ROOT / "examples" / "demo_004.json").read_text())
    task.update(id="zero", metadata={**task["metadata"], "ground_truth": "\\boxed{0}"})
    (tmp_path / "zero.json").write_text(json.dumps(task))
    out = tmp_path / "demo.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "demo_runs.py"), "--model", "scripted", "--runs", "2",
                        "--tasks", str(ROOT / "examples" / "demo_004.json"), str(tmp_path / "zero.json"),
                        "--json", str(out)], capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["schema"] == "sandboxlite.bench.demo/1" and data["runs_per_task"] == 2
    rows = {t["task"]: t for t in data["tasks"]}
    assert rows["demo_004"]["answered"] == 1.0 and rows["demo_004"]["right"] == 0.0  # 0 is not 42
    assert rows["zero"]["answered"] == rows["zero"]["right"] == 1.0
    assert "demo_004" in r.stdout and "answered" in r.stdout


def test_the_sandlock_baseline_runs_confined_over_the_image(tmp_path):
    """PyPI sandlock (the [sandlock] extra) over the science image: commands run, the image stays
    read-only, writes land in the baseline's scratch directory, and what it lacks is measured."""
    from sandboxlite import images as rootfs_mod
    from sandboxlite.bench.baselines import Context, make_runtimes

    ctx = Context(rootfs="science", plan=rootfs_mod.resolve("science"), cgroups="auto", log=lambda m: None,
                  scratch=tmp_path)
    rt = make_runtimes(["sandlock"], ctx)["sandlock"]
    assert rt.reason is None, rt.reason
    try:
        assert rt.cold(["/bin/true"])() > 0
        r = rt.mod.Sandbox(**rt.kwargs).run(["/bin/sh", "-c", "echo x > /tmp/w && touch /etc/w; echo $?"], timeout=30)
        assert r.stdout.strip().endswith(b"1") and (rt.scratch / "w").read_text() == "x\n"
        assert not os.path.exists(os.path.join(ctx.image_dir, "etc", "w"))
        lacks = " ".join(rt.info["isolation_lacks"])
        assert "host uid" in lacks and "namespace" in lacks and "copy-on-write" in lacks
        with pytest.raises(RuntimeError, match="sandlock run exited"):
            rt.cold(["/bin/false"])()
        live = rt.live()  # exec: commands written to one confined shell, which keeps its state
        try:
            assert live.exec(["/bin/true"])() > 0 and live.exec(["/bin/sh", "-c", "echo k > /tmp/live"])() > 0
            assert (rt.scratch / "live").read_text() == "k\n"
            with pytest.raises(RuntimeError, match="exited"):
                live.exec(["/bin/false"])()
        finally:
            live.close()
    finally:
        rt.cleanup()


def test_an_agent_episode_over_sandlock(tmp_path):
    """The bench's sandlock agent episode (SandlockBox): the scripted model's run submits the right
    answer through sandlock's shell and the host-side file operations; a symlink a command made is
    refused, never followed onto the host; a command that runs out of time ends its session."""
    from sandboxlite import images as rootfs_mod
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.scripted import ScriptedModel
    from sandboxlite.agent.task import Task
    from sandboxlite.bench.baselines import Context, make_runtimes
    from sandboxlite.errors import SandboxFileError

    ctx = Context(rootfs="science", plan=rootfs_mod.resolve("science"), cgroups="auto", log=lambda m: None,
                  scratch=tmp_path)
    rt = make_runtimes(["sandlock"], ctx)["sandlock"]
    assert rt.reason is None, rt.reason
    secret = tmp_path / "host-secret"
    secret.write_text("host only\n")
    try:
        with rt.box() as box:
            res = run_task(Task(id="t", query="Compute 6*7.", max_steps=6), ScriptedModel("42", steps=4),
                           output_dir=tmp_path / "out", sandbox=box)  # fmt: skip
            assert res.submitted and res.answer.strip() == "42", res.exit_reason
            assert (tmp_path / "out" / "answer.txt").read_text().strip() == "42"
            sh = box.shell()
            r = sh.run(f"cd /tmp && ln -s {secret} /testbed/link && echo made; echo err >&2; false")
            assert (r.exit_code, r.stdout, r.stderr, sh.cwd) == (1, b"made\n", b"err\n", "/tmp")
            with pytest.raises(SandboxFileError):
                box.read_file("/testbed/link")
            with pytest.raises(SandboxFileError):
                box.write_file("/etc/passwd", "x")
            t = sh.run("sleep 30", timeout=0.5)
            assert t.timed_out and t.exit_code == 124
            assert sh.run("echo again").stdout == b"again\n" and sh.cwd == "/testbed"  # a new session
        assert not box.root.exists()
    finally:
        rt.cleanup()


def test_sandlock_shell_output_is_capped_as_it_comes(tmp_path):
    """SandlockShell keeps at most the cap (and the end line) of a command's output while it reads,
    as the Sandbox's shell does: 20 MB printed costs no 20 MB buffer."""
    import tracemalloc

    from sandboxlite import images as rootfs_mod
    from sandboxlite.bench.baselines import Context, make_runtimes

    ctx = Context(rootfs="science", plan=rootfs_mod.resolve("science"), cgroups="auto", log=lambda m: None,
                  scratch=tmp_path)
    rt = make_runtimes(["sandlock"], ctx)["sandlock"]
    assert rt.reason is None, rt.reason
    try:
        with rt.box() as box:
            sh = box.shell()
            cap = box.config.limits.output_bytes
            tracemalloc.start()
            try:
                r = sh.run("yes xxxxxxx | head -c 20000000; echo tail >&2; cd /tmp; (exit 3)")
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert (r.exit_code, r.truncated, len(r.stdout), r.stderr, sh.cwd) == (3, True, cap, b"tail\n", "/tmp")
            assert r.stdout == (b"xxxxxxx\n" * (cap // 8 + 1))[:cap]
            assert peak < 4 * cap + (4 << 20), f"{peak >> 20} MB held for 20 MB of output"
    finally:
        rt.cleanup()
