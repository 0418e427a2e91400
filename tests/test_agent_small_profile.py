"""The small-model profile (issue 19, "the first run shows the loop doing something"): commands in
```bash / ```python blocks, the answer as a plain reply, a short prompt.

The embedded model's own behaviour under it is tested in test_agent_local.py (real model)."""

import json
from pathlib import Path

import pytest

from sandboxlite.agent.loop import NO_COMMAND_BLOCK, stuck_nudge
from sandboxlite.agent.model import FakeModel, parse_text_tool_calls
from sandboxlite.agent.outcome import ExitReason
from sandboxlite.agent.run import run_task
from sandboxlite.agent.task import Task
from sandboxlite.agent.textcalls import BLOCKS_TOOL_PROMPT, code_block_command, render_text_tools
from sandboxlite.agent.tools import tool_schemas

TASK = Task.from_dict({"id": "t", "query": "What is 2 + 3? Write only the number.", "max_steps": 6})
NAMES = {"execute_bash", "str_replace_editor", "submit"}


def traj(result):
    return json.loads((Path(result.output_dir) / "trajectory.json").read_text())


@pytest.mark.parametrize("text, command", [
    ("Let me look:\n```bash\nls /testbed\n```", "ls /testbed"),
    ("```sh\n$ cat a.txt\n$ wc -l a.txt\n```", "cat a.txt\nwc -l a.txt"),  # prompts taken off
    ("```python\nprint(17 + 25)\n```", "python3 - <<'SANDBOXLITE_PYTHON_EOF'\nprint(17 + 25)\nSANDBOXLITE_PYTHON_EOF"),
    ("```bash\necho one\n```\nOutput:\n```bash\necho two\n```", "echo one"),  # only the first block
    ("```bash\necho cut off by max_tokens", "echo cut off by max_tokens"),  # an unclosed block
    ("```\n1000000000000.0\n```", None),  # a bare block: mostly output the model imagines
    ("```javascript\nconsole.log(1)\n```", None),
    ("```bash\n\n```", None),
    ("```python\nx = 'SANDBOXLITE_PYTHON_EOF'\n```", None),  # would end the here-document early
    ("2 + 3 = 5", None),
])  # fmt: skip
def test_the_first_shell_or_python_block_is_the_command(text, command):
    assert code_block_command(text) == command


def test_python_blocks_run_as_written(tmp_path):
    from sandboxlite import Sandbox

    command = code_block_command('```python\nimport sys\nprint("$HOME `x`", sys.argv)\n```')
    with Sandbox(rootfs="host") as sb:
        r = sb.exec(["bash", "-c", command])
    assert r.exit_code == 0 and r.stdout == b"$HOME `x` ['-']\n"  # nothing expanded by the shell


def test_code_blocks_are_calls_only_when_asked():
    text = "Here is how:\n```bash\nls\n```"
    assert parse_text_tool_calls(text, NAMES) == []  # the standard profile: prose with an example
    (call,) = parse_text_tool_calls(text, NAMES, code_blocks=True)
    assert call.name == "execute_bash" and json.loads(call.arguments) == {"command": "ls"}
    # a JSON call in tags still wins over a block
    tagged = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>\n```bash\nls\n```'
    assert [c.name for c in parse_text_tool_calls(tagged, NAMES, code_blocks=True)] == ["submit"]
    assert parse_text_tool_calls(text, {"submit"}, code_blocks=True) == []  # no execute_bash offered


def test_the_blocks_prompt_has_no_schemas_and_replays_no_json_calls():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                {"role": "assistant", "content": "```bash\nls\n```", "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "execute_bash",
                                                                 "arguments": '{"command": "ls"}'}}]},
                {"role": "tool", "tool_call_id": "1", "content": "a.txt"}]  # fmt: skip
    out = render_text_tools(messages, tool_schemas(), "blocks")
    assert out[0]["content"] == "S" + BLOCKS_TOOL_PROMPT and "<tools>" not in out[0]["content"]
    assert out[2] == {"role": "assistant", "content": "```bash\nls\n```"}  # its block is its call
    assert render_text_tools(messages, tool_schemas())[2]["content"].endswith("</tool_call>")  # json: as before
    with pytest.raises(ValueError, match="style must be one of json, blocks"):
        render_text_tools(messages, tool_schemas(), "markdown")


