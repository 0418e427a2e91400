"""Shared by tests/test_network_allow.py and tests/security/test_egress.py: loopback HTTP servers
that stand for the internet, and a Host whose egress proxy resolves reserved .test names to them."""

import dataclasses
import http.server
import threading

import pytest

from sandboxlite.jail.host import default_host
from sandboxlite.network.egress import EgressProxy


def _origin(label: bytes):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = label + b" " + self.path.encode() + b" host=" + self.headers.get("Host", "").encode()
            if self.path.startswith("/big/"):
                body = b"z" * int(self.path[5:])
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def origins():
    a, b = _origin(b"origin-A"), _origin(b"origin-B")
    yield a.server_address[1], b.server_address[1]
    a.shutdown()
    b.shutdown()


@pytest.fixture(scope="module")
def host():
    """A Host of this module's own whose proxy resolves pkg.test and other.test to loopback."""
    names = {"pkg.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}
    h = dataclasses.replace(default_host())
    proxy = EgressProxy(resolver=lambda name, port: names.get(name, []), allow_loopback=True)
    h.set_egress_proxy(proxy)
    yield h
    proxy.close()


def curl(sb, url, *extra):
    """curl in ``sb``: (exit code, body + "\\n" + the HTTP status, stderr)."""
    r = sb.exec(["curl", "-sS", "-m", "10", "-w", "\\n%{http_code}", *extra, url], timeout=30)
    return r.exit_code, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
