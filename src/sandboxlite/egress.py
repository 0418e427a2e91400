"""The egress proxy: the host side of ``network="allow:<rules>"`` (issue 20, step 2).

One ``EgressProxy`` per process serves every sandbox: each sandbox gets a unix socket of its own
(``add``), which is its identity (a sandbox only ever sees its own socket, bound into it), its
policy (``netpolicy.Policy``) and its caps (``EgressLimits``).  On that socket it speaks HTTP
proxy: ``CONNECT host:port`` for HTTPS (bytes are relayed, TLS is not intercepted) and
absolute-form requests (``GET http://host/path``) for plain HTTP, filtered by the URL's host, which
must agree with the Host header.  The proxy resolves names itself and connects only to public
addresses (never loopback, link-local, multicast or unspecified ones: no host service is
reachable through it).  A denied request gets ``403`` with a body naming what refused it; every
request is logged (``log(sandbox_id)``: time, host, port, allowed, rule or reason, bytes).

Not yet here (next steps): the relay inside the sandbox and the wiring into ``SandboxConfig``.
"""

from __future__ import annotations

import ipaddress
import os
import selectors
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .netpolicy import Decision, Policy

MAX_HEAD_BYTES = 16 << 10  # a request line and headers
CONNECT_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 300.0
CHUNK = 64 << 10

Resolver = Callable[[str, int], list[str]]


@dataclass(frozen=True)
class EgressLimits:
    """Per sandbox: bytes relayed in both directions together, connections open at once."""

    max_bytes: int = 1 << 30
    max_connections: int = 16


@dataclass
class Request:
    """One proxied request, as logged."""

    time: float
    sandbox: str
    method: str
    host: str
    port: int
    allowed: bool
    why: str  # the rule that allowed it, or why it was refused
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class _Tenant:
    sandbox: str
    policy: Policy
    limits: EgressLimits
    listener: socket.socket
    path: Path
    log: list[Request] = field(default_factory=list)
    connections: set = field(default_factory=set)  # the client sockets being served
    bytes_used: int = 0


