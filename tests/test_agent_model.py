"""The model layer, through the real openai client against a scripted local server."""

from __future__ import annotations

import json

import pytest

from sandboxlite.agent.model import AssistantMessage, FakeModel, OpenAIModel, ToolCall, parse_text_tool_calls
from sandboxlite.errors import ContextOverflow, FormatError, ModelError

try:
    from .fake_openai import FakeOpenAIServer
except ImportError:  # run as a top-level module
    from fake_openai import FakeOpenAIServer

S = FakeOpenAIServer
MESSAGES = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
TOOLS = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("execute_bash", "str_replace_editor", "submit")
]
KNOWN = {"execute_bash", "str_replace_editor", "submit"}


@pytest.fixture
def server(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    with FakeOpenAIServer() as srv:
        yield srv


def model(srv: FakeOpenAIServer, **kw) -> OpenAIModel:
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("timeout", 5.0)
    return OpenAIModel("fake-model", base_url=srv.base_url, api_key="sk-test", **kw)


# -- native tool calls -----------------------------------------------------------------
def test_native_tool_call(server):
    server.push(S.tool_call_reply("execute_bash", {"command": "ls -la"}, id="call_abc", content="Let me look."))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.tool_calls == [ToolCall("call_abc", "execute_bash", '{"command": "ls -la"}')]
    assert reply.content == "Let me look."
    assert reply.native is True and reply.finish_reason == "tool_calls"
    sent = server.requests[0]
    assert sent["model"] == "fake-model" and sent["messages"] == MESSAGES
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"
    assert server.headers[0]["authorization"] == "Bearer sk-test"


def test_several_tool_calls_in_one_reply(server):
    server.push(S.multi_tool_reply([("execute_bash", {"command": "pwd"}), ("submit", {})]))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert [c.name for c in reply.tool_calls] == ["execute_bash", "submit"]
    assert [json.loads(c.arguments) for c in reply.tool_calls] == [{"command": "pwd"}, {}]
    assert len({c.id for c in reply.tool_calls}) == 2


def test_native_invalid_arguments_kept_raw(server):
    server.push(S.tool_call_reply("execute_bash", '{"command": "ls'))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.tool_calls[0].arguments == '{"command": "ls' and reply.native


def test_plain_text_has_no_tool_calls(server):
    server.push(S.text_reply("I think the answer is 42."))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.tool_calls == [] and reply.content == "I think the answer is 42."
    assert reply.finish_reason == "stop"


def test_reasoning_content_and_usage_kept(server):
    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    server.push(S.tool_call_reply("submit", {}, reasoning_content="All done, submit.", usage=usage))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.reasoning_content == "All done, submit."
    assert reply.usage == usage


def test_temperature_max_tokens_extra_body_passed(server):
    server.push(S.text_reply("ok"))
    extra = {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    model(server, temperature=0.3, max_tokens=512, extra_body=extra).complete(MESSAGES, TOOLS)
    sent = server.requests[0]
    assert sent["temperature"] == 0.3 and sent["max_tokens"] == 512
    assert sent["top_k"] == 20 and sent["chat_template_kwargs"] == {"enable_thinking": False}


def test_unset_options_not_sent(server):
    server.push(S.text_reply("ok"))
    model(server).complete(MESSAGES, TOOLS)
    assert not {"temperature", "max_tokens", "top_k"} & set(server.requests[0])


# -- text fallback through the endpoint ---------------------------------------------------
def test_text_fallback_when_native_reply_has_no_calls(server):
    text = 'Running it.\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n</tool_call>'
    server.push(S.text_reply(text))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.tool_calls == [ToolCall("call_fallback_0", "execute_bash", '{"command": "ls"}')]
    assert reply.native is False and reply.content == text


def test_native_tools_off_sends_no_tools_and_parses_text(server):
    server.push(S.text_reply('```json\n{"name": "submit", "arguments": {}}\n```'))
    reply = model(server, native_tools=False).complete(MESSAGES, TOOLS)
    assert "tools" not in server.requests[0] and "tool_choice" not in server.requests[0]
    assert [c.name for c in reply.tool_calls] == ["submit"] and not reply.native


def test_malformed_text_call_raises_format_error_with_reply(server):
    server.push(S.text_reply('<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"</tool_call>'))
    with pytest.raises(FormatError) as info:
        model(server).complete(MESSAGES, TOOLS)
    assert "<tool_call>" in info.value.message and "execute_bash" in info.value.message
    assert isinstance(info.value.reply, AssistantMessage)


# -- errors and retries -------------------------------------------------------------------
def test_500_then_success_is_retried(server):
    server.push(S.error(500, "upstream exploded"), S.text_reply("ok"))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.content == "ok" and len(server.requests) == 2


def test_429_then_success_is_retried(server):
    server.push(S.error(429, "Rate limit reached: too many tokens per minute"), S.text_reply("ok"))
    reply = model(server).complete(MESSAGES, TOOLS)
    assert reply.content == "ok" and len(server.requests) == 2


def test_timeout_and_disconnect_are_retried(server):
    server.push(S.slow(1.0, S.text_reply("late")), S.disconnect(), S.text_reply("ok"))
    reply = model(server, timeout=0.2).complete(MESSAGES, TOOLS)
    assert reply.content == "ok" and len(server.requests) == 3


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "Request has too many tokens",
    ],
)
def test_400_context_overflow(server, message):
    server.push(S.error(400, message, code="context_length_exceeded"))
    with pytest.raises(ContextOverflow) as info:
        model(server).complete(MESSAGES, TOOLS)
    assert "context" in str(info.value) and len(server.requests) == 1


