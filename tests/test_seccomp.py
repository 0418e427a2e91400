"""The seccomp filter: the compiled program, and what it must keep working (fork, threads, numpy).

What it denies is checked by making the denied calls inside real sandboxes in
``tests/security/test_kernel.py`` (and TIOCSTI, AF_PACKET in ``test_proc.py``,
``test_net.py``).
"""

from __future__ import annotations

import os

import pytest

from sandboxlite import Sandbox
from sandboxlite.isolation import seccomp

from .helpers_nonroot import run_py


@pytest.fixture(scope="module")
def sb():
    with Sandbox(rootfs="host", network="none") as box:
        yield box


def test_filter_bytes_valid_and_cached():
    data = seccomp.filter_bytes()
    assert isinstance(data, bytes) and data
    assert len(data) % 8 == 0, "a BPF program is an array of 8-byte instructions"
    assert seccomp.filter_bytes() is data, "filter_bytes() should return the cached program"
    info = seccomp.filter_bytes.cache_info()
    # the variants: memfd, and (isolation="landlock") sockets and IPC
    assert info.hits >= 1 and info.currsize <= 8
    strict = seccomp.filter_bytes(memfd=False)
    assert strict != data and len(strict) % 8 == 0 and seccomp.filter_bytes(memfd=False) is strict
    ll = seccomp.filter_bytes(memfd=False, sockets=False, ipc=False)
    assert len({data, strict, ll}) == 3 and len(ll) % 8 == 0


def test_filter_fd_holds_the_program():
    fd = seccomp.filter_fd()
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    assert b"".join(chunks) == seccomp.filter_bytes()


def test_fork_and_subprocess_work(sb):
    script = r'''
import json, os, subprocess
pid = os.fork()
if pid == 0:
    os._exit(7)
_, status = os.waitpid(pid, 0)
out = {"fork": os.waitstatus_to_exitcode(status)}
out["subprocess"] = subprocess.run(["sh", "-c", "echo spawned"], capture_output=True, text=True).stdout
print(json.dumps(out))
'''
    assert run_py(sb, script) == {"fork": 7, "subprocess": "spawned\n"}


def test_threads_work(sb):
    script = r'''
import json, threading
from concurrent.futures import ThreadPoolExecutor
results = [None] * 8
def work(i):
    results[i] = sum(range(10000 * (i + 1)))
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with ThreadPoolExecutor(4) as pool:
    pooled = list(pool.map(lambda x: x * x, range(16)))
ok = all(r == sum(range(10000 * (i + 1))) for i, r in enumerate(results)) and pooled[-1] == 225
print(json.dumps("ok" if ok else results))
'''
    assert run_py(sb, script) == "ok"


def test_numpy_with_threads_if_available(sb):
    has_numpy = sb.exec(["python3", "-c", "import numpy"]).exit_code == 0
    if not has_numpy:
        # numpy is not installed for the host's /usr/bin/python3: the thread check above stands alone
        return
    script = r'''
import json, threading
import numpy as np
a = np.random.default_rng(0).random((300, 300))
out = []
def work():
    out.append(float(np.linalg.norm(a @ a)))
ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(len(out) == 4 and len(set(out)) == 1))
'''
    assert run_py(sb, script, timeout=60) is True
