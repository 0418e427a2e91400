"""Tool calls written as text: how the tools are put in the prompt for a model (or a server) that
gets no native ``tools`` parameter, and how a native history is replayed to it.

The model is told, in its system message, to answer with Hermes-style
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``; its replies are parsed with
``model.parse_text_tool_calls``.  Used by the embedded local model (always) and by an endpoint
with ``tool_format="text"`` (a server without a tool-call parser).
"""

from __future__ import annotations

import json
from typing import Any

# (its example names no path: the sandbox's paths are in the system prompt and the tools' descriptions)
TOOL_PROMPT = """

# Tools

You have these tools. To use one, reply with one JSON object inside <tool_call></tool_call> tags,
for example:
<tool_call>{{"name": "execute_bash", "arguments": {{"command": "ls"}}}}</tool_call>

<tools>
{tools}
</tools>"""


def render_text_tools(messages: list[dict], tools: list[dict]) -> list[dict]:
    """``messages`` as a model without native tools sees them: the tools described at the end of
    the system message, ``role: tool`` answers as ``<tool_response>`` text in one user message per turn
    (strict-alternation chat templates accept it), and native calls replayed as ``<tool_call>`` text.  Only ``role`` and ``content`` are kept."""
    out: list[dict] = []
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "system" and tools and not out:
            schemas = "\n".join(json.dumps(t["function"]) for t in tools)
            content = content + TOOL_PROMPT.format(tools=schemas)
        elif role == "tool":  # (only if a native history is replayed here)
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        elif role == "assistant" and m.get("tool_calls"):
            calls = "".join(
                f"<tool_call>{json.dumps({'name': c['function']['name'], 'arguments': _loads(c['function']['arguments'])})}</tool_call>"
                for c in m["tool_calls"]
            )
            content = (content + "\n" + calls).strip()
        if role == "user" and out and out[-1]["role"] == "user":  # a turn's answers (and a note): one message
            out[-1]["content"] += "\n" + content
            continue
        out.append({"role": role, "content": content})
    return out


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text
