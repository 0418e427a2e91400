"""Host facts, found once, as a value: ``Host.detect()``.

Everything a sandbox's start depends on that is a property of this machine and
this caller (where bwrap is and what it supports, the uid the jails run as,
cgroup support, the executor and launcher binaries, the ready-made ``/dev``,
the seccomp program) is read here, once, into a ``Host``.  ``plan()`` is a pure
function of a config and a Host, so tests build a Host by hand and look at the
plan without bwrap or root.

The few things that must be process-wide hang off the Host rather than off a
module: the pool of network namespaces made ahead of time (and its thread),
the allocator that keeps empty cgroups for reuse, the executor's descriptor.

``Sandbox()`` without ``host=`` uses ``default_host()``: one Host per set of
the environment variables it was detected from (so setting, say,
``SANDBOXLITE_UID`` before the next sandbox still takes effect).
"""

from __future__ import annotations

import fcntl
import logging
import os
import resource
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import executor, paths
from ..config import ISOLATION_MODES
from ..errors import ConfigError, SetupError
from ..isolation import cgroups, devnodes, identity, landlock, seccomp, slots
from ..isolation.bwrap import BwrapInfo, find_bwrap
from ..isolation.idmap import IdmapCache
from ..network import egress, netns
from ..state import snapshot
from . import lifetime

# The environment variables a Host is detected from.
ENV_KEYS = (
    "SANDBOXLITE_BWRAP",
    "PATH",
    "SANDBOXLITE_UID",
    "SANDBOXLITE_GID",
    "SANDBOXLITE_UID_RANGE",
    "SANDBOXLITE_CGROUP_PARENT",
    "SANDBOXLITE_NETNS_POOL",
    "SANDBOXLITE_DEV",
    "SANDBOXLITE_HOME",
    "SANDBOXLITE_ISOLATION",
    "SANDBOXLITE_LANDLOCK_DIR",
    "SANDBOXLITE_SNAPSHOTS",
    "TMPDIR",
    "CC",
)
# A spawn dup2s its descriptors onto 0..9 in the child (see plan.py): every source descriptor
# must be at or above this, so that no dup2 overwrites a source a later one still needs.
HIGH_FD = 10


