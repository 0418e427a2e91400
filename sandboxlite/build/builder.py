"""``sandboxlite image build``: an image from a Dockerfile, without a daemon.

Plan, then execute.  The Dockerfile is parsed (dockerfile.py) and walked stage by stage; every
instruction gets a cache key: the key before it, the instruction with its variables expanded,
and what it reads (a COPY's source files, by content; a RUN's environment, user, working
directory and network policy).  A key already in the cache (``$SANDBOXLITE_HOME/build/KEY.json``)
gives the state after the step at once: a rebuild with nothing changed reads JSON files only.

A stage's state is its base image (an image of the store, or ``scratch``), the snapshot layers
its steps made (a snapshot is a content-addressed layer: state/snapshot.py), and the image
config the instructions set (Env, WorkingDir, User, Cmd, Entrypoint, ExposedPorts, Labels).
A step that changes files runs in a sandbox started from that state (a ``RUN`` with the network
policy given, default the package registries' presets; a ``COPY`` through the file API, which
follows no symlink of the host), and its writes become the next layer.  The result is
flattened into the image store (base tree hard-linked, layers applied) and named by ``tag``.

What differs from docker: files in a sandboxlite image have one owner (the sandbox's one mapped
id: every file shows as owned by the user commands run as), so ``--chown`` is checked and
recorded but owns nothing, and a ``RUN chown`` to another id fails as in any single-id user
namespace.  Not supported, refused with the line: ``ADD`` of a URL or a git repository, ``RUN
--mount``/``--security``, ``HEALTHCHECK``, ``VOLUME``, ``ONBUILD``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..config import check_network
from ..errors import BuildError, ImageError, RootfsError, SandboxError
from ..images import images_dir, oci
from ..images.manifest import MANIFEST, give_to_sandbox_user, read_manifest, remove_tree, write_manifest
from ..jail.host import default_host
from ..jail.sandbox import Sandbox
from ..state.snapshot import OPAQUE, user_xattrs
from . import dockerfile
from .dockerfile import Instruction

DEFAULT_NETWORK = "allow:pypi,debian"
DEFAULT_SHELL = ("/bin/sh", "-c")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUN_TIMEOUT_S = 3600.0
# a build step's sandbox: long steps (compilers, package installs), big writes (kept in memory: the
# copy-on-write layer is a tmpfs until the step's snapshot)
BUILD_LIMITS = {"timeout_s": RUN_TIMEOUT_S, "cpu_s": int(RUN_TIMEOUT_S), "output_bytes": 1 << 20, "fsize_mb": 8192,
                "tmp_mb": 4096, "overlay_mb": 8192}  # fmt: skip
MAX_LAYERS = 12  # a stage's stack is flattened into one layer beyond this (the store stacks at most 16)
SCRATCH = "scratch"
# the snapshot's places and where they are in the image (a copy-on-write root keeps /tmp and the
# workdir's tmpfs apart from the root's upper)
PLACES = {"root": "", "tmp": "tmp", "testbed": "testbed"}
# what a jail mounts over an image: an empty directory of these names in a layer is a mount point
JAIL_POINTS = ("proc", "dev", "sys", "tmp", "testbed", "root", ".sl")
Say = Callable[[str], None]


# -------------------------------------------------------------------------------------------
# the state of a stage

@dataclass
class Config:
    """The image config the instructions set (an OCI config's ``config`` part)."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    user: str = ""
    cmd: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    exposed: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    shell: list[str] = field(default_factory=lambda: list(DEFAULT_SHELL))
    stopsignal: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping) -> Config:
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls) if f.name in doc})

    def image_config(self) -> oci.ImageConfig:
        return oci.ImageConfig(architecture=oci.host_platform().architecture, os="linux",
                               env=[f"{k}={v}" for k, v in self.env.items()], working_dir=self.workdir,
                               user=self.user, entrypoint=list(self.entrypoint), cmd=list(self.cmd),
                               exposed_ports=list(self.exposed), labels=dict(self.labels))  # fmt: skip


@dataclass
class State:
    """Where a stage is: its base image, the snapshot on it (None: the base as it is), its config,
    and the cache key of all that."""

    base: str
    snap: str | None
    config: Config
    key: str


@dataclass
class Step:
    """One instruction's report: what it was, whether the cache had it, and how long it took."""

    stage: int
    line: int
    text: str
    cached: bool
    seconds: float


@dataclass
class BuildResult:
    image: str  # the store's name of the image (oci-...)
    path: Path
    tag: str | None
    steps: list[Step]
    seconds: float

    @property
    def cached(self) -> int:
        return sum(s.cached for s in self.steps)


# -------------------------------------------------------------------------------------------
# the build

