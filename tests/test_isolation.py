"""What a sandboxed program can and cannot reach, checked from inside real jails.

Every test runs commands in a real bwrap + seccomp sandbox (rootfs="host");
nothing is mocked.  The root caller is the test process itself; the
unprivileged caller (uid 65534) runs the same probe through setpriv.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sandboxlite import Sandbox

from .helpers_nonroot import (
    FORK_LOOP,
    HOST_SYSCTLS,
    NOBODY_DRIVER,
    NOBODY_GID,
    NOBODY_UID,
    PROBE,
    make_nobody_home,
    parse_result,
    run_as_nobody,
    run_py,
    unprivileged_prereqs,
)

ZERO_CAPS = "0000000000000000"
DENIED = {"EROFS", "EACCES", "EPERM"}


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mount_dirs(host_dir_factory):
    base = host_dir_factory("sandboxlite-mounts-")
    ro, rw, outside = base / "ro", base / "rw", base / "outside"
    for d in (ro, rw, outside):
        d.mkdir()
    os.chmod(rw, 0o777)  # the sandbox's host uid is unprivileged (nobody) for a root caller
    (ro / "hello.txt").write_text("read-only hello\n")
    (outside / "secret.txt").write_text("not for the sandbox\n")
    return {"ro": ro, "rw": rw, "outside": outside}


@pytest.fixture(scope="module")
def home_secret():
    """A file under the caller's home directory: must never show up inside."""
    fd, path = tempfile.mkstemp(prefix=".sandboxlite-isolation-", dir=Path.home())
    os.write(fd, b"home secret " + secrets.token_hex(8).encode())
    os.close(fd)
    yield path
    os.unlink(path)


@pytest.fixture(scope="module")
def root_sb(mount_dirs):
    with Sandbox(
        rootfs="host",
        mounts=[f"{mount_dirs['ro']}:/data/ro:ro", f"{mount_dirs['rw']}:/data/rw:rw"],
    ) as box:
        yield box


@pytest.fixture(scope="module")
def probe(root_sb, home_secret, mount_dirs):
    request = {
        "tag": "root",
        "hidden": [home_secret, "/etc/shadow", "/etc/gshadow", str(mount_dirs["outside"] / "secret.txt")],
        "sysctls": list(HOST_SYSCTLS),
    }
    return run_py(root_sb, PROBE, stdin=json.dumps(request))


