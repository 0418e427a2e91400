"""The host side of the executor's wire protocol, and the one definition of it.

``executor.h`` (next to this file) mirrors every constant here in one block;
``tests/test_protocol.py`` parses that block and fails when the two drift.

Frames in both directions: ``u32 length | u8 type | u32 id | payload``, where
length counts type, id and payload (5 + payload).  Descriptors ride along with
SCM_RIGHTS.  Strings in payloads are NUL-terminated, numbers decimal text.
The executor is inside the jail, so nothing it sends is trusted: frames are
size-checked, their types must be a ``Reply``, and descriptors are checked by
whoever uses them.

Requests (``Op``, host to executor; payload at most ``MAX_REQUEST_PAYLOAD``):

========  =====================================  ==============================
op        payload (builder)                      answer
========  =====================================  ==============================
SPAWN     ``spawn_payload`` + SP_* descriptors   none (SP_PID: OK "PID"), then
                                                 EXIT; ERROR if it cannot start
KILL      ``kill_payload``, ``signal_payload``   none
OPEN      ``open_payload``                       FD (no payload) or ERROR
MKDIR     ``mkdir_payload``                      OK (no payload) or ERROR
SYMLINK   ``symlink_payload``                    OK (no payload) or ERROR
STAT      ``stat_payload``                       a stream of one record, or ERROR
LIST      ``list_payload`` (a directory, caps)   a stream of a record per entry, or
                                                 ERROR (E2BIG / EFBIG past the caps,
                                                 maybe after part of the stream)
REMOVE    ``remove_payload``                     OK (no payload) or ERROR
RENAME    ``rename_payload``                     OK (no payload) or ERROR (EXDEV
                                                 across mounts)
SINK      empty, the pipes to drain attached     none
LAST_PID  empty                                  OK with the namespace's last pid
RESET     ``reset_payload`` (snapshot layers)     OK (no payload) or ERROR
LOOPBACK  ``loopback_payload``                   FD (a TCP socket on 127.0.0.1) or ERROR
CONNECTOR empty, one unix stream socket attached  OK, or ERROR (EINVAL) without one
SNAPSHOT  ``snapshot_payload``, one empty         OK "BYTES FILES", OK "busy: WHO"
          directory attached (the copy's place)  (processes that would not stop),
                                                 or ERROR
SHARE     ``share_payload``                      COUNT FDs, each a mask of places
                                                 ("1101") with a detached mount per
                                                 "1"; ERROR ends them (share.py)
ATTACH    ``attach_payload`` + a SHARE set       OK (no payload) or ERROR
========  =====================================  ==============================

Replies (``Reply``, executor to host; payload at most ``MAX_REPLY_PAYLOAD``):
HELLO (id 0, ``HELLO``), ERROR (an errno), FD (a descriptor), OK, EXIT (a
command's wait status).  The host ends an executor by closing the socket.

The CONNECTOR socket is a second channel, framed alike, on which the executor
serves LOOPBACK only (anything else: ERROR ENOSYS); closing it only drops it.
A host thread asks for connections there while another waits on the main one.

The executor's command line is ``KEY=VALUE`` options (``EXECUTOR_OPTIONS``);
it refuses an unknown key, a malformed value, a repeated single key or more
values than a key's ``max_count`` with exit code ``ExecutorExit.BAD_OPTION``.
"""

from __future__ import annotations

import array
import enum
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import SandboxCrashed

HEADER = struct.Struct("<IcI")
HELLO = b"sandboxlite-executor 7"  # the executor's greeting: its name and protocol version
CTRL_FD = 3  # the executor's control socket unless ctrl=N
# host -> executor: a spawn carries argv, environment and cwd (launch.MAX_SPAWN_BYTES); a
# bigger request makes the executor drop the jail, so Channel.send refuses it
MAX_REQUEST_PAYLOAD = 16 << 20
# executor -> host: errno, wait status, a pid, the hello; anything bigger is a broken executor
MAX_REPLY_PAYLOAD = 4096
MAX_FDS = 8  # descriptors per frame