def test_401_is_not_retried(server):
    server.push(S.error(401, "Incorrect API key provided", type="authentication_error"), S.text_reply("never"))
    with pytest.raises(ModelError) as info:
        model(server).complete(MESSAGES, TOOLS)
    assert not isinstance(info.value, ContextOverflow)
    assert "401" in str(info.value) and "API key" in str(info.value)
    assert len(server.requests) == 1


def test_retries_exhausted(server):
    server.push(*[S.error(503, "overloaded")] * 3)
    with pytest.raises(ModelError) as info:
        model(server, max_retries=2).complete(MESSAGES, TOOLS)
    assert "3 attempt" in str(info.value) and "503" in str(info.value) and "overloaded" in str(info.value)
    assert len(server.requests) == 3


def test_connection_refused_exhausted():
    with FakeOpenAIServer() as srv:
        url = srv.base_url  # the port is free again once the server stops
    m = OpenAIModel("m", base_url=url, api_key="x", max_retries=1, backoff_s=0.01, timeout=2)
    with pytest.raises(ModelError, match="2 attempt"):
        m.complete(MESSAGES, TOOLS)


def test_backoff_schedule():
    m = OpenAIModel("m", base_url="http://127.0.0.1:9/v1", api_key="x", backoff_s=1.0)
    assert 1.0 <= m._backoff(0, None) <= 1.25
    assert 8.0 <= m._backoff(3, None) <= 10.0
    assert 30.0 <= m._backoff(10, None) <= 37.5  # capped, plus jitter
    assert 5.0 <= m._backoff(0, 5.0) <= 6.25  # Retry-After wins when longer


# -- parse_text_tool_calls ----------------------------------------------------------------
def args(call: ToolCall) -> dict:
    return json.loads(call.arguments)


def test_parse_hermes_several():
    text = (
        'First <tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}}</tool_call>\n'
        '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'
    )
    calls = parse_text_tool_calls(text, KNOWN)
    assert [(c.id, c.name, args(c)) for c in calls] == [
        ("call_fallback_0", "execute_bash", {"command": "ls"}),
        ("call_fallback_1", "submit", {}),
    ]


def test_parse_hermes_unclosed_tag_and_multiline_string():
    text = '<tool_call>\n{"name": "execute_bash", "arguments": {"command": "cd /tmp\nls"}}'
    assert args(parse_text_tool_calls(text)[0]) == {"command": "cd /tmp\nls"}


