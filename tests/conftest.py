"""Shared fixtures.  Tests that need bwrap run it for real: nothing here mocks the jail."""

from __future__ import annotations

import os

import psutil
import pytest

from sandboxlite import Sandbox


@pytest.fixture
def sb():
    with Sandbox() as s:
        yield s


def jail_processes() -> list[psutil.Process]:
    """Every bwrap process and executor descendant on the host that belongs to this test process."""
    me = psutil.Process(os.getpid())
    return [p for p in me.children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def tree(pid: int) -> list[int]:
    """Host pids of a process and all its descendants."""
    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def jail_tree(sb) -> list[int]:
    """Host pids of the processes in a sandbox other than its own machinery (the executor
    and the supervisor it keeps ready for the next command, both running the executor)."""
    try:
        ex = psutil.Process(sb.executor_pid)
        mine = ex.cmdline()
        out = []
        for c in ex.children(recursive=True):
            try:
                if c.status() != psutil.STATUS_ZOMBIE and c.cmdline() != mine:
                    out.append(c.pid)
            except psutil.NoSuchProcess:
                continue
        return out
    except psutil.NoSuchProcess:
        return []


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _reachable_dir(prefix: str):
    """A host directory the sandbox's uid can reach.

    A root caller's sandboxes run as an unprivileged host uid (nobody), and
    pytest's tmp_path lives under a 0700 directory: mount sources come from here.
    """
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
    os.chmod(d, 0o755)
    return d, lambda: shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def host_dir():
    from pathlib import Path

    d, cleanup = _reachable_dir("sandboxlite-test-")
    yield Path(d)
    cleanup()


@pytest.fixture(scope="session")
def host_dir_factory():
    from pathlib import Path

    made = []

    def make(prefix: str = "sandboxlite-test-") -> Path:
        d, cleanup = _reachable_dir(prefix)
        made.append(cleanup)
        return Path(d)

    yield make
    for cleanup in made:
        cleanup()
