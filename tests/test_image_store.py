"""Container images in the store: imported with the CLI from archives made by real tools (umoci,
skopeo), started as sandboxes by their names, shared blobs, names moving, rm and prune, and a
damaged archive refused with nothing kept.  Real bwrap."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from sandboxlite import Sandbox, SandboxPool
from sandboxlite.cli import main
from sandboxlite.errors import ImageError
from sandboxlite.images import store, where

from .test_image_oci import SKOPEO, need_tools, run, umoci_layer


def busybox_tree(root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    shutil.copy2("/bin/busybox", root / "bin" / "busybox")
    for applet in ("sh", "ls", "cat", "echo", "rm", "touch"):
        (root / "bin" / applet).symlink_to("busybox")
    (root / "etc").mkdir()
    (root / "etc" / "motd").write_text("hello from the image\n")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Image A (busybox) and image B (A's layer, then one that removes /etc/motd and adds a file),
    as a docker-save tar, an OCI tar and an arm64 image."""
    need_tools()
    d = tmp_path_factory.mktemp("store-images")
    busybox_tree(d / "base")
    layout = d / "layout"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:a")
    umoci_layer(layout, "a", d / "base")
    run("umoci", "config", "--image", f"{layout}:a", "--architecture", "amd64", "--os", "linux",
        "--config.env", "PATH=/bin", "--config.env", "GREETING=hello world", "--config.env", "HOME=/nothere",
        "--config.cmd", "cat", "--config.cmd", "/etc/motd")  # fmt: skip
    run("umoci", "config", "--image", f"{layout}:a", "--config.label", "b=1", "--tag", "b")
    bundle = d / "bundle-b"  # B's layer: what umoci repack finds changed (a removal becomes a whiteout)
    run("umoci", "unpack", "--image", f"{layout}:b", str(bundle))
    (bundle / "rootfs" / "etc" / "motd").unlink()
    (bundle / "rootfs" / "added").write_text("from B\n")
    run("umoci", "repack", "--image", f"{layout}:b", str(bundle))
    run("umoci", "config", "--image", f"{layout}:a", "--architecture", "arm64", "--tag", "arm")
    run(*SKOPEO, "copy", f"oci:{layout}:a", f"docker-archive:{d / 'a.tar'}:team/bb:1.0")
    run(*SKOPEO, "copy", f"oci:{layout}:b", f"docker-archive:{d / 'b.tar'}:team/bb:2.0")
    run(*SKOPEO, "copy", f"oci:{layout}:b", f"oci-archive:{d / 'b-oci.tar'}:team/bb:2.0")
    run(*SKOPEO, "copy", f"oci:{layout}:arm", f"docker-archive:{d / 'arm.tar'}:team/bb:arm")
    return SimpleNamespace(a=d / "a.tar", b=d / "b.tar", b_oci=d / "b-oci.tar", arm=d / "arm.tar")