def test_parse_fenced_json_object_and_list():
    one = 'I will run:\n```json\n{"name": "execute_bash", "arguments": {"command": "pwd"}}\n```'
    assert [c.name for c in parse_text_tool_calls(one, KNOWN)] == ["execute_bash"]
    many = '```\n[{"name": "execute_bash", "arguments": {"command": "pwd"}}, {"name": "submit", "arguments": {}}]\n```'
    assert [c.name for c in parse_text_tool_calls(many, KNOWN)] == ["execute_bash", "submit"]


def test_parse_bare_object_with_string_arguments():
    text = 'Sure. {"name": "execute_bash", "arguments": "{\\"command\\": \\"echo hi\\"}"} That should do.'
    (call,) = parse_text_tool_calls(text, KNOWN)
    assert call.name == "execute_bash" and args(call) == {"command": "echo hi"}


def test_parse_function_shape_and_parameters_alias():
    fn = '{"type": "function", "function": {"name": "submit", "arguments": "{}"}}'
    assert [c.name for c in parse_text_tool_calls(fn)] == ["submit"]
    llama = '{"name": "execute_bash", "parameters": {"command": "ls"}}'
    assert args(parse_text_tool_calls(llama)[0]) == {"command": "ls"}


def test_parse_arguments_reserialized():
    (call,) = parse_text_tool_calls('<tool_call>{"name":"execute_bash","arguments":{"command":"é"}}</tool_call>')
    assert call.arguments == '{"command": "é"}'


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 42.",
        "Use a dict like {'a': 1} or JSON {\"x\": [1, 2]}.",
        "```python\nprint({'name': 'x'})\n```",
        '{"name": "results.csv", "size": 3}',
        "",
    ],
)
def test_parse_no_attempt_returns_empty(text):
    assert parse_text_tool_calls(text, KNOWN) == []


def test_parse_unknown_tool_in_loose_json_is_not_a_call():
    assert parse_text_tool_calls('{"name": "Alice", "arguments": {"age": 3}}', KNOWN) == []


def test_parse_ignores_think_block():
    text = '<think>maybe <tool_call>{"name": "execute_bash", "arguments": {"command": "rm"}}</tool_call></think>Done.'
    assert parse_text_tool_calls(text, KNOWN) == []


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}</tool_call>',
        "<tool_call>{'name': 'execute_bash', 'arguments': {'command': 'ls'}}</tool_call>",
        '```json\n{"name": "execute_bash", "arguments": {"command": "ls",}}\n```',
        'Calling {"name": "execute_bash", "arguments": {"command": "ls"}',
        '<tool_call>{"name": "execute_bash", "arguments": "{not json"}</tool_call>',
        '<tool_call>{"name": "execute_bash", "arguments": ["ls"]}</tool_call>',
        '<tool_call>{"arguments": {"command": "ls"}}</tool_call>',
    ],
)
def test_parse_malformed_raises_format_error(text):
    with pytest.raises(FormatError) as info:
        parse_text_tool_calls(text, KNOWN)
    msg = info.value.message
    assert msg.startswith("Your tool call could not be parsed")
    assert '<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls -la"}}\n</tool_call>' in msg


