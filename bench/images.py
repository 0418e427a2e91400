#!/usr/bin/env python3
"""Container images in sandboxlite against the tools people use, in one run on this machine:
``bench/images.py [--quick] [--rounds N] [--import-rounds N] [--only LIST] [--json PATH]``.

    import   ``store.import_archive(docker-archive)`` into an empty store (blobs + the unpacked tree,
             handed to the sandbox uid as root) against ``skopeo copy docker-archive:F oci:DIR`` (a
             fresh DIR each round), ``skopeo copy`` + ``umoci unpack`` (what it takes to get a tree
             with those tools) and ``docker load -i F`` (only with a running docker daemon): the
             ~350 MB image (the built ``lean`` tree as one layer) and the ~1.3 GB one (``science``)
    pull     ``store.pull_image(REF, insecure=True)`` from a registry on loopback (Debian's
             docker-registry, the image pushed by skopeo) into an empty store, against
             ``skopeo copy docker://REF oci:DIR`` and that + ``umoci unpack``
    stored   image B = image A's layer + one small layer: blob bytes and unpacked-tree bytes after A,
             after A+B, and what each alone stores (blobs are shared; are the trees?)
    start    ``Sandbox(image=...)`` -> ``exec("true")`` -> ``close()`` with each imported image,
             against ``Sandbox(rootfs="science")`` (the built image) and the imported image's built
             twin, interleaved round by round
    reset    ``sb.exec("touch /x")`` (untimed), then ``sb.reset()`` timed, one open sandbox per image

Every measurement is reported as median, p90 (p99 from 100 samples on) and the ratio of medians
against its baseline from the same run (the machine is noisy: numbers from different runs are not
comparable).  The images are made once from the built ``lean`` and ``science`` trees (umoci, skopeo)
and cached in ``~/.cache/sandboxlite/bench-images/``, keyed by the tree's manifest digest.  The whole
run uses a scratch ``SANDBOXLITE_HOME`` under /var/tmp (removed at the end unless ``--keep``).  No
network but loopback.  JSON: ``bench/results/images-<time>.json`` (or ``--json PATH``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import json
import os
import platform
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))  # a checkout works without installing (and tests/ helpers import)

from sandboxlite.bench.core import (  # noqa: E402
    Series,
    machine_info,
    not_available,
    percentile,
    run_rounds,
    short_error,
)
from sandboxlite.bench.report import write_json  # noqa: E402

SCHEMA = "sandboxlite.bench-images/1"
MEASUREMENTS = ("import", "pull", "stored", "start", "reset")
SKOPEO = ("skopeo", "--insecure-policy")  # local files and a loopback registry: no signature policy applies
CACHE = Path.home() / ".cache" / "sandboxlite" / "bench-images"
RECIPE = "v1"  # part of the cache key: bump when the way images are made changes
P99_MIN_SAMPLES = 100  # below this p99 is the largest sample or close to it: not reported
B_LAYER_FILES = 4  # image B's own layer: this many files of 1 MiB of random bytes, and a text file
IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

clock = time.perf_counter


def log(text: str) -> None:
    print(text, flush=True)


# --- the images -------------------------------------------------------------------------------
@dataclasses.dataclass
class Image:
    """One image under test: a docker-archive (``docker save`` style) and its OCI layout."""

    key: str  # "lean", "science", "lean-b", ...
    archive: Path  # docker-archive tar
    ref: str  # the name inside the archive (docker.io/team/KEY:1)
    layout: Path | None = None  # OCI layout holding it (to push to the registry) ...
    tag: str | None = None  # ... under this tag
    twin: str | None = None  # the built image its tree was taken from
    facts: dict = dataclasses.field(default_factory=dict)  # sizes

    def label(self) -> str:
        size = self.facts.get("archive_bytes")
        return f"{self.key} ({size / 1e6:.0f} MB)" if size else self.key


@dataclasses.dataclass
class Images:
    small: Image  # ~350 MB (import, pull, start, reset) and image A of `stored`
    derived: Image | None = None  # image B of `stored`: small's layer + one small layer
    big: Image | None = None  # ~1.5 GB (import, start, reset); None in --quick


def _run(*argv: str, timeout: float = 3600) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


def _rootless() -> tuple[str, ...]:
    return ("--rootless",) if os.geteuid() != 0 else ()


def built_image(name: str) -> tuple[Path, dict]:
    """A built image of the default store: its root directory and manifest (for the cache key)."""
    from sandboxlite.images import image_root

    root = image_root(name)
    manifest = root.parent / "manifest.json"
    if not manifest.is_file():
        raise SystemExit(f"bench/images.py: the {name!r} image is not built ({root.parent}): "
                         f"sandboxlite rootfs build {name}")  # fmt: skip
    return root, json.loads(manifest.read_text())


def make_images(cache: Path, *, with_big: bool, log=log) -> Images:
    """The images, made from the built trees unless the cache holds them already."""
    small = make_image("lean", cache, with_derived=True, log=log)
    derived = small.facts.pop("_derived")
    big = make_image("science", cache, with_derived=False, log=log) if with_big else None
    return Images(small=small, derived=derived, big=big)


def make_image(name: str, cache: Path, *, with_derived: bool, log=log) -> Image:
    """The built image NAME's tree packed as one layer (umoci), as a docker-archive (skopeo), in
    ``cache/NAME-DIGEST/``; with ``with_derived`` also image B (tag ``b``: the same layer plus a
    small one), as a docker-archive of its own."""
    root, manifest = built_image(name)
    digest = str(manifest.get("digest", "")).split(":")[-1][:12] or "nodigest"
    d = cache / f"{name}-{digest}-{RECIPE}"
    done = d / "made.json"
    if not (done.is_file() and (not with_derived or "derived" in json.loads(done.read_text()))):
        t0 = clock()
        log(f"making the {name} images in {d} (once; cached by its manifest digest) ...")
        _make(root, manifest, name, d, with_derived)
        log(f"  made in {clock() - t0:.0f} s")
    facts = json.loads(done.read_text())
    img = Image(name, d / f"{name}.tar", f"docker.io/team/{name}:1", d / "layout", "a", name, facts["image"])
    if with_derived:
        b = facts["derived"]
        img.facts["_derived"] = Image(f"{name}-b", d / f"{name}-b.tar", f"docker.io/team/{name}-b:1", d / "layout", "b",
                                      None, b)  # fmt: skip
    return img


def _make(root: Path, manifest: dict, name: str, d: Path, with_derived: bool) -> None:
    from sandboxlite.images import oci

    work = d.with_name(d.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    layout = work / "layout"
    arch = oci.host_platform()
    _run("umoci", "init", "--layout", str(layout))
    _run("umoci", "new", "--image", f"{layout}:a")
    bundle = work / "bundle"
    _run("umoci", "unpack", *_rootless(), "--image", f"{layout}:a", str(bundle))
    _run("cp", "-a", f"{root}/.", str(bundle / "rootfs"))
    if os.geteuid() == 0:  # as in an image from a registry: root's files (the built tree is the sandbox uid's)
        _run("chown", "-R", "--no-dereference", "0:0", str(bundle / "rootfs"))
    _run("umoci", "repack", "--image", f"{layout}:a", str(bundle))
    shutil.rmtree(bundle)
    _run("umoci", "config", "--image", f"{layout}:a", "--architecture", arch.architecture, "--os", arch.os,
         "--config.env", IMAGE_PATH, "--config.cmd", "/bin/bash")  # fmt: skip
    _run(*SKOPEO, "copy", f"oci:{layout}:a", f"docker-archive:{work / (name + '.tar')}:team/{name}:1")
    facts: dict[str, Any] = {"recipe": RECIPE, "source": str(root), "source_digest": manifest.get("digest"),
                             "image": _facts(work / f"{name}.tar", layout, "a", root, manifest)}  # fmt: skip
    if with_derived:
        _run("umoci", "config", "--image", f"{layout}:a", "--config.label", "sandboxlite.bench=b", "--tag", "b")
        _run("umoci", "unpack", *_rootless(), "--image", f"{layout}:b", str(bundle))
        extra = bundle / "rootfs" / "opt" / "bench-b"
        extra.mkdir(parents=True)
        for i in range(B_LAYER_FILES):
            (extra / f"blob{i}.bin").write_bytes(os.urandom(1 << 20))
        (extra / "README").write_text("image B: image A's layer and this one\n")
        _run("umoci", "repack", "--image", f"{layout}:b", str(bundle))
        shutil.rmtree(bundle)
        _run(*SKOPEO, "copy", f"oci:{layout}:b", f"docker-archive:{work / (name + '-b.tar')}:team/{name}-b:1")
        facts["derived"] = _facts(work / f"{name}-b.tar", layout, "b", None, None)
    _run("umoci", "gc", "--layout", str(layout))
    (work / "made.json").write_text(json.dumps(facts, indent=1) + "\n")
    shutil.rmtree(d, ignore_errors=True)
    os.rename(work, d)


def _facts(archive: Path, layout: Path, tag: str, root: Path | None, manifest: dict | None) -> dict:
    """Sizes of an image: its archive, its layers (compressed in the layout, plain in the archive)."""
    index = json.loads((layout / "index.json").read_text())
    ref_name = "org.opencontainers.image.ref.name"
    desc = next(m for m in index["manifests"] if m.get("annotations", {}).get(ref_name) == tag)
    man = json.loads((layout / "blobs" / "sha256" / desc["digest"].split(":")[1]).read_text())
    out: dict[str, Any] = {"archive_bytes": archive.stat().st_size,
                           "layers_gzip_bytes": [layer["size"] for layer in man["layers"]],
                           "layers": len(man["layers"])}  # fmt: skip
    if root is not None:
        out["source_tree_bytes"] = du(root)
        out["source_files"] = (manifest or {}).get("file_count")
    return out


# --- small helpers ----------------------------------------------------------------------------
def du(*paths: Path, apparent: bool = False) -> int:
    """Bytes on disk of the paths together (a file hard-linked in two of them counts once)."""
    argv = ["du", "-s", "-c", "-B1", *(["--apparent-size"] if apparent else []), *map(str, paths)]
    out = _run(*argv)
    return int(out.strip().splitlines()[-1].split()[0])


def reachable_dir(parent: Path | str, prefix: str) -> Path:
    """A fresh directory the sandbox uid can traverse (as tests/conftest.py's host_dir_factory)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir=str(parent)))
    os.chmod(d, 0o755)
    return d


def remove(path: Path) -> None:
    from sandboxlite.images.manifest import remove_tree

    remove_tree(path)


@contextlib.contextmanager
def sandboxlite_home(path: Path) -> Iterator[Path]:
    """``SANDBOXLITE_HOME`` set to ``path`` for the block."""
    old = os.environ.get("SANDBOXLITE_HOME")
    os.environ["SANDBOXLITE_HOME"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("SANDBOXLITE_HOME", None)
        else:
            os.environ["SANDBOXLITE_HOME"] = old


def warm_cache(path: Path) -> None:
    """Read a file (or every file of a directory) once, untimed, so every runtime finds it cached."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def settle() -> None:
    """Untimed, before each timed import or pull: write back what the last one left dirty, so it
    is not billed to the next (sandboxlite fsyncs its blobs; skopeo and umoci do not)."""
    os.sync()


def summary(samples: list[float]) -> dict[str, Any]:
    s = sorted(samples)
    if not s:
        return {"n": 0, "median": None, "p90": None, "p99": None, "min": None, "max": None}
    return {"n": len(s), "median": percentile(s, 50), "p90": percentile(s, 90),
            "p99": percentile(s, 99) if len(s) >= P99_MIN_SAMPLES else None, "min": s[0], "max": s[-1]}  # fmt: skip


def tool_versions() -> dict[str, str]:
    def first(argv: list[str]) -> str:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"not available: {e}"
        text = (p.stdout or p.stderr).strip()
        return text.splitlines()[0] if p.returncode == 0 and text else f"not available: {text[-200:] or p.returncode}"

    out = {"skopeo": first(["skopeo", "--version"]), "umoci": first(["umoci", "--version"]),
           "docker-registry": first(["docker-registry", "--version"]), "du": first(["du", "--version"])}  # fmt: skip
    if shutil.which("docker"):
        out["docker_client"] = first(["docker", "version", "--format", "{{.Client.Version}}"])
        ok, why = docker_daemon()
        out["docker_server"] = first(["docker", "version", "--format", "{{.Server.Version}}"]) if ok else why
    else:
        out["docker_client"] = out["docker_server"] = "not available: no docker CLI"
    return out


def docker_daemon() -> tuple[bool, str]:
    """Whether ``docker info`` succeeds (a CLI and a running daemon); else why not."""
    if not shutil.which("docker"):
        return False, "no docker CLI on this machine"
    try:
        p = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`docker info` failed: {e}"
    if p.returncode != 0:
        err = [line for line in (p.stderr + p.stdout).splitlines()
               if "daemon" in line.lower() or "error" in line.lower()]
        return False, f"no running docker daemon (`docker info`: {(err or ['?'])[0].strip()[:160]})"
    return True, "ok"


# --- where sandboxlite's import spends its time ------------------------------------------------
class Phases:
    """Wraps a few of the store's functions for one call (measurement only) and adds up their time:
    ``blobs`` (archive read into the blob store: copy, sha256, fsync), ``fetch`` (a pull's download
    into it), ``unpack`` (decompress, check the diff_id, write the tree), ``chown`` (the tree given to
    the sandbox uid), ``manifest`` (files.tsv and manifest.json: every file of the tree read and
    hashed again).  The rest is everything else (locks, names, renames)."""

    TARGETS = (("oci", "read_archive", "blobs"), ("store", "pull", "fetch"), ("unpack", "unpack_image", "unpack"),
               ("store", "give_to_sandbox_user", "chown"), ("store", "write_manifest", "manifest"))  # fmt: skip

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def watching(self) -> Iterator[dict[str, float]]:
        from sandboxlite.images import oci, store, unpack

        modules = {"oci": oci, "store": store, "unpack": unpack}
        times: dict[str, float] = {}
        saved = []
        for mod, attr, phase in self.TARGETS:
            fn = getattr(modules[mod], attr)
            saved.append((modules[mod], attr, fn))
            setattr(modules[mod], attr, self._timed(fn, phase, times))
        try:
            yield times
        finally:
            for mod, attr, fn in saved:
                setattr(mod, attr, fn)

    @staticmethod
    def _timed(fn: Callable, phase: str, times: dict[str, float]) -> Callable:
        def wrapper(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                times[phase] = times.get(phase, 0.0) + clock() - t0

        return wrapper


# --- the benchmark ------------------------------------------------------------------------------
@dataclasses.dataclass
class Options:
    quick: bool = False
    rounds: int | None = None  # start/reset rounds
    import_rounds: int | None = None  # import/pull rounds
    warmup: int | None = None
    only: tuple[str, ...] = MEASUREMENTS
    json: Path | None = None
    baseline: str = "science"  # the built image every sandbox time is compared with
    keep: bool = False
    profile: str = "auto"  # cProfile one more import: auto (when sandboxlite is > 2x skopeo), always, never
    scratch_parent: Path = Path("/var/tmp")
    cache: Path = CACHE
    argv: tuple[str, ...] = ()

    def resolved(self) -> Options:
        if self.rounds is None:
            self.rounds = 20 if self.quick else 100
        if self.import_rounds is None:
            self.import_rounds = 1 if self.quick else 3
        if self.warmup is None:
            self.warmup = 1 if self.quick else 3
        return self


class Bench:
    def __init__(self, opts: Options, images: Images, log=log) -> None:
        self.opts, self.images, self.log = opts.resolved(), images, log
        self.results: list[dict] = []
        self.ratios: list[dict] = []
        self.samples: dict[str, list[float]] = {}
        self.notes: list[str] = []
        self.doc: dict[str, Any] = {}
        self.scratch = reachable_dir(opts.scratch_parent, "sandboxlite-bench-images-")
        self.store_home = self.scratch / "store"  # the home sandboxes start in
        self.store_home.mkdir(mode=0o755)
        self.rounds_dir = self.scratch / "rounds"  # a fresh home (or skopeo dir) per timed round
        self.rounds_dir.mkdir(mode=0o755)
        self.trash: list[Path] = []  # this measurement's round directories (removed after its last round)
        self.imported: dict[str, str] = {}  # image key -> its name in store_home (oci-ID)
        self.twins: dict[str, Path] = {}  # built image name -> its directory (linked into store_home)
        from sandboxlite import paths

        self.source_home = paths.home()  # the caller's store: where the built images are

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        t_start = clock()
        machine = machine_info()
        machine["nproc"] = int(_run("nproc").strip())
        machine["kernel_full"] = platform.platform()
        from sandboxlite.isolation.identity import run_as

        machine["sandbox_uid_gid"] = list(run_as() or ()) or None
        if machine.get("load_avg_start") and machine["load_avg_start"][0] > 1.5:
            self.log(f"warning: load average {machine['load_avg_start'][0]} at the start: the numbers will be noisy")
        self.doc = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "command": " ".join(["bench/images.py", *self.opts.argv]), "machine": machine,
                    "tools": tool_versions(), "params": self._params(), "images": self._image_facts()}  # fmt: skip
        self.log(f"scratch SANDBOXLITE_HOME: {self.store_home} (rounds in {self.rounds_dir})")
        try:
            with sandboxlite_home(self.store_home):
                for m in MEASUREMENTS:
                    if m in self.opts.only:
                        self.log(f"== {m}")
                        try:
                            getattr(self, f"measure_{m}")()
                        except Exception as e:  # noqa: BLE001 - recorded: the other measurements still run
                            self.log(f"  {m} failed: {short_error(e)}")
                            self.add_row(m, "-", "sandboxlite", "", [], f"not available: failed: {short_error(e)}")
                            if self.trash:
                                self._empty_trash()
        finally:
            if not self.opts.keep:
                remove(self.scratch)
            else:
                self.log(f"kept {self.scratch}")
        machine["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
        self.doc.update({"results": self.results, "ratios": self.ratios, "notes": self.notes,
                         "wall_s": round(clock() - t_start, 1), "samples": self.samples})  # fmt: skip
        return self.doc

    def _params(self) -> dict:
        o = self.opts
        return {"quick": o.quick, "rounds": o.rounds, "import_rounds": o.import_rounds, "warmup": o.warmup,
                "only": list(o.only), "baseline": o.baseline, "p99_min_samples": P99_MIN_SAMPLES,
                "timer": "time.perf_counter", "interleaving": "each round runs every runtime of a measurement once, "
                "the order rotated round by round (sandboxlite.bench.core.run_rounds)",
                "import_round": "a fresh SANDBOXLITE_HOME (sandboxlite) or a fresh directory (skopeo, umoci) per "
                "round; `sync` (untimed) before each timed call; the archive read once before the rounds",
                "ratio": "median of sandboxlite (or of the image) / median of the baseline, same run"}  # fmt: skip

    def _image_facts(self) -> dict:
        out = {}
        for role in ("small", "derived", "big"):
            img = getattr(self.images, role)
            if img is not None:
                out[role] = {"key": img.key, "ref": img.ref, "archive": str(img.archive), "twin": img.twin,
                             **{k: v for k, v in img.facts.items() if not k.startswith("_")}}  # fmt: skip
        return out

    # -- rows --------------------------------------------------------------------------------
    def add_row(self, metric: str, subject: str, runtime: str, unit: str, samples: list[float], status: str = "ok",
                extra: dict | None = None) -> dict:  # fmt: skip
        key = f"{metric}/{subject}/{runtime}"
        row = {"metric": metric, "subject": subject, "runtime": runtime, "unit": unit, "status": status,
               **summary(samples if status == "ok" else [])}  # fmt: skip
        if status == "ok" and not samples:
            row["status"] = "not available: no samples"
        row.update(extra or {})
        self.results.append(row)
        if samples:
            self.samples[key] = [round(v, 6) for v in samples]
        return row

    def add_ratio(self, metric: str, subject: str, mine: dict, base: dict, *, main: bool = False) -> dict:
        r: dict[str, Any] = {"metric": metric, "subject": subject, "runtime": mine["runtime"],
                             "baseline": base["runtime"],
                             "ratio": None, "ratio_p90": None, "main": main, "status": base["status"]}  # fmt: skip
        if mine["median"] and base["median"]:
            r["ratio"] = mine["median"] / base["median"]
            r["ratio_p90"] = mine["p90"] / base["p90"]
            r["status"] = "ok"
        elif not mine["median"]:
            r["status"] = f"{mine['runtime']} {mine['status']}"
        self.ratios.append(r)
        return r

    def rows_from(self, metric: str, subject: str, unit: str, series: list[Series]) -> list[dict]:
        rows = [self.add_row(metric, subject, s.runtime, unit, s.samples, "ok" if s.ok else s.status, s.extra)
                for s in series]  # fmt: skip
        for base in rows[1:]:
            self.add_ratio(metric, subject, rows[0], base, main=base is rows[1])
        return rows

    # -- 1. import ---------------------------------------------------------------------------
    def measure_import(self) -> None:
        from sandboxlite.images import store

        for img in (self.images.small, self.images.big):
            if img is None:
                continue
            self.log(f"  {img.label()}: {self.opts.import_rounds} round(s) of sandboxlite, skopeo, skopeo+umoci, "
                     "docker")
            warm_cache(img.archive)
            phases: list[dict[str, float]] = []
            source = f"docker-archive:{img.archive}"
            series = [Series("import", "sandboxlite", self._sl(lambda: store.import_archive(img.archive), phases)),
                      Series("import", "skopeo copy", self._skopeo(source, unpack=False)),
                      Series("import", "skopeo copy + umoci unpack", self._skopeo(source, unpack=True)),
                      self._docker_load(img)]  # fmt: skip
            try:
                self._rounds(series, self.opts.import_rounds, warmup=0)
                series[0].extra["phases_s"] = _phase_summary(phases)
                series[0].extra["mb_per_s"] = _mbps(img.facts.get("archive_bytes"), series[0].samples)
                self.rows_from("import", img.key, "s", series)
                self._maybe_profile("import", img.key, lambda: store.import_archive(img.archive), series)
            finally:
                self._empty_trash()

    def _sl(self, call: Callable[[], Any], phases: list[dict[str, float]]) -> Callable[[], float]:
        """One timed sandboxlite import or pull (``call``) into a fresh, empty store."""

        def run() -> float:
            home = self._fresh("home-")
            settle()
            with sandboxlite_home(home), Phases().watching() as times:
                t0 = clock()
                got = call()
                dt = clock() - t0
            if isinstance(got, list) and len(got) != 1:
                raise RuntimeError(f"expected one image, got {len(got)}")
            phases.append({**times, "total": dt})
            return dt

        return run

    def _skopeo(self, source: str, *, unpack: bool, src_flags: tuple[str, ...] = ()) -> Callable[[], float]:
        """One timed ``skopeo copy SOURCE oci:DIR`` into a fresh DIR (+ ``umoci unpack`` of it)."""

        def run() -> float:
            d = self._fresh("skopeo-")
            settle()
            t0 = clock()
            _run(*SKOPEO, "copy", "-q", *src_flags, source, f"oci:{d / 'layout'}:bench")
            if unpack:
                _run("umoci", "unpack", *_rootless(), "--image", f"{d / 'layout'}:bench", str(d / "bundle"))
            return clock() - t0

        return run

    def _fresh(self, prefix: str) -> Path:
        """A fresh directory for one round, removed only after the measurement's last round: removing
        a tree of 1 GB frees its blocks, and on a disk mounted with ``discard`` (as here) the file
        creations that follow can slow down, which would bill the next round for this one's cleanup."""
        d = reachable_dir(self.rounds_dir, prefix)
        self.trash.append(d)
        return d

    def _empty_trash(self) -> None:
        t0 = clock()
        for d in self.trash:
            remove(d)
        self.trash.clear()
        os.sync()
        self.log(f"  (removed this measurement's copies in {clock() - t0:.1f} s, untimed)")

    def _docker_load(self, img: Image) -> Series:
        ok, why = docker_daemon()
        if not ok:
            return not_available("import", "docker load", why)
        ref = img.ref.removeprefix("docker.io/")
        have = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False)
        if have.returncode == 0:  # each round removes what it loaded: never an image that was there before
            return not_available("import", "docker load", f"docker already has an image named {ref}; not touched "
                                 f"(docker rmi {ref} to measure docker load)")  # fmt: skip

        def run() -> float:
            subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)
            settle()
            t0 = clock()
            _run("docker", "load", "-q", "-i", str(img.archive))
            dt = clock() - t0
            subprocess.run(["docker", "rmi", "-f", ref], capture_output=True, check=False)
            return dt

        return Series("import", "docker load", run)

    def _rounds(self, series: list[Series], rounds: int, warmup: int) -> None:
        run_rounds(series, rounds, warmup, progress=self.log if rounds >= 10 else None)
        for s in series:
            if not s.ok:
                self.log(f"  {s.runtime}: {s.status}")

    def _maybe_profile(self, metric: str, subject: str, call: Callable[[], Any], series: list[Series]) -> None:
        """Where sandboxlite's time goes, by cProfile of one more import or pull (not in the rows):
        when it is more than 2x skopeo copy's (``--profile auto``; once per metric), or always."""
        mine, skopeo = summary(series[0].samples)["median"], summary(series[1].samples)["median"]
        slow = bool(mine and skopeo and mine / skopeo > 2)
        profiles = self.doc.setdefault("profile", {})
        if self.opts.profile == "never" or (self.opts.profile == "auto" and not slow) or metric in profiles:
            return
        self.log(f"  cProfile of one more sandboxlite {metric} of {subject} (sandboxlite/skopeo copy = "
                 f"{mine / skopeo if mine and skopeo else float('nan'):.2f}) ...")  # fmt: skip
        home = self._fresh("home-")
        prof = cProfile.Profile()
        settle()
        with sandboxlite_home(home), Phases().watching() as times:
            t0 = clock()
            prof.enable()
            try:
                call()
            finally:
                prof.disable()
            total = clock() - t0
        st = pstats.Stats(prof)
        top = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]  # by own time
        rows = [{"function": _fname(func), "calls": nc, "own_s": round(tt, 3), "cumulative_s": round(ct, 3)}
                for func, (_cc, nc, tt, ct, _callers) in top]  # fmt: skip
        profiles[metric] = {"subject": subject, "why": "sandboxlite/skopeo copy > 2" if slow else "--profile always",
                            "ratio": mine / skopeo if mine and skopeo else None,
                            "wall_s_with_cprofile": round(total, 3),
                            "phases_s": {k: round(v, 3) for k, v in times.items()}, "top_own_time": rows,
                            "note": "cProfile slows Python code, not the C work (hashlib, zlib, os calls): "
                            "Python-heavy parts look bigger than they are"}  # fmt: skip

    # -- 2. pull -----------------------------------------------------------------------------
    def measure_pull(self) -> None:
        from sandboxlite.images import store
        from tests.registry_helpers import start_registry

        img = self.images.small
        if img.layout is None:
            self.add_row("pull", img.key, "sandboxlite", "s", [], "not available: the image has no OCI layout to push")
            return
        reg = start_registry(self.scratch / "registry")
        try:
            ref = f"{reg.host}/team/{img.key}:1"
            t0 = clock()
            reg.push(f"oci:{img.layout}:{img.tag}", f"team/{img.key}:1")
            self.log(f"  registry {reg.host}, pushed {img.key} in {clock() - t0:.1f} s (untimed); "
                     f"{self.opts.import_rounds} round(s)")  # fmt: skip
            warm_cache(reg.dir / "data")
            phases: list[dict[str, float]] = []
            tls = ("--src-tls-verify=false",)

            def pull() -> Any:
                return store.pull_image(ref, insecure=True)

            series = [Series("pull", "sandboxlite", self._sl(pull, phases)),
                      Series("pull", "skopeo copy", self._skopeo(f"docker://{ref}", unpack=False, src_flags=tls)),
                      Series("pull", "skopeo copy + umoci unpack",
                             self._skopeo(f"docker://{ref}", unpack=True, src_flags=tls))]  # fmt: skip
            self._rounds(series, self.opts.import_rounds, warmup=0)
            series[0].extra["phases_s"] = _phase_summary(phases)
            series[0].extra["mb_per_s"] = _mbps(sum(img.facts.get("layers_gzip_bytes", [])), series[0].samples)
            series[0].extra["mb_per_s_of"] = "the compressed layers downloaded"
            self.rows_from("pull", img.key, "s", series)
            self._maybe_profile("pull", img.key, pull, series)
        finally:
            reg.stop()
            self._empty_trash()

    # -- 3. bytes stored -------------------------------------------------------------------------
    def measure_stored(self) -> None:
        from sandboxlite.images import store

        a, b = self.images.small, self.images.derived
        if b is None:
            self.add_row("stored", a.key, "sandboxlite", "bytes", [], "not available: no derived image")
            return
        self.log(f"  A = {a.key}, B = {b.key} (A's layer + a small one): import A, then B; then B alone")

        def blob_bytes() -> int:
            bs = store.blob_store()
            return sum(bs.size(d) for d in bs.digests())

        both, alone = reachable_dir(self.rounds_dir, "stored-"), reachable_dir(self.rounds_dir, "stored-b-")
        try:
            with sandboxlite_home(both):
                ia = store.import_archive(a.archive)[0]
                blobs_a, n_a = blob_bytes(), len(store.blob_store().digests())
                tree_a, store_a = du(ia.path / "root"), du(both / "oci", both / "rootfs")
                ib = store.import_archive(b.archive)[0]
                blobs_ab, n_ab = blob_bytes(), len(store.blob_store().digests())
                tree_b = du(ib.path / "root")
                trees_ab = du(ia.path / "root", ib.path / "root")  # hard links between them would count once
                store_ab = du(both / "oci", both / "rootfs")
                layers_b = [layer["digest"] for layer in ib.manifest["oci"]["layers"]]
                layers_a = [layer["digest"] for layer in ia.manifest["oci"]["layers"]]
            with sandboxlite_home(alone):
                store.import_archive(b.archive)
                blobs_b_alone = blob_bytes()
                store_b_alone = du(alone / "oci", alone / "rootfs")
        finally:
            remove(both)
            remove(alone)
            os.sync()
        trees_shared = trees_ab < 0.9 * (tree_a + tree_b)
        st = {"image_a": a.key, "image_b": b.key, "b_reuses_a_base_layer": layers_b[: len(layers_a)] == layers_a,
              "blobs": {"after_a": blobs_a, "after_a_and_b": blobs_ab, "added_by_b": blobs_ab - blobs_a,
                        "b_alone": blobs_b_alone, "sum_alone": blobs_a + blobs_b_alone,
                        "saved_by_sharing": blobs_a + blobs_b_alone - blobs_ab, "count_after_a": n_a,
                        "count_after_a_and_b": n_ab},
              "trees": {"a": tree_a, "b": tree_b, "a_and_b_together": trees_ab, "shared": trees_shared,
                        "added_by_b_on_disk": trees_ab - tree_a,
                        "how": "each image is a flattened tree ($SANDBOXLITE_HOME/rootfs/oci-ID/root); du of both "
                        "trees together counts a file hard-linked into both once: shared = together < 90% of the sum"},
              "store_on_disk": {"after_a": store_a, "after_a_and_b": store_ab, "added_by_b": store_ab - store_a,
                                "b_alone": store_b_alone, "sum_alone": store_a + store_b_alone},
              "unit": "bytes (blobs: their sizes; trees and store: du -B1, disk blocks, hard links once)"}  # fmt: skip
        self.doc["stored"] = st
        self.add_row("stored", "blobs", "A+B", "bytes", [float(blobs_ab)], extra={"sum_alone": blobs_a + blobs_b_alone})
        self.add_row("stored", "trees", "A+B", "bytes", [float(trees_ab)], extra={"sum_alone": tree_a + tree_b})
        self.add_row("stored", "store", "A+B", "bytes", [float(store_ab)], extra={"sum_alone": store_a + store_b_alone})
        self.notes.append(f"stored: B, imported after A, added {(blobs_ab - blobs_a) / 1e6:.1f} MB of blobs and "
                          f"{(trees_ab - tree_a) / 1e6:.1f} MB of tree on disk: "
                          + ("the trees share A's files" if trees_shared else "the trees share nothing, B's is a full "
                             "copy")
                          + f"; one image alone takes {store_a / 1e6:.0f} MB in the store for a "
                          f"{a.facts.get('archive_bytes', 0) / 1e6:.0f} MB archive (its blobs are kept after "
                          "unpacking)")

    # -- 4. cold start and 5. reset ----------------------------------------------------------------
    def subjects(self) -> list[tuple[str, dict]]:
        """(label, Sandbox keyword arguments): every imported image, then the baseline (a built image
        or "host"), then the built twins of the imported images.  The images are imported into the
        scratch store (untimed) and the built ones linked into it, once."""
        from sandboxlite.images import store

        out: list[tuple[str, dict]] = []
        twins = []
        for img in (self.images.small, self.images.big):
            if img is None:
                continue
            if img.key not in self.imported:
                t0 = clock()
                self.imported[img.key] = store.import_archive(img.archive)[0].name
                self.log(f"  {img.key} imported into the scratch store in {clock() - t0:.1f} s (untimed)")
            out.append((f"image={img.key}", {"image": img.ref}))
            if img.twin and img.twin != self.opts.baseline:
                twins.append(img.twin)
        for name in [self.opts.baseline, *twins]:
            out.append((f"rootfs={name}", {"rootfs": self._link_built(name)}))
        return out

    def _link_built(self, name: str) -> str:
        """The built image NAME of the caller's store, reachable by its name from the scratch store
        (a symlink: the sandbox starts from the very same tree)."""
        if name == "host" or name in self.twins:
            return name
        src = self.source_home / "rootfs" / name
        if not (src / "manifest.json").is_file():
            raise RuntimeError(f"the built image {name!r} is not there ({src}): sandboxlite rootfs build {name}")
        link = self.store_home / "rootfs" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(src)
        self.twins[name] = src
        return name

    def measure_start(self) -> None:
        from sandboxlite import Sandbox

        subjects = self.subjects()
        closes: dict[str, list[float]] = {label: [] for label, _ in subjects}

        def cycle(label: str, kwargs: dict) -> Callable[[], float]:
            def run() -> float:
                t0 = clock()
                sb = Sandbox(**kwargs)
                try:
                    res = sb.exec("true")
                    t1 = clock()
                finally:
                    sb.close()
                t2 = clock()
                if res.exit_code != 0:
                    raise RuntimeError(f"true exited {res.exit_code}: {res.stderr[-200:]!r}")
                closes[label].append(t2 - t1)
                return (t1 - t0) * 1e3

            return run

        series = [Series("start", label, cycle(label, kw)) for label, kw in subjects]
        os.sync()
        self.log(f"  {', '.join(label for label, _ in subjects)}: {self.opts.rounds} interleaved rounds "
                 f"({self.opts.warmup} warm-up)")  # fmt: skip
        self._rounds(series, self.opts.rounds, self.opts.warmup)
        cycles = []
        for s in series:  # the full cycle, close included (the warm-up rounds' closes dropped)
            c = closes[s.runtime][len(closes[s.runtime]) - len(s.samples):] if s.samples else []
            both = [x + y * 1e3 for x, y in zip(s.samples, c)]
            cycles.append(Series("cycle", s.runtime, s.fn, s.status, samples=both))
        base = len([img for img in (self.images.small, self.images.big) if img is not None])
        self._sandbox_rows("start", series, base)
        self._sandbox_rows("cycle", cycles, base)

    def measure_reset(self) -> None:
        from sandboxlite import Sandbox

        subjects = self.subjects()
        boxes = []

        def one(sb) -> Callable[[], float]:
            def run() -> float:
                r = sb.exec("touch /x")
                if r.exit_code != 0:
                    raise RuntimeError(f"touch /x exited {r.exit_code}: {r.stderr[-200:]!r}")
                t0 = clock()
                sb.reset()
                dt = clock() - t0
                if sb.exec("test -e /x").exit_code == 0:
                    raise RuntimeError("/x is still there after reset()")
                return dt * 1e3

            return run

        try:
            series = []
            for label, kw in subjects:
                sb = Sandbox(**kw)
                boxes.append(sb)
                series.append(Series("reset", label, one(sb)))
            self.log(f"  {len(series)} open sandboxes, {self.opts.rounds} interleaved rounds")
            self._rounds(series, self.opts.rounds, self.opts.warmup)
        finally:
            for sb in boxes:
                sb.close()
        base = len([img for img in (self.images.small, self.images.big) if img is not None])
        self._sandbox_rows("reset", series, base)

    def _sandbox_rows(self, metric: str, series: list[Series], n_images: int) -> None:
        """Rows of every subject; each image's ratio against the baseline (main) and its built twin."""
        rows = {s.runtime: self.add_row(metric, s.runtime, s.runtime, "ms", s.samples, "ok" if s.ok else s.status)
                for s in series}  # fmt: skip
        base = rows[f"rootfs={self.opts.baseline}"]
        for s in series[:n_images]:
            self.add_ratio(metric, s.runtime, rows[s.runtime], base, main=True)
            key = s.runtime.split("=", 1)[1]
            img = next(i for i in (self.images.small, self.images.big) if i is not None and i.key == key)
            twin = rows.get(f"rootfs={img.twin}")
            if twin is not None and twin is not base:
                self.add_ratio(metric, s.runtime, rows[s.runtime], twin)


