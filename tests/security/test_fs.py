"""Attacks on host files: reading them, writing them, and reaching them through the file API.

The host rootfs sandbox (``host_sb``) binds the host's /usr read-only with a
synthetic /etc and mounts a ro and a rw host directory; the image sandbox
(``image_sb``) is the default: the built image under a copy-on-write root.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import time
from pathlib import Path

import pytest

from sandboxlite import Sandbox, SandboxFileError, paths
from sandboxlite import images as rootfs

from .conftest import snapshot
from .helpers import run_py

TRY_OPEN = r'''
import errno, json, os, sys
def en(e): return errno.errorcode.get(e.errno, str(e.errno))
out = {}
for p in json.load(sys.stdin):
    try:
        with open(p, "rb") as f:
            out[p] = "READ:" + f.read(200).decode("utf-8", "replace")
    except OSError as e:
        out[p] = en(e)
print(json.dumps(out))
'''

DENIED = {"EROFS", "EACCES", "EPERM"}


def opened(box, paths_) -> dict:
    return run_py(box, TRY_OPEN, stdin=json.dumps([str(p) for p in paths_]))


# -- reading host files ------------------------------------------------------------------------------
def test_etc_shadow(host_sb, image_sb, record):
    host_shadow = Path("/etc/shadow").read_bytes()
    seen = opened(host_sb, ["/etc/shadow", "/etc/gshadow"])
    record("read /etc/shadow (rootfs=host)", "ENOENT (synthetic /etc)", seen["/etc/shadow"])
    assert seen["/etc/shadow"] == "ENOENT" and seen["/etc/gshadow"] == "ENOENT"
    inside = image_sb.exec("cat /etc/shadow")
    obs = f"exit {inside.exit_code}, {len(inside.stdout)} bytes, host's: {inside.stdout == host_shadow}"
    record("read /etc/shadow (image)", "only the image's own file", obs)
    assert inside.stdout != host_shadow
    hashed = {ln for ln in host_shadow.splitlines() if ln.count(b":") > 2 and len(ln.split(b":")[1]) > 2}
    assert not hashed & set(inside.stdout.splitlines()), "a host password hash is visible"


def test_callers_home_is_invisible(host_sb, image_sb, canary, record):
    assert canary["home"].is_file()
    for name, box in (("host", host_sb), ("image", image_sb)):
        seen = opened(box, [canary["home"], "/home", canary["secret"]])
        record(f"read a file in the caller's home ({name})", "ENOENT", seen[str(canary["home"])])
        assert seen[str(canary["home"])] == "ENOENT"
        assert seen[str(canary["secret"])] == "ENOENT", "an unmounted host directory is visible"
        assert canary["home"].name.encode() not in box.exec(f"ls -a {Path.home()} /root 2>&1").stdout
    assert host_sb.exec("test -e /home").exit_code == 1, "/home of the host is visible"


def test_host_file_next_to_a_mount(host_sb, mount_dirs, record):
    outside = mount_dirs["outside"] / "secret.txt"
    seen = opened(host_sb, [outside, "/data/ro/../outside/secret.txt", "/data/../outside/secret.txt"])
    record("read a host file beside a mount (and via ..)", "ENOENT", sorted(set(seen.values())))
    assert set(seen.values()) == {"ENOENT"}


def test_proc_1_root_and_cwd(image_sb, record):
    script = r'''
import errno, json, os
def en(e): return errno.errorcode.get(e.errno, str(e.errno))
out = {}
for what, fn in (("listdir root", lambda: os.listdir("/proc/1/root/")),
                 ("open root/etc/passwd", lambda: open("/proc/1/root/etc/passwd").read()),
                 ("readlink root", lambda: os.readlink("/proc/1/root")),
                 ("listdir cwd", lambda: os.listdir("/proc/1/cwd/")),
                 ("chdir root", lambda: os.chdir("/proc/1/root")),
                 ("exe", lambda: open("/proc/1/exe", "rb").read(4))):
    try:
        fn(); out[what] = "ok"
    except OSError as e:
        out[what] = en(e)
print(json.dumps(out))
'''
    res = run_py(image_sb, script)
    record("escape through /proc/1/root, cwd, exe", "EACCES (PID 1 not dumpable)", sorted(set(res.values())))
    assert set(res.values()) == {"EACCES"}, res
    with pytest.raises(SandboxFileError) as e:
        image_sb.read_file("/proc/1/root/etc/passwd")
    record("file API read /proc/1/root/etc/passwd", "ELOOP (no magic links)", errno.errorcode[e.value.errno])
    assert e.value.errno in (errno.ELOOP, errno.EACCES)


MOUNT_TABLES = r'''
import glob, json
tables = {}
for p in sorted(set(glob.glob("/proc/*/mountinfo") + glob.glob("/proc/*/task/*/mountinfo")
                    + glob.glob("/proc/*/mounts") + glob.glob("/proc/*/mountstats"))):
    try:
        with open(p) as f:
            tables[p] = f.read()
    except OSError:
        pass
print(json.dumps(tables))
'''


PSEUDO_FS = {"proc", "tmpfs", "devtmpfs", "devpts", "mqueue", "sysfs", "cgroup", "cgroup2"}


def revealed_paths(tables: dict) -> set[str]:
    """Host paths in mount tables: where a bind of a disk filesystem comes from, when that is
    not where it is seen, and paths in mount options."""
    out = set()
    for text in tables.values():
        for line in text.splitlines():
            if " - " not in line:
                continue
            fields = line.split()
            fstype, _source, opts = (line.split(" - ", 1)[1].split() + ["", "", ""])[:3]
            if fstype not in PSEUDO_FS and fields[3] not in ("/", fields[4]):
                out.add(fields[3])
            out.update(o.split("=", 1)[1] for o in opts.split(",") if "=/" in o)
    return out


CATCH_TABLES = r'''
import glob, sys, time
end, markers = time.monotonic() + float(sys.argv[1]), sys.argv[2:]
caught, reads = 0, 0
while time.monotonic() < end:
    for p in glob.glob("/proc/[0-9]*/mountinfo"):
        try:
            with open(p) as f:
                text = f.read()
        except OSError:
            continue
        reads += 1
        caught += any(m in text for m in markers)
print(caught, reads)
'''


def test_host_paths_in_mount_tables(image_sb, host_sb, mount_dirs, record):
    home_markers = [str(paths.home()), "/var/tmp", "/var/cache", "/home/"]
    if str(Path.home()) not in ("/root", "/"):  # /root is also the jail's own directory
        home_markers.append(str(Path.home()))
    tables = run_py(image_sb, MOUNT_TABLES)
    leaks = sorted(p for p in revealed_paths(tables) if p not in ("/.sl/lower", "/.sl/gen/u", "/.sl/gen/w"))
    blob = "\n".join(tables.values())
    leaks += [m for m in home_markers if m in blob]
    pid1 = [line.split(" - ")[1].split()[0] for line in tables["/proc/1/mountinfo"].splitlines()]
    record(f"host paths in {len(tables)} mount tables (image)", "none; PID 1's: proc only",
           f"{leaks or 'none'}; PID 1's lists {pid1}")
    assert len(tables) >= 5 and not leaks, leaks
    assert set(pid1) == {"proc"}, tables["/proc/1/mountinfo"]
    # each new supervisor starts as a fork of PID 1: read every table while commands start
    image_sb.write_file("/tmp/tables.py", CATCH_TABLES)
    image_sb.exec(f"python3 /tmp/tables.py 2 {' '.join(home_markers)} > /tmp/tables.out 2>&1 &")
    t, n = time.monotonic(), 0
    while time.monotonic() - t < 1.8:
        image_sb.exec(["true"])
        n += 1
    deadline = time.monotonic() + 5
    while not image_sb.read_file("/tmp/tables.out").strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    caught, reads = image_sb.read_file("/tmp/tables.out").decode().split()[:2]
    record(f"... while {n} commands start (racing reader)", "none", f"{caught} of {reads} tables read")
    assert caught == "0" and int(reads) > 1000
    # with rootfs="host": the cached /etc copy and the caller's own mounts, nothing else
    tables = run_py(host_sb, MOUNT_TABLES)
    allowed = {str(rootfs.host_etc()), str(mount_dirs["ro"]), str(mount_dirs["rw"])}
    seen = revealed_paths(tables)
    record("host paths in mount tables (rootfs=host, 2 mounts)", "only /etc copy + mount sources",
           sorted(seen - allowed) or f"{len(seen)} allowed")
    assert seen <= allowed


# -- writing host files -------------------------------------------------------------------------------
WRITE_ROOT = r'''
import errno, json, os
def en(e): return errno.errorcode.get(e.errno, str(e.errno))
out = {}
for d in ("/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/bin"):
    p = d.rstrip("/") + "/.attack"
    try:
        os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)); os.unlink(p); out["create " + d] = "ok"
    except OSError as e:
        out["create " + d] = en(e)
for p in ("/etc/passwd", "/usr/bin/env"):
    try:
        os.close(os.open(p, os.O_WRONLY)); out["open_w " + p] = "ok"
    except OSError as e:
        out["open_w " + p] = en(e)
for fn, arg in ((os.mkdir, "/attack"), (os.unlink, "/usr/bin/env"), (os.rename, ("/usr/bin/env", "/usr/bin/x"))):
    try:
        fn(*arg) if isinstance(arg, tuple) else fn(arg); out[fn.__name__] = "ok"
    except OSError as e:
        out[fn.__name__] = en(e)
print(json.dumps(out))
'''


def test_write_the_rootfs(host_sb, image_sb, record):
    res = run_py(host_sb, WRITE_ROOT)
    record(f"write/mkdir/unlink the rootfs ({len(res)} ops, host)", "EROFS/EACCES", sorted(set(res.values())))
    assert set(res.values()) <= DENIED, res
    # over an image the root is copy-on-write: the write lands in the sandbox's own layer
    image_file = Path(image_sb.rootfs_plan.path) / "etc" / "debian_version"
    before = (image_file.read_bytes(), image_file.stat().st_mtime_ns)
    r = image_sb.exec("echo pwned > /etc/debian_version && rm -f /usr/bin/env && cat /etc/debian_version")
    with Sandbox() as fresh:
        after_inside = fresh.exec("cat /etc/debian_version; test -x /usr/bin/env && echo env-ok").stdout
    after = (image_file.read_bytes(), image_file.stat().st_mtime_ns)
    pristine = after_inside == before[0] + b"env-ok\n"
    obs = f"inside: {r.stdout.strip().decode()!r}; image unchanged: {after == before}; next sandbox pristine: {pristine}"
    record("overwrite /etc, delete /usr/bin/env (image, COW)", "own layer only; image intact", obs)
    image_sb.reset()  # the module's other attacks get a pristine jail
    assert r.stdout == b"pwned\n" and after == before and pristine


def test_write_a_read_only_mount(host_sb, mount_dirs, record):
    before = snapshot([mount_dirs["ro"]])
    r = host_sb.exec(
        "for op in 'touch /data/ro/new' 'rm /data/ro/hello.txt' 'chmod 777 /data/ro/hello.txt' "
        "'mv /data/ro/hello.txt /data/ro/x' 'mkdir /data/ro/d' 'ln -s x /data/ro/l'; do "
        "  $op 2>/dev/null && echo ok || echo fail; done; echo x >> /data/ro/hello.txt || echo fail"
    )
    outcomes = r.stdout_text.split()
    record("touch/rm/chmod/mv/mkdir/ln/append in a ro mount", "all refused", " ".join(outcomes))
    assert outcomes == ["fail"] * 7, r
    assert snapshot([mount_dirs["ro"]]) == before


def test_symlinks_in_a_rw_mount(host_sb, mount_dirs, canary, tmp_path, record):
    """A sandbox plants links in a shared directory: they resolve inside the jail, never on the host side."""
    rw = mount_dirs["rw"]
    r = host_sb.exec(
        f"ln -sfn {canary['secret']} /data/rw/evil && ln -sfn /etc/shadow /data/rw/shadow && "
        f"ln -sfn {canary['dir']} /data/rw/evil-dir && cat /data/rw/evil; echo rc=$?; ls /data/rw/evil-dir/; echo rc=$?"
    )
    assert canary["token"] not in r.stdout_text + r.stderr_text
    try:
        api = host_sb.read_file("/data/rw/evil")
    except FileNotFoundError:
        api = "ENOENT"
    skipped = host_sb.download("/data/rw", tmp_path / "dl")
    got = b"".join(p.read_bytes() for p in (tmp_path / "dl").rglob("*") if p.is_file() and not p.is_symlink())
    obs = f"cat {r.stdout_text.split()[0]}, api {api}, download skipped {len(skipped)}, token out: " \
          f"{canary['token'].encode() in got}"
    record("symlinks to host files in a rw mount", "resolve in the jail; download skips", obs)
    assert r.stdout_text.split() == ["rc=1", "rc=2"] and api == "ENOENT"
    assert sorted(skipped) == ["/data/rw/evil", "/data/rw/evil-dir", "/data/rw/shadow"]
    assert not any(p.is_symlink() for p in (tmp_path / "dl").rglob("*"))
    for name in ("evil", "shadow", "evil-dir"):
        (rw / name).unlink()


def test_hardlinks_to_host_files(host_sb, mount_dirs, record):
    rw = mount_dirs["rw"]
    (rw / "root-only").write_text("root only")
    os.chmod(rw / "root-only", 0o600)
    (rw / "root-readable").write_text("root's")
    os.chmod(rw / "root-readable", 0o644)
    try:
        script = r'''
import errno, json, os
def en(e): return errno.errorcode.get(e.errno, str(e.errno))
out = {}
for src, dst in (("/data/rw/root-only", "/data/rw/mine1"), ("/data/rw/root-readable", "/data/rw/mine2"),
                 ("/data/ro/hello.txt", "/data/rw/mine3"), ("/data/rw/root-readable", "/testbed/mine4"),
                 ("/usr/bin/env", "/tmp/mine5")):
    try:
        os.link(src, dst); out[src + " -> " + dst] = "ok"
    except OSError as e:
        out[src + " -> " + dst] = en(e)
try:
    open("/data/rw/root-only").read(); out["read root-only"] = "ok"
except OSError as e:
    out["read root-only"] = en(e)
print(json.dumps(out))
'''
        res = run_py(host_sb, script)
    finally:
        for name in ("root-only", "root-readable"):
            (rw / name).unlink()
    record("hardlink host files (same mount, across mounts)", "EPERM / EXDEV", sorted(set(res.values())))
    assert res["/data/rw/root-only -> /data/rw/mine1"] == "EPERM"  # protected_hardlinks
    assert res["/data/rw/root-readable -> /data/rw/mine2"] == "EPERM"
    assert {res[k] for k in res if "mine3" in k or "mine4" in k or "mine5" in k} == {"EXDEV"}
    assert res["read root-only"] == "EACCES", "a root caller's jail is not host root"
    assert sorted(os.listdir(rw)) == [], os.listdir(rw)


# -- the file API -----------------------------------------------------------------------------------
def test_dotdot_traversal_through_the_file_api(host_sb, image_sb, canary, tmp_path, record):
    token = "dotdot-" + secrets.token_hex(6)
    up = "../" * 12
    outcomes = {}
    for name, op in (
        ("read ../etc/shadow", lambda: host_sb.read_file(f"/testbed/{up}etc/shadow")),
        ("read ../<host secret>", lambda: host_sb.read_file(up + str(canary["secret"]).lstrip("/"))),
        ("write ../var/tmp/x", lambda: image_sb.write_file(f"{up}var/tmp/{token}", token)),
        ("mkdir ../var/tmp/d", lambda: image_sb.mkdir(f"/testbed/{up}var/tmp/{token}-d")),
        ("write ../<host rw dir>", lambda: image_sb.write_file(f"{up}{str(tmp_path).lstrip('/')}/{token}", token)),
    ):
        try:
            got = op()
            outcomes[name] = "ok" if got is None else f"read {len(got)} bytes"
        except SandboxFileError as e:
            outcomes[name] = errno.errorcode[e.errno]
    record("'..' through read_file/write_file/mkdir", "stays in the jail's root", outcomes)
    assert outcomes["read ../etc/shadow"] == outcomes["read ../<host secret>"] == "ENOENT"
    # the writes happened, inside: at the jail's /var/tmp, not the host's
    assert image_sb.read_file(f"/var/tmp/{token}") == token.encode()
    assert image_sb.exec(f"test -d /var/tmp/{token}-d").exit_code == 0
    assert not Path(f"/var/tmp/{token}").exists() and not Path(f"/var/tmp/{token}-d").exists()
    assert not (tmp_path / token).exists() and image_sb.read_file(f"{tmp_path}/{token}") == token.encode()


def test_download_of_links_to_host_files(image_sb, canary, tmp_path, record):
    secret = canary["secret"]
    image_sb.exec(
        f"rm -rf /testbed/out; mkdir -p /testbed/out/d && echo ok > /testbed/out/ok.txt && "
        f"ln -s {secret} /testbed/out/abs && ln -s ../../../../../../..{secret} /testbed/out/d/rel-up && "
        f"ln -s {canary['dir']} /testbed/out/dir && ln -s {secret} /testbed/top"
    )
    try:
        image_sb.download("/testbed/top", tmp_path / "top")
        top = "downloaded"
    except FileNotFoundError:
        top = "ENOENT"
    skipped = image_sb.download("/testbed/out", tmp_path / "dl")
    files = [p for p in (tmp_path / "dl").rglob("*")]
    leaked = any(canary["token"].encode() in p.read_bytes() for p in files if p.is_file())
    record("download a symlink to a host file (top, in tree)", "ENOENT; links skipped",
           f"top {top}; skipped {len(skipped)}; token out: {leaked}")
    assert top == "ENOENT" and not (tmp_path / "top").exists()
    assert sorted(skipped) == ["/testbed/out/abs", "/testbed/out/d/rel-up", "/testbed/out/dir"]
    assert not leaked and not any(p.is_symlink() for p in files)


def test_download_recreates_no_link_that_leaves_the_tree(image_sb, tmp_path, record):
    """``l -> .`` then ``m -> l/..``: lexically inside, really the destination's parent."""
    image_sb.exec(
        "rm -rf /testbed/o; mkdir -p /testbed/o/a/b && cd /testbed/o && echo f > f && ln -s . l && "
        "ln -s l/.. m && ln -s a/b/../../.. n && ln -s ../f a/sib && ln -s b/../../f a/ok2 && ln -s a/b x"
    )
    dst = tmp_path / "dl"
    skipped = image_sb.download("/testbed/o", dst)
    links = {str(p.relative_to(dst)): os.readlink(p) for p in dst.rglob("*") if p.is_symlink()}
    outside = [k for k in links if not os.path.realpath(dst / k).startswith(str(dst))]
    record("download: links that climb out via another link", "left out", f"skipped {sorted(skipped)}")
    assert outside == [], f"links recreated on the host resolve outside the destination: {outside}"
    assert sorted(skipped) == ["/testbed/o/a/ok2", "/testbed/o/m", "/testbed/o/n"]
    assert links == {"l": ".", "a/sib": "../f", "x": "a/b"}