class HostServer:
    """A TCP server on the host's 127.0.0.1 that greets each client with a token."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.token = "hello-" + secrets.token_hex(8)
        self.hits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            with conn:
                self.hits += 1
                try:
                    conn.sendall(self.token.encode())
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture(scope="module")
def host_server():
    srv = HostServer()
    yield srv
    srv.close()


CONNECT = r'''
import errno, json, socket, sys
req = json.load(sys.stdin)
out = {}
for host, port in req["targets"]:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        data = s.recv(100).decode()
        out[f"{host}:{port}"] = {"connected": True, "data": data}
    except OSError as e:
        out[f"{host}:{port}"] = {"connected": False, "error": errno.errorcode.get(e.errno, str(e))}
    finally:
        s.close()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"\0" * 12, ("1.1.1.1", 53))
    out["udp"] = "sent"
except OSError as e:
    out["udp"] = errno.errorcode.get(e.errno, str(e))
for name in ("example.com", "one.one.one.one"):
    try:
        out["dns:" + name] = socket.getaddrinfo(name, 80)[0][4][0]
    except OSError as e:
        out["dns:" + name] = "failed: " + type(e).__name__
print(json.dumps(out))
'''


# -- host files ---------------------------------------------------------------------------------------
def test_etc_shadow_is_not_readable(probe):
    assert os.path.exists("/etc/shadow"), "the host should have an /etc/shadow to hide"
    assert probe["shadow"] != "READABLE"
    assert probe["hidden"]["/etc/shadow"] == {"exists": False, "read": "ENOENT"}
    if os.path.exists("/etc/gshadow"):
        assert probe["hidden"]["/etc/gshadow"]["exists"] is False


def test_file_in_callers_home_is_invisible(probe, home_secret):
    assert Path(home_secret).is_file()
    seen = probe["hidden"][home_secret]
    assert seen["exists"] is False and seen["read"] != "READABLE", seen


def test_host_file_next_to_a_mount_is_invisible(probe, mount_dirs):
    path = str(mount_dirs["outside"] / "secret.txt")
    assert probe["hidden"][path]["exists"] is False


def test_host_root_and_home_are_not_visible(probe):
    assert probe["home_exists"] is False, "/home of the host is visible inside"
    # /root inside is the jail's own empty tmpfs, not the host's /root
    assert probe["mount_fstypes"].get("/root") == "tmpfs", probe["mount_fstypes"]
    host_entries = set(os.listdir("/root"))
    leaked = host_entries & set(probe["root_listing"])
    assert not leaked, f"host /root entries visible inside: {sorted(leaked)}"


# -- read-only rootfs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("directory", ["/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/bin"])
def test_rootfs_is_not_writable(probe, directory):
    assert probe["create"][directory] in DENIED, f"creating a file in {directory}: {probe['create'][directory]}"


@pytest.mark.parametrize("directory", ["/", "/usr", "/etc"])
def test_rootfs_mkdir_fails(probe, directory):
    assert probe["mkdir"][directory] in DENIED, f"mkdir in {directory}: {probe['mkdir'][directory]}"


@pytest.mark.parametrize("path", ["/etc/passwd", "/usr/bin/env"])
def test_existing_rootfs_files_cannot_be_opened_for_writing(probe, path):
    assert probe["open_w"][path] in DENIED, f"open({path}, O_WRONLY): {probe['open_w'][path]}"


@pytest.mark.parametrize("directory", ["/testbed", "/tmp", "/root", "/dev/shm"])
def test_scratch_dirs_are_writable(probe, directory):
    assert probe["create"][directory] == "ok"


def test_rootfs_writes_via_shell_fail_with_erofs(root_sb):
    r = root_sb.exec("touch /usr/x 2>&1; touch /etc/x 2>&1; touch /x 2>&1; echo data > /testbed/ok && cat /testbed/ok")
    out = r.stdout_text
    assert out.count("Read-only file system") == 3, out
    assert out.endswith("data\n"), out


@pytest.mark.parametrize("path", HOST_SYSCTLS)
def test_host_sysctls_are_not_writable(probe, path):
    """uid 0 inside maps to host root for a root caller: /proc/sys must still be read-only.

    The probe only opens the file for writing (it never writes).  A successful
    open means the kernel's permission check passed: a write to
    kernel.core_pattern or kernel.modprobe would make the host kernel run a
    program of the sandbox's choosing as real root.
    """
    assert probe["open_w"][path] in DENIED, (
        f"open({path}, O_WRONLY) inside the sandbox returned {probe['open_w'][path]!r}: "
        "a host-global sysctl is writable from the jail"
    )


# -- network ------------------------------------------------------------------------------------------
def test_only_loopback_interface(probe):
    assert probe["ifaces"] == ["lo"]
    assert probe["sys_exists"] is False, "/sys should not be mounted"


def test_outside_network_and_host_loopback_unreachable(root_sb, host_server):
    # sanity: the server answers on the host
    with socket.create_connection(("127.0.0.1", host_server.port), timeout=3) as c:
        assert c.recv(100).decode() == host_server.token
    hits_before = host_server.hits
    req = {"targets": [["1.1.1.1", 53], ["8.8.8.8", 443], ["2606:4700:4700::1111", 53],
                       ["127.0.0.1", host_server.port]]}
    res = run_py(root_sb, CONNECT, stdin=json.dumps(req))
    for target in ("1.1.1.1:53", "8.8.8.8:443", "2606:4700:4700::1111:53"):
        assert res[target]["connected"] is False, f"{target} reachable from the sandbox: {res[target]}"
    local = res[f"127.0.0.1:{host_server.port}"]
    assert local["connected"] is False or local.get("data") != host_server.token, local
    assert host_server.hits == hits_before, "the host server saw a connection from the sandbox"
    assert res["udp"] != "sent", res
    assert res["dns:example.com"].startswith("failed"), res
    assert res["dns:one.one.one.one"].startswith("failed"), res


def test_host_network_mode_reaches_host_loopback(host_server):
    """The control for the test above: with network="host" the same probe does connect."""
    with Sandbox(rootfs="host", network="host") as box:
        req = {"targets": [["127.0.0.1", host_server.port]]}
        res = run_py(box, CONNECT, stdin=json.dumps(req))
        ifaces = box.exec("cat /proc/net/dev").stdout_text
    assert res[f"127.0.0.1:{host_server.port}"] == {"connected": True, "data": host_server.token}
    assert host_server.hits >= 1
    assert ifaces.count(":") >= 1


# -- processes ----------------------------------------------------------------------------------------
def test_host_pids_are_invisible(root_sb):
    marker = "host-marker-" + secrets.token_hex(6)
    host_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        deadline = time.monotonic() + 5
        while marker.encode() not in Path(f"/proc/{host_proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        script = r'''
import json, os
procs = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                procs[int(p)] = f.read().decode("utf-8", "replace")
        except OSError:
            pass
print(json.dumps(procs))
'''
        procs = {int(k): v for k, v in run_py(root_sb, script).items()}
    finally:
        host_proc.kill()
        host_proc.wait()
    assert 1 <= len(procs) <= 8, f"expected a handful of pids inside, got {sorted(procs)}"
    assert not any(marker in cmd for cmd in procs.values()), "a host process is visible inside"
    me = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().decode("utf-8", "replace")
    if os.getpid() in procs:
        assert procs[os.getpid()] != me, "the test process is visible inside under its host pid"
    assert not any(cmd == me for cmd in procs.values()), "the test process's cmdline is visible inside"
    host_init = Path("/proc/1/cmdline").read_bytes().decode("utf-8", "replace")
    assert procs[1] != host_init or host_init == procs[1] == "", "PID 1 inside is the host's init"


def test_pid1_is_the_executor(root_sb, probe):
    host_pid = root_sb.executor_pid
    assert host_pid and host_pid != 1
    host_cmdline = Path(f"/proc/{host_pid}/cmdline").read_bytes().decode("utf-8", "replace")
    assert probe["pid1_cmdline"] == host_cmdline
    assert "ctrl=" in probe["pid1_cmdline"]
    # the host sees the executor as pid 1 of its own PID namespace
    nspid = next(
        line.split()[1:] for line in Path(f"/proc/{host_pid}/status").read_text().splitlines()
        if line.startswith("NSpid:")
    )
    assert nspid == [str(host_pid), "1"], nspid
    assert probe["pid1_status"]["NSpid"] == "1"


# -- credentials --------------------------------------------------------------------------------------
def test_no_capabilities_no_new_privs_seccomp(probe):
    assert os.geteuid() == 0, "this half of the suite runs as root"
    st = probe["status"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert st[cap] == ZERO_CAPS, f"command {cap} = {st[cap]}"
    assert st["NoNewPrivs"] == "1"
    assert st["Seccomp"] == "2"


def test_the_executor_is_fenced_off(root_sb):
    """PID 1 (the executor) keeps capabilities, but only inside the sandbox's user namespace
    (it builds the filesystem generations); commands cannot reach it."""
    import psutil

    p = psutil.Process(root_sb.executor_pid)
    assert p.uids().real != 0 or os.geteuid() != 0  # never host root
    assert os.readlink(f"/proc/{p.pid}/ns/user") != os.readlink("/proc/self/ns/user")
    r = root_sb.exec(
        "for f in /proc/1/mem /proc/1/environ /proc/1/maps; do "
        "  if head -c1 $f >/dev/null 2>&1; then echo OPEN $f; fi; done; "
        "for d in /proc/1/root/ /proc/1/cwd/; do if ls $d >/dev/null 2>&1; then echo OPEN $d; fi; done; "
        "kill -9 1; kill -STOP 1; echo signalled"
    )
    assert "OPEN" not in r.stdout_text, r.stdout_text
    assert root_sb.exec("echo alive").stdout == b"alive\n"  # signals from inside cannot touch it


def test_nested_user_namespace_cannot_be_created(root_sb, probe):
    assert probe["unshare_user"] == [-1, errno.EPERM]
    r = root_sb.exec("unshare -U true; echo rc=$?; unshare -r true; echo rc=$?; unshare -m true; echo rc=$?")
    assert r.stdout_text.split() == ["rc=1", "rc=1", "rc=1"], (r.stdout_text, r.stderr_text)
    script = r'''
import json, os
res = {}
if hasattr(os, "unshare"):
    try:
        os.unshare(os.CLONE_NEWUSER)
        res["os.unshare"] = "ok"
    except OSError as e:
        res["os.unshare"] = type(e).__name__
print(json.dumps(res))
'''
    res = run_py(root_sb, script)
    if "os.unshare" in res:  # Python 3.12+
        assert res["os.unshare"] == "PermissionError"
    r = root_sb.exec("bwrap --ro-bind / / true")  # bwrap from the host's /usr
    assert r.exit_code != 0


def test_identity_inside(probe, root_sb):
    assert (probe["uid"], probe["euid"], probe["gid"]) == (0, 0, 0)
    assert probe["hostname"] == probe["uname_nodename"] == "sandbox"
    r = root_sb.exec("id -u; id -g; hostname")
    assert r.stdout_text.split() == ["0", "0", "sandbox"]


# -- mounts ----------------------------------------------------------------------------------------------
def test_read_only_mount(root_sb, mount_dirs):
    r = root_sb.exec("cat /data/ro/hello.txt")
    assert r.stdout_text == "read-only hello\n"
    script = r'''
import errno, json, os
out = {}
for path, flags in (("/data/ro/new.txt", os.O_WRONLY | os.O_CREAT), ("/data/ro/hello.txt", os.O_WRONLY)):
    try:
        os.close(os.open(path, flags, 0o644))
        out[path] = "ok"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
try:
    os.unlink("/data/ro/hello.txt")
    out["unlink"] = "ok"
except OSError as e:
    out["unlink"] = errno.errorcode[e.errno]
print(json.dumps(out))
'''
    res = run_py(root_sb, script)
    # opening the root-owned file for writing may be refused by permissions first (EACCES)
    assert res["/data/ro/new.txt"] == "EROFS" and res["unlink"] == "EROFS", res
    assert res["/data/ro/hello.txt"] in ("EROFS", "EACCES"), res
    assert sorted(os.listdir(mount_dirs["ro"])) == ["hello.txt"]
    assert (mount_dirs["ro"] / "hello.txt").read_text() == "read-only hello\n"


def test_read_write_mount(root_sb, mount_dirs):
    token = secrets.token_hex(8)
    r = root_sb.exec(f"echo {token} > /data/rw/from-sandbox.txt && cat /data/rw/from-sandbox.txt")
    assert r.exit_code == 0, r.stderr_text
    host_file = mount_dirs["rw"] / "from-sandbox.txt"
    assert host_file.read_text() == token + "\n"
    # and the other way round, live
    (mount_dirs["rw"] / "from-host.txt").write_text("host " + token)
    assert root_sb.exec("cat /data/rw/from-host.txt").stdout_text == "host " + token


# -- sandboxes among themselves ------------------------------------------------------------------------
LIST_PROCS = r'''
import json, os
cmds = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmds.append(f.read().decode("utf-8", "replace"))
        except OSError:
            pass
print(json.dumps(cmds))
'''

SHM_KEY = 0x5B1E7E57
SHM_CREATE = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
ctypes.set_errno(0)
r = libc.shmget(%d, 4096, 0o3600)  # IPC_CREAT | IPC_EXCL | 0600
print(json.dumps([r, ctypes.get_errno()]))
""" % SHM_KEY


