"""Attacks on the network with network="none" (the default): only ``lo``, nothing reachable."""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading

import pytest

from sandboxlite import Sandbox

from .helpers import run_py


class TokenServer:
    """A host server on a listening socket that greets each client with a token (and counts them)."""

    def __init__(self, sock: socket.socket, prefix: str) -> None:
        self.sock = sock
        self.sock.settimeout(0.1)
        self.token = prefix + secrets.token_hex(8)
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                self.hits += 1
                try:
                    conn.sendall(self.token.encode())
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


class HostServer(TokenServer):
    """On the host's 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__(socket.create_server(("127.0.0.1", 0)), "hello-")
        self.port = self.sock.getsockname()[1]


@pytest.fixture(scope="module")
def host_server():
    srv = HostServer()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=3) as c:  # control: it answers
        assert c.recv(100).decode() == srv.token
    yield srv
    srv.close()


CONNECT = r'''
import errno, json, socket, sys
req = json.load(sys.stdin)
out = {}
for host, port in req["targets"]:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        out[f"{host}:{port}"] = "connected: " + s.recv(100).decode()
    except OSError as e:
        out[f"{host}:{port}"] = errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"\0" * 12, ("1.1.1.1", 53)); out["udp 1.1.1.1:53"] = "sent"
except OSError as e:
    out["udp 1.1.1.1:53"] = errno.errorcode.get(e.errno, str(e))
for name in ("example.com", "one.one.one.one"):
    try:
        out["dns " + name] = socket.getaddrinfo(name, 80)[0][4][0]
    except OSError as e:
        out["dns " + name] = type(e).__name__
print(json.dumps(out))
'''


def test_outside_network(image_sb, record):
    req = {"targets": [["1.1.1.1", 53], ["8.8.8.8", 443], ["2606:4700:4700::1111", 53]]}
    res = run_py(image_sb, CONNECT, stdin=json.dumps(req))
    record("TCP/UDP/DNS to the internet (python)", "ENETUNREACH; DNS fails", sorted(set(res.values())))
    assert not any(str(v).startswith(("connected", "sent")) for v in res.values()), res
    assert all(not v[0].isdigit() for k, v in res.items() if k.startswith("dns")), res


def test_curl_and_bash_dev_tcp(image_sb, host_server, record):
    r = image_sb.exec(
        f"curl -sS -m 3 -o /dev/null http://1.1.1.1/; echo curl-ip=$?; "
        f"curl -sS -m 3 -o /dev/null https://example.com/; echo curl-dns=$?; "
        f"curl -sS -m 3 http://127.0.0.1:{host_server.port}/; echo curl-lo=$?; "
        f"bash -c 'exec 3<>/dev/tcp/1.1.1.1/80' 2>/dev/null; echo tcp-ip=$?; "
        f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{host_server.port}; cat <&3' 2>/dev/null; echo tcp-lo=$?",
        timeout=30,
    )
    codes = dict(line.split("=") for line in r.stdout_text.split() if "=" in line)
    record("curl (IP, DNS, host loopback), bash /dev/tcp", "curl 7/6/7, bash 1", codes)
    assert host_server.token not in r.stdout_text
    assert codes == {"curl-ip": "7", "curl-dns": "6", "curl-lo": "7", "tcp-ip": "1", "tcp-lo": "1"}, r


def test_host_loopback_port(image_sb, host_server, record):
    hits = host_server.hits
    req = {"targets": [["127.0.0.1", host_server.port], ["::1", host_server.port]]}
    res = run_py(image_sb, CONNECT, stdin=json.dumps(req))
    got = {k: v for k, v in res.items() if str(host_server.port) in k}
    record("connect to a port on the host's loopback", "ECONNREFUSED; server sees nothing",
           f"{sorted(set(got.values()))}; server hits {host_server.hits - hits}")
    assert set(got.values()) <= {"ECONNREFUSED", "EADDRNOTAVAIL", "ENETUNREACH"}, got
    assert host_server.hits == hits


def test_only_loopback(image_sb, record):
    r = image_sb.exec("cat /proc/net/dev; ls -A /sys 2>/dev/null | sed 's/^/SYS:/'; grep -c sysfs /proc/self/mountinfo")
    lines = r.stdout_text.splitlines()
    ifaces = sorted(ln.split(":")[0].strip() for ln in lines[2:] if ":" in ln and not ln.startswith("SYS:"))
    sys_entries = [ln[4:] for ln in lines if ln.startswith("SYS:")]
    record("network interfaces visible; /sys", "lo only; no sysfs", f"{ifaces}; /sys entries {len(sys_entries)}, "
           f"sysfs mounts {lines[-1]}")
    assert ifaces == ["lo"] and sys_entries == [] and lines[-1] == "0"


def test_raw_sockets(image_sb, record):
    script = r'''
import errno, json, socket
out = {}
for name, fam, typ, proto in (("AF_INET raw ICMP", 2, 3, 1), ("AF_INET raw IPPROTO_RAW", 2, 3, 255),
                              ("AF_INET6 raw ICMPv6", 10, 3, 58), ("AF_PACKET raw", 17, 3, 0x0300),
                              ("AF_PACKET dgram", 17, 2, 0x0300)):
    try:
        socket.socket(fam, typ, proto).close(); out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
'''
    res = run_py(image_sb, script)
    record("raw IP sockets, AF_PACKET", "EPERM", sorted(set(res.values())))
    assert set(res.values()) == {"EPERM"}, res


NETLINK = r'''
import errno, json, socket, struct
def nl(s, typ, flags, payload):
    s.send(struct.pack("=IHHII", 16 + len(payload), typ, flags, 1, 0) + payload)
def replies(s):
    out = []
    while True:
        data = s.recv(65536)
        off = 0
        while off < len(data):
            ln, typ, flags, seq, pid = struct.unpack_from("=IHHII", data, off)
            out.append((typ, data[off + 16: off + ln]))
            if typ in (2, 3):  # NLMSG_ERROR, NLMSG_DONE
                return out
            off += (ln + 3) & ~3
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.bind((0, 0))
out = {"open NETLINK_ROUTE": "ok"}
nl(s, 18, 0x301, struct.pack("=BxHiII", 0, 0, 0, 0, 0))  # RTM_GETLINK dump
names = []
for typ, body in replies(s):
    if typ == 16:
        off = 16
        while off + 4 <= len(body):
            alen, atyp = struct.unpack_from("=HH", body, off)
            if atyp == 3:
                names.append(body[off + 4: off + alen].rstrip(b"\0").decode())
            if alen < 4:
                break
            off += (alen + 3) & ~3
out["links"] = sorted(names)
def ack(typ, flags, payload):
    nl(s, typ, flags | 0x5, payload)  # NLM_F_REQUEST | NLM_F_ACK
    for t, body in replies(s):
        if t == 2:
            e = -struct.unpack_from("=i", body)[0]
            return errno.errorcode.get(e, str(e)) if e else "ok"
    return "no ack"
addr = socket.inet_aton("10.9.9.9")
rta = struct.pack("=HH", 8, 2) + addr + struct.pack("=HH", 8, 1) + addr
out["RTM_NEWADDR 10.9.9.9/8 on lo"] = ack(20, 0x600, struct.pack("=BBBBI", 2, 8, 0, 0, 1) + rta)
out["RTM_NEWLINK lo down"] = ack(16, 0, struct.pack("=BxHiII", 0, 0, 1, 0, 1))
import fcntl
ifr = struct.pack("16sH14x", b"lo", 0)
try:
    fcntl.ioctl(socket.socket(), 0x8914, ifr); out["SIOCSIFFLAGS lo down"] = "ok"  # SIOCSIFFLAGS
except OSError as e:
    out["SIOCSIFFLAGS lo down"] = errno.errorcode.get(e.errno, str(e.errno))
for proto in (9, 12):  # NETLINK_AUDIT, NETLINK_NETFILTER: joining a group needs privilege
    try:
        x = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto); x.bind((0, 1)); out[f"bind netlink {proto}"] = "ok"
    except OSError as e:
        out[f"bind netlink {proto}"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
'''


def test_netlink(image_sb, record):
    res = run_py(image_sb, NETLINK)
    changes = {k: v for k, v in res.items() if k not in ("links", "open NETLINK_ROUTE")}
    record("AF_NETLINK: list links, add an address, lo down", "sees lo only; changes EPERM",
           f"links {res['links']}; {sorted(set(changes.values()))}")
    assert res["links"] == ["lo"]
    assert set(changes.values()) == {"EPERM"}, res


UNIX = r'''
import errno, json, socket, sys
out = {}
for addr in json.load(sys.stdin):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr.replace("@", "\0", 1)); out[addr] = "connected: " + s.recv(64).decode()
    except OSError as e:
        out[addr] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
'''


class UnixServer(TokenServer):
    """On a filesystem (or, with a leading NUL, abstract) unix socket address."""

    def __init__(self, addr: str, mode: int | None = None) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(addr)
        if mode is not None:
            os.chmod(addr, mode)
        sock.listen(8)
        super().__init__(sock, "unix-")


def test_host_unix_sockets(host_dir_factory, canary, record):
    """Filesystem sockets: unmounted ones do not exist inside; in a read-only mount the socket's own
    permission bits decide (the jail's uid is never host root); abstract ones live per network ns."""
    d = host_dir_factory("sandboxlite-sockets-")
    hidden = UnixServer(str(canary["dir"] / "hidden.sock"), 0o777)
    private = UnixServer(str(d / "root-only.sock"), 0o600)
    public = UnixServer(str(d / "public.sock"), 0o777)
    abstract_name = "sandboxlite-abstract-" + secrets.token_hex(4)
    abstract = UnixServer("\0" + abstract_name)
    try:
        with Sandbox(mounts=[f"{d}:/sock:ro"]) as box:
            res = run_py(box, UNIX, stdin=json.dumps([str(canary["dir"] / "hidden.sock"), "/sock/root-only.sock",
                                                      "/sock/public.sock", "@" + abstract_name]))
    finally:
        for srv in (hidden, private, public, abstract):
            srv.close()
    record("connect to a host unix socket (not mounted)", "ENOENT", res[str(canary["dir"] / "hidden.sock")])
    record("connect to a root-only socket in a ro mount", "EACCES", res["/sock/root-only.sock"])
    record("connect to a host abstract unix socket", "ECONNREFUSED (own net ns)", res["@" + abstract_name])
    record("known limit: a 0777 socket in a ro mount", "connects (ro does not stop connect)",
           res["/sock/public.sock"][:20])
    assert res[str(canary["dir"] / "hidden.sock")] == "ENOENT"
    assert res["/sock/root-only.sock"] == "EACCES"
    assert res["@" + abstract_name] == "ECONNREFUSED"
    assert res["/sock/public.sock"] == "connected: " + public.token  # as SECURITY.md says


def test_host_network_mode_is_the_opt_in(host_server, record):
    """The control for the loopback test: with network="host" the same probe does connect; raw sockets
    stay closed, and the host's abstract unix sockets are shared (as SECURITY.md says)."""
    name = "sandboxlite-hostnet-" + secrets.token_hex(4)
    abstract = UnixServer("\0" + name)
    try:
        with Sandbox(network="host") as box:
            res = run_py(box, CONNECT, stdin=json.dumps({"targets": [["127.0.0.1", host_server.port]]}))
            unix = run_py(box, UNIX, stdin=json.dumps(["@" + name]))
            raw = box.exec(["python3", "-c", "import errno, socket\ntry:\n  socket.socket(2, 3, 1); print('ok')\n"
                                               "except OSError as e:\n  print(errno.errorcode[e.errno])"]).stdout_text.strip()
    finally:
        abstract.close()
    got = res[f"127.0.0.1:{host_server.port}"]
    record("control: network='host' reaches the host port", "connects (opt-in)", got[:30])
    record("network='host': raw socket; host abstract socket", "EPERM; shared (documented)",
           f"raw {raw}; abstract {unix['@' + name][:20]}")
    assert got == "connected: " + host_server.token
    assert raw == "EPERM" and unix["@" + name] == "connected: " + abstract.token
