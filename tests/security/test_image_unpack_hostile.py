"""Hostile container image layers against the host-side unpacker (sandboxlite.images.unpack).

A layer comes from anyone: its tar may climb out with "..", write through a symlink it (or a layer below)
planted, hard-link a host file, whiteout something outside, carry a device node, declare 100 GiB, hold two
million entries, be cut short, or not be what its diff_id says.  Each case runs through ``unpack_image``
(the way images are unpacked) in an arena holding sentinels outside the image; after each: an ImageError
that names the member (or the limit), nothing of the image kept, and not one byte, name or mode of the
arena (or of /etc) changed.  Host paths a broken unpacker could damage are the arena's, never /etc's own
files: the /etc cases create a new name there, which must not appear.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import secrets
import tarfile
import time
from pathlib import Path

import pytest

from sandboxlite.errors import ImageError
from sandboxlite.images.unpack import UnpackLimits, apply_layer, unpack_image

from ..test_image_unpack import diff_id, layer, member, opaque, tree, whiteout

PROBE = f"sandboxlite-unpack-probe-{secrets.token_hex(4)}"  # a name that must never appear in /etc


def snapshot(base: Path) -> dict[str, tuple]:
    """(mode, size, mtime_ns, links, content hash) of every entry under base (base's own mtime changes as
    the temporary image directory comes and goes: its listing is in the keys)."""
    out = {}
    for p in base.rglob("*"):
        st = os.lstat(p)
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
        out[str(p.relative_to(base))] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, digest)
    return out


@pytest.fixture
def arena(tmp_path: Path):
    """A directory images are unpacked into, with sentinels beside them: ``outside/`` (a directory a layer
    might reach by "..", an absolute link or a whiteout) and a file at the top."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "sentinel.txt").write_text("sentinel: must survive")
    (tmp_path / "outside" / "sub").mkdir()
    (tmp_path / "outside" / "sub" / "deep.txt").write_text("deep sentinel")
    (tmp_path / "sentinel.txt").write_text("top sentinel")
    etc_before = sorted(os.listdir("/etc"))
    before = snapshot(tmp_path)
    yield tmp_path
    assert snapshot(tmp_path) == before, "the arena changed"
    assert not os.path.lexists(f"/etc/{PROBE}")
    assert sorted(os.listdir("/etc")) == etc_before


def unpack(arena: Path, *layers: bytes | io.RawIOBase, limits: UnpackLimits = UnpackLimits()):
    """unpack_image of ``layers`` (bytes, or a stream) into arena/img."""
    openers = [(lambda s=data: contextlib.nullcontext(io.BytesIO(s) if isinstance(s, bytes) else s), None)
               for data in layers]  # fmt: skip
    return unpack_image(openers, arena / "img", limits)


def refused(record, arena: Path, attack: str, *layers, match: str, limits: UnpackLimits = UnpackLimits()) -> str:
    """Unpack the layers: must be an ImageError matching ``match``, with nothing kept."""
    t = time.monotonic()
    with pytest.raises(ImageError) as e:
        unpack(arena, *layers, limits=limits)
    took = time.monotonic() - t
    message = str(e.value)
    record(attack, f"ImageError naming {match!r}, nothing kept", f"{message.splitlines()[0][:150]} ({took:.2f} s)")
    assert match in message, message
    assert "Hint:" in message
    assert not os.path.lexists(arena / "img")
    return message


# ---- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../x", "a/../../x", "a/b/../../../outside/sentinel.txt", "..", "./../sentinel.txt"])
def test_traversal_is_refused(record, arena, name):
    refused(record, arena, f"member {name!r}", layer(member("ok", data=b"ok"), member(name, data=b"pwned")),
            match=repr(name))  # fmt: skip


def test_absolute_names_land_inside_the_root(record, arena):
    stats = unpack(arena, layer(member(f"/etc/{PROBE}", data=b"inside"), member("//outside//sentinel.txt", data=b"in")))
    record("absolute member names /etc/PROBE, //outside/sentinel.txt", "made inside the image", tree(arena / "img"))
    assert tree(arena / "img") == {"etc": "dir", f"etc/{PROBE}": "inside", "outside": "dir",
                                   "outside/sentinel.txt": "in"}  # fmt: skip
    assert stats.entries == 2
    _remove_image(arena)