class Op(str, enum.Enum):
    """Request types (a ``str``: ``Op.SPAWN == "S"``)."""

    SPAWN = "S"
    KILL = "K"
    OPEN = "O"
    MKDIR = "M"
    SYMLINK = "Y"
    STAT = "I"
    LIST = "G"
    REMOVE = "V"
    RENAME = "N"
    SINK = "D"
    LAST_PID = "L"
    RESET = "Z"
    LOOPBACK = "T"
    CONNECTOR = "U"
    SNAPSHOT = "P"
    SHARE = "W"
    ATTACH = "A"

    __str__ = str.__str__  # "S", also in f-strings on every Python version


class Reply(str, enum.Enum):
    """Types of the frames the executor sends (a ``str``: ``Reply.EXIT == "X"``)."""

    HELLO = "H"
    ERROR = "E"
    FD = "F"
    OK = "R"
    EXIT = "X"

    __str__ = str.__str__


_REPLY_BY_BYTE = {r.value.encode(): r for r in Reply}

# spawn flags: which descriptors come attached (in this order); absent standard streams are /dev/null
SP_STDIN, SP_STDOUT, SP_STDERR = 1, 2, 4
SP_STATUS = 8  # one more, the command's fd 3 (a shell's status channel); without it fd 3 is closed
SP_TTY = 16  # its stdin is a terminal: the command's controlling terminal (TIOCSCTTY)
SP_PID = 32  # the supervisor reports the command's pid first (OK "PID"), then EXIT
# open flags of our own (above the kernel's O_* bits, which are forwarded)
OP_MKPARENTS = 0x40000000  # mkdir -p the parent first
OP_REQ_REG = 0x20000000  # refuse anything but a regular file (EISDIR / EINVAL)
OP_REQ_DIR = 0x10000000  # refuse anything but a directory (ENOTDIR)
OP_KERNEL_MASK = 0x0FFFFFFF  # the O_* bits the executor passes to openat2

# kill requests
KILL_ALL = "all"
KILL_DESC = "desc"
KILL_SIG = "sig"


class ExecutorExit(enum.IntEnum):
    """Exit codes of the executor itself (a command's own codes are its wait status)."""

    BAD_OPTION = 110  # an unknown, malformed, repeated or excess option
    FATAL = 111  # a system call it cannot do without failed
    RLIMIT = 112  # setrlimit refused an rlimit option
    SETUP = 113  # building a generation, or confining a process, failed


# ---- the executor's command line -------------------------------------------------------------

MAX_BINDS = 64  # bind=: the caller's mounts, carried into a copy-on-write root
MAX_WTMPFS = 8  # wtmpfs=: a tmpfs of its own (a workdir outside the writable places)
MAX_MKDIRS = 8  # mkdir=: directories to create (a workdir inside a writable place)
MAX_RULES = 64  # ro=, rw=: paths a Landlock sandbox reads (and writes) beneath
MAX_OWN = 8  # own=: a Landlock sandbox's own directories (emptied at every generation)
MAX_DEVRW = 16  # devrw=: device files a Landlock sandbox reads and writes
MAX_LAYERS = 32  # layer=: snapshot layers a generation starts from (and a reset's list)
LAYER_ID_MAX = 64  # a layer's name: 1 to 64 lowercase hex digits (a sha256)
SNAPS_PATH_MAX = 64  # snaps=: short, so that MAX_LAYERS layers fit one overlay's options


class OptKind(str, enum.Enum):
    """How an option's value is written."""

    FD = "FD"  # a descriptor number, open in the executor
    SIZE = "SIZE"  # a number of bytes
    PATH = "PATH"  # an absolute path inside the jail
    FLAG = "FLAG"  # 0 or 1
    COUNT = "COUNT"  # a positive number of things
    RLIMIT = "RLIMIT"  # a number in the resource's unit, or inf
    NAME = "NAME"  # a snapshot layer's name: 1 to LAYER_ID_MAX lowercase hex digits

    __str__ = str.__str__


