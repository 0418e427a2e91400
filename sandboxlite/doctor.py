"""``sandboxlite doctor``: can this host run sandboxes, and how well protected are they?

Each check returns a ``Check`` with a status (``ok``, ``warn``, ``fail``), what
was found, and for anything short of ``ok`` a hint that says how to fix it.

May import: errors, isolation, executor, images, jail.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

from . import executor
from . import images
from .errors import SandboxError
from .isolation import bwrap, cgroups, containers, landlock, seccomp
from .jail.host import default_host


@dataclass
class Check:
    name: str
    status: str  # "ok", "warn", "fail"
    detail: str
    hint: str = ""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def check_bwrap() -> Check:
    try:
        info = bwrap.find_bwrap()
    except SandboxError as e:
        return Check("bubblewrap", "fail", e.message, e.hint or "")
    extra = "" if info.disable_userns else " (no --disable-userns: nested user namespaces are blocked by seccomp only)"
    return Check("bubblewrap", "ok", f"{info.path} {info.version_str}{extra}")


def probe_userns() -> str | None:
    """Try what a jail needs first: a user namespace, in a child process (None: it worked; else why not)."""
    import subprocess

    try:
        exe = str(executor.executor_path())
        p = subprocess.run([exe, "userns"], input=b"", capture_output=True, timeout=10)
    except SandboxError as e:
        return e.message
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.stdout == b"u":
        return None
    return p.stderr.decode(errors="replace").strip() or f"exit status {p.returncode}"


def check_userns(why: str | None) -> Check:
    """``why``: what probe_userns() said (None: a child made one)."""
    facts = containers.Facts.read()
    if why is None:
        return Check("user namespaces", "ok", f"a child made one (max_user_namespaces={facts.max_user_namespaces})")
    cause = containers.namespace_cause(facts)
    return Check("user namespaces", "fail", f"a child could not make one ({why}): {cause.message}",
                 f"{cause.hint}; or, {landlock.ALTERNATIVE}")


def check_container() -> Check:
    """Which container runtime (if any) this runs in: it decides what a jail may do here."""
    facts = containers.Facts.read()
    if facts.runtime is None:
        return Check("container", "ok", "none detected")
    return Check("container", "ok", f"{facts.runtime} ({facts.evidence}): the rows below say whether sandboxes "
                 "can start in it, and if not, how to run the container")  # fmt: skip


def check_seccomp(userns_refused: str | None) -> Check:
    """``userns_refused``: what probe_userns() said (a filter of this process's that lets a user
    namespace through is fine)."""
    try:
        n = len(seccomp.filter_bytes()) // 8
    except SandboxError as e:
        return Check("seccomp", "fail", e.message, e.hint or "")
    facts = containers.Facts.read()
    built = f"filter built ({n} BPF instructions, {len(seccomp.DENIED_SYSCALLS)} calls denied)"
    if facts.seccomp_mode == "2":  # a filter of the caller's (a container's profile) is on this process too
        if userns_refused is None:
            return Check("seccomp", "ok", f"{built}; this process runs under a filter of its own, which allows "
                         "the namespaces a jail needs")  # fmt: skip
        cause = containers.namespace_cause(facts)
        return Check("seccomp", "fail", f"{built}; {cause.message}", cause.hint)
    return Check("seccomp", "ok", built)


def check_cgroups() -> Check:
    s = cgroups.detect()
    if s.kind:
        return Check("cgroups", "ok", f"{s.kind} at {s.reason}: memory and pids limits per sandbox")
    fallback = "sandboxes use RLIMIT_AS (per process) and RLIMIT_NPROC instead, and tmpfs use is charged to no limit"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    runtime = containers.Facts.read().runtime
    if "read-only" in s.reason:
        why = s.reason + (f" ({runtime})" if runtime else "")
        hint = ("give the container a writable cgroup tree (docker/podman --privileged, or a delegated cgroup v2 "
                "subtree mounted read-write) and set SANDBOXLITE_CGROUP_PARENT to it")  # fmt: skip
    elif v2:
        why = s.reason
        hint = ("delegate a cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes ...) and set "
                "SANDBOXLITE_CGROUP_PARENT to it")  # fmt: skip
    else:
        why = s.reason
        hint = "cgroup v1: only root can make cgroups; run as root for per-sandbox memory and pids limits"
    return Check("cgroups", "warn", f"unavailable: {why}; {fallback}", hint)


def check_executor() -> Check:
    try:
        path = executor.executor_path()
    except SandboxError as e:
        return Check("executor", "fail", e.message, e.hint or "")
    if executor.is_static(path):
        if executor.is_musl(path):
            return Check("executor", "ok", f"{path} (static, musl)")
        return Check(
            "executor", "warn", f"{path} (static, glibc: each sandbox starts ~0.3 ms slower than with musl)",
            "apt-get install musl-tools; it is rebuilt with musl on next use",
        )  # fmt: skip
    return Check(
        "executor", "warn", f"{path} is dynamically linked: it runs only over a rootfs with a compatible libc",
        "apt-get install libc6-dev, then delete the file so it is rebuilt statically",
    )  # fmt: skip


def check_identity() -> Check:
    from .isolation.identity import run_as

    try:
        ids = run_as()
    except SandboxError as e:
        return Check("identity", "fail", e.message, e.hint or "")
    if ids is None:
        return Check("identity", "ok", f"sandboxes run as your uid {os.geteuid()} (uid 0 inside, no capabilities)")
    import pwd

    try:
        dedicated = pwd.getpwnam("sandboxlite").pw_uid == ids[0]
    except KeyError:
        dedicated = False
    detail = (
        f"caller is root: images are owned by host uid {ids[0]}; sandboxes run as gid {ids[1]} and "
        "that uid, or each as a uid of its own (see 'own uids'), never as host root; mount sources "
        "must be reachable by them (group or others)"
    )
    if not dedicated and not os.environ.get("SANDBOXLITE_UID"):
        return Check(
            "identity", "warn", detail + " (the shared 'nobody' account: images cannot be given to it safely)",
            "create the system user: useradd --system --user-group --no-create-home sandboxlite "
            "(tools/setup.sh does), then sandboxlite rootfs chown NAME",
        )  # fmt: skip
    return Check("identity", "ok", detail)


def check_rootfs() -> Check:
    try:
        plan = images.resolve("auto")
    except SandboxError as e:
        return Check("rootfs", "fail", e.message, e.hint or "")
    if plan.kind == "host":
        return Check(
            "rootfs", "warn",
            "no built image; sandboxes use the host's /usr read-only (rootfs='host')",
            f"build the default image (about a minute): sandboxlite rootfs build {images.DEFAULT_PROFILE}",
        )  # fmt: skip
    from .isolation.identity import run_as

    ids = run_as()
    want = ids[0] if ids else os.geteuid()
    owner = os.stat(plan.path).st_uid
    if owner != want:
        return Check(
            "rootfs", "warn",
            f"{plan.name} ({plan.path}) is owned by uid {owner}, not by the sandboxes' uid {want}: "
            "no copy-on-write root (only /tmp, /testbed and /root are writable)",
            f"sandboxlite rootfs chown {plan.name}" if ids else f"sandboxlite rootfs rm {plan.name} and build it again",
        )  # fmt: skip
    return Check("rootfs", "ok", f"{plan.name} ({plan.path}), copy-on-write root")


def check_fast_start() -> Check:
    """Root callers' start-up shortcuts: a ready-made /dev and network namespaces made ahead of time."""
    if os.geteuid() != 0:
        return Check("fast start", "ok", "not root: bwrap makes /dev and the network namespace (~1 ms more per start)")
    notes = []
    try:
        host = default_host()  # the Host this process's sandboxes use
    except SandboxError as e:
        return Check("fast start", "fail", e.message, e.hint or "")
    if host.dev is None:
        notes.append(host.dev_reason)
    pool = host.netns
    if pool is None:
        notes.append(host.netns_reason)
    elif not pool.wait_ready(1, 5) or pool.broken:
        notes.append(f"network namespaces cannot be made ahead of time: {pool.broken or 'timed out'}")
    if notes:
        return Check("fast start", "warn", "; ".join(notes),
                     "each start takes up to ~1 ms longer; unset SANDBOXLITE_DEV / SANDBOXLITE_NETNS_POOL, "
                     "or run where root may make device nodes and join namespaces (CAP_MKNOD, CAP_SYS_ADMIN)")  # fmt: skip
    return Check("fast start", "ok", f"ready-made /dev ({host.dev}); {pool.size} network namespaces kept ready")


