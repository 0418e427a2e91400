"""fork(): sandboxes started from another one's state, copied once or shared without a copy.

``Sandbox.fork(n)`` takes one transient ``snapshot()`` (a copy of the writes into the store,
the sandbox's processes paused and resumed) and starts ``n`` sandboxes from it.

``Sandbox.fork(n, share=True)`` copies nothing.  A sandbox's writes live in tmpfs mounts of its
jail (the copy-on-write layer's upper; /testbed, /tmp).  The executor hands out detached,
read-only clones of those mounts (``open_tree``, the executor's sharing.c); each child's executor
attaches its set in its own mount namespace (``move_mount``) and stacks it as an overlay lower
layer under a fresh tmpfs of its own, as it stacks a snapshot's layers.  The time does not grow
with the data, and every child (and the forked sandbox) reads the same pages.

The price: nothing may write there any more.  So the forked sandbox starts over too, on the same
layer, as one more branch: what ran in it ends, as on ``reset()``.  The shared layer lives while
a sandbox stands on it (the kernel frees the tmpfs with its last mount; a reset elsewhere lets
go of it).  It is not in the store: ``Sandbox(snapshot=)`` cannot start from it (only the
sandboxes of the fork, and their forks, stand on it), and ``snapshot()`` of a sandbox over it
copies it into the store first, as a layer named by its content.

A root caller's sandboxes run as host uids of their own (slots.py): each child's set is
idmapped (``mount_setattr(MOUNT_ATTR_IDMAP)``, by the host) so that the files show as its own,
and the child keeps a second, raw set to share the layer on (a mount is idmapped once).

New children start while the forked sandbox shares its writes, with no filesystem of their own
yet (the executor's ``defer=1``): each builds its first generation once its sets are attached.
``pool=``: the children are a ``SandboxPool``'s warm sandboxes (an attach and a reset each, no
start), given back with ``pool.release``, which resets them to the pool's state.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from .. import images
from ..errors import ConfigError, SnapshotError
from ..executor.protocol import MAX_LAYERS
from . import snapshot as snapshot_mod
from .snapshot import Snapshot, image_of


class Forked(Protocol):
    """What a fork uses of a sandbox (``jail.sandbox.Sandbox`` is one; its children are made with
    ``type(sb)``): the sandbox's room imports this one, not the other way round."""

    config: Any  # SandboxConfig
    host: Any  # jail.host.Host
    jail: Any  # jail.launch.Jail
    base: Snapshot | None
    lock: threading.Lock

    def reset(self, *, to: Snapshot | None = None) -> None: ...

    def close(self) -> None: ...


class Pool(Protocol):
    """What ``fork(pool=)`` uses of a pool (``jail.pool.SandboxPool`` is one)."""

    size: int
    config: Any  # SandboxConfig

    def acquire(self, timeout: float | None = None) -> Any: ...

    def release(self, sb: Any) -> None: ...

Sets = list[tuple[str, str, list[int]]]  # (layer, mask, descriptors) for one sandbox, top first


