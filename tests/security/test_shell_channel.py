"""Attacks on the persistent shell's end-of-command report (what the agent's execute_bash reads).

The shell once ended each command with a marker on stdout whose nonce sat in a shell variable:
a command could print it, then flood stdout, and the host kept everything after it (no cap),
or print it with a non-numeric exit code, and the tool raised ValueError.  The status now
travels on a channel of its own that no program the command runs can reach.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sandboxlite import Sandbox

# the old marker's variable, printed as the end of a command, then 200 MB more on stdout
FORGE_AND_FLOOD = r"""printf '%s0 /\0' "$__sl_m"; printf '%s' "$__sl_m" >&2; head -c 200000000 /dev/zero"""

_PEAK = r"""
import json, resource, sys
from sandboxlite import Sandbox
with Sandbox(rootfs="host") as sb, sb.shell() as sh:
    sh.run("true")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = sh.run(sys.argv[1], timeout=60)
    after = sh.run("echo next")
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    print(json.dumps({"grown_kib": grown, "code": r.exit_code, "stdout_len": len(r.stdout),
                      "truncated": r.truncated, "next": after.stdout.decode(errors="replace")}))
"""


def test_a_forged_end_then_a_flood_keeps_the_host_bounded(record):
    """Host memory stays within the output limit whatever the command prints."""
    p = subprocess.run([sys.executable, "-c", _PEAK, FORGE_AND_FLOOD], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    record("print the old end marker, then 200 MB on stdout", "host RSS grows < 64 MiB; output capped",
           f"RSS +{res['grown_kib'] // 1024} MiB, {res['stdout_len']} bytes kept, next: {res['next']!r}")  # fmt: skip
    assert res["grown_kib"] < 64 * 1024
    assert res["truncated"] and res["stdout_len"] <= 1 << 20
    assert res["code"] == 0
    assert res["next"] == "next\n"  # the session is in step


@pytest.fixture
def shell():
    with Sandbox(rootfs="host") as sb, sb.shell() as sh:
        yield sh


def test_a_forged_end_with_a_bad_exit_code_is_only_output(shell, record):
    r = shell.run(r"""printf '%sabc /\0' "$__sl_m"; echo after""")
    record("the old marker with a non-numeric exit code", "plain output, exit 0", (r.exit_code, r.stdout))
    assert r.exit_code == 0 and r.stdout.endswith(b"after\n")
    assert shell.run("echo ok").stdout == b"ok\n"


def test_programs_the_command_runs_cannot_reach_the_status_channel(shell, record):
    """fd 3 is closed while a command runs, and bash's own copy is close-on-exec."""
    r = shell.run("echo forged >&3; ls /proc/self/fd | sort -n | tr '\\n' ' '; python3 -c 'import os; os.write(3, b\"0 /\\0\")'")
    record("write the status channel from the command and from a child", "EBADF; fds 0-3 only",
           (r.exit_code, r.stdout, r.stderr[-200:]))  # fmt: skip
    assert b"Bad file descriptor" in r.stderr
    assert r.stdout.split() == [b"0", b"1", b"2", b"3"]  # 3: ls's own directory
    assert r.exit_code == 1 and r.note == ""
    assert shell.run("echo ok").stdout == b"ok\n"


def test_a_builtin_that_writes_bash_s_own_copy_gets_a_new_session_not_an_exception(shell, record):
    """Deliberate tampering from inside bash (its saved copy of fd 3, found through /proc):
    a malformed or doubled report ends that session cleanly."""
    saved = shell.run("ls -l /proc/$$/fd | awk '/^l-wx/ && /pipe/ && $9 >= 10 {print $9}'").stdout.strip().decode()
    assert saved.isdigit() and int(saved) >= 10, saved
    shell.run("cd /tmp")
    r = shell.run(f"builtin printf 'abc /\\0' >&{saved}; sleep 0.2")
    record("a builtin writes a malformed status on bash's saved copy", "new session, a note", (r.exit_code, r.note))
    assert "malformed status" in r.note and shell.restarts == 1
    assert shell.run("pwd").stdout == b"/tmp\n"  # the new session starts where the old one was
    r = shell.run(f"builtin printf '%s\\0%s\\0' '0 /' '0 /' >&{saved}; sleep 0.2")  # two reports in one write
    assert "malformed status" in r.note and shell.restarts == 2
    assert shell.run("echo ok").stdout == b"ok\n"