@dataclass(frozen=True, eq=False)
class Host:
    """What this machine and caller offer sandboxes.

    ``run_as``: the unprivileged (uid, gid) a root caller's jails run as (None: the caller's own).
    ``launcher``: (program, argv prefix) that drops a root caller to ``run_as`` and runs bwrap.
    ``dev``: a ready-made /dev directory (root callers), else None and ``dev_reason`` says why.
    ``netns``: network namespaces made ahead of time (root callers), else None.
    ``uids``: a root caller's uid range, one uid per live sandbox (slots.py), else None and
    ``uids_reason`` says why; ``idmap``: the idmapped views of images for those uids (idmap.py);
    ``stage``: the directory the launcher attaches an idmapped image at, in its own namespace.
    ``bwrap``: None when there is none (``bwrap_error`` says why): isolation="landlock" runs without.
    ``isolation``: what ``isolation="auto"`` means here ($SANDBOXLITE_ISOLATION, else "namespaces").
    ``landlock_abi``: the kernel's Landlock ABI (0: none, ``landlock_reason`` says why);
    ``landlock_dir``: where Landlock sandboxes' own directories go.
    """

    bwrap: BwrapInfo | None
    euid: int
    run_as: tuple[int, int] | None = None
    cgroups: cgroups.Support = cgroups.Support(None, "not detected")
    executor: str = ""
    launcher: tuple[str, tuple[str, ...]] | None = None
    dev: str | None = None
    dev_reason: str = "not detected"
    seccomp: bytes = b""
    seccomp_no_memfd: bytes = b""  # the filter for sandboxes without a memory cgroup (seccomp.py)
    netns: netns.NetnsPool | None = field(default=None, repr=False)
    cgroup_allocator: cgroups.Allocator | None = field(default=None, repr=False)
    netns_reason: str = ""  # why ``netns`` is None
    uids: slots.UidPool | None = field(default=None, repr=False)
    uids_reason: str = "not a root caller: sandboxes run as the caller"
    idmap: IdmapCache | None = field(default=None, repr=False)
    stage: str = ""
    bwrap_error: SetupError | None = None
    isolation: str = "namespaces"
    landlock_abi: int = 0
    landlock_reason: str = "not detected"
    landlock_dir: str = ""
    # the host's CA certificates (PEM bundle): a sandbox with an allowlist reaches the internet
    # through the host's network, so it trusts what the host trusts (a TLS-inspecting firewall's CA
    # included); None when the host has none
    ca_bundle: str | None = None
    # this Host's own descriptors (``dataclasses.replace`` gives a copy fresh ones)
    _fds: dict = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _devs: set = field(default_factory=set, init=False, repr=False)  # per-uid /dev directories checked
    _warned: set = field(default_factory=set, init=False, repr=False)
    _services: dict = field(default_factory=dict, init=False, repr=False)  # the egress proxy

    @classmethod
    def detect(cls, env: Mapping[str, str] | None = None) -> "Host":
        """Look at this machine (SetupError / ConfigError when sandboxes cannot run as set up).

        Also raises the soft RLIMIT_NOFILE to the hard limit (each sandbox holds a few
        descriptors on the host).
        """
        env = dict(os.environ if env is None else env)
        euid = os.geteuid()
        run_as = identity.run_as(env, euid)
        iso = env.get("SANDBOXLITE_ISOLATION") or "namespaces"
        if iso not in ISOLATION_MODES or iso == "auto":
            raise ConfigError("SANDBOXLITE_ISOLATION", f"must be namespaces or landlock, got {iso!r}",
                              hint="unset it, or set SANDBOXLITE_ISOLATION=landlock")  # fmt: skip
        try:
            info, bwrap_error = find_bwrap(env), None
        except SetupError as e:  # the Landlock mode runs without; a namespace sandbox raises it
            info, bwrap_error = None, e
        ll_abi, ll_reason = landlock.abi()
        support = cgroups.detect(env)
        try:
            exe = str(executor.executor_path())
        except SetupError as e:  # needed by both isolations; say what else is missing too
            if bwrap_error is None:
                raise
            raise SetupError(f"{bwrap_error.message}, and {e.message}",
                             hint=f"{bwrap_error.hint}; {e.hint}") from None  # fmt: skip
        launcher = None
        if run_as is not None:
            prog, prefix = executor.launcher()
            launcher = (str(prog), tuple(prefix))
        dev, dev_reason = devnodes.prepare(env, euid)
        pool, netns_reason = None, "not a root caller: bwrap makes each network namespace"
        sys_admin = _has_cap(CAP_SYS_ADMIN)
        if run_as is not None:
            size = netns.pool_size(env)
            if not size:
                netns_reason = "SANDBOXLITE_NETNS_POOL=0: bwrap makes each network namespace"
            elif not sys_admin:  # a container's root: setns() into a namespace of ours needs it
                netns_reason = ("joining a network namespace made ahead of time needs CAP_SYS_ADMIN, which this "
                                "process lacks (a container's root): bwrap makes each namespace")  # fmt: skip
            else:
                pool, netns_reason = netns.NetnsPool(size, netns.maker(exe)), ""
        uids, uids_reason, idmap, stage = _uid_slots(env, run_as, exe, sys_admin)
        _raise_nofile()
        return cls(
            bwrap=info, euid=euid, run_as=run_as, cgroups=support, executor=exe, launcher=launcher,
            dev=dev if run_as is not None else None, dev_reason=dev_reason, seccomp=seccomp.filter_bytes(),
            seccomp_no_memfd=seccomp.filter_bytes(memfd=False),
            netns=pool, cgroup_allocator=cgroups.Allocator(support) if support.kind else None,
            uids=uids, uids_reason=uids_reason, idmap=idmap, stage=stage, netns_reason=netns_reason,
            bwrap_error=bwrap_error, isolation=iso, landlock_abi=ll_abi, landlock_reason=ll_reason,
            landlock_dir=landlock.base_dir(env, euid), ca_bundle=find_ca_bundle(env),
        )  # fmt: skip

    @property
    def uid(self) -> int:
        """The host uid images are owned by: the jails run as this uid, or (``uids``) as one of a range
        with their image idmapped to it."""
        return self.run_as[0] if self.run_as is not None else self.euid

    def seccomp_for(self, memfd: bool, sockets: bool = True, ipc: bool = True, ignore_chown: bool = False) -> bytes:
        """The filter of a sandbox with (or without) memfd_create, socket and SysV/POSIX message-queue
        IPC, and with chown made a no-op (seccomp.filter_bytes)."""
        if sockets and ipc and not ignore_chown:
            return self.seccomp if memfd else self.seccomp_no_memfd
        return seccomp.filter_bytes(memfd, sockets, ipc, ignore_chown)

    def isolation_for(self, requested: str) -> str:
        """The isolation a sandbox asking for ``requested`` gets ("auto": this Host's default)."""
        return self.isolation if requested == "auto" else requested

    def warn_once(self, key: str, message: str) -> None:
        """Log ``message`` (logger ``sandboxlite``, WARNING) the first time ``key`` comes up on this Host:
        a weaker setting chosen by ``auto`` is never silent, nor repeated for every sandbox."""
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        logging.getLogger("sandboxlite").warning(message)

    def dev_for(self, uid: int) -> str | None:
        """The ready-made /dev of sandboxes running as ``uid`` (its nodes are its own: another
        sandbox's use of /dev/null cannot be watched), made and checked once; None: bwrap's --dev."""
        if self.dev is None:
            return None
        path = f"{devnodes.DIR_PREFIX}{uid}"
        with self._lock:
            if path in self._devs:
                return path
            got, _why = devnodes.prepare({}, 0, path)
            if got is not None:
                self._devs.add(path)
            return got

    def executor_fd(self) -> int:
        """A read-only descriptor of the executor binary (bwrap runs it as /proc/self/fd/N)."""
        with self._lock:
            fd = self._fds.get("executor")
            if fd is None:
                fd = self._fds["executor"] = move_high(os.open(self.executor, os.O_RDONLY | os.O_CLOEXEC))
            return fd

    def egress_proxy(self) -> "egress.EgressProxy":
        """The egress proxy this Host's sandboxes with an allowlist go through (one per process:
        made on first use; a forked child gets one of its own, the threads stayed in the parent)."""
        with self._lock:
            proxy = self._services.get("egress")
            if proxy is None or proxy.pid != os.getpid():
                proxy = self._services["egress"] = egress.EgressProxy()
            return proxy

    def janitor(self) -> "lifetime.Janitor":
        """What ends this Host's sandboxes at their ttl or idle time (lifetime.py; one per process)."""
        with self._lock:
            janitor = self._services.get("janitor")
            if janitor is None or janitor.pid != os.getpid():
                janitor = self._services["janitor"] = lifetime.Janitor()
            return janitor

    def snapshot_store(self) -> "snapshot.Store":
        """This Host's snapshot store (``paths.snapshots()``; made on first use)."""
        with self._lock:
            store = self._services.get("snapshots")
            if store is None:
                try:
                    store = snapshot.Store(paths.snapshots(), owner=self.run_as)
                except OSError as e:
                    raise paths.cache_error(paths.snapshots(), e) from None
                self._services["snapshots"] = store
            return store

    def set_egress_proxy(self, proxy: "egress.EgressProxy") -> None:
        """Serve this Host's sandboxes that start from now on through ``proxy`` (tests and benchmarks:
        a proxy with a resolver of their own); the proxy served before keeps its sandboxes."""
        with self._lock:
            self._services["egress"] = proxy


