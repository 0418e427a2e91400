"""An eval's output folder (``results.jsonl``, ``trajectories/``) -> one plain dict the eval page shows.

::

    {"kind": "eval", "source": ..., "run": {model, fingerprint, ...} | None, "modes": [...],
     "domains": [...], "rows": [row, ...], "summary": {...}, "records_left_out": n}

    row: {"key", "id", "domain", "mode", "repeat", "score", "error", "reason", "failure", "steps",
          "tokens", "prompt_tokens", "completion_tokens", "wall_s", "model_s", "extracted",
          "response", "tools", "link"}

    summary: {"accuracy": [{"domain", "mode", "n", "mean", "lo", "hi"}],   (Wilson 95 %; domain "all" too)
              "tokens": [{"domain", "mode", "n", "mean"}],
              "steps": {"bins": [{"lo", "hi"}], "counts": {mode: [n per bin]}},
              "tools": {mode: {tool: calls}}, "failures": {reason: {mode: n}}}

``write_eval`` writes the eval page and, in the same pass, the page of every trajectory (its own
``view.html``), so each row's link works from file://.  Records are read once; each trajectory is
read once; nothing is quadratic in the number of records.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from ..errors import ConfigError
from ._files import read_capped
from ._html import write_html
from ._load import load_run
from ._text import decode, sanitize

MAX_RESULTS_BYTES = 1 << 30  # a results.jsonl larger than this is refused
MAX_ROWS = 20000  # records shown (the rest are counted)
RESPONSE_CHARS = 300  # of a record's response, shown in its row
ROW_TEXT_CAP = 2000  # any other text of a row
Z95 = 1.959963984540054
HINT = "give an eval's output folder (the --output-dir of `sandboxlite eval`: it holds results.jsonl)"


def is_eval_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an eval's output folder (a results.jsonl, no trajectory.json of its own)."""
    p = Path(path)
    return p.is_dir() and (p / "results.jsonl").is_file() and not (p / "trajectory.json").is_file()


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion (``successes`` may be a sum of fractional scores);
    None when ``n`` is 0."""
    if n <= 0:
        return None
    p = min(1.0, max(0.0, successes / n))
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    return (0.0 if p == 0 else lo), (1.0 if p == 1 else hi)  # exact at the ends (no 5e-17)


def read_records(folder: Path) -> tuple[list[dict], dict | None]:
    """(the records of ``folder/results.jsonl``, latest of a key wins, in the order first seen; run.json or None)."""
    got = read_capped(folder / "results.jsonl", MAX_RESULTS_BYTES + 1)
    if got is None:
        raise ConfigError("PATH", f"{folder / 'results.jsonl'} could not be read (or is a symlink)", hint=HINT)
    if len(got[0]) > MAX_RESULTS_BYTES:
        raise ConfigError("PATH", f"{folder / 'results.jsonl'} is over {MAX_RESULTS_BYTES >> 30} GiB", hint=HINT)
    records: dict[str, dict] = {}
    for n, line in enumerate(decode(got[0]).splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn line (a killed run)
        if isinstance(rec, dict):
            records[str(rec.get("key", f"line-{n}"))] = rec
    run = None
    meta = read_capped(folder / "run.json", 64 << 20)
    if meta is not None:
        try:
            run = json.loads(decode(meta[0]))
        except ValueError:
            run = None
    return list(records.values()), run if isinstance(run, dict) else None


def trajectory_folder(folder: Path, rec: dict) -> Path | None:
    """The folder of a record's trajectory, when it is inside ``folder`` (relative, no ``..``, no
    symlink on the way) and holds a trajectory.json; else None."""
    rel = rec.get("trajectory")
    if not isinstance(rel, str) or not rel:
        return None
    parts = PurePosixPath(rel.replace("\\", "/")).parts
    if not parts or parts[0] == "/" or ".." in parts or any(":" in p for p in parts[:1]):
        return None
    if parts[-1] == "trajectory.json":
        parts = parts[:-1]
    here = folder
    for p in parts:
        here = here / p
        if here.is_symlink() or not here.is_dir():
            return None
    traj = here / "trajectory.json"
    return here if traj.is_file() and not traj.is_symlink() else None


def _num(x: Any) -> float | int | None:
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _failure(rec: dict) -> str | None:
    """Why a task did not score full marks (None when it did)."""
    score = _num(rec.get("score")) or 0.0
    if score >= 1.0 and not rec.get("error"):
        return None
    err = rec.get("error")
    if err:
        head = str(err).split(":", 1)[0].strip()
        return "error: " + (head[:60] or "?")
    reason = rec.get("reason") or rec.get("exit_reason")
    if reason and reason not in ("submitted", "answered"):
        return str(reason)
    if rec.get("truncated"):
        return "reply cut (length)"
    if not rec.get("response_source") and not rec.get("response"):
        return "no answer"
    return "wrong answer"


def count_tools(run: dict) -> dict[str, int]:
    """Tool calls by name in a ``load_run`` dict."""
    c: Counter = Counter()
    for s in run.get("steps") or []:
        for call in s.get("calls") or []:
            c[str(call.get("name") or "?")] += 1
    return dict(c)


def _scan_tools(traj: Path) -> dict[str, int] | None:
    """Tool calls by name, read straight from a trajectory.json (without building its page)."""
    got = read_capped(traj, 256 << 20)
    if got is None:
        return None
    try:
        t = json.loads(decode(got[0]))
    except ValueError:
        return None
    c: Counter = Counter()
    steps = [s for s in t.get("steps") or [] if isinstance(s, dict)] if isinstance(t, dict) else []
    calls = [tc for s in steps for tc in ((s.get("assistant") or {}).get("tool_calls") or [])]
    if not steps and isinstance(t, dict):
        calls = [tc for m in t.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant"
                 for tc in m.get("tool_calls") or []]  # fmt: skip
    for tc in calls:
        if isinstance(tc, dict):
            c[str((tc.get("function") or {}).get("name") or tc.get("name") or "?")] += 1
    return dict(c)


def _link(target: Path, page_dir: Path) -> str:
    """A relative URL from a page in ``page_dir`` to ``target`` (each part percent-encoded)."""
    rel = os.path.relpath(os.path.abspath(target), os.path.abspath(page_dir))
    return "/".join(quote(p, safe="") for p in rel.split(os.sep))


def _row(rec: dict, tools: dict[str, int] | None, link: str | None) -> dict:
    usage = rec.get("usage") if isinstance(rec.get("usage"), dict) else {}
    pt, ct, tt = (_num(usage.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if tt is None and (pt is not None or ct is not None):
        tt = (pt or 0) + (ct or 0)
    response = rec.get("response")
    response = str(response)[:RESPONSE_CHARS] if response is not None else None
    return {"key": rec.get("key"), "id": rec.get("id"), "domain": rec.get("domain"), "mode": rec.get("mode"),
            "repeat": rec.get("repeat"), "score": _num(rec.get("score")), "error": rec.get("error"),
            "reason": rec.get("exit_reason") or rec.get("reason"), "failure": _failure(rec),
            "steps": _num(rec.get("steps")), "tokens": tt, "prompt_tokens": pt, "completion_tokens": ct,
            "wall_s": _num(rec.get("wall_s")), "model_s": _num(rec.get("model_s")),
            "extracted": rec.get("extracted"), "response": response, "tools": tools, "link": link}  # fmt: skip


def _bins(values: list[int]) -> list[tuple[int, int]]:
    """Histogram bins [lo, hi] of steps: one per value up to 20 values, else at most 20 of equal width."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi - lo < 20:
        return [(v, v) for v in range(lo, hi + 1)]
    width = math.ceil((hi - lo + 1) / 20)
    return [(a, min(hi, a + width - 1)) for a in range(lo, hi + 1, width)]


