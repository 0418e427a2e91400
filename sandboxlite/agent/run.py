"""``run_task``: one task, one sandbox, one model, from start to the output directory.

The output directory gets, as the run goes (so an interrupted run loses nothing):
``trajectory.json`` (brought up to date after every step: see ``TrajectoryWriter``), and at the end ``answer.txt`` and
``files/`` (what the model left in the sandbox's output directory, ``<workdir>/output``:
regular files only, never following a symlink, size-capped).  Every sandbox path comes from the
sandbox (``Paths.of(sb)``), never from a constant.

What is written is UTF-8 text: names from the sandbox that are not UTF-8 are recorded
``readable`` (their bad bytes as ``\\xff``; in files/ they keep their raw bytes).
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import SandboxConfig
from ..errors import FormatError, ModelError, SandboxError, SandboxFileError
from ..jail.sandbox import Sandbox
from .loop import Agent, AgentLimits, Step
from .model import THINK_RE, parse_text_tool_calls
from .outcome import ExitReason, Outcome
from .paths import DEFAULT_PATHS, Paths
from .prompts import PromptTemplate
from .task import Task
from .tools import Tools, readable

MAX_EXPORT_BYTES = 256 << 20  # files/ copied out of the output directory
MAX_ANSWER_BYTES = 1 << 20
PRETTY_MAX_BYTES = 32 << 20  # trajectory.json's last write is indented up to this size


@dataclass
class RunResult:
    """What ``run_task`` did.  ``reason`` says how the run ended (an ``ExitReason``: branch on it);
    ``exit_reason`` is the same as text, with the detail ("limits exceeded: max_steps=3 reached")."""

    task_id: str
    exit_reason: str
    submitted: bool
    answer: str | None
    steps: int
    usage: dict[str, int]
    duration_s: float
    output_dir: str
    skipped_outputs: list[str] = field(default_factory=list)
    model_s: float = 0.0  # time spent waiting for the model (the rest is sandbox and loop overhead)
    last_message: str | None = None  # the model's last text reply, whatever it held (a tool call too)
    reason: ExitReason | None = None
    # the last reply that was text and no tool call (native, or written as text, or a malformed
    # attempt at one), <think> blocks removed: an answer given in words (None when there is none)
    final_text: str | None = None
    finish_reason: str | None = None  # the last reply's ("length": it was cut)
    truncated_replies: int = 0  # replies cut by max_tokens or the context (finish_reason "length")
    # network="allow:...": the run's requests through the egress proxy (``egress.Request.as_dict``)
    network_requests: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.submitted


def default_output_dir(task: Task) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("output") / f"{stamp}-{task.id}"


class TrajectoryWriter:
    """Keeps ``trajectory.json`` current: written after every step, so an interrupted run loses nothing.

    The file is one JSON object: the header (``task``, ``model``, ...), then ``messages``, then
    ``steps``, ``usage``, ``exit_reason``, ``reason`` and whatever ``update`` adds.

    The task's query is stored once, where the messages hold it (the instance prompt the model
    saw, ``messages[1]``): the header's ``task`` holds every field but ``query``, and
    ``query_sha256`` and ``query_chars`` instead (``task_header``).  When no message holds the query
    as written (a prompt template without ``{query}``), ``run_task`` puts it back in the header's
    task; so does a run that failed before the first message.

    A write costs what changed, not the whole file: the header and every message already in the file
    and not changed since (compared with the copy kept of it) stay where they are; the file is
    rewritten in place from the first message that changed (clipped, say) or was added, then the
    rest.  So a 200 MB query is written once, not once per step.  Each write is one ``pwrite``,
    padded with spaces when the new end is shorter than the old, and then truncated: a run killed
    between the two leaves valid JSON.  When a header field changes the file is rewritten whole
    (atomically: a temporary file renamed over it); so is the last write (``final``), indented,
    unless the file is over ``PRETTY_MAX_BYTES`` (it then stays compact: indenting it would mean
    writing it all once more).
    """

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {**header, "messages": [], "steps": [], "exit_reason": None, "reason": None}
        self._head_keys = list(header)
        self._head: list[Any] | None = None  # a copy of the header's values as written (None: write it whole)
        self._written: list[tuple[dict, int]] = []  # per message in the file: (a copy of it, its end offset)
        self._start = 0  # where the first message starts
        self._size = 0  # the file's length
        self.flush()

    def update(self, agent: Agent | None = None, *, final: bool = False, **fields: Any) -> None:
        """Record the agent's state and ``fields``; ``final`` writes the file indented (the last write)."""
        if agent is not None:
            self.data["messages"] = agent.messages
            self.data["steps"] = [dict(vars(s)) for s in agent.steps]  # shallow: asdict's deep copy cost ms per step
            self.data["usage"] = dict(agent.usage)
        self.data.update(fields)
        self.flush(pretty=final)

    def flush(self, *, pretty: bool = False) -> None:
        pretty = pretty and self._size <= PRETTY_MAX_BYTES  # a huge file stays compact: indenting rewrites it all
        if pretty or self._head is None or [self.data.get(k) for k in self._head_keys] != self._head:
            self._write_whole(pretty)
            return
        messages = self.data["messages"]
        first = next((i for i, (copy_, _) in enumerate(self._written)
                      if i >= len(messages) or messages[i] != copy_), len(self._written))  # fmt: skip
        at = self._written[first - 1][1] if first else self._start
        del self._written[first:]
        data = self._messages_from(first, at)
        end = at + len(data)
        fd = os.open(self.path, os.O_WRONLY)
        try:
            padded = data + b" " * max(0, self._size - end)  # no stale bytes after "}", even before the truncate
            done = 0
            while done < len(padded):
                done += os.pwrite(fd, padded[done:], at + done)
            os.ftruncate(fd, end)
        finally:
            os.close(fd)
        self._size = end

    # -- helpers ---------------------------------------------------------------------------------
    def _messages_from(self, first: int, at: int) -> bytes:
        """The file's bytes from message ``first`` (at offset ``at``) to the end; remembers each
        message written (a copy, to see later whether it changed) and where it ends."""
        chunks = []
        for i in range(first, len(self.data["messages"])):
            message = self.data["messages"][i]
            piece = (b", " if i else b"") + _encode(message)
            at += len(piece)
            chunks.append(piece)
            self._written.append((copy.deepcopy(message), at))  # a str is not copied: the compare is cheap
        rest = {k: v for k, v in self.data.items() if k not in self._head_keys and k != "messages"}
        inner = _encode(rest)[1:-1]
        chunks.append(b"]" + (b", " + inner if inner else b"") + b"}")
        return b"".join(chunks)

    def _write_whole(self, pretty: bool) -> None:
        if pretty:
            data = json_utf8(json.dumps(self.data, indent=1, ensure_ascii=False, default=str))
            self._head, self._written = None, []  # a later compact write writes it whole again
        else:
            head = {k: self.data[k] for k in self._head_keys}
            inner = _encode(head)[1:-1]
            prefix = b"{" + (inner + b", " if inner else b"") + b'"messages": ['
            self._head, self._start, self._written = copy.deepcopy(list(head.values())), len(prefix), []
            data = prefix + self._messages_from(0, len(prefix))
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
        self._size = len(data)


