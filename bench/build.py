#!/usr/bin/env python3
"""Image builds from Dockerfiles: ``sandboxlite image build`` against ``docker build``, ``podman
build`` and ``buildah bud`` on the same Dockerfiles, in one run on this machine:
``bench/build.py [--quick] [--rounds N] [--json PATH] [--sandboxlite-only]``.

    cold        a build that reads no cache: ``--no-cache`` for every tool, the image the tool made
                in the previous round removed first (untimed), so sandboxlite also flattens the
                image into its store again and docker/podman/buildah commit every layer again
    cached      the same build again right after, nothing changed (every step from the cache)
    cached_api  sandboxlite only: the cached rebuild through the Python API
                (``sandboxlite.build.builder.build``) in this process: no interpreter start

Every build is wall-clock around the tool's command line in a subprocess (sandboxlite:
``.venv/bin/sandboxlite image build --network none -q``, so its Python start counts as the Go
clients' start does), ``sync`` run untimed before each.  Every RUN is without network
(``--network none`` for all).  The Dockerfiles (``DOCKERFILES``; each in its own context, made in a
temporary directory, its ``FROM`` the same Debian 12 tree for all: sandboxlite's built ``lean``,
``docker import``-ed / ``podman import``-ed as ``sandboxlite-bench/lean:DIGEST12`` once):

    app         ENV, WORKDIR, COPY of 200 small Python files, RUN compileall, RUN useradd + chown, USER, CMD
    multistage  stage 1 writes 200 files of 100 KiB (20 MiB) into /out, stage 2 COPY --from=build /out
    steps       ARG, ENV, LABEL, EXPOSE and 10 RUN steps each writing a small file
    remove      RUN rm -rf /usr/share/doc /usr/share/man && rm /etc/motd (deletions: whiteouts)

Rounds are interleaved: in each round, each Dockerfile is built cold by every tool (in an order
rotated from round to round), then rebuilt cached by every tool, so noise hits all alike.  Medians,
p90 and the ratio to docker's median of the same run.  After the last round every tool's image
tree is compared with sandboxlite's (``docker create`` + ``docker export``, the same with podman,
against the store's ``oci-ID/root``): per path its type, permission bits, size, symlink target and
the sha256 of a file's data; owners and times are not compared.  Then the images are removed (the
imported base images stay: they are the cache).  JSON: ``bench/results/build-<time>.json``.
"""

from __future__ import annotations

import argparse
import collections
import gc
import hashlib
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from sandboxlite.bench.core import load_avg, machine_info, percentile  # noqa: E402
from sandboxlite.bench.report import write_json  # noqa: E402

SCHEMA = "sandboxlite.bench-build/1"
LEAN = "lean"
BASE_REPO = "sandboxlite-bench/lean"
TAG_REPO = "sandboxlite-bench-build"
TOOLS = ("sandboxlite", "docker", "podman", "buildah")
BASELINE = "docker"
PHASES = ("cold", "cached", "cached_api")
BUILD_TIMEOUT_S = 900
# where buildah keeps its images: a storage of its own, so that its cache is not podman's
BUILDAH_ROOT = Path("/var/lib/sandboxlite-bench-build/buildah")
BUILDAH_RUNROOT = Path("/run/sandboxlite-bench-build/buildah")
PODMAN_VFS_ROOT = Path("/var/lib/sandboxlite-bench-build/podman-vfs")
PODMAN_VFS_RUNROOT = Path("/run/sandboxlite-bench-build/podman-vfs")
# the sandboxlite builds of this run keep their snapshot layers in a store of their own (removed at
# the end), never in the default one other sandboxes use: main() sets SANDBOXLITE_SNAPSHOTS to it
SNAP_ROOT = Path(f"/dev/shm/sandboxlite-bench-build-{os.getpid()}")
LIST_CAP = 5000  # paths kept per list in the JSON (a list cut there says so)
EXAMPLES = 5
# what docker/podman add to (or mount over) every container: not the image's (docker's init layer
# also makes /etc/mtab -> /proc/mounts, and /dev/console, /dev/pts, /dev/shm)
IGNORE_EXACT = frozenset({"/.dockerenv", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf", "/etc/mtab",
                          "/run/.containerenv"})
IGNORE_UNDER = ("/proc/", "/sys/", "/dev/")
FIXED_MTIME = 1_700_000_000  # the context files' mtime (a .pyc records its source's)


# -------------------------------------------------------------------------------------------
# the Dockerfiles

APP = """\
FROM {base}
ENV APP_HOME=/app PYTHONUNBUFFERED=1
WORKDIR /app
COPY . /app
RUN python3 -m compileall -q .
RUN useradd -m app && chown -R app /app
USER app
CMD ["python3", "main.py"]
"""

MULTISTAGE = """\
FROM {base} AS build
RUN python3 -c "import os, random; os.makedirs('/out/data', exist_ok=True); [open('/out/data/f%03d.bin' % i, 'wb').write(random.Random(i).randbytes(102400)) for i in range(200)]"
RUN echo built > /out/STAMP
FROM {base}
COPY --from=build /out /out
CMD ["ls", "/out/data"]
"""

STEPS = """\
FROM {base}
ARG GREETING=hello
ENV STEPS_DIR=/opt/steps LANG=C.UTF-8
LABEL org.example.bench="steps" org.example.version="1"
EXPOSE 8080 9090/udp
""" + "".join(
    f'RUN {"mkdir -p $STEPS_DIR && " if i == 1 else ""}echo "$GREETING step {i}" > $STEPS_DIR/{i:02d}.txt\n'
    for i in range(1, 11)
) + 'CMD ["cat", "/opt/steps/10.txt"]\n'

REMOVE = """\
FROM {base}
RUN rm -rf /usr/share/doc /usr/share/man && rm /etc/motd
"""


