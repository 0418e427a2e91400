"""``Sandbox``: one living jail (bwrap + the executor as its PID 1).

The jail is started once; every ``exec`` asks the executor inside to fork the
command (a round trip of a fraction of a millisecond), so files and background
processes persist between commands until ``reset()`` or ``close()``.

Threads: a Sandbox may be shared between threads; its operations are
serialised by a lock.  Open several sandboxes for parallelism.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import resource
import select
import signal
import socket
import stat
import struct
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import bwrap, cgroups, devnodes, executor, netns, rootfs, seccomp
from .config import SandboxConfig, base_env, check_env_pair, check_timeout
from .errors import (
    ConfigError,
    RootfsError,
    SandboxClosed,
    SandboxCrashed,
    SandboxError,
    SetupError,
    file_error,
)
from .protocol import (
    OP_MKPARENTS,
    OP_REQ_REG,
    SP_STDERR,
    SP_STDIN,
    SP_STDOUT,
    Channel,
    strings,
)
from .result import TIMEOUT_EXIT_CODE, ExecResult, OutputBuffer, decode_status

START_TIMEOUT_S = 30.0  # bwrap + executor must say hello within this
PATH_MAX_BYTES = 4095  # the kernel's PATH_MAX, less its NUL: longer paths never resolve
# A command's argv, environment and cwd travel in one frame (the executor drops the jail on a
# frame over 64 MiB); execve(2) refuses far less than this anyway (a few MiB at most).
MAX_SPAWN_BYTES = 16 << 20
KILL_GRACE_S = 5.0  # after a kill request, the tree must be gone within this
_READ = 1 << 16
# Python ignores SIGPIPE and SIGXFSZ; ignored dispositions survive exec, so reset them for bwrap
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_executor_fd_lock = threading.Lock()
_executor_fd: int | None = None
_nofile_raised = False


def _executor_fd_get() -> int:
    global _executor_fd
    with _executor_fd_lock:
        if _executor_fd is None:
            _executor_fd = os.open(executor.executor_path(), os.O_RDONLY | os.O_CLOEXEC)
        return _executor_fd


def run_as() -> tuple[int, int] | None:
    """The unprivileged (uid, gid) a root caller's sandboxes run as; None for other callers.

    uid 0 inside a sandbox must never be the host's root: root owns /proc/sys and
    many other kernel files by plain permission bits, and RLIMIT_NPROC does not
    bind it.  SANDBOXLITE_UID / SANDBOXLITE_GID choose; by default the system user
    ``sandboxlite`` (tools/setup.sh creates it; it owns the images, which a
    copy-on-write root needs), else ``nobody``.
    """
    if os.geteuid() != 0:
        return None
    return _run_as(os.environ.get("SANDBOXLITE_UID"), os.environ.get("SANDBOXLITE_GID"))


@functools.lru_cache(maxsize=8)
def _run_as(uid: str | None, gid: str | None) -> tuple[int, int]:
    import pwd

    default = (65534, 65534)
    for name in ("sandboxlite", "nobody"):
        try:
            pw = pwd.getpwnam(name)
            default = (pw.pw_uid, pw.pw_gid)
            break
        except KeyError:
            continue
    if uid is not None:
        default = (int(uid), int(uid))
    result = (int(uid) if uid else default[0], int(gid) if gid else default[1])
    if result[0] == 0:
        raise ConfigError("SANDBOXLITE_UID", "must not be 0: sandboxes never run as the host's root")
    return result


def _unreachable(path: str, uid: int, gid: int, write: bool) -> str | None:
    """Why ``uid``/``gid`` (no supplementary groups) cannot use ``path``, or None."""

    def allowed(st: os.stat_result, bits: int) -> bool:
        if st.st_uid == uid:
            return (st.st_mode >> 6) & bits == bits
        if st.st_gid == gid:
            return (st.st_mode >> 3) & bits == bits
        return st.st_mode & bits == bits

    parts = os.path.abspath(path).split("/")[1:]
    cur = ""
    for part in parts[:-1]:
        cur += "/" + part
        st = os.stat(cur)
        if not allowed(st, 1):
            return f"{cur} is not searchable by uid {uid}"
    st = os.stat(path)
    need = 4 | (1 if stat.S_ISDIR(st.st_mode) else 0) | (2 if write else 0)
    if not allowed(st, need):
        return f"{path} is not {'writable' if write else 'readable'} by uid {uid}"
    return None


def _raise_nofile() -> None:
    """Each sandbox holds three descriptors on the host: lift the soft limit once."""
    global _nofile_raised
    if _nofile_raised:
        return
    _nofile_raised = True
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, 1 << 20), hard))
        except (ValueError, OSError):
            pass


def _wait_readable(fd: int, timeout_s: float) -> bool:
    """poll(2) one descriptor (select(2) fails on descriptors >= 1024)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return bool(p.poll(max(0, int(timeout_s * 1000))))


