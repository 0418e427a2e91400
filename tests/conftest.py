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


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
