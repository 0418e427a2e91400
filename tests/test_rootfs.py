"""Rootfs sources: the host's /usr, or a directory tree; either way read-only and never written."""

import os
import shutil
import subprocess

import pytest

from sandboxlite import RootfsError, Sandbox
from sandboxlite import images as rootfs


def _libs(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/"):
                libs.append(p)
    return libs


@pytest.fixture(scope="module")
def tiny_root(host_dir_factory):
    """A minimal root filesystem: dash, cat and their libraries, nothing else."""
    root = host_dir_factory("sandboxlite-tinyroot-")
    for binary in ("/usr/bin/dash", "/usr/bin/cat", "/usr/bin/ls"):
        for f in [binary, *_libs(binary)]:
            real = os.path.realpath(f)
            dst = root / f.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(real, dst)
    os.symlink("dash", root / "usr/bin/sh")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc/marker").write_text("tiny image\n")
    # entries the jail owns must not leak from the image
    (root / "tmp").mkdir()
    (root / "tmp/stale").write_text("from the image")
    (root / "proc").mkdir()
    return root


def test_directory_rootfs(tiny_root):
    before = {p: p.stat().st_mtime_ns for p in tiny_root.rglob("*") if not p.is_symlink()}
    with Sandbox(rootfs=str(tiny_root)) as sb:
        r = sb.exec("cat /etc/marker; ls /tmp; ls /; echo x > /etc/marker || echo ro")
        assert r.stdout.startswith(b"tiny image\n")
        assert b"stale" not in r.stdout
        assert b"ro\n" in r.stdout
        assert sb.info["rootfs_kind"] == "dir"
        assert sb.exec(["python3", "-c", "1"]).exit_code == 127  # the host's tools are not there
    # nothing was written into the image
    assert {p: p.stat().st_mtime_ns for p in tiny_root.rglob("*") if not p.is_symlink()} == before
    assert (tiny_root / "etc/marker").read_text() == "tiny image\n"


def test_host_rootfs_has_a_minimal_etc():
    plan = rootfs.host_plan()
    assert plan.kind == "host"
    etc = dict((dst, src) for src, dst in plan.binds)["/etc"]
    names = set(os.listdir(etc))
    assert {"passwd", "group", "hosts", "ld.so.cache"} <= names
    assert "shadow" not in names and "gshadow" not in names and "sudoers" not in names
    assert "ssh" not in names


def test_missing_rootfs_errors_say_what_to_do(tmp_path):
    with pytest.raises(RootfsError) as e:
        Sandbox(rootfs=str(tmp_path / "nope"))
    assert "Hint:" in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RootfsError, match="does not look like a root filesystem"):
        Sandbox(rootfs=str(tmp_path / "empty"))
    with pytest.raises(RootfsError, match="no rootfs image named"):
        Sandbox(rootfs="no-such-image")


def test_auto_prefers_a_built_image(host_dir_factory, monkeypatch, tiny_root):
    from sandboxlite.images import manage

    home = host_dir_factory("sandboxlite-home-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(home))
    assert rootfs.resolve("auto").kind == "host"
    # a tree without a manifest (an interrupted build) is not an image
    img = rootfs.image_root(rootfs.DEFAULT_PROFILE)
    shutil.copytree(tiny_root, img, symlinks=True)
    assert rootfs.resolve("auto").kind == "host"
    with pytest.raises(RootfsError, match="incomplete"):
        rootfs.resolve(rootfs.DEFAULT_PROFILE)
    shutil.rmtree(img.parent)
    manage.adopt(tiny_root, rootfs.DEFAULT_PROFILE)
    plan = rootfs.resolve("auto")
    assert plan.kind == "dir" and plan.path == str(img)
    with Sandbox() as sb:  # and the default sandbox now runs on it
        assert sb.exec("cat /etc/marker").stdout == b"tiny image\n"


def test_the_subuid_hint_proposes_a_range_nobody_has(tmp_path):
    from sandboxlite.images.build import free_subid_range

    sub, gid = tmp_path / "subuid", tmp_path / "subgid"
    sub.write_text("")
    gid.write_text("")
    assert free_subid_range((str(sub), str(gid))) == 100000
    sub.write_text("alice:100000:65536\n")  # what useradd gave the first user
    assert free_subid_range((str(sub), str(gid))) == 165536
    gid.write_text("bob:165536:65536\nweird line\n")
    assert free_subid_range((str(sub), str(gid))) == 231072
    sub.write_text("alice:100000:65536\ncarol:400000:65536\n")  # a gap that fits
    assert free_subid_range((str(sub), str(gid))) == 231072
    sub.write_text("alice:100000:65536\ncarol:240000:65536\n")  # a gap too small: after carol
    assert free_subid_range((str(sub), str(gid))) == 305536


def test_the_host_plan_follows_the_home(host_dir_factory, monkeypatch):
    """host_plan's /etc copy lives under $SANDBOXLITE_HOME: a process whose home moves (and whose old
    home is removed) still starts host sandboxes."""
    import shutil

    from sandboxlite import Sandbox

    first = host_dir_factory("sandboxlite-home-a-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(first))
    with Sandbox(rootfs="host") as sb:
        assert sb.exec("echo one").stdout == b"one\n"
    second = host_dir_factory("sandboxlite-home-b-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(second))
    shutil.rmtree(first)
    etc = dict((dst, src) for src, dst in rootfs.host_plan().binds)["/etc"]
    assert etc.startswith(str(second))
    with Sandbox(rootfs="host") as sb:
        assert sb.exec("echo two").stdout == b"two\n"
