"""Container images: references, image configs, the blob store, and archives read into it.

The archives are made here, at test time, by the real tools: a small busybox root filesystem is
made an OCI layout by umoci, which skopeo then writes as a docker-archive (what ``podman save``
writes) and as an OCI archive.  Two forms no tool here writes are assembled from those real blobs
(docker is not installed): old docker's ``ID/layer.tar`` members, and docker >= 25's OCI layout with
a manifest.json in one tar.  The two-platform index is written by hand over two real umoci
manifests (umoci makes no index), and skopeo then copies it (``--all``) into an OCI archive.

No bwrap and no sandbox: only the tools (``apt-get install skopeo umoci busybox-static``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from sandboxlite.errors import ImageError
from sandboxlite.images import oci
from sandboxlite.images.blobs import BlobStore, check_digest

INSTALL = "apt-get install skopeo umoci busybox-static (tools/setup.sh installs them)"
# local files only: no signature policy applies (and a fresh host may have no policy.json at all)
SKOPEO = ("skopeo", "--insecure-policy")
HOST = oci.host_platform().normalised()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- references -------------------------------------------------------------------------------

SEPARATORS = "my-reg.io/a__b/c.d-e/f---g:V_1.0-rc"
GOOD_REFERENCES = [
    ("python:3.12-slim", "docker.io/library/python:3.12-slim", "python:3.12-slim"),
    ("python", "docker.io/library/python:latest", "python:latest"),
    ("user/app", "docker.io/user/app:latest", "user/app:latest"),
    ("docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36", "busybox:1.36"),
    ("index.docker.io/user/app:v1", "docker.io/user/app:v1", "user/app:v1"),
    ("library/python:3", "docker.io/library/python:3", "python:3"),
    ("ghcr.io/o/r:tag", "ghcr.io/o/r:tag", "ghcr.io/o/r:tag"),
    ("localhost/app", "localhost/app:latest", "localhost/app:latest"),
    ("localhost:5000/x/y@sha256:" + "a" * 64, "localhost:5000/x/y@sha256:" + "a" * 64,
     "localhost:5000/x/y@sha256:" + "a" * 64),
    ("quay.io/a/b/c:1.0@sha256:" + "b" * 64, "quay.io/a/b/c:1.0@sha256:" + "b" * 64,
     "quay.io/a/b/c:1.0@sha256:" + "b" * 64),
    ("registry.example.com:443/team/app", "registry.example.com:443/team/app:latest",
     "registry.example.com:443/team/app:latest"),
    (SEPARATORS, SEPARATORS, SEPARATORS),
    ("[::1]:5000/app:1", "[::1]:5000/app:1", "[::1]:5000/app:1"),
    ("Registry/app", "Registry/app:latest", "Registry/app:latest"),  # docker: an upper-case first part is a host
]


@pytest.mark.parametrize("text,canonical,short", GOOD_REFERENCES)
def test_good_references_normalise_as_docker_does(text, canonical, short):
    ref = oci.parse_reference(text)
    assert str(ref) == canonical and ref.short() == short
    assert oci.parse_reference(canonical) == ref and oci.parse_reference(short) == ref


def test_reference_fields():
    ref = oci.parse_reference("localhost:5000/x/y:1@sha256:" + "c" * 64)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == ("localhost:5000", "x/y", "1", "sha256:" + "c" * 64)
    assert oci.parse_reference("x@sha256:" + "c" * 64).tag is None  # a digest alone gets no :latest


BAD_REFERENCES = [
    ("", "empty"),
    ("Python:3", "lowercase"),
    ("docker.io/User/app", "lowercase"),
    ("python:", "tag"),
    ("python:-x", "tag"),
    ("python:" + "t" * 129, "tag"),
    ("python:a b", "tag"),
    ("py thon", "component"),
    ("a//b", "component"),
    ("a/b_", "component"),
    ("-a/b", "component"),
    ("a/.b", "component"),
    ("a@sha256:123", "digest"),
    ("a@sha512:" + "a" * 128, "sha256"),
    ("a@", "digest"),
    ("a" * 64, "image ID"),
    ("bad_host.io:x/app", "registry"),
    ("-bad.io/app", "registry"),
    ("ex.io/" + "a" * 260, "longer than 255"),
    ("ex.io/ä/b", "component"),
]


@pytest.mark.parametrize("text,rule", BAD_REFERENCES)
def test_bad_references_name_the_rule(text, rule):
    with pytest.raises(ImageError) as e:
        oci.parse_reference(text)
    assert rule in str(e.value) and "Hint:" in str(e.value)


# -- image configs ----------------------------------------------------------------------------


def test_config_tolerates_missing_fields():
    cfg = oci.ImageConfig.from_json(b'{"architecture": "arm64", "os": "linux", "config": null}')
    assert cfg.architecture == "arm64" and cfg.env == [] and cfg.cmd == [] and cfg.labels == {}
    assert cfg.diff_ids == [] and cfg.created is None and cfg.platform() == "linux/arm64"
    assert oci.ImageConfig.from_json(b"{}") == oci.ImageConfig()
    cfg = oci.ImageConfig.from_json(json.dumps({"config": {"ExposedPorts": {"53/udp": {}, "80": {}}}}).encode())
    assert cfg.exposed_ports == ["53/udp", "80/tcp"]


@pytest.mark.parametrize("doc,field", [
    ({"architecture": 3}, "architecture"),
    ({"config": []}, "config"),
    ({"config": {"Env": "A=1"}}, "config.Env"),
    ({"config": {"Env": ["A=1", 2]}}, "config.Env[1]"),
    ({"config": {"Cmd": "sh"}}, "config.Cmd"),
    ({"config": {"Entrypoint": [None]}}, "config.Entrypoint[0]"),
    ({"config": {"User": 0}}, "config.User"),
    ({"config": {"WorkingDir": ["/"]}}, "config.WorkingDir"),
    ({"config": {"Labels": {"a": 1}}}, "config.Labels['a']"),
    ({"config": {"ExposedPorts": ["80/tcp"]}}, "config.ExposedPorts"),
    ({"rootfs": {"diff_ids": "sha256:x"}}, "rootfs.diff_ids"),
    ({"rootfs": {"diff_ids": ["sha256:x"]}}, "rootfs.diff_ids[0]"),
    ({"created": 5}, "created"),
])  # fmt: skip
def test_config_types_are_checked_and_the_field_named(doc, field):
    with pytest.raises(ImageError) as e:
        oci.ImageConfig.from_json(json.dumps(doc).encode())
    assert field in str(e.value)


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"\xff\xfe", b"null"])
def test_config_that_is_no_json_object(data):
    with pytest.raises(ImageError, match="image config"):
        oci.ImageConfig.from_json(data)


# -- the blob store ---------------------------------------------------------------------------


def store_files(store: BlobStore) -> list[str]:
    """Every file under the store's root: blobs and anything a failed put might have left."""
    return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*") if p.is_file())