def test_a_nul_in_a_name_is_refused(record, arena):
    refused(record, arena, "a NUL in a pax path", layer(member("x", data=b"x", pax={"path": "etc/pass\0wd"})),
            match="NUL")  # fmt: skip


def test_whiteout_names_that_name_nothing(record, arena):
    for name in (".wh...", ".wh..", ".wh.", "a/.wh..."):
        refused(record, arena, f"whiteout {name!r}", layer(member("a/keep"), member(name)), match=repr(name))


def test_a_whiteout_name_used_as_a_directory(record, arena):
    refused(record, arena, "a member under .wh.x/", layer(member(".wh.x/y", data=b"y")), match="'.wh.x/y'")


# ---- symlinks on the way ------------------------------------------------------------------------


def _through(record, arena: Path, attack: str, link: str, target: str, victim: str, same_layer: bool) -> None:
    plant = member(link, "symlink", link=target)
    write = member(victim, data=b"pwned")
    layers = [layer(plant, write)] if same_layer else [layer(plant), layer(write)]
    refused(record, arena, attack, *layers, match=repr(victim))


@pytest.mark.parametrize("same_layer", [True, False], ids=["same-layer", "lower-layer"])
def test_writing_through_a_symlink_is_refused(record, arena, same_layer):
    out = str(arena / "outside")
    _through(record, arena, "etc -> /etc, then etc/PROBE", "etc", "/etc", f"etc/{PROBE}", same_layer)
    _through(record, arena, "x -> .., then x/y", "x", "..", "x/y", same_layer)
    _through(record, arena, "out -> ARENA/outside, then out/sentinel.txt", "out", out, "out/sentinel.txt", same_layer)
    _through(record, arena, "up -> ../outside, then up/sentinel.txt", "up", "../outside", "up/sentinel.txt", same_layer)
    _through(record, arena, "deep link on the way: a/b -> OUT, then a/b/sub/deep.txt", "a/b", out, "a/b/sub/deep.txt",
             same_layer)  # fmt: skip
    # a directory member, a symlink and a fifo through the link are refused alike
    for kind in ("dir", "symlink", "fifo"):
        refused(record, arena, f"a {kind} made through a link", layer(member("out", "symlink", link=out),
                member("out/new", kind, link="x")), match="'out/new'")  # fmt: skip


def test_a_whiteout_or_opaque_marker_through_a_symlink_deletes_nothing(record, arena):
    out = str(arena / "outside")
    lower = layer(member("lnk", "symlink", link=out), member("rel", "symlink", link="../outside"))
    refused(record, arena, "lnk -> OUT, then lnk/.wh.sentinel.txt", lower, layer(whiteout("lnk/sentinel.txt")),
            match="'lnk/.wh.sentinel.txt'")  # fmt: skip
    refused(record, arena, "rel -> ../outside, then rel/.wh.sub", lower, layer(whiteout("rel/sub")),
            match="'rel/.wh.sub'")  # fmt: skip
    refused(record, arena, "lnk -> OUT, then lnk/.wh..wh..opq", lower, layer(opaque("lnk")),
            match="'lnk/.wh..wh..opq'")  # fmt: skip


def test_a_whiteout_of_a_symlink_removes_the_link_only(record, arena):
    """Not an attack that fails: a whiteout (or a file) over a link to a host directory removes the link."""
    out = str(arena / "outside")
    unpack(arena, layer(member("a", "symlink", link=out), member("b", "symlink", link=out)),
           layer(whiteout("a"), opaque("c"), member("b", data=b"a file now")))  # fmt: skip
    record("whiteout of a link to a host dir; a file over one", "the links go, their targets stay", tree(arena / "img"))
    assert tree(arena / "img") == {"b": "a file now", "c": "dir"}
    _remove_image(arena)


# ---- hard links ---------------------------------------------------------------------------------


