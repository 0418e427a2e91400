"""The egress proxy: the host side of ``network="allow:<rules>"``.

One ``EgressProxy`` per process (``Host.egress_proxy()``) serves every sandbox.  Each sandbox
brings a listening socket of its own (``add``): for a jail, a TCP socket on 127.0.0.1:3128
inside the sandbox's network namespace, made by its init and handed to the host
(``Jail.loopback``), so commands reach the proxy as ``HTTP_PROXY=http://127.0.0.1:3128`` and
no process in the sandbox relays anything.  The listener is the sandbox's identity: a
connection accepted on it can only come from that sandbox's namespace.  Each sandbox has its
policy (``netpolicy.Policy``), its caps (``EgressLimits``) and its log.

On that socket the proxy speaks HTTP proxy: ``CONNECT host:port`` for HTTPS (bytes are relayed,
TLS is not intercepted) and absolute-form requests (``GET http://host/path``) for plain HTTP,
filtered by the URL's host, which must agree with the Host header.  The proxy resolves names
itself and connects only to public addresses (never loopback, link-local, multicast or
unspecified ones: no host service is reachable through it).  A denied request gets ``403`` (with
the header ``X-Sandboxlite-Egress: denied``) and a body naming what refused it; every request is
logged (``log(sandbox)``: time, host, port, allowed, rule or reason, bytes).

Threads: one accepts for every sandbox (a selector over the listeners); each connection is
served by a thread of its own while it lasts (at most ``max_connections`` per sandbox).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConfigError
from .policy import Decision, Policy
from .relay import relay

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

    def as_dict(self) -> dict:
        """For JSON (trajectories, eval records, ``exec --network-log``)."""
        return dataclasses.asdict(self)

    def line(self) -> str:
        """One line for people: ``CONNECT pypi.org:443 allowed (preset pypi), 524 B up, 2286 B down``."""
        verdict = f"allowed ({self.why})" if self.allowed else f"denied: {self.why}"
        return f"{self.method} {self.host}:{self.port} {verdict}, {self.bytes_up} B up, {self.bytes_down} B down"


@dataclass
class _Tenant:
    sandbox: str
    policy: Policy
    limits: EgressLimits
    listener: socket.socket
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


@dataclass(frozen=True)
class Tenancy:
    """A sandbox's place at the proxy that serves it (``EgressProxy.add``): the proxy itself, not
    whichever one the Host serves by the time of a reset or close."""

    proxy: "EgressProxy"
    sandbox: str

    def log(self) -> list[Request]:
        return self.proxy.log(self.sandbox)

    def restart(self) -> list[Request]:
        return self.proxy.restart(self.sandbox)

    def remove(self) -> list[Request]:
        return self.proxy.remove(self.sandbox)


class EgressProxy:
    """The filtering proxy (see the module docstring).  ``resolver`` and ``allow_loopback`` exist
    for tests and benchmarks on loopback: a real proxy resolves with the host's resolver and
    refuses every address that is not public."""

    def __init__(self, *, resolver: Resolver | None = None, allow_loopback: bool = False,
                 log_limit: int = 10_000) -> None:  # fmt: skip
        self.resolver = resolver or system_resolver
        self.allow_loopback = allow_loopback
        self.log_limit = log_limit
        self.pid = os.getpid()  # a forked child makes a proxy of its own (the threads stayed here)
        self._lock = threading.Lock()
        self._tenants: dict[str, _Tenant] = {}
        self._closed = False
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread: threading.Thread | None = None

    # -- tenants ---------------------------------------------------------------------------
    def add(self, sandbox: str, policy: Policy, limits: EgressLimits | None = None, *,
            listener: socket.socket) -> "Tenancy":  # fmt: skip
        """Serve ``sandbox``: connections accepted on ``listener`` (a listening socket, which the
        proxy now owns and closes) follow ``policy``.  Returns the handle the sandbox keeps."""
        if not sandbox:
            raise ConfigError("sandbox", "a sandbox needs a non-empty id")
        listener.setblocking(False)
        with self._lock:
            if self._closed:
                raise ConfigError("egress", "the proxy is closed")
            if sandbox in self._tenants:
                raise ConfigError("sandbox", f"{sandbox!r} is served already")
            tenant = _Tenant(sandbox, policy, limits or EgressLimits(), listener)
            self._tenants[sandbox] = tenant
            self._sel.register(listener, selectors.EVENT_READ, tenant)
            if self._thread is None:
                self._thread = threading.Thread(target=self._accept_loop, daemon=True, name="sandboxlite-egress")
                self._thread.start()
        self._wake()
        return Tenancy(self, sandbox)

    def remove(self, sandbox: str) -> list[Request]:
        """Stop serving ``sandbox``: its listener is closed, its open connections end; returns its log."""
        with self._lock:
            tenant = self._tenants.pop(sandbox, None)
            if tenant is None:
                return []
            try:
                self._sel.unregister(tenant.listener)
            except (KeyError, ValueError):
                pass
        tenant.listener.close()
        self._end_connections(tenant)
        return list(tenant.log)

    def restart(self, sandbox: str) -> list[Request]:
        """A fresh episode for ``sandbox`` (``Sandbox.reset``): its open connections end, its log
        and byte count start again.  Returns the log so far."""
        with self._lock:
            tenant = self._tenants.get(sandbox)
            if tenant is None:
                return []
            log, tenant.log, tenant.bytes_used = tenant.log, [], 0
        self._end_connections(tenant)
        return log

    def log(self, sandbox: str) -> list[Request]:
        with self._lock:
            tenant = self._tenants.get(sandbox)
            return list(tenant.log) if tenant is not None else []

    def tenants(self) -> list[str]:
        with self._lock:
            return list(self._tenants)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            names = list(self._tenants)
        for name in names:
            self.remove(name)
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> "EgressProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"w")
        except OSError:
            pass

    def _end_connections(self, tenant: _Tenant) -> None:
        with self._lock:
            open_ = list(tenant.connections)
        for conn in open_:  # their threads see the end of the stream and finish
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
            try:
                ready = self._sel.select(1.0)
            except (OSError, ValueError):  # a listener closed under us: select again
                continue
            for key, _ in ready:
                tenant = key.data
                if tenant is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except OSError:
                        pass
                    continue
                try:
                    conn, _ = tenant.listener.accept()
                except OSError:  # nothing after all, or closed by remove()
                    continue
                self._admit(tenant, conn)

    def _admit(self, tenant: _Tenant, conn: socket.socket) -> None:
        conn.setblocking(True)
        with self._lock:
            full = len(tenant.connections) >= tenant.limits.max_connections
            if not full:
                tenant.connections.add(conn)
        if full:
            threading.Thread(target=self._turn_away, args=(tenant, conn), daemon=True).start()
            return
        threading.Thread(target=self._serve, args=(tenant, conn), daemon=True).start()

    def _turn_away(self, tenant: _Tenant, conn: socket.socket) -> None:
        with conn:
            _answer(conn, 429, f"sandboxlite egress: {tenant.limits.max_connections} connections are open "
                    "already (this sandbox's limit)")  # fmt: skip

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
        # the byte cap cuts the connection
        relay(conn, upstream, idle_s=IDLE_TIMEOUT_S,
              on_data=lambda up, n: self._count(tenant, entry, **({"up": n} if up else {"down": n})))

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


__all__ = ["Decision", "EgressLimits", "EgressProxy", "Request", "system_resolver"]
