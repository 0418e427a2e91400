"""The loop against the faults real small models hit (issue 19, faults 2-8): a repetition guard,
every discarded reply kept, tool outputs clipped to the model's context, the prompt as the model
saw it, one message per turn for text calls, text tool calls for servers without a tool parser.
Real sandboxes, FakeModel and the scripted OpenAI-compatible server on loopback."""

import json
from pathlib import Path

import pytest

from sandboxlite.agent.loop import AgentLimits, estimate_tokens
from sandboxlite.agent.model import AssistantMessage, FakeModel, OpenAIModel
from sandboxlite.agent.outcome import ExitReason
from sandboxlite.agent.run import run_task
from sandboxlite.agent.task import Task
from sandboxlite.agent.textcalls import render_text_tools
from sandboxlite.errors import ContextOverflow, ModelError

from .fake_openai import FakeOpenAIServer as S

TASK = Task.from_dict({"id": "t", "query": "What is 2 + 3?", "max_steps": 12})


def bash(cmd):
    return {"tool": "execute_bash", "arguments": {"command": cmd}}


def submit():
    return {"tool": "submit", "arguments": {}}


def text_call(name, arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def traj(result):
    return json.loads((Path(result.output_dir) / "trajectory.json").read_text())


# -- fault 3: the same call and result again and again ----------------------------------------
def test_identical_calls_and_results_get_a_nudge_then_end_the_run_as_stuck(tmp_path):
    r = run_task(TASK, FakeModel([bash("ls /testbed")] * 12), output_dir=tmp_path)
    assert r.reason is ExitReason.STUCK and r.steps == 4 and not r.submitted
    assert r.exit_reason == "limits exceeded: the same tool calls and results 4 times in a row"
    steps = traj(r)["steps"]
    assert [s["note"] is not None for s in steps] == [False, False, True, False]
    assert "same tool call 3 times in a row" in steps[2]["note"] and "/testbed/output/answer.txt" in steps[2]["note"]
    messages = traj(r)["messages"]
    assert messages[-3] == {"role": "user", "content": steps[2]["note"]}  # after the tool answer (native)
    assert ExitReason.STUCK.is_limit


def test_repeated_errors_count_and_a_changed_result_starts_the_count_again(tmp_path):
    # the same failing call: errors count like any result
    r = run_task(TASK, FakeModel([{"tool": "str_replace_editor", "arguments": {"command": "nope"}}] * 6),
                 output_dir=tmp_path / "a")  # fmt: skip
    assert r.reason is ExitReason.STUCK and r.steps == 4
    # the same command whose output changes every time is progress, not a loop
    r = run_task(TASK, FakeModel([bash("date +%s%N")] * 6 + [submit()] * 2), output_dir=tmp_path / "b")
    assert r.reason is ExitReason.SUBMITTED and r.steps == 8
    # key order and spacing of the arguments do not make a call different
    same = [{"tool": "execute_bash", "arguments": '{"command": "ls", "timeout": 5}'},
            {"tool": "execute_bash", "arguments": '{"timeout":5,"command":"ls"}'}] * 3  # fmt: skip
    r = run_task(TASK, FakeModel(same), output_dir=tmp_path / "c")
    assert r.reason is ExitReason.STUCK and r.steps == 4


def test_the_guard_can_be_turned_off(tmp_path):
    r = run_task(TASK, FakeModel([bash("true")] * 6), output_dir=tmp_path,
                 limits=AgentLimits(max_steps=6, max_repeats=None))  # fmt: skip
    assert r.reason is ExitReason.MAX_STEPS and r.steps == 6


# -- fault 4: the reply a constrained retry replaced ------------------------------------------
def test_a_discarded_reply_is_kept_in_its_step(tmp_path):
    replaced = AssistantMessage(content=text_call("submit", {}), tool_calls=[], native=False)
    replaced.discarded = [{"content": "The answer is 5.", "error": "no tool call"}]
    from sandboxlite.agent.model import parse_text_tool_calls

    replaced.tool_calls = parse_text_tool_calls(replaced.content, {"submit"})
    r = run_task(TASK, FakeModel([bash("echo 5 > /testbed/output/answer.txt"), replaced]), output_dir=tmp_path)
    steps = traj(r)["steps"]
    assert steps[0]["discarded"] == [] and steps[1]["discarded"] == [{"content": "The answer is 5.", "error": "no tool call"}]


# -- fault 5: one output larger than what the context has left --------------------------------
class Windowed(FakeModel):
    """FakeModel with a context window: a request longer than it overflows (tokens estimated)."""

    def __init__(self, replies, context_tokens, max_tokens=None):
        super().__init__(replies)
        self.context_tokens, self.max_tokens = context_tokens, max_tokens

    def complete(self, messages, tools):
        need = sum(estimate_tokens(m.get("content") or "") + 8 for m in messages)
        if need > self.context_tokens:
            self.calls.append(messages)
            raise ContextOverflow(f"{need} tokens > {self.context_tokens}")
        return super().complete(messages, tools)


def test_a_digit_heavy_output_is_clipped_to_fit_the_context_newest_included(tmp_path):
    digits = "seq 1 20000"  # 108,894 characters (20,000 after the tool's own cap), a digit about a token each
    model = Windowed([bash(digits), bash("echo 5 > /testbed/output/answer.txt"), submit()], context_tokens=8192)
    r = run_task(TASK, model, output_dir=tmp_path)
    assert r.reason is ExitReason.SUBMITTED, r.exit_reason
    first = traj(r)["steps"][0]["observations"][0]
    assert first["data"]["clipped_chars"] > 10_000 and "characters dropped to fit the model's context" in first["output"]
    assert first["output"].startswith("1\n2\n3\n") and first["output"].endswith("19999\n20000\n[exit code: 0]")
    assert estimate_tokens(first["output"]) < 8192 - 1024


def test_without_a_known_context_an_overflow_clips_the_newest_output_too(tmp_path):
    # the model does not say its context: the overflow it raises makes the loop clip, the newest too
    class Blind(Windowed):
        context_tokens = None

        def __init__(self, replies):
            super().__init__(replies, 0)
            self.window = 3000

        def complete(self, messages, tools):
            self.context_tokens = self.window
            try:
                return super().complete(messages, tools)
            finally:
                self.context_tokens = None

    model = Blind([bash("seq 1 3000"), submit(), submit()])
    r = run_task(TASK, model, output_dir=tmp_path)
    assert r.steps == 3 and r.reason is ExitReason.SUBMITTED, r.exit_reason  # before: context_overflow at step 2
    assert "characters dropped to fit the context" in traj(r)["messages"][3]["content"]


# -- fault 6: the prompt the model saw ----------------------------------------------------------
def test_the_first_step_records_the_prompt_the_model_saw_native(tmp_path):
    r = run_task(TASK, FakeModel([submit(), submit()]), output_dir=tmp_path)
    steps = traj(r)["steps"]
    prompt = steps[0]["prompt"]
    assert prompt["tool_format"] == "native" and prompt["system"] == traj(r)["messages"][0]["content"]
    assert {t["function"]["name"] for t in prompt["tools"]} == {"execute_bash", "str_replace_editor", "submit"}
    assert len(prompt["sha256"]) == 64 and steps[1]["prompt"] is None


def test_a_text_tool_format_records_the_system_message_with_its_tool_prompt(tmp_path):
    with S([S.text_reply(text_call("submit", {})), S.text_reply(text_call("submit", {}))]) as server:
        model = OpenAIModel("fake-model", base_url=server.base_url, api_key="k", tool_format="text")
        r = run_task(TASK, model, output_dir=tmp_path)
        sent = server.requests[0]
    prompt = traj(r)["steps"][0]["prompt"]
    assert prompt["tool_format"] == "text" and prompt["tools"] is None
    assert prompt["system"] == sent["messages"][0]["content"] and "<tools>" in prompt["system"]
    assert "tools" not in sent


# -- fault 7: one message per turn for text calls ---------------------------------------------
def test_several_text_calls_in_one_reply_are_answered_in_one_user_message(tmp_path):
    reply = text_call("execute_bash", {"command": "echo one"}) + "\n" + text_call("execute_bash", {"command": "echo two"})
    r = run_task(TASK, FakeModel([reply, submit(), submit()]), output_dir=tmp_path)
    messages = traj(r)["messages"]
    roles = [m["role"] for m in messages]
    assert roles[:4] == ["system", "user", "assistant", "user"] and roles[4] == "assistant"
    answer = messages[3]["content"]
    ok = "\n[exit code: 0]"
    assert answer == f"<tool_response>\none{ok}\n</tool_response>\n<tool_response>\ntwo{ok}\n</tool_response>"


def test_a_native_history_replayed_as_text_alternates():
    native = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "a", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}},
                  {"id": "b", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]},
              {"role": "tool", "tool_call_id": "a", "content": "x"}, {"role": "tool", "tool_call_id": "b", "content": "y"},
              {"role": "user", "content": "nudge"}]  # fmt: skip
    out = render_text_tools(native, [])
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[3]["content"] == "<tool_response>\nx\n</tool_response>\n<tool_response>\ny\n</tool_response>\nnudge"


