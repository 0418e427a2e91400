"""SandboxPool: warm sandboxes, reset on release, broken ones replaced, thread-safe."""

import asyncio
import os
import shutil
import threading
import time

import pytest

from sandboxlite import ConfigError, Mount, SandboxClosed, SandboxError, SandboxPool

from .conftest import alive, jail_tree


def test_acquire_release_gives_a_pristine_sandbox():
    with SandboxPool(size=1, rootfs="host") as pool:
        with pool.sandbox() as sb:
            first = sb.executor_pid
            sb.exec("echo x > /testbed/x; sleep 1000 >/dev/null 2>&1 &")
            time.sleep(0.05)
            old = jail_tree(sb)
        assert old and not any(alive(p) for p in old)
        with pool.sandbox() as sb:
            assert sb.executor_pid == first  # the same jail, reset in place
            assert sb.exec("ls -A /testbed").stdout == b""
        assert pool.stats.acquires == 2 and pool.stats.resets == 2 and pool.stats.replacements == 0


def test_a_crashed_sandbox_is_replaced_or_restarted():
    with SandboxPool(size=1, rootfs="host") as pool:
        with pool.sandbox() as sb:  # crashes while in use: release's reset starts it again
            os.kill(sb.executor_pid, 9)
        with pool.sandbox() as sb:
            assert sb.exec("echo ok").stdout == b"ok\n"
            idle = sb
        os.kill(idle.executor_pid, 9)  # crashes while idle: acquire replaces it
        time.sleep(0.05)
        with pool.sandbox() as sb:
            assert sb is not idle and sb.exec("echo ok").stdout == b"ok\n"
        assert pool.stats.replacements == 1


def test_threads_share_a_small_pool():
    done = []
    with SandboxPool(size=2, rootfs="host") as pool:
        def worker(i):
            for j in range(10):
                with pool.sandbox(timeout=30) as sb:
                    assert sb.exec(["echo", f"{i}-{j}"]).stdout == f"{i}-{j}\n".encode()
                    assert sb.exec("ls -A /testbed").stdout == b""  # nobody else's files
                    sb.write_file("/testbed/mine", str(i))
            done.append(i)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(done) == list(range(6)) and pool.stats.acquires == 60
        assert len({id(s) for s in pool._all}) == 2


def test_timeout_close_and_misuse():
    pool = SandboxPool(size=1, rootfs="host")
    sb = pool.acquire()
    with pytest.raises(TimeoutError):
        pool.acquire(timeout=0.1)
    with pytest.raises(ValueError):
        pool.release(object())
    pids = [sb.bwrap_pid]
    pool.close()
    pool.release(sb)  # a busy sandbox is closed when it comes back
    assert not any(alive(p) for p in pids)
    with pytest.raises(SandboxClosed):
        pool.acquire()
    with pytest.raises(ConfigError):
        SandboxPool(size=0)


def test_asyncio_api():
    async def main():
        with SandboxPool(size=2, rootfs="host") as pool:
            async def one(i):
                sb = await pool.acquire_async()
                try:
                    return (await asyncio.to_thread(sb.exec, ["echo", str(i)])).stdout
                finally:
                    await pool.release_async(sb)

            return await asyncio.gather(*(one(i) for i in range(8)))

    assert asyncio.run(main()) == [f"{i}\n".encode() for i in range(8)]


# -- a crashed sandbox whose replacement cannot start (issue 14) ----------------------------------
# The pool's config mounts a host directory; deleting it makes every new Sandbox() fail for real
# (ConfigError: the mount source does not exist), and killing a jail makes the pool replace it.


def _pool_with_mount(host_dir):
    src = host_dir / "data"
    src.mkdir()
    os.chmod(src, 0o755)
    (src / "f").write_text("hello")
    pool = SandboxPool(size=1, rootfs="host", mounts=[Mount(str(src), "/data")])
    return pool, src


def _crash(sb):
    os.kill(sb.executor_pid, 9)
    deadline = time.monotonic() + 10
    while sb.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not sb.alive()


