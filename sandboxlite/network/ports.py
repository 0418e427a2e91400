"""Ports in: a host unix socket per exposed port of a sandbox (``SandboxConfig.expose``).

A client that connects to ``<dir>/<port>`` is joined to a fresh TCP connection to
127.0.0.1:port inside the sandbox's network namespace.  That connection is made by the
sandbox's init on its connector channel and handed to the host (``Jail.connect``), so no
process in the sandbox relays anything and no TCP port is opened on the host.  The directory
is private (0700): only the host user reaches the sockets.

One acceptor thread serves a sandbox's sockets; each connection gets a thread that copies
both ways until both sides have ended.  ``close()`` ends every connection and removes the
sockets and their directory.
"""

from __future__ import annotations

import os
import selectors
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable

from .relay import relay

Connect = Callable[[int], socket.socket]


class PortForwarder:
    """Serve ``ports`` at unix sockets in a new private directory, joining each client to
    ``connect(port)`` (a connected socket, or OSError: the client's connection is closed)."""

    def __init__(self, ports: Iterable[int], connect: Connect, *, name: str = "sandbox") -> None:
        self._connect = connect
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._closed = False
        self.directory = tempfile.mkdtemp(prefix=f"sandboxlite-{name}-ports-")  # mode 0700
        self.paths: dict[int, str] = {}
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            for port in ports:
                path = os.path.join(self.directory, str(port))
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    listener.bind(path)
                    listener.listen(64)
                    listener.setblocking(False)
                except BaseException:
                    listener.close()
                    raise
                self._sel.register(listener, selectors.EVENT_READ, port)
                self.paths[port] = path
        except BaseException:
            self._release()
            raise
        self._thread = threading.Thread(target=self._accept_loop, name=f"sandboxlite-ports-{name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """End every connection, stop serving, remove the sockets.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(5.0)
        self._release()

    def _release(self) -> None:
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()
        self._wake_w.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _accept_loop(self) -> None:
        while not self._closed:
            for key, _ in self._sel.select():
                if key.data is None:
                    return  # woken by close()
                try:
                    client, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue
                except OSError:
                    return
                client.setblocking(True)
                threading.Thread(target=self._serve, args=(client, key.data), daemon=True,
                                 name=f"sandboxlite-port-{key.data}").start()  # fmt: skip

    def _serve(self, client: socket.socket, port: int) -> None:
        inside = None
        try:
            inside = self._connect(port)
        except Exception:
            client.close()  # nothing listens there (yet), or the sandbox has gone: the client sees EOF
            return
        with self._lock:
            if self._closed:
                client.close()
                inside.close()
                return
            self._conns.update((client, inside))
        try:
            relay(client, inside)
        finally:
            with self._lock:
                self._conns.difference_update((client, inside))
            client.close()
            inside.close()
