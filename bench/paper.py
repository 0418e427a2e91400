#!/usr/bin/env python3
"""The paper's own agent on its Docker runtime against the same agent on sandboxlite, in one run.

    .venv/bin/python bench/paper.py [--episodes N] [--steps 20] [--rootfs science]

Both sides run the package's own code (PyPI ``llm-in-sandbox`` 0.2.0, the ``[paper]`` extra): its
``Agent.run`` with its tools, against a scripted OpenAI-compatible server on loopback that answers
``--steps`` tool calls (``execute_bash``: echo, Python, ls, a file written and read) and then
``submit``.  One side builds its ``DockerRuntime`` (a container of the rootfs image ``docker
import``-ed, ``network_mode="none"``: Docker Hub is not reachable here, and both sides then run the
same files offline); the other ``compat.SandboxRuntime`` (a sandbox over the same rootfs).  Episodes
alternate between the two.  Measured: the episode and its phases (start: the runtime made;
the agent's run; close: Docker's ``stop`` waits up to 5 s for ``sleep infinity``, which ignores
SIGTERM as a container's PID 1, before it kills it) and each tool call the agent makes on the
runtime (``run`` / ``demux_run``); the scripted model answers in
well under a millisecond, the same on both sides.  Needs a Docker daemon (bench/setup_docker.sh
starts one).  Prints medians and p90 and the ratio docker/sandboxlite; writes JSON
(``bench/results/paper-<time>.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "bench")

from tests.fake_openai import FakeOpenAIServer as S  # noqa: E402

sys.path.insert(0, str(HERE))
from ab import percentile, write_json  # noqa: E402

SYSTEM = "You are an agent in a sandbox. Use the tools."
INSTANCE = "Task: {{problem_statement}}\nWrite the answer to /testbed/output/answer.txt and call submit."
COMMANDS = ["echo step {i}", "python3 -c 'print({i} * {i})'", "ls -la /testbed", "echo {i} > /testbed/f{i}.txt && cat /testbed/f{i}.txt"]


def script(steps: int) -> list:
    out = [S.tool_call_reply("execute_bash", {"command": COMMANDS[i % len(COMMANDS)].format(i=i)}) for i in range(steps - 1)]
    out.append(S.tool_call_reply("execute_bash", {"command": "echo 42 > /testbed/output/answer.txt"}))
    out.append(S.tool_call_reply("submit", {}))
    return out


def docker_image(rootfs: str) -> str:
    """The rootfs image, ``docker import``-ed once (tagged by its manifest's digest)."""
    from sandboxlite import images as rootfs_mod

    root = rootfs_mod.image_root(rootfs)
    manifest = root.parent / "manifest.json"
    digest = json.loads(manifest.read_text()).get("digest", "")[-12:] if manifest.is_file() else "local"
    tag = f"sandboxlite-bench/{rootfs}:paper-{digest or 'local'}"
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode != 0:
        print(f"bench/paper.py: importing {root} as {tag} (once)", file=sys.stderr)
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
        subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout, check=True, capture_output=True)
        tar.stdout.close()
        tar.wait()
    return tag


class Timed:
    """Wraps a runtime's command methods, recording each call's wall time."""

    def __init__(self, runtime, calls: list[float]):
        self._rt, self._calls = runtime, calls

    def __getattr__(self, name):
        attr = getattr(self._rt, name)
        if name not in ("run", "demux_run"):
            return attr

        def timed(*a, **kw):
            t = time.perf_counter()
            try:
                return attr(*a, **kw)
            finally:
                self._calls.append((time.perf_counter() - t) * 1e3)

        return timed


def episode(make_runtime, steps: int, calls: list[float]) -> dict[str, float]:
    """One episode: its phases' wall times (ms): start (the runtime made), run (the agent's run), close."""
    from llm_in_sandbox import Agent, AgentArgs

    with S(script(steps)) as srv:
        t0 = time.perf_counter()
        rt = make_runtime()
        t1 = time.perf_counter()
        try:
            agent = Agent(AgentArgs(system_prompt=SYSTEM, instance_prompt=INSTANCE, llm_name="openai/m",
                                    llm_base_url=srv.base_url, quiet=True), logger=logging.getLogger("bench"))  # fmt: skip
            traj = agent.run(runtime=Timed(rt, calls), problem_statement="What is 6*7?", max_steps=steps + 2, temperature=0)
            answer = rt.run("cat /testbed/output/answer.txt")[0].strip()
        finally:
            t2 = time.perf_counter()
            rt.close()
            t3 = time.perf_counter()
    if answer != "42" or len(traj.steps) != steps + 1:
        raise SystemExit(f"bench/paper.py: an episode went wrong (answer {answer!r}, {len(traj.steps)} steps)")
    ms = lambda a, b: (b - a) * 1e3  # noqa: E731
    return {"episode": ms(t0, t3), "start": ms(t0, t1), "agent run": ms(t1, t2), "close": ms(t2, t3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rootfs", default="science")
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()
    from llm_in_sandbox.docker_runtime import DockerRuntime

    from sandboxlite import SandboxConfig
    from sandboxlite.compat.llm_in_sandbox import SandboxRuntime

    logging.getLogger("bench").setLevel(logging.WARNING)
    image = docker_image(opts.rootfs)
    sides = {
        "docker": lambda: DockerRuntime(docker_image=image, repo_path="/testbed", logger=False, network_mode="none"),
        "sandboxlite": lambda: SandboxRuntime(image, logger=False, sandbox_config=SandboxConfig(rootfs=opts.rootfs)),
    }
    phases = ("episode", "start", "agent run", "close")
    episodes: dict[str, dict[str, list[float]]] = {p: {k: [] for k in sides} for p in phases}
    calls: dict[str, list[float]] = {k: [] for k in sides}
    for name, make in sides.items():  # one warm-up episode each
        episode(make, opts.steps, [])
    for i in range(opts.episodes):
        for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            for phase, v in episode(sides[name], opts.steps, calls[name]).items():
                episodes[phase][name].append(v)
    result = {"schema": "sandboxlite.bench-paper/1", "episodes": opts.episodes, "steps": opts.steps,
              "rootfs": opts.rootfs, "docker_image": image, "metrics": {}}  # fmt: skip
    print(f"bench/paper.py: the paper's agent (llm-in-sandbox 0.2.0), {opts.steps}-step scripted episodes, "
          f"{opts.episodes} per side, interleaved; rootfs {opts.rootfs}")
    print(f"{'metric':<22} {'docker median':>13} {'sl median':>10} {'ratio':>7}   {'docker p90':>10} {'sl p90':>8}   (ms)")
    for metric, data in (*episodes.items(), ("tool call", calls)):
        st = {k: {"median": statistics.median(v), "p90": percentile(v, 0.9), "n": len(v)} for k, v in data.items()}
        ratio = st["docker"]["median"] / st["sandboxlite"]["median"]
        st["ratio_docker_over_sandboxlite"] = round(ratio, 2)
        result["metrics"][metric] = st
        print(f"{metric:<22} {st['docker']['median']:>13.1f} {st['sandboxlite']['median']:>10.1f} {ratio:>6.1f}x   "
              f"{st['docker']['p90']:>10.1f} {st['sandboxlite']['p90']:>8.1f}")
    write_json(result, "paper", opts.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
