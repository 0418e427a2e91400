"""Built images: profiles, the mmdebstrap plan, manifests, verify, export/import, and the real lean image."""

import dataclasses
import json
import os
import stat
import subprocess

import pytest

from sandboxlite import RootfsError, Sandbox
from sandboxlite.images import build, manage, recipes

from .test_rootfs import tiny_root  # noqa: F401  (fixture)


# -- profiles and the build plan (pure) ---------------------------------------------------------
def test_profiles_extend_each_other():
    assert build.profile_names() == ["full", "lean", "science", "trixie"]
    lean, science, full = (build.load_profile(n) for n in ("lean", "science", "full"))
    trixie = build.load_profile("trixie")  # (Debian 13: the Harbor runner's base)
    assert trixie.suite == "trixie" and {"python3", "python3-venv", "git"} <= set(trixie.packages)
    assert {"python3", "python3-numpy", "python3-sympy"} <= set(lean.packages)
    assert set(lean.packages) < set(science.packages) < set(full.packages)
    assert {"python3-scipy", "python3-matplotlib", "python3-mpmath", "ipython3", "python3-chardet",
            "python3-pandas", "git", "curl", "wget", "ca-certificates"} <= set(science.packages)
    assert "build-essential" in full.packages and "build-essential" not in science.packages
    assert "matplotlib-cache" in science.hooks and "matplotlib-cache" not in lean.hooks


def test_unknown_profile_names_the_choices():
    with pytest.raises(RootfsError) as e:
        build.load_profile("huge")
    assert "lean" in str(e.value) and "science" in str(e.value)


@pytest.mark.parametrize("mode", ["root", "unshare"])
def test_mmdebstrap_plan(mode):
    p = build.load_profile("science")
    argv = build.mmdebstrap_argv(p, "/img/root.tar", mode=mode, mirror="http://m/debian")
    assert argv[0] == "mmdebstrap" and f"--mode={mode}" in argv and "--format=tar" in argv
    assert argv[-3:] == ["bookworm", "/img/root.tar", "http://m/debian"]
    include = next(a for a in argv if a.startswith("--include="))[len("--include="):].split(",")
    assert include == list(p.packages)
    hooks = [a for a in argv if a.startswith("--customize-hook=")]
    assert any("-perm /6000" in h and "chmod ug-s" in h for h in hooks)  # no setuid binaries
    assert any("testbed/input" in h and "testbed/output" in h for h in hooks)
    assert any("matplotlib" in h for h in hooks)


