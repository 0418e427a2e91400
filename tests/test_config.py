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


def test_network_modes_allowlists_and_their_environment():
    from sandboxlite.config import PROXY_URL, base_env

    c = SandboxConfig(network="allow:pypi,*.example.org:8443")
    assert [r.source for r in c.policy.rules] == ["preset pypi", "preset pypi", "*.example.org:8443"]
    env = base_env(c)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        assert env[name] == PROXY_URL
    assert "127.0.0.1" in env["NO_PROXY"] and env["PIP_ROOT_USER_ACTION"] == "ignore"
    assert not any("proxy" in k.lower() or k.startswith("PIP_") for k in base_env(SandboxConfig()))
    assert not any("proxy" in k.lower() for k in base_env(SandboxConfig(network="host")))
    # the caller's own env wins
    assert base_env(c.replace(env={"HTTPS_PROXY": "http://elsewhere"}))["HTTPS_PROXY"] == "http://elsewhere"
    assert c.replace(network="none").policy is None
    for bad, words in (("allow:", "empty rule"), ("allow:nosuch", "unknown preset"), ("allow:10.0.0.1", "IP address"),
                       ("allow:*.org", "too wide"), ("all", "must be none, host or allow")):  # fmt: skip
        with pytest.raises(ConfigError, match=words):
            SandboxConfig(network=bad)


def test_exposed_ports_and_egress_limits_are_checked():
    assert SandboxConfig(expose=[8000, 9000]).expose == (8000, 9000)
    for bad, words in (([0], "list of ports"), ([70000], "list of ports"), (8000, "list of ports"),
                       ([True], "list of ports"), ([80, 80], "listed twice")):  # fmt: skip
        with pytest.raises(ConfigError, match=words):
            SandboxConfig(expose=bad)
    with pytest.raises(ConfigError, match="on the host's network already"):
        SandboxConfig(network="host", expose=[8000])
    with pytest.raises(ConfigError, match="egress proxy's"):
        SandboxConfig(network="allow:pypi", expose=[3128])
    assert SandboxConfig(limits={"egress_mb": 5, "egress_connections": 2}).limits.egress_mb == 5
    for field in ("egress_mb", "egress_connections"):
        with pytest.raises(ConfigError, match=f"limits.{field}"):
            SandboxConfig(limits={field: 0})
