"""How the executor is compiled: static, with musl when setup installed it, else static glibc."""

import dataclasses
import os
import shutil

import pytest

from sandboxlite import Sandbox, executor
from sandboxlite.jail.host import Host


def test_the_executor_is_static_and_built_with_musl():
    if shutil.which("musl-gcc") is None:
        pytest.fail("musl-gcc is missing. Hint: ./tools/setup.sh installs musl-tools")
    path = executor.executor_path()
    assert executor.is_static(path)
    assert executor.is_musl(path), f"{path} was not linked against musl"


def test_without_musl_it_falls_back_to_static_glibc(tmp_path, monkeypatch):
    monkeypatch.setenv("SANDBOXLITE_HOME", str(tmp_path))
    monkeypatch.setattr(executor, "_musl", lambda: None)
    flags = [["musl", "-O2", "-static", "-isystem", "{kinc}"], ["-O2", "-std=gnu11", "-static"]]
    path = executor._build(executor.SOURCE, "sandboxlite-executor", flags)
    assert path.parent == tmp_path / "bin"
    assert executor.is_static(path) and not executor.is_musl(path)
    # the fallback is a working executor: a sandbox runs on it
    monkeypatch.undo()  # the sandbox's other files stay in the usual cache
    host = dataclasses.replace(Host.detect(), executor=str(path))
    with Sandbox(rootfs="host", host=host) as sb:
        r = sb.exec(["/bin/echo", "hi"])
        running = os.stat(f"/proc/{sb.executor_pid}/exe")
    assert (r.exit_code, r.stdout) == (0, b"hi\n")
    built = os.stat(path)
    assert (running.st_dev, running.st_ino) == (built.st_dev, built.st_ino)


def test_musl_and_glibc_builds_are_cached_apart(tmp_path, monkeypatch):
    if executor._musl() is None:
        pytest.fail("musl-gcc is missing. Hint: ./tools/setup.sh installs musl-tools")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(tmp_path))
    flags = [["musl", "-O2", "-std=gnu11", "-static", "-isystem", "{kinc}"], ["-O2", "-std=gnu11", "-static"]]
    with_musl = executor._build(executor.SOURCE, "e", flags)
    monkeypatch.setattr(executor, "_musl", lambda: None)
    without = executor._build(executor.SOURCE, "e", flags)
    assert with_musl != without
    assert executor.is_musl(with_musl) and not executor.is_musl(without)
