"""The paper's package on sandboxlite: ``SandboxRuntime`` is its ``DockerRuntime``, in a sandbox.

The paper's code (PyPI ``llm-in-sandbox`` 0.2.0: its agent, its CLI ``llm-in-sandbox run`` and
``benchmark``, and the RL environment of its training code) drives one Docker container per
task through a small class, ``llm_in_sandbox.DockerRuntime``.  ``SandboxRuntime`` has the same
constructor, methods and observable behaviour, over a sandboxlite ``Sandbox`` (one of a
``SandboxPool`` when ``pool=`` is given); ``install()`` puts it in the package's place, so code
written for the paper runs unchanged::

    from sandboxlite.compat import llm_in_sandbox as compat
    compat.install()                    # before the paper's code builds its runtime
    from llm_in_sandbox import DockerRuntime   # now SandboxRuntime

What is the same (checked against the package's own code by tests/test_compat_llm_in_sandbox.py):

- ``run(code, timeout=120, workdir=None) -> (output, exit)``: ``code`` runs as
  ``timeout T bash -c CODE`` in ``workdir`` (default ``repo_path``), stdout and stderr merged in
  the order written; ANSI colour codes and carriage returns are removed; ``exit`` is ``"0"``,
  ``"Error: Exit code N"``, or ``"-1"`` with output ``"The command took too long to execute
  (>Ts)"`` for exit code 124 (``timeout``'s), or ``"Error: <repr of the exception>"``.
- ``demux_run`` likewise, with ``(stdout, stderr, exit)``.
- ``copy_to_container(src, dest)``: a file lands at ``dest``, a directory becomes ``dest`` with
  its tree; ``copy_dir_to_container(src_dir, dest_dir)``: the entries of ``src_dir`` land in
  ``dest_dir``; both make the parent directories and raise on failure.
- ``copy_from_container(path, local)``: makes ``local`` and copies the *contents* of the
  directory ``path`` into it.  As with Docker's runtime, a ``path`` that is a file copies
  nothing (its archive holds one member named like the path's last component, which that
  runtime skips as "the root directory itself").
- At start: ``repo_path`` and its ``input`` and ``output`` directories exist, ``git init`` has
  run there (where git is installed); commands get ``PATH`` = the package's ``DOCKER_PATH`` and
  its three ``PIP_*`` variables; ``get_task_instruction`` returns the statement; ``close()`` is
  idempotent and sets ``container`` to None.

What differs, on purpose: no Docker (``docker_image`` is that container image when sandboxlite's
store holds it (``sandboxlite image import``), else a built image of that name, else the default,
with a warning saying so; ``client`` is None); the network is off unless
``network_mode="host"``; ``setup_env`` does not point pip at the package's mirror in China;
symlinks copied out are kept only when they stay inside the copied tree (the host's files are
never written through a link); output is capped at ``Limits.output_bytes`` per stream.
Docker options: ``environment``, ``mem_limit``, ``network_mode`` (``"none"``, ``"host"``),
``volumes``, ``working_dir``; any other raises TypeError (never ignored).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import logging
import os
import re
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Mount, SandboxConfig
from ..errors import ConfigError, SandboxFileError, SetupError

# The package's own constants (llm_in_sandbox/__init__.py), facts of its interface.
CMD_TIMEOUT = 120
DOCKER_PATH = "/root/.local/bin:/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
COMMAND_ENV = {
    "PATH": DOCKER_PATH,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_ROOT_USER_ACTION": "ignore",
    "PIP_NO_WARN_SCRIPT_LOCATION": "1",
}
PACKAGE_VERSION = "0.2.0"  # the version this module mirrors (the [paper] extra pins it)

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\r")
DOCKER_OPTIONS = ("environment", "mem_limit", "network_mode", "volumes", "working_dir")
# over the command's own `timeout`: the sandbox's backstop, only if `timeout` itself hangs
_BACKSTOP_S = 30.0


def _logger(logger: Any) -> logging.Logger:
    """The package's conventions: None, its INFO logger; False, WARNING only; else the caller's."""
    if logger is None:
        return logging.getLogger("DockerRuntime")
    if logger is False:
        quiet = logging.getLogger("DockerRuntime.quiet")
        quiet.setLevel(logging.WARNING)
        return quiet
    return logger


def _memory_mb(value: Any) -> int:
    """Docker's ``mem_limit`` (bytes, or "512m", "4g") in MiB."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return max(1, value >> 20)
    m = re.fullmatch(r"\s*(\d+)\s*([bkmg]?)\s*", str(value).lower())
    if not m or int(m.group(1)) <= 0:
        raise ConfigError("mem_limit", f"expected bytes or a size like '4g', got {value!r}")
    n, unit = int(m.group(1)), m.group(2) or "b"
    return max(1, n * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit] >> 20)