@dataclass(frozen=True)
class ExecutorOption:
    key: str
    kind: OptKind
    max_count: int = 1  # how many times it may be given
    required: bool = False


EXECUTOR_OPTIONS: dict[str, ExecutorOption] = {
    o.key: o
    for o in (
        ExecutorOption("ctrl", OptKind.FD),  # the control socket (default CTRL_FD)
        ExecutorOption("exe", OptKind.FD),  # the descriptor it was executed through: closed
        ExecutorOption("seccomp", OptKind.FD, required=True),  # the BPF program for every command
        ExecutorOption("lower", OptKind.PATH),  # the image: a copy-on-write root over it
        ExecutorOption("upper", OptKind.SIZE),  # bytes the copy-on-write layer may take
        ExecutorOption("tmp", OptKind.SIZE),  # bytes of /tmp, /dev/shm (and /root)
        ExecutorOption("testbed", OptKind.SIZE),  # bytes of /testbed and wtmpfs=; 0: no /testbed tmpfs
        ExecutorOption("bind", OptKind.PATH, MAX_BINDS),
        ExecutorOption("wtmpfs", OptKind.PATH, MAX_WTMPFS),
        ExecutorOption("devdir", OptKind.FLAG),  # /dev is a ready-made directory: devpts per generation
        ExecutorOption("rootro", OptKind.FLAG),  # the generation's bind of the jail's root is read-only
        ExecutorOption("mkdir", OptKind.PATH, MAX_MKDIRS),
        ExecutorOption("ptys", OptKind.COUNT),  # the generation's devpts instance holds at most this many
        ExecutorOption("snaps", OptKind.PATH),  # where the snapshot store is bound (read-only): layers by name
        ExecutorOption("layer", OptKind.NAME, MAX_LAYERS),  # the first generation's snapshot layers, top first
        ExecutorOption("defer", OptKind.FLAG),  # no generation until the first RESET (a fork's child: share.py)
        ExecutorOption("landlock", OptKind.FLAG),  # no namespaces: a Landlock domain (landlock.c)
        ExecutorOption("ro", OptKind.PATH, MAX_RULES),  # Landlock: read and execute beneath (skipped when missing)
        ExecutorOption("rw", OptKind.PATH, MAX_RULES),  # Landlock: read, write and execute beneath
        ExecutorOption("own", OptKind.PATH, MAX_OWN),  # Landlock: the sandbox's own directory, emptied every generation
        ExecutorOption("devrw", OptKind.PATH, MAX_DEVRW),  # Landlock: a device file read and written (/dev/null)
        ExecutorOption("net", OptKind.FLAG),  # Landlock: TCP bind and connect are not restricted
        ExecutorOption("cpu", OptKind.RLIMIT),  # RLIMIT_CPU, seconds
        ExecutorOption("as", OptKind.RLIMIT),  # RLIMIT_AS, bytes
        ExecutorOption("fsize", OptKind.RLIMIT),  # RLIMIT_FSIZE, bytes
        ExecutorOption("nproc", OptKind.RLIMIT),  # RLIMIT_NPROC
        ExecutorOption("nofile", OptKind.RLIMIT),  # RLIMIT_NOFILE
        ExecutorOption("core", OptKind.RLIMIT),  # RLIMIT_CORE, bytes
        ExecutorOption("stack", OptKind.RLIMIT),  # RLIMIT_STACK, bytes
    )
}
RLIMIT_KEYS = tuple(k for k, o in EXECUTOR_OPTIONS.items() if o.kind is OptKind.RLIMIT)
OPTION_PATH_MAX = 4032  # the longest path option: PATH_MAX, less room for the generation's prefix