SHARED_BUDGETS = "inotify instances, pending signals, POSIX message-queue bytes, pipe buffers, the process count"


def check_uids() -> Check:
    """Between sandboxes: does each live sandbox get a host uid of its own (slots.py)?"""
    if os.geteuid() != 0:
        return Check(
            "own uids", "warn",
            f"not root: all your sandboxes run as your uid, so the kernel's per-uid budgets ({SHARED_BUDGETS}) "
            "are shared among them: one that uses up a budget can break the others",
            "run as root (each live sandbox then gets a uid of its own) if untrusted sandboxes run side by side",
        )  # fmt: skip
    try:
        host = default_host()
    except SandboxError as e:
        return Check("own uids", "fail", e.message, e.hint or "")
    if host.uids is None:
        return Check("own uids", "warn", f"{host.uids_reason}: the kernel's per-uid budgets ({SHARED_BUDGETS}) "
                     "are shared by all sandboxes", "unset SANDBOXLITE_UID / SANDBOXLITE_UID_RANGE")  # fmt: skip
    try:
        image = images.resolve("auto")
    except SandboxError:
        image = None
    if image is not None and image.kind == "dir" and os.stat(image.path).st_uid == host.uid and host.idmap:
        lease = host.uids.lease()
        try:
            os.close(host.idmap.tree(image.path, (lease.uid, host.run_as[1])))  # type: ignore[index]
        except OSError as e:
            return Check("own uids", "warn", f"{host.uids_reason}, but the image {image.name} cannot be idmapped "
                         f"({e}): its sandboxes share uid {host.uid}",
                         "keep images on a filesystem with idmapped mounts (ext4, xfs, btrfs, tmpfs; Linux >= 5.12)")  # fmt: skip
        finally:
            lease.release()
    return Check("own uids", "ok", f"{host.uids_reason} (the image is idmapped to each)")