def test_put_keeps_a_read_only_blob_by_its_digest(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(3 << 20)  # several chunks
    digest = store.put(io.BytesIO(data), expect=sha(data), size=len(data), max_bytes=10 << 20)
    assert digest == sha(data) and store.has(digest) and store.size(digest) == len(data)
    assert store.path(digest) == tmp_path / "blobs" / "sha256" / digest[7:]
    assert store.path(digest).stat().st_mode & 0o777 == 0o444
    with store.open(digest) as f:
        assert f.read() == data
    assert store.verify(digest) and store.digests() == [digest]
    assert store.put(io.BytesIO(data), max_bytes=10 << 20) == digest  # again, unchecked: the same blob
    assert store_files(store) == [f"sha256/{digest[7:]}"]
    store.remove(digest)
    store.remove(digest)  # (gone already: fine)
    assert not store.has(digest) and store.digests() == []


@pytest.mark.parametrize("kwargs,message", [
    ({"expect": sha(b"other")}, "does not match its digest"),
    ({"size": 4}, "not the 4"),
    ({"size": 100}, "not the 100"),
    ({"max_bytes": 5}, "larger than the limit"),
    ({"size": 11, "max_bytes": 5}, "larger than the limit"),
])  # fmt: skip
def test_a_refused_put_keeps_nothing(tmp_path, kwargs, message):
    store = BlobStore(tmp_path / "blobs")
    with pytest.raises(ImageError, match=message):
        store.put(io.BytesIO(b"hello world"), **{"max_bytes": 1 << 20, **kwargs})
    assert store_files(store) == [] and store.digests() == []


def test_a_stream_past_the_limit_is_not_read_to_its_end(tmp_path):
    class Endless(io.RawIOBase):
        read_bytes = 0

        def readable(self):
            return True

        def readinto(self, b):
            self.read_bytes += len(b)
            b[:] = b"x" * len(b)
            return len(b)

    endless = Endless()
    with pytest.raises(ImageError, match="larger than the limit"):
        BlobStore(tmp_path).put(endless, max_bytes=3 << 20)
    assert endless.read_bytes <= (3 << 20) + (1 << 20)


def test_concurrent_puts_of_one_blob_all_succeed(tmp_path):
    store = BlobStore(tmp_path / "blobs")
    data = os.urandom(2 << 20)
    start = threading.Barrier(16)

    def put(_):
        start.wait()
        return store.put(io.BytesIO(data), expect=sha(data), max_bytes=1 << 30)

    with ThreadPoolExecutor(16) as pool:
        assert set(pool.map(put, range(16))) == {sha(data)}
    assert store_files(store) == [f"sha256/{sha(data)[7:]}"] and store.verify(sha(data))


BAD_DIGESTS = ["sha256:" + "g" * 64, "sha256:" + "A" * 64, "sha256:" + "a" * 63, "sha256:" + "a" * 65,
               "sha256:" + "a" * 64 + "\n", "sha512:" + "a" * 128, "md5:abc", "../../etc/passwd",
               "sha256:../../../etc/passwd", "sha256:", "", "a" * 64, None, 42]  # fmt: skip


@pytest.mark.parametrize("digest", BAD_DIGESTS)
def test_malformed_digests_are_refused_everywhere(tmp_path, digest):
    store = BlobStore(tmp_path)
    calls = [store.path, store.has, store.open, store.size, store.remove, check_digest]
    if digest is not None:  # (put's expect=None means "no expectation")
        calls.append(lambda d: store.put(io.BytesIO(b"x"), expect=d, max_bytes=10))
    for call in calls:
        with pytest.raises(ImageError, match="sha256"):
            call(digest)
    assert store_files(store) == []


def test_a_missing_blob_says_so(tmp_path):
    store = BlobStore(tmp_path)
    with pytest.raises(ImageError, match="not in the store"):
        store.open(sha(b"x"))
    assert not store.verify(sha(b"x")) and store.digests() == []


def test_a_damaged_blob_fails_verify(tmp_path):
    store = BlobStore(tmp_path)
    digest = store.put(io.BytesIO(b"content"), max_bytes=100)
    os.chmod(store.path(digest), 0o644)
    store.path(digest).write_bytes(b"c0ntent")
    assert not store.verify(digest)


# -- archives made by the real tools ----------------------------------------------------------


def run(*argv: str) -> str:
    p = subprocess.run(argv, capture_output=True, text=True)
    assert p.returncode == 0, f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}"
    return p.stdout


