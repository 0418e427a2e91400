"""Faults: the controlling process killed or interrupted, a full cache disk, a broken rootfs,
no bwrap.  A jail must never outlive its controller, and a broken host gives a clear error."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from sandboxlite import RootfsError, Sandbox, SetupError
from sandboxlite import images as rootfs

from .helpers import procs_in, still_running

# Run by a child Python: opens two sandboxes full of background processes, then waits (or execs).
CONTROLLER = r'''
import json, os, signal, sys, time
from sandboxlite import Sandbox
mode = sys.argv[1]
if mode == "handler":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))
boxes = [Sandbox(), Sandbox(rootfs="host")]
for sb in boxes:
    sb.exec("sleep 1000 >/dev/null 2>&1 & (setsid sleep 999 >/dev/null 2>&1 &); "
            "(trap '' TERM HUP INT; exec sleep 998) >/dev/null 2>&1 & true")
boxes[0].shell().run("sleep 997 >/dev/null 2>&1 &")
print(json.dumps([{"bwrap": sb.bwrap_pid, "executor": sb.executor_pid,
                   "pidns": os.readlink(f"/proc/{sb.executor_pid}/ns/pid")} for sb in boxes]), flush=True)
if mode == "idle":
    time.sleep(1000)
try:
    boxes[0].exec("sleep 2000 & sleep 2001")  # interrupted here
except (KeyboardInterrupt, SystemExit) as e:
    ps = boxes[0].exec("ps -eo args").stdout.decode()
    print(json.dumps({"raised": type(e).__name__, "sleeps left": [l for l in ps.splitlines() if "sleep 200" in l],
                      "usable": boxes[0].exec("echo ok").stdout.decode()}), flush=True)
    for sb in boxes:
        sb.close()
    raise
'''


def run_controller(mode: str, sig: int | None):
    """Start the controller, wait until its jails are busy, signal it; return what was seen."""
    p = subprocess.Popen([sys.executable, "-c", CONTROLLER, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        jails = json.loads(p.stdout.readline())
        namespaces = {j["pidns"] for j in jails}
        machinery = [(pid, psutil.Process(pid).create_time()) for j in jails for pid in (j["bwrap"], j["executor"])]
        deadline = time.monotonic() + 10
        while len(procs_in(namespaces)) < 2 * 5 and time.monotonic() < deadline:  # executors + sleeps
            time.sleep(0.02)
        before = procs_in(namespaces)
        time.sleep(0.2)  # (for "exec": the last command is running)
        t, killed_at = time.monotonic(), time.time() - 0.05  # later processes: a recycled namespace
        p.send_signal(sig)
        report = p.stdout.readline() if mode != "idle" else ""
        p.wait(30)
        # (an orphaned bwrap may stay a zombie until the host's init reaps it: that is gone)
        while (procs_in(namespaces, killed_at) or still_running(machinery)) and time.monotonic() - t < 5:
            time.sleep(0.005)
        left = procs_in(namespaces, killed_at) + still_running(machinery)
        return {"before": len(before), "left": left, "after_s": time.monotonic() - t, "rc": p.returncode,
                "report": json.loads(report) if report.strip() else None, "stderr": p.stderr.read()}
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("mode, sig, what", [
    ("idle", signal.SIGKILL, "kill -9 of the controller (2 jails, 9+ procs)"),
    ("exec", signal.SIGTERM, "SIGTERM (default action) during an exec"),
])
def test_controller_dies(mode, sig, what, record):
    seen = run_controller(mode, sig)
    record(what, "no jail process left", f"{seen['before']} procs before; {len(seen['left'])} left after "
           f"{seen['after_s'] * 1000:.0f} ms; controller rc {seen['rc']}")
    assert seen["before"] >= 10, seen
    assert seen["rc"] == -sig and seen["left"] == [], seen


@pytest.mark.parametrize("mode, sig, raised, rc", [
    ("exec", signal.SIGINT, "KeyboardInterrupt", -signal.SIGINT),  # Python re-raises SIGINT at exit
    ("handler", signal.SIGTERM, "SystemExit", 3),
])
def test_controller_interrupted_during_exec(mode, sig, raised, rc, record):
    seen = run_controller(mode, sig)
    rep = seen["report"] or {}
    record(f"{signal.Signals(sig).name} during an exec ({raised})", "command tree killed, jail usable, then gone",
           f"raised {rep.get('raised')}; sleeps left {len(rep.get('sleeps left', [1]))}; usable "
           f"{rep.get('usable') == 'ok' + chr(10)}; {len(seen['left'])} left at exit")
    assert rep.get("raised") == raised and rep["sleeps left"] == [] and rep["usable"] == "ok\n", seen
    assert seen["rc"] == rc and seen["left"] == [], seen


FULL_DISK = r'''
import json, sys
from sandboxlite import Sandbox, SandboxError
out = {}
for name, spec in (("host /etc copy", "host"), ("executor build", sys.argv[1])):
    try:
        Sandbox(rootfs=spec).close()
        out[name] = ["started", ""]
    except SandboxError as e:
        out[name] = [type(e).__name__, str(e)]
    except BaseException as e:
        out[name] = ["not a SandboxError: " + type(e).__name__, str(e)]
print(json.dumps(out))
'''


@pytest.fixture
def full_tmpfs():
    """A tiny tmpfs, filled up (the cache directory's disk is full)."""
    if os.geteuid() != 0:
        pytest.fail("mounting the tiny tmpfs needs root (the suite runs as root)")
    d = Path(tempfile.mkdtemp(prefix="sandboxlite-fulldisk-", dir="/var/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=755", "sandboxlite-full", str(d)], check=True)
    try:
        fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
        d.rmdir()


def test_full_disk_under_the_cache(full_tmpfs, record):
    image = rootfs.image_root("lean") if rootfs.image_root("lean").is_dir() else rootfs.resolve("auto").path
    env = dict(os.environ, SANDBOXLITE_HOME=str(full_tmpfs))
    p = subprocess.run([sys.executable, "-c", FULL_DISK, str(image)], env=env, capture_output=True, text=True,
                       timeout=120)
    res = json.loads(p.stdout.strip().splitlines()[-1])
    for name, (kind, msg) in res.items():
        record(f"full disk under SANDBOXLITE_HOME: {name}", "SetupError naming the dir, with a hint",
               f"{kind}: {msg.splitlines()[0]} (hint: {'Hint:' in msg})")
    for kind, msg in res.values():
        assert kind == "SetupError" and "No space left on device" in msg and str(full_tmpfs) in msg, res
        assert "Hint:" in msg and "SANDBOXLITE_HOME" in msg


def _image(home: Path, name: str, *, manifest: str | None = "{}", shell: bool = True) -> Path:
    d = home / "rootfs" / name
    (d / "root" / "usr" / "bin").mkdir(parents=True)
    if shell:
        shutil.copy2("/usr/bin/dash", d / "root" / "usr" / "bin" / "sh")
    if manifest is not None:
        (d / "manifest.json").write_text(manifest)
    return d


def test_corrupted_rootfs(host_dir_factory, monkeypatch, record):
    home = host_dir_factory("sandboxlite-badimages-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(home))
    _image(home, "no-manifest", manifest=None)
    _image(home, "bad-manifest", manifest='{"name": "bad-manifest", "digest": "trunc')
    _image(home, "no-shell", shell=False)
    d = _image(home, "root-is-a-file")
    shutil.rmtree(d / "root")
    (d / "root").write_text("not a directory")
    d = _image(home, "unreadable")
    os.chmod(d / "root", 0o700)  # root-owned: the sandbox's uid cannot read it
    cases = ["no-manifest", "bad-manifest", "no-shell", "root-is-a-file", "unreadable", "never-built",
             str(home / "not-a-dir")]
    if os.geteuid() != 0:
        cases.remove("unreadable")  # the caller itself can read what it owns
    seen = {}
    for name in cases:
        try:
            Sandbox(rootfs=name).close()
            seen[name] = "started"
        except RootfsError as e:
            seen[name] = "RootfsError" + ("+hint" if e.hint else "")
        except Exception as e:  # reported below
            seen[name] = f"{type(e).__name__}: {e}"
    record(f"corrupted rootfs ({len(cases)} kinds)", "RootfsError with a hint", sorted(set(seen.values())))
    assert set(seen.values()) == {"RootfsError+hint"}, seen


def test_bwrap_missing(monkeypatch, record):
    seen = {}
    try:
        monkeypatch.setenv("SANDBOXLITE_BWRAP", "/nonexistent/bwrap")
        with pytest.raises(SetupError) as e:
            Sandbox()
        seen["SANDBOXLITE_BWRAP=/nonexistent/bwrap"] = e.value
        monkeypatch.delenv("SANDBOXLITE_BWRAP")
        monkeypatch.setenv("PATH", "/nonexistent")
        with pytest.raises(SetupError) as e:
            Sandbox()
        seen["PATH without bwrap"] = e.value
    finally:
        monkeypatch.undo()
    for how, err in seen.items():
        record(f"bwrap missing ({how})", "SetupError + hint", f"{type(err).__name__}: {err.message}; hint: {err.hint}")
        assert "bubblewrap" in err.hint