def test_shell_errors_name_the_commands_own_lines_not_the_harness_loop(tmp_path):
    r = run_task(TASK, FakeModel([bash("nosuch-a"), bash("true\nnosuch-b"), bash("echo 5 > /testbed/output/answer.txt"),
                                  submit()]), output_dir=tmp_path)  # fmt: skip
    one, two = (s["observations"][0]["output"] for s in traj(r)["steps"][:2])
    assert "sandboxlite-shell" not in one + two  # before: "sandboxlite-shell: line 3: nosuch-a: ..."
    assert one.startswith("bash: ") and "nosuch-a: command not found" in one and "line 3" not in one
    assert "nosuch-b: command not found" in two and "line 4" not in two  # (bash may say "line 2": the command's)


# -- fault 8: servers that refuse tools ---------------------------------------------------------
VLLM_400 = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
TOOLS = [{"type": "function", "function": {"name": "submit", "description": "Submit.",
                                           "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}]


def test_auto_falls_back_to_text_calls_when_the_server_refuses_tools():
    with S([S.error(400, VLLM_400), S.text_reply(text_call("submit", {})), S.text_reply(text_call("submit", {}))]) as server:
        model = OpenAIModel("fake-model", base_url=server.base_url, api_key="k", tool_format="auto", max_retries=0)
        first = model.complete(MESSAGES, TOOLS)
        second = model.complete(MESSAGES, TOOLS)
        sent = server.requests
    assert [c.name for c in first.tool_calls] == ["submit"] and not first.native and second.tool_calls
    assert "tools" in sent[0] and "tools" not in sent[1] and "tools" not in sent[2]  # one refusal, then text
    assert "<tools>" in sent[1]["messages"][0]["content"] and model.tools_sent == "text"


def test_native_keeps_the_refusal_as_an_error_with_the_servers_words():
    with S([S.error(400, VLLM_400)]) as server:
        model = OpenAIModel("fake-model", base_url=server.base_url, api_key="k", tool_format="native")
        with pytest.raises(ModelError) as info:
            model.complete(MESSAGES, TOOLS)
    assert "enable-auto-tool-choice" in str(info.value) and len(server.requests) == 1


def test_auto_does_not_fall_back_on_other_errors():
    with S([S.error(400, "temperature must be at most 2")]) as server:
        model = OpenAIModel("fake-model", base_url=server.base_url, api_key="k", tool_format="auto")
        with pytest.raises(ModelError):
            model.complete(MESSAGES, TOOLS)
    assert model.tools_sent == "native"


def test_tool_format_is_checked():
    with pytest.raises(ValueError, match="tool_format"):
        OpenAIModel("m", base_url="http://127.0.0.1:9/v1", tool_format="json")