def is_layer_name(value: str) -> bool:
    """A snapshot layer's name as the executor takes it (1 to LAYER_ID_MAX lowercase hex digits)."""
    return 0 < len(value) <= LAYER_ID_MAX and all(c in "0123456789abcdef" for c in value)


def _option_error(arg: str, key: str | None, value: str) -> str | None:
    """What the executor says about one ``KEY=VALUE`` argument's form, or None."""
    spec = EXECUTOR_OPTIONS.get(key) if key is not None else None
    if spec is None:
        return f"unknown option '{arg}'"
    kind = spec.kind
    is_num = value.isascii() and value.isdigit()
    if kind is OptKind.FD and not (is_num and int(value) <= 0x7FFFFFFF):
        return f"option '{arg}': expected a descriptor number"
    if kind is OptKind.SIZE and not (is_num and int(value) < 1 << 64):
        return f"option '{arg}': expected a number of bytes"
    if kind is OptKind.COUNT and not (is_num and 0 < int(value) < 1 << 31):
        return f"option '{arg}': expected a positive number"
    if kind is OptKind.FLAG and value not in ("0", "1"):
        return f"option '{arg}': expected 0 or 1"
    if kind is OptKind.RLIMIT and not (value == "inf" or (is_num and int(value) < 1 << 64)):
        return f"option '{arg}': expected a number or inf"
    if kind is OptKind.NAME and not is_layer_name(value):
        return f"option '{arg}': expected 1 to {LAYER_ID_MAX} lowercase hex digits"
    if kind is OptKind.PATH and (
        not value.startswith("/")
        or len(value.encode("utf-8", "surrogateescape")) > OPTION_PATH_MAX
        or (key in ("lower", "snaps") and ("," in value or ":" in value))
        or (key == "snaps" and len(value.encode("utf-8", "surrogateescape")) > SNAPS_PATH_MAX)
    ):
        return f"option '{arg}': expected an absolute path"
    return None


def check_executor_options(args: Iterable[str]) -> None:
    """Raise ValueError, with the executor's own message, for options it would refuse.

    The same rules as the executor's parse_options, except that descriptors are
    not checked for being open (they are the executor's, not ours)."""
    counts: dict[str, int] = {}
    for arg in args:
        key, eq, value = arg.partition("=")
        err = _option_error(arg, key if eq else None, value)
        if err is not None:
            raise ValueError(err)
        spec = EXECUTOR_OPTIONS[key]
        if counts.get(key, 0) == spec.max_count:
            if spec.max_count == 1:
                raise ValueError(f"option '{arg}': {key}= given more than once")
            raise ValueError(f"more than {spec.max_count} {key}= options")
        counts[key] = counts.get(key, 0) + 1
    for key, spec in EXECUTOR_OPTIONS.items():
        if spec.required and key not in counts:
            raise ValueError(f"no seccomp filter ({key}=FD): refusing to run commands unfiltered")


def executor_option(key: str, value: int | str | bool | None) -> str:
    """One ``KEY=VALUE`` argument, checked: ``None`` is ``inf`` for rlimits, a bool is 0/1."""
    spec = EXECUTOR_OPTIONS.get(key)
    if spec is None:
        raise ValueError(f"unknown executor option {key!r}")
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif value is None and spec.kind is OptKind.RLIMIT:
        text = "inf"
    else:
        text = str(value)
    arg = f"{key}={text}"
    err = _option_error(arg, key, text)
    if err is not None:
        raise ValueError(err)
    return arg


# ---- requests -------------------------------------------------------------------------------


def strings(*items: str | bytes) -> bytes:
    """Encode NUL-terminated strings for a payload (ValueError on a NUL byte or a lone surrogate)."""
    out = bytearray()
    for s in items:
        b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
        if b"\0" in b:
            raise ValueError(f"NUL byte in {s!r}")
        out += b + b"\0"
    return bytes(out)