def _diagnose(stderr: str, config: SandboxConfig) -> SandboxError:
    """Turn bwrap's complaint into an error that says what to do."""
    s = stderr.strip()
    low = s.lower()
    if "uid map" in low or "new namespace" in low or "unshare" in low or "operation not permitted" in low:
        return SetupError(
            f"bwrap could not create the sandbox's namespaces: {s}",
            hint="enable unprivileged user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; "
            "on Ubuntu >= 23.10: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0); inside Docker, "
            "run with --security-opt seccomp=unconfined --security-opt apparmor=unconfined. "
            "Run `sandboxlite doctor` for details.",
        )
    if "can't find source path" in low:
        return ConfigError("mounts", f"bwrap: {s}", hint="check that every mount source exists on the host")
    if "/proc/self/fd" in low or "execvp" in low:
        return SetupError(f"bwrap could not start the executor: {s}", hint="run `sandboxlite doctor`")
    return SandboxCrashed(f"the sandbox failed to start: {s or 'bwrap exited without a message'}")


class Sandbox:
    """A jail you can run commands and move files in.

    >>> with Sandbox() as sb:
    ...     sb.exec("echo hi").stdout
    b'hi\\n'

    ``Sandbox(config)`` or ``Sandbox(**fields)`` (fields of ``SandboxConfig``)
    starts the jail immediately.
    """

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any) -> None:
        if config is None:
            config = SandboxConfig(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        if not isinstance(config, SandboxConfig):
            raise ConfigError("config", f"expected a SandboxConfig, got {type(config).__name__}")
        for m in config.mounts:
            if not os.path.exists(m.src):
                raise ConfigError("mounts", f"host path {m.src} does not exist (for {m.dst})")
        self.config = config
        self._lock = threading.RLock()
        self._shells: weakref.WeakSet = weakref.WeakSet()
        self._chan: Channel | None = None
        self._closed = True
        self._env = base_env(config)
        self._env_list = [f"{k}={v}" for k, v in self._env.items()]
        self.generation = 0
        self._start()

    # -- lifecycle -------------------------------------------------------------
    def _start(self) -> None:
        _raise_nofile()
        config = self.config
        info = bwrap.find_bwrap()
        plan = rootfs.resolve(config.rootfs)
        self.rootfs_plan = plan
        exe_fd = _executor_fd_get()

        support = cgroups.detect() if config.cgroups != "off" else cgroups.Support(None, "disabled by config")
        if config.cgroups == "required" and support.kind is None:
            raise SetupError(f"cgroups are required but unavailable: {support.reason}", hint="run `sandboxlite doctor`")
        use_cgroup = support.kind is not None
        self._cgroup: cgroups.Cgroup | None = None
        self.host_ids = run_as()
        if self.host_ids is not None:
            why = _unreachable(plan.path, *self.host_ids, write=False) if plan.kind == "dir" else None
            if why:
                raise RootfsError(
                    f"{why}: as root, sandboxes run as the unprivileged host uid {self.host_ids[0]}",
                    hint=f"give the image to that user (sandboxlite rootfs import, or chown -R {self.host_ids[0]}), "
                    "or pick the uid with SANDBOXLITE_UID",
                )
            for m in config.mounts:
                why = _unreachable(m.src, *self.host_ids, write=m.rw)
                if why:
                    raise ConfigError(
                        "mounts",
                        f"{why}: as root, sandboxes run as the unprivileged host uid {self.host_ids[0]}",
                        hint=f"make it reachable (chmod o+rx{'w' if m.rw else ''}, or chown {self.host_ids[0]}), "
                        "pick the uid with SANDBOXLITE_UID, or copy files in with Sandbox.upload()",
                    )
        rlimits = bwrap.rlimit_args(
            config,
            memory_by_cgroup=use_cgroup,
            nproc_enforced=True,  # the jail's uid is never host root, so RLIMIT_NPROC binds
        )

        # decided before anything below exists (a bad setting raises with nothing to clean up):
        # a root caller's jail gets a ready-made /dev (devnodes.py) and a network namespace made
        # ahead of time, which its launcher joins (netns.py)
        lower = self._copy_on_write_lower(plan)
        dev = devnodes.prepare() if self.host_ids is not None else None
        self._dev = dev
        nets = netns.pool() if self.host_ids is not None and config.network == "none" else None

        # A root caller's launcher joins cgroup v1 groups itself, before it executes bwrap
        # (cheap: see launcher_x86_64.c); otherwise the jail's init is attached from here.
        join_early = use_cgroup and self.host_ids is not None and support.kind == "v1"
        if join_early:
            self._create_cgroup(support)

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        parent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sec_fd = seccomp.filter_fd()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        info_r, info_w = os.pipe2(os.O_CLOEXEC)
        net_fd = nets.take() if nets is not None else None
        self._netns_pooled = net_fd is not None
        fds = bwrap.JailFds(ctrl=child.fileno(), executor=exe_fd, seccomp=sec_fd, info=info_w, netns=net_fd)
        try:
            argv = bwrap.build_argv(config, plan, fds, info, rlimits, lower, dev)
            self.argv = argv
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
                # dup2 onto itself clears FD_CLOEXEC: these three reach bwrap
                (os.POSIX_SPAWN_DUP2, fds.ctrl, fds.ctrl),
                (os.POSIX_SPAWN_DUP2, fds.executor, fds.executor),
                (os.POSIX_SPAWN_DUP2, fds.seccomp, fds.seccomp),
                (os.POSIX_SPAWN_DUP2, info_w, info_w),
            ]
            if net_fd is not None:
                actions.append((os.POSIX_SPAWN_DUP2, net_fd, net_fd))
            path, spawn_argv = info.path, argv
            if self.host_ids is not None:  # drop to the unprivileged uid, then exec bwrap
                prog, prefix = executor.launcher()
                path = str(prog)
                joins = [x for f in self._cgroup.tasks_files() for x in ("-t", f)] if join_early else []
                if net_fd is not None:
                    joins += ["-n", str(net_fd)]
                spawn_argv = [*prefix, *joins, str(self.host_ids[0]), str(self.host_ids[1]), *argv]
            try:
                pid = os.posix_spawn(
                    path, spawn_argv, {}, file_actions=actions, setsid=True, setsigdef=_DEFAULT_SIGNALS
                )
            except OSError as e:
                raise SetupError(f"could not run {info.path}: {e}", hint="apt-get install bubblewrap") from None
        except BaseException:
            os.close(err_r)
            os.close(info_r)
            parent.close()
            if self._cgroup is not None:
                self._cgroup.destroy()
                self._cgroup = None
            raise
        finally:
            os.close(err_w)
            os.close(sec_fd)
            if net_fd is not None:
                os.close(net_fd)  # the launcher holds it now: used by this sandbox only
            child.close()
            os.close(info_w)

        self._bwrap_pid = pid
        self._bwrap_status: int | None = None
        self._pidfd = os.pidfd_open(pid)
        self._init_pidfd: int | None = None  # the jail's init (bwrap's child, then the executor)
        self._err_r = err_r
        self._chan = Channel(parent)
        self._closed = False
        try:
            self._boot(info_r, support if use_cgroup and not join_early else None)
        except BaseException:
            # whatever went wrong (even KeyboardInterrupt), nothing of this jail may outlive it
            self._teardown()
            raise
        finally:
            os.close(info_r)  # only now: bwrap may still be writing the rest of its JSON

    def _boot(self, info_r: int, support: cgroups.Support | None) -> None:
        """Wait for the jail to come up: learn its pid, place it in its cgroup, get the hello."""
        init_pid = self._read_child_pid(info_r)
        try:
            self._init_pidfd = os.pidfd_open(init_pid)
        except ProcessLookupError:  # already gone: the hello wait below reports why
            pass
        if support is not None:
            # while bwrap sets up the mounts: create the cgroup and move the jail's init
            # in (slow on cgroup v1: it waits for an RCU grace period).  The executor
            # forks nothing before its first request, so nothing escapes the cgroup.
            self._attach_cgroup(support, init_pid)
        try:
            hello = self._chan.wait(0, time.monotonic() + START_TIMEOUT_S)
        except (SandboxCrashed, TimeoutError):
            raise _diagnose(self._read_stderr(wait=True), self.config) from None
        self._chan.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 0)
        if hello.type != "H" or not hello.payload.startswith(b"sandboxlite-executor"):
            raise SandboxCrashed(f"unexpected greeting from the executor: {hello!r}")
        peer = self._chan.peer_pid
        if peer != init_pid:
            raise SandboxCrashed(f"the executor's pid {peer} is not the jail's init {init_pid}")
        self._executor_pid = peer

    def _read_child_pid(self, info_r: int) -> int:
        """bwrap writes {"child-pid": N, ...} to --info-fd right after it clones the jail's init."""
        data = b""
        deadline = time.monotonic() + START_TIMEOUT_S
        complete = re.compile(rb'"child-pid"\s*:\s*(\d+)\D')
        poller = select.poll()
        poller.register(info_r, select.POLLIN)
        while not complete.search(data):
            ready = poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))
            chunk = os.read(info_r, 4096) if ready else b""
            if not chunk:
                break
            data += chunk
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
        if m is None:  # bwrap died (its stderr says why) or hung
            raise _diagnose(self._read_stderr(wait=True), self.config)
        return int(m.group(1))

    def _copy_on_write_lower(self, plan: rootfs.RootfsPlan) -> str | None:
        """The image to put a copy-on-write overlay over, or None (and why, in self.cow_reason)."""
        host_uid = self.host_ids[0] if self.host_ids else os.geteuid()
        if plan.kind != "dir":
            self.cow_reason = "rootfs 'host' has no copy-on-write layer: only /tmp, /testbed and /root are writable"
            return None
        owner = os.stat(plan.path).st_uid
        if owner != host_uid:
            # overlayfs copies a file up as its owner: in a user namespace that only maps
            # host_uid, a file owned by anyone else cannot be copied (EOVERFLOW/EACCES)
            self.cow_reason = (
                f"the image is owned by uid {owner}, not by the sandbox's host uid {host_uid}: "
                "only /tmp, /testbed and /root are writable (sandboxlite rootfs build/import give "
                "images the right owner)"
            )
            return None
        self.cow_reason = ""
        return plan.path

    def _attach_cgroup(self, support: cgroups.Support, pid: int) -> None:
        self._create_cgroup(support)
        assert self._cgroup is not None
        try:
            self._cgroup.attach(pid)
        except OSError as e:
            raise SetupError(f"could not move the sandbox into its cgroup: {e}") from None

    def _create_cgroup(self, support: cgroups.Support) -> None:
        lim = self.config.limits
        mem = lim.memory_mb * bwrap.MiB if lim.memory_mb is not None else None
        try:
            self._cgroup = cgroups.Cgroup.create(support, mem, lim.pids)
        except OSError as e:
            raise SetupError(
                f"could not create the sandbox's cgroup: {e}",
                hint="run `sandboxlite doctor`, or open the sandbox with cgroups='off'",
            ) from None

    def _read_stderr(self, wait: bool = False) -> str:
        """bwrap's own stderr (only read when something went wrong, or at close)."""
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

    def _teardown(self) -> None:
        """Kill the jail and free everything; safe to call more than once."""
        self._closed = True
        if self._chan is not None:
            self._chan.close()  # executor sees EOF and exits: the PID namespace dies with it
        if self._bwrap_status is None:
            if not _wait_readable(self._pidfd, 2.0):  # a wedged jail: kill it outright
                self._kill_init()
                try:
                    os.kill(self._bwrap_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _, self._bwrap_status = os.waitpid(self._bwrap_pid, 0)
            # bwrap waits for its child, except when it died early: then the child may be
            # stuck half-way through its setup, and must not outlive us
            if self._init_pidfd is not None and not _wait_readable(self._init_pidfd, 0):
                self._kill_init()
            os.close(self._pidfd)
            os.close(self._err_r)
            if self._init_pidfd is not None:
                os.close(self._init_pidfd)
                self._init_pidfd = None
        if self._cgroup is not None:
            self._cgroup.destroy()
            self._cgroup = None

    def _kill_init(self) -> None:
        if self._init_pidfd is not None:
            try:
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Kill every process in the sandbox and release it.  Idempotent."""
        with self._lock:
            if self._closed and self._chan is None:
                return
            for sh in list(self._shells):
                sh._detach()
            self._teardown()
            self._chan = None

    def reset(self) -> None:
        """Back to pristine: every process killed, every write discarded.

        The executor rebuilds the sandbox's filesystem (fresh /tmp, /testbed,
        /root and copy-on-write layer) inside the same jail, in about a
        millisecond; if that fails the jail is replaced.
        """
        with self._lock:
            for sh in list(self._shells):
                sh._detach()
            chan = self._chan
            if not self._closed and chan is not None and not chan.closed:
                try:
                    ident = chan.new_id()
                    chan.send("Z", ident)
                    f = chan.wait(ident, time.monotonic() + START_TIMEOUT_S)
                    chan.clear()  # exit reports of the commands that were killed
                    if f.type == "R":
                        self.generation += 1
                        return
                except (SandboxCrashed, TimeoutError):
                    pass
            self.close()
            self._start()
            self.generation += 1

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"pid={getattr(self, '_executor_pid', None)}"
        return f"<Sandbox rootfs={self.config.rootfs!r} {state}>"

    @property
    def closed(self) -> bool:
        return self._closed

    def alive(self) -> bool:
        """Is the jail up (not closed, its init still running)?"""
        if self._closed or self._chan is None or self._chan.closed:
            return False
        return self._init_pidfd is None or not _wait_readable(self._init_pidfd, 0)

    @property
    def executor_pid(self) -> int | None:
        """Host pid of the executor (PID 1 inside the sandbox)."""
        return None if self._closed else self._executor_pid

    @property
    def bwrap_pid(self) -> int | None:
        return None if self._closed else self._bwrap_pid

    @property
    def info(self) -> dict[str, Any]:
        """What this sandbox is and which protections are active."""
        lim = self.config.limits
        cg = self._cgroup
        return {
            "rootfs": self.rootfs_plan.name,
            "host_uid": self.host_ids[0] if self.host_ids else os.geteuid(),
            "rootfs_kind": self.rootfs_plan.kind,
            "network": self.config.network,
            "netns": "host" if self.config.network == "host" else (
                "made ahead of time (netns pool)" if getattr(self, "_netns_pooled", False) else "made by bwrap"),
            "dev": f"ready-made ({self._dev}, read-only)" if getattr(self, "_dev", None) else "bwrap --dev",
            "workdir": self.config.workdir,
            "cgroup": [str(d) for d in cg.dirs] if cg else None,
            "memory_limit": f"cgroup {lim.memory_mb} MiB" if cg and lim.memory_mb else (
                f"RLIMIT_AS {lim.memory_mb} MiB" if lim.memory_mb else "none"),
            "pids_limit": f"cgroup {lim.pids}" if cg and lim.pids else (f"RLIMIT_NPROC {lim.pids}" if lim.pids else "none"),
            "copy_on_write_root": not self.cow_reason,
            "copy_on_write_note": self.cow_reason,
            "executor_pid": self.executor_pid,
            "bwrap_pid": self.bwrap_pid,
            "generation": self.generation,
        }

    def _require_open(self) -> Channel:
        if self._closed or self._chan is None:
            raise SandboxClosed()
        if self._chan.closed:
            raise SandboxCrashed(
                "the sandbox died (its init process exited)", hint="call reset() to start a fresh one"
            )
        return self._chan

    # -- processes ----------------------------------------------------------------
    def _abs(self, path: str | os.PathLike, field: str = "path") -> str:
        p = os.fspath(path)
        if not isinstance(p, str) or not p or "\0" in p:
            raise ConfigError(field, f"must be a non-empty path without NUL bytes, got {path!r}")
        try:
            size = len(p.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError as e:
            raise ConfigError(field, f"is not valid text ({e.reason} at position {e.start}): {path!r}") from None
        p = p if p.startswith("/") else os.path.join(self.config.workdir, p)
        if size > PATH_MAX_BYTES or len(p) > PATH_MAX_BYTES:
            raise file_error(errno.ENAMETOOLONG, p[:200] + "...", f"path is {size} bytes, over PATH_MAX")
        return p

    def _command_env(self, env: Mapping[str, str] | None) -> list[str]:
        if not env:  # the common case, on every exec: computed once
            return self._env_list
        merged = dict(self._env)
        for k, v in env.items():
            check_env_pair(k, v, "env")
            merged[k] = v
        return [f"{k}={v}" for k, v in merged.items()]

    def _spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin_pipe: bool,
    ) -> "_Proc":
        chan = self._require_open()
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError("cmd", f"must be a shell string or a non-empty list of strings, got {argv!r}")
        payload_env = self._command_env(env)
        cwd = self._abs(cwd, "cwd") if cwd is not None else self.config.workdir
        flags = SP_STDOUT | SP_STDERR | (SP_STDIN if stdin_pipe else 0)
        try:  # checked before any pipe exists: nothing to clean up on a bad command
            payload = strings(str(flags), cwd, str(len(argv)), *argv, *payload_env)
        except ValueError as e:  # a NUL byte, or a lone surrogate that UTF-8 cannot carry
            raise ConfigError("cmd", f"every argument must be text without NUL bytes: {e}") from None
        if len(payload) > MAX_SPAWN_BYTES:
            raise ConfigError(
                "cmd",
                f"the command line, environment and cwd take {len(payload)} bytes, more than a command "
                f"can be given ({MAX_SPAWN_BYTES} here; execve(2) itself allows a few MiB)",
                hint="pass big data through stdin or a file (write_file)",
            )
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        ours, theirs = [out_r, err_r], [out_w, err_w]
        in_w = None
        if stdin_pipe:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
            ours.append(in_w)
            theirs.insert(0, in_r)
        ident = chan.new_id()
        try:
            chan.send("S", ident, payload, theirs)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return _Proc(ident, in_w, out_r, err_r)

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
    ) -> ExecResult:
        """Run one command to completion and return what it did.

        ``cmd`` is an argv list (run directly, PATH-searched) or a shell string
        (run by ``/bin/sh -c``).  The command finishes when its main process
        exits; processes it started in the background live on (their output
        is discarded) until ``reset()`` or ``close()``.  On timeout the command
        and everything it started, daemons included, are killed, and the
        output so far is returned with ``timed_out=True`` and exit code 124.
        """
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        timeout = check_timeout(self.config.limits.timeout_s if timeout is None else timeout)
        try:
            data = stdin.encode("utf-8", "surrogateescape") if isinstance(stdin, str) else stdin
        except UnicodeEncodeError as e:
            raise ConfigError("stdin", f"is not valid text: {e.reason} at position {e.start}") from None
        with self._lock:
            start = time.monotonic()
            proc = self._spawn(argv, cwd=cwd, env=env, stdin_pipe=data is not None)
            try:
                return self._collect(proc, data, start, start + timeout)
            except BaseException:  # Ctrl-C (or any error) while waiting: the command goes too
                if self._chan is not None and not self._chan.closed:
                    try:
                        self._chan.send("K", proc.id, b"all")
                    except SandboxError:
                        pass
                raise

    def _collect(self, proc: "_Proc", data: bytes | None, start: float, deadline: float) -> ExecResult:
        chan = self._chan
        assert chan is not None
        cap = self.config.limits.output_bytes
        out, err = OutputBuffer(cap), OutputBuffer(cap)
        bufs = {proc.out_r: out, proc.err_r: err}
        open_fds = {proc.out_r, proc.err_r}
        poller = select.poll()
        poller.register(chan.fileno(), select.POLLIN)
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        pending = memoryview(data) if data else None
        if proc.in_w is not None:
            if pending:
                os.set_blocking(proc.in_w, False)
                poller.register(proc.in_w, select.POLLOUT)
            else:
                os.close(proc.in_w)
                proc.in_w = None
        status: int | None = None
        spawn_errno: int | None = None
        killed_at: float | None = None
        try:
            while True:
                f = chan.take(proc.id)
                while f is not None:
                    if f.type == "X":
                        status = int(f.payload)
                    elif f.type == "E":
                        spawn_errno = int(f.payload)
                    f = chan.take(proc.id)
                if status is not None or spawn_errno is not None:
                    break
                now = time.monotonic()
                if killed_at is None and now >= deadline:
                    chan.send("K", proc.id, b"all")
                    killed_at = now
                if killed_at is not None and now - killed_at > KILL_GRACE_S:
                    raise SandboxCrashed("a timed-out command could not be killed within 5 s")
                wait_s = (deadline if killed_at is None else killed_at + KILL_GRACE_S) - now
                for fd, ev in poller.poll(max(0, int(wait_s * 1000) + 1)):
                    if fd == chan.fileno():
                        if not chan.pump():
                            raise SandboxCrashed(
                                "the sandbox died during a command", hint="call reset() to start a fresh one"
                            )
                    elif fd == proc.in_w:
                        try:
                            n = os.write(fd, pending[:_READ])
                            pending = pending[n:]
                        except (BrokenPipeError, OSError):
                            pending = None
                        if not pending:
                            poller.unregister(fd)
                            os.close(fd)
                            proc.in_w = None
                    else:
                        chunk = os.read(fd, _READ)
                        if chunk:
                            bufs[fd].feed(chunk)
                        else:
                            poller.unregister(fd)
                            open_fds.discard(fd)
            # the main process is gone: take what is already in the pipes
            for fd in list(open_fds):
                os.set_blocking(fd, False)
                while True:
                    try:
                        chunk = os.read(fd, _READ)
                    except BlockingIOError:
                        break
                    if not chunk:
                        open_fds.discard(fd)
                        break
                    bufs[fd].feed(chunk)
            if open_fds:  # background processes still hold them: let the executor drain
                chan.send("D", 0, b"", sorted(open_fds))
        finally:
            for fd in (proc.out_r, proc.err_r, proc.in_w):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
        duration = time.monotonic() - start
        if spawn_errno is not None:
            msg = os.strerror(spawn_errno)
            if spawn_errno == errno.EAGAIN:
                msg += " (the sandbox's process limit is reached; reset() clears it)"
            err.feed(f"sandboxlite: cannot start the command: {msg}\n".encode())
            return ExecResult(126, bytes(out.data), bytes(err.data), duration, truncated=out.truncated or err.truncated)
        code, sig = decode_status(status)  # type: ignore[arg-type]
        timed_out = killed_at is not None
        return ExecResult(
            exit_code=TIMEOUT_EXIT_CODE if timed_out else code,
            stdout=bytes(out.data),
            stderr=bytes(err.data),
            duration_s=duration,
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
            signal=sig,
        )

    def shell(self, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> "Shell":
        """A persistent bash session: cd, variables and functions persist across commands."""
        from .shell import Shell

        sh = Shell(self, cwd=cwd, env=env)
        self._shells.add(sh)
        return sh

    def _last_pid(self) -> int:
        """The last pid handed out in the sandbox's PID namespace."""
        chan = self._require_open()
        ident = chan.new_id()
        chan.send("L", ident)
        f = chan.wait(ident, time.monotonic() + 30.0)
        return int(f.payload or 0) if f.type == "R" else 0

    def _kill(self, ident: int, how: str) -> None:
        self._require_open().send("K", ident, how.encode())

    # -- files ---------------------------------------------------------------------
    def _request(self, type_: str, payload: bytes, path: str):
        chan = self._require_open()
        ident = chan.new_id()
        chan.send(type_, ident, payload)
        try:
            f = chan.wait(ident, time.monotonic() + 30.0)
        except TimeoutError:
            raise SandboxCrashed(f"the executor did not answer a file request for {path}") from None
        if f.type == "E":
            raise file_error(int(f.payload), path)
        return f

    def _open(self, path: str, flags: int, mode: int = 0o644) -> int:
        f = self._request("O", strings(str(flags), str(mode), path), path)
        if f.type != "F" or f.fd is None:
            raise SandboxCrashed(f"the executor answered an open of {path} without a descriptor")
        return f.fd

    def read_file(self, path: str | os.PathLike, *, max_bytes: int | None = None) -> bytes:
        """The exact bytes of a file inside the sandbox (relative paths start at workdir)."""
        p = self._abs(path)
        with self._lock:
            fd = self._open(p, os.O_RDONLY | OP_REQ_REG)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # never trust the jail
                raise file_error(errno.EINVAL, p, "not a regular file")
            if max_bytes is not None and st.st_size > max_bytes:
                raise file_error(errno.EFBIG, p, f"file is {st.st_size} bytes, over max_bytes={max_bytes}")
            chunks = []
            total = 0
            while True:
                try:
                    chunk = os.read(fd, 1 << 20)
                except OSError as e:  # EIO from a special file, ...
                    raise file_error(e.errno or errno.EIO, p) from None
                if not chunk:
                    break
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    raise file_error(errno.EFBIG, p, f"file grew over max_bytes={max_bytes}")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def write_file(
        self, path: str | os.PathLike, data: bytes | str, *, mode: int = 0o644, parents: bool = True
    ) -> None:
        """Create or replace a file with exactly ``data`` (str is written as UTF-8)."""
        p = self._abs(path)
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | OP_REQ_REG | (OP_MKPARENTS if parents else 0)
        with self._lock:
            fd = self._open(p, flags, mode)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise file_error(errno.EINVAL, p, "not a regular file")
            view = memoryview(raw)
            while view:
                try:
                    n = os.write(fd, view[: 1 << 20])
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        raise file_error(e.errno, p, "no space left (the sandbox's tmpfs size limit)") from None
                    raise file_error(e.errno or errno.EIO, p) from None
                view = view[n:]
            if mode & 0o7000 == 0:
                try:
                    os.fchmod(fd, mode & 0o777)  # O_CREAT honours mode only for new files
                except OSError as e:
                    raise file_error(e.errno or errno.EPERM, p) from None
        finally:
            os.close(fd)

    def mkdir(self, path: str | os.PathLike, *, mode: int = 0o755) -> None:
        """``mkdir -p`` inside the sandbox."""
        p = self._abs(path)
        with self._lock:
            self._request("M", strings(str(mode & 0o777), p), p)

    def upload(self, host_path: str | os.PathLike, path: str | os.PathLike) -> None:
        """Copy a host file or directory tree to ``path`` inside the sandbox.

        Directory trees keep their layout, file modes and symlinks (as links).
        """
        src = Path(host_path)
        dst = self._abs(path)
        if not src.exists() and not src.is_symlink():
            raise FileNotFoundError(errno.ENOENT, "no such host file or directory", str(src))
        if not src.is_dir():  # a file (a top-level host symlink is the caller's choice: followed)
            self.write_file(dst, src.read_bytes(), mode=src.stat().st_mode & 0o777)
            return
        with self._lock:
            self.mkdir(dst)
            for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
                rel = os.path.relpath(dirpath, src)
                base = dst if rel == "." else os.path.join(dst, rel)
                for name in dirnames + filenames:
                    hp = os.path.join(dirpath, name)
                    sp = os.path.join(base, name)
                    st = os.lstat(hp)
                    if stat.S_ISLNK(st.st_mode):
                        target = os.readlink(hp)
                        self._request("Y", strings(target, sp), sp)
                    elif stat.S_ISDIR(st.st_mode):
                        self.mkdir(sp, mode=st.st_mode & 0o777)
                    elif stat.S_ISREG(st.st_mode):
                        with open(hp, "rb") as fh:
                            self.write_file(sp, fh.read(), mode=st.st_mode & 0o777)
                    # sockets, fifos and devices are not copied

    def download(
        self,
        path: str | os.PathLike,
        host_path: str | os.PathLike,
        *,
        symlinks: bool = True,
        max_bytes: int | None = None,
    ) -> list[str]:
        """Copy a file or directory tree out of the sandbox to ``host_path``.

        Symlinks are never followed: a link inside the tree is recreated only
        when it is relative, stays inside the tree (only leading ".." allowed)
        and ``symlinks`` is true; any other link is left out, and so are
        directories nested over 128 deep.  With ``max_bytes``, files that would take
        the total over it are left out.  Returns the sandbox paths that were
        left out (links, fifos, sockets, devices, files over the cap), so
        nothing is lost silently.
        """
        p = self._abs(path)
        dst = Path(host_path)
        with self._lock:
            fd = self._open(p, os.O_RDONLY)
        skipped: list[str] = []
        budget = [max_bytes if max_bytes is not None else -1]
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                if budget[0] >= 0 and st.st_size > budget[0]:
                    skipped.append(p)
                else:
                    _copy_fd_to_host(fd, dst, st.st_mode, p)
            elif stat.S_ISDIR(st.st_mode):
                _copy_dir_to_host(fd, dst, p, "", skipped, symlinks, budget)
            else:
                raise file_error(errno.EINVAL, p, "not a regular file or directory")
        finally:
            os.close(fd)
        return skipped


