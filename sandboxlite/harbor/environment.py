"""Harbor's environment on sandboxlite: ``sandboxlite.harbor:SandboxliteEnvironment``.

    harbor run -p TASKS -a oracle --environment-import-path sandboxlite.harbor:SandboxliteEnvironment
    # Harbor's Python API: EnvironmentConfig(import_path="sandboxlite.harbor:SandboxliteEnvironment");
    # TRL's Harbor integration: sandboxlite.harbor.trl (its environment_type cannot carry an import path)
    # On a host with Python < 3.12 (Debian 12): tools/harbor/run harbor run ...

A trial's environment is one sandbox.  Its root is the task's ``environment/Dockerfile`` built by
``sandboxlite image build`` (once per content: trials of one task share the build, and a rebuild
with nothing changed takes milliseconds), or the task's prebuilt ``docker_image`` from the store
(pulled when it is not there).  The sandbox starts in milliseconds and is closed at ``stop``.

What it can do, as its capabilities say: no network, or an allowlist of host names and wildcards
(the egress proxy; Harbor rejects a task with IP or CIDR entries before it starts, since the
proxy resolves names itself); a task's public network is the host's network (sandboxlite has no
NAT of its own: logged at start, refused with ``--ek public_network=refuse``); a memory limit
where cgroups exist; no GPUs or TPUs, no compose services, no Windows, no host mounts, no SSH
stream.

Users: a sandbox maps one id.  Commands run as root (uid 0 inside), whatever user they ask for;
a command asking for another user runs as root all the same, said once in the log.  Files have
one owner (they show as root's).

Needs Harbor (Python >= 3.12): ``pip install 'sandboxlite[harbor]'``.

May import: errors, images, jail, build (and harbor, a third-party package).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

try:
    from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
    from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
    from harbor.environments.definition import environment_content_hash, require_agent_environment_definition
    from harbor.environments.options import EnvironmentOptions
    from harbor.models.task.config import NetworkMode, NetworkPolicy
    from pydantic import Field
except ImportError as e:  # the extra is missing (or this Python is older than Harbor's 3.12)
    raise ImportError(f"sandboxlite.harbor needs Harbor (Python >= 3.12): pip install 'sandboxlite[harbor]'; on "
                      f"Debian 12 run Harbor in tools/harbor/run ({e})") from e

from ..errors import BuildError, SandboxError
from ..build import builder
from ..jail.aio import AsyncProcess, AsyncSandbox

TYPE = "sandboxlite"
MAX_OUTPUT = 64 << 20  # bytes of each stream an exec keeps (Harbor's results are in memory)
_BUILD_LOCKS: dict[str, asyncio.Lock] = {}  # one build per image at a time, per event loop's process


class SandboxliteOptions(EnvironmentOptions):
    """``--ek KEY=VALUE`` options of the sandboxlite environment."""

    public_network: Literal["host", "refuse"] = Field(
        default="host",
        description="A task's public network: the host's network (no NAT of sandboxlite's own), or refuse it.",
    )
    build_network: str = Field(
        default=builder.DEFAULT_NETWORK,
        description="What RUN steps of the task's Dockerfile may reach: none, host or allow:RULES.",
    )


class SandboxliteEnvironment(BaseEnvironment):
    """A Harbor ``BaseEnvironment`` backed by one sandboxlite sandbox (module docstring)."""

    options_model = SandboxliteOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._sandbox: AsyncSandbox | None = None
        self._shell = "/bin/sh"
        self._workdir = "/"
        self._warned_user = False
        super().__init__(*args, **kwargs)

    # -- what it is -----------------------------------------------------------------------------
    @staticmethod
    def type() -> str:
        return TYPE

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_wildcard_hostnames=True,
        )

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(memory_limit=_has_memory_cgroup())

    def _validate_definition(self) -> None:
        require_agent_environment_definition(self.environment_dir, docker_image=self.task_env_config.docker_image,
                                             extra_docker_compose_paths=self.extra_docker_compose_paths)  # fmt: skip

    # -- start and stop -------------------------------------------------------------------------
    async def start(self, force_build: bool) -> None:
        image = await self._image(force_build)
        fields: dict[str, Any] = {"image": image, "network": self._network(self.network_policy), "user": "0",
                                  "workdir": self.task_env_config.workdir or _image_workdir(image) or "/"}  # fmt: skip
        memory = self._effective_memory_mb
        if memory is not None:
            fields["limits"] = {"memory_mb": int(memory)}
        try:
            self._sandbox = await AsyncSandbox.create(**fields)
        except SandboxError as e:
            raise RuntimeError(f"sandboxlite could not start the environment: {e}") from e
        self._workdir = fields["workdir"]
        self._shell = "/bin/bash" if await self._sandbox.is_file("/bin/bash") else "/bin/sh"
        self.logger.debug(f"sandboxlite: {self._sandbox!r} from {image} (network {fields['network']})")
        await self._upload_environment_dir_after_start()
        await self.ensure_dirs(self._mount_targets(writable_only=True))

    async def stop(self, delete: bool) -> None:
        sb, self._sandbox = self._sandbox, None
        if sb is not None:
            await sb.close()

    async def _image(self, force_build: bool) -> str:
        """The store's name of the task's image: built from environment/Dockerfile, else its docker_image."""
        dockerfile = self.environment_dir / "Dockerfile"
        prebuilt = self.task_env_config.docker_image
        if prebuilt and (not force_build or not dockerfile.exists()):
            return await asyncio.to_thread(_prebuilt, prebuilt)
        digest = environment_content_hash(self.environment_dir, docker_image=prebuilt, truncate=12)
        tag = f"harbor/{_slug(self.environment_name)}:{digest}"
        options = self.options if isinstance(self.options, SandboxliteOptions) else SandboxliteOptions()
        lock = _BUILD_LOCKS.setdefault(tag, asyncio.Lock())
        async with lock:  # trials of one task at once: one builds, the others find it in the cache
            try:
                await asyncio.to_thread(builder.build, dockerfile, self.environment_dir, tag=tag,
                                        network=options.build_network, no_cache=force_build,
                                        say=self.logger.debug)  # fmt: skip
            except BuildError as e:
                raise SandboxBuildFailedError(f"sandboxlite image build of {dockerfile}: {e}") from e
        return tag

    def _network(self, policy: NetworkPolicy) -> str:
        if policy.network_mode == NetworkMode.NO_NETWORK:
            return "none"
        if policy.network_mode == NetworkMode.ALLOWLIST:
            return "allow:" + ",".join(policy.allowed_hosts) if policy.allowed_hosts else "none"
        options = self.options if isinstance(self.options, SandboxliteOptions) else SandboxliteOptions()
        if options.public_network == "refuse":
            raise RuntimeError("the task allows the public network, which sandboxlite gives only as the host's own "
                               "network; refused by public_network=refuse (give the task a network allowlist, or "
                               "drop the option)")  # fmt: skip
        self.logger.warning("sandboxlite: the task's public network is the host's network (sandboxlite has no NAT "
                            "of its own); --ek public_network=refuse refuses such tasks")  # fmt: skip
        return "host"

    # -- commands -------------------------------------------------------------------------------
    def _require(self) -> AsyncSandbox:
        if self._sandbox is None or self._sandbox.closed:
            raise RuntimeError("the sandboxlite environment is not started (or was stopped)")
        return self._sandbox

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:  # fmt: skip
        sb = self._require()
        self._note_user(self._resolve_user(user))
        proc = await sb.spawn([self._shell, "-c", command], env=self._merge_env(env) or {},
                              cwd=cwd or self._workdir, stdin=False, lossless=True)  # fmt: skip
        callback = self._output_callback()
        out, err = _Collected(), _Collected()
        work = asyncio.gather(_pump(proc, "stdout", out, callback), _pump(proc, "stderr", err, callback))
        try:
            if timeout_sec:
                await asyncio.wait_for(work, timeout=timeout_sec)
            else:
                await work
            result = await proc.wait()
        except asyncio.TimeoutError:
            proc.kill()
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds") from None
        except BaseException:
            proc.kill()
            raise
        return ExecResult(stdout=out.text(), stderr=err.text(), return_code=result.exit_code)

    def _note_user(self, user: str | int | None) -> None:
        if user in (None, 0, "0", "root") or self._warned_user:
            return
        self._warned_user = True
        self.logger.warning(f"sandboxlite: a sandbox maps one id, so commands asked to run as {user!r} run as "
                            "root (files have one owner)")  # fmt: skip

    # -- files ----------------------------------------------------------------------------------
    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        sb = self._require()
        parent = os.path.dirname(target_path.rstrip("/")) or "/"
        await sb.mkdir(parent)
        await sb.upload(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """The contents of ``source_dir`` into ``target_dir`` (made when missing), as ``docker cp DIR/.``."""
        sb = self._require()
        await sb.mkdir(target_dir)
        for child in sorted(Path(source_dir).iterdir()):
            target = f"{target_dir.rstrip('/')}/{child.name}"
            await _make_room(sb, target)
            await sb.upload(child, target)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        sb = self._require()
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_file() or target.is_symlink():
            target.unlink()
        await sb.download(source_path, target)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """The contents of ``source_dir`` into ``target_dir``, replacing what is there by the same names.
        Links that would lead out of the tree are left out (never followed onto the host)."""
        sb = self._require()
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".sandboxlite-", dir=target) as tmp:
            staged = Path(tmp) / "d"
            left_out = await sb.download(source_dir, staged)  # (its link policy: nothing leads out)
            for child in sorted(staged.iterdir()):
                dest = target / child.name
                if dest.is_symlink() or dest.is_file():
                    dest.unlink()
                elif dest.is_dir():
                    await asyncio.to_thread(shutil.rmtree, dest)
                os.rename(child, dest)
        if left_out:
            self.logger.debug(f"sandboxlite: download_dir({source_dir}) left out {left_out[:20]}")


# -------------------------------------------------------------------------------------------------
class _Collected:
    """One stream's text, decoded as it comes (a character split between chunks is kept whole)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.cut = False
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, chunk: bytes) -> str:
        text = self.decoder.decode(chunk)
        if self.size + len(chunk) <= MAX_OUTPUT:
            self.parts.append(text)
            self.size += len(chunk)
        else:
            self.cut = True
        return text

    def text(self) -> str:
        tail = self.decoder.decode(b"", final=True)
        body = "".join(self.parts) + tail
        return body + (f"\n[sandboxlite: output cut at {MAX_OUTPUT} bytes]\n" if self.cut else "")


