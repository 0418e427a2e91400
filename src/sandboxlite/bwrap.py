"""Plan the jail: the bwrap argv as a pure function of a config.

``build_argv`` takes everything it needs as arguments (the config, the rootfs
plan, descriptor numbers, the bwrap features found) and returns a list of
strings; it touches no files and spawns nothing, so every flag can be tested
without bwrap.  ``Sandbox`` spawns the result.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from .config import SandboxConfig
from .errors import SetupError
from .rootfs import RootfsPlan

MiB = 1 << 20

# Namespaces every sandbox unshares (net is added unless network="host").
NAMESPACE_FLAGS = (
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-uts",
    "--unshare-cgroup",
)


@dataclass(frozen=True)
class BwrapInfo:
    path: str
    version: tuple[int, ...]
    disable_userns: bool  # --disable-userns (0.8.0+)

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))


MIN_VERSION = (0, 8, 0)


@functools.lru_cache(maxsize=1)
def find_bwrap() -> BwrapInfo:
    """Locate bwrap and read its version and features (cached)."""
    path = os.environ.get("SANDBOXLITE_BWRAP") or shutil.which("bwrap")
    if not path:
        raise SetupError(
            "bubblewrap (bwrap) is not installed",
            hint="apt-get install bubblewrap   (Fedora: dnf install bubblewrap)",
        )
    if not os.access(path, os.X_OK):
        raise SetupError(
            f"bwrap at {path} is missing or not executable",
            hint="apt-get install bubblewrap, or point SANDBOXLITE_BWRAP at a working bwrap",
        )
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    version = tuple(int(x) for x in m.groups(default="0")) if m else (0, 0, 0)
    if version < MIN_VERSION:
        raise SetupError(
            f"bwrap {'.'.join(map(str, version))} at {path} is too old (sandboxlite needs 0.8.0 or newer)",
            hint="upgrade bubblewrap (Debian 12 and Ubuntu 24.04 ship 0.8.0+)",
        )
    helptext = subprocess.run([path, "--help"], capture_output=True, text=True).stdout
    return BwrapInfo(
        path=path,
        version=version,
        disable_userns="--disable-userns" in helptext,
    )


@dataclass(frozen=True)
class JailFds:
    """Descriptor numbers the bwrap process inherits."""

    ctrl: int  # our end of the control socket, as seen by the executor
    executor: int  # an O_RDONLY descriptor of the executor binary
    seccomp: int  # a pipe holding the BPF program
    info: int | None = None  # where bwrap writes {"child-pid": N} (used to attach cgroups early)
    netns: int | None = None  # a fresh network namespace the launcher joins (see netns.py): no --unshare-net


def rlimit_args(config: SandboxConfig, *, memory_by_cgroup: bool, nproc_enforced: bool) -> list[str]:
    """The executor's ``NAME=VALUE`` rlimit arguments (inherited by every command)."""
    lim = config.limits
    out = []
    out.append(f"cpu={lim.cpu_s if lim.cpu_s is not None else 'inf'}")
    if lim.memory_mb is not None and not memory_by_cgroup:
        out.append(f"as={lim.memory_mb * MiB}")
    out.append(f"fsize={lim.fsize_mb * MiB if lim.fsize_mb is not None else 'inf'}")
    if lim.pids is not None and nproc_enforced:
        out.append(f"nproc={lim.pids}")
    out.append(f"nofile={lim.nofile}")
    out.append("core=0")
    return out