def _encode(value: Any) -> bytes:
    """Compact JSON as UTF-8 (the C encoder: about ten times faster than the indenting one)."""
    return json_utf8(json.dumps(value, ensure_ascii=False, default=str))


_SURROGATE = re.compile("[\\ud800-\\udfff]")


def json_utf8(text: str) -> bytes:
    """JSON ``text`` as UTF-8, whatever it holds: the trajectory writer's last defence.

    A lone surrogate (a name that is not UTF-8 that nobody made ``readable``) would make the
    encoding fail and the run lose its trajectory; it is written as its ``readable`` escape
    instead (``\\\\xff`` in the JSON text: it only occurs inside a string, where that reads back
    as ``\\xff``).
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: readable(m.group()).replace("\\", "\\\\"), text).encode("utf-8")


def task_header(task: Task, *, with_query: bool = False) -> dict[str, Any]:
    """The task as trajectory.json's header records it: every field, the query as ``query_sha256``
    and ``query_chars`` (its text is in the messages, see ``TrajectoryWriter``), or with
    ``with_query`` the query itself as well."""
    fields = task.to_dict()
    query = fields.pop("query")
    head = {"id": fields.pop("id"), "query_sha256": hashlib.sha256(query.encode("utf-8", "surrogatepass")).hexdigest(),
            "query_chars": len(query)}  # fmt: skip
    if with_query:
        head["query"] = query
    return {**head, **fields}


def _keep_query(writer: TrajectoryWriter, task: Task, *texts: str) -> None:
    """Put the query in the header when none of the prompts shows it as written."""
    if not any(task.query in t for t in texts):
        writer.update(task=task_header(task, with_query=True))


def task_inputs(task: Task) -> dict[str, str]:
    """name -> text of the inputs (for the prompt; input_dir files are listed, read when small)."""
    if task.input_files:
        return dict(task.input_files)
    files: dict[str, str] = {}
    if task.input_dir:
        root = Path(task.input_dir)
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.is_symlink():
                try:
                    files[readable(str(p.relative_to(root)))] = p.read_text(errors="replace")
                except OSError:
                    continue
    return files


def final_text(steps: list[Step], tool_names: set[str] | None = None) -> str | None:
    """The last reply that is text and not a tool call (see ``RunResult.final_text``)."""
    for step in reversed(steps):
        if step.observations or step.assistant.get("tool_calls"):
            continue
        text = THINK_RE.sub("", step.assistant.get("content") or "").strip()
        if not text:
            continue
        try:
            if parse_text_tool_calls(text, tool_names):
                continue
        except FormatError:  # a tool call that did not parse is still no answer
            continue
        return text
    return None


def _cut(steps: list[Step]) -> int:
    return sum(1 for s in steps if s.finish_reason == "length")


def stage_inputs(sb: Sandbox, task: Task, paths: Paths | None = None) -> str:
    """Put the task's inputs in ``task.input_path`` and make the output directory; returns the
    directory the inputs are in (``task.input_path`` as it exists in ``sb``: a ``/testbed/...``
    path is under ``sb.workdir``, see ``Paths.resolve``).  ``paths``: another layout's
    (``Paths.paper``): its input directory is used where the task names the default one."""
    paths = paths or Paths.of(sb)
    default_input = Paths.of(sb).input_dir
    input_dir = paths.resolve(task.input_path)
    if input_dir == default_input and paths.input_dir != default_input:
        input_dir = paths.input_dir
    sb.mkdir(paths.output_dir)
    if not task.input_files:
        sb.mkdir(input_dir)  # else writing the first file makes it (one request less)
    for name, text in task.input_files.items():
        sb.write_file(f"{input_dir}/{name}", text, parents=True)
    if task.input_dir:
        sb.upload(task.input_dir, input_dir)
    return input_dir


def model_profile(model: Any) -> str:
    """The prompt profile a model asks for (``profile``: "small" for the embedded local model, see
    ``local.py``); "standard" for one that says nothing."""
    return getattr(model, "profile", None) or "standard"


def run_task(
    task: Task,
    model: Any,
    *,
    output_dir: str | os.PathLike | None = None,
    mode: str = "sandbox",
    limits: AgentLimits | None = None,
    config: SandboxConfig | None = None,
    on_step: Callable[[Agent, Step], None] | None = None,
    sandbox: Sandbox | None = None,
) -> RunResult:
    """Solve ``task`` with ``model`` (an ``OpenAIModel``, ``FakeModel``, ...) and write the outputs.

    ``sandbox``: run in this open sandbox (for example one from a ``SandboxPool``) instead of a
    new one; it is left open, and the caller resets or closes it.

    How the run ended is ``RunResult.reason`` (and trajectory.json's ``reason`` / ``exit_reason``),
    a model error included.  The jail failing under the tools is raised (the ``SandboxError``),
    after trajectory.json recorded it as SANDBOX_ERROR; Ctrl-C too, recorded as INTERRUPTED.
    """
    out = Path(output_dir) if output_dir is not None else default_output_dir(task)
    out.mkdir(parents=True, exist_ok=True)
    template = PromptTemplate.load(task.prompt, mode=mode, profile=model_profile(model))
    limits = limits or AgentLimits(max_steps=task.max_steps, max_wall_s=task.timeout_s)
    writer = TrajectoryWriter(out / "trajectory.json", {
        "task": task_header(task), "model": getattr(model, "name", type(model).__name__), "mode": mode,
        "model_info": getattr(model, "info", {}),
        "prompt_template": template.source, "limits": asdict(limits),
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })  # fmt: skip
    start = time.monotonic()
    if mode == "vanilla":  # no sandbox: the prompt names the default paths
        system, instance = template.render(task.query, task_inputs(task), paths=DEFAULT_PATHS,
                                           input_dir=task.input_path)  # fmt: skip
        _keep_query(writer, task, system, instance)
        return _run_vanilla(task, model, system, instance, out, writer, start)
    if mode != "sandbox":
        raise ValueError(f"mode must be 'sandbox' or 'vanilla', got {mode!r}")
    try:
        if sandbox is not None:
            return _run_in(sandbox, task, model, template, limits, out, writer, start, on_step)
        config = config or SandboxConfig(rootfs=task.rootfs, network=task.network)
        with Sandbox(config) as sb:
            return _run_in(sb, task, model, template, limits, out, writer, start, on_step)
    except BaseException as e:
        if not writer.data["messages"]:  # it ended before the model's first turn: say how, keep the query
            outcome = (Outcome(ExitReason.SANDBOX_ERROR, e.message, e) if isinstance(e, SandboxError)
                       else Outcome(ExitReason.INTERRUPTED))  # fmt: skip
            writer.update(task=task_header(task, with_query=True), exit_reason=outcome.exit_reason,
                          reason=outcome.reason, duration_s=round(time.monotonic() - start, 3), final=True)  # fmt: skip
        raise


def _run_in(sb: Sandbox, task: Task, model: Any, template: PromptTemplate, limits: AgentLimits, out: Path,
            writer: TrajectoryWriter, start: float, on_step: Callable[[Agent, Step], None] | None) -> RunResult:  # fmt: skip
    answer, skipped, outcome, requests = None, [], Outcome(ExitReason.INTERRUPTED), []
    paths = Paths.of(sb)
    input_dir = stage_inputs(sb, task)
    system, instance = template.render(task.query, task_inputs(task), paths=paths, input_dir=input_dir,
                                       network=sb.config.network)  # fmt: skip
    _keep_query(writer, task, system, instance)
    tools = Tools(sb)

    def step_done(agent: Agent, step: Step) -> None:
        writer.update(agent)
        if on_step is not None:
            on_step(agent, step)

    agent = Agent(model, tools, limits, on_step=step_done, plain_answers=model_profile(model) == "small")
    try:
        outcome = agent.run(system, instance)
    finally:  # also on Ctrl-C: keep what there is
        writer.update(agent, exit_reason=outcome.exit_reason, reason=outcome.reason,
                      duration_s=round(time.monotonic() - start, 3))  # fmt: skip
        try:
            left_out = sb.download(paths.output_dir, out / "files", symlinks=False, max_bytes=MAX_EXPORT_BYTES)
            skipped = [readable(p) for p in left_out]  # recorded: names that are not UTF-8 made text
            answer = sb.read_file(paths.answer_file, max_bytes=MAX_ANSWER_BYTES).decode("utf-8", "replace")
        except SandboxFileError:
            pass
        finally:
            tools.close()
            if answer is not None:
                (out / "answer.txt").write_text(readable(answer), encoding="utf-8")
            extra = {}
            if sb.config.policy is not None:  # every request through the egress proxy, allowed or not
                requests = [r.as_dict() for r in sb.network_log()]
                extra["network_requests"] = requests
            writer.update(agent, skipped_outputs=skipped, answer=answer, final=True, **extra)
    if outcome.reason is ExitReason.SANDBOX_ERROR and outcome.error is not None:
        raise outcome.error
    last = next((m.get("content") for m in reversed(agent.messages) if m.get("role") == "assistant"
                 and m.get("content")), None)  # fmt: skip
    names = {t["function"]["name"] for t in tools.schemas()}
    return RunResult(task.id, outcome.exit_reason, outcome.reason is ExitReason.SUBMITTED, answer, len(agent.steps),
                     dict(agent.usage), round(time.monotonic() - start, 3), str(out), skipped,
                     model_s=round(sum(s.model_s for s in agent.steps), 4), last_message=last,
                     reason=outcome.reason, final_text=final_text(agent.steps, names),
                     finish_reason=agent.steps[-1].finish_reason if agent.steps else None,
                     truncated_replies=_cut(agent.steps), network_requests=requests)  # fmt: skip


def _run_vanilla(task: Task, model: Any, system: str, instance: str, out: Path, writer: TrajectoryWriter,
                 start: float) -> RunResult:  # fmt: skip
    """The paper's baseline: the same task in one chat call, no sandbox and no tools."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": instance}]
    t0 = time.monotonic()
    try:
        reply = model.complete(messages, [])
        outcome = Outcome(ExitReason.ANSWERED)
    except ModelError as e:
        reply, outcome = None, Outcome(ExitReason.MODEL_ERROR, e.message, e)
    answer = reply.content if reply is not None else None
    if reply is not None:
        messages.append(reply.to_message())
    if answer is not None:
        (out / "answer.txt").write_text(readable(answer), encoding="utf-8")
    usage = dict(reply.usage) if reply is not None else {}
    finish = reply.finish_reason if reply is not None else None
    text = THINK_RE.sub("", answer or "").strip() or None
    writer.update(messages=messages, exit_reason=outcome.exit_reason, reason=outcome.reason, answer=answer,
                  usage=usage, finish_reason=finish, duration_s=round(time.monotonic() - start, 3),
                  final=True)  # fmt: skip
    return RunResult(task.id, outcome.exit_reason, outcome.reason is ExitReason.ANSWERED, answer, 1, usage,
                     round(time.monotonic() - start, 3), str(out), model_s=round(time.monotonic() - t0, 4),
                     last_message=answer, reason=outcome.reason, final_text=text, finish_reason=finish,
                     truncated_replies=int(finish == "length"))  # fmt: skip
