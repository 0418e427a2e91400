"""Carry out a ``JailPlan``: spawn bwrap, boot the executor, and tear the jail down.

``start(config, host)`` gathers the facts a plan needs (the rootfs, its owner,
a network namespace made ahead of time), checks what the jail's uid can reach,
plans, then ``launch()``es: descriptors are wired to the numbers the plan
names, the launcher or bwrap is spawned, the jail's init is placed in its
cgroup, and the executor's hello is awaited.  The result is a ``Jail``: the
live processes, the control channel, the phase timings of the start, and the
requests the runtime (``Sandbox``, ``Shell``) sends.

Whatever goes wrong during a start (even KeyboardInterrupt), nothing of the
jail outlives it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from .. import images
from ..images import where
from ..config import SandboxConfig, base_env, check_env_pair, resolve_path
from ..errors import ConfigError, RootfsError, SandboxCrashed, SandboxError, SetupError, SnapshotError, file_error
from ..executor.protocol import (
    MAX_REQUEST_PAYLOAD,
    SP_PID,
    SP_STATUS,
    SP_STDERR,
    SP_STDIN,
    SP_STDOUT,
    SP_TTY,
    Channel,
    Op,
    Reply,
    attach_payload,
    is_hello,
    kill_payload,
    loopback_payload,
    mkdir_payload,
    list_payload,
    open_payload,
    remove_payload,
    rename_payload,
    reset_payload,
    share_payload,
    snapshot_payload,
    spawn_payload,
    stat_payload,
    symlink_payload,
)
from ..isolation import containers, landlock
from ..isolation.identity import unreachable
from ..state.snapshot import Snapshot, image_of, release
from .cmdio import Proc
from .host import HIGH_FD, Host, move_high
from .plan import JailPlan, Slot, check_landlock, netns_wanted, plan, plan_landlock

START_TIMEOUT_S = 30.0  # bwrap + executor must say hello within this
REQUEST_TIMEOUT_S = 30.0  # a file request or a reset must be answered within this
SNAPSHOT_TIMEOUT_S = 600.0  # a snapshot copies up to its size cap (gigabytes) first
# A command's argv, environment and cwd travel in one request; execve(2) refuses far less than
# this anyway (a few MiB at most).
MAX_SPAWN_BYTES = MAX_REQUEST_PAYLOAD
_READ = 1 << 16
# Python ignores SIGPIPE and SIGXFSZ; ignored dispositions survive exec, so reset them for bwrap
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Phases of a start, in order: ``Jail.timings`` has a time stamp (time.perf_counter) for each.
#   begin -> planned: the rootfs resolved, checks, the plan      planned -> cgroup: cgroup made (launcher mode)
#   cgroup -> wired: socket and pipes          wired -> spawned: posix_spawn of the launcher or bwrap
#   spawned -> cloned: until bwrap has cloned the jail's init      cloned -> attached: cgroup (attach mode)
#   attached -> hello: bwrap's mounts, pivot_root, then the executor's start until its hello
PHASES = ("begin", "planned", "cgroup", "wired", "spawned", "cloned", "attached", "hello")


def start(config: SandboxConfig, host: Host, *, start_timeout: float = START_TIMEOUT_S,
          on_phase: Callable[[str, "Jail"], None] | None = None, snapshot: Snapshot | None = None,
          defer: bool = False) -> "Jail":  # fmt: skip
    """Plan and launch a jail for ``config`` on ``host``, its first generation over ``snapshot``
    (its layers; the jail then binds the snapshot store, and its resets may go to any snapshot).
    ``defer``: no generation until the caller's first ``start_over`` (``plan(defer=)``).

    ``on_phase(phase, jail)`` is called at "spawned" (bwrap runs) and "cloned" (bwrap said which
    pid the jail's init has): for tests that break a start half-way."""
    t0 = time.perf_counter()
    if host.isolation_for(config.isolation) == "landlock":
        if snapshot is not None:
            raise SnapshotError("isolation='landlock' has no snapshots (its writable places are host directories, "
                                "not layers a mount namespace could stack)",
                                hint="use namespaces (isolation='namespaces') for snapshots and fork()")  # fmt: skip
        return _start_landlock(config, host, start_timeout=start_timeout, on_phase=on_phase, t0=t0)
    root = images.resolve(config.rootfs)
    if config.user is not None:
        root = images.with_user(root, config.user)
    if config.rootfs == "auto" and root.kind == "host":
        host.warn_once("rootfs-auto-host", f"rootfs='auto': {images.auto_choice()[1]} (build the default "
                       f"image: sandboxlite rootfs build {images.DEFAULT_PROFILE})")  # fmt: skip
    owner = os.stat(root.path).st_uid if root.kind == "dir" else None
    image_hold = where.hold(root.name)  # a container image: `image rm` refuses it while the jail lives
    lease, slot, tree_fd, uid_note = (None, None, None, None)
    pool = net_fd = snaps_fd = None
    holds: list[int] = []
    try:
        lease, slot, tree_fd, uid_note = _take_slot(host, root, owner)
        preflight(config, root, host, slot)
        snaps, snaps_idmapped, layers = "", False, ()
        if snapshot is not None and snapshot.shared:
            raise SnapshotError(f"snapshot {snapshot} is another sandbox's writes shared by fork(n, share=True): only "
                                "the sandboxes of that fork hold it", hint="start more from it with fork() of one of "
                                "them, or keep a state with snapshot() to start sandboxes from")  # fmt: skip
        if snapshot is not None:
            snaps_store = host.snapshot_store()
            layers = snapshot.layers
            holds = snaps_store.hold(snapshot)
            if lease is not None:  # the layers are the store owner's: shown as this sandbox's uid
                assert host.idmap is not None and host.run_as is not None
                try:
                    snaps_fd = host.idmap.tree(snaps_store.layers_dir, (lease.uid, host.run_as[1]))
                except OSError as e:
                    raise SnapshotError(f"the snapshot store {snaps_store.root} cannot be idmapped ({e})",
                                        hint="keep snapshots on a filesystem with idmapped mounts (tmpfs, ext4, "
                                        "xfs, btrfs): SANDBOXLITE_SNAPSHOTS") from None  # fmt: skip
                snaps, snaps_idmapped = host.stage + "-snaps", True
            else:
                snaps = snaps_store.layers_dir
        pool = host.netns if netns_wanted(config, host) else None
        net_fd = pool.take() if pool is not None else None
        p = plan(config, host, root, image_owner=owner, netns_ready=net_fd is not None, slot=slot, snaps=snaps,
                 snaps_idmapped=snaps_idmapped, layers=layers, defer=defer)  # fmt: skip
        if snapshot is not None:
            check_snapshot_fits(snapshot, p)
        if config.cgroups == "auto" and p.cgroup.mode == "off":
            host.warn_once("cgroups-auto-off", f"cgroups='auto': no cgroups here ({p.cgroup.reason}); memory and "
                           "processes are limited by rlimits per process, tmpfs use by no limit (cgroups='required' "
                           "refuses to start instead; `sandboxlite doctor` says how to get cgroups)")  # fmt: skip
        jail = launch(p, host, net_fd=net_fd, lower_fd=tree_fd, snaps_fd=snaps_fd, start_timeout=start_timeout,
                      on_phase=on_phase, t0=t0, lease=lease)  # fmt: skip
        lease = None  # the jail gives it back when it is torn down
        jail.uid_note = uid_note
        jail.snapshot, jail._holds, holds = snapshot, holds, []
        jail._image_hold, image_hold = image_hold, None
        return jail
    finally:
        release(holds)
        if image_hold is not None:
            os.close(image_hold)
        if lease is not None:
            lease.release()
        for fd in (net_fd, tree_fd, snaps_fd):
            if fd is not None:
                os.close(fd)  # the launcher holds them now: used by this sandbox only
        if pool is not None:
            pool.refill()  # (launch() woke it already unless it failed before the spawn)


def check_snapshot_fits(snapshot: Snapshot, p: JailPlan) -> None:
    """SnapshotError when a sandbox planned as ``p`` cannot start from ``snapshot``: another image, or a
    copy-on-write layer the plan has no copy-on-write root for."""
    image = image_of(p.rootfs)
    if snapshot.rootfs and snapshot.rootfs != image:
        raise SnapshotError(f"snapshot {snapshot} was taken over the image {snapshot.rootfs}, this sandbox's is {image}",
                            hint="start it with the same rootfs")  # fmt: skip
    if snapshot.cow and not p.copy_on_write:
        raise SnapshotError(f"snapshot {snapshot} holds changes to the image, and this sandbox has no copy-on-write "
                            f"root ({p.cow_reason})", hint="start it as the snapshot's sandbox was started")  # fmt: skip


def _start_landlock(config: SandboxConfig, host: Host, *, start_timeout: float, on_phase, t0: float) -> "Jail":
    """A sandbox without namespaces (isolation="landlock"): its own directories, then the executor."""
    check_landlock(config)
    root = images.host_plan()
    lease = None
    if host.uids is not None:  # a root caller's sandbox gets a uid of its own, as with namespaces
        lease = host.uids.lease()
        run_as: tuple[int, int] | None = (lease.uid, host.run_as[1])  # type: ignore[index]
    else:
        run_as = host.run_as
    places = None
    try:
        preflight(config, root, host, Slot(run_as[0], run_as[1], None, False) if lease is not None and run_as else None)
        places = landlock.make_places(host.landlock_dir, run_as)
        p = plan_landlock(config, host, root, places, run_as)
        if config.cgroups == "auto" and p.cgroup.mode == "off":
            host.warn_once("cgroups-auto-off", f"cgroups='auto': no cgroups here ({p.cgroup.reason}); memory and "
                           "processes are limited by rlimits per process, disk use by no limit")  # fmt: skip
        jail = launch(p, host, start_timeout=start_timeout, on_phase=on_phase, t0=t0, lease=lease, places=places)
        lease = places = None  # the jail's now
        return jail
    finally:
        if places is not None:
            landlock.remove_places(places.root)
        if lease is not None:
            lease.release()


def _take_slot(host: Host, root: images.RootfsPlan, owner: int | None):
    """A root caller's uid of its own (slots.py) and its image idmapped to it: (lease, Slot, the
    idmapped tree's descriptor, a note), or (None, None, None, why the jail shares its uid)."""
    if host.uids is None:
        return None, None, None, host.uids_reason
    assert host.run_as is not None
    lease = host.uids.lease()
    tree_fd = None
    if root.kind == "dir" and owner == host.uid and host.idmap is not None:
        try:
            tree_fd = host.idmap.tree(root.path, (lease.uid, host.run_as[1]))
        except OSError as e:  # not on this filesystem or kernel: the shared uid, said so
            lease.release()
            return None, None, None, f"the image cannot be idmapped ({e}): this sandbox shares uid {host.uid} with others"
    try:
        slot = Slot(lease.uid, host.run_as[1], host.dev_for(lease.uid), tree_fd is not None)
    except BaseException:
        lease.release()
        if tree_fd is not None:
            os.close(tree_fd)
        raise
    return lease, slot, tree_fd, ""


def preflight(config: SandboxConfig, root: images.RootfsPlan, host: Host, slot: Slot | None = None) -> None:
    """What must hold before anything is opened: mount sources exist and the jails' uid reaches them."""
    for m in config.mounts:
        if not os.path.exists(m.src):
            raise ConfigError("mounts", f"host path {m.src} does not exist (for {m.dst})")
    if host.run_as is None:
        return
    uid, gid = (slot.uid, slot.gid) if slot is not None else host.run_as
    # an idmapped image is seen through its owner's permissions (the run_as user's)
    check = host.run_as[0] if slot is not None and slot.idmapped else uid
    why = unreachable(root.path, check, gid, write=False) if root.kind == "dir" else None
    if why:
        raise RootfsError(
            f"{why}: as root, sandboxes run as the unprivileged host uid {uid}",
            hint=f"give the image to uid {host.uid} (sandboxlite rootfs import, or sandboxlite rootfs chown NAME), "
            "or pick the uid with SANDBOXLITE_UID",
        )
    for m in config.mounts:
        why = unreachable(m.src, uid, gid, write=m.rw)
        if why:
            raise ConfigError(
                "mounts",
                f"{why}: as root, sandboxes run as the unprivileged host uid {uid}",
                hint=(f"make it reachable by group {gid} (chgrp {gid}; chmod g+rx{'w' if m.rw else ''}) or by "
                      f"others (chmod o+rx{'w' if m.rw else ''})" if slot is not None else
                      f"make it reachable (chmod o+rx{'w' if m.rw else ''}, or chown {uid})")
                + ", or copy files in with Sandbox.upload()",
            )


def launch(p: JailPlan, host: Host, *, net_fd: int | None = None, lower_fd: int | None = None,
           snaps_fd: int | None = None, start_timeout: float = START_TIMEOUT_S,
           on_phase: Callable[[str, "Jail"], None] | None = None, t0: float | None = None, lease=None,
           places: "landlock.Places | None" = None) -> "Jail":  # fmt: skip
    """Spawn the jail ``p`` describes and wait for its executor's hello.  ``lease``: the uid lease
    the jail runs under, ``places``: a Landlock sandbox's directories (both given back when it is
    torn down, also when this fails)."""
    jail = Jail(p)
    jail._lease = lease
    jail._places = places
    jail.timings["begin"] = time.perf_counter() if t0 is None else t0
    jail.timings["planned"] = time.perf_counter()
    if (p.netns == "pooled") != (net_fd is not None) or p.idmapped != (lower_fd is not None) \
            or p.snaps_idmapped != (snaps_fd is not None):
        jail.teardown()
        raise SetupError("the plan and the descriptors handed to launch() disagree")
    if p.cgroup.mode == "launcher":
        jail.cgroup = _new_cgroup(p, host)
    jail.timings["cgroup"] = time.perf_counter()
    ours: list[int] = []  # every descriptor opened here that the jail does not keep
    try:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.append(child.detach())
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        jail.chan = Channel(parent)
        sec_r, sec_w = os.pipe2(os.O_CLOEXEC)
        ours.append(sec_r)
        try:
            os.write(sec_w, host.seccomp_for(p.memfd, p.sockets, p.isolation != "landlock", p.config.ignore_chown))  # far below the 64 KiB pipe buffer
        finally:
            os.close(sec_w)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        jail._err_r = err_r
        ours.append(err_w)
        info_r, info_w = os.pipe2(os.O_CLOEXEC)
        jail._info_r = info_r
        ours.append(info_w)
        # all of ours sit above the jail's numbers (0..8), so the dup2s below never collide
        for i, fd in enumerate(ours):
            ours[i] = move_high(fd)
        by_role = {"ctrl": ours[0], "seccomp": ours[1], "info": ours[3], "executor": host.executor_fd()}
        for role, fd in (("netns", net_fd), ("lower", lower_fd), ("snaps", snaps_fd)):  # the caller's: copied when low
            if fd is not None:
                if fd < HIGH_FD:
                    fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
                    ours.append(fd)
                by_role[role] = fd
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, ours[2], 2),
            *((os.POSIX_SPAWN_DUP2, by_role[role], num) for role, num in p.fds),
        ]
        tasks = jail.cgroup.tasks_files() if jail.cgroup is not None else ()
        jail.timings["wired"] = time.perf_counter()
        try:
            jail.pid = os.posix_spawn(p.program, p.spawn_argv(tasks), {}, file_actions=actions, setsid=True,
                                      setsigdef=_DEFAULT_SIGNALS)  # fmt: skip
        except OSError as e:
            raise SetupError(f"could not run {p.program}: {e}",
                             hint="apt-get install bubblewrap" if p.isolation == "namespaces" else
                             "run `sandboxlite doctor`") from None  # fmt: skip
        jail.timings["spawned"] = time.perf_counter()
        if net_fd is not None and host.netns is not None:
            host.netns.refill()  # the next namespace is made while bwrap boots
        jail._pidfd = os.pidfd_open(jail.pid)
        if on_phase is not None:
            on_phase("spawned", jail)
    except BaseException:
        jail.teardown()
        raise
    finally:
        for fd in ours:
            os.close(fd)
    try:
        jail._boot(host, start_timeout, on_phase)
    except BaseException:
        jail.teardown()  # whatever went wrong (even KeyboardInterrupt), nothing of this jail may outlive it
        raise
    return jail