def _app_context(ctx: Path) -> None:
    """200 small Python files (10 packages x (__init__ + 19 modules)) and main.py, fixed mtimes."""
    rnd = random.Random(42)
    for p in range(10):
        pkg = ctx / f"pkg{p}"
        pkg.mkdir()
        (pkg / "__init__.py").write_text(f'"""package {p}"""\nfrom . import mod0\n')
        for m in range(19):
            consts = ", ".join(str(rnd.randrange(10**6)) for _ in range(20))
            (pkg / f"mod{m}.py").write_text(
                f'"""module {p}.{m}"""\n\nVALUES = [{consts}]\n\n\n'
                f"def total(scale: int = 1) -> int:\n    return sum(VALUES) * scale\n\n\n"
                f"class Thing{m}:\n    def __init__(self, n):\n        self.n = n\n\n"
                f"    def __repr__(self):\n        return f'Thing{m}({{self.n}})'\n")  # fmt: skip
    (ctx / "main.py").write_text("import pkg0\nprint(pkg0.mod0.total())\n")
    for dirpath, dirnames, filenames in os.walk(ctx):
        for n in dirnames + filenames:
            os.utime(os.path.join(dirpath, n), (FIXED_MTIME, FIXED_MTIME))


@dataclass(frozen=True)
class Dockerfile:
    name: str
    text: str  # {base}: the base image, per tool
    what: str
    context: object = None  # fills the context directory (None: an empty context)


DOCKERFILES = {
    "app": Dockerfile("app", APP, "ENV, WORKDIR, COPY of 200 small Python files, RUN compileall, RUN useradd + "
                      "chown -R, USER, CMD", _app_context),
    "multistage": Dockerfile("multistage", MULTISTAGE, "stage 1 writes 200 x 100 KiB (20 MiB) into /out; stage 2 "
                             "COPY --from=build /out /out"),
    "steps": Dockerfile("steps", STEPS, "ARG, ENV, LABEL, EXPOSE and 10 RUN steps each writing a small file"),
    "remove": Dockerfile("remove", REMOVE, "RUN rm -rf /usr/share/doc /usr/share/man && rm /etc/motd (whiteouts)"),
}
QUICK_DOCKERFILES = ("app", "multistage")


@dataclass
class Case:
    """One Dockerfile of the run: its context and its Dockerfile per tool (the FROM differs)."""

    df: Dockerfile
    context: Path
    files: dict[str, Path] = field(default_factory=dict)  # tool -> Dockerfile path

    def tag(self, tool: str) -> str:
        return f"{TAG_REPO}/{self.df.name}:{tool}"


def make_cases(names: list[str], work: Path, bases: dict[str, str]) -> list[Case]:
    cases = []
    for name in names:
        df = DOCKERFILES[name]
        d = work / name
        ctx = d / "context"
        ctx.mkdir(parents=True)
        if df.context is not None:
            df.context(ctx)
        case = Case(df, ctx)
        for tool, base in bases.items():
            path = d / f"Dockerfile.{tool}"  # outside the context: not part of what COPY . sends
            path.write_text(df.text.format(base=base))
            case.files[tool] = path
        cases.append(case)
    return cases


def context_size(ctx: Path) -> dict:
    files = [Path(dp) / n for dp, _, fns in os.walk(ctx) for n in fns]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


# -------------------------------------------------------------------------------------------
# small helpers

def run(argv: list[str], *, timeout: float = 300, env: dict | None = None, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=stdin, check=False)


def first_line(text: str | bytes | None, limit: int = 240) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith(("DEPRECATED",
             "Install the buildx", "https://docs.docker.com/go/buildx", "Sending build context"))]  # fmt: skip
    # the last lines say why a build failed; the first says what a client could not do
    picked = " | ".join(lines[-3:]) if len(lines) > 1 else (lines[0] if lines else "")
    return picked[:limit]


def stats(samples: list[float]) -> dict:
    s = sorted(samples)
    if not s:
        return {"n": 0, "median_s": None, "p90_s": None, "min_s": None, "max_s": None}
    return {"n": len(s), "median_s": round(percentile(s, 50), 4), "p90_s": round(percentile(s, 90), 4),
            "min_s": round(s[0], 4), "max_s": round(s[-1], 4)}  # fmt: skip


def lean_info() -> dict:
    from sandboxlite.images import images_dir

    d = images_dir() / LEAN
    manifest = json.loads((d / "manifest.json").read_text())
    digest = manifest.get("digest", "")
    return {"name": LEAN, "root": str(d / "root"), "digest": digest, "tag": digest.split(":", 1)[-1][:12],
            "file_count": manifest.get("file_count")}  # fmt: skip


def sync() -> None:
    os.sync()


# -------------------------------------------------------------------------------------------
# image trees: path -> entry, from a directory or from a tar stream

@dataclass(frozen=True)
class Entry:
    type: str  # file, dir, symlink, char, block, fifo, socket
    mode: int  # permission bits (incl. setuid, setgid, sticky)
    size: int | None = None  # files only
    target: str | None = None  # symlinks only
    sha256: str | None = None  # files only

    def show(self) -> dict:
        d = {"type": self.type, "mode": f"{self.mode:04o}"}
        if self.size is not None:
            d["size"] = self.size
        if self.target is not None:
            d["target"] = self.target
        if self.sha256 is not None:
            d["sha256"] = self.sha256[:16]
        return d


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISCHR, "char"), (stat.S_ISBLK, "block"), (stat.S_ISFIFO, "fifo")):  # fmt: skip
        if test(mode):
            return name
    return "socket"


_HASHES: dict[tuple, str] = {}  # (dev, ino, size, mtime_ns) -> sha256: the images share the base's files


def _sha_file(path: str, st: os.stat_result) -> str:
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _HASHES:
        return _HASHES[key]
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def tree_of_dir(root: str | os.PathLike) -> dict[str, Entry]:
    """Every entry under ``root`` (not ``root`` itself), by its absolute path in the image."""
    out: dict[str, Entry] = {}
    stack = [(str(root), "")]
    while stack:
        host, rel = stack.pop()
        with os.scandir(host) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                path = f"{rel}/{e.name}"
                kind = _kind(st.st_mode)
                mode = stat.S_IMODE(st.st_mode)
                if kind == "file":
                    out[path] = Entry(kind, mode, st.st_size, sha256=_sha_file(e.path, st))
                elif kind == "symlink":
                    out[path] = Entry(kind, mode, target=os.readlink(e.path))
                else:
                    out[path] = Entry(kind, mode)
                if kind == "dir":
                    stack.append((e.path, path))
    return out