def _fname(func: tuple) -> str:
    file, line, name = func
    if file == "~":
        return name
    return f"{Path(file).name}:{line}({name})"


def _phase_summary(phases: list[dict[str, float]]) -> dict[str, Any]:
    """Median seconds of each phase over the rounds (``rest`` = total minus the named phases)."""
    if not phases:
        return {}
    for p in phases:
        p["rest"] = p["total"] - sum(v for k, v in p.items() if k != "total")
    keys = list(dict.fromkeys(k for p in phases for k in p))
    return {k: round(percentile(sorted(p.get(k, 0.0) for p in phases), 50), 3) for k in keys}


def _mbps(nbytes: int | None, samples: list[float]) -> float | None:
    if not nbytes or not samples:
        return None
    return round(nbytes / 1e6 / percentile(sorted(samples), 50), 1)


# --- the table --------------------------------------------------------------------------------
def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "bytes":
        return f"{v / 1e6:.1f}MB"
    if unit == "s":
        return f"{v:.2f}s"
    return f"{v:.2f}ms" if v < 100 else f"{v:.0f}ms"


def format_table(doc: dict) -> str:
    """One line per measurement and baseline: what, median, p90, p99, the baseline's median, ratio."""
    lines = []
    hdr = (f"{'measurement':<34} {'median':>9} {'p90':>9} {'p99':>9} {'n':>4}  {'baseline':<28} {'base med':>9} "
           f"{'ratio':>6}")  # fmt: skip
    if doc["ratios"]:
        lines += [hdr, "-" * len(hdr)]
    rows = {(r["metric"], r["subject"], r["runtime"]): r for r in doc["results"]}
    done: set = set()
    for r in doc["ratios"]:
        mine = rows[(r["metric"], r["subject"], r["runtime"])]
        base = rows[(r["metric"], r["subject"], r["baseline"])] if r["metric"] in ("import", "pull") else \
            rows[(r["metric"], r["baseline"], r["baseline"])]  # fmt: skip
        what = f"{r['metric']} {r['subject']}" if r["metric"] in ("import", "pull") else f"{r['metric']} {r['runtime']}"
        u = mine["unit"]
        left = (f"{what:<34} {_num(mine['median'], u):>9} {_num(mine['p90'], u):>9} {_num(mine['p99'], u):>9} "
                f"{mine['n']:>4}")  # fmt: skip
        if (what, mine["runtime"]) in done:
            left = " " * len(left)
        done.add((what, mine["runtime"]))
        if r["status"] != "ok" and base["median"] is None:
            lines.append(f"{left}  {r['baseline']:<28} {base['status']}")
            continue
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        lines.append(f"{left}  {r['baseline']:<28} {_num(base['median'], u):>9} {ratio:>6}")
    for r in doc["results"]:  # rows with no ratio line (a baseline itself, or one that did not run)
        if r["runtime"] == "sandboxlite" and r["median"] is None:
            lines.append(f"{r['metric'] + ' ' + r['subject']:<34} {r['status']}")
    st = doc.get("stored")
    if st:
        bl, tr, so = st["blobs"], st["trees"], st["store_on_disk"]
        mb = lambda v: f"{v / 1e6:,.1f} MB"  # noqa: E731
        lines += ["", f"bytes stored: A = {st['image_a']}, B = {st['image_b']} (A's layer + one small layer; "
                  f"B reuses A's base layer: {st['b_reuses_a_base_layer']})",
                  f"  blobs       after A {mb(bl['after_a'])}, after A+B {mb(bl['after_a_and_b'])} (B added "
                  f"{mb(bl['added_by_b'])}); each alone: {mb(bl['sum_alone'])} -> shared saves "
                  f"{mb(bl['saved_by_sharing'])} "
                  f"(ratio A+B / sum alone {bl['after_a_and_b'] / bl['sum_alone']:.2f})",
                  f"  trees       A {mb(tr['a'])}, B {mb(tr['b'])}, both together {mb(tr['a_and_b_together'])}: "
                  f"{'shared (hard links)' if tr['shared'] else 'NOT shared (each image its own flattened copy)'}",
                  f"  whole store after A {mb(so['after_a'])}, after A+B {mb(so['after_a_and_b'])} (B added "
                  f"{mb(so['added_by_b'])}); each alone: {mb(so['sum_alone'])} (ratio "
                  f"{so['after_a_and_b'] / so['sum_alone']:.2f})"]  # fmt: skip
    for r in doc["results"]:
        if r.get("phases_s"):
            ph = r["phases_s"]
            parts = ", ".join(f"{k} {v:.2f}s" for k, v in ph.items() if k != "total")
            lines.append(f"{r['metric']} {r['subject']} sandboxlite phases (median): {parts} "
                         f"(total {ph['total']:.2f}s)")
    for metric, prof in (doc.get("profile") or {}).items():
        ph = ", ".join(f"{k} {v:.2f}s" for k, v in prof["phases_s"].items())
        lines.append(f"cProfile of one more {metric} of {prof['subject']} ({prof['why']}; "
                     f"{prof['wall_s_with_cprofile']:.2f}s under cProfile: {ph}), top own time:")
        for t in prof["top_own_time"][:10]:
            lines.append(f"  {t['own_s']:>7.2f}s own {t['cumulative_s']:>7.2f}s cum {t['calls']:>9} calls  "
                         f"{t['function']}")
    for n in doc.get("notes", []):
        lines.append(f"note: {n}")
    return "\n".join(lines)


