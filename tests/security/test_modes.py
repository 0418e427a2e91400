"""What holds in each mode: the same probe from an unprivileged caller (uid 65534, through
setpriv), and a root caller's jails never running as the host's root.  (With and without
cgroups: test_resources and test_proc run their bombs both ways.)"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from ..helpers_nonroot import (
    FORK_LOOP,
    HOST_SYSCTLS,
    NOBODY_DRIVER,
    NOBODY_GID,
    NOBODY_UID,
    PROBE,
    make_nobody_home,
    parse_result,
    run_as_nobody,
    unprivileged_prereqs,
)

ZERO_CAPS = "0000000000000000"
DENIED = {"EROFS", "EACCES", "EPERM"}


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
        request = json.dumps({"tag": "nobody", "hidden": [str(secret), "/etc/shadow"], "sysctls": list(HOST_SYSCTLS)})
        try:
            proc = run_as_nobody(script, [PROBE, FORK_LOOP, request], home)
        except (OSError, subprocess.SubprocessError) as e:
            pytest.fail(f"cannot run sandboxlite as an unprivileged user (uid {NOBODY_UID}): {e}")
        if proc.returncode != 0:
            pytest.fail(f"sandboxlite failed for an unprivileged caller (uid {NOBODY_UID}), exit {proc.returncode}:\n"
                        f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}")
        out = parse_result(proc)
        assert out["probe"]["exit"] == 0, out["probe"]
        out["probe_result"] = json.loads(out["probe"]["stdout"].strip().splitlines()[-1])
        out["secret"] = str(secret)
        yield out
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)


def test_nonroot_caller_is_really_unprivileged(nobody_run, record):
    st = nobody_run["executor_host_status"]
    p = nobody_run["probe_result"]
    record("non-root caller: who the jail is", "host uid 65534; uid 0 inside",
           f"caller {nobody_run['host_uid']}, executor host uid {st['Uid'].split()[0]}, inside {p['uid']}")
    assert (nobody_run["host_uid"], nobody_run["host_euid"]) == (NOBODY_UID, NOBODY_UID)
    assert st["Uid"].split()[0] == str(NOBODY_UID) and (p["uid"], p["euid"], p["gid"]) == (0, 0, 0)
    assert nobody_run["sandboxlite_file"].startswith(str(Path(__file__).resolve().parents[2] / "sandboxlite"))


def test_nonroot_capabilities(nobody_run, record):
    st = nobody_run["probe_result"]["status"]
    caps = sorted({st[c] for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")})
    record("non-root caller: capabilities, NNP, seccomp", "none; 1; filter", f"caps {caps}, NoNewPrivs "
           f"{st['NoNewPrivs']}, Seccomp {st['Seccomp']}, nested userns {nobody_run['probe_result']['unshare_user']}")
    assert caps == [ZERO_CAPS] and st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
    assert nobody_run["probe_result"]["unshare_user"] == [-1, errno.EPERM]


def test_nonroot_host_files(nobody_run, record):
    p = nobody_run["probe_result"]
    seen = {path: v["read"] for path, v in p["hidden"].items()}
    record("non-root caller: its home file, /etc/shadow", "ENOENT", sorted(set(seen.values())))
    assert set(seen.values()) == {"ENOENT"} and p["shadow"] != "READABLE"
    assert p["home_exists"] is False and p["root_listing"] == [] and p["mount_fstypes"].get("/root") == "tmpfs"


def test_nonroot_rootfs_and_sysctls(nobody_run, record):
    p = nobody_run["probe_result"]
    ro = {d: p["create"][d] for d in ("/", "/usr", "/usr/bin", "/usr/lib", "/etc", "/bin")}
    record("non-root caller: write the rootfs, open sysctls", "EROFS/EACCES",
           f"create {sorted(set(ro.values()))}; open_w {sorted(set(p['open_w'].values()))}")
    assert set(ro.values()) <= DENIED and set(p["open_w"].values()) <= DENIED | {"ENOENT"}, p
    assert all(p["create"][d] == "ok" for d in ("/testbed", "/tmp", "/root", "/dev/shm"))


def test_nonroot_network_and_processes(nobody_run, record):
    p = nobody_run["probe_result"]
    record("non-root caller: interfaces, visible pids", "lo; a handful", f"{p['ifaces']}; {len(p['pids'])} pids")
    assert p["ifaces"] == ["lo"] and p["sys_exists"] is False and 1 <= len(p["pids"]) <= 8, p


def test_nonroot_fork_loop(nobody_run, record):
    fork = nobody_run["fork"]
    res = json.loads(fork["stdout"].strip().splitlines()[-1])
    record(f"non-root caller: fork loop ({nobody_run['pids_info']})", "EAGAIN below 32",
           f"{res['error']} after {res['forked']} forks; then {nobody_run['after_fork']['stdout'].strip()!r}")
    assert nobody_run["pids_info"] == "RLIMIT_NPROC 32" and fork["exit"] == 0
    assert res["error"] == "EAGAIN" and 1 <= res["forked"] < 40, res
    assert nobody_run["after_fork"]["stdout"] == "alive\n", nobody_run["after_fork"]


def test_root_caller_jail_is_not_host_root(image_sb, host_sb, record):
    """uid 0 inside is never the host's root: a root caller's jail runs as an unprivileged host uid."""
    from sandboxlite.isolation.identity import run_as

    if os.geteuid() != 0:
        pytest.fail("the suite runs as root (CI does); the non-root mode is covered by the tests above")
    uid, _ = run_as()
    per_box = [{psutil.Process(pid).uids().real for pid in (box.bwrap_pid, box.executor_pid)} for box in (image_sb, host_sb)]
    record("root caller: host uid of bwrap and the executor", "unprivileged (not 0), one per sandbox", per_box)
    assert all(len(u) == 1 for u in per_box) and 0 not in per_box[0] | per_box[1]
    assert per_box[0] != per_box[1]  # each live sandbox a uid of its own (slots.py)
    assert per_box[0] == {image_sb.info["host_uid"]} and per_box[1] == {host_sb.info["host_uid"]}
    assert uid not in per_box[0] | per_box[1]  # the images' owner is not a sandbox's uid
