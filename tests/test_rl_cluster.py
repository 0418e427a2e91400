"""Rollouts on a local Ray cluster (real actors, real sandboxes), including an actor killed mid-run."""

from __future__ import annotations

import time

import psutil
import pytest

from sandboxlite.agent.scripted import ScriptedModel
from sandboxlite.images import manage
from sandboxlite.rl.cluster import RayRollouts, ensure_image


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _tasks(n: int) -> list[dict]:
    return [{"id": f"add{i}", "query": f"What is {i} + {i}?", "metadata": {"answer": str(2 * i)}, "max_steps": 8}
            for i in range(n)]  # fmt: skip


def _factory(task, sample, seed):
    """Even samples answer right; every episode sleeps a little so episodes overlap."""
    i = int(task.id[3:])

    class Slow(ScriptedModel):
        def complete(self, messages, tools):
            time.sleep(0.05)
            return super().complete(messages, tools)

    return Slow(str(2 * i) if sample % 2 == 0 else "wrong", steps=4)


def test_groups_over_actors_match_the_in_process_shape(local_ray) -> None:
    with RayRollouts(rootfs="lean", sandboxes_per_actor=4, actors_per_node=2) as cluster:
        groups = cluster.run_groups(policy_factory=_factory, tasks=_tasks(3), group_size=4)
        info = cluster.info()
    assert len(groups) == 3 and cluster.stats.episodes == 12 and cluster.stats.retried == 0
    for g in groups:
        assert [t.error for t in g.trajectories] == [None] * 4
        assert [t.task_reward for t in g.trajectories] == [1.0, 0.0, 1.0, 0.0]
        assert g.advantages[0] > 0 > g.advantages[1]
        assert {t.attempts for t in g.trajectories} == {1}
    assert sum(i["episodes"] for i in info.values()) == 12
    assert all(i["episodes"] > 0 for i in info.values())  # both actors got work


def test_killed_actor_episodes_are_retried_once_each(local_ray) -> None:
    cluster = RayRollouts(rootfs="lean", sandboxes_per_actor=3, actors_per_node=2)
    victim_name, victim = next(iter(cluster.actors.items()))
    victim_pid = cluster.actor_info[victim_name]["pid"]
    import threading

    def kill_soon() -> None:
        time.sleep(0.4)  # episodes are in flight on both actors by now
        local_ray.kill(victim, no_restart=True)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    try:
        groups = cluster.run_groups(policy_factory=_factory, tasks=_tasks(6), group_size=4)
    finally:
        killer.join()
        cluster.close()
    trajs = [t for g in groups for t in g.trajectories]
    assert len(trajs) == 24 and all(t.error is None for t in trajs), [t.error for t in trajs if t.error]
    assert cluster.stats.actors_lost == [victim_name] and cluster.stats.retried > 0
    assert cluster.stats.episodes == 24  # each episode counted once
    assert sum(1 for t in trajs if t.attempts == 2) == cluster.stats.retried
    assert all(t.pid != victim_pid for t in trajs if t.attempts == 2)  # retried elsewhere
    assert [t.task_reward for t in groups[0].trajectories] == [1.0, 0.0, 1.0, 0.0]
    # the killed actor's sandboxes died with it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        orphans = [p for p in psutil.process_iter(["ppid", "name"]) if p.info["ppid"] == victim_pid]
        if not psutil.pid_exists(victim_pid) and not orphans:
            break
        time.sleep(0.1)
    assert not psutil.pid_exists(victim_pid)


def test_ship_image_imports_only_when_missing(tmp_path) -> None:
    lean = next(i for i in manage.list_images() if i.name == "lean")
    digest = lean.manifest["digest"]
    assert ensure_image("lean", digest, None) is False  # present: nothing to do, nothing shipped
    data = manage.export("lean", tmp_path / "lean.tar.zst").read_bytes()
    try:
        assert ensure_image("lean-shipped", digest, data) is True
        assert ensure_image("lean-shipped", digest, None) is False
        assert manage.verify("lean-shipped").ok
    finally:
        manage.remove("lean-shipped")
    from sandboxlite.errors import SetupError

    with pytest.raises(SetupError, match="was not shipped"):
        ensure_image("lean-missing", digest, None)


def test_ship_image_through_the_object_store(local_ray) -> None:
    with RayRollouts(rootfs="lean", sandboxes_per_actor=1, ship_image=True) as cluster:
        groups = cluster.run_groups(policy_factory=_factory, tasks=_tasks(1), group_size=2)
        assert [i["imported"] for i in cluster.actor_info.values()] == [False]  # same node: already there
    assert [t.task_reward for t in groups[0].trajectories] == [1.0, 0.0]


