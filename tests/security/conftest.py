"""The adversarial suite's shared pieces: the attack record, the results table, and the jails.

Every attack test calls ``record(attack, expected, observed)`` with what it *saw*
(an errno, an exit code, a latency...) before it asserts; at the end of the run
``pytest_terminal_summary`` prints one table row per record, with the test's
outcome.  Nothing here mocks the jail: the fixtures open real sandboxes.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pytest

from sandboxlite import Sandbox

# nodeid -> rows [attack, expected, observed]; kept in run order
_ROWS: list[tuple[str, str, str, str]] = []
_OUTCOMES: dict[str, str] = {}


@pytest.fixture
def record(request):
    """``record(attack, expected, observed)``: one row of the results table (returns observed)."""

    def rec(attack: str, expected: str, observed: object) -> object:
        _ROWS.append((request.node.nodeid, attack, expected, str(observed)))
        return observed

    return rec


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or rep.failed:
        prev = _OUTCOMES.get(item.nodeid)
        if prev != "FAILED":
            _OUTCOMES[item.nodeid] = "FAILED" if rep.failed else ("skipped" if rep.skipped else "ok")


def pytest_terminal_summary(terminalreporter):
    if not _ROWS:
        return
    import textwrap

    tests = {nodeid for nodeid, *_ in _ROWS}
    tr = terminalreporter
    tr.section(f"sandboxlite security suite: {len(_ROWS)} checks in {len(tests)} attack tests", sep="=")
    widths = (3, 40, 28, 64, 6)
    head = ("#", "attack", "expected", "observed", "result")
    tr.write_line("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    tr.write_line("  ".join("-" * w for w in widths))
    for i, (nodeid, attack, expected, observed) in enumerate(_ROWS, 1):
        cols = [[str(i)], *(textwrap.wrap(" ".join(text.split()), w) or [""] for text, w in
                            ((attack, widths[1]), (expected, widths[2]), (observed, widths[3]))),
                [_OUTCOMES.get(nodeid, "?")]]
        for n in range(max(map(len, cols))):
            cells = [c[n] if n < len(c) else "" for c in cols]
            tr.write_line("  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
    failed = sorted({n for n in tests if _OUTCOMES.get(n) != "ok"})
    if failed:
        tr.write_line(f"{len(failed)} attack tests did not pass: " + ", ".join(n.split("::")[-1] for n in failed))


# -- host-side canaries -------------------------------------------------------------------------
@pytest.fixture(scope="session")
def canary(host_dir_factory):
    """Host files the sandboxes must never see or change.

    ``home``: a secret in the caller's home directory; ``dir``: a host directory
    (reachable by the sandbox's uid, never mounted) with a secret, a root-only file
    and a unix socket path; ``token``: the secret's text (searched for in outputs).
    """
    token = "canary-" + secrets.token_hex(8)
    fd, home_path = tempfile.mkstemp(prefix=".sandboxlite-canary-", dir=Path.home())
    os.write(fd, token.encode())
    os.close(fd)
    d = host_dir_factory("sandboxlite-canary-")
    (d / "secret.txt").write_text(token)
    os.chmod(d / "secret.txt", 0o644)
    (d / "root-only.txt").write_text(token)
    os.chmod(d / "root-only.txt", 0o600)
    info = {"token": token, "home": Path(home_path), "dir": d, "secret": d / "secret.txt",
            "root_only": d / "root-only.txt"}
    yield info
    os.unlink(home_path)


def snapshot(paths) -> dict[str, tuple]:
    """(size, mtime_ns, mode) of every file under ``paths`` (to show nothing changed)."""
    out = {}
    for base in paths:
        base = Path(base)
        for p in [base, *base.rglob("*")] if base.is_dir() else [base]:
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            out[str(p)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


# -- jails ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mount_dirs(host_dir_factory):
    """A read-only and a read-write host directory to mount, and one next to them that is not."""
    base = host_dir_factory("sandboxlite-mounts-")
    ro, rw, outside = base / "ro", base / "rw", base / "outside"
    for d in (ro, rw, outside):
        d.mkdir()
    os.chmod(rw, 0o777)  # the sandbox's host uid is unprivileged (nobody) for a root caller
    (ro / "hello.txt").write_text("read-only hello\n")
    (outside / "secret.txt").write_text("not for the sandbox\n")
    return {"ro": ro, "rw": rw, "outside": outside}


@pytest.fixture(scope="module")
def host_sb(mount_dirs):
    """rootfs="host" (read-only host /usr, synthetic /etc) with a ro and a rw mount."""
    with Sandbox(
        rootfs="host",
        mounts=[f"{mount_dirs['ro']}:/data/ro:ro", f"{mount_dirs['rw']}:/data/rw:rw"],
    ) as box:
        yield box


@pytest.fixture(scope="module")
def image_sb():
    """The default sandbox: the built image with its copy-on-write root, network off."""
    with Sandbox() as box:
        assert box.info["rootfs_kind"] == "dir", "the default rootfs image is not built (tools/setup.sh)"
        yield box
