"""Attacks on the host side of the agent: what the sandbox hands back (names, files, edits) must not
break the run or take more of the host than its budget.

- Names that are not UTF-8 (a ``cd`` into one, a file named with one in /testbed/output) once made
  run_task raise UnicodeEncodeError from the trajectory writer: no answer.txt, no files/.
- ``download(max_bytes=)`` charged a file's size when it was opened: one that grew while it was
  copied landed on the host whole (1 GiB under a 16 MiB cap); a sparse file was written out as
  zeros.
- The editor's ``view`` split the whole file into line objects before clipping (a 64 MiB file took
  the host from 25 MiB to 3.4 GiB).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandboxlite import Sandbox, SandboxFileError
from sandboxlite.agent import run as run_module
from sandboxlite.agent.model import FakeModel
from sandboxlite.agent.run import TrajectoryWriter, run_task
from sandboxlite.agent.task import Task
from sandboxlite.config import Limits, SandboxConfig
from sandboxlite.jail import transfer

HOST = SandboxConfig(rootfs="host")
TASK = Task.from_dict({"id": "names", "query": "Write 42 to the answer file.", "max_steps": 10})
SURROGATE = re.compile("[\ud800-\udfff]")
MiB = 1 << 20


def bash(cmd: str) -> dict:
    return {"tool": "execute_bash", "arguments": {"command": cmd}}


def editor(**args) -> dict:
    return {"tool": "str_replace_editor", "arguments": args}


def submit() -> dict:
    return {"tool": "submit", "arguments": {}}


def strict_trajectory(out: Path) -> dict:
    """trajectory.json, read as strict UTF-8 JSON; asserts no lone surrogate hides in it (as a \\udcxx escape)."""
    t = json.loads((out / "trajectory.json").read_bytes().decode("utf-8"))
    found = SURROGATE.findall(json.dumps(t, ensure_ascii=False))
    assert not found, f"lone surrogates in the trajectory: {found[:5]}"
    return t


def observations(t: dict) -> list[dict]:
    return [o for s in t["steps"] for o in s["observations"]]


# -- 8. names that are not UTF-8 -----------------------------------------------------------------------
def test_a_cd_into_a_name_that_is_not_utf8_keeps_the_run_whole(tmp_path, record):
    """The shell's cwd (and the note of a restarted session, which names it) reach the trajectory
    and the model as readable text: the bytes that are not UTF-8 as \\xff escapes."""
    script = [
        bash("mkdir $'\\xff\\xfe' && cd $'\\xff\\xfe' && pwd"),
        bash("exit 3"),  # the session ends: a new one starts in the same directory, and says where
        bash("pwd; echo 42 > /testbed/output/answer.txt"),
        submit(),
    ]
    out = tmp_path / "out"
    try:
        r = run_task(TASK, FakeModel(script), output_dir=out, config=HOST)
        observed = f"{r.exit_reason}; answer {r.answer!r}; files/ {sorted(os.listdir(out / 'files'))}"
    except UnicodeError as e:
        r, observed = None, f"{type(e).__name__}: {e}"
    record("cd into $'\\xff\\xfe' through execute_bash", "run completes; cwd shown as \\xff\\xfe", observed)
    assert r is not None, observed
    assert r.submitted and r.answer == "42\n"
    assert (out / "answer.txt").read_text() == "42\n" and (out / "files" / "answer.txt").exists()
    t = strict_trajectory(out)
    obs = observations(t)
    assert obs[0]["data"]["cwd"] == "/testbed/\\xff\\xfe"
    assert "/testbed/\\xff\\xfe" in obs[1]["output"] and obs[1]["data"]["cwd"] == "/testbed/\\xff\\xfe"
    assert t["exit_reason"] == "submitted" and not list(out.glob("*.tmp"))


def test_output_files_named_in_bytes_that_are_not_utf8_are_exported(tmp_path, record):
    """files/ gets the file under its raw name; what is shown or recorded (the editor's listing and
    messages, skipped_outputs) is readable text."""
    script = [
        bash("cd /testbed/output && printf data > $'\\xff.txt' && ln -s /etc $'\\xfe-link' "
             "&& mkfifo $'\\xfd-fifo' && echo 42 > answer.txt"),
        editor(command="view", path="/testbed/output"),
        editor(command="view", path="/testbed/output/\udcff.txt"),  # the raw name, as JSON "\udcff" gives it
        editor(command="view", path="/testbed/output/\udcfcmissing"),
        submit(),
    ]
    out = tmp_path / "out"
    try:
        r = run_task(TASK, FakeModel(script), output_dir=out, config=HOST)
        names = sorted(os.listdir(os.fsencode(out / "files")))
        observed = f"{r.exit_reason}; skipped {r.skipped_outputs}; files/ {names}"
    except UnicodeError as e:
        r, observed = None, f"{type(e).__name__}: {e}"
    record("files named $'\\xff.txt', $'\\xfe-link' (symlink), $'\\xfd-fifo' in /testbed/output",
           "run completes; raw name in files/; readable names recorded", observed)  # fmt: skip
    assert r is not None, observed
    assert r.submitted and r.answer == "42\n"
    assert (out / "files" / os.fsdecode(b"\xff.txt")).read_bytes() == b"data"
    assert sorted(r.skipped_outputs) == ["/testbed/output/\\xfd-fifo", "/testbed/output/\\xfe-link"]
    t = strict_trajectory(out)
    assert sorted(t["skipped_outputs"]) == sorted(r.skipped_outputs)
    listing, shown, missing = (o["output"] for o in observations(t)[1:4])
    assert "/testbed/output/\\xff.txt\n" in listing
    assert "/testbed/output/\\xff.txt" in shown and "     1\tdata" in shown
    assert missing.startswith("Error: /testbed/output/\\xfcmissing does not exist")
    assert observations(t)[2]["data"]["path"] == "/testbed/output/\\xff.txt"


def test_the_trajectory_writer_never_writes_a_surrogate(tmp_path, record):
    """The last defence: whatever reaches the writer, trajectory.json is valid UTF-8 JSON."""
    w = TrajectoryWriter(tmp_path / "trajectory.json", {"task": {"id": "x"}})
    try:
        w.update(final=True, skipped_outputs=["/testbed/output/\udcff"], **{"k\udcfe": "\ud800 lone"})
        observed = "written"
    except UnicodeError as e:
        observed = f"{type(e).__name__}: {e}"
    record("surrogates in values and keys given to TrajectoryWriter", "valid UTF-8 JSON, escaped", observed)
    t = strict_trajectory(tmp_path)
    assert t["skipped_outputs"] == ["/testbed/output/\\xff"] and t["k\\xfe"] == "\\ud800 lone"


# -- 9. download and read_file caps hold for files that grow, and for sparse files -------------------------
# Appends 4 MiB each time someone reads the file (inotify IN_ACCESS), until it is `stop` bytes long:
# the file grows faster than the host copies it, whatever the machine's speed.
GROWER = r"""
import ctypes, os, sys
path, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b"s" * start)
libc = ctypes.CDLL(None, use_errno=True)
ino = libc.inotify_init1(0)
assert libc.inotify_add_watch(ino, path.encode(), 0x1) >= 0, ctypes.get_errno()  # IN_ACCESS
block = b"g" * (4 << 20)
open("/tmp/grower.ready", "w").close()
while os.fstat(fd).st_size < stop:
    os.read(ino, 4096)
    os.write(fd, block)
