"""``ScriptedModel`` (``--model scripted``): a deterministic stand-in for an LLM, no weights needed.

With tools it looks around, runs a little Python, writes its answer to the answer file and
submits (``steps`` turns in all); without tools (vanilla mode) it replies with the answer. It
keeps no state between calls (the turn is read from the messages), so one instance can serve
many episodes at once. It names no path of its own: it looks around the directory the shell
starts in (the sandbox's workdir) and writes its answer where the tools' descriptions say (the
sandbox's answer file), as a model reads them. For dry runs of ``sandboxlite run`` / ``eval`` and
for measuring what the sandbox side costs with the model's time taken out.
"""

from __future__ import annotations

import itertools
import json
import posixpath
import re
import shlex
from collections.abc import Callable

from ..errors import ModelError
from .model import AssistantMessage, ToolCall

Answer = str | Callable[[list[dict]], str]
# the submit tool's description names the answer file (tools.tool_schemas)
_ANSWER_FILE = re.compile(r"write your final answer to (/.*?) yourself")


def answer_file_of(tools: list[dict]) -> str:
    """The answer file the tools tell a model to write (the submit tool's description names it)."""
    for tool in tools:
        fn = tool.get("function") or {}
        m = _ANSWER_FILE.search(fn.get("description") or "") if fn.get("name") == "submit" else None
        if m:
            return m.group(1)
    raise ModelError("ScriptedModel: the submit tool's description names no answer file",
                     hint="give it the tools of sandboxlite.agent.tools (Tools.schemas())")  # fmt: skip


class ScriptedModel:
    name = "scripted"

    def __init__(self, answer: Answer = "\\boxed{0}", *, steps: int = 4) -> None:
        if steps < 2:
            raise ValueError("ScriptedModel needs steps >= 2 (write the answer, then submit)")
        self.answer, self.steps = answer, steps
        self.info = {"steps": steps}
        self.sampling: dict = {}  # deterministic: nothing to sample
        self.endpoint = None
        self._ids = itertools.count(1)

    def _answer(self, messages: list[dict]) -> str:
        return self.answer(messages) if callable(self.answer) else self.answer

    def complete(self, messages: list[dict], tools: list[dict]) -> AssistantMessage:
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not tools:
            return AssistantMessage(content=f"Answer: {self._answer(messages)}", tool_calls=[], usage=usage,
                                    finish_reason="stop")  # fmt: skip
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if turn >= self.steps - 1:
            name, args = "submit", {}
        elif turn == self.steps - 2:
            name, args = "str_replace_editor", {"command": "create", "path": answer_file_of(tools),
                                                "file_text": self._answer(messages)}  # fmt: skip
        elif turn == 0:  # the shell starts in the workdir
            name, args = "execute_bash", {"command": "ls -la; python3 -c 'print(6 * 7)'"}
        else:
            output_dir = posixpath.dirname(answer_file_of(tools))
            name, args = "execute_bash", {"command": f"echo turn {turn}; ls {shlex.quote(output_dir)}"}
        call = ToolCall(id=f"call_{next(self._ids)}", name=name, arguments=json.dumps(args))
        return AssistantMessage(content=None, tool_calls=[call], usage=usage, finish_reason="tool_calls")