def _mounts(volumes: Any) -> tuple[Mount, ...]:
    """docker-py's ``volumes``: {host: {"bind": dst, "mode": "ro"|"rw"}} or ["host:dst[:mode]"]."""
    if isinstance(volumes, Mapping):
        out = []
        for src, spec in volumes.items():
            if not isinstance(spec, Mapping) or "bind" not in spec:
                raise ConfigError("volumes", f"expected {{'bind': DST, 'mode': 'ro'|'rw'}} for {src!r}, got {spec!r}")
            out.append(Mount(src, spec["bind"], spec.get("mode", "rw") == "rw"))
        return tuple(out)
    if isinstance(volumes, (list, tuple)):
        return tuple(Mount.parse(v if v.count(":") == 2 else f"{v}:rw") for v in volumes)
    raise ConfigError("volumes", f"expected a mapping or a list of 'SRC:DST[:MODE]', got {volumes!r}")


def config_for(docker_image: str, repo_path: str, docker_kwargs: Mapping[str, Any],
               base: SandboxConfig | None = None) -> SandboxConfig:  # fmt: skip
    """The SandboxConfig a DockerRuntime(docker_image, repo_path, **docker_kwargs) stands for."""
    unknown = sorted(set(docker_kwargs) - set(DOCKER_OPTIONS))
    if unknown:
        raise TypeError(f"SandboxRuntime does not support the Docker option(s) {', '.join(unknown)} "
                        f"(supported: {', '.join(DOCKER_OPTIONS)})")  # fmt: skip
    cfg = base or SandboxConfig()
    changes: dict[str, Any] = {"workdir": docker_kwargs.get("working_dir") or repo_path}
    if base is None:
        changes["rootfs"] = root_for(docker_image)
    env = docker_kwargs.get("environment") or {}
    if not isinstance(env, Mapping):  # docker-py also takes ["K=V", ...]
        env = dict(str(e).split("=", 1) for e in env)
    changes["env"] = {**cfg.env, **{"PATH": DOCKER_PATH}, **{str(k): str(v) for k, v in env.items()}}
    if "mem_limit" in docker_kwargs:
        changes["limits"] = dataclasses.replace(cfg.limits, memory_mb=_memory_mb(docker_kwargs["mem_limit"]))
    mode = docker_kwargs.get("network_mode")
    if mode is not None:
        if mode not in ("none", "host"):
            raise ConfigError("network_mode", f"must be 'none' or 'host' in a sandbox, got {mode!r}",
                              hint="a bridge network has no sandbox equivalent: 'host' shares the host's")  # fmt: skip
        changes["network"] = mode
    if "volumes" in docker_kwargs:
        changes["mounts"] = (*cfg.mounts, *_mounts(docker_kwargs["volumes"]))
    return cfg.replace(**changes)


