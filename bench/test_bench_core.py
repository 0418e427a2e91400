"""pytest-benchmark versions of the metrics (see ``sandboxlite bench`` for the full, interleaved run).

    .venv/bin/python -m pytest bench/ -q                                  # every runtime it can run
    SANDBOXLITE_BENCH_ROOTFS=lean .venv/bin/python -m pytest bench/ -q    # over another rootfs
    .venv/bin/python -m pytest bench/ -q --benchmark-group-by=group       # one table per metric

Rounds are kept modest so the file takes well under a minute without Docker.  These use
pytest-benchmark's timing (one runtime after the other, not interleaved); for the numbers that go
into a report, use ``sandboxlite bench``.  A baseline that cannot run here is skipped with its reason
(docker needs ``sudo bench/setup_docker.sh``).
"""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("pytest_benchmark")

from sandboxlite import Sandbox, SandboxPool
from sandboxlite.bench import baselines as bl
from sandboxlite.bench.core import COLD_COMMANDS, TRUE_CMD
from sandboxlite.errors import SetupError

ROOTFS = os.environ.get("SANDBOXLITE_BENCH_ROOTFS", "auto")
COLD_RUNTIMES = ["sandboxlite", "raw_bwrap", "unshare", "posix_spawn", "docker", "podman", "runc"]


@pytest.fixture(scope="module")
def sb():
    try:
        box = Sandbox(rootfs=ROOTFS)
    except SetupError as e:  # no bwrap / user namespaces here: nothing to measure
        pytest.skip(f"sandboxlite cannot start a sandbox here: {e}")
    yield box
    box.close()


@pytest.fixture(scope="module")
def runtimes(sb):
    from sandboxlite import images as rootfs

    plan = sb.rootfs_plan
    ctx = bl.Context(rootfs=plan.name, plan=rootfs.resolve(plan.name), cgroups="auto", log=lambda _: None)
    made = bl.make_runtimes([n for n in COLD_RUNTIMES if n != "sandboxlite"], ctx)
    yield made
    for rt in made.values():
        rt.cleanup()
    shutil.rmtree(ctx.scratch, ignore_errors=True)


def _runtime(runtimes, name):
    rt = runtimes[name]
    if rt.reason:
        pytest.skip(f"{name} not available: {rt.reason}")
    return rt


def _sl_cold(cmd):
    def run() -> int:
        with Sandbox(rootfs=ROOTFS) as box:
            return box.exec(cmd).exit_code

    return run


@pytest.mark.parametrize("runtime", COLD_RUNTIMES)
@pytest.mark.parametrize("metric", list(COLD_COMMANDS))
def test_cold(benchmark, runtimes, metric, runtime):
    """Create -> first command finished (sandboxlite: close included here, unlike `sandboxlite bench`)."""
    benchmark.group = metric
    cmd = COLD_COMMANDS[metric]
    if runtime == "sandboxlite":
        assert benchmark.pedantic(_sl_cold(cmd), rounds=15, iterations=1, warmup_rounds=2) == 0
        return
    try:
        fn = _runtime(runtimes, runtime).cold(cmd)
        fn()  # probe (the host python3 may have no numpy)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"{runtime} cannot run {cmd}: {e}")
    heavy = runtime in ("docker", "podman")
    benchmark.pedantic(fn, rounds=5 if heavy else 15, iterations=1, warmup_rounds=1)


def test_exec_round_trip(benchmark, sb):
    """exec(['/bin/true']) in a live sandbox."""
    benchmark.group = "exec_true"
    res = benchmark.pedantic(sb.exec, args=(TRUE_CMD,), rounds=100, iterations=1, warmup_rounds=5)
    assert res.exit_code == 0


@pytest.mark.parametrize("runtime", ["docker", "podman", "runc"])
def test_exec_round_trip_container(benchmark, runtimes, runtime):
    """`exec` of /bin/true in a running container."""
    benchmark.group = "exec_true"
    live = _runtime(runtimes, runtime).live()
    try:
        benchmark.pedantic(live.exec(TRUE_CMD), rounds=10, iterations=1, warmup_rounds=1)
    finally:
        live.close()


def test_warm_acquire_exec(benchmark):
    """SandboxPool.acquire() -> first exec finished (the release, which resets, is outside the timing)."""
    benchmark.group = "warm_true"
    with SandboxPool(size=2, rootfs=ROOTFS) as pool:
        held = []

        def setup():
            while held:
                pool.release(held.pop())

        def run():
            box = pool.acquire()
            held.append(box)
            return box.exec(TRUE_CMD).exit_code

        assert benchmark.pedantic(run, setup=setup, rounds=50, iterations=1, warmup_rounds=2) == 0
        setup()


def test_reset(benchmark, sb):
    """reset() of a live sandbox (kill everything, rebuild the writable layers in place)."""
    benchmark.group = "reset"
    benchmark.pedantic(sb.reset, rounds=20, iterations=1, warmup_rounds=2)
    assert sb.exec(TRUE_CMD).exit_code == 0


@pytest.mark.parametrize("size", [4 << 10, 1 << 20, 64 << 20], ids=["4KiB", "1MiB", "64MiB"])
@pytest.mark.parametrize("op", ["write_file", "read_file"])
def test_file_api(benchmark, sb, op, size):
    benchmark.group = f"{op} {size} B"
    data = os.urandom(size)
    sb.write_file("/testbed/bench.bin", data)
    rounds = 5 if size >= 64 << 20 else 30
    if op == "write_file":
        benchmark.pedantic(sb.write_file, args=("/testbed/bench.bin", data), rounds=rounds, iterations=1)
    else:
        assert len(benchmark.pedantic(sb.read_file, args=("/testbed/bench.bin",), rounds=rounds, iterations=1)) == size


def test_agent_episode(benchmark, tmp_path):
    """run_task with ScriptedModel(steps=20) in a fresh sandbox (the scripted model takes ~no time)."""
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.scripted import ScriptedModel
    from sandboxlite.agent.task import Task

    benchmark.group = "agent_episode"
    model = ScriptedModel(steps=20)
    task = Task(id="bench", query="6*7?", rootfs=ROOTFS, max_steps=20)
    counter = iter(range(10_000))
    res = benchmark.pedantic(lambda: run_task(task, model, output_dir=tmp_path / str(next(counter))),
                             rounds=5, iterations=1, warmup_rounds=1)  # fmt: skip
    assert res.submitted and res.steps == 20
