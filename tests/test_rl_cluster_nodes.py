"""Rollouts on a simulated two-node Ray cluster (ray.cluster_utils: real raylets, real sandboxes)
whose nodes keep their snapshots apart, as separate machines do."""

from __future__ import annotations

import os

from sandboxlite.rl.cluster import RayRollouts

from .test_rl_cluster import _cheat_then_dirty, _prepare, _tasks


def test_groups_over_two_nodes_ship_the_prepared_state(tmp_path) -> None:
    """A simulated two-node cluster whose nodes keep snapshots apart: the actor on the node that did
    not prepare a task imports its shipped export before its first episode of the group."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    saved = os.environ.get("SANDBOXLITE_SNAPSHOTS")
    cluster = None
    try:
        os.environ["SANDBOXLITE_SNAPSHOTS"] = str(tmp_path / "head")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        os.environ["SANDBOXLITE_SNAPSHOTS"] = str(tmp_path / "worker")  # the worker node's processes get this
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        with RayRollouts(rootfs="lean", sandboxes_per_actor=2) as rollouts:
            assert len(rollouts.actors) == 2
            groups = rollouts.run_groups(policy_factory=_cheat_then_dirty, tasks=_tasks(2), group_size=4,
                                         prepare=_prepare)  # fmt: skip
            info = rollouts.info()
        for g in groups:
            assert [t.task_reward for t in g.trajectories] == [1.0] * 4, [t.error for t in g.trajectories]
        assert len({t.node_id for g in groups for t in g.trajectories}) == 2
        assert sum(i["snapshots_imported"] for i in info.values()) >= 1
        for node in ("head", "worker"):  # removed on both nodes at the end
            assert not list((tmp_path / node / "layers").iterdir()), node
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        if saved is None:
            os.environ.pop("SANDBOXLITE_SNAPSHOTS", None)
        else:
            os.environ["SANDBOXLITE_SNAPSHOTS"] = saved
