"""isolation="landlock": the same Sandbox API without namespaces (real sandboxes; the attacks
are in tests/security/test_landlock.py), and its plan as a pure function."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from sandboxlite import ConfigError, Host, Limits, Mount, Sandbox, SandboxConfig, SetupError
from sandboxlite.images import host_plan
from sandboxlite.isolation.landlock import Places
from sandboxlite.jail.plan import plan_landlock


@pytest.fixture
def ll():
    with Sandbox(isolation="landlock") as sb:
        yield sb


def test_exec_files_shell_and_reset(ll):
    assert ll.info["isolation"] == "landlock"
    wd = ll.workdir
    assert wd.startswith(default_dir()) and wd.endswith("/testbed") and wd != "/testbed"
    r = ll.exec("pwd; echo $HOME $TMPDIR; echo hi > a.txt; echo t > $TMPDIR/t; echo h > $HOME/h; python3 -c 'print(6*7)'")
    assert r.exit_code == 0, r.stderr_text
    home, tmp = r.stdout_text.split("\n")[1].split()
    assert r.stdout_text.split("\n")[0] == wd and r.stdout_text.split("\n")[2] == "42"
    assert (home, tmp) == (ll.workdir.replace("testbed", "home"), ll.workdir.replace("testbed", "tmp"))
    assert ll.read_file("a.txt") == b"hi\n" and ll.read_file(f"{wd}/a.txt") == b"hi\n"
    ll.write_file("sub/b.txt", b"x\0y")
    assert ll.exec(["cat", "sub/b.txt"]).stdout == b"x\0y"
    assert ll.exec("exit 7").exit_code == 7
    sh = ll.shell()
    sh.run("cd sub && export X=5")
    assert sh.run("pwd; echo $X").stdout_text == f"{wd}/sub\n5\n"
    ll.reset()
    assert ll.workdir == wd  # the same directories, emptied
    assert ll.exec("ls -A . $TMPDIR $HOME | grep -v :").stdout_text.strip() == ""


def test_limits_hold(ll):
    r = ll.exec("sleep 5", timeout=0.5)
    assert r.timed_out and r.exit_code == 124
    with Sandbox(isolation="landlock", limits=Limits(output_bytes=1000, fsize_mb=1)) as sb:
        r = sb.exec("head -c 5000 /dev/zero; dd if=/dev/zero of=big bs=1M count=3 2>/dev/null; echo $? >&2")
        assert r.truncated and len(r.stdout) == 1000
        assert r.stderr_text.strip() != "0" and os.path.getsize(f"{sb.workdir}/big") <= 1 << 20


def test_reads_the_host_read_only(ll):
    r = ll.exec("cat /etc/os-release >/dev/null && echo read; touch /usr/x 2>&1; ls / 2>&1; cat /root/x 2>&1")
    assert r.stdout_text.startswith("read\n")
    assert "Permission denied" in r.stdout_text and r.stdout_text.count("Permission denied") >= 2


def test_mounts_grant_a_host_path_at_its_own_place():
    d = Path(tempfile.mkdtemp(prefix="sl-ll-mount-", dir="/var/tmp"))
    ro, rw = d / "ro", d / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "data").write_text("in\n")
    for p in (d, ro, rw):
        os.chmod(p, 0o777)
    try:
        with Sandbox(isolation="landlock", mounts=[Mount(str(ro), str(ro)), Mount(str(rw), str(rw), rw=True)]) as sb:
            r = sb.exec(f"cat {ro}/data; echo out > {rw}/res; touch {ro}/no 2>&1; ls {d} 2>&1")
            assert r.stdout_text.startswith("in\n") and r.stdout_text.count("Permission denied") == 2, r.stdout_text
        assert (rw / "res").read_text() == "out\n" and not (ro / "no").exists()
    finally:
        shutil.rmtree(d)


@pytest.mark.parametrize("field, config, needle", [
    ("rootfs", dict(rootfs="lean"), "host's own files"),
    ("workdir", dict(workdir="/srv/x"), "Sandbox.workdir"),
    ("mounts", dict(mounts=["/var/tmp:/data"]), "at its own place"),
])  # fmt: skip
def test_what_needs_a_mount_namespace_is_refused(field, config, needle):
    with pytest.raises(ConfigError) as e:
        Sandbox(isolation="landlock", **config)
    assert e.value.field == field and needle in str(e.value)


def test_the_environment_chooses_it_only_for_auto():
    host = Host.detect({**os.environ, "SANDBOXLITE_ISOLATION": "landlock"})
    with Sandbox(host=host) as sb:
        assert sb.info["isolation"] == "landlock"
    with Sandbox(host=host, isolation="namespaces", rootfs="host") as sb:
        assert sb.info["isolation"] == "namespaces" and sb.workdir == "/testbed"
    with Sandbox(rootfs="host") as sb:  # the default: namespaces, never Landlock unasked
        assert sb.info["isolation"] == "namespaces"


def test_an_old_kernel_is_refused_with_the_way_out():
    host = dataclasses.replace(Host.detect(), landlock_abi=4, landlock_reason="")
    before = set(os.listdir(default_dir())) if os.path.isdir(default_dir()) else set()
    with pytest.raises(SetupError) as e:
        Sandbox(host=host, isolation="landlock")
    assert "ABI 6" in e.value.message and "ABI 4" in e.value.message and "namespaces" in e.value.hint
    assert set(os.listdir(default_dir())) <= before  # nothing left behind


def test_close_removes_its_directories():
    sb = Sandbox(isolation="landlock")
    root = sb.workdir.rsplit("/", 1)[0]
    sb.exec("mkdir -p a/b && chmod 000 a && ln -s / root-link")
    sb.close()
    assert not os.path.exists(root)


def test_executor_refuses_mixed_options():
    """The executor's own check: a namespace option with landlock=1, a Landlock one without."""
    exe = Host.detect().executor
    r, w = os.pipe()
    os.close(w)
    try:
        for argv, needle in (
            ([f"seccomp={r}", "landlock=1", "own=/tmp", "lower=/x"], "needs namespaces"),
            ([f"seccomp={r}", "ro=/usr"], "for landlock=1 only"),
            ([f"seccomp={r}", "landlock=1"], "own="),
        ):
            p = subprocess.run([exe, *argv], capture_output=True, text=True, pass_fds=(r,))
            assert p.returncode == 110 and needle in p.stderr, (argv, p.returncode, p.stderr)
    finally:
        os.close(r)


