"""Harbor (PyPI harbor 0.26) on the sandboxlite backend, for real: `harbor run` with its oracle agent
over the tasks in tests/harbor/tasks (a plain one, one with a network allowlist, a multi-stage build)
scores 1.0 on each, its nop agent (a solution that does nothing) 0.0; and the environment's own
cases (tests/harbor/cases.py) through Harbor's interface.  Harbor needs Python >= 3.12: both run in
the Harbor runner (tools/harbor/run: Debian 13's Python over this host, an image tools/setup.sh builds)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tools" / "harbor" / "run"
TASKS = ROOT / "tests" / "harbor" / "tasks"
IMPORT_PATH = "sandboxlite.harbor:SandboxliteEnvironment"


def runner(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    if os.geteuid() != 0:
        pytest.fail("the Harbor runner needs root (tools/harbor/run mounts its root): run the tests as root, as CI does")
    return subprocess.run([str(RUN), *argv], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def trials(jobs: Path, job: str) -> dict[str, dict]:
    out = {}
    for d in sorted((jobs / job).iterdir()):
        if (d / "result.json").is_file() and d.is_dir():
            r = json.loads((d / "result.json").read_text())
            out[r["task_name"]] = r
    return out


@pytest.mark.parametrize("agent, reward", [("oracle", 1.0), ("nop", 0.0)])
def test_harbor_run_on_the_sandboxlite_backend(tmp_path, agent, reward):
    jobs = tmp_path / "jobs"
    p = runner("harbor", "run", "-p", str(TASKS), "-a", agent, "-e", IMPORT_PATH, "-n", "3", "-o", str(jobs),
               "--job-name", agent)  # fmt: skip
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    got = trials(jobs, agent)
    assert sorted(got) == sorted(t.name for t in TASKS.iterdir() if (t / "task.toml").is_file())
    for name, r in got.items():
        assert r.get("exception_info") is None, (name, r["exception_info"])
        assert r["verifier_result"]["rewards"] == {"reward": reward}, (name, r["verifier_result"])


def test_the_environment_through_harbors_interface():
    p = runner("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/harbor/cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    m = re.search(r"(\d+) passed", p.stdout)
    assert m and int(m.group(1)) >= 6 and "failed" not in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]


def test_trls_harbor_integration_on_sandboxlite():
    """TRL's HarborSpec/HarborEnv (trl.experimental.harbor) with sandboxlite.harbor.trl's harness."""
    p = runner("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/harbor/trl_cases.py")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    m = re.search(r"(\d+) passed", p.stdout)
    assert m and int(m.group(1)) >= 7 and "failed" not in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]
