"""containers.py and launch.diagnose: what stops a jail, named from bwrap's real message.

The pure part runs on bwrap's messages as seen in Docker and podman (issue 16); the real part
makes the same conditions here: a seccomp profile that refuses namespaces (like a container
runtime's default), and a masked /proc (a path of it covered, as runtimes do)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sandboxlite import SandboxCrashed, SetupError
from sandboxlite.isolation.containers import Facts, detect, explain, recipe
from sandboxlite.jail.launch import diagnose

NO_USERNS = ("bwrap: No permissions to create new namespace, likely because the kernel does not allow "
             "non-privileged user namespaces.")  # fmt: skip
SECCOMPED = Facts(runtime="docker", evidence="/.dockerenv exists", seccomp_mode="2", max_user_namespaces="15000")


@pytest.mark.parametrize("stderr, facts, kind, says", [
    (NO_USERNS, SECCOMPED, "seccomp", "seccomp profile that refuses the namespaces"),
    (NO_USERNS, Facts(max_user_namespaces="0"), "userns-sysctl", "user.max_user_namespaces = 0"),
    (NO_USERNS, Facts(unprivileged_userns_clone="0", euid=1000), "userns-sysctl", "unprivileged_userns_clone = 0"),
    (NO_USERNS, Facts(apparmor_restrict="1", euid=1000), "apparmor", "AppArmor"),
    ("bwrap: Can't mount proc on /newroot/proc: Operation not permitted", SECCOMPED, "masked-proc", "/proc is masked"),
    ("bwrap: Can't set hostname to sandbox: Operation not permitted", Facts(runtime="podman", evidence="x"),
     "hostname", "sethostname"),
    ("bwrap: pivot_root: Operation not permitted", SECCOMPED, "pivot-root", "pivot_root was refused"),
])  # fmt: skip
def test_each_refusal_is_named_by_its_real_cause(stderr, facts, kind, says):
    cause = explain(stderr, facts)
    assert cause is not None and cause.kind == kind and says in cause.message, cause
    if facts.runtime:
        assert cause.hint.startswith(f"{facts.runtime}:") or facts.runtime in cause.hint


def test_no_sysctl_advice_for_a_sysctl_this_kernel_does_not_have():
    cause = explain(NO_USERNS, SECCOMPED)
    assert "unprivileged_userns_clone" not in cause.message + cause.hint  # Docker's case: seccomp, said so
    assert "seccomp=unconfined" in cause.hint and "systempaths=unconfined" in cause.hint


def test_the_executor_s_own_failures_are_not_called_a_namespace_problem():
    msg = "sandboxlite-executor: generation: devpts /.sl/gen/r/dev/pts: Operation not permitted"
    assert explain(msg, SECCOMPED) is None
    err = diagnose(msg, SECCOMPED)
    assert isinstance(err, SetupError) and "executor could not set it up" in err.message
    assert "namespace" not in err.message and "sysctl" not in (err.hint or "")
    assert isinstance(diagnose("bwrap: something new", Facts()), SandboxCrashed)


def test_the_runtime_is_detected_from_the_marks_it_leaves(tmp_path):
    assert detect(str(tmp_path), {}) == (None, "")
    assert detect(str(tmp_path), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})[0] == "kubernetes"
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    assert detect(str(tmp_path), {}) == ("docker", "PID 1's cgroup names docker")
    (tmp_path / ".dockerenv").write_text("")
    assert detect(str(tmp_path), {}) == ("docker", "/.dockerenv exists")
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text('engine="podman-4.3.1"\n')
    assert detect(str(tmp_path), {})[0] == "podman"
    assert recipe("podman").startswith("podman: podman run") and "unmask=ALL" in recipe("podman")
    assert all(r in recipe(None) for r in ("docker:", "podman:", "kubernetes:"))


# -- the same conditions, made here -----------------------------------------------------------------

UNDER_A_RUNTIME_PROFILE = r"""
import errno, pyseccomp as sc
f = sc.SyscallFilter(defaction=sc.ALLOW)   # what a container runtime's default profile refuses
f.add_rule(sc.ERRNO(errno.EPERM), "unshare")
f.add_rule(sc.ERRNO(errno.EPERM), "setns")
f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, 0x10000000, 0x10000000))  # CLONE_NEWUSER
f.load()
from sandboxlite import Sandbox, SandboxError
try:
    Sandbox(rootfs="host")
    print("started")