def _tar_path(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    name = name.strip("/")
    return "/" + name if name not in ("", ".") else "/"


def tree_of_tar(fileobj) -> dict[str, Entry]:
    """The entries of a tar stream (``docker export``), by absolute path; hard links take their
    target's data.  Symlink permission bits are not kept by tar: 0777, as on Linux."""
    out: dict[str, Entry] = {}
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for m in tar:
            path = _tar_path(m.name)
            if path == "/":
                continue
            mode = m.mode & 0o7777
            if m.isreg() and not m.islnk():
                h = hashlib.sha256()
                f = tar.extractfile(m)
                size = 0
                while chunk := f.read(1 << 20):  # type: ignore[union-attr]
                    h.update(chunk)
                    size += len(chunk)
                out[path] = Entry("file", mode, size, sha256=h.hexdigest())
            elif m.islnk():
                src = out.get(_tar_path(m.linkname))
                out[path] = Entry("file", mode, src.size if src else None, sha256=src.sha256 if src else None)
            elif m.isdir():
                out[path] = Entry("dir", mode)
            elif m.issym():
                out[path] = Entry("symlink", 0o777, target=m.linkname)
            elif m.ischr():
                out[path] = Entry("char", mode)
            elif m.isblk():
                out[path] = Entry("block", mode)
            elif m.isfifo():
                out[path] = Entry("fifo", mode)
    return out


def ignored(path: str) -> bool:
    return path in IGNORE_EXACT or path.startswith(IGNORE_UNDER)


def in_tmp(path: str) -> bool:
    return path == "/tmp" or path.startswith("/tmp/")


def _top(path: str, depth: int = 2) -> str:
    parts = path.strip("/").split("/")
    head = "/" + "/".join(parts[:depth])
    return head + ("/..." if len(parts) > depth else "")


def _roots(paths: list[str]) -> list[str]:
    """The topmost of ``paths`` (sorted): a directory's entries under it are left out."""
    out: list[str] = []
    for p in paths:
        if not out or not p.startswith(out[-1] + "/"):
            out.append(p)
    return out


def _capped(paths: list) -> dict:
    return {"count": len(paths), "truncated": len(paths) > LIST_CAP, "items": paths[:LIST_CAP]}


def compare(sl: dict[str, Entry], other: dict[str, Entry], name: str) -> dict:
    """sandboxlite's tree against ``name``'s: the paths only in one, the entries that differ and by
    which attribute; /tmp apart; what docker/podman always add (IGNORE_*) left out and listed."""
    ign = sorted(p for p in set(sl) | set(other) if ignored(p))
    a = {p: e for p, e in sl.items() if not ignored(p)}
    b = {p: e for p, e in other.items() if not ignored(p)}
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    differ = []
    by_attr: collections.Counter = collections.Counter()
    groups: collections.Counter = collections.Counter()
    for p in sorted(set(a) & set(b)):
        ea, eb = a[p], b[p]
        if ea.type != eb.type:
            attrs = ["type"]
        else:
            attrs = [k for k in ("mode", "size", "target", "sha256") if getattr(ea, k) != getattr(eb, k)]
            if ea.type == "symlink":
                attrs = [k for k in attrs if k != "mode"]  # (tar keeps no symlink mode)
        if attrs:
            differ.append({"path": p, "attributes": attrs, "sandboxlite": ea.show(), name: eb.show()})
    tmp = {"only_in_sandboxlite": [p for p in only_a if in_tmp(p)], f"only_in_{name}": [p for p in only_b if in_tmp(p)],
           "differ": [d for d in differ if in_tmp(d["path"])]}  # fmt: skip
    only_a = [p for p in only_a if not in_tmp(p)]
    only_b = [p for p in only_b if not in_tmp(p)]
    differ = [d for d in differ if not in_tmp(d["path"])]
    for d in differ:
        by_attr.update(d["attributes"])
        groups[f"differ {'+'.join(d['attributes'])} in {_top(d['path'])}"] += 1
    for p in only_a:
        groups[f"only in sandboxlite: {_top(p)}"] += 1
    for p in only_b:
        groups[f"only in {name}: {_top(p)}"] += 1
    return {
        "entries": {"sandboxlite": len(sl), name: len(other), "compared": len(set(a) & set(b)), "ignored": len(ign)},
        "ignored_paths": ign[:LIST_CAP],
        "only_in_sandboxlite": _capped(only_a) | {"roots": _roots(only_a)[:LIST_CAP]},
        f"only_in_{name}": _capped(only_b) | {"roots": _roots(only_b)[:LIST_CAP]},
        "differ": _capped(differ) | {"by_attribute": dict(by_attr)},
        "tmp": tmp,
        "groups": dict(groups.most_common()),
        "examples": {"only_in_sandboxlite": _roots(only_a)[:EXAMPLES], f"only_in_{name}": _roots(only_b)[:EXAMPLES],
                     "differ": differ[:EXAMPLES]},
        "identical": not (only_a or only_b or differ or any(tmp.values())),
    }


def tree_summary(tree: dict[str, Entry]) -> dict:
    kinds = collections.Counter(e.type for e in tree.values())
    return {"entries": len(tree), "by_type": dict(kinds), "file_bytes": sum(e.size or 0 for e in tree.values())}


def config_diff(a: dict, b: dict) -> dict:
    return {k: {"sandboxlite": a.get(k), "other": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _norm_config(env, workdir, user, cmd, entrypoint, exposed, labels) -> dict:
    return {"env": sorted(env or []), "workdir": workdir or "", "user": user or "", "cmd": list(cmd or []),
            "entrypoint": list(entrypoint or []), "exposed": sorted(exposed or []),
            "labels": dict(labels or {})}  # fmt: skip


# -------------------------------------------------------------------------------------------
# the tools

class Unavailable(Exception):
    pass


@dataclass
class Tool:
    name: str
    status: str = "ok"
    info: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    # what each tool implements
    def setup(self, lean: dict) -> None: ...
    def base(self) -> str: ...
    def build_argv(self, case: Case, cold: bool) -> list[str]: ...
    def remove(self, tag: str) -> None: ...
    def tree(self, tag: str) -> dict[str, Entry]: ...
    def config(self, tag: str) -> dict: ...
    def env(self) -> dict | None:
        return None

    def check(self, r: subprocess.CompletedProcess) -> dict:
        """What a finished build printed, reduced to what the JSON keeps."""
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {first_line(r.stderr or r.stdout)}")
        return {}

    def describe(self) -> dict:
        return {"name": self.name, "status": self.status, **self.info, "notes": self.notes}

    def finish(self) -> dict:
        """After the tags are removed: the images this run made that no tag held (a multistage build's
        first stage, what a failed build left): new since the setup, made by a RUN of ``DOCKERFILES``."""
        cli = getattr(self, "cli", None)
        if cli is None:
            return {}
        markers = [ln[4:] for df in DOCKERFILES.values() for ln in df.text.splitlines() if ln.startswith("RUN ")]
        mine = []
        for i in sorted(_image_ids(cli) - self.ids_at_start):  # type: ignore[attr-defined]
            h = run([*cli, "history", "--no-trunc", "--format", "{{.CreatedBy}}", i], timeout=60)
            if h.returncode == 0 and any(m in h.stdout for m in markers):
                mine.append(i)
        left = list(mine)
        for _ in range(3):  # (a parent goes with its last child; one with children left waits a pass)
            left = [i for i in left if run([*cli, "rmi", i], timeout=300).returncode != 0
                    and run([*cli, "image", "inspect", i], timeout=60).returncode == 0]  # fmt: skip
        if left:
            self.notes.append(f"could not remove {len(left)} intermediate image(s): {', '.join(x[:19] for x in left)}")
        return {f"{self.name}_intermediate_images_removed": len(mine) - len(left)}


class Sandboxlite(Tool):
    def setup(self, lean: dict) -> None:
        cli = REPO / ".venv" / "bin" / "sandboxlite"
        found = str(cli) if cli.exists() else shutil.which("sandboxlite")
        self.cli = [found] if found else [sys.executable, "-c", "from sandboxlite.cli import main; main()"]
        import sandboxlite

        try:  # (the builder's home: sandboxlite.build since the package split, sandboxlite.images before)
            from sandboxlite.build import builder
        except ImportError:
            from sandboxlite.images import builder  # type: ignore[no-redef]
        self.builder = builder
        self.info.update(version=sandboxlite.__version__, cli=self.cli, base_image=LEAN, builder=builder.__name__,
                         snapshot_store=os.environ["SANDBOXLITE_SNAPSHOTS"],
                         argv=[*self.cli, "image", "build", "--network", "none", "-q", "[--no-cache]", "-t", "TAG",
                               "-f", "DOCKERFILE", "CONTEXT"])  # fmt: skip
        self.snaps_seen: set[str] = set()

    def base(self) -> str:
        return LEAN

    def build_argv(self, case: Case, cold: bool) -> list[str]:
        return [*self.cli, "image", "build", "--network", "none", "-q", *(["--no-cache"] if cold else []),
                "-t", case.tag(self.name), "-f", str(case.files[self.name]), str(case.context)]  # fmt: skip

    def check(self, r: subprocess.CompletedProcess) -> dict:
        super().check(r)
        m = re.search(r"^(oci-\S+)(?: \S+)?: (\d+) steps, (\d+) cached, ([\d.]+) s", r.stdout, re.MULTILINE)
        if m is None:
            raise RuntimeError(f"unexpected output: {first_line(r.stdout)}")
        return {"image": m.group(1), "steps": int(m.group(2)), "cached_steps": int(m.group(3)),
                "reported_s": float(m.group(4))}  # fmt: skip

    def api_cached(self, case: Case) -> tuple[float, dict]:
        t = time.perf_counter()
        res = self.builder.build(case.files[self.name], case.context, tag=case.tag(self.name), network="none")
        dt = time.perf_counter() - t
        return dt, {"image": res.image, "steps": len(res.steps), "cached_steps": res.cached, "reported_s": res.seconds}

    def _store(self):
        from sandboxlite.jail.host import default_host

        return default_host().snapshot_store()

    def clear_snapshots(self) -> None:
        """Every snapshot of this run's own store (the builds' layers): the top ones first."""
        store = self._store()
        for s in sorted(store.list(), key=lambda s: -s.depth):
            self.snaps_seen.add(s.name)
            store.remove(s.name, missing_ok=True)

    def remove(self, tag: str) -> None:
        from sandboxlite.errors import ImageError
        from sandboxlite.images import store

        self.clear_snapshots()
        try:
            store.remove(tag)
        except ImageError:
            pass  # (not there)

    def image_root(self, tag: str) -> Path:
        from sandboxlite.images import store

        return store.find_image(tag).path / "root"

    def tree(self, tag: str) -> dict[str, Entry]:
        return tree_of_dir(self.image_root(tag))

    def config(self, tag: str) -> dict:
        from sandboxlite.images import store

        c = store.find_image(tag).manifest["oci"]["config"]
        return _norm_config(c.get("env"), c.get("working_dir"), c.get("user"), c.get("cmd"), c.get("entrypoint"),
                            c.get("exposed_ports"), c.get("labels"))  # fmt: skip

    def finish(self) -> dict:
        """Remove this run's snapshot store and the build-cache records pointing into it."""
        from sandboxlite import paths

        removed = 0
        try:
            self.clear_snapshots()
        except Exception as e:  # noqa: BLE001 - reported, not raised
            self.notes.append(f"clearing the snapshot store failed: {e}")
        cache = paths.home() / "build"
        for p in cache.glob("*.json") if cache.is_dir() else ():
            try:
                if json.loads(p.read_text()).get("snap") in self.snaps_seen:
                    p.unlink()
                    removed += 1
            except (OSError, ValueError):
                continue
        from sandboxlite.state.snapshot import remove_tree

        if SNAP_ROOT.exists():
            remove_tree(str(SNAP_ROOT))
        return {"cache_records_removed": removed, "snapshots_removed": len(self.snaps_seen)}


class Docker(Tool):
    """docker build through the daemon (the legacy builder unless the buildx plugin is there)."""

    def setup(self, lean: dict) -> None:
        if not shutil.which("docker"):
            raise Unavailable("`docker` is not installed (sudo bench/setup_docker.sh --podman)")
        if not self._daemon_up():
            script = HERE / "setup_docker.sh"
            if os.geteuid() != 0:
                raise Unavailable("no Docker daemon, and starting one needs root (sudo bench/setup_docker.sh --podman)")
            r = run(["sh", str(script), "--podman"], timeout=900)
            self.notes.append(f"ran bench/setup_docker.sh --podman: {first_line(r.stdout + r.stderr)}")
            if not self._daemon_up():
                raise Unavailable(f"no Docker daemon after bench/setup_docker.sh: {first_line(r.stderr or r.stdout)}")
        v = run(["docker", "version", "--format", "{{.Client.Version}} {{.Server.Version}}"])
        client, _, server = v.stdout.strip().partition(" ")
        buildx = run(["docker", "buildx", "version"]).returncode == 0
        self.buildkit = buildx
        legacy = "legacy builder (DOCKER_BUILDKIT=0: no buildx plugin here)"
        self.info.update(client_version=client, server_version=server,
                         builder="BuildKit (buildx)" if buildx else legacy,
                         storage_driver=run(["docker", "info", "--format", "{{.Driver}}"]).stdout.strip())  # fmt: skip
        self.image = f"{BASE_REPO}:{lean['tag']}"
        self.info["base_image"] = self.image
        self.info["base_import_s"] = _import_base(["docker"], self.image, lean["root"])
        self.info["argv"] = ["docker", "build", "--network", "none", "--force-rm", "-q", "[--no-cache]", "-t", "TAG",
                             "-f", "DOCKERFILE", "CONTEXT"]  # fmt: skip
        self.cli = ["docker"]
        self.ids_at_start = _image_ids(self.cli)

    @staticmethod
    def _daemon_up() -> bool:
        try:
            return run(["docker", "version", "--format", "{{.Server.Version}}"], timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def env(self) -> dict | None:
        return dict(os.environ, DOCKER_BUILDKIT="1" if self.buildkit else "0")

    def base(self) -> str:
        return self.image

    def build_argv(self, case: Case, cold: bool) -> list[str]:
        return ["docker", "build", "--network", "none", "--force-rm", "-q", *(["--no-cache"] if cold else []),
                "-t", case.tag(self.name), "-f", str(case.files[self.name]), str(case.context)]  # fmt: skip

    def remove(self, tag: str) -> None:
        run(["docker", "rmi", tag], timeout=300)  # (with its untagged parent layers; "no such image" is fine)

    def tree(self, tag: str) -> dict[str, Entry]:
        return _export_tree(["docker"], tag)

    def config(self, tag: str) -> dict:
        c = json.loads(run(["docker", "image", "inspect", "--format", "{{json .Config}}", tag]).stdout)
        return _norm_config(c.get("Env"), c.get("WorkingDir"), c.get("User"), c.get("Cmd"), c.get("Entrypoint"),
                            list(c.get("ExposedPorts") or {}), c.get("Labels"))  # fmt: skip


class Podman(Tool):
    """podman build (buildah's builder inside podman), rootful; ``buildah bud`` (name "buildah") in a
    storage of its own; both export through podman."""

    def __init__(self, name: str, driver: str = "auto") -> None:
        super().__init__(name)
        self.driver = driver
        self.store_args: list[str] = []
        if name == "buildah":
            self.store_args = ["--root", str(BUILDAH_ROOT), "--runroot", str(BUILDAH_RUNROOT)]

    def setup(self, lean: dict) -> None:
        if os.geteuid() != 0:
            raise Unavailable("runs rootful here: needs root")
        if not shutil.which("podman"):
            raise Unavailable("`podman` is not installed (sudo bench/setup_docker.sh --podman)")
        if self.name == "buildah" and not shutil.which("buildah"):
            r = run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "buildah"], timeout=900,
                    env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))  # fmt: skip
            if r.returncode != 0 or not shutil.which("buildah"):
                raise Unavailable(f"`buildah` is not installed, and apt-get install buildah failed: "
                                  f"{first_line(r.stderr)}")
            self.notes.append("installed buildah with apt-get")
        cmd = "buildah" if self.name == "buildah" else "podman"
        self.info["version"] = run([cmd, "--version"]).stdout.strip()
        self.image = f"localhost/{BASE_REPO}:{lean['tag']}"
        self.info["base_image"] = self.image
        if self.driver == "vfs":
            self._use_vfs("asked for with --podman-storage-driver vfs")
        try:
            self.info["base_import_s"] = _import_base(["podman", *self.store_args], self.image, lean["root"])
            self._probe()
        except Unavailable as e:
            if self.driver != "auto":
                raise
            self._use_vfs(f"the default storage failed: {e}")
            self.info["base_import_s"] = _import_base(["podman", *self.store_args], self.image, lean["root"])
            self._probe()
        self.info["storage_driver"] = run(["podman", *self.store_args, "info", "--format",
                                           "{{.Store.GraphDriverName}}"]).stdout.strip()  # fmt: skip
        self.info["storage_root"] = run(["podman", *self.store_args, "info", "--format",
                                         "{{.Store.GraphRoot}}"]).stdout.strip()  # fmt: skip
        self.info["argv"] = self._build_prefix() + ["-q", "[--no-cache]", "-t", "TAG", "-f", "DOCKERFILE", "CONTEXT"]
        self.cli = ["podman", *self.store_args]
        self.ids_at_start = _image_ids(self.cli)

    def _use_vfs(self, why: str) -> None:
        root = BUILDAH_ROOT.with_name("buildah-vfs") if self.name == "buildah" else PODMAN_VFS_ROOT
        runroot = BUILDAH_RUNROOT.with_name("buildah-vfs") if self.name == "buildah" else PODMAN_VFS_RUNROOT
        self.store_args = ["--root", str(root), "--runroot", str(runroot), "--storage-driver", "vfs"]
        self.notes.append(f"storage driver vfs ({why}): every layer a full copy, slower than overlay")

    def _probe(self) -> None:
        with tempfile.TemporaryDirectory(prefix="sandboxlite-bench-build-probe-") as d:
            (Path(d) / "Dockerfile").write_text(f"FROM {self.image}\nRUN true\n")
            tag = f"{TAG_REPO}/probe:{self.name}"
            r = run([*self._build_prefix(), "-q", "-t", tag, "-f", f"{d}/Dockerfile", d], timeout=BUILD_TIMEOUT_S)
            self.remove(tag)
            if r.returncode != 0:
                raise Unavailable(f"a probe build failed: {first_line(r.stderr or r.stdout)}")

    def _build_prefix(self) -> list[str]:
        if self.name == "buildah":  # bud keeps no layer cache unless asked (podman build's default: --layers)
            return ["buildah", *self.store_args, "bud", "--layers", "--network", "none"]
        return ["podman", *self.store_args, "build", "--network", "none"]

    def base(self) -> str:
        return self.image

    def build_argv(self, case: Case, cold: bool) -> list[str]:
        return [*self._build_prefix(), "-q", *(["--no-cache"] if cold else []), "-t", case.tag(self.name),
                "-f", str(case.files[self.name]), str(case.context)]  # fmt: skip

    def remove(self, tag: str) -> None:
        run(["podman", *self.store_args, "rmi", tag], timeout=300)

    def tree(self, tag: str) -> dict[str, Entry]:
        return _export_tree(["podman", *self.store_args], tag)

    def config(self, tag: str) -> dict:
        c = json.loads(run(["podman", *self.store_args, "image", "inspect", "--format", "{{json .Config}}",
                            tag]).stdout)
        return _norm_config(c.get("Env"), c.get("WorkingDir"), c.get("User"), c.get("Cmd"), c.get("Entrypoint"),
                            list(c.get("ExposedPorts") or {}), c.get("Labels"))  # fmt: skip


def _image_ids(cli: list[str]) -> set[str]:
    r = run([*cli, "images", "-a", "-q", "--no-trunc"], timeout=120)
    return set(r.stdout.split()) if r.returncode == 0 else set()


def _import_base(cli: list[str], image: str, root: str) -> float | str:
    """``tar ... | CLI import - IMAGE`` unless the tag is there already ("cached")."""
    if run([*cli, "image", "inspect", image], timeout=60).returncode == 0:
        return "cached"
    t0 = time.monotonic()
    tar = subprocess.Popen(["tar", "-C", root, "--numeric-owner", "--owner=0", "--group=0", "-cf", "-", "."],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        imp = subprocess.run([*cli, "import", "-", image], stdin=tar.stdout, capture_output=True, timeout=1800,
                             check=False)
    finally:
        tar.stdout.close()  # type: ignore[union-attr]
        tar.wait()
    if imp.returncode != 0:
        raise Unavailable(f"`{' '.join(cli)} import` of the lean tree failed: {first_line(imp.stderr)}")
    return round(time.monotonic() - t0, 1)


def _export_tree(cli: list[str], tag: str) -> dict[str, Entry]:
    """``CLI create TAG /bin/true`` (never started), ``CLI export`` streamed into tree_of_tar, removed."""
    c = run([*cli, "create", "--network", "none", tag, "/bin/true"], timeout=120)
    if c.returncode != 0:
        raise RuntimeError(f"create failed: {first_line(c.stderr)}")
    cid = c.stdout.strip().splitlines()[-1]
    try:
        p = subprocess.Popen([*cli, "export", cid], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            tree = tree_of_tar(p.stdout)
        finally:
            p.stdout.close()  # type: ignore[union-attr]
            err = p.stderr.read()  # type: ignore[union-attr]
            p.wait()
        if p.returncode != 0:
            raise RuntimeError(f"export failed: {first_line(err)}")
        return tree
    finally:
        run([*cli, "rm", "-f", cid], timeout=120)


# -------------------------------------------------------------------------------------------
# the run

@dataclass
class Series:
    case: str
    tool: str
    phase: str
    samples: list[float] = field(default_factory=list)
    builds: list[dict] = field(default_factory=list)  # what each timed build reported
    status: str = "ok"


def one_build(tool: Tool, case: Case, cold: bool) -> tuple[float, dict]:
    argv = tool.build_argv(case, cold)
    sync()
    t = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=tool.env(), check=False)
    dt = time.perf_counter() - t
    return dt, tool.check(r)


def run_rounds(tools: list[Tool], cases: list[Case], rounds: int, warmup: int, log) -> dict[tuple, Series]:
    series: dict[tuple, Series] = {}
    for case in cases:
        for tool in tools:
            for phase in PHASES:
                if phase == "cached_api" and tool.name != "sandboxlite":
                    continue
                series[(case.df.name, tool.name, phase)] = Series(case.df.name, tool.name, phase)

    def alive(case: Case, tool: Tool) -> bool:
        return tool.ok and series[(case.df.name, tool.name, "cold")].status == "ok"

    def fail(case: Case, tool: Tool, r: int, record: bool, e: Exception) -> None:
        why = f"not available: failed in round {r}: {e}" if record else f"not available: {e}"
        for phase in PHASES:
            s = series.get((case.df.name, tool.name, phase))
            if s is not None:
                s.status = why
        log(f"  {case.df.name}/{tool.name}: {why}")

    def do(case: Case, tool: Tool, phase: str, r: int, record: bool) -> None:
        if not alive(case, tool):
            return
        try:
            if phase == "cached_api":
                sync()
                dt, info = tool.api_cached(case)  # type: ignore[attr-defined]
            else:
                dt, info = one_build(tool, case, cold=phase == "cold")
        except Exception as e:  # noqa: BLE001 - reported, not raised
            fail(case, tool, r, record, e)
            return
        if record:
            s = series[(case.df.name, tool.name, phase)]
            s.samples.append(dt)
            s.builds.append(info)

    total = warmup + rounds
    for r in range(total):
        record = r >= warmup
        label = f"round {r - warmup + 1}/{rounds}" if record else f"warm-up {r + 1}/{warmup}"
        t_round = time.monotonic()
        for ci, case in enumerate(cases):
            k = (r + ci) % len(tools)
            order = tools[k:] + tools[:k]  # rotated: nobody always goes first
            for tool in order:  # the previous round's image: gone before any cold build (untimed)
                if alive(case, tool):
                    try:
                        tool.remove(case.tag(tool.name))
                    except Exception as e:  # noqa: BLE001 - reported, not raised
                        fail(case, tool, r, record, RuntimeError(f"removing the previous image: {e}"))
            gc.collect()
            gc.disable()  # collections between builds only
            try:
                for tool in order:
                    do(case, tool, "cold", r, record)
                for tool in order:
                    do(case, tool, "cached", r, record)
                    if tool.name == "sandboxlite":
                        do(case, tool, "cached_api", r, record)
            finally:
                gc.enable()
        log(f"  {label} done in {time.monotonic() - t_round:.0f} s")
    return series


def compare_trees(tools: list[Tool], cases: list[Case], series: dict[tuple, Series], log) -> tuple[list, dict]:
    rows = []
    summaries = {}
    sl = next(t for t in tools if t.name == "sandboxlite")
    for case in cases:
        name = case.df.name
        try:
            if series[(name, "sandboxlite", "cold")].status != "ok":
                raise RuntimeError("no sandboxlite image (its builds failed)")
            sl_tree = sl.tree(case.tag("sandboxlite"))
            sl_config = sl.config(case.tag("sandboxlite"))
            summaries[name] = {"status": "ok", "image": str(sl.image_root(case.tag("sandboxlite")).parent.name),
                               **tree_summary(sl_tree)}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - reported, not raised
            sl_tree = None
            summaries[name] = {"status": f"not available: {e}", "image": None, "entries": None, "by_type": None,
                               "file_bytes": None}  # fmt: skip
        for tool in tools:
            if tool.name == "sandboxlite":
                continue
            row: dict = {"dockerfile": name, "tool": tool.name, "status": "ok"}
            status = tool.status if not tool.ok else series[(name, tool.name, "cold")].status
            if status != "ok":
                row["status"] = status
            elif sl_tree is None:
                row["status"] = "not available: " + summaries[name]["status"]
            else:
                try:
                    t0 = time.monotonic()
                    other = tool.tree(case.tag(tool.name))
                    row |= compare(sl_tree, other, tool.name)
                    row["config_diff"] = config_diff(sl_config, tool.config(case.tag(tool.name)))
                    row["seconds"] = round(time.monotonic() - t0, 1)
                except Exception as e:  # noqa: BLE001 - reported, not raised
                    row["status"] = f"not available: {type(e).__name__}: {e}"
            if row["status"] != "ok":
                keys = ("entries", "ignored_paths", "only_in_sandboxlite", f"only_in_{tool.name}", "differ", "tmp",
                        "groups", "examples", "identical", "config_diff")
                row |= dict.fromkeys(keys)
            rows.append(row)
            if row["status"] == "ok":
                d = row
                log(f"  {name:10} vs {tool.name:7}: only in sandboxlite {d['only_in_sandboxlite']['count']}, only in "
                    f"{tool.name} {d[f'only_in_{tool.name}']['count']}, differ {d['differ']['count']} "
                    f"{d['differ']['by_attribute'] or ''}, /tmp {sum(len(v) for v in d['tmp'].values())}, "
                    f"config {sorted(d['config_diff']) or 'same'}")  # fmt: skip
            else:
                log(f"  {name:10} vs {tool.name:7}: {row['status']}")
    return rows, summaries


def results_and_ratios(series: dict[tuple, Series]) -> tuple[list, list, dict]:
    results, samples = [], {}
    for (case, tool, phase), s in series.items():
        st = stats(s.samples)
        status = s.status if s.status != "ok" or s.samples else "not available: no sample"
        row = {"dockerfile": case, "tool": tool, "phase": phase, "status": status, "unit": "s", **st}
        if tool == "sandboxlite":
            steps = [b.get("cached_steps") == b.get("steps") for b in s.builds]
            row["all_steps_cached"] = all(steps) if steps and phase != "cold" else None
            rep = [b["reported_s"] for b in s.builds if "reported_s" in b]
            row["reported_median_s"] = round(percentile(sorted(rep), 50), 4) if rep else None
            row["image"] = s.builds[-1].get("image") if s.builds else None
        results.append(row)
        samples[f"{case}/{phase}/{tool}"] = [round(v, 4) for v in s.samples]
    ratios = []
    by = {(r["dockerfile"], r["tool"], r["phase"]): r for r in results}
    for r in results:
        if r["tool"] == BASELINE:
            continue
        base = by.get((r["dockerfile"], BASELINE, "cached" if r["phase"] == "cached_api" else r["phase"]))
        row = {"dockerfile": r["dockerfile"], "tool": r["tool"], "phase": r["phase"], "baseline": BASELINE,
               "baseline_phase": "cached" if r["phase"] == "cached_api" else r["phase"], "ratio": None,
               "ratio_p90": None, "status": "ok"}  # fmt: skip
        if base is None or base["status"] != "ok":
            row["status"] = f"not available: no {BASELINE} baseline" + (f" ({base['status']})" if base else "")
        elif r["status"] != "ok":
            row["status"] = r["status"]
        else:
            row["ratio"] = round(r["median_s"] / base["median_s"], 3)
            row["ratio_p90"] = round(r["p90_s"] / base["p90_s"], 3)
        ratios.append(row)
    return results, ratios, samples


def print_table(results: list, ratios: list, cases: list[Case], tools: list[Tool]) -> None:
    by = {(r["dockerfile"], r["tool"], r["phase"]): r for r in results}
    rat = {(r["dockerfile"], r["tool"], r["phase"]): r for r in ratios}

    def cell(case: str, tool: str, phase: str) -> str:
        r = by.get((case, tool, phase))
        if r is None:
            return f"{'':>27}"
        if r["status"] != "ok":
            return f"{'n/a':>27}"
        x = rat.get((case, tool, phase))
        ratio = "1.00" if tool == BASELINE else (f"{x['ratio']:.2f}" if x and x["ratio"] is not None else "-")
        return f"{r['median_s']:8.3f} s {r['p90_s']:6.3f} s x{ratio:>6}"

    print(f"\n{'':24}{'cold: median':>12} {'p90':>8} {'x docker':>7}   "
          f"{'cached: median':>14} {'p90':>6} {'x docker':>7}")
    for case in cases:
        name = case.df.name
        for tool in [t for t in tools if t.ok]:
            print(f"{name:11} {tool.name:11} {cell(name, tool.name, 'cold')}   {cell(name, tool.name, 'cached')}")
        r = by.get((name, "sandboxlite", "cached_api"))
        if r is not None:
            print(f"{name:11} {'  (API)':11} {'':27}   {cell(name, 'sandboxlite', 'cached_api')}")
    for t in tools:
        if not t.ok:
            print(f"{t.name}: {t.status}")
    print("(ratio = median / docker's median of the same Dockerfile and phase; API = sandboxlite's cached rebuild "
          "through builder.build() in this process, against docker's cached CLI build)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, no warm-up, only the app and multistage Dockerfiles")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick: 1)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed rounds first (default 1; --quick: 0)")
    ap.add_argument("--only", default=None, help=f"Dockerfiles, comma-separated ({','.join(DOCKERFILES)})")
    ap.add_argument("--sandboxlite-only", action="store_true", help="no docker/podman/buildah (machines without them)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="tools to run (sandboxlite always runs)")
    ap.add_argument("--podman-storage-driver", choices=("auto", "vfs"), default="auto",
                    help="auto: the default (overlay), vfs when that fails")
    ap.add_argument("--no-trees", action="store_true", help="skip the tree comparison")
    ap.add_argument("--keep", action="store_true", help="keep the built images and the temporary directory")
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args(argv)
    if opts.rounds is None:
        opts.rounds = 1 if opts.quick else 5
    if opts.warmup is None:
        opts.warmup = 0 if opts.quick else 1
    names = opts.only.split(",") if opts.only else list(QUICK_DOCKERFILES if opts.quick else DOCKERFILES)
    bad = [n for n in names if n not in DOCKERFILES]
    if bad:
        ap.error(f"--only: unknown Dockerfile(s) {', '.join(bad)} (known: {', '.join(DOCKERFILES)})")
    opts.only = names
    tools = [t for t in opts.tools.split(",") if t]
    if set(tools) - set(TOOLS):
        ap.error(f"--tools: unknown {', '.join(sorted(set(tools) - set(TOOLS)))} (known: {', '.join(TOOLS)})")
    opts.tools = ["sandboxlite"] + [t for t in TOOLS[1:] if t in tools]
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    t_start = time.monotonic()
    os.environ["SANDBOXLITE_SNAPSHOTS"] = str(SNAP_ROOT / "snapshots")  # (before sandboxlite opens a store)

    def log(line: str) -> None:
        print(line, flush=True)

    doc: dict = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 "command": " ".join([Path(sys.argv[0]).name if argv is None else "bench/build.py",
                                      *(sys.argv[1:] if argv is None else argv)]),
                 "machine": machine_info()}  # fmt: skip
    load = doc["machine"]["load_avg_start"]
    if load and load[0] > 1.5:
        log(f"warning: load average {load[0]:.2f}: the numbers will be noisy")
    lean = lean_info()
    tools: list[Tool] = [Sandboxlite("sandboxlite")]
    for name in TOOLS[1:]:
        t = Docker(name) if name == "docker" else Podman(name, opts.podman_storage_driver)
        if opts.sandboxlite_only or name not in opts.tools:
            t.status = "not available: not run (" + ("--sandboxlite-only" if opts.sandboxlite_only else "--tools") + ")"
        tools.append(t)
    for t in tools:
        if not t.ok:
            continue
        t0 = time.monotonic()
        try:
            t.setup(lean)
        except Unavailable as e:
            t.status = f"not available: {e}"
        except Exception as e:  # noqa: BLE001 - reported, not raised
            t.status = f"not available: {type(e).__name__}: {e}"
        t.info["setup_s"] = round(time.monotonic() - t0, 1)
        version = t.info.get("version") or t.info.get("server_version", "")
        log(f"{t.name}: {t.status}" + (f" ({version})" if t.ok else ""))
    running = [t for t in tools if t.ok]
    order = [t.name for t in running]
    work = Path(tempfile.mkdtemp(prefix="sandboxlite-bench-build-"))
    cases = make_cases(opts.only, work, {t.name: t.base() for t in running})
    doc["params"] = {"rounds": opts.rounds, "warmup_rounds": opts.warmup, "quick": opts.quick,
                     "sandboxlite_only": opts.sandboxlite_only, "dockerfiles": opts.only, "tools": order,
                     "baseline": BASELINE, "network": "none", "timer": "time.perf_counter (wall-clock)",
                     "base": lean, "interleaving": "per round and Dockerfile: the previous images removed (untimed), "
                     "then a cold build by each tool in an order rotated by round, then a cached rebuild by each "
                     "(sandboxlite: also through the API); sync (untimed) before each build",
                     "tree_ignored": sorted(IGNORE_EXACT) + [p + "*" for p in IGNORE_UNDER],
                     "tree_attributes": ["type", "mode", "size", "target", "sha256"]}  # fmt: skip
    doc["tools"] = []
    doc["dockerfiles"] = {c.df.name: {"what": c.df.what, "text": c.df.text, "context": context_size(c.context)}
                          for c in cases}  # fmt: skip
    series: dict = {}
    trees: list = []
    summaries: dict = {}
    try:
        log(f"{len(cases)} Dockerfiles x {len(running)} tools, {opts.warmup} warm-up + {opts.rounds} rounds")
        series = run_rounds(running, cases, opts.rounds, opts.warmup, log)
        results, ratios, samples = results_and_ratios(series)
        print_table(results, ratios, cases, tools)
        if opts.no_trees:
            summaries = {c.df.name: {"status": "not available: --no-trees", "image": None, "entries": None,
                                     "by_type": None, "file_bytes": None} for c in cases}  # fmt: skip
        else:
            log("\ntrees (against sandboxlite's image; owners and times not compared):")
            trees, summaries = compare_trees(tools, cases, series, log)
    finally:
        cleanup = {}
        if not opts.keep:
            for case in cases:
                for t in running:
                    try:
                        t.remove(case.tag(t.name))
                    except Exception as e:  # noqa: BLE001 - reported, not raised
                        t.notes.append(f"cleanup of {case.tag(t.name)} failed: {e}")
            shutil.rmtree(work, ignore_errors=True)
        if not opts.keep:
            for t in running:
                try:
                    cleanup |= t.finish()
                except Exception as e:  # noqa: BLE001 - reported, not raised
                    t.notes.append(f"cleanup failed: {e}")
    doc["tools"] = [t.describe() for t in tools]
    doc["results"] = results
    doc["ratios"] = ratios
    doc["sandboxlite_trees"] = summaries
    doc["tree_diff"] = trees
    doc["cleanup"] = cleanup | {"kept": opts.keep, "work_dir": str(work) if opts.keep else None}
    doc["notes"] = NOTES
    doc["machine"]["load_avg_end"] = load_avg()
    doc["wall_s"] = round(time.monotonic() - t_start, 1)
    doc["samples"] = samples
    path = opts.json or HERE / "results" / f"build-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(doc, path)
    log(f"wall {doc['wall_s']:.0f} s\nJSON: {path}")
    sl_rows = [r for r in results if r["tool"] == "sandboxlite"]
    return 0 if sl_rows and all(r["status"] == "ok" for r in sl_rows) else 1


NOTES = [
    ("docker and podman mount /etc/hostname, /etc/hosts and /etc/resolv.conf into every RUN container: "
     "`rm /etc/hostname` fails there (Device or resource busy), so the remove Dockerfile deletes /etc/motd instead"),
    ("buildah bud runs with --layers (podman build's default; without it bud keeps no layer cache) and with a "
     "storage of its own (--root), so that its cache is not podman's"),
    ("cold: the tool's image from the previous round is removed first (untimed); sandboxlite's snapshot layers "
     "live in a store of this run's own (SANDBOXLITE_SNAPSHOTS), emptied then too"),
]

if __name__ == "__main__":
    sys.exit(main())
