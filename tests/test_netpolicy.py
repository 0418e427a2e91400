"""Egress allowlists (issue 20, step 1): parsing and decisions, a pure function of the policy and the
request.  Names used are reserved (.test, .invalid, example.org) or the registries' own."""

import json

import pytest

from sandboxlite.errors import ConfigError
from sandboxlite.network.policy import BUILTIN_PRESETS, Policy, load_presets, normalize_host

NO_USER = {}  # no user presets (tests never read the developer's file)


def policy(spec, presets=NO_USER):
    return Policy.parse(spec, presets)


def test_presets_and_hosts():
    p = policy("allow:pypi,files.example.org,*.pkg.test")
    assert p.decide("pypi.org", 443) and p.decide("files.pythonhosted.org", 443)
    assert p.decide("pypi.org", 443).rule == "preset pypi"
    assert p.decide("files.example.org", 80).rule == "files.example.org"
    assert p.decide("a.pkg.test", 443) and p.decide("a.b.pkg.test", 443)
    assert not p.decide("pkg.test", 443)  # a wildcard is below the name, not the name
    assert not p.decide("evilpkg.test", 443) and not p.decide("pkg.test.invalid", 443)
    assert not p.decide("deb.debian.org", 443)  # not asked for
    assert set(BUILTIN_PRESETS) == {"pypi", "debian"}


@pytest.mark.parametrize("host", ["PyPI.org", "pypi.org.", "[pypi.org]"])
def test_names_are_normalized(host):
    assert policy("allow:pypi").decide(host, 443)


@pytest.mark.parametrize("host", ["151.101.0.223", "127.0.0.1", "127.1", "0x7f.1", "2130706433", "::1",
                                  "[::ffff:127.0.0.1]", "0"])  # fmt: skip
def test_ip_literals_are_always_denied(host):
    d = policy("allow:pypi,*.example.org").decide(host, 443)
    assert not d and "IP address" in d.reason


def test_ports():
    p = policy("allow:pypi,mirror.example.org:8443")
    assert p.decide("pypi.org", 80) and not p.decide("pypi.org", 22) and not p.decide("pypi.org", 8443)
    assert p.decide("mirror.example.org", 8443) and not p.decide("mirror.example.org", 443)
    assert not p.decide("pypi.org", 0) and not p.decide("pypi.org", 70000)


def test_a_denial_names_the_policy():
    d = policy("allow:pypi").decide("www.example.org", 443)
    assert not d and d.rule is None and d.reason == "www.example.org:443 is not in the allowlist allow:pypi"


@pytest.mark.parametrize("spec, words", [
    ("pypi", "allow:RULE"), ("allow:", "empty rule"), ("allow:pypi,,debian", "empty rule"),
    ("allow:nosuchpreset", "unknown preset 'nosuchpreset' (known: debian, pypi)"),
    ("allow:*", "first label"), ("allow:a.*.example.org", "first label"), ("allow:*.org", "too wide"),
    ("allow:10.0.0.1", "IP address"), ("allow:pypi.org:99999", "not a port"), ("allow:exa mple.org", "labels"),
    ("allow:-bad.example.org", "labels"),
])  # fmt: skip
def test_bad_rules_are_config_errors_that_name_them(spec, words):
    with pytest.raises(ConfigError) as info:
        policy(spec)
    assert words in str(info.value)


def test_user_presets(tmp_path):
    f = tmp_path / "presets.json"
    f.write_text(json.dumps({"presets": {"mirror": ["mirror.example.org", "*.cdn.example.org"]}}))
    env = {"SANDBOXLITE_PRESETS": str(f)}
    presets = load_presets(env)
    p = policy("allow:mirror,pypi", presets)
    assert p.decide("a.cdn.example.org", 443).rule == "preset mirror" and p.decide("pypi.org", 443)
    with pytest.raises(ConfigError, match="reuses a built-in"):
        policy("allow:pypi", {"pypi": ["x.example.org"]})
    assert load_presets({"SANDBOXLITE_PRESETS": str(tmp_path / "none.json")}) == {}
    for bad in ("[1]", '{"presets": {"m": []}}', '{"presets": {}, "extra": 1}', "{not json"):
        f.write_text(bad)
        with pytest.raises(ConfigError, match=str(f)):
            load_presets(env)


def test_normalize_host_refuses_what_is_no_name():
    for bad in ("", "a..b", "a_b.example.org", "x" * 64 + ".org"):
        with pytest.raises(ValueError):
            normalize_host(bad)
    assert normalize_host("bücher.example.org") == "xn--bcher-kva.example.org"
