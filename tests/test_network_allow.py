"""network="allow:<rules>" in real jails: the sandbox reaches the host's egress proxy on its own
127.0.0.1:3128, requests are logged, caps hold, resets start a new episode, pip installs from
PyPI (live: the package index, which this machine reaches).  The bypass attempts are in
tests/security/test_egress.py.  The internet is stood for by HTTP servers on the host's loopback
(tests/egress_fixtures.py)."""

import json

import pytest  # noqa: F401

from sandboxlite import Sandbox
from sandboxlite.config import PROXY_URL

from .egress_fixtures import curl, host, origins  # noqa: F401  (fixtures)


def test_an_allowed_host_is_reached_through_the_proxy_and_logged(host, origins):
    a, _ = origins
    with Sandbox(network=f"allow:pkg.test:{a}", host=host) as sb:
        env = sb.exec("env | grep -i _proxy= | sort").stdout.decode()
        assert f"HTTP_PROXY={PROXY_URL}" in env and f"https_proxy={PROXY_URL}" in env and "NO_PROXY=" in env
        code, out, err = curl(sb, f"http://pkg.test:{a}/hello")
        assert code == 0 and out.startswith(f"origin-A /hello host=pkg.test:{a}") and out.endswith("200"), err
        (entry,) = sb.network_log()
        assert entry.allowed and (entry.method, entry.host, entry.port) == ("GET", "pkg.test", a)
        assert entry.why == f"pkg.test:{a}" and entry.bytes_down > 0 and entry.sandbox
        info = sb.info
        assert info["network"] == f"allow:pkg.test:{a}" and "egress proxy" in info["egress"]


def test_a_denied_host_is_answered_with_the_rule_that_refused_it(host, origins):
    a, b = origins
    with Sandbox(network=f"allow:pkg.test:{a}", host=host) as sb:
        code, out, err = curl(sb, f"http://other.test:{b}/", "-i")
        assert out.endswith("403") and "X-Sandboxlite-Egress: denied" in out
        assert f"other.test:{b} is not in the allowlist allow:pkg.test:{a}" in out
        code, out, err = curl(sb, f"https://other.test:{b}/")  # CONNECT: curl reports the proxy's 403
        assert code != 0 and "403" in err
        assert [(e.method, e.allowed) for e in sb.network_log()] == [("GET", False), ("CONNECT", False)]


def test_a_reset_starts_a_new_log_and_the_proxy_still_serves(host, origins):
    a, _ = origins
    with Sandbox(network=f"allow:pkg.test:{a}", host=host) as sb:
        assert curl(sb, f"http://pkg.test:{a}/one")[1].endswith("200")
        sb.reset()
        assert sb.network_log() == []
        assert curl(sb, f"http://pkg.test:{a}/two")[1].endswith("200")
        assert [e.allowed for e in sb.network_log()] == [True]
        # a command cannot take the proxy's port over
        r = sb.exec(["python3", "-c", "import socket; socket.socket().bind(('127.0.0.1', 3128))"])
        assert r.exit_code != 0 and b"Address already in use" in r.stderr
    assert [e.allowed for e in sb.network_log()] == [True]  # after close: the last episode's


def test_the_byte_and_connection_caps_hold_in_a_sandbox(host, origins):
    a, _ = origins
    limits = {"egress_mb": 1, "egress_connections": 2}
    with Sandbox(network=f"allow:pkg.test:{a}", limits=limits, host=host) as sb:
        code, out, _ = curl(sb, f"http://pkg.test:{a}/big/{3 << 20}", "-o", "/dev/null")
        assert code != 0  # cut at 1 MiB
        assert "limit of 1048576 bytes" in sb.network_log()[0].why
        sb.reset()
        held = sb.exec(["bash", "-c", f"for i in 1 2 3; do (exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT pkg.test:{a} "
                       f"HTTP/1.1\\r\\n\\r\\n' >&3; read -r line <&3; echo \"$line\"; sleep 2) & done; wait"],
                       timeout=30)  # fmt: skip
        out = held.stdout.decode()
        assert out.count("200 Connection established") == 2 and out.count("429 Too Many Requests") == 1, out


