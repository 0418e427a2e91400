"""The agent loop: ask the model, run every tool call it makes, feed the results back.

Small on purpose (after mini-swe-agent): a few exceptions steer it inside.
``Submitted`` ends it well, ``LimitsExceeded`` ends it early, ``FormatError`` and
``ToolError`` go back to the model as messages (a bounded number of format
errors in a row, then the run ends with that reason).  Callers never catch them:
``Agent.step()`` returns a ``StepOutcome`` and ``Agent.run()`` an ``Outcome``
(``ExitReason`` + detail, see ``outcome.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ContextOverflow, FormatError, LimitsExceeded, ModelError, SandboxError, Submitted, ToolError
from .model import THINK_RE
from .outcome import ExitReason, Outcome, Step, StepOutcome  # (Step: the record of a turn, kept there)
from .paths import DEFAULT_PATHS
from .tools import clip_middle


def no_tool_call(answer_file: str) -> str:
    """What the model is told after a reply that called no tool (``answer_file``: the sandbox's)."""
    return ("Your reply did not call a tool. Work on the task with execute_bash or str_replace_editor, "
            f"and call submit when the final answer is in {answer_file}.")  # fmt: skip


NO_TOOL_CALL = no_tool_call(DEFAULT_PATHS.answer_file)  # the message with the default workdir


# the small-model profile: a reply with a code block that is no command (a bare block, often the
# output the model imagines, or another language) is neither a command nor an answer
NO_COMMAND_BLOCK = ("Your reply has a code block that is not a command. To run a command, put it in a ```bash "
                    "block (or a script in a ```python block); to give your final answer, reply with just the "
                    "answer, without a code block.")  # fmt: skip


def no_answer_file(answer_file: str) -> str:
    """What the model is told when it calls submit before writing ``answer_file`` (once per run)."""
    return (f"Not submitted: {answer_file} does not exist or is empty, so there is no answer to grade. Write "
            f"your final answer to {answer_file} first (str_replace_editor with command \"create\", or "
            "execute_bash), then call submit again. A second submit without it ends the task with no answer.")  # fmt: skip


def stuck_nudge(times: int, answer_file: str, *, plain_answers: bool = False) -> str:
    """What the model is told after ``times`` turns in a row made the same calls with the same
    results (``plain_answers``: in the words of the small-model profile, where a reply is the answer)."""
    done = ("reply with just your final answer" if plain_answers
            else f"write your final answer to {answer_file} and call submit")  # fmt: skip
    return (f"You have made the same tool call {times} times in a row and got the same result each time. "
            f"Repeating it will not change anything: try a different command, or {done}. "
            "Another identical call ends the task.")  # fmt: skip


# on a context overflow, tool outputs are clipped in these passes, each tried only when the one
# before changed nothing or did not help: (newest messages spared, characters kept per output)
SHRINK_LEVELS = ((4, 2000), (0, 2000), (0, 400))
# what a reply may take at most when the context is known and the model sets no max_tokens
REPLY_RESERVE_TOKENS = 1024


@dataclass
class AgentLimits:
    max_steps: int = 50  # model turns
    max_total_tokens: int | None = None  # prompt + completion, summed over the run
    max_wall_s: float | None = None  # the whole run
    max_format_errors: int = 3  # malformed replies in a row
    # turns in a row with the same calls and the same results: the last of them gets a nudge, one
    # more ends the run as STUCK (None: no guard)
    max_repeats: int | None = 3


class Agent:
    """One model working with ``tools`` under ``limits``; ``on_step(agent, step)`` after every turn;
    ``remind_submit``: the first submit without an answer file is sent back once (see ``step``);
    ``plain_answers``: a reply without a tool call is the final answer, not a format error.

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
        plain_answers: bool = False,
    ) -> None:
        self.model, self.tools = model, tools
        self.remind_submit = remind_submit  # False: every submit ends the run (an RL env's contract)
        self.plain_answers = plain_answers  # the small-model profile: a reply without a call is the answer
        self.limits = limits or AgentLimits()
        self.on_step = on_step
        self.messages: list[dict[str, Any]] = []
        self.steps: list[Step] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self.format_errors = 0
        self.repeats = 0  # turns in a row (so far) with the same calls and results as the one before
        self._last_turn: str | None = None  # the digest of the last turn's calls and results
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
        self.repeats, self._last_turn = 0, None
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
        - with ``plain_answers`` (the small-model profile), a reply that calls no tool: SUBMITTED,
          its text the answer (written to the answer file unless the model wrote one already);
        - ``max_format_errors`` replies in a row had no usable tool call: FORMAT_ERRORS;
        - ``max_repeats`` turns in a row made the same calls (name and arguments) and got the same
          results (errors included): the last of them is answered with a nudge
          (``Step.note``), and one more identical turn ends the run: STUCK;
        - the conversation does not fit the model's context even after clipping old tool
          outputs: CONTEXT_OVERFLOW;
        - the model raised ``ModelError``: MODEL_ERROR; a tool raised another ``SandboxError``
          (the jail failed): SANDBOX_ERROR, the turn left unrecorded (``step`` None).  Both
          keep the exception in ``outcome.error``.

        A malformed reply or a failing tool call does not end the run: it goes back to the model.
        Other exceptions (KeyboardInterrupt, one from ``on_step``) propagate, the run unfinished.
        RuntimeError before ``start`` or after the run ended.
        """
        n = self._open_step()
        try:
            self._check_limits()
            turn = self._ask()
            if turn is not None:
                step, reply = turn
                t1 = time.monotonic()
                results = [self._call(c) for c in reply.tool_calls]  # every call is answered, in order
                self._answer_calls(step, reply, results, time.monotonic() - t1)
            self._check_limits()
            outcome = None
        except _ENDINGS as e:
            outcome = _outcome_of(e)
        return self._close_step(n, outcome)

    async def astep(self) -> StepOutcome:
        """``step`` for asyncio: the tool calls are awaited (``tools.acall``: no thread for a
        command); the model is asked inline, so give it a model that does not block (the RL
        environment's action feed), or run ``step`` in a thread."""
        n = self._open_step()
        try:
            self._check_limits()
            turn = self._ask()
            if turn is not None:
                step, reply = turn
                t1 = time.monotonic()
                results = [await self._acall(c) for c in reply.tool_calls]
                self._answer_calls(step, reply, results, time.monotonic() - t1)
            self._check_limits()
            outcome = None
        except _ENDINGS as e:
            outcome = _outcome_of(e)
        return self._close_step(n, outcome)

    def _open_step(self) -> int:
        if not self.messages or self.outcome is not None:
            raise RuntimeError("Agent.step: no run in progress; call start(system, instance) first")
        return len(self.steps)

    def _close_step(self, n: int, outcome: Outcome | None) -> StepOutcome:
        self.outcome = outcome
        return StepOutcome(self.steps[-1] if len(self.steps) > n else None, outcome)

    def _call(self, call: Any) -> Any:
        """One tool call's result, or the ``ToolError`` that answers it."""
        try:
            return self.tools.call(call.name, call.arguments)
        except ToolError as e:
            return e

    async def _acall(self, call: Any) -> Any:
        acall = getattr(self.tools, "acall", None)  # (tools without it: called inline)
        if acall is None:
            return self._call(call)
        try:
            return await acall(call.name, call.arguments)
        except ToolError as e:
            return e

    def _ask(self) -> tuple[Step, Any] | None:
        """Ask the model; the step and its reply when the reply has tool calls to run, else None
        (the turn was answered here: a format error, or a plain answer)."""
        t0 = time.monotonic()
        tools = self.tools.schemas()
        try:
            reply = self._complete(tools)
        except FormatError as e:  # the model's text could not be parsed into a tool call
            reply = getattr(e, "reply", None)
            step = None
            if reply is not None:  # keep what the model wrote, so it sees its own mistake
                step = self._record(reply, time.monotonic() - t0, tools)
                self.messages.append(step.assistant)
                self.steps.append(step)
            self._format_error(e.message, time.monotonic() - t0, step)
            return None
        step = self._record(reply, time.monotonic() - t0, tools)
        self.messages.append(step.assistant)
        if not reply.tool_calls:
            answer = THINK_RE.sub("", reply.content or "").strip() if self.plain_answers else ""
            if answer and "```" not in answer:
                self._plain_answer(step, answer)
                return None
            self.steps.append(step)
            why = NO_COMMAND_BLOCK if answer else no_tool_call(self._paths().answer_file)
            self._format_error(why, 0.0, step)
            return None
        self.format_errors = 0
        return step, reply

    def _answer_calls(self, step: Step, reply: Any, results: list[Any], tools_s: float) -> None:
        """Record each call's result (or ``ToolError``), answer the model, and end the run when a
        call submitted or the turn repeats the last ones (``Submitted``, ``LimitsExceeded``)."""
        submitted = False
        for call, result in zip(reply.tool_calls, results):
            if isinstance(result, ToolError):
                text, data = f"Error: {result.message}", {"error": result.message}
            else:
                text, data = result.output, dict(result.data)
                if result.submitted and self._send_back_submit(data):
                    text = no_answer_file(self._paths().answer_file)
                else:
                    submitted = submitted or result.submitted
            step.observations.append({"tool": call.name, "call_id": call.id, "arguments": call.arguments,
                                      "output": text, "data": data})  # fmt: skip
        step.tools_s = tools_s
        self._fit_outputs(step, reply)
        stuck = not submitted and self._count_repeat(step)
        if stuck is None:  # the last repetition allowed: answered, with a nudge
            step.note = stuck_nudge(self.repeats + 1, self._paths().answer_file, plain_answers=self.plain_answers)
        self._answer(step, reply.native)
        self.steps.append(step)
        self._notify(step)
        if submitted:
            raise Submitted("the model called submit")
        if stuck:
            raise LimitsExceeded(f"the same tool calls and results {self.repeats + 1} times in a row",
                                 reason=ExitReason.STUCK)  # fmt: skip

    def _complete(self, tools: list[dict]) -> Any:
        """One model call; on a context overflow, tool outputs are clipped (old ones, then recent
        ones, then harder) and the call tried again, until nothing gets shorter: CONTEXT_OVERFLOW."""
        levels = iter(SHRINK_LEVELS)
        while True:
            try:
                return self.model.complete(self.messages, tools)
            except ContextOverflow as e:
                if not any(self._shrink_history(*level) for level in levels):  # stops at the first that helps
                    raise LimitsExceeded(f"the conversation no longer fits the model's context ({e.message})",
                                         reason=ExitReason.CONTEXT_OVERFLOW) from None  # fmt: skip

    def _record(self, reply: Any, model_s: float, tools: list[dict]) -> Step:
        """The Step of a reply (its usage added to the run's)."""
        for k in self.usage:
            self.usage[k] += int(reply.usage.get(k) or 0)
        step = Step(len(self.steps) + 1, model_s, 0.0, reply.to_message(), usage=dict(reply.usage),
                    finish_reason=reply.finish_reason, discarded=list(getattr(reply, "discarded", []) or []))  # fmt: skip
        if not self.steps:
            step.prompt = self._prompt_seen(tools)
        return step

    def _plain_answer(self, step: Step, text: str) -> None:
        """``plain_answers``: a reply that calls no tool is the model's final answer.  It is written
        to the answer file unless the file already holds one (the model wrote it with a tool: a
        closing remark must not replace it), and the run ends as submitted.  The step records both
        as observations (tool "answer", then "submit"; ``data["plain_reply"]``)."""
        self.format_errors = 0
        t1 = time.monotonic()
        if self.tools.answer_written():
            obs = {"tool": "answer", "call_id": None, "arguments": {}, "output": "kept the answer file as it is",
                   "data": {"plain_reply": True, "kept": True}}  # fmt: skip
        else:
            try:
                result = self.tools.write_answer(text)
                obs = {"tool": "answer", "call_id": None, "arguments": {}, "output": result.output,
                       "data": {**result.data, "plain_reply": True}}  # fmt: skip
            except ToolError as e:  # (unwritable: the model hears why, the run goes on)
                step.observations.append({"tool": "answer", "call_id": None, "arguments": {},
                                          "output": f"Error: {e.message}", "data": {"error": e.message}})  # fmt: skip
                step.tools_s = time.monotonic() - t1
                self._answer(step, False)
                self.steps.append(step)
                return self._notify(step)
        step.observations += [obs, {"tool": "submit", "call_id": None, "arguments": {}, "output": "submitted",
                                    "data": {"plain_reply": True}}]  # fmt: skip
        step.tools_s = time.monotonic() - t1
        self.steps.append(step)
        self._notify(step)
        raise Submitted("the model replied with its answer")

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

    def _paths(self) -> Any:
        return getattr(self.tools, "paths", DEFAULT_PATHS)  # the sandbox's (``Tools.paths``)

    def _shrink_history(self, keep_recent: int, keep_chars: int) -> bool:
        """Clip the tool outputs of the conversation (all but the newest ``keep_recent`` messages)
        to ``keep_chars`` characters, head and tail kept.  Returns whether anything got shorter."""
        shrunk = False
        for msg in self.messages[2 : max(2, len(self.messages) - keep_recent)]:
            text = msg.get("content")
            is_output = msg.get("role") == "tool" or (msg.get("role") == "user" and "<tool_response>" in (text or ""))
            if is_output and isinstance(text, str) and len(text) > keep_chars:
                msg["content"] = clip_middle(text, keep_chars, "dropped to fit the context")[0]
                shrunk = True
        return shrunk

    def _fit_outputs(self, step: Step, reply: Any) -> None:
        """Clip this turn's outputs so that the next request fits the model's context, when the
        model says how large it is (``context_tokens``): what the conversation holds (the reply's
        own usage when the backend reports it), plus the outputs, plus room for the next reply.
        The outputs share what is left equally; each clipped one says so (``data["clipped_chars"]``)."""
        context = getattr(self.model, "context_tokens", None)
        if not context:
            return
        count = getattr(self.model, "count_tokens", None) or estimate_tokens
        used = (int(reply.usage.get("prompt_tokens") or 0) + int(reply.usage.get("completion_tokens") or 0)
                or sum(count(m.get("content") or "") + 8 for m in self.messages))  # fmt: skip
        reserve = min(getattr(self.model, "max_tokens", None) or REPLY_RESERVE_TOKENS, context // 4)
        room = max(0, context - used - reserve - 32 * len(step.observations))
        sizes = [count(o["output"]) for o in step.observations]
        if sum(sizes) <= room:
            return
        share = room // len(sizes)
        for obs, size in zip(step.observations, sizes):
            text = obs["output"]
            if size <= share:
                continue
            keep = int(len(text) * share / size * 0.9)
            while keep > 0 and count(clip_middle(text, keep, CLIP_WHY)[0]) > share:
                keep = int(keep * 0.8)
            obs["output"], obs["data"]["clipped_chars"] = clip_middle(text, keep, CLIP_WHY)

    def _count_repeat(self, step: Step) -> bool | None:
        """Whether this turn repeats the last one (same calls, same results): False (it does not,
        or not too often yet), None (the ``max_repeats``-th in a row: nudge), True (stuck)."""
        digest = hashlib.sha256(json.dumps([(o["tool"], _canonical(o["arguments"]), o["output"])
                                            for o in step.observations]).encode()).hexdigest()  # fmt: skip
        self.repeats = self.repeats + 1 if digest == self._last_turn else 0
        self._last_turn = digest
        limit = self.limits.max_repeats
        if limit is None or self.repeats + 1 < limit:
            return False
        return None if self.repeats + 1 == limit else True

    def _answer(self, step: Step, native: bool) -> None:
        """The turn's results as messages: one ``tool`` message per native call; for calls written
        as text one user message holding every ``<tool_response>`` (chat templates that want
        user and assistant to alternate accept it).  The nudge, if any, comes after them.
        (No header such as {"name": ...}: a model that echoes it would be read as calling the tool.)"""
        if native:
            for obs in step.observations:
                self.messages.append({"role": "tool", "tool_call_id": obs["call_id"], "content": obs["output"]})
            if step.note:
                self.messages.append({"role": "user", "content": step.note})
            return
        parts = [f"<tool_response>\n{obs['output']}\n</tool_response>" for obs in step.observations]
        self.messages.append({"role": "user", "content": "\n".join(parts + ([step.note] if step.note else []))})

    def _prompt_seen(self, tools: list[dict]) -> dict[str, Any]:
        """The first request as the model saw it: the system message after the backend added its
        tool prompt (``model.rendered(messages, tools)``, when it has one), the tool schemas when
        they were sent natively, and the digest of both."""
        render = getattr(self.model, "rendered", None)
        seen = render(self.messages[:1], tools) if render is not None else None
        if seen is not None:
            record = {"system": seen[0]["content"], "tools": None, "tool_format": "text"}
        else:
            record = {"system": self.messages[0]["content"], "tools": tools, "tool_format": "native"}
        record["sha256"] = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        return record

    def _format_error(self, message: str, model_s: float, step: Step | None = None) -> None:
        self.format_errors += 1
        self.repeats, self._last_turn = 0, None  # a turn without calls: what follows is not "in a row"
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


CLIP_WHY = "dropped to fit the model's context"


_ENDINGS = (Submitted, LimitsExceeded, ModelError, SandboxError)


def _outcome_of(e: Exception) -> Outcome:
    """How a run ends, from the exception that ended its step."""
    if isinstance(e, Submitted):
        return Outcome(ExitReason.SUBMITTED, e.message)
    if isinstance(e, LimitsExceeded):
        return Outcome(ExitReason(e.reason), e.message)
    if isinstance(e, ModelError):
        return Outcome(ExitReason.MODEL_ERROR, e.message, e)
    return Outcome(ExitReason.SANDBOX_ERROR, str(e), e)  # the jail failed under the tools


def _canonical(arguments: str) -> str:
    """A call's arguments with key order and spacing that do not matter taken out."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (TypeError, ValueError):
        return arguments


def estimate_tokens(text: str) -> int:
    """A cautious token count for a backend that cannot count: digits and other symbols are often
    one token each (Qwen's tokenizer splits numbers digit by digit), words about four letters."""
    symbols = sum(1 for ch in text if not ch.isalpha() and not ch.isspace())
    return symbols + (len(text) - symbols) // 3 + 1

