"""The egress proxy (issue 20, step 2), on loopback: a real HTTP server on 127.0.0.1 stands for the
internet, reached under reserved names (.test) through a resolver given to the proxy; a client
speaks to a listener the proxy serves as curl or pip would through HTTP(S)_PROXY (here a unix
socket; a sandbox's is a loopback socket in its namespace: tests/test_network_allow.py)."""

import http.server
import itertools
import socket
import tempfile
import threading

import pytest

from sandboxlite.network.egress import EgressLimits, EgressProxy
from sandboxlite.network.policy import Policy

BODY = b"x" * 5000


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("X-Host-Seen", self.headers.get("Host", ""))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def origin():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()


def resolver(host, port):
    return {"pkg.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}.get(host) or []


@pytest.fixture
def proxy():
    with EgressProxy(resolver=resolver, allow_loopback=True) as p:
        yield p


_DIR = tempfile.mkdtemp(prefix="egress-test-")
_N = itertools.count()


def serve(proxy, sandbox, policy, limits=None):
    """Have ``proxy`` serve ``sandbox`` on a unix listener of its own; its path."""
    path = f"{_DIR}/{next(_N)}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(16)
    proxy.add(sandbox, policy, limits, listener=listener)
    return path


def ask(path, raw: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_plain_http_to_an_allowed_host_is_relayed_and_logged(proxy, origin):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}))
    r = ask(path, f"GET http://pkg.test:{origin}/a HTTP/1.1\r\nHost: pkg.test:{origin}\r\n\r\n".encode())
    assert r.startswith(b"HTTP/1.0 200") and r.endswith(BODY) and f"X-Host-Seen: pkg.test:{origin}".encode() in r
    (entry,) = proxy.log("sb1")
    assert entry.allowed and entry.host == "pkg.test" and entry.port == origin and entry.why == f"pkg.test:{origin}"
    assert entry.bytes_down > len(BODY) and entry.bytes_up > 0


def test_connect_relays_bytes_both_ways(proxy, origin):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}))
    r = ask(path, f"CONNECT pkg.test:{origin} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode())
    assert r.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200") and r.endswith(BODY)


@pytest.mark.parametrize("request_, status, words", [
    ("CONNECT other.test:{port} HTTP/1.1\r\n\r\n", 403, "other.test:{port} is not in the allowlist"),
    ("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n", 403, "IP address"),
    ("GET http://other.test:{port}/ HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n", 403, "not in the allowlist"),
    # Host-header trick: an allowed URL with another Host (or the other way round)
    ("GET http://pkg.test:{port}/ HTTP/1.1\r\nHost: other.test:{port}\r\n\r\n", 400, "is not the URL's host"),
    ("GET http://other.test:{port}/ HTTP/1.1\r\nHost: pkg.test:{port}\r\n\r\n", 400, "is not the URL's host"),
    ("GET http://pkg.test:{port}/ HTTP/1.1\r\nHost: pkg.test:{port}\r\nHost: other.test\r\n\r\n", 400, "malformed"),
    ("GET / HTTP/1.1\r\nHost: pkg.test:{port}\r\n\r\n", 400, "absolute"),
    ("GET http://user@pkg.test:{port}/ HTTP/1.1\r\n\r\n", 400, "names no host"),
])  # fmt: skip
def test_denied_requests_say_why(proxy, origin, request_, status, words):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}))
    r = ask(path, request_.format(port=origin).encode())
    assert r.startswith(f"HTTP/1.1 {status}".encode()), r
    assert words.format(port=origin).encode() in r and b"X-Sandboxlite-Egress: denied" in r


def test_a_name_that_resolves_to_loopback_is_refused_by_a_real_proxy(origin):
    with EgressProxy(resolver=resolver) as p:  # allow_loopback False: as in production
        path = serve(p, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}))
        r = ask(path, f"CONNECT pkg.test:{origin} HTTP/1.1\r\n\r\n".encode())
        assert r.startswith(b"HTTP/1.1 502") and b"not public (127.0.0.1)" in r
        assert not p.log("sb1")[0].allowed


def test_each_sandbox_has_its_own_socket_policy_and_log(proxy, origin):
    a = serve(proxy, "a", Policy.parse(f"allow:pkg.test:{origin}", {}))
    b = serve(proxy, "b", Policy.parse(f"allow:other.test:{origin}", {}))
    assert a != b
    assert ask(a, f"CONNECT other.test:{origin} HTTP/1.1\r\n\r\n".encode()).startswith(b"HTTP/1.1 403")
    assert ask(b, f"CONNECT other.test:{origin} HTTP/1.1\r\n\r\nGET / HTTP/1.0\r\n\r\n".encode()).endswith(BODY)
    assert [e.host for e in proxy.log("a")] == ["other.test"] and [e.allowed for e in proxy.log("b")] == [True]
    log = proxy.remove("a")
    assert len(log) == 1 and proxy.tenants() == ["b"]
    with pytest.raises(OSError):  # its listener is closed: nothing accepts
        ask(a, b"CONNECT pkg.test:1 HTTP/1.1\r\n\r\n")


def test_the_byte_cap_cuts_the_connection(proxy, origin):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}), EgressLimits(max_bytes=2000))
    r = ask(path, f"GET http://pkg.test:{origin}/ HTTP/1.1\r\nHost: pkg.test:{origin}\r\n\r\n".encode())
    assert len(r) < len(BODY)
    assert "limit of 2000 bytes" in proxy.log("sb1")[0].why


def test_the_connection_cap(proxy, origin):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}), EgressLimits(max_connections=1))
    held = socket.socket(socket.AF_UNIX)
    held.connect(str(path))
    held.sendall(f"CONNECT pkg.test:{origin} HTTP/1.1\r\n\r\n".encode())
    assert held.recv(100).startswith(b"HTTP/1.1 200")
    try:
        r = ask(path, f"CONNECT pkg.test:{origin} HTTP/1.1\r\n\r\n".encode())
        assert r.startswith(b"HTTP/1.1 429") and b"1 connections are open" in r
    finally:
        held.close()


def test_removing_a_sandbox_ends_its_open_connections(proxy, origin):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}))
    held = socket.socket(socket.AF_UNIX)
    held.settimeout(5)
    held.connect(str(path))
    held.sendall(f"CONNECT pkg.test:{origin} HTTP/1.1\r\n\r\n".encode())
    assert held.recv(100).startswith(b"HTTP/1.1 200")
    proxy.remove("sb1")
    assert held.recv(100) == b""  # the tunnel is closed, not left open past its sandbox
    held.close()


def test_a_restart_ends_the_episode_s_connections_and_starts_its_log_and_bytes_again(proxy, origin):
    path = serve(proxy, "sb1", Policy.parse(f"allow:pkg.test:{origin}", {}), EgressLimits(max_bytes=9000))
    get = f"GET http://pkg.test:{origin}/ HTTP/1.1\r\nHost: pkg.test:{origin}\r\n\r\n".encode()
    assert ask(path, get).endswith(BODY)
    held = socket.socket(socket.AF_UNIX)
    held.settimeout(5)
    held.connect(str(path))
    held.sendall(f"CONNECT pkg.test:{origin} HTTP/1.1\r\n\r\n".encode())
    assert held.recv(100).startswith(b"HTTP/1.1 200")
    old = proxy.restart("sb1")
    assert [e.allowed for e in old] == [True, True] and proxy.log("sb1") == []
    assert held.recv(100) == b""
    held.close()
    assert ask(path, get).endswith(BODY)  # 5000 more bytes fit: the count started again at 0
    assert len(proxy.log("sb1")) == 1