def test_download_of_a_very_deep_tree(image_sb, tmp_path, record):
    image_sb.exec(["python3", "-c", "import os\nos.makedirs('/testbed/deep')\nos.chdir('/testbed/deep')\n"
                   "for i in range(1500):\n    os.mkdir('d'); os.chdir('d')\nopen('leaf', 'w').write('x')\n"])
    try:
        skipped = image_sb.download("/testbed/deep", tmp_path / "deep")
        obs = f"ok, {len(skipped)} skipped at depth {skipped[0].count('/d') if skipped else 0}"
    except RecursionError as e:
        obs = f"RecursionError: {e}"
    record("download a 1500-deep directory tree", "no crash; the depth over 128 skipped", obs)
    assert obs.startswith("ok, 1 skipped")
    image_sb.exec("rm -rf /testbed/deep")


FLIPPER = r'''
import os, shutil, sys, time
secret, secret_dir, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
R = "/testbed/race"
os.makedirs(R, exist_ok=True)
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    with open(R + "/.f", "w") as f:             # f: a regular file...
        f.write("benign\n")
    os.replace(R + "/.f", R + "/f")
    os.symlink(secret, R + "/.l")               # ...then a link to the host's secret
    os.replace(R + "/.l", R + "/f")
    os.mkdir(R + "/.d")                         # d: a real directory...
    with open(R + "/.d/inner", "w") as f:
        f.write("benign\n")
    if os.path.islink(R + "/d"):
        os.unlink(R + "/d")
    os.rename(R + "/.d", R + "/d")
    os.rename(R + "/d", R + "/.old")            # ...then a link to a host directory
    os.symlink(secret_dir, R + "/d")
    shutil.rmtree(R + "/.old")
    n += 1
print(n)
'''