def need_tools() -> None:
    missing = [t for t in ("umoci", "skopeo") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: {INSTALL}", pytrace=False)
    if not Path("/bin/busybox").is_file():
        pytest.fail(f"/bin/busybox missing: {INSTALL}", pytrace=False)


def make_rootfs(root: Path) -> None:
    """A small tree: busybox and symlinks to it, a hard link, a file, an empty directory."""
    (root / "bin").mkdir(parents=True)
    shutil.copy2("/bin/busybox", root / "bin" / "busybox")
    for applet in ("sh", "ls", "cat"):
        (root / "bin" / applet).symlink_to("busybox")
    os.link(root / "bin" / "busybox", root / "bin" / "busybox.again")
    (root / "etc").mkdir()
    (root / "etc" / "motd").write_text("hello from the image\n")
    (root / "var" / "empty").mkdir(parents=True)


def umoci_layer(layout: Path, tag: str, rootfs: Path) -> None:
    """ROOTFS's tree added to TAG as one layer: unpack, copy in, repack.  (umoci 0.4.7's ``insert``
    writes a layer tar cut short after its last member's data: GNU tar refuses it, and so does the
    unpacker.)"""
    rootless = ("--rootless",) if os.geteuid() != 0 else ()
    bundle = layout.parent / f"bundle-{layout.name}-{tag}"
    run("umoci", "unpack", *rootless, "--image", f"{layout}:{tag}", str(bundle))
    run("cp", "-a", f"{rootfs}/.", str(bundle / "rootfs"))
    run("umoci", "repack", "--image", f"{layout}:{tag}", str(bundle))
    shutil.rmtree(bundle)


def umoci_image(layout: Path, rootfs: Path) -> None:
    """Tag 1.0 (amd64, with a config to read back), 1.0-arm64 (the same layer, arm64), and the full
    reference example.com/team/app:1.0 on tag 1.0's manifest."""
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:1.0")
    umoci_layer(layout, "1.0", rootfs)
    run("umoci", "config", "--image", f"{layout}:1.0", "--architecture", "amd64", "--os", "linux",
        "--config.env", "PATH=/bin", "--config.env", "GREETING=hello world", "--config.entrypoint", "/bin/sh",
        "--config.entrypoint", "-c", "--config.cmd", "cat /etc/motd", "--config.workingdir", "/work",
        "--config.user", "1000:1000", "--config.exposedports", "8080/tcp", "--config.label", "org.example.role=test",
        "--created", "2024-01-02T03:04:05Z")  # fmt: skip
    run("umoci", "config", "--image", f"{layout}:1.0", "--architecture", "arm64", "--tag", "1.0-arm64")
    run("umoci", "tag", "--image", f"{layout}:1.0", "example.com/team/app:1.0")
    run("umoci", "gc", "--layout", str(layout))


def index_entries(layout: Path) -> dict[str, dict]:
    index = json.loads((layout / "index.json").read_text())
    return {m["annotations"][oci.REF_NAME]: m for m in index["manifests"]}


def blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest[7:]).read_bytes()