def spawn_payload(flags: int, cwd: str, argv: Sequence[str], env: Sequence[str] | Mapping[str, str]) -> bytes:
    """SPAWN: ``flags`` (SP_*), the command's cwd, argv and environment (``"K=V"`` entries or a mapping).

    Send it with the descriptors its flags name, in the order stdin, stdout, stderr, status.
    ValueError on a NUL byte (or text UTF-8 cannot carry); an empty argv is refused."""
    if not argv:
        raise ValueError("an empty argv")
    entries = [f"{k}={v}" for k, v in env.items()] if isinstance(env, Mapping) else env
    return strings(str(flags), cwd, str(len(argv)), *argv, *entries)


def open_payload(path: str, flags: int, mode: int = 0o644) -> bytes:
    """OPEN: ``flags`` are O_* bits plus OP_MKPARENTS / OP_REQ_REG / OP_REQ_DIR; ``mode`` for O_CREAT."""
    return strings(str(flags), str(mode), path)


def reset_payload(layers: Sequence[str] = ()) -> bytes:
    """RESET: the snapshot layers the new generation is built over, top first (none: the image)."""
    if len(layers) > MAX_LAYERS:
        raise ValueError(f"{len(layers)} snapshot layers: at most {MAX_LAYERS}")
    for name in layers:
        if not is_layer_name(name):
            raise ValueError(f"not a snapshot layer's name: {name!r}")
    return strings(*layers)


def snapshot_payload(max_bytes: int, layer: str | None = None) -> bytes:
    """SNAPSHOT: how many bytes the copy may take (send it with the empty directory it goes in);
    ``layer``: copy that shared layer (attached in the jail) instead of the generation's writes."""
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    if layer is not None and not is_layer_name(layer):
        raise ValueError(f"not a shared layer's name: {layer!r}")
    return f"{int(max_bytes)}{' ' + layer if layer is not None else ''}".encode()


SHARE_PLACES = ("root", "testbed", "tmp", "home")  # a shared layer's places, in the mask's order


def share_payload(count: int, kill: bool = False, layer: str | None = None) -> bytes:
    """SHARE: ``count`` sets of the generation's writes, every process killed first (``kill``: a
    fork's); or, with ``layer``, ``count`` sets of that shared layer attached here."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1024:
        raise ValueError(f"a share makes 1 to 1024 sets, not {count!r}")
    if layer is not None:
        if not is_layer_name(layer) or len(layer) < 2:
            raise ValueError(f"not a shared layer's name: {layer!r}")
        return f"{layer} {count}".encode()
    return f"{1 if kill else 0} {count}".encode()


def attach_payload(name: str, mask: str, raw: bool = False) -> bytes:
    """ATTACH: the shared layer's name and its places' mask (as SHARE answered); send its
    descriptors.  ``raw``: a second set of an attached layer, kept only to clone from."""
    if not is_layer_name(name):
        raise ValueError(f"not a snapshot layer's name: {name!r}")
    if len(mask) != len(SHARE_PLACES) or set(mask) - {"0", "1"}:
        raise ValueError(f"not a mask of places: {mask!r}")
    return strings(name, mask, *(("raw",) if raw else ()))


def mkdir_payload(path: str, mode: int = 0o755) -> bytes:
    """MKDIR: ``mkdir -p`` of ``path`` (permission bits of ``mode`` only)."""
    return strings(str(mode & 0o777), path)


def symlink_payload(target: str, path: str) -> bytes:
    """SYMLINK: a link at ``path`` (parents made) pointing to ``target``."""
    return strings(target, path)


def stat_payload(path: str, follow_symlinks: bool = False) -> bytes:
    """STAT: what ``path`` is; its last name, when a link, described (or followed within the root).

    The answer is a stream: OK frames whose payloads, end to end, hold the records, then an empty
    OK.  A record: ``"T MODE SIZE SEC NSEC UID GID"`` (T one of ``f d l p s c b ?``, MODE the
    permission bits, the time of the last modification, the ids as the sandbox sees them), NUL,
    the name (empty for STAT), NUL, a link's target (else empty), NUL."""
    return strings("1" if follow_symlinks else "0", path)