def test_plan_is_a_pure_function():
    host = Host(bwrap=None, euid=1000, landlock_abi=7, landlock_dir="/x", executor="/e")
    places = Places("/x/sb-1", "/x/sb-1/testbed", "/x/sb-1/tmp", "/x/sb-1/home")
    p = plan_landlock(SandboxConfig(mounts=["/data:/data:rw"]), host, host_plan(), places)
    assert p.program == "/proc/self/fd/4" and p.launcher == () and p.isolation == "landlock"
    assert "landlock=1" in p.argv and "rw=/data" in p.argv and "net=1" not in p.argv and not p.sockets
    assert [a for a in p.argv if a.startswith("own=")] == ["own=/x/sb-1/testbed", "own=/x/sb-1/tmp", "own=/x/sb-1/home"]
    assert p.workdir == "/x/sb-1/testbed" and dict(p.env) == {"HOME": "/x/sb-1/home", "TMPDIR": "/x/sb-1/tmp"}
    assert not any(a.startswith(("lower=", "bind=", "tmp=")) for a in p.argv)
    net = plan_landlock(SandboxConfig(network="host"), host, host_plan(), places)
    assert "net=1" in net.argv and net.sockets
    root = Host(bwrap=None, euid=0, run_as=(999, 998), landlock_abi=7, launcher=("/l", ("l",)))
    rp = plan_landlock(SandboxConfig(), root, host_plan(), places, (1879048192, 998))
    assert rp.program == "/l" and rp.spawn_argv()[:3] == ["l", "1879048192", "998"]
    assert rp.spawn_argv()[3] == "/proc/self/fd/4"


def default_dir() -> str:
    return Host.detect().landlock_dir



def test_doctor_judges_the_isolation_sandboxes_get():
    from sandboxlite.doctor import Check, judge

    rows = [Check("user namespaces", "fail", "refused"), Check("landlock mode", "ok", "works")]
    assert [c.status for c in judge(rows, "landlock")] == ["warn", "ok"]
    assert "not used here" in judge(rows, "landlock")[0].detail
    assert [c.status for c in judge(rows, "namespaces")] == ["fail", "ok"]
    rows = [Check("sandbox", "ok", "fine"), Check("landlock mode", "fail", "broken")]
    assert [c.status for c in judge(rows, "namespaces")] == ["ok", "warn"]
    assert [c.status for c in judge(rows, "landlock")] == ["ok", "fail"]