@pytest.fixture
def home(host_dir_factory, monkeypatch):
    h = host_dir_factory("sandboxlite-image-home-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(h))
    return h


def cli(*args: str, input: bytes | None = None) -> str:
    r = CliRunner().invoke(main, list(args), input=input)
    assert r.exit_code == 0, (r.exit_code, r.output)
    return r.output


def blobs() -> set[str]:
    return set(store.blob_store().digests())


def test_an_imported_image_runs_by_its_name_and_resets(made, home):
    out = cli("image", "import", str(made.a))
    assert "docker.io/team/bb:1.0" in out
    assert "docker.io/team/bb:1.0" in cli("image", "list")
    with Sandbox(rootfs="team/bb:1.0") as sb:
        r = sb.exec("echo $((6*7)); cat /etc/motd; ls /bin/busybox")
        assert (r.exit_code, r.stdout) == (0, b"42\nhello from the image\n/bin/busybox\n"), r
        sb.exec("touch /etc/mine /testbed/w").check()
        sb.reset()
        assert sb.exec("ls /etc/mine /testbed/w").exit_code != 0  # back to the image
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"
    r = CliRunner().invoke(main, ["exec", "--rootfs", "docker.io/team/bb:1.0", "--", "cat", "/etc/motd"])
    assert (r.exit_code, r.output) == (0, "hello from the image\n"), r.output
    with SandboxPool(size=1, rootfs="team/bb:1.0") as pool, pool.sandbox() as sb:
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"


def test_a_second_image_reuses_the_blobs_of_its_base(made, home):
    cli("image", "import", str(made.a))
    before = blobs()
    info = json.loads(cli("image", "inspect", "team/bb:1.0"))
    base_layer = info["layers"][0]["digest"]
    cli("image", "import", str(made.b))
    b = json.loads(cli("image", "inspect", "team/bb:2.0"))
    assert [layer["digest"] for layer in b["layers"]][0] == base_layer  # the same blob, kept once
    added = blobs() - before
    assert base_layer not in added and len(added) <= 3  # its own layer, config and manifest only
    with Sandbox(rootfs="team/bb:2.0") as sb:  # B's whiteout removed A's file; its own file is there
        r = sb.exec("cat /added; ls /etc/motd")
        assert r.stdout == b"from B\n" and r.exit_code != 0


def test_the_same_image_again_keeps_its_id_and_a_tag_moves_a_name(made, home):
    first = cli("image", "import", str(made.a)).split(":")[0]
    assert cli("image", "import", str(made.a)).split(":")[0] == first
    cli("image", "import", "--tag", "team/bb:1.0", str(made.b))  # the name moves to B
    b_id = where.find("team/bb:1.0")
    assert b_id != first and b_id is not None
    with Sandbox(rootfs=first) as sb:  # A stays, by its id
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"


def test_an_oci_archive_of_the_same_image_is_the_same_image(made, home):
    """Its layers are gzipped (other blobs than a docker save's plain tars), its config the same."""
    docker = cli("image", "import", str(made.b)).split(":")[0]
    assert cli("image", "import", str(made.b_oci)).split(":")[0] == docker
    with Sandbox(rootfs="team/bb:2.0") as sb:
        assert sb.exec("cat /added").stdout == b"from B\n"


def test_an_archive_on_stdin(made, home):
    out = cli("image", "import", "--tag", "local/piped:1", "-", input=made.a.read_bytes())
    assert "docker.io/local/piped:1" in out
    with Sandbox(rootfs="local/piped:1") as sb:
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"


def test_rm_removes_names_and_prune_the_blobs_nobody_uses(made, home):
    cli("image", "import", str(made.a))
    cli("image", "import", str(made.b))
    cli("image", "rm", "team/bb:2.0")
    assert where.find("team/bb:2.0") is None and where.find("team/bb:1.0") is not None
    out = cli("image", "prune")
    assert out.startswith("removed 3 blob(s) and 1 shared file(s)"), out  # B's layer, config, manifest; /added
    with Sandbox(rootfs="team/bb:1.0") as sb:
        assert sb.exec("cat /etc/motd").exit_code == 0
    r = CliRunner().invoke(main, ["image", "rm", "team/bb:2.0"])
    assert r.exit_code == 125 and "no image named" in r.output


def test_an_image_for_another_machine_is_refused(made, home):
    with pytest.raises(ImageError, match="none for linux/amd64"):
        store.import_archive(made.arm)
    assert store.oci_images() == []


def test_a_damaged_archive_keeps_no_image(made, home, tmp_path):
    data = bytearray(made.a.read_bytes())
    at = data.find(b"hello from the image")
    data[at] ^= 1  # inside the layer: its digest no longer matches
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(data))
    r = CliRunner().invoke(main, ["image", "import", str(bad)])
    assert r.exit_code == 125 and "sha256" in r.output, r.output
    assert store.oci_images() == [] and where.names() == {}
    leftovers = [p.name for p in (home / "rootfs").iterdir()] if (home / "rootfs").exists() else []
    assert not [n for n in leftovers if n.startswith(".oci-") or n.startswith("oci-")], leftovers
    assert not [p for p in (home / "oci").rglob(".put-*")], "a partial blob was kept"


def test_an_unknown_reference_says_how_to_get_an_image(home):
    with pytest.raises(Exception, match="no rootfs image named") as e:
        Sandbox(rootfs="nothere:1")
    assert "sandboxlite image import" in str(e.value)
    assert os.environ["SANDBOXLITE_HOME"] == str(home)