def list_payload(path: str, max_entries: int, max_bytes: int) -> bytes:
    """LIST: a record (``stat_payload``'s) per entry of the directory ``path`` but "." and "..";
    ERROR E2BIG past ``max_entries`` entries, EFBIG past ``max_bytes`` bytes of records."""
    for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return strings(str(max_entries), str(max_bytes), path)


def remove_payload(path: str, recursive: bool = False) -> bytes:
    """REMOVE: the file, link (never what it points to) or empty directory ``path``; ``recursive``
    empties a directory first, never following a link nor entering another mount."""
    return strings("1" if recursive else "0", path)


def rename_payload(src: str, dst: str) -> bytes:
    """RENAME: ``renameat`` of ``src`` to ``dst`` (a link is moved, not followed)."""
    return strings(src, dst)


def loopback_payload(how: str, port: int) -> bytes:
    """LOOPBACK: ``how`` is "listen" (a listening socket on 127.0.0.1:``port`` in the sandbox's
    network namespace) or "connect" (a non-blocking connect to it there)."""
    if how not in ("listen", "connect") or isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"expected listen|connect and a port 1-65535, got {how!r} {port!r}")
    return strings(f"{how} {port}")


@dataclass(frozen=True)
class KillHow:
    """What a KILL request kills: ``KillHow.ALL``, or ``KillHow.desc(floor)``: every
    process the command started with a pid above ``floor``, not the command itself
    (a shell's timeout: bash survives, what it ran does not)."""

    floor: int | None = None

    ALL: ClassVar["KillHow"]  # set below: KillHow()

    @classmethod
    def desc(cls, floor: int) -> "KillHow":
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            raise ValueError(f"a pid floor must be a non-negative int, got {floor!r}")
        return cls(floor)

    @property
    def payload(self) -> bytes:
        return KILL_ALL.encode() if self.floor is None else f"{KILL_DESC} {self.floor}".encode()


KillHow.ALL = KillHow()


def kill_payload(how: KillHow | str = KillHow.ALL) -> bytes:
    """KILL: ``KillHow.ALL`` / ``"all"`` or ``KillHow.desc(floor)`` / ``"desc FLOOR"``."""
    if isinstance(how, KillHow):
        return how.payload
    if how == KILL_ALL:
        return KillHow.ALL.payload
    word, _, num = how.partition(" ")
    if word == KILL_DESC and num.isascii() and num.isdigit():
        return KillHow.desc(int(num)).payload
    raise ValueError(f"a kill is {KILL_ALL!r} or '{KILL_DESC} FLOOR', got {how!r}")


def signal_payload(sig: int) -> bytes:
    """KILL with a signal: ``sig`` (1-64) to the command's process group, while it runs."""
    if isinstance(sig, bool) or not isinstance(sig, int) or not 0 < sig < 65:
        raise ValueError(f"a signal is a number from 1 to 64, got {sig!r}")
    return f"{KILL_SIG} {int(sig)}".encode()


# ---- frames ---------------------------------------------------------------------------------

_CRED = struct.Struct("iII")  # struct ucred


@dataclass
class Frame:
    type: Reply
    id: int
    payload: bytes
    fd: int | None = None
    fds: tuple[int, ...] = ()  # every descriptor of an FD frame (SHARE's: one per "1" of its mask)

    def text(self) -> str:
        return self.payload.decode("utf-8", "replace")

    def number(self, default: int | None = None) -> int:
        """The payload as the decimal number it is (ERROR, EXIT, OK of LAST_PID).

        An empty payload gives ``default`` when one is given; anything else that
        is not a number means a broken executor: SandboxCrashed."""
        p = self.payload
        if not p and default is not None:
            return default
        if 0 < len(p) <= 20 and (p.isdigit() or (p[:1] == b"-" and p[1:].isdigit())):
            return int(p)
        raise SandboxCrashed(f"the sandbox's executor sent a malformed {self.type.name} frame: {p[:40]!r}")


