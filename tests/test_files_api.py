"""list, stat, remove, rename and watch: real sandboxes, and nothing ever follows a link onto the host."""

from __future__ import annotations

import errno
import time

import pytest

from sandboxlite import ConfigError, FileEvent, FileInfo, Sandbox, SandboxError, SandboxFileError
from sandboxlite.errors import SandboxFileNotFound, SandboxNotADirectory


@pytest.fixture(scope="module")
def msb():
    """One sandbox for the read-only and self-contained tests (each works in a directory of its own)."""
    with Sandbox() as s:
        yield s


def _events(w, until, limit: float = 10.0) -> list[FileEvent]:
    """Events of the watch ``w`` until ``until(events)`` holds (or ``limit`` seconds pass)."""
    got: list[FileEvent] = []
    end = time.monotonic() + limit
    while time.monotonic() < end and not until(got):
        for ev in w:  # ends after w.timeout seconds without an event
            got.append(ev)
            if until(got):
                break
    return got


# ---- list --------------------------------------------------------------------------------------


def test_list_describes_every_kind_of_entry_and_follows_no_link(msb):
    r = msb.exec("mkdir -p /testbed/ls/sub && printf hello > /testbed/ls/f && ln -s /etc/shadow-outside /testbed/ls/l"
                 " && ln -s sub /testbed/ls/dl && mkfifo /testbed/ls/p")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    infos = msb.list("/testbed/ls")
    assert [i.name for i in infos] == ["dl", "f", "l", "p", "sub"]  # sorted, no "." nor ".."
    by = {i.name: i for i in infos}
    assert all(isinstance(i, FileInfo) and i.path == f"/testbed/ls/{i.name}" for i in infos)
    assert (by["f"].type, by["f"].size, by["f"].target) == ("file", 5, None)
    assert by["sub"].type == "dir" and by["sub"].is_dir
    assert by["p"].type == "fifo"
    assert (by["l"].type, by["l"].target, by["l"].size) == ("symlink", "/etc/shadow-outside", len("/etc/shadow-outside"))
    assert (by["dl"].type, by["dl"].target) == ("symlink", "sub")  # a link to a directory: still the link
    assert by["f"].uid == 0 and by["f"].gid == 0
    # relative paths start at the workdir
    assert [i.name for i in msb.list("ls")] == [i.name for i in infos]
    with pytest.raises(Exception):  # frozen
        by["f"].size = 1  # type: ignore[misc]


def test_list_of_a_link_to_a_directory_lists_the_directory_inside_the_sandbox(msb):
    assert msb.exec("mkdir -p /testbed/ld/real && touch /testbed/ld/real/x && ln -s /testbed/ld/real /testbed/ld/to").exit_code == 0
    assert [i.name for i in msb.list("/testbed/ld/to")] == ["x"]
    # a link to a host directory that the sandbox does not have: resolved inside, so not found
    assert msb.exec("ln -s /proc/1/root/etc /testbed/ld/host; ln -s /nonexistent-host-dir /testbed/ld/gone").exit_code == 0
    with pytest.raises(SandboxFileNotFound):
        msb.list("/testbed/ld/gone")
    with pytest.raises(SandboxFileError) as e:  # the executor's own root, through procfs: refused
        msb.list("/testbed/ld/host")
    assert e.value.errno == errno.ELOOP  # RESOLVE_NO_MAGICLINKS


def test_list_errors(msb):
    with pytest.raises(SandboxFileNotFound):
        msb.list("/testbed/no-such-dir")
    msb.write_file("/testbed/lf", b"x")
    with pytest.raises(SandboxNotADirectory):
        msb.list("/testbed/lf")


def test_list_is_capped_with_a_hint(msb):
    assert msb.exec("mkdir -p /testbed/many && cd /testbed/many && touch $(seq 1 50)").exit_code == 0
    assert len(msb.list("/testbed/many", max_entries=50)) == 50
    with pytest.raises(SandboxFileError) as e:
        msb.list("/testbed/many", max_entries=10)
    assert e.value.errno == errno.E2BIG and "Hint" in str(e.value) and "max_entries=10" in str(e.value)
    # the channel is still in step after an answer cut short
    assert msb.stat("/testbed/many/1").type == "file"


