"""The runtimes sandboxlite is compared with, each over the same root filesystem where it can be.

=================  ===============================================================================
``posix_spawn``    ``os.posix_spawn`` + ``waitpid`` of the host's binary: the floor for a process
``subprocess_run`` ``subprocess.run(cmd)`` on the host (cold ``true`` only)
``unshare``        ``unshare -Urmpf --mount-proc [--root IMAGE] CMD``: the floor for new user, mount
                   and pid namespaces without bwrap (chrooted into the image when there is one)
``raw_bwrap``      bwrap alone with flags equivalent to sandboxlite's isolation, running CMD directly
``docker``         ``docker run --rm --network none IMAGE CMD`` (the image: the rootfs ``docker import``-ed)
``podman``         the same with podman
``runc``           ``runc run`` of an OCI bundle whose root is the image directory (read-only)
``host``           file metrics: the same bytes written to / read from a host tmpfs
``sandlock``       PyPI ``sandlock`` (Landlock + seccomp, no namespaces): ``Sandbox(...).run(CMD)``,
                   configured as close to sandboxlite as it allows (the ``sandlock`` extra)
=================  ===============================================================================

Every runtime says why it cannot run (``reason``) instead of disappearing from the report.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import (
    HOST_ENV,
    SLEEP_CMD,
    TRUE,
    TRUE_CMD,
    Spawner,
    Unavailable,
    first_line,
    ms,
    run_capture,
    short_error,
    spawn,
)

LOCAL = ["raw_bwrap", "unshare", "sandlock", "posix_spawn", "subprocess_run", "host"]
CONTAINERS = ["docker", "podman", "runc"]
ALL = LOCAL + CONTAINERS
LABEL = "sandboxlite-bench"
SETUP_HINT = "sudo bench/setup_docker.sh"


def select_baselines(spec: str | None) -> list[str]:
    """``--baselines``: all (default), none, local, containers, or names, comma-separated."""
    if spec is None or spec.strip() in ("", "all"):
        return list(ALL)
    out: list[str] = []
    for item in (x.strip() for x in spec.split(",")):
        if not item or item == "none":
            continue
        names = {"all": ALL, "local": LOCAL, "containers": CONTAINERS}.get(item, [item])
        for n in names:
            if n not in ALL:
                raise ValueError(f"unknown baseline {n!r} (known: {', '.join(ALL)}; "
                                 "groups: all, local, containers, none)")
            if n not in out:
                out.append(n)
    return [n for n in ALL if n in out]


@dataclass
class Context:
    """What every runtime needs to know: the rootfs and where to keep its scratch files."""

    rootfs: str  # the spec given (host, auto, lean, a directory ...)
    plan: Any  # sandboxlite.images.RootfsPlan
    cgroups: str
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{int(time.time())}")
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sandboxlite-bench-", dir="/var/tmp")))
    log: Callable[[str], None] = print

    @property
    def image_dir(self) -> str | None:
        return self.plan.path if self.plan.kind == "dir" else None

    def image_id(self) -> str:
        """A short, stable id of the rootfs content (the image manifest digest when there is one)."""
        if self.image_dir is None:
            return "host"
        try:
            m = json.loads((Path(self.image_dir).parent / "manifest.json").read_text())
            if m.get("digest"):
                return m["digest"].split(":")[-1][:12]
        except (OSError, ValueError):
            pass
        st = os.stat(self.image_dir)
        return hashlib.sha256(f"{self.image_dir}:{st.st_ino}:{st.st_mtime_ns}".encode()).hexdigest()[:12]


class Runtime:
    """A baseline.  Subclasses fill in what they can do; ``None`` from a method: not applicable."""

    name = ""
    description = ""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.reason: str | None = None  # why it cannot run here (None: it can)
        self.info: dict[str, Any] = {}

    def prepare(self) -> None:
        """Probe and set up (untimed); raise Unavailable(reason)."""

    # one timed sample of a cold start of cmd, in ms
    def cold(self, cmd: list[str]) -> Callable[[], float] | None:
        return None

    # a live instance for exec_true / warm_true: (timed exec of cmd, close)
    def live(self) -> Live | None:
        return None

    # one full cycle (create + exec true + close), untimed here: throughput times it
    def cycle(self) -> None:
        fn = self.cold(TRUE_CMD)
        if fn is None:
            raise Unavailable("no full cycle")
        fn()

    # density: idle instances
    def idle_start(self) -> Any:
        raise Unavailable("not applicable")

    def idle_pids(self, handles: list[Any]) -> list[int | None]:
        """The root pid of each instance's process tree (what its memory is summed over)."""
        return [None for _ in handles]

    def idle_stop(self, handles: list[Any]) -> None:
        pass

    def cleanup(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "status": "ok" if self.reason is None else f"not available: {self.reason}",
                "description": self.description, **self.info}  # fmt: skip


