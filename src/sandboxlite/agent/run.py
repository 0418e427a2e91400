"""``run_task``: one task, one sandbox, one model, from start to the output directory.

The output directory gets, as the run goes (so an interrupted run loses nothing):
``trajectory.json`` (rewritten after every step), and at the end ``answer.txt`` and
``files/`` (what the model left in the sandbox's output directory, ``<workdir>/output``:
regular files only, never following a symlink, size-capped).  Every sandbox path comes from the
sandbox (``Paths.of(sb)``), never from a constant.

What is written is UTF-8 text: names from the sandbox that are not UTF-8 are recorded
``readable`` (their bad bytes as ``\\xff``; in files/ they keep their raw bytes).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import SandboxConfig
from ..errors import FormatError, ModelError, SandboxFileError
from ..sandbox import Sandbox
from .loop import Agent, AgentLimits, Step
from .model import THINK_RE, parse_text_tool_calls
from .outcome import ExitReason, Outcome
from .paths import DEFAULT_PATHS, Paths
from .prompts import PromptTemplate
from .task import Task
from .tools import Tools, readable

MAX_EXPORT_BYTES = 256 << 20  # files/ copied out of the output directory
MAX_ANSWER_BYTES = 1 << 20


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

    @property
    def ok(self) -> bool:
        return self.submitted


def default_output_dir(task: Task) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("output") / f"{stamp}-{task.id}"


class TrajectoryWriter:
    """Keeps ``trajectory.json`` current: rewritten atomically after every step."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.data: dict[str, Any] = {**header, "steps": [], "messages": [], "exit_reason": None, "reason": None}
        self.flush()

    def update(self, agent: Agent | None = None, *, final: bool = False, **fields: Any) -> None:
        """Record the agent's state and ``fields``; ``final`` writes the file indented (the last write).
        Writes during the run are compact: the C encoder is about ten times faster than the indenting
        one, which matters when the file is rewritten after every step of a long run."""
        if agent is not None:
            self.data["messages"] = agent.messages
            self.data["steps"] = [dict(vars(s)) for s in agent.steps]  # shallow: asdict's deep copy cost ms per step
            self.data["usage"] = dict(agent.usage)
        self.data.update(fields)
        self.flush(pretty=final)

    def flush(self, *, pretty: bool = False) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        text = json.dumps(self.data, indent=1 if pretty else None, ensure_ascii=False, default=str)
        tmp.write_bytes(json_utf8(text))
        os.replace(tmp, self.path)


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
    template = PromptTemplate.load(task.prompt, mode=mode)
    limits = limits or AgentLimits(max_steps=task.max_steps, max_wall_s=task.timeout_s)
    writer = TrajectoryWriter(out / "trajectory.json", {
        "task": task.to_dict(), "model": getattr(model, "name", type(model).__name__), "mode": mode,
        "model_info": getattr(model, "info", {}),
        "prompt_template": template.source, "limits": asdict(limits),
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    })  # fmt: skip
    start = time.monotonic()
    if mode == "vanilla":  # no sandbox: the prompt names the default paths
        system, instance = template.render(task.query, task_inputs(task), paths=DEFAULT_PATHS,
                                           input_dir=task.input_path)  # fmt: skip
        return _run_vanilla(task, model, system, instance, out, writer, start)
    if mode != "sandbox":
        raise ValueError(f"mode must be 'sandbox' or 'vanilla', got {mode!r}")
    if sandbox is not None:
        return _run_in(sandbox, task, model, template, limits, out, writer, start, on_step)
    config = config or SandboxConfig(rootfs=task.rootfs, network=task.network)
    with Sandbox(config) as sb:
        return _run_in(sb, task, model, template, limits, out, writer, start, on_step)


def _run_in(sb: Sandbox, task: Task, model: Any, template: PromptTemplate, limits: AgentLimits, out: Path,
            writer: TrajectoryWriter, start: float, on_step: Callable[[Agent, Step], None] | None) -> RunResult:  # fmt: skip
    answer, skipped, outcome = None, [], Outcome(ExitReason.INTERRUPTED)
    paths = Paths.of(sb)
    input_dir = stage_inputs(sb, task)
    system, instance = template.render(task.query, task_inputs(task), paths=paths, input_dir=input_dir)
    tools = Tools(sb)

    def step_done(agent: Agent, step: Step) -> None:
        writer.update(agent)
        if on_step is not None:
            on_step(agent, step)

    agent = Agent(model, tools, limits, on_step=step_done)
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
            writer.update(agent, skipped_outputs=skipped, answer=answer, final=True)
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
                     truncated_replies=_cut(agent.steps))  # fmt: skip


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
