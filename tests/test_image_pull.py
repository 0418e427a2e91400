"""``sandboxlite image pull`` against a real registry on loopback (Debian's docker-registry), pushed
to with skopeo: anonymous, basic auth (htpasswd), bearer tokens; a multi-platform index; shared
base layers not fetched twice; a download broken off and resumed (in the pull and by the next
one); a tampered blob refused with nothing kept; the registry's errors named.  Real bwrap for
the sandbox started from a pulled image."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from sandboxlite import Sandbox
from sandboxlite.cli import main
from sandboxlite.errors import ImageError
from sandboxlite.images import credentials, pull, registry, store, where
from sandboxlite.images.blobs import BlobStore
from sandboxlite.images.progress import ProgressBar

from .registry_helpers import Proxy, TokenServer, docker_config, htpasswd_auth, need_registry, start_registry
from .test_image_oci import run, two_platform_layout, umoci_image, umoci_layer
from .test_image_store import busybox_tree

USER, PASSWORD = "alice", "s3cret-pw"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Layout ``a`` (busybox), ``b`` (a's layer and one more, 2 MiB of random bytes: big enough to
    break off in the middle), and a two-platform layout."""
    need_registry()
    d = tmp_path_factory.mktemp("pull-images")
    busybox_tree(d / "base")
    layout = d / "layout"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:a")
    umoci_layer(layout, "a", d / "base")
    run("umoci", "config", "--image", f"{layout}:a", "--architecture", "amd64", "--os", "linux",
        "--config.env", "PATH=/bin", "--config.cmd", "cat", "--config.cmd", "/etc/motd")  # fmt: skip
    run("umoci", "config", "--image", f"{layout}:a", "--config.label", "b=1", "--tag", "b")
    (d / "more").mkdir()
    (d / "more" / "big").write_bytes(os.urandom(2 << 20))
    (d / "more" / "added").write_text("from B\n")
    umoci_layer(layout, "b", d / "more")
    multi_base = d / "multi-base"
    umoci_image(multi_base, d / "base")
    two_platform_layout(multi_base, d / "multi")
    return SimpleNamespace(layout=layout, multi=d / "multi")


@pytest.fixture(scope="module")
def open_registry(made, tmp_path_factory):
    reg = start_registry(tmp_path_factory.mktemp("registry-open"))
    reg.push(f"oci:{made.layout}:a", "team/bb:1")
    reg.push(f"oci:{made.layout}:b", "team/bb:2")
    reg.push(f"oci:{made.multi}:multi", "team/multi:1", all_=True)
    yield reg
    reg.stop()


@pytest.fixture
def home(host_dir_factory, monkeypatch, tmp_path):
    h = host_dir_factory("sandboxlite-pull-home-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(h))
    # no login of the machine's user leaks in (or out)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    return h


def cli(*args: str, input: str | None = None, code: int = 0) -> str:
    r = CliRunner().invoke(main, list(args), input=input)
    assert r.exit_code == code, (r.exit_code, r.output)
    return r.output


class Recorder:
    """A pull.Progress keeping what it heard."""

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[int, int]] = {}
        self.got: dict[str, int] = {}
        self.finished: set[str] = set()
        self.lock = threading.Lock()

    def blob(self, digest, size, what, *, have):
        with self.lock:
            self.blobs[digest] = (size, have)

    def advance(self, digest, nbytes):
        with self.lock:
            self.got[digest] = self.got.get(digest, 0) + nbytes

    def done(self, digest):
        self.finished.add(digest)

    def fetched(self) -> int:
        return sum(self.got.values())


def test_pull_anonymous_names_the_image_and_a_sandbox_runs_it(open_registry, home):
    out = cli("image", "pull", "--insecure", f"{open_registry.host}/team/bb:1")
    assert f"{open_registry.host}/team/bb:1" in out and f"{open_registry.host}/team/bb@sha256:" in out
    with Sandbox(image=f"{open_registry.host}/team/bb:1") as sb:
        r = sb.exec("echo $((6*7)); cat /etc/motd")
        assert (r.exit_code, r.stdout) == (0, b"42\nhello from the image\n"), r
    pinned = next(ref for ref in where.names() if "@sha256:" in ref)
    with Sandbox(image=pinned) as sb:  # by its digest too
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"
    info = json.loads(cli("image", "inspect", f"{open_registry.host}/team/bb:1"))
    assert info["source"] == f"registry:{open_registry.host}/team/bb:1"
    assert store.blob_store().has(info["manifest_digest"]) and all(
        store.blob_store().verify(layer["digest"]) for layer in info["layers"])  # fmt: skip


