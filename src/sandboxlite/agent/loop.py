"""The agent loop: ask the model, run every tool call it makes, feed the results back.

Small on purpose (after mini-swe-agent): a few exceptions steer it inside.
``Submitted`` ends it well, ``LimitsExceeded`` ends it early, ``FormatError`` and
``ToolError`` go back to the model as messages (a bounded number of format
errors in a row, then the run ends with that reason).  Callers never catch them:
``Agent.step()`` returns a ``StepOutcome`` and ``Agent.run()`` an ``Outcome``
(``ExitReason`` + detail, see ``outcome.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ContextOverflow, FormatError, LimitsExceeded, ModelError, SandboxError, Submitted, ToolError
from .outcome import ExitReason, Outcome, StepOutcome
from .paths import DEFAULT_PATHS


def no_tool_call(answer_file: str) -> str:
    """What the model is told after a reply that called no tool (``answer_file``: the sandbox's)."""
    return ("Your reply did not call a tool. Work on the task with execute_bash or str_replace_editor, "
            f"and call submit when the final answer is in {answer_file}.")  # fmt: skip


NO_TOOL_CALL = no_tool_call(DEFAULT_PATHS.answer_file)  # the message with the default workdir


def no_answer_file(answer_file: str) -> str:
    """What the model is told when it calls submit before writing ``answer_file`` (once per run)."""
    return (f"Not submitted: {answer_file} does not exist or is empty, so there is no answer to grade. Write "
            f"your final answer to {answer_file} first (str_replace_editor with command \"create\", or "
            "execute_bash), then call submit again. A second submit without it ends the task with no answer.")  # fmt: skip


@dataclass
class AgentLimits:
    max_steps: int = 50  # model turns
    max_total_tokens: int | None = None  # prompt + completion, summed over the run
    max_wall_s: float | None = None  # the whole run
    max_format_errors: int = 3  # malformed replies in a row


@dataclass
class Step:
    """One model turn, as the trajectory records it."""

    index: int
    model_s: float
    tools_s: float
    assistant: dict[str, Any]
    observations: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    finish_reason: str | None = None  # the backend's: "stop", "tool_calls", "length" (the reply was cut)


class Agent:
    """One model working with ``tools`` under ``limits``; ``on_step(agent, step)`` after every turn;
    ``remind_submit``: the first submit without an answer file is sent back once (see ``step``).

    Drive it with ``run(system, instance) -> Outcome``, or one turn at a time::

        agent.start(system, instance)
        while not (s := agent.step()).done:
            ...                                  # s.step: the Step record of the turn
        s.reason, s.detail                       # ExitReason.MAX_STEPS, "max_steps=3 reached"

    ``messages``, ``steps`` and ``usage`` are the run so far (read them, do not modify them);
    ``outcome`` is None until the run ends.
    """

    def __init__(
        self,
        model: Any,
        tools: Any,
        limits: AgentLimits | None = None,
        *,
        on_step: Callable[["Agent", Step], None] | None = None,
        remind_submit: bool = True,
    ) -> None:
        self.model, self.tools = model, tools
        self.remind_submit = remind_submit  # False: every submit ends the run (an RL env's contract)
        self.limits = limits or AgentLimits()
        self.on_step = on_step
        self.messages: list[dict[str, Any]] = []
        self.steps: list[Step] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self.format_errors = 0
        self.submit_reminded = False  # the first submit without an answer file was sent back
        self.started = 0.0
        self.outcome: Outcome | None = None

    def run(self, system: str, instance: str) -> Outcome:
        """Run to the end (``start``, then ``step`` until done); returns how it ended."""
        self.start(system, instance)
        while True:
            s = self.step()
            if s.outcome is not None:
                return s.outcome

    def start(self, system: str, instance: str) -> list[dict[str, Any]]:
        """Begin a run: the conversation becomes [system, user]; steps, usage, the count of
        format errors and the wall clock start afresh.  Returns ``messages``."""
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": instance}]
        self.steps, self.format_errors, self.outcome, self.submit_reminded = [], 0, None, False
        self.usage = dict.fromkeys(self.usage, 0)
        self.started = time.monotonic()
        return self.messages

    def step(self) -> StepOutcome:
        """Take one model turn: ask the model, run every tool call of its reply, append the
        messages and the ``Step`` record (then ``on_step`` runs).

        The run ends (``done``, ``outcome`` set) when:

        - the reply called submit: SUBMITTED (also on the turn that reaches a limit); the first
          submit while the answer file is missing or blank is sent back with a reminder of where
          the answer goes instead (``observations[i]["data"]["reminder"]``), a second one ends it;
        - a limit is reached, checked before the turn (then no turn is taken: wall time may have
          run out between calls) and after it, so the turn that takes the ``max_steps``-th step
          or uses up the token or time budget reports it at once: MAX_STEPS, TOKEN_BUDGET,
          WALL_TIME;
        - ``max_format_errors`` replies in a row had no usable tool call: FORMAT_ERRORS;
        - the conversation does not fit the model's context even after clipping old tool
          outputs: CONTEXT_OVERFLOW;
        - the model raised ``ModelError``: MODEL_ERROR; a tool raised another ``SandboxError``
          (the jail failed): SANDBOX_ERROR, the turn left unrecorded (``step`` None).  Both
          keep the exception in ``outcome.error``.

        A malformed reply or a failing tool call does not end the run: it goes back to the model.
        Other exceptions (KeyboardInterrupt, one from ``on_step``) propagate, the run unfinished.
        RuntimeError before ``start`` or after the run ended.
        """
        if not self.messages or self.outcome is not None:
            raise RuntimeError("Agent.step: no run in progress; call start(system, instance) first")
        n = len(self.steps)
        try:
            self._check_limits()
            self._turn()
            self._check_limits()
            outcome = None
        except Submitted as e:
            outcome = Outcome(ExitReason.SUBMITTED, e.message)
        except LimitsExceeded as e:
            outcome = Outcome(ExitReason(e.reason), e.message)
        except ModelError as e:
            outcome = Outcome(ExitReason.MODEL_ERROR, e.message, e)
        except SandboxError as e:  # the jail failed under the tools
            outcome = Outcome(ExitReason.SANDBOX_ERROR, str(e), e)
        self.outcome = outcome
        return StepOutcome(self.steps[-1] if len(self.steps) > n else None, outcome)

    def _turn(self) -> None:
        t0 = time.monotonic()
        try:
            try:
                reply = self.model.complete(self.messages, self.tools.schemas())
            except ContextOverflow:
                if not self._shrink_history():
                    raise
                reply = self.model.complete(self.messages, self.tools.schemas())
        except ContextOverflow as e:
            raise LimitsExceeded(f"the conversation no longer fits the model's context ({e.message})",
                                 reason=ExitReason.CONTEXT_OVERFLOW) from None  # fmt: skip
        except FormatError as e:  # the model's text could not be parsed into a tool call
            reply = getattr(e, "reply", None)
            step = None
            if reply is not None:  # keep what the model wrote, so it sees its own mistake
                step = Step(len(self.steps) + 1, time.monotonic() - t0, 0.0, reply.to_message(), usage=dict(reply.usage),
                            finish_reason=reply.finish_reason)  # fmt: skip
                self.messages.append(step.assistant)
                self.steps.append(step)
            return self._format_error(e.message, time.monotonic() - t0, step)
        model_s = time.monotonic() - t0
        for k in self.usage:
            self.usage[k] += int(reply.usage.get(k) or 0)
        step = Step(len(self.steps) + 1, model_s, 0.0, reply.to_message(), usage=dict(reply.usage),
                    finish_reason=reply.finish_reason)  # fmt: skip
        self.messages.append(step.assistant)
        if not reply.tool_calls:
            self.steps.append(step)
            paths = getattr(self.tools, "paths", DEFAULT_PATHS)  # the sandbox's (``Tools.paths``)
            return self._format_error(no_tool_call(paths.answer_file), 0.0, step)
        self.format_errors = 0
        submitted = False
        t1 = time.monotonic()
        for call in reply.tool_calls:  # every call is answered, in order
            try:
                result = self.tools.call(call.name, call.arguments)
                text, data = result.output, dict(result.data)
                if result.submitted and self._send_back_submit(data):
                    text = no_answer_file(getattr(self.tools, "paths", DEFAULT_PATHS).answer_file)
                else:
                    submitted = submitted or result.submitted
            except ToolError as e:
                text, data = f"Error: {e.message}", {"error": e.message}
            self._observe(call, text, reply.native, step, data)
        step.tools_s = time.monotonic() - t1
        self.steps.append(step)
        self._notify(step)
        if submitted:
            raise Submitted("the model called submit")

    # -- helpers -----------------------------------------------------------------------
    def _send_back_submit(self, data: dict[str, Any]) -> bool:
        """With ``remind_submit``: record in ``data`` whether the answer file holds anything, and
        whether this submit is the first without one (then it is sent back, once per run)."""
        if not self.remind_submit or not hasattr(self.tools, "answer_written"):
            return False
        data["answer_file"] = self.tools.answer_written()
        if data["answer_file"] or self.submit_reminded:
            return False
        data["reminder"] = "no_answer_file"
        self.submit_reminded = True
        return True

    def _shrink_history(self, keep_recent: int = 4, keep_chars: int = 2000) -> bool:
        """On context overflow: clip old tool outputs (head and tail kept), once per overflow.
        Returns whether anything got shorter."""
        shrunk = False
        old = self.messages[2 : max(2, len(self.messages) - keep_recent)]
        for msg in old:
            text = msg.get("content")
            is_output = msg.get("role") == "tool" or (msg.get("role") == "user" and "<tool_response>" in (text or ""))
            if is_output and isinstance(text, str) and len(text) > keep_chars:
                half = keep_chars // 2
                msg["content"] = f"{text[:half]}\n[... {len(text) - keep_chars} characters dropped to fit the context ...]\n{text[-half:]}"
                shrunk = True
        return shrunk

    def _observe(self, call: Any, text: str, native: bool, step: Step, data: dict[str, Any]) -> None:
        if native:
            msg = {"role": "tool", "tool_call_id": call.id, "content": text}
        else:  # the model wrote its call as text: answer in kind
            # (no header such as {"name": ...}: a model that echoes it would be read as calling the tool)
            msg = {"role": "user", "content": f"<tool_response>\n{text}\n</tool_response>"}
        self.messages.append(msg)
        step.observations.append({"tool": call.name, "call_id": call.id, "arguments": call.arguments,
                                  "output": text, "data": data})  # fmt: skip

    def _format_error(self, message: str, model_s: float, step: Step | None = None) -> None:
        self.format_errors += 1
        self.messages.append({"role": "user", "content": message})
        if step is None:
            step = Step(len(self.steps) + 1, model_s, 0.0, {"role": "assistant", "content": None})
            self.steps.append(step)
        step.error = message
        self._notify(step)
        if self.format_errors >= self.limits.max_format_errors:
            raise LimitsExceeded(f"{self.format_errors} replies in a row without a usable tool call; last: {message}",
                                 reason=ExitReason.FORMAT_ERRORS)  # fmt: skip

    def _notify(self, step: Step) -> None:
        if self.on_step is not None:
            self.on_step(self, step)

    def _check_limits(self) -> None:
        lim = self.limits
        if len(self.steps) >= lim.max_steps:
            raise LimitsExceeded(f"max_steps={lim.max_steps} reached", reason=ExitReason.MAX_STEPS)
        if lim.max_total_tokens is not None and self.usage["total_tokens"] >= lim.max_total_tokens:
            raise LimitsExceeded(f"token budget {lim.max_total_tokens} used up", reason=ExitReason.TOKEN_BUDGET)
        if lim.max_wall_s is not None and time.monotonic() - self.started >= lim.max_wall_s:
            raise LimitsExceeded(f"wall time {lim.max_wall_s:.0f}s used up", reason=ExitReason.WALL_TIME)
