"""From the records of ``results.jsonl`` to ``summary.json`` and ``summary.md``.

Per domain and mode: the mean score with a 95 % bootstrap interval (items resampled; with
repeats, an item's score is its mean over the repeats), secondary metrics, tasks, errors (an
errored run scores 0), mean steps, tokens, wall time and the per-task overhead (everything but
model time).  Per domain: sandbox minus vanilla, paired by item, with its own bootstrap interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from typing import Any

N_BOOT = 1000


def bootstrap_ci(values: list[float], *, seed: int = 0, n_boot: int = N_BOOT) -> tuple[float, float] | None:
    """A 95 % percentile interval of the mean; None for fewer than two values."""
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(n_boot))
    return means[int(0.025 * n_boot)], means[min(n_boot - 1, int(0.975 * n_boot))]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c are correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _cell(records: list[dict], seed: int) -> dict[str, Any]:
    by_item: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_item[r["id"]].append(r)
    item_means = {i: statistics.fmean(r["score"] for r in rs) for i, rs in by_item.items()}
    values = list(item_means.values())
    ci = bootstrap_ci(values, seed=seed)
    metrics: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for k, v in (r.get("metrics") or {}).items():
            metrics[k].append(float(v))
    overhead = [r["overhead_s"] for r in records if r.get("overhead_s") is not None and not r.get("error")]
    cell = {
        "items": len(by_item),
        "runs": len(records),
        "errors": sum(1 for r in records if r.get("error")),
        "mean": statistics.fmean(values) if values else None,
        "ci95": list(ci) if ci else None,
        "metrics": {k: statistics.fmean(v) for k, v in sorted(metrics.items())},
        "approximate": any(r.get("approximate") for r in records),
        "mean_steps": statistics.fmean(r.get("steps") or 0 for r in records) if records else None,
        "prompt_tokens": sum(int((r.get("usage") or {}).get("prompt_tokens") or 0) for r in records),
        "completion_tokens": sum(int((r.get("usage") or {}).get("completion_tokens") or 0) for r in records),
        "wall_s": round(sum(r.get("wall_s") or 0.0 for r in records), 3),
        "overhead_ms_p50": round(1000 * _pct(overhead, 0.5), 2) if overhead else None,
        "overhead_ms_p90": round(1000 * _pct(overhead, 0.9), 2) if overhead else None,
    }
    repeats = max(len(rs) for rs in by_item.values()) if by_item else 0
    if repeats > 1:
        correct = {i: (len(rs), sum(1 for r in rs if r["score"] >= 1.0)) for i, rs in by_item.items()}
        cell["repeats"] = repeats
        cell["pass@k"] = {str(k): statistics.fmean(pass_at_k(n, c, k) for n, c in correct.values() if n >= k)
                          for k in sorted({1, repeats}) if any(n >= k for n, _ in correct.values())}  # fmt: skip
    return cell


def _diff(a: list[dict], b: list[dict], seed: int) -> dict[str, Any] | None:
    """sandbox minus vanilla over the items both modes have."""

    def means(rs: list[dict]) -> dict[str, float]:
        acc: dict[str, list[float]] = defaultdict(list)
        for r in rs:
            acc[r["id"]].append(r["score"])
        return {i: statistics.fmean(v) for i, v in acc.items()}

    ma, mb = means(a), means(b)
    common = sorted(set(ma) & set(mb))
    if not common:
        return None
    deltas = [ma[i] - mb[i] for i in common]
    ci = bootstrap_ci(deltas, seed=seed)
    return {"mean": statistics.fmean(deltas), "ci95": list(ci) if ci else None, "paired_items": len(common)}


def summarize(records: list[dict], *, seed: int = 0) -> dict[str, Any]:
    cells: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        cells[r["domain"]][r["mode"]].append(r)
    out: dict[str, Any] = {"domains": {}, "errors_count_as": 0.0}
    for domain in sorted(cells):
        modes = cells[domain]
        entry: dict[str, Any] = {mode: _cell(rs, seed) for mode, rs in sorted(modes.items())}
        if "sandbox" in modes and "vanilla" in modes:
            entry["sandbox_minus_vanilla"] = _diff(modes["sandbox"], modes["vanilla"], seed)
        out["domains"][domain] = entry
    overhead = [r["overhead_s"] for r in records if r["mode"] == "sandbox" and r.get("overhead_s") is not None
                and not r.get("error")]  # fmt: skip
    out["sandbox_overhead_ms"] = {"p50": round(1000 * _pct(overhead, 0.5), 2), "p90": round(1000 * _pct(overhead, 0.9), 2),
                                  "n": len(overhead)} if overhead else None  # fmt: skip
    out["runs"] = len(records)
    out["errors"] = sum(1 for r in records if r.get("error"))
    return out


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.1f}"


def to_markdown(summary: dict[str, Any], *, title: str = "Evaluation") -> str:
    lines = [f"# {title}", ""]
    meta = summary.get("run") or {}
    if meta:
        lines += [f"Model `{meta.get('model')}`, modes {', '.join(meta.get('modes', []))}, seed {meta.get('seed')}, "
                  f"repeats {meta.get('repeats')}.", ""]  # fmt: skip
    lines += ["Scores in %; 95 % bootstrap interval over items; errored runs score 0. Overhead = wall time minus "
              "model time, per task.", ""]  # fmt: skip
    for domain, entry in summary["domains"].items():
        lines += [f"## {domain}", "", "| mode | score | 95% CI | items | runs | errors | mean steps | prompt tok | "
                  "completion tok | wall s | overhead p50 ms | other metrics |", "|" + "---|" * 12]  # fmt: skip
        for mode in ("sandbox", "vanilla"):
            c = entry.get(mode)
            if not c:
                continue
            ci = f"{_fmt(c['ci95'][0])}-{_fmt(c['ci95'][1])}" if c["ci95"] else "-"
            other = dict(c["metrics"])
            other.update({f"pass@{k}": v for k, v in (c.get("pass@k") or {}).items()})
            extra = ", ".join(f"{k} {_fmt(v)}" for k, v in other.items()) or "-"
            if c["approximate"]:
                extra += " (approximate: rule-based, no judge)"
            lines.append(f"| {mode} | {_fmt(c['mean'])} | {ci} | {c['items']} | {c['runs']} | {c['errors']} | "
                         f"{_fmt(c['mean_steps'], False)} | {c['prompt_tokens']} | {c['completion_tokens']} | "
                         f"{c['wall_s']:.1f} | {c['overhead_ms_p50'] if c['overhead_ms_p50'] is not None else '-'} | "
                         f"{extra} |")  # fmt: skip
        d = entry.get("sandbox_minus_vanilla")
        if d:
            ci = f" (95% CI {_fmt(d['ci95'][0])} to {_fmt(d['ci95'][1])})" if d["ci95"] else ""
            lines.append(f"\nSandbox minus vanilla: **{100 * d['mean']:+.1f}** points{ci} over {d['paired_items']} "
                         "paired items.")  # fmt: skip
        lines.append("")
    o = summary.get("sandbox_overhead_ms")
    if o:
        lines.append(f"Sandbox-mode overhead per task (all but model time): p50 {o['p50']} ms, p90 {o['p90']} ms "
                     f"over {o['n']} tasks.")  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"