def system_resolver(host: str, port: int) -> list[str]:
    """The host's resolver: the addresses of ``host`` (TCP)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4][0] for info in infos]


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved)


class EgressProxy:
    """The filtering proxy (see the module docstring).  ``resolver`` and ``allow_loopback`` exist
    for tests and benchmarks on loopback: a real proxy resolves with the host's resolver and
    refuses every address that is not public."""

    def __init__(self, *, resolver: Resolver | None = None, allow_loopback: bool = False,
                 log_limit: int = 10_000) -> None:  # fmt: skip
        self.resolver = resolver or system_resolver
        self.allow_loopback = allow_loopback
        self.log_limit = log_limit
        self._dir = Path(tempfile.mkdtemp(prefix="sandboxlite-egress-"))
        self._lock = threading.Lock()
        self._tenants: dict[str, _Tenant] = {}
        self._closed = False

    # -- tenants ---------------------------------------------------------------------------
    def add(self, sandbox: str, policy: Policy, limits: EgressLimits | None = None) -> Path:
        """A unix socket for ``sandbox`` (its identity): requests on it follow ``policy``."""
        if not sandbox or "/" in sandbox or sandbox.startswith("."):
            raise ConfigError("sandbox", f"an id without '/' that does not start with '.', got {sandbox!r}")
        with self._lock:
            if self._closed:
                raise ConfigError("egress", "the proxy is closed")
            if sandbox in self._tenants:
                raise ConfigError("sandbox", f"{sandbox!r} has a socket already")
            path = self._dir / f"{sandbox}.sock"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            os.chmod(path, 0o666)  # the sandbox's uid connects; only its own mount shows it
            listener.listen(64)
            tenant = _Tenant(sandbox, policy, limits or EgressLimits(), listener, path)
            self._tenants[sandbox] = tenant
        threading.Thread(target=self._accept, args=(tenant,), daemon=True, name=f"egress-{sandbox}").start()
        return path

    def remove(self, sandbox: str) -> list[Request]:
        """Close ``sandbox``'s socket (its open connections end); returns its log."""
        with self._lock:
            tenant = self._tenants.pop(sandbox, None)
        if tenant is None:
            return []
        _close_listener(tenant)
        with self._lock:
            open_ = list(tenant.connections)
        for conn in open_:  # their threads see the end of the stream and finish
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return list(tenant.log)

    def log(self, sandbox: str) -> list[Request]:
        with self._lock:
            tenant = self._tenants.get(sandbox)
            return list(tenant.log) if tenant is not None else []

    def close(self) -> None:
        with self._lock:
            self._closed = True
            names = list(self._tenants)
        for name in names:
            self.remove(name)
        try:
            os.rmdir(self._dir)
        except OSError:
            pass

    def __enter__(self) -> "EgressProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------------
    def _accept(self, tenant: _Tenant) -> None:
        while True:
            try:
                conn, _ = tenant.listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                full = len(tenant.connections) >= tenant.limits.max_connections
                if not full:
                    tenant.connections.add(conn)
            if full:
                _answer(conn, 429, f"sandboxlite egress: {tenant.limits.max_connections} connections are open "
                        "already (this sandbox's limit)")  # fmt: skip
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(tenant, conn), daemon=True).start()

    def _serve(self, tenant: _Tenant, conn: socket.socket) -> None:
        try:
            conn.settimeout(IDLE_TIMEOUT_S)
            head, rest = _read_head(conn)
            if head is None:
                return _answer(conn, 400, "sandboxlite egress: the request head is malformed or too long")
            method, target, headers = head
            if method == "CONNECT":
                host, port = _split_host_port(target, None)
            elif target.lower().startswith("http://"):
                authority = target[7:].split("/", 1)[0]
                host, port = _split_host_port(authority, 80)
                given = headers.get("host")
                if given is not None and _split_host_port(given, 80) != (host, port):
                    return self._refuse(tenant, conn, method, host, port or 0, 400,
                                        f"the Host header {given!r} is not the URL's host {authority!r}")  # fmt: skip
            else:
                return _answer(conn, 400, "sandboxlite egress: send proxy requests: CONNECT host:port, or an absolute "
                               "http:// URL (HTTP_PROXY / HTTPS_PROXY do this)")  # fmt: skip
            if host is None or port is None:
                return _answer(conn, 400, f"sandboxlite egress: {target!r} names no host and port")
            decision = tenant.policy.decide(host, port)
            if not decision:
                return self._refuse(tenant, conn, method, host, port, 403, decision.reason)
            upstream, why = self._connect(host, port)
            if upstream is None:
                return self._refuse(tenant, conn, method, host, port, 502, why)
            entry = self._record(tenant, method, host, port, True, decision.rule or "")
            with upstream:
                if method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    first = rest
                else:
                    first = _origin_form(method, target, headers) + rest
                self._relay(tenant, entry, conn, upstream, first)
        except OSError:
            pass
        finally:
            with self._lock:
                tenant.connections.discard(conn)
            conn.close()

    def _connect(self, host: str, port: int) -> tuple[socket.socket | None, str]:
        try:
            addresses = self.resolver(host, port)
        except (OSError, UnicodeError) as e:
            return None, f"{host} could not be resolved ({e})"
        usable = [a for a in addresses if self.allow_loopback or _public(a)]
        if not usable:
            return None, f"{host} resolves only to addresses that are not public ({', '.join(addresses) or 'none'})"
        last = ""
        for address in usable:
            try:
                return socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S), ""
            except OSError as e:
                last = f"{address}:{port}: {e.strerror or e}"
        return None, f"could not connect to {host} ({last})"

    def _relay(self, tenant: _Tenant, entry: Request, conn: socket.socket, upstream: socket.socket,
               first: bytes) -> None:  # fmt: skip
        if first:
            upstream.sendall(first)
            self._count(tenant, entry, up=len(first))
        sel = selectors.DefaultSelector()
        sel.register(conn, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, conn)
        open_ = 2
        try:
            while open_:
                ready = sel.select(IDLE_TIMEOUT_S)
                if not ready:
                    return
                for key, _ in ready:
                    src, dst = key.fileobj, key.data
                    data = src.recv(CHUNK)  # type: ignore[union-attr]
                    if not data:
                        sel.unregister(src)
                        open_ -= 1
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        continue
                    if not self._count(tenant, entry, **({"up": len(data)} if src is conn else {"down": len(data)})):
                        return  # the byte cap: the connection is cut
                    dst.sendall(data)
        finally:
            sel.close()

    def _count(self, tenant: _Tenant, entry: Request, up: int = 0, down: int = 0) -> bool:
        with self._lock:
            if tenant.bytes_used + up + down > tenant.limits.max_bytes:
                entry.why += f"; cut at this sandbox's limit of {tenant.limits.max_bytes} bytes"
                return False
            tenant.bytes_used += up + down
            entry.bytes_up += up
            entry.bytes_down += down
            return True

    def _refuse(self, tenant: _Tenant, conn: socket.socket, method: str, host: str, port: int, status: int,
                why: str) -> None:  # fmt: skip
        self._record(tenant, method, host, port, False, why)
        _answer(conn, status, f"sandboxlite egress: denied: {why}")

    def _record(self, tenant: _Tenant, method: str, host: str, port: int, allowed: bool, why: str) -> Request:
        entry = Request(time.time(), tenant.sandbox, method, host, port, allowed, why)
        with self._lock:
            if len(tenant.log) < self.log_limit:
                tenant.log.append(entry)
        return entry