def test_ray_overhead_bench_quick(tmp_path) -> None:
    """bench/rl_ray.py --quick runs (its own Ray instance) and writes its JSON."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "rl-ray.json"
    script = Path(__file__).resolve().parents[1] / "bench" / "rl_ray.py"
    r = subprocess.run([sys.executable, str(script), "--quick", "--json", str(out)], capture_output=True, text=True,
                       timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "sandboxlite.bench.rl_ray/1"
    assert len(doc["per_episode_ms"]["ray"]["samples"]) == 2 and doc["per_episode_ms"]["in_process"]["p50"] > 0


# -- prepared states (snapshots) ---------------------------------------------------------------------
def _prepare(sb, task):
    sb.exec(f"echo {task.metadata['answer']} > /testbed/prepared; echo {task.id} > /tmp/mark")


def _cheat_then_dirty(task, sample, seed):
    """Answers what the preparation left, then spoils it for any episode after it in the same sandbox."""
    from sandboxlite.agent.model import FakeModel

    return FakeModel([{"tool": "execute_bash", "arguments": {"command": "cat /testbed/prepared > /testbed/output/"
                                                                         "answer.txt; echo spoiled > /testbed/prepared"}},
                      {"tool": "submit", "arguments": {}}])  # fmt: skip


def _no_wheel(sb):
    raise RuntimeError("no wheel here")


def test_groups_over_actors_start_from_a_prepared_state(local_ray) -> None:
    from sandboxlite.jail.host import default_host

    with RayRollouts(rootfs="lean", sandboxes_per_actor=2, actors_per_node=2) as cluster:
        groups = cluster.run_groups(policy_factory=_cheat_then_dirty, tasks=_tasks(3), group_size=4, prepare=_prepare)
        info = cluster.info()
    for g in groups:
        assert [t.task_reward for t in g.trajectories] == [1.0] * 4, [t.error for t in g.trajectories]
        assert g.snapshot is not None and g.prepare_s > 0
    assert len({g.snapshot for g in groups}) == 3
    assert len({t.pid for g in groups for t in g.trajectories}) == 2  # both actors ran episodes of them
    assert sum(i["snapshots_imported"] for i in info.values()) == 0  # one node: one store, nothing shipped
    names = {s.name for s in default_host().snapshot_store().list()}
    assert not names & {g.snapshot for g in groups}  # removed at the end


def test_a_failing_preparation_is_recorded_over_actors(local_ray) -> None:
    with RayRollouts(rootfs="lean", sandboxes_per_actor=2) as cluster:
        (g,) = cluster.run_groups(policy_factory=_factory, tasks=_tasks(1), group_size=2, prepare=_no_wheel)
    assert [t.error for t in g.trajectories] == ["prepare failed: RuntimeError: no wheel here"] * 2
    assert g.snapshot is None and cluster.stats.episodes == 0


def test_ensure_snapshot_imports_a_shipped_export_once(tmp_path) -> None:
    from sandboxlite import Sandbox
    from sandboxlite.errors import SnapshotError
    from sandboxlite.rl.cluster import ensure_snapshot
    from sandboxlite.state.archive import export
    from sandboxlite.state.snapshot import Store

    with Sandbox(rootfs="lean") as sb:
        sb.exec("echo shipped > /testbed/s")
        snap = sb.snapshot()
        sb.exec("echo other > /testbed/s")
        other = sb.snapshot()
    try:
        data = export(snap, tmp_path / "s.tar.zst").read_bytes()
        elsewhere = Store(tmp_path / "node2")  # another node's store
        with pytest.raises(SnapshotError, match="not shipped"):
            ensure_snapshot(elsewhere, snap.name, None)
        got, imported = ensure_snapshot(elsewhere, snap.name, data)
        assert imported and got.name == snap.name
        assert (tmp_path / "node2" / "layers" / snap.name / "testbed" / "s").read_text() == "shipped\n"
        assert ensure_snapshot(elsewhere, snap.name, None) == (elsewhere.meta(snap.name), False)
        with pytest.raises(SnapshotError, match="expected"):  # an export of another state under this name
            ensure_snapshot(Store(tmp_path / "node3"), snap.name, export(other, tmp_path / "o.tar.zst").read_bytes())
    finally:
        for s in (other, snap):
            s.store.remove(s.name)



def test_a_prepare_that_is_no_function_is_refused_over_actors(local_ray) -> None:
    from sandboxlite.errors import ConfigError

    with RayRollouts(rootfs="lean", sandboxes_per_actor=1) as cluster:
        with pytest.raises(ConfigError, match="prepare"):
            cluster.run_groups(policy_factory=_factory, tasks=_tasks(1), group_size=2, prepare=["not", "callable"])
        assert cluster.stats.episodes == 0
