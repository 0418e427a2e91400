"""The host side of the executor's wire protocol (see ``_executor/executor.c``).

Frames in both directions: ``u32 length | u8 type | u32 id | payload``, where
length counts type, id and payload.  Descriptors ride along with SCM_RIGHTS.
The executor is inside the jail, so nothing it sends is trusted: frames are
size-checked, and descriptors are checked by whoever uses them.
"""

from __future__ import annotations

import array
import os
import select
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass

from .errors import SandboxCrashed

HEADER = struct.Struct("<IcI")
MAX_FRAME = 1 << 20  # replies are small; anything bigger is a broken executor

# spawn flags
SP_STDIN, SP_STDOUT, SP_STDERR = 1, 2, 4
# open flags of our own (above the kernel's O_* bits)
OP_MKPARENTS = 0x40000000
OP_REQ_REG = 0x20000000
OP_REQ_DIR = 0x10000000

_CRED = struct.Struct("iII")  # struct ucred


@dataclass
class Frame:
    type: str
    id: int
    payload: bytes
    fd: int | None = None

    def text(self) -> str:
        return self.payload.decode("utf-8", "replace")


class Channel:
    """A framed, descriptor-passing connection to one executor."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self._buf = bytearray()
        self._fds: deque[int] = deque()
        self._frames: dict[int, deque[Frame]] = {}
        self._next_id = 1
        self.closed = False
        self.peer_pid: int | None = None  # host pid of the executor (from SCM_CREDENTIALS)

    def fileno(self) -> int:
        return self.sock.fileno()

    def new_id(self) -> int:
        i = self._next_id
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF or 1
        return i

    # -- sending -------------------------------------------------------------
    def send(self, type_: str, id_: int, payload: bytes = b"", fds: list[int] | tuple[int, ...] = ()) -> None:
        if self.closed:
            raise SandboxCrashed("the sandbox's executor has gone away")
        data = HEADER.pack(5 + len(payload), type_.encode(), id_) + payload
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        view = memoryview(data)
        while view:
            try:
                n = self.sock.sendmsg([view], anc)
            except BlockingIOError:
                self._wait_writable()
                continue
            except (BrokenPipeError, ConnectionResetError):
                self.closed = True
                raise SandboxCrashed("the sandbox's executor has gone away") from None
            anc = []  # descriptors travel with the first byte only
            view = view[n:]

    def _wait_writable(self) -> None:
        # keep reading while we wait, so a chatty executor cannot deadlock us
        p = select.poll()
        p.register(self.sock.fileno(), select.POLLIN | select.POLLOUT)
        for _fd, ev in p.poll(1000):
            if ev & (select.POLLIN | select.POLLHUP):
                self.pump()

    # -- receiving -----------------------------------------------------------
    def pump(self) -> bool:
        """Read whatever is available; returns False once the executor has gone."""
        if self.closed:
            return False
        while True:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(
                    1 << 16, socket.CMSG_SPACE(4 * 8) + socket.CMSG_SPACE(_CRED.size)
                )
            except (BlockingIOError, InterruptedError):
                return True
            except (ConnectionResetError, OSError):
                data, anc = b"", []
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(cdata[: len(cdata) - len(cdata) % 4])
                    for fd in fds:
                        os.set_inheritable(fd, False)
                    self._fds.extend(fds)
                elif level == socket.SOL_SOCKET and kind == getattr(socket, "SCM_CREDENTIALS", 2):
                    if len(cdata) >= _CRED.size:
                        pid = _CRED.unpack_from(cdata)[0]
                        if self.peer_pid is None and pid > 0:
                            self.peer_pid = pid
            if not data:
                self.closed = True
                return False
            self._buf += data
            self._parse()

    def _parse(self) -> None:
        buf = self._buf
        while len(buf) >= 4:
            (length,) = struct.unpack_from("<I", buf)
            if length < 5 or length > MAX_FRAME:
                self.closed = True
                raise SandboxCrashed(f"the sandbox's executor sent a malformed frame (length {length})")
            if len(buf) < 4 + length:
                return
            _, t, ident = HEADER.unpack_from(buf)
            payload = bytes(buf[9 : 4 + length])
            del buf[: 4 + length]
            frame = Frame(t.decode("latin-1"), ident, payload)
            if frame.type == "F":
                frame.fd = self._fds.popleft() if self._fds else None
            self._frames.setdefault(ident, deque()).append(frame)

    def take(self, id_: int) -> Frame | None:
        """The oldest frame received for ``id_``, if any."""
        q = self._frames.get(id_)
        if not q:
            return None
        f = q.popleft()
        if not q:
            del self._frames[id_]
        return f

    def wait(self, id_: int, deadline: float | None = None) -> Frame:
        """Block until a frame for ``id_`` arrives (raises SandboxCrashed on EOF)."""
        while True:
            f = self.take(id_)
            if f is not None:
                return f
            if self.closed:
                raise SandboxCrashed("the sandbox's executor exited unexpectedly")
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if timeout == 0.0:
                raise TimeoutError("no reply from the sandbox's executor")
            p = select.poll()
            p.register(self.sock.fileno(), select.POLLIN)
            if p.poll(None if timeout is None else int(timeout * 1000) + 1):
                self.pump()

    def discard(self, id_: int) -> None:
        for f in self._frames.pop(id_, ()):
            if f.fd is not None:
                os.close(f.fd)

    def clear(self) -> None:
        """Drop every frame received so far (e.g. exit reports from before a reset)."""
        self.pump()
        for q in self._frames.values():
            for f in q:
                if f.fd is not None:
                    os.close(f.fd)
        self._frames.clear()

    def close(self) -> None:
        self.closed = True
        for q in self._frames.values():
            for f in q:
                if f.fd is not None:
                    os.close(f.fd)
        self._frames.clear()
        while self._fds:
            os.close(self._fds.popleft())
        self.sock.close()


def strings(*items: str | bytes) -> bytes:
    """Encode NUL-terminated strings for a payload."""
    out = bytearray()
    for s in items:
        b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
        if b"\0" in b:
            raise ValueError(f"NUL byte in {s!r}")
        out += b + b"\0"
    return bytes(out)
