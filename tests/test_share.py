"""fork(n, share=True) (share.py, the executor's sharing.c): real sandboxes, real bwrap.

The forked sandbox's writes become the children's read-only bottom layer without a copy: the
children are isolated from each other and from it, the forked sandbox starts over on the same
layer, and the memory goes with the last sandbox that uses it."""

from __future__ import annotations

import os
import time

import pytest

from sandboxlite import Sandbox, SandboxPool
from sandboxlite.errors import ConfigError, SnapshotError
from sandboxlite.jail.host import Host

MB = 1 << 20


def _shmem() -> int:
    """Bytes of shared memory (tmpfs pages) in use on the machine."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def _settled(target, tolerance: int, timeout: float = 10.0) -> int:
    """Shmem once within ``tolerance`` of ``target`` (the kernel frees a tmpfs asynchronously), else its last value."""
    deadline = time.monotonic() + timeout
    while True:
        now = _shmem()
        if abs(now - target) <= tolerance or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def test_children_see_the_state_and_are_isolated_from_each_other_and_the_parent(sb):
    assert sb.plan.copy_on_write, "these tests need the default image with a copy-on-write root (conftest's sb)"
    sb.exec("echo base > /testbed/f; echo img > /etc/added; rm /etc/hostname; mkdir /tmp/d; echo t > /tmp/d/t")
    a, b = sb.fork(2, share=True)
    try:
        assert a.base == b.base == sb.base and a.base is not None and a.base.name in a.base.shared
        for s in (a, b, sb):
            r = s.exec("cat /testbed/f /etc/added /tmp/d/t; test -e /etc/hostname || echo gone")
            assert r.stdout_text == "base\nimg\nt\ngone\n", r.stderr_text
        a.exec("echo a > /testbed/f; echo a > /etc/added; rm /tmp/d/t; echo new > /testbed/only-a")
        sb.exec("echo parent > /testbed/f")
        assert b.exec("cat /testbed/f /etc/added /tmp/d/t; ls /testbed").stdout_text == "base\nimg\nt\nf\n"
        assert a.exec("cat /testbed/f").stdout_text == "a\n"
        pid = a.executor_pid
        a.reset()  # back to the fork's state, in the same jail
        assert a.executor_pid == pid
        assert a.exec("cat /testbed/f /etc/added /tmp/d/t; ls /testbed").stdout_text == "base\nimg\nt\nf\n"
    finally:
        a.close()
        b.close()
    assert sb.exec("cat /testbed/f").stdout_text == "parent\n"  # the parent goes on, isolated too


def test_children_outlive_the_forked_sandbox():
    with Sandbox() as parent:
        parent.exec("head -c 1000000 /dev/urandom > /testbed/r; sha256sum /testbed/r > /tmp/sum")
        kids = parent.fork(2, share=True)
    try:  # the parent is closed: its jail is gone, the layer it shared is not
        for k in kids:
            assert k.exec("sha256sum -c /tmp/sum").exit_code == 0
        kids[0].reset()
        assert kids[0].exec("sha256sum -c /tmp/sum").exit_code == 0
    finally:
        for k in kids:
            k.close()


def test_the_forked_sandbox_starts_over_what_ran_in_it_ends(sb):
    sb.exec("echo x > /testbed/x")
    sb.exec("sleep 300 > /dev/null 2>&1 &")
    assert "sleep" in sb.exec("ps -eo comm").stdout_text
    generation = sb.generation
    (kid,) = sb.fork(1, share=True)
    try:
        assert sb.generation == generation + 1
        assert "sleep" not in sb.exec("ps -eo comm").stdout_text
        assert sb.exec("cat /testbed/x").stdout_text == "x\n"
    finally:
        kid.close()


def test_nothing_is_copied_and_the_memory_goes_with_the_last_sandbox(sb):
    """A share fork of 128 MB adds no memory (the copying fork adds the state once); the shared
    tmpfs is freed when the last sandbox on it, the forked one included, lets go of it."""
    size = 128 * MB
    sb.exec(f"head -c {size} /dev/zero > /testbed/big")
    before = _shmem()
    kids = sb.fork(3, share=True)
    try:
        for k in kids:
            assert k.exec("stat -c %s /testbed/big").stdout_text == f"{size}\n"
        grown = _shmem() - before
        assert grown < size // 4, f"shared memory grew by {grown >> 20} MB for a 128 MB state: a copy was made"
        store = sb.host.snapshot_store()
        assert not any(n in {s.name for s in store.list()} for n in kids[0].base.shared)  # not in the store
    finally:
        for k in kids:
            k.close()
    held = _shmem()
    assert held > before - size // 4  # the forked sandbox still stands on the layer
    sb.reset(to="image")  # lets go of it: nothing holds the tmpfs now
    assert _settled(before - size, size // 4) < before - size // 2, "the shared layer's memory was not freed"


def test_a_child_can_write_over_the_shared_files_and_never_into_the_layer(sb):
    """As a root caller each sandbox runs as a host uid of its own: the shared files are idmapped
    to show as each child's own, so it can change them (a copy-up into its own tmpfs)."""
    sb.exec("echo one > /testbed/f; chmod 600 /testbed/f; echo e > /etc/e")
    a, b = sb.fork(2, share=True)
    try:
        assert a.exec("stat -c '%u %g %a' /testbed/f /etc/e").stdout_text == "0 0 600\n0 0 644\n"
        r = a.exec("echo two >> /testbed/f && echo more >> /etc/e && cat /testbed/f /etc/e")
        assert r.exit_code == 0 and r.stdout_text == "one\ntwo\ne\nmore\n", r.stderr_text
        assert b.exec("cat /testbed/f /etc/e").stdout_text == "one\ne\n"
        # the layer is nowhere in a child's view, nor can its mounts be changed
        r = a.exec("ls -A /.sl 2>&1; grep -c ' /.sl/fork' /proc/self/mountinfo; mount -o remount,rw / 2>&1; true")
        assert "No such file" in r.stdout_text and "\n0\n" in r.stdout_text, r.stdout_text
    finally:
        a.close()
        b.close()


