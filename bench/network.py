#!/usr/bin/env python3
"""The egress proxy's cost, in one run: ``bench/network.py [--rounds N] [--mb 50] [--rootfs R]``.

Interleaved rounds (the order flips every round, so both sides see the same machine load) of:

    cold_true     Sandbox() -> first /bin/true finished, close excluded: network="none" against
                  network="allow:..." (the latter also opens the proxy's port and registers the
                  sandbox at the proxy)
    exec_true     one exec(["/bin/true"]) round trip in a live sandbox (5 per round), same pair
    download      ``curl -o /dev/null`` of ``--mb`` MiB from an HTTP server on the host's loopback:
                  run on the host straight to the server (the host's own throughput), against run
                  in a sandbox with an allowlist, through the proxy (the exec round trip included)

The server stands for the internet under a reserved name (``pkg.test``), which this benchmark's
proxy resolves to loopback (``EgressProxy(allow_loopback=True)``: a real proxy refuses loopback).
Prints medians, p90 and p99 (ms; MiB/s for downloads) and the ratio allow/none or proxy/host;
writes JSON (``bench/results/network-<time>.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.server
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # a checkout works without installing
sys.path.insert(0, str(HERE))

from ab import percentile, write_json  # noqa: E402

from sandboxlite import Sandbox  # noqa: E402
from sandboxlite.jail.host import default_host  # noqa: E402
from sandboxlite.network.egress import EgressProxy  # noqa: E402

clock = time.perf_counter


def origin(size: int) -> http.server.ThreadingHTTPServer:
    block = b"z" * (1 << 20)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            left = size
            while left:
                n = min(left, len(block))
                self.wfile.write(block[:n])
                left -= n

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stats(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "p90": percentile(vals, 0.9), "p99": percentile(vals, 0.99), "n": len(vals)}


def main() -> int:
    opts = _parse_args()
    if not shutil.which("curl"):
        print("bench/network.py: the host has no curl (apt-get install curl)", file=sys.stderr)
        return 2
    size = opts.mb << 20
    srv = origin(size)
    port = srv.server_address[1]
    host = dataclasses.replace(default_host())
    proxy = EgressProxy(resolver=lambda name, p: ["127.0.0.1"] if name == "pkg.test" else [], allow_loopback=True)
    host.set_egress_proxy(proxy)
    nets = {"none": "none", "allow": f"allow:pkg.test:{port}"}
    limits = {"egress_mb": 1 << 20}  # no cap in the way of the downloads
    samples: dict[str, dict[str, list[float]]] = {m: {"none": [], "allow": []} for m in ("cold_true", "exec_true")}
    samples["download"] = {"host": [], "proxy": []}
    url = f"http://pkg.test:{port}/big"
    curl = ["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}"]
    live = {k: Sandbox(rootfs=opts.rootfs, network=v, limits=limits, host=host) for k, v in nets.items()}
    load0 = os.getloadavg()
    try:
        for r in range(opts.warmup + max(opts.rounds, opts.download_rounds)):
            keep = r >= opts.warmup
            order = ("none", "allow") if r % 2 == 0 else ("allow", "none")
            if r < opts.warmup + opts.rounds:
                for k in order:
                    cold, ex = _start_and_exec(opts.rootfs, nets[k], host, live[k])
                    if keep:
                        samples["cold_true"][k].append(cold * 1e3)
                        samples["exec_true"][k].extend(e * 1e3 for e in ex)
            if r < opts.warmup + opts.download_rounds:
                for k in (("host", "proxy") if r % 2 == 0 else ("proxy", "host")):
                    t = clock()
                    if k == "host":
                        got = subprocess.run([*curl, f"http://127.0.0.1:{port}/big"], capture_output=True, check=True).stdout
                    else:
                        res = live["allow"].exec([*curl, url], timeout=120)
                        assert res.exit_code == 0, res
                        got = res.stdout
                    dt = clock() - t
                    assert int(got) == size, got
                    if keep:
                        samples["download"][k].append(dt * 1e3)
        log = live["allow"].network_log()
    finally:
        for sb in live.values():
            sb.close()
        proxy.close()
        srv.shutdown()
    load1 = os.getloadavg()
    result = {"schema": "sandboxlite.bench-network/1", "rounds": opts.rounds, "download_rounds": opts.download_rounds,
              "mb": opts.mb, "rootfs": opts.rootfs, "euid": os.geteuid(), "load_avg": [load0, load1], "metrics": {},
              "proxy_log_entries": len(log)}  # fmt: skip
    _report(opts, samples, result, load0, load1)
    write_json(result, "network", opts.json)
    return 0


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--download-rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--mb", type=int, default=50, help="MiB per download (default 50)")
    ap.add_argument("--rootfs", default="science", help="the sandboxes' rootfs (it needs curl; default science)")
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def _start_and_exec(rootfs: str, network: str, host, sb_live: Sandbox) -> tuple[float, list[float]]:
    """One cold start (a new sandbox to its first /bin/true finished, close excluded) and five exec
    round trips in the live sandbox, on one network setting; (seconds, [seconds])."""
    t0 = clock()
    sb = Sandbox(rootfs=rootfs, network=network, host=host)
    assert sb.exec(["/bin/true"]).exit_code == 0
    t1 = clock()
    sb.close()
    ex = []
    for _ in range(5):
        t = clock()
        sb_live.exec(["/bin/true"])
        ex.append(clock() - t)
    return t1 - t0, ex


def _report(opts: argparse.Namespace, samples: dict[str, dict[str, list[float]]], result: dict, load0, load1) -> None:
    """The table of both sides of each metric and their ratio; the statistics into ``result["metrics"]``."""
    print(f"bench/network.py: {opts.rounds} interleaved rounds ({opts.download_rounds} of downloads of {opts.mb} MiB), "
          f"rootfs={opts.rootfs}, euid {os.geteuid()}, load {load0[0]:.2f} -> {load1[0]:.2f}")  # fmt: skip
    print(f"{'metric':<10} {'side':<6} {'median':>9} {'p90':>9} {'p99':>9}   {'side':<6} {'median':>9} {'p90':>9} "
          f"{'p99':>9}   {'ratio':>6}")  # fmt: skip
    for m, (a, b) in (("cold_true", ("none", "allow")), ("exec_true", ("none", "allow")), ("download", ("host", "proxy"))):
        sa, sb_ = stats(samples[m][a]), stats(samples[m][b])
        ratio = sb_["median"] / sa["median"]
        entry = {a: sa, b: sb_, f"ratio_{b}_over_{a}": round(ratio, 4)}
        if m == "download":
            for side, s in ((a, sa), (b, sb_)):
                s["mib_per_s_median"] = round(opts.mb / (s["median"] / 1e3), 1)
        result["metrics"][m] = entry
        print(f"{m:<10} {a:<6} {sa['median']:>9.3f} {sa['p90']:>9.3f} {sa['p99']:>9.3f}   {b:<6} {sb_['median']:>9.3f} "
              f"{sb_['p90']:>9.3f} {sb_['p99']:>9.3f}   {ratio:>6.3f}")  # fmt: skip
    d = result["metrics"]["download"]
    print(f"download throughput (median): host {d['host']['mib_per_s_median']} MiB/s, through the proxy "
          f"{d['proxy']['mib_per_s_median']} MiB/s (ms above; ratio = allow/none, proxy/host)")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