def check_sandbox() -> Check:
    from .jail.sandbox import Sandbox

    try:
        with Sandbox(isolation="namespaces") as sb:
            r = sb.exec(["/bin/sh", "-c", "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; ls /sys/class/net 2>/dev/null || cat /proc/net/dev"])
    except SandboxError as e:
        return Check("sandbox", "fail", e.message, e.hint or "")
    fields = dict(line.split(":\t", 1) for line in r.stdout_text.splitlines() if ":\t" in line)
    problems = []
    if fields.get("CapEff", "").strip("0") != "":
        problems.append(f"CapEff={fields.get('CapEff')}")
    if fields.get("NoNewPrivs") != "1":
        problems.append("no_new_privs not set")
    if fields.get("Seccomp") != "2":
        problems.append("seccomp not active")
    if problems:
        return Check("sandbox", "fail", "a test sandbox is not confined: " + ", ".join(problems), "report this as a bug")
    return Check("sandbox", "ok", "started a sandbox: no capabilities, no_new_privs, seccomp filter active")


EGRESS_PROBE_HOST = "sandboxlite-doctor.invalid"  # a reserved name: the probe never leaves the machine


def check_egress() -> Check:
    """network="allow:...": a test sandbox asks its proxy for a host the allowlist refuses (so no
    request leaves the machine) and must get the proxy's refusal, logged."""
    from .jail.sandbox import Sandbox

    name = "egress proxy"
    probe = ("import urllib.request, urllib.error\n"
             f"try: urllib.request.urlopen('http://{EGRESS_PROBE_HOST}/', timeout=10)\n"
             "except urllib.error.HTTPError as e: print(e.code, e.headers.get('X-Sandboxlite-Egress'))\n"
             "except Exception as e: print('error', e)\n")  # fmt: skip
    try:
        with Sandbox(network="allow:pypi") as sb:
            r = sb.exec(["python3", "-c", probe], timeout=30)
            log = sb.network_log()
    except SandboxError as e:
        return Check(name, "fail", f"a sandbox with network='allow:pypi' failed: {e.message}", e.hint or "")
    if r.exit_code == 127 or b"No such file" in r.stderr:
        return Check(name, "warn", "the image has no python3 to probe the proxy with")
    if r.stdout_text.split() != ["403", "denied"] or len(log) != 1 or log[0].allowed:
        return Check(name, "fail", f"the proxy did not refuse {EGRESS_PROBE_HOST} as it should: "
                     f"{(r.stdout_text + r.stderr_text).strip()[:300]!r}, log {log}", "report this as a bug")  # fmt: skip
    ca = default_host().ca_bundle
    return Check(name, "ok", "network='allow:RULES' works: the sandbox reaches the host's proxy at 127.0.0.1:3128, "
                 f"which refused {EGRESS_PROBE_HOST} and logged it; sandboxes trust "
                 + (f"the host's CAs ({ca})" if ca else "their image's CAs (the host has no CA bundle)"))  # fmt: skip