@dataclass
class Live:
    exec: Callable[[list[str]], Callable[[], float]]  # cmd -> timed sample
    close: Callable[[], None]


def _kill_wait(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# --- host processes --------------------------------------------------------------------------
class PosixSpawn(Runtime):
    name = "posix_spawn"
    description = "os.posix_spawn + os.waitpid of the host's binary (the floor for starting a process)"

    def cold(self, cmd):
        if not os.access(cmd[0], os.X_OK):
            raise Unavailable(f"{cmd[0]} not found on the host")
        return Spawner(cmd, what=f"host {cmd[0]}")

    def live(self):
        return Live(exec=lambda cmd: Spawner(cmd, what=f"host {cmd[0]}"), close=lambda: None)

    def idle_start(self):
        return spawn(SLEEP_CMD[0], SLEEP_CMD, HOST_ENV)

    def idle_pids(self, handles):
        return list(handles)

    def idle_stop(self, handles):
        for pid in handles:
            _kill_wait(pid)


class SubprocessRun(Runtime):
    name = "subprocess_run"
    description = "subprocess.run(cmd) on the host"

    def cold(self, cmd):
        if cmd != TRUE_CMD:
            return None  # one is enough: it only adds Python's overhead to posix_spawn

        def run() -> float:
            t0 = time.perf_counter_ns()
            rc = subprocess.run(cmd, check=False).returncode
            t1 = time.perf_counter_ns()
            if rc != 0:
                raise RuntimeError(f"{cmd[0]} exited {rc}")
            return ms(t1 - t0)

        return run

    def cycle(self) -> None:
        raise Unavailable("not applicable")


class Unshare(Runtime):
    name = "unshare"
    description = "unshare -Urmpf --mount-proc [--root IMAGE] CMD (util-linux): namespaces without bwrap"

    def prepare(self) -> None:
        path = shutil.which("unshare")
        if not path:
            raise Unavailable("`unshare` is not installed (util-linux)")
        self.prefix = [path, "-Urmpf", "--mount-proc"]
        if self.ctx.image_dir:
            self.prefix.append(f"--root={self.ctx.image_dir}")
        try:
            p = run_capture([*self.prefix, TRUE], timeout=10)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Unavailable(short_error(e)) from None
        if p.returncode != 0:
            raise Unavailable(f"{' '.join(self.prefix)} {TRUE} exited {p.returncode}: {first_line(p.stderr)}")
        self.info["argv"] = [*self.prefix, "CMD"]
        self.info["version"] = first_line(run_capture([path, "--version"]).stdout)

    def cold(self, cmd):
        return Spawner([*self.prefix, *cmd], what="unshare")

    def idle_start(self):
        return spawn(self.prefix[0], [*self.prefix, "--kill-child", *SLEEP_CMD], HOST_ENV)

    def idle_pids(self, handles):
        return list(handles)

    def idle_stop(self, handles):
        for pid in handles:
            _kill_wait(pid)


# --- raw bwrap -----------------------------------------------------------------------------
def reference_bwrap_prefix(config, plan, info) -> list[str]:
    """What a user would hand to bwrap for the isolation sandboxlite gives (the same namespaces,
    no capabilities, the same seccomp filter, the same read-only root and the same size-capped
    tmpfs), with SECCOMP_FD as a placeholder.  sandboxlite itself lets its executor build the
    writable mounts (so that reset can rebuild them), so its argv differs from this one."""
    from ..jail.plan import NAMESPACE_FLAGS

    lim = config.limits
    a = [info.path, *NAMESPACE_FLAGS, "--unshare-net"]
    if info.disable_userns:
        a.append("--disable-userns")
    a += ["--uid", "0", "--gid", "0", "--hostname", config.hostname, "--new-session", "--as-pid-1",
          "--cap-drop", "ALL", "--clearenv", "--seccomp", "SECCOMP_FD", "--chdir", "/"]  # fmt: skip
    for src, dst in plan.binds:
        a += ["--ro-bind", src, dst]
    for target, path in plan.symlinks:
        a += ["--symlink", target, path]
    a += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    tmpfs = (("/dev/shm", lim.tmp_mb), ("/tmp", lim.tmp_mb), ("/root", lim.tmp_mb), ("/testbed", lim.testbed_mb))
    for path, mb in tmpfs:
        a += ["--size", str(mb << 20), "--tmpfs", path]
    a += ["--remount-ro", "/"]
    return a


class RawBwrap(Runtime):
    name = "raw_bwrap"
    description = ("bwrap alone, with flags equivalent to sandboxlite's isolation (namespaces, no capabilities, "
                   "the same seccomp filter, the same read-only root, size-capped tmpfs), running CMD directly")

    def prepare(self) -> None:
        from ..config import SandboxConfig
        from ..isolation import bwrap

        info = bwrap.find_bwrap()
        config = SandboxConfig(rootfs=self.ctx.rootfs)
        try:
            self.prefix = reference_bwrap_prefix(config, self.ctx.plan, info)
        except Exception as e:  # noqa: BLE001 - reported, not raised
            raise Unavailable(f"cannot build a bwrap argv: {short_error(e)}") from None
        self.sec_index = self.prefix.index("SECCOMP_FD")
        self.path = info.path
        self.info["argv"] = self.argv(["CMD"], -1)
        self.info["uid"] = os.geteuid()
        try:
            self.cold(TRUE_CMD)()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            raise Unavailable(short_error(e)) from None

    def argv(self, cmd: list[str], sec_fd: int, extra: tuple[str, ...] = ()) -> list[str]:
        a = list(self.prefix)
        a[self.sec_index] = str(sec_fd)
        return [a[0], *extra, *a[1:], *cmd]

    def _seccomp_fd(self) -> tuple[int, ...]:
        from ..isolation import seccomp

        return (seccomp.filter_fd(),)

    def cold(self, cmd):
        raw = self

        class BwrapSpawner(Spawner):
            def __call__(self) -> float:
                fds = raw._seccomp_fd()  # made outside the timed region
                self.argv = raw.argv(cmd, fds[0])
                self.keep_fds = lambda: fds
                return super().__call__()

        return BwrapSpawner([self.path], {}, what="bwrap", setsid=True)

    def idle_start(self):
        (fd,) = self._seccomp_fd()
        try:
            return spawn(self.path, self.argv(SLEEP_CMD, fd, ("--die-with-parent",)), {}, keep_fds=(fd,), setsid=True)
        finally:
            os.close(fd)

    def idle_pids(self, handles):
        return list(handles)

    def idle_stop(self, handles):
        for pid in handles:
            _kill_wait(pid)


# --- container engines -----------------------------------------------------------------------
class ContainerCLI(Runtime):
    """docker or podman: the rootfs imported as an image, ``run --rm --network none``."""

    binary = ""
    hint = ""
    rm_extra: tuple[str, ...] = ()

    def prepare(self) -> None:
        path = shutil.which(self.binary)
        if not path:
            raise Unavailable(f"`{self.binary}` is not installed ({self.hint})")
        self.path = path
        if self.ctx.image_dir is None:
            raise Unavailable(f"rootfs {self.ctx.rootfs!r} is not an image directory, and the baseline must use the "
                              f"same rootfs (use --rootfs lean or science)")  # fmt: skip
        self.server_version()
        self.image = f"sandboxlite-bench/{Path(self.ctx.plan.name).name.lower()}:{self.ctx.image_id()}"
        self.ensure_image()
        self.run_prefix = [self.path, "run", "--rm", "--network", "none", "--label", f"{LABEL}={self.ctx.run_id}"]
        self.info["image"] = self.image
        self.live_ids: list[str] = []
        try:
            self.cold(TRUE_CMD)()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            msg = str(e)
            # runc: "error setting rlimit"; crun: "setrlimit `RLIMIT_NOFILE`: Operation not permitted"
            if "error setting rlimit" not in msg and "setrlimit" not in msg:
                raise Unavailable(short_error(e)) from None
            # podman asks for nofile 1048576 / nproc 4194304 by default, which needs CAP_SYS_RESOURCE
            # (root in some VMs and containers lacks it): ask for sandboxlite's nofile and a plain nproc
            self.run_prefix += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=8192:8192"]
            self.info["note"] = (f"the default run failed ({first_line(str(e))[:160]}); runs with explicit "
                                 "--ulimit nofile=1024:1024 --ulimit nproc=8192:8192")  # fmt: skip
            try:
                self.cold(TRUE_CMD)()
            except Exception as e2:  # noqa: BLE001 - reported, not raised
                raise Unavailable(short_error(e2)) from None
        self.info["argv"] = [*self.run_prefix, self.image, "CMD"]

    def server_version(self) -> None:
        raise NotImplementedError

    def ensure_image(self) -> None:
        p = run_capture([self.path, "image", "inspect", self.image], timeout=60)
        if p.returncode == 0:
            self.info["image_import_s"] = "cached"
            return
        self.ctx.log(f"{self.name}: importing {self.ctx.image_dir} as {self.image} (once; cached by digest)")
        t0 = time.monotonic()
        tar = subprocess.Popen(["tar", "-C", self.ctx.image_dir, "--numeric-owner", "-cf", "-", "."],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            imp = subprocess.run([self.path, "import", "-", self.image], stdin=tar.stdout, capture_output=True,
                                 check=False, timeout=1800)
        finally:
            tar.stdout.close()  # type: ignore[union-attr]
            tar.wait()
        if imp.returncode != 0:
            raise Unavailable(f"`{self.binary} import` of the rootfs failed: {first_line(imp.stderr)}")
        self.info["image_import_s"] = round(time.monotonic() - t0, 1)

    def cold(self, cmd):
        return Spawner([*self.run_prefix, self.image, *cmd], what=f"{self.binary} run")

    def _start_detached(self) -> str:
        p = run_capture([*self.run_prefix[:2], "-d", *self.run_prefix[3:], self.image, *SLEEP_CMD], timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"{self.binary} run -d failed: {first_line(p.stderr)}")
        cid = p.stdout.decode().strip().splitlines()[-1]
        self.live_ids.append(cid)
        return cid

    def _remove(self, ids: list[str]) -> None:
        for i in range(0, len(ids), 50):
            chunk = ids[i : i + 50]
            run_capture([self.path, "rm", "-f", *self.rm_extra, *chunk], timeout=300)
            self.live_ids = [x for x in self.live_ids if x not in chunk]

    def live(self):
        cid = self._start_detached()
        return Live(exec=lambda cmd: Spawner([self.path, "exec", cid, *cmd], what=f"{self.binary} exec"),
                    close=lambda: self._remove([cid]))  # fmt: skip

    def idle_start(self):
        return self._start_detached()

    def idle_pids(self, handles):
        out: list[int | None] = []
        for i in range(0, len(handles), 50):
            chunk = handles[i : i + 50]
            p = run_capture([self.path, "inspect", "-f", "{{.State.Pid}}", *chunk], timeout=120)
            pids = [int(x) for x in p.stdout.decode().split()] if p.returncode == 0 else []
            out += self._tree_roots(pids) if len(pids) == len(chunk) else [None] * len(chunk)
        return out

    def _tree_roots(self, pids: list[int]) -> list[int | None]:
        """The container's init and its engine-side parent (docker: containerd-shim; podman: conmon)."""
        import psutil

        roots: list[int | None] = []
        for pid in pids:
            try:
                parent = psutil.Process(pid).parent()
                engine_side = parent is not None and ("shim" in parent.name() or "conmon" in parent.name())
                roots.append(parent.pid if engine_side else pid)
            except psutil.Error:
                roots.append(None)
        return roots

    def idle_stop(self, handles):
        self._remove(list(handles))

    def cleanup(self) -> None:
        if getattr(self, "path", None) is None:
            return
        p = run_capture([self.path, "ps", "-aq", "--filter", f"label={LABEL}={self.ctx.run_id}"], timeout=60)
        ids = p.stdout.decode().split() if p.returncode == 0 else []
        if ids:
            self._remove(ids)


class Docker(ContainerCLI):
    name = binary = "docker"
    hint = f"{SETUP_HINT} installs docker.io and starts dockerd"
    description = "docker run --rm --network none IMAGE CMD (IMAGE: the same rootfs, docker import-ed)"

    def server_version(self) -> None:
        try:
            p = run_capture([self.path, "version", "--format", "{{.Server.Version}}"], timeout=20)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"the Docker daemon does not answer ({SETUP_HINT} starts one)") from None
        if p.returncode != 0 or not p.stdout.strip():
            raise Unavailable(f"no Docker daemon ({SETUP_HINT} starts one): {first_line(p.stderr)}")
        self.info["server_version"] = p.stdout.decode().strip()
        c = run_capture([self.path, "version", "--format", "{{.Client.Version}}"], timeout=20)
        self.info["client_version"] = c.stdout.decode().strip()
        fmt = "{{.Driver}} {{.CgroupDriver}} {{.DefaultRuntime}}"
        i = run_capture([self.path, "info", "--format", fmt], timeout=20)
        if i.returncode == 0:
            parts = i.stdout.decode().split()
            self.info.update(dict(zip(("storage_driver", "cgroup_driver", "runtime"), parts)))


class Podman(ContainerCLI):
    name = binary = "podman"
    hint = f"{SETUP_HINT} --podman installs it"
    rm_extra = ("-t", "0")  # kill at once (`sleep` as PID 1 ignores the SIGTERM; podman would wait 10 s)
    description = "podman run --rm --network none IMAGE CMD (IMAGE: the same rootfs, podman import-ed)"

    def server_version(self) -> None:
        p = run_capture([self.path, "version", "--format", "{{.Client.Version}}"], timeout=30)
        if p.returncode != 0:
            raise Unavailable(f"`podman version` failed: {first_line(p.stderr)}")
        self.info["version"] = p.stdout.decode().strip()


class Runc(Runtime):
    name = "runc"
    description = "runc run of an OCI bundle (runc spec; root: the image directory, read-only)"

    def prepare(self) -> None:
        path = shutil.which("runc")
        if not path:
            raise Unavailable(f"`runc` is not installed (comes with docker.io: {SETUP_HINT}; or apt-get install runc)")
        if os.geteuid() != 0:
            raise Unavailable("the runc baseline runs as root (a rootless bundle would need the image remapped)")
        if self.ctx.image_dir is None:
            raise Unavailable(f"rootfs {self.ctx.rootfs!r} is not an image directory (use --rootfs lean or science)")
        self.path = path
        self.state = self.ctx.scratch / "runc-state"
        self.bundles: dict[tuple[str, ...], Path] = {}
        self.ids = itertools.count()
        self.info["version"] = (run_capture([path, "--version"]).stdout.decode().splitlines() or [""])[0]
        self.info["argv"] = [path, "--root", str(self.state), "run", "--bundle", "BUNDLE", "ID"]
        self._spec = self._base_spec()
        try:
            self.cold(TRUE_CMD)()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            raise Unavailable(short_error(e)) from None

    def _base_spec(self) -> dict:
        d = self.ctx.scratch / "runc-spec"
        d.mkdir(exist_ok=True)
        p = run_capture([self.path, "spec", "--bundle", str(d)], timeout=30)
        if p.returncode != 0:
            raise Unavailable(f"runc spec failed: {first_line(p.stderr)}")
        spec = json.loads((d / "config.json").read_text())
        spec["root"] = {"path": self.ctx.image_dir, "readonly": True}
        spec["process"]["terminal"] = False
        spec["process"]["env"] = [f"{k}={v}" for k, v in HOST_ENV.items()]
        spec["process"]["cwd"] = "/"
        spec["hostname"] = "sandbox"
        return spec

    def bundle(self, cmd: list[str]) -> Path:
        key = tuple(cmd)
        if key not in self.bundles:
            d = self.ctx.scratch / f"runc-bundle-{len(self.bundles)}"
            d.mkdir(exist_ok=True)
            spec = json.loads(json.dumps(self._spec))
            spec["process"]["args"] = list(cmd)
            (d / "config.json").write_text(json.dumps(spec))
            self.bundles[key] = d
        return self.bundles[key]

    def _id(self) -> str:
        return f"slb-{self.ctx.run_id}-{next(self.ids)}"

    def cold(self, cmd):
        bundle = self.bundle(cmd)
        runc = self

        class RuncSpawner(Spawner):
            def __call__(self) -> float:
                self.argv = [runc.path, "--root", str(runc.state), "run", "--bundle", str(bundle), runc._id()]
                return super().__call__()

        return RuncSpawner([self.path], what="runc run")

    def _start_detached(self) -> str:
        cid = self._id()
        # the container inherits runc's stdio: no pipe that would stay open (and block a reader) for its life
        with tempfile.TemporaryFile() as err:
            p = subprocess.run([self.path, "--root", str(self.state), "run", "-d", "--bundle",
                                str(self.bundle(SLEEP_CMD)), cid], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=err, timeout=60, check=False)  # fmt: skip
            if p.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"runc run -d failed: {first_line(err.read())}")
        return cid

    def _delete(self, ids: list[str]) -> None:
        for cid in ids:
            run_capture([self.path, "--root", str(self.state), "delete", "-f", cid], timeout=60)

    def live(self):
        cid = self._start_detached()
        return Live(exec=lambda cmd: Spawner([self.path, "--root", str(self.state), "exec", cid, *cmd],
                                             what="runc exec"),
                    close=lambda: self._delete([cid]))  # fmt: skip

    def idle_start(self):
        return self._start_detached()

    def idle_pids(self, handles):
        out: list[int | None] = []
        for cid in handles:
            p = run_capture([self.path, "--root", str(self.state), "state", cid], timeout=30)
            try:
                out.append(int(json.loads(p.stdout)["pid"]))
            except (ValueError, KeyError, TypeError):
                out.append(None)
        return out

    def idle_stop(self, handles):
        self._delete(list(handles))

    def cleanup(self) -> None:
        if getattr(self, "path", None) is None or not self.state.exists():
            return
        p = run_capture([self.path, "--root", str(self.state), "list", "-q"], timeout=60)
        self._delete(p.stdout.decode().split())


