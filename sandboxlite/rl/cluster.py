"""Rollouts on a Ray cluster: one pool actor per node, a client that spreads episodes over them.

    import ray
    from sandboxlite.rl.cluster import RayRollouts

    ray.init(address="auto")                                   # or a local cluster: ray.init()
    with RayRollouts(sandboxes_per_actor=32, rootfs="science", ship_image=True) as cluster:
        groups = cluster.run_groups(policy, tasks, group_size=8)   # the same Groups as rl.run_groups

- Every alive node gets ``actors_per_node`` ``PoolActor``s (pinned with a node-affinity strategy),
  each holding a ``SandboxPool`` of ``sandboxes_per_actor`` warm sandboxes and running that many
  episodes at once (a threaded actor).
- ``ship_image=True`` exports the client's rootfs image once, puts it in Ray's object store, and
  every actor whose node lacks that image (same name and digest) imports it before its pool starts.
- An actor that dies (its node lost, ``ray.kill``, an OOM kill) takes its in-flight episodes with
  it: they are sent again to a live actor, up to ``max_attempts`` times in all; each episode is
  counted once (results are keyed by episode, ``Trajectory.attempts`` says how many runs it took).
  The sandboxes of a dead actor die with its process (the jail is tied to its parent).
- The policy (a model object, a function, or ``policy_factory``) is pickled to the actors, so on a
  real cluster it should call an inference server rather than hold weights.
- ``run_groups(..., prepare=fn)``: ``fn(sandbox)`` (or ``fn(sandbox, task)``) runs once per task on
  one actor, which snapshots the state; the group's episodes start from that snapshot wherever they
  run.  When the actors span several nodes the snapshot is exported once (a .tar.zst in the object
  store) and an actor on another node imports it (checked: content names, no devices, no setuid)
  before its first episode of the group.  The snapshots are removed at the end unless
  ``keep_snapshots=True``.

Ray is an optional dependency (the ``[ray]`` extra); importing this module does not need it,
creating a ``RayRollouts`` does.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..agent.task import Task
from ..config import SandboxConfig
from ..errors import ConfigError, SetupError, SnapshotError
from .env import as_task
from .rollouts import Group, Trajectory, Turn, check_prepare

log = logging.getLogger(__name__)

__all__ = ["RayRollouts", "PoolActor", "ensure_image", "ensure_snapshot", "ClusterStats"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SetupError("Ray is not installed", hint="pip install 'sandboxlite[ray]'") from None
    return ray


def ensure_image(name: str, digest: str, data: bytes | None) -> bool:
    """Make image ``name`` with ``digest`` available on this node; True when it had to be imported."""
    from ..images import manage

    for info in manage.list_images():
        if info.name == name and info.manifest.get("digest") == digest:
            return False
    if data is None:
        raise SetupError(f"image {name!r} ({digest}) is missing on this node and was not shipped",
                         hint="RayRollouts(..., ship_image=True)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sandboxlite-ship-") as tmp:
        archive = Path(tmp) / f"{name}.tar.zst"
        archive.write_bytes(data)
        info = manage.import_(archive, name, force=True)
    if info.manifest.get("digest") != digest:
        raise SetupError(f"the shipped image {name!r} has digest {info.manifest.get('digest')}, expected {digest}")
    return True


def ensure_snapshot(store: Any, name: str, data: bytes | None) -> tuple[Any, bool]:
    """Snapshot ``name`` in ``store`` (snapshot.Store): kept already, or imported from ``data`` (its
    export, a .tar.zst); (the Snapshot, whether it had to be imported).  SnapshotError when it is
    missing and ``data`` is None, or ``data`` is not snapshot ``name``."""
    from ..state.archive import import_

    try:
        return store.meta(name), False
    except SnapshotError:
        if data is None:
            raise SnapshotError(f"snapshot {name[:12]} is not on this node and was not shipped") from None
    with tempfile.TemporaryDirectory(prefix="sandboxlite-ship-") as tmp:
        archive = Path(tmp) / "snapshot.tar.zst"
        archive.write_bytes(data)
        snap = import_(store, archive)
    if snap.name != name:
        raise SnapshotError(f"the shipped snapshot is {snap.name[:12]}, expected {name[:12]}")
    return snap, True


class PoolActor:
    """One node's share of the work: a warm pool, episodes run on it (made a Ray actor by the client)."""

    def __init__(self, config: SandboxConfig, size: int, image: tuple[str, str, Any] | None = None) -> None:
        from ..jail.pool import SandboxPool

        self.imported = False
        if image is not None:
            name, digest, data = image
            self.imported = ensure_image(name, digest, data)
        self.pool = SandboxPool(config, size=size)
        self.episodes = 0
        self.snapshots_imported = 0
        self._snaps: dict[str, Any] = {}  # prepared or imported here: name -> Snapshot
        self._snap_lock = threading.Lock()  # (a threaded actor: two episodes may want one import)

    def prepare(self, prepare: Any, task: dict, ship: bool) -> tuple[dict, bytes | None]:
        """Run ``prepare`` for ``task`` in a pooled sandbox and snapshot it: ({"name", "prepare_s"} or
        {"error", "prepare_s"}, and with ``ship`` the snapshot's export for the other nodes)."""
        from ..state.archive import export
        from .rollouts import _prepared

        t0 = time.perf_counter()
        try:
            with self.pool.sandbox() as sb:
                snap = _prepared(prepare, sb, as_task(task))
        except Exception as e:  # recorded in the group's episodes
            return {"error": f"{type(e).__name__}: {e}", "prepare_s": time.perf_counter() - t0}, None
        meta = {"name": snap.name, "prepare_s": time.perf_counter() - t0}
        with self._snap_lock:
            self._snaps[snap.name] = snap
        if not ship:
            return meta, None
        with tempfile.TemporaryDirectory(prefix="sandboxlite-ship-") as tmp:
            return meta, export(snap, Path(tmp) / "snapshot.tar.zst").read_bytes()

    def _snapshot(self, name: str, shipped: list) -> Any:
        """Snapshot ``name`` on this node, imported from ``shipped`` ([an object ref of its export],
        fetched only when needed) the first time."""
        with self._snap_lock:
            if name in self._snaps:
                return self._snaps[name]
            from ..jail.host import default_host

            store = default_host().snapshot_store()  # (the pool's sandboxes run on the default host)
            try:
                snap = store.meta(name)
            except SnapshotError:
                data = _ray().get(shipped[0]) if shipped and shipped[0] is not None else None
                snap, _ = ensure_snapshot(store, name, data)
                self.snapshots_imported += 1
            self._snaps[name] = snap
            return snap

    def drop_snapshots(self, names: list[str]) -> list[str]:
        """Remove the snapshots ``names`` this actor prepared or imported; what could not be removed
        (still in use, or another actor of this node removed it first: not listed)."""
        left = []
        with self._snap_lock:
            for name in names:
                snap = self._snaps.pop(name, None)
                if snap is None:
                    continue
                try:
                    snap.store.remove(snap.name, missing_ok=True)  # (another actor of this node may have)
                except SnapshotError as e:
                    left.append(f"{name[:12]}: {e.message}")
        return left

    def run_episode(self, episode_id: str, policy: Any, task: dict, sample: int, seed: int | None,
                    env_options: dict, snapshot: tuple[str, list] | None = None) -> dict:  # fmt: skip
        from .rollouts import rollout

        t = as_task(task)
        if callable(policy) and getattr(policy, "_sandboxlite_factory", False):
            policy = policy(t, sample, seed)
        snap = self._snapshot(*snapshot) if snapshot is not None else None
        traj = rollout(policy, t, pool=self.pool, seed=seed, snapshot=snap, **env_options)
        traj.sample = sample
        self.episodes += 1
        out = traj.to_dict()
        out.update(episode_id=episode_id, pid=os.getpid(), node_id=_node_id())
        return out

    def info(self) -> dict:
        s = self.pool.stats
        return {"pid": os.getpid(), "node_id": _node_id(), "episodes": self.episodes, "imported": self.imported,
                "snapshots_imported": self.snapshots_imported, "acquires": s.acquires, "resets": s.resets,
                "replacements": s.replacements}  # fmt: skip

    def close(self) -> None:
        self.pool.close()