def build_argv(
    config: SandboxConfig,
    plan: RootfsPlan,
    fds: JailFds,
    info: BwrapInfo,
    rlimits: list[str],
    lower: str | None = None,
    dev: str | None = None,
) -> list[str]:
    """The complete bwrap command line for ``config`` (a pure function).

    bwrap builds the outer jail: namespaces, a read-only root, /proc (with
    /proc/sys read-only) and /dev.  The executor keeps bwrap's capabilities
    *inside* the sandbox's user namespace and builds the filesystem the
    commands see (a "generation", rebuilt on reset): with ``lower`` (an image
    directory) a copy-on-write overlay root, else a bind of the read-only
    root; fresh size-capped tmpfs on /tmp, /testbed, /dev/shm (and /root
    without overlay).  Each command then drops every capability, sets
    no_new_privs and loads the seccomp filter (``seccomp=FD``) before it runs.

    ``dev``: a ready-made /dev directory of device nodes (see devnodes.py) bound
    in one step instead of bwrap's ``--dev``; the executor then mounts devpts
    in each generation and makes /dev read-only (``devdir=1``).
    """
    lim = config.limits
    argv = [info.path, *NAMESPACE_FLAGS]
    if config.network == "none" and fds.netns is None:
        argv.append("--unshare-net")
    if info.disable_userns:
        argv.append("--disable-userns")
    argv += [
        "--uid", "0", "--gid", "0",
        "--hostname", config.hostname,
        "--new-session",  # no controlling terminal: TIOCSTI cannot reach the caller's tty
        "--as-pid-1",  # the executor is init: orphans are reaped by it
        "--cap-add", "ALL",  # in the sandbox's user namespace only; commands drop them all
        "--clearenv",
        "--chdir", "/",
    ]  # fmt: skip
    if fds.info is not None:
        argv += ["--info-fd", str(fds.info)]
    if lower is None:
        for src, dst in plan.binds:
            argv += ["--ro-bind", src, dst]
        for target, path in plan.symlinks:
            argv += ["--symlink", target, path]
    else:
        argv += ["--ro-bind", lower, "/.sl/lower"]
    # a fresh /proc for the PID namespace, with /proc/sys read-only (bwrap covers
    # only irq and bus); the sysctls a process looks up there are its own namespaces'
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    argv += ["--dev-bind", dev, "/dev"] if dev is not None else ["--dev", "/dev"]
    mounted = {m.dst for m in config.mounts}
    # mount points the executor needs on the read-only root
    points = ["/.sl/gen"]
    if lower is None:
        points += ["/tmp", "/root"] + ([] if "/testbed" in mounted else ["/testbed"])
    for p in points:
        argv += ["--dir", p]
    # parents before children, so a mount inside another mount lands on top
    for m in sorted(config.mounts, key=lambda m: m.dst.count("/")):
        argv += ["--bind" if m.rw else "--ro-bind", m.src, m.dst]
    gen = [f"tmp={lim.tmp_mb * MiB}", f"testbed={0 if '/testbed' in mounted else lim.testbed_mb * MiB}"]
    if dev is not None:
        gen.append("devdir=1")
    if lower is not None:
        gen += ["lower=/.sl/lower", f"upper={lim.overlay_mb * MiB}"]
        gen += [f"bind={m.dst}" for m in sorted(config.mounts, key=lambda m: m.dst.count("/"))]
    if config.workdir not in mounted and config.workdir != "/testbed":
        writable = ["/tmp", "/dev/shm", *(m.dst for m in config.mounts if m.rw)]
        if "/testbed" not in mounted:
            writable.append("/testbed")
        if lower is not None or any(config.workdir.startswith(w + "/") for w in writable + ["/root"]):
            gen.append(f"mkdir={config.workdir}")
        else:  # a workdir of its own, writable like /testbed
            argv += ["--dir", config.workdir]
            gen.append(f"wtmpfs={config.workdir}")
    if lower is None:
        # commands see the jail's root through a bind the executor makes read-only in each generation
        # (a remount by bwrap costs ~0.2 ms: it re-reads the mount table); with an overlay they never see it
        gen.append("rootro=1")
    argv += [f"/proc/self/fd/{fds.executor}", f"ctrl={fds.ctrl}", f"exe={fds.executor}", f"seccomp={fds.seccomp}"]
    argv += gen + rlimits
    return argv
