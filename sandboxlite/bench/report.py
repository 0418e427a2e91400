"""The report: result rows and ratios, the targets, the table, the JSON and the chart."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .core import FILE_BYTES, SANDBOXLITE, Series, stats

STAT_KEYS = ("median_ms", "p90_ms", "p99_ms", "min_ms", "max_ms")


# --- rows and ratios ------------------------------------------------------------------------
def row_of(metric: str, runtime: str, samples: list[float], status: str = "ok", extra: dict | None = None) -> dict:
    row: dict[str, Any] = {"metric": metric, "runtime": runtime, "n": len(samples) if status == "ok" else 0,
                           "status": status, "unit": "ms"}  # fmt: skip
    if status == "ok" and samples:
        row.update({k: round(v, 4) for k, v in stats(samples).items()})
    else:
        row.update({k: None for k in STAT_KEYS})
        if status == "ok":
            row["status"] = "not available: no samples"
    if extra:
        row.update(extra)
    if metric in FILE_BYTES and row["median_ms"]:
        row["bytes"] = FILE_BYTES[metric]
        row["mb_per_s"] = round(FILE_BYTES[metric] / 1e6 / (row["median_ms"] / 1e3), 1)
    return row


def rows_of_series(series: list[Series]) -> list[dict]:
    return [row_of(s.metric, s.runtime, s.samples, "ok" if s.ok else s.status, s.extra) for s in series]


def ratios_of(results: list[dict]) -> list[dict]:
    """For each metric: every other runtime as a baseline of sandboxlite (ratio = ours / theirs)."""
    by_metric: dict[str, dict[str, dict]] = {}
    for r in results:
        by_metric.setdefault(r["metric"], {})[r["runtime"]] = r
    out = []
    for metric, rows in by_metric.items():
        mine = rows.get(SANDBOXLITE)
        for rt, row in rows.items():
            if rt == SANDBOXLITE or rt.startswith(SANDBOXLITE):
                continue
            e: dict[str, Any] = {"metric": metric, "runtime": SANDBOXLITE, "baseline": rt, "ratio": None,
                                 "speedup": None, "overhead_ms": None, "status": row["status"]}  # fmt: skip
            if mine and mine["median_ms"] is not None and row["median_ms"]:
                e["ratio"] = round(mine["median_ms"] / row["median_ms"], 4)
                e["speedup"] = round(row["median_ms"] / mine["median_ms"], 3)
                e["overhead_ms"] = round(mine["median_ms"] - row["median_ms"], 4)
            elif mine and mine["median_ms"] is None:
                e["status"] = f"sandboxlite {mine['status']}"
            out.append(e)
    return out


# --- targets -------------------------------------------------------------------------------
# (key, text, limit, unit, direction); the value comes from value_of()
TARGETS = [
    ("cold_true", "cold create -> first true p50 <= 5 ms", 5.0, "ms", "<="),
    ("cold_vs_docker", "cold create -> first true >= 40x faster than docker run (same run)", 40.0, "x", ">="),
    ("cold_overhead", "cold overhead over raw bwrap (p50) <= 1 ms", 1.0, "ms", "<="),
    ("exec_true", "exec round trip p50 <= 1 ms", 1.0, "ms", "<="),
    ("warm_true", "warm acquire -> exec p50 <= 1 ms", 1.0, "ms", "<="),
    ("reset", "reset p50 <= 2 ms", 2.0, "ms", "<="),
    ("close", "close p50 <= 2 ms", 2.0, "ms", "<="),
    ("throughput", ">= 300 full cycles per second (best concurrency)", 300.0, "cycles/s", ">="),
    ("density_pss", "<= 3 MB per idle sandbox (PSS of its tree, median, largest N)", 3.0, "MiB", "<="),
    ("density_n", "1000 idle sandboxes alive at once", 1000.0, "sandboxes", ">="),
    ("agent", "agent-episode sandbox overhead p50 <= 50 ms (20 steps, fresh sandbox)", 50.0, "ms", "<="),
]


def check_targets(doc: dict) -> list[dict]:
    res = {(r["metric"], r["runtime"]): r for r in doc.get("results", [])}
    rat = {(r["metric"], r["baseline"]): r for r in doc.get("ratios", [])}

    def med(metric: str, runtime: str = SANDBOXLITE):
        return (res.get((metric, runtime)) or {}).get("median_ms")

    tput = [r for r in doc.get("throughput", []) if r["runtime"] == SANDBOXLITE and r.get("cycles_per_s")]
    dens = [r for r in doc.get("density", []) if r["runtime"] == SANDBOXLITE and r.get("pss_mib_median") is not None]
    best = max(tput, key=lambda r: r["cycles_per_s"]) if tput else None
    biggest = max(dens, key=lambda r: r["n"]) if dens else None
    values: dict[str, tuple[Any, str]] = {
        "cold_true": (med("cold_true"), ""),
        "cold_vs_docker": ((rat.get(("cold_true", "docker")) or {}).get("speedup"),
                           f"docker run median {med('cold_true', 'docker')} ms"),
        "cold_overhead": ((rat.get(("cold_true", "raw_bwrap")) or {}).get("overhead_ms"), ""),
        "exec_true": (med("exec_true"), ""),
        "warm_true": (med("warm_true"), ""),
        "reset": (med("reset"), ""),
        "close": (med("close"), ""),
        "throughput": (best["cycles_per_s"] if best else None, f"at concurrency {best['concurrency']}" if best else ""),
        "density_pss": (biggest["pss_mib_median"] if biggest else None,
                        f"n={biggest['n']}, USS {biggest['uss_mib_median']} MiB" if biggest else ""),
        "density_n": (max((r.get("alive") or 0 for r in doc.get("density", []) if r["runtime"] == SANDBOXLITE),
                          default=None), ""),
        "agent": (med("agent_episode"), ""),
    }  # fmt: skip
    out = []
    for key, text, limit, unit, direction in TARGETS:
        value, note = values[key]
        met = None if value is None else (value <= limit if direction == "<=" else value >= limit)
        by = None
        if met is False:
            by = round(value / limit, 2) if direction == "<=" else round(limit / value, 2) if value else None
        out.append({"target": text, "key": key, "limit": limit, "unit": unit, "direction": direction,
                    "value": None if value is None else round(value, 3), "met": met,
                    "missed_by_factor": by, "note": note})  # fmt: skip
    return out


# --- the table -----------------------------------------------------------------------------
def _f(v: float | None, width: int = 8) -> str:
    if v is None:
        return f"{'-':>{width}}"
    if v >= 1000:
        return f"{v:{width}.0f}"
    if v >= 100:
        return f"{v:{width}.1f}"
    return f"{v:{width}.3f}"


def format_table(doc: dict) -> str:
    lines: list[str] = []
    out = lines.append
    if doc.get("results", []):
        _latency_table(doc, out)
    if doc.get("throughput"):
        _throughput_table(doc["throughput"], out)
    if doc.get("density"):
        _density_table(doc["density"], out)
    agent = doc.get("agent")
    if agent and agent.get("detail"):
        _agent_breakdown(agent["detail"], out)
    prof = doc.get("profile")
    if prof and prof.get("phases_median_ms"):
        _profile_table(prof, out)
    if doc.get("targets"):
        out("")
        out("targets (project issue):")
        for t in doc["targets"]:
            mark = "n/a " if t["met"] is None else ("PASS" if t["met"] else "MISS")
            val = "-" if t["value"] is None else f"{t['value']:g} {t['unit']}"
            by = f"  (off by {t['missed_by_factor']}x)" if t.get("missed_by_factor") else ""
            note = f"  [{t['note']}]" if t.get("note") else ""
            out(f"  [{mark}] {t['target']:<72} got {val}{by}{note}")
    return "\n".join(lines)


def _latency_table(doc: dict, out: Callable[[str], None]) -> None:
    """The latency rows, metric by metric, each with its ratio to sandboxlite and its overhead over raw bwrap."""
    ratio_of = {(r["metric"], r["baseline"]): r for r in doc.get("ratios", [])}
    hdr = (f"{'metric':<13} {'runtime':<16} {'median':>8} {'p90':>8} {'p99':>8} {'min':>8} {'max':>8} {'N':>5}"
           f"  {'sl/this':>8}  {'sl is':>10}")  # fmt: skip
    out(hdr)
    out("-" * len(hdr))
    last = None
    for r in doc["results"]:
        if last is not None and r["metric"] != last:
            _overhead_line(last, ratio_of, out)
            out("")
        last = r["metric"]
        if r["median_ms"] is None:
            out(f"{r['metric']:<13} {r['runtime']:<16} {r['status']}")
            continue
        ratio = ratio_of.get((r["metric"], r["runtime"]))
        rs = f"{ratio['ratio']:.3g}x" if ratio and ratio["ratio"] is not None else ""
        sp = ""
        if ratio and ratio["speedup"] is not None:
            x = ratio["speedup"]
            sp = f"{x:.3g}x faster" if x >= 1 else f"{1 / x:.3g}x slower"
        tail = f"  {r['mb_per_s']:.0f} MB/s" if r.get("mb_per_s") else ""
        out(f"{r['metric']:<13} {r['runtime']:<16} {_f(r['median_ms'])} {_f(r['p90_ms'])} {_f(r['p99_ms'])} "
            f"{_f(r['min_ms'])} {_f(r['max_ms'])} {r['n']:5d}  {rs:>8}  {sp:>10}{tail}")  # fmt: skip
    if last is not None:
        _overhead_line(last, ratio_of, out)
    out("(times in ms; sl/this = sandboxlite median / this runtime's median; MB = 10^6 bytes)")


def _throughput_table(rows: list[dict], out: Callable[[str], None]) -> None:
    out("")
    out("throughput: full cycles (create + exec /bin/true + close)")
    out(f"{'runtime':<16} {'concurrency':>11} {'cycles/s':>9} {'median ms':>10} {'p99 ms':>9} {'cycles':>7} "
        f"{'errors':>6}")
    for r in rows:
        if r.get("cycles_per_s") is None:
            out(f"{r['runtime']:<16} {r['concurrency']:>11} {r['status']}")
            continue
        out(f"{r['runtime']:<16} {r['concurrency']:>11} {r['cycles_per_s']:>9} {_f(r['median_ms'], 10)} "
            f"{_f(r['p99_ms'], 9)} {r['cycles']:>7} {r['error_count']:>6}")  # fmt: skip


def _density_table(rows: list[dict], out: Callable[[str], None]) -> None:
    out("")
    out("density: N idle sandboxes alive at once (memory per sandbox, MiB)")
    out(f"{'runtime':<16} {'n':>5} {'alive':>6} {'start all s':>12} {'ms each':>8} {'PSS':>7} {'USS':>7} "
        f"{'MemAvail':>9} {'close all s':>12}")  # fmt: skip
    for r in rows:
        if not r.get("started"):
            out(f"{r['runtime']:<16} {r['n']:>5} {r['status']}")
            continue
        out(f"{r['runtime']:<16} {r['n']:>5} {r['alive']!s:>6} {r['start_all_s']:>12} "
            f"{r['per_sandbox_start_ms']:>8} {r['pss_mib_median']!s:>7} {r['uss_mib_median']!s:>7} "
            f"{r['mem_available_delta_mib_per']!s:>9} {r['close_all_s']!s:>12}"
            + ("" if r["status"] == "ok" else f"  {r['status']}"))  # fmt: skip


def _agent_breakdown(d: dict, out: Callable[[str], None]) -> None:
    out("")
    out(f"agent episode breakdown (medians, ms; {d['steps_per_episode']} steps, {d['model']}):")
    for name in d.get("tools_ms_median", {}):
        out(f"  {name:<17} model {d['model_ms_median'][name]:.3f}, tool calls {d['tools_ms_median'][name]:.3f}, "
            f"trajectory file {d['trajectory_ms_median'][name]:.3f}, the rest (sandbox start/close or "
            f"acquire/reset, loop, outputs) {d['rest_ms_median'][name]:.3f}; one bash step "
            f"{d['bash_step_tools_ms_median'][name]:.3f}, the python3 step "
            f"{d['first_step_tools_ms_median'][name]:.3f}")


def _profile_table(prof: dict, out: Callable[[str], None]) -> None:
    """Where a cold start's time goes, phase by phase, per variant."""
    out("")
    out("cold start, where the time goes (medians, ms):")
    variants = list(prof["phases_median_ms"])
    out(f"  {'phase':<14}" + "".join(f"{v:>16}" for v in variants))
    for phase in [*prof["phases_help"], "total"]:
        out(f"  {phase:<14}" + "".join(f"{prof['phases_median_ms'][v][phase]:>16.3f}" for v in variants))
    if prof.get("raw_bwrap_true_median_ms") is not None:
        out(f"  raw bwrap running /bin/true in the same loop: {prof['raw_bwrap_true_median_ms']:.3f}")
    c = prof.get("cpu", {})
    if c:
        out(f"  CPU per create+exec+close: Python {c['python_cpu_ms_per_cycle']} ms, children "
            f"{c['children_cpu_ms_per_cycle']} ms (wall {c['wall_ms_per_cycle']} ms)")