def test_without_a_copy_on_write_root_the_layer_is_covered():
    with Sandbox(rootfs="host") as h:
        assert not h.plan.copy_on_write
        h.exec("echo x > /testbed/x; echo t > /tmp/t; echo r > /root/r")
        (kid,) = h.fork(1, share=True)
        try:
            r = kid.exec("cat /testbed/x /tmp/t /root/r; ls -A /.sl/fork 2>/dev/null | wc -l")
            assert r.stdout_text == "x\nt\nr\n0\n", r.stdout_text
            kid.exec("echo y > /testbed/x")
            assert h.exec("cat /testbed/x").stdout_text == "x\n"
        finally:
            kid.close()


@pytest.mark.parametrize("uids", ["own", "off"])
def test_forks_of_forks_stack_and_each_level_stays_isolated(uids):
    """A child shares on what it stands on.  As a root caller every sandbox has a host uid of its
    own ("own": idmapped sets, and a raw one kept to share on); with SANDBOXLITE_UID_RANGE=off (and
    for every non-root caller) all share one uid ("off": the sets attached as they are)."""
    host = Host.detect({**os.environ, "SANDBOXLITE_UID_RANGE": "off"}) if uids == "off" else None
    with Sandbox(host=host) as sb:
        assert (sb.host.uids is None) == (uids == "off" or os.geteuid() != 0)
        sb.exec("echo 1 > /testbed/level; echo a > /testbed/a")
        (kid,) = sb.fork(1, share=True)
        try:
            assert (kid.jail.plan.run_as == sb.jail.plan.run_as) == (sb.host.uids is None)
            kid.exec("echo 2 > /testbed/level; rm /testbed/a; echo b > /testbed/b")
            g1, g2 = kid.fork(2, share=True)
            try:
                assert g1.base.depth == 2 and g1.base.shared == frozenset(g1.base.layers)
                assert g1.exec("cat /testbed/level; ls /testbed").stdout_text == "2\nb\nlevel\n"
                g1.exec("echo 3 > /testbed/level")
                assert g2.exec("cat /testbed/level").stdout_text == "2\n"
                assert sb.exec("cat /testbed/level; ls /testbed").stdout_text == "1\na\nlevel\n"
            finally:
                g1.close()
                g2.close()
            assert kid.exec("cat /testbed/level").stdout_text == "2\n"
        finally:
            kid.close()


