"""The launcher a root caller uses to start bwrap as an unprivileged uid."""

import os
import subprocess

import pytest

from sandboxlite import executor

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the launcher is only used by root callers")


def launch(*args):
    prog, prefix = executor.launcher()
    return subprocess.run([str(prog), *prefix[1:], *args], capture_output=True, text=True)


def test_drops_uid_gid_and_groups():
    r = launch("65534", "65534", "/bin/cat", "/proc/self/status")
    assert r.returncode == 0, r.stderr
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
    assert fields["Uid"].split() == ["65534"] * 4
    assert fields["Gid"].split() == ["65534"] * 4
    assert fields["Groups"].strip() == ""
    assert fields["CapEff"].strip("\t 0") == ""


@pytest.mark.parametrize("args", [("0", "0", "/bin/true"), ("abc", "1", "/bin/true"), ("65534",), ("-1", "1", "/bin/true")])
def test_refuses_root_and_garbage(args):
    r = launch(*args)
    assert r.returncode == 111
    assert "sandboxlite" in r.stderr


def test_reports_a_missing_program():
    r = launch("65534", "65534", "/no/such/program")
    assert r.returncode == 111 and "cannot execute" in r.stderr


def test_joins_cgroups_before_dropping_privileges():
    from sandboxlite.isolation import cgroups

    support = cgroups.detect()
    if support.kind != "v1":
        pytest.fail(f"root, but cgroup v1 pids/memory are unusable: {support.reason}")
    cg = cgroups.Allocator(support).create(64 << 20, 16)
    try:
        args = [x for f in cg.tasks_files() for x in ("-t", f)]
        r = launch(*args, "65534", "65534", "/bin/cat", "/proc/self/cgroup")
        assert r.returncode == 0, r.stderr
        name = cg.dirs[0].name
        lines = [line for line in r.stdout.splitlines() if ":pids:" in line or ":memory:" in line]
        assert len(lines) == 2 and all(line.endswith(f"/sandboxlite/{name}") for line in lines), r.stdout
        r = launch("-t", "/nonexistent/tasks", "65534", "65534", "/bin/true")
        assert r.returncode == 111 and "cgroup" in r.stderr
    finally:
        cg.destroy()