except SandboxError as e:
    print(type(e).__name__, e.message, "HINT", e.hint)
"""


def test_under_a_profile_that_refuses_namespaces_the_error_says_so():
    r = subprocess.run([sys.executable, "-c", UNDER_A_RUNTIME_PROFILE], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("SetupError"), (r.stdout, r.stderr[-2000:])
    assert "seccomp profile that refuses the namespaces" in r.stdout
    assert "seccomp=unconfined" in r.stdout.split("HINT", 1)[1]
    assert "unprivileged_userns_clone" not in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="covering part of /proc takes root (a mount namespace of our own)")
def test_with_a_masked_proc_the_error_says_so():
    probe = ("from sandboxlite import Sandbox, SandboxError\ntry:\n    Sandbox(rootfs='host')\n    print('started')\n"
             "except SandboxError as e:\n    print(type(e).__name__, e.message)\n")  # fmt: skip
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        f'mount -t tmpfs masked /proc/bus && exec "{sys.executable}" -c "$0"', probe],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.stdout.startswith("SetupError"), (r.stdout, r.stderr[-2000:])
    assert "cannot mount its own /proc" in r.stdout and "masked" in r.stdout


def _doctor_json(prelude: str = "") -> tuple[int, dict]:
    code = prelude + "\nimport sys\nfrom sandboxlite.cli import main\nsys.argv = ['sandboxlite', 'doctor', '--json']\nmain()\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    import json

    return r.returncode, json.loads(r.stdout)


def test_doctor_json_lists_every_check_it_tried():
    rc, out = _doctor_json()
    names = [c["name"] for c in out["checks"]]
    assert rc == 0 and out["ok"] is True, out
    for name in ("container", "bubblewrap", "user namespaces", "seccomp", "cgroups", "identity", "executor",
                 "rootfs", "sandbox"):  # fmt: skip
        assert name in names
    userns = next(c for c in out["checks"] if c["name"] == "user namespaces")
    assert userns["status"] == "ok" and userns["detail"].startswith("a child made one")


def test_doctor_under_a_profile_that_refuses_namespaces_fails_and_says_why():
    """It used to say "user namespaces: ok" there (it only read sysctls)."""
    prelude = UNDER_A_RUNTIME_PROFILE.split("from sandboxlite import Sandbox")[0]
    rc, out = _doctor_json(prelude)
    by = {c["name"]: c for c in out["checks"]}
    assert rc == 1 and out["ok"] is False
    assert by["user namespaces"]["status"] == "fail"
    assert "seccomp profile that refuses the namespaces" in by["user namespaces"]["detail"]
    assert "seccomp=unconfined" in by["user namespaces"]["hint"]
    assert by["seccomp"]["status"] == "fail"


# -- the shipped profile ----------------------------------------------------------------------------

UNDER_THE_SHIPPED_PROFILE = r"""
import errno, json, sys, pyseccomp as sc
prof = json.loads(sys.argv[1])
assert prof["defaultAction"] == "SCMP_ACT_ALLOW"
f = sc.SyscallFilter(defaction=sc.ALLOW)   # what the runtime loads from the profile
for rule in prof["syscalls"]:
    assert rule["action"] == "SCMP_ACT_ERRNO"
    for name in rule["names"]:
        try:
            f.add_rule(sc.ERRNO(rule["errnoRet"]), name)
        except (ValueError, OSError):
            pass  # not a system call of this architecture: the runtimes skip it too
f.load()
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
keyctl = libc.syscall(250, 0, 0, 0, 0, 0)  # keyctl(KEYCTL_GET_KEYRING_ID) on x86_64
out = {"keyctl": errno.errorcode.get(ctypes.get_errno()) if keyctl < 0 else "ok"}
from sandboxlite import Sandbox
with Sandbox() as sb:
    out["exec"] = sb.exec("echo hi > /usr/local/x && cat /usr/local/x").stdout.decode()
    sb.reset()
    out["after reset"] = sb.exec("cat /usr/local/x 2>&1 || true").stdout.decode()
    out["cow"] = sb.info["copy_on_write_root"]