def test_symlink_swapped_in_during_download(image_sb, canary, tmp_path, record):
    """A process in the sandbox flips paths between regular files/dirs and links to host files
    while the host downloads them again and again: nothing outside may be read or written."""
    victim = tmp_path / "victim"
    victim.write_text("host file that a download must not overwrite")
    watched = [canary["dir"], victim]
    before = snapshot(watched)
    image_sb.exec("rm -rf /testbed/race /testbed/flips")
    image_sb.write_file("/tmp/flipper.py", FLIPPER)
    # a background process of the sandbox (its exec returns at once; the flipper runs on)
    image_sb.exec(f"python3 /tmp/flipper.py {canary['secret']} {canary['dir']} 2.5 >/testbed/flips 2>&1 &")
    time.sleep(0.1)
    counts = {"file ok": 0, "file refused": 0, "dir ok": 0, "dir refused": 0, "skipped": 0}
    token = canary["token"].encode()
    deadline = time.monotonic() + 2.0
    i = 0
    while time.monotonic() < deadline:
        i += 1
        dst_file = tmp_path / f"f{i}"
        os.symlink(victim, dst_file)  # a trap on the host side: never written through
        try:
            image_sb.download("/testbed/race/f", dst_file)
            counts["file ok"] += 1
            assert not dst_file.is_symlink() and token not in dst_file.read_bytes()
        except SandboxFileError:
            counts["file refused"] += 1
        dst_dir = tmp_path / f"d{i}"
        try:
            skipped = image_sb.download("/testbed/race", dst_dir)
            counts["dir ok"] += 1
            counts["skipped"] += len(skipped)
        except SandboxFileError:
            counts["dir refused"] += 1
        for p in [dst_dir, *dst_dir.rglob("*")] if dst_dir.exists() else []:
            assert os.path.realpath(p).startswith(str(dst_dir)), f"{p} leads out of the download"
            if p.is_file():
                assert token not in p.read_bytes(), f"{p} holds the host secret"
    deadline = time.monotonic() + 10
    while not image_sb.read_file("/testbed/flips").strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    flips = image_sb.read_file("/testbed/flips").decode().strip()
    record(f"symlink swapped in during {i} file + {i} dir downloads", "never read/write outside",
           f"{counts}, {flips} flips, host files unchanged: {snapshot(watched) == before}")
    assert int(flips) > 100, f"the flipper barely ran ({flips}): the race was not exercised"
    assert counts["file ok"] > 0 and counts["dir ok"] > 0
    assert snapshot(watched) == before