# --- main -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> Options:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 import/pull round, the small image only, 20 sandbox rounds")
    ap.add_argument("--rounds", type=int, help="start/reset rounds (default 100, --quick 20)")
    ap.add_argument("--import-rounds", type=int, help="import/pull rounds (default 3, --quick 1)")
    ap.add_argument("--warmup", type=int, help="untimed start/reset rounds first (default 3, --quick 1)")
    ap.add_argument("--only", default=",".join(MEASUREMENTS), help=f"comma-separated: {','.join(MEASUREMENTS)}")
    ap.add_argument("--json", type=Path, help="default bench/results/images-<time>.json")
    ap.add_argument("--baseline", default="science", help="the built image sandbox times are compared with")
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                    help="cProfile one more import: when sandboxlite is > 2x skopeo (auto), always, never")
    ap.add_argument("--keep", action="store_true", help="keep the scratch SANDBOXLITE_HOME")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"where the made images are kept (default {CACHE})")
    a = ap.parse_args(argv)
    only = tuple(x.strip() for x in a.only.split(",") if x.strip())
    bad = [x for x in only if x not in MEASUREMENTS]
    if bad:
        ap.error(f"--only: unknown {', '.join(bad)} (choose from {', '.join(MEASUREMENTS)})")
    opts = Options(quick=a.quick, rounds=a.rounds, import_rounds=a.import_rounds, warmup=a.warmup, only=only,
                   json=a.json, baseline=a.baseline, keep=a.keep, profile=a.profile, cache=a.cache,
                   argv=tuple(sys.argv[1:] if argv is None else argv))  # fmt: skip
    return opts


def need_tools() -> None:
    missing = [t for t in ("skopeo", "umoci", "docker-registry", "du") if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"bench/images.py: {', '.join(missing)} missing: apt-get install -y --no-install-recommends "
                         "skopeo umoci docker-registry")  # fmt: skip


def run_and_report(opts: Options, images: Images, log=log) -> tuple[dict, Path]:
    """The benchmark on ``images``: the table printed, the JSON written; (document, JSON path)."""
    doc = Bench(opts, images, log).run()
    log("")
    log(format_table(doc))
    path = opts.json or HERE / "results" / f"images-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(doc, path)
    log(f"JSON: {path}")
    return doc, path


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv).resolved()
    need_tools()
    with_big = not opts.quick and any(m in opts.only for m in ("import", "start", "reset"))
    images = make_images(opts.cache, with_big=with_big)
    doc, _ = run_and_report(opts, images)
    failed = [r for r in doc["results"] if r["runtime"] == "sandboxlite" and r["status"] != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
