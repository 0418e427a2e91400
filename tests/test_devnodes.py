"""The ready-made /dev of root callers' sandboxes (sandboxlite.isolation.devnodes) against bwrap's --dev."""

import os
import stat

import pytest

from sandboxlite import ConfigError, Sandbox
from sandboxlite.config import SandboxConfig
from sandboxlite.images import RootfsPlan
from sandboxlite.isolation import devnodes
from sandboxlite.isolation.bwrap import BwrapInfo
from sandboxlite.jail.host import Host
from sandboxlite.jail.plan import EXECUTOR_FD, plan

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only root can make device nodes")

PLAN = RootfsPlan(name="t", kind="dir", path="/img", binds=(("/img/usr", "/usr"),), symlinks=())
INFO = BwrapInfo(path="/usr/bin/bwrap", version=(0, 8, 0), disable_userns=True)
USER = Host(bwrap=INFO, euid=1000)
ROOT = Host(bwrap=INFO, euid=0, run_as=(999, 999), launcher=("/l", ("l",)), dev="/dev/.sandboxlite-1", dev_reason="")

DEV_CHECK = r"""
import errno, json, os, pty
out = {"names": sorted(os.listdir("/dev")), "pts": sorted(os.listdir("/dev/pts"))}
with open("/dev/null", "wb") as f: f.write(b"x")
with open("/dev/zero", "rb") as f: out["zero"] = f.read(4).hex()
out["urandom"] = len(open("/dev/urandom", "rb").read(16))
try:
    with open("/dev/full", "wb") as f: f.write(b"x"); f.flush()
except OSError as e: out["full"] = errno.errorcode[e.errno]
m, s = pty.openpty(); out["pty"] = os.ttyname(s)
out["links"] = {n: os.readlink("/dev/" + n) for n in ("fd", "stdin", "stdout", "stderr", "ptmx", "core")}
for name in ("/dev/new", "/dev/shm/ok"):
    try:
        open(name, "w").close(); out[name] = "ok"
    except OSError as e: out[name] = errno.errorcode[e.errno]
print(json.dumps(out))
"""


def run_check(sb):
    import json

    r = sb.exec(["python3", "-c", DEV_CHECK])
    assert r.exit_code == 0, r
    return json.loads(r.stdout)


def test_argv_binds_a_ready_made_dev_once_instead_of_dev():
    plain = list(plan(SandboxConfig(), USER, PLAN).argv)
    made = list(plan(SandboxConfig(), ROOT, PLAN).argv)
    assert "--dev" in plain and "--dev-bind" not in plain and "devdir=1" not in plain
    i = made.index("--dev-bind")
    assert made[i + 1 : i + 3] == ["/dev/.sandboxlite-1", "/dev"]
    assert "--dev" not in made
    assert "devdir=1" in made[made.index(f"/proc/self/fd/{EXECUTOR_FD}") :]  # an executor argument


@root_only
def test_build_makes_exactly_the_nodes_and_problems_spots_tampering(tmp_path):
    d = str(tmp_path / "dev")
    devnodes.build(d)
    assert devnodes.problems(d) == []
    st = os.stat(os.path.join(d, "null"))
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3
    os.unlink(os.path.join(d, "null"))
    with open(os.path.join(d, "null"), "w"):
        pass
    assert any("null" in p for p in devnodes.problems(d))
    os.unlink(os.path.join(d, "null"))
    os.mknod(os.path.join(d, "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(os.path.join(d, "null"), 0o666)
    assert devnodes.problems(d) == []
    os.chmod(d, 0o777)
    assert any("writable only by it" in p for p in devnodes.problems(d))
    os.chmod(d, 0o755)
    with open(os.path.join(d, "shm", "planted"), "w"):
        pass
    assert any("shm" in p for p in devnodes.problems(d))
    os.unlink(os.path.join(d, "shm", "planted"))
    os.symlink("/etc/shadow", os.path.join(d, "extra"))
    assert any("extra" in p for p in devnodes.problems(d))
    assert devnodes.problems(str(tmp_path / "missing"))


@root_only
def test_a_sandbox_sees_the_same_dev_either_way():
    host = Host.detect()
    assert host.dev == devnodes.DIR, host.dev_reason
    with Sandbox(rootfs="host", host=host) as sb:
        assert sb.info["dev"].startswith("ready-made") and "--dev-bind" in sb.argv
        ready = run_check(sb)
    with Sandbox(rootfs="host", host=Host.detect({**os.environ, "SANDBOXLITE_DEV": "bwrap"})) as sb:
        assert sb.info["dev"] == "bwrap --dev" and "--dev" in sb.argv
        theirs = run_check(sb)
    for got in (ready, theirs):
        assert got["names"] == sorted(["core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr",
                                       "stdin", "stdout", "tty", "urandom", "zero"])  # fmt: skip
        assert got["zero"] == "00000000" and got["urandom"] == 16 and got["full"] == "ENOSPC"
        assert got["pty"] == "/dev/pts/0" and got["/dev/shm/ok"] == "ok"
    assert ready["links"] == theirs["links"]
    assert ready["/dev/new"] == "EROFS"  # read-only (bwrap's own tmpfs /dev is writable by the sandbox's root)


@root_only
def test_each_generation_gets_fresh_ptys_and_the_image_root_works_too():
    with Sandbox(rootfs="science") as sb:
        assert sb.info["dev"].startswith("ready-made")
        sb.exec("python3 -c 'import pty,time; m,s=pty.openpty(); time.sleep(60)' >/dev/null 2>&1 &")
        assert sb.exec("sleep 0.3; ls /dev/pts").stdout.split() == [b"0", b"ptmx"]
        sb.reset()
        assert sb.exec("ls /dev/pts").stdout.split() == [b"ptmx"]
        assert run_check(sb)["pty"] == "/dev/pts/0"
        # mount tables name no host path for /dev: the directory is on devtmpfs
        line = [ln for ln in sb.exec("cat /proc/self/mountinfo").stdout.decode().splitlines() if " /dev " in ln]
        assert len(line) == 1 and line[0].split()[3] == "/" + os.path.basename(sb.jail.plan.dev)
        assert sb.jail.plan.dev == devnodes.DIR_PREFIX + str(sb.info["host_uid"])  # the sandbox's own
        assert " - devtmpfs " in line[0] and " ro," in line[0]


def test_falls_back_to_bwrap_dev_when_it_cannot_be_made():
    path, why = devnodes.prepare({}, euid=1000)
    assert path is None and "only root" in why
    path, why = devnodes.prepare({"SANDBOXLITE_DEV": "bwrap"}, euid=0)
    assert path is None and "SANDBOXLITE_DEV" in why
    path, why = devnodes.prepare({}, euid=0, path="/proc/no-such-dir/dev")  # cannot be made there
    assert path is None and "cannot make" in why


def test_an_unknown_dev_mode_is_a_config_error():
    with pytest.raises(ConfigError) as e:
        devnodes.prepare({"SANDBOXLITE_DEV": "tmpfs"}, euid=0)
    assert e.value.field == "SANDBOXLITE_DEV" and "'tmpfs'" in str(e.value) and e.value.hint
    with pytest.raises(ConfigError):  # and so does a Host (a sandbox's start) with it
        Host.detect({**os.environ, "SANDBOXLITE_DEV": "tmpfs"}) if os.geteuid() == 0 else devnodes.prepare(
            {"SANDBOXLITE_DEV": "tmpfs"}, euid=0)