"""
CAP = 16 * MiB


def start_grower(sb: Sandbox, path: str, start: int = 8 * MiB, stop: int = 512 * MiB) -> None:
    sb.write_file("/tmp/grower.py", GROWER)
    sb.exec(f"rm -f /tmp/grower.ready; python3 /tmp/grower.py {path} {start} {stop} >/tmp/grower.log 2>&1 &")
    deadline = time.monotonic() + 20
    while not sb.exec("test -e /tmp/grower.ready").ok:
        assert time.monotonic() < deadline, sb.exec("cat /tmp/grower.log").stdout
        time.sleep(0.02)


class _SlowFirstRead:
    """``os`` for sandboxlite.jail.transfer, whose first ``pread`` of a file of ``start`` bytes or more
    returns only once the file has grown past the cap (it reads a byte now and then: the grower adds
    a block each time it sees a read): the host's copy is then certain to meet a
    file that grew while it was read (without it, a fast host could reach the end of the file before
    the grower had added a block, and the copy was, correctly, the whole smaller file)."""

    def __init__(self, start: int = 8 * MiB) -> None:
        self.start, self.waited = start, False

    def __getattr__(self, name: str):
        return getattr(os, name)

    def pread(self, fd: int, n: int, pos: int) -> bytes:
        chunk = os.pread(fd, n, pos)
        if not self.waited and os.fstat(fd).st_size >= self.start:
            self.waited = True
            deadline = time.monotonic() + 20
            while os.fstat(fd).st_size <= CAP:
                assert time.monotonic() < deadline, "the grower did not grow the file past the cap"
                time.sleep(0.005)
                os.pread(fd, 1, 0)  # the grower adds a block per read it sees
        return chunk


@pytest.fixture
def grows_while_read(monkeypatch):
    monkeypatch.setattr(transfer, "os", _SlowFirstRead())


def host_bytes(p: Path) -> int:
    """Bytes of the files under ``p`` (their lengths; a missing p is 0)."""
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink()) if p.is_dir() else 0


@contextlib.contextmanager
def peak_of(p: Path):
    """Samples ``host_bytes(p)`` every millisecond while the block runs; yields [the largest seen]."""
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], host_bytes(p))
            except OSError:  # a file removed under us
                pass
            time.sleep(0.001)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield peak
    finally:
        stop.set()
        t.join()


def test_a_file_growing_during_download_stops_at_the_cap(tmp_path, record, grows_while_read):
    with Sandbox(rootfs="host") as sb:
        start_grower(sb, "/testbed/grow")
        dst = tmp_path / "grow"
        with peak_of(dst) as peak:
            skipped = sb.download("/testbed/grow", dst, max_bytes=CAP)
        landed = host_bytes(dst)
        size = sb.exec("stat -c %s /testbed/grow").stdout.decode().strip()
    record("file grows 4 MiB per host read while downloaded, cap 16 MiB", "<= 16 MiB on the host; left out",
           f"{landed} bytes on the host at the end, {peak[0]} at most while copying (the file is now {size} "
           f"bytes); skipped {skipped}")  # fmt: skip
    assert landed <= CAP and peak[0] <= CAP
    assert skipped == ["/testbed/grow"] and not dst.exists()  # the partial copy is removed


def test_a_file_growing_in_a_downloaded_tree_is_charged_what_was_copied(tmp_path, record, grows_while_read):
    with Sandbox(rootfs="host") as sb:
        sb.write_file("/testbed/tree/small.txt", b"k" * MiB)
        sb.write_file("/testbed/tree/sub/tiny.txt", b"tiny")
        start_grower(sb, "/testbed/tree/grow")
        dst = tmp_path / "tree"
        skipped = sb.download("/testbed/tree", dst, max_bytes=CAP)
        landed = host_bytes(dst)
    record("a growing file inside a downloaded directory, cap 16 MiB", "<= 16 MiB in all; grower left out",
           f"{landed} bytes on the host; skipped {skipped}")  # fmt: skip
    assert landed <= CAP
    assert skipped == ["/testbed/tree/grow"] and not (dst / "grow").exists()
    assert (dst / "small.txt").read_bytes() == b"k" * MiB and (dst / "sub" / "tiny.txt").read_bytes() == b"tiny"


def test_run_task_export_cap_holds_for_a_growing_output(tmp_path, monkeypatch, record, grows_while_read):
    monkeypatch.setattr(run_module, "MAX_EXPORT_BYTES", CAP)
    script = [
        editor(command="create", path="/tmp/grower.py", file_text=GROWER),
        bash("python3 /tmp/grower.py /testbed/output/grow 8388608 536870912 >/dev/null 2>&1 & "
             "while [ ! -e /tmp/grower.ready ]; do sleep 0.01; done; echo 42 > /testbed/output/answer.txt"),
        submit(),
    ]
    out = tmp_path / "out"
    r = run_task(TASK, FakeModel(script), output_dir=out, config=HOST)
    landed = host_bytes(out / "files")
    record("the model leaves a file that grows while run_task exports it (cap 16 MiB)",
           "files/ <= 16 MiB; grower in skipped_outputs", f"{landed} bytes in files/; skipped {r.skipped_outputs}")
    assert landed <= CAP
    assert r.skipped_outputs == ["/testbed/output/grow"] and (out / "files" / "answer.txt").read_text() == "42\n"


def test_read_file_of_a_growing_file_stops_at_the_cap(record, grows_while_read):
    with Sandbox(rootfs="host") as sb:
        start_grower(sb, "/testbed/grow")
        try:
            got, err = sb.read_file("/testbed/grow", max_bytes=CAP), None
            observed = f"returned {len(got)} bytes"
        except SandboxFileError as e:
            got, err, observed = None, e.errno, f"{type(e).__name__} errno {e.errno}: {e}"
    record("read_file(max_bytes=16 MiB) of a file that grows while read", "EFBIG", observed)
    assert got is None and err == errno.EFBIG


SPARSE = "printf head > {p} && truncate -s {size} {p} && printf tail >> {p}"


def test_a_sparse_file_in_a_capped_download_is_charged_its_length(tmp_path, record):
    """A 1 TiB sparse file under a 16 MiB cap: left out, nothing written; a 32 MiB sparse one under a
    64 MiB cap: copied, its holes left as holes (a few KiB of the host's disk)."""
    with Sandbox(rootfs="host", limits=Limits(fsize_mb=None)) as sb:
        assert sb.exec(SPARSE.format(p="/testbed/tera", size="1T")).ok
        assert sb.exec(SPARSE.format(p="/testbed/mid", size=str(32 * MiB))).ok
        t0 = time.monotonic()
        skipped = sb.download("/testbed/tera", tmp_path / "tera", max_bytes=CAP)
        tera_s = time.monotonic() - t0
        skipped_mid = sb.download("/testbed/mid", tmp_path / "mid", max_bytes=64 * MiB)
    st = (tmp_path / "mid").stat()
    record("sparse files: 1 TiB under a 16 MiB cap; 32 MiB (8 bytes of data) under 64 MiB",
           "1 TiB left out; 32 MiB copied sparse",
           f"1 TiB: skipped {skipped} in {tera_s:.2f} s; 32 MiB: {st.st_size} bytes, {st.st_blocks * 512} on disk")
    assert skipped == ["/testbed/tera"] and not (tmp_path / "tera").exists()
    assert skipped_mid == [] and st.st_size == 32 * MiB + 4
    assert st.st_blocks * 512 <= 1 * MiB, "the holes were written out as zeros"
    data = (tmp_path / "mid").read_bytes()
    assert data[:4] == b"head" and data[-4:] == b"tail" and data.count(0) == len(data) - 8


_SPARSE_CHILD = r"""
import json, sys
from sandboxlite import Sandbox
from sandboxlite.config import Limits
with Sandbox(rootfs="host", limits=Limits(fsize_mb=None)) as sb:
    assert sb.exec(sys.argv[2]).ok
    skipped = sb.download("/testbed/tera", sys.argv[1])
print(json.dumps({"skipped": skipped}))
"""


def test_an_uncapped_download_of_a_1_tib_sparse_file_writes_only_its_data(tmp_path, record):
    """No cap, a 1 TiB sparse file: the host gets a 1 TiB sparse file holding 8 bytes of data.
    (The download runs in a child, killed if the host's disk use passes 64 MiB.)"""
    dst = tmp_path / "tera"
    make = SPARSE.format(p="/testbed/tera", size="1T")
    child = subprocess.Popen([sys.executable, "-c", _SPARSE_CHILD, str(dst), make], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline, used = time.monotonic() + 120, 0
    while child.poll() is None and time.monotonic() < deadline:
        try:
            used = max(used, dst.stat().st_blocks * 512)
        except FileNotFoundError:
            pass
        if used > 64 * MiB:
            break
        time.sleep(0.02)
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    stdout, stderr = child.communicate()
    st = dst.stat() if dst.exists() else None
    observed = (f"child exit {child.returncode}; host file {st.st_size if st else None} bytes, "
                f"{st.st_blocks * 512 if st else 0} on disk (peak seen {used})")  # fmt: skip
    record("download a 1 TiB sparse file without a cap", "1 TiB apparent, < 1 MiB on the host's disk", observed)
    try:
        assert child.returncode == 0, observed + "\n" + stderr[-2000:]
        assert json.loads(stdout)["skipped"] == []
        assert st.st_size == (1 << 40) + 4 and st.st_blocks * 512 <= MiB
        with open(dst, "rb") as f:
            assert f.read(4) == b"head"
            f.seek(-8, os.SEEK_END)
            assert f.read() == b"\0\0\0\0tail"
    finally:
        dst.unlink(missing_ok=True)


# -- 10. the editor reads what it shows, not the whole file as lines -----------------------------------------
_EDITOR_PEAK = r"""
import json, resource, sys, tracemalloc
from sandboxlite import Sandbox
from sandboxlite.agent.tools import Tools
from sandboxlite.errors import ToolError
with Sandbox(rootfs="host") as sb, Tools(sb) as tools:
    assert sb.exec(sys.argv[1]).ok
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    try:
        out = tools.call("str_replace_editor", json.loads(sys.argv[2])).output
    except ToolError as e:
        out = "Error: " + e.message
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    size = int(sb.exec("stat -c %s /testbed/big.txt").stdout)
print(json.dumps({"grown_kib": grown, "traced_kib": traced // 1024, "out": out, "size": size}))
"""
BIG = "yes | head -c 67108864 > /testbed/big.txt"  # 64 MiB (the editor's limit), 32 Mi lines of "y"
BIG_LINES = 32 * MiB


def editor_peak(make: str, args: dict, timeout: float = 120) -> dict:
    p = subprocess.run([sys.executable, "-c", _EDITOR_PEAK, make, json.dumps(args)], capture_output=True, text=True,
                       timeout=timeout)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


@pytest.mark.parametrize(
    "view_range",
    [None, [1_000_000, 1_000_004], [BIG_LINES - 2, -1]],
    ids=["whole", "middle", "end"],
)
def test_viewing_a_64_mib_file_of_short_lines_keeps_the_host_small(view_range, record):
    args = {"command": "view", "path": "/testbed/big.txt"}
    if view_range is not None:
        args["view_range"] = view_range
    res = editor_peak(BIG, args)
    out = res["out"]
    record(f"editor view of a 64 MiB file of 32 Mi short lines, view_range={view_range}",
           "host RSS grows < 64 MiB; output clipped with a note",
           f"RSS +{res['grown_kib'] // 1024} MiB, Python peak {res['traced_kib'] // 1024} MiB; "
           f"{len(out)} characters shown")  # fmt: skip
    assert res["grown_kib"] < 64 * 1024, f"the host grew by {res['grown_kib'] // 1024} MiB viewing the file"
    assert res["traced_kib"] < 16 * 1024, f"view allocated {res['traced_kib'] // 1024} MiB at its peak"
    if view_range is None:
        assert len(out) < 101_000 and out.count("\n") > 10_000
        assert "     1\ty\n" in out
        last = int(out.split("[output clipped")[0].rstrip("\n").rsplit("\n", 1)[1].split("\t")[0])
        assert (f"[output clipped at 100000 characters after line {last} of {BIG_LINES}; view the rest with "
                f"view_range, e.g. [{last + 1}, -1]") in out  # fmt: skip
    elif view_range[1] == -1:
        assert out.endswith(f"{BIG_LINES - 2:6}\ty\n{BIG_LINES - 1:6}\ty\n{BIG_LINES:6}\ty\n")
        assert f"(lines {BIG_LINES - 2}-{BIG_LINES} of {BIG_LINES})" in out
    else:
        assert f"(lines 1000000-1000004 of {BIG_LINES})" in out
        assert out.endswith("".join(f"{n:6}\ty\n" for n in range(1_000_000, 1_000_005)))


# a unique first line, then short lines up to the editor's limit (64 MiB in all)
BIG_EDIT = "{ echo first-line-; yes | head -c 67108852; } > /testbed/big.txt"
BIG_EDIT_LINES = 1 + 67108852 // 2


@pytest.mark.parametrize(
    "args",
    [
        {"command": "insert", "path": "/testbed/big.txt", "insert_line": 1, "new_str": "inserted"},
        {"command": "str_replace", "path": "/testbed/big.txt", "old_str": "first-line-", "new_str": "replaced"},
        {"command": "str_replace", "path": "/testbed/big.txt", "old_str": "y\n", "new_str": "n\n"},
    ],
    ids=["insert", "str_replace", "str_replace-everywhere"],
)
def test_editing_a_64_mib_file_of_short_lines_never_splits_it_into_lines(args, record):
    """An edit needs the file's text (64 MiB at most), never a list of its 32 Mi lines; a non-unique
    old_str lists a few of its lines, not all 32 Mi."""
    res = editor_peak(BIG_EDIT, args, timeout=60)
    out, grown = res["out"], res["grown_kib"] // 1024
    text = args.get("old_str", args.get("new_str"))
    record(f"editor {args['command']} {text!r} in a 64 MiB file of 32 Mi short lines",
           "host RSS grows < 4x the file; snippet or error short",
           f"RSS +{grown} MiB, Python peak {res['traced_kib'] // 1024} MiB; {len(out)} characters: {out[:80]!r}")
    assert res["grown_kib"] < 4 * 64 * 1024, f"the host grew by {grown} MiB editing a 64 MiB file"
    assert len(out) < 2000
    if args.get("old_str") == "y\n":
        assert out.startswith(f"Error: str_replace: old_str occurred {BIG_EDIT_LINES - 1} times in /testbed/big.txt "
                              "(starting at lines 2, 3, 4,")  # fmt: skip
        assert res["size"] == 64 * MiB
    else:
        assert "has been edited" in out and "     1\t" in out
        assert res["size"] == 64 * MiB + (9 if args["command"] == "insert" else -3)