LANDLOCK_PROBE = ("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
                  "if ls / >/dev/null 2>&1; then echo 'Root: readable'; else echo 'Root: refused'; fi")  # fmt: skip


def check_landlock() -> Check:
    """isolation="landlock": the kernel's ABI, then a test sandbox that must not list /."""
    from .jail.sandbox import Sandbox

    host = default_host()
    name = "landlock mode"
    if host.landlock_abi < landlock.MIN_ABI:
        have = f"ABI {host.landlock_abi}" if host.landlock_abi else f"no Landlock ({host.landlock_reason})"
        return Check(name, "warn", f"{have}: isolation='landlock' needs ABI {landlock.MIN_ABI} (Linux 6.12)",
                     "only needed where namespaces cannot be had; a newer kernel offers it")  # fmt: skip
    try:
        with Sandbox(isolation="landlock") as sb:
            r = sb.exec(["/bin/sh", "-c", LANDLOCK_PROBE])
    except SandboxError as e:
        return Check(name, "fail", f"ABI {host.landlock_abi}, but a test sandbox failed: {e.message}", e.hint or "")
    fields = dict(line.split(":", 1) for line in r.stdout_text.splitlines() if ":" in line)
    fields = {k: v.strip() for k, v in fields.items()}
    problems = [p for p, bad in (
        (f"CapEff={fields.get('CapEff')}", fields.get("CapEff", "").strip("0") != ""),
        ("no_new_privs not set", fields.get("NoNewPrivs") != "1"),
        ("seccomp not active", fields.get("Seccomp") != "2"),
        ("/ is readable", fields.get("Root") != "refused"),
    ) if bad]  # fmt: skip
    if problems:
        return Check(name, "fail", "a Landlock test sandbox is not confined: " + ", ".join(problems),
                     "report this as a bug")  # fmt: skip
    return Check(name, "ok", f"ABI {host.landlock_abi}: isolation='landlock' works here (no namespaces; weaker than "
                 "namespaces: see SECURITY.md, 'Isolation modes')")  # fmt: skip


def run_checks() -> list[Check]:
    checks = [
        check_container(),
        check_bwrap(),
        check_userns(userns_refused := probe_userns()),
        check_seccomp(userns_refused),
        check_cgroups(),
        check_identity(),
        check_executor(),
        check_rootfs(),
        check_fast_start(),
        check_uids(),
    ]
    if all(c.status != "fail" for c in checks):
        checks.append(check_sandbox())
        checks.append(check_egress())
    checks.append(check_landlock())  # also (above all) where namespaces fail: the way out it offers
    return judge(checks, default_host().isolation)


