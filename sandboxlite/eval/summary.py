"""From the records of ``results.jsonl`` to ``summary.json``, ``summary.md`` and ``summary.png``.

Per domain and mode: the mean score with a 95 % bootstrap interval (items resampled; with
repeats, an item's score is its mean over the repeats), secondary metrics, tasks, errors (an
errored run scores 0), the shares of runs that submitted and that left an answer to score, the
replies cut by the token budget, mean steps, tokens, wall time and the per-task overhead
(everything but model time).  Per domain: sandbox minus vanilla, paired by item, with its own
bootstrap interval.  ``summary.md`` opens with one table (domain x sandbox, vanilla, delta, and
their mean over domains), then the details.
"""

from __future__ import annotations

import math
import os
import random
import statistics
from collections import defaultdict
from pathlib import Path
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


def _share(records: list[dict], key: str) -> float | None:
    known = [bool(r[key]) for r in records if r.get(key) is not None]
    return statistics.fmean(known) if known else None


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
    submitted = [bool(r["submitted"]) for r in records if r.get("submitted") is not None]
    cell = {
        "items": len(by_item),
        "runs": len(records),
        "errors": sum(1 for r in records if r.get("error")),
        "mean": statistics.fmean(values) if values else None,
        "ci95": list(ci) if ci else None,
        "metrics": {k: statistics.fmean(v) for k, v in sorted(metrics.items())},
        "approximate": any(r.get("approximate") for r in records),
        # sandbox mode: the model called submit; every mode: a response was there to score
        "submitted": statistics.fmean(submitted) if submitted else None,
        "answered": statistics.fmean(1.0 if r.get("response_source") else 0.0 for r in records) if records else None,
        "answer_file": _share(records, "answer_file"),
        "truncated": sum(1 for r in records if r.get("truncated")),
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
    out["overall"] = _overall(out["domains"])
    out["fingerprints"] = sorted({r["fingerprint"] for r in records if r.get("fingerprint")})
    return out


def _overall(domains: dict[str, Any]) -> dict[str, Any]:
    """The mean over domains (each domain weighs the same, as in the paper's average)."""
    out: dict[str, Any] = {}
    for mode in ("sandbox", "vanilla"):
        means = [e[mode]["mean"] for e in domains.values() if e.get(mode) and e[mode]["mean"] is not None]
        out[mode] = statistics.fmean(means) if means else None
    deltas = [e["sandbox_minus_vanilla"]["mean"] for e in domains.values() if e.get("sandbox_minus_vanilla")]
    out["sandbox_minus_vanilla"] = statistics.fmean(deltas) if deltas else None
    out["domains"] = len(domains)
    return out


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.1f}"


def _score_ci(c: dict | None) -> str:
    if not c or c.get("mean") is None:
        return "-"
    ci = f" [{_fmt(c['ci95'][0])}, {_fmt(c['ci95'][1])}]" if c.get("ci95") else ""
    return f"{_fmt(c['mean'])}{ci}"


def _delta_ci(d: dict | None) -> str:
    if not d:
        return "-"
    ci = f" [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]" if d.get("ci95") else ""
    return f"{100 * d['mean']:+.1f}{ci}"


def _header(meta: dict[str, Any]) -> list[str]:
    st = meta.get("settings") or {}
    model = st.get("model") or {}
    lines = [f"Model `{meta.get('model')}`" + (f" at `{model['endpoint']}`" if model.get("endpoint") else "")
             + f", modes {', '.join(meta.get('modes', []))}, seed {meta.get('seed')}, repeats {meta.get('repeats')}; "
             f"written {meta.get('written_at', '?')} by sandboxlite {st.get('sandboxlite', '?')} "
             f"(settings fingerprint `{meta.get('fingerprint', '?')}`)."]  # fmt: skip
    if st:
        sampling = ", ".join(f"{k} {v if v is not None else 'endpoint default'}"
                             for k, v in (model.get("sampling") or {}).items()
                             if v is not None or k != "extra_body") or "none (deterministic)"  # fmt: skip
        lim = st.get("limits") or {}
        rootfs = st.get("rootfs") or {}
        lines.append(f"Sampling: {sampling}. Limits: {lim.get('max_steps')} steps, {lim.get('timeout_s')} s, "
                     f"token budget {lim.get('token_budget') or 'none'} per task. Scoring: {st.get('scoring')}. "
                     f"Root filesystem `{rootfs.get('name')}` {rootfs.get('digest') or ''}, network "
                     f"{st.get('network')}, isolation {st.get('isolation')}.".replace(" ,", ","))  # fmt: skip
    skipped = meta.get("skipped_domains") or {}
    if skipped:
        lines.append("Skipped (no data): " + ", ".join(f"{d}" for d in skipped) + " (`sandboxlite data pull`).")
    return lines


