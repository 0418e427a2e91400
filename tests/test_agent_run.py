"""The agent end to end: the loop, the tools, real sandboxes, the real openai client against a
scripted OpenAI-compatible server on loopback, the output directory and the CLI."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.agent.loop import AgentLimits
from sandboxlite.agent.model import FakeModel, OpenAIModel
from sandboxlite.agent.run import run_task
from sandboxlite.agent.task import Task
from sandboxlite.cli import EXIT_MODEL, EXIT_NOT_SUBMITTED, EXIT_USAGE, main

from .fake_openai import FakeOpenAIServer as S

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SUM = Task.from_dict({"id": "sum", "query": "Add the two numbers in /testbed/input/n.txt.",
                      "input_files": {"n.txt": "17\n25\n"}, "max_steps": 8})  # fmt: skip
ANSWER = {"command": "create", "path": "/testbed/output/answer.txt", "file_text": "42"}


def bash(cmd):
    return {"tool": "execute_bash", "arguments": {"command": cmd}}


def editor(**args):
    return {"tool": "str_replace_editor", "arguments": args}


def submit():
    return {"tool": "submit", "arguments": {}}


def traj(result):
    return json.loads((Path(result.output_dir) / "trajectory.json").read_text())


def test_a_run_that_submits(tmp_path):
    model = FakeModel([bash("cd /testbed/input && awk '{s+=$1} END {print s}' n.txt"), editor(**ANSWER), submit()])
    r = run_task(SUM, model, output_dir=tmp_path / "out")
    assert r.submitted and r.exit_reason == "submitted" and r.answer == "42" and r.steps == 3
    out = Path(r.output_dir)
    assert (out / "answer.txt").read_text() == "42"
    assert (out / "files" / "answer.txt").read_text() == "42"
    t = traj(r)
    assert t["exit_reason"] == "submitted" and t["task"]["id"] == "sum" and len(t["steps"]) == 3
    assert "42" in t["steps"][0]["observations"][0]["output"]  # awk saw the input file
    roles = [m["role"] for m in t["messages"]]
    assert roles[:2] == ["system", "user"] and roles.count("tool") == 3


def test_several_calls_in_one_reply_are_all_answered(tmp_path):
    reply = {"tool_calls": [bash("echo one"), bash("echo two > /testbed/output/answer.txt"), submit()]}
    model = FakeModel([reply])
    r = run_task(SUM, model, output_dir=tmp_path)
    assert r.submitted and r.answer == "two\n"
    msgs = traj(r)["messages"]
    call_ids = [c["id"] for c in msgs[2]["tool_calls"]]
    assert [m["tool_call_id"] for m in msgs if m["role"] == "tool"] == call_ids


def test_errors_go_back_to_the_model(tmp_path):
    script = [
        {"tool": "no_such_tool", "arguments": {}},
        {"tool": "execute_bash", "arguments": "{not json"},
        editor(command="str_replace", path="/testbed/input/n.txt", old_str="absent", new_str="x"),
        "I think the answer is 42.",  # no tool call: nudged
        bash("echo 42 > /testbed/output/answer.txt"),
        submit(),
    ]
    model = FakeModel(script)
    r = run_task(SUM, model, output_dir=tmp_path)
    assert r.submitted and r.answer == "42\n"
    outs = [o["output"] for s in traj(r)["steps"] for o in s["observations"]]
    assert outs[0].startswith("Error:") and "no_such_tool" in outs[0]
    assert outs[1].startswith("Error:") and "JSON" in outs[1]
    assert outs[2].startswith("Error:") and "did not occur" in outs[2]
    nudges = [m["content"] for m in traj(r)["messages"] if m["role"] == "user"][1:]
    assert any("did not call a tool" in n for n in nudges)


def test_text_fallback_calls_are_answered_as_text(tmp_path):
    text_call = '<tool_call>{"name": "execute_bash", "arguments": {"command": "echo 42 > /testbed/output/answer.txt"}}</tool_call>'
    model = FakeModel([text_call, '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'])
    r = run_task(SUM, model, output_dir=tmp_path)
    assert r.submitted and r.answer == "42\n"
    msgs = traj(r)["messages"]
    assert not any(m["role"] == "tool" for m in msgs)
    assert any(m["role"] == "user" and "<tool_response>" in m["content"] for m in msgs)


def test_limits_end_the_run(tmp_path):
    r = run_task(SUM, FakeModel([bash("true")] * 5), output_dir=tmp_path / "a", limits=AgentLimits(max_steps=3))
    assert not r.submitted and r.exit_reason == "limits exceeded: max_steps=3 reached" and r.steps == 3
    r = run_task(SUM, FakeModel(["thinking..."] * 5), output_dir=tmp_path / "b",
                 limits=AgentLimits(max_format_errors=3))  # fmt: skip
    assert not r.submitted and "3 replies in a row" in r.exit_reason
    assert traj(r)["exit_reason"] == r.exit_reason


def test_output_export_never_follows_symlinks(tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("HOST")
    model = FakeModel([bash(f"cd /testbed/output && ln -s {secret} abs && ln -s /etc/passwd pw && "
                            "echo 42 > answer.txt && ln -s answer.txt rel && mkfifo fifo"), submit()])  # fmt: skip
    r = run_task(SUM, model, output_dir=tmp_path / "out")
    files = sorted(p.name for p in (Path(r.output_dir) / "files").iterdir())
    assert files == ["answer.txt"]
    assert sorted(Path(p).name for p in r.skipped_outputs) == ["abs", "fifo", "pw", "rel"]


def test_vanilla_mode_is_one_call_without_tools(tmp_path):
    model = FakeModel(["The sum is 42."])
    r = run_task(SUM, model, output_dir=tmp_path, mode="vanilla")
    assert r.ok and r.answer == "The sum is 42." and (tmp_path / "answer.txt").read_text() == "The sum is 42."
    sent = model.calls[0]
    assert "=== n.txt ===\n17\n25" in sent[1]["content"]


# -- through the real openai client and a scripted HTTP server ------------------------------------
def test_openai_client_end_to_end_with_a_server_error(tmp_path):
    with S([S.error(500, "overloaded"),
            S.tool_call_reply("execute_bash", {"command": "echo 42 > /testbed/output/answer.txt"}),
            S.multi_tool_reply([("execute_bash", {"command": "cat /testbed/output/answer.txt"}), ("submit", {})])]) as srv:  # noqa: E501
        model = OpenAIModel("m", base_url=srv.base_url, api_key="k", backoff_s=0.01, temperature=0.2)
        r = run_task(SUM, model, output_dir=tmp_path)
        assert r.submitted and r.answer == "42\n"
        assert len(srv.requests) == 3  # the 500 was retried
        last = srv.requests[-1]
        assert last["temperature"] == 0.2 and {t["function"]["name"] for t in last["tools"]} == {
            "execute_bash", "str_replace_editor", "submit"}
        tool_msgs = [m for m in last["messages"] if m["role"] == "tool"]
        assert tool_msgs and "[exit code: 0]" in tool_msgs[0]["content"]
        assert r.usage["total_tokens"] == 36  # two answered calls of 18 tokens


def test_cli_run_exit_codes(tmp_path):
    task = EXAMPLES / "demo_004.json"
    runner = CliRunner()
    with S([S.text_reply("OK"),  # the preflight's answer
            S.tool_call_reply("execute_bash", {"command": "echo $((17+25)) > /testbed/output/answer.txt"}),
            S.tool_call_reply("submit", {})]) as srv:  # fmt: skip
        r = runner.invoke(main, ["run", str(task), "--model", "m", "--base-url", srv.base_url, "--api-key", "k",
                                 "--output-dir", str(tmp_path / "ok"), "--quiet"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "42" and (tmp_path / "ok" / "answer.txt").read_text() == "42\n"
    with S([S.tool_call_reply("execute_bash", {"command": "true"})] * 3) as srv:
        r = runner.invoke(main, ["run", str(task), "--model", "m", "--base-url", srv.base_url, "--api-key", "k",
                                 "--output-dir", str(tmp_path / "limit"), "--max-steps", "2"])  # fmt: skip
    assert r.exit_code == EXIT_NOT_SUBMITTED and "max_steps=2" in r.stderr
    with S([S.error(401, "bad key")]) as srv:
        r = runner.invoke(main, ["run", str(task), "--model", "m", "--base-url", srv.base_url, "--api-key", "k",
                                 "--output-dir", str(tmp_path / "err"), "--quiet"])  # fmt: skip
    assert r.exit_code == EXIT_MODEL and "401" in r.stderr


def test_cli_run_rejects_malformed_tasks(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"id": "t", "query": "q", "max_steps": "ten"}))
    r = CliRunner().invoke(main, ["run", str(bad), "--model", "m"])
    assert r.exit_code == EXIT_USAGE and "max_steps" in r.stderr and "positive integer" in r.stderr
    bad.write_text("{")
    r = CliRunner().invoke(main, ["run", str(bad), "--model", "m"])
    assert r.exit_code == EXIT_USAGE and "not valid JSON" in r.stderr


def test_ctrl_c_loses_nothing(tmp_path):
    def interrupt(messages, tools):
        raise KeyboardInterrupt

    model = FakeModel([bash("echo 42 > /testbed/output/answer.txt"), interrupt])
    with pytest.raises(KeyboardInterrupt):
        run_task(SUM, model, output_dir=tmp_path)
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert t["exit_reason"] == "interrupted" and len(t["steps"]) == 1
    assert (tmp_path / "answer.txt").read_text() == "42\n" and (tmp_path / "files" / "answer.txt").exists()


def test_context_overflow_clips_old_outputs_then_gives_up(tmp_path):
    from sandboxlite.errors import ContextOverflow

    seen = []

    def overflow_once(messages, tools):
        seen.append(max(len(m.get("content") or "") for m in messages[2:]))
        if len(seen) == 1:
            raise ContextOverflow("maximum context length exceeded")
        return submit()

    script = [bash("head -c 9000 /dev/zero | tr '\\\\0' x"), bash("echo 42 > /testbed/output/answer.txt"), bash("true"),
              bash("true"), overflow_once,
              overflow_once]  # the script advances on every call: once failing, once after the clip
    r = run_task(SUM, FakeModel(script), output_dir=tmp_path / "a")
    assert r.submitted and seen[0] > 9000 and seen[1] < 3000  # the big output was clipped, then it went on

    def always(messages, tools):
        raise ContextOverflow("maximum context length exceeded")

    r = run_task(SUM, FakeModel([always]), output_dir=tmp_path / "b")
    assert not r.submitted and "no longer fits" in r.exit_reason


def test_a_malformed_call_stays_in_the_history_with_the_correction(tmp_path):
    bad = '<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"</tool_call>'
    model = FakeModel([bad, bash("echo 42 > /testbed/output/answer.txt"), submit()])
    r = run_task(SUM, model, output_dir=tmp_path)
    assert r.submitted
    msgs = traj(r)["messages"]
    i = next(k for k, m in enumerate(msgs) if m["role"] == "assistant")
    assert bad in (msgs[i]["content"] or "")  # the model sees what it wrote ...
    assert msgs[i + 1]["role"] == "user" and "could not be parsed" in msgs[i + 1]["content"]  # ... and why


# -- issue 19, fault 1: a copied tool result ended the run as "submitted" with no answer -------------
KNOWN = {"execute_bash", "str_replace_editor", "submit"}


def test_a_text_tool_result_holds_nothing_a_model_can_echo_as_a_call(tmp_path):
    from sandboxlite.agent.model import parse_text_tool_calls

    text_call = '<tool_call>{"name": "execute_bash", "arguments": {"command": "ls /testbed/input"}}</tool_call>'
    r = run_task(SUM, FakeModel([text_call]), output_dir=tmp_path, limits=AgentLimits(max_steps=1))
    results = [m["content"] for m in traj(r)["messages"] if m["role"] == "user" and "<tool_response>" in m["content"]]
    assert len(results) == 1 and "n.txt" in results[0]
    assert parse_text_tool_calls(results[0], KNOWN) == []  # echoed back, it is no call
    assert parse_text_tool_calls(results[0].replace("<tool_response>", "").replace("</tool_response>", ""), KNOWN) == []


def test_a_submit_without_an_answer_file_gets_one_reminder(tmp_path):
    model = FakeModel([submit(), bash("echo 42 > /testbed/output/answer.txt"), submit()])
    r = run_task(SUM, model, output_dir=tmp_path)
    assert r.submitted and r.answer == "42\n" and r.steps == 3
    first = traj(r)["steps"][0]["observations"][0]
    assert first["output"].startswith("Not submitted: /testbed/output/answer.txt does not exist")
    assert first["data"] == {"answer_file": False, "reminder": "no_answer_file"}


def test_a_second_submit_without_an_answer_ends_the_run_with_none(tmp_path):
    r = run_task(SUM, FakeModel([submit(), submit(), bash("true")]), output_dir=tmp_path)
    assert r.submitted and r.answer is None and r.steps == 2
    assert traj(r)["steps"][1]["observations"][0]["data"] == {"answer_file": False}
