"""The executor is strict about its command line, and the config refuses what it cannot honour.

The executor binary runs here directly, outside any jail, with bad options: it must refuse them
(exit code ExecutorExit.BAD_OPTION, a message naming the problem) before it does anything: before
it reads the seccomp filter, closes a descriptor, says hello or touches a mount.  None of these
runs hands it a usable filter, so even an executor that accepted the options would stop at that.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from sandboxlite import ConfigError, Sandbox, SandboxConfig, executor
from sandboxlite.executor import protocol
from sandboxlite.executor.protocol import MAX_BINDS, MAX_MKDIRS, MAX_WTMPFS, ExecutorExit, check_executor_options

PREFIX = "sandboxlite-executor: "
LONG = "a" * protocol.OPTION_PATH_MAX  # with its leading "/", one byte over the limit


def run_executor(args: list[str], pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess:
    exe = str(executor.executor_path())  # looked up at call time: a test run may point it elsewhere
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=10, pass_fds=pass_fds)


def refused(args: list[str], message: str, pass_fds: tuple[int, ...] = ()) -> None:
    r = run_executor(args, pass_fds)
    assert (r.returncode, r.stderr) == (ExecutorExit.BAD_OPTION, PREFIX + message + "\n"), r
    assert r.stdout == ""
    # the Python copy of the rules says the same thing
    with pytest.raises(ValueError) as e:
        check_executor_options(args)
    assert str(e.value) == message


BAD = [
    (["foo=1"], "unknown option 'foo=1'"),
    (["tmp=3", "verbose"], "unknown option 'verbose'"),
    (["=1"], "unknown option '=1'"),
    (["binds=/a"], "unknown option 'binds=/a'"),
    (["ctrl=abc"], "option 'ctrl=abc': expected a descriptor number"),
    (["ctrl=-1"], "option 'ctrl=-1': expected a descriptor number"),
    (["ctrl=99999999999"], "option 'ctrl=99999999999': expected a descriptor number"),
    (["cpu=12x"], "option 'cpu=12x': expected a number or inf"),
    (["nofile="], "option 'nofile=': expected a number or inf"),
    (["nproc= 5"], "option 'nproc= 5': expected a number or inf"),
    (["upper=1G"], "option 'upper=1G': expected a number of bytes"),
    (["tmp=-1"], "option 'tmp=-1': expected a number of bytes"),
    (["testbed=99999999999999999999999"], "option 'testbed=99999999999999999999999': expected a number of bytes"),
    (["devdir=yes"], "option 'devdir=yes': expected 0 or 1"),
    (["rootro=2"], "option 'rootro=2': expected 0 or 1"),
    (["bind=data"], "option 'bind=data': expected an absolute path"),
    (["mkdir="], "option 'mkdir=': expected an absolute path"),
    (["lower=/a,b"], "option 'lower=/a,b': expected an absolute path"),
    (["bind=/" + LONG], f"option 'bind=/{LONG}': expected an absolute path"),
    (["cpu=5", "cpu=6"], "option 'cpu=6': cpu= given more than once"),
    (["tmp=1", "upper=2", "tmp=1"], "option 'tmp=1': tmp= given more than once"),
    (["lower=/x", "lower=/x"], "option 'lower=/x': lower= given more than once"),
    ([f"bind=/m{i}" for i in range(MAX_BINDS + 1)], f"more than {MAX_BINDS} bind= options"),
    ([f"wtmpfs=/w{i}" for i in range(MAX_WTMPFS + 1)], f"more than {MAX_WTMPFS} wtmpfs= options"),
    ([f"mkdir=/d{i}" for i in range(MAX_MKDIRS + 1)], f"more than {MAX_MKDIRS} mkdir= options"),
    (["tmp=1", "cpu=inf"], "no seccomp filter (seccomp=FD): refusing to run commands unfiltered"),
]


@pytest.mark.parametrize("args, message", BAD, ids=[m[:40] for _, m in BAD])
def test_the_executor_refuses_a_bad_option(args, message):
    refused(args, message)


def test_the_limits_themselves_are_accepted_by_the_rules():
    ok = ["seccomp=0", "ctrl=3", "exe=4", "lower=/.sl/lower", "upper=0", "tmp=1", "testbed=0", "devdir=1",
          "rootro=0", "cpu=inf", "as=1", "fsize=inf", "nproc=8", "nofile=64", "core=0", "stack=8388608"]
    ok += [f"bind=/m{i}" for i in range(MAX_BINDS)] + [f"wtmpfs=/w{i}" for i in range(MAX_WTMPFS)]
    ok += [f"mkdir=/d{i}" for i in range(MAX_MKDIRS)]
    check_executor_options(ok)  # every key once, every list at its limit


def test_a_descriptor_must_be_open():
    r = run_executor(["seccomp=987"])
    assert r.returncode == ExecutorExit.BAD_OPTION
    assert r.stderr == PREFIX + "option 'seccomp=987': descriptor 987 is not open\n"


def test_options_are_refused_before_anything_is_done():
    """The bad option comes last, after a seccomp filter and a control socket: the executor
    must not read the filter, write to the socket, or get as far as its generation."""
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    try:
        os.write(w, b"abc")  # not a filter (3 bytes): an executor that read it would stop there
        os.close(w)
        w = -1
        args = [f"ctrl={theirs.fileno()}", f"seccomp={r}", "tmp=1", f"bind=/{'x' * 10}", "mystery=1"]
        res = run_executor(args, pass_fds=(theirs.fileno(), r))
        assert (res.returncode, res.stderr) == (ExecutorExit.BAD_OPTION, PREFIX + "unknown option 'mystery=1'\n")
        os.set_blocking(r, False)
        assert os.read(r, 10) == b"abc"  # the filter was never read
        theirs.close()
        ours.setblocking(False)
        assert ours.recv(100) == b""  # no hello, nothing at all
    finally:
        ours.close()
        theirs.close()
        os.close(r)
        if w >= 0:
            os.close(w)


def test_an_unreadable_filter_is_still_fatal():
    r, w = os.pipe()
    try:
        os.write(w, b"abc")
        os.close(w)
        w = -1
        res = run_executor([f"seccomp={r}"], pass_fds=(r,))
        assert res.returncode == ExecutorExit.FATAL and "reading the seccomp filter" in res.stderr
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


# ---- the config side: what the executor cannot honour is refused up front ------------------------


def test_config_refuses_more_mounts_than_the_executor_carries():
    mounts = [f"/tmp:/m/{i}:ro" for i in range(MAX_BINDS + 1)]
    with pytest.raises(ConfigError) as e:
        SandboxConfig(mounts=mounts)
    assert str(e.value).startswith(f"mounts: at most {MAX_BINDS} mounts are supported, got {MAX_BINDS + 1}")
    assert e.value.field == "mounts"
    with pytest.raises(ConfigError, match=f"at most {MAX_BINDS} mounts"):
        Sandbox(mounts=mounts)
    SandboxConfig(mounts=mounts[:MAX_BINDS])  # the limit itself is fine


def test_all_64_mounts_are_visible_inside(host_dir_factory):
    """With a copy-on-write root the executor re-binds every mount in each generation (bind=):
    all of them, the last one included, and again after a reset."""
    base = host_dir_factory("sandboxlite-mounts-")
    mounts = []
    for i in range(MAX_BINDS):
        d = base / f"d{i}"
        d.mkdir(mode=0o755)
        os.chmod(d, 0o755)
        (d / "id").write_text(f"{i}\n")
        os.chmod(d / "id", 0o644)
        mounts.append(f"{d}:/mnt/m{i}:ro")
    with Sandbox(mounts=mounts) as sb:
        if os.geteuid() == 0:  # root callers get a copy-on-write root over the default image
            assert sb.info["copy_on_write_root"] is True, sb.info["copy_on_write_note"]
        script = f"for i in $(seq 0 {MAX_BINDS - 1}); do cat /mnt/m$i/id || echo missing $i; done"
        want = "".join(f"{i}\n" for i in range(MAX_BINDS)).encode()
        r = sb.exec(script)
        assert (r.exit_code, r.stdout, r.stderr) == (0, want, b"")
        assert sb.exec(f"touch /mnt/m{MAX_BINDS - 1}/x").exit_code != 0  # read-only, the last too
        sb.reset()
        assert sb.exec(script).stdout == want