print(json.dumps(out))
"""


def test_the_shipped_profile_lets_a_jail_start_and_still_refuses_the_rest():
    """`sandboxlite container-profile`, loaded as a runtime loads it, under the sandbox and the rest
    of the process: the jail (copy-on-write root, reset) works, keyctl is still refused."""
    import json
    import platform

    from sandboxlite.isolation.container_profile import JAIL_NEEDS, profile

    if platform.machine() != "x86_64":
        pytest.skip("the probe's keyctl number is x86_64's")
    prof = profile("docker")
    denied = prof["syscalls"][0]["names"]
    assert not set(JAIL_NEEDS) & set(denied) and {"keyctl", "bpf", "kexec_load", "io_uring_setup"} <= set(denied)
    assert profile("podman")["syscalls"] == prof["syscalls"]
    r = subprocess.run([sys.executable, "-c", UNDER_THE_SHIPPED_PROFILE, json.dumps(prof)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["keyctl"] == "EPERM" and out["exec"] == "hi\n" and "No such file" in out["after reset"]
    assert out["cow"] is True


def test_the_cli_prints_the_profile():
    import json

    from click.testing import CliRunner

    from sandboxlite.cli import main

    r = CliRunner().invoke(main, ["container-profile", "podman"])
    assert r.exit_code == 0 and json.loads(r.output)["defaultAction"] == "SCMP_ACT_ALLOW"
    assert CliRunner().invoke(main, ["container-profile", "lxc"]).exit_code == 2


def test_with_sethostname_refused_hostname_none_still_starts():
    code = r"""
import errno, pyseccomp as sc
f = sc.SyscallFilter(defaction=sc.ALLOW)
f.add_rule(sc.ERRNO(errno.EPERM), "sethostname")  # podman's default profile
f.load()
from sandboxlite import Sandbox, SandboxError
try:
    Sandbox(rootfs="host")
except SandboxError as e:
    print("refused:", e.message, "HINT", e.hint)
with Sandbox(rootfs="host", hostname=None) as sb:
    print("started:", sb.exec("echo ok").stdout.decode().strip())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "refused:" in r.stdout and "sethostname" in r.stdout and "hostname=None" in r.stdout, r.stdout + r.stderr
    assert "started: ok" in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="a root caller without CAP_SYS_ADMIN, as in a container")
def test_a_root_caller_without_cap_sys_admin_starts_every_sandbox(tmp_path):
    """Docker gives its root no CAP_SYS_ADMIN: joining a network namespace made ahead of time and
    idmapping an image then fail (only the first sandbox of a process started: the pool was still
    empty).  The Host sees it and says why; every start works, with a copy-on-write root."""
    code = r"""
import json
from sandboxlite import Sandbox
from sandboxlite.jail.host import Host
h = Host.detect()
out = {"netns": h.netns is None, "netns_reason": h.netns_reason, "uids": h.uids is None, "uids_reason": h.uids_reason}
for rootfs in ("science", "host", "science", "host", "science"):
    with Sandbox(rootfs=rootfs, host=h) as sb:
        assert sb.exec("echo x > /usr/local/y 2>/dev/null; true").exit_code == 0
        out.setdefault("cow", []).append(sb.info["copy_on_write_root"])
print(json.dumps(out))
"""
    r = subprocess.run(["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["netns"] and "CAP_SYS_ADMIN" in out["netns_reason"]
    assert out["uids"] and "CAP_SYS_ADMIN" in out["uids_reason"]
    assert out["cow"] == [True, False, True, False, True]


def test_the_launcher_s_own_failures_say_how_to_leave_its_steps_out():
    err = diagnose("sandboxlite-launcher: cannot join the network namespace on descriptor 7", Facts())
    assert isinstance(err, SetupError) and "launcher could not prepare" in err.message
    assert "SANDBOXLITE_NETNS_POOL=0" in err.hint and "SANDBOXLITE_UID_RANGE=off" in err.hint
