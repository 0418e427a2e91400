"""Plan a jail: every decision of a sandbox's start, as a pure function.

``plan(config, host, rootfs, ...)`` returns a ``JailPlan``: the bwrap argv, the
launcher prefix, which descriptor goes where, the executor's generation options
and rlimits, the cgroup mode, and why each shortcut is or is not taken.  It
reads no files and spawns nothing, so every decision can be tested without bwrap
and without root (build a ``Host`` by hand).  ``launch.py`` carries a plan out.

The jail: bwrap builds the outer jail (namespaces, a read-only root, /proc with
/proc/sys read-only, /dev).  The executor, bwrap's PID 1, keeps bwrap's
capabilities *inside* the sandbox's user namespace and builds the filesystem
commands see (a "generation", rebuilt on reset): with a copy-on-write root an
overlay over the image, else a read-only bind of the jail's root; fresh
size-capped tmpfs on /tmp, /testbed, /dev/shm (and /root without overlay).
Each command then drops every capability, sets no_new_privs and loads the
seccomp filter before it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import Mount, SandboxConfig
from ..errors import ConfigError, SetupError
from ..executor.protocol import CTRL_FD
from ..images import RootfsPlan
from ..isolation import landlock
from .host import Host

MiB = 1 << 20

# Namespaces every sandbox unshares (net is added unless network="host" or a pooled one is joined).
NAMESPACE_FLAGS = ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup")

# The descriptor numbers bwrap (and the executor) get, whatever they are in this process:
# launch.py dup2s each of ours onto these (ours are all >= host.HIGH_FD, so none collide).
# LOWER_FD: the idmapped image's detached tree, for the launcher (which closes it); SNAPS_FD:
# the snapshot store's, likewise.
EXECUTOR_FD, SECCOMP_FD, INFO_FD, NETNS_FD, LOWER_FD, SNAPS_FD = 4, 5, 6, 7, 8, 9  # CTRL_FD (3) is the protocol's
FORK_DIR = "/.sl/fork"  # shared layers (Sandbox.fork without a copy), attached by the executor (sharing.c)
SNAPS_DIR = "/.sl/snaps"  # where the jail's executor finds the snapshot store's layers (commands never see it)


@dataclass(frozen=True)
class Slot:
    """What a root caller's sandbox gets of its own (slots.py): the host uid it runs as, the
    ready-made /dev made for that uid, and whether its image comes idmapped to it (idmap.py)."""

    uid: int
    gid: int
    dev: str | None
    idmapped: bool


@dataclass(frozen=True)
class CgroupPlan:
    """How the jail gets its memory and pids limits.

    mode: ``"off"`` (rlimits only: ``reason`` says why), ``"attach"`` (the host moves the
    jail's init into a new group after bwrap cloned it) or ``"launcher"`` (a root caller's
    launcher joins cgroup v1 groups itself before it executes bwrap: cheaper on v1).
    """

    mode: str
    kind: str | None
    memory_bytes: int | None
    pids: int | None
    reason: str


@dataclass(frozen=True)
class JailPlan:
    """Everything ``launch()`` does, decided.

    ``program`` is spawned with ``spawn_argv(...)``: bwrap itself, or for a root caller the
    launcher, which joins the cgroup v1 groups and the pooled network namespace, drops to
    ``run_as`` and executes bwrap.  ``fds`` maps each descriptor role to its number in bwrap.
    """

    config: SandboxConfig
    rootfs: RootfsPlan
    argv: tuple[str, ...]
    program: str
    launcher: tuple[str, ...]
    run_as: tuple[int, int] | None
    fds: tuple[tuple[str, int], ...]
    generation: tuple[str, ...]
    rlimits: tuple[str, ...]
    cgroup: CgroupPlan
    copy_on_write: bool
    cow_reason: str
    dev: str | None
    dev_reason: str
    netns: str  # "host" (network="host"), "pooled" (made ahead of time) or "bwrap"
    idmapped: bool = False  # the image comes as a tree the launcher attaches at ``stage``
    stage: str = ""
    # snapshots: the store bound at SNAPS_DIR (the host path, or for an idmapped store the stage the
    # launcher attaches its tree at: ``snaps_idmapped``) and the first generation's layers, top first
    snaps: str = ""
    snaps_idmapped: bool = False
    layers: tuple[str, ...] = ()
    memfd: bool = True  # memfd_create and shmget offered (only where a memory cgroup counts them: seccomp.py)
    # where commands start and relative paths resolve: config.workdir with namespaces; with
    # isolation="landlock" a directory of the sandbox's own on the host (paths are the host's)
    workdir_path: str = ""
    isolation: str = "namespaces"  # or "landlock": ``program`` is the executor itself (plan_landlock)
    env: tuple[tuple[str, str], ...] = ()  # on top of base_env: a Landlock sandbox's HOME and TMPDIR
    sockets: bool = True  # socket(2) offered (a Landlock sandbox without network has none: seccomp.py)

    @property
    def workdir(self) -> str:
        return self.workdir_path or self.config.workdir

    def spawn_argv(self, tasks_files: tuple[str, ...] | list[str] = ()) -> list[str]:
        """The argv to spawn ``program`` with (``tasks_files``: cgroup v1 groups the launcher joins)."""
        if not self.launcher:
            return list(self.argv)
        assert self.run_as is not None
        tree = ["-m", str(LOWER_FD), self.stage] if self.idmapped else []
        if self.snaps_idmapped:
            tree += ["-m", str(SNAPS_FD), self.snaps]
        joins = [x for f in tasks_files for x in ("-t", f)]
        net = ["-n", str(NETNS_FD)] if self.netns == "pooled" else []
        return [*self.launcher, *tree, *joins, *net, str(self.run_as[0]), str(self.run_as[1]), *self.argv]


def netns_wanted(config: SandboxConfig, host: Host) -> bool:
    """Would this sandbox join a network namespace made ahead of time (if one is ready)?"""
    return host.run_as is not None and host.netns is not None and config.network != "host"


def plan(
    config: SandboxConfig,
    host: Host,
    rootfs: RootfsPlan,
    *,
    image_owner: int | None = None,
    netns_ready: bool = False,
    slot: Slot | None = None,
    snaps: str = "",
    snaps_idmapped: bool = False,
    layers: tuple[str, ...] = (),
    defer: bool = False,
) -> JailPlan:
    """Decide the jail for ``config`` on ``host`` over ``rootfs``.

    ``image_owner``: the uid owning the image directory (a copy-on-write root needs it to be
    the jails' uid, or idmapped to it).  ``netns_ready``: a namespace made ahead of time was
    taken for this jail.  ``slot``: a root caller's sandbox's own uid (else it runs as
    ``host.run_as``).  ``snaps``: the snapshot store to bind (a host path; with ``snaps_idmapped``
    the directory the launcher attaches its idmapped tree at), ``layers``: the snapshot layers the
    first generation is built over, top first; ``defer``: none is built until the first reset (a
    fork's child, whose layers are attached first: share.py).  Raises SetupError when ``config``
    asks for what the host cannot give (cgroups="required").
    """
    config = with_host_ca(config, host)
    if host.bwrap is None:
        assert host.bwrap_error is not None
        raise SetupError(f"{host.bwrap_error.message}: namespace isolation needs it",
                         hint=f"{host.bwrap_error.hint}; or, without namespaces, isolation='landlock' "
                         "(SANDBOXLITE_ISOLATION=landlock; weaker: SECURITY.md)")  # fmt: skip
    cg = _cgroup_plan(config, host)
    run_as = (slot.uid, slot.gid) if slot is not None else host.run_as
    idmapped = slot is not None and slot.idmapped and rootfs.kind == "dir" and image_owner == host.uid
    lower, cow_reason = (host.stage, "") if idmapped else _copy_on_write(rootfs, host, image_owner, run_as)
    dev = (slot.dev if slot is not None else host.dev) if host.run_as is not None else None
    dev_reason = "" if dev else (host.dev_reason or "bwrap's --dev is used")
    if config.network == "host":
        net = "host"
    else:
        net = "pooled" if netns_ready and netns_wanted(config, host) else "bwrap"
    rlimits = rlimit_args(config, memory_by_cgroup=cg.mode != "off", nproc_enforced=True)
    workdir = _workdir_kind(config, lower)
    gen = generation_args(config, lower, dev, workdir)
    if layers and not snaps:
        raise SetupError("snapshot layers without the snapshot store (plan(snaps=...))")
    if snaps:
        gen += [f"snaps={SNAPS_DIR}", *(f"layer={name}" for name in layers)]
    if defer:
        gen.append("defer=1")
    argv = bwrap_argv(config, rootfs, host, lower=lower, dev=dev, unshare_net=net == "bwrap", workdir=workdir)
    if snaps:
        argv += ["--ro-bind", snaps, SNAPS_DIR]
    argv += [f"/proc/self/fd/{EXECUTOR_FD}", f"ctrl={CTRL_FD}", f"exe={EXECUTOR_FD}", f"seccomp={SECCOMP_FD}"]
    argv += gen + rlimits
    fds = [("ctrl", CTRL_FD), ("executor", EXECUTOR_FD), ("seccomp", SECCOMP_FD), ("info", INFO_FD)]
    if net == "pooled":
        fds.append(("netns", NETNS_FD))
    if idmapped:
        fds.append(("lower", LOWER_FD))
    if snaps_idmapped:
        fds.append(("snaps", SNAPS_FD))
    if host.run_as is not None:
        if host.launcher is None:
            raise SetupError("a root caller needs the launcher (it drops to an unprivileged uid)",
                             hint="run `sandboxlite doctor`")  # fmt: skip
        program, launcher = host.launcher[0], tuple(host.launcher[1])
    else:
        program, launcher = host.bwrap.path, ()
    return JailPlan(
        config=config, rootfs=rootfs, argv=tuple(argv), program=program, launcher=launcher,
        run_as=run_as, fds=tuple(fds), generation=tuple(gen), rlimits=tuple(rlimits), cgroup=cg,
        copy_on_write=lower is not None, cow_reason=cow_reason, dev=dev, dev_reason=dev_reason, netns=net,
        idmapped=idmapped, stage=host.stage if idmapped else "",
        snaps=snaps, snaps_idmapped=snaps_idmapped, layers=tuple(layers),
        memfd=cg.mode != "off" or config.limits.memory_mb is None,
    )  # fmt: skip


# where a sandbox with an allowlist finds the host's CA certificates: Debian's bundle, which
# OpenSSL, curl, Debian's pip and requests read
SANDBOX_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def with_host_ca(config: SandboxConfig, host: Host) -> SandboxConfig:
    """``config``, plus a read-only mount of the host's CA bundle over the image's when the
    sandbox has an allowlist (its traffic leaves through the host's network, and is trusted as
    the host trusts it) and the caller mounts nothing there."""
    if config.policy is None or host.ca_bundle is None or any(m.dst == SANDBOX_CA_BUNDLE for m in config.mounts):
        return config
    return config.replace(mounts=(*config.mounts, Mount(host.ca_bundle, SANDBOX_CA_BUNDLE)))


def plan_landlock(config: SandboxConfig, host: Host, rootfs: RootfsPlan, places: "landlock.Places",
                  run_as: tuple[int, int] | None = None) -> JailPlan:  # fmt: skip
    """Decide a Landlock sandbox (isolation="landlock": no bwrap, no namespaces) for ``config``.

    The executor is spawned directly (a root caller's launcher first drops to ``run_as``), with
    the paths it may read (``landlock.READ_ONLY``, read-only mounts), write (``places``, its own,
    and read-write mounts) and the device files it may open; the rest is refused.  Raises
    ConfigError for what needs a mount namespace: an image, a workdir other than /testbed (it is
    ``places.workdir``), a mount whose destination differs from its source.
    """
    check_landlock(config)
    if host.landlock_abi < landlock.MIN_ABI:
        raise SetupError(
            f"isolation='landlock' needs Landlock ABI {landlock.MIN_ABI} (Linux 6.12), this host has "
            + (f"ABI {host.landlock_abi}" if host.landlock_abi else f"none ({host.landlock_reason})"),
            hint="use namespaces (isolation='namespaces'; in a container, the recipe `sandboxlite doctor` prints)",
        )
    cg = _cgroup_plan(config, host)
    exe = f"/proc/self/fd/{EXECUTOR_FD}"
    argv = [exe, f"ctrl={CTRL_FD}", f"exe={EXECUTOR_FD}", f"seccomp={SECCOMP_FD}", "landlock=1"]
    if config.network == "host":
        argv.append("net=1")
    argv += [f"ro={p}" for p in landlock.READ_ONLY]
    argv += [f"{'rw' if m.rw else 'ro'}={m.src}" for m in config.mounts]
    argv += [f"own={p}" for p in places.own]
    argv += [f"devrw={p}" for p in landlock.DEVICES]
    # RLIMIT_NPROC counts every process of the uid: the caller's own too when the sandbox runs as it
    rlimits = rlimit_args(config, memory_by_cgroup=cg.mode != "off", nproc_enforced=True)
    argv += rlimits
    fds = (("ctrl", CTRL_FD), ("executor", EXECUTOR_FD), ("seccomp", SECCOMP_FD))
    if run_as is not None:
        if host.launcher is None:
            raise SetupError("a root caller needs the launcher (it drops to an unprivileged uid)",
                             hint="run `sandboxlite doctor`")  # fmt: skip
        program, launcher = host.launcher[0], tuple(host.launcher[1])
    else:
        program, launcher = exe, ()
    return JailPlan(
        config=config, rootfs=rootfs, argv=tuple(argv), program=program, launcher=launcher, run_as=run_as,
        fds=fds, generation=(), rlimits=tuple(rlimits), cgroup=cg, copy_on_write=False,
        cow_reason="isolation='landlock' has no copy-on-write root: the host's files are read-only, the "
        "sandbox writes in its own directories (workdir, TMPDIR, HOME)",
        dev=None, dev_reason="the host's /dev: only " + ", ".join(landlock.DEVICES) + " can be opened",
        netns="host" if config.network == "host" else "none",
        memfd=cg.mode != "off" or config.limits.memory_mb is None,
        workdir_path=places.workdir, isolation="landlock", env=tuple(places.env().items()),
        sockets=config.network == "host",
    )  # fmt: skip


def check_landlock(config: SandboxConfig) -> None:
    """ConfigError for what a Landlock sandbox cannot do (it has no mount or network namespace)."""
    if config.policy is not None or config.expose:
        what = f"network={config.network!r}" if config.policy is not None else "expose="
        raise ConfigError("network" if config.policy is not None else "expose",
                          f"isolation='landlock' has no network namespace of its own, which {what} needs "
                          "(the proxy's port and the exposed servers would be the host's loopback)",
                          hint="use namespaces (isolation='namespaces'), or network='none' / 'host' "
                          "with Landlock")  # fmt: skip
    if config.rootfs not in ("auto", "host"):
        raise ConfigError("rootfs", f"isolation='landlock' runs over the host's own files (no mount namespace to put "
                          f"an image at /), got rootfs={config.rootfs!r}",
                          hint="use rootfs='host' (or 'auto'), and install what the sandbox needs on the host "
                          "or in the container image; or use namespaces for images")  # fmt: skip
    if config.user is not None:
        raise ConfigError("user", "isolation='landlock' runs commands as the sandbox's own host uid (no user "
                          f"namespace to map another id), got user={config.user!r}",
                          hint="use namespaces (isolation='namespaces') to run as an image's user")  # fmt: skip
    if config.workdir != "/testbed":
        raise ConfigError("workdir", f"isolation='landlock' gives each sandbox a workdir of its own on the host "
                          f"(Sandbox.workdir), it cannot be placed at {config.workdir}",
                          hint="leave workdir at its default, and take the path from Sandbox.workdir")  # fmt: skip
    for m in config.mounts:
        if m.dst != m.src:
            raise ConfigError("mounts", f"isolation='landlock' cannot show {m.src} at {m.dst} (no mount namespace): "
                              "a mount there grants access to a host path at its own place",
                              hint=f"use Mount({m.src!r}, {m.src!r}{', rw=True' if m.rw else ''}), or copy files in "
                              "with Sandbox.upload()")  # fmt: skip


def _cgroup_plan(config: SandboxConfig, host: Host) -> CgroupPlan:
    lim = config.limits
    mem = lim.memory_mb * MiB if lim.memory_mb is not None else None
    if config.cgroups == "off":
        return CgroupPlan("off", None, mem, lim.pids, "disabled by config")
    support = host.cgroups
    if support.kind is None:
        if config.cgroups == "required":
            raise SetupError(f"cgroups are required but unavailable: {support.reason}", hint="run `sandboxlite doctor`")
        return CgroupPlan("off", None, mem, lim.pids, support.reason)
    # A root caller's launcher joins cgroup v1 groups itself, before it executes bwrap (cheap:
    # see launcher_x86_64.c); otherwise the jail's init is attached from the host.
    if host.run_as is not None and support.kind == "v1":
        return CgroupPlan("launcher", "v1", mem, lim.pids, "cgroup v1: the launcher joins the groups")
    return CgroupPlan("attach", support.kind, mem, lim.pids, f"cgroup {support.kind}: the jail's init is moved in")


def _copy_on_write(rootfs: RootfsPlan, host: Host, owner: int | None,
                   run_as: tuple[int, int] | None) -> tuple[str | None, str]:  # fmt: skip
    """The image to put a copy-on-write overlay over (or None), and why not."""
    if rootfs.kind != "dir":
        return None, "rootfs 'host' has no copy-on-write layer: only /tmp, /testbed and /root are writable"
    uid = run_as[0] if run_as is not None else host.euid
    if owner != uid:
        # overlayfs copies a file up as its owner: in a user namespace that only maps
        # the jails' uid, a file owned by anyone else cannot be copied (EOVERFLOW/EACCES)
        return None, (
            f"the image is owned by uid {owner}, not by the sandbox's host uid {uid}: "
            "only /tmp, /testbed and /root are writable (sandboxlite rootfs build/import give "
            "images the right owner)"
        )
    return rootfs.path, ""


def rlimit_args(config: SandboxConfig, *, memory_by_cgroup: bool, nproc_enforced: bool) -> list[str]:
    """The executor's ``NAME=VALUE`` rlimit options (inherited by every command)."""
    lim = config.limits
    out = [f"cpu={lim.cpu_s if lim.cpu_s is not None else 'inf'}"]
    if lim.memory_mb is not None and not memory_by_cgroup:
        out.append(f"as={lim.memory_mb * MiB}")
    out.append(f"fsize={lim.fsize_mb * MiB if lim.fsize_mb is not None else 'inf'}")
    if lim.pids is not None and nproc_enforced:
        out.append(f"nproc={lim.pids}")
    out.append(f"nofile={lim.nofile}")
    out.append("core=0")
    return out


def generation_args(config: SandboxConfig, lower: str | None, dev: str | None, workdir: str | None) -> list[str]:
    """The executor's options for each generation of the sandbox's filesystem (``workdir``: how
    the workdir is made writable, see ``_workdir_kind``)."""
    lim = config.limits
    mounted = {m.dst for m in config.mounts}
    gen = [f"tmp={lim.tmp_mb * MiB}", f"testbed={0 if '/testbed' in mounted else lim.testbed_mb * MiB}"]
    gen.append(f"ptys={lim.ptys}")  # every generation gets a devpts instance of its own, this big
    if dev is not None:  # a ready-made /dev: the executor makes /dev read-only
        gen.append("devdir=1")
    if lower is not None:
        gen += ["lower=/.sl/lower", f"upper={lim.overlay_mb * MiB}"]
        gen += [f"bind={m.dst}" for m in _depth_order(config)]
    if workdir == "mkdir":
        gen.append(f"mkdir={config.workdir}")
    elif workdir == "wtmpfs":
        gen.append(f"wtmpfs={config.workdir}")
    if lower is None:
        # commands see the jail's root through a bind the executor makes read-only in each generation
        # (a remount by bwrap costs ~0.2 ms: it re-reads the mount table); with an overlay they never see it
        gen.append("rootro=1")
    return gen


def bwrap_argv(
    config: SandboxConfig, rootfs: RootfsPlan, host: Host, *, lower: str | None, dev: str | None, unshare_net: bool,
    workdir: str | None,
) -> list[str]:
    """bwrap's own options (the executor's command line follows them)."""
    argv = [host.bwrap.path, *NAMESPACE_FLAGS]
    if unshare_net:
        argv.append("--unshare-net")
    if host.bwrap.disable_userns:
        argv.append("--disable-userns")
    uid, gid = rootfs.user or (0, 0)  # (a container image's User: the one id the namespace maps)
    argv += ["--uid", str(uid), "--gid", str(gid), *(("--hostname", config.hostname) if config.hostname else ())]
    argv += [
        "--new-session",  # no controlling terminal: TIOCSTI cannot reach the caller's tty
        "--as-pid-1",  # the executor is init: orphans are reaped by it
        "--cap-add", "ALL",  # in the sandbox's user namespace only; commands drop them all
        "--clearenv",
        "--chdir", "/",
        "--info-fd", str(INFO_FD),  # {"child-pid": N}: the host attaches cgroups and watches the init
    ]  # fmt: skip
    if lower is None:
        for src, dst in rootfs.binds:
            argv += ["--ro-bind", src, dst]
        for target, path in rootfs.symlinks:
            argv += ["--symlink", target, path]
    else:
        argv += ["--ro-bind", lower, "/.sl/lower"]
    # a fresh /proc for the PID namespace, with /proc/sys read-only (bwrap covers
    # only irq and bus); the sysctls a process looks up there are its own namespaces'
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    argv += ["--dev-bind", dev, "/dev"] if dev is not None else ["--dev", "/dev"]
    mounted = {m.dst for m in config.mounts}
    points = ["/.sl/gen", FORK_DIR]  # mount points the executor needs on the read-only root
    if lower is None:
        points += ["/tmp", "/root"] + ([] if "/testbed" in mounted else ["/testbed"])
    for p in points:
        argv += ["--dir", p]
    for m in _depth_order(config):  # parents before children: a mount inside another lands on top
        argv += ["--bind" if m.rw else "--ro-bind", m.src, m.dst]
    if workdir == "wtmpfs":
        argv += ["--dir", config.workdir]  # a workdir of its own, writable like /testbed
    return argv


def _depth_order(config: SandboxConfig) -> list:
    return sorted(config.mounts, key=lambda m: m.dst.count("/"))


def _workdir_kind(config: SandboxConfig, lower: str | None) -> str | None:
    """How the workdir is made writable: None (/testbed or a mount), "mkdir" (inside a writable
    place, or anywhere under a copy-on-write root) or "wtmpfs" (a tmpfs of its own)."""
    mounted = {m.dst for m in config.mounts}
    if config.workdir in mounted or config.workdir == "/testbed":
        return None
    writable = ["/tmp", "/dev/shm", *(m.dst for m in config.mounts if m.rw)]
    if "/testbed" not in mounted:
        writable.append("/testbed")
    if lower is not None or any(config.workdir.startswith(w + "/") for w in writable + ["/root"]):
        return "mkdir"
    return "wtmpfs"