def test_file_api_on_proc(image_sb, tmp_path, record):
    """The file API acts as PID 1 (the executor): /proc/self there is the executor itself."""
    outcomes = {}
    for name, op in (
        ("read /proc/1/mem", lambda: image_sb.read_file("/proc/1/mem")),
        ("read /proc/self/maps", lambda: image_sb.read_file("/proc/self/maps")),
        ("read /proc/1/environ", lambda: image_sb.read_file("/proc/1/environ")),
        ("write /proc/1/mem", lambda: image_sb.write_file("/proc/1/mem", b"\xcc" * 64)),
        ("write /proc/1/comm", lambda: image_sb.write_file("/proc/1/comm", "pwned")),
        ("write /proc/self/oom_score_adj", lambda: image_sb.write_file("/proc/self/oom_score_adj", "1000")),
        ("download /proc/1", lambda: image_sb.download("/proc/1", tmp_path / "p1")),
    ):
        try:
            op()
            outcomes[name] = "ok"
        except SandboxFileError as e:
            outcomes[name] = errno.errorcode[e.errno]
    record("file API on /proc/1 (mem, maps, comm...)", "EACCES", sorted(set(outcomes.values())))
    assert set(outcomes.values()) == {"EACCES"}, outcomes
    assert image_sb.exec("cat /proc/1/comm").stdout != b"pwned\n" and image_sb.alive()