@dataclass
class Builder:
    """One build (``build()`` below is the way in)."""

    dockerfile: Path
    context: Path
    build_args: Mapping[str, str] = field(default_factory=dict)
    network: str = DEFAULT_NETWORK
    no_cache: bool = False
    say: Say = lambda _line: None  # noqa: E731
    output: Callable[[bytes], object] | None = None  # a RUN's output as it comes

    def __post_init__(self) -> None:
        self.file = self.dockerfile.name
        self.steps: list[Step] = []
        self.cache_dir = paths.home() / "build"
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.ignore = _dockerignore(self.context)
        self._tmp = Path(tempfile.mkdtemp(prefix="sandboxlite-build-"))

    # -- the walk --------------------------------------------------------------------------------
    def run(self, *, target: str | None = None) -> State:
        try:
            text = self.dockerfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise BuildError(f"cannot read the Dockerfile: {e}", file=str(self.dockerfile)) from None
        instructions = dockerfile.parse(text, file=self.file)
        stages = _split_stages(instructions, self.file)
        names = [s[0] for s in stages]
        if target is not None and target not in names:
            raise BuildError(f"no stage named {target!r} (the stages: {', '.join(n for n in names if n) or 'none named'})",
                             file=self.file)  # fmt: skip
        global_args = self._global_args(instructions)
        done: dict[str | int, State] = {}
        state: State | None = None
        try:
            for i, (name, body) in enumerate(stages):
                state = self._stage(i, body, global_args, done)
                done[i] = state
                if name:
                    done[name] = state
                if target is not None and name == target:
                    break
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
        assert state is not None
        return state

    def _global_args(self, instructions: list[Instruction]) -> dict[str, str]:
        out: dict[str, str] = {}
        for ins in instructions:
            if ins.keyword == "FROM":
                break
            at = self._at(ins)
            for k, v in dockerfile.pairs(dockerfile.expand(ins.text, out, **at), "ARG", **at):
                out[k] = self.build_args.get(k, v if v is not None else "")
        return out

    def _stage(self, index: int, body: list[Instruction], global_args: dict[str, str],
               done: dict[str | int, State]) -> State:  # fmt: skip
        frm = body[0]
        words = dockerfile.words(dockerfile.expand(frm.text, global_args, **self._at(frm)), **self._at(frm))
        if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
            raise BuildError(f"FROM takes IMAGE [AS NAME], got {frm.text!r}", file=self.file, line=frm.line)
        t0 = time.monotonic()
        state = self._from(words[0], done, frm)
        self._report(index, frm, state.key, cached=True, t0=t0)
        args: dict[str, str] = {}
        for ins in body[1:]:
            t0 = time.monotonic()
            state, cached = self._step(ins, state, args, global_args, done)
            self._report(index, ins, state.key, cached, t0)
        return state

    def _at(self, ins: Instruction) -> dict:
        """Where ``ins`` is, and its file's escape character, for dockerfile's readers."""
        return {"file": self.file, "line": ins.line, "escape": ins.escape}

    def _report(self, stage: int, ins: Instruction, key: str, cached: bool, t0: float) -> None:
        text = f"{ins.keyword} {ins.text}".strip()
        self.steps.append(Step(stage, ins.line, text, cached, time.monotonic() - t0))
        shown = text if len(text) <= 100 else text[:97] + "..."
        self.say(f"[{stage + 1}] {self.file}:{ins.line} {shown}{'  (cached)' if cached else ''}")

    def _from(self, ref: str, done: dict[str | int, State], ins: Instruction) -> State:
        if ref.lower() in done:
            prev = done[ref.lower()]
            return State(prev.base, prev.snap, Config.from_json(prev.config.to_json()), prev.key)
        if ref == SCRATCH:
            base = scratch_image()
            return State(base, None, Config(), _digest("from", "scratch"))
        name = _find_base(ref, self.file, ins.line)
        manifest = images_dir() / name / MANIFEST
        config = _config_of(read_manifest(manifest.parent))
        return State(name, None, config, _digest("from", name, manifest.read_bytes()))

    # -- one instruction -------------------------------------------------------------------------
    def _step(self, ins: Instruction, state: State, args: dict[str, str], global_args: dict[str, str],
              done: dict[str | int, State]) -> tuple[State, bool]:  # fmt: skip
        kw = ins.keyword
        scope = {**args, **state.config.env}  # (ENV wins over ARG, as in docker)

        at = self._at(ins)

        def ex(text: str) -> str:  # (variables expanded; quotes and escapes still to be read)
            return dockerfile.expand(text, scope, **at)

        def one(text: str) -> str:  # one word, quotes and escapes read (spaces kept)
            return dockerfile.unquote(ex(text), **at).strip()

        if kw == "ARG":
            for k, v in dockerfile.pairs(ex(ins.text), "ARG", **at):
                default = global_args.get(k) if v is None else v
                args[k] = self.build_args.get(k, default if default is not None else "")
            return _with_key(state, "ARG", ins.text, sorted(args.items())), True
        if kw in ("RUN", "COPY", "ADD"):
            return self._files_step(ins, state, args, scope, done)
        config = Config.from_json(state.config.to_json())
        if kw == "ENV":
            for k, v in dockerfile.pairs(ex(ins.text), "ENV", **at):
                config.env[k] = v or ""
        elif kw == "LABEL":
            for k, v in dockerfile.pairs(ex(ins.text), "LABEL", **at):
                config.labels[k] = v or ""
        elif kw == "WORKDIR":
            path = one(ins.text)
            if not path:
                raise BuildError("WORKDIR needs a path", file=self.file, line=ins.line)
            config.workdir = os.path.normpath(os.path.join(config.workdir or "/", path))
        elif kw == "USER":
            user = one(ins.text)
            if not user or len(user.split()) != 1:
                raise BuildError(f"USER takes one USER[:GROUP], got {ins.text!r}", file=self.file, line=ins.line)
            config.user = user
        elif kw in ("CMD", "ENTRYPOINT"):
            argv = ins.json if ins.json is not None else [*config.shell, ins.text]
            if kw == "CMD":
                config.cmd = argv
            else:
                config.entrypoint = argv
                config.cmd = [] if not state.config.entrypoint and ins.json is None else config.cmd
        elif kw == "SHELL":
            if not ins.json:
                raise BuildError('SHELL takes the JSON form: SHELL ["/bin/bash", "-c"]', file=self.file, line=ins.line)
            config.shell = list(ins.json)
        elif kw == "EXPOSE":
            for p in dockerfile.words(ex(ins.text), **at):
                port, _, proto = p.partition("/")
                if not port.isdigit() or not 0 < int(port) < 65536 or proto not in ("", "tcp", "udp", "sctp"):
                    raise BuildError(f"EXPOSE takes PORT[/tcp|udp|sctp], got {p!r}", file=self.file, line=ins.line)
                entry = f"{int(port)}/{proto or 'tcp'}"
                if entry not in config.exposed:
                    config.exposed.append(entry)
        elif kw == "STOPSIGNAL":
            config.stopsignal = one(ins.text)
        elif kw == "MAINTAINER":
            config.labels["maintainer"] = ins.text
        else:  # (dockerfile.parse refuses what it does not know)
            raise BuildError(f"{kw} is not supported", file=self.file, line=ins.line)
        key = _digest(state.key, kw, json.dumps(config.to_json(), sort_keys=True))
        return State(state.base, state.snap, config, key), True

    def _files_step(self, ins: Instruction, state: State, args: dict[str, str], scope: dict[str, str],
                    done: dict[str | int, State]) -> tuple[State, bool]:  # fmt: skip
        if ins.keyword == "RUN":
            for flag in ("mount", "security"):
                if flag in ins.flags:
                    raise BuildError(f"RUN --{flag} is not supported by sandboxlite image build",
                                     file=self.file, line=ins.line,
                                     hint="copy what the step needs in with COPY first; RUN --network=none|default works")  # fmt: skip
            network = self._run_network(ins)
            argv = self._run_argv(ins, state.config)
            env = _run_env(state.config.env, args)
            key = _digest(state.key, "RUN", json.dumps([argv, sorted(env.items()), state.config.user,
                                                        state.config.workdir, network]))  # fmt: skip
            cached = self._cached(key)
            if cached is not None:
                return State(state.base, cached, state.config, key), True
            snap = self._run(ins, state, argv, env, network)
        else:
            plan = self._copy_plan(ins, state, scope, done)
            key = _digest(state.key, ins.keyword, json.dumps(plan.describe()))
            cached = self._cached(key)
            if cached is not None:
                return State(state.base, cached, state.config, key), True
            snap = self._copy(ins, state, plan)
        self._remember(key, snap)
        return State(state.base, snap, state.config, key), False

    # -- the cache -------------------------------------------------------------------------------
    def _cached(self, key: str) -> str | None:
        """The snapshot after the step ``key`` when the cache has it and it is still in the store."""
        if self.no_cache:
            return None
        try:
            doc = json.loads((self.cache_dir / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        snap = doc.get("snap")
        if snap is None:
            return None
        try:
            _store().meta(snap)
        except SandboxError:  # (the snapshot store is a tmpfs: gone at a reboot)
            return None
        return snap

    def _remember(self, key: str, snap: str) -> None:
        path = self.cache_dir / f"{key}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"snap": snap, "created": time.time()}))
        os.replace(tmp, path)

    # -- RUN -------------------------------------------------------------------------------------
    def _run_network(self, ins: Instruction) -> str:
        flag = ins.flags.get("network")
        if flag in (None, "default"):
            return self.network
        if flag == "none":
            return "none"
        raise BuildError(f"RUN --network={flag} is not supported (none or default)", file=self.file, line=ins.line,
                         hint="the build's network policy is set with sandboxlite image build --network")  # fmt: skip

    def _run_argv(self, ins: Instruction, config: Config) -> list[str]:
        if ins.json is not None:
            if not ins.json:
                raise BuildError("RUN [] runs nothing", file=self.file, line=ins.line)
            return list(ins.json)
        script = ins.text
        if ins.heredocs:
            only, _, rest = script.strip().partition(" ")
            if len(ins.heredocs) == 1 and not rest and only.startswith("<<"):
                return [*config.shell, ins.heredocs[0][1]]  # RUN <<EOF: the body is the script
            script = script + "\n" + "".join(body + name + "\n" for name, body in ins.heredocs)
        return [*config.shell, script]

    def _sandbox(self, state: State, *, network: str = "none", env: Mapping[str, str] | None = None,
                 user: str | None = None, workdir: str | None = None):  # fmt: skip
        store = _store()
        snap = store.meta(state.snap) if state.snap else None
        limits = BUILD_LIMITS
        sb = Sandbox(rootfs=state.base, snapshot=snap, network=network, env=dict(env or {}), user=user or None,
                     workdir=workdir or "/", limits=limits, ignore_chown=True)  # fmt: skip
        plan = sb.jail.plan
        if not plan.copy_on_write:  # (its writes would not be the image's: never build on silently)
            sb.close()
            raise BuildError(f"a build step needs a copy-on-write root, and this sandbox has none: {plan.cow_reason}",
                             file=self.file, hint="sandboxlite doctor says what the host lacks")  # fmt: skip
        return sb

    def _run(self, ins: Instruction, state: State, argv: list[str], env: dict[str, str], network: str) -> str:
        user = self._numeric_user(state, ins)
        tail = _Tail()

        def out(chunk: bytes) -> None:
            tail.feed(chunk)
            if self.output is not None:
                self.output(chunk)

        with self._sandbox(state, network=network, env=env, user=user, workdir=state.config.workdir) as sb:
            apt_conf = _apt_as_root(sb)
            r = sb.exec(argv, timeout=RUN_TIMEOUT_S, on_stdout=out, on_stderr=out)
            if apt_conf is not None:
                try:
                    sb.remove(apt_conf)
                except SandboxError:
                    pass  # (the step removed it, or /etc/apt with it)
            if r.exit_code != 0:
                why = "timed out" if r.timed_out else f"exited with code {r.exit_code}"
                raise BuildError(f"RUN {why}: {_short(ins.text)}\n{tail.text()}", file=self.file, line=ins.line,
                                 hint=None if network != "none" or "network" in ins.flags else
                                 "the build runs without network unless --network allows it")  # fmt: skip
            return self._keep(sb, state)

    def _numeric_user(self, state: State, ins: Instruction) -> str | None:
        """The stage's USER as UID:GID, looked up in the stage's own /etc/passwd and /etc/group
        (a RUN useradd before it counts)."""
        spec = state.config.user
        if not spec:
            return None
        user, _, group = spec.partition(":")
        if user.isdigit() and (not group or group.isdigit()):
            return spec
        with self._sandbox(state) as sb:
            passwd = _read_text(sb, "/etc/passwd")
            groups = _read_text(sb, "/etc/group")
        try:
            uid, gid = _lookup(spec, passwd, groups)
        except KeyError as e:
            raise BuildError(f"USER {spec}: the image has no {e.args[0]}", file=self.file, line=ins.line,
                             hint="create it first (RUN useradd ...), or give numbers: USER 1000:1000") from None
        return f"{uid}:{gid}"

    def _keep(self, sb, state: State) -> str:
        """The sandbox's writes as the next layer (a long stack is flattened first)."""
        snap = sb.snapshot()
        if snap.depth > MAX_LAYERS:
            snap = snap.flatten()
        return snap.name

    # -- COPY and ADD ----------------------------------------------------------------------------
    def _copy_plan(self, ins: Instruction, state: State, scope: dict[str, str],
                   done: dict[str | int, State]) -> _CopyPlan:  # fmt: skip
        kw, flags, at = ins.keyword, ins.flags, self._at(ins)
        for flag in ("link", "parents", "exclude", "checksum", "keep-git-dir"):
            if flag in flags and flag not in ("link",):
                raise BuildError(f"{kw} --{flag} is not supported by sandboxlite image build", file=self.file,
                                 line=ins.line)  # fmt: skip
        if ins.json is not None:
            items = [dockerfile.unquote(dockerfile.expand(w, scope, **at), **at) for w in ins.json]
        else:
            items = dockerfile.words(dockerfile.expand(ins.text, scope, **at), **at)
        heredocs = dict(ins.heredocs)
        if len(items) < 2:
            raise BuildError(f"{kw} takes SOURCE... DEST, got {ins.text!r}", file=self.file, line=ins.line)
        *sources, dest = items
        workdir = state.config.workdir or "/"
        dest_abs = os.path.normpath(os.path.join(workdir, dest)) + ("/" if dest.endswith("/") else "")
        chmod = flags.get("chmod")
        if chmod is not None and not (chmod.isdigit() and set(chmod) <= set("01234567") and len(chmod) <= 4):
            raise BuildError(f"--chmod takes an octal mode, got {chmod!r}", file=self.file, line=ins.line)
        chown = dockerfile.unquote(dockerfile.expand(flags["chown"], scope, **at), **at) if "chown" in flags else None
        src_from = flags.get("from")
        plan = _CopyPlan(kw, dest_abs, chmod, chown, src_from)
        if src_from is not None:
            if kw == "ADD":
                raise BuildError("ADD has no --from (COPY --from does)", file=self.file, line=ins.line)
            plan.from_state = self._from_source(src_from, done, ins)
            plan.sources = [("stage", s) for s in sources]
            return plan
        for s in sources:
            if s.startswith("<<") and s.lstrip("<-").strip("'\"") in heredocs:
                name = s.lstrip("<-").strip("'\"")
                plan.sources.append(("heredoc", name))
                plan.heredocs[name] = heredocs[name]
                continue
            if kw == "ADD" and ("://" in s or s.startswith("git@")):
                raise BuildError(f"ADD of a URL ({s}) is not supported by sandboxlite image build", file=self.file,
                                 line=ins.line, hint="download it in a RUN step (curl/wget/pip) with the network "
                                 "policy allowing its host")  # fmt: skip
            matches = self._context_matches(s, ins)
            plan.sources.extend(("context", m) for m in matches)
        plan.digest = self._context_digest([m for kind, m in plan.sources if kind == "context"])
        return plan

    def _from_source(self, ref: str, done: dict[str | int, State], ins: Instruction) -> State:
        if ref in done:
            return done[ref]
        if ref.isdigit() and int(ref) in done:
            return done[int(ref)]
        try:
            name = _find_base(ref, self.file, ins.line)
        except BuildError:
            raise BuildError(f"--from={ref}: no earlier stage and no image of that name", file=self.file,
                             line=ins.line) from None  # fmt: skip
        manifest = images_dir() / name / MANIFEST
        return State(name, None, Config(), _digest("from", name, manifest.read_bytes()))

    def _context_matches(self, pattern: str, ins: Instruction) -> list[str]:
        """Context paths (relative, '.' for the whole context) that ``pattern`` names; none: an error."""
        rel = os.path.normpath(pattern.lstrip("/")) if pattern not in (".", "./", "/") else "."
        if rel.startswith(".."):
            raise BuildError(f"{pattern}: outside the build context", file=self.file, line=ins.line)
        if not any(c in rel for c in "*?["):
            if not os.path.lexists(self.context / rel):
                raise BuildError(f"{pattern}: not found in the build context ({self.context})", file=self.file,
                                 line=ins.line)  # fmt: skip
            if rel != "." and self.ignore.excluded(rel):
                raise BuildError(f"{pattern}: excluded by .dockerignore", file=self.file, line=ins.line)
            return [rel]
        found = sorted(p for p in _walk_rel(self.context) if fnmatch.fnmatchcase(p, rel) and not self.ignore.excluded(p))
        if not found:
            raise BuildError(f"{pattern}: no file in the build context matches", file=self.file, line=ins.line)
        return found

    def _context_digest(self, rels: list[str]) -> str:
        h = hashlib.sha256()
        for rel in rels:
            for path, st in _entries(self.context, rel, self.ignore):
                h.update(f"{path}\0{stat.S_IFMT(st.st_mode)}\0{stat.S_IMODE(st.st_mode)}\0".encode())
                full = self.context / path
                if stat.S_ISREG(st.st_mode):
                    with open(full, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            h.update(block)
                elif stat.S_ISLNK(st.st_mode):
                    h.update(os.readlink(full).encode("utf-8", "surrogateescape"))
                h.update(b"\1")
        return h.hexdigest()

    def _copy(self, ins: Instruction, state: State, plan: _CopyPlan) -> str:
        stage_dir = Path(tempfile.mkdtemp(dir=self._tmp))
        items = self._gather(ins, plan, stage_dir)
        many = len(items) > 1 or any(kind == "dir" for kind, _ in items)
        into_dir = plan.dest.endswith("/") or many
        with self._sandbox(state, workdir="/") as sb:
            dest = plan.dest.rstrip("/") or "/"
            if into_dir:
                sb.mkdir(dest)
            placed: list[str] = []
            for kind, host in items:
                if kind == "dir":  # a directory's contents go into the destination
                    for child in sorted(os.listdir(host)):
                        target = os.path.join(dest, child)
                        _replace(sb, target)
                        sb.upload(host / child, target)
                        placed.append(target)
                else:
                    target = os.path.join(dest, host.name) if into_dir else dest
                    if not into_dir:
                        sb.mkdir(os.path.dirname(target) or "/")
                    _replace(sb, target)
                    sb.upload(host, target)
                    placed.append(target)
            if plan.chmod is not None and placed:
                r = sb.exec(["chmod", "-R", plan.chmod, "--", *placed])
                if r.exit_code != 0:
                    raise BuildError(f"{ins.keyword} --chmod={plan.chmod}: {r.stderr.decode(errors='replace').strip()}",
                                     file=self.file, line=ins.line)  # fmt: skip
            if plan.chown is not None:
                _check_chown(sb, plan.chown, self.file, ins.line)
            return self._keep(sb, state)

    def _gather(self, ins: Instruction, plan: _CopyPlan, stage_dir: Path) -> list[tuple[str, Path]]:
        """The sources on the host, as (kind, path): "dir" (its contents are copied) or "file"."""
        items: list[tuple[str, Path]] = []
        for n, (kind, src) in enumerate(plan.sources):
            if kind == "heredoc":
                p = stage_dir / f"h{n}"
                p.mkdir()
                f = p / src
                f.write_text(plan.heredocs[src])
                items.append(("file", f))
            elif kind == "context":
                path = self.context / src if src != "." else self.context
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode):
                    copy = stage_dir / f"c{n}"
                    _copy_tree(path, copy, self.context, self.ignore)
                    items.append(("dir", copy))
                elif plan.kind == "ADD" and _is_archive(path):
                    out = stage_dir / f"a{n}"
                    _extract(path, out, self.file, ins.line)
                    items.append(("dir", out))
                else:
                    d = stage_dir / f"f{n}"
                    d.mkdir()
                    target = d / os.path.basename(src)
                    if stat.S_ISLNK(st.st_mode):
                        os.symlink(os.readlink(path), target)
                    else:
                        shutil.copy2(path, target)
                    items.append(("file", target))
            else:  # from another stage or image
                assert plan.from_state is not None
                out = stage_dir / f"s{n}"
                out.mkdir()
                with self._sandbox(plan.from_state) as other:
                    try:
                        info = other.stat(src)
                    except SandboxError as e:
                        raise BuildError(f"COPY --from={plan.src_from}: {src}: {e.message}", file=self.file,
                                         line=ins.line) from None  # fmt: skip
                    target = out / (os.path.basename(src.rstrip("/")) or "root")
                    other.download(src, target)
                items.append(("dir", target) if info.type == "dir" else ("file", target))
        return items


@dataclass
class _CopyPlan:
    kind: str
    dest: str
    chmod: str | None
    chown: str | None
    src_from: str | None
    sources: list[tuple[str, str]] = field(default_factory=list)
    heredocs: dict[str, str] = field(default_factory=dict)
    digest: str = ""
    from_state: State | None = None

    def describe(self) -> list:
        return [self.kind, self.dest, self.chmod, self.chown, self.src_from, self.sources, sorted(self.heredocs.items()),
                self.digest, self.from_state.key if self.from_state else None]  # fmt: skip


# -------------------------------------------------------------------------------------------
# the result in the store

def build(dockerfile_path: str | os.PathLike, context: str | os.PathLike, *, tag: str | None = None,
          build_args: Mapping[str, str] | None = None, target: str | None = None, network: str = DEFAULT_NETWORK,
          no_cache: bool = False, say: Say | None = None,
          output: Callable[[bytes], object] | None = None) -> BuildResult:  # fmt: skip
    """Build the Dockerfile at ``dockerfile_path`` with ``context`` as its build context; the
    image is installed in the store (``oci-ID``) and named ``tag`` when given.  ``say`` gets a
    line per step, ``output`` every RUN's output as it comes.  BuildError (with the line) when a
    step fails or an instruction is not supported."""
    t0 = time.monotonic()
    name = str(oci.parse_reference(tag)) if tag else None
    check_network(network, "network")
    ctx = Path(context)
    if not ctx.is_dir():
        raise BuildError(f"the build context {ctx} is not a directory", file=str(dockerfile_path))
    b = Builder(Path(dockerfile_path), ctx.resolve(), dict(build_args or {}), network, no_cache,
                say or (lambda _line: None), output)  # fmt: skip
    state = b.run(target=target)
    image, path = install(state)
    if name is not None:
        from ..images.store import name_image

        name_image(image, [name])
    return BuildResult(image, path, name, b.steps, time.monotonic() - t0)


def install(state: State) -> tuple[str, Path]:
    """The image of ``state`` in the store: the base's tree, hard-linked, with the layers applied
    and the workdir made; named by the state's key (an image already there is used as it is)."""
    ident = _digest(state.key, "image")
    name = "oci-" + ident[:12]
    final = images_dir() / name
    if (final / MANIFEST).is_file():
        return name, final
    work = Path(tempfile.mkdtemp(prefix=f".{name}.build-", dir=images_dir()))
    os.chmod(work, 0o755)
    try:
        root = work / "root"
        base_root = images_dir() / state.base / "root"
        r = subprocess.run(["cp", "-al", "--", str(base_root), str(root)], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"could not link the base image's tree: {r.stderr.strip()}")
        if state.snap is not None:
            snap = _store().meta(state.snap).flatten()
            layer = Path(_store().layers_dir) / snap.name
            for place, where in PLACES.items():
                if (layer / place).is_dir() and (place == "root" or any(os.scandir(layer / place))):
                    target = root / where
                    target.mkdir(exist_ok=True)
                    _apply(layer / place, target)
            base_names = set(os.listdir(base_root))
            for point in JAIL_POINTS:  # made in the upper as mount points, where the base lacks them
                p = root / point
                if point not in base_names and p.is_dir() and not p.is_symlink() and not any(os.scandir(p)):
                    os.rmdir(p)
        workdir = state.config.workdir
        if workdir:
            (root / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        give_to_sandbox_user(root)
        config = state.config.image_config()
        doc = json.dumps({"config": dataclasses.asdict(config), "key": state.key}, sort_keys=True).encode()
        record = {"names": [], "manifest_digest": "", "config_digest": "sha256:" + hashlib.sha256(doc).hexdigest(),
                  "source": "build", "layers": [], "config": dataclasses.asdict(config)}  # fmt: skip
        write_manifest(work, name=name, profile=None, source="build", extra={"oci": record})
        try:
            os.rename(work, final)
        except OSError:
            if not (final / MANIFEST).is_file():
                raise
            remove_tree(work)
    except BaseException:
        remove_tree(work)
        raise
    return name, final


def _apply(src: Path, dst: Path) -> None:
    """Put the overlay layer ``src`` over the tree ``dst``: a whiteout removes, an opaque directory
    replaces, an entry replaces what was there (a directory over a directory merges).  Files are
    copied (``dst``'s are hard links shared with other images: never written in place)."""
    for entry in os.scandir(src):
        s, d = Path(entry.path), dst / entry.name
        st = entry.stat(follow_symlinks=False)
        try:
            dt: os.stat_result | None = os.lstat(d)
        except FileNotFoundError:
            dt = None
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:  # a whiteout
            if dt is not None:
                _remove(d, dt)
            continue
        if stat.S_ISDIR(st.st_mode):
            xattrs = dict(user_xattrs(str(s)))
            if dt is not None and (xattrs.get(OPAQUE) == b"y" or not stat.S_ISDIR(dt.st_mode)):
                _remove(d, dt)
                dt = None
            if dt is None:
                os.mkdir(d, 0o700)
            else:
                os.chmod(d, 0o700)
            _apply(s, d)
            os.chmod(d, stat.S_IMODE(st.st_mode))
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))
            continue
        if dt is not None:
            _remove(d, dt)
        if stat.S_ISREG(st.st_mode):
            shutil.copy2(s, d, follow_symlinks=False)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(s), d)
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        elif stat.S_ISFIFO(st.st_mode):
            os.mkfifo(d, stat.S_IMODE(st.st_mode))


