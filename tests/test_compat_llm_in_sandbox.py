"""sandboxlite.compat.llm_in_sandbox against the real paper package (PyPI llm-in-sandbox 0.2.0, the
[paper] extra): its runtime's conventions through its own code, its agent loop with its own tools
solving a task against a scripted OpenAI-compatible server on loopback, its reward function, its
CLI (`sandboxlite paper -- run ...`).  No Docker anywhere: where the package's DockerRuntime is run
for comparison, a sandbox stands in for the container (``SandboxAsContainer``: docker-py's
``exec_run`` as the Docker API defines it), so the comparison checks everything the runtime itself
does to a command and its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch a price list at import

import llm_in_sandbox  # noqa: E402  (the [paper] extra; CI installs it)
from llm_in_sandbox.docker_runtime import DockerRuntime as PaperDockerRuntime  # noqa: E402  (the original class)

from sandboxlite import SandboxPool  # noqa: E402
from sandboxlite.compat import llm_in_sandbox as compat  # noqa: E402

from .fake_openai import FakeOpenAIServer as S  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def installed():
    compat.install()
    yield
    compat.uninstall()


@pytest.fixture(scope="module")
def rt():
    r = compat.SandboxRuntime("cdx123/llm-in-sandbox:v0.1", logger=False)
    yield r
    r.close()


class SandboxAsContainer:
    """docker-py's Container.exec_run over a sandbox: argv run in ``workdir`` with ``environment`` added;
    ``output`` the bytes of stdout and stderr as they arrived (one pipe), or with ``demux`` a pair, an
    empty stream as None; ``exit_code`` the process's."""

    def __init__(self, sb):
        self.sb = sb

    def exec_run(self, cmd, workdir=None, environment=None, demux=False):
        argv = list(cmd) if demux else ["bash", "-c", 'exec 2>&1; exec "$@"', "bash", *cmd]
        r = self.sb.exec(argv, cwd=workdir, env=environment, timeout=600)
        out = (r.stdout or None, r.stderr or None) if demux else r.stdout
        return types.SimpleNamespace(output=out, exit_code=r.exit_code)


def paper_runtime_over(sb) -> PaperDockerRuntime:
    """The package's own DockerRuntime, its container a sandbox (its constructor, which needs Docker, skipped)."""
    paper = object.__new__(PaperDockerRuntime)
    paper.repo_path = "/testbed"
    paper.container = SandboxAsContainer(sb)
    return paper


CASES = [
    ("echo hi", {}),
    ("echo out; echo err >&2; echo out2", {}),  # merged in the order written
    ("printf '\\033[1;31mred\\033[0m\\r\\nplain\\r\\n'", {}),  # colour codes and carriage returns go
    ("exit 3", {}),
    ("false", {}),
    ("sleep 5", {"timeout": 1}),  # timeout's 124: the "took too long" message
    ("exit 124", {}),  # the same convention for a command's own 124
    ("printf '\\xff\\xfeok'", {}),  # not UTF-8: replacement characters
    ("cd /tmp && pwd; echo $PATH; echo $PIP_ROOT_USER_ACTION $PIP_DISABLE_PIP_VERSION_CHECK", {}),
    ("pwd; ls", {"workdir": "/tmp"}),
    ("""echo "a b" 'c $HOME' "$((6*7))"; echo 'it'"'"'s'""", {}),  # quoting survives both shells
    ("kill -9 $$", {}),  # killed by a signal: 137
    ("head -c 300000 /dev/zero | tr '\\0' x; echo", {}),
    ("echo partial; sleep 5", {"timeout": 1}),
]


@pytest.mark.parametrize("code, kw", CASES)
def test_run_and_demux_run_return_what_the_packages_runtime_returns(rt, code, kw):
    paper = paper_runtime_over(rt.sandbox)
    assert rt.run(code, **kw) == paper.run(code, **kw)
    assert rt.demux_run(code, **kw) == paper.demux_run(code, **kw)