def test_hard_links_out_of_the_image_are_refused(record, arena):
    out = str(arena / "outside")
    cases = [
        ("a hard link to ../../etc/passwd", [layer(member("x", "hardlink", link="../../etc/passwd"))], "'x'"),
        ("a hard link to ../outside/sentinel.txt", [layer(member("x", "hardlink", link="../outside/sentinel.txt"))],
         "'x'"),
        ("a hard link to /etc/passwd (not in the image)", [layer(member("x", "hardlink", link="/etc/passwd"))],
         "not in the image"),
        ("a hard link through a link: lnk -> OUT, x => lnk/sentinel.txt",
         [layer(member("lnk", "symlink", link=out)), layer(member("x", "hardlink", link="lnk/sentinel.txt"))], "'x'"),
        ("a hard link to a symlink (to a host file)",
         [layer(member("s", "symlink", link=f"{out}/sentinel.txt"), member("x", "hardlink", link="s"))], "a symlink"),
        ("a hard link to a directory", [layer(member("d/f"), member("x", "hardlink", link="d"))], "a directory"),
        ("a hard link to a fifo", [layer(member("p", "fifo"), member("x", "hardlink", link="p"))], "special file"),
        ("a hard link to itself", [layer(member("x", "hardlink", link="x"))], "itself"),
        ("a hard link to a whited-out file", [layer(member("f")), layer(whiteout("f"), member("x", "hardlink",
                                                                                               link="f"))],
         "not in the image"),
    ]  # fmt: skip
    for attack, layers, match in cases:
        message = refused(record, arena, attack, *layers, match=match)
        assert "'x'" in message


# ---- devices, setuid, capabilities --------------------------------------------------------------


def test_device_nodes_are_never_made(record, arena):
    stats = unpack(arena, layer(member("dev/sda", "blk"), member("dev/mem", "chr"), member("dev/kmsg", "chr"),
                                member("etc/hostname", data=b"x")))  # fmt: skip
    made = tree(arena / "img")
    record("block and character devices in a layer (dev/sda, dev/mem)", "dropped and counted",
           f"{stats.layers[0].dropped}, tree {made}")  # fmt: skip
    assert stats.layers[0].dropped_count == 3 and made == {"etc": "dir", "etc/hostname": "x"}
    _remove_image(arena)


def test_setuid_root_and_file_capabilities_are_dropped(record, arena):
    caps = "\x01\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00"
    stats = unpack(arena, layer(member("bin/rootshell", data=b"#!", mode=0o4755, uid=0),
                                member("bin/capshell", data=b"#!", mode=0o755,
                                       pax={"SCHILY.xattr.security.capability": caps})))  # fmt: skip
    s = stats.layers[0]
    img = arena / "img"
    record("a setuid-root binary and one with every file capability", "bits and capability dropped",
           f"modes {oct(os.stat(img / 'bin/rootshell').st_mode)}, xattrs {os.listxattr(img / 'bin/capshell')}")
    assert os.stat(img / "bin/rootshell").st_mode & 0o6000 == 0 and s.setid_count == 1
    assert "security.capability" not in os.listxattr(img / "bin/capshell")
    assert s.xattrs_dropped == ["bin/capshell: security.capability"]
    _remove_image(arena)


# ---- bombs --------------------------------------------------------------------------------------


def test_a_member_declaring_100_gib_stops_at_its_header(record, arena):
    info = tarfile.TarInfo("huge")
    info.size = 100 << 30
    head = info.tobuf(tarfile.PAX_FORMAT)  # no data follows: a bomb is only read if we read it
    t = time.monotonic()
    message = refused(record, arena, "a member declaring 100 GiB", head + b"\0" * 4096, match="max_layer_bytes")
    assert "'huge'" in message and time.monotonic() - t < 1


def test_a_gzip_bomb_stops_at_the_limit(record, arena):
    """64 files of 4 MiB of zeros (256 MiB) in a gzip of about 1 MiB, in a layer allowed 16 MiB: each member
    is under the limit, their sum is not; it stops after 16 MiB."""
    raw = io.BytesIO()
    zeros = b"\0" * (4 << 20)
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as z, tarfile.open(fileobj=z, mode="w|") as tar:
        for i in range(64):
            info = tarfile.TarInfo(f"zeros{i}")
            info.size = len(zeros)
            tar.addfile(info, io.BytesIO(zeros))
    data = raw.getvalue()

    def opener():
        return gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")

    t = time.monotonic()
    with pytest.raises(ImageError) as e:
        unpack_image([(opener, None)], arena / "img", UnpackLimits(max_layer_bytes=16 << 20))
    took = time.monotonic() - t
    record(f"a gzip bomb ({len(data) >> 10} KiB -> 256 MiB)", "stops at max_layer_bytes, fast",
           f"{str(e.value).splitlines()[0][:120]} ({took:.2f} s)")  # fmt: skip
    assert "max_layer_bytes" in str(e.value) and "'zeros4'" in str(e.value) and took < 5
    assert not os.path.lexists(arena / "img")


