"""sandboxlite image build: Dockerfiles built without a daemon, on real sandboxes (the lean image
as the base), the result run as an image of the store."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite import Sandbox
from sandboxlite.cli import main
from sandboxlite.errors import BuildError
from sandboxlite.build import builder
from sandboxlite.images import store

BASE = "lean"


def write(ctx: Path, dockerfile: str, files: dict[str, str] | None = None) -> Path:
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Dockerfile").write_text(textwrap.dedent(dockerfile).lstrip())
    for name, text in (files or {}).items():
        p = ctx / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return ctx / "Dockerfile"


def build(ctx: Path, tag: str, **kw):
    return builder.build(ctx / "Dockerfile", ctx, tag=tag, network="none", **kw)


def built_images() -> set[str]:
    return {i.name for i in store.oci_images()}


@pytest.fixture
def tag(request):
    """A tag for the test's image; every image the test built is removed after it."""
    name = f"sl-test/{request.node.name.lower().replace('[', '-').replace(']', '')[:60]}:1"
    before = built_images()
    yield name
    for image in built_images() - before - {"oci-scratch"}:
        store.remove(image)


def oci_config(result) -> dict:
    return json.loads((result.path / "manifest.json").read_text())["oci"]["config"]


def test_a_dockerfile_builds_an_image_that_runs(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        # a comment
        ARG GREETING=hello
        FROM {BASE}
        ARG GREETING
        ENV APP_HOME=/app \\
            MODE="two words"
        WORKDIR $APP_HOME
        COPY app.py ./
        COPY conf/ /etc/myapp/
        COPY *.txt /data/
        RUN echo "$GREETING from $(pwd)" > built.txt && mkdir -p /opt/tool && echo tool > /opt/tool/x
        RUN ["/bin/sh", "-c", "echo exec-form >> /app/built.txt"]
        RUN rm /etc/hostname && rm -rf /usr/share/doc
        LABEL org.example.name="my app" version=1
        EXPOSE 8080 9000/udp
        USER 1000:1000
        RUN id -u > /app/whoami
        CMD ["python3", "app.py"]
        """, {"app.py": "print('hi from app')\n", "conf/a.ini": "a=1\n", "conf/sub/b.ini": "b=2\n",
              "one.txt": "1\n", "two.txt": "2\n", "secret.key": "no\n"})  # fmt: skip
    result = build(ctx, tag, build_args={"GREETING": "hey"})
    assert result.tag == "docker.io/" + tag
    cfg = oci_config(result)
    assert cfg["working_dir"] == "/app" and cfg["user"] == "1000:1000" and cfg["cmd"] == ["python3", "app.py"]
    assert "APP_HOME=/app" in cfg["env"] and "MODE=two words" in cfg["env"]
    assert cfg["labels"] == {"org.example.name": "my app", "version": "1"}
    assert cfg["exposed_ports"] == ["8080/tcp", "9000/udp"]
    with Sandbox(image=tag) as sb:
        r = sb.exec("cat /app/built.txt; cat /etc/myapp/a.ini /etc/myapp/sub/b.ini /data/one.txt /data/two.txt; "
                    "cat /app/whoami; id -u; echo $MODE; ls /opt/tool; "
                    "test -e /etc/hostname && echo hostname-there; test -e /usr/share/doc && echo doc-there; "
                    "cd /app && python3 app.py")  # fmt: skip
        assert r.exit_code == 0, r
        assert r.stdout.decode().splitlines() == [
            "hey from /app", "exec-form", "a=1", "b=2", "1", "2", "1000", "1000", "two words", "x",
            "hi from app"]  # fmt: skip
        assert not sb.exec("ls /data").stdout.decode().count("secret")


def test_a_rebuild_with_nothing_changed_is_all_cache_and_a_change_reruns_from_there(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE}
        RUN echo one > /one
        COPY data.txt /data.txt
        RUN cat /data.txt > /copy.txt
        """, {"data.txt": "v1\n"})  # fmt: skip
    first = build(ctx, tag)
    assert first.cached == 1  # FROM only
    again = build(ctx, tag)
    assert again.cached == len(again.steps) == 4 and again.image == first.image
    (ctx / "data.txt").write_text("v2\n")
    third = build(ctx, tag)
    assert [s.cached for s in third.steps] == [True, True, False, False]
    with Sandbox(image=tag) as sb:
        assert sb.exec("cat /copy.txt /one").stdout == b"v2\none\n"
    fresh = build(ctx, tag, no_cache=True)
    assert fresh.cached == 1