# -- manifest, verify, export/import, rm (on a small adopted tree) ------------------------------
@pytest.fixture
def home(host_dir_factory, monkeypatch):
    h = host_dir_factory("sandboxlite-home-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(h))
    return h


def test_adopt_verify_modify_export_import_rm(home, tiny_root, tmp_path):  # noqa: F811
    info = manage.adopt(tiny_root, "tiny")
    m = info.manifest
    assert m["name"] == "tiny" and m["digest"].startswith("sha256:") and m["file_count"] > 5
    assert [i.name for i in manage.list_images()] == ["tiny"]
    assert manage.verify("tiny").ok

    # a sandbox over the image never writes into it
    with Sandbox(rootfs="tiny") as sb:
        sb.exec("echo x > /etc/marker; echo y > /usr/bin/new; rm -f /usr/bin/cat; true")
    assert manage.verify("tiny").ok

    # verify names what changed
    root = info.path / "root"
    (root / "etc/marker").write_text("tampered\n")
    (root / "etc/extra").write_text("new\n")
    os.unlink(root / "usr/bin/ls")
    v = manage.verify("tiny")
    assert not v.ok
    assert v.changed == ["etc/marker"] and v.added == ["etc/extra"] and v.removed == ["usr/bin/ls"]
    (root / "etc/marker").write_text("tiny image\n")
    os.unlink(root / "etc/extra")
    manage.remove("tiny")
    info = manage.adopt(tiny_root, "tiny")

    # export then import yields the same digest
    archive = manage.export("tiny", tmp_path / "tiny.tar.zst")
    assert archive.stat().st_size > 0
    back = manage.import_(archive, "tiny2")
    assert back.manifest["digest"] == info.manifest["digest"]
    assert manage.verify("tiny2").ok
    with pytest.raises(RootfsError, match="already exists"):
        manage.import_(archive, "tiny2")

    # a damaged archive is refused and leaves nothing behind
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    subprocess.run(["tar", "--zstd", "-xf", str(archive), "-C", str(bad_dir)], check=True)
    (bad_dir / "root/etc/marker").write_text("evil\n")
    bad = tmp_path / "bad.tar.zst"
    subprocess.run(["tar", "--zstd", "-C", str(bad_dir), "-cf", str(bad), "manifest.json", "files.tsv", "root"],
                   check=True)
    with pytest.raises(RootfsError, match="does not match its manifest"):
        manage.import_(bad, "tiny3")
    assert sorted(p.name for p in (home / "rootfs").iterdir()) == ["tiny", "tiny2"]

    manage.remove("tiny2")
    assert [i.name for i in manage.list_images()] == ["tiny"]
    with pytest.raises(RootfsError, match="rootfs build"):
        manage.verify("tiny2")


def test_cli_rootfs_commands(home, tiny_root, tmp_path):  # noqa: F811
    from click.testing import CliRunner

    from sandboxlite.cli import main

    manage.adopt(tiny_root, "tiny")
    run = CliRunner().invoke
    r = run(main, ["rootfs", "list"])
    assert r.exit_code == 0 and "tiny" in r.stdout
    assert run(main, ["rootfs", "verify", "tiny"]).exit_code == 0
    (manage.image_dir("tiny") / "root/etc/marker").write_text("changed\n")
    r = run(main, ["rootfs", "verify", "tiny"])
    assert r.exit_code == 1 and "changed: /etc/marker" in r.stdout and "rootfs build" in r.stderr
    r = run(main, ["rootfs", "rm", "tiny"])
    assert r.exit_code == 0 and manage.list_images() == []
    r = run(main, ["rootfs", "verify", "tiny"])
    assert r.exit_code == 125 and "Hint:" in r.stderr


# -- the real lean image (built by tools/setup.sh, as CI does) ------------------------------------
@pytest.fixture(scope="module")
def lean():
    try:
        d = manage.image_dir("lean")
    except RootfsError as e:
        pytest.fail(f"the lean image is missing ({e.message}); tools/setup.sh builds it: "
                    ".venv/bin/sandboxlite rootfs build lean")
    return d


def test_lean_runs_python_with_numpy(lean):
    with Sandbox(rootfs="lean") as sb:
        r = sb.exec(["python3", "-c", "import numpy, sympy; print(numpy.arange(4).sum(), sympy.sqrt(8))"])
        assert r.stdout == b"6 2*sqrt(2)\n", r
        assert sb.info["rootfs"] == "lean" and sb.info["rootfs_kind"] == "dir"
        assert sb.exec("test -d /testbed && test -w /testbed && test -w /tmp").exit_code == 0


def test_lean_has_a_manifest_with_packages_and_no_setuid(lean):
    m = json.loads((lean / "manifest.json").read_text())
    assert m["profile"] == "lean" and "python3" in m["packages"] and m["build_seconds"] > 0
    for dirpath, _dirs, files in os.walk(lean / "root"):
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            if stat.S_ISREG(st.st_mode):
                assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), os.path.join(dirpath, f)


# -- copy-on-write root ---------------------------------------------------------------------------
def test_copy_on_write_root(home, tiny_root):  # noqa: F811
    manage.adopt(tiny_root, "tiny")
    with Sandbox(rootfs="tiny") as a, Sandbox(rootfs="tiny") as b:
        assert a.info["copy_on_write_root"] is True, a.info["copy_on_write_note"]
        # writes anywhere work, as in a container ...
        a.write_file("/usr/local/lib/x/f", b"new\n")  # parents created in the copy-on-write layer
        r = a.exec("echo changed > /etc/marker && echo more >> /usr/local/lib/x/f && cat /etc/marker /usr/local/lib/x/f")
        assert r.stdout == b"changed\nnew\nmore\n", r
        a.write_file("/usr/share/via-api", b"api")
        assert a.read_file("/usr/share/via-api") == b"api"
        # ... but never reach the image or another sandbox on it
        assert b.exec("cat /etc/marker; cat /usr/local/lib/x/f 2>/dev/null || echo absent").stdout == \
            b"tiny image\nabsent\n"
        assert (manage.image_dir("tiny") / "root/etc/marker").read_text() == "tiny image\n"
        # and vanish on reset
        a.reset()
        assert a.exec("cat /etc/marker").stdout == b"tiny image\n"
        assert a.exec("test -e /usr/local/lib/x || echo gone").stdout == b"gone\n"
        with pytest.raises(FileNotFoundError):
            a.read_file("/usr/share/via-api")
    assert manage.verify("tiny").ok