def test_a_snapshot_over_a_shared_state_copies_it_into_the_store(sb):
    """snapshot() of a sandbox over a shared layer keeps that layer too (copied into the store,
    named by its content: the same name as a snapshot of the forked sandbox's state)."""
    sb.exec("echo x > /testbed/x; echo e > /etc/e")
    kept = sb.snapshot()  # the same state, kept before the fork
    (kid,) = sb.fork(1, share=True)
    try:
        kid.exec("echo y > /testbed/y; rm /etc/e")
        snap = kid.snapshot()
        assert not snap.shared and snap.parent == kept.name and snap.depth == 2
        with Sandbox(snapshot=snap) as again:
            assert again.exec("cat /testbed/x /testbed/y; test -e /etc/e || echo gone").stdout_text == "x\ny\ngone\n"
        with pytest.raises(SnapshotError, match="only the sandboxes of that fork"):
            Sandbox(snapshot=kid.base)
    finally:
        kid.close()
    kept.store.remove(snap.name)
    kept.store.remove(kept.name)


def test_a_fork_over_a_snapshot_stacks_on_its_layers(sb):
    sb.exec("echo under > /testbed/u")
    snap = sb.snapshot()
    with Sandbox(snapshot=snap) as c:
        c.exec("echo over > /testbed/o")
        (kid,) = c.fork(1, share=True)
        try:
            assert kid.base.layers[1:] == snap.layers and kid.base.stored == snap
            assert kid.exec("cat /testbed/u /testbed/o").stdout_text == "under\nover\n"
            assert snap.store.in_use(snap.name)  # held by the sandboxes over it
        finally:
            kid.close()
    snap.store.remove(snap.name)


def test_children_from_a_pool_go_back_to_it_pristine(sb):
    with SandboxPool(size=2) as pool:
        sb.exec("echo shared > /testbed/s")
        kids = sb.fork(2, share=True, pool=pool)
        assert all(k.exec("cat /testbed/s").stdout_text == "shared\n" for k in kids)
        assert pool.idle == 0 and pool.in_use == 2
        for k in kids:
            pool.release(k)
        with pool.sandbox() as again:
            assert again.base is None and again.exec("test -e /testbed/s || echo pristine").stdout_text == "pristine\n"
    # a copying fork takes pool sandboxes too
    with SandboxPool(size=1) as pool:
        (kid,) = sb.fork(1, pool=pool)
        assert kid.exec("cat /testbed/s").stdout_text == "shared\n" and kid.base.transient
        pool.release(kid)


def test_bad_arguments_and_modes_that_cannot_share(sb):
    with pytest.raises(ConfigError, match="positive number"):
        sb.fork(0, share=True)
    with pytest.raises(ConfigError, match="SandboxPool"):
        sb.fork(1, share=True, pool=object())  # type: ignore[arg-type]
    with SandboxPool(size=1, rootfs="host") as other, pytest.raises(ConfigError, match="image"):
        sb.fork(1, share=True, pool=other)
    with SandboxPool(size=1) as small, pytest.raises(ConfigError, match="pool of 1"):
        sb.fork(2, share=True, pool=small)
    assert sb.exec("echo alive").stdout_text == "alive\n"  # refused before anything was done
    store = sb.host.snapshot_store()
    depth, store.max_depth = store.max_depth, 2
    try:
        (k1,) = sb.fork(1, share=True)
        (k2,) = sb.fork(1, share=True)  # the forked sandbox stands on each of its forks: depth 2
        with pytest.raises(SnapshotError, match="over the limit of 2"):
            sb.fork(1, share=True)
        k1.close()
        k2.close()
    finally:
        store.max_depth = depth
    with Sandbox(isolation="landlock") as ll, pytest.raises(SnapshotError, match="cannot be shared without a copy"):
        ll.fork(1, share=True)

