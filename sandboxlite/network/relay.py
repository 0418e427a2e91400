"""Copying bytes both ways between two connected sockets (the egress proxy's tunnels, exposed ports)."""

from __future__ import annotations

import selectors
import socket
from collections.abc import Callable

CHUNK = 1 << 16


def relay(a: socket.socket, b: socket.socket, *, idle_s: float | None = None,
          on_data: Callable[[bool, int], bool] | None = None) -> None:  # fmt: skip
    """Copy ``a`` -> ``b`` and ``b`` -> ``a`` until both directions have ended (each end of file
    is passed on as a ``shutdown(SHUT_WR)``), ``idle_s`` passes without data, a socket fails, or
    ``on_data(from_a, n)`` returns False before ``n`` bytes are passed on.  Closes neither socket."""
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    open_ = 2
    try:
        while open_:
            ready = sel.select(idle_s)
            if not ready:
                return
            for key, _ in ready:
                src, dst = key.fileobj, key.data
                try:
                    data = src.recv(CHUNK)  # type: ignore[union-attr]
                except OSError:
                    return
                if not data:
                    sel.unregister(src)
                    open_ -= 1
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    continue
                if on_data is not None and not on_data(src is a, len(data)):
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return
    finally:
        sel.close()