def test_two_sandboxes_do_not_see_each_other():
    with Sandbox(rootfs="host") as a, Sandbox(rootfs="host") as b:
        assert a.executor_pid != b.executor_pid
        tokens = {}
        for name, box in (("a", a), ("b", b)):
            tok = f"marker-{name}-{secrets.token_hex(6)}"
            tokens[name] = tok
            r = box.exec(
                f"for d in /tmp /testbed /root /dev/shm; do echo {tok} > $d/{tok}; done; "
                f"python3 -c 'import time; time.sleep(120)' {tok} >/dev/null 2>&1 &"
            )
            assert r.exit_code == 0, r.stderr_text
            # each sandbox has its own SysV IPC namespace: an exclusive create succeeds in both
            shm = run_py(box, SHM_CREATE)
            assert shm[0] >= 0, f"shmget(IPC_EXCL) in sandbox {name}: errno {shm[1]}"
        for name, box in (("a", a), ("b", b)):  # wait until both daemons have exec'd
            deadline = time.monotonic() + 10
            while not any(tokens[name] in c for c in run_py(box, LIST_PROCS)):
                assert time.monotonic() < deadline, f"the background process of {name} never showed up"
                time.sleep(0.02)
        for me, other, box in (("a", "b", a), ("b", "a", b)):
            tok = tokens[other]
            listing = box.exec("ls -A /tmp /testbed /root /dev/shm").stdout_text
            assert tokens[me] in listing, listing
            assert tok not in listing, f"{me} sees {other}'s files: {listing}"
            r = box.exec(f"for f in /tmp/{tok} /testbed/{tok} /root/{tok} /dev/shm/{tok}; "
                         f"do test -e $f && echo FOUND $f; done; echo checked")
            assert r.stdout_text == "checked\n", f"{me} sees {other}'s files: {r.stdout_text}"
            cmds = run_py(box, LIST_PROCS)
            assert any(tokens[me] in c for c in cmds), f"{me} cannot see its own daemon: {cmds}"
            assert not any(tok in c for c in cmds), f"{me} sees {other}'s processes: {cmds}"
            sysv = box.exec("cat /proc/sysvipc/shm").stdout_text.strip().splitlines()
            assert len(sysv) == 2, f"{me} should see exactly its own SysV segment: {sysv}"
    # none of it reached the host either
    libc = __import__("ctypes").CDLL(None, use_errno=True)
    assert libc.shmget(SHM_KEY, 0, 0) == -1