def to_markdown(summary: dict[str, Any], *, title: str = "Evaluation") -> str:
    lines = [f"# {title}", ""]
    meta = summary.get("run") or {}
    if meta:
        for line in _header(meta):
            lines += [line, ""]
    if len(summary.get("fingerprints") or []) > 1:
        lines += [f"**Mixed settings**: these results come from {len(summary['fingerprints'])} settings "
                  f"({', '.join(summary['fingerprints'])}; resumed with --resume-anyway: see run.json).", ""]  # fmt: skip
    lines += ["| domain | sandbox | vanilla | sandbox - vanilla |", "|---|---|---|---|"]
    for domain, entry in summary["domains"].items():
        lines.append(f"| {domain} | {_score_ci(entry.get('sandbox'))} | {_score_ci(entry.get('vanilla'))} | "
                     f"{_delta_ci(entry.get('sandbox_minus_vanilla'))} |")  # fmt: skip
    o = summary.get("overall") or {}
    if len(summary["domains"]) > 1:
        delta = o.get("sandbox_minus_vanilla")
        lines.append(f"| **mean** | {_fmt(o.get('sandbox'))} | {_fmt(o.get('vanilla'))} | "
                     f"{f'{100 * delta:+.1f}' if delta is not None else '-'} |")  # fmt: skip
    lines += ["", "Scores in %, [95 % bootstrap interval over items]; the delta is paired by item; the mean weighs "
              "every domain the same. Errored runs score 0. Overhead = wall time minus model time, per task.", "",
              "## Details", ""]  # fmt: skip
    if summary.get("chart"):
        lines += [f"![sandbox against vanilla]({summary['chart']})", ""]
    for domain, entry in summary["domains"].items():
        lines += [f"### {domain}", "", "| mode | score | 95% CI | items | runs | errors | submitted | answered | "
                  "cut replies | mean steps | prompt tok | completion tok | wall s | overhead p50 ms | other metrics |",
                  "|" + "---|" * 15]  # fmt: skip
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
                         f"{_fmt(c.get('submitted'))} | {_fmt(c.get('answered'))} | {c.get('truncated', 0)} | "
                         f"{_fmt(c['mean_steps'], False)} | {c['prompt_tokens']} | {c['completion_tokens']} | "
                         f"{c['wall_s']:.1f} | {c['overhead_ms_p50'] if c['overhead_ms_p50'] is not None else '-'} | "
                         f"{extra} |")  # fmt: skip
        d = entry.get("sandbox_minus_vanilla")
        if d:
            ci = f" (95% CI {_fmt(d['ci95'][0])} to {_fmt(d['ci95'][1])})" if d["ci95"] else ""
            lines.append(f"\nSandbox minus vanilla: **{100 * d['mean']:+.1f}** points{ci} over {d['paired_items']} "
                         "paired items.")  # fmt: skip
        lines.append("")
    lines += ["submitted: the model called submit (sandbox mode); answered: a response was there to score "
              "(answer.txt, else a final reply that was no tool call); cut replies: replies that hit the token "
              "budget (finish reason `length`).", ""]  # fmt: skip
    o = summary.get("sandbox_overhead_ms")
    if o:
        lines.append(f"Sandbox-mode overhead per task (all but model time): p50 {o['p50']} ms, p90 {o['p90']} ms "
                     f"over {o['n']} tasks.")  # fmt: skip
    return "\n".join(lines).rstrip() + "\n"


CHART_SKIPPED = "chart skipped: matplotlib not installed (pip install 'sandboxlite[eval]')"


def write_chart(summary: dict[str, Any], path: Any, *, title: str = "Evaluation") -> str | None:
    """``summary.png``: per domain, sandbox against vanilla (score and 95 % interval).  Returns the
    file's name, or None when there is nothing to draw or matplotlib is missing (``summary["chart_note"]``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        summary["chart_note"] = CHART_SKIPPED
        return None
    domains = list(summary["domains"])
    if not domains:
        return None
    modes = [m for m in ("sandbox", "vanilla") if any(summary["domains"][d].get(m) for d in domains)]
    colors = {"sandbox": "#1b7837", "vanilla": "#878787"}
    width = 0.8 / max(1, len(modes))
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(domains) * max(1, len(modes)) / 2 + 2, 3.6))
    for k, mode in enumerate(modes):
        xs, ys, lo, hi = [], [], [], []
        for i, d in enumerate(domains):
            c = summary["domains"][d].get(mode)
            if not c or c["mean"] is None:
                continue
            xs.append(i + (k - (len(modes) - 1) / 2) * width)
            ys.append(100 * c["mean"])
            a, b = c["ci95"] or (c["mean"], c["mean"])
            lo.append(100 * (c["mean"] - a))
            hi.append(100 * (b - c["mean"]))
        ax.bar(xs, ys, width=width * 0.95, color=colors[mode], label=mode, yerr=[lo, hi], capsize=3,
               error_kw={"elinewidth": 1})  # fmt: skip
    items = [max((summary["domains"][d].get(m) or {}).get("items", 0) for m in modes) for d in domains]
    ax.set_xticks(range(len(domains)), [f"{d}\n(n={n})" for d, n in zip(domains, items)], fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out)
    return out.name
