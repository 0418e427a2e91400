"""Between sandboxes: no shared files, processes, IPC or signals, although a root caller's
sandboxes all run as the same unprivileged host uid."""

from __future__ import annotations

import json
import secrets
import time

import psutil
import pytest

from sandboxlite import Sandbox

from ..conftest import alive
from .helpers import SC, nr, run_py

LIST_PROCS = r'''
import json, os
cmds = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmds.append(f.read().decode("utf-8", "replace"))
        except OSError:
            pass
print(json.dumps(cmds))
'''

SHM_KEY = 0x5B1E7E57
IPC_CREATE = SC + r'''
import ctypes
libc.shmget.restype = libc.msgget.restype = libc.semget.restype = ctypes.c_int
out = {}
for name, fn in (("shm", lambda: libc.shmget(%d, 4096, 0o3600)), ("msg", lambda: libc.msgget(%d, 0o3600)),
                 ("sem", lambda: libc.semget(%d, 1, 0o3600))):
    ctypes.set_errno(0)
    r = fn()
    out[name] = "created" if r >= 0 else en(ctypes.get_errno())
libc.mq_open.restype = ctypes.c_int
ctypes.set_errno(0)
r = libc.mq_open(b"/sandboxlite-mq", 0o2 | 0o100 | 0o200, 0o600, None)  # O_RDWR|O_CREAT|O_EXCL
out["mq"] = "created" if r >= 0 else en(ctypes.get_errno())
print(json.dumps(out))
''' % (SHM_KEY, SHM_KEY, SHM_KEY)


@pytest.fixture(scope="module")
def pair():
    with Sandbox() as a, Sandbox() as b:
        yield a, b


def test_files_processes_and_ipc(pair, record):
    a, b = pair
    assert a.executor_pid != b.executor_pid
    uids = {psutil.Process(x.executor_pid).uids().real for x in pair}
    tokens, ipc = {}, {}
    for name, box in (("a", a), ("b", b)):
        tok = f"marker-{name}-{secrets.token_hex(6)}"
        tokens[name] = tok
        r = box.exec(
            f"for d in /tmp /testbed /root /dev/shm /usr/local; do echo {tok} > $d/{tok}; done; "
            f"python3 -c 'import time; time.sleep(120)' {tok} >/dev/null 2>&1 &"
        )
        assert r.exit_code == 0, r.stderr_text
        # the same System V keys and message queue name, exclusively created in both
        ipc[name] = run_py(box, IPC_CREATE)
    for name, box in (("a", a), ("b", b)):  # wait until both daemons have exec'd
        deadline = time.monotonic() + 10
        while not any(tokens[name] in c for c in run_py(box, LIST_PROCS)):
            assert time.monotonic() < deadline, f"the background process of {name} never showed up"
            time.sleep(0.02)
    seen = {}
    for me, other, box in (("a", "b", a), ("b", "a", b)):
        tok = tokens[other]
        files = box.exec(f"for d in /tmp /testbed /root /dev/shm /usr/local; do test -e $d/{tok} && echo $d; done")
        cmds = run_py(box, LIST_PROCS)
        assert any(tokens[me] in c for c in cmds), f"{me} cannot see its own daemon: {cmds}"
        seen[me] = {"files": files.stdout_text.split(), "procs": [c for c in cmds if tok in c]}
    record(f"see the other sandbox's files and processes ({len(uids)} host uid)", "nothing",
           {k: sum(map(len, v.values())) for k, v in seen.items()})
    record("exclusively create the same SysV shm/msg/sem keys and mq", "created in both (own IPC ns)", ipc)
    assert seen == {"a": {"files": [], "procs": []}, "b": {"files": [], "procs": []}}, seen
    assert ipc["a"] == ipc["b"] == {"shm": "created", "msg": "created", "sem": "created", "mq": "created"}, ipc
    libc = __import__("ctypes").CDLL(None, use_errno=True)
    assert libc.shmget(SHM_KEY, 0, 0) == -1, "a sandbox's SysV segment reached the host"


def test_signals_between_sandboxes(pair, record):
    a, b = pair
    b.exec("sleep 300 >/dev/null 2>&1 &")
    deadline = time.monotonic() + 5
    victims = []
    while not victims and time.monotonic() < deadline:
        for p in psutil.Process(b.executor_pid).children(recursive=True):
            try:
                if p.cmdline()[:2] == ["sleep", "300"]:
                    victims.append(p.pid)
            except psutil.NoSuchProcess:  # a supervisor that has just exited
                continue
        time.sleep(0.02)
    assert victims, "b's sleeper did not start"
    script = SC + r'''
hp = int(sys.argv[1])
out = {"kill(b's host pid)": en(sc(%d, hp, 9)[1]), "pidfd_open(b's host pid)": en(sc(%d, hp, 0)[1])}
print(json.dumps(out))
''' % (nr("kill"), nr("pidfd_open"))
    r = a.exec(["python3", "-c", script, str(victims[0])])
    res = json.loads(r.stdout_text.strip().splitlines()[-1])
    a.exec("kill -9 -1; true")  # everything a may signal: its own sandbox only
    time.sleep(0.05)
    record("signal the other sandbox (its host pid; kill -9 -1)", "ESRCH; the other lives",
           f"{sorted(set(res.values()))}; b's process alive {alive(victims[0])}; a usable "
           f"{a.exec('echo ok').stdout == b'ok' + bytes([10])}")
    assert set(res.values()) == {"ESRCH"} and alive(victims[0])


def test_abstract_sockets_between_sandboxes(pair, record):
    a, b = pair
    name = "sandboxlite-x-" + secrets.token_hex(4)
    b.exec(["sh", "-c", f"python3 -c \"import socket,time; s=socket.socket(socket.AF_UNIX); "
                        f"s.bind('\\0{name}'); s.listen(); time.sleep(60)\" >/dev/null 2>&1 &"])
    ok_in_b = None
    deadline = time.monotonic() + 5
    probe = ("import socket, errno\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('\\0%s'); print('connected')\n"
             "except OSError as e:\n    print(errno.errorcode[e.errno])" % name)
    while ok_in_b != "connected" and time.monotonic() < deadline:  # control: b itself can connect
        ok_in_b = b.exec(["python3", "-c", probe]).stdout_text.strip()
        time.sleep(0.02)
    from_a = a.exec(["python3", "-c", probe]).stdout_text.strip()
    record("connect to the other sandbox's abstract socket", "ECONNREFUSED (own net ns)",
           f"{from_a} (from b itself: {ok_in_b})")
    assert ok_in_b == "connected" and from_a == "ECONNREFUSED"
