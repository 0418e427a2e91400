"""verl's integration tests (tests/verl/cases_verl.py), run in the virtualenv tools/setup.sh makes for verl,
``.venv-verl``: verl 0.9's hydra-core pins the antlr4 runtime at 4.9, and the eval extra's math-verify parses
LaTeX with 4.13 (4.9 scores some answers differently), so the two cannot share ``.venv``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv-verl" / "bin" / "python"
CASES = ROOT / "tests" / "verl" / "cases_verl.py"


def test_verl_integration():
    if not PYTHON.exists():
        pytest.fail(f"{PYTHON} is missing: tools/setup.sh makes it (the [verl] extra in a virtualenv of its own)")
    p = subprocess.run([str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", str(CASES)],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)  # fmt: skip
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    m = re.search(r"(\d+) passed", p.stdout)
    assert m and int(m.group(1)) >= 4 and "failed" not in p.stdout and "skipped" not in p.stdout, p.stdout[-2000:]
