"""bench/build.py: the tree comparison on a made-up tree and tar (no builder needed), and a smoke run
``--quick --sandboxlite-only`` (real sandboxlite builds of two Dockerfiles, ``FROM lean``; no docker,
podman or buildah) that checks every section and field of the JSON it writes.  Structure only,
never timings."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "build.py"
OTHERS = ("docker", "podman", "buildah")
STAT_FIELDS = {"n", "median_s", "p90_s", "min_s", "max_s"}
DIFF_FIELDS = {"entries", "ignored_paths", "only_in_sandboxlite", "differ", "tmp", "groups", "examples", "identical",
               "config_diff"}  # fmt: skip


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("bench_build", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_importing_it_changes_no_environment(build):
    assert "SANDBOXLITE_SNAPSHOTS" not in os.environ or not os.environ["SANDBOXLITE_SNAPSHOTS"].startswith(
        "/dev/shm/sandboxlite-bench-build-")


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def _ti(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.type, t.mode, t.linkname = kind, mode, link
    return t


def test_compare_sorts_every_difference(build, tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "d").mkdir(mode=0o755)
    (root / "tmp").mkdir()
    (root / "same").write_bytes(b"same")
    (root / "data").write_bytes(b"one")
    (root / "longer").write_bytes(b"abc")
    (root / "only-sl").write_bytes(b"x")
    (root / "kind").mkdir()
    (root / "tmp" / "left").write_bytes(b"t")
    (root / "etc" / "hostname").write_bytes(b"sandbox\n")
    os.symlink("same", root / "link")
    for dirpath, dirnames, filenames in os.walk(root):  # (whatever the umask)
        for n in dirnames:
            os.chmod(os.path.join(dirpath, n), 0o755)
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o644)
    sl = build.tree_of_dir(root)
    assert sl["/same"].type == "file" and sl["/same"].size == 4 and sl["/link"].target == "same"
    assert sl["/d"].type == "dir" and sl["/d"].mode == 0o755

    other = build.tree_of_tar(_tar([
        (_ti("./etc", tarfile.DIRTYPE, 0o755), None), (_ti("./d", tarfile.DIRTYPE, 0o700), None),
        (_ti("./tmp", tarfile.DIRTYPE, 0o1777), None), (_ti("./same"), b"same"), (_ti("./data"), b"two"),
        (_ti("./longer"), b"abcd"), (_ti("./kind"), b"now a file"),
        (_ti("./hard", tarfile.LNKTYPE, link="./same"), None),
        (_ti("./link", tarfile.SYMTYPE, link="data"), None), (_ti("./.dockerenv"), b""),
        (_ti("./etc/hostname"), b"abc123\n"), (_ti("./dev/console", tarfile.CHRTYPE, 0o600), None),
    ]))  # fmt: skip
    assert other["/hard"].sha256 == other["/same"].sha256 and other["/hard"].size == 4  # a hard link: its target's data

    d = build.compare(sl, other, "docker")
    assert set(d) == DIFF_FIELDS - {"config_diff"} | {"only_in_docker"}
    assert d["ignored_paths"] == ["/.dockerenv", "/dev/console", "/etc/hostname"]
    assert d["only_in_sandboxlite"]["items"] == ["/only-sl"] and d["only_in_docker"]["items"] == ["/hard"]
    by_path = {x["path"]: x["attributes"] for x in d["differ"]["items"]}
    assert by_path == {"/d": ["mode"], "/data": ["sha256"], "/longer": ["size", "sha256"], "/kind": ["type"],
                       "/link": ["target"]}  # fmt: skip
    assert d["differ"]["by_attribute"] == {"mode": 1, "sha256": 2, "size": 1, "type": 1, "target": 1}
    assert d["tmp"]["only_in_sandboxlite"] == ["/tmp/left"] and d["tmp"]["differ"][0]["path"] == "/tmp"
    assert d["entries"]["compared"] == 8 and not d["identical"]
    assert d["tmp"]["differ"][0]["attributes"] == ["mode"] and d["tmp"]["differ"][0]["docker"]["mode"] == "1777"
    assert d["groups"]["only in docker: /hard"] == 1
    same = build.compare(sl, build.tree_of_dir(root), "podman")
    assert same["identical"] and same["differ"]["count"] == 0


def test_parse_args_defaults(build):
    o = build.parse_args([])
    assert (o.rounds, o.warmup, o.only, o.tools) == (5, 1, list(build.DOCKERFILES), ["sandboxlite", *OTHERS])
    q = build.parse_args(["--quick", "--tools", "docker"])
    assert (q.rounds, q.warmup, q.only, q.tools) == (1, 0, ["app", "multistage"], ["sandboxlite", "docker"])
    with pytest.raises(SystemExit):
        build.parse_args(["--only", "nope"])


def _lean_built() -> bool:
    from sandboxlite.images import images_dir

    return (images_dir() / "lean" / "manifest.json").is_file()


def test_quick_sandboxlite_only_writes_every_section(tmp_path):
    assert _lean_built(), "needs the built lean image: sandboxlite rootfs build lean (tools/setup.sh builds it)"
    out = tmp_path / "build.json"
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--sandboxlite-only", "--json", str(out)],
                       capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "JSON:" in r.stdout and "cold: median" in r.stdout
    doc = json.loads(out.read_text())
    assert set(doc) == {"schema", "created", "command", "machine", "params", "tools", "dockerfiles", "results",
                        "ratios", "sandboxlite_trees", "tree_diff", "cleanup", "notes", "wall_s",
                        "samples"}  # fmt: skip
    assert doc["schema"] == "sandboxlite.bench-build/1" and doc["wall_s"] > 0 and doc["notes"]
    assert doc["machine"]["cpu_count"] and "load_avg_end" in doc["machine"]
    p = doc["params"]
    assert (p["rounds"], p["warmup_rounds"], p["quick"], p["sandboxlite_only"]) == (1, 0, True, True)
    assert p["dockerfiles"] == ["app", "multistage"] and p["tools"] == ["sandboxlite"] and p["baseline"] == "docker"
    assert p["network"] == "none" and p["base"]["name"] == "lean" and len(p["base"]["tag"]) == 12
    assert set(p["tree_attributes"]) == {"type", "mode", "size", "target", "sha256"}
    assert "/etc/hostname" in p["tree_ignored"]

    tools = {t["name"]: t for t in doc["tools"]}
    assert set(tools) == {"sandboxlite", *OTHERS}
    assert tools["sandboxlite"]["status"] == "ok" and tools["sandboxlite"]["base_image"] == "lean"
    assert tools["sandboxlite"]["argv"][-1] == "CONTEXT" and isinstance(tools["sandboxlite"]["notes"], list)
    for name in OTHERS:
        assert tools[name]["status"] == "not available: not run (--sandboxlite-only)"

    for name in ("app", "multistage"):
        df = doc["dockerfiles"][name]
        assert df["what"] and "FROM {base}" in df["text"]
    assert doc["dockerfiles"]["app"]["context"]["files"] == 201  # 200 modules and main.py

    rows = {(x["dockerfile"], x["tool"], x["phase"]): x for x in doc["results"]}
    phases = ("cold", "cached", "cached_api")
    assert set(rows) == {(d, "sandboxlite", ph) for d in ("app", "multistage") for ph in phases}
    for (d, _, phase), x in rows.items():
        assert x["status"] == "ok" and x["unit"] == "s" and STAT_FIELDS <= set(x), x
        assert x["n"] == 1 and 0 < x["min_s"] <= x["median_s"] <= x["p90_s"] <= x["max_s"]
        assert x["image"].startswith("oci-") and x["reported_median_s"] is not None
        assert x["all_steps_cached"] is (None if phase == "cold" else True)
        assert len(doc["samples"][f"{d}/{phase}/sandboxlite"]) == 1
    ratios = {(x["dockerfile"], x["phase"]): x for x in doc["ratios"]}
    assert set(ratios) == {(d, ph) for d in ("app", "multistage") for ph in ("cold", "cached", "cached_api")}
    for x in ratios.values():
        assert x["tool"] == "sandboxlite" and x["baseline"] == "docker" and x["ratio"] is None
        assert x["status"].startswith("not available: no docker baseline")
        assert x["baseline_phase"] == ("cached" if x["phase"] == "cached_api" else x["phase"])

    for name in ("app", "multistage"):
        t = doc["sandboxlite_trees"][name]
        assert t["status"] == "ok" and t["image"].startswith("oci-") and t["entries"] > 1000
        assert t["by_type"]["file"] > 0 and t["by_type"]["dir"] > 0 and t["file_bytes"] > 0
    diffs = {(x["dockerfile"], x["tool"]): x for x in doc["tree_diff"]}
    assert set(diffs) == {(d, t) for d in ("app", "multistage") for t in OTHERS}
    for (_, tool), x in diffs.items():
        assert x["status"] == "not available: not run (--sandboxlite-only)"
        assert DIFF_FIELDS | {f"only_in_{tool}"} <= set(x) and x["differ"] is None

    c = doc["cleanup"]
    assert c["kept"] is False and c["snapshots_removed"] > 0 and c["cache_records_removed"] > 0
    from sandboxlite.errors import ImageError
    from sandboxlite.images import store

    for name in ("app", "multistage"):  # its images are gone
        with pytest.raises(ImageError):
            store.find_image(f"sandboxlite-bench-build/{name}:sandboxlite")
    snaps = Path(tools["sandboxlite"]["snapshot_store"])
    assert snaps.name == "snapshots" and snaps.parent.name.startswith("sandboxlite-bench-build-")
    assert not snaps.parent.exists()  # the run's own snapshot store: removed
