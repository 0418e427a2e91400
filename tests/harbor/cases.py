"""SandboxliteEnvironment through Harbor's own interface, run in the Harbor runner (Python 3.13 with
harbor installed: tools/harbor/run python3 -m pytest tests/harbor/cases.py; tests/test_harbor.py
does that).  The tasks are in tests/harbor/tasks."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from harbor.environments.base import SandboxBuildFailedError
from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.config import EnvironmentConfig, NetworkMode, NetworkPolicy
from harbor.models.trial.paths import TrialPaths

from sandboxlite.harbor import SandboxliteEnvironment

TASKS = Path(__file__).resolve().parent / "tasks"
IMPORT_PATH = "sandboxlite.harbor:SandboxliteEnvironment"


def make_env(tmp_path: Path, task: str = "hello-file", *, policy: NetworkPolicy | None = None, env_dir: Path | None = None,
             **kwargs) -> SandboxliteEnvironment:  # fmt: skip
    trial = TrialPaths(tmp_path / "trial")
    trial.mkdir()
    cls = EnvironmentFactory.get_environment_class(import_path=IMPORT_PATH)
    return cls(environment_dir=env_dir or TASKS / task / "environment", environment_name=task,
               session_id=f"{task}__test", trial_paths=trial, task_env_config=EnvironmentConfig(),
               network_policy=policy or NetworkPolicy(network_mode=NetworkMode.NO_NETWORK), **kwargs)  # fmt: skip


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 300))


def test_loaded_by_import_path_with_truthful_capabilities(tmp_path):
    env = make_env(tmp_path)
    assert isinstance(env, SandboxliteEnvironment) and env.type() == "sandboxlite"
    caps = env.capabilities
    assert caps.disable_internet and caps.network_allowlist and caps.network_allowlist_hostnames
    assert not (caps.gpus or caps.docker_compose or caps.network_allowlist_ipv4_addresses or caps.mounted)
    with pytest.raises(ValueError, match="public_network"):
        make_env(tmp_path / "x", public_network="sometimes")  # options are checked by Harbor's own model


def test_exec_cwd_env_streaming_timeout_and_exit_codes(tmp_path):
    env = make_env(tmp_path)
    seen: list[tuple[str, str]] = []

    async def cb(text: str, stream: str) -> None:
        seen.append((stream, text))

    async def main():
        await env.start(force_build=False)
        try:
            r = await env.exec("pwd; echo $GREETING; echo oops >&2; exit 3", env={"GREETING": "hi"})
            assert (r.return_code, r.stdout, r.stderr) == (3, "/app\nhi\n", "oops\n")
            r = await env.exec("pwd", cwd="/tmp")
            assert r.stdout == "/tmp\n"
            with env.scoped_output_callback(cb):
                await env.exec("echo one; sleep 0.2; echo two")
            assert [t for s, t in seen if s == "stdout"] == ["one\n", "two\n"]
            with pytest.raises(RuntimeError, match="timed out after 1 seconds"):
                await env.exec("sleep 30", timeout_sec=1)
            r = await env.exec("test -d /app && echo still-up")
            assert r.stdout == "still-up\n"
            assert await env.is_dir("/app") and not await env.is_file("/app")
        finally:
            await env.stop(delete=True)

    run(main())
    with pytest.raises(RuntimeError, match="not started"):
        run(env.exec("true"))


def test_upload_and_download_files_and_directories(tmp_path):
    env = make_env(tmp_path)
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.txt").write_text("B")
    (tmp_path / "one.txt").write_text("one")

    async def main():
        await env.start(force_build=False)
        try:
            await env.upload_dir(src, "/data/in")
            await env.upload_file(tmp_path / "one.txt", "/deep/er/one.txt")
            r = await env.exec("cat /data/in/a.txt /data/in/sub/b.txt /deep/er/one.txt; ln -s /etc/passwd /data/in/escape")
            assert r.stdout == "ABone"
            await env.download_dir("/data/in", tmp_path / "out")
            await env.download_file("/deep/er/one.txt", tmp_path / "back" / "one.txt")
        finally:
            await env.stop(delete=True)

    run(main())
    out = tmp_path / "out"
    assert (out / "a.txt").read_text() == "A" and (out / "sub" / "b.txt").read_text() == "B"
    assert not (out / "escape").exists() and not (out / "escape").is_symlink()  # never a link onto the host
    assert (tmp_path / "back" / "one.txt").read_text() == "one"


def test_network_policies_map_to_sandbox_networks(tmp_path):
    probe = ("python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             "s.connect(('192.0.2.1', 9)); print('routed')\" 2>/dev/null || echo no-route")  # fmt: skip

    async def net(policy: NetworkPolicy, **kw) -> str:
        env = make_env(tmp_path / policy.network_mode.value, policy=policy, **kw)
        await env.start(force_build=False)
        try:
            r = await env.exec(probe + "; echo ${HTTPS_PROXY:-no-proxy}")
            return r.stdout
        finally:
            await env.stop(delete=True)

    assert run(net(NetworkPolicy(network_mode=NetworkMode.NO_NETWORK))) == "no-route\nno-proxy\n"
    out = run(net(NetworkPolicy(network_mode=NetworkMode.ALLOWLIST, allowed_hosts=["pypi.org"])))
    assert out.startswith("no-route\nhttp://127.0.0.1:")  # only the proxy, which knows the allowlist
    env = make_env(tmp_path / "refuse", policy=NetworkPolicy(network_mode=NetworkMode.PUBLIC), public_network="refuse")
    with pytest.raises(RuntimeError, match="public_network=refuse"):
        run(env.start(force_build=False))


def test_a_broken_dockerfile_is_harbors_build_failure_naming_the_line(tmp_path):
    env_dir = tmp_path / "environment"
    env_dir.mkdir()
    (env_dir / "Dockerfile").write_text("FROM trixie\nRUN echo about to fail; exit 9\n")
    env = make_env(tmp_path, env_dir=env_dir)
    with pytest.raises(SandboxBuildFailedError, match="Dockerfile:2: RUN exited with code 9"):
        run(env.start(force_build=False))


def test_trials_of_one_task_share_one_build(tmp_path):
    env_dir = tmp_path / "environment"
    shutil.copytree(TASKS / "multistage" / "environment", env_dir)
    envs = [make_env(tmp_path / str(i), "multistage-copy", env_dir=env_dir) for i in range(4)]

    async def main():
        await asyncio.gather(*(e.start(force_build=False) for e in envs))
        try:
            outs = await asyncio.gather(*(e.exec("greet") for e in envs))
        finally:
            await asyncio.gather(*(e.stop(delete=True) for e in envs))
        return [o.stdout for o in outs]

    assert run(main()) == ["greetings from the build stage\n"] * 4
