"""The persistent shell session behind the agent's execute_bash tool."""

import time

import pytest

from sandboxlite import ConfigError, Sandbox, SandboxClosed


@pytest.fixture
def sh(sb):
    return sb.shell()


def test_state_persists(sh):
    assert sh.run("cd /tmp && export X=5 && Y=6 && f() { echo fn$1; } && alias ll='echo alias'").exit_code == 0
    r = sh.run("pwd; echo $X $Y; f 2; ll")
    assert r.stdout == b"/tmp\n5 6\nfn2\nalias\n"
    assert sh.cwd == "/tmp"


def test_output_is_exact_and_exit_codes(sh):
    assert sh.run("printf 'no newline'").stdout == b"no newline"
    assert sh.run("printf 'a\\tb\\r\\n'").stdout == b"a\tb\r\n"
    r = sh.run("echo out; echo err >&2; false")
    assert (r.exit_code, r.stdout, r.stderr) == (1, b"out\n", b"err\n")
    assert sh.run("(exit 7)").exit_code == 7


def test_multiline_heredoc_and_special_characters(sh):
    cmd = "cat > /tmp/s.py <<'EOF'\nprint('-e \\\\n $HOME \"q\"')\nEOF\npython3 /tmp/s.py"
    r = sh.run(cmd)
    assert r.stdout == b'-e \\n $HOME "q"\n', r


def test_stdin_is_not_the_protocol(sh):
    assert sh.run("cat").stdout == b""  # reads /dev/null, does not eat our commands
    assert sh.run("echo still here").stdout == b"still here\n"


def test_timeout_kills_command_and_children_session_lives(sh, sb):
    sh.run("cd /tmp && export KEEP=1")
    t = time.monotonic()
    r = sh.run("echo partial; sleep 1000 & (setsid sleep 999 &); sleep 2000", timeout=0.5)
    assert time.monotonic() - t < 3
    assert r.timed_out and r.exit_code == 124 and r.stdout == b"partial\n"
    assert r.note == ""  # bash itself survived
    r = sh.run("pwd; echo $KEEP")
    assert r.stdout == b"/tmp\n1\n"
    comms = sb.exec("ps -eo comm").stdout.split()
    assert b"sleep" not in comms


def test_builtin_loop_timeout_restarts_in_same_dir(sh):
    sh.run("cd /root")
    r = sh.run("while :; do :; done", timeout=0.3)
    assert r.timed_out and r.exit_code == 124
    assert "new session" in r.note
    assert sh.run("pwd").stdout == b"/root\n"
    assert sh.restarts == 1


def test_exit_restarts_session(sh):
    sh.run("cd /tmp")
    r = sh.run("exit 3")
    assert r.exit_code == 3 and "exited with status 3" in r.note
    assert sh.run("echo ok; pwd").stdout == b"ok\n/tmp\n"


def test_background_job_survives_between_commands(sh, sb):
    sh.run("sleep 300 >/dev/null 2>&1 &")
    time.sleep(0.05)
    sh.run("sleep 100", timeout=0.3)
    assert b"sleep 300" in sb.exec("ps -eo args").stdout


def test_output_cap_still_finds_the_end():
    with Sandbox(limits={"output_bytes": 1000}) as sb:
        sh = sb.shell()
        r = sh.run("head -c 5000000 /dev/zero; echo done >&2")
        assert r.truncated and len(r.stdout) == 1000 and r.stderr == b"done\n"
        assert sh.run("echo next").stdout == b"next\n"


def test_big_command_text(sh):
    payload = "x" * 200_000
    r = sh.run(f"v='{payload}'; echo ${{#v}}")
    assert r.stdout == b"200000\n"


def test_bad_input_and_closed(sb):
    sh = sb.shell()
    with pytest.raises(ConfigError):
        sh.run("echo \0")
    sh.close()
    with pytest.raises(SandboxClosed):
        sh.run("true")
    sh2 = sb.shell()
    sb.reset()
    with pytest.raises(SandboxClosed):
        sh2.run("true")
    assert sb.shell().run("echo fresh").stdout == b"fresh\n"


def test_two_shells_are_independent(sb):
    a, b = sb.shell(), sb.shell(cwd="/tmp", env={"WHO": "b"})
    a.run("cd /root; export WHO=a")
    assert a.run("pwd; echo $WHO").stdout == b"/root\na\n"
    assert b.run("pwd; echo $WHO").stdout == b"/tmp\nb\n"


def test_ctrl_c_during_a_command_leaves_a_usable_session(sb):
    import os
    import signal as sig
    import threading

    sh = sb.shell()
    sh.run("cd /tmp")
    threading.Timer(0.3, lambda: os.kill(os.getpid(), sig.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        sh.run("echo started; sleep 30; echo never")
    r = sh.run("echo next; pwd")
    assert r.stdout == b"next\n/tmp\n"  # nothing of the interrupted command leaks in
    assert "interrupted" in r.note and sh.restarts == 1
    assert sh.run("echo then").note == ""
