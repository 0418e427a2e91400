"""The agent, RL and eval layers in a sandbox whose workdir is not /testbed (real sandboxes).

``Sandbox.workdir`` is where commands start and relative paths resolve: /testbed by default,
``config.workdir`` with namespaces, a host directory of the sandbox's own with landlock (where
/testbed does not exist).  Whatever it is, the model must be told the paths that exist, the inputs
must land there, and the answer must be read from there.  Each test runs twice: with namespaces
and the workdir /srv/task, and with isolation="landlock" (/tmp/sandboxlite-<uid>/sb-.../testbed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sandboxlite import Sandbox, SandboxConfig, SandboxPool
from sandboxlite.agent.model import FakeModel
from sandboxlite.agent.run import run_task
from sandboxlite.agent.scripted import ScriptedModel
from sandboxlite.agent.task import Task
from sandboxlite.eval import EvalConfig, load_tasks_file, run_eval
from sandboxlite.eval.custom import score_row
from sandboxlite.eval.domains import DOCS_PATH
from sandboxlite.eval.items import Domain, EvalItem
from sandboxlite.eval.runner import read_results
from sandboxlite.rl import SandboxEnv
from sandboxlite.rl.adapters.rllm import RllmSandboxEnv

from .test_agent_run import bash, editor, submit  # the scripted model's steps

CONFIGS = {
    "namespaces": SandboxConfig(workdir="/srv/task", rootfs="host"),
    "landlock": SandboxConfig(isolation="landlock", rootfs="host"),  # its workdir: a host directory of its own
}
SUM = Task.from_dict({"id": "sum", "query": "Add the two numbers in n.txt.", "input_files": {"n.txt": "17\n25\n"},
                      "max_steps": 10, "metadata": {"answer": "42"}})  # fmt: skip


@pytest.fixture(params=sorted(CONFIGS))
def config(request):
    return CONFIGS[request.param]


@pytest.fixture
def sb(config):
    with Sandbox(config) as s:
        assert s.workdir != "/testbed"
        yield s


def awk(wd: str) -> str:
    return f"awk '{{s+=$1}} END {{print s}}' {wd}/input/n.txt > {wd}/output/answer.txt"


def no_tool_call_ends(wd: str) -> str:
    return f"call submit when the final answer is in {wd}/output/answer.txt."




def trajectory(result) -> dict:
    return json.loads((Path(result.output_dir) / "trajectory.json").read_text())


def outputs(t: dict) -> list[str]:
    return [o["output"] for s in t["steps"] for o in s["observations"]]


def assert_no_other_testbed(text: str, wd: str) -> None:
    """No path in ``text`` names /testbed but as part of the workdir (a landlock one ends in /testbed)."""
    assert "/testbed" not in text.replace(wd, "<workdir>")


def assert_prompts_name_the_workdir(system: str, instance: str, wd: str) -> None:
    assert f"Your working directory is {wd}." in system
    assert f"The task's input files, if any, are in {wd}/input." in system
    assert f"Write your final answer to {wd}/output/answer.txt" in system
    assert f"- {wd}/input/n.txt (6 bytes)" in instance
    assert f"write the final answer to {wd}/output/answer.txt" in instance
    assert_no_other_testbed(system + instance, wd)


def assert_tools_name_the_workdir(tools: list[dict], wd: str) -> None:
    text = json.dumps(tools)
    assert f"it starts in {wd}," in text and f"input files are in {wd}/input;" in text
    assert f"write your final answer to {wd}/output/answer.txt yourself" in text
    assert_no_other_testbed(text, wd)


# -- agent ---------------------------------------------------------------------------------------
def test_run_task_tells_the_model_the_workdir_and_reads_the_answer_there(sb, tmp_path):
    wd, seen_tools = sb.workdir, []

    def look(messages, tools):
        seen_tools.append(tools)
        return bash("pwd; ls input")

    model = FakeModel([
        look,
        bash(f"{awk(wd)}; echo notes > {wd}/output/notes.txt"),
        "I think I am done.",  # no tool call: the correction names the real answer file
        editor(command="view", path="n.txt"),  # relative: the error's example is the real workdir
        editor(command="create", path="/dev/x", file_text="x"),  # refused: "use a path under <workdir>"
        submit(),
    ])  # fmt: skip
    r = run_task(SUM, model, output_dir=tmp_path / "out", sandbox=sb)
    assert r.submitted and r.answer == "42\n" and r.steps == 6

    t = trajectory(r)
    system, instance = t["messages"][0]["content"], t["messages"][1]["content"]
    assert_prompts_name_the_workdir(system, instance, wd)
    assert_tools_name_the_workdir(seen_tools[0], wd)
    out = outputs(t)
    assert out[0].startswith(f"{wd}\nn.txt\n")  # the shell started in the workdir, the input is there
    assert f"path must be absolute, e.g. {wd}/..., got 'n.txt'" in out[2]
    assert f"permission denied for /dev/x; use a path under {wd} or {sb.tmpdir}" in out[3]
    corrections = [m["content"] for m in t["messages"] if m["role"] == "user"][1:]
    assert len(corrections) == 1 and corrections[0].endswith(no_tool_call_ends(wd))
    assert_no_other_testbed(json.dumps(t["messages"]), wd)
    assert t["task"]["input_path"] == "/testbed/input"  # the task as written: /testbed means the workdir

    # the inputs were staged under the workdir, nothing under /testbed
    assert sb.read_file(f"{wd}/input/n.txt") == b"17\n25\n"
    assert sb.exec("test -e /testbed/input || test -e /testbed/output").exit_code == 1
    # answer.txt and files/ come from <workdir>/output
    result_dir = Path(r.output_dir)
    assert (result_dir / "answer.txt").read_text() == "42\n"
    assert sorted(p.name for p in (result_dir / "files").iterdir()) == ["answer.txt", "notes.txt"]
    assert (result_dir / "files" / "notes.txt").read_text() == "notes\n"


def test_a_task_input_path_under_testbed_is_under_the_workdir(sb, tmp_path):
    wd = sb.workdir
    task = Task.from_dict({"id": "docs", "query": "Read the passage.", "input_files": {"a/p.txt": "text\n"},
                           "input_path": "/testbed/docs/here", "max_steps": 3})  # fmt: skip
    r = run_task(task, FakeModel([bash("echo ok > output/answer.txt"), submit()]), output_dir=tmp_path, sandbox=sb)
    assert r.answer == "ok\n"
    assert sb.read_file(f"{wd}/docs/here/a/p.txt") == b"text\n"
    instance = trajectory(r)["messages"][1]["content"]
    assert f"Input files in {wd}/docs/here:\n- {wd}/docs/here/a/p.txt (5 bytes)" in instance


@pytest.mark.parametrize("mode", ["namespaces", "landlock"])
def test_a_task_input_path_under_tmp_is_in_the_sandboxs_tmpdir(tmp_path, mode):
    """/tmp/... in a task means the sandbox's TMPDIR: /tmp itself with namespaces, its own directory with
    Landlock (where the host's /tmp is closed to it)."""
    task = Task.from_dict({"id": "tmp", "query": "q", "input_files": {"x.txt": "1"}, "input_path": "/tmp/in",
                           "max_steps": 2})  # fmt: skip
    with Sandbox(CONFIGS[mode]) as sb:
        where = f"{sb.tmpdir}/in"
        assert (where == "/tmp/in") == (mode == "namespaces")
        r = run_task(task, FakeModel([bash(f"cat {where}/x.txt > output/answer.txt"), submit()]),
                     output_dir=tmp_path, sandbox=sb)  # fmt: skip
        assert r.answer == "1" and sb.read_file(f"{where}/x.txt") == b"1"
        instance = trajectory(r)["messages"][1]["content"]
        assert f"Input files in {where}:\n- {where}/x.txt (1 bytes)" in instance
        assert f"write the final answer to {sb.workdir}/output/answer.txt" in instance


def test_the_scripted_model_works_in_the_sandboxs_workdir(sb, tmp_path):
    wd = sb.workdir
    r = run_task(SUM, ScriptedModel("\\boxed{42}", steps=4), output_dir=tmp_path, sandbox=sb)
    assert r.submitted and r.answer == "\\boxed{42}"
    assert sb.read_file(f"{wd}/output/answer.txt") == b"\\boxed{42}"
    t = trajectory(r)
    calls = [s["observations"][0]["arguments"] for s in t["steps"]]
    assert_no_other_testbed(json.dumps(calls), wd)
    assert json.loads(calls[2])["path"] == f"{wd}/output/answer.txt"
    look, listing = outputs(t)[:2]
    assert "input" in look and "output" in look and "42" in look  # ls -la of the workdir, then python
    assert listing == "turn 1\n[exit code: 0]"  # ls of the (still empty) output directory worked


# -- rl ------------------------------------------------------------------------------------------
def test_the_rl_env_uses_the_sandboxs_workdir(config):
    env = SandboxEnv(SUM, config=config)
    try:
        obs, _ = env.reset(seed=0)
        wd = env.sandbox.workdir
        assert wd != "/testbed"
        assert_prompts_name_the_workdir(obs[0]["content"], obs[1]["content"], wd)
        assert_tools_name_the_workdir(env.tool_schemas(), wd)
        assert env.sandbox.read_file(f"{wd}/input/n.txt") == b"17\n25\n"
        assert env.sandbox.exec("test -e /testbed/input").exit_code == 1
        obs, *_ = env.step({"role": "assistant", "content": "thinking"})
        assert obs[-1]["content"].endswith(no_tool_call_ends(wd))
        env.step(FakeModel([bash(awk(wd))]).complete([], env.tool_schemas()))
        obs, reward, terminated, truncated, info = env.step(FakeModel([submit()]).complete([], env.tool_schemas()))
        assert terminated and not truncated
        assert info["answer"] == "42\n" and reward == 1.0 and info["task_reward"] == 1.0
    finally:
        env.close()


def test_the_rllm_adapter_reads_the_answer_from_the_workdir(config):
    with SandboxPool(config, size=1) as pool:
        env = RllmSandboxEnv.from_dict({"question": "Add the two numbers in n.txt.", "answer": "42", "pool": pool,
                                        "input_files": {"n.txt": "17\n25\n"}})  # fmt: skip
        try:
            obs, _ = env.reset()
            wd = env.env.sandbox.workdir
            assert_tools_name_the_workdir(obs["tools"], wd)
            assert f"{wd}/input/n.txt" in obs["question"]
            assert_no_other_testbed(obs["question"], wd)
            for name, args in (("execute_bash", {"command": awk(wd)}), ("submit", {})):
                _, _, done, info = env.step([{"id": "t", "type": "function",
                                              "function": {"name": name, "arguments": json.dumps(args)}}])  # fmt: skip
            assert done and info["answer"] == "42\n" and env.compute_final_reward() == 1.0
        finally:
            env.close()


# -- eval ----------------------------------------------------------------------------------------
def test_an_eval_item_runs_and_scores_in_the_sandboxs_workdir(sb, tmp_path):
    wd = sb.workdir
    ref = {"answer": "10", "scoring": "numeric", "tolerance": 1e-6, "letters": None}
    item = EvalItem("sum", "mine", "Sum the numbers in the documents provided.", ref,
                    files={"numbers.txt": "1\n2\n3\n4\n"}, input_path=DOCS_PATH)  # fmt: skip
    domain = Domain("mine", "test", lambda _dir: [item],
                    lambda it, response, judge=None: score_row(response, it.reference))  # fmt: skip

    def oracle(messages):  # right only when the prompt names the file where it really is
        return "\\boxed{10}" if f"- {wd}/documents/numbers.txt (8 bytes)" in messages[1]["content"] else "\\boxed{0}"

    r = run_task(item.to_task(rootfs="host"), ScriptedModel(oracle), output_dir=tmp_path, sandbox=sb)
    assert r.answer == "\\boxed{10}" and domain.score(item, r.answer, None).value == 1.0
    assert sb.read_file(f"{wd}/documents/numbers.txt") == b"1\n2\n3\n4\n"
    assert "documents" in outputs(trajectory(r))[0]  # the scripted model's look at the workdir
    assert_no_other_testbed(json.dumps(trajectory(r)["messages"]), wd)


def test_run_eval_over_a_pool_of_landlock_sandboxes(tmp_path, monkeypatch):
    """What ``sandboxlite eval --isolation landlock`` does: each sandbox of the pool has a workdir of
    its own, and each task is told its paths, given its inputs and graded from its answer file there."""
    monkeypatch.setenv("SANDBOXLITE_ISOLATION", "landlock")
    rows = [{"id": f"s{k}", "question": f"Sum the numbers in numbers.txt ({k}).", "answer": str(10 + k),
             "scoring": "numeric", "files": {"numbers.txt": f"1\n2\n3\n{4 + k}\n"}} for k in range(4)]  # fmt: skip
    tasks = tmp_path / "mine.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def oracle(messages):  # sums the file the prompt names, if it is under the named working directory
        system, instance = messages[0]["content"], messages[1]["content"]
        wd = re.search(r"Your working directory is (\S+)\.", system).group(1)
        listed = re.search(r"^- (\S+)/numbers\.txt \(", instance, re.M).group(1)
        k = int(re.search(r"numbers.txt \((\d)\)", instance).group(1))
        return f"\\boxed{{{10 + k}}}" if listed == f"{wd}/input" and wd != "/testbed" else "\\boxed{0}"

    cfg = EvalConfig(domains=load_tasks_file(tasks), data_dir=tmp_path, out_dir=tmp_path / "out", modes=["sandbox"],
                     workers=2, rootfs="host")  # fmt: skip
    result = run_eval(cfg, ScriptedModel(oracle), model_name="oracle")
    records = read_results(tmp_path / "out" / "results.jsonl")
    assert len(records) == 4 and all(r["error"] is None for r in records.values()), records
    assert all(r["score"] == 1.0 and r["response_source"] == "answer.txt" for r in records.values())
    assert result.summary["domains"]["mine"]["sandbox"]["mean"] == 1.0
    for r in records.values():
        t = json.loads((tmp_path / "out" / r["trajectory"]).read_text())
        wd = re.search(r"Your working directory is (\S+)\.", t["messages"][0]["content"]).group(1)
        assert wd != "/testbed" and f"Input files in {wd}/input:" in t["messages"][1]["content"]
        assert json.loads(t["steps"][2]["observations"][0]["arguments"])["path"] == f"{wd}/output/answer.txt"


# -- the helper ----------------------------------------------------------------------------------
def test_paths_derive_from_the_workdir():
    from sandboxlite.agent.paths import DEFAULT_PATHS, Paths

    assert DEFAULT_PATHS == Paths("/testbed", "/testbed/input", "/testbed/output", "/testbed/output/answer.txt")
    landlock = Paths.for_workdir("/tmp/sandboxlite-0/sb-k3j2/testbed")
    assert landlock.answer_file == "/tmp/sandboxlite-0/sb-k3j2/testbed/output/answer.txt"
    assert landlock.resolve("/testbed/input") == "/tmp/sandboxlite-0/sb-k3j2/testbed/input"
    assert landlock.resolve("/testbed") == "/tmp/sandboxlite-0/sb-k3j2/testbed"
    assert landlock.resolve("/tmp/in") == "/tmp/in" and landlock.resolve("/testbedx/a") == "/testbedx/a"
    assert DEFAULT_PATHS.resolve("/testbed/documents") == "/testbed/documents"
    with Sandbox(rootfs="host") as default:
        assert Paths.of(default) == DEFAULT_PATHS
    with Sandbox(CONFIGS["namespaces"]) as other:
        wd = "/srv/task"
        assert Paths.of(other) == Paths(wd, f"{wd}/input", f"{wd}/output", f"{wd}/output/answer.txt")
    with Sandbox(CONFIGS["landlock"]) as ll:
        assert Paths.of(ll).answer_file == f"{ll.workdir}/output/answer.txt" != DEFAULT_PATHS.answer_file