class HostFiles(Runtime):
    name = "host"
    description = "the same bytes written to / read from a file on a host tmpfs (/dev/shm when it is one)"

    def prepare(self) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.dir = Path(tempfile.mkdtemp(prefix="sandboxlite-bench-", dir=base))
        self.info["dir"] = str(self.dir)

    def cleanup(self) -> None:
        if getattr(self, "dir", None) is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def cycle(self) -> None:
        raise Unavailable("not applicable")


class Sandlock(Runtime):
    name = "sandlock"
    description = ("sandlock (PyPI) Sandbox.run(CMD): Landlock + seccomp-notify in the caller's namespaces; "
                   "read-only image (chroot), one writable scratch directory, no network, limits on")  # fmt: skip

    def prepare(self) -> None:
        try:
            import sandlock
        except ImportError:
            raise Unavailable("PyPI sandlock is not installed (pip install 'sandboxlite[sandlock]')") from None
        self.mod = sandlock
        self.scratch = Path(tempfile.mkdtemp(prefix="sandlock-", dir=self.ctx.scratch))
        image = self.ctx.image_dir
        # as close to sandboxlite's defaults as it goes: the image read-only at /, one writable
        # directory, no network, process/memory/file limits, a clean environment, no core dumps
        # (with chroot= its paths are the image's: /tmp is the scratch directory mapped in)
        place = {"fs_writable": ["/tmp"], "fs_mount": {"/tmp": str(self.scratch)}} if image else \
            {"fs_writable": [str(self.scratch)]}  # fmt: skip
        self.kwargs = dict(fs_readable=["/"], chroot=image, max_processes=512, max_memory="4G",
                           max_open_files=1024, clean_env=True, env=HOST_ENV, no_coredump=True, **place)  # fmt: skip
        self.info["version"] = getattr(sandlock, "__version__", "?")
        self.info["config"] = {k: v for k, v in self.kwargs.items() if k != "env"}
        probe = "id -u; grep -E 'CapEff|NSpid' /proc/self/status; readlink /proc/self/ns/pid /proc/self/ns/mnt"
        # who its command is: asked over the host's root (the image has no /proc of its own)
        r = sandlock.Sandbox(fs_readable=["/"], clean_env=True, env=HOST_ENV).run(["/bin/sh", "-c", probe], timeout=30)
        if not r.success:
            why = (r.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {r.exit_code}"]
            raise Unavailable(f"sandlock could not run a command here: {why[0][:200]}")
        text = r.stdout.decode(errors="replace")
        uid = text.split()[0] if text.split() else "?"
        cap = re.search(r"CapEff:\s*([0-9a-f]+)", text)
        ns = set(re.findall(r"\w+:\[\d+\]", text))
        own = {os.readlink(f"/proc/self/ns/{n}") for n in ("pid", "mnt")}
        self.info["observed"] = " ".join(text.split())
        self.info["isolation_lacks"] = [
            f"its command runs as host uid {uid}, the caller's (no user namespace)",
            f"it keeps the caller's capabilities (CapEff {cap.group(1)})" if cap and cap.group(1).strip("0") else
            "no capabilities kept",
            "no PID, mount, network, IPC or UTS namespace: " + ("the host's own" if ns and ns <= own else
                                                              f"seen {sorted(ns)}"),
            "no copy-on-write root: the image is read-only, writes go to one host directory (shared by every run)",
        ]  # fmt: skip

    def cold(self, cmd):
        box = self.mod.Sandbox

        def one() -> float:
            t0 = time.perf_counter_ns()
            r = box(**self.kwargs).run(cmd, timeout=60)
            t1 = time.perf_counter_ns()
            if not r.success:
                raise RuntimeError(f"sandlock run exited {r.exit_code}: {(r.stderr or b'').decode(errors='replace')[-200:]}")
            return ms(t1 - t0)

        return one

    def box(self):
        """A ``SandlockBox`` (the Sandbox API the agent's tools use) over this baseline's settings."""
        from .sandlock_box import SandlockBox

        base = {k: v for k, v in self.kwargs.items() if k not in ("fs_writable", "fs_mount", "chroot")}
        return SandlockBox(self.mod, base, self.ctx.image_dir, self.scratch)

    def live(self):
        """sandlock has no exec into a living sandbox (a command must descend from the confined
        process): the closest is a confined ``/bin/sh`` kept running, each command written to its
        stdin and its end read back as a marker line (the shell forks it, as our executor does)."""
        mod = self.mod
        proc = mod.Sandbox(**self.kwargs).popen(["/bin/sh"], stdin=mod.StdioMode.PIPED, stdout=mod.StdioMode.PIPED,
                                                stderr=mod.StdioMode.NULL)  # fmt: skip
        marker = b"__sandboxlite_bench_done__"

        def run(cmd: list[str]) -> float:
            t0 = time.perf_counter_ns()
            proc.stdin.write(shlex.join(cmd).encode() + b"; echo " + marker + b" $?\n")
            proc.stdin.flush()
            while True:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("sandlock's shell ended")
                if line.startswith(marker):
                    break
            t1 = time.perf_counter_ns()
            if line.split()[1:] != [b"0"]:
                raise RuntimeError(f"sandlock exec of {cmd[0]} exited {line.split()[1:]}")
            return ms(t1 - t0)

        def close() -> None:
            proc.stdin.close()
            proc.wait()

        self.info["exec"] = "a command written to a confined /bin/sh kept running (its stdin and stdout are pipes)"
        return Live(exec=lambda cmd: lambda: run(cmd), close=close)

    def cleanup(self) -> None:
        if getattr(self, "scratch", None) is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


CLASSES: dict[str, type[Runtime]] = {c.name: c for c in (RawBwrap, Unshare, Sandlock, PosixSpawn, SubprocessRun,
                                                           HostFiles, Docker, Podman, Runc)}  # fmt: skip


def make_runtimes(names: list[str], ctx: Context) -> dict[str, Runtime]:
    """Instantiate and prepare each; one that cannot run keeps its reason."""
    out: dict[str, Runtime] = {}
    for name in names:
        rt = CLASSES[name](ctx)
        try:
            rt.prepare()
        except Unavailable as e:
            rt.reason = str(e)
        except Exception as e:  # noqa: BLE001 - a baseline must not take the run down; say why
            rt.reason = f"setup failed: {short_error(e)}"
        if rt.reason:
            ctx.log(f"{name}: not available: {rt.reason}")
        out[name] = rt
    return out