def test_list_of_a_big_directory_with_long_links_spans_many_frames(msb):
    target = "/" + "t" * 3000
    cmd = f"mkdir -p /testbed/big && cd /testbed/big && for i in $(seq 1 40); do ln -s {target} l$i; done"
    assert msb.exec(cmd).exit_code == 0
    infos = msb.list("/testbed/big")
    assert len(infos) == 40 and all(i.target == target and i.type == "symlink" for i in infos)


# ---- stat --------------------------------------------------------------------------------------


def test_stat_fields_of_a_file_made_by_a_command(msb):
    r = msb.exec("printf 12345 > /testbed/st && chmod 640 /testbed/st && stat -c %Y /testbed/st")
    assert r.exit_code == 0, r.stderr
    info = msb.stat("/testbed/st")
    assert (info.name, info.path, info.type, info.size, info.mode) == ("st", "/testbed/st", "file", 5, 0o640)
    assert (info.uid, info.gid) == (0, 0)
    assert int(info.mtime) == int(r.stdout)
    assert msb.stat("/testbed").type == "dir" and msb.stat("/").name == "/"


def test_stat_of_a_link_describes_the_link_and_follows_only_inside(msb, tmp_path):
    # a host file that exists on the host: a link to its path must never reach it
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 12345)
    assert msb.exec(f"ln -s {secret} /testbed/hostlink && ln -s /etc/shadow-outside /testbed/shadowlink"
                    " && ln -s /etc/passwd /testbed/pwlink").exit_code == 0  # fmt: skip
    link = msb.stat("/testbed/hostlink")
    assert (link.type, link.target, link.size) == ("symlink", str(secret), len(str(secret)))
    with pytest.raises(SandboxFileNotFound):
        msb.stat("/testbed/hostlink", follow_symlinks=True)  # not the host's file
    sh = msb.stat("/testbed/shadowlink")
    assert (sh.type, sh.target) == ("symlink", "/etc/shadow-outside")
    with pytest.raises(SandboxFileNotFound):
        msb.stat("/testbed/shadowlink", follow_symlinks=True)
    # followed inside the sandbox: the sandbox's own /etc/passwd
    pw = msb.stat("/testbed/pwlink", follow_symlinks=True)
    assert pw.type == "file" and pw.target is None and pw.size == len(msb.read_file("/etc/passwd"))
    assert msb.stat("/testbed/pwlink").type == "symlink"
    # a relative link climbing out of the root stays in it
    assert msb.exec("ln -s ../../../../../../etc/passwd /testbed/climb").exit_code == 0
    assert msb.stat("/testbed/climb", follow_symlinks=True).size == pw.size


def test_stat_errors(msb):
    with pytest.raises(SandboxFileNotFound):
        msb.stat("/testbed/nope")
    with pytest.raises(SandboxFileNotFound):
        msb.stat("/testbed/nope/deeper", follow_symlinks=True)
    with pytest.raises(SandboxFileError) as e:
        msb.stat("/proc/1/root")  # the executor's own /proc entries are not the sandbox's files
    assert e.value.errno == errno.EACCES


# ---- remove ------------------------------------------------------------------------------------


def test_remove_a_file_a_link_and_an_empty_dir(msb):
    assert msb.exec("mkdir -p /testbed/rm/empty /tmp/rmkeep && echo k > /tmp/rmkeep/k && echo x > /testbed/rm/f"
                    " && ln -s /tmp/rmkeep /testbed/rm/dirlink && ln -s /tmp/rmkeep/k /testbed/rm/filelink").exit_code == 0  # fmt: skip
    msb.remove("/testbed/rm/f")
    msb.remove("/testbed/rm/filelink")
    msb.remove("/testbed/rm/dirlink")
    msb.remove("rm/empty")  # relative to the workdir
    assert msb.list("/testbed/rm") == []
    assert msb.read_file("/tmp/rmkeep/k") == b"k\n"  # the links' targets are untouched
    for gone in ("/testbed/rm/f", "/testbed/rm/empty", "/testbed/rm/dirlink"):
        with pytest.raises(SandboxFileNotFound):
            msb.stat(gone)
    with pytest.raises(SandboxFileNotFound):
        msb.remove("/testbed/rm/f")
    with pytest.raises(SandboxFileNotFound):
        msb.remove("/testbed/no/such/dir", recursive=True)


