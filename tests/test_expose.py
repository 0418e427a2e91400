"""expose=[PORT]: a server inside the sandbox, reached from the host through ``Sandbox.connect``
and the host unix socket of ``Sandbox.exposed``, in real jails.  The attempts to misuse it from
inside (another sandbox, the connector channel) are in tests/security/test_egress.py."""

import os
import socket
import stat
import threading

import pytest

from sandboxlite import Sandbox
from sandboxlite.errors import ConfigError, SandboxClosed
from sandboxlite.executor.protocol import Op, Reply

PORT = 8765

# an upper-casing echo server; "go" also creates /tmp/go (so a command can wait for a client)
SERVER = r"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", %d))
s.listen(16)
open("/tmp/ready", "w").close()
while True:
    c, _ = s.accept()
    data = c.recv(1 << 16)
    if data == b"go":
        open("/tmp/go", "w").close()
    c.sendall(data.upper())
    c.close()
""" % PORT


def start_server(sb):
    sb.write_file("/tmp/server.py", SERVER)
    r = sb.exec("python3 /tmp/server.py >/tmp/server.log 2>&1 & "
                "for i in $(seq 100); do [ -e /tmp/ready ] && exit 0; sleep 0.05; done; cat /tmp/server.log; exit 1")
    assert r.exit_code == 0, r.stdout


def ask(sock, data):
    with sock:
        sock.sendall(data)
        return sock.recv(1 << 16)


def ask_unix(path, data):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return ask(s, data)


def test_connect_reaches_a_server_inside_and_only_an_exposed_port():
    with Sandbox(expose=[PORT]) as sb:
        with pytest.raises(ConnectionRefusedError):  # nothing listens yet
            sb.connect(PORT)
        start_server(sb)
        assert ask(sb.connect(PORT), b"hello") == b"HELLO"
        with pytest.raises(ConfigError, match="not an exposed port"):
            sb.connect(PORT + 1)
    with pytest.raises(SandboxClosed):
        sb.connect(PORT)


def test_the_host_unix_socket_is_private_and_goes_with_the_sandbox():
    with Sandbox(expose=[PORT, PORT + 1]) as sb:
        paths = sb.exposed
        assert sorted(paths) == [PORT, PORT + 1] and sb.info["exposed"] == {str(k): v for k, v in paths.items()}
        directory = os.path.dirname(paths[PORT])
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_ISSOCK(os.stat(paths[PORT]).st_mode)
        start_server(sb)
        assert ask_unix(paths[PORT], b"via unix") == b"VIA UNIX"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # nothing listens on PORT + 1: EOF at once
        s.settimeout(10)
        s.connect(paths[PORT + 1])
        assert s.recv(10) == b""
        s.close()
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a connection open at close()
        held.settimeout(10)
        held.connect(paths[PORT])
    assert held.recv(10) == b""
    held.close()
    assert not os.path.exists(directory) and sb.exposed == {}


def test_connect_does_not_wait_for_a_running_exec():
    """The command below ends only once a client has reached the server: connect() must get
    through while exec() holds the sandbox (the control channel is busy; the connector is not)."""
    with Sandbox(expose=[PORT]) as sb:
        start_server(sb)
        result = {}
        t = threading.Thread(target=lambda: result.update(
            r=sb.exec("while [ ! -e /tmp/go ]; do sleep 0.02; done; echo released", timeout=30)))
        t.start()
        try:
            assert ask_unix(sb.exposed[PORT], b"go") == b"GO"
        finally:
            t.join(40)
        assert not t.is_alive() and result["r"].stdout == b"released\n"


def test_ports_survive_a_reset_and_servers_do_not():
    with Sandbox(expose=[PORT]) as sb:
        path = sb.exposed[PORT]
        start_server(sb)
        sb.reset()
        assert sb.exposed[PORT] == path
        with pytest.raises(ConnectionRefusedError):  # the server was killed with everything else
            sb.connect(PORT)
        start_server(sb)
        assert ask_unix(path, b"again") == b"AGAIN"


def test_expose_and_the_allowlist_together():
    with Sandbox(expose=[PORT], network="allow:pypi") as sb:
        start_server(sb)
        assert ask(sb.connect(PORT), b"both") == b"BOTH"
        assert "127.0.0.1:3128" in sb.exec("printenv HTTP_PROXY").stdout.decode()


def test_the_connector_serves_connections_only():
    with Sandbox(expose=[PORT]) as sb:
        chan = sb.jail._connector
        ident = chan.new_id()
        chan.send(Op.MKDIR, ident, b"\x00")
        f = chan.wait(ident)
        assert f.type == Reply.ERROR and f.number() == 38  # ENOSYS: only LOOPBACK is served there
        assert sb.exec("echo still fine").stdout == b"still fine\n"
