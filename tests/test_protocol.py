"""The wire protocol has one definition, protocol.py; executor.h mirrors it and this checks the copy.

The drift tests parse executor.h's protocol block (#define and enum lines, the option table) and
compare every character, number and limit with protocol.py, in both directions.  The rest checks
the request builders (byte for byte what the call sites sent before them) and frame parsing.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from importlib import resources

import pytest

from sandboxlite import executor
from sandboxlite.errors import SandboxCrashed
from sandboxlite.executor import protocol
from sandboxlite.executor.protocol import (
    EXECUTOR_OPTIONS,
    Channel,
    ExecutorExit,
    Frame,
    KillHow,
    Op,
    OptKind,
    Reply,
    kill_payload,
    mkdir_payload,
    open_payload,
    parse_frame,
    spawn_payload,
    strings,
    symlink_payload,
)

# the executor's source, every file the build compiles (executor.h and its .c files) one after another
FILES = {name: resources.files("sandboxlite.executor").joinpath(name).read_text() for name in executor.SOURCE}
SOURCE = "".join(FILES.values())
BEGIN, END = "---- the protocol", "---- end of the protocol"


def _block() -> str:
    assert SOURCE.count(BEGIN) == 1 and SOURCE.count(END) == 1, "the executor must have one protocol block"
    header = FILES["executor.h"]
    assert header.count(BEGIN) == 1 and header.count(END) == 1, "the protocol block is in executor.h"
    return header[header.index(BEGIN) : header.index(END)]


def test_the_build_compiles_every_file_of_the_executor():
    here = {p.name for p in resources.files("sandboxlite.executor").iterdir() if p.name.endswith((".c", ".h"))}
    assert set(executor.SOURCE) == here - {executor.LAUNCHER} and len(executor.SOURCE) == len(set(executor.SOURCE))


def _c_value(expr: str):
    """A C constant expression of the kinds the block uses: "text", 'c', 64, 0x40u, (16u << 20)."""
    expr = re.sub(r"/\*.*?\*/", "", expr).strip()
    if expr.startswith('"'):
        m = re.fullmatch(r'"([^"\\]*)"', expr)
        assert m, f"unsupported string literal {expr}"
        return m.group(1)
    if expr.startswith("'"):
        m = re.fullmatch(r"'(.)'", expr)
        assert m, f"unsupported character literal {expr}"
        return m.group(1)
    num = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b", r"\1", expr)
    assert re.fullmatch(r"[0-9a-fA-FxX()<>|+ ]+", num), f"unsupported expression {expr}"
    return eval(num, {"__builtins__": {}})  # digits, shifts, or and plus only (checked above)


def c_defines() -> dict[str, object]:
    out = {}
    for name, value in re.findall(r"^#define (\w+) (.+)$", _block(), re.M):
        assert name not in out, f"{name} defined twice"
        out[name] = _c_value(value)
    return out


def c_enum(name: str) -> dict[str, str]:
    m = re.search(r"enum %s \{(.*?)\};" % name, _block(), re.S)
    assert m, f"enum {name} is missing from the protocol block"
    return {k: v for k, v in re.findall(r"(\w+) = '(.)'", m.group(1))}


# Python names of every C #define, by the C name (EXIT_* map to ExecutorExit)
SCALARS = ("HELLO", "CTRL_FD", "MAX_REQUEST_PAYLOAD", "MAX_REPLY_PAYLOAD", "MAX_FDS", "SP_STDIN", "SP_STDOUT",
           "SP_STDERR", "SP_STATUS", "SP_TTY", "SP_PID", "OP_MKPARENTS", "OP_REQ_REG", "OP_REQ_DIR", "OP_KERNEL_MASK", "KILL_ALL", "KILL_DESC",
           "KILL_SIG",
           "MAX_BINDS", "MAX_WTMPFS", "MAX_MKDIRS", "MAX_RULES", "MAX_OWN", "MAX_DEVRW", "MAX_LAYERS", "LAYER_ID_MAX",
           "SNAPS_PATH_MAX", "OPTION_PATH_MAX")  # fmt: skip


def python_value(c_name: str):
    if c_name.startswith("EXIT_"):
        return int(ExecutorExit[c_name[5:]])
    py = "HELLO" if c_name == "HELLO_TEXT" else c_name
    assert py in SCALARS, f"executor.h defines {c_name}, which protocol.py does not mirror"
    value = getattr(protocol, py)
    return value.decode() if isinstance(value, bytes) else value


def test_every_define_in_the_block_matches_protocol_py():
    defines = c_defines()
    for name, value in defines.items():
        assert value == python_value(name), f"executor.h {name} = {value!r}, protocol.py has {python_value(name)!r}"
    # and the other way: nothing of protocol.py is missing from the C block
    expected = {("HELLO_TEXT" if s == "HELLO" else s) for s in SCALARS} | {f"EXIT_{e.name}" for e in ExecutorExit}
    assert set(defines) == expected


def test_request_and_reply_characters_match():
    assert c_enum("request") == {f"REQ_{op.name}": op.value for op in Op}
    assert c_enum("reply") == {f"REP_{r.name}": r.value for r in Reply}
    chars = [op.value for op in Op] + [r.value for r in Reply]
    assert len(chars) == len(set(chars)) and all(len(c) == 1 for c in chars)


def test_every_request_has_a_handler_and_no_bare_characters_remain():
    handled = set(re.findall(r"case (REQ_\w+):", SOURCE))
    assert handled == {f"REQ_{op.name}" for op in Op}
    rest = SOURCE.replace(_block(), "")
    # frame types are written by name outside the block: no send_str('X', ...) or case 'S':
    assert not re.findall(r"send_(?:str|frame|errno)\('.'|case '.':", rest)
    assert "MAX_FRAME" not in SOURCE and "0x0fffffff" not in rest


def test_option_table_matches():
    block = _block()
    defines = c_defines()
    rows = re.findall(r'\[O_(\w+)\] = \{"(\w+)", OPT_(\w+), (\w+)\}', block)
    c_table = {key: (kind, int(defines.get(mx, mx))) for _, key, kind, mx in rows}
    py_table = {k: (o.kind.value, o.max_count) for k, o in EXECUTOR_OPTIONS.items()}
    assert c_table == py_table
    for ident, key, _, _ in rows:
        assert ident == key.upper(), f"O_{ident} holds {key!r}"
    kinds = re.search(r"enum opt_kind \{(.*?)\};", block).group(1)
    assert {k.strip().removeprefix("OPT_") for k in kinds.split(",")} == {k.value for k in OptKind}
    # every rlimit key maps to the RLIMIT_ of its name
    rl = dict(re.findall(r"\[O_(\w+)\] = RLIMIT_(\w+)", SOURCE))
    assert rl == {k.upper(): k.upper() for k in protocol.RLIMIT_KEYS}
    assert [k for k, o in EXECUTOR_OPTIONS.items() if o.required] == ["seccomp"]


def test_the_spawn_limit_fits_a_request():
    import importlib

    for name in ("sandboxlite.jail.sandbox", "sandboxlite.jail.launch"):  # wherever the host's spawn limit lives
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        assert getattr(mod, "MAX_SPAWN_BYTES", 0) <= protocol.MAX_REQUEST_PAYLOAD, name


def test_config_takes_its_mount_limit_from_the_protocol():
    from sandboxlite import config

    assert config.MAX_BINDS is protocol.MAX_BINDS


# ---- enums and builders -----------------------------------------------------------------------


def test_enums_are_their_characters():
    assert Op.SPAWN == "S" and Reply.EXIT == "X" and "X" == Reply.EXIT
    assert f"{Op.RESET}" == "Z" and str(Reply.FD) == "F" and Op("K") is Op.KILL
    assert {Op.SPAWN: 1}["S"] == 1  # same hash as the character


def test_builders_give_the_bytes_the_call_sites_sent():
    argv, env = ["/bin/sh", "-c", "echo hi"], ["PATH=/bin", "HOME=/root"]
    flags = protocol.SP_STDOUT | protocol.SP_STDERR
    assert spawn_payload(flags, "/testbed", argv, env) == strings(str(flags), "/testbed", str(len(argv)), *argv, *env)
    assert spawn_payload(7, "/", ["ls"], {"A": "1", "B": "2"}) == b"7\0/\x001\0ls\0A=1\0B=2\0"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | protocol.OP_REQ_REG | protocol.OP_MKPARENTS
    assert open_payload("/testbed/x", flags, 0o600) == strings(str(flags), str(0o600), "/testbed/x")
    assert open_payload("/a", os.O_RDONLY) == strings(str(os.O_RDONLY), str(0o644), "/a")
    assert mkdir_payload("/a/b", 0o40755) == strings(str(0o40755 & 0o777), "/a/b")
    assert symlink_payload("../t", "/a/l") == strings("../t", "/a/l")
    assert kill_payload() == kill_payload(KillHow.ALL) == kill_payload("all") == b"all"
    assert kill_payload(KillHow.desc(41)) == kill_payload("desc 41") == "desc 41".encode()
    assert protocol.reset_payload() == b"" and protocol.reset_payload(["ab12", "cd"]) == b"ab12\0cd\0"
    assert protocol.snapshot_payload(1 << 20) == b"1048576"


def test_builders_refuse_what_the_executor_cannot_parse():
    for bad in (["AB"], ["../x"], [""], ["a" * 65], ["a"] * 33):
        with pytest.raises(ValueError):
            protocol.reset_payload(bad)
    with pytest.raises(ValueError):
        protocol.snapshot_payload(-1)
    with pytest.raises(ValueError):
        spawn_payload(0, "/", ["a\0b"], [])
    with pytest.raises(ValueError):
        spawn_payload(0, "/", [], [])
    with pytest.raises(ValueError):
        open_payload("/a\0", 0)
    for bad in ("", "ALL", "desc", "desc -1", "desc x", "kill"):
        with pytest.raises(ValueError):
            kill_payload(bad)
    with pytest.raises(ValueError):
        KillHow.desc(-1)
    assert strings("caf\udce9") == b"caf\xe9\0"  # surrogateescape'd bytes go through as they were


def test_executor_option_formats():
    assert protocol.executor_option("cpu", None) == "cpu=inf"
    assert protocol.executor_option("rootro", True) == "rootro=1"
    assert protocol.executor_option("bind", "/data") == "bind=/data"
    assert protocol.executor_option("tmp", 1 << 20) == f"tmp={1 << 20}"
    for key, value in (("foo", 1), ("tmp", -1), ("bind", "data"), ("ctrl", "x"), ("lower", "/a,b")):
        with pytest.raises(ValueError):
            protocol.executor_option(key, value)


# ---- frames -----------------------------------------------------------------------------------


def frame(t: bytes, ident: int, payload: bytes = b"") -> bytes:
    return struct.pack("<IcI", 5 + len(payload), t, ident) + payload


def test_parse_frame_maps_the_type_to_the_enum():
    data = frame(b"X", 7, b"256") + frame(b"R", 8)
    f, n = parse_frame(data)
    assert (f.type, f.id, f.payload, n) == (Reply.EXIT, 7, b"256", 12) and f.type is Reply.EXIT
    assert f.number() == 256
    f2, _ = parse_frame(data[n:])
    assert f2.type is Reply.OK and f2.number(default=0) == 0
    assert parse_frame(data[:11]) is None and parse_frame(b"\1\0") is None


@pytest.mark.parametrize(
    "data",
    [frame(b"Q", 1), frame(b"S", 1), struct.pack("<IcI", 4, b"X", 1), frame(b"E", 1, b"x" * 4097)],
    ids=["quit-is-gone", "a-request-type", "short", "over-the-reply-limit"],
)
def test_parse_frame_refuses_what_no_executor_sends(data):
    with pytest.raises(SandboxCrashed):
        parse_frame(data)


def test_frame_number_never_trusts_the_payload():
    for bad in (b"", b"12a", b"1 2", b"-", b"9" * 30):
        with pytest.raises(SandboxCrashed):
            Frame(Reply.EXIT, 1, bad).number()
    assert Frame(Reply.ERROR, 1, b"-3").number() == -3


def test_channel_sends_ops_and_parses_replies():
    a, b = socket.socketpair()
    chan = Channel(a)
    try:
        chan.send(Op.MKDIR, 5, mkdir_payload("/x"))
        chan.send("L", 6)  # a bare character still works
        got = b.recv(100)
        assert got == frame(b"M", 5, b"493\0/x\0") + frame(b"L", 6)
        r, w = os.pipe()
        try:
            b.sendmsg([frame(b"F", 9)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", r))])
            b.sendall(frame(b"R", 6, b"42") + frame(b"H", 0, protocol.HELLO))
            f = chan.wait(9, None)
            assert f.type is Reply.FD and f.fd is not None and os.path.samestat(os.fstat(f.fd), os.fstat(r))
            os.close(f.fd)
            assert chan.wait(6, None).number() == 42
            assert protocol.is_hello(chan.wait(0, None))
        finally:
            os.close(r)
            os.close(w)
        b.sendall(frame(b"Q", 1))
        with pytest.raises(SandboxCrashed):
            chan.wait(1, None)
        assert chan.closed
    finally:
        chan.close()
        b.close()


def test_channel_refuses_a_request_the_executor_would_die_of():
    a, b = socket.socketpair()
    chan = Channel(a)
    try:
        with pytest.raises(ValueError):
            chan.send(Op.SPAWN, 1, b"x" * (protocol.MAX_REQUEST_PAYLOAD + 1))
        with pytest.raises(ValueError):
            chan.send(Op.SINK, 0, b"", [0] * (protocol.MAX_FDS + 1))
        assert not chan.closed
    finally:
        chan.close()
        b.close()