def _new_cgroup(p: JailPlan, host: Host):
    assert host.cgroup_allocator is not None
    try:
        return host.cgroup_allocator.create(p.cgroup.memory_bytes, p.cgroup.pids)
    except OSError as e:
        raise SetupError(
            f"could not create the sandbox's cgroup: {e}",
            hint="run `sandboxlite doctor`, or open the sandbox with cgroups='off'",
        ) from None


def diagnose(stderr: str, facts: "containers.Facts | None" = None) -> SandboxError:
    """Turn bwrap's complaint into an error that names its real cause and what to do
    (``facts``: what bears on it, read from this machine when not given)."""
    s = stderr.strip()
    low = s.lower()
    cause = containers.explain(s, facts if facts is not None else containers.Facts.read())
    if cause is not None:
        return SetupError(f"bwrap could not set up the sandbox: {cause.message} ({s})",
                          hint=f"{cause.hint}. Or, {landlock.ALTERNATIVE}. Run `sandboxlite doctor` for details.")  # fmt: skip
    if "can't find source path" in low:
        return ConfigError("mounts", f"bwrap: {s}", hint="check that every mount source exists on the host")
    if "sandboxlite-launcher:" in low:  # a root caller's launcher, before bwrap: its root-only steps
        return SetupError(f"the launcher could not prepare the sandbox: {s}",
                          hint="run `sandboxlite doctor`; SANDBOXLITE_NETNS_POOL=0 (no namespaces made ahead of time) "
                          "and SANDBOXLITE_UID_RANGE=off (no idmapped images) leave those steps out")  # fmt: skip
    if "sandboxlite-executor: landlock:" in low:  # a Landlock sandbox's executor could not confine itself
        return SetupError(f"the Landlock sandbox could not start: {s}",
                          hint="run `sandboxlite doctor` (its 'landlock mode' row); a path the plan names must exist")  # fmt: skip
    if "sandboxlite-executor:" in low:  # the jail came up; the executor could not build its filesystem
        return SetupError(f"the sandbox's executor could not set it up: {s}",
                          hint="run `sandboxlite doctor`; if it finds nothing, report this with the message")  # fmt: skip
    if "/proc/self/fd" in low or "execvp" in low:
        return SetupError(f"bwrap could not start the executor: {s}", hint="run `sandboxlite doctor`")
    return SandboxCrashed(f"the sandbox failed to start: {s or 'bwrap exited without a message'}")