# -- HTTP bits ------------------------------------------------------------------------------------
_REASONS = {400: "Bad Request", 403: "Forbidden", 429: "Too Many Requests", 502: "Bad Gateway"}


def _answer(conn: socket.socket, status: int, text: str) -> None:
    body = (text + "\n").encode()
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Sandboxlite-Egress: denied\r\n\r\n")  # fmt: skip
    try:
        conn.sendall(head.encode() + body)
        # read what the client sent and we did not, so closing does not reset the connection
        # (the client would lose the answer): until it closes its side, briefly
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        while conn.recv(CHUNK):
            pass
    except OSError:
        pass


def _read_head(conn: socket.socket) -> tuple[tuple[str, str, dict[str, str]] | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD_BYTES:
            return None, b""
        data = conn.recv(4096)
        if not data:
            return None, b""
        buf += data
    raw, rest = buf.split(b"\r\n\r\n", 1)
    try:
        lines = raw.decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        return None, b""
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        return None, b""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None, b""
        key = name.lower()
        if key in headers and key == "host":  # two Host headers: a smuggling attempt
            return None, b""
        headers[key] = value.strip()
    return (parts[0].upper(), parts[1], headers), rest


def _split_host_port(authority: str, default: int | None) -> tuple[str | None, int | None]:
    if "@" in authority:  # user:pass@host: the host is what follows, and we do not forward credentials
        return None, None
    if authority.startswith("["):
        host, _, tail = authority[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = authority.rpartition(":") if authority.count(":") == 1 else (authority, "", "")
    if port_text:
        if not port_text.isdigit():
            return None, None
        return host or None, int(port_text)
    return host or None, default


def _origin_form(method: str, target: str, headers: dict[str, str]) -> bytes:
    path = "/" + target[7:].split("/", 1)[1] if "/" in target[7:] else "/"
    keep = {k: v for k, v in headers.items() if not k.startswith("proxy-") and k != "connection"}
    keep["connection"] = "close"
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in keep.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _close_listener(tenant: _Tenant) -> None:
    try:
        try:
            tenant.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
        except OSError:
            pass
        tenant.listener.close()
    finally:
        try:
            tenant.path.unlink()
        except OSError:
            pass


__all__ = ["Decision", "EgressLimits", "EgressProxy", "Request", "system_resolver"]