def summarize_rows(rows: list[dict]) -> dict:
    """The page's aggregates over ``rows`` (see the module docstring)."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        for d in (str(r["domain"]), "all"):
            cells[(d, str(r["mode"]))].append(r)
    accuracy, tokens = [], []
    for (domain, mode), rs in sorted(cells.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        scores = [r["score"] or 0.0 for r in rs]
        ci = wilson(sum(scores), len(scores))
        accuracy.append({"domain": domain, "mode": mode, "n": len(rs), "mean": sum(scores) / len(scores),
                         "lo": ci[0] if ci else None, "hi": ci[1] if ci else None})  # fmt: skip
        toks = [r["tokens"] for r in rs if r["tokens"] is not None]
        tokens.append({"domain": domain, "mode": mode, "n": len(toks), "mean": sum(toks) / len(toks) if toks else None})
    steps_by_mode: dict[str, list[int]] = defaultdict(list)
    tools: dict[str, Counter] = defaultdict(Counter)
    failures: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        mode = str(r["mode"])
        if r["steps"] is not None:
            steps_by_mode[mode].append(int(r["steps"]))
        for name, n in (r["tools"] or {}).items():
            tools[mode][name] += n
        if r["failure"]:
            failures[r["failure"]][mode] += 1
    bins = _bins([v for vs in steps_by_mode.values() for v in vs])
    counts = {}
    if bins:
        lo0, width = bins[0][0], bins[0][1] - bins[0][0] + 1
        for mode, vs in steps_by_mode.items():
            c = [0] * len(bins)
            for v in vs:
                c[min(len(bins) - 1, (v - lo0) // width)] += 1
            counts[mode] = c
    order = sorted(failures, key=lambda k: -sum(failures[k].values()))
    return {"accuracy": accuracy, "tokens": tokens,
            "steps": {"bins": [{"lo": a, "hi": b} for a, b in bins], "counts": counts},
            "tools": {m: dict(c.most_common()) for m, c in sorted(tools.items())},
            "failures": {k: dict(failures[k]) for k in order}}  # fmt: skip


def _run_info(run: dict | None) -> dict | None:
    if not run:
        return None
    settings = run.get("settings") if isinstance(run.get("settings"), dict) else {}
    model = settings.get("model")
    return {"model": model.get("name") if isinstance(model, dict) else model, "fingerprint": run.get("fingerprint"),
            "selection": run.get("selection"), "written_at": run.get("written_at"),
            "skipped_domains": run.get("skipped_domains")}  # fmt: skip


def _build(folder: Path, records: list[dict], run: dict | None, tools: list, links: list) -> dict:
    rows = [_row(rec, t, link) for rec, t, link in zip(records, tools, links)]
    modes = sorted({str(r["mode"]) for r in rows}, key=lambda m: (m != "sandbox", m != "vanilla", m))
    data = {"kind": "eval", "source": str(folder), "run": _run_info(run), "modes": modes,
            "domains": sorted({str(r["domain"]) for r in rows}), "rows": rows, "summary": summarize_rows(rows),
            "records_left_out": 0}  # fmt: skip
    return data


def _folder(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise ConfigError("PATH", f"{p} does not exist", hint=HINT)
    if not is_eval_dir(p):
        raise ConfigError("PATH", f"{p} is not an eval's output folder (no results.jsonl)", hint=HINT)
    return p


def load_eval(path: str | os.PathLike, *, page_dir: str | os.PathLike | None = None) -> dict:
    """The eval at ``path`` (its output folder) as one plain dict (see above).  Tool counts are read
    from the trajectories; each row links to its trajectory's ``view.html`` (relative to
    ``page_dir``, by default ``path``), whether or not it was written yet."""
    folder = _folder(path)
    records, run = read_records(folder)
    left_out = max(0, len(records) - MAX_ROWS)
    records = records[:MAX_ROWS]
    page_dir = Path(page_dir) if page_dir is not None else folder
    tools, links = [], []
    for rec in records:
        tf = trajectory_folder(folder, rec)
        tools.append(_scan_tools(tf / "trajectory.json") if tf is not None else None)
        links.append(_link(tf / "view.html", page_dir) if tf is not None else None)
    data = _build(folder, records, run, tools, links)
    data["records_left_out"] = left_out
    return sanitize(data, ROW_TEXT_CAP)


def write_eval(path: str | os.PathLike, out: str | os.PathLike | None = None) -> tuple[Path, dict, int]:
    """Write every trajectory's page (``view.html`` in its folder) and the eval's page (``out``, by
    default ``PATH/view.html``) in one pass; returns (the eval page, its data, trajectory pages written)."""
    folder = _folder(path)
    out = Path(out) if out is not None else folder / "view.html"
    records, run = read_records(folder)
    left_out = max(0, len(records) - MAX_ROWS)
    records = records[:MAX_ROWS]
    tools, links, written = [], [], 0
    for rec in records:
        tf = trajectory_folder(folder, rec)
        link = t = None
        if tf is not None:
            try:
                one = load_run(tf, record=rec)
                write_html(one, tf / "view.html")
            except (ConfigError, OSError):
                pass  # no page: the row has no link (its tool counts are unknown)
            else:
                t, link, written = count_tools(one), _link(tf / "view.html", out.parent), written + 1
        tools.append(t)
        links.append(link)
    data = _build(folder, records, run, tools, links)
    data["records_left_out"] = left_out
    data = sanitize(data, ROW_TEXT_CAP)
    return write_html(data, out), data, written
