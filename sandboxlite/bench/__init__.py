"""``sandboxlite bench``: sandboxlite side by side with what users run today.

Every latency metric runs in interleaved rounds (A B C A B C ..., the order rotated each round) with
its baselines in the same process and over the same root filesystem: ``os.posix_spawn``,
``unshare -Urmpf``, raw ``bwrap`` with equivalent flags, Docker, podman and runc (when they can run
here; otherwise each is reported as ``not available: REASON``).  Then throughput (full cycles per
second at several concurrencies), density (N idle sandboxes alive at once, their memory), the
sandbox-side cost of a scripted 20-step agent episode, and file API throughput.

Modules: ``core`` (statistics, the interleaved-round engine, leak check, machine description),
``baselines`` (the other runtimes), ``latency`` (the per-sample functions), ``scale`` (throughput
and density), ``episode`` (agent episodes), ``profile`` (where a cold start spends its time),
``report`` (table, JSON, chart) and ``runner`` (``run_bench``, what the CLI calls).

The chart needs matplotlib (``pip install 'sandboxlite[bench]'``); nothing else here does.

May import: errors, result, config, isolation, images, jail, agent, sandboxlite.
"""

SCHEMA = "sandboxlite.bench/2"

__all__ = ["SCHEMA"]