def test_multi_stage_copy_from_and_target(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE} AS build
        WORKDIR /src
        RUN printf '#!/bin/sh\\necho built tool\\n' > tool && chmod 755 tool && echo junk > junk
        FROM {BASE}
        COPY --from=build /src/tool /usr/local/bin/tool
        RUN tool > /result
        """)  # fmt: skip
    result = build(ctx, tag)
    with Sandbox(image=tag) as sb:
        assert sb.exec("cat /result; test -e /src/junk || echo no-junk").stdout == b"built tool\nno-junk\n"
    only_build = build(ctx, tag, target="build")
    assert only_build.image != result.image
    with Sandbox(image=tag) as sb:
        assert sb.exec("ls /src").stdout == b"junk\ntool\n"


def test_heredocs_and_scratch(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE} AS gen
        RUN <<EOF
        echo line1 > /gen.txt
        echo line2 >> /gen.txt
        EOF
        COPY <<EOF /etc/motd.d/hello
        hello there
        EOF
        FROM scratch
        COPY --from=gen /gen.txt /gen.txt
        COPY --from=gen /etc/motd.d/hello /hello
        """)  # fmt: skip
    result = build(ctx, tag)
    root = result.path / "root"
    assert sorted(os.listdir(root)) == ["gen.txt", "hello"]
    assert (root / "gen.txt").read_text() == "line1\nline2\n" and (root / "hello").read_text() == "hello there\n"


def test_a_failing_run_names_its_line_and_exit_code(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE}
        RUN echo fine
        RUN echo about to fail >&2; exit 7
        """)  # fmt: skip
    with pytest.raises(BuildError) as info:
        build(ctx, tag)
    e = info.value
    assert e.line == 3 and "exited with code 7" in str(e) and "about to fail" in str(e)


def test_unsupported_instructions_and_bad_references_are_refused_with_their_line(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE}
        HEALTHCHECK CMD true
        """)  # fmt: skip
    with pytest.raises(BuildError, match="Dockerfile:2: HEALTHCHECK"):
        build(ctx, tag)
    write(ctx, """
        FROM no-such-image:1
        """)
    with pytest.raises(BuildError, match="Dockerfile:1: FROM no-such-image:1: no such image"):
        build(ctx, tag)
    write(ctx, f"""
        FROM {BASE}
        COPY missing.txt /x
        """)  # fmt: skip
    with pytest.raises(BuildError, match="Dockerfile:2: missing.txt: not found in the build context"):
        build(ctx, tag)
    write(ctx, f"""
        FROM {BASE}
        ADD https://example.invalid/x.tar.gz /x
        """)  # fmt: skip
    with pytest.raises(BuildError, match="Dockerfile:2: ADD of a URL"):
        build(ctx, tag)


def test_run_steps_have_no_network_unless_allowed(tmp_path, tag):
    ctx = tmp_path / "ctx"
    probe = ("python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             "s.connect(('192.0.2.1', 9)); print('routed')\" 2>/dev/null || echo no-route")  # fmt: skip
    write(ctx, f"""
        FROM {BASE}
        RUN {probe} > /net.txt
        """)  # fmt: skip
    build(ctx, tag)
    with Sandbox(image=tag) as sb:
        assert sb.exec("cat /net.txt").stdout == b"no-route\n"


def test_the_cli_builds_streams_and_maps_errors(tmp_path, tag):
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE}
        RUN echo streamed-output
        """)  # fmt: skip
    r = CliRunner().invoke(main, ["image", "build", "-t", tag, "--network", "none", str(ctx)])
    assert r.exit_code == 0, r.output
    assert "streamed-output" in r.output and "Dockerfile:2 RUN echo streamed-output" in r.output
    assert r.output.strip().splitlines()[-1].startswith("oci-")
    write(ctx, f"""
        FROM {BASE}
        RUN exit 3
        """)  # fmt: skip
    r = CliRunner().invoke(main, ["image", "build", "-t", tag, "--network", "none", str(ctx)])
    assert r.exit_code != 0 and "Dockerfile:2: RUN exited with code 3" in r.output


def test_a_dockerfile_as_tasks_write_it_apt_useradd_chown(tmp_path, tag):
    """The shape of Harbor's task template: apt-get from Debian's archive (the build's network
    policy allows it), a user made and given a directory, USER, WORKDIR.  apt runs as root for
    the step (its _apt user is not mapped) without a trace in the image."""
    ctx = tmp_path / "ctx"
    write(ctx, f"""
        FROM {BASE}
        RUN rm /etc/apt/apt.conf.d/90sandboxlite
        RUN apt-get update && apt-get install -y --no-install-recommends sl \\
            && rm -rf /var/lib/apt/lists/*
        RUN useradd -m app && mkdir -p /workspace && chown -R app:app /workspace
        USER app
        WORKDIR /workspace
        RUN touch mine && id -un > who
        """)  # fmt: skip
    builder.build(ctx / "Dockerfile", ctx, tag=tag)  # (the default network: allow:pypi,debian)
    with Sandbox(image=tag) as sb:
        r = sb.exec("ls /usr/games/sl /etc/apt/apt.conf.d; cat /workspace/who; id -un")
        assert r.exit_code == 0, r
        out = r.stdout.decode()
        assert "/usr/games/sl" in out and "00sandboxlite-build" not in out and "90sandboxlite" not in out
        assert out.split()[-2:] == ["app", "app"]