def _remove(path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def scratch_image() -> str:
    """An empty container image in the store (``FROM scratch``), made once."""
    name = "oci-scratch"
    final = images_dir() / name
    if (final / MANIFEST).is_file():
        return name
    images_dir().mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=images_dir()))
    try:
        os.chmod(work, 0o755)
        (work / "root").mkdir(mode=0o755)
        give_to_sandbox_user(work / "root")
        config = oci.ImageConfig(os="linux", architecture=oci.host_platform().architecture)
        record = {"names": [], "manifest_digest": "", "config_digest": "sha256:" + "0" * 64, "source": "scratch",
                  "layers": [], "config": dataclasses.asdict(config)}  # fmt: skip
        write_manifest(work, name=name, profile=None, source="build", extra={"oci": record})
        try:
            os.rename(work, final)
        except OSError:
            remove_tree(work)
    except BaseException:
        remove_tree(work)
        raise
    return name


# -------------------------------------------------------------------------------------------
# helpers

def _store():
    return default_host().snapshot_store()


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogateescape"))
        h.update(b"\0")
    return h.hexdigest()


def _with_key(state: State, *parts: object) -> State:
    return State(state.base, state.snap, state.config, _digest(state.key, *parts))


def _split_stages(instructions: list[Instruction], file: str) -> list[tuple[str | None, list[Instruction]]]:
    stages: list[tuple[str | None, list[Instruction]]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            parts = ins.text.split()
            name = parts[2].lower() if len(parts) == 3 and parts[1].upper() == "AS" else None
            if name is not None and any(n == name for n, _ in stages):
                raise BuildError(f"two stages are named {name!r}", file=file, line=ins.line)
            stages.append((name, [ins]))
        elif stages:
            stages[-1][1].append(ins)
    if not stages:
        raise BuildError("no FROM: a Dockerfile starts with FROM (only ARG may come before it)", file=file)
    return stages


def _find_base(ref: str, file: str, line: int) -> str:
    """The store's image that ``ref`` names: a container reference, ``oci-ID``, or a built image."""
    from ..images.where import find

    if "/" not in ref and ":" not in ref and (images_dir() / ref / MANIFEST).is_file():
        return ref
    try:
        found = find(ref)
    except (ImageError, RootfsError):
        found = None
    if found is not None:
        return found
    raise BuildError(f"FROM {ref}: no such image in the store", file=file, line=line,
                     hint=f"sandboxlite image pull {ref} (or image import FILE, or rootfs build NAME) first")  # fmt: skip


def _config_of(manifest: dict) -> Config:
    cfg = (manifest.get("oci") or {}).get("config") or {}
    env = dict(item.split("=", 1) for item in cfg.get("env") or () if "=" in item)
    return Config(env=env, workdir=cfg.get("working_dir") or "", user=cfg.get("user") or "",
                  cmd=list(cfg.get("cmd") or []), entrypoint=list(cfg.get("entrypoint") or []),
                  exposed=list(cfg.get("exposed_ports") or []), labels=dict(cfg.get("labels") or {}))  # fmt: skip


def _run_env(env: Mapping[str, str], args: Mapping[str, str]) -> dict[str, str]:
    out = {**args, **env}
    out.setdefault("PATH", DEFAULT_PATH)
    return {k: v for k, v in out.items() if k and "=" not in k and "\0" not in k + v}


def _read_text(sb, path: str) -> str:
    try:
        return sb.read_file(path, max_bytes=4 << 20).decode("utf-8", "replace")
    except SandboxError:
        return ""


def _lookup(spec: str, passwd: str, groups: str) -> tuple[int, int]:
    user, _, group = spec.partition(":")
    rows = [line.split(":") for line in passwd.splitlines() if line and not line.startswith("#")]
    grows = [line.split(":") for line in groups.splitlines() if line and not line.startswith("#")]
    if user.isdigit():
        uid = int(user)
        entry = next((r for r in rows if len(r) >= 4 and r[2] == user), None)
        gid = int(entry[3]) if entry and entry[3].isdigit() else 0
    else:
        entry = next((r for r in rows if len(r) >= 4 and r[0] == user), None)
        if entry is None or not entry[2].isdigit():
            raise KeyError(f"user {user!r} in /etc/passwd")
        uid, gid = int(entry[2]), int(entry[3]) if entry[3].isdigit() else 0
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            g = next((r for r in grows if len(r) >= 3 and r[0] == group), None)
            if g is None or not g[2].isdigit():
                raise KeyError(f"group {group!r} in /etc/group")
            gid = int(g[2])
    return uid, gid


def _check_chown(sb, spec: str, file: str, line: int) -> None:
    try:
        _lookup(spec, _read_text(sb, "/etc/passwd"), _read_text(sb, "/etc/group"))
    except KeyError as e:
        raise BuildError(f"--chown={spec}: the image has no {e.args[0]}", file=file, line=line) from None


APT_CONF = "/etc/apt/apt.conf.d/00sandboxlite-build"


def _apt_as_root(sb) -> str | None:
    """For the step only: apt downloads as root.  Its own sandbox user (_apt) is an id the
    sandbox does not map, so apt-get update would fail on setgroups/seteuid; removed after the
    step (not in the image).  None where the image has no apt."""
    try:
        if sb.stat("/etc/apt/apt.conf.d", follow_symlinks=True).type != "dir":
            return None
        sb.write_file(APT_CONF, b'APT::Sandbox::User "root";\n')
    except SandboxError:
        return None
    return APT_CONF


def _replace(sb, target: str) -> None:
    """Make room for an upload at ``target`` (a file there is replaced; a directory merged into)."""
    try:
        info = sb.stat(target)
    except SandboxError:
        return
    if info.type != "dir":
        sb.remove(target)


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


class _Tail:
    """The last lines of a RUN's output, for its error."""

    def __init__(self, keep: int = 4096) -> None:
        self.buf = bytearray()
        self.keep = keep

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        del self.buf[: max(0, len(self.buf) - self.keep)]

    def text(self) -> str:
        return "\n".join(self.buf.decode("utf-8", "replace").splitlines()[-20:])


# -- the context -------------------------------------------------------------------------------

class _Ignore:
    """.dockerignore: patterns (``*``, ``?``, ``**``), ``!`` exceptions, the last match wins."""

    def __init__(self, patterns: list[tuple[bool, str]]) -> None:
        self.patterns = patterns

    def excluded(self, rel: str) -> bool:
        out = False
        for negate, pat in self.patterns:
            if _ignore_match(pat, rel):
                out = not negate
        return out


def _ignore_match(pat: str, rel: str) -> bool:
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):  # a pattern naming a directory covers what is in it
        if _glob(pat, "/".join(parts[:i])):
            return True
    return False


