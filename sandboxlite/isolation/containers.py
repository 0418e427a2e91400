"""Where this process runs (a container runtime, or none), and what stops a jail there.

``detect()`` names the container runtime from the marks each leaves (Docker's
``/.dockerenv``, podman's ``/run/.containerenv``, Kubernetes' service variables,
the cgroup paths of PID 1).  ``explain(stderr, facts)`` turns bwrap's own
complaint into its real cause: a seccomp profile that refuses namespaces, a
masked ``/proc``, a refused ``sethostname`` or ``pivot_root``, user namespaces
turned off by a sysctl; each with what to do, in the runtime's own words
(``recipe()``).  Pure functions of what they are given (``Facts.read()`` reads
the machine), so each cause is tested from its message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

RUNTIMES = ("docker", "podman", "kubernetes")

# What was tried and works (issue 16): the runtime's default seccomp profile refuses the
# namespaces a jail needs, and its masked /proc makes the kernel refuse the jail a /proc of its own.
RECIPES = {
    "docker": (
        "docker run --security-opt seccomp=sandboxlite.json --security-opt systempaths=unconfined "
        "--security-opt apparmor=unconfined ...  (sandboxlite.json from `sandboxlite container-profile docker`, "
        "or seccomp=unconfined; systempaths=unconfined unmasks the container's /proc, which the jail needs to "
        "mount a /proc of its own; --cap-add SYS_ADMIN alone is not enough)"
    ),
    "podman": (
        "podman run --security-opt seccomp=sandboxlite.json --security-opt unmask=ALL ...  (sandboxlite.json "
        "from `sandboxlite container-profile podman`, or seccomp=unconfined)"
    ),
    "kubernetes": (
        "a pod with securityContext.seccompProfile {type: Localhost, localhostProfile: sandboxlite.json} "
        "(`sandboxlite container-profile docker`, placed on the nodes) or Unconfined, AppArmor unconfined "
        "where nodes use AppArmor, and procMount: Unmasked (which needs hostUsers: false); or privileged: true"
    ),
}


@dataclass(frozen=True)
class Facts:
    """What bears on whether a jail can start here."""

    runtime: str | None = None  # "docker", "podman", "kubernetes" or None (no container seen)
    evidence: str = ""
    seccomp_mode: str = "0"  # this process's (/proc/self/status): "2" = under a filter
    max_user_namespaces: str | None = None
    unprivileged_userns_clone: str | None = None  # Debian/Ubuntu kernels only
    apparmor_restrict: str | None = None  # Ubuntu >= 23.10
    euid: int = 0

    @classmethod
    def read(cls, root: str = "/", env: Mapping[str, str] | None = None) -> "Facts":
        env = os.environ if env is None else env
        runtime, evidence = detect(root, env)
        status = _read(os.path.join(root, "proc/self/status")) or ""
        mode = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("Seccomp:")), "0")
        sysctl = lambda name: _read(os.path.join(root, "proc/sys", name))  # noqa: E731
        return cls(runtime, evidence, mode, sysctl("user/max_user_namespaces"),
                   sysctl("kernel/unprivileged_userns_clone"), sysctl("kernel/apparmor_restrict_unprivileged_userns"),
                   os.geteuid())  # fmt: skip


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def detect(root: str = "/", env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """(runtime or None, the evidence)."""
    env = os.environ if env is None else env
    if env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes", "KUBERNETES_SERVICE_HOST is set"
    containerenv = _read(os.path.join(root, "run/.containerenv"))
    if containerenv is not None:
        return "podman", "/run/.containerenv exists"
    if os.path.exists(os.path.join(root, ".dockerenv")):
        return "docker", "/.dockerenv exists"
    cg = _read(os.path.join(root, "proc/1/cgroup")) or ""
    for mark, runtime in (("kubepods", "kubernetes"), ("libpod", "podman"), ("docker", "docker")):
        if mark in cg:
            return runtime, f"PID 1's cgroup names {mark}"
    if env.get("container") in ("podman", "docker"):
        return env["container"], f"container={env['container']} is set"
    return None, ""


def recipe(runtime: str | None) -> str:
    """How to run sandboxlite in this runtime (all three when unknown)."""
    if runtime in RECIPES:
        return f"{runtime}: {RECIPES[runtime]}"
    return "; ".join(f"{r}: {RECIPES[r]}" for r in RUNTIMES)


@dataclass(frozen=True)
class Cause:
    kind: str  # "seccomp", "masked-proc", "hostname", "pivot-root", "userns-sysctl", "apparmor", "other"
    message: str
    hint: str


def explain(stderr: str, facts: Facts) -> Cause | None:
    """Why bwrap could not set up the jail, from its own lines (``bwrap: ...``) of ``stderr``; None
    when they are not a refusal of the kernel's (the executor's own failures are not judged here)."""
    low = "\n".join(ln for ln in stderr.splitlines() if ln.startswith("bwrap:")).lower()
    if not low:
        return None
    where = f" ({facts.runtime}: {facts.evidence})" if facts.runtime else ""
    if "can't mount proc" in low or "mount proc" in low and "not permitted" in low:
        return Cause("masked-proc", f"the jail cannot mount its own /proc: this process's /proc is masked{where} "
                     "(paths of it are covered, as container runtimes do), and the kernel then refuses a new one",
                     recipe(facts.runtime))  # fmt: skip
    if "sethostname" in low or "set hostname" in low:
        return Cause("hostname", f"setting the sandbox's hostname was refused{where}: a seccomp profile blocks "
                     "sethostname", f"{recipe(facts.runtime)}; or, keeping that profile, hostname=None (the "
                     "sandbox keeps the container's host name) together with the recipe's /proc option "
                     "(unmask=ALL for podman, systempaths=unconfined for Docker)")  # fmt: skip
    if "pivot_root" in low:
        return Cause("pivot-root", f"pivot_root was refused{where} (a seccomp profile blocks it; adding "
                     "CAP_SYS_ADMIN is not enough)", recipe(facts.runtime))  # fmt: skip
    ns_words = ("new namespace", "uid map", "unshare", "clone", "no permissions to create")
    if any(w in low for w in ns_words):
        return namespace_cause(facts)
    return None


def namespace_cause(facts: Facts) -> Cause:
    """Why the kernel refuses this process a user namespace (bwrap said so, or a probe saw it)."""
    where = f" ({facts.runtime}: {facts.evidence})" if facts.runtime else ""
    if facts.max_user_namespaces == "0":
        return Cause("userns-sysctl", "user namespaces are turned off (user.max_user_namespaces = 0)",
                     "sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)")  # fmt: skip
    if facts.unprivileged_userns_clone == "0" and facts.euid != 0:
        return Cause("userns-sysctl", "unprivileged user namespaces are turned off "
                     "(kernel.unprivileged_userns_clone = 0)", "sysctl -w kernel.unprivileged_userns_clone=1")  # fmt: skip
    if facts.apparmor_restrict == "1":
        return Cause("apparmor", "AppArmor restricts unprivileged user namespaces",
                     "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile "
                     "allowing userns for /usr/bin/bwrap")  # fmt: skip
    if facts.seccomp_mode == "2":
        return Cause("seccomp", f"this process runs under a seccomp profile that refuses the namespaces a jail "
                     f"needs{where} (a container runtime's default profile does)",
                     recipe(facts.runtime))  # fmt: skip
    return Cause("other", f"the kernel refused the jail's namespaces{where}",
                 f"{recipe(facts.runtime) if facts.runtime else 'run `sandboxlite doctor`'}")  # fmt: skip