def test_device_nodes(host_sb, image_sb, record):
    script = r'''
import errno, json, os, stat
def en(e): return errno.errorcode.get(e.errno, str(e.errno))
out = {}
for p in ("/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/core", "/dev/vda", "/dev/sda", "/proc/kcore"):
    try:
        with open(p, "rb") as f:
            f.read(1); out["open " + p] = "ok"
    except OSError as e:
        out["open " + p] = en(e)
for d in ("/tmp", "/dev/shm", "/testbed", "/dev"):
    for kind, dev in (("char", stat.S_IFCHR | 0o666), ("block", stat.S_IFBLK | 0o666)):
        try:
            os.mknod(f"{d}/n-{kind}", dev, os.makedev(1, 1)); out[f"mknod {kind} {d}"] = "ok"
        except OSError as e:
            out[f"mknod {kind} {d}"] = en(e)
print(json.dumps(out))
'''
    for name, box in (("host", host_sb), ("image", image_sb)):
        res = run_py(box, script)
        opens = {v for k, v in res.items() if k.startswith("open")}
        mknods = {v for k, v in res.items() if k.startswith("mknod")}
        record(f"/dev/mem, /dev/kmsg, disks; mknod ({name})", "ENOENT; mknod EPERM (EROFS in a read-only /dev)",
               f"open {sorted(opens)}; mknod {sorted(mknods)}")
        assert opens == {"ENOENT"}, res
        # a ready-made /dev (root callers, devnodes.py) is read-only: refused before the permission check
        assert {v for k, v in res.items() if k.startswith("mknod") and not k.endswith(" /dev")} == {"EPERM"}, res
        assert {v for k, v in res.items() if k.startswith("mknod") and k.endswith(" /dev")} <= {"EPERM", "EROFS"}, res


def test_dotdot_paths_resolve_while_other_sandboxes_mount(image_sb, record):
    """openat2 with RESOLVE_IN_ROOT answers EAGAIN when a ".." races with a mount anywhere on the
    machine, and every sandbox start mounts: the file API tries again (a write under two test
    suites at once failed with EAGAIN)."""
    import threading

    stop = threading.Event()

    def churn():
        while not stop.is_set():
            with Sandbox(rootfs="host") as sb:
                sb.reset()

    threads = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    errors: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 4
        n = 0
        while time.monotonic() < deadline:
            try:
                image_sb.write_file("../" * 40 + f"var/tmp/race-{n % 8}", b"x")
            except SandboxFileError as e:
                errors[errno.errorcode[e.errno]] = errors.get(errno.errorcode[e.errno], 0) + 1
            n += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    record(f"{n} writes through 40 '..' while two threads start sandboxes", "no error", errors or "none")
    assert errors == {}