def test_a_second_image_fetches_only_the_layers_it_does_not_share(open_registry, home):
    first = Recorder()
    store.pull_image(f"{open_registry.host}/team/bb:1", insecure=True, progress=first)
    base_layer = json.loads(cli("image", "inspect", f"{open_registry.host}/team/bb:1"))["layers"][0]
    second = Recorder()
    store.pull_image(f"{open_registry.host}/team/bb:2", insecure=True, progress=second)
    b = json.loads(cli("image", "inspect", f"{open_registry.host}/team/bb:2"))
    assert b["layers"][0]["digest"] == base_layer["digest"]
    assert second.blobs[base_layer["digest"]] == (base_layer["size"], base_layer["size"])  # already here
    assert base_layer["digest"] not in second.got
    assert second.fetched() == b["layers"][1]["size"] + store.blob_store().size(b["config_digest"])
    with Sandbox(image=f"{open_registry.host}/team/bb:2") as sb:
        assert sb.exec("cat /added /etc/motd").stdout == b"from B\nhello from the image\n"
    third = Recorder()
    store.pull_image(f"{open_registry.host}/team/bb:2", insecure=True, progress=third)
    assert third.fetched() == 0  # all of it here: only the manifest was asked for


def test_a_multi_platform_index_resolves_to_this_machine(open_registry, made, home):
    info = store.pull_image(f"{open_registry.host}/team/multi:1", insecure=True)
    assert info.manifest["oci"]["config"]["architecture"] == "amd64"
    index = json.loads((made.multi / "index.json").read_text())["manifests"][0]["digest"]
    assert f"{open_registry.host}/team/multi@{index}" in info.manifest["oci"]["names"]
    arm = store.pull_image(f"{open_registry.host}/team/multi:1", insecure=True, platform="linux/arm64")
    assert arm.manifest["oci"]["config"]["architecture"] == "arm64" and arm.name != info.name  # (as docker pull --platform)
    with pytest.raises(ImageError, match="no image for linux/s390x.*offers: linux/amd64, linux/arm64/v8"):
        store.pull_image(f"{open_registry.host}/team/multi:1", insecure=True, platform="linux/s390x")


def test_a_broken_download_is_resumed_within_the_pull(open_registry, home):
    proxy = Proxy(open_registry.host)
    try:
        big = _big_layer(open_registry)
        proxy.cut[big["digest"]] = 700_000
        rec = Recorder()
        store.pull_image(f"{proxy.host}/team/bb:2", insecure=True, progress=rec)
        ranges = [rng for path, rng in proxy.seen if path.endswith(big["digest"])]
        assert ranges == [None, "bytes=700000-"], proxy.seen
        assert rec.got[big["digest"]] == big["size"]  # every byte once
        assert store.blob_store().verify(big["digest"])
    finally:
        proxy.stop()


def test_a_pull_that_failed_resumes_in_the_next_one(open_registry, home, monkeypatch):
    proxy = Proxy(open_registry.host)
    try:
        big = _big_layer(open_registry)
        proxy.cut[big["digest"]] = 1_000_000
        monkeypatch.setattr(pull, "ATTEMPTS", 1)
        with pytest.raises(registry.TransientError, match="broke off"):
            store.pull_image(f"{proxy.host}/team/bb:2", insecure=True)
        blobs = store.blob_store()
        assert not blobs.has(big["digest"])
        assert [p.stat().st_size for p in blobs.partials()] == [1_000_000]
        assert where.find(f"{proxy.host}/team/bb:2") is None
        rec = Recorder()
        store.pull_image(f"{proxy.host}/team/bb:2", insecure=True, progress=rec)
        assert rec.blobs[big["digest"]] == (big["size"], 1_000_000)
        assert rec.got[big["digest"]] == big["size"] - 1_000_000
        assert blobs.verify(big["digest"]) and blobs.partials() == []
    finally:
        proxy.stop()


def test_a_tampered_blob_is_refused_and_nothing_kept(open_registry, home):
    proxy = Proxy(open_registry.host)
    try:
        big = _big_layer(open_registry)
        proxy.flip[big["digest"]] = 1234
        with pytest.raises(ImageError, match=f"blob {big['digest']} does not match its digest"):
            store.pull_image(f"{proxy.host}/team/bb:2", insecure=True)
        blobs = store.blob_store()
        assert not blobs.has(big["digest"]) and blobs.partials() == []
        assert where.find(f"{proxy.host}/team/bb:2") is None and store.oci_images() == []
    finally:
        proxy.stop()


