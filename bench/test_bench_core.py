"""pytest-benchmark versions of the core metrics (see bench/core.py for the full, interleaved run).

    .venv/bin/python -m pytest bench/ -q

Rounds are kept modest so the whole file takes a few seconds.  These use
pytest-benchmark's timing (no baselines, no interleaving); for the numbers that
go into a report, use ``bench/core.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_benchmark")

from sandboxlite import Sandbox  # noqa: E402
from sandboxlite.errors import SetupError  # noqa: E402

ROOTFS = "host"
TRUE = ["/bin/true"]


@pytest.fixture(scope="module")
def sb():
    try:
        box = Sandbox(rootfs=ROOTFS)
    except SetupError as e:  # no bwrap / user namespaces here: nothing to measure
        pytest.skip(f"sandboxlite cannot start a sandbox here: {e}")
    yield box
    box.close()


def _cold_true() -> int:
    box = Sandbox(rootfs=ROOTFS)
    try:
        return box.exec(TRUE).exit_code
    finally:
        box.close()


def test_cold_create_exec_close(benchmark, sb):
    """Sandbox() -> exec(['/bin/true']) -> close() (close included here, unlike core.py's cold_true)."""
    codes = benchmark.pedantic(_cold_true, rounds=20, iterations=1, warmup_rounds=2)
    assert codes == 0


def test_exec_round_trip(benchmark, sb):
    """exec(['/bin/true']) in a live sandbox."""
    res = benchmark.pedantic(sb.exec, args=(TRUE,), rounds=100, iterations=1, warmup_rounds=5)
    assert res.exit_code == 0


def test_reset(benchmark, sb):
    """reset() of a live sandbox (kill everything, start a fresh jail)."""
    benchmark.pedantic(sb.reset, rounds=20, iterations=1, warmup_rounds=2)
    assert sb.exec(TRUE).exit_code == 0