def _glob(pat: str, path: str) -> bool:
    if "**" not in pat:
        return fnmatch.fnmatchcase(path, pat) and path.count("/") == pat.count("/")
    head, _, tail = pat.partition("**")
    head, tail = head.rstrip("/"), tail.lstrip("/")
    if head and not (path == head or path.startswith(head + "/")):
        return False
    rest = path[len(head):].lstrip("/") if head else path
    if not tail:
        return True
    segs = rest.split("/")
    return any(_glob(tail, "/".join(segs[i:])) for i in range(len(segs)))


def _dockerignore(context: Path) -> _Ignore:
    path = context / ".dockerignore"
    patterns: list[tuple[bool, str]] = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return _Ignore([])
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pat = os.path.normpath(line.lstrip("!").strip().lstrip("/"))
        patterns.append((negate, pat))
    return _Ignore(patterns)


def _walk_rel(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for n in dirnames + filenames:
            out.append(n if rel == "." else f"{rel}/{n}")
    return out


def _entries(context: Path, rel: str, ignore: _Ignore):
    """(relative path, lstat) of ``rel`` and everything under it not ignored, sorted."""
    top = context / rel if rel != "." else context
    st = os.lstat(top)
    yield rel, st
    if stat.S_ISDIR(st.st_mode):
        for sub in sorted(_walk_rel(top)):
            p = sub if rel == "." else f"{rel}/{sub}"
            if not ignore.excluded(p):
                yield p, os.lstat(context / p)


def _copy_tree(src: Path, dst: Path, context: Path, ignore: _Ignore) -> None:
    """``src`` (in the context) to ``dst``, without what .dockerignore excludes; symlinks as links."""
    rel_top = os.path.relpath(src, context)
    dst.mkdir()
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        for n in sorted(dirnames + filenames):
            sub = n if rel == "." else f"{rel}/{n}"
            crel = sub if rel_top == "." else f"{rel_top}/{sub}"
            if ignore.excluded(crel):
                if n in dirnames:
                    dirnames.remove(n)
                continue
            s, d = Path(dirpath) / n, dst / sub
            st = os.lstat(s)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISDIR(st.st_mode):
                d.mkdir()
                shutil.copystat(s, d)
            elif stat.S_ISREG(st.st_mode):
                shutil.copy2(s, d)
    shutil.copystat(src, dst)


def _is_archive(path: Path) -> bool:
    try:
        return tarfile.is_tarfile(path)
    except OSError:
        return False


def _extract(path: Path, out: Path, file: str, line: int) -> None:
    """ADD's local archive, unpacked (a hostile member is refused, never followed out)."""
    out.mkdir()
    try:
        with tarfile.open(path) as tar:
            tar.extractall(out, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise BuildError(f"ADD {path.name}: cannot unpack it: {e}", file=file, line=line) from None


__all__ = ["build", "BuildResult", "Builder", "Step", "DEFAULT_NETWORK", "install", "scratch_image"]