def test_the_start_and_the_file_copies(rt, tmp_path):
    out, code = rt.run("pwd; ls -A; git rev-parse --is-inside-work-tree")
    assert (out, code) == ("/testbed\n.git\ninput\noutput\ntrue\n", "0")
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.txt").write_text("B")
    rt.copy_dir_to_container(str(src), "/testbed/input")
    rt.copy_to_container(str(src / "a.txt"), "/testbed/deep/er/z.txt")  # parents made
    rt.copy_to_container(str(src / "sub"), "/testbed/tree")  # a directory becomes the destination
    assert rt.run("find input deep tree -type f | sort | xargs -n1 sh -c 'echo $0=$(cat $0)'")[0] == (
        "deep/er/z.txt=A\ninput/a.txt=A\ninput/sub/b.txt=B\ntree/b.txt=B\n")
    with pytest.raises(FileNotFoundError):
        rt.copy_to_container(str(tmp_path / "missing"), "/testbed/x")
    rt.run("echo 42 > output/answer.txt; mkdir -p output/d; echo q > output/d/q; ln -s /etc/shadow output/bad")
    local = tmp_path / "files"
    rt.copy_from_container("/testbed/output", str(local))
    assert sorted(p.name for p in local.iterdir()) == ["answer.txt", "d"]  # the link out is not recreated
    assert (local / "answer.txt").read_text() == "42\n" and (local / "d" / "q").read_text() == "q\n"
    nothing = tmp_path / "file-only"
    rt.copy_from_container("/testbed/output/answer.txt", str(nothing))  # as Docker's runtime: a file copies nothing
    assert nothing.is_dir() and list(nothing.iterdir()) == []
    with pytest.raises(Exception):
        rt.copy_from_container("/testbed/nope", str(tmp_path / "nope"))
    assert rt.get_task_instruction("Q?") == "Q?"


def test_docker_options_map_or_are_refused():
    cfg = compat.config_for("img", "/testbed", {"environment": {"A": "1"}, "mem_limit": "512m",
                                                 "network_mode": "host", "volumes": {"/data": {"bind": "/d", "mode": "ro"}}})
    assert cfg.env["A"] == "1" and cfg.limits.memory_mb == 512 and cfg.network == "host"
    assert cfg.mounts[0].src == "/data" and cfg.mounts[0].dst == "/d" and not cfg.mounts[0].rw
    with pytest.raises(TypeError, match="privileged"):
        compat.SandboxRuntime("img", privileged=True)
    with pytest.raises(Exception, match="network_mode"):
        compat.config_for("img", "/testbed", {"network_mode": "bridge"})


def test_a_pool_gives_and_takes_back(tmp_path):
    with SandboxPool(size=1) as pool:
        a = compat.SandboxRuntime("img", logger=False, pool=pool)
        a.run("echo x > /testbed/left.txt")
        sb = a.sandbox
        a.close()
        assert a.container is None
        b = compat.SandboxRuntime("img", logger=False, pool=pool)
        assert b.sandbox is sb and b.run("ls /testbed")[0] == "input\noutput\n"  # reset, then set up again
        b.close()


def test_install_swaps_it_in_and_out(installed):
    import llm_in_sandbox.cli as cli
    import llm_in_sandbox.docker_runtime as dr

    assert llm_in_sandbox.DockerRuntime is compat.SandboxRuntime is dr.DockerRuntime is cli.DockerRuntime
    assert compat.installed()
    compat.uninstall()
    assert dr.DockerRuntime is PaperDockerRuntime and not compat.installed()
    compat.install()


SYSTEM = "You are an agent in a sandbox. Use the tools."
INSTANCE = "Task: {{problem_statement}}\nWrite the answer to /testbed/output/answer.txt and call submit."