def root_for(docker_image: str) -> str:
    """The root a row's ``docker_image`` stands for: that container image when the store holds it
    (``sandboxlite image pull`` / ``import``; pulled now when ``SANDBOXLITE_PULL=missing``), else a
    built image of its name (``.../science:latest`` is science), else ``"auto"`` (the runtime says so)."""
    from ..images import image_root, store

    if docker_image and store.available(docker_image):
        return docker_image
    name = docker_image.rsplit("/", 1)[-1].split(":", 1)[0] if docker_image else ""
    return name if name and image_root(name).is_dir() else "auto"


class SandboxRuntime:
    """``llm_in_sandbox.DockerRuntime``'s interface over a sandbox (see the module's docstring).

    ``pool``: a ``SandboxPool`` to take the sandbox from (given back, reset, by ``close()``;
    its config stands, ``docker_image`` and the Docker options must agree with it or be left
    out); ``sandbox_config``: the config of a sandbox started for this runtime.
    """

    def __init__(self, docker_image: str, repo_path: str = "/testbed", command: str = "sleep infinity",
                 logger: Any = None, *, pool: Any = None, sandbox_config: SandboxConfig | None = None,
                 **docker_kwargs: Any) -> None:  # fmt: skip
        from ..jail.sandbox import Sandbox

        self.docker_image = docker_image
        self.repo_path = repo_path
        self.command = command  # the container's main process: a sandbox needs none
        self.docker_kwargs = docker_kwargs
        self.logger = _logger(logger)
        self.client = None
        self.container = None
        self.container_name = self._get_container_name(docker_image)
        self._pool = pool
        if pool is not None:
            if docker_kwargs:
                raise TypeError("with pool=, the pool's config stands: Docker options cannot change it "
                                f"(got {', '.join(sorted(docker_kwargs))})")  # fmt: skip
            self.sandbox = pool.acquire()
        else:
            self.sandbox = Sandbox(config_for(docker_image, repo_path, docker_kwargs, sandbox_config))
        try:
            if self.sandbox.workdir != (docker_kwargs.get("working_dir") or repo_path):
                raise SetupError(f"the paper's runtime works in {repo_path}, but this sandbox's workdir is "
                                 f"{self.sandbox.workdir} (isolation='landlock' has no {repo_path})",
                                 hint="use namespaces for the paper's code (isolation='namespaces')")  # fmt: skip
            self.container = self.sandbox
            self.setup_env()
        except BaseException:
            self._release()
            raise
        self.logger.info("sandbox environment initialized")
        root = self.sandbox.config.rootfs
        if root == self.docker_image:
            self.logger.info(f"image: {self.docker_image} (the container image, from sandboxlite's store)")
        else:
            self.logger.warning(f"image: {self.docker_image} is not in sandboxlite's store (sandboxlite image "
                                f"pull or import it, or set SANDBOXLITE_PULL=missing): running on sandboxlite's "
                                f"rootfs {root!r} instead")  # fmt: skip

    @staticmethod
    def _get_container_name(image_name: str) -> str:
        """A unique name, shaped like the Docker runtime's: the image's name and ten hex digits."""
        digest = hashlib.sha256(f"{datetime.datetime.now()}{os.getpid()}{id(object())}".encode()).hexdigest()[:10]
        return f"{image_name.replace('/', '-').replace(':', '-')}-{digest}"

    def setup_env(self) -> None:
        """The working directory with input/ and output/, and a git repository where git exists."""
        self.run(f"mkdir -p {self.repo_path}")
        self.run(f"mkdir -p {self.repo_path}/input {self.repo_path}/output")
        self.run(f"cd {self.repo_path} && git init 2>/dev/null || true")

    # -- commands ----------------------------------------------------------------------------
    def _exec(self, code: str, timeout: int, workdir: str | None, merged: bool):
        inner = f"timeout {timeout} bash -c {shlex.quote(code)}"
        argv = ["bash", "-c", f"exec 2>&1; {inner}" if merged else inner]
        return self.sandbox.exec(argv, cwd=self.repo_path if workdir is None else workdir, env=COMMAND_ENV,
                                 timeout=float(timeout) + _BACKSTOP_S)  # fmt: skip

    def run(self, code: str, timeout: int = CMD_TIMEOUT, workdir: str | None = None) -> tuple[str, str]:
        """Run ``code`` (bash); ``(output, "0" | "Error: Exit code N" | "-1")``."""
        try:
            r = self._exec(code, timeout, workdir, merged=True)
            if r.exit_code == 124:
                return f"The command took too long to execute (>{timeout}s)", "-1"
            output = _ANSI.sub("", r.stdout.decode("utf-8", errors="replace"))
            return (output, f"Error: Exit code {r.exit_code}") if r.exit_code != 0 else (output, "0")
        except Exception as e:
            return f"Error: {e!r}", "-1"

    def demux_run(self, code: str, timeout: int = CMD_TIMEOUT, workdir: str | None = None) -> tuple[str, str, str]:
        """Run ``code`` (bash); ``(stdout, stderr, "0" | "Error: Exit code N" | "-1")``."""
        try:
            r = self._exec(code, timeout, workdir, merged=False)
            if r.exit_code == 124:
                return f"The command took too long to execute (>{timeout}s)", "", "-1"
            out = _ANSI.sub("", r.stdout.decode("utf-8", errors="replace"))
            err = _ANSI.sub("", r.stderr.decode("utf-8", errors="replace"))
            return (out, err, f"Error: Exit code {r.exit_code}") if r.exit_code != 0 else (out, err, "0")
        except Exception as e:
            msg = f"Error: {e!r}"
            return msg, msg, "-1"

    # -- files -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _copying(self, failure: str, done: str):
        """The Docker runtime's logging around a copy: ``done`` when it worked, else ``failure: exc``
        as an error, and the exception raised on."""
        try:
            yield
        except Exception as e:
            self.logger.error(f"{failure}: {e!r}")
            raise
        self.logger.info(done)

    def copy_to_container(self, src_path: str, dest_path: str) -> None:
        """Copy a host file (or directory tree) to ``dest_path``."""
        with self._copying("Error copying file to container", f"Copied {src_path} to {dest_path}"):
            dest_dir = os.path.dirname(dest_path)
            if dest_dir:
                self.run(f"mkdir -p {dest_dir}")
            if not os.path.lexists(src_path):
                raise FileNotFoundError(2, "No such file or directory", src_path)
            self.sandbox.upload(src_path, dest_path)

    def copy_dir_to_container(self, src_dir: str, dest_dir: str) -> None:
        """Copy the entries of the host directory ``src_dir`` into ``dest_dir``."""
        with self._copying("Error copying directory to container", f"Copied directory {src_dir} to {dest_dir}"):
            self.run(f"mkdir -p {dest_dir}")
            for item in os.listdir(src_dir):
                self.sandbox.upload(os.path.join(src_dir, item), os.path.join(dest_dir, item))

    def copy_from_container(self, container_path: str, local_path: str) -> None:
        """Copy the contents of the directory ``container_path`` into ``local_path`` (made)."""
        with self._copying("Error copying from container", f"Copied {container_path} from container to {local_path}"):
            os.makedirs(local_path, exist_ok=True)
            path = container_path if container_path.startswith("/") else os.path.join(self.repo_path, container_path)
            kind, _ = self.run(f"test -d {shlex.quote(path)} && echo dir || (test -e {shlex.quote(path)} && echo file)")
            if kind.strip() == "file":
                return  # the Docker runtime's archive holds the file under its own name, which it skips
            if kind.strip() != "dir":
                raise SandboxFileError(2, path, "Could not find the file in the container")
            with tempfile.TemporaryDirectory(dir=local_path, prefix=".copy-") as tmp:
                dst = Path(tmp) / "tree"
                self.sandbox.download(path, dst)
                _merge(dst, Path(local_path))

    # -- the rest ----------------------------------------------------------------------------
    def get_task_instruction(self, problem_statement: str) -> str:
        return problem_statement

    def _release(self) -> None:
        sb, self.sandbox = getattr(self, "sandbox", None), None
        if sb is None:
            return
        if self._pool is not None:
            self._pool.release(sb)
        else:
            sb.close()

    def close(self) -> None:
        """Give the sandbox back (to its pool, reset) or close it; idempotent."""
        if self.container is not None or getattr(self, "sandbox", None) is not None:
            try:
                self._release()
                self.logger.info(f"sandbox {self.container_name} closed")
            except Exception as e:
                self.logger.warning(f"Error closing the sandbox: {e}")
            finally:
                self.container = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _merge(src: Path, dst: Path) -> None:
    """Move the tree ``src`` into the existing directory ``dst`` (entries of the same name replaced)."""
    for entry in src.iterdir():
        target = dst / entry.name
        if target.is_dir() and entry.is_dir() and not target.is_symlink():
            _merge(entry, target)
        else:
            if target.is_symlink() or target.is_file():
                target.unlink()
            os.replace(entry, target)