def test_image_is_rootfs_by_another_name_everywhere(made, home):
    from sandboxlite.agent.task import Task
    from sandboxlite.errors import ConfigError, TaskError

    cli("image", "import", str(made.a))
    with Sandbox(image="team/bb:1.0") as sb:
        assert sb.config.rootfs == "team/bb:1.0" and sb.exec("cat /etc/motd").exit_code == 0
    with SandboxPool(size=1, image="team/bb:1.0") as pool, pool.sandbox() as sb:
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"
    with pytest.raises(ConfigError, match="both name the root"):
        Sandbox(image="team/bb:1.0", rootfs="lean")
    r = CliRunner().invoke(main, ["exec", "--image", "team/bb:1.0", "--", "cat", "/etc/motd"])
    assert (r.exit_code, r.output) == (0, "hello from the image\n"), r.output
    r = CliRunner().invoke(main, ["exec", "--image", "team/none:1", "--", "true"])
    assert r.exit_code == 2 and "no image named 'team/none:1'" in r.output and "image import" in r.output
    r = CliRunner().invoke(main, ["exec", "--image", "team/bb:1.0", "--rootfs", "lean", "--", "true"])
    assert r.exit_code == 2 and "both name the root" in r.output
    task = Task.from_dict({"id": "t", "query": "q", "image": "team/bb:1.0"})
    assert task.rootfs == "team/bb:1.0"
    with pytest.raises(TaskError, match="both name the root"):
        Task.from_dict({"id": "t", "query": "q", "image": "team/bb:1.0", "rootfs": "lean"})