# the rows that only the namespace isolation depends on
NAMESPACE_ROWS = ("bubblewrap", "user namespaces", "seccomp", "rootfs", "fast start", "own uids", "sandbox",
                  "egress proxy")


def judge(checks: list[Check], isolation: str) -> list[Check]:
    """A failure counts only for the isolation sandboxes get here ($SANDBOXLITE_ISOLATION): the other
    mode's failures are warnings, said to be so."""
    out = []
    for c in checks:
        other = c.name in NAMESPACE_ROWS if isolation == "landlock" else c.name == "landlock mode"
        if other and c.status == "fail":
            mode = "namespaces" if isolation == "landlock" else "isolation='landlock'"
            c = Check(c.name, "warn", f"{c.detail} (not used here: sandboxes get isolation='{isolation}'; this "
                      f"matters only for {mode})", c.hint)  # fmt: skip
        out.append(c)
    return out


def header() -> str:
    return f"sandboxlite doctor: {platform.system()} {platform.release()} {platform.machine()}, euid {os.geteuid()}"


# -- one image: what the agent's tools find in it ------------------------------------------------

PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3", "/opt/conda/bin/python3")


def image_checks(ref: str) -> list[Check]:
    """What image ``ref`` (a container image in the store, a built image or a directory) offers the
    agent: a shell for execute_bash, what str_replace_editor runs there, python.  One sandbox is
    started from it."""
    from .jail.sandbox import Sandbox
    from .jail.shell import choose_dialect

    try:
        sb = Sandbox(rootfs=ref, network="none")
    except SandboxError as e:
        return [Check("image", "fail", f"{ref}: {e.message}", e.hint or "")]
    with sb:
        checks = [Check("image", "ok", f"{ref}: a sandbox started from it ({sb.plan.rootfs.path})")]
        try:
            dialect = choose_dialect(sb.is_file)
        except SandboxError as e:
            checks.append(Check("shell", "fail", e.message, e.hint or ""))
            dialect = None
        if dialect is not None and dialect.end:
            checks.append(Check("shell", "warn", f"no bash: execute_bash runs in the image's POSIX sh ({dialect.program}); "
                                "bash-only syntax (arrays, [[ ]], <( )) fails there",
                                "install bash in the image if the tasks' commands need it"))  # fmt: skip
        elif dialect is not None:
            checks.append(Check("shell", "ok", f"bash at {dialect.program}: execute_bash as everywhere"))
        checks.append(_editor_check(sb))
        python = next((p for p in PYTHONS if sb.is_file(p)), None)
        checks.append(Check("python", "ok", f"python3 at {python}") if python else Check(
            "python", "warn", "no python3: tasks that ask the agent to compute with python fail",
            "use an image with python (python:3.12-slim), or tell the model the image has none"))  # fmt: skip
    return checks


def _editor_check(sb) -> Check:
    """str_replace_editor reads and writes files through the executor (any image); ``view`` of a
    directory runs find, and an edit keeps the file's mode with stat."""
    r = sb.exec(["find", "/", "-maxdepth", "0", "-printf", "%y"], timeout=30)
    if r.exit_code == 127 or (r.exit_code != 0 and b"No such file" in r.stderr):
        return Check("editor", "warn", "str_replace_editor works on files, but the image has no find: 'view' of a "
                     "directory lists nothing", "add find (busybox or findutils) to the image")  # fmt: skip
    if not sb.is_file("/usr/bin/stat") and not sb.is_file("/bin/stat"):
        return Check("editor", "warn", "str_replace_editor works, but without stat an edit makes the file mode 644",
                     "add coreutils or busybox")  # fmt: skip
    how = "GNU find" if r.exit_code == 0 else "a find without -printf (listed in two passes)"
    return Check("editor", "ok", f"str_replace_editor: files through the executor, directories with {how}")