def test_copy_on_write_layer_is_size_capped(home, tiny_root):  # noqa: F811
    manage.adopt(tiny_root, "tiny")
    with Sandbox(rootfs="tiny", limits={"overlay_mb": 2}) as sb:
        r = sb.exec("i=0; while [ $i -lt 200 ]; do cat /usr/bin/dash >> /etc/big 2>/dev/null || "
                    "{ echo full; break; }; i=$((i+1)); done")
        assert r.stdout == b"full\n"
        assert sb.exec("echo still > /tmp/works && cat /tmp/works").stdout == b"still\n"


def test_an_image_not_owned_by_the_sandbox_uid_falls_back_to_read_only(home, tiny_root):  # noqa: F811
    info = manage.adopt(tiny_root, "tiny")
    if os.geteuid() != 0:
        pytest.skip("a normal user cannot give files away")
    os.lchown(info.path / "root", 0, 0)
    with Sandbox(rootfs="tiny") as sb:
        assert sb.info["copy_on_write_root"] is False
        assert "owned by uid 0" in sb.info["copy_on_write_note"]
        assert sb.exec("echo x > /etc/marker 2>/dev/null || echo ro").stdout == b"ro\n"
        assert sb.exec("echo x > /tmp/ok && cat /tmp/ok").stdout == b"x\n"


def test_lean_copy_on_write_and_reset(lean):
    with Sandbox(rootfs="lean") as sb:
        assert sb.info["copy_on_write_root"] is True, sb.info["copy_on_write_note"]
        sb.exec("mkdir -p /usr/local/lib/python3.11/dist-packages && "
                "echo 'X = 42' > /usr/local/lib/python3.11/dist-packages/installed.py")
        assert sb.exec(["python3", "-c", "import installed; print(installed.X)"]).stdout == b"42\n"
        sb.reset()
        assert sb.exec(["python3", "-c", "import installed"]).exit_code == 1


def test_new_directories_rename_in_the_copy_on_write_root(lean):
    """dpkg (and pip, git) make a directory and rename it into place: overlay's userxattr mode lets
    them (without it every directory rename in the root was EXDEV).  A directory of the image itself
    still cannot be renamed (that needs redirect_dir, which a user namespace may not turn on):
    EXDEV, which mv handles by copying."""
    with Sandbox(rootfs="lean") as sb:
        r = sb.exec(["python3", "-c", "import os, errno\n"
                     "os.mkdir('/opt/new.tmp'); open('/opt/new.tmp/f', 'w').close()\n"
                     "os.rename('/opt/new.tmp', '/opt/new')\n"
                     "try: os.rename('/usr/share/doc', '/usr/share/doc.moved')\n"
                     "except OSError as e: print(errno.errorcode[e.errno])\n"
                     "print(sorted(os.listdir('/opt/new')))"])
        assert r.exit_code == 0 and r.stdout == b"EXDEV\n['f']\n", r
        assert sb.exec("mv /usr/share/doc /usr/share/doc.moved && test -d /usr/share/doc.moved").exit_code == 0
        sb.reset()
        assert sb.exec("test -d /usr/share/doc && test ! -e /opt/new").exit_code == 0


NONROOT_IMPORT = r'''
import json, sys
from sandboxlite import Sandbox
from sandboxlite.images import manage
info = manage.import_(sys.argv[1], "tiny")
out = {"digest": info.manifest["digest"], "owner": (info.path / "root" / "etc" / "marker").stat().st_uid}
with Sandbox(rootfs="tiny") as sb:
    out["cow"] = sb.info["copy_on_write_root"]
    out["note"] = sb.info["copy_on_write_note"]
    out["write"] = sb.exec("echo mine > /etc/marker && cat /etc/marker").stdout_text
    sb.reset()
    out["after_reset"] = sb.exec("cat /etc/marker").stdout_text
out["verify"] = manage.verify("tiny").ok
print("RESULT " + json.dumps(out))
'''


