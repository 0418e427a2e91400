#!/usr/bin/env python3
"""The eval page of ``sandboxlite view`` (issue 38): how long it takes to write, how big it is, how
fast headless Chromium loads it.

    .venv/bin/python bench/view.py [--records 500] [--rounds 5] [--json PATH]

Makes a synthetic eval folder of N records (tests/test_view_eval.py's ``synthetic_eval``: the real
layout and schema, N/2 tasks in 5 domains, a sandbox and a vanilla record each, one trajectory per
record), times ``write_eval`` (the eval page and every trajectory's page), then loads the page from
file:// in Debian's headless Chromium (selenium + chromedriver) ``--rounds`` times:
  * load: navigationStart to loadEventEnd (performance.timing);
  * rows: navigationStart to the tasks table having its rows (a MutationObserver, injected before
    the page's own script, notes performance.now() once the table has a row);
  * get: the wall time of selenium's ``driver.get`` (returns at the load event).
Medians and p90 in ms; the first round is a cold one (kept in the samples).  Writes JSON to
bench/results/view-<time>.json (or --json).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sandboxlite.bench.core import load_avg, machine_info, stats  # noqa: E402
from sandboxlite.bench.report import write_json  # noqa: E402
from sandboxlite.view import write_eval  # noqa: E402
from tests.test_view_eval import synthetic_eval  # noqa: E402 - the tests' generator, one source of truth

SCHEMA = "sandboxlite.bench.view/1"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ROWS_AT = """
window.__rowsAt = null;
new MutationObserver(function (ms, obs) {
  var t = document.getElementById('tasks');
  if (t && t.querySelector('tr[data-key]')) { window.__rowsAt = performance.now(); obs.disconnect(); }
}).observe(document, {childList: true, subtree: true});
"""
TIMINGS = """
var t = performance.timing;
return {load_ms: t.loadEventEnd - t.navigationStart, dcl_ms: t.domContentLoadedEventEnd - t.navigationStart,
        rows_ms: window.__rowsAt, rows: document.querySelectorAll('#tasks tr[data-key]').length};
"""


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        sys.exit(
            f"{' and '.join(missing)} missing: apt-get install -y --no-install-recommends chromium chromium-driver"
        )
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": ROWS_AT})
    return driver


def rounds_of(page: Path, rounds: int, want_rows: int) -> dict[str, list[float]]:
    driver = browser()
    out: dict[str, list[float]] = {"load_ms": [], "rows_ms": [], "dcl_ms": [], "get_ms": []}
    try:
        version = driver.capabilities.get("browserVersion")
        for i in range(rounds):
            driver.get("about:blank")
            t0 = time.perf_counter()
            driver.get(page.resolve().as_uri())
            get_ms = (time.perf_counter() - t0) * 1000
            t = driver.execute_script(TIMINGS)
            if t["rows"] != want_rows or t["rows_ms"] is None:
                sys.exit(f"round {i + 1}: the page shows {t['rows']} rows, not {want_rows}")
            for k in ("load_ms", "rows_ms", "dcl_ms"):
                out[k].append(float(t[k]))
            out["get_ms"].append(get_ms)
            print(f"round {i + 1}: load {t['load_ms']:.0f} ms, rows at {t['rows_ms']:.0f} ms, get {get_ms:.0f} ms",
                  flush=True)  # fmt: skip
    finally:
        driver.quit()
    out["_browser"] = version  # type: ignore[assignment]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500, help="records in the eval (even: a sandbox and a vanilla each)")
    ap.add_argument("--rounds", type=int, default=5, help="page loads")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.records < 2 or a.rounds < 1:
        ap.error("--records >= 2 and --rounds >= 1")
    items = a.records // 2
    doc: dict = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 "command": " ".join(["bench/view.py", *(sys.argv[1:] if argv is None else argv)]),
                 "machine": machine_info()}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sandboxlite-bench-view-") as tmp:
        t0 = time.perf_counter()
        ev = synthetic_eval(Path(tmp) / "eval", n_items=items)
        make_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        page, data, pages = write_eval(ev)
        write_s = time.perf_counter() - t0
        size = page.stat().st_size
        print(f"{len(data['rows'])} records: made in {make_s:.2f} s; write_eval {write_s:.2f} s "
              f"({pages} trajectory pages); page {size / 1e6:.3f} MB", flush=True)  # fmt: skip
        samples = rounds_of(page, a.rounds, len(data["rows"]))
    browser_version = samples.pop("_browser")
    rows = []
    for key, name in (("load_ms", "load (navigationStart to loadEventEnd)"),
                      ("rows_ms", "rows rendered (navigationStart to table rows)"),
                      ("dcl_ms", "DOMContentLoaded end"), ("get_ms", "driver.get wall")):  # fmt: skip
        st = stats(samples[key])
        rows.append({"metric": key, "name": name, "n": len(samples[key]), "unit": "ms",
                     **{k: round(v, 2) for k, v in st.items()}, "mean_ms": round(statistics.fmean(samples[key]), 2)})  # fmt: skip
    doc.update({"records": len(data["rows"]), "trajectory_pages": pages, "make_s": round(make_s, 3),
                "write_s": round(write_s, 3), "page_bytes": size, "page_mb": round(size / 1e6, 3),
                "rounds": a.rounds, "browser": f"chromium {browser_version}", "rows": rows})  # fmt: skip
    doc["machine"]["load_avg_end"] = load_avg()
    doc["samples"] = {k: [round(v, 2) for v in vs] for k, vs in samples.items()}
    print(f"\n{'records':>8} {'write s':>8} {'page MB':>8} {'load med ms':>12} {'load p90 ms':>12} "
          f"{'rows med ms':>12} {'rows p90 ms':>12}")  # fmt: skip
    by = {r["metric"]: r for r in rows}
    print(f"{doc['records']:>8} {write_s:>8.2f} {doc['page_mb']:>8.3f} {by['load_ms']['median_ms']:>12.0f} "
          f"{by['load_ms']['p90_ms']:>12.0f} {by['rows_ms']['median_ms']:>12.0f} {by['rows_ms']['p90_ms']:>12.0f}")  # fmt: skip
    path = a.json or HERE / "results" / f"view-{time.strftime('%Y%m%d-%H%M%S')}.json"
    write_json(doc, path)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