def _node_id() -> str | None:
    try:
        return _ray().get_runtime_context().get_node_id()
    except Exception:
        return None


class _Factory:
    """Marks a policy factory so the actor calls it per episode."""

    _sandboxlite_factory = True

    def __init__(self, fn: Callable[[Task, int, int | None], Any]) -> None:
        self.fn = fn

    def __call__(self, task: Task, sample: int, seed: int | None) -> Any:
        return self.fn(task, sample, seed)


@dataclass
class ClusterStats:
    episodes: int = 0
    retried: int = 0  # episodes sent again after their actor died
    failed: int = 0  # episodes given up after max_attempts
    actors_lost: list[str] = field(default_factory=list)


def _trajectory(d: dict) -> Trajectory:
    known = {f.name for f in fields(Trajectory)}
    values = {k: v for k, v in d.items() if k in known}
    values["turns"] = [Turn(**t) for t in d.get("turns", [])]
    traj = Trajectory(**values)
    for k in ("episode_id", "pid", "node_id", "attempts"):  # where it ran, kept as attributes
        setattr(traj, k, d.get(k))
    return traj


_Job = tuple[str, int, int, int]  # (kind: "prepare" or "episode", group, sample, attempt)


@dataclass
class _Jobs:
    """The bookkeeping of one ``RayRollouts.run_groups``: the jobs queued and in flight, and what came back."""

    tasks: list[Task]
    group_size: int
    seed: int
    policy: Any  # the object ref of the policy (or of its _Factory)
    options: dict[str, Any]  # the env's options
    load: dict[str, int]  # actor -> its jobs in flight
    prepare: Any = None  # the object ref of the preparation (None: there is none)
    ship: bool = False  # prepared snapshots are exported for the other nodes (the actors span several)
    # a group's episodes are queued once its preparation is done
    queue: deque[_Job] = field(default_factory=deque)
    inflight: dict[Any, tuple[_Job, str]] = field(default_factory=dict)  # ref -> (the job, its actor)
    exports: dict[Any, Any] = field(default_factory=dict)  # a preparation's ref -> the ref of its export
    # group -> (its snapshot's name, [the ref of its export, or None])
    prepared: dict[int, tuple[str, list]] = field(default_factory=dict)
    results: dict[tuple[int, int], Trajectory] = field(default_factory=dict)
    prepare_s: list[float] = field(init=False)  # by group: how long its preparation took
    task_dicts: list[dict] = field(init=False)  # the tasks as the actors get them

    def __post_init__(self) -> None:
        self.prepare_s = [0.0] * len(self.tasks)
        self.task_dicts = [t.to_dict() for t in self.tasks]


