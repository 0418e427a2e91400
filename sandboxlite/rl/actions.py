"""Actions: what a policy hands ``SandboxEnv.step``, turned into the agent loop's ``AssistantMessage``.

Accepted (see :func:`to_assistant_message`):

- an ``AssistantMessage`` (``sandboxlite.agent.model``);
- a dict shaped like an OpenAI chat message: ``{"role": "assistant", "content": ..., "tool_calls":
  [{"id": ..., "type": "function", "function": {"name": ..., "arguments": "<json>"}}]}``
  (``arguments`` may also be a dict; a flat ``{"name": ..., "arguments": ...}`` call is accepted too;
  extra keys such as ``token_ids``, ``logprobs`` or ``usage`` are allowed);
- an object with the same attributes (e.g. the ``message`` of an ``openai`` completion);
- a list of tool calls (the shape rllm's ``ToolAgent`` produces);
- plain text, parsed exactly as the agent loop parses tool calls written as text
  (``<tool_call>{...}</tool_call>``, a fenced JSON block, a bare JSON object).

Anything else, or a call that cannot be understood, raises ``FormatError`` whose message is the
text the model is shown (the environment turns it into a format-error observation).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..agent.model import AssistantMessage, ToolCall, _with_text_fallback
from ..errors import FormatError

__all__ = ["to_assistant_message", "extract_tokens", "ACTION_HELP"]

ACTION_HELP = (
    "Reply with an assistant message that calls one of the tools (execute_bash, str_replace_editor, "
    'submit): native tool calls, or one JSON object inside <tool_call></tool_call> tags such as\n'
    '<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _text(content: Any) -> str | None:
    """Message content as text: a string, or the text parts of an OpenAI content list."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif _get(p, "type") == "text" and isinstance(_get(p, "text"), str):
                parts.append(_get(p, "text"))
            else:
                raise _error(f"the content list holds a part that is not text ({type(p).__name__})")
        return "".join(parts)
    raise _error(f"the message content must be text, got {type(content).__name__}")


def _error(problem: str, reply: AssistantMessage | None = None) -> FormatError:
    e = FormatError(f"Your reply could not be used: {problem}. {ACTION_HELP}")
    if reply is not None:
        e.reply = reply  # type: ignore[attr-defined]
    return e


def _usage(value: Any) -> dict:
    if not isinstance(value, Mapping):
        value = {k: getattr(value, k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
                 if isinstance(getattr(value, k, None), int)}  # fmt: skip
    return {k: int(v) for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _call(index: int, spec: Any, id_prefix: str, reply: AssistantMessage) -> ToolCall:
    fn = _get(spec, "function") or spec
    name = _get(fn, "name")
    if not isinstance(name, str) or not name:
        raise _error(f"tool call #{index + 1} has no function name", reply)
    args = _get(fn, "arguments", _get(fn, "parameters"))
    if args is None:
        text = "{}"
    elif isinstance(args, str):
        text = args  # raw, as a model produced it: the tool reports invalid JSON to the model
    else:
        try:
            text = json.dumps(args, ensure_ascii=False)
        except (TypeError, ValueError):
            raise _error(f"the arguments of {name!r} are not JSON ({type(args).__name__})", reply) from None
    call_id = _get(spec, "id")
    if not isinstance(call_id, str) or not call_id:
        call_id = f"{id_prefix}_{index}"
    return ToolCall(call_id, name, text)


def to_assistant_message(action: Any, tools: list[dict], *, id_prefix: str = "call") -> AssistantMessage:
    """The policy's ``action`` as the agent loop's ``AssistantMessage`` (never modifies ``action``).

    ``tools`` are the tool schemas (for the text fallback: loose JSON only counts as a call when it
    names one of them).  Raises ``FormatError``; when the action had text, the error carries it as
    ``.reply`` so that it stays in the conversation, as in the agent loop.
    """
    if isinstance(action, AssistantMessage):
        msg = AssistantMessage(action.content, list(action.tool_calls), action.reasoning_content,
                               dict(action.usage), action.finish_reason, action.native)  # fmt: skip
        return _with_text_fallback(msg, tools)
    if isinstance(action, str):
        return _with_text_fallback(AssistantMessage(content=action, tool_calls=[], finish_reason="stop"), tools)
    if isinstance(action, (list, tuple)):  # a bare list of tool calls (rllm's ToolAgent)
        action = {"role": "assistant", "content": None, "tool_calls": list(action)}
    elif action is None or isinstance(action, (bytes, int, float, bool)) or not (
        isinstance(action, Mapping) or hasattr(action, "content") or hasattr(action, "tool_calls")
    ):
        raise _error(f"expected an assistant message, got {type(action).__name__}")
    role = _get(action, "role")
    if role not in (None, "assistant"):
        raise _error(f"expected a message with role 'assistant', got role {role!r}")
    content = _text(_get(action, "content"))
    reasoning = _get(action, "reasoning_content")
    usage = _usage(_get(action, "usage") or {})
    msg = AssistantMessage(content=content, tool_calls=[], usage=usage,
                           reasoning_content=reasoning if isinstance(reasoning, str) else None,
                           finish_reason=_get(action, "finish_reason"))  # fmt: skip
    calls = _get(action, "tool_calls")
    if calls:
        keep = AssistantMessage(content=content or "", tool_calls=[], usage=usage)
        if not isinstance(calls, (list, tuple)):
            raise _error(f"tool_calls must be a list, got {type(calls).__name__}", keep)
        msg.tool_calls = [_call(i, c, id_prefix, keep) for i, c in enumerate(calls)]
        msg.native = True
        return msg
    return _with_text_fallback(msg, tools)


def _int_list(value: Any) -> list[int] | None:
    if value is None:
        return None
    try:
        out = [int(v) for v in value]
    except (TypeError, ValueError):
        return None
    return out


def _float_list(value: Any) -> list[float] | None:
    if value is None:
        return None
    try:
        return [float(v) for v in value]
    except (TypeError, ValueError):
        return None


def extract_tokens(action: Any) -> tuple[list[int] | None, list[float] | None, list[int] | None]:
    """``(token_ids, logprobs, prompt_token_ids)`` a policy attached to its action (keys or attributes
    of those names), each None when absent."""
    if isinstance(action, (str, bytes, list, tuple)) or action is None:
        return None, None, None
    return (
        _int_list(_get(action, "token_ids")),
        _float_list(_get(action, "logprobs")),
        _int_list(_get(action, "prompt_token_ids")),
    )