def test_a_normal_user_imports_an_image_and_gets_a_copy_on_write_root(home, tiny_root, tmp_path):  # noqa: F811
    """The non-root path: import (files owned by the user) and a copy-on-write root over it."""
    from .helpers_nonroot import NOBODY_UID, make_nobody_home, parse_result, run_as_nobody, unprivileged_prereqs

    why = unprivileged_prereqs()
    if why:
        pytest.fail(why)
    original = manage.adopt(tiny_root, "tiny")
    nobody_home = make_nobody_home()
    try:
        archive = manage.export("tiny", nobody_home / "tiny.tar.zst")
        os.chown(archive, NOBODY_UID, NOBODY_UID)
        script = nobody_home / "import.py"
        script.write_text(NONROOT_IMPORT)
        proc = run_as_nobody(script, [str(archive)], nobody_home)
        out = parse_result(proc)
    finally:
        import shutil

        shutil.rmtree(nobody_home, ignore_errors=True)
    assert out["digest"] == original.manifest["digest"]
    assert out["owner"] == NOBODY_UID
    assert out["cow"] is True, out["note"]
    assert out["write"] == "mine\n" and out["after_reset"] == "tiny image\n"
    assert out["verify"] is True


# -- the default image (science), built by tools/setup.sh --------------------------------------
@pytest.fixture(scope="module")
def science():
    try:
        return manage.image_dir("science")
    except RootfsError as e:
        pytest.fail(f"the science image is missing ({e.message}); tools/setup.sh builds it: "
                    ".venv/bin/sandboxlite rootfs build science")


def test_science_is_the_default_and_has_the_papers_stack(science):
    with Sandbox() as sb:
        assert sb.info["rootfs"] == "science" and sb.info["copy_on_write_root"] is True
        r = sb.exec(["python3", "-c", "import numpy, scipy, sympy, mpmath, matplotlib, pandas, chardet, IPython; "
                     "print('ok')"])
        assert r.stdout == b"ok\n", r.stderr_text
        r = sb.exec("git --version && curl --version >/dev/null && wget --version >/dev/null && pip --version")
        assert r.exit_code == 0, r.stderr_text
        # the font cache was built into the image: importing pyplot does not rebuild it
        r = sb.exec(["python3", "-c", "import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.savefig('p.png')"])
        assert r.exit_code == 0 and b"building the font cache" not in r.stderr, r.stderr_text
        assert sb.read_file("/testbed/p.png").startswith(b"\x89PNG")
        assert sb.exec("echo $MPLBACKEND").stdout == b"Agg\n"


def test_images_record_their_recipe_and_an_older_one_is_stale(tmp_path, monkeypatch):
    """``rootfs verify --current`` (what setup runs) fails for an image built from another recipe,
    so a changed profile or hook (the installers hook: pip without PEP 668's refusal) is rebuilt."""
    from sandboxlite.images import manage
    from sandboxlite.images.manifest import write_manifest

    p = build.load_profile("lean")
    digest = build.recipe_digest(p)
    assert digest.startswith("sha256:") and digest == build.recipe_digest(build.load_profile("lean"))
    assert digest != build.recipe_digest(build.load_profile("science"))
    assert digest != build.recipe_digest(dataclasses.replace(p, hooks=p.hooks + ("matplotlib-cache",)))
    assert "installers" in build.ALWAYS_HOOKS and "EXTERNALLY-MANAGED" in recipes.hooks()["installers"]
    monkeypatch.setenv("SANDBOXLITE_HOME", str(tmp_path))
    img = tmp_path / "rootfs" / "lean"
    (img / "root").mkdir(parents=True)
    write_manifest(img, name="lean", profile=p, recipe=digest)
    assert manage.stale_recipe("lean") == ""
    write_manifest(img, name="lean", profile=p)  # built before recipes were recorded
    assert "an older recipe of profile 'lean'" in manage.stale_recipe("lean")
    write_manifest(img, name="lean", profile=p, recipe="sha256:0")
    assert "another recipe" in manage.stale_recipe("lean")
