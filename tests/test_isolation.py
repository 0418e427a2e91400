"""What a sandbox looks like from inside, checked in real jails (rootfs="host").

The attacks on it (host files, processes, network, the kernel, resources, other
sandboxes, the non-root caller's mode) are in ``tests/security/``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from sandboxlite import Sandbox


@pytest.fixture(scope="module")
def mount_dirs(host_dir_factory):
    base = host_dir_factory("sandboxlite-mounts-")
    rw = base / "rw"
    rw.mkdir()
    os.chmod(rw, 0o777)  # the sandbox's host uid is unprivileged (nobody) for a root caller
    return {"rw": rw}


@pytest.fixture(scope="module")
def root_sb(mount_dirs):
    with Sandbox(rootfs="host", mounts=[f"{mount_dirs['rw']}:/data/rw:rw"]) as box:
        yield box


@pytest.mark.parametrize("directory", ["/testbed", "/tmp", "/root", "/dev/shm"])
def test_scratch_dirs_are_writable_tmpfs(root_sb, directory):
    r = root_sb.exec(f"echo x > {directory}/.probe && cat {directory}/.probe && rm {directory}/.probe && "
                     f"findmnt -no FSTYPE {directory} 2>/dev/null || stat -f -c %T {directory}")
    assert r.stdout_text.split() == ["x", "tmpfs"], r


def test_pid1_is_the_executor(root_sb):
    host_pid = root_sb.executor_pid
    assert host_pid and host_pid != 1
    host_cmdline = Path(f"/proc/{host_pid}/cmdline").read_bytes()
    assert root_sb.exec("cat /proc/1/cmdline").stdout == host_cmdline
    assert b"ctrl=" in host_cmdline
    # the host sees the executor as pid 1 of its own PID namespace
    nspid = next(
        line.split()[1:] for line in Path(f"/proc/{host_pid}/status").read_text().splitlines()
        if line.startswith("NSpid:")
    )
    assert nspid == [str(host_pid), "1"], nspid
    assert root_sb.exec("grep NSpid /proc/1/status").stdout_text.split() == ["NSpid:", "1"]
    # and it lives in user namespace of its own (its capabilities count there only)
    assert os.readlink(f"/proc/{host_pid}/ns/user") != os.readlink("/proc/self/ns/user")


def test_identity_inside(root_sb):
    r = root_sb.exec("id -u; id -g; hostname; python3 -c 'import os, socket; print(os.uname().nodename)'")
    assert r.stdout_text.split() == ["0", "0", "sandbox", "sandbox"]


def test_read_write_mount(root_sb, mount_dirs):
    token = secrets.token_hex(8)
    r = root_sb.exec(f"echo {token} > /data/rw/from-sandbox.txt && cat /data/rw/from-sandbox.txt")
    assert r.exit_code == 0, r.stderr_text
    host_file = mount_dirs["rw"] / "from-sandbox.txt"
    assert host_file.read_text() == token + "\n"
    # and the other way round, live
    (mount_dirs["rw"] / "from-host.txt").write_text("host " + token)
    assert root_sb.exec("cat /data/rw/from-host.txt").stdout_text == "host " + token


def test_unreachable_mount_source_is_a_clear_error(host_dir_factory):
    if os.geteuid() != 0:
        pytest.skip("only a root caller's sandboxes change uid")
    from sandboxlite import ConfigError

    d = host_dir_factory("sandboxlite-private-")
    os.chmod(d, 0o700)
    with pytest.raises(ConfigError) as e:
        Sandbox(mounts=[f"{d}:/data:ro"])
    assert "unprivileged host uid" in str(e.value) and "Hint:" in str(e.value)