def test_reset_over_a_tree_too_deep_to_empty_replaces_the_sandbox(tmp_path):
    """Emptying stops at 200 levels (two descriptors a level); deeper, reset() starts a new sandbox
    and the old one's directories are removed from the host all the same."""
    with Sandbox(isolation="landlock") as sb:
        r = sb.exec("p=.; for i in $(seq 300); do p=$p/d; done; mkdir -p $p && echo deep > $p/f && echo made")
        assert r.stdout_text == "made\n", r.stderr_text
        old_root, old_pid = sb.workdir.rsplit("/", 1)[0], sb.executor_pid
        sb.upload(__file__, "copied.py")
        sb.reset()
        assert sb.executor_pid != old_pid and not os.path.exists(old_root)
        assert sb.exec("ls -A").stdout_text == ""
        sb.upload(__file__, "copied.py")  # the file API works in the new one
        assert sb.read_file("copied.py") == Path(__file__).read_bytes()


def test_cli_run_with_isolation_landlock(tmp_path, monkeypatch):
    """`sandboxlite run --isolation landlock TASK`: the model is told the sandbox's real paths."""
    from click.testing import CliRunner

    from sandboxlite.cli import main

    from .fake_openai import FakeOpenAIServer as ScriptedServer

    monkeypatch.setenv("SANDBOXLITE_ISOLATION", "namespaces")  # restored after: the CLI sets it for its process
    task = Path(__file__).resolve().parents[1] / "examples" / "demo_004.json"
    with ScriptedServer([ScriptedServer.text_reply("OK"),  # the preflight's answer
                         ScriptedServer.tool_call_reply("execute_bash", {"command": "pwd; ls input"}),
                         ScriptedServer.tool_call_reply("execute_bash", {"command": "echo $((17+25)) > output/answer.txt"}),
                         ScriptedServer.tool_call_reply("submit", {})]) as srv:  # fmt: skip
        r = CliRunner().invoke(main, ["run", str(task), "--model", "m", "--base-url", srv.base_url, "--api-key", "k",
                                      "--output-dir", str(tmp_path / "out"), "--quiet", "--isolation", "landlock"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "42" and (tmp_path / "out" / "answer.txt").read_text() == "42\n"
    traj = json.loads((tmp_path / "out" / "trajectory.json").read_text())
    first = next(m["content"] for m in traj["messages"] if m["role"] == "tool")
    wd = first.splitlines()[0]
    assert wd != "/testbed" and wd.startswith(default_dir() + "/sb-") and "numbers.txt" in first, first
    system = traj["messages"][0]["content"]
    assert wd in system and " /testbed" not in system


def test_commands_of_a_generation_may_signal_each_other(ll):
    """All commands of a generation share the zygote's Landlock layer (scoped signals reach each other), also
    after a command killed everything it could (the zygote too): the next command waits for a new zygote."""
    for round_ in range(2):
        pid = int(ll.exec("sleep 300 >/dev/null 2>&1 & echo $!").stdout_text)
        r = ll.exec(f"kill {pid} && echo killed")
        assert r.stdout_text == "killed\n", (round_, r.stderr_text)
        ll.exec("kill -9 -1")  # the zygote and its standby are the sandbox's too


def test_the_command_after_a_kill_all_joins_the_generations_layer(ll):
    """After a command killed everything it could, the next command's supervisor comes from a new
    zygote.  Before, when the dying zygote still took the request (or its socket refused and no new
    one was made), the command ran under a supervisor that confined itself, in a Landlock layer of
    its own: a kill of the sandbox's other processes then got EPERM (the CI failure of the test
    above: about one round in several hundred)."""
    wrong = []
    for i in range(400):
        pid = int(ll.exec("sleep 300 >/dev/null 2>&1 & echo $!").stdout_text)
        r = ll.exec(f"kill {pid} && echo killed")
        if r.stdout_text != "killed\n":
            wrong.append((i, r.stderr_text))
        ll.exec("kill -9 -1")
    assert wrong == []
