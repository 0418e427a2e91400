"""examples/rl_loop.py: the scripted policy end to end (fast), and the local model at least starts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "rl_loop.py"


def run(tmp_path, *args, timeout=120):
    out = tmp_path / "rl.json"
    r = subprocess.run([sys.executable, str(EXAMPLE), *args, "--rootfs", "host", "--json", str(out)],
                       capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout, json.loads(out.read_text())


def test_scripted_rl_loop(tmp_path):
    stdout, data = run(tmp_path, "--policy", "scripted", "--iterations", "4", "--group-size", "4")
    its = data["iterations"]
    assert [it["iteration"] for it in its] == [1, 2, 3, 4] and data["group_size"] == 4
    for it in its:
        assert [g["task"] for g in it["groups"]] == ["mul", "add", "pow"]
        for g in it["groups"]:
            assert len(g["rewards"]) == 4 and abs(sum(g["advantages"])) < 1e-6
            for t in g["trajectories"]:
                assert t["error"] is None and t["exit_reason"] == "submitted" and t["turns"] == 3
                # computing gives the reference answer (reward 1 - 3 step penalties), guessing does not
                assert t["task_reward"] == (1.0 if t["answer"].strip() == {"mul": "391", "add": "6912", "pow": "1000"}[g["task"]] else 0.0)
                assert t["reward"] == pytest.approx(t["task_reward"] - 0.03)
    # the advantages push the policy towards computing: p(compute) and the mean reward go up
    assert its[-1]["p_compute"] > its[0]["p_compute"] == 0.5
    assert its[-1]["mean_reward"] >= its[0]["mean_reward"]
    assert "advantages [" in stdout and "p(compute)=0.500" in stdout
    again = run(tmp_path, "--policy", "scripted", "--iterations", "4", "--group-size", "4")[1]
    assert again["iterations"][-1]["groups"] == its[-1]["groups"]  # deterministic


@pytest.mark.local_model
def test_local_model_rl_loop_starts(tmp_path):
    pytest.importorskip("llama_cpp", reason="the [local] extra is not installed (tools/setup.sh installs it)")
    stdout, data = run(tmp_path, "--policy", "local", "--group-size", "1", "--iterations", "1", "--tasks", "1",
                       "--max-steps", "1", timeout=300)  # fmt: skip
    (it,) = data["iterations"]
    (g,) = it["groups"]
    (t,) = g["trajectories"]
    assert t["error"] is None and t["turns"] == 1 and g["advantages"] == [0.0]
    assert t["exit_reason"] == "submitted" or t["exit_reason"].startswith("limits exceeded")
    assert "loading the embedded local model" in stdout and "rewards [" in stdout