CAP_SYS_ADMIN = 21
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem")


def find_ca_bundle(env: Mapping[str, str]) -> str | None:
    """The host's CA bundle: ``$SSL_CERT_FILE`` if it is a file, else the first of ``CA_BUNDLES``."""
    for path in (env.get("SSL_CERT_FILE") or "", *CA_BUNDLES):
        if path and os.path.isfile(path) and os.access(path, os.R_OK):
            return os.path.abspath(path)
    return None


def _has_cap(cap: int) -> bool:
    """Is ``cap`` in this process's effective set (a container's root may lack it)?"""
    try:
        with open("/proc/self/status") as f:
            eff = next(int(ln.split()[1], 16) for ln in f if ln.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return os.geteuid() == 0
    return bool(eff >> cap & 1)


def _uid_slots(env: Mapping[str, str], run_as: tuple[int, int] | None, exe: str, sys_admin: bool = True):
    """(uid pool, why not, idmap cache, stage directory) of a root caller."""
    if run_as is None:
        return None, "not a root caller: sandboxes run as the caller", None, ""
    if not sys_admin:
        return None, (f"idmapped images need CAP_SYS_ADMIN, which this process lacks (a container's root): every "
                      f"sandbox runs as uid {run_as[0]}"), None, ""  # fmt: skip
    if env.get("SANDBOXLITE_UID") and not env.get("SANDBOXLITE_UID_RANGE"):
        return None, f"SANDBOXLITE_UID={env['SANDBOXLITE_UID']}: every sandbox runs as that uid", None, ""
    import pwd

    try:
        user = pwd.getpwuid(run_as[0]).pw_name
    except KeyError:
        user = None
    rng = slots.uid_range(env, user)
    if rng is None:
        return None, "SANDBOXLITE_UID_RANGE=off: every sandbox runs as the same uid", None, ""
    home = paths.home()
    stage = paths.ensure_dir(home / "stage")
    paths.ensure_dir(home / "stage-snaps")  # where the launcher attaches the idmapped snapshot store
    pool = slots.UidPool(rng[0], rng[1], home / "locks" / "uid")
    return pool, f"uids {rng[0]}..{rng[0] + rng[1] - 1}, one per live sandbox", IdmapCache(exe, run_as), str(stage)


def move_high(fd: int) -> int:
    """``fd`` moved to a number >= HIGH_FD (close-on-exec)."""
    if fd >= HIGH_FD:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)  # on failure ``fd`` stays the caller's
    os.close(fd)
    return new


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard if hard != resource.RLIM_INFINITY else 1 << 20, 1 << 20)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass


_default: tuple[tuple, Host] | None = None
_ENV_KEYS_B = tuple(k.encode() for k in ENV_KEYS)
# os.environ's own bytes dict when there is one (CPython, POSIX): os.environ.get of a missing key
# raises and catches a KeyError, ~1.3 us a key, on every Sandbox(); this is a plain dict lookup
_env_get = os.environ._data.get if hasattr(os.environ, "_data") else (lambda k: os.environ.get(k.decode()))
_default_lock = threading.Lock()


def default_host() -> Host:
    """The Host of ``Sandbox()`` without ``host=``: detected once per environment (and euid)."""
    global _default
    key = (os.geteuid(), *map(_env_get, _ENV_KEYS_B))
    with _default_lock:
        if _default is None or _default[0] != key:
            old, _default = _default, (key, Host.detect())
            if old is not None and old[1].cgroup_allocator is not None:
                # the replaced Host's spare cgroups go now, not at exit (its sandboxes keep theirs)
                old[1].cgroup_allocator.close()
        return _default[1]


def _after_fork_in_child() -> None:
    global _default_lock
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