def two_platform_layout(base: Path, dest: Path) -> str:
    """A copy of ``base`` whose index.json names one index of two platforms.  Written by hand (umoci
    makes no index) over umoci's two real manifests; the digest of that index."""
    shutil.copytree(base, dest)
    entries = index_entries(base)
    amd64 = {k: v for k, v in entries["1.0"].items() if k != "annotations"}
    arm64 = {k: v for k, v in entries["1.0-arm64"].items() if k != "annotations"}
    amd64["platform"] = {"os": "linux", "architecture": "amd64"}
    arm64["platform"] = {"os": "linux", "architecture": "arm64", "variant": "v8"}
    inner = json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": [amd64, arm64]}).encode()
    (dest / "blobs" / "sha256" / sha(inner)[7:]).write_bytes(inner)
    top = {"schemaVersion": 2, "manifests": [{"mediaType": oci.OCI_INDEX, "digest": sha(inner), "size": len(inner),
                                               "annotations": {oci.REF_NAME: "multi"}}]}  # fmt: skip
    (dest / "index.json").write_text(json.dumps(top))
    return sha(inner)


def tar_members(path: Path) -> dict[str, tarfile.TarInfo | bytes]:
    """Every member of a tar: its content (regular files) or its header (the rest), in order."""
    out: dict[str, tarfile.TarInfo | bytes] = {}
    with tarfile.open(path) as tar:
        for m in tar:
            out[m.name] = tar.extractfile(m).read() if m.isfile() else m
    return out


def write_tar(path: Path, members: dict[str, tarfile.TarInfo | bytes]) -> Path:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, value in members.items():
            if isinstance(value, bytes):
                info = tarfile.TarInfo(name)
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
            else:
                tar.addfile(value)
    return path


def old_docker_save(skopeo_tar: Path, dest: Path) -> Path:
    """docker < 25's ``docker save``: each layer a real ``ID/layer.tar`` member, named so in manifest.json.
    (skopeo writes the layer once as HEX.tar and ID/layer.tar as a symlink to it; docker is not here.)"""
    members = tar_members(skopeo_tar)
    manifest = json.loads(members["manifest.json"])
    layer_dirs = [n for n, v in members.items() if n.endswith("/layer.tar")]
    for entry in manifest:
        new_layers = []
        for layer_name, layer_dir in zip(entry["Layers"], layer_dirs):
            members[layer_dir] = members.pop(layer_name)
            new_layers.append(layer_dir)
        entry["Layers"] = new_layers
    members["manifest.json"] = json.dumps(manifest).encode()
    return write_tar(dest, members)


