"""ports.PortForwarder and _relay.relay without a jail: ``connect`` is a function of the test's that
reaches a server on the host's loopback (tests/test_expose.py has the real jails)."""

import os
import socket
import threading

import pytest

from sandboxlite.network.ports import PortForwarder
from sandboxlite.network.relay import relay


@pytest.fixture
def upper_server():
    """A loopback TCP server that sends back what it gets, upper-cased, until end of file."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(c):
        with c:
            while data := c.recv(65536):
                c.sendall(data.upper())

    def loop():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()


def unix_client(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def test_a_client_is_joined_to_a_new_connection_per_connect(upper_server):
    calls = []

    def connect(port):
        calls.append(port)
        return socket.create_connection(("127.0.0.1", upper_server), timeout=10)

    fw = PortForwarder([80, 81], connect, name="t")
    try:
        assert sorted(fw.paths) == [80, 81] and all(p.startswith(fw.directory) for p in fw.paths.values())
        assert oct(os.stat(fw.directory).st_mode & 0o777) == "0o700"
        for port in (80, 81):
            c = unix_client(fw.paths[port])
            c.sendall(b"abc" * 100_000)  # more than a socket buffer: both directions at once
            c.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := c.recv(65536):
                got += chunk
            c.close()
            assert got == b"ABC" * 100_000
        assert calls == [80, 81]
    finally:
        fw.close()
    assert not os.path.exists(fw.directory)
    fw.close()  # idempotent


def test_a_failed_connect_closes_the_client_and_close_ends_open_connections(upper_server):
    def refuse(port):
        raise ConnectionRefusedError(111, "nothing listens")

    fw = PortForwarder([9], refuse)
    c = unix_client(fw.paths[9])
    assert c.recv(10) == b""
    c.close()
    fw.close()
    fw = PortForwarder([9], lambda port: socket.create_connection(("127.0.0.1", upper_server), timeout=10))
    held = unix_client(fw.paths[9])
    held.sendall(b"x")
    assert held.recv(10) == b"X"
    fw.close()
    assert held.recv(10) == b""  # ended by close(), not left to the idle peers
    held.close()


def test_relay_passes_each_end_of_file_on_and_stops_when_told(upper_server):
    a1, a2 = socket.socketpair()
    b1, b2 = socket.socketpair()
    seen = []
    t = threading.Thread(target=relay, args=(a2, b1), kwargs={"on_data": lambda from_a, n: seen.append((from_a, n)) or True})
    t.start()
    a1.sendall(b"ping")
    assert b2.recv(10) == b"ping"
    b2.sendall(b"pong!")
    assert a1.recv(10) == b"pong!"
    a1.shutdown(socket.SHUT_WR)
    assert b2.recv(10) == b""  # a's end of file reached b
    b2.shutdown(socket.SHUT_WR)
    t.join(10)
    assert not t.is_alive() and seen == [(True, 4), (False, 5)]
    # on_data returning False: nothing more is passed on
    c1, c2 = socket.socketpair()
    d1, d2 = socket.socketpair()
    t = threading.Thread(target=relay, args=(c2, d1), kwargs={"on_data": lambda from_a, n: False})
    t.start()
    c1.sendall(b"over the cap")
    t.join(10)
    assert not t.is_alive()
    d2.setblocking(False)
    with pytest.raises(BlockingIOError):
        d2.recv(10)
    for s in (a1, a2, b1, b2, c1, c2, d1, d2):
        s.close()