def test_prune_waits_for_an_import_in_progress(made, home):
    """An import stores blobs before any image uses them: a prune meanwhile must not take them."""
    import threading

    r, w = os.pipe()
    data = made.a.read_bytes()
    done: dict[str, object] = {}

    def do_import():
        with os.fdopen(r, "rb") as stream:
            done["import"] = store.import_archive(stream)

    def do_prune():
        done["prune"] = store.prune()

    importer = threading.Thread(target=do_import)
    importer.start()
    os.write(w, data[: len(data) * 3 // 4])  # most of it: its layer blob is in the store already
    pruner = threading.Thread(target=do_prune)
    pruner.start()
    pruner.join(0.5)
    assert pruner.is_alive() and "import" not in done  # waiting for the import
    os.write(w, data[len(data) * 3 // 4:])
    os.close(w)
    importer.join(30)
    pruner.join(30)
    assert done["prune"] == (0, 0, 0)
    with Sandbox(rootfs="team/bb:1.0") as sb:
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"


def test_the_image_env_is_the_commands_env_under_the_sandboxs_own(made, home):
    """Its Env goes over sandboxlite's defaults (PATH, ...), not over the sandbox's places (HOME) or
    the caller's env."""
    cli("image", "import", str(made.a))
    with Sandbox(image="team/bb:1.0") as sb:
        assert sb.exec('echo "$GREETING|$PATH|$HOME"').stdout == b"hello world|/bin|/root\n"
    with Sandbox(image="team/bb:1.0", env={"GREETING": "mine"}) as sb:
        assert sb.exec('echo "$GREETING"').stdout == b"mine\n"
    with Sandbox(rootfs="host") as sb:  # no container image: sandboxlite's own defaults
        assert b"GREETING" not in sb.exec("env").stdout



def test_an_image_in_use_is_not_removed(made, home):
    cli("image", "import", str(made.a))
    with Sandbox(image="team/bb:1.0") as sb:
        r = CliRunner().invoke(main, ["image", "rm", "team/bb:1.0"])
        assert r.exit_code == 125 and "in use by a running sandbox" in r.output, r.output
        sb.reset()
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\n"  # still whole
    with SandboxPool(size=2, image="team/bb:1.0") as pool:  # warm, idle sandboxes use it too
        assert pool.size == 2
        with pytest.raises(ImageError, match="in use"):
            store.remove("team/bb:1.0")
    assert store.remove("team/bb:1.0") == ["docker.io/team/bb:1.0"]  # every sandbox closed: it goes
    assert store.oci_images() == []


def test_exec_of_an_image_without_a_command_runs_its_entrypoint_and_cmd(made, home):
    cli("image", "import", str(made.a))
    r = CliRunner().invoke(main, ["exec", "--image", "team/bb:1.0"])
    assert (r.exit_code, r.output) == (0, "hello from the image\n"), r.output
    r = CliRunner().invoke(main, ["exec", "--rootfs", "host"])
    assert r.exit_code == 2 and "give the COMMAND" in r.output



def test_the_papers_runtime_runs_a_rows_docker_image_from_the_store(made, home, caplog):
    import logging

    from sandboxlite.compat import llm_in_sandbox as compat

    cli("image", "import", str(made.a))
    assert compat.root_for("team/bb:1.0") == "team/bb:1.0"
    assert compat.root_for("docker.io/team/bb:1.0") == "docker.io/team/bb:1.0"
    assert compat.root_for("cdxy1028/llm-in-sandbox:v0.1") == "auto"  # not imported: the default
    with caplog.at_level(logging.INFO, logger="DockerRuntime"):
        rt = compat.SandboxRuntime("team/bb:1.0")
        try:
            assert rt.sandbox.exec("cat /etc/motd").stdout == b"hello from the image\n"
        finally:
            rt.close()
    assert "the container image, from sandboxlite's store" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="DockerRuntime"):
        compat.SandboxRuntime("team/none:1").close()  # not in the store: the default root, said
    assert "team/none:1 is not in sandboxlite's store" in caplog.text and "'auto' instead" in caplog.text


def test_an_rllm_row_runs_in_its_docker_image_when_the_store_holds_it(made, home):
    from sandboxlite.rl.adapters.rllm import task_from_row

    cli("image", "import", str(made.a))
    row = {"id": "r1", "problem_statement": "q", "docker_image": "team/bb:1.0", "ground_truth": "5"}
    task = task_from_row(row)
    assert task.rootfs == "team/bb:1.0" and task.metadata["docker_image"] == "team/bb:1.0"
    assert task_from_row({**row, "rootfs": "host"}).rootfs == "host"  # the row's own root wins
    with pytest.warns(RuntimeWarning, match="cdxy/none:v1 is not in sandboxlite's store"):
        assert task_from_row({**row, "docker_image": "cdxy/none:v1"}).rootfs == "auto"


def test_bad_arguments_are_usage_errors_before_anything_is_read(made, home):
    for args, said in ((["--tag", "Bad Name"], "tag: invalid image reference"),
                       (["--platform", "linux"], "platform: invalid platform"),
                       ([], "does not exist")):  # fmt: skip
        target = str(made.a) if args else str(home / "nothere.tar")
        r = CliRunner().invoke(main, ["image", "import", *args, target])
        assert r.exit_code == 2 and said in r.output, r.output
    assert blobs() == set() and store.oci_images() == []


def test_images_sharing_a_base_share_its_unpacked_files(made, home):
    """The second image's files from the shared layer are links to the first's (one inode, stored
    once); a sandbox writing to one changes neither image; rm of the first keeps the second whole."""
    a = store.import_archive(made.a)[0]
    b = store.import_archive(made.b)[0]
    busybox_a, busybox_b = (info.path / "root" / "bin" / "busybox" for info in (a, b))
    assert busybox_a.stat().st_ino == busybox_b.stat().st_ino and busybox_a.stat().st_nlink == 3  # A, B, files/
    assert (b.path / "root" / "added").stat().st_nlink == 2  # B's own (and files/)
    with Sandbox(rootfs="team/bb:1.0") as sb:
        sb.exec("echo changed > /bin/busybox.txt; echo more >> /etc/motd").check()  # the copy-on-write layer only
        assert sb.exec("cat /etc/motd").stdout == b"hello from the image\nmore\n"
    with Sandbox(rootfs="team/bb:2.0") as sb:
        assert sb.exec("cat /added; busybox true && echo ok").stdout == b"from B\nok\n"
    assert (a.path / "root" / "etc" / "motd").read_text() == "hello from the image\n"
    cli("image", "rm", "team/bb:1.0")
    out = cli("image", "prune")
    assert "1 shared file(s)" in out  # A's /etc/motd (B removes it); busybox is still B's
    assert busybox_b.stat().st_nlink == 2
    with Sandbox(rootfs="team/bb:2.0") as sb:
        assert sb.exec("echo $((6*7))").stdout == b"42\n"