def script():
    return [
        S.tool_call_reply("execute_bash", {"command": "python3 -c 'print(6*7)' > /testbed/output/answer.txt; ls /testbed"}),
        S.tool_call_reply("str_replace_editor", {"command": "view", "path": "/testbed/output/answer.txt"}),
        S.tool_call_reply("str_replace_editor", {"command": "create", "path": "/testbed/output/notes.md",
                                                 "file_text": "six times seven\n"}),
        S.tool_call_reply("submit", {}),
    ]  # fmt: skip


def test_the_packages_agent_solves_a_task_and_its_reward_grades_it(installed, tmp_path, monkeypatch):
    from llm_in_sandbox import Agent, AgentArgs, DockerRuntime
    from llm_in_sandbox.benchmark.runner import load_reward_function

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert DockerRuntime is compat.SandboxRuntime
    with S(script()) as srv:
        runtime = DockerRuntime(docker_image="cdx123/llm-in-sandbox:v0.1", logger=False)
        try:
            agent = Agent(AgentArgs(system_prompt=SYSTEM, instance_prompt=INSTANCE, llm_name="openai/m",
                                    llm_base_url=srv.base_url, output_dir=str(tmp_path), quiet=True))  # fmt: skip
            traj = agent.run(runtime=runtime, problem_statement="What is 6*7?", max_steps=6, temperature=0)
            answer = runtime.run("cat /testbed/output/answer.txt")[0].strip()
            notes = runtime.run("cat /testbed/output/notes.md")[0]
        finally:
            runtime.close()
    assert answer == "42" and notes.startswith("six times seven\n")  # (its editor adds a newline of its own)
    steps = traj.to_dict()["steps"] if hasattr(traj, "to_dict") else traj.steps
    observations = json.dumps(steps)
    assert "input" in observations and "output" in observations  # the ls of /testbed came back to the model
    assert len(srv.requests) == 4
    # the package's own tools' observations reached the model (its Observation format)
    last_user = json.dumps(srv.requests[1]["messages"][-1])
    assert "input" in last_user and "output" in last_user, last_user
    assert load_reward_function("math")(answer, "42") == 1.0
    assert load_reward_function("math")("41", "42") == 0.0


