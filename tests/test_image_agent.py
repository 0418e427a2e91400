"""The agent's tools in images that are not ours: a busybox image (no bash, no python, a find
without -printf), a root whose only shell is dash, and a distroless image (no shell at all: argv
commands run, the shell says what is missing).  ``doctor --image`` says what an image lacks.
Real bwrap; the images made with umoci and imported."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from sandboxlite import Sandbox
from sandboxlite.agent.tools import Tools
from sandboxlite.cli import main
from sandboxlite.errors import SetupError
from sandboxlite.images import store
from sandboxlite.jail.shell import Dialect

from .test_image_oci import SKOPEO, need_tools, run, umoci_layer

APPLETS = ("sh", "ls", "cat", "echo", "rm", "touch", "find", "stat", "sleep", "mkdir", "grep", "pwd", "env", "chmod",
           "id", "wc")


def layout_of(d: Path, name: str, tree: Path) -> Path:
    layout = d / f"layout-{name}"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:1")
    umoci_layer(layout, "1", tree)
    run("umoci", "config", "--image", f"{layout}:1", "--architecture", "amd64", "--os", "linux",
        "--config.env", "PATH=/bin")  # fmt: skip
    run(*SKOPEO, "copy", f"oci:{layout}:1", f"docker-archive:{d / name}.tar:local/{name}:1")
    return d / f"{name}.tar"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    need_tools()
    d = tmp_path_factory.mktemp("agent-images")
    bb = d / "busybox"
    (bb / "bin").mkdir(parents=True)
    shutil.copy2("/bin/busybox", bb / "bin" / "busybox")
    for applet in APPLETS:
        (bb / "bin" / applet).symlink_to("busybox")
    (bb / "etc").mkdir()
    (bb / "etc" / "motd").write_text("hello\n")
    distroless = d / "distroless"
    (distroless / "etc").mkdir(parents=True)
    shutil.copy2("/bin/busybox", distroless / "busybox")  # a static program and nothing else
    (distroless / "etc" / "motd").write_text("no shell here\n")
    return SimpleNamespace(busybox=layout_of(d, "busybox", bb), distroless=layout_of(d, "distroless", distroless))


@pytest.fixture
def home(host_dir_factory, monkeypatch):
    h = host_dir_factory("sandboxlite-agent-image-home-")
    monkeypatch.setenv("SANDBOXLITE_HOME", str(h))
    return h


def bash(tools, command, **kw):
    return tools.call("execute_bash", {"command": command, **kw})


def edit(tools, **args) -> str:
    return tools.call("str_replace_editor", args).output


def test_execute_bash_in_busybox_sh(made, home):
    store.import_archive(made.busybox)
    with Sandbox(image="local/busybox:1") as sb, Tools(sb, bash_timeout=1.0) as t:
        bash(t, "cd /etc; X=41; f() { echo fn $1; }")
        assert t._get_shell().dialect.program == "/bin/sh" and t._get_shell().dialect.end  # no bash: the POSIX loop
        assert bash(t, "echo $((X+1)) $(pwd); f a").output == "42 /etc\nfn a\n[exit code: 0]"
        r = bash(t, "if")  # a syntax error ends the command, not the session
        assert r.data["exit_code"] == 2 and "syntax error" in r.output
        assert bash(t, "echo still $X").output == "still 41\n[exit code: 0]"
        multi = bash(t, "cat <<'EOF'\nline one\n  $X stays literal\nEOF\nprintf 'tail'")
        assert multi.output == "line one\n  $X stays literal\ntail\n[exit code: 0]"
        r = bash(t, "echo partial; sleep 30")
        assert r.data["timed_out"] and r.data["exit_code"] == 124 and r.output.startswith("partial\n")
        assert bash(t, "echo alive $X; pwd").output == "alive 41\n/etc\n[exit code: 0]"
        r = bash(t, "exit 7")
        assert r.data["exit_code"] == 7 and "a new session was started in /etc" in r.output
        assert bash(t, "pwd").output == "/etc\n[exit code: 0]"


def test_a_command_with_the_end_line_of_another_session_is_just_text(made, home):
    """The POSIX loop's end-of-command line is the session's own secret: another one's is data."""
    store.import_archive(made.busybox)
    with Sandbox(image="local/busybox:1") as sb:
        other = Dialect.posix().end.decode()
        sh = sb.shell()
        r = sh.run(f"cat <<'EOF'\n{other}\nEOF")
        assert (r.exit_code, r.stdout) == (0, f"{other}\n".encode())
        assert sh.dialect.end.decode() != other
        sh.close()


