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


# -- the shell session on the loop (AsyncShell; Tools.acall) -------------------------------------------
def test_async_shell_keeps_its_state_and_reports_like_the_sync_one():
    async def main():
        async with await AsyncSandbox.create() as sb:
            sh = sb.shell()
            r = await sh.run("cd /tmp && export X=5; f() { echo fn $1; }; echo out; echo err >&2")
            assert (r.exit_code, r.stdout, r.stderr) == (0, b"out\n", b"err\n")
            r = await sh.run("echo $X $PWD; f 1")
            assert r.stdout == b"5 /tmp\nfn 1\n" and sh.cwd == "/tmp"
            sh.shell.run("export Y=7")  # one session, sync and async
            assert (await sh.run("echo $Y")).stdout == b"7\n"
            r = await sh.run("sleep 30 & sleep 30", timeout=0.3)
            assert r.timed_out and r.exit_code == 124 and r.duration_s < 5
            r = await sh.run("head -c 3000000 /dev/zero")
            assert r.truncated and len(r.stdout) == sb.sandbox.config.limits.output_bytes
            r = await sh.run("exit 3")
            assert r.exit_code == 3 and "new session" in r.note
            assert (await sh.run("pwd")).stdout == b"/tmp\n" and sh.restarts == 1
            r = await sh.run("while :; do :; done", timeout=0.3)  # a builtin that never returns: bash is killed
            assert r.timed_out and "new session" in r.note
            assert (await sh.run("echo alive")).stdout == b"alive\n"

    run(main())


def test_async_shell_runs_one_command_at_a_time_and_survives_cancellation():
    async def main():
        async with await AsyncSandbox.create() as sb:
            sh = sb.shell()
            await sh.run("cd /tmp")
            task = asyncio.create_task(sh.run("sleep 30"))
            await asyncio.sleep(0.2)
            with pytest.raises(RuntimeError, match="already running"):
                await sh.run("true")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            r = await sh.run("pwd")
            assert r.stdout == b"/tmp\n" and "interrupted" in r.note
            # nothing of the old session runs on: its sleep was killed with it
            assert (await sb.exec("pgrep -x sleep || echo none")).stdout == b"none\n"

    run(main())


def test_shell_commands_of_many_sandboxes_overlap_without_threads():
    from sandboxlite.agent.tools import Tools

    async def main():
        sbs = [Sandbox() for _ in range(24)]
        try:
            tools = [Tools(s) for s in sbs]
            threads = threading.active_count()
            seen = []

            async def watch():
                while True:
                    seen.append(threading.active_count())
                    await asyncio.sleep(0.05)

            w = asyncio.create_task(watch())
            t0 = time.monotonic()
            outs = await asyncio.gather(*(t.acall("execute_bash", {"command": f"sleep 0.5; echo {i}"})
                                          for i, t in enumerate(tools)))  # fmt: skip
            wall = time.monotonic() - t0
            w.cancel()
            assert [o.output for o in outs] == [f"{i}\n[exit code: 0]" for i in range(24)]
            assert max(seen) <= threads, (threads, max(seen))
            cd = await tools[0].acall("execute_bash", '{"command": "cd /etc"}')
            assert tools[0].call("execute_bash", {"command": "pwd"}).output.startswith("/etc\n")  # one session
            assert cd.data["cwd"] == "/etc"
            return wall
        finally:
            for s in sbs:
                s.close()

    assert run(main()) < 3.0  # one after the other: 12 s


def test_a_shell_and_processes_share_the_loops_watch_on_the_channel():
    """Two AsyncSandbox wrappers of one sandbox (the tools' and the user's) in one loop: one
    reactor serves both (two would each take the channel's descriptor from the other)."""

    async def main():
        sb = Sandbox()
        try:
            a, b = AsyncSandbox(sb), AsyncSandbox(sb)
            sh = a.shell()
            p = await b.spawn("sleep 0.3; echo spawned")
            r, out = await asyncio.gather(sh.run("sleep 0.5; echo shell"), p.wait(timeout=10))
            assert r.stdout == b"shell\n" and out.stdout == b"spawned\n"
            p2 = await b.spawn("sleep 0.5; exit 5")  # its end comes on the channel, after the shell let go
            r2 = await sh.run("echo again")
            assert (await p2.wait(timeout=10)).exit_code == 5 and r2.stdout == b"again\n"
        finally:
            sb.close()

    run(main())