# -- the same, for an unprivileged caller --------------------------------------------------------------
@pytest.fixture(scope="module")
def nobody_run():
    why = unprivileged_prereqs()
    if why:
        pytest.fail(f"cannot run sandboxlite as an unprivileged user here: {why}")
    home = make_nobody_home()
    try:
        secret = home / "secret.txt"
        secret.write_text("nobody's host secret\n")
        os.chown(secret, NOBODY_UID, NOBODY_GID)
        script = home / "driver.py"
        script.write_text(NOBODY_DRIVER)
        os.chmod(script, 0o644)
        request = json.dumps({
            "tag": "nobody",
            "hidden": [str(secret), "/etc/shadow"],
            "sysctls": list(HOST_SYSCTLS),
        })
        try:
            proc = run_as_nobody(script, [PROBE, FORK_LOOP, request], home)
        except (OSError, subprocess.SubprocessError) as e:
            pytest.fail(f"cannot run sandboxlite as an unprivileged user (uid {NOBODY_UID}): {e}")
        if proc.returncode != 0:
            pytest.fail(
                f"sandboxlite failed for an unprivileged caller (uid {NOBODY_UID}), exit {proc.returncode}:\n"
                f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
            )
        out = parse_result(proc)
        assert out["probe"]["exit"] == 0, out["probe"]
        out["probe_result"] = json.loads(out["probe"]["stdout"].strip().splitlines()[-1])
        out["secret"] = str(secret)
        yield out
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)


