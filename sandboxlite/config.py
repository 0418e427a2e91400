"""Sandbox configuration: plain frozen dataclasses, validated on construction.

A bad value raises ``ConfigError`` naming the field and what is allowed, so a
config read from JSON or a command line fails early and clearly.

May import: errors, network, executor.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .executor.protocol import MAX_BINDS
from .network.policy import PREFIX, Policy

# and "allow:<rules>": only the hosts the rules name, through the egress proxy (network/policy.py)
NETWORK_MODES = ("none", "host")
PROXY_PORT = 3128  # where a sandbox with an allowlist reaches the egress proxy, on its own 127.0.0.1
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
CGROUP_MODES = ("auto", "off", "required")
# "auto": $SANDBOXLITE_ISOLATION, else namespaces (never Landlock without being asked: it is weaker)
ISOLATION_MODES = ("auto", "namespaces", "landlock")

# Sandbox paths the jail itself owns; a caller's mount may not replace them.
RESERVED_PATHS = ("/", "/proc", "/dev", "/sys")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Longer timeouts (infinity included) count as this many seconds (about 11.5 days): poll(2)
# takes milliseconds in an int.
MAX_TIMEOUT_S = 1_000_000.0


def _check_abs(name: str, path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigError(name, f"must be an absolute path inside the sandbox, got {path!r}")
    if "\0" in path:
        raise ConfigError(name, "must not contain NUL bytes")
    norm = posixpath.normpath(path)
    if norm.startswith("//"):
        norm = norm[1:]
    return norm


@dataclass(frozen=True)
class Mount:
    """A host path made visible inside the sandbox (read-only unless ``rw``)."""

    src: str
    dst: str
    rw: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.src, (str, os.PathLike)) or not str(self.src):
            raise ConfigError("mount.src", f"must be a host path, got {self.src!r}")
        object.__setattr__(self, "src", os.path.abspath(os.fspath(self.src)))
        object.__setattr__(self, "dst", _check_abs("mount.dst", self.dst))
        if self.dst in RESERVED_PATHS:
            raise ConfigError("mount.dst", f"{self.dst} belongs to the jail and cannot be a mount target")
        if not isinstance(self.rw, bool):
            raise ConfigError("mount.rw", f"must be true or false, got {self.rw!r}")

    @classmethod
    def parse(cls, spec: str) -> "Mount":
        """Parse ``SRC:DST[:ro|rw]`` (the CLI's ``--mount``)."""
        parts = spec.split(":")
        if len(parts) == 3 and parts[2] in ("ro", "rw"):
            return cls(parts[0], parts[1], parts[2] == "rw")
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        raise ConfigError("mount", f"expected SRC:DST[:ro|rw], got {spec!r}")


def _positive(name: str, value: Any, *, optional: bool, kind: type = int) -> None:
    if value is None and optional:
        return
    ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if not ok or math.isnan(value) or value <= 0:
        allowed = "a positive number" if kind is float else "a positive integer"
        raise ConfigError(name, f"must be {allowed}{' or None' if optional else ''}, got {value!r}")


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox.  ``None`` lifts a limit."""

    timeout_s: float = 120.0  # default wall-clock timeout of one exec / shell command
    cpu_s: int | None = 600  # RLIMIT_CPU, per process
    memory_mb: int | None = 4096  # cgroup memory limit; RLIMIT_AS where cgroups are unavailable
    pids: int | None = 512  # cgroup pids.max; RLIMIT_NPROC where it is enforced
    nofile: int = 1024  # RLIMIT_NOFILE
    fsize_mb: int | None = 1024  # RLIMIT_FSIZE: the largest file a process may write
    tmp_mb: int = 1024  # size of the /tmp tmpfs
    testbed_mb: int = 2048  # size of the /testbed tmpfs (when /testbed is not a mount)
    overlay_mb: int = 2048  # how much a copy-on-write root may take (writes outside /tmp and /testbed)
    output_bytes: int = 1 << 20  # stdout and stderr are each capped at this many bytes
    # pseudo-terminals open at once: every sandbox's devpts draws on the machine-wide kernel.pty.max
    ptys: int = 32
    # network="allow:...": what the egress proxy relays for one sandbox (both directions, per
    # episode: a reset starts again) and how many connections it keeps open at once
    egress_mb: int = 1024
    egress_connections: int = 16
    # the sandbox's own lifetime (jail/lifetime.py): closed this long after it started, or after this
    # long without a call, a command or a spawned process running; None: never
    ttl_s: float | None = None
    idle_s: float | None = None

    def __post_init__(self) -> None:
        _positive("limits.timeout_s", self.timeout_s, optional=False, kind=float)
        _positive("limits.ttl_s", self.ttl_s, optional=True, kind=float)
        _positive("limits.idle_s", self.idle_s, optional=True, kind=float)
        for name in ("cpu_s", "memory_mb", "pids", "fsize_mb"):
            _positive(f"limits.{name}", getattr(self, name), optional=True)
        for name in ("nofile", "tmp_mb", "testbed_mb", "overlay_mb", "output_bytes", "ptys", "egress_mb",
                     "egress_connections"):  # fmt: skip
            _positive(f"limits.{name}", getattr(self, name), optional=False)
        if self.pids is not None and self.pids < 8:
            raise ConfigError("limits.pids", f"must be at least 8 (the jail needs a few), got {self.pids}")
        if self.nofile < 16:
            raise ConfigError("limits.nofile", f"must be at least 16, got {self.nofile}")


@dataclass(frozen=True)
class SandboxConfig:
    """Everything that defines a sandbox.

    rootfs: ``"auto"`` (``$SANDBOXLITE_ROOTFS``, else the built default image, else the only
        built image, else ``"host"``, with a logged warning: ``rootfs.auto_choice``),
        ``"host"`` (the host's /usr and a minimal /etc, read-only), the name of a
        built image, or a path to a root filesystem directory.
    mounts: host paths to show inside (``Mount`` objects or ``"SRC:DST[:ro|rw]"``).
    network: ``"none"`` (only ``lo``), ``"host"`` (the host's network, its loopback services
        included), or ``"allow:<rules>"``: only ``lo``, and the hosts the rules name
        (``pypi.org``, ``*.example.org``, presets such as ``pypi`` and ``debian``: network/policy.py)
        through the egress proxy at ``http://127.0.0.1:3128`` (``HTTP_PROXY`` and friends are
        set); everything else is refused, with an answer naming the rule.
    expose: ports of servers inside the sandbox that the host may reach (``Sandbox.connect``,
        ``Sandbox.exposed``: a host unix socket each); needs a network namespace of its own (not
        ``network="host"``).
    env: extra environment variables (on top of PATH, HOME, LANG, ...).
    workdir: the working directory of commands (a writable tmpfs at ``/testbed``).
    cgroups: ``"auto"`` (use them when the caller can), ``"off"``, or ``"required"``.
    isolation: ``"namespaces"`` (bwrap: user, PID, mount, network, IPC, UTS, cgroup namespaces),
        ``"landlock"`` (no namespaces: for containers that allow none; weaker, see SECURITY.md;
        paths are the host's, ``Sandbox.workdir`` says where the workdir is), or ``"auto"``
        (``$SANDBOXLITE_ISOLATION``, else namespaces: Landlock is never chosen unasked).
    user: who commands run as inside: ``UID[:GID]``, or a user (and group) of the image's own
        /etc/passwd and /etc/group (``app``, ``app:staff``); None: the image's ``User`` (a
        container image's), else root.  The one id the sandbox's user namespace maps (files show
        as owned by it).
    ignore_chown: chown(2) and its kin succeed without changing anything.  Files in a sandbox have
        one owner (the one mapped id), so a chown to another id fails with EINVAL; a Dockerfile's
        ``RUN useradd app && chown -R app /app`` expects it to work (image build sets this).
    """

    rootfs: str = "auto"
    mounts: tuple[Mount, ...] = ()
    limits: Limits = field(default_factory=Limits)
    network: str = "none"
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = "/testbed"
    # None: not set (the UTS namespace keeps the parent's name), where sethostname is refused (podman's
    # default seccomp profile refuses it)
    hostname: str | None = "sandbox"
    cgroups: str = "auto"
    isolation: str = "auto"
    expose: tuple[int, ...] = ()
    user: str | None = None
    ignore_chown: bool = False
    # network="allow:...": the parsed allowlist (made from ``network`` and the presets file)
    policy: Policy | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.rootfs, (str, os.PathLike)) or not str(self.rootfs):
            raise ConfigError("rootfs", f'must be "auto", "host", an image name or a directory, got {self.rootfs!r}')
        object.__setattr__(self, "rootfs", os.fspath(self.rootfs))
        mounts = []
        for i, m in enumerate(self.mounts or ()):
            if isinstance(m, str):
                m = Mount.parse(m)
            elif isinstance(m, Mapping):
                try:
                    m = Mount(**m)
                except TypeError as e:
                    raise ConfigError(f"mounts[{i}]", f"expected keys src, dst, rw: {e}") from None
            elif isinstance(m, (tuple, list)):
                m = Mount(*m)
            if not isinstance(m, Mount):
                raise ConfigError(f"mounts[{i}]", f"expected a Mount or 'SRC:DST[:ro|rw]', got {m!r}")
            mounts.append(m)
        if len(mounts) > MAX_BINDS:  # the executor carries at most this many into a copy-on-write root
            raise ConfigError("mounts", f"at most {MAX_BINDS} mounts are supported, got {len(mounts)}")
        dsts = [m.dst for m in mounts]
        for d in dsts:
            if dsts.count(d) > 1:
                raise ConfigError("mounts", f"{d} is mounted twice")
        object.__setattr__(self, "mounts", tuple(mounts))
        if isinstance(self.limits, Mapping):
            try:
                object.__setattr__(self, "limits", Limits(**self.limits))
            except TypeError as e:
                allowed = ", ".join(f.name for f in dataclasses.fields(Limits))
                raise ConfigError("limits", f"{e}; allowed keys: {allowed}") from None
        if not isinstance(self.limits, Limits):
            raise ConfigError("limits", f"expected a Limits or a mapping, got {self.limits!r}")
        object.__setattr__(self, "policy", check_network(self.network))
        ports = self.expose
        if isinstance(ports, int) or not isinstance(ports, (tuple, list)) or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports
        ):
            raise ConfigError("expose", f"must be a list of ports (1-65535), got {ports!r}")
        if len(set(ports)) != len(ports):
            raise ConfigError("expose", f"a port is listed twice: {list(ports)}")
        if ports and self.network == "host":
            raise ConfigError("expose", "with network='host' a server in the sandbox is on the host's network "
                              "already: nothing to expose", hint="use network='none' (or allow:...) with expose")  # fmt: skip
        if PROXY_PORT in ports and self.policy is not None:
            raise ConfigError("expose", f"port {PROXY_PORT} is the egress proxy's in a sandbox with an allowlist")
        object.__setattr__(self, "expose", tuple(ports))
        if self.isolation not in ISOLATION_MODES:
            raise ConfigError("isolation", f"must be one of {', '.join(ISOLATION_MODES)}, got {self.isolation!r}")
        if self.cgroups not in CGROUP_MODES:
            raise ConfigError("cgroups", f"must be one of {', '.join(CGROUP_MODES)}, got {self.cgroups!r}")
        if not isinstance(self.env, Mapping):
            raise ConfigError("env", f"must be a mapping of str to str, got {type(self.env).__name__}")
        for k, v in self.env.items():
            check_env_pair(k, v)
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "workdir", _check_abs("workdir", self.workdir))
        if self.user is not None and (not isinstance(self.user, str) or not self.user.strip(":")
                                      or not all(p and "/" not in p and "\0" not in p and len(p) <= 256
                                                 for p in self.user.split(":", 1))):  # fmt: skip
            raise ConfigError("user", f"must be UID[:GID] or NAME[:GROUP], got {self.user!r}")
        if not isinstance(self.ignore_chown, bool):
            raise ConfigError("ignore_chown", f"must be True or False, got {self.ignore_chown!r}")
        if self.hostname is not None and (not isinstance(self.hostname, str) or not self.hostname
                                          or len(self.hostname) > 64):  # fmt: skip
            raise ConfigError("hostname", f"must be 1-64 characters or None, got {self.hostname!r}")

    def replace(self, **changes: Any) -> "SandboxConfig":
        return dataclasses.replace(self, **changes)


def check_network(value: Any, field_name: str = "network") -> Policy | None:
    """A network mode: ``"none"``, ``"host"`` (None is returned) or ``"allow:<rules>"`` (its parsed
    ``Policy``, presets from the user's presets file); ConfigError naming what is wrong."""
    if isinstance(value, str) and value.startswith(PREFIX):
        try:
            return Policy.parse(value)
        except ConfigError as e:
            raise ConfigError(field_name, e.message.removeprefix(f"{e.field}: "), hint=e.hint) from None
    if value not in NETWORK_MODES:
        raise ConfigError(field_name, f"must be none, host or allow:RULE,RULE,..., got {value!r}",
                          hint='e.g. allow:pypi (the Python package index only), allow:pypi,*.example.org')  # fmt: skip
    return None


def image_as_rootfs(overrides: dict[str, Any], field_name: str = "image") -> dict[str, Any]:
    """``image=REF`` (a container image in the store: ``sandboxlite image list``) given where the
    ``SandboxConfig`` fields are: the sandbox's root, i.e. ``rootfs=REF``.  Giving both is a
    ConfigError unless they agree.  Returns the fields without ``image``."""
    if "image" not in overrides:
        return overrides
    fields = dict(overrides)
    image = fields.pop("image")
    if image is None:
        return fields
    if not isinstance(image, str) or not image.strip():
        raise ConfigError(field_name, f"must be a container image reference (python:3.12-slim), got {image!r}")
    if fields.get("rootfs", "auto") not in ("auto", image):
        raise ConfigError(field_name, f"{image!r} and rootfs={fields['rootfs']!r} both name the root",
                          hint="give one of them")  # fmt: skip
    fields["rootfs"] = image
    return fields


def check_timeout(value: Any, field_name: str = "timeout") -> float:
    """A timeout in seconds: a positive number (not NaN); above ``MAX_TIMEOUT_S`` it is that."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
        raise ConfigError(field_name, f"must be a positive number of seconds, got {value!r}")
    return min(float(value), MAX_TIMEOUT_S)


def check_env_pair(key: Any, value: Any, field_name: str = "env") -> None:
    if not isinstance(key, str) or not key or "=" in key or "\0" in key:
        raise ConfigError(field_name, f"variable names must be non-empty strings without '=' or NUL, got {key!r}")
    if not isinstance(value, str) or "\0" in value:
        raise ConfigError(f"{field_name}[{key!r}]", f"must be a string without NUL bytes, got {value!r}")


def base_env(config: SandboxConfig, places: Mapping[str, str] | None = None,
             image: Sequence[tuple[str, str]] = ()) -> dict[str, str]:  # fmt: skip
    """The environment every command starts from (``places``: a Landlock sandbox's HOME and
    TMPDIR, and no HOSTNAME: without a UTS namespace the host's name is the sandbox's).  A
    container image's own ``Env`` (``image``) goes over sandboxlite's defaults (its PATH, LANG,
    ...), but not over the sandbox's own places (HOME, TMPDIR), the proxy or ``config.env``."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/root",
        "USER": "root",
        "LOGNAME": "root",
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        **({"HOSTNAME": config.hostname} if config.hostname else {}),
        "TMPDIR": "/tmp",
        "MPLBACKEND": "Agg",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update((k, v) for k, v in image if k not in ("HOME", "TMPDIR", "HOSTNAME"))
    if config.policy is not None:  # what curl, pip, apt, requests, urllib and git go through
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            env[name] = env[name.lower()] = PROXY_URL
        env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
        env["PIP_ROOT_USER_ACTION"] = "ignore"  # the root is a disposable copy-on-write layer
    if places is not None:
        env.pop("HOSTNAME", None)
        env.update(places)
    env.update(config.env)
    return env


PATH_MAX_BYTES = 4095  # the kernel's PATH_MAX, less its NUL: longer paths never resolve


def resolve_path(path: Any, workdir: str, field_name: str = "path") -> str:
    """A path inside the sandbox, absolute (relative paths start at ``workdir``), checked."""
    from .errors import file_error

    p = os.fspath(path)
    if not isinstance(p, str) or not p or "\0" in p:
        raise ConfigError(field_name, f"must be a non-empty path without NUL bytes, got {path!r}")
    try:
        size = len(p.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as e:
        raise ConfigError(field_name, f"is not valid text ({e.reason} at position {e.start}): {path!r}") from None
    p = p if p.startswith("/") else os.path.join(workdir, p)
    if size > PATH_MAX_BYTES or len(p) > PATH_MAX_BYTES:
        raise file_error(errno.ENAMETOOLONG, p[:200] + "...", f"path is {size} bytes, over PATH_MAX")
    return p