def test_a_tampered_manifest_is_refused(open_registry, home, monkeypatch):
    real = registry.Registry.manifest

    def lying(self, repository, reference):
        body, media_type, digest = real(self, repository, reference)
        return body.replace(b'"schemaVersion":2', b'"schemaVersion": 2'), media_type, digest

    monkeypatch.setattr(registry.Registry, "manifest", lying)
    with pytest.raises(ImageError, match="does not match its digest"):
        store.pull_image(f"{open_registry.host}/team/bb:1", insecure=True)


def test_the_registrys_errors_are_named(open_registry, home):
    out = cli("image", "pull", "-q", "--insecure", f"{open_registry.host}/team/bb:nope", code=125)
    assert "is not in the registry" in out and "MANIFEST_UNKNOWN" in out
    out = cli("image", "pull", "-q", f"{open_registry.host}/team/bb:1", code=125)
    assert "TLS" in out and "--insecure" in out  # a plain-http registry spoken to over TLS
    out = cli("image", "pull", "-q", "--insecure", "example.com/team/bb:1", code=2)
    assert "only for registries on this machine (loopback), not example.com" in out
    out = cli("image", "pull", "-q", "--insecure", "127.0.0.1:1/team/bb:1", code=125)
    assert "cannot reach 127.0.0.1:1" in out


def test_basic_auth_from_docker_config_and_flags(made, home, tmp_path_factory, monkeypatch):
    d = tmp_path_factory.mktemp("registry-basic")
    reg = start_registry(d, auth=htpasswd_auth(d, USER, PASSWORD), creds=(USER, PASSWORD))
    try:
        reg.push(f"oci:{made.layout}:a", "private/bb:1")
        ref = f"{reg.host}/private/bb:1"
        out = cli("image", "pull", "-q", "--insecure", ref, code=125)
        assert f"{reg.host} needs a login" in out and "docker login" in out
        out = cli("image", "pull", "-q", "--insecure", "-u", USER, "--password-stdin", ref, input="wrong\n", code=125)
        assert "refused the credentials" in out
        out = cli("image", "pull", "-q", "--insecure", "-u", USER, "--password-stdin", ref, input=PASSWORD + "\n")
        assert ref in out
        cli("image", "rm", ref)
        monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(d / "docker", reg.host, USER, PASSWORD)))
        assert ref in cli("image", "pull", "-q", "--insecure", ref)
        with Sandbox(image=ref) as sb:
            assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"
    finally:
        reg.stop()


def test_bearer_tokens_from_the_registrys_realm(made, home, tmp_path_factory, monkeypatch):
    d = tmp_path_factory.mktemp("registry-token")
    tokens = TokenServer(d / "tokens", USER, PASSWORD)
    reg = start_registry(d, auth=tokens.auth(), creds=(USER, PASSWORD))
    try:
        reg.push(f"oci:{made.layout}:a", "private/bb:1")
        ref = f"{reg.host}/private/bb:1"
        tokens.requests.clear()
        out = cli("image", "pull", "-q", "--insecure", ref, code=125)
        assert "needs a login" in out
        assert tokens.requests and not tokens.requests[0]["sent_auth"]  # it asked anonymously first
        monkeypatch.setenv("DOCKER_CONFIG", str(docker_config(d / "docker", reg.host, USER, PASSWORD)))
        tokens.requests.clear()
        assert ref in cli("image", "pull", "-q", "--insecure", ref)
        asked = tokens.requests[0]["query"]
        assert asked["service"] == ["sandboxlite-test-registry"]
        assert asked["scope"] == ["repository:private/bb:pull"]  # pull only: no more than it needs
        with Sandbox(image=ref) as sb:
            assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"
    finally:
        reg.stop()
        tokens.stop()