class RayRollouts:
    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        sandboxes_per_actor: int = 8,
        actors_per_node: int = 1,
        ship_image: bool = False,
        max_attempts: int = 3,
        actor_options: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> None:
        ray = _ray()
        if not ray.is_initialized():
            raise SetupError("Ray is not initialised", hint="call ray.init() (or ray.init(address='auto')) first")
        for name, value in (("sandboxes_per_actor", sandboxes_per_actor), ("actors_per_node", actors_per_node),
                            ("max_attempts", max_attempts)):  # fmt: skip
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"expected a positive integer, got {value!r}")
        self.config = config.replace(**overrides) if config is not None and overrides else (
            config or SandboxConfig(**overrides))  # fmt: skip
        self.capacity, self.max_attempts = sandboxes_per_actor, max_attempts
        self.stats = ClusterStats()
        image = self._image_payload(ray) if ship_image else None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(PoolActor)
        opts = {"num_cpus": 0, "max_concurrency": sandboxes_per_actor, **(actor_options or {})}
        self.actors: dict[str, Any] = {}
        for node in (n for n in ray.nodes() if n.get("Alive")):
            for k in range(actors_per_node):
                strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                actor = remote.options(scheduling_strategy=strategy, **opts).remote(self.config, sandboxes_per_actor,
                                                                                    image)  # fmt: skip
                self.actors[f"{node['NodeID'][:8]}/{k}"] = actor
        if not self.actors:
            raise SetupError("the Ray cluster has no alive node")
        # wait until every pool is up (a failure here is a setup error, not a lost actor)
        infos = ray.get([a.info.remote() for a in self.actors.values()])
        self.actor_info = dict(zip(self.actors, infos))

    def _image_payload(self, ray: Any) -> tuple[str, str, Any]:
        from ..images import manage

        name = self.config.rootfs
        found = {i.name: i for i in manage.list_images()}
        if name not in found:
            raise ConfigError("rootfs", f"ship_image needs a named image, got {name!r} (images: {', '.join(found)})")
        with tempfile.TemporaryDirectory(prefix="sandboxlite-ship-") as tmp:
            data = manage.export(name, Path(tmp) / f"{name}.tar.zst").read_bytes()
        return name, found[name].manifest["digest"], ray.put(data)

    # -- running ---------------------------------------------------------------------------------
    def run_groups(
        self,
        policy: Any = None,
        tasks: Iterable[Task | Mapping] = (),
        group_size: int = 4,
        *,
        policy_factory: Callable[[Task, int, int | None], Any] | None = None,
        seed: int = 0,
        env_options: Mapping[str, Any] | None = None,
        scale_advantages: bool = True,
        prepare: Callable[..., Any] | None = None,
        keep_snapshots: bool = False,
    ) -> list[Group]:
        """G episodes per task over the cluster; the same ``Group`` records as ``rl.run_groups``
        (``prepare`` and ``keep_snapshots`` as there: see the module's docstring)."""
        ray = _ray()
        if (policy is None) == (policy_factory is None):
            raise ConfigError("policy", "give either a policy or a policy_factory")
        check_prepare(prepare)
        task_list = [as_task(t) for t in tasks]
        shipped = ray.put(_Factory(policy_factory) if policy_factory is not None else policy)
        jobs = _Jobs(task_list, group_size, seed, shipped, dict(env_options or {}),
                     load={name: 0 for name in self.actors})  # fmt: skip
        if prepare is not None:
            jobs.prepare = ray.put(prepare)
            jobs.ship = len({info.get("node_id") for info in self.actor_info.values()}) > 1  # (a store per node)
            jobs.queue.extend(("prepare", g, 0, 1) for g in range(len(task_list)))
        else:
            jobs.queue.extend(("episode", g, k, 1) for g in range(len(task_list)) for k in range(group_size))
        try:
            while jobs.queue or jobs.inflight:
                self._send(jobs)
                if not jobs.inflight:
                    lost = self.stats.actors_lost
                    raise SetupError(f"no live pool actor is left ({len(lost)} lost: {', '.join(lost)}); "
                                     f"{len(jobs.queue)} jobs not run")  # fmt: skip
                self._receive(ray, jobs)
        finally:
            if jobs.prepared and not keep_snapshots:
                self._drop_snapshots(sorted({name for name, _ in jobs.prepared.values()}))
        groups = []
        for g, task in enumerate(task_list):
            group = Group(task, [jobs.results[(g, k)] for k in range(group_size)])
            group.snapshot, group.prepare_s = (jobs.prepared[g][0] if g in jobs.prepared else None), jobs.prepare_s[g]
            group.compute_advantages(scale=scale_advantages)
            groups.append(group)
        return groups

    def _send(self, jobs: _Jobs) -> None:
        """Queued jobs to the least loaded live actors, while one of them has room."""
        while jobs.queue and any(jobs.load[a] < self.capacity for a in self.actors):
            name = min(self.actors, key=lambda a: jobs.load[a])  # least loaded live actor
            job = jobs.queue.popleft()
            kind, g, k, _ = job
            if kind == "prepare":
                ref, exports_ref = self.actors[name].prepare.options(num_returns=2).remote(
                    jobs.prepare, jobs.task_dicts[g], jobs.ship)  # fmt: skip
                jobs.exports[ref] = exports_ref
            else:
                ref = self.actors[name].run_episode.remote(f"{g}:{k}", jobs.policy, jobs.task_dicts[g], k,
                                                           jobs.seed + g * jobs.group_size + k, jobs.options,
                                                           jobs.prepared.get(g))  # fmt: skip
            jobs.inflight[ref] = (job, name)
            jobs.load[name] += 1

    def _receive(self, ray: Any, jobs: _Jobs) -> None:
        """Wait for one job in flight and record what it gave: a trajectory, a prepared snapshot (the
        group's episodes queued), or a failure (sent again when its actor died, up to max_attempts)."""
        done, _ = ray.wait(list(jobs.inflight), num_returns=1)
        ref = done[0]
        (kind, g, k, attempt), name = jobs.inflight.pop(ref)
        export_ref = jobs.exports.pop(ref, None)
        if name in jobs.load:
            jobs.load[name] -= 1
        try:
            d = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            self._lost(name)
            if attempt < self.max_attempts:
                self.stats.retried += 1
                jobs.queue.appendleft((kind, g, k, attempt + 1))
            elif kind == "prepare":
                self._prepare_failed(jobs, g, f"gave up after {attempt} attempts: {e}")
            else:
                self.stats.failed += 1
                jobs.results[(g, k)] = self._failed(jobs.tasks[g], k, f"gave up after {attempt} attempts: {e}")
            return
        except ray.exceptions.RayTaskError as e:  # a bug in the episode code itself: recorded, not retried
            if kind == "prepare":
                self._prepare_failed(jobs, g, f"{type(e).__name__}: {e}")
            else:
                jobs.results[(g, k)] = self._failed(jobs.tasks[g], k, f"{type(e).__name__}: {e}")
            return
        if kind == "prepare":
            jobs.prepare_s[g] = d["prepare_s"]
            if "error" in d:
                self._prepare_failed(jobs, g, d["error"])
            else:
                jobs.prepared[g] = (d["name"], [export_ref if jobs.ship else None])
                jobs.queue.extend(("episode", g, k, 1) for k in range(jobs.group_size))
            return
        if (g, k) in jobs.results:  # never counted twice
            return
        d["attempts"] = attempt
        jobs.results[(g, k)] = _trajectory(d)
        self.stats.episodes += 1

    def _prepare_failed(self, jobs: _Jobs, g: int, why: str) -> None:
        """Every episode of group ``g`` recorded as failed: its preparation did."""
        for k in range(jobs.group_size):
            jobs.results[(g, k)] = self._failed(jobs.tasks[g], k, f"prepare failed: {why}")

    def _drop_snapshots(self, names: list[str]) -> None:
        """Every live actor removes those of ``names`` it prepared or imported."""
        ray = _ray()
        refs = {a: actor.drop_snapshots.remote(names) for a, actor in self.actors.items()}
        for a, ref in refs.items():
            try:
                for line in ray.get(ref, timeout=60):
                    log.info("run_groups: snapshot %s left on actor %s", line, a)
            except Exception as e:  # (a lost actor's node keeps its snapshots: sandboxlite snapshot rm)
                log.info("run_groups: actor %s did not remove its snapshots: %s", a, e)

    def _lost(self, name: str) -> None:
        """Drop a dead actor (its in-flight episodes come back one by one as errors too)."""
        if name in self.actors:
            del self.actors[name]
            self.stats.actors_lost.append(name)

    @staticmethod
    def _failed(task: Task, sample: int, message: str) -> Trajectory:
        t = Trajectory(task.id, sample, None, error=message)
        t.attempts = None  # type: ignore[attr-defined]
        return t

    def info(self) -> dict[str, dict]:
        ray = _ray()
        names = list(self.actors)
        return dict(zip(names, ray.get([self.actors[n].info.remote() for n in names])))

    def close(self) -> None:
        ray = _ray()
        for actor in self.actors.values():
            try:
                ray.get(actor.close.remote(), timeout=30)
            except Exception:
                pass
            ray.kill(actor)
        self.actors.clear()

    def __enter__(self) -> "RayRollouts":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
