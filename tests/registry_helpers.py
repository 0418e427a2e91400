"""A real registry on loopback for the pull tests: Debian's ``docker-registry`` (the distribution
project's registry 2.x), with no auth, basic auth (an htpasswd file made by ``htpasswd -B``), or
bearer tokens.  For tokens the registry checks JWTs signed by a key whose self-signed certificate
it trusts (``rootcertbundle``); ``TokenServer`` is the token service (a realm) that signs them
with ``openssl`` after checking the user's basic auth.  ``Proxy`` sits between a client and the
registry to break or tamper with blob downloads."""

from __future__ import annotations

import base64
import contextlib
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

INSTALL = "apt-get install -y --no-install-recommends docker-registry apache2-utils skopeo umoci busybox-static"
SERVICE = "sandboxlite-test-registry"
ISSUER = "sandboxlite-test-issuer"


def need_registry() -> None:
    missing = [t for t in ("docker-registry", "htpasswd", "openssl", "skopeo", "umoci") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: {INSTALL}", pytrace=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"docker-registry exited {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"docker-registry did not listen on {port}: {log.read_text()[-2000:]}")


@dataclass
class Registry:
    """A running registry: ``host`` is ``127.0.0.1:PORT``."""

    host: str
    proc: subprocess.Popen
    dir: Path
    creds: tuple[str, str] | None = None

    def push(self, source: str, dest: str, *, all_: bool = False) -> None:
        """``skopeo copy`` SOURCE (oci:DIR:TAG ...) to ``HOST/DEST``."""
        argv = ["skopeo", "--insecure-policy", "copy", "--dest-tls-verify=false"]
        if self.creds:
            argv += ["--dest-creds", ":".join(self.creds)]
        if all_:
            argv.append("--all")
        p = subprocess.run([*argv, source, f"docker://{self.host}/{dest}"], capture_output=True, text=True)
        assert p.returncode == 0, f"skopeo push failed: {p.stderr}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_registry(d: Path, *, auth: dict | None = None, creds: tuple[str, str] | None = None) -> Registry:
    d.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(d / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    if auth:
        config["auth"] = auth
    (d / "config.yml").write_text(json.dumps(config))  # (JSON is YAML)
    log = d / "registry.log"
    proc = subprocess.Popen(["docker-registry", "serve", str(d / "config.yml")], stdout=open(log, "wb"),
                            stderr=subprocess.STDOUT)  # fmt: skip
    _wait_for(port, proc, log)
    return Registry(f"127.0.0.1:{port}", proc, d, creds)


def htpasswd_auth(d: Path, user: str, password: str) -> dict:
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run(["htpasswd", "-Bbc", str(d / "htpasswd"), user, password], check=True, capture_output=True)
    return {"htpasswd": {"realm": "sandboxlite-test", "path": str(d / "htpasswd")}}


# -- bearer tokens ----------------------------------------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenServer:
    """The registry's token realm: ``GET /token?service=&scope=`` with basic auth -> a signed JWT
    granting what the scope asks (when the user and password are right)."""

    dir: Path
    user: str
    password: str
    requests: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key, self.cert = self.dir / "key.pem", self.dir / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.key),
                        "-out", str(self.cert), "-days", "2", "-subj", "/CN=sandboxlite-test-token"],
                       check=True, capture_output=True)  # fmt: skip
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"], check=True,
                             capture_output=True).stdout  # fmt: skip
        self.x5c = base64.b64encode(der).decode()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                server.answer(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.httpd.server_address[1]}/token"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def auth(self) -> dict:
        return {"token": {"realm": self.realm, "service": SERVICE, "issuer": ISSUER,
                          "rootcertbundle": str(self.cert)}}  # fmt: skip

    def answer(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query)
        given = handler.headers.get("Authorization", "")
        want = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        self.requests.append({"query": query, "authorized": given == want, "sent_auth": bool(given)})
        if given != want:
            handler.send_response(401)
            handler.end_headers()
            return
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        body = json.dumps({"token": self.sign(access), "expires_in": 300}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def sign(self, access: list[dict]) -> str:
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": ISSUER, "sub": self.user, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": uuid.uuid4().hex, "access": access}  # fmt: skip
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)], input=signing_input.encode(),
                                   check=True, capture_output=True).stdout  # fmt: skip
        return f"{signing_input}.{_b64url(signature)}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- a proxy that breaks downloads ------------------------------------------------------------


@dataclass
class Proxy:
    """Forwards every GET to ``upstream`` (``127.0.0.1:PORT``), keeping each request's path and
    Range header.  ``cut[digest] = n``: the next full download of that blob stops after n bytes
    (the connection closed, Content-Length promising more); ``flip[digest] = i``: byte i of that
    blob is changed in every answer."""

    upstream: str
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    cut: dict[str, int] = field(default_factory=dict)
    flip: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                proxy.forward(self)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def forward(self, h: http.server.BaseHTTPRequestHandler) -> None:
        rng = h.headers.get("Range")
        self.seen.append((h.path, rng))
        host, port = self.upstream.split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection")}
        conn.request("GET", h.path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        conn.close()
        digest = h.path.rsplit("/", 1)[-1] if "/blobs/" in h.path else ""
        if digest in self.flip:
            offset = int(rng.split("=")[1].split("-")[0]) if rng and r.status == 206 else 0
            i = self.flip[digest] - offset
            if 0 <= i < len(body):
                body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
        h.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        if digest in self.cut and r.status == 200:
            n = self.cut.pop(digest)
            h.send_header("Connection", "close")
            h.end_headers()
            h.wfile.write(body[:n])
            h.wfile.flush()
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        h.end_headers()
        h.wfile.write(body)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def docker_config(d: Path, host: str, user: str, password: str) -> Path:
    """A ``DOCKER_CONFIG`` folder whose config.json holds a login for ``host``, as docker login writes it."""
    d.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (d / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    os.chmod(d / "config.json", 0o600)
    return d