def fork(sb: Forked, n: int, *, share: bool = False, pool: Pool | None = None) -> list[Forked]:
    """``Sandbox.fork``: ``n`` sandboxes over ``sb``'s state (copied once into the store, or shared)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("n", f"must be a positive number of sandboxes, got {n!r}")
    if pool is not None and not all(hasattr(pool, a) for a in ("acquire", "release", "size", "config")):
        raise ConfigError("pool", f"expected a SandboxPool, got {type(pool).__name__}")
    Sandbox = type(sb)
    if pool is not None and n > pool.size:
        raise ConfigError("n", f"{n} sandboxes from a pool of {pool.size}: the fork would wait for ever",
                          hint="fork at most the pool's size, or make the pool bigger")  # fmt: skip
    if pool is not None and image_of(images.resolve(pool.config.rootfs)) != image_of(sb.jail.plan.rootfs):
        raise ConfigError("pool", f"its sandboxes run the image {pool.config.rootfs!r}, this one {sb.config.rootfs!r}: "
                          "a fork's state only goes over the image it was written over")  # fmt: skip
    if share:
        return _fork_shared(sb, n, pool)
    with sb.lock:  # (a snapshot of their own: removed when the last of them closes, see Store.prune)
        snap = snapshot_mod.take(sb.jail, sb.host.snapshot_store(), sb.base, transient=True)
    if pool is None:
        return _children(n, lambda _i: Sandbox(sb.config, host=sb.host, snapshot=snap), None)
    return _children(n, lambda _i: _reset_to(pool.acquire(), snap, pool), pool)


def _fork_shared(sb: Forked, n: int, pool: Pool | None) -> list[Forked]:
    """The children start (or are taken from ``pool``) while ``sb`` shares its writes and starts
    over on them; each attaches its set once the sets are there."""
    store = sb.host.snapshot_store()
    # a root caller's sandboxes run as host uids of their own: each child's sets are idmapped to
    # its uid, and it keeps a second, raw set of each layer to share it on (idmapped once only)
    per = 2 if sb.host.uids is not None else 1
    with sb.lock:
        jail, base = sb.jail, sb.base
    depth = (base.depth if base is not None else 0) + 1
    if depth > min(store.max_depth, MAX_LAYERS):
        raise SnapshotError(f"a fork of this sandbox would stack layer {depth}, over the limit of "
                            f"{min(store.max_depth, MAX_LAYERS)}", hint="fork(n) copies the state into "
                            "one layer instead (share=False)")  # fmt: skip
    name = secrets.token_hex(16)
    below = [layer for layer in (base.layers if base is not None else ()) if layer in base.shared]  # type: ignore[union-attr]
    stored = base.stored if base is not None else None  # what the children start over before the layers
    sets: list[Sets] = [[] for _ in range(n)]  # each child's: (layer, mask, fds), top first, `per` of each
    uid = jail.plan.run_as
    ready = threading.Event()  # set once the sets are made, or that failed (``shared`` stays empty)
    shared: list[Snapshot] = []  # the fork's point, once made

    def attach(i: int, kid_jail) -> Snapshot:  # (in the children's threads: the sets are made below)
        return _attach_sets(kid_jail, sets, i, per, uid, sb.host, ready, shared)

    with ThreadPoolExecutor(max_workers=min(n, 2 * (os.cpu_count() or 1))) as ex:
        futures = [ex.submit(_shared_child, sb, i, pool, stored, attach) for i in range(n)]
        try:
            with sb.lock:
                top = jail.share(1 + n * per, kill=True)  # the forked sandbox's first: nothing may write there now
                own_mask, own_fds = top[0]
                sets.append([(name, own_mask, own_fds)])  # (until attached: closed with the others on a failure)
                for i, (mask, fds) in enumerate(top[1:]):
                    sets[i // per].append((name, mask, fds))
                for layer in below:
                    for i, (mask, fds) in enumerate(jail.share(n * per, layer=layer)):
                        sets[i // per].append((layer, mask, fds))
                cow = own_mask[0] == "1" or (base is not None and base.cow)  # (changes to the image)
                point = Snapshot(name, base.layers if base is not None else (), 0, 0, time.time(),
                                 image_of(jail.plan.rootfs), cow, store, True, frozenset({name, *below}))  # fmt: skip
                shared.append(point)
                ready.set()  # the children attach theirs meanwhile
                jail.attach(name, own_mask, own_fds)
                sb.reset(to=point)
        except BaseException as e:
            failed: BaseException | None = e
        else:
            failed = None
        finally:
            ready.set()
    _close(sets)
    return _collect(futures, pool, failed)


def _attach_sets(kid_jail, sets: list[Sets], i: int, per: int, uid: int | None, host: Any, ready: threading.Event,
                 shared: list[Snapshot]) -> Snapshot:  # fmt: skip
    """Child ``i`` of a shared fork: once the forked sandbox has made the sets (``ready``), attach
    its own in ``kid_jail``, bottom layer first (idmapped to the child's uid when it runs as another
    than ``uid``, the forked one's), and return the fork's point."""
    ready.wait()
    if not shared:
        raise SnapshotError("the forked sandbox's state could not be shared (its error is raised)")
    to = kid_jail.plan.run_as
    for k in reversed(range(0, len(sets[i]), per)):  # the bottom layer first
        layer, mask, fds = sets[i][k]
        if to is not None and to != uid:
            assert host.idmap is not None
            for fd in fds:
                host.idmap.share_to(fd, to)
        kid_jail.attach(layer, mask, fds)
        if per == 2:
            _layer, raw_mask, raw_fds = sets[i][k + 1]
            kid_jail.attach(layer, raw_mask, raw_fds, raw=True)
    return shared[0]


def _shared_child(sb: Forked, i: int, pool: Pool | None, stored: Snapshot | None,
                  attach: Callable[[int, Any], Snapshot]) -> Forked:  # fmt: skip
    """Child ``i`` of a shared fork of ``sb``: a new sandbox whose first generation is built over the
    shared layer, or one of ``pool``'s reset onto it (given back if that fails)."""
    Sandbox = type(sb)
    if pool is None:  # a new sandbox whose first generation is built over the layer (no other first)
        kid = Sandbox.__new__(Sandbox)

        def first(kid_jail) -> None:
            point = attach(i, kid_jail)
            if not kid_jail.start_over(point, sb.host):
                raise SnapshotError("a fork's child could not build its filesystem over the shared state")
            kid._base = point

        kid._first = first  # (Sandbox._start takes it)
        Sandbox.__init__(kid, sb.config, host=sb.host, snapshot=stored)
        return kid
    kid = pool.acquire()
    try:
        kid.reset(to=attach(i, kid.jail))
        return kid
    except BaseException:
        _give_back(kid, pool)
        raise


def _reset_to(kid: Forked, snap: Snapshot, pool: Pool) -> Forked:
    try:
        kid.reset(to=snap)
    except BaseException:
        _give_back(kid, pool)
        raise
    return kid


def _give_back(kid: Forked, pool: Pool | None) -> None:
    if pool is None:
        kid.close()
    else:
        pool.release(kid)


def _children(n: int, make, pool: Pool | None) -> list[Forked]:
    """``make(i)`` for each of ``n`` children, side by side; on a failure the others are given back
    (closed, or released to ``pool``) and the first error is raised."""
    with ThreadPoolExecutor(max_workers=min(n, 2 * (os.cpu_count() or 1))) as ex:
        futures = [ex.submit(make, i) for i in range(n)]
    return _collect(futures, pool, None)


def _collect(futures: list, pool: Pool | None, failed: BaseException | None) -> list[Forked]:
    """The children the finished ``futures`` made; when one failed (or ``failed``), all of them
    given back and that error raised."""
    kids = [f.result() for f in futures if f.exception() is None]
    if failed is not None or len(kids) < len(futures):
        for kid in kids:
            _give_back(kid, pool)
        raise failed or next(f.exception() for f in futures if f.exception() is not None)  # type: ignore[misc]
    return kids


def _close(sets: list[Sets]) -> None:
    for one in sets:
        for _layer, _mask, fds in one:
            for fd in fds:
                os.close(fd)
            fds.clear()