def _overhead_line(metric: str, ratio_of: dict, out: Callable[[str], None]) -> None:
    r = ratio_of.get((metric, "raw_bwrap"))
    if r is None:
        return
    if r["overhead_ms"] is None:
        out(f"{'':<13} overhead over raw bwrap: {r['status']}")
    else:
        out(f"{'':<13} overhead over raw bwrap: {r['overhead_ms']:+.3f} ms (median)")


# --- JSON ----------------------------------------------------------------------------------
def write_json(doc: dict, path: Path) -> None:
    """Indented, except the raw samples: one line per series."""
    path.parent.mkdir(parents=True, exist_ok=True)
    samples = doc.get("samples")
    text = json.dumps({k: v for k, v in doc.items() if k != "samples"}, indent=1)
    if samples is not None:
        body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in samples.items())
        text = text[: text.rindex("}")].rstrip() + ',\n "samples": {\n' + body + "\n }\n}"
    path.write_text(text + "\n")


# --- the chart -----------------------------------------------------------------------------
CHART_SKIPPED = "chart skipped: matplotlib not installed (pip install 'sandboxlite[bench]')"
COLORS = {"sandboxlite": "#1b7837", "sandboxlite_pool": "#5aae61", "raw_bwrap": "#762a83", "unshare": "#9970ab",
          "posix_spawn": "#878787", "subprocess_run": "#bababa", "host": "#878787", "docker": "#2166ac",
          "podman": "#b2182b", "runc": "#e08214"}  # fmt: skip


