"""Tool calls written as text: how the tools are put in the prompt for a model (or a server) that
gets no native ``tools`` parameter, and how a native history is replayed to it.

The model is told, in its system message, to answer with Hermes-style
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``; its replies are parsed with
``model.parse_text_tool_calls``.  Used by the embedded local model (always) and by an endpoint
with ``tool_format="text"`` (a server without a tool-call parser).

The small-model profile (``style="blocks"``) asks for less: a shell command in a ```bash block
(or a script in a ```python block), the final answer as a plain reply.  A 135M model writes
markdown code blocks readily and JSON calls almost never (measured on the demo tasks: a JSON call,
free or grammar-forced, held commands such as ``2 + 3``; in a block it wrote real scripts that
open the input), so ``code_block_command`` turns its first block into an ``execute_bash`` call
and the loop takes a reply without one as the answer (``Agent(plain_answers=True)``).
"""

from __future__ import annotations

import json
import re
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

# the small-model profile: no schemas (a long JSON prompt drowns a 135M model's reading of the task)
BLOCKS_TOOL_PROMPT = """
- To run a shell command, reply with it in a ```bash code block. You will see its output.
- To give your final answer, reply with just the answer, as the task asks for it."""

TOOL_PROMPTS = ("json", "blocks")
_BLOCK_RE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
SHELL_BLOCKS = {"bash", "sh", "shell", "console", "zsh"}  # (a bare ``` block is often output the model imagines)
PYTHON_BLOCKS = {"python", "python3", "py"}
_PY_DELIMITER = "SANDBOXLITE_PYTHON_EOF"


def code_block_command(text: str) -> str | None:
    """The shell command the first code block of ``text`` stands for, or None: a shell block
    as written (a leading ``$ `` prompt taken off each line), a Python block run by
    ``python3`` (a quoted here-document, so nothing in it is expanded).  Blocks in other
    languages, and empty ones, are no command.  Only the first counts: what follows it is
    often the output the model imagined."""
    m = _BLOCK_RE.search(text or "")
    if m is None:
        return None
    lang, body = m.group(1).lower(), m.group(2).strip("\n")
    if not body.strip():
        return None
    if lang in PYTHON_BLOCKS:
        if _PY_DELIMITER in body:
            return None
        return f"python3 - <<'{_PY_DELIMITER}'\n{body}\n{_PY_DELIMITER}"
    if lang in SHELL_BLOCKS:
        return "\n".join(line[2:] if line.startswith("$ ") else line for line in body.split("\n"))
    return None


def render_text_tools(messages: list[dict], tools: list[dict], style: str = "json") -> list[dict]:
    """``messages`` as a model without native tools sees them: the tools described at the end of
    the system message (``style`` "json": their schemas and the ``<tool_call>`` format; "blocks":
    the small-model profile's two lines, ``BLOCKS_TOOL_PROMPT``), ``role: tool`` answers as ``<tool_response>`` text in one user message per turn
    (strict-alternation chat templates accept it), and native calls replayed as ``<tool_call>`` text.  Only ``role`` and ``content`` are kept."""
    if style not in TOOL_PROMPTS:
        raise ValueError(f"style must be one of {', '.join(TOOL_PROMPTS)}, got {style!r}")
    out: list[dict] = []
    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "system" and tools and not out:
            if style == "blocks":
                content = content + BLOCKS_TOOL_PROMPT
            else:
                schemas = "\n".join(json.dumps(t["function"]) for t in tools)
                content = content + TOOL_PROMPT.format(tools=schemas)
        elif role == "tool":  # (only if a native history is replayed here)
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        elif role == "assistant" and m.get("tool_calls") and not (style == "blocks" and content.strip()):
            # (in the blocks style the reply's own text holds its call: the code block)
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