def _wait_readable(fd: int, timeout_s: float) -> bool:
    """poll(2) one descriptor (select(2) fails on descriptors >= 1024)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(max(0, int(timeout_s * 1000))))


class Jail:
    """A live jail: bwrap, the executor as its init, the control channel, its cgroup.

    ``timings``: a time stamp per start phase (see PHASES).  The request methods raise
    SandboxCrashed when the executor has gone, and the file ones SandboxFileError.
    Not thread-safe: ``Sandbox`` serialises its use.
    """

    def __init__(self, p: JailPlan) -> None:
        self.plan = p
        self.env = base_env(p.config, dict(p.env) if p.isolation == "landlock" else None,  # every command's
                            p.rootfs.env)  # fmt: skip
        self._env_list = [f"{k}={v}" for k, v in self.env.items()]
        self.timings: dict[str, float] = {}
        self.chan: Channel | None = None
        self._connector: Channel | None = None  # the executor's second, LOOPBACK-only channel
        self._connector_lock = threading.Lock()
        self.cgroup = None
        self.pid: int | None = None  # bwrap's (or the launcher's, which becomes bwrap)
        self.init_pid: int | None = None
        self.executor_pid: int | None = None
        self.status: int | None = None  # bwrap's wait status once reaped
        self._pidfd: int | None = None
        self._init_pidfd: int | None = None
        self._err_r: int | None = None
        self._info_r: int | None = None
        self._lease = None  # the host uid lease (slots.py), given back once nothing runs as it
        self.snapshot: Snapshot | None = None  # what the current generation was built over (None: the image)
        self._holds: list[int] = []  # the store's locks on its layers (snapshot.Store.hold)
        self._image_hold: int | None = None  # the lock on its container image (images.where.hold)
        self._places = None  # a Landlock sandbox's directories (landlock.py), removed at teardown
        self.uid_note = ""  # why this jail shares its host uid with others (when it does)
        self._owner = os.getpid()  # a forked child holds copies: it must not tear the jail down
        self.closed = False

    # -- boot --------------------------------------------------------------------------------
    def _boot(self, host: Host, timeout: float, on_phase) -> None:
        """Learn the init's pid, place it in its cgroup, get the hello."""
        assert self.chan is not None
        # a Landlock sandbox's executor is the process spawned (the launcher executes it)
        init_pid = self.pid if self.plan.isolation == "landlock" else self._read_child_pid(timeout)
        assert init_pid is not None
        self.init_pid = init_pid
        self.timings["cloned"] = time.perf_counter()
        try:
            self._init_pidfd = os.pidfd_open(init_pid)
        except ProcessLookupError:  # already gone: the hello wait below reports why
            pass
        if on_phase is not None:
            on_phase("cloned", self)
        if self.plan.cgroup.mode == "attach":
            # while bwrap sets up the mounts: create the cgroup and move the jail's init in
            # (slow on cgroup v1: it waits for an RCU grace period).  The executor forks
            # nothing before its first request, so nothing escapes the cgroup.
            self.cgroup = _new_cgroup(self.plan, host)
            try:
                self.cgroup.attach(init_pid)
            except OSError as e:
                raise SetupError(f"could not move the sandbox into its cgroup: {e}") from None
        self.timings["attached"] = time.perf_counter()
        try:
            hello = self.chan.wait(0, time.monotonic() + timeout)
        except (SandboxCrashed, TimeoutError):
            raise diagnose(self.read_stderr(wait=True)) from None
        self.timings["hello"] = time.perf_counter()
        # only now: bwrap may still be writing the rest of its JSON (a closed pipe would kill it
        # with SIGPIPE before it lets its child go on)
        os.close(self._info_r)  # type: ignore[arg-type]
        self._info_r = None
        self.chan.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 0)
        if not is_hello(hello):
            raise SandboxCrashed(f"unexpected greeting from the executor: {hello!r}")
        if self.chan.peer_pid != init_pid:
            raise SandboxCrashed(f"the executor's pid {self.chan.peer_pid} is not the jail's init {init_pid}")
        self.executor_pid = init_pid

    def _read_child_pid(self, timeout: float) -> int:
        """bwrap writes {"child-pid": N, ...} to --info-fd right after it clones the jail's init."""
        data = b""
        deadline = time.monotonic() + timeout
        complete = re.compile(rb'"child-pid"\s*:\s*(\d+)\D')
        poller = select.poll()
        poller.register(self._info_r, select.POLLIN)
        while not complete.search(data):
            ready = poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))
            chunk = os.read(self._info_r, 4096) if ready else b""  # type: ignore[arg-type]
            if not chunk:
                break
            data += chunk
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
        if m is None:  # bwrap died (its stderr says why) or hung
            raise diagnose(self.read_stderr(wait=True))
        return int(m.group(1))

    def read_stderr(self, wait: bool = False) -> str:
        """bwrap's own stderr (only read when something went wrong)."""
        if self._err_r is None:
            return ""
        out = bytearray()
        deadline = time.monotonic() + (2.0 if wait else 0.0)
        os.set_blocking(self._err_r, False)
        while True:
            try:
                chunk = os.read(self._err_r, _READ)
            except BlockingIOError:
                if not wait or time.monotonic() > deadline:
                    break
                _wait_readable(self._err_r, deadline - time.monotonic())
                continue
            if not chunk or len(out) > _READ:
                break
            out += chunk
        return out.decode("utf-8", "replace")

    # -- life and death ------------------------------------------------------------------------
    def alive(self) -> bool:
        """Is the jail up (not torn down, its init still running)?"""
        if self.closed or self.chan is None or self.chan.closed:
            return False
        return self._init_pidfd is None or not _wait_readable(self._init_pidfd, 0)

    def teardown(self) -> None:
        """Kill the jail and free everything; safe to call more than once.  In a forked child of the
        process that started it, only the child's copies of its descriptors are closed."""
        if self.closed:
            return
        self.closed = True
        if os.getpid() != self._owner:
            self._close_copies()
            return
        if self._connector is not None:
            self._connector.close()
        if self.chan is not None:
            self.chan.close()  # the executor sees EOF and exits: the PID namespace dies with it
        if self.pid is not None and self.status is None:
            if self._pidfd is None or not _wait_readable(self._pidfd, 2.0):  # a wedged jail: kill it outright
                if self.plan.isolation == "landlock":
                    self._kill_tree()  # no PID namespace to take the executor's descendants with it
                self._kill_init()
                self._kill_bwrap()
            if self.status is None:
                _, self.status = os.waitpid(self.pid, 0)
            # bwrap waits for its child, except when it died early: then the child may be
            # stuck half-way through its setup, and must not outlive us
            if self._init_pidfd is not None and not _wait_readable(self._init_pidfd, 0):
                self._kill_init()
        self._close_own_fds()
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None
        if self._lease is not None and self.plan.isolation == "landlock" and self.status is not None \
                and not (os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0):
            self._kill_uid()  # the executor was killed: what the sandbox started was re-parented out
        if self._places is not None:
            landlock.remove_places(self._places.root)
            self._places = None
        if self._lease is not None and (self.pid is None or self.status is not None):
            self._lease.release()  # bwrap is reaped: with the PID namespace, all of the jail is gone
            self._lease = None
        release(self._holds)  # its snapshot may be removed now
        if self._image_hold is not None:
            os.close(self._image_hold)  # and its image
            self._image_hold = None

    def _close_own_fds(self) -> None:
        for name in ("_pidfd", "_init_pidfd", "_err_r", "_info_r"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)

    def _close_copies(self) -> None:
        if self._connector is not None:
            self._connector.close()
        if self.chan is not None:
            self.chan.close()  # our copies only: the executor still has the owner's end
        self._close_own_fds()
        self.cgroup = self._lease = self._places = None  # the owner's

    def __del__(self) -> None:
        # dropped without teardown() (a caller of launch() that lost it): nothing may outlive it
        try:
            self.teardown()
        except Exception:
            pass

    def _kill_bwrap(self) -> None:
        """SIGKILL bwrap, and first the children it has: a jail's init whose pid we never learned
        (the start timed out before bwrap said it) would outlive bwrap, re-parented, half set up."""
        assert self.pid is not None
        try:
            os.kill(self.pid, signal.SIGSTOP)  # it clones nothing more while we look
            pid, status = os.waitpid(self.pid, os.WUNTRACED)
            if pid and not os.WIFSTOPPED(status):
                self.status = status  # it ended on its own meanwhile
                return
            with open(f"/proc/{self.pid}/task/{self.pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except (ProcessLookupError, ChildProcessError, FileNotFoundError):
            children = []
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _kill_tree(self) -> None:
        """A Landlock sandbox whose executor does not end: SIGSTOP and SIGKILL everything below it
        (its children lists: it is a subreaper, the sandbox's orphans are its own), then it."""
        assert self.pid is not None

        def below(pid: int, depth: int) -> None:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                return
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        kids = [int(c) for c in f.read().split()]
                except (OSError, ValueError):
                    continue
                for kid in kids:
                    for sig in (signal.SIGSTOP, None, signal.SIGKILL):
                        try:
                            if sig is None:
                                if depth < 64:
                                    below(kid, depth + 1)
                            else:
                                os.kill(kid, sig)
                        except ProcessLookupError:
                            break

        try:
            os.kill(self.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        for _ in range(3):  # what was forked while we looked is found on the next round
            below(self.pid, 0)

    def _kill_uid(self) -> None:
        """Kill every process of this sandbox's own uid (a Landlock sandbox of a root caller whose
        executor died: the uid is leased to it alone, so they are all its own): the launcher drops
        to the uid and runs ``kill -KILL -1``, which spares only itself."""
        assert self._lease is not None and self.plan.launcher and self.plan.run_as is not None
        uid, gid = self.plan.run_as
        kill = "/bin/kill" if os.path.exists("/bin/kill") else "/usr/bin/kill"
        try:
            subprocess.run([self.plan.program, *self.plan.launcher[1:], str(uid), str(gid), kill, "-KILL", "-1"],
                           executable=self.plan.program, capture_output=True, timeout=10)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            pass

    def _kill_init(self) -> None:
        if self._init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def channel(self) -> Channel:
        """The control channel; SandboxCrashed once the executor has gone."""
        if self.chan is None or self.chan.closed:
            raise SandboxCrashed("the sandbox died (its init process exited)", hint="call reset() to start a fresh one")
        return self.chan

    # -- requests ------------------------------------------------------------------------------
    def regenerate(self, layers: Sequence[str] = ()) -> bool:
        """Ask the executor for a fresh generation (every process killed, every write gone), built
        over the snapshot ``layers`` (top first; they must be in the store this jail binds)."""
        chan = self.channel()
        ident = chan.new_id()
        chan.send(Op.RESET, ident, reset_payload(layers))
        f = chan.wait(ident, time.monotonic() + REQUEST_TIMEOUT_S)
        chan.clear()  # exit reports of the commands that were killed
        return f.type == Reply.OK

    def start_over(self, base: Snapshot | None, host: Host) -> bool:
        """A fresh generation over ``base`` (None: the image) in this jail; False when it takes a new
        jail (this one binds no snapshot store, or the executor could not build it)."""
        needs_store = (base is not None and base.store_layers) or (self.snapshot is not None and not self.snapshot.shared)
        if self.chan is None or self.chan.closed or (needs_store and not self.plan.snaps):
            return False
        holds = host.snapshot_store().hold(base) if base is not None else []
        try:
            if base is not None:
                check_snapshot_fits(base, self.plan)
            if not self.regenerate(base.layers if base is not None else ()):
                return False
            self.snapshot, self._holds, holds = base, holds, self._holds  # the old ones are released
            return True
        finally:
            release(holds)

    def share(self, count: int, *, kill: bool = False, layer: str | None = None) -> list[tuple[str, list[int]]]:
        """``count`` sets of detached, read-only mounts of the generation's writes, for other jails'
        ``attach`` (the executor's sharing.c): (the places' mask, its descriptors: the caller's to
        close) each.  ``kill``: every process of the sandbox is killed first.  ``layer``: sets of
        that shared layer (attached here) instead."""
        chan = self.channel()
        ident = chan.new_id()
        chan.send(Op.SHARE, ident, share_payload(count, kill, layer))
        sets: list[tuple[str, list[int]]] = []
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        try:
            while len(sets) < count:
                f = chan.wait(ident, deadline)
                if f.type == Reply.FD and len(f.payload) == 4 and len(f.fds) == f.payload.count(b"1"):
                    sets.append((f.text(), list(f.fds)))
                    continue
                for fd in f.fds:
                    os.close(fd)
                if f.type != Reply.ERROR:
                    raise SandboxCrashed(f"the executor answered a share with a {f.type.name} frame {f.payload[:16]!r}")
                err = f.number()
                if err == errno.EOPNOTSUPP:
                    raise SnapshotError("this sandbox's writes cannot be shared without a copy (isolation='landlock', "
                                        "or a kernel without open_tree(2))", hint="fork(n) copies them (share=False)")  # fmt: skip
                raise SnapshotError(f"the executor could not share the sandbox's state: {os.strerror(err)}")
        except BaseException:
            for _mask, fds in sets:
                for fd in fds:
                    os.close(fd)
            raise
        return sets

    def attach(self, name: str, mask: str, fds: list[int], *, raw: bool = False) -> None:
        """Attach a shared layer (a set from another jail's ``share``) under ``name``: then
        ``regenerate`` may stack it (``raw``: a second set, kept only to share it on).  The
        descriptors are closed."""
        try:
            chan = self.channel()
            ident = chan.new_id()
            chan.send(Op.ATTACH, ident, attach_payload(name, mask, raw), fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
            fds.clear()
        f = chan.wait(ident, time.monotonic() + REQUEST_TIMEOUT_S)
        if f.type != Reply.OK:
            err = f.number() if f.type == Reply.ERROR else errno.EIO
            raise SnapshotError(f"the sandbox could not attach another one's shared state: {os.strerror(err)}")

    def take_snapshot(self, dir_fd: int, max_bytes: int, timeout: float = SNAPSHOT_TIMEOUT_S, *,
                      layer: str | None = None) -> tuple[int, int]:  # fmt: skip
        """Have the executor copy the generation's writes into the directory ``dir_fd`` (empty),
        the sandbox's processes stopped meanwhile: (bytes, entries).  SnapshotError when processes
        would not stop, the copy is over ``max_bytes``, or the executor could not copy.
        ``layer``: copy that shared layer (attached here) instead."""
        chan = self.channel()
        ident = chan.new_id()
        chan.send(Op.SNAPSHOT, ident, snapshot_payload(max_bytes, layer), fds=[dir_fd])
        f = chan.wait(ident, time.monotonic() + timeout)
        if f.type == Reply.OK:
            text = f.text()
            if text.startswith("busy: "):
                raise SnapshotError(f"some processes of the sandbox could not be paused for a consistent snapshot: "
                                    f"{text[6:]}", hint="wait for them, or kill them, and take it again")  # fmt: skip
            try:
                size, files = (int(x) for x in text.split())
            except ValueError:
                raise SandboxCrashed(f"the executor answered a snapshot with {text!r}") from None
            return size, files
        if f.type != Reply.ERROR:
            raise SandboxCrashed(f"the executor answered a snapshot with a {f.type.name} frame")
        err = f.number()
        if err == errno.EFBIG:
            raise SnapshotError(f"the sandbox's state is larger than a snapshot may be ({max_bytes} bytes)",
                                hint="remove what is not needed first, or raise the cap (snapshot(max_bytes=...))")  # fmt: skip
        if err == errno.EOPNOTSUPP:
            raise SnapshotError("this sandbox cannot be snapshotted (isolation='landlock')",
                                hint="use namespaces (isolation='namespaces')")  # fmt: skip
        raise SnapshotError(f"the executor could not copy the sandbox's state: {os.strerror(err)}")

    def spawn(self, argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
              stdin_pipe: bool = False, status_pipe: bool = False, tty: int | None = None,
              report_pid: bool = False) -> Proc:  # fmt: skip
        """Start a command (stdout and stderr piped to us; stdin too when asked).  ``env`` is
        added to the base environment; a relative ``cwd`` starts at the workdir.
        ``status_pipe``: the command also gets a pipe to us as its fd 3 (``Proc.status_r``).
        ``tty``: a terminal's other side (opened in this jail), the command's stdin, stdout, stderr
        and controlling terminal instead of pipes (the Proc has no pipe ends, -1).
        ``report_pid``: the executor reports the command's pid (an OK frame) before its exit."""
        chan = self.channel()
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError("cmd", f"must be a shell string or a non-empty list of strings, got {argv!r}")
        workdir = self.plan.workdir
        cwd = resolve_path(cwd, workdir, "cwd") if cwd is not None else workdir
        env_list = self._env_list
        if env:
            merged = dict(self.env)
            for k, v in env.items():
                check_env_pair(k, v, "env")
                merged[k] = v
            env_list = [f"{k}={v}" for k, v in merged.items()]
        flags = SP_STDOUT | SP_STDERR | (SP_STDIN if stdin_pipe or tty is not None else 0) | (
            SP_STATUS if status_pipe else 0) | (SP_TTY if tty is not None else 0) | (SP_PID if report_pid else 0)
        try:  # checked before any pipe exists: nothing to clean up on a bad command
            payload = spawn_payload(flags, cwd, argv, env_list)
        except ValueError as e:  # a NUL byte, or a lone surrogate that UTF-8 cannot carry
            raise ConfigError("cmd", f"every argument must be text without NUL bytes: {e}") from None
        if len(payload) > MAX_SPAWN_BYTES:
            raise ConfigError(
                "cmd",
                f"the command line, environment and cwd take {len(payload)} bytes, more than a command "
                f"can be given ({MAX_SPAWN_BYTES} here; execve(2) itself allows a few MiB)",
                hint="pass big data through stdin or a file (write_file)",
            )
        if tty is not None:
            ident = chan.new_id()
            chan.send(Op.SPAWN, ident, payload, [tty, tty, tty])
            return Proc(ident, None, -1, -1)
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        ours, theirs = [out_r, err_r], [out_w, err_w]
        in_w = status_r = None
        if stdin_pipe:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            ours.append(in_w)
            theirs.insert(0, in_r)
        if status_pipe:
            status_r, status_w = os.pipe2(os.O_CLOEXEC)
            ours.append(status_r)
            theirs.append(status_w)
        ident = chan.new_id()
        try:
            chan.send(Op.SPAWN, ident, payload, theirs)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return Proc(ident, in_w, out_r, err_r, status_r)

    def kill(self, ident: int, how: str) -> None:
        """Kill a command's tree (``"all"``) or its processes newer than a pid (``"desc N"``)."""
        self.channel().send(Op.KILL, ident, kill_payload(how))

    def last_pid(self) -> int:
        """The last pid handed out in the sandbox's PID namespace."""
        chan = self.channel()
        ident = chan.new_id()
        chan.send(Op.LAST_PID, ident)
        f = chan.wait(ident, time.monotonic() + REQUEST_TIMEOUT_S)
        return f.number(0) if f.type == Reply.OK else 0

    def _request(self, op: Op, payload: bytes, path: str, fds: Sequence[int] = (),
                 timeout: float = REQUEST_TIMEOUT_S):  # fmt: skip
        chan = self.channel()
        ident = chan.new_id()
        chan.send(op, ident, payload, tuple(fds))
        try:
            f = chan.wait(ident, time.monotonic() + timeout)
        except TimeoutError:
            raise SandboxCrashed(f"the executor did not answer a file request for {path} within {timeout:g} s") from None
        if f.type == Reply.ERROR:
            raise file_error(f.number(), path)
        return f

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """A descriptor of ``path`` opened inside the jail (the caller closes it)."""
        f = self._request(Op.OPEN, open_payload(path, flags, mode), path)
        if f.type != Reply.FD or f.fd is None:
            raise SandboxCrashed(f"the executor answered an open of {path} without a descriptor")
        return f.fd

    def mkdir(self, path: str, mode: int = 0o755) -> None:
        """``mkdir -p`` inside the jail."""
        self._request(Op.MKDIR, mkdir_payload(path, mode & 0o777), path)

    def symlink(self, target: str, path: str) -> None:
        self._request(Op.SYMLINK, symlink_payload(target, path), path)

    def _stream(self, op: Op, payload: bytes, path: str, max_bytes: int) -> bytes:
        """The records of a STAT or LIST answer (protocol.py: ``stat_payload``), end to end: OK
        frames up to an empty one.  More than ``max_bytes`` of them is a broken executor."""
        chan = self.channel()
        ident = chan.new_id()
        chan.send(op, ident, payload)
        out = bytearray()
        try:
            while True:
                try:  # each frame within the timeout: a big directory takes many
                    f = chan.wait(ident, time.monotonic() + REQUEST_TIMEOUT_S)
                except TimeoutError:
                    raise SandboxCrashed(f"the executor did not answer a file request for {path}") from None
                if f.type == Reply.ERROR:
                    raise file_error(f.number(), path)
                if f.type != Reply.OK:
                    if f.fd is not None:
                        for fd in f.fds:
                            os.close(fd)
                    raise SandboxCrashed(f"the executor answered a {op.name} of {path} with a {f.type.name} frame")
                if not f.payload:
                    return bytes(out)
                out += f.payload
                if len(out) > max_bytes:
                    raise SandboxCrashed(f"the executor sent over {max_bytes} bytes for a {op.name} of {path}")
        except BaseException:
            chan.discard(ident)
            raise

    def stat(self, path: str, follow_symlinks: bool = False) -> bytes:
        """The STAT record of ``path`` inside the jail (its last name, when a link, described)."""
        return self._stream(Op.STAT, stat_payload(path, follow_symlinks), path, 16384)

    def listdir(self, path: str, max_entries: int, max_bytes: int) -> bytes:
        """The LIST records of the directory ``path`` inside the jail; E2BIG past ``max_entries``
        entries, EFBIG past ``max_bytes`` bytes of records (``SandboxFileError``)."""
        return self._stream(Op.LIST, list_payload(path, max_entries, max_bytes), path, max_bytes)

    def remove(self, path: str, recursive: bool = False, timeout: float = REQUEST_TIMEOUT_S) -> None:
        """Remove ``path`` inside the jail (a link itself, never what it points to); ``recursive``:
        a directory tree, emptied first.  ``timeout``: a big tree takes a while (the executor serves
        nothing else meanwhile)."""
        f = self._request(Op.REMOVE, remove_payload(path, recursive), path, timeout=timeout)
        if f.type != Reply.OK:
            for fd in f.fds:
                os.close(fd)
            raise SandboxCrashed(f"the executor answered a removal of {path} with a {f.type.name} frame")

    def rename(self, src: str, dst: str) -> None:
        """``renameat`` inside the jail (EXDEV across its mounts)."""
        self._request(Op.RENAME, rename_payload(src, dst), src)

    def loopback(self, how: str, port: int) -> socket.socket:
        """A TCP socket on 127.0.0.1:``port`` inside the jail's network namespace, made by its init
        and handed to us: listening (``how="listen"``, non-blocking: for a selector) or connected
        (``"connect"``, blocking, within ``REQUEST_TIMEOUT_S``).  Only we hold it, no command does.
        OSError with the errno met (EADDRINUSE, ECONNREFUSED, ...)."""
        f = self._request(Op.LOOPBACK, loopback_payload(how, port), f"127.0.0.1:{port}")
        return _loopback_socket(f, how, port)

    def open_connector(self) -> None:
        """Give the executor its second channel (protocol.py: CONNECTOR), for ``connect``."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._request(Op.CONNECTOR, b"", "the connector", [theirs.fileno()])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._connector = Channel(ours)

    def connect(self, port: int) -> socket.socket:
        """A blocking TCP connection to 127.0.0.1:``port`` inside the jail, asked for on the
        connector (``open_connector`` first): thread-safe, and it does not wait for what runs on
        the control channel (an ``exec`` in progress).  OSError as for ``loopback``."""
        with self._connector_lock:
            chan = self._connector
            if chan is None or chan.closed or self.closed:
                raise SandboxCrashed("the sandbox's connector is closed (the sandbox was closed or died)",
                                     hint="call reset() to start a fresh one")  # fmt: skip
            ident = chan.new_id()
            chan.send(Op.LOOPBACK, ident, loopback_payload("connect", port))
            try:
                f = chan.wait(ident, time.monotonic() + REQUEST_TIMEOUT_S)
            except TimeoutError:
                raise SandboxCrashed(f"the executor did not answer a connection to port {port}") from None
        if f.type == Reply.ERROR:
            raise file_error(f.number(), f"127.0.0.1:{port}")
        return _loopback_socket(f, "connect", port)


def _loopback_socket(f, how: str, port: int) -> socket.socket:
    """The socket of a LOOPBACK answer ``f``, checked to be what was asked for; a connecting one
    waited for (within ``REQUEST_TIMEOUT_S``) and made blocking."""
    if f.type != Reply.FD or f.fd is None:
        raise SandboxCrashed(f"the executor answered a loopback {how} without a descriptor")
    try:
        sock = socket.socket(fileno=f.fd)
    except OSError:
        os.close(f.fd)
        raise SandboxCrashed(f"the executor answered a loopback {how} with a descriptor that is no socket") from None
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    if sock.family != socket.AF_INET or sock.type != socket.SOCK_STREAM or bool(listening) != (how == "listen"):
        sock.close()
        raise SandboxCrashed(f"the executor answered a loopback {how} with the wrong kind of socket")
    if how == "connect":
        try:
            if not select.select([], [sock], [], REQUEST_TIMEOUT_S)[1]:
                raise OSError(errno.ETIMEDOUT, f"connecting to 127.0.0.1:{port} in the sandbox timed out")
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, f"127.0.0.1:{port} in the sandbox: {os.strerror(err)}")
        except BaseException:
            sock.close()
            raise
        sock.setblocking(True)
    return sock
