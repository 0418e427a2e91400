"""slots.py: one host uid per live sandbox, leased from a range, exclusive across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sandboxlite import ConfigError, SetupError
from sandboxlite.isolation.slots import DEFAULT_RANGE, UidPool, _subuid_range, uid_range


def test_the_range_comes_from_the_environment_the_subuid_file_or_the_default(tmp_path):
    assert uid_range({"SANDBOXLITE_UID_RANGE": "100000:10"}, "x") == (100000, 10)
    assert uid_range({"SANDBOXLITE_UID_RANGE": "off"}, "x") is None
    assert uid_range({}, "no-such-user-here") == DEFAULT_RANGE
    sub = tmp_path / "subuid"
    sub.write_text("alice:100000:65536\nsandboxlite:300000:4096\n")
    assert _subuid_range("sandboxlite", str(sub)) == (300000, 4096)
    assert _subuid_range("bob", str(sub)) is None
    for bad in ("5", "a:b", "0:10", "10:0", "2147483000:1000", "-1:5"):
        with pytest.raises(ConfigError, match="SANDBOXLITE_UID_RANGE"):
            uid_range({"SANDBOXLITE_UID_RANGE": bad}, None)


def test_leases_are_distinct_reused_and_the_lowest_free(tmp_path):
    pool = UidPool(5000, 3, tmp_path)
    a, b = pool.lease(), pool.lease()
    assert (a.uid, b.uid) == (5000, 5001)
    a.release()
    a.release()  # twice is harmless
    assert pool.lease().uid == 5000  # this process keeps what it gave back
    c = pool.lease()
    assert c.uid == 5002
    with pytest.raises(SetupError, match="all 3 sandbox uids from 5000 are in use"):
        pool.lease()


def test_another_process_never_gets_a_uid_this_one_holds(tmp_path):
    pool = UidPool(7000, 4, tmp_path)
    mine = [pool.lease() for _ in range(2)]
    other = textwrap.dedent(f"""
        from pathlib import Path
        from sandboxlite.isolation.slots import UidPool
        pool = UidPool(7000, 4, Path({str(tmp_path)!r}))
        print(pool.lease().uid, pool.lease().uid)
        try:
            pool.lease()
        except Exception as e:
            print(type(e).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, check=True).stdout.split()
    assert [m.uid for m in mine] == [7000, 7001]
    assert out == ["7002", "7003", "SetupError"]
    # held while this process keeps them (even given back: kept for its next sandbox)
    for m in mine:
        m.release()
    out = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["7002", "7003", "SetupError"]


def test_a_lock_directory_that_cannot_be_made_is_a_setup_error(tmp_path):
    (tmp_path / "file").write_text("")
    pool = UidPool(9000, 2, tmp_path / "file" / "locks")  # under a regular file: ENOTDIR
    with pytest.raises(SetupError, match="cannot lease a sandbox uid") as e:
        pool.lease()
    assert "SANDBOXLITE_UID_RANGE=off" in e.value.hint