def test_a_plain_reply_is_the_answer_and_ends_the_run(tmp_path):
    r = run_task(TASK, FakeModel(["```bash\necho $((2 + 3))\n```", "<think>2 + 3</think>5"], profile="small"),
                 output_dir=tmp_path)
    assert r.reason is ExitReason.SUBMITTED and r.answer == "5\n" and r.steps == 2
    t = traj(r)
    assert t["prompt_template"] == "builtin:small.txt"
    assert t["steps"][0]["observations"][0]["output"].startswith("5\n")  # the block was run
    last = t["steps"][1]["observations"]
    assert [o["tool"] for o in last] == ["answer", "submit"] and all(o["data"]["plain_reply"] for o in last)
    assert (tmp_path / "answer.txt").read_text() == "5\n"


def test_a_plain_reply_keeps_an_answer_the_model_wrote_itself(tmp_path):
    replies = ["```bash\necho done > /testbed/output/answer.txt\n```", "I wrote done to answer.txt."]
    r = run_task(TASK, FakeModel(replies, profile="small"), output_dir=tmp_path)
    assert r.reason is ExitReason.SUBMITTED and r.answer == "done\n"
    assert traj(r)["steps"][1]["observations"][0]["data"]["kept"] is True


def test_the_standard_profile_still_calls_a_plain_reply_a_format_error(tmp_path):
    r = run_task(TASK, FakeModel(["5"] * 3), output_dir=tmp_path)
    assert r.reason is ExitReason.FORMAT_ERRORS and r.answer is None
    assert traj(r)["prompt_template"] == "builtin:default.txt"


def test_the_nudge_speaks_the_profile(tmp_path):
    r = run_task(TASK, FakeModel(["```bash\nls\n```"] * 6, profile="small"), output_dir=tmp_path)
    assert r.reason is ExitReason.STUCK
    note = traj(r)["steps"][2]["note"]
    assert note == stuck_nudge(3, "/testbed/output/answer.txt", plain_answers=True)
    assert "reply with just your final answer" in note and "call submit" not in note


def test_profile_applies_to_the_in_process_local_model_only():
    from sandboxlite.agent.profiles import resolve_model
    from sandboxlite.errors import ConfigError

    with pytest.raises(ConfigError, match="--profile: applies to the in-process local model"):
        resolve_model("scripted", profile="small")
    with pytest.raises(ConfigError, match="in-process local model"):
        resolve_model("qwen", base_url="http://127.0.0.1:9/v1", profile="small")


def test_cli_profile_is_refused_for_a_server_model_with_exit_2(tmp_path):
    from click.testing import CliRunner

    from sandboxlite.cli import main

    r = CliRunner().invoke(main, ["run", "--model", "scripted", "--profile", "small", "--query", "hi",
                                  "--output-dir", str(tmp_path / "o")])  # fmt: skip
    assert r.exit_code == 2 and "--profile" in r.output
    r = CliRunner().invoke(main, ["run", "--profile", "tiny", "--query", "hi"])
    assert r.exit_code == 2 and "tiny" in r.output


def test_a_block_that_is_no_command_is_neither_a_command_nor_an_answer(tmp_path):
    """The embedded model's first reply to demo_004 was the output it imagined, in a bare block:
    it became the answer.  Now it is sent back, saying what a command and an answer look like."""
    replies = ["The output will be:\n```\n1000000000000.0\n```", "```python\nprint(17 + 25)\n```", "42"]
    r = run_task(TASK, FakeModel(replies, profile="small"), output_dir=tmp_path)
    steps = traj(r)["steps"]
    assert steps[0]["error"] == NO_COMMAND_BLOCK and not steps[0]["observations"]
    assert steps[1]["observations"][0]["output"].startswith("42\n")
    assert r.reason is ExitReason.SUBMITTED and r.answer == "42\n"
