"""Applying container image layers (sandboxlite.images.unpack): the OCI changeset semantics, what is kept
and what is dropped, compression, diff_ids, and unpack_image's all-or-nothing.  The layers are real tars
made here with tarfile (and gzip, and the zstd command); the trees are real directories.  The hostile
layers are in tests/security/test_image_unpack_hostile.py."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest

from sandboxlite.errors import ImageError
from sandboxlite.images.unpack import (
    ImageStats,
    LayerStats,
    UnpackLimits,
    apply_layer,
    open_layer,
    unpack_image,
)

from .helpers_nonroot import make_nobody_home, parse_result, run_as_nobody, unprivileged_prereqs

OCI_TAR = "application/vnd.oci.image.layer.v1.tar"
OCI_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MTIME = 1_600_000_000
AS_ROOT = os.geteuid() == 0

_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
          "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}  # fmt: skip


# ---- building layers ----------------------------------------------------------------------------


def member(name: str, kind: str = "file", data: bytes = b"", *, mode: int | None = None, mtime: float = MTIME,
           uid: int = 0, gid: int = 0, link: str = "", pax: dict | None = None
           ) -> tuple[tarfile.TarInfo, bytes]:  # fmt: skip
    """One tar member: a file (with ``data``), dir, symlink/hardlink (to ``link``), fifo, chr or blk."""
    info = tarfile.TarInfo(name)
    info.type = _TYPES[kind]
    info.mode = mode if mode is not None else (0o755 if kind == "dir" else 0o644)
    info.mtime, info.uid, info.gid, info.linkname = mtime, uid, gid, link
    info.size = len(data) if kind == "file" else 0
    if kind in ("chr", "blk"):
        info.devmajor, info.devminor = 8, 0
    info.pax_headers = dict(pax or {})
    return info, data


def whiteout(path: str) -> tuple[tarfile.TarInfo, bytes]:
    head, _, name = path.rpartition("/")
    return member(f"{head}/.wh.{name}" if head else f".wh.{name}")


def opaque(directory: str) -> tuple[tarfile.TarInfo, bytes]:
    return member(f"{directory}/.wh..wh..opq")


def layer(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    """The bytes of an uncompressed layer tar holding ``members`` in this order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def diff_id(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def apply(root: Path, data: bytes, **kw) -> LayerStats:
    return apply_layer(io.BytesIO(data), root, **kw)


def tree(root: Path) -> dict[str, str]:
    """Every entry under root: a file's content, "dir", "-> target", "fifo"."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "-> " + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            elif stat.S_ISFIFO(st.st_mode):
                out[rel] = "fifo"
            else:
                out[rel] = p.read_text()
    return out


def user_xattrs_work(where: Path) -> bool:
    probe = where / ".xattr-probe"
    probe.write_text("")
    try:
        os.setxattr(probe, "user.probe", b"1")
        return True
    except OSError:
        return False
    finally:
        probe.unlink()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


# ---- changesets ---------------------------------------------------------------------------------


def test_three_layers_whiteouts_and_opaque_directories(root):
    base = layer(
        member("etc", "dir"), member("etc/a", data=b"a1"), member("etc/b", data=b"b1"),
        member("opt/sub/deep", data=b"deep"), member("opt/old", data=b"old"),
        member("usr/bin/tool", data=b"tool"), member("var/lib/x", data=b"x"), member("srv/tree/leaf", data=b"leaf"),
    )  # fmt: skip
    apply(root, base)
    # layer 2: the opaque marker of opt comes AFTER opt's new children: they stay, the lower ones go
    second = layer(
        whiteout("etc/a"), member("opt/new", data=b"new"), member("opt/sub/fresh", data=b"fresh"), opaque("opt"),
        whiteout("usr/bin/tool"), member("var/lib", "dir", mode=0o700), member("var/lib/y", data=b"y"),
        whiteout("srv/tree"), whiteout("not/there/at/all"),
    )  # fmt: skip
    s2 = apply(root, second)
    assert s2.whiteouts == 5 and s2.entries == 9
    # layer 3: the opaque marker BEFORE the children; a file over a directory; a directory over a file
    third = layer(
        opaque("etc"), member("etc/c", data=b"c3"),
        member("opt/sub", data=b"now a file"), member("var/lib/y", "dir"), member("var/lib/y/z", data=b"z"),
    )  # fmt: skip
    apply(root, third)
    assert tree(root) == {
        "etc": "dir", "etc/c": "c3",
        "opt": "dir", "opt/new": "new", "opt/sub": "now a file",
        "usr": "dir", "usr/bin": "dir",
        "var": "dir", "var/lib": "dir", "var/lib/x": "x", "var/lib/y": "dir", "var/lib/y/z": "z",
        "srv": "dir", "not": "dir", "not/there": "dir", "not/there/at": "dir",
    }  # fmt: skip
    assert stat.S_IMODE(os.stat(root / "var/lib").st_mode) == 0o700  # a directory over a directory: its mode


def test_an_opaque_directory_keeps_what_this_layer_made_below_it(root):
    apply(root, layer(member("d/sub/old", data=b"old"), member("d/sub/keep-dir/x", data=b"x"),
                      member("d/f", data=b"f")))  # fmt: skip
    apply(root, layer(member("d/sub/new", data=b"new"), member("d/sub2/n", data=b"n"), opaque("d")))
    assert tree(root) == {"d": "dir", "d/sub": "dir", "d/sub/new": "new", "d/sub2": "dir", "d/sub2/n": "n"}


def test_an_opaque_marker_at_the_root_and_a_whiteout_of_this_layers_own_entry(root):
    apply(root, layer(member("lower", data=b"l")))
    apply(root, layer(member("mine", data=b"m"), member(".wh..wh..opq"), whiteout("mine")))
    # a whiteout applies to the layers below only (the spec): this layer's own "mine" stays
    assert tree(root) == {"mine": "m"}


def test_whiteout_removes_a_whole_tree_and_aufs_metadata_is_dropped(root):
    apply(root, layer(member("a/b/c/d", data=b"d"), member("a/b/e", data=b"e"), member("keep", data=b"k")))
    s = apply(root, layer(whiteout("a"), member("x/.wh..wh.plnk")))
    assert tree(root) == {"keep": "k"}
    assert s.dropped == ["x/.wh..wh.plnk (aufs metadata)"]


def test_member_names_are_normalised_and_the_root_entry_left_alone(root):
    os.chmod(root, 0o755)
    s = apply(root, layer(member("./", "dir", mode=0o700), member("./a/./b//c", data=b"c"), member("/abs", data=b"x")))
    assert tree(root) == {"a": "dir", "a/b": "dir", "a/b/c": "c", "abs": "x"}
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o755 and s.entries == 3


def test_a_pipe_is_a_stream_too(root, tmp_path):
    data = layer(member("from/a/pipe", data=b"streamed" * 100_000))
    (tmp_path / "l.tar").write_bytes(data)
    with subprocess.Popen(["cat", str(tmp_path / "l.tar")], stdout=subprocess.PIPE) as cat:
        s = apply_layer(cat.stdout, root, diff_id=diff_id(data))
    assert (root / "from/a/pipe").read_bytes() == b"streamed" * 100_000 and s.bytes == 800_000


def test_an_empty_layer_is_the_one_docker_makes(root):
    empty = b"\0" * 1024  # the two end-of-archive blocks; docker's well-known empty layer
    s = apply(root, empty, diff_id="sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef")
    assert s.entries == 0 and list(root.iterdir()) == []


# ---- entries ------------------------------------------------------------------------------------


def test_hard_links_inside_a_layer_and_across_layers(root):
    apply(root, layer(member("bin/busybox", data=b"#!busybox", mode=0o755),
                      member("bin/sh", "hardlink", link="bin/busybox")))  # fmt: skip
    s = apply(root, layer(member("usr/bin/ls", "hardlink", link="/bin/busybox"),  # an absolute target: in the root
                          member("bin/busybox.orig", "hardlink", link="./bin/busybox")))  # fmt: skip
    st = os.lstat(root / "bin/busybox")
    assert st.st_nlink == 4
    for other in ("bin/sh", "usr/bin/ls", "bin/busybox.orig"):
        assert os.lstat(root / other).st_ino == st.st_ino
    assert s.entries == 2
    # a later layer replacing one name replaces that name only (a new inode), never the shared content
    apply(root, layer(member("bin/sh", data=b"#!dash")))
    assert (root / "bin/busybox").read_bytes() == b"#!busybox" and (root / "bin/sh").read_bytes() == b"#!dash"


def test_symlinks_are_stored_verbatim_never_followed(root):
    apply(root, layer(member("lib", "dir"), member("lib/x", data=b"x")))
    apply(root, layer(
        member("lib", "symlink", link="/usr/lib"),  # over a directory: replaces the tree
        member("rel", "symlink", link="../../../etc/passwd"),
        member("dangling", "symlink", link="nowhere/at/all"),
        member("bin/sh", "symlink", link="/bin/dash"),
    ))  # fmt: skip
    assert tree(root) == {"lib": "-> /usr/lib", "rel": "-> ../../../etc/passwd", "dangling": "-> nowhere/at/all",
                          "bin": "dir", "bin/sh": "-> /bin/dash"}  # fmt: skip


def test_fifos_are_made_and_devices_dropped_and_counted(root):
    s = apply(root, layer(
        member("run/ctl", "fifo", mode=0o620),
        member("dev/null", "chr"), member("dev/sda", "blk"), member("dev/keep", data=b"k"),
    ))  # fmt: skip
    st = os.lstat(root / "run/ctl")
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o620 and st.st_mtime == MTIME
    assert not (root / "dev/null").exists() and not (root / "dev/sda").exists()
    assert s.dropped == ["dev/null (character device)", "dev/sda (block device)"] and s.dropped_count == 2


def test_setuid_and_setgid_bits_are_stripped_and_counted(root):
    s = apply(root, layer(
        member("usr/bin/su", data=b"su", mode=0o4755), member("usr/bin/wall", data=b"w", mode=0o2755),
        member("tmp", "dir", mode=0o1777), member("var/mail", "dir", mode=0o2775), member("plain", data=b"p"),
    ))  # fmt: skip
    assert stat.S_IMODE(os.stat(root / "usr/bin/su").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "usr/bin/wall").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(root / "tmp").st_mode) == 0o1777  # sticky kept
    assert stat.S_IMODE(os.stat(root / "var/mail").st_mode) == 0o2775  # a directory's setgid only passes its group on
    assert s.setid_stripped == ["usr/bin/su", "usr/bin/wall"] and s.setid_count == 2


def test_user_xattrs_kept_and_the_rest_dropped(root):
    if not user_xattrs_work(root):
        pytest.skip("this filesystem holds no user xattrs")
    caps = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    s = apply(root, layer(
        member("usr/bin/ping", data=b"ping", pax={"SCHILY.xattr.security.capability": caps,
                                                 "SCHILY.xattr.user.origin": "debian \u00e9",
                                                 "SCHILY.xattr.trusted.x": "t"}),
        member("etc", "dir", pax={"SCHILY.xattr.user.dir": "d"}),
        member("link", "symlink", link="etc", pax={"SCHILY.xattr.user.on-a-link": "l"}),
    ))  # fmt: skip
    ping = root / "usr/bin/ping"
    assert os.listxattr(ping) == ["user.origin"] and os.getxattr(ping, "user.origin") == "debian \u00e9".encode()
    assert os.getxattr(root / "etc", "user.dir") == b"d"
    assert sorted(s.xattrs_dropped) == ["link: user.on-a-link", "usr/bin/ping: security.capability",
                                        "usr/bin/ping: trusted.x"]  # fmt: skip
    assert s.xattrs_dropped_count == 3


def test_modes_and_mtimes_are_kept(root):
    apply(root, layer(
        member("d", "dir", mode=0o750, mtime=1_111_111_111), member("d/f", data=b"f", mode=0o640, mtime=1_234_567_890),
        member("d/ro", "dir", mode=0o555, mtime=1_000_000_000), member("d/ro/inside", data=b"i", mode=0o400),
        member("d/l", "symlink", link="f", mtime=1_222_222_222), member("frac", data=b"", mtime=1_500_000_000.25),
    ))  # fmt: skip
    assert stat.S_IMODE(os.stat(root / "d").st_mode) == 0o750
    assert os.stat(root / "d").st_mtime == 1_111_111_111  # set after its children were made
    assert stat.S_IMODE(os.stat(root / "d/f").st_mode) == 0o640 and os.stat(root / "d/f").st_mtime == 1_234_567_890
    assert stat.S_IMODE(os.stat(root / "d/ro").st_mode) == 0o555 and os.stat(root / "d/ro").st_mtime == 1_000_000_000
    assert stat.S_IMODE(os.stat(root / "d/ro/inside").st_mode) == 0o400
    assert os.lstat(root / "d/l").st_mtime == 1_222_222_222
    assert os.stat(root / "frac").st_mtime_ns == 1_500_000_000_250_000_000
    # a later layer writes into the read-only directory (and gives its mode back)
    apply(root, layer(member("d/ro/later", data=b"later")))
    assert (root / "d/ro/later").read_text() == "later" and stat.S_IMODE(os.stat(root / "d/ro").st_mode) == 0o555


def test_ownership(root):
    apply(root, layer(member("srv/owned", data=b"o", uid=1234, gid=5678), member("srv/l", "symlink", link="owned",
                                                                                  uid=4321, gid=8765)))  # fmt: skip
    st, lst = os.stat(root / "srv/owned"), os.lstat(root / "srv/l")
    if AS_ROOT:  # the numeric owners of the tar, the link's own (not its target's)
        assert (st.st_uid, st.st_gid, lst.st_uid, lst.st_gid) == (1234, 5678, 4321, 8765)
    else:  # a user's files stay the user's
        assert (st.st_uid, lst.st_uid) == (os.geteuid(), os.geteuid())


# ---- integrity and compression ------------------------------------------------------------------


def test_diff_id_is_checked(root):
    data = layer(member("f", data=b"content"))
    assert apply(root, data, diff_id=diff_id(data)).diff_id == diff_id(data)
    assert apply(root, data, diff_id=diff_id(data).upper().replace("SHA256", "sha256")).diff_id == diff_id(data)
    with pytest.raises(ImageError, match="does not match its diff_id") as e:
        apply(root, data, diff_id="sha256:" + "0" * 64)
    assert diff_id(data) in str(e.value) and "pull" in str(e.value)
    with pytest.raises(ImageError, match="not a digest"):
        apply(root, data, diff_id="md5:abc")


def _compressed(tmp_path: Path, data: bytes, how: str) -> Path:
    path = tmp_path / f"layer.{how}"
    if how == "gzip":
        path.write_bytes(gzip.compress(data))
    elif how == "zstd":
        path.write_bytes(subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout)
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("how, media_type", [
    ("tar", OCI_TAR), ("gzip", OCI_GZIP), ("gzip", DOCKER_GZIP), ("zstd", OCI_ZSTD),
    ("gzip", OCI_TAR),  # docker save archives hold plain tars, and some tools gzip them anyway: sniffed
    ("zstd", OCI_TAR),
])  # fmt: skip
def test_compressed_layers(tmp_path, root, how, media_type):
    if how == "zstd" and not shutil.which("zstd"):
        pytest.skip("the zstd command is not installed (tools/setup.sh installs it)")
    big = os.urandom(300_000) + b"z" * 3_000_000
    data = layer(member("usr/share/doc/big", data=big), member("etc/os-release", data=b"ID=test\n"))
    with open_layer(_compressed(tmp_path, data, how), media_type) as stream:
        s = apply_layer(stream, root, diff_id=diff_id(data))
    assert (root / "etc/os-release").read_text() == "ID=test\n" and s.bytes == 3_300_008


def test_an_unknown_media_type_is_refused(tmp_path):
    path = _compressed(tmp_path, layer(member("f")), "tar")
    for bad in ("application/vnd.oci.image.config.v1+json", "application/vnd.oci.image.layer.v1.tar+bzip3"):
        with pytest.raises(ImageError) as e:
            with open_layer(path, bad):
                pass
        assert bad in str(e.value) and "Hint:" in str(e.value)


def test_a_damaged_zstd_layer_is_an_image_error(tmp_path, root):
    if not shutil.which("zstd"):
        pytest.skip("the zstd command is not installed")
    path = _compressed(tmp_path, layer(member("f", data=os.urandom(200_000))), "zstd")
    path.write_bytes(path.read_bytes()[:-5000])
    with pytest.raises(ImageError):
        with open_layer(path, OCI_ZSTD) as stream:
            apply_layer(stream, root)


# ---- unpack_image -------------------------------------------------------------------------------


def _openers(tmp_path: Path, *layers: bytes, wrong: int | None = None) -> list:
    out = []
    for i, data in enumerate(layers):
        path = _compressed(tmp_path, data, "gzip").rename(tmp_path / f"l{i}.tar.gz")
        expected = "sha256:" + "0" * 64 if i == wrong else diff_id(data)
        out.append((functools.partial(open_layer, path, OCI_GZIP), expected))
    return out


def _listing(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_unpack_image_applies_the_layers_in_order(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    layers = _openers(tmp_path, layer(member("etc/a", data=b"1"), member("etc/b", data=b"1")),
                      layer(whiteout("etc/a"), member("etc/b", data=b"2")))  # fmt: skip
    stats = unpack_image(layers, images / "img")
    assert isinstance(stats, ImageStats) and stats.dest == images / "img"
    assert tree(images / "img") == {"etc": "dir", "etc/b": "2"} and _listing(images) == ["img"]
    assert stat.S_IMODE(os.stat(images / "img").st_mode) == 0o755
    assert stats.entries == 4 and stats.bytes == 3 and len(stats.layers) == 2
    with pytest.raises(ImageError, match="already exists"):
        unpack_image(layers, images / "img")


def test_unpack_image_keeps_nothing_when_a_layer_fails(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    (images / "other").write_text("untouched")
    good = layer(member("ro", "dir", mode=0o555), member("ro/f", data=b"f"), member("locked", "dir", mode=0o000))
    layers = _openers(tmp_path, good, layer(member("x", data=b"x")), wrong=1)
    with pytest.raises(ImageError, match=r"layer 2 of 2 \(sha256:0+\): the layer does not match its diff_id"):
        unpack_image(layers, images / "img")
    assert _listing(images) == ["other"]


def test_unpack_image_keeps_nothing_on_ctrl_c(tmp_path):
    images = tmp_path / "images"
    images.mkdir()

    class Interrupted:
        def __enter__(self):
            raise KeyboardInterrupt

        def __exit__(self, *exc):
            return False

    layers = _openers(tmp_path, layer(member("a/b/c", data=b"c"))) + [(Interrupted, None)]
    with pytest.raises(KeyboardInterrupt):
        unpack_image(layers, images / "img")
    assert _listing(images) == []


# ---- as an unprivileged user --------------------------------------------------------------------

NONROOT = textwrap.dedent('''
    import io, json, os, stat, sys, tarfile
    from sandboxlite.errors import ImageError
    from sandboxlite.images.unpack import apply_layer, unpack_image

    def tar(*members):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
            for name, kind, mode, data in members:
                i = tarfile.TarInfo(name); i.type = kind; i.mode = mode; i.uid = i.gid = 1234; i.mtime = 1_600_000_000
                i.size = len(data) if kind == tarfile.REGTYPE else 0
                t.addfile(i, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
        return out.getvalue()

    F, D = tarfile.REGTYPE, tarfile.DIRTYPE
    one = tar(("ro", D, 0o555, b""), ("ro/a", F, 0o444, b"a"), ("locked", D, 0o000, b""),
              ("locked/f", F, 0o600, b"f"), ("dev/null", tarfile.CHRTYPE, 0o666, b""),
              ("p", tarfile.FIFOTYPE, 0o644, b""))
    two = tar(("ro/b", F, 0o644, b"b"), ("locked/.wh.f", F, 0o644, b""), ("locked/g", F, 0o644, b"g"),
              ("ro/.wh.a", F, 0o644, b""))
    opener = lambda data: (lambda: __import__("contextlib").nullcontext(io.BytesIO(data)))
    out = {}
    stats = unpack_image([(opener(one), None), (opener(two), None)], "img")
    out["dropped"] = stats.layers[0].dropped
    try:
        unpack_image([(opener(one), None), (opener(b"not a tar" * 100), None)], "img2")
    except ImageError as e:
        out["error"] = str(e)
    out["listing"] = sorted(os.listdir("."))
    print("RESULT " + json.dumps(out))
''')


@pytest.mark.skipif(unprivileged_prereqs() is not None, reason=str(unprivileged_prereqs()))
def test_as_an_unprivileged_user():
    """A user keeps its own ownership, makes no device (no mknod), writes into a lower layer's read-only
    and mode-000 directories (and gives their modes back), and removes such a tree when unpacking fails."""
    home = make_nobody_home()
    try:
        script = home / "nonroot.py"
        script.write_text(NONROOT)
        proc = run_as_nobody(script, [], home)
        result = parse_result(proc)
        img = home / "img"
        assert result["dropped"] == ["dev/null (character device)"]
        assert "not a complete tar" in result["error"] and result["listing"] == ["img", "nonroot.py"]
        assert tree(img) == {"ro": "dir", "ro/b": "b", "locked": "dir", "locked/g": "g", "p": "fifo"}
        for p in [img, *img.rglob("*")]:
            assert os.lstat(p).st_uid == 65534, p  # not the tar's 1234
        assert stat.S_IMODE(os.stat(img / "ro").st_mode) == 0o555
        assert stat.S_IMODE(os.stat(img / "locked").st_mode) == 0o000
    finally:
        shutil.rmtree(home)


def test_limits_have_documented_defaults():
    limits = UnpackLimits()
    assert (limits.max_layer_bytes, limits.max_entries, limits.max_path, limits.max_name) == (8 << 30, 1_000_000,
                                                                                              4096, 255)  # fmt: skip
    assert json.dumps(LayerStats().dropped) == "[]"