def test_the_progress_bar_draws_bytes_rate_and_blobs():
    clock = iter(range(100)).__next__
    out = io.StringIO()
    bar = ProgressBar(out, tty=True, clock=lambda: float(clock()))
    bar.blob("sha256:" + "a" * 64, 2 << 20, "layer 0", have=0)
    bar.blob("sha256:" + "b" * 64, 1 << 20, "layer 1", have=1 << 20)
    bar.advance("sha256:" + "a" * 64, 1 << 20)
    bar.done("sha256:" + "a" * 64)
    bar.close()
    text = out.getvalue()
    assert "2.0 MiB / 3.0 MiB" in text and "MiB/s" in text and "1/2 blobs" in text
    assert text.endswith("2 blob(s): 1.0 MiB fetched in 3.0 s (341.3 KiB/s), 1.0 MiB already here\n")
    log = io.StringIO()
    bar = ProgressBar(log, tty=False)
    bar.blob("sha256:" + "b" * 64, 10, "layer 1", have=10)
    bar.blob("sha256:" + "a" * 64, 10, "layer 0", have=4)
    bar.done("sha256:" + "a" * 64)
    lines = log.getvalue().splitlines()
    assert lines == ["bbbbbbbbbbbb  layer 1: already here (10 B)", "aaaaaaaaaaaa  layer 0: resuming at 4 B of 10 B",
                     "aaaaaaaaaaaa  done (10 B)"]  # fmt: skip


def test_credentials_are_found_where_docker_and_podman_keep_them(tmp_path):
    podman = tmp_path / "run" / "containers" / "auth.json"
    podman.parent.mkdir(parents=True)
    podman.write_text(json.dumps({"auths": {"ghcr.io": {"auth": "dTE6cDE="}}}))  # u1:p1
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(json.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": "aHViOmh1YnB3"},  # hub:hubpw
        "ghcr.io": {"auth": "ZG9ja2VyOnB3"}, "quay.io": {"username": "q", "password": "qp"}}}))  # fmt: skip
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run"), "DOCKER_CONFIG": str(docker), "HOME": str(tmp_path)}
    assert credentials.find_credentials("ghcr.io", env) == ("u1", "p1")  # podman's file first
    assert credentials.find_credentials("docker.io", env) == ("hub", "hubpw")
    assert credentials.find_credentials("quay.io", env) == ("q", "qp")
    assert credentials.find_credentials("example.com", env) is None
    (docker / "config.json").write_text("{not json")
    with pytest.raises(ImageError, match="config.json is not a JSON object"):
        credentials.find_credentials("example.com", env)
    (docker / "config.json").write_text(json.dumps({"credsStore": "nonesuch-helper"}))
    with pytest.raises(ImageError, match="docker-credential-nonesuch-helper.*not on PATH"):
        credentials.find_credentials("example.com", env)


def test_a_credential_helper_is_asked(tmp_path, monkeypatch):
    helper = tmp_path / "bin" / "docker-credential-fake"
    helper.parent.mkdir()
    helper.write_text('#!/bin/sh\nread r\n[ "$1" = get ] && [ "$r" = reg.example ] && '
                      'echo \'{"Username":"hu","Secret":"hs"}\' && exit 0\necho "credentials not found"; exit 1\n')
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:/usr/bin:/bin")
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {"reg.example": "fake"}, "credsStore": "fake"}))
    env = {"DOCKER_CONFIG": str(tmp_path)}
    assert credentials.find_credentials("reg.example", env) == ("hu", "hs")
    assert credentials.find_credentials("other.example", env) is None  # the store has none for it


def test_insecure_is_for_loopback_only_and_challenges_parse():
    for host in ("127.0.0.1:5000", "localhost:5000", "[::1]:5000", "127.1.2.3"):
        registry.Registry(host, insecure=True)
    for host in ("example.com", "10.0.0.1:5000", "192.168.1.1", "[fe80::1]:5000", "localhost.example.com"):
        with pytest.raises(ImageError, match="only for registries on this machine"):
            registry.Registry(host, insecure=True)
    scheme, params = registry.parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/a:pull"')
    assert scheme == "bearer" and params == {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                                             "scope": "repository:library/a:pull"}  # fmt: skip
    assert registry.parse_challenge('Basic realm="Registry Realm"') == ("basic", {"realm": "Registry Realm"})


def test_a_partial_download_held_by_one_pull_waits_the_other(tmp_path):
    blobs = BlobStore(tmp_path / "s")
    data = b"x" * 5000
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    entered = threading.Event()
    order = []

    def second():
        entered.wait()
        with blobs.partial(digest, len(data), max_bytes=1 << 20) as part:
            order.append(("second", blobs.has(digest), part.have))

    t = threading.Thread(target=second)
    t.start()
    with blobs.partial(digest, len(data), max_bytes=1 << 20) as part:
        entered.set()
        t.join(0.3)
        part.append(io.BytesIO(data), 0)
        part.finish()
        order.append(("first", True, len(data)))
    t.join()
    assert order[0][0] == "first" and order[1][:2] == ("second", True)
    assert blobs.verify(digest) and blobs.partials() == []


