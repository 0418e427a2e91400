"""SandboxConfig.user: commands run as another id of the image (the Dockerfile builder's USER)."""

from __future__ import annotations

import pytest

from sandboxlite import Sandbox, SandboxConfig
from sandboxlite.errors import ConfigError


@pytest.mark.parametrize("spec, ids", [("1000", "1000 0"), ("1000:50", "1000 50"), ("nobody", "65534 65534"),
                                       ("0", "0 0")])  # fmt: skip
def test_commands_run_as_the_user_given_and_own_what_they_see(spec, ids):
    with Sandbox(user=spec) as sb:
        r = sb.exec("echo $(id -u) $(id -g); touch /tmp/f && stat -c %u /tmp/f")
        assert r.stdout.decode().split("\n")[:2] == [ids, ids.split()[0]], r


def test_bad_users_are_refused_with_the_field_named():
    for bad in ("", ":", "a/b", 5):
        with pytest.raises(ConfigError, match="^user:"):
            SandboxConfig(user=bad)
    with pytest.raises(ConfigError, match="user: the user 'nosuch'"):
        Sandbox(user="nosuch")
    with pytest.raises(ConfigError, match="landlock"):
        Sandbox(user="1000", isolation="landlock", rootfs="host")


def test_ignore_chown_makes_chown_a_no_op_that_succeeds():
    cmd = "mkdir -p /tmp/d && chown -R 4242:4242 /tmp/d; echo $? $(stat -c %u /tmp/d)"
    with Sandbox() as sb:
        assert sb.exec(cmd).stdout.split()[0] == b"1"  # an id the namespace does not map: EINVAL
    with Sandbox(ignore_chown=True) as sb:
        assert sb.exec(cmd).stdout.split() == [b"0", b"0"]  # succeeded, changed nothing
    with pytest.raises(ConfigError, match="^ignore_chown:"):
        SandboxConfig(ignore_chown="yes")
