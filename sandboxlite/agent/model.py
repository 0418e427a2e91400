"""The model side of the agent: one chat-completion call in, one ``AssistantMessage`` out.

``OpenAIModel`` talks to any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang,
llama.cpp, OpenRouter, ...) with native tool calling, retrying transient failures
itself.  Models that write their tool calls as text (Hermes ``<tool_call>`` tags,
a fenced JSON block, a bare JSON object) are handled by ``parse_text_tool_calls``.
``FakeModel`` replays a script, for tests and demos.

Errors: ``ModelError`` (the endpoint failed, after the retries), ``ContextOverflow``
(the conversation no longer fits), ``FormatError`` (a tool call written as text
could not be parsed: its message tells the model the expected format).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from ..errors import BadEndpoint, ContextOverflow, FormatError, ModelError
from .textcalls import code_block_command, render_text_tools

log = logging.getLogger(__name__)

__all__ = [
    "AssistantMessage",
    "FakeModel",
    "Model",
    "OpenAIModel",
    "ToolCall",
    "parse_text_tool_calls",
]

USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")
MAX_BACKOFF_S = 30.0
# the statuses worth another attempt: the request may succeed later (others never will)
RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
_HTTP_URL = re.compile(r"^https?://[^/\s]+", re.IGNORECASE)
TOOL_FORMATS = ("native", "text", "auto")
# a 4xx that says the server cannot do tool calling (vLLM without --enable-auto-tool-choice,
# llama.cpp's server without --jinja, Ollama models without tools, ...)
_TOOLS_REFUSED_RE = re.compile(
    r"HTTP 4\d\d: .*(?:tool[_ ]choice|tool-call-parser|enable-auto-tool-choice|--jinja"
    r"|(?:does not|doesn't|not) support(?:ed)?(?: for)? (?:tools|tool calling|function calling|functions)"
    r"|tools? (?:are|is) not supported|function calling is not)",
    re.IGNORECASE | re.DOTALL,
)


# --------------------------------------------------------------------------------------
# messages
# --------------------------------------------------------------------------------------
@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text exactly as the model produced it (may be invalid JSON)

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class AssistantMessage:
    content: str | None
    tool_calls: list[ToolCall]
    reasoning_content: str | None = None
    usage: dict = field(default_factory=dict)  # prompt_tokens, completion_tokens, total_tokens when known
    finish_reason: str | None = None
    native: bool = True  # False when tool_calls came from the text fallback
    # replies the backend threw away before this one (a reply that did not parse, before a
    # grammar-constrained retry): [{"content", "error", ...}]; the loop keeps them in the Step
    discarded: list[dict] = field(default_factory=list)

    def to_message(self) -> dict:
        """The dict to append to the chat history.

        Native tool calls are replayed in OpenAI format (the answers go in ``role: tool``
        messages).  Calls parsed from text are not: the content already holds them as
        the model wrote them, and their answers go back as user messages.
        """
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls and self.native:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        elif msg["content"] is None:
            msg["content"] = ""  # many servers reject a null content without tool calls
        if self.reasoning_content is not None:
            msg["reasoning_content"] = self.reasoning_content
        return msg


class Model(Protocol):
    name: str

    def complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage: ...


# --------------------------------------------------------------------------------------
# text fallback
# --------------------------------------------------------------------------------------
_DECODER = json.JSONDecoder(strict=False)  # tolerate raw newlines inside strings (multi-line commands)
_TAG_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FENCE_RE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
THINK_RE = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_OBJ_START_RE = re.compile(r"[\[{]\s*[\"{]")
_NAME_RE = re.compile(r'"name"\s*:\s*"([^"]*)"')
_ARGS_RE = re.compile(r'"(?:arguments|parameters)"\s*:')
_JSON_FENCES = {"", "json", "json5", "tool_call", "tool_code", "tool"}


def parse_text_tool_calls(text: str, known_tools: set[str] | None = None, *,
                          code_blocks: bool = False) -> list[ToolCall]:  # fmt: skip
    """Tool calls written as text, in the order they appear; ``[]`` when there are none.

    Accepted: Hermes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several
    allowed), a fenced ```json (or bare ```) block holding such an object or a list of
    them, or a bare JSON object with "name" and "arguments" ("parameters" and the OpenAI
    ``{"function": {...}}`` shape too; arguments may be an object or a JSON string).
    ``<think>`` blocks are ignored.  With ``known_tools``, loose JSON (fenced or bare)
    only counts as a call when it names one of them.  With ``code_blocks`` (the small-model
    profile), a reply with none of those whose first code block is shell or Python is one
    ``execute_bash`` call of it (``textcalls.code_block_command``).

    Raises ``FormatError`` when the text clearly tries to call a tool but cannot be parsed.
    """
    text = THINK_RE.sub("", text or "")
    if "<tool_call>" in text:
        specs = _from_tags(text, known_tools)
    else:
        specs = _from_fences(text, known_tools) or _from_bare(text, known_tools)
    if not specs and _looks_like_call(text, known_tools):
        _format_error(
            'it looks like a tool call, but no complete JSON object with "name" and "arguments" was found', known_tools
        )
    if not specs and code_blocks and (known_tools is None or "execute_bash" in known_tools):
        command = code_block_command(text)
        if command is not None:
            specs = [{"name": "execute_bash", "arguments": {"command": command}}]
    return [_to_call(i, spec, known_tools) for i, spec in enumerate(specs)]


def _from_tags(text: str, known_tools: set[str] | None) -> list[dict]:
    specs: list[dict] = []
    for body in _TAG_RE.findall(text):
        try:
            obj = _DECODER.decode(body.strip())
        except json.JSONDecodeError as e:
            _format_error(
                f"the JSON inside <tool_call> is malformed ({e.msg} at line {e.lineno} column {e.colno})", known_tools
            )
        found = _specs(obj, require_args=False)
        if not found:
            _format_error('the object inside <tool_call> has no "name"', known_tools)
        specs += found
    return specs


def _from_fences(text: str, known_tools: set[str] | None) -> list[dict]:
    specs: list[dict] = []
    for lang, body in _FENCE_RE.findall(text):
        if lang.lower() not in _JSON_FENCES:
            continue
        try:
            obj = _DECODER.decode(body.strip())
        except json.JSONDecodeError as e:
            if _looks_like_call(body, known_tools):
                _format_error(
                    f"the JSON in the ``` block is malformed ({e.msg} at line {e.lineno} column {e.colno})", known_tools
                )
            continue
        specs += _keep_known(_specs(obj), known_tools)
    return specs


def _from_bare(text: str, known_tools: set[str] | None) -> list[dict]:
    specs: list[dict] = []
    pos = 0
    while m := _OBJ_START_RE.search(text, pos):
        try:
            obj, end = _DECODER.raw_decode(text, m.start())
        except json.JSONDecodeError:
            pos = m.start() + 1
            continue
        # a bare object needs "arguments": {"name": "submit"} alone is what a model copies from a
        # tool description or an earlier result, not a call (inside <tool_call> tags it is one)
        found = _keep_known(_specs(obj), known_tools)
        specs += found
        pos = end if found else m.start() + 1
    return specs


def _specs(obj: Any, *, require_args: bool = True) -> list[dict]:
    """The call-shaped dicts in a decoded JSON value: {"name", "arguments"}, {"function": {...}},
    {"tool_calls": [...]} or a list of those."""
    if isinstance(obj, list):
        return [s for item in obj for s in _specs(item, require_args=require_args)]
    if not isinstance(obj, dict):
        return []
    if isinstance(obj.get("tool_calls"), list):
        return _specs(obj["tool_calls"], require_args=require_args)
    if isinstance(obj.get("function"), dict):
        inner = _specs(obj["function"], require_args=require_args)
        extra = [k for k in obj if k not in ("function", "id", "type", "index")]
        if inner and extra:  # keys beside {"function": ...} travel with the call, to be named
            inner = [{**s, **{k: obj[k] for k in extra if k not in s}} for s in inner]
        return inner
    has_args = "arguments" in obj or "parameters" in obj
    if isinstance(obj.get("name"), str) and (has_args or not require_args):
        return [obj]
    return []


def _keep_known(specs: list[dict], known_tools: set[str] | None) -> list[dict]:
    return specs if known_tools is None else [s for s in specs if s["name"] in known_tools]


def _looks_like_call(text: str, known_tools: set[str] | None) -> bool:
    if "<tool_call>" in text:
        return True
    names = _NAME_RE.findall(text)
    if known_tools is not None:
        names = [n for n in names if n in known_tools]
    return bool(names) and bool(_ARGS_RE.search(text))


_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})  # what a call object may hold


def _check_keys(spec: dict, known_tools: set[str] | None) -> None:
    """A call holds a name and its arguments, nothing else: a tool's schema copied from the
    prompt, or a second request tucked in beside the arguments (``"submit": "..."``), is an error
    that names what it found, never a call with those keys silently dropped."""
    name = spec["name"]
    params = spec.get("parameters")
    schema_like = "description" in spec or (
        isinstance(params, dict) and params.get("type") == "object" and "properties" in params)  # fmt: skip
    if schema_like and "arguments" not in spec:
        keys = ", ".join(f'"{k}"' for k in spec if k != "name")
        _format_error(f'this is the description of the tool {name!r} (its schema, with {keys}), not a call; '
                      f'a call gives "arguments": the values, e.g. {{"command": "ls"}} for execute_bash',
                      known_tools)  # fmt: skip
    if "arguments" in spec and "parameters" in spec:
        _format_error(f'the call of {name!r} has both "arguments" and "parameters"; give only "arguments"',
                      known_tools)  # fmt: skip
    extra = [k for k in spec if k not in _CALL_KEYS or (k == "type" and spec[k] != "function")]
    if extra:
        keys = ", ".join(f'"{k}"' for k in extra)
        _format_error(f'the call of {name!r} has unexpected keys beside "name" and "arguments": {keys} '
                      "(nothing in them was run); make each request its own call, its values inside "
                      '"arguments"', known_tools)  # fmt: skip


def _to_call(index: int, spec: dict, known_tools: set[str] | None) -> ToolCall:
    name = spec["name"]
    _check_keys(spec, known_tools)
    args = spec.get("arguments", spec.get("parameters", {}))
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = _DECODER.decode(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            _format_error(f'the "arguments" string of {name!r} is not valid JSON ({e.msg})', known_tools)
    if not isinstance(args, dict):
        _format_error(f'"arguments" of {name!r} must be a JSON object, got {type(args).__name__}', known_tools)
    return ToolCall(f"call_fallback_{index}", name, json.dumps(args, ensure_ascii=False))


def _format_error(problem: str, known_tools: set[str] | None) -> NoReturn:
    """Raise a FormatError that says what went wrong and exactly what to write instead."""
    tool = "execute_bash" if not known_tools or "execute_bash" in known_tools else min(known_tools)
    example = {"name": tool, "arguments": {"command": "ls -la"} if tool == "execute_bash" else {}}
    tools = f"\nAvailable tools: {', '.join(sorted(known_tools))}." if known_tools else ""
    raise FormatError(
        f"Your tool call could not be parsed: {problem}. Write each call as one JSON object inside "
        f'<tool_call></tool_call> tags, with double-quoted keys and strings and "arguments" a JSON '
        f"object, for example:\n<tool_call>\n{json.dumps(example)}\n</tool_call>{tools}"
    )


def _tool_names(tools: list[dict] | None) -> set[str] | None:
    names = {(t.get("function") or t).get("name") for t in tools or []}
    names.discard(None)
    return names or None


def _with_text_fallback(msg: AssistantMessage, tools: list[dict] | None, *, code_blocks: bool = False) -> AssistantMessage:
    """Fill ``msg.tool_calls`` from its text when it has no native ones.

    A ``FormatError`` raised here carries the reply as ``.reply``.
    """
    if msg.tool_calls or not msg.content:
        return msg
    try:
        calls = parse_text_tool_calls(msg.content, _tool_names(tools), code_blocks=code_blocks)
    except FormatError as e:
        e.reply = msg  # type: ignore[attr-defined]
        raise
    if calls:
        msg.tool_calls, msg.native = calls, False
    return msg


# --------------------------------------------------------------------------------------
# OpenAI-compatible endpoints
# --------------------------------------------------------------------------------------
_OVERFLOW_RE = re.compile(
    r"maximum context length|context[ _]length|context_length_exceeded|context window|context size"
    r"|exceed_context_size|too many tokens|prompt is too long|prompt too long|input is too long"
    r"|reduce the length of|maximum model length|max_model_len",
    re.IGNORECASE,
)


class _Retryable(Exception):
    """A failure worth another attempt (internal)."""

    def __init__(self, what: str, retry_after: float | None = None) -> None:
        super().__init__(what)
        self.what, self.retry_after = what, retry_after


class OpenAIModel:
    """A model behind an OpenAI-compatible chat-completions endpoint."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        extra_body: dict | None = None,
        timeout: float = 600.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        native_tools: bool = True,
        tool_format: str | None = None,
        context_tokens: int | None = None,
    ) -> None:
        import openai  # the jail core never needs it

        if base_url is not None and not _HTTP_URL.match(base_url):
            raise BadEndpoint("base_url", f"model {model!r}: {base_url!r} is not an http:// or https:// URL",
                              hint="give the endpoint's URL, e.g. --base-url http://localhost:8000/v1")  # fmt: skip
        if tool_format is None:
            tool_format = "native" if native_tools else "text"
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"tool_format must be one of {', '.join(TOOL_FORMATS)}, got {tool_format!r}")
        if context_tokens is not None and (isinstance(context_tokens, bool) or context_tokens < 1):
            raise ValueError(f"context_tokens must be a positive integer or None, got {context_tokens!r}")
        self.name = model
        # "native": the tools parameter; "text": tools described in the system prompt, calls parsed from
        # the reply; "auto": native until the server refuses tools (HTTP 400 naming them), then text
        self.tool_format = tool_format
        self.tools_sent = "text" if tool_format == "text" else "native"  # what requests do now
        self.context_tokens = context_tokens  # when given, the loop clips tool outputs to fit it
        self.temperature, self.top_p, self.max_tokens, self.seed = temperature, top_p, max_tokens, seed
        self.extra_body = extra_body
        self.max_retries, self.backoff_s = max_retries, backoff_s
        key = api_key or os.environ.get("OPENAI_API_KEY")
        self.key_set = bool(key)
        self.client = openai.OpenAI(base_url=base_url, api_key=key or "EMPTY", timeout=timeout, max_retries=0)
        self.endpoint = str(self.client.base_url)
        self._sleep = time.sleep

    @property
    def sampling(self) -> dict[str, Any]:
        """What every request sends (None: not sent, the endpoint's own default applies)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "seed": self.seed, "extra_body": self.extra_body}  # fmt: skip

    def preflight(self, *, attempts: int = 3) -> None:
        """One one-token request before a long run: a bad URL, key or model name fails here, at once,
        as a ``ModelError`` (connection failures are not retried; 408, 429 and 5xx up to ``attempts``)."""
        kwargs = {"model": self.name, "messages": [{"role": "user", "content": "Reply with OK."}], "max_tokens": 1}
        for attempt in range(attempts):
            try:
                self._create(kwargs, preflight=True)
                return
            except _Retryable as e:
                if attempt + 1 == attempts:
                    raise ModelError(f"model {self.name!r} at {self.endpoint}: {e.what}; the preflight request "
                                     f"failed {attempts} times", hint="check that the endpoint is up") from None  # fmt: skip
                self._sleep(self._backoff(attempt, e.retry_after))

    @property
    def native_tools(self) -> bool:
        """Whether requests carry the ``tools`` parameter now (False: the tools are in the prompt)."""
        return self.tools_sent == "native"

    def rendered(self, messages: list[dict], tools: list[dict]) -> list[dict] | None:
        """``messages`` as sent when the tools go in the prompt; None when they are sent natively."""
        return render_text_tools(messages, tools) if tools and not self.native_tools else None

    def complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage:
        kwargs = self._request_kwargs(messages, tools)
        attempts = self.max_retries + 1
        attempt = 0
        while attempt < attempts:
            try:
                response = self._create(kwargs)
            except ModelError as e:
                if not (self.tool_format == "auto" and "tools" in kwargs and _TOOLS_REFUSED_RE.search(e.message)):
                    raise
                log.warning("model %s: the server refused tool calling (%s); writing tool calls as text from now on",
                            self.name, e.message)  # fmt: skip
                self.tools_sent = "text"  # for this request (not counted as an attempt) and every later one
                kwargs = self._request_kwargs(messages, tools)
                continue
            except _Retryable as e:
                attempt += 1
                if attempt == attempts:
                    raise ModelError(
                        f"model {self.name!r}: {e.what}; gave up after {attempts} attempt(s)",
                        hint="check that the endpoint is up and reachable, or raise max_retries / backoff_s",
                    ) from None
                delay = self._backoff(attempt - 1, e.retry_after)
                log.warning("model %s: %s; retry %d/%d in %.1fs", self.name, e.what, attempt, attempts - 1, delay)
                self._sleep(delay)
                continue
            return _with_text_fallback(self._parse(response), tools)
        raise AssertionError("unreachable")

    # -- helpers -----------------------------------------------------------------------
    def _request_kwargs(self, messages: list[dict], tools: list[dict]) -> dict:
        kwargs: dict[str, Any] = {"model": self.name, "messages": messages}
        if self.native_tools and tools:
            kwargs.update(tools=tools, tool_choice="auto")
        elif tools:
            kwargs["messages"] = render_text_tools(messages, tools)
        for key in ("temperature", "top_p", "max_tokens", "seed"):
            if (value := getattr(self, key)) is not None:
                kwargs[key] = value
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    def _create(self, kwargs: dict, *, preflight: bool = False) -> Any:
        """One request; transient failures become ``_Retryable``, the rest ``ModelError`` (a
        connection failure too when ``preflight``: nothing answers there yet)."""
        import httpx
        import openai

        try:
            return self.client.chat.completions.create(**kwargs)
        except openai.APITimeoutError:
            raise _Retryable("the request timed out") from None
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e
            what = f"could not connect to {self.endpoint} ({cause})"
            if preflight or isinstance(cause, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
                raise ModelError(f"model {self.name!r}: {what} (not retried)",
                                 hint="check --base-url and that the server is running") from None  # fmt: skip
            raise _Retryable(what) from None
        except openai.APIStatusError as e:
            raise self._status_error(e) from None
        except openai.OpenAIError as e:
            raise ModelError(f"model {self.name!r}: {type(e).__name__}: {e}") from None

    def _status_error(self, e: Any) -> Exception:
        status, detail = e.status_code, _error_detail(e)
        what = f"HTTP {status}: {detail}"
        if status != 429 and _OVERFLOW_RE.search(detail):
            return ContextOverflow(f"model {self.name!r}: the conversation does not fit the context ({what})")
        if status in RETRIED_STATUS:
            return _Retryable(what, _retry_after(e))
        hints = {
            401: "check the API key (--api-key, LLM_API_KEY or OPENAI_API_KEY)",
            403: "check the API key's permissions",
            404: "check the model name and base_url (it usually ends in /v1)",
        }
        hint = hints.get(status)
        if not self.key_set:  # "Bearer EMPTY" was sent: say so whatever the status
            hint = "no API key is set (--api-key, LLM_API_KEY or OPENAI_API_KEY)" + (f"; {hint}" if hint else "")
        return ModelError(f"model {self.name!r}: {what} (not retried)", hint=hint)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(MAX_BACKOFF_S, self.backoff_s * 2**attempt)
        if retry_after is not None:
            delay = max(delay, min(MAX_BACKOFF_S, retry_after))
        return delay + random.uniform(0, delay / 4)

    def _parse(self, response: Any) -> AssistantMessage:
        if not getattr(response, "choices", None):
            raise ModelError(f"model {self.name!r}: the endpoint returned no choices: {str(response)[:500]}")
        choice = response.choices[0]
        msg = choice.message
        return AssistantMessage(
            content=msg.content,
            tool_calls=[_native_call(i, tc) for i, tc in enumerate(msg.tool_calls or []) if _is_function(tc)],
            reasoning_content=getattr(msg, "reasoning_content", None) or getattr(msg, "reasoning", None),
            usage=_usage(getattr(response, "usage", None)),
            finish_reason=choice.finish_reason,
            native=True,
        )


def _is_function(tc: Any) -> bool:
    return getattr(tc, "function", None) is not None


def _native_call(index: int, tc: Any) -> ToolCall:
    return ToolCall(id=tc.id or f"call_{index}", name=tc.function.name or "", arguments=tc.function.arguments or "")


def _usage(usage: Any) -> dict:
    if usage is None:
        return {}
    return {k: v for k in USAGE_KEYS if (v := getattr(usage, k, None)) is not None}


def _error_detail(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        message = err.get("message") if isinstance(err, dict) else err
        code = err.get("code") if isinstance(err, dict) else None
        if message:
            return f"{message} ({code})" if code and str(code) not in str(message) else str(message)
    return getattr(e, "message", None) or str(e)


def _retry_after(e: Any) -> float | None:
    try:
        return float(e.response.headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------
# scripted model
# --------------------------------------------------------------------------------------
class FakeModel:
    """A deterministic model that replays ``replies``, one per ``complete`` call.

    Each reply is an ``AssistantMessage``; a ``str`` (plain text content, which goes
    through the same text fallback as a real model's); ``{"tool": name, "arguments":
    {...}}`` (optionally with "content"); ``{"tool_calls": [{"tool" or "name": ..,
    "arguments": ..}, ...]}``; an exception instance (raised); or a callable
    ``(messages, tools)`` returning one of those.  Arguments given as a str are kept raw.
    ``profile="small"`` stands in for a small local model: its text is read as that profile's
    (a code block is a command) and ``run_task`` gives it that profile's prompt and plain answers.
    """

    name = "fake"

    def __init__(self, replies: list, *, profile: str = "standard") -> None:
        self.profile = profile
        self.replies = list(replies)
        self.calls: list[list[dict]] = []  # the messages of every call (deep copies)
        self._next = 0
        self._ids = itertools.count(1)

    def complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage:
        self.calls.append(copy.deepcopy(messages))
        if self._next >= len(self.replies):
            raise ModelError("fake model script exhausted", hint=f"it had {len(self.replies)} replies")
        reply = self.replies[self._next]
        self._next += 1
        if callable(reply) and not isinstance(reply, (AssistantMessage, BaseException)):
            reply = reply(messages, tools)
        if isinstance(reply, BaseException):
            raise reply
        return _with_text_fallback(self._convert(reply), tools, code_blocks=self.profile == "small")

    def _convert(self, reply: Any) -> AssistantMessage:
        if isinstance(reply, AssistantMessage):
            return copy.deepcopy(reply)
        if isinstance(reply, str):
            return AssistantMessage(content=reply, tool_calls=[], finish_reason="stop")
        if isinstance(reply, dict) and ("tool" in reply or "tool_calls" in reply):
            specs = reply.get("tool_calls", [reply])
            calls = [self._call(s) for s in specs]
            return AssistantMessage(
                content=reply.get("content"),
                tool_calls=calls,
                reasoning_content=reply.get("reasoning_content"),
                usage=dict(reply.get("usage", {})),
                finish_reason="tool_calls",
            )
        raise TypeError(f"FakeModel: cannot turn {reply!r} into a reply (see the FakeModel docstring)")

    def _call(self, spec: dict) -> ToolCall:
        args = spec.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args)
        return ToolCall(id=f"call_{next(self._ids)}", name=spec.get("tool") or spec["name"], arguments=text)
