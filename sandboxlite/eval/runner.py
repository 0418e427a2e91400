"""``run_eval``: every (item, mode, repeat) of the selected domains, in parallel, resumable.

Each finished task is appended to ``results.jsonl`` at once (one JSON object per line); running
the same command again skips what is there, so Ctrl-C loses nothing but the tasks in flight.
Sandbox mode takes its sandboxes from a ``SandboxPool`` (reset between tasks, not recreated).

Failures are loud, never results: before any task one request goes to the model (``preflight``:
a bad URL, key or model name stops the run at once, ``ModelError``); a task that fails (the
model, the sandbox, the scorer) is recorded with its error and scores 0 without stopping the
run, and ``EvalResult.errors`` counts it (the CLI then exits non-zero); a domain whose data is
missing is skipped (``EvalResult.skipped_domains``).  A resume runs errored tasks again unless
``retry_errors=False``.

A resume is safe: ``run.json`` holds the settings that change results (``settings.py``) and their
fingerprint, which every record carries too; resuming with other settings raises ``ConfigError``
naming the differences, unless ``resume_anyway``.  The default ``out_dir`` is
``eval-output/<model>-<fingerprint>``, so other settings get another folder.

Only answers are scored: ``answer.txt`` (sandbox mode; the reply in vanilla mode), else the last
reply that was text and no tool call; a record says which (``response_source``), whether the
model submitted, whether the answer file existed, how the run ended, and whether a reply was cut
(``truncated``).  Layout of ``out_dir``::

    run.json          the settings, their fingerprint, the data's digests, earlier settings
    results.jsonl     one record per finished task
    trajectories/<mode>/<domain>/<item>[-r<k>]/trajectory.json
    summary.json, summary.md, summary.png
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.loop import AgentLimits
from ..agent.outcome import ExitReason
from ..agent.run import run_task
from ..config import SandboxConfig
from ..errors import ConfigError, ModelError, TaskError
from ..jail.pool import SandboxPool
from . import settings as run_settings
from .domains import get_domain, safe_id
from .items import Domain, EvalItem, Scorer
from .score import Score
from .summary import summarize, to_markdown, write_chart

MODES = ("sandbox", "vanilla")
SCORINGS = ("strict", "paper")
MAX_RESPONSE_CHARS = 4000  # kept in results.jsonl (the whole response is in the trajectory)
MAX_RECORD_REQUESTS = 200  # egress requests kept in a record (all of them are in the trajectory)
MAX_ERRORS_SHOWN = 5


@dataclass
class EvalConfig:
    """What to evaluate and how.  ``out_dir`` None: ``eval-output/<model>-<fingerprint>``."""

    domains: list[str]
    data_dir: Path
    out_dir: Path | None = None
    modes: list[str] = field(default_factory=lambda: ["sandbox"])
    limit: int | None = None  # per domain
    ids: list[str] | None = None
    repeats: int = 1
    seed: int = 0
    workers: int = 8
    max_steps: int = 50
    timeout_s: float = 1800.0  # per task
    token_budget: int | None = None  # per task
    rootfs: str = "auto"
    network: str = "none"
    prompt: str | None = None  # a prompt template file (the built-in ones by default)
    scoring: str = "strict"  # or "paper": the paper's own reward rules (scoring/paper.py)
    retry_errors: bool = True  # a resume runs errored tasks again
    resume_anyway: bool = False  # resume although the settings changed (run.json keeps the old ones)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self.out_dir = Path(self.out_dir) if self.out_dir is not None else None
        for m in self.modes:
            if m not in MODES:
                raise ConfigError("mode", f"expected one of {', '.join(MODES)} (or both), got {m!r}")
        if self.scoring not in SCORINGS:
            raise ConfigError("scoring", f"expected one of {', '.join(SCORINGS)}, got {self.scoring!r}")
        for name, value in (("repeats", self.repeats), ("workers", self.workers), ("max_steps", self.max_steps)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"expected a positive integer, got {value!r}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("limit", f"expected a positive integer, got {self.limit!r}")


@dataclass(frozen=True)
class Job:
    domain: Domain
    item: EvalItem
    mode: str
    repeat: int

    @property
    def key(self) -> str:
        return f"{self.mode}/{self.domain.name}/{self.item.id}/{self.repeat}"


class _Stop(BaseException):
    """Raised in a worker's step callback when the run is being interrupted."""


