"""Spawned processes (Sandbox.spawn): handles, streams, stdin, signals, terminals, exec callbacks.

Real sandboxes throughout: the executor reports the pid, the reactor thread reads the pipes."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from sandboxlite import Sandbox, SandboxConfig
from sandboxlite.config import Limits
from sandboxlite.errors import CommandTimeout, ConfigError


def test_spawn_streams_output_as_it_comes_and_takes_stdin(sb):
    p = sb.spawn("echo ready; read line; echo got:$line; echo oops >&2; exit 3")
    assert isinstance(p.pid, int) and p.pid > 1
    assert p.returncode is None and p.poll() is None
    assert p.stdout.read(timeout=10) == b"ready\n"  # before the command ends: it waits for input
    assert p.poll() is None
    p.write("hello\n")
    r = p.wait(timeout=10)
    assert (r.exit_code, r.stdout, r.stderr) == (3, b"got:hello\n", b"oops\n")
    assert p.returncode == 3 and p.poll() == 3


def test_the_pid_is_the_commands_own(sb):
    p = sb.spawn(["sh", "-c", "echo $$; sleep 30"])
    assert p.stdout.read(timeout=10) == f"{p.pid}\n".encode()
    p.kill()
    assert p.wait(timeout=10).exit_code == 137


def test_lines_iterates_text_lines_and_splits_nothing(sb):
    # a multibyte character cut between two writes, and a last line without a newline
    p = sb.spawn(["sh", "-c", r"printf 'a\n\303'; sleep 0.1; printf '\251t\nlast'"])
    assert list(p.stdout.lines()) == ["a", "ét", "last"]
    assert p.wait(timeout=10).exit_code == 0


def test_close_stdin_gives_end_of_file(sb):
    p = sb.spawn(["wc", "-c"])
    p.write(b"x" * 300_000)  # more than a pipe holds: write waits while wc reads
    p.close_stdin()
    assert p.wait(timeout=10).stdout.strip() == b"300000"
    with pytest.raises(ValueError):
        p.write(b"more")


def test_write_to_a_process_that_ended_is_a_broken_pipe(sb):
    p = sb.spawn(["true"])
    p.wait(timeout=10)
    with pytest.raises((BrokenPipeError, ValueError)):
        p.write(b"x\n")


def test_output_beyond_the_cap_is_dropped_and_counted_never_unbounded():
    with Sandbox(limits=Limits(output_bytes=4096)) as sb:
        p = sb.spawn(["sh", "-c", "head -c 1000000 /dev/zero"])
        r = p.wait(timeout=20)  # nobody read meanwhile: the command did not stall on a full pipe
        assert r.exit_code == 0 and r.truncated
        assert len(r.stdout) == 4096
        assert p.stdout.total == 1_000_000 and p.stdout.dropped == 1_000_000 - 4096


def test_a_reader_keeps_up_so_nothing_is_dropped():
    with Sandbox(limits=Limits(output_bytes=65536)) as sb:
        p = sb.spawn(["sh", "-c", "head -c 20000000 /dev/zero"])
        n = sum(len(c) for c in p.stdout)
        assert n == 20_000_000 and p.stdout.dropped == 0
        assert p.wait(timeout=20).exit_code == 0


def test_lossless_streams_wait_for_a_reader_that_comes_late():
    with Sandbox(limits=Limits(output_bytes=4096)) as sb:
        p = sb.spawn(["sh", "-c", "head -c 5000000 /dev/zero; echo done >&2"], lossless=True)
        time.sleep(0.5)  # nobody reads yet: the command waits (the default would drop meanwhile)
        assert p.poll() is None
        n = sum(len(c) for c in p.stdout)
        r = p.wait(timeout=20)
        assert n == 5_000_000 and p.stdout.dropped == 0 and not r.truncated
        assert r.stderr == b"done\n" and r.exit_code == 0


def test_signal_goes_to_the_command_and_kill_takes_its_tree(sb):
    p = sb.spawn(["sleep", "100"])
    p.signal(signal.SIGTERM)
    r = p.wait(timeout=10)
    assert (r.exit_code, r.signal) == (143, 15)
    # a tree: kill() takes the daemon the command left behind too
    p = sb.spawn(["sh", "-c", "setsid sleep 300 & echo $!; sleep 300"])
    child = int(p.stdout.read(timeout=10))
    p.kill()
    assert p.wait(timeout=10).exit_code == 137
    assert sb.exec(["sh", "-c", f"kill -0 {child} 2>/dev/null && echo alive || echo gone"]).stdout == b"gone\n"


def test_signal_after_the_end_is_nothing_and_bad_signals_are_refused(sb):
    p = sb.spawn(["true"])
    p.wait(timeout=10)
    p.signal(signal.SIGTERM)
    p.kill()
    assert p.returncode == 0
    with pytest.raises(ConfigError):
        sb.spawn(["sleep", "10"]).signal(0)


def test_timeout_kills_it_with_124(sb):
    p = sb.spawn(["sh", "-c", "echo before; sleep 100"], timeout=0.5)
    t0 = time.monotonic()
    r = p.wait(timeout=15)
    assert r.timed_out and r.exit_code == 124 and r.stdout == b"before\n"
    assert time.monotonic() - t0 < 10


def test_wait_with_a_timeout_leaves_it_running(sb):
    p = sb.spawn(["sleep", "100"])
    with pytest.raises(CommandTimeout):
        p.wait(timeout=0.2)
    assert p.poll() is None
    p.kill()
    assert p.wait(timeout=10).exit_code == 137


def test_a_command_that_is_not_there_ends_127(sb):
    p = sb.spawn(["no-such-command-here"])
    r = p.wait(timeout=10)
    assert r.exit_code == 127 and b"command not found" in r.stderr


def test_many_processes_at_once_beside_exec(sb):
    procs = [sb.spawn(["sh", "-c", f"read x; echo $x-{i}"]) for i in range(100)]
    assert len(sb.processes) == 100
    assert len({p.pid for p in procs}) == 100
    # exec works meanwhile (the reactor thread pumps the same channel: exec must still see its exit)
    for _ in range(20):
        assert sb.exec("echo x").stdout == b"x\n"
    for i, p in enumerate(procs):
        p.write(f"v{i}\n")
    assert [p.wait(timeout=20).stdout for p in procs] == [f"v{i}-{i}\n".encode() for i in range(100)]
    deadline = time.monotonic() + 5
    while sb.processes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sb.processes == []


def test_exec_and_file_calls_from_other_threads_while_processes_run(sb):
    p = sb.spawn(["sh", "-c", "while :; do echo tick; sleep 0.01; done"])
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(30):
                assert sb.exec(["echo", str(i)]).stdout == f"{i}\n".encode()
                sb.write_file(f"/tmp/t{k}", b"data")
                assert sb.read_file(f"/tmp/t{k}") == b"data"
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert p.stdout.read(timeout=5).startswith(b"tick")
    p.kill()
    assert p.wait(timeout=10).exit_code == 137


def test_reset_and_close_end_every_process():
    sb = Sandbox()
    try:
        ps = [sb.spawn(["sleep", "100"]) for _ in range(3)]
        sb.reset()
        assert [p.wait(timeout=10).exit_code for p in ps] == [137, 137, 137]
        assert "reset" in ps[0].wait().note
        assert sb.processes == []
        assert sb.exec(["sh", "-c", "pgrep -c sleep || true"]).stdout == b"0\n"
        p = sb.spawn(["sleep", "100"])
        q = sb.spawn(["cat"])
    finally:
        sb.close()
    assert p.wait(timeout=10).exit_code == 137 and q.wait(timeout=10).exit_code == 137
    with pytest.raises((ValueError, BrokenPipeError)):
        q.write(b"x")


def test_background_children_keep_no_process_waiting(sb):
    # the command exits; a background child still holds its stdout: wait() returns anyway
    p = sb.spawn(["sh", "-c", "sleep 30 & echo done"])
    r = p.wait(timeout=10)
    assert r.exit_code == 0 and r.stdout == b"done\n"


def test_exec_streams_to_callbacks_as_the_command_prints(sb):
    seen: list[tuple[float, bytes]] = []
    t0 = time.monotonic()
    r = sb.exec(["sh", "-c", "echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three"],
                on_stdout=lambda c: seen.append((time.monotonic() - t0, c)),
                on_stderr=lambda c: seen.append((time.monotonic() - t0, b"E:" + c)))  # fmt: skip
    assert r.stdout == b"one\nthree\n" and r.stderr == b"two\n"
    assert [c for _, c in seen] == [b"one\n", b"E:two\n", b"three\n"]
    assert seen[0][0] < 0.4 and 0.4 < seen[1][0] < 0.9  # each came when it was written


def test_a_terminal_with_its_size_resize_and_job_control(sb):
    p = sb.spawn(["bash", "--norc", "-i"], pty=(30, 100), env={"PS1": "$ "})
    p.write("stty size; tty; [ -t 0 ] && echo is\"\"atty\n")
    out = _read_until(p, b"isatty\r\n")
    assert b"30 100" in out and b"/dev/pts/" in out
    p.resize(40, 120)
    p.write("stty size\n")
    assert b"40 120" in _read_until(p, b"40 120")
    # job control: a foreground job, Ctrl-Z, then fg and Ctrl-C
    p.write("sleep 100\n")
    time.sleep(0.3)
    p.write(b"\x1a")
    assert b"Stopped" in _read_until(p, b"Stopped")
    p.write("fg\n")
    time.sleep(0.3)
    p.write(b"\x03")
    p.write("echo after:$?\n")
    assert b"after:130" in _read_until(p, b"after:130")
    p.write("exit 7\n")
    assert p.wait(timeout=10).exit_code == 7


def test_pty_argument_is_checked(sb):
    with pytest.raises(ConfigError):
        sb.spawn(["true"], pty=(0, 80))
    with pytest.raises(ValueError):
        sb.spawn(["sleep", "1"]).resize(10, 10)


def test_terminals_come_from_the_sandbox_and_are_capped():
    with Sandbox(SandboxConfig(limits=Limits(ptys=2))) as sb:
        a = sb.spawn(["sleep", "30"], pty=True)
        b = sb.spawn(["sleep", "30"], pty=True)
        with pytest.raises(Exception) as info:
            sb.spawn(["sleep", "30"], pty=True)
        assert "No space left" in str(info.value) or "ENOSPC" in str(info.value) or "28" in str(info.value)
        for p in (a, b):
            p.kill()
            p.wait(timeout=10)


def _read_until(p, marker: bytes, timeout: float = 10.0) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while marker not in out:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in {out!r}"
        out += p.stdout.read(timeout=left)
    return out


def test_a_sandbox_dropped_with_processes_running_is_still_closed():
    import gc

    import psutil

    sb = Sandbox()
    p = sb.spawn(["sleep", "300"])
    pid = sb.executor_pid
    del sb
    gc.collect()
    assert p.wait(timeout=10).exit_code == 137
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