class _Proc:
    __slots__ = ("id", "in_w", "out_r", "err_r")

    def __init__(self, ident: int, in_w: int | None, out_r: int, err_r: int) -> None:
        self.id, self.in_w, self.out_r, self.err_r = ident, in_w, out_r, err_r


def _host_open_for_write(dst: Path, mode: int) -> int:
    if dst.is_symlink():  # never write through a host symlink
        dst.unlink()
    return os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode & 0o777 or 0o644)


def _copy_fd_to_host(fd: int, dst: Path, mode: int, sandbox_path: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    out = _host_open_for_write(dst, mode)
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as e:  # the sandbox's side (errors writing on the host stay OSError)
                raise file_error(e.errno or errno.EIO, sandbox_path) from None
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(out)


def _inside(rel_dir: str, target: str) -> bool:
    """Is a relative symlink target, seen from rel_dir, still inside the tree?

    Only a leading run of ".." is allowed (at most as deep as the link): a ".." after
    a name may climb out of a link (``l -> .`` makes ``l/..`` the tree's parent).
    """
    if target.startswith("/"):
        return False
    depth = 0 if not rel_dir else rel_dir.count("/") + 1
    named = False
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0 or named:
                return False
        elif part not in ("", "."):
            named = True
    return True


MAX_DOWNLOAD_DEPTH = 128  # deeper directories are left out (and reported), not recursed into
# Kernel filesystems a download never walks into (a link to "/" makes the jail's /proc part of
# the tree; we are the host, maybe root: /proc/kmsg would be read, and block).
_KERNEL_FS = (0x9FA0, 0x62656572)  # PROC_SUPER_MAGIC, SYSFS_MAGIC


@functools.lru_cache(maxsize=1)
def _fstatfs():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return ctypes, libc.fstatfs


def _kernel_fs(fd: int) -> bool:
    """Is ``fd`` on procfs or sysfs (or of a kind we cannot tell)?"""
    ctypes, fstatfs = _fstatfs()
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type (a long) comes first
    if fstatfs(fd, buf) != 0:
        return True
    return struct.unpack_from("l", buf)[0] in _KERNEL_FS


def _copy_dir_to_host(
    dfd: int, dst: Path, sandbox_path: str, rel: str, skipped: list[str], symlinks: bool, budget: list[int]
) -> None:
    if (rel and rel.count("/") + 1 > MAX_DOWNLOAD_DEPTH) or _kernel_fs(dfd):
        skipped.append(sandbox_path)
        return
    # The sandbox may change its tree while we walk it (a name can even be listed twice, as a
    # file and as a directory): every step that looks at it again may find something else,
    # and what changed is left out (reported), never followed.
    if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
        dst.unlink()
    dst.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(dfd):
        name = entry.name
        spath = f"{sandbox_path.rstrip('/')}/{name}"
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            skipped.append(spath)
            continue
        target_path = dst / name
        if not stat.S_ISDIR(st.st_mode) and target_path.is_dir() and not target_path.is_symlink():
            skipped.append(spath)  # the same name was a directory a moment ago
            continue
        if stat.S_ISLNK(st.st_mode):
            try:
                link = os.readlink(name, dir_fd=dfd)
            except OSError:  # swapped for something else under us
                skipped.append(spath)
                continue
            if symlinks and _inside(rel, link):
                if target_path.is_symlink() or target_path.is_file():
                    target_path.unlink()
                os.symlink(link, target_path)
            else:
                skipped.append(spath)
        elif stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:  # swapped for a symlink or a fifo under us
                skipped.append(spath)
                continue
            try:
                fst = os.fstat(fd)
                if not stat.S_ISREG(fst.st_mode) or (budget[0] >= 0 and fst.st_size > budget[0]):
                    skipped.append(spath)
                    continue
                if budget[0] >= 0:
                    budget[0] -= fst.st_size
                os.set_blocking(fd, True)
                _copy_fd_to_host(fd, target_path, st.st_mode, spath)
            finally:
                os.close(fd)
        elif stat.S_ISDIR(st.st_mode):
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError:
                skipped.append(spath)
                continue
            try:
                _copy_dir_to_host(sub, target_path, spath, f"{rel}/{name}" if rel else name, skipped, symlinks, budget)
            finally:
                os.close(sub)
        else:
            skipped.append(spath)