def select(items: list[EvalItem], *, limit: int | None, ids: list[str] | None, seed: int, domain: str) -> list[EvalItem]:
    """``--ids`` first; then a seeded order spread evenly over the strata; then the first ``limit``."""
    if ids:
        wanted = set(ids)
        items = [i for i in items if i.id in wanted or f"{domain}/{i.id}" in wanted]
    strata: dict[str, list[EvalItem]] = {}
    for item in items:
        strata.setdefault(item.stratum, []).append(item)
    for name, group in strata.items():
        random.Random(f"{seed}:{domain}:{name}").shuffle(group)
    order: list[EvalItem] = []
    queues = [strata[k] for k in sorted(strata)]
    for i in range(max((len(q) for q in queues), default=0)):
        order += [q[i] for q in queues if i < len(q)]
    return order[:limit] if limit else order


def read_results(path: Path) -> dict[str, dict]:
    """key -> record; a torn last line (a killed run) is ignored, the latest record of a key wins."""
    records: dict[str, dict] = {}
    if not path.exists():
        return records
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "key" in rec:
                records[rec["key"]] = rec
    return records


class _ResultsFile:
    def __init__(self, path: Path) -> None:
        self.lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = path.open("a+", encoding="utf-8")
        self.f.seek(0, os.SEEK_END)
        if self.f.tell() > 0:  # a run killed mid-line leaves a torn line: start on a fresh one
            self.f.seek(self.f.tell() - 1)
            if self.f.read(1) != "\n":
                self.f.write("\n")

    def append(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self.lock:
            self.f.write(line)
            self.f.flush()
            os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


@dataclass
class EvalResult:
    summary: dict[str, Any]
    out_dir: Path
    ran: int  # tasks run now
    skipped: int  # tasks found finished in results.jsonl
    errors: int = 0  # tasks of this selection whose record holds an error (run now or before)
    first_errors: list[tuple[str, str]] = field(default_factory=list)  # (key, error), a few
    skipped_domains: dict[str, str] = field(default_factory=dict)  # domain -> why (no data)
    fingerprint: str = ""

    @property
    def complete(self) -> bool:
        """Every selected task ran without an error and no domain was skipped."""
        return not self.errors and not self.skipped_domains


ModelSpec = Any  # a model object shared by all tasks, or a callable (job) -> model


class Evaluator:
    def __init__(self, config: EvalConfig, model: ModelSpec, *, judge: Any = None, model_name: str | None = None,
                 progress: Callable[[int, int, dict], None] | None = None) -> None:  # fmt: skip
        self.cfg, self.model, self.judge = config, model, judge
        self.model_name = model_name or getattr(model, "name", type(model).__name__)
        self.progress = progress
        self.stop = threading.Event()
        self.fingerprint = ""
        self.skipped_domains: dict[str, str] = {}
        self.items_by_domain: dict[str, list[EvalItem]] = {}

    # -- planning ------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        """Every (item, mode, repeat) of the selection; a domain without its data is left out and
        named in ``self.skipped_domains`` (the reason says how to get the data)."""
        out = []
        self.skipped_domains, self.items_by_domain = {}, {}
        for name in self.cfg.domains:
            domain = get_domain(name) if isinstance(name, str) else name
            try:
                loaded = domain.load(self.cfg.data_dir)
            except TaskError as e:
                if e.key != "data":
                    raise
                self.skipped_domains[domain.name] = e.message
                continue
            self.items_by_domain[domain.name] = loaded
            items = select(loaded, limit=self.cfg.limit, ids=self.cfg.ids, seed=self.cfg.seed, domain=domain.name)
            out += [Job(domain, item, mode, r) for item in items for mode in self.cfg.modes
                    for r in range(self.cfg.repeats)]  # fmt: skip
        return out

    def _settings(self) -> tuple[dict[str, Any], str, dict[str, str]]:
        settings = run_settings.run_settings(self.cfg, self.model, model_name=self.model_name, judge=self.judge)
        return settings, run_settings.fingerprint(settings), run_settings.data_digests(self.items_by_domain)

    def _check_run_file(self, settings: dict[str, Any], fp: str, data: dict[str, str], *, has_results: bool) -> None:
        """Refuse to resume a run made with other settings (or data), unless ``resume_anyway`` (or
        it left no results: a run stopped by its preflight); then write run.json (earlier settings
        kept under ``history``)."""
        cfg = self.cfg
        path = cfg.out_dir / "run.json"
        history: list[dict] = []
        if path.exists():
            try:
                prev = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                prev = {}
            if "settings" in prev:
                diffs = run_settings.differences(prev["settings"], settings)
                diffs += run_settings.data_differences(prev.get("data") or {}, data)
            else:  # written before settings were recorded (or damaged): nothing can be compared
                diffs = ["run.json holds no settings to compare (an older sandboxlite wrote it, or it is damaged)"]
            if diffs and has_results and not cfg.resume_anyway:
                shown = "\n  ".join(diffs[:12]) + ("\n  ..." if len(diffs) > 12 else "")
                raise ConfigError("output-dir", f"{cfg.out_dir} holds a run with other settings; resuming would "
                                  f"mix results:\n  {shown}",
                                  hint="choose a new --output-dir (by default each setting gets its own folder), "
                                  "or pass --resume-anyway to add to this one")  # fmt: skip
            history = list(prev.get("history") or [])
            if diffs and has_results:
                history.append({k: prev.get(k) for k in ("settings", "fingerprint", "data", "written_at")})
            data = {**(prev.get("data") or {}), **data}
        meta = {
            "fingerprint": fp,
            "settings": settings,
            "data": data,
            "selection": {"domains": [getattr(d, "name", d) for d in cfg.domains], "modes": cfg.modes,
                          "limit": cfg.limit, "ids": cfg.ids, "repeats": cfg.repeats, "workers": cfg.workers,
                          "data_dir": str(cfg.data_dir)},  # fmt: skip
            "skipped_domains": self.skipped_domains,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "history": history,
        }
        tmp = path.with_name("run.json.tmp")
        tmp.write_text(json.dumps(meta, indent=1, default=str))
        os.replace(tmp, path)

    def preflight(self) -> None:
        """One request to the model (and the judge) before any task: ``ModelError`` when it fails."""
        for who, model in (("model", self.model), ("judge", getattr(self.judge, "model", None))):
            check = getattr(model, "preflight", None)
            if check is None:
                continue
            try:
                check()
            except ModelError as e:
                raise ModelError(f"preflight of the {who}: {e.message}; no task was run", hint=e.hint) from None

    # -- running -------------------------------------------------------------------------
    def run(self) -> EvalResult:
        cfg = self.cfg
        jobs = self.jobs()
        if not jobs:
            if self.skipped_domains:
                raise TaskError("data", "no data for any selected domain:\n  " + "\n  ".join(
                    f"{d}: {why}" for d, why in self.skipped_domains.items()),
                    hint=f"sandboxlite data pull {' '.join(self.skipped_domains)}   (or --data-dir DIR)")  # fmt: skip
            raise ConfigError("ids", f"no item of {', '.join(getattr(d, 'name', d) for d in cfg.domains)} matches "
                              f"{cfg.ids} (ids look like those in results.jsonl, e.g. aime25-03)")  # fmt: skip
        if cfg.scoring == "paper":
            from .scoring.paper import check_paper_scoring

            check_paper_scoring(list(self.items_by_domain), has_judge=self.judge is not None)
        settings, fp, data = self._settings()
        self.fingerprint = fp
        if cfg.out_dir is None:
            cfg.out_dir = Path("eval-output") / f"{safe_id(self.model_name)}-{fp}"
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        done = read_results(cfg.out_dir / "results.jsonl")
        self._check_run_file(settings, fp, data, has_results=bool(done))
        todo = [j for j in jobs if j.key not in done or (cfg.retry_errors and done[j.key].get("error"))]
        skipped = len(jobs) - len(todo)
        if todo:
            self.preflight()
        results = _ResultsFile(cfg.out_dir / "results.jsonl")
        n_sandbox = sum(1 for j in todo if j.mode == "sandbox")
        pool = SandboxPool(SandboxConfig(rootfs=cfg.rootfs, network=cfg.network),
                           size=min(cfg.workers, n_sandbox)) if n_sandbox else None  # fmt: skip
        finished, interrupted = 0, False
        counts: dict[str, Any] = {"ran": 0, "errors": 0, "score_sum": 0.0, "eta_s": None}
        started = time.monotonic()
        try:
            with cf.ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="eval") as ex:
                pending = {ex.submit(self._run_job, job, pool) for job in todo}
                try:
                    while pending:
                        ready, pending = cf.wait(pending, timeout=0.5, return_when=cf.FIRST_COMPLETED)
                        for fut in ready:
                            record = fut.result()
                            if record is None:
                                continue
                            results.append(record)
                            done[record["key"]] = record
                            finished += 1
                            counts["ran"] = finished
                            counts["errors"] += bool(record.get("error"))
                            counts["score_sum"] += record["score"]
                            counts["eta_s"] = (time.monotonic() - started) / finished * (len(todo) - finished)
                            if self.progress:
                                self.progress(finished + skipped, len(jobs), counts)
                except KeyboardInterrupt:
                    interrupted = True
                    self.stop.set()
                    for fut in pending:
                        fut.cancel()
                    for fut in cf.as_completed([f for f in pending if not f.cancelled()]):
                        record = fut.result()
                        if record is not None:  # finished before it saw the stop
                            results.append(record)
                            done[record["key"]] = record
        finally:
            results.close()
            if pool is not None:
                pool.close()
        selected = [done[j.key] for j in jobs if j.key in done]
        summary = self.write_summary(selected, settings, fp)
        if interrupted:
            raise KeyboardInterrupt
        errored = [(r["key"], r["error"]) for r in selected if r.get("error")]
        return EvalResult(summary, cfg.out_dir, finished, skipped, errors=len(errored),
                          first_errors=errored[:MAX_ERRORS_SHOWN], skipped_domains=dict(self.skipped_domains),
                          fingerprint=fp)  # fmt: skip

    def write_summary(self, records: list[dict], settings: dict[str, Any], fp: str) -> dict[str, Any]:
        cfg = self.cfg
        summary = summarize(records, seed=cfg.seed)
        summary["run"] = {"model": self.model_name, "modes": cfg.modes, "seed": cfg.seed, "repeats": cfg.repeats,
                          "domains": [getattr(d, "name", d) for d in cfg.domains], "fingerprint": fp,
                          "settings": settings, "skipped_domains": dict(self.skipped_domains),
                          "written_at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}  # fmt: skip
        tmp = cfg.out_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=1, default=str))
        os.replace(tmp, cfg.out_dir / "summary.json")
        summary["chart"] = write_chart(summary, cfg.out_dir / "summary.png", title=f"sandboxlite eval: {self.model_name}")
        (cfg.out_dir / "summary.md").write_text(to_markdown(summary, title=f"sandboxlite eval: {self.model_name}"))
        return summary

    def _scorer(self, domain: Domain) -> tuple[Scorer, str]:
        """The scorer of ``domain`` under ``cfg.scoring``, and its name for the record."""
        if self.cfg.scoring == "paper":
            from .scoring.paper import paper_scorer

            scorer = paper_scorer(domain.name)
            if scorer is not None:
                return scorer, "paper"
            return domain.score, "strict (the paper has no rule for this domain)"
        return domain.score, "strict"

    def _model_for(self, job: Job) -> Any:
        return self.model(job) if callable(self.model) and not hasattr(self.model, "complete") else self.model

    def _check_stop(self, *_: Any) -> None:
        if self.stop.is_set():
            raise _Stop

    def _run_job(self, job: Job, pool: SandboxPool | None) -> dict | None:
        if self.stop.is_set():
            return None
        cfg, item = self.cfg, job.item
        t0 = time.monotonic()
        folder = item.id + (f"-r{job.repeat}" if cfg.repeats > 1 else "")
        traj = cfg.out_dir / "trajectories" / job.mode / job.domain.name / folder
        record: dict[str, Any] = {"key": job.key, "domain": job.domain.name, "id": item.id, "mode": job.mode,
                                  "repeat": job.repeat, "score": 0.0, "error": None, "fingerprint": self.fingerprint,
                                  "sampling": {},
                                  "trajectory": str(traj.relative_to(cfg.out_dir) / "trajectory.json")}  # fmt: skip
        limits = AgentLimits(max_steps=cfg.max_steps, max_total_tokens=cfg.token_budget, max_wall_s=cfg.timeout_s)
        task = item.to_task(max_steps=cfg.max_steps, timeout_s=cfg.timeout_s, rootfs=cfg.rootfs, prompt=cfg.prompt)
        model_s = judge_s = 0.0
        try:
            sb = pool.acquire() if job.mode == "sandbox" and pool is not None else None
            try:
                model = self._model_for(job)  # once: a factory may build a model per job
                record["sampling"] = dict(getattr(model, "sampling", None) or {})
                res = run_task(task, model, output_dir=traj, mode=job.mode, limits=limits,
                               on_step=self._check_stop, sandbox=sb)  # fmt: skip
            finally:
                if sb is not None:
                    pool.release(sb)
            model_s = res.model_s
            response, source = scored_response(res, job.mode)
            record.update(exit_reason=res.exit_reason, reason=res.reason,
                          submitted=res.submitted if job.mode == "sandbox" else None,
                          answer_file=res.answer is not None if job.mode == "sandbox" else None,
                          response_source=source, finish_reason=res.finish_reason,
                          truncated=res.truncated_replies > 0, truncated_replies=res.truncated_replies,
                          steps=res.steps, usage=res.usage, response=(response or "")[:MAX_RESPONSE_CHARS])  # fmt: skip
            if res.network_requests or cfg.network.startswith("allow:"):
                record["network_requests"] = res.network_requests[:MAX_RECORD_REQUESTS]
                record["network_request_count"] = len(res.network_requests)
            if res.reason is ExitReason.MODEL_ERROR:
                record["error"] = res.exit_reason
            scorer, scoring = self._scorer(job.domain)
            t1 = time.monotonic()
            if response is None:  # nothing to score: no call to the scorer (nor the judge)
                score = Score(0.0, None, details={"no_response": True})
            else:
                score = scorer(item, response, self.judge)
            judge_s = time.monotonic() - t1 if self.judge is not None else 0.0  # the judge's time is model time
            record.update(score=score.value, extracted=score.extracted, metrics=score.metrics, scoring=scoring,
                          approximate=score.approximate, details=score.details)  # fmt: skip
        except _Stop:
            return None
        except Exception as e:  # the boundary of one task: whatever failed is recorded, the run goes on
            record["error"] = f"{type(e).__name__}: {e}"
        wall = time.monotonic() - t0
        record.update(wall_s=round(wall, 4), model_s=round(model_s, 4),
                      overhead_s=round(max(0.0, wall - model_s - judge_s), 4),
                      finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"))  # fmt: skip
        return record


def scored_response(res: Any, mode: str) -> tuple[str | None, str | None]:
    """(the response to score, where it came from) of a ``RunResult``.

    Sandbox mode: ``answer.txt`` when it holds anything, else the last reply that was text and no
    tool call (``final_text``); vanilla mode: the reply.  Tool calls are never scored: a run that
    only called tools and left no answer file has no response (``(None, None)``).
    """
    if mode == "sandbox" and res.answer is not None and res.answer.strip():
        return res.answer, "answer.txt"
    if res.final_text:
        return res.final_text, "reply" if mode == "vanilla" else "final_text"
    return None, None


def run_eval(config: EvalConfig, model: ModelSpec, *, judge: Any = None, model_name: str | None = None,
             progress: Callable[[int, int, dict], None] | None = None) -> EvalResult:  # fmt: skip
    """Run (or resume) an evaluation; see the module docstring."""
    return Evaluator(config, model, judge=judge, model_name=model_name, progress=progress).run()