def test_nonroot_caller_really_is_unprivileged(nobody_run):
    assert (nobody_run["host_uid"], nobody_run["host_euid"]) == (NOBODY_UID, NOBODY_UID)
    st = nobody_run["executor_host_status"]
    assert st["Uid"].split()[0] == str(NOBODY_UID), st["Uid"]
    assert nobody_run["sandboxlite_file"].startswith(str(Path(__file__).resolve().parent.parent / "src"))


def test_nonroot_no_capabilities(nobody_run):
    p = nobody_run["probe_result"]
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert p["status"][cap] == ZERO_CAPS, f"command {cap} = {p['status'][cap]}"
    assert p["status"]["NoNewPrivs"] == "1"
    assert p["status"]["Seccomp"] == "2"


def test_nonroot_identity(nobody_run):
    p = nobody_run["probe_result"]
    assert (p["uid"], p["euid"], p["gid"]) == (0, 0, 0)
    assert p["hostname"] == "sandbox"


def test_nonroot_host_files_hidden(nobody_run):
    p = nobody_run["probe_result"]
    assert p["shadow"] != "READABLE"
    assert p["hidden"]["/etc/shadow"]["exists"] is False
    assert p["hidden"][nobody_run["secret"]] == {"exists": False, "read": "ENOENT"}
    assert p["home_exists"] is False
    assert p["mount_fstypes"].get("/root") == "tmpfs"
    assert p["root_listing"] == []


