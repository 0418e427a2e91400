"""Shared fixtures.  Tests that need bwrap run it for real: nothing here mocks the jail."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from sandboxlite import Sandbox


def pytest_configure(config):
    """The suite keeps its snapshots in a store of its own (removed at the end), not in the user's
    (``/dev/shm/sandboxlite-UID/snapshots``, where every run's would pile up); a test that wants
    another store sets ``SANDBOXLITE_SNAPSHOTS`` itself."""
    import tempfile

    if "SANDBOXLITE_SNAPSHOTS" not in os.environ:
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        config._sandboxlite_snapshots = tempfile.mkdtemp(prefix="sandboxlite-tests-snapshots-", dir=shm)
        os.environ["SANDBOXLITE_SNAPSHOTS"] = config._sandboxlite_snapshots


def pytest_unconfigure(config):
    import shutil

    own = getattr(config, "_sandboxlite_snapshots", None)
    if own is not None:
        os.environ.pop("SANDBOXLITE_SNAPSHOTS", None)
        shutil.rmtree(own, ignore_errors=True)


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
    and the supervisor it keeps ready for the next command, both running the executor).

    A process already exiting (its memory released: no cmdline, not yet a zombie) counts only if
    it is still there a second later: right after a reset the generation's builder (a child of
    the executor, reaped when its SIGCHLD is read) is one for an instant, which made tests that
    look right after a reset fail now and then."""
    try:
        ex = psutil.Process(sb.executor_pid)
        mine = ex.cmdline()
        out, exiting = [], []
        for c in ex.children(recursive=True):
            try:
                if c.status() != psutil.STATUS_ZOMBIE and c.cmdline() != mine:
                    (exiting if not c.cmdline() else out).append(c)
            except psutil.NoSuchProcess:
                continue
        deadline = time.monotonic() + 1.0
        while exiting and time.monotonic() < deadline:
            exiting = [c for c in exiting if alive(c.pid)]
            time.sleep(0.01)
        return [c.pid for c in out + exiting]
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