def test_sandboxlite_paper_runs_the_packages_cli(tmp_path):
    """`sandboxlite paper -- run ...`: the paper's CLI end to end (a subprocess: its fire CLI and its logging)."""
    with S(script()) as srv:
        env = {**os.environ, "OPENAI_API_KEY": "k", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        p = subprocess.run([sys.executable, "-m", "sandboxlite.cli", "paper", "--", "run", "--query", "What is 6*7?",
                            "--llm_name", "m", "--llm_base_url", srv.base_url, "--output_dir", str(tmp_path),
                            "--max_steps", "6", "--temperature", "0"],
                           capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (run_dir,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert (run_dir / "files" / "answer.txt").read_text() == "42\n"
    assert (run_dir / "files" / "notes.md").read_text().startswith("six times seven\n")
    traj = json.loads((run_dir / "trajectory.json").read_text())
    assert traj["steps"], traj


def _paper_score(task_name: str, answer: str, ground_truth: str, kwargs: dict) -> float:
    """As the paper's RL env grades: its reward function loaded in a worker process."""
    from llm_in_sandbox.benchmark.runner import load_reward_function

    return load_reward_function(task_name)(answer, ground_truth, **kwargs)


PAPER_ROW = {  # a row of the paper's RL data: input_files as JSON text, the image it names
    "id": "math-0001", "domain": "math", "qa_type": "open_ended", "ground_truth": "42",
    "problem_statement": "The file /testbed/documents/numbers.txt holds two numbers: write their product to "
                         "/testbed/answer.txt.",
    "input_files": json.dumps({"numbers.txt": "6\n7\n"}), "docker_image": "cdx123/llm-in-sandbox:v0.1",
}  # fmt: skip


def test_the_calls_the_papers_rl_env_makes(installed, tmp_path):
    """The paper's RL environment (rllm's LLMinSandboxEnv, in its llm-in-sandbox-rl repository, not on PyPI)
    makes these calls, in this order, on the package's objects: with install() before that module is
    imported, each goes to a sandbox.  The episode: from a paper-format row through reset (the runtime,
    the inputs in /testbed/documents), steps with the package's Action run by its Agent's _execute_action,
    the final reward from its instruct_pretrain reward function in a worker process with a timeout, close."""
    from concurrent.futures import ProcessPoolExecutor

    from llm_in_sandbox import Action, DockerRuntime
    from llm_in_sandbox.agent import Agent

    entry = dict(PAPER_ROW)
    image = entry.pop("docker_image")
    runtime = DockerRuntime(docker_image=image, repo_path="/testbed", logger=False)  # reset
    try:
        assert isinstance(runtime, compat.SandboxRuntime)
        staged = tmp_path / "inputs"
        staged.mkdir()
        for name, text in json.loads(entry["input_files"]).items():
            (staged / name).write_text(text, encoding="utf-8")
        runtime.copy_dir_to_container(str(staged), "/testbed/documents")
        observation = (entry["problem_statement"], {"extra_info": entry})
        assert observation[0].startswith("The file /testbed/documents/numbers.txt")
        impl = Agent.__new__(Agent)  # the env executes actions with the package's own Agent code
        seen = [impl._execute_action(a, runtime) for a in (
            Action("execute_bash", {"command": "cat /testbed/documents/numbers.txt"}),
            Action("str_replace_editor", {"command": "create", "path": "/testbed/solve.py", "file_text": "print(6*7)\n"}),
            Action("str_replace_editor", {"command": "view", "path": "/testbed/solve.py"}),
            Action("execute_bash", {"command": "python3 /testbed/solve.py > /testbed/answer.txt"}),
            Action("execute_bash", {"command": "ls /nonexistent"}),
            Action("submit", {}),
        )]  # fmt: skip
        assert "6\n7" in seen[0] and "print(6*7)" in seen[2] and "No such file" in seen[4], seen
        answer = runtime.run("cat /testbed//answer.txt 2>/dev/null || echo ''")[0].strip()  # compute_final_reward
        kwargs = {k: v for k, v in entry.items() if k != "ground_truth"}
        with ProcessPoolExecutor(max_workers=1) as ex:
            reward = ex.submit(_paper_score, "instruct_pretrain", answer, entry["ground_truth"], kwargs).result(timeout=60)
        assert answer == "42" and reward == 1.0
    finally:
        runtime.close()
    assert runtime.container is None


def test_sandboxlite_paper_runs_the_packages_benchmark(tmp_path):
    """`sandboxlite paper -- benchmark --task demo`: the package's benchmark runner (its data, its staging of the
    problem's input files, its reward function) over sandboxes.  (Its runner stages inputs in /testbed/documents
    and reads /testbed/answer.txt, its defaults where the task's prompt config names no directories.)"""
    with S([S.tool_call_reply("execute_bash", {"command": "echo $(( $(paste -sd+ /testbed/documents/numbers.txt) ))"
                                                          " > /testbed/answer.txt"}),
            S.tool_call_reply("submit", {})]) as srv:  # fmt: skip
        env = {**os.environ, "OPENAI_API_KEY": "k", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        p = subprocess.run([sys.executable, "-m", "sandboxlite.cli", "paper", "--", "benchmark", "--task", "demo",
                            "--llm_name", "m", "--llm_base_url", srv.base_url, "--output_dir", str(tmp_path),
                            "--start_id", "3", "--end_id", "4", "--num_workers", "1", "--max_steps", "4"],
                           capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (results,) = tmp_path.glob("*/results.json")
    summary = json.loads(results.read_text())
    assert summary["total"] == 1 and summary["mean_score"] == 1.0 and summary["num_errors"] == 0, summary