def test_remove_of_a_non_empty_dir_needs_recursive(msb):
    assert msb.exec("mkdir -p /testbed/ne/d && touch /testbed/ne/d/x").exit_code == 0
    with pytest.raises(SandboxFileError) as e:
        msb.remove("/testbed/ne/d")
    assert e.value.errno == errno.ENOTEMPTY and "recursive=True" in str(e.value)
    assert msb.stat("/testbed/ne/d/x").type == "file"


def test_recursive_remove_never_follows_links(msb):
    cmd = ("mkdir -p /tmp/keep/inner /testbed/tree/a/b/c && echo 1 > /tmp/keep/one && echo 2 > /tmp/keep/inner/two"
           " && echo x > /testbed/tree/a/b/c/x && mkfifo /testbed/tree/a/fifo"
           " && ln -s /tmp/keep /testbed/tree/a/b/keep && ln -s /tmp/keep/one /testbed/tree/one"
           " && ln -s ../../../../tmp/keep /testbed/tree/rel")
    assert msb.exec(cmd).exit_code == 0
    msb.remove("/testbed/tree", recursive=True)
    with pytest.raises(SandboxFileNotFound):
        msb.stat("/testbed/tree")
    assert sorted(i.name for i in msb.list("/tmp/keep")) == ["inner", "one"]
    assert msb.read_file("/tmp/keep/one") == b"1\n" and msb.read_file("/tmp/keep/inner/two") == b"2\n"
    # a link passed itself, recursive or not, is removed as a link
    assert msb.exec("ln -s /tmp/keep /testbed/keeplink").exit_code == 0
    msb.remove("/testbed/keeplink", recursive=True)
    assert msb.read_file("/tmp/keep/inner/two") == b"2\n"


def test_recursive_remove_of_a_deep_tree(msb):
    assert msb.exec("d=/testbed/deep; for i in $(seq 1 60); do d=$d/d; done; mkdir -p $d && touch $d/f").exit_code == 0
    msb.remove("/testbed/deep", recursive=True)
    assert msb.exec("test -e /testbed/deep").exit_code == 1
    # deeper than the executor goes: an error, not a crash, and the sandbox still answers
    assert msb.exec("d=/testbed/deeper; for i in $(seq 1 140); do d=$d/d; done; mkdir -p $d").exit_code == 0
    with pytest.raises(SandboxFileError) as e:
        msb.remove("/testbed/deeper", recursive=True)
    assert e.value.errno == errno.ELOOP
    assert msb.exec("echo alive").stdout == b"alive\n"


def test_recursive_remove_does_not_empty_a_mount_point(msb):
    msb.write_file("/tmp/mp-keep/f", b"f")
    with pytest.raises(SandboxFileError) as e:
        msb.remove("/tmp", recursive=True)  # a tmpfs of its own: its rmdir would fail, so nothing goes
    assert e.value.errno == errno.EBUSY
    assert msb.read_file("/tmp/mp-keep/f") == b"f"


def test_remove_refuses_the_root_and_the_workdir(msb):
    msb.write_file("/testbed/stay", b"s")
    for path in ("/", "/testbed", ".", "/testbed/", "/testbed/../testbed", "//", "/testbed/sub/.."):
        with pytest.raises(ConfigError):
            msb.remove(path, recursive=True)
    assert msb.read_file("/testbed/stay") == b"s"
    assert msb.exec("ls /bin/sh").exit_code == 0


# ---- rename ------------------------------------------------------------------------------------


def test_rename_files_dirs_and_links(msb):
    assert msb.exec("mkdir -p /testbed/mv/d && echo a > /testbed/mv/a && echo in > /testbed/mv/d/in"
                    " && ln -s /etc/passwd /testbed/mv/link").exit_code == 0  # fmt: skip
    msb.rename("/testbed/mv/a", "/testbed/mv/b")
    assert msb.read_file("/testbed/mv/b") == b"a\n"
    with pytest.raises(SandboxFileNotFound):
        msb.stat("/testbed/mv/a")
    msb.rename("mv/d", "mv/e")  # relative to the workdir
    assert msb.read_file("/testbed/mv/e/in") == b"in\n"
    msb.rename("/testbed/mv/link", "/testbed/mv/link2")
    moved = msb.stat("/testbed/mv/link2")
    assert (moved.type, moved.target) == ("symlink", "/etc/passwd")
    assert msb.stat("/etc/passwd").type == "file"  # the target did not move


