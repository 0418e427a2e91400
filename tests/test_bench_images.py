"""bench/images.py, smoke run: ``--quick --only stored,start`` on the tiny busybox images the store
tests make (A, and B = A's layer + one more), with ``rootfs="host"`` as the baseline so that no built
image is needed.  Checks the structure of what it writes (rows, ratios, raw samples, the bytes
stored), never timings.  Real skopeo, umoci and bwrap."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from sandboxlite import Sandbox

from .test_image_store import made  # noqa: F401 - the module-scoped fixture (a.tar, b.tar), shared

BENCH = Path(__file__).resolve().parents[1] / "bench" / "images.py"


@pytest.fixture(scope="module")
def images():
    spec = importlib.util.spec_from_file_location("bench_images", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_quick_stored_and_start_write_their_rows(images, made, tmp_path):  # noqa: F811
    out = tmp_path / "images.json"
    opts = images.parse_args(["--quick", "--only", "stored,start", "--baseline", "host", "--json", str(out)])
    assert (opts.quick, opts.only, opts.baseline) == (True, ("stored", "start"), "host")
    a = images.Image("busybox", made.a, "docker.io/team/bb:1.0")
    b = images.Image("busybox-b", made.b, "docker.io/team/bb:2.0")
    said: list[str] = []
    doc, path = images.run_and_report(opts, images.Images(small=a, derived=b), log=said.append)

    assert path == out
    written = json.loads(out.read_text())
    assert written["schema"] == "sandboxlite.bench-images/1"
    assert written["params"]["rounds"] == 20 and written["params"]["only"] == ["stored", "start"]
    for key in ("nproc", "kernel", "python"):
        assert written["machine"][key]
    assert set(written["tools"]) >= {"skopeo", "umoci", "docker_client", "docker_server"}
    assert written["images"]["small"]["ref"] == "docker.io/team/bb:1.0"

    rows = {(r["metric"], r["subject"], r["runtime"]): r for r in written["results"]}
    assert {m for m, _, _ in rows} == {"stored", "start", "cycle"}  # nothing else was asked for
    for metric in ("start", "cycle"):
        for who in ("image=busybox", "rootfs=host"):
            r = rows[(metric, who, who)]
            assert r["status"] == "ok" and r["unit"] == "ms" and r["n"] == 20, r
            assert 0 < r["min"] <= r["median"] <= r["p90"] <= r["max"], r
            assert r["p99"] is None  # 20 samples: no p99
            samples = written["samples"][f"{metric}/{who}/{who}"]
            assert len(samples) == 20 and all(v > 0 for v in samples)
        cycle = rows[("cycle", "image=busybox", "image=busybox")]
        start = rows[("start", "image=busybox", "image=busybox")]
        assert cycle["median"] > 0 and cycle["min"] >= start["min"]  # the cycle is the start plus close()
    ratios = [r for r in written["ratios"] if r["metric"] == "start"]
    assert len(ratios) == 1 and ratios[0]["runtime"] == "image=busybox" and ratios[0]["baseline"] == "rootfs=host"
    assert ratios[0]["main"] and ratios[0]["status"] == "ok" and ratios[0]["ratio"] > 0

    st = written["stored"]
    assert st["b_reuses_a_base_layer"] is True
    bl, tr, so = st["blobs"], st["trees"], st["store_on_disk"]
    assert 0 < bl["after_a"] < bl["after_a_and_b"] < bl["sum_alone"]
    assert bl["added_by_b"] == bl["after_a_and_b"] - bl["after_a"] and bl["saved_by_sharing"] > 0
    assert bl["count_after_a_and_b"] - bl["count_after_a"] == 3  # B's layer, config, manifest
    assert tr["a"] > 0 and tr["b"] > 0 and tr["a_and_b_together"] > 0 and isinstance(tr["shared"], bool)
    assert 0 < so["after_a"] < so["after_a_and_b"]
    for subject in ("blobs", "trees", "store"):
        r = rows[("stored", subject, "A+B")]
        assert r["unit"] == "bytes" and r["median"] > 0 and r["sum_alone"] > 0

    table = "\n".join(said)
    assert "start image=busybox" in table and "bytes stored" in table and f"JSON: {out}" in table
    scratch = re.search(r"scratch SANDBOXLITE_HOME: (\S+)", table)
    assert scratch and not Path(scratch.group(1)).exists()  # removed at the end
    with Sandbox(rootfs="host") as sb:  # and nothing of it is left cached in this process
        assert sb.exec("true").exit_code == 0