# -- swapping it in --------------------------------------------------------------------------
_SAVED: dict[tuple[str, str], Any] = {}


def _modules():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches a price list at import
    try:
        import llm_in_sandbox
        import llm_in_sandbox.benchmark.runner as runner
        import llm_in_sandbox.cli as cli
        import llm_in_sandbox.docker_runtime as docker_runtime
    except ImportError as e:
        raise SetupError(f"the paper's package is not installed ({e})",
                         hint=f"pip install 'sandboxlite[paper]'   (llm-in-sandbox=={PACKAGE_VERSION})") from None
    have = getattr(llm_in_sandbox, "__version__", "?")
    return llm_in_sandbox, docker_runtime, cli, runner, have


def _no_docker_image_check(image_name: str, logger: Any) -> bool:
    return True  # SandboxRuntime picks a sandboxlite image for any name (see config_for)


def _no_container_cleanup(docker_image: str) -> None:
    return None  # nothing of Docker's to clean up: every sandbox is closed by its runtime


def install() -> None:
    """Make the paper's package use SandboxRuntime wherever it makes a DockerRuntime (its agent, its
    CLI's ``run`` and ``benchmark``, and code that imports ``DockerRuntime`` afterwards), and skip its
    Docker image checks.  Idempotent; ``uninstall()`` puts everything back."""
    pkg, docker_runtime, cli, runner, _ = _modules()
    swaps = [(pkg, "DockerRuntime", SandboxRuntime), (docker_runtime, "DockerRuntime", SandboxRuntime),
             (cli, "DockerRuntime", SandboxRuntime), (cli, "ensure_docker_image", _no_docker_image_check),
             (runner, "_cleanup_docker_containers", _no_container_cleanup)]  # fmt: skip
    for mod, name, new in swaps:
        key = (mod.__name__, name)
        if key not in _SAVED:
            _SAVED[key] = getattr(mod, name)
        setattr(mod, name, new)


def uninstall() -> None:
    """Undo ``install()``."""
    import importlib

    for (modname, name), old in list(_SAVED.items()):
        setattr(importlib.import_module(modname), name, old)
        del _SAVED[(modname, name)]


def installed() -> bool:
    import sys

    mod = sys.modules.get("llm_in_sandbox.docker_runtime")
    return mod is not None and getattr(mod, "DockerRuntime", None) is SandboxRuntime


def main(argv: list[str]) -> int:
    """``sandboxlite paper -- ARGS``: the paper's CLI (``llm-in-sandbox ARGS``) with SandboxRuntime."""
    import sys

    install()
    from llm_in_sandbox.cli import main as paper_main

    old = sys.argv
    sys.argv = ["llm-in-sandbox", *argv]
    try:
        paper_main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = old
    return 0