def test_rename_errors(msb):
    msb.write_file("/testbed/rn", b"r")
    with pytest.raises(SandboxFileNotFound):
        msb.rename("/testbed/rn", "/testbed/missing/parent/rn")
    with pytest.raises(SandboxFileNotFound):
        msb.rename("/testbed/not-there", "/testbed/x")
    with pytest.raises(SandboxFileError) as e:
        msb.rename("/testbed/rn", "/tmp/rn")  # /tmp and /testbed are separate mounts
    assert e.value.errno == errno.EXDEV and "Hint" in str(e.value)
    assert msb.read_file("/testbed/rn") == b"r"
    with pytest.raises(ConfigError):
        msb.rename("/", "/x")


# ---- watch -------------------------------------------------------------------------------------


def test_watch_sees_a_command_create_modify_and_delete(msb):
    msb.mkdir("/testbed/w")
    with msb.watch("/testbed/w", timeout=2) as w:
        assert msb.exec("echo hi > /testbed/w/a; rm /testbed/w/a").exit_code == 0
        got = _events(w, lambda evs: any(e.kind == "deleted" for e in evs))
    mine = [(e.path, e.kind, e.is_dir) for e in got]
    assert ("/testbed/w/a", "created", False) in mine
    assert ("/testbed/w/a", "modified", False) in mine
    assert ("/testbed/w/a", "deleted", False) in mine
    kinds = [k for p, k, _ in mine if p == "/testbed/w/a"]
    assert kinds.index("created") < kinds.index("modified") < kinds.index("deleted")


def test_watch_moves_dirs_and_the_timeout(msb):
    msb.mkdir("/testbed/wm")
    w = msb.watch("/testbed/wm", timeout=0.3)
    start = time.monotonic()
    assert list(w) == []  # nothing happened: the iteration ends after the timeout
    assert time.monotonic() - start < 3
    msb.exec("mkdir /testbed/wm/sub && mv /testbed/wm/sub /testbed/wm/sub2")
    got = _events(w, lambda evs: any(e.kind == "moved_to" for e in evs))
    w.close()
    assert FileEvent("/testbed/wm/sub", "created", True) in got
    frm = [e for e in got if e.kind == "moved_from"]
    to = [e for e in got if e.kind == "moved_to"]
    assert frm[0].path == "/testbed/wm/sub" and to[0].path == "/testbed/wm/sub2" and frm[0].cookie == to[0].cookie != 0


def test_recursive_watch_follows_new_dirs_but_never_links(msb):
    assert msb.exec("mkdir -p /testbed/wr/x /tmp/wkeep && ln -s /tmp/wkeep /testbed/wr/out").exit_code == 0
    with msb.watch("/testbed/wr", recursive=True, timeout=1) as w:
        assert msb.exec("echo 1 > /testbed/wr/x/f; mkdir -p /testbed/wr/n/m && echo 2 > /testbed/wr/n/m/g;"
                        " echo 3 > /tmp/wkeep/h; echo 4 > /testbed/wr/out/h2").exit_code == 0  # fmt: skip
        got = _events(w, lambda evs: any(e.path == "/testbed/wr/n/m/g" for e in evs), limit=5)
        got += list(w)  # what else comes within the timeout
    paths = {e.path for e in got}
    assert "/testbed/wr/x/f" in paths  # an existing subdirectory
    assert "/testbed/wr/n" in paths and "/testbed/wr/n/m/g" in paths  # a new one, and what it holds
    assert not any("wkeep" in p or p.startswith("/testbed/wr/out/") for p in paths)  # the link was not followed


def test_watch_ends_on_reset_and_close():
    with Sandbox() as sb:
        sb.mkdir("/testbed/wz")
        w = sb.watch("/testbed/wz")  # no timeout: only the reset ends it
        sb.reset()
        start = time.monotonic()
        assert list(w) == []
        assert time.monotonic() - start < 5
        w2 = sb.watch("/testbed")
    start = time.monotonic()
    assert list(w2) == []  # the sandbox was closed
    assert time.monotonic() - start < 5


def test_watch_errors(msb):
    with pytest.raises(SandboxFileNotFound):
        msb.watch("/testbed/no-such-dir")
    msb.write_file("/testbed/wf", b"f")
    with pytest.raises(SandboxNotADirectory):
        msb.watch("/testbed/wf")
    with pytest.raises(ConfigError):
        msb.watch("/testbed", timeout=-1)
    assert issubclass(SandboxFileNotFound, SandboxError)
