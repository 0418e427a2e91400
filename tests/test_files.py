"""File API: byte-exact, and nothing ever follows a symlink onto the host."""

import hashlib
import os
import stat

import pytest

from sandboxlite import SandboxFileError

CASES = [
    b"",
    b"no trailing newline",
    b"tabs\tand\ttabs\n",
    b"crlf\r\nline\r\n",
    b"-e not an option\n\\n literal backslash-n\n",
    bytes(range(256)) * 4,
    "unicode: \u00e9\u4e2d\U0001f600\n".encode(),
]


@pytest.mark.parametrize("data", CASES)
def test_round_trip_is_byte_exact(sb, data):
    sb.write_file("/testbed/f.bin", data)
    assert sb.read_file("/testbed/f.bin") == data
    # and the sandbox sees the same bytes
    assert sb.exec(["sha256sum", "/testbed/f.bin"]).stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_ten_mib_round_trip(sb):
    data = os.urandom(10 << 20)
    sb.write_file("big.bin", data)  # relative to /testbed
    out = sb.read_file("/testbed/big.bin")
    assert hashlib.sha256(out).hexdigest() == hashlib.sha256(data).hexdigest()


def test_str_is_utf8_and_parents_are_created(sb):
    sb.write_file("/tmp/a/b/c.txt", "h\u00e9")
    assert sb.read_file("/tmp/a/b/c.txt") == "h\u00e9".encode()
    with pytest.raises(FileNotFoundError):
        sb.write_file("/tmp/nope/x.txt", "x", parents=False)


def test_errors_map_to_builtin_exceptions(sb):
    with pytest.raises(FileNotFoundError) as e:
        sb.read_file("/testbed/missing")
    assert isinstance(e.value, SandboxFileError) and e.value.filename == "/testbed/missing"
    with pytest.raises(IsADirectoryError):
        sb.read_file("/testbed")
    from sandboxlite import Sandbox

    with Sandbox(rootfs="host") as host:  # a read-only root (no copy-on-write layer)
        with pytest.raises(PermissionError):
            host.write_file("/usr/evil", b"x")
    sb.exec("mkfifo /tmp/fifo")
    with pytest.raises(SandboxFileError):  # never blocks on a fifo
        sb.read_file("/tmp/fifo")


def test_write_mode_and_overwrite(sb):
    sb.write_file("/testbed/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.exec("/testbed/run.sh").stdout == b"ran\n"
    sb.write_file("/testbed/run.sh", "short")
    assert sb.read_file("/testbed/run.sh") == b"short"


def test_full_tmpfs_reports_enospc():
    from sandboxlite import Sandbox

    with Sandbox(limits={"testbed_mb": 1}) as sb:
        with pytest.raises(SandboxFileError) as e:
            sb.write_file("/testbed/big", b"x" * (2 << 20))
        assert e.value.errno == 28


def test_upload_download_tree(sb, tmp_path):
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"A\r\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (src / "sub" / "deeper" / "x.sh").write_text("#!/bin/sh\necho x\n")
    os.chmod(src / "sub" / "deeper" / "x.sh", 0o755)
    os.symlink("a.txt", src / "link")
    sb.upload(src, "/testbed/in")
    assert sb.exec("/testbed/in/sub/deeper/x.sh").stdout == b"x\n"
    assert sb.exec("readlink /testbed/in/link; cat /testbed/in/link").stdout == b"a.txt\nA\r\n"
    dst = tmp_path / "dst"
    skipped = sb.download("/testbed/in", dst)
    assert skipped == []
    assert (dst / "a.txt").read_bytes() == b"A\r\n"
    assert (dst / "sub" / "b.bin").read_bytes() == bytes(range(256))
    assert os.readlink(dst / "link") == "a.txt"
    assert stat.S_IMODE(os.stat(dst / "sub" / "deeper" / "x.sh").st_mode) == 0o755
    # single file both ways
    one = tmp_path / "one.txt"
    one.write_bytes(b"1")
    sb.upload(one, "/tmp/one.txt")
    sb.download("/tmp/one.txt", tmp_path / "back.txt")
    assert (tmp_path / "back.txt").read_bytes() == b"1"


def test_download_never_follows_symlinks_out(sb, tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("HOST SECRET")
    sb.exec(
        f"mkdir -p /testbed/out/d && echo ok > /testbed/out/ok.txt && "
        f"ln -s {secret} /testbed/out/abs && ln -s ../../../etc/hostname /testbed/out/d/up && "
        f"ln -s /etc/passwd /testbed/out/passwd && ln -s ok.txt /testbed/out/rel"
    )
    dst = tmp_path / "dl"
    skipped = sb.download("/testbed/out", dst)
    assert sorted(skipped) == ["/testbed/out/abs", "/testbed/out/d/up", "/testbed/out/passwd"]
    assert (dst / "ok.txt").read_text() == "ok\n"
    assert os.readlink(dst / "rel") == "ok.txt"
    for p in dst.rglob("*"):
        if p.is_file():
            assert b"HOST SECRET" not in p.read_bytes()
    # a symlink at the top resolves inside the jail, where the host path does not exist
    sb.exec(f"ln -s {secret} /testbed/top")
    with pytest.raises(FileNotFoundError):
        sb.download("/testbed/top", tmp_path / "top")


def test_download_does_not_write_through_host_symlinks(sb, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    dst = tmp_path / "dst.txt"
    os.symlink(victim, dst)
    sb.write_file("/testbed/f", "new")
    sb.download("/testbed/f", dst)
    assert victim.read_text() == "keep"
    assert not dst.is_symlink() and dst.read_text() == "new"


def test_paths_with_dotdot_stay_inside(sb):
    # ".." cannot climb out of the jail's root: /testbed/../../../etc/hostname is the sandbox's /etc
    data = sb.read_file("/testbed/../../../etc/hostname")
    assert data == sb.exec("cat /etc/hostname").stdout
    host_shadow = open("/etc/shadow", "rb").read() if os.access("/etc/shadow", os.R_OK) else None
    try:
        inside = sb.read_file("/testbed/../../../etc/shadow")
    except (FileNotFoundError, PermissionError):
        return  # the host rootfs has no shadow at all
    assert inside == sb.exec("cat /etc/shadow").stdout  # the image's own, never the host's
    assert inside != host_shadow


def test_mkdir(sb):
    sb.mkdir("/tmp/x/y/z")
    assert sb.exec("test -d /tmp/x/y/z").exit_code == 0