def test_the_prompt_tells_the_model_what_the_network_allows():
    from sandboxlite.agent.prompts import PromptTemplate

    t = PromptTemplate.load()
    system, _ = t.render("q", {}, network="allow:pypi,*.example.org")
    assert "pypi.org, files.pythonhosted.org, *.example.org (pip install works); every other host is refused" in system
    assert "there is no network" in t.render("q", {}, network="none")[0]


def test_pip_install_from_pypi_with_the_preset():
    """Live: the Python package index through the real proxy (the host's resolver and CAs)."""
    with Sandbox(network="allow:pypi") as sb:
        r = sb.exec("python3 -m pip install --no-deps --no-cache-dir --progress-bar off tomli-w==1.0.0 && "
                    "python3 -c 'import tomli_w; print(tomli_w.dumps({\"a\": 1}))'", timeout=120)  # fmt: skip
        assert r.exit_code == 0 and r.stdout.decode().strip().endswith("a = 1"), r
        hosts = {e.host for e in sb.network_log() if e.allowed}
        assert hosts == {"pypi.org", "files.pythonhosted.org"}, sb.network_log()
        r = sb.exec("python3 -m pip download --no-deps -d /tmp/x --index-url https://example.invalid/simple six",
                    timeout=120)  # fmt: skip
        assert r.exit_code != 0
        denied = [e for e in sb.network_log() if not e.allowed]
        assert denied and denied[0].host == "example.invalid" and "not in the allowlist allow:pypi" in denied[0].why


def test_exec_cli_writes_the_request_log(tmp_path):
    from click.testing import CliRunner

    from sandboxlite.cli import main

    log = tmp_path / "log.jsonl"
    r = CliRunner().invoke(main, ["exec", "--network", "allow:pypi", "--network-log", str(log), "--",
                                  "curl", "-sS", "-m", "10", "https://example.invalid/"])  # fmt: skip
    assert r.exit_code != 0
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["host"] == "example.invalid" and entry["allowed"] is False and entry["method"] == "CONNECT"
    r = CliRunner().invoke(main, ["exec", "--network", "allow:nosuchpreset", "--", "true"])
    assert r.exit_code == 2 and "unknown preset 'nosuchpreset'" in r.output


def test_apt_install_from_debian_with_the_preset():
    """Live: Debian's archive through the real proxy; dpkg renames directories in the copy-on-write
    root (the overlay's userxattr mode lets it)."""
    with Sandbox(network="allow:debian") as sb:
        r = sb.exec("apt-get update -qq && apt-get install -y -qq --no-install-recommends sl >/dev/null && "
                    "test -x /usr/games/sl && echo installed", timeout=300)  # fmt: skip
        assert r.exit_code == 0 and r.stdout.decode().strip().endswith("installed"), r
        hosts = {e.host for e in sb.network_log() if e.allowed}
        assert "deb.debian.org" in hosts, sb.network_log()
        sb.reset()  # a disposable root: the package is gone
        assert sb.exec("test -e /usr/games/sl").exit_code != 0


def test_a_sandbox_stays_with_its_proxy_when_the_hosts_is_replaced(host, origins):
    """set_egress_proxy serves sandboxes that start afterwards: one already running keeps its
    proxy for its log, its resets and its close."""
    import dataclasses

    from sandboxlite.network.egress import EgressProxy

    a, _ = origins
    h = dataclasses.replace(host)
    h.set_egress_proxy(host.egress_proxy())
    with Sandbox(network=f"allow:pkg.test:{a}", host=h) as sb:
        assert curl(sb, f"http://pkg.test:{a}/one")[1].endswith("200")
        other = EgressProxy()
        h.set_egress_proxy(other)
        try:
            assert [e.allowed for e in sb.network_log()] == [True]
            sb.reset()
            assert sb.network_log() == [] and curl(sb, f"http://pkg.test:{a}/two")[1].endswith("200")
        finally:
            sb.close()
            other.close()
    assert [e.allowed for e in sb.network_log()] == [True] and other.tenants() == []
