"""``run_eval``: every (item, mode, repeat) of the selected domains, in parallel, resumable.

Each finished task is appended to ``results.jsonl`` at once (one JSON object per line); running
the same command again skips what is there, so Ctrl-C loses nothing but the tasks in flight.
Sandbox mode takes its sandboxes from a ``SandboxPool`` (reset between tasks, not recreated).
A task that fails (the model, the sandbox, the scorer) is recorded with its error and scores 0;
it never stops the run.  Layout of ``out_dir``::

    run.json          the settings of the run (a resumed run must use the same model)
    results.jsonl     one record per finished task
    trajectories/<mode>/<domain>/<item>[-r<k>]/trajectory.json
    summary.json, summary.md
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
from ..errors import ConfigError
from ..pool import SandboxPool
from .domains import get_domain
from .items import Domain, EvalItem
from .summary import summarize, to_markdown

MODES = ("sandbox", "vanilla")
MAX_RESPONSE_CHARS = 4000  # kept in results.jsonl (the whole response is in the trajectory)


@dataclass
class EvalConfig:
    domains: list[str]
    data_dir: Path
    out_dir: Path
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
    retry_errors: bool = False

    def __post_init__(self) -> None:
        self.data_dir, self.out_dir = Path(self.data_dir), Path(self.out_dir)
        for m in self.modes:
            if m not in MODES:
                raise ConfigError("mode", f"expected one of {', '.join(MODES)} (or both), got {m!r}")
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


ModelSpec = Any  # a model object shared by all tasks, or a callable (job) -> model


class Evaluator:
    def __init__(self, config: EvalConfig, model: ModelSpec, *, judge: Any = None, model_name: str | None = None,
                 progress: Callable[[int, int, dict], None] | None = None) -> None:  # fmt: skip
        self.cfg, self.model, self.judge = config, model, judge
        self.model_name = model_name or getattr(model, "name", type(model).__name__)
        self.progress = progress
        self.stop = threading.Event()

    # -- planning ------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        out = []
        for name in self.cfg.domains:
            domain = get_domain(name) if isinstance(name, str) else name
            items = select(domain.load(self.cfg.data_dir), limit=self.cfg.limit, ids=self.cfg.ids,
                           seed=self.cfg.seed, domain=domain.name)  # fmt: skip
            out += [Job(domain, item, mode, r) for item in items for mode in self.cfg.modes
                    for r in range(self.cfg.repeats)]  # fmt: skip
        return out

    def _check_run_file(self) -> None:
        path = self.cfg.out_dir / "run.json"
        if path.exists():
            try:
                prev = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                prev = {}
            if prev.get("model") not in (None, self.model_name):
                raise ConfigError("output-dir", f"{self.cfg.out_dir} holds a run of model {prev['model']!r}, not "
                                  f"{self.model_name!r}; resume it with that model or choose another --output-dir")  # fmt: skip
        meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.cfg).items()}
        meta["domains"] = [getattr(d, "name", d) for d in self.cfg.domains]
        meta.update(model=self.model_name, judge=getattr(self.judge, "name", None) if self.judge else None)
        path.write_text(json.dumps(meta, indent=1))

    # -- running -------------------------------------------------------------------------
    def run(self) -> EvalResult:
        cfg = self.cfg
        jobs = self.jobs()
        if not jobs:
            raise ConfigError("ids", f"no item of {', '.join(getattr(d, 'name', d) for d in cfg.domains)} matches "
                              f"{cfg.ids} (ids look like those in results.jsonl, e.g. aime25-03)")  # fmt: skip
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        self._check_run_file()
        done = read_results(cfg.out_dir / "results.jsonl")
        todo = [j for j in jobs if j.key not in done or (cfg.retry_errors and done[j.key].get("error"))]
        skipped = len(jobs) - len(todo)
        results = _ResultsFile(cfg.out_dir / "results.jsonl")
        n_sandbox = sum(1 for j in todo if j.mode == "sandbox")
        pool = SandboxPool(SandboxConfig(rootfs=cfg.rootfs), size=min(cfg.workers, n_sandbox)) if n_sandbox else None
        finished, interrupted = 0, False
        counts = {"ran": 0, "errors": 0, "score_sum": 0.0}
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
        summary = self.write_summary([done[j.key] for j in jobs if j.key in done])
        if interrupted:
            raise KeyboardInterrupt
        return EvalResult(summary, cfg.out_dir, finished, skipped)

    def write_summary(self, records: list[dict]) -> dict[str, Any]:
        summary = summarize(records, seed=self.cfg.seed)
        summary["run"] = {"model": self.model_name, "modes": self.cfg.modes, "seed": self.cfg.seed,
                          "repeats": self.cfg.repeats, "domains": [getattr(d, "name", d) for d in self.cfg.domains]}  # fmt: skip
        tmp = self.cfg.out_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=1))
        os.replace(tmp, self.cfg.out_dir / "summary.json")
        (self.cfg.out_dir / "summary.md").write_text(to_markdown(summary, title=f"sandboxlite eval: {self.model_name}"))
        return summary

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
                                  "repeat": job.repeat, "score": 0.0, "error": None,
                                  "trajectory": str(traj.relative_to(cfg.out_dir) / "trajectory.json")}  # fmt: skip
        limits = AgentLimits(max_steps=cfg.max_steps, max_total_tokens=cfg.token_budget, max_wall_s=cfg.timeout_s)
        task = item.to_task(max_steps=cfg.max_steps, timeout_s=cfg.timeout_s, rootfs=cfg.rootfs)
        model_s = judge_s = 0.0
        try:
            sb = pool.acquire() if job.mode == "sandbox" and pool is not None else None
            try:
                res = run_task(task, self._model_for(job), output_dir=traj, mode=job.mode, limits=limits,
                               on_step=self._check_stop, sandbox=sb)  # fmt: skip
            finally:
                if sb is not None:
                    pool.release(sb)
            model_s = res.model_s
            if res.answer is not None and res.answer.strip():
                response, source = res.answer, "answer.txt" if job.mode == "sandbox" else "reply"
            else:
                response, source = res.last_message or "", "last_message" if res.last_message else None
            record.update(exit_reason=res.exit_reason, reason=res.reason, submitted=res.submitted, steps=res.steps,
                          usage=res.usage, response_source=source, response=response[:MAX_RESPONSE_CHARS])  # fmt: skip
            if res.reason is ExitReason.MODEL_ERROR:
                record["error"] = res.exit_reason
            t1 = time.monotonic()
            score = job.domain.score(item, response, self.judge)
            judge_s = time.monotonic() - t1 if self.judge is not None else 0.0  # the judge's time is model time
            record.update(score=score.value, extracted=score.extracted, metrics=score.metrics,
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


def run_eval(config: EvalConfig, model: ModelSpec, *, judge: Any = None, model_name: str | None = None,
             progress: Callable[[int, int, dict], None] | None = None) -> EvalResult:  # fmt: skip
    """Run (or resume) an evaluation; see the module docstring."""
    return Evaluator(config, model, judge=judge, model_name=model_name, progress=progress).run()