def _big_layer(reg) -> dict:
    """The 2 MiB layer of team/bb:2, as its manifest describes it."""
    r = registry.Registry(reg.host, insecure=True)
    body, _, _ = r.manifest("team/bb", "2")
    return max(json.loads(body)["layers"], key=lambda layer: layer["size"])


def many_layers_layout(d: Path, count: int) -> Path:
    """An OCI layout of busybox and ``count`` more layers written by hand: layer i adds /layers/i
    and removes /layers/(i-1) with a whiteout, and every tenth one makes /layers opaque."""


    layout = d / "many"
    blobs_dir = layout / "blobs" / "sha256"
    blobs_dir.mkdir(parents=True)

    def put(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (blobs_dir / digest[7:]).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    def layer(members: list[tuple[str, bytes | None]]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                if data is None:
                    info.type = tarfile.DIRTYPE
                    info.mode = 0o755
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(data), 0o755
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    busybox = Path("/bin/busybox").read_bytes()
    tars = [layer([("bin", None), ("bin/busybox", busybox), ("layers", None)])]
    for i in range(1, count + 1):
        members: list[tuple[str, bytes | None]] = [(f"layers/{i}", f"{i}\n".encode())]
        if i % 10 == 0:
            members.insert(0, ("layers/.wh..wh..opq", b""))
        elif i > 1:
            members.append((f"layers/.wh.{i - 1}", b""))
        tars.append(layer(members))
    descs = [dict(put(t), mediaType="application/vnd.oci.image.layer.v1.tar") for t in tars]
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["PATH=/bin"]},
                         "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descs]}}).encode()  # fmt: skip
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": dict(put(config), mediaType="application/vnd.oci.image.config.v1+json"),
                           "layers": descs}).encode()  # fmt: skip
    top = dict(put(manifest), mediaType="application/vnd.oci.image.manifest.v1+json",
               annotations={"org.opencontainers.image.ref.name": "many"})  # fmt: skip
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return layout


def test_an_image_of_120_layers_imports_and_pulls(open_registry, home, tmp_path):
    layout = many_layers_layout(tmp_path, 119)
    run("skopeo", "--insecure-policy", "copy", f"oci:{layout}:many", f"docker-archive:{tmp_path / 'many.tar'}:local/many:1")
    open_registry.push(f"oci:{layout}:many", "team/many:1")
    imported = store.import_archive(tmp_path / "many.tar")[0]
    assert len(imported.manifest["oci"]["layers"]) == 120
    pulled = store.pull_image(f"{open_registry.host}/team/many:1", insecure=True)
    assert pulled.name == imported.name  # the same config: the same image
    with Sandbox(image=f"{open_registry.host}/team/many:1") as sb:
        r = sb.exec(["/bin/busybox", "sh", "-c", "busybox ls /layers; busybox cat /layers/*"])
        assert (r.exit_code, r.stdout) == (0, b"119\n119\n"), r  # each whiteout and opaque dir applied


def test_a_rows_docker_image_is_pulled_when_asked(open_registry, home, monkeypatch):
    """SANDBOXLITE_PULL=missing: the paper's runtime and the rllm adapter pull a row's image the store
    lacks (a loopback registry over plain http, as docker treats 127.0.0.0/8); by default they do not."""
    from sandboxlite.compat import llm_in_sandbox as compat
    from sandboxlite.rl.adapters.rllm import task_from_row

    ref = f"{open_registry.host}/team/bb:1"
    assert compat.root_for(ref) == "auto" and where.find(ref) is None  # never, by default
    monkeypatch.setenv("SANDBOXLITE_PULL", "sometimes")
    with pytest.raises(Exception, match="SANDBOXLITE_PULL.*must be one of never, missing"):
        compat.root_for(ref)
    monkeypatch.setenv("SANDBOXLITE_PULL", "missing")
    assert compat.root_for(ref) == ref and where.find(ref) is not None
    row = {"problem_statement": "q", "ground_truth": "1", "docker_image": f"{open_registry.host}/team/bb:2"}
    task = task_from_row(row)
    assert task.rootfs == f"{open_registry.host}/team/bb:2"
    with Sandbox(image=task.rootfs) as sb:
        assert sb.exec("cat /added").stdout == b"from B\n"
    monkeypatch.setenv("SANDBOXLITE_PULL", "missing")
    with pytest.raises(ImageError, match="is not in the registry"):
        compat.root_for(f"{open_registry.host}/team/bb:nope")  # asked for, and failed: said, not skipped
