"""SandboxPool: warm sandboxes, reset on release, broken ones replaced, thread-safe."""

import asyncio
import os
import threading
import time

import pytest

from sandboxlite import ConfigError, SandboxClosed, SandboxPool

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
