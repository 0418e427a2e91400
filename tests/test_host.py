"""Host facts: who the jails run as (a pure function of the environment and euid), and Host.detect()."""

import os

import pytest

from sandboxlite import ConfigError, Host, Sandbox, SetupError
from sandboxlite.isolation.identity import NOBODY, run_as, unreachable
from sandboxlite.jail.host import default_host


def test_only_a_root_caller_runs_its_jails_as_another_uid():
    assert run_as({}, euid=1000) is None
    assert run_as({"SANDBOXLITE_UID": "1234"}, euid=1000) is None  # a plain user cannot change uid
    ids = run_as({}, euid=0)
    assert ids is not None and ids[0] != 0
    assert run_as({"SANDBOXLITE_UID": "1234"}, euid=0) == (1234, 1234)
    assert run_as({"SANDBOXLITE_UID": "1234", "SANDBOXLITE_GID": "99"}, euid=0) == (1234, 99)
    assert NOBODY == (65534, 65534)


@pytest.mark.parametrize("env, field", [({"SANDBOXLITE_UID": "0"}, "SANDBOXLITE_UID"),
                                        ({"SANDBOXLITE_UID": "root"}, "SANDBOXLITE_UID"),
                                        ({"SANDBOXLITE_GID": "-1"}, "SANDBOXLITE_GID")])  # fmt: skip
def test_a_bad_uid_setting_is_a_config_error_naming_it(env, field):
    with pytest.raises(ConfigError) as e:
        run_as(env, euid=0)
    assert e.value.field == field


def test_unreachable_says_which_component_blocks():
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="sandboxlite-test-", dir="/tmp"))
    os.chmod(base, 0o755)
    d = base / "closed"
    d.mkdir()
    (d / "f").write_text("x")
    os.chmod(d, 0o700)
    owner = os.stat(d).st_uid
    other = owner + 12345
    why = unreachable(str(d / "f"), other, other, write=False)
    assert why == f"{d} is not searchable by uid {other}"
    assert unreachable(str(d / "f"), owner, owner, write=False) is None
    os.chmod(d, 0o755)
    os.chmod(d / "f", 0o644)
    assert unreachable(str(d / "f"), other, other, write=True) == f"{d / 'f'} is not writable by uid {other}"
    shutil.rmtree(base)


def test_detect_reads_the_environment_it_is_given():
    env = {**os.environ, "SANDBOXLITE_BWRAP": "/nonexistent/bwrap"}
    # no bwrap: the Host is still detected (isolation="landlock" runs without); a namespace
    # sandbox refuses to start, naming both ways out
    nob = Host.detect(env)
    assert nob.bwrap is None and "bubblewrap" in nob.bwrap_error.hint
    with pytest.raises(SetupError) as e:
        Sandbox(host=nob, rootfs="host")
    assert "bubblewrap" in e.value.hint and "isolation='landlock'" in e.value.hint
    with pytest.raises(ConfigError, match="SANDBOXLITE_ISOLATION"):
        Host.detect({**os.environ, "SANDBOXLITE_ISOLATION": "chroot"})
    h = Host.detect()
    assert h.bwrap.path and h.executor and h.seccomp
    assert h.uid == (h.run_as[0] if h.run_as else os.geteuid())
    if os.geteuid() == 0:
        assert h.launcher is not None and h.run_as is not None
        assert Host.detect({**os.environ, "SANDBOXLITE_NETNS_POOL": "0"}).netns is None
    else:
        assert h.launcher is None and h.netns is None and h.dev is None


def test_the_default_host_follows_the_environment(monkeypatch):
    a = default_host()
    assert default_host() is a  # detected once
    monkeypatch.setenv("SANDBOXLITE_NETNS_POOL", "2")
    b = default_host()
    assert b is not a
    monkeypatch.delenv("SANDBOXLITE_NETNS_POOL")


def test_a_replaced_default_host_gives_back_its_spare_cgroups(monkeypatch):
    first = default_host()
    assert first.cgroup_allocator is not None, "this machine offers no cgroups to test with"
    with Sandbox() as sb:
        sb.exec(["true"])
    assert first.cgroup_allocator._free  # its group kept for reuse
    monkeypatch.setenv("PATH", os.environ["PATH"] + ":/nonexistent-sandboxlite-test")
    second = default_host()
    assert second is not first
    assert first.cgroup_allocator._free == []  # given back now, not at exit