def draw_chart(doc: dict, path: Path) -> str:
    """Box plots of each latency metric per runtime (log scale).  Returns what happened, for the log."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        return CHART_SKIPPED
    new_mpl = tuple(int(x) for x in matplotlib.__version__.split(".")[:2] if x.isdigit()) >= (3, 10)
    samples = doc.get("samples") or {}
    metrics = list(dict.fromkeys(r["metric"] for r in doc.get("results", [])))
    panels = []
    for m in metrics:
        rts = [(r["runtime"], samples.get(f"{m}/{r['runtime']}") or []) for r in doc["results"]
               if r["metric"] == m and r["median_ms"] is not None]  # fmt: skip
        rts = [(rt, s) for rt, s in rts if s]
        if rts:
            panels.append((m, rts))
    tput = [r for r in doc.get("throughput", []) if r.get("cycles_per_s")]
    n = len(panels) + (1 if tput else 0)
    if n == 0:
        return "chart skipped: nothing to draw"
    cols = 3 if n > 4 else max(1, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 0.9 + 2.3 * rows), squeeze=False)
    flat = [a for row in axes for a in row]
    for ax, (metric, rts) in zip(flat, panels):
        labels = [rt for rt, _ in rts][::-1]
        data = [s for _, s in rts][::-1]
        horizontal = {"orientation": "horizontal"} if new_mpl else {"vert": False}  # 3.10 renamed it
        bp = ax.boxplot(data, **horizontal, whis=(1, 99), showfliers=True, widths=0.6, patch_artist=True,
                        flierprops={"markersize": 2, "alpha": 0.4}, medianprops={"color": "black"})  # fmt: skip
        for patch, rt in zip(bp["boxes"], labels):
            patch.set_facecolor(COLORS.get(rt, "#cccccc"))
            patch.set_alpha(0.8)
        ax.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
        ax.set_xscale("log")
        lo, hi = min(min(s) for s in data), max(max(s) for s in data)
        ax.set_xlim(lo / 1.4, hi * 1.4)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(metric, fontsize=10)
        ax.set_xlabel("ms (log)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", which="both", alpha=0.25)
        for i, s in enumerate(data, start=1):
            med = sorted(s)[len(s) // 2]
            ax.annotate(f"{med:.3g}", (med, i + 0.33), fontsize=6, ha="center")
    used = len(panels)
    if tput:
        ax = flat[used]
        by_rt: dict[str, list[tuple[int, float]]] = {}
        for r in tput:
            by_rt.setdefault(r["runtime"], []).append((r["concurrency"], r["cycles_per_s"]))
        for rt, pts in by_rt.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=rt, color=COLORS.get(rt))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("throughput (full cycles/s, log)", fontsize=10)
        ax.set_xlabel("concurrency", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(which="both", alpha=0.25)
        ax.legend(fontsize=6)
        used += 1
    for ax in flat[used:]:
        ax.axis("off")
    m = doc.get("machine", {})
    fig.suptitle(f"sandboxlite bench: rootfs {doc.get('params', {}).get('rootfs')}, {m.get('cpu_count')} CPUs "
                 f"{m.get('cpu_model') or ''}, kernel {m.get('kernel')}; boxes p25-p75, whiskers p1-p99",
                 fontsize=9)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return f"wrote {path} ({path.stat().st_size // 1024} KiB)"
