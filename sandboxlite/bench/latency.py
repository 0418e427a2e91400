"""The latency metrics: one timed callable per (metric, runtime), run by ``core.run_rounds``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .baselines import Runtime
from .core import (
    COLD_COMMANDS,
    FILE_BYTES,
    SANDBOXLITE,
    TRUE,
    TRUE_CMD,
    LeakCheck,
    Series,
    Unavailable,
    ms,
    not_available,
    short_error,
)

# which baselines each latency metric has (sandboxlite always comes first)
COLD_BASELINES = ["raw_bwrap", "unshare", "sandlock", "posix_spawn", "subprocess_run", "docker", "podman", "runc"]
EXEC_BASELINES = ["posix_spawn", "sandlock", "docker", "podman", "runc"]
FILE_BASELINES = ["host"]


def baselines_of(metric: str) -> list[str]:
    if metric in COLD_COMMANDS:
        return COLD_BASELINES
    if metric in ("exec_true", "warm_true"):
        return EXEC_BASELINES
    if metric in FILE_BYTES:
        return FILE_BASELINES
    return []


def _check(res, what: str) -> None:
    if res.exit_code != 0:
        raise RuntimeError(f"{what} exited {res.exit_code}: {res.stderr.decode(errors='replace').strip()[:200]}")


class Latency:
    """Builds the series; keeps what must be closed at the end."""

    def __init__(self, metrics: list[str], runtimes: dict[str, Runtime], *, rootfs: str, cgroups: str,
                 exec_per_round: int, file_rounds: int | None, leak: LeakCheck) -> None:  # fmt: skip
        self.metrics, self.runtimes = metrics, runtimes
        self.rootfs, self.cgroups = rootfs, cgroups
        self.exec_per_round, self.file_rounds = exec_per_round, file_rounds
        self.leak = leak
        self.keep: list[Any] = []  # sandboxes, pools, live containers: closed by close()
        self.pending_close: list = []  # sandboxes from cold_true, closed (and timed) by the close series
        self.leak.live.append(self.pending_close)

    def sandbox(self):
        from .. import Sandbox

        return Sandbox(rootfs=self.rootfs, cgroups=self.cgroups)

    # -- sandboxlite -----------------------------------------------------------------------------
    def sl_cold(self, cmd: list[str], hand_over: bool) -> Callable[[], float]:
        from .. import Sandbox

        rootfs, cg = self.rootfs, self.cgroups

        def run() -> float:
            t0 = time.perf_counter_ns()
            sb = Sandbox(rootfs=rootfs, cgroups=cg)
            res = sb.exec(cmd)
            t1 = time.perf_counter_ns()
            if hand_over:
                self.pending_close.append(sb)
            else:
                sb.close()
            _check(res, " ".join(cmd))
            return ms(t1 - t0)

        return run

    def sl_exec(self) -> Callable[[], float]:
        sb = self.sandbox()
        self.keep.append(sb)
        self.leak.live.append(sb)

        def run() -> float:
            t0 = time.perf_counter_ns()
            res = sb.exec(TRUE_CMD)
            t1 = time.perf_counter_ns()
            _check(res, TRUE)
            return ms(t1 - t0)

        return run

    def sl_close(self) -> Callable[[], float]:
        leak = self.leak

        def run() -> float:
            if self.pending_close:
                sb = self.pending_close.pop()
            else:  # cold_true did not run: a fresh sandbox that ran one command (untimed)
                sb = self.sandbox()
                sb.exec(TRUE_CMD)
            ex, bw = leak.identity(sb.executor_pid), leak.identity(sb.bwrap_pid)
            cg = list(sb.info.get("cgroup") or [])
            t0 = time.perf_counter_ns()
            sb.close()
            t1 = time.perf_counter_ns()
            leak.verify("close", ex, bw, cg)
            return ms(t1 - t0)

        return run

    def sl_reset(self) -> Callable[[], float]:
        sb = self.sandbox()
        self.keep.append(sb)
        self.leak.live.append(sb)
        leak = self.leak

        def run() -> float:
            # give reset some work (untimed): a background process and files in /tmp and /testbed
            _check(sb.exec(["/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo x > /tmp/x; echo y > /testbed/y"]),
                   "setting up before reset")  # fmt: skip
            try:
                old = [leak.identity(p.pid) for p in leak.psutil.Process(sb.executor_pid).children(recursive=True)]
            except leak.psutil.Error:
                old = []
            t0 = time.perf_counter_ns()
            sb.reset()
            t1 = time.perf_counter_ns()
            leak.checked += 1
            stray = [i for i in old if leak.alive(i)]
            if stray:
                leak.problem(f"reset: processes of the old state still running: {[i[0] for i in stray]}")
            after = sb.exec(["/bin/sh", "-c", "find /tmp /testbed -mindepth 1"])
            if after.stdout:
                leak.problem(f"reset: files survived: {after.stdout[:200]!r}")
            return ms(t1 - t0)

        return run

    def sl_warm(self) -> Callable[[], float]:
        from .. import SandboxPool

        pool = SandboxPool(size=2, rootfs=self.rootfs, cgroups=self.cgroups)
        self.keep.append(pool)

        def run() -> float:
            t0 = time.perf_counter_ns()
            sb = pool.acquire()
            res = sb.exec(TRUE_CMD)
            t1 = time.perf_counter_ns()
            pool.release(sb)
            _check(res, f"{TRUE} in a pooled sandbox")
            return ms(t1 - t0)

        return run

    def files_sandbox(self):
        if not hasattr(self, "_files_sb"):
            self._files_sb = self.sandbox()
            self.keep.append(self._files_sb)
            self.leak.live.append(self._files_sb)
        return self._files_sb

    def payload(self, size: int) -> bytes:
        if not hasattr(self, "_payloads"):
            self._payloads: dict[int, bytes] = {}
        if size not in self._payloads:
            self._payloads[size] = os.urandom(size)
        return self._payloads[size]

    def sl_file(self, op: str, size: int) -> Callable[[], float]:
        sb = self.files_sandbox()
        data = self.payload(size)
        path = f"/testbed/bench-{size}.bin"
        sb.write_file(path, data)  # so that a read has something to read (and a check)
        if sb.read_file(path) != data:
            raise RuntimeError("read_file did not return the bytes write_file wrote")
        clock = time.perf_counter_ns

        if op == "write":
            def run() -> float:
                t0 = clock()
                sb.write_file(path, data)
                return ms(clock() - t0)
        else:
            def run() -> float:
                t0 = clock()
                got = sb.read_file(path)
                t1 = clock()
                if len(got) != size:
                    raise RuntimeError(f"read_file returned {len(got)} bytes, not {size}")
                return ms(t1 - t0)
        return run

    def host_file(self, op: str, size: int) -> Callable[[], float]:
        rt = self.runtimes["host"]
        data = self.payload(size)
        path = rt.dir / f"bench-{size}.bin"  # type: ignore[attr-defined]
        path.write_bytes(data)
        clock = time.perf_counter_ns

        if op == "write":
            def run() -> float:
                t0 = clock()
                with open(path, "wb") as f:
                    f.write(data)
                return ms(clock() - t0)
        else:
            def run() -> float:
                t0 = clock()
                with open(path, "rb") as f:
                    got = f.read()
                t1 = clock()
                if len(got) != size:
                    raise RuntimeError(f"read {len(got)} bytes, not {size}")
                return ms(t1 - t0)
        return run

    # -- all of them ---------------------------------------------------------------------------
    def build(self) -> list[Series]:
        out: list[Series] = []
        lives: dict[str, Any] = {}
        for metric in self.metrics:
            extra = {"bytes": FILE_BYTES[metric]} if metric in FILE_BYTES else {}
            max_rounds = None
            if metric in FILE_BYTES and FILE_BYTES[metric] >= 64 << 20:
                max_rounds = self.file_rounds
            reps = self.exec_per_round if metric == "exec_true" else 1
            try:
                fn = self._sandboxlite(metric)
                out.append(Series(metric, SANDBOXLITE, fn, reps=reps, max_rounds=max_rounds, extra=dict(extra)))
            except Exception as e:  # noqa: BLE001 - reported in the table
                out.append(not_available(metric, SANDBOXLITE, short_error(e)))
            for name in baselines_of(metric):
                rt = self.runtimes.get(name)
                if rt is None:  # not asked for (--baselines)
                    continue
                if rt.reason is not None:
                    out.append(not_available(metric, name, rt.reason))
                    continue
                try:
                    fn = self._baseline(metric, rt, lives)
                except Unavailable as e:
                    out.append(not_available(metric, name, str(e)))
                    continue
                except Exception as e:  # noqa: BLE001
                    out.append(not_available(metric, name, short_error(e)))
                    continue
                if fn is None:
                    continue  # not applicable (e.g. subprocess_run beyond cold_true)
                r = reps if name == "posix_spawn" else 1  # a container exec takes ~50x longer: once per round
                out.append(Series(metric, name, fn, reps=r, max_rounds=max_rounds, extra=dict(extra)))
        return out

    def _sandboxlite(self, metric: str) -> Callable[[], float]:
        if metric in COLD_COMMANDS:
            return self.sl_cold(COLD_COMMANDS[metric], hand_over=metric == "cold_true" and "close" in self.metrics)
        if metric == "exec_true":
            return self.sl_exec()
        if metric == "warm_true":
            return self.sl_warm()
        if metric == "reset":
            return self.sl_reset()
        if metric == "close":
            return self.sl_close()
        if metric in FILE_BYTES:
            return self.sl_file(metric.split("_")[0], FILE_BYTES[metric])
        raise ValueError(metric)

    def _baseline(self, metric: str, rt: Runtime, lives: dict[str, Any]) -> Callable[[], float] | None:
        if metric in COLD_COMMANDS:
            return rt.cold(COLD_COMMANDS[metric])
        if metric in ("exec_true", "warm_true"):
            if rt.name not in lives:  # one live instance per runtime serves both metrics
                live = rt.live()
                if live is None:
                    return None
                lives[rt.name] = live
                self.keep.append(live)
            return lives[rt.name].exec(TRUE_CMD)
        if metric in FILE_BYTES and rt.name == "host":
            return self.host_file(metric.split("_")[0], FILE_BYTES[metric])
        return None

    def close(self) -> None:
        for obj in self.keep + list(self.pending_close):
            try:
                obj.close()
            except Exception:  # noqa: BLE001, S110 - best effort at the end
                pass
        self.keep.clear()
        self.pending_close.clear()