def docker25_save(skopeo_tar: Path, dest: Path) -> Path:
    """docker >= 25's ``docker save``: an OCI layout (uncompressed layers) and a manifest.json in one
    tar, assembled from skopeo's real config and layer (docker is not here)."""
    members = tar_members(skopeo_tar)
    entry = json.loads(members["manifest.json"])[0]
    config, layer = members[entry["Config"]], members[entry["Layers"][0]]
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": oci.OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config), "size": len(config)},
        "layers": [{"mediaType": oci.OCI_LAYER, "digest": sha(layer), "size": len(layer)}]}).encode()  # fmt: skip
    index = {"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": [{
        "mediaType": oci.OCI_MANIFEST, "digest": sha(manifest), "size": len(manifest),
        "annotations": {oci.CONTAINERD_NAME: "docker.io/team/app:1.0", oci.REF_NAME: "1.0"}}]}  # fmt: skip
    docker = [{"Config": f"blobs/sha256/{sha(config)[7:]}", "RepoTags": ["team/app:1.0", "team/app:stable"],
               "Layers": [f"blobs/sha256/{sha(layer)[7:]}"]}]  # fmt: skip
    return write_tar(dest, {
        **{f"blobs/sha256/{sha(b)[7:]}": b for b in (layer, config, manifest)},
        "index.json": json.dumps(index).encode(), "manifest.json": json.dumps(docker).encode(),
        "oci-layout": b'{"imageLayoutVersion": "1.0.0"}'})  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Every archive form, made once for the module."""
    need_tools()
    d = tmp_path_factory.mktemp("images")
    make_rootfs(d / "rootfs")
    umoci_image(d / "layout", d / "rootfs")
    run(*SKOPEO, "copy", f"oci:{d / 'layout'}:1.0", f"docker-archive:{d / 'docker.tar'}:team/app:1.0")
    run(*SKOPEO, "copy", f"oci:{d / 'layout'}:1.0", f"oci-archive:{d / 'oci.tar'}:ghcr.io/owner/app:1.0")
    index_digest = two_platform_layout(d / "layout", d / "multi")
    run(*SKOPEO, "copy", "--all", f"oci:{d / 'multi'}:multi", f"oci-archive:{d / 'multi.tar'}")
    old_docker_save(d / "docker.tar", d / "old-docker.tar")
    docker25_save(d / "docker.tar", d / "docker25.tar")
    return SimpleNamespace(dir=d, layout=d / "layout", docker=d / "docker.tar", oci=d / "oci.tar",
                           multi=d / "multi", multi_tar=d / "multi.tar", old_docker=d / "old-docker.tar",
                           docker25=d / "docker25.tar", index_digest=index_digest, entries=index_entries(d / "layout"))


@pytest.fixture
def store(tmp_path):
    return BlobStore(tmp_path / "store")


@contextlib.contextmanager
def piped(path: Path):
    """The file as a pipe (``cat FILE |``): a stream that cannot seek, read once."""
    cat = subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE)
    try:
        yield cat.stdout
    finally:
        cat.stdout.close()
        cat.wait()


def read(source: Path, store: BlobStore, how: str, **kwargs) -> list[oci.ImageRecord]:
    if how == "path":
        return oci.read_archive(source, store, **kwargs)
    with piped(source) as stream:
        return oci.read_archive(stream, store, **kwargs)


def diff_id_of(store: BlobStore, layer: oci.Layer) -> str:
    h = hashlib.sha256()
    with store.open(layer.digest) as f:
        inner = gzip.GzipFile(fileobj=f) if oci.LAYER_COMPRESSION[layer.media_type] == "gzip" else f
        while chunk := inner.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def check_stored(record: oci.ImageRecord, store: BlobStore) -> None:
    """Every blob of the record is in the store and verifies; each layer unpacks to its diff_id."""
    for digest in (record.manifest_digest, record.config_digest, *(layer.digest for layer in record.layers)):
        assert store.has(digest) and store.verify(digest), digest
    with store.open(record.config_digest) as f:
        assert oci.ImageConfig.from_json(f.read()) == record.config
    manifest = json.loads(store.path(record.manifest_digest).read_bytes())
    assert manifest["config"]["digest"] == record.config_digest
    assert [x["digest"] for x in manifest["layers"]] == [layer.digest for layer in record.layers]
    for layer in record.layers:
        assert store.size(layer.digest) == layer.size and diff_id_of(store, layer) == layer.diff_id


def layer_names(store: BlobStore, layer: oci.Layer) -> set[str]:
    with store.open(layer.digest) as f:
        with tarfile.open(fileobj=f, mode="r|*") as tar:
            return {m.name.lstrip("./") for m in tar}


def test_config_read_back_from_a_real_umoci_image(made):
    manifest = json.loads(blob(made.layout, made.entries["1.0"]["digest"]))
    cfg = oci.ImageConfig.from_json(blob(made.layout, manifest["config"]["digest"]))
    assert (cfg.architecture, cfg.os, cfg.variant) == ("amd64", "linux", "")
    assert cfg.env == ["PATH=/bin", "GREETING=hello world"]
    assert cfg.entrypoint == ["/bin/sh", "-c"] and cfg.cmd == ["cat /etc/motd"]
    assert (cfg.working_dir, cfg.user) == ("/work", "1000:1000")
    assert cfg.exposed_ports == ["8080/tcp"] and cfg.labels == {"org.example.role": "test"}
    assert cfg.created == "2024-01-02T03:04:05Z" and len(cfg.diff_ids) == 1


def test_oci_layout_directory(made, store):
    records = oci.read_archive(made.layout, store, platform="linux/amd64")
    by_manifest = {r.manifest_digest: r for r in records}
    assert len(records) == 2  # 1.0 (also named example.com/team/app:1.0) and 1.0-arm64
    app = by_manifest[made.entries["1.0"]["digest"]]
    assert app.names == ["example.com/team/app:1.0"] and app.tags == ["1.0"]
    assert app.source == f"oci:{made.layout}" and app.config.cmd == ["cat /etc/motd"]
    arm = by_manifest[made.entries["1.0-arm64"]["digest"]]
    assert arm.names == [] and arm.tags == ["1.0-arm64"] and arm.config.architecture == "arm64"
    assert [layer.digest for layer in arm.layers] == [layer.digest for layer in app.layers]
    [layer] = app.layers
    assert layer.media_type == oci.OCI_LAYER + "+gzip" and layer.diff_id == app.config.diff_ids[0]
    assert {"bin/busybox", "bin/sh", "bin/busybox.again", "etc/motd", "var/empty"} <= layer_names(store, layer)
    for r in records:
        check_stored(r, store)


@pytest.mark.parametrize("how", ["path", "stream"])
def test_docker_archive_from_skopeo(made, store, how):
    [record] = read(made.docker, store, how)
    assert record.names == ["docker.io/team/app:1.0"] and record.tags == []
    assert record.source == ("docker-archive:" + (str(made.docker) if how == "path" else "-"))
    [layer] = record.layers
    # docker save layers are the uncompressed tars: the digest is the diff_id
    assert layer.media_type == oci.OCI_LAYER and layer.digest == layer.diff_id == record.config.diff_ids[0]
    assert record.config.entrypoint == ["/bin/sh", "-c"] and record.config.user == "1000:1000"
    check_stored(record, store)
    manifest = json.loads(store.path(record.manifest_digest).read_bytes())  # written from manifest.json
    assert manifest["mediaType"] == oci.OCI_MANIFEST and manifest["layers"][0]["mediaType"] == oci.OCI_LAYER
    assert not any(p.name.startswith(".put-") for p in store.root.iterdir())


@pytest.mark.parametrize("how", ["path", "stream"])
def test_old_docker_save_with_layer_tar_members(made, store, how):
    [record] = read(made.old_docker, store, how)
    [expected] = oci.read_archive(made.docker, BlobStore(store.root.parent / "other"))
    assert record.names == ["docker.io/team/app:1.0"]
    assert (record.config_digest, record.layers, record.manifest_digest) == \
        (expected.config_digest, expected.layers, expected.manifest_digest)
    check_stored(record, store)


@pytest.mark.parametrize("how", ["path", "stream"])
def test_docker25_save_with_an_oci_layout_inside(made, store, how):
    [record] = read(made.docker25, store, how)
    assert record.names == ["docker.io/team/app:1.0", "docker.io/team/app:stable"] and record.tags == ["1.0"]
    assert record.source.startswith("docker-archive:") and record.layers[0].media_type == oci.OCI_LAYER
    check_stored(record, store)


@pytest.mark.parametrize("how", ["path", "stream"])
def test_oci_archive_from_skopeo(made, store, how):
    [record] = read(made.oci, store, how)
    assert record.names == ["ghcr.io/owner/app:1.0"] and record.tags == []
    assert record.manifest_digest == made.entries["1.0"]["digest"]  # skopeo kept umoci's manifest
    assert record.source.startswith("oci-archive:") and record.config.working_dir == "/work"
    check_stored(record, store)


@pytest.mark.parametrize("how", ["dir", "path", "stream"])
def test_two_platform_index_resolves_to_the_platform(made, store, how):
    source = made.multi if how == "dir" else made.multi_tar
    mode = "path" if how == "dir" else how
    [arm] = read(source, store, mode, platform="linux/arm64")  # the index says linux/arm64/v8
    assert arm.config.architecture == "arm64" and arm.manifest_digest == made.entries["1.0-arm64"]["digest"]
    [amd] = read(source, store, mode, platform="linux/amd64")
    assert amd.config.architecture == "amd64" and amd.manifest_digest == made.entries["1.0"]["digest"]
    assert arm.tags == amd.tags == (["multi"] if how == "dir" else [])
    for r in (arm, amd):
        check_stored(r, store)
    if HOST in (oci.Platform("linux", "arm64", "v8"), oci.Platform("linux", "amd64")):
        [default] = read(source, store, mode)  # this machine's platform
        assert default.config.architecture == HOST.architecture
    else:
        with pytest.raises(ImageError, match=f"no image for {HOST}"):
            read(source, store, mode)
    with pytest.raises(ImageError) as e:
        read(source, store, mode, platform="linux/s390x")
    assert "no image for linux/s390x" in str(e.value) and "linux/amd64, linux/arm64/v8" in str(e.value)
    assert made.index_digest in str(e.value)


def test_platform_strings():
    assert oci.parse_platform("linux/arm/v7") == oci.Platform("linux", "arm", "v7")
    assert oci.Platform("linux", "aarch64").normalised() == oci.Platform("linux", "arm64", "v8")
    assert oci.Platform("linux", "amd64", "v1").normalised() == oci.Platform("linux", "amd64")
    assert str(oci.host_platform()).startswith("linux/")
    for bad in ("linux", "linux/amd64/v1/x", "Linux/AMD64", "", "linux//v7"):
        with pytest.raises(ImageError, match="platform"):
            oci.parse_platform(bad)


def test_concurrent_reads_of_one_archive_into_one_store(made, store):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: oci.read_archive(made.oci, store), range(4)))
    assert all(r == results[0] for r in results)
    check_stored(results[0][0], store)


# -- hostile and damaged archives: an ImageError, and no record -------------------------------


def flip_byte(data: bytes, at: int | None = None) -> bytes:
    at = len(data) // 2 if at is None else at
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def copied_layout(made, tmp_path) -> tuple[Path, dict]:
    layout = tmp_path / "layout"
    shutil.copytree(made.layout, layout)
    manifest = json.loads(blob(layout, made.entries["1.0"]["digest"]))
    return layout, manifest


def refused(source, store: BlobStore, match: str, **kwargs) -> ImageError:
    with pytest.raises(ImageError, match=match) as e:
        oci.read_archive(source, store, **kwargs)
    assert "Hint:" in str(e.value)
    assert not any(p.name.startswith(".put-") for p in store.root.glob(".*"))  # no half-written blob
    return e.value


def test_a_tampered_layer_in_a_layout_is_refused(made, store, tmp_path):
    layout, manifest = copied_layout(made, tmp_path)
    layer = layout / "blobs" / "sha256" / manifest["layers"][0]["digest"][7:]
    bad = flip_byte(layer.read_bytes())
    layer.write_bytes(bad)
    refused(layout, store, "does not match its digest")
    assert not store.has(sha(bad)) and not store.has(manifest["layers"][0]["digest"])
    oci.read_archive(made.layout, store)  # the good blob in the store already changes nothing:
    refused(layout, store, "does not match its digest")  # the archive's own copy is still checked


def test_a_missing_blob_in_a_layout_is_refused(made, store, tmp_path):
    layout, manifest = copied_layout(made, tmp_path)
    (layout / "blobs" / "sha256" / manifest["config"]["digest"][7:]).unlink()
    refused(layout, store, f"lacks blob {manifest['config']['digest']}")


@pytest.mark.parametrize("how", ["path", "stream"])
def test_a_tampered_layer_in_an_oci_archive_is_refused(made, store, tmp_path, how):
    members = tar_members(made.oci)
    name = next(n for n, v in members.items() if isinstance(v, bytes) and len(v) > 100_000)
    members[name] = flip_byte(members[name])
    bad = write_tar(tmp_path / "bad.tar", members)
    with pytest.raises(ImageError, match="does not match its digest"):
        read(bad, store, how)
    assert not store.has(sha(members[name]))


@pytest.mark.parametrize("how", ["path", "stream"])
def test_a_blob_the_oci_archive_lacks_is_refused(made, store, tmp_path, how):
    oci.read_archive(made.oci, store)  # (the store has it: the archive still lacks it)
    members = tar_members(made.oci)
    manifest = json.loads(members["blobs/sha256/" + made.entries["1.0"]["digest"][7:]])
    del members["blobs/sha256/" + manifest["layers"][0]["digest"][7:]]
    bad = write_tar(tmp_path / "bad.tar", members)
    with pytest.raises(ImageError, match="lacks blob"):
        read(bad, store, how)


@pytest.mark.parametrize("source", ["docker", "old_docker"])
def test_a_tampered_docker_save_layer_is_refused(made, store, tmp_path, source):
    members = tar_members(getattr(made, source))
    name = next(n for n, v in members.items() if isinstance(v, bytes) and n.endswith(".tar"))
    members[name] = flip_byte(members[name], at=len(members[name]) - 2000)
    bad = write_tar(tmp_path / "bad.tar", members)
    refused(bad, store, "not its config.s diff_id")


def test_a_docker_save_lacking_a_layer_is_refused(made, store, tmp_path):
    members = tar_members(made.old_docker)
    del members[next(n for n in members if n.endswith("/layer.tar"))]
    refused(write_tar(tmp_path / "bad.tar", members), store, "has no member")


@pytest.mark.parametrize("name", ["manifest.json", "index.json"])
def test_corrupt_manifest_json_is_refused(made, store, tmp_path, name):
    members = tar_members(made.docker if name == "manifest.json" else made.oci)
    members[name] = members[name][:-5]
    refused(write_tar(tmp_path / "bad.tar", members), store, f"{name} is not valid JSON")


def test_a_manifest_whose_blob_was_rewritten_is_refused(made, store, tmp_path):
    layout, _ = copied_layout(made, tmp_path)
    path = layout / "blobs" / "sha256" / made.entries["1.0"]["digest"][7:]
    path.write_bytes(path.read_bytes().replace(b'"schemaVersion":2', b'"schemaVersion": 2'))
    refused(layout, store, "does not match its digest|bytes, not the")


def edit_index(layout: Path, change) -> None:
    index = json.loads((layout / "index.json").read_text())
    change(index["manifests"][0])
    (layout / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("change,match", [
    (lambda d: d.update(mediaType=oci.DOCKER_SCHEMA1[1]), "schema 1"),
    (lambda d: d.update(mediaType="application/vnd.example.thing+json"), "no container image manifest"),
    (lambda d: d.update(mediaType=oci.OCI_INDEX), "described as .*index.* but is a manifest"),
    (lambda d: d.update(digest="sha256:../../../../etc/passwd"), "not a digest"),
    (lambda d: d.update(digest="sha512:" + "a" * 128), "only sha256"),
    (lambda d: d.update(size=-1), "no valid size"),
    (lambda d: d.update(size=1 << 40), "a JSON document of more than"),
])  # fmt: skip
def test_bad_descriptors_in_index_json_are_refused(made, store, tmp_path, change, match):
    layout, _ = copied_layout(made, tmp_path)
    edit_index(layout, change)
    refused(layout, store, match)


def test_a_blob_symlinked_out_of_the_layout_is_refused(made, store, tmp_path):
    layout, manifest = copied_layout(made, tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes(blob(layout, manifest["config"]["digest"]))
    config = layout / "blobs" / "sha256" / manifest["config"]["digest"][7:]
    config.unlink()
    config.symlink_to(outside)
    refused(layout, store, "outside the layout")


def test_docker_save_names_outside_an_unpacked_archive_are_refused(made, store, tmp_path):
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    for name, value in tar_members(made.old_docker).items():
        if isinstance(value, bytes):
            (unpacked / name).parent.mkdir(parents=True, exist_ok=True)
            (unpacked / name).write_bytes(value)
    [record] = oci.read_archive(unpacked, store)  # an unpacked docker save reads as the tar does
    assert record.names == ["docker.io/team/app:1.0"]
    manifest = json.loads((unpacked / "manifest.json").read_text())
    manifest[0]["Layers"] = ["../../../../etc/passwd"]
    (unpacked / "manifest.json").write_text(json.dumps(manifest))
    refused(unpacked, store, "outside the layout")


def test_the_archive_size_limit_holds(made, store):
    refused(made.docker, store, "larger than the limit", max_bytes=100_000)


@pytest.mark.parametrize("content,match", [
    (b"this is not a tar archive at all" * 100, "not a readable tar"),
    (b"", "not a readable tar|holds neither"),
])  # fmt: skip
def test_what_is_no_archive_is_refused(tmp_path, store, content, match):
    (tmp_path / "x").write_bytes(content)
    refused(tmp_path / "x", store, match)
    refused(tmp_path / "missing.tar", store, "does not exist")
    (tmp_path / "empty-dir").mkdir()
    refused(tmp_path / "empty-dir", store, "holds neither")


def test_a_truncated_stream_is_refused(made, store):
    data = made.docker.read_bytes()
    with pytest.raises(ImageError, match="not a readable tar|has no member|lacks"):
        oci.read_archive(io.BytesIO(data[: len(data) // 2]), store)


def test_json_nesting_bombs_are_refused(made, store, tmp_path):
    layout, _ = copied_layout(made, tmp_path)
    (layout / "index.json").write_text("[" * 200_000)
    refused(layout, store, "index.json is not valid JSON")


def test_names_that_are_no_references_are_left_out(made, store, tmp_path):
    members = tar_members(made.docker)
    manifest = json.loads(members["manifest.json"])
    manifest[0]["RepoTags"] = ["Bad:Name", "team/app:1.0", "docker.io/team/app:1.0", 7]
    members["manifest.json"] = json.dumps(manifest).encode()
    [record] = oci.read_archive(write_tar(tmp_path / "names.tar", members), store)
    assert record.names == ["docker.io/team/app:1.0"]  # the image is read; the caller may name it


def test_a_gzipped_docker_save_stream(made, store):
    """``docker save IMAGE | gzip`` is how archives often travel: the stream is read through gzip."""
    gz = subprocess.Popen(["gzip", "-c", str(made.docker)], stdout=subprocess.PIPE)
    try:
        [record] = oci.read_archive(gz.stdout, store)
    finally:
        gz.stdout.close()
        gz.wait()
    assert record.names == ["docker.io/team/app:1.0"]
    check_stored(record, store)