async def _pump(proc: AsyncProcess, name: Literal["stdout", "stderr"], into: _Collected, callback) -> None:
    stream = proc.stdout if name == "stdout" else proc.stderr
    async for chunk in stream:
        text = into.feed(chunk)
        if callback is not None and text:
            await callback(text, name)


async def _make_room(sb: AsyncSandbox, target: str) -> None:
    try:
        info = await sb.stat(target)
    except SandboxError:
        return
    if info.type != "dir":
        await sb.remove(target)


def _prebuilt(reference: str) -> str:
    """``reference`` in the store (pulled when it is not there); its name there."""
    from ..images import store, where

    if where.find(reference) is None:
        logging.getLogger(__name__).info(f"sandboxlite: pulling {reference}")
        store.pull_image(reference)
    return reference


def _image_workdir(reference: str) -> str:
    from ..images import store

    try:
        return (store.find_image(reference).manifest["oci"]["config"] or {}).get("working_dir") or ""
    except (SandboxError, KeyError, TypeError):
        return ""


def _slug(name: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")
    return slug[:64] or "task"


def _has_memory_cgroup() -> bool:
    try:
        from ..jail.host import default_host

        return default_host().cgroups.kind is not None
    except Exception:  # (no host facts: say no)
        return False


__all__ = ["SandboxliteEnvironment", "SandboxliteOptions", "TYPE"]
