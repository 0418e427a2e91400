"""AsyncSandbox: exec, spawn and streams served by the event loop, without a thread per call."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from sandboxlite import AsyncSandbox, Sandbox
from sandboxlite.errors import CommandTimeout


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_exec_results_match_the_sync_ones():
    async def main():
        async with await AsyncSandbox.create() as sb:
            r = await sb.exec("echo out; echo err >&2; exit 4")
            assert (r.exit_code, r.stdout, r.stderr) == (4, b"out\n", b"err\n")
            r = await sb.exec(["cat"], stdin=b"y" * 500_000)  # more than a pipe holds, both ways
            assert r.stdout == b"y" * 500_000
            r = await sb.exec("sleep 30", timeout=0.3)
            assert r.timed_out and r.exit_code == 124
            seen = []
            r = await sb.exec("echo a; sleep 0.2; echo b", on_stdout=seen.append)
            assert seen == [b"a\n", b"b\n"] and r.stdout == b"a\nb\n"

    run(main())


def test_concurrent_execs_in_one_sandbox_overlap():
    async def main():
        async with await AsyncSandbox.create() as sb:
            t0 = time.monotonic()
            rs = await asyncio.gather(*(sb.exec(f"sleep 0.5; echo {i}") for i in range(8)))
            assert [r.stdout for r in rs] == [f"{i}\n".encode() for i in range(8)]
            return time.monotonic() - t0

    assert run(main()) < 3.0  # 8 x 0.5 s one after the other would be 4 s


def test_spawn_streams_lines_and_takes_input():
    async def main():
        async with await AsyncSandbox.create() as sb:
            p = await sb.spawn("for i in 1 2 3; do echo line $i; done; read x; echo got $x")
            lines = []
            async for line in p.stdout.lines():
                lines.append(line)
                if line == "line 3":
                    await p.write("it\n")
            assert lines == ["line 1", "line 2", "line 3", "got it"]
            assert (await p.wait()).exit_code == 0
            q = await sb.spawn(["sleep", "100"])
            with pytest.raises(CommandTimeout):
                await q.wait(timeout=0.2)
            assert sb.processes and q.returncode is None
            q.kill()
            assert (await q.wait(timeout=10)).exit_code == 137

    run(main())


def test_close_ends_the_processes():
    async def main():
        sb = await AsyncSandbox.create()
        p = await sb.spawn(["sleep", "100"])
        await sb.close()
        assert (await p.wait(timeout=10)).exit_code == 137
        assert sb.closed

    run(main())


def test_many_sandboxes_and_streams_in_one_loop_use_no_thread_per_stream():
    async def main():
        sbs = await asyncio.gather(*(AsyncSandbox.create() for _ in range(16)))
        try:
            before = threading.active_count()
            procs = [await sb.spawn(f"for i in $(seq 50); do echo {k}-$i; done") for sb in sbs for k in range(4)]

            async def count(p):
                return sum([1 async for _ in p.stdout.lines()])

            counts = await asyncio.gather(*(count(p) for p in procs))
            assert counts == [50] * 64
            assert threading.active_count() <= before  # the loop served them all
        finally:
            await asyncio.gather(*(sb.close() for sb in sbs))

    run(main())


def test_wrapping_a_started_sandbox_and_file_calls():
    async def main():
        with Sandbox() as raw:
            sb = AsyncSandbox(raw)
            await sb.write_file("/tmp/a.txt", "hi")
            assert await sb.read_file("/tmp/a.txt") == b"hi"
            assert await sb.is_file("/tmp/a.txt")
            assert (await sb.exec("cat /tmp/a.txt")).stdout == b"hi"
            await sb.rename("/tmp/a.txt", "/tmp/b.txt")
            assert [f.name for f in await sb.list("/tmp") if f.name.endswith(".txt")] == ["b.txt"]
            assert (await sb.stat("/tmp/b.txt")).size == 2
            await sb.remove("/tmp/b.txt")
            assert not await sb.is_file("/tmp/b.txt")

    run(main())