def is_hello(frame: Frame) -> bool:
    """True for the executor's greeting, from this protocol version."""
    return frame.type is Reply.HELLO and frame.id == 0 and frame.payload == HELLO


def parse_frame(buf: bytes | bytearray) -> tuple[Frame, int] | None:
    """The first frame of ``buf`` and its size in bytes, or None while it is incomplete.

    SandboxCrashed for a length outside the limits or a type that is not a Reply."""
    if len(buf) < 4:
        return None
    (length,) = struct.unpack_from("<I", buf)
    if length < 5 or length - 5 > MAX_REPLY_PAYLOAD:
        raise SandboxCrashed(f"the sandbox's executor sent a malformed frame (length {length})")
    if len(buf) < 4 + length:
        return None
    _, t, ident = HEADER.unpack_from(buf)
    kind = _REPLY_BY_BYTE.get(t)
    if kind is None:
        raise SandboxCrashed(f"the sandbox's executor sent a frame of unknown type {t!r}")
    return Frame(kind, ident, bytes(buf[9 : 4 + length])), 4 + length


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
        # Threads: sends are serialised by one lock, reads (pump, take, ...) by another, so any
        # thread may pump and frames land in _frames whoever read them.  A reader that waits on
        # the socket while another may pump (``readers`` > 0: spawned processes are served by a
        # thread or an event loop) registers a listener, told when a frame for its id arrives.
        self._send_lock = threading.Lock()
        self._read_lock = threading.RLock()
        self._listeners: dict[int, Callable[[], None]] = {}
        self.readers = 0  # other readers besides the caller at hand (process reactors, event loops)
        self.loop_reactor: Any = None  # the event loop's reactor serving this channel (jail/aio.py)

    def fileno(self) -> int:
        return self.sock.fileno()

    def new_id(self) -> int:
        with self._send_lock:
            i = self._next_id
            self._next_id = (self._next_id + 1) & 0xFFFFFFFF or 1
            return i

    # -- listeners -------------------------------------------------------------
    def listen(self, id_: int, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (in whichever thread pumps) whenever a frame for ``id_`` arrives, and once
        when the executor goes away; until ``unlisten(id_)``.  Called at once if one is queued."""
        with self._read_lock:
            self._listeners[id_] = fn
            ready = id_ in self._frames or self.closed
        if ready:
            fn()

    def unlisten(self, id_: int) -> None:
        with self._read_lock:
            self._listeners.pop(id_, None)

    def wakeup_fd(self, id_: int) -> int:
        """An eventfd made readable whenever a frame for ``id_`` arrives (``listen``); the caller
        closes it after ``unlisten(id_)``."""
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self.listen(id_, lambda: _poke(efd))
        return efd

    # -- sending -------------------------------------------------------------
    def send(self, type_: Op | str, id_: int, payload: bytes = b"", fds: list[int] | tuple[int, ...] = ()) -> None:
        """Send one request (``type_`` an ``Op``, or its character), ``fds`` riding along.

        ValueError for a payload over MAX_REQUEST_PAYLOAD or more than MAX_FDS
        descriptors: the executor would drop the jail."""
        if self.closed:
            raise SandboxCrashed("the sandbox's executor has gone away")
        if len(payload) > MAX_REQUEST_PAYLOAD or len(fds) > MAX_FDS:
            raise ValueError(
                f"a request takes at most {MAX_REQUEST_PAYLOAD} bytes and {MAX_FDS} descriptors, "
                f"got {len(payload)} and {len(fds)}"
            )
        data = HEADER.pack(5 + len(payload), type_.encode(), id_) + payload
        with self._send_lock:
            self._send(data, fds)

    def _send(self, data: bytes, fds: list[int] | tuple[int, ...]) -> None:
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
        with self._read_lock:
            ready: set[int] = set()
            try:
                alive = self._pump(ready)
            finally:  # (no listeners: the usual case, one reader)
                calls = [] if not self._listeners else list(self._listeners.values()) if self.closed else [
                    self._listeners[i] for i in ready if i in self._listeners]
        for fn in calls:
            fn()
        return alive

    def _pump(self, ready: set[int]) -> bool:
        if self.closed:
            return False
        while True:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(
                    1 << 16, socket.CMSG_SPACE(4 * MAX_FDS) + socket.CMSG_SPACE(_CRED.size)
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
            self._parse(ready)

    def _parse(self, ready: set[int]) -> None:
        buf = self._buf
        while True:
            try:
                got = parse_frame(buf)
            except SandboxCrashed:
                self.closed = True
                raise
            if got is None:
                return
            frame, size = got
            del buf[:size]
            if frame.type is Reply.FD:
                k = frame.payload.count(b"1") if frame.payload else 1  # (SHARE's payload is its mask)
                frame.fds = tuple(self._fds.popleft() for _ in range(min(k, len(self._fds))))
                frame.fd = frame.fds[0] if frame.fds else None
            self._frames.setdefault(frame.id, deque()).append(frame)
            ready.add(frame.id)

    def take(self, id_: int) -> Frame | None:
        """The oldest frame received for ``id_``, if any."""
        with self._read_lock:
            q = self._frames.get(id_)
            if not q:
                return None
            f = q.popleft()
            if not q:
                del self._frames[id_]
            return f

    def wait(self, id_: int, deadline: float | None = None) -> Frame:
        """Block until a frame for ``id_`` arrives (raises SandboxCrashed on EOF)."""
        efd = self.wakeup_fd(id_) if self.readers else None  # another thread may take our frame
        try:
            p = select.poll()
            p.register(self.sock.fileno(), select.POLLIN)
            if efd is not None:
                p.register(efd, select.POLLIN)
            while True:
                f = self.take(id_)
                if f is not None:
                    return f
                if self.closed:
                    raise SandboxCrashed("the sandbox's executor exited unexpectedly")
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                if timeout == 0.0:
                    raise TimeoutError("no reply from the sandbox's executor")
                if p.poll(None if timeout is None else int(timeout * 1000) + 1):
                    if efd is not None:
                        _drain_eventfd(efd)
                    self.pump()
        finally:
            if efd is not None:
                self.unlisten(id_)
                os.close(efd)

    def discard(self, id_: int) -> None:
        with self._read_lock:
            for f in self._frames.pop(id_, ()):
                if f.fd is not None:
                    os.close(f.fd)

    def clear(self, keep: Iterable[int] = ()) -> None:
        """Drop every frame received so far (e.g. exit reports from before a reset), but those
        for the ids in ``keep``."""
        self.pump()
        with self._read_lock:
            for i in [i for i in self._frames if i not in keep]:
                for f in self._frames.pop(i):
                    if f.fd is not None:
                        os.close(f.fd)

    def close(self) -> None:
        with self._read_lock:
            self.closed = True
            for q in self._frames.values():
                for f in q:
                    if f.fd is not None:
                        os.close(f.fd)
            self._frames.clear()
            while self._fds:
                os.close(self._fds.popleft())
            calls = list(self._listeners.values())
        self.sock.close()
        for fn in calls:
            fn()


def _poke(efd: int) -> None:
    try:
        os.eventfd_write(efd, 1)
    except OSError:  # closed meanwhile (the waiter gave up)
        pass


def _drain_eventfd(efd: int) -> None:
    try:
        os.eventfd_read(efd)
    except BlockingIOError:
        pass