def _start_thread(fn):
    """Run fn in a thread; its result or exception lands in the dict returned."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    out["thread"] = t = threading.Thread(target=run, daemon=True)
    t.start()
    return out


def _joined(out, limit=20):
    """Fail (rather than hang) if the thread is still blocked after ``limit`` seconds."""
    out["thread"].join(limit)
    assert not out["thread"].is_alive(), f"still blocked after {limit}s"
    return out


def test_a_crashed_idle_sandbox_whose_replacement_fails_keeps_its_slot(host_dir):
    pool, src = _pool_with_mount(host_dir)
    with pool:
        with pool.sandbox() as sb:
            assert sb.exec("cat /data/f").stdout == b"hello"
        _crash(sb)
        shutil.rmtree(src)
        for _ in range(2):  # the slot is kept: every acquire tries again and says why it failed
            out = _joined(_start_thread(lambda: pool.acquire(timeout=5)))
            err = out.get("error")
            assert isinstance(err, SandboxError) and not isinstance(err, TimeoutError), out
            assert "could not replace a crashed sandbox" in str(err) and str(src) in str(err)
            assert isinstance(err.__cause__, ConfigError)
            assert pool.in_use == 0 and pool.idle == 0
        src.mkdir()
        os.chmod(src, 0o755)
        with pool.sandbox(timeout=5) as sb2:
            assert sb2 is not sb and sb2.exec("echo ok").stdout == b"ok\n"
            assert pool.in_use == 1
        assert pool.in_use == 0 and pool.idle == 1 and pool.stats.replacements == 1
        assert pool.stats.acquires == pool.stats.releases == 2


def test_a_release_whose_replacement_fails_keeps_the_slot_and_wakes_waiters(host_dir):
    pool, src = _pool_with_mount(host_dir)
    with pool:
        sb = pool.acquire()
        waiter = _start_thread(lambda: pool.acquire(timeout=10))
        time.sleep(0.2)
        assert waiter["thread"].is_alive()  # blocked: the only sandbox is in use
        _crash(sb)
        shutil.rmtree(src)
        with pytest.raises(SandboxError, match="could not replace a crashed sandbox"):
            pool.release(sb)  # nobody is propagating an exception: the failure is raised ...
        assert pool.in_use == 0 and pool.idle == 0  # ... but the slot is given back, empty
        err = _joined(waiter, 5).get("error")  # the waiter was woken and tried the empty slot itself
        assert isinstance(err, SandboxError) and not isinstance(err, TimeoutError), waiter
        assert "could not replace a crashed sandbox" in str(err)
        with pytest.raises(SandboxError, match="could not replace"):
            with pool.sandbox(timeout=5):
                pass
        src.mkdir()
        os.chmod(src, 0o755)
        with pool.sandbox(timeout=5) as sb2:
            assert sb2.exec("echo ok").stdout == b"ok\n"
        assert pool.in_use == 0 and pool.idle == 1


def test_an_exception_in_the_block_propagates_unchanged_when_release_fails(host_dir, caplog):
    class Boom(Exception):
        pass

    pool, src = _pool_with_mount(host_dir)
    with pool:
        boom = Boom("the caller's own error")
        with pytest.raises(Boom) as info:
            with pool.sandbox(timeout=5) as sb:
                _crash(sb)
                shutil.rmtree(src)
                raise boom
        assert info.value is boom and boom.__context__ is None and boom.__cause__ is None
        assert "could not replace a crashed sandbox" in caplog.text  # logged, not lost
        assert pool.in_use == 0
        src.mkdir()
        os.chmod(src, 0o755)
        with pool.sandbox(timeout=5) as sb2:
            assert sb2.exec("echo ok").stdout == b"ok\n"


def test_asyncio_waiters_are_woken_when_a_replacement_fails(host_dir):
    pool, src = _pool_with_mount(host_dir)

    async def main():
        sb = await pool.acquire_async()
        waiter = asyncio.create_task(pool.acquire_async(timeout=10))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        _crash(sb)
        shutil.rmtree(src)
        with pytest.raises(SandboxError, match="could not replace"):
            await pool.release_async(sb)
        with pytest.raises(SandboxError, match="could not replace a crashed sandbox"):
            await asyncio.wait_for(waiter, 20)  # woken at once, not a TimeoutError after 10s
        src.mkdir()
        os.chmod(src, 0o755)
        sb2 = await pool.acquire_async(timeout=5)
        assert (await asyncio.to_thread(sb2.exec, "echo ok")).stdout == b"ok\n"
        await pool.release_async(sb2)

    with pool:
        asyncio.run(main())