def test_nonroot_rootfs_read_only(nobody_run):
    p = nobody_run["probe_result"]
    for d in ("/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/bin"):
        assert p["create"][d] in DENIED, f"creating a file in {d}: {p['create'][d]}"
    for d in ("/testbed", "/tmp", "/root", "/dev/shm"):
        assert p["create"][d] == "ok", f"{d} should be writable: {p['create'][d]}"
    for path, res in p["open_w"].items():
        assert res in DENIED, f"open({path}, O_WRONLY) = {res}"


def test_nonroot_network_and_pids(nobody_run):
    p = nobody_run["probe_result"]
    assert p["ifaces"] == ["lo"]
    assert p["sys_exists"] is False
    assert 1 <= len(p["pids"]) <= 8, p["pids"]
    assert p["unshare_user"] == [-1, errno.EPERM]


def test_nonroot_fork_loop_is_bounded(nobody_run):
    assert nobody_run["pids_info"] == "RLIMIT_NPROC 32"
    fork = nobody_run["fork"]
    assert fork["exit"] == 0, fork
    res = json.loads(fork["stdout"].strip().splitlines()[-1])
    assert res["error"] == "EAGAIN", f"fork never failed: {res}"
    assert 1 <= res["forked"] < 40, res
    # the sandbox is still usable once the loop's children are gone
    assert nobody_run["after_fork"]["stdout"] == "alive\n", nobody_run["after_fork"]


def test_root_caller_runs_sandboxes_as_an_unprivileged_host_uid(root_sb):
    """uid 0 inside is never the host's root: the whole jail runs as an unprivileged host uid."""
    import psutil

    if os.geteuid() != 0:
        pytest.skip("only meaningful for a root caller")
    from sandboxlite.sandbox import run_as

    uid, _ = run_as()
    assert uid != 0
    for pid in [root_sb.bwrap_pid, root_sb.executor_pid]:
        assert psutil.Process(pid).uids().real == uid
    assert root_sb.info["host_uid"] == uid


def test_unreachable_mount_source_is_a_clear_error(host_dir_factory):
    if os.geteuid() != 0:
        pytest.skip("only a root caller's sandboxes change uid")
    from sandboxlite import ConfigError

    d = host_dir_factory("sandboxlite-private-")
    os.chmod(d, 0o700)
    with pytest.raises(ConfigError) as e:
        Sandbox(mounts=[f"{d}:/data:ro"])
    assert "unprivileged host uid" in str(e.value) and "Hint:" in str(e.value)