class ManyEntries(io.RawIOBase):
    """A tar of ``n`` empty files, made as it is read (two million entries are never in memory)."""

    def __init__(self, n: int) -> None:
        self.n, self.made, self.buf = n, 0, b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.buf) < size) and self.made <= self.n:
            if self.made == self.n:
                self.buf += b"\0" * 1024
            else:
                info = tarfile.TarInfo(f"d{self.made % 100}/f{self.made}")
                self.buf += info.tobuf(tarfile.USTAR_FORMAT)
            self.made += 1
        out, self.buf = (self.buf, b"") if size < 0 else (self.buf[:size], self.buf[size:])
        return out


def test_two_million_entries_stop_at_the_entry_limit(record, arena):
    stream = ManyEntries(2_000_000)
    t = time.monotonic()
    message = refused(record, arena, "a layer of 2,000,000 empty files (max_entries=1,000)", stream,
                      match="max_entries", limits=UnpackLimits(max_entries=1_000))  # fmt: skip
    assert time.monotonic() - t < 3
    assert stream.made < 1_100, f"read {stream.made} entries of the bomb"
    assert "'d0/f1000'" in message


def test_a_deep_tree_is_bounded_by_the_path_limit_and_removed_whole(record, arena):
    """2,000 nested directories (a path of 4,000 bytes) are made, then the layer fails: the tree is removed
    (one descriptor at a time), and a path over max_path is refused by name."""
    deep = "/".join(["d"] * 2000)
    data = layer(member(deep + "/f", data=b"f"))
    openers = [(lambda: contextlib.nullcontext(io.BytesIO(data)), "sha256:" + "0" * 64)]
    t = time.monotonic()
    with pytest.raises(ImageError, match="does not match its diff_id"):
        unpack_image(openers, arena / "img")
    record("2,000 nested directories, then a wrong diff_id", "ImageError, the tree removed",
           f"removed: {not os.path.lexists(arena / 'img')} ({time.monotonic() - t:.2f} s)")  # fmt: skip
    assert not os.path.lexists(arena / "img")
    refused(record, arena, "a path of 4,100 bytes", layer(member(deep + "/" + "x" * 100, data=b"f")), match="max_path")
    refused(record, arena, "a name of 256 bytes", layer(member("n" * 256, data=b"f")), match="max_name")


# ---- headers ------------------------------------------------------------------------------------