def test_the_editor_in_busybox(made, home):
    store.import_archive(made.busybox)
    with Sandbox(image="local/busybox:1") as sb, Tools(sb) as t:
        assert "File created successfully" in edit(t, command="create", path="/work/a/notes.txt", file_text="one\ntwo\n")
        sb.exec(["mkdir", "-p", "/work/a/sub"]).check()
        edit(t, command="create", path="/work/a/run.sh", file_text="#!/bin/sh\necho ran\n")
        sb.exec(["chmod", "755", "/work/a/run.sh"]).check()
        assert "has been edited" in edit(t, command="str_replace", path="/work/a/notes.txt", old_str="two", new_str="2")
        assert "     2\t2" in edit(t, command="view", path="/work/a/notes.txt")
        listing = edit(t, command="view", path="/work/a")  # busybox find: no -printf, listed in two passes
        assert "/work/a/notes.txt\n" in listing and "/work/a/sub/\n" in listing and "/work/a/run.sh\n" in listing
        edit(t, command="str_replace", path="/work/a/run.sh", old_str="ran", new_str="ran again")
        assert sb.exec("/work/a/run.sh").stdout == b"ran again\n"  # the mode kept (busybox stat)


def test_dash_as_the_only_shell():
    with Sandbox(rootfs="lean") as sb:
        sb.exec(["rm", "-f", "/bin/bash", "/usr/bin/bash"]).check()
        sh = sb.shell()
        assert sh.dialect.program in ("/bin/sh", "/usr/bin/sh") and sh.dialect.end
        assert sh.run("readlink -f /bin/sh").stdout.strip().endswith(b"dash")
        sh.run("cd /tmp; v=dash").check()
        assert sh.run("echo $v $PWD").stdout == b"dash /tmp\n"
        r = sh.run("if")
        assert r.exit_code == 2 and sh.run("echo $v").stdout == b"dash\n"
        sh.close()


def test_distroless_runs_argv_and_the_shell_names_what_is_missing(made, home):
    store.import_archive(made.distroless)
    with Sandbox(image="local/distroless:1") as sb:
        r = sb.exec(["/busybox", "cat", "/etc/motd"])
        assert (r.exit_code, r.stdout) == (0, b"no shell here\n")
        with pytest.raises(SetupError, match=r"needs /bin/bash or /bin/sh.*neither") as e:
            sb.shell()
        assert "exec(['/path/to/program'" in e.value.hint
    out = CliRunner().invoke(main, ["doctor", "--image", "local/distroless:1"]).output
    assert "[FAIL] shell: the sandbox has no shell" in out and "[warn] python: no python3" in out


def test_doctor_image_says_what_busybox_lacks(made, home):
    store.import_archive(made.busybox)
    r = CliRunner().invoke(main, ["doctor", "--image", "local/busybox:1"])
    assert r.exit_code == 0, r.output
    assert "[warn] shell: no bash: execute_bash runs in the image's POSIX sh (/bin/sh)" in r.output
    assert "[ok  ] editor: str_replace_editor: files through the executor, directories with a find without -printf" in r.output
    assert "[warn] python: no python3" in r.output
    r = CliRunner().invoke(main, ["doctor", "--image", "local/nonesuch:1"])
    assert r.exit_code == 1 and "[FAIL] image: local/nonesuch:1" in r.output


def test_doctor_image_on_a_built_image():
    r = CliRunner().invoke(main, ["doctor", "--image", "lean"])
    assert r.exit_code == 0, r.output
    assert "[ok  ] shell: bash at /bin/bash" in r.output and "[ok  ] python: python3 at /usr/bin/python3" in r.output
    assert "directories with GNU find" in r.output


def test_posix_framing():
    d = Dialect.posix()
    end = d.end
    assert d.frame(b"echo a") == b"echo a\n" + end + b"\n"
    assert d.frame(b"echo a\n") == b"echo a\n" + end + b"\n"
    assert d.frame(b"") == end + b"\n"
    assert Dialect.bash().frame(b"echo a") == b"echo a\0" and os.path.basename(Dialect.bash().program) == "bash"