SCHEMA = {"name": "execute_bash", "description": "Run a bash command.",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


@pytest.mark.parametrize("text", [
    json.dumps(SCHEMA),  # copied from the prompt's <tools> list
    f"<tool_call>{json.dumps(SCHEMA)}</tool_call>",
    f"```json\n{json.dumps({'type': 'function', 'function': SCHEMA})}\n```",
])  # fmt: skip
def test_a_copied_schema_is_a_format_error_that_says_so(text):
    with pytest.raises(FormatError) as info:
        parse_text_tool_calls(text, KNOWN)
    msg = info.value.message
    assert "description of the tool 'execute_bash'" in msg and '"description"' in msg and '"parameters"' in msg


@pytest.mark.parametrize("text, keys", [
    ('<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}, "submit": "echo done > answer.txt"}</tool_call>',
     ['"submit"']),
    ('{"name": "execute_bash", "arguments": {"command": "ls"}, "next": {"name": "submit"}, "note": 1}', ['"next"', '"note"']),
    ('{"type": "function", "function": {"name": "submit", "arguments": {}}, "then": "stop"}', ['"then"']),
    ('<tool_call>{"name": "execute_bash", "arguments": {"command": "ls"}, "parameters": {"command": "pwd"}}</tool_call>',
     ['"arguments" and "parameters"']),
])  # fmt: skip
def test_unexpected_keys_beside_arguments_are_named_not_dropped(text, keys):
    with pytest.raises(FormatError) as info:
        parse_text_tool_calls(text, KNOWN)
    assert all(k in info.value.message for k in keys), info.value.message


def test_the_usual_extra_fields_of_a_call_are_fine():
    for text in ('{"id": "call_1", "type": "function", "name": "submit", "arguments": {}}',
                 '{"id": "c", "type": "function", "function": {"name": "submit", "arguments": "{}"}}',
                 '{"name": "execute_bash", "parameters": {"command": "ls"}}'):  # fmt: skip
        assert [c.name for c in parse_text_tool_calls(text, KNOWN)] == [text.split('"name": "')[1].split('"')[0]]


# -- AssistantMessage.to_message ------------------------------------------------------------
def test_to_message_native_round_trip(server):
    server.push(
        S.tool_call_reply("execute_bash", {"command": "ls"}, id="call_1", reasoning_content="hmm"), S.text_reply("ok")
    )
    m = model(server)
    reply = m.complete(MESSAGES, TOOLS)
    msg = reply.to_message()
    assert msg == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}}
        ],
        "reasoning_content": "hmm",
    }
    history = MESSAGES + [msg, {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}]
    m.complete(history, TOOLS)  # the openai client accepts it and sends it as is
    assert server.requests[1]["messages"][2] == msg


def test_to_message_text_fallback_and_plain():
    text = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    fallback = AssistantMessage(text, parse_text_tool_calls(text), native=False)
    assert fallback.to_message() == {"role": "assistant", "content": text}
    assert AssistantMessage(None, []).to_message() == {"role": "assistant", "content": ""}


# -- FakeModel --------------------------------------------------------------------------------
def test_fake_model_script():
    def echo_last(messages, tools):
        assert [t["function"]["name"] for t in tools] == ["execute_bash", "str_replace_editor", "submit"]
        return {"tool": "execute_bash", "arguments": {"command": f"echo {len(messages)}"}}

    fake = FakeModel(
        [
            "thinking out loud",
            {"tool": "execute_bash", "arguments": {"command": "ls"}, "content": "look"},
            {
                "tool_calls": [
                    {"tool": "execute_bash", "arguments": {"command": "pwd"}},
                    {"name": "submit", "arguments": "{}"},
                ]
            },
            echo_last,
            AssistantMessage("custom", [ToolCall("x1", "submit", "{}")], usage={"total_tokens": 5}),
            '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
        ]
    )
    replies = [fake.complete(MESSAGES[: 1 + (i % 2)], TOOLS) for i in range(6)]
    assert fake.name == "fake"
    assert replies[0].content == "thinking out loud" and replies[0].tool_calls == []
    assert replies[1].tool_calls == [ToolCall("call_1", "execute_bash", '{"command": "ls"}')]
    assert replies[1].content == "look"
    assert [(c.id, c.name, c.arguments) for c in replies[2].tool_calls] == [
        ("call_2", "execute_bash", '{"command": "pwd"}'),
        ("call_3", "submit", "{}"),
    ]
    assert replies[3].tool_calls[0].arguments == '{"command": "echo 2"}'
    assert replies[4].tool_calls[0].id == "x1" and replies[4].usage == {"total_tokens": 5}
    assert replies[5].tool_calls[0].name == "submit" and replies[5].native is False
    assert fake.calls[0] == MESSAGES[:1] and fake.calls[1] == MESSAGES
    with pytest.raises(ModelError, match="fake model script exhausted"):
        fake.complete(MESSAGES, TOOLS)


def test_fake_model_records_copies_and_raises_scripted_errors():
    fake = FakeModel(["a", ContextOverflow("too long")])
    history = [{"role": "user", "content": "hi"}]
    fake.complete(history, TOOLS)
    history.append({"role": "assistant", "content": "a"})
    assert fake.calls == [[{"role": "user", "content": "hi"}]]
    with pytest.raises(ContextOverflow):
        fake.complete(history, TOOLS)
