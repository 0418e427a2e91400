"""`sandboxlite exec` streams and takes stdin; `sandboxlite shell` is a terminal for a person.

These run the real command line in a child process (CliRunner has no real descriptors or
terminal); `shell` is driven through tmux, as a person at a keyboard would."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

CLI = [sys.executable, "-c", "from sandboxlite.cli import main; main()"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def test_exec_passes_stdin_through():
    r = subprocess.run(CLI + ["exec", "--", "sh", "-c", "read a; echo $((a * 2)); cat | wc -c"],
                       input=b"21\nmore bytes\n", capture_output=True, timeout=120, env=_env())  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [b"42", b"11"]


def test_exec_streams_output_as_the_command_prints():
    with subprocess.Popen(CLI + ["exec", "--", "sh", "-c", "echo first; sleep 2; echo second; exit 9"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) as p:  # fmt: skip
        try:
            first = p.stdout.readline()
            t_first = time.monotonic()
            second = p.stdout.readline()
            t_second = time.monotonic()
            assert (first, second) == (b"first\n", b"second\n")
            assert t_second - t_first > 1.5  # the first line came before the command ended
            assert p.wait(60) == 9
        finally:
            p.kill()


def test_exec_loses_nothing_of_a_big_stream_to_a_slow_reader():
    cli = " ".join(map(repr, CLI))
    r = subprocess.run(["sh", "-c", f"{cli} exec -- head -c 30000000 /dev/zero | (sleep 1; wc -c)"],
                       capture_output=True, timeout=120, env=_env())  # fmt: skip
    assert r.stdout.strip() == b"30000000" and b"dropped" not in r.stderr, r.stderr


def test_exec_into_a_closed_pipe_ends_like_a_pipeline():
    t0 = time.monotonic()
    r = subprocess.run(["sh", "-c", f"{' '.join(map(repr, CLI))} exec -- yes | head -2; echo ${{PIPESTATUS:-}}"],
                       capture_output=True, timeout=120, env=_env())  # fmt: skip
    assert r.stdout.startswith(b"y\ny\n")
    assert time.monotonic() - t0 < 60  # not the 120 s timeout: `yes` got SIGPIPE


def test_exec_interrupted_exits_130_and_143_and_leaves_nothing():
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        with subprocess.Popen(CLI + ["exec", "--", "sh", "-c", "echo up; sleep 300"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) as p:  # fmt: skip
            _interrupt(p, sig, code)


def _interrupt(p: subprocess.Popen, sig: int, code: int) -> None:
    try:
        assert p.stdout.readline() == b"up\n"
        kids = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
        assert kids
        p.send_signal(sig)
        assert p.wait(60) == code
        assert b"interrupted" in p.stderr.read()
        time.sleep(0.5)
        assert not [k for k in kids if psutil.pid_exists(k) and psutil.Process(k).status() != "zombie"]
    finally:
        p.kill()


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: tools/setup.sh installs it for the tests")
    name = f"sl-test-{os.getpid()}"
    sock = f"sl-test-{os.getpid()}"
    base = ["tmux", "-L", sock]

    def cmd(*args: str) -> str:
        return subprocess.run(base + list(args), capture_output=True, text=True, check=True, timeout=30).stdout

    yield name, cmd
    subprocess.run(base + ["kill-server"], capture_output=True)


def _wait_for(cmd, name: str, text: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = cmd("capture-pane", "-t", name, "-p", "-S", "-500")
        if text in screen:
            return screen
        assert time.monotonic() < deadline, f"no {text!r} on the screen:\n{screen}"
        time.sleep(0.1)


def test_shell_is_an_interactive_terminal(tmux, tmp_path):
    name, cmd = tmux
    status = tmp_path / "status"
    cli = " ".join(repr(a) for a in CLI)
    env = f"PYTHONPATH={_env()['PYTHONPATH']!r}"
    cmd("new-session", "-d", "-s", name, "-x", "100", "-y", "30",
        f"env {env} {cli} shell; echo $? > {status}; sleep 60")  # fmt: skip
    _wait_for(cmd, name, "/testbed#")
    cmd("send-keys", "-t", name, "python3", "Enter")
    _wait_for(cmd, name, ">>>")
    cmd("send-keys", "-t", name, "6*7", "Enter")
    _wait_for(cmd, name, "42")
    cmd("send-keys", "-t", name, "import time; time.sleep(60)", "Enter")
    time.sleep(0.5)
    cmd("send-keys", "-t", name, "C-c")  # Ctrl-C reaches python inside, not sandboxlite
    _wait_for(cmd, name, "KeyboardInterrupt")
    cmd("send-keys", "-t", name, "exit()", "Enter")
    cmd("send-keys", "-t", name, "stty size; sleep 100", "Enter")
    _wait_for(cmd, name, "30 100")
    cmd("send-keys", "-t", name, "C-z")  # job control
    _wait_for(cmd, name, "Stopped")
    cmd("send-keys", "-t", name, "fg", "Enter")  # back in the foreground, then Ctrl-C ends it
    _wait_for(cmd, name, "sleep 100\n")
    time.sleep(0.3)
    cmd("send-keys", "-t", name, "C-c")
    cmd("send-keys", "-t", name, "echo fg-$?", "Enter")
    _wait_for(cmd, name, "fg-130")
    cmd("send-keys", "-t", name, "exit 7", "Enter")
    deadline = time.monotonic() + 60
    while not status.exists() or not status.read_text().strip():
        assert time.monotonic() < deadline, cmd("capture-pane", "-t", name, "-p", "-S", "-500")
        time.sleep(0.1)
    assert status.read_text().strip() == "7"  # the shell's exit status is the command's