def test_expose_image_takes_the_ports_the_image_declares(made, home, tmp_path):
    layout = tmp_path / "ports"
    shutil.copytree(Path(str(made.busybox).replace("busybox.tar", "layout-busybox")), layout)
    run("umoci", "config", "--image", f"{layout}:1", "--config.exposedports", "8080/tcp",
        "--config.exposedports", "9090", "--config.exposedports", "53/udp", "--tag", "ports")  # fmt: skip
    run(*SKOPEO, "copy", f"oci:{layout}:ports", f"docker-archive:{tmp_path / 'ports.tar'}:local/ports:1")
    store.import_archive(tmp_path / "ports.tar")
    with Sandbox(image="local/ports:1", expose="image") as sb:
        assert sb.config.expose == (8080, 9090)  # tcp only: a udp port cannot be relayed
        assert sorted(sb.exposed) == [8080, 9090]
        sb.exec(["sh", "-c", "echo hello from 8080 | busybox nc -l -p 8080 >/dev/null 2>&1 &"]).check()
        for _ in range(100):  # (until the server listens)
            try:
                with sb.connect(8080) as conn:
                    got = conn.recv(100)
                if got:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        assert got == b"hello from 8080\n"
    with Sandbox(image="local/ports:1") as sb:
        assert sb.config.expose == ()  # not unless asked (docker run publishes none without -P either)
    with pytest.raises(Exception, match="expose='image' takes the ports a container image declares"):
        Sandbox(rootfs="lean", expose="image")


@pytest.fixture(scope="module")
def user_images(made, tmp_path_factory):
    """The busybox image with a passwd and group file, as three images: User app (a name), User
    1234:staff (a number and a group name), User nosuch (a name it lacks)."""
    d = tmp_path_factory.mktemp("user-images")
    layout = d / "layout"
    shutil.copytree(Path(str(made.busybox).replace("busybox.tar", "layout-busybox")), layout)
    etc = d / "etc-tree"
    (etc / "etc").mkdir(parents=True)
    (etc / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\napp:x:1234:2345::/home/app:/bin/sh\n")
    (etc / "etc" / "group").write_text("root:x:0:\nstaff:x:50:\n")
    umoci_layer(layout, "1", etc)
    out = {}
    for tag, user in (("name", "app"), ("numbers", "1234:staff"), ("missing", "nosuch")):
        run("umoci", "config", "--image", f"{layout}:1", "--config.user", user, "--tag", tag)
        run(*SKOPEO, "copy", f"oci:{layout}:{tag}", f"docker-archive:{d / tag}.tar:local/user:{tag}")
        out[tag] = d / f"{tag}.tar"
    return SimpleNamespace(**out)


def test_the_images_user_is_who_commands_run_as(user_images, home):
    for tar in (user_images.name, user_images.numbers, user_images.missing):
        store.import_archive(tar)
    with Sandbox(image="local/user:name") as sb:
        r = sb.exec("id; echo x > /testbed/f; touch /etc/new; stat -c '%u:%g' /testbed/f /etc/new /etc/motd")
        assert r.stdout == b"uid=1234(app) gid=2345\n1234:2345\n1234:2345\n1234:2345\n", r
        sh = sb.shell()
        assert sh.run("id -u").stdout == b"1234\n"
        sb.reset()
        assert sb.exec("id -u; ls /testbed").stdout == b"1234\n"
        child = sb.fork(1)[0]
        assert child.exec("id -u").stdout == b"1234\n"
        child.close()
    with Sandbox(image="local/user:numbers") as sb:
        assert sb.exec("id").stdout == b"uid=1234(app) gid=50(staff)\n"
    with pytest.raises(Exception, match="the image's User 'nosuch' names the user 'nosuch', which its /etc/passwd"):
        Sandbox(image="local/user:missing")


def test_as_the_images_user_the_executor_stays_out_of_reach(user_images, home):
    """The executor (pid 1) and the setup's helper stay non-dumpable: the commands, of the same
    uid, cannot read the executor's memory, environment or descriptors, nor trace it."""
    store.import_archive(user_images.name)
    with Sandbox(image="local/user:name") as sb:
        for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd/0", "/proc/1/root/etc/motd"):
            r = sb.exec(["cat", path])
            assert r.exit_code != 0 and b"ermission denied" in r.stderr, (path, r)
        r = sb.exec(["ls", "/proc/1/fd"])
        assert r.exit_code != 0, r
        assert sb.exec("ls -d /proc/[0-9]* | wc -l").stdout.strip() != b""
