"""``Sandbox``: one living jail (bwrap + the executor as its PID 1), and what you do with it.

The jail is started once (``launch.start``: planned by ``plan.py`` from the
config and the ``Host``); every ``exec`` asks the executor inside to fork the
command (a round trip of a fraction of a millisecond), so files and background
processes persist between commands until ``reset()`` or ``close()``.

Threads: a Sandbox may be shared between threads; its operations are
serialised by ``Sandbox.lock``.  Open several sandboxes for parallelism.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import images
from ..config import PROXY_PORT, SandboxConfig, check_timeout, image_as_rootfs
from ..errors import ConfigError, SandboxClosed, SandboxCrashed, SandboxError
from ..network import egress
from ..network.ports import PortForwarder
from ..result import ExecResult
from ..state import snapshot as snapshot_mod
from ..state.share import Pool, fork
from ..state.snapshot import Snapshot
from . import launch, process
from .cmdio import collect
from .files import SandboxFiles
from .host import Host, default_host
from .process import Process, Reactor
from .shell import Shell


class Sandbox(SandboxFiles):
    """A jail you can run commands and move files in.

    >>> with Sandbox() as sb:
    ...     sb.exec("echo hi").stdout
    b'hi\\n'

    ``Sandbox(config)`` or ``Sandbox(**fields)`` (fields of ``SandboxConfig``; ``image=REF`` is
    ``rootfs=REF``, a container image in the store; ``expose="image"``: the TCP ports the image
    declares) starts the jail immediately.  ``host``: the ``Host`` to run on (default: ``default_host()``).
    ``snapshot``: start from this ``Snapshot`` (``snapshot()``) instead of the image; ``reset()``
    goes back to it.
    """

    def __init__(self, config: SandboxConfig | None = None, *, host: Host | None = None,
                 snapshot: Snapshot | None = None, **overrides: Any) -> None:  # fmt: skip
        overrides = images.expose_from_image(image_as_rootfs(overrides))  # image="python:3.12-slim": rootfs= by another name
        lifetime = {k: overrides.pop(k) for k in ("ttl", "idle_timeout") if k in overrides}  # limits.ttl_s, idle_s
        if config is None:
            config = SandboxConfig(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        if not isinstance(config, SandboxConfig):
            raise ConfigError("config", f"expected a SandboxConfig, got {type(config).__name__}")
        if lifetime:
            config = config.replace(limits=dataclasses.replace(config.limits, **{
                {"ttl": "ttl_s", "idle_timeout": "idle_s"}[k]: v for k, v in lifetime.items()}))  # fmt: skip
        self.config = config
        self.lock = threading.RLock()
        self.generation = 0
        self._shells: weakref.WeakSet = weakref.WeakSet()
        self._jail: launch.Jail | None = None
        self._egress: egress.Tenancy | None = None  # its place at the egress proxy, while served
        self._egress_log: list[egress.Request] = []  # the last episode's log, once no longer served
        self._ports: PortForwarder | None = None  # the host sockets of config.expose
        self._reactor: Reactor | None = None  # serves spawned processes (process.py), made at the first
        self.host = host if host is not None else default_host()
        if snapshot is not None and not isinstance(snapshot, Snapshot):
            raise ConfigError("snapshot", f"expected a Snapshot (Sandbox.snapshot()), got {type(snapshot).__name__}")
        self._base = snapshot  # what reset() goes back to (None: the image)
        self._end_note = ""  # why lifetime.py closed it
        self._start()
        self.started_at = self._active = time.monotonic()
        if config.limits.ttl_s is not None or config.limits.idle_s is not None:
            self.host.janitor().watch(self)
        if config.expose:
            try:
                self._ports = PortForwarder(config.expose, self.connect, name=f"{self.executor_pid}")
            except BaseException:
                self.close()
                raise

    def _start(self) -> None:
        """Start the jail, serve its allowlist (network="allow:...") at the host's proxy, and give
        its init the connector for exposed ports."""
        first = self.__dict__.pop("_first", None)  # a fork's child (share.py): it builds the first generation
        self._jail = jail = launch.start(self.config, self.host, snapshot=self._base, defer=first is not None)
        policy = self.config.policy
        try:
            if first is not None:
                first(jail)
            if self.config.expose:
                jail.open_connector()
            if policy is None:
                return
            listener = jail.loopback("listen", PROXY_PORT)
            name = f"sandbox-{jail.executor_pid}-{id(self):x}"
            lim = self.config.limits
            self._egress = self.host.egress_proxy().add(name, policy, egress.EgressLimits(
                lim.egress_mb << 20, lim.egress_connections), listener=listener)  # fmt: skip
        except BaseException:
            jail.teardown()
            raise

    def _stop_egress(self) -> None:
        if self._egress is not None:
            self._egress_log, self._egress = self._egress.remove(), None

    # -- ports in (config.expose) ----------------------------------------------------------------
    def connect(self, port: int) -> socket.socket:
        """A new TCP connection (a blocking socket) to 127.0.0.1:``port`` inside the sandbox, where a
        server of the sandbox listens; ``port`` must be in ``config.expose``.  Made by the sandbox's
        init and handed over: it does not wait for a running ``exec`` (any thread may call it).
        ConnectionRefusedError when nothing listens there (yet), another OSError, or SandboxClosed."""
        if isinstance(port, bool) or not isinstance(port, int) or port not in self.config.expose:
            raise ConfigError("port", f"{port!r} is not an exposed port of this sandbox (expose={list(self.config.expose)})",
                              hint="list the port in SandboxConfig(expose=[...])")  # fmt: skip
        jail = self._jail
        if jail is None or jail.closed:
            raise SandboxClosed("the sandbox is closed")
        return jail.connect(port)

    @property
    def exposed(self) -> dict[int, str]:
        """Exposed port -> the host unix socket that reaches it (in a directory only this user can
        enter); each client connection is joined to a new ``connect(port)``.  The same paths for the
        sandbox's whole life, across resets; gone after close()."""
        return dict(self._ports.paths) if self._ports is not None else {}

    def network_log(self) -> list[egress.Request]:
        """This episode's requests through the egress proxy (network="allow:..."): time, host,
        port, allowed or not, the rule that allowed it or why not, bytes each way.  A reset starts
        a new log; after close() it is the last episode's.  Empty for other network modes."""
        return self._egress.log() if self._egress is not None else list(self._egress_log)

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every process in the sandbox and release it.  Idempotent."""
        with self.lock:
            self._stop()
            if self._ports is not None:
                self._ports.close()
                self._ports = None
            snapshot_mod.let_go(self._base)  # a fork()'s snapshot goes with the last sandbox of it

    def _stop(self) -> None:
        self._end_processes("the sandbox was closed", closing=True)
        for sh in list(self._shells):
            sh.detach()
        if self._jail is not None:
            self._jail.teardown()
        self._stop_egress()

    def reset(self, to: Snapshot | str | None = None) -> None:
        """Back to pristine: every process killed, every write discarded.

        The executor rebuilds the sandbox's filesystem (fresh /tmp, /testbed, /root and
        copy-on-write layer) inside the same jail, in about a millisecond; if that fails the
        jail is replaced.  Pristine is the snapshot the sandbox started from, if any.
        ``to``: a ``Snapshot`` to start over from instead (or ``"image"``: the image); later
        resets go back there too.  A sandbox started from a snapshot switches to another in the
        same jail; one started from the image starts a new jail for it (a cold start).
        """
        with self.lock:
            if to is not None and to != "image" and not isinstance(to, Snapshot):
                raise ConfigError("to", f"expected a Snapshot or 'image', got {to!r}")
            base, old = (self._base if to is None else None if to == "image" else to), self._base
            self._end_processes("the sandbox was reset")
            for sh in list(self._shells):
                sh.detach()
            jail = self._jail
            try:
                if jail is not None and not jail.closed and jail.start_over(base, self.host):
                    self.generation += 1
                    self._base = base
                    if self._egress is not None:  # a fresh episode: a fresh log and byte budget
                        self._egress.restart()
                    snapshot_mod.let_go(old, keep=base)
                    return
            except (SandboxCrashed, TimeoutError):
                pass
            self._stop()
            self._base = base
            self._start()
            self.generation += 1
            snapshot_mod.let_go(old, keep=base)

    # -- snapshots -------------------------------------------------------------------------------
    @property
    def base(self) -> Snapshot | None:
        """The snapshot this sandbox started (or was last reset) from; None: the image."""
        return self._base

    def snapshot(self, *, max_bytes: int | None = None) -> Snapshot:
        """Keep the sandbox's filesystem state as an immutable ``Snapshot`` to start others from:
        every change to the image (deletions too), /testbed and /tmp (and /root without a
        copy-on-write root), on top of the snapshot it started from.  Not processes or memory
        (snapshot.py says why).  Its processes are stopped for the copy.  ``max_bytes``: the
        size cap (default: the store's).  SnapshotError when processes would not stop, the
        state is over the cap, or it would stack more than the store's depth limit."""
        with self.lock:
            return snapshot_mod.take(self.jail, self.host.snapshot_store(), self._base, max_bytes)

    def fork(self, n: int, *, share: bool = False, pool: Pool | None = None) -> list["Sandbox"]:
        """``n`` sandboxes, each starting from this one's filesystem state, isolated from each other
        and from this one; they start side by side.  By default the state is one ``snapshot()`` they
        share (nothing is copied per child; it goes with the last of them: keep it with
        ``snapshot()``, which names the same state); the caller closes them.  ``share=True``: not
        even that copy (the time does not grow with the data): this sandbox's writes become their
        read-only bottom layer, and this sandbox starts over on it too, what runs in it ended as by
        ``reset()``.  ``pool``: the children are that pool's warm sandboxes (release them to it).
        See state/share.py."""
        return fork(self, n, share=share, pool=pool)  # type: ignore[return-value]  (the children are type(self))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self.closed:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"pid={self.executor_pid}"
        return f"<Sandbox rootfs={self.config.rootfs!r} {state}>"

    @property
    def closed(self) -> bool:
        return self._jail is None or self._jail.closed

    def alive(self) -> bool:
        """Is the jail up (not closed, its init still running)?"""
        return self._jail is not None and self._jail.alive()

    @property
    def jail(self) -> launch.Jail:
        """The live jail (what ``Shell`` drives).  SandboxClosed when closed, SandboxCrashed when its executor is gone."""
        jail = self._jail
        if jail is None or jail.closed:
            raise SandboxClosed(f"the sandbox was closed: {self._end_note}" if self._end_note else "the sandbox is closed")
        jail.channel()
        self._active = time.monotonic()  # (every call goes through here: lifetime.py's idle clock)
        return jail

    def _lifetime_due(self) -> float | None:
        """When lifetime.py should look at this sandbox next (None: never)."""
        lim = self.config.limits
        dues = [t for t in (lim.ttl_s and self.started_at + lim.ttl_s, lim.idle_s and self._active + lim.idle_s) if t]
        return min(dues) if dues and not self.closed else None

    def _lifetime_expired(self) -> str | None:
        """Why this sandbox should end now (its ttl or idle time passed), or None."""
        lim, now = self.config.limits, time.monotonic()
        if lim.ttl_s is not None and now >= self.started_at + lim.ttl_s:
            return f"its ttl of {lim.ttl_s:g} s passed (limits.ttl_s)"
        if self.processes:  # a spawned process running is not idle
            self._active = now
        if lim.idle_s is not None and now >= self._active + lim.idle_s:
            return f"it was idle for {lim.idle_s:g} s (limits.idle_s)"
        return None

    @property
    def plan(self):
        """The ``JailPlan`` this sandbox was (last) started from."""
        assert self._jail is not None
        return self._jail.plan

    @property
    def workdir(self) -> str:
        """The absolute path commands start in and relative paths resolve against.

        ``config.workdir`` (``/testbed`` by default) with namespaces; with
        ``isolation="landlock"`` a directory of this sandbox's own on the host, since without a
        mount namespace the sandbox sees the host's paths.  Code that shows paths to a model, or
        puts files where a command will look, takes them from here, never from a constant."""
        jail = self._jail
        return jail.plan.workdir if jail is not None else self.config.workdir

    @property
    def tmpdir(self) -> str:
        """The sandbox's TMPDIR: ``/tmp``, or with ``isolation="landlock"`` a directory of its own."""
        jail = self._jail
        return dict(jail.plan.env).get("TMPDIR", "/tmp") if jail is not None else "/tmp"

    @property
    def argv(self) -> list[str]:
        return list(self.plan.argv)

    @property
    def rootfs_plan(self):
        return self.plan.rootfs

    @property
    def start_timings(self) -> dict[str, float]:
        """Milliseconds spent in each phase of the last start (see ``launch.PHASES``)."""
        t = self._jail.timings if self._jail is not None else {}
        names = [p for p in launch.PHASES if p in t]
        return {b: round((t[b] - t[a]) * 1e3, 4) for a, b in zip(names, names[1:])}

    @property
    def executor_pid(self) -> int | None:
        """Host pid of the executor (PID 1 inside the sandbox)."""
        return None if self.closed else self._jail.executor_pid  # type: ignore[union-attr]

    @property
    def bwrap_pid(self) -> int | None:
        return None if self.closed else self._jail.pid  # type: ignore[union-attr]

    @property
    def info(self) -> dict[str, Any]:
        """What this sandbox is and which protections are active."""
        jail = self._jail
        assert jail is not None
        p, lim, cg = jail.plan, self.config.limits, jail.cgroup
        return {
            "isolation": p.isolation,
            "rootfs": p.rootfs.name,
            "host_uid": p.run_as[0] if p.run_as else self.host.uid,
            "host_uid_note": jail.uid_note or "a uid of its own while it lives (per-uid kernel budgets are its own)",
            "image_idmapped": p.idmapped,
            "rootfs_kind": p.rootfs.kind,
            "network": self.config.network,
            **({"egress": f"only the allowlist, through the host's egress proxy at http://127.0.0.1:{PROXY_PORT} "
                "(HTTP_PROXY, HTTPS_PROXY, ALL_PROXY); no resolver, no other route"} if self._egress else {}),
            **({"exposed": {str(k): v for k, v in self.exposed.items()}} if self.config.expose else {}),
            "netns": {"host": "host", "pooled": "made ahead of time (netns pool)",
                      "none": "none: socket(2) is refused (Landlock denies TCP too)"}.get(p.netns, "made by bwrap"),
            "dev": f"ready-made ({p.dev}, read-only)" if p.dev else (p.dev_reason if p.isolation == "landlock"
                                                                     else "bwrap --dev"),
            "workdir": self.workdir,
            "cgroup": [str(d) for d in cg.dirs] if cg else None,
            "cgroup_note": p.cgroup.reason,
            "memory_limit": f"cgroup {lim.memory_mb} MiB" if cg and lim.memory_mb else (
                f"RLIMIT_AS {lim.memory_mb} MiB per process; memfd_create and shmget unavailable (no rlimit "
                "counts their memory)" if lim.memory_mb else "none"),
            "pids_limit": f"cgroup {lim.pids}" if cg and lim.pids else (f"RLIMIT_NPROC {lim.pids}" if lim.pids else "none"),
            "copy_on_write_root": p.copy_on_write,
            "copy_on_write_note": p.cow_reason,
            "executor_pid": self.executor_pid,
            "bwrap_pid": self.bwrap_pid,
            "generation": self.generation,
            "processes": [{"pid": p.pid, "argv": p.argv, "age_s": round(time.monotonic() - p.started, 3),
                           "pty": p.pty} for p in self.processes],
            "age_s": round(time.monotonic() - self.started_at, 3),
            "ttl_s": lim.ttl_s,
            "idle_s": lim.idle_s,
        }  # fmt: skip

    # -- commands --------------------------------------------------------------------------------
    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        on_stdout: Callable[[bytes], object] | None = None,
        on_stderr: Callable[[bytes], object] | None = None,
    ) -> ExecResult:
        """Run one command to completion and return what it did.

        ``on_stdout``/``on_stderr``: called with every chunk of output as it is read (in this
        thread, all of it, also past the output cap); the result holds the same output.

        ``cmd`` is an argv list (run directly, PATH-searched) or a shell string (run by
        ``/bin/sh -c``).  The command finishes when its main process exits; processes it
        started in the background live on (their output is discarded) until ``reset()`` or
        ``close()``.  On timeout the command and everything it started, daemons included, are
        killed, and the output so far is returned with ``timed_out=True`` and exit code 124.
        """
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        timeout = check_timeout(self.config.limits.timeout_s if timeout is None else timeout)
        try:
            data = stdin.encode("utf-8", "surrogateescape") if isinstance(stdin, str) else stdin
        except UnicodeEncodeError as e:
            raise ConfigError("stdin", f"is not valid text: {e.reason} at position {e.start}") from None
        with self.lock:
            jail = self.jail
            start = time.monotonic()
            proc = jail.spawn(argv, cwd=cwd, env=env, stdin_pipe=data is not None)
            try:
                return collect(jail.chan, proc, data, start, start + timeout, self.config.limits.output_bytes,
                               on_stdout=on_stdout, on_stderr=on_stderr)  # fmt: skip
            except BaseException:  # Ctrl-C (or any error) while waiting: the command goes too
                try:
                    jail.kill(proc.id, "all")
                except SandboxError:  # the jail itself is gone
                    pass
                raise

    def spawn(self, cmd: str | Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
              stdin: bool = True, pty: bool | tuple[int, int] = False, timeout: float | None = None,
              lossless: bool = False) -> Process:
        """Start a command and return at once with its ``Process`` (process.py): its ``pid``, its
        output as it comes (``stdout``/``stderr``: iterators of chunks, ``.lines()``), ``write`` to
        its stdin, ``wait``, ``poll``, ``signal``, ``kill``.  Many may run at once, beside ``exec``;
        ``reset()`` and ``close()`` end them all.  ``cmd``, ``env``, ``cwd``: as for ``exec``.
        ``pty``: a terminal (of the sandbox's own) as stdin, stdout and stderr, and the command's
        controlling terminal: True (24x80) or ``(rows, cols)``; ``resize()`` changes it.
        ``timeout``: seconds, then it and what it started are killed (exit code 124); none by
        default.  Each stream keeps up to ``limits.output_bytes`` unread bytes: until you first read
        it, what comes beyond that is dropped and counted (``stream.dropped``), so an unread log
        never stalls a server; once read from, or from the start with ``lossless=True``, a full
        stream makes the command wait for its reader, as a pipe does, and nothing is lost."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if timeout is not None:
            timeout = check_timeout(timeout)
        with self.lock:
            return process.spawn(self, argv, cwd=cwd, env=env, stdin=stdin, pty=pty, timeout=timeout,
                                 cap=self.config.limits.output_bytes, lossless=lossless)  # fmt: skip

    @property
    def processes(self) -> list[Process]:
        """The spawned processes still running (or whose output is still being read)."""
        return self._reactor.processes() if self._reactor is not None else []

    def _reactor_for(self) -> Reactor:
        if self._reactor is None or self._reactor.chan is not self.jail.chan:
            self._reactor = Reactor(self.jail.chan, str(self.executor_pid))
        return self._reactor

    def _end_processes(self, why: str, closing: bool = False) -> None:
        if self._reactor is not None:
            self._reactor.end_all(why)
            if closing:
                self._reactor.close()

    def shell(self, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> Shell:
        """A persistent bash session: cd, variables and functions persist across commands."""
        sh = Shell(self, cwd=cwd, env=env)
        self._shells.add(sh)
        return sh
