"""Config validation: bad values fail early, naming the field and what is allowed."""

import pytest

from sandboxlite import ConfigError, Limits, Mount, SandboxConfig


def test_defaults_are_secure():
    c = SandboxConfig()
    assert c.network == "none"
    assert c.mounts == ()
    assert c.workdir == "/testbed"
    assert c.limits.output_bytes == 1 << 20


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"network": "bridge"}, "network"),
        ({"cgroups": "maybe"}, "cgroups"),
        ({"workdir": "relative/dir"}, "workdir"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"env": {"A": 3}}, "env['A']"),
        ({"limits": {"timeout_s": 0}}, "limits.timeout_s"),
        ({"limits": {"pids": 2}}, "limits.pids"),
        ({"limits": {"memory_mb": -5}}, "limits.memory_mb"),
        ({"limits": {"nofile": True}}, "limits.nofile"),
        ({"limits": {"bogus": 1}}, "limits"),
        ({"mounts": ["/a:/proc"]}, "mount.dst"),
        ({"mounts": ["/a:b"]}, "mount.dst"),
        ({"mounts": ["nocolon"]}, "mount"),
        ({"mounts": ["/a:/x", "/b:/x"]}, "mounts"),
        ({"hostname": ""}, "hostname"),
    ],
)
def test_bad_values_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        SandboxConfig(**kwargs)
    assert e.value.field == field
    assert field in str(e.value)
    assert isinstance(e.value, ValueError)


def test_mount_parsing():
    assert Mount.parse("/data:/in") == Mount("/data", "/in", False)
    assert Mount.parse("/data:/out:rw") == Mount("/data", "/out", True)
    assert Mount.parse("/data:/in:ro").rw is False
    c = SandboxConfig(mounts=["/a:/b:rw", {"src": "/c", "dst": "/d"}, ("/e", "/f", False)])
    assert [m.dst for m in c.mounts] == ["/b", "/d", "/f"]
    assert Mount("/x", "/a/../b").dst == "/b"


def test_limits_from_mapping_and_none_lifts():
    c = SandboxConfig(limits={"memory_mb": None, "pids": 64})
    assert c.limits == Limits(memory_mb=None, pids=64)


def test_replace_revalidates():
    c = SandboxConfig()
    with pytest.raises(ConfigError):
        c.replace(network="everything")