def test_pax_headers_are_bounded_and_parsed_in_linear_time(record, arena):
    # CPython 3.11.7's own parser takes minutes on a run of digits this long (CVE-2024-6232)
    t = time.monotonic()
    stats = unpack(arena, layer(member("digits", data=b"d", pax={"SCHILY.xattr.user.n": "1" * 500_000})))
    took = time.monotonic() - t
    record("a pax header holding 500,000 digits (CVE-2024-6232)", "parsed in linear time", f"{took:.2f} s")
    assert took < 3 and stats.entries == 1
    _remove_image(arena)
    refused(record, arena, "a pax header of 2 MiB", layer(member("x", pax={"comment": "c" * (2 << 20)})),
            match="extended headers")  # fmt: skip
    refused(record, arena, "a sparse file (pax GNU.sparse 1.0)", layer(member("x", pax={
        "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "1000000000"})),
        match="sparse")  # fmt: skip
    chain = b"".join(tarfile.TarInfo._create_pax_generic_header({"comment": "c"}, tarfile.XHDTYPE, "utf-8")
                     for _ in range(5000))  # fmt: skip
    refused(record, arena, "5,000 pax headers before one member", chain + layer(member("x")), match="extended headers")
    malformed = bytearray(layer(member("x", pax={"comment": "abc"})))
    at = malformed.index(b"comment=abc")
    malformed[at - 3: at - 1] = b"99"  # a record length pointing past the header
    refused(record, arena, "a pax record whose length overruns its header", bytes(malformed), match="pax header")


# ---- damaged layers -----------------------------------------------------------------------------


def test_truncated_layers(record, arena):
    data = layer(member("a", data=os.urandom(50_000)), member("b", data=os.urandom(50_000)))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        b = tar.getmember("b")
        b_end = b.offset_data + b.size + (-b.size % tarfile.BLOCKSIZE)  # the end of b's data: a member boundary
    refused(record, arena, "a tar cut inside a member", data[:30_000], match="not a complete tar")
    refused(record, arena, "a tar cut at a member boundary (no end-of-archive)", data[:b_end],
            match="end-of-archive")  # fmt: skip
    refused(record, arena, "garbage after the last member", data[:b_end] + os.urandom(2048), match="end-of-archive")
    refused(record, arena, "not a tar at all", os.urandom(4096), match="not a complete tar")
    refused(record, arena, "an empty stream", b"", match="not a complete tar")
    gz = gzip.compress(data)

    def cut_gzip():
        return gzip.GzipFile(fileobj=io.BytesIO(gz[: len(gz) // 2]), mode="rb")

    with pytest.raises(ImageError) as e:
        unpack_image([(cut_gzip, None)], arena / "img")
    record("a gzip layer cut in half", "ImageError, nothing kept", str(e.value).splitlines()[0])
    assert "could not be read" in str(e.value) and not os.path.lexists(arena / "img")


def test_a_layer_that_is_not_its_diff_id(record, arena, tmp_path_factory):
    data = layer(member("etc/passwd", data=b"root::0:0::/:/bin/sh\n"))
    forged = data.replace(b"root::0:0", b"toor::0:0")
    openers = [(lambda: contextlib.nullcontext(io.BytesIO(forged)), diff_id(data))]
    with pytest.raises(ImageError) as e:
        unpack_image(openers, arena / "img")
    record("a layer whose sha256 is not its diff_id", "ImageError, nothing kept", str(e.value).splitlines()[0][:150])
    assert "does not match its diff_id" in str(e.value) and diff_id(forged) in str(e.value)
    assert not os.path.lexists(arena / "img")
    # and apply_layer alone says the same
    root = tmp_path_factory.mktemp("alone")
    with pytest.raises(ImageError, match="does not match its diff_id"):
        apply_layer(io.BytesIO(forged), root, diff_id=diff_id(data))


def _remove_image(arena: Path) -> None:
    """A case that unpacked: the image goes again, for the arena's check."""
    import shutil

    shutil.rmtree(arena / "img")


def _opener(data: bytes):
    return lambda: contextlib.nullcontext(io.BytesIO(data))


def test_an_image_cannot_change_a_file_it_shares_with_another(tmp_path):
    """Files are shared between images by hard links (the store's files/).  A later image whose layer
    links to a shared file and then writes that name, writes a name twice, or a whiteout and the name
    again, gets new files of its own: the first image's file and the shared one never change."""
    objects = tmp_path / "files"
    objects.mkdir()
    first = layer(member("etc", "dir"), member("etc/passwd", data=b"root:x:0:0\n"), member("bin", "dir"),
                  member("bin/tool", data=b"#!/bin/sh\necho original\n", mode=0o755))  # fmt: skip
    unpack_image([(_opener(first), diff_id(first))], tmp_path / "a", objects=objects)
    before = {f.name: f.read_bytes() for f in objects.iterdir()}
    assert len(before) == 2
    hostile = layer(
        member("etc", "dir"), member("bin", "dir"),
        member("etc/passwd", data=b"root:x:0:0\n"),  # the same file: shared with the first image
        member("etc/alias", "hardlink", link="etc/passwd"),  # a hard link to the shared inode
        member("etc/alias", data=b"evil: written through the link's name\n"),
        member("etc/passwd", data=b"evil: the name written again\n"),
        member("bin/tool", data=b"#!/bin/sh\necho original\n", mode=0o755),
        member("bin/.wh.tool", "file"), member("bin/tool", data=b"evil: after its whiteout\n", mode=0o755),
    )  # fmt: skip
    unpack_image([(_opener(first), diff_id(first)), (_opener(hostile), diff_id(hostile))], tmp_path / "b",
                 objects=objects)  # fmt: skip
    assert (tmp_path / "a" / "etc" / "passwd").read_bytes() == b"root:x:0:0\n"
    assert (tmp_path / "a" / "bin" / "tool").read_bytes() == b"#!/bin/sh\necho original\n"
    assert (tmp_path / "b" / "etc" / "passwd").read_bytes() == b"evil: the name written again\n"
    assert (tmp_path / "b" / "bin" / "tool").read_bytes() == b"evil: after its whiteout\n"
    assert {f.name: f.read_bytes() for f in objects.iterdir() if f.name in before} == before  # none changed
