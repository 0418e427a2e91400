"""verl (PyPI ``verl`` 0.9): sandboxlite as a verl agent loop, and as verl tools.

verl removed its built-in sandbox tools; agent loops subclass ``AgentLoopBase`` and register by
name.  Two ways in (``pip install 'sandboxlite[verl]'``; importing this module registers both):

- ``SandboxAgentLoop``, registered as ``"sandboxlite_agent"`` (a dataset row's ``agent_name``, or
  ``actor_rollout_ref.rollout.agent.default_agent_loop``).  Per trajectory: a sandbox from the
  worker process's pool, the task staged in it (``extra_info``: a task row, as
  ``RllmSandboxEnv`` reads them; the reference answer ``reward_model.ground_truth``; the query,
  else the last user message of ``raw_prompt``), the agent's own prompts (naming the sandbox's
  real paths), then turns: verl's server generates, verl's tool parser
  (``rollout.multi_turn.format``, default hermes) finds the calls, sandboxlite's tools run them
  (``execute_bash``, ``str_replace_editor``, ``submit``: the agent's exact semantics), their
  answers are merged as context tokens (``response_mask`` 0; the model's own tokens 1), until
  ``submit``, a reply without a call, ``multi_turn.max_assistant_turns`` or the response
  length.  The answer file is graded (``reward_fn``, default exact match against the reference)
  and becomes ``reward_score``; the sandbox goes back to the pool, reset.
- ``SandboxTool`` (a ``BaseTool``) for verl's own ``tool_agent`` loop, configured per tool name
  (``execute_bash``, ``str_replace_editor``, ``submit``).  verl creates and releases a tool
  instance around every call, so the sandbox belongs to the trajectory instead: the first call
  of a trajectory (verl passes its ``agent_data``) takes one from the pool, and it goes back when
  the trajectory's data is dropped, or at ``SandboxTool.release_trajectory(agent_data)``.

The pool: ``SandboxAgentLoop.configure(pool=..., config=..., size=...)`` once per worker process
(else one of ``size=8`` over the default config is made at the first trajectory).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from ..agent.paths import Paths
from ..agent.prompts import PromptTemplate
from ..agent.run import stage_inputs, task_inputs
from ..agent.task import Task
from ..agent.tools import ToolError, Tools, tool_schemas
from ..config import SandboxConfig
from ..errors import SandboxError
from ..jail.pool import SandboxPool
from .adapters.rllm import task_from_row
from .rewards import exact_match

__all__ = ["SandboxAgentLoop", "SandboxTool", "task_of"]

MAX_ANSWER_BYTES = 1 << 20


class _Pools:
    """The worker process's pool (made once, on first use; thread-safe)."""

    lock = threading.Lock()
    pool: SandboxPool | None = None
    config: SandboxConfig | None = None
    size: int = 8

    @classmethod
    def get(cls) -> SandboxPool:
        with cls.lock:
            if cls.pool is None:
                cls.pool = SandboxPool(cls.config, size=cls.size)
            return cls.pool


def task_of(kwargs: dict[str, Any]) -> Task:
    """The task of a verl dataset row (the keyword arguments an agent loop's ``run`` gets)."""
    extra = kwargs.get("extra_info") or {}
    if isinstance(extra, str):
        extra = json.loads(extra)
    row = dict(extra.get("task") or extra)
    truth = (kwargs.get("reward_model") or {}).get("ground_truth")
    if truth is not None and "answer" not in row and "ground_truth" not in row:
        row["ground_truth"] = truth
    if not any(isinstance(row.get(k), str) for k in ("query", "question", "problem", "problem_statement")):
        users = [m for m in (kwargs.get("raw_prompt") or []) if m.get("role") == "user"]
        if not users:
            raise ValueError("the row has no query: none in extra_info, and raw_prompt has no user message")
        content = users[-1]["content"]
        row["query"] = content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content if isinstance(p, dict))  # fmt: skip
    for k in ("index", "tools_kwargs", "interaction_kwargs", "need_tools_kwargs", "split"):
        row.pop(k, None)
    return task_from_row(row)


def _tool_message(call_id: str | None, text: str) -> dict:
    msg = {"role": "tool", "content": text}
    if call_id:
        msg["tool_call_id"] = call_id
    return msg


@register("sandboxlite_agent")
class SandboxAgentLoop(AgentLoopBase):
    """A trajectory in a sandbox (see the module's docstring).  ``reward_fn(task, answer, info)``:
    the episode's reward (class attribute; default exact match)."""

    reward_fn: ClassVar[Callable[[Task, str | None, dict], float]] = staticmethod(exact_match)
    bash_timeout: ClassVar[float] = 120.0
    max_output_chars: ClassVar[int] = 20000

    @classmethod
    def configure(cls, *, pool: SandboxPool | None = None, config: SandboxConfig | None = None,
                  size: int | None = None) -> None:  # fmt: skip
        """The worker's pool: ``pool`` itself, or one made at first use from ``config`` and ``size``."""
        with _Pools.lock:
            if pool is not None:
                _Pools.pool = pool
            if config is not None:
                _Pools.config = config
            if size is not None:
                _Pools.size = size

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length
        multi_turn = self.rollout_config.get("multi_turn", None) or {}
        self.max_turns = multi_turn.get("max_assistant_turns", None) or 50
        self.tool_parser = ToolParser.get_tool_parser(multi_turn.get("format", None) or "hermes", self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        loop = asyncio.get_running_loop()
        task = task_of(kwargs)
        pool = _Pools.get()
        sb = await loop.run_in_executor(None, pool.acquire)
        metrics = {"generate_sequences": 0.0, "tool_calls": 0.0, "compute_score": 0.0}
        try:
            paths = Paths.of(sb)
            input_dir = await loop.run_in_executor(None, stage_inputs, sb, task)
            system, instance = PromptTemplate.load(task.prompt).render(
                task.query, task_inputs(task), paths=paths, input_dir=input_dir)  # fmt: skip
            tools = Tools(sb, bash_timeout=self.bash_timeout, max_output_chars=self.max_output_chars)
            schemas = tools.schemas()
            messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": instance}]
            ids = await self.ct_build_initial_tokens(messages, tools=schemas)
            mask: list[int] = []
            logprobs: list[float] | None = None
            turns, submitted, tool_calls = 0, False, 0
            stop = list(set((sampling_params.get("stop_token_ids") or []) + self.tool_parser.stop_token_ids))
            params = {**sampling_params, **({"stop_token_ids": stop} if stop else {})}
            while turns < self.max_turns and len(mask) < self.response_length:
                t = time.perf_counter()
                out = await self.server_manager.generate(request_id=uuid.uuid4().hex, prompt_ids=ids,
                                                         sampling_params=params)  # fmt: skip
                metrics["generate_sequences"] += time.perf_counter() - t
                turns += 1
                if logprobs is None and out.log_probs:
                    logprobs = [0.0] * len(mask)
                merged, mask, logprobs = await self.ct_merge_assistant_token(
                    ids, out.token_ids, mask, logprobs, assistant_logprobs=out.log_probs or None)  # fmt: skip
                ids = merged.token_ids
                content, calls = await self.tool_parser.extract_tool_calls(out.token_ids)
                calls_json = [{"id": f"call_{turns}_{i}", "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]  # fmt: skip
                messages.append({"role": "assistant", "content": content, **({"tool_calls": calls_json} if calls else {})})
                if not calls or len(mask) >= self.response_length:
                    break
                previous = list(messages)
                t = time.perf_counter()
                for c, cj in zip(calls, calls_json):
                    tool_calls += 1
                    try:
                        result = await tools.acall(c.name, c.arguments)  # (the loop drives it: no thread)
                        text, submitted = result.output, submitted or result.submitted
                    except ToolError as e:
                        text = f"Error: {e}"
                    messages.append(_tool_message(cj["id"], text))
                metrics["tool_calls"] += time.perf_counter() - t
                merged, mask, logprobs = await self.ct_merge_context_msg(previous, messages, ids, mask, logprobs,
                                                                         tools=schemas)  # fmt: skip
                ids = merged.token_ids
                if submitted:
                    break
            t = time.perf_counter()
            try:
                raw = await loop.run_in_executor(None, lambda: sb.read_file(paths.answer_file, max_bytes=MAX_ANSWER_BYTES))
                answer: str | None = raw.decode("utf-8", "replace")
            except SandboxError:
                answer = None
            info = {"submitted": submitted, "turns": turns, "tool_calls": tool_calls, "messages": messages, "sandbox": sb}
            reward = float(type(self).reward_fn(task, answer, info))
            metrics["compute_score"] = time.perf_counter() - t
        finally:
            await loop.run_in_executor(None, pool.release, sb)
        n = len(mask)
        prompt_ids, response_ids = ids[: len(ids) - n], ids[len(ids) - n:]
        return AgentLoopOutput(
            prompt_ids=prompt_ids[-self.prompt_length:], response_ids=response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=logprobs[: self.response_length] if logprobs else None,
            reward_score=reward, num_turns=len(messages) - 1, metrics=AgentLoopMetrics(**metrics),
            extra_fields={"task_id": task.id, "submitted": submitted, "answer": answer, "tool_calls": tool_calls,
                          "turn_scores": [], "tool_rewards": []},
        )  # fmt: skip


class SandboxTool(BaseTool):
    """One of the agent's tools (its ``config``'s ``name``, or the schema's) for verl's ``tool_agent`` loop.

    The sandbox is the trajectory's: taken at its first call, kept across verl's per-call
    create/release, given back (reset) when verl drops the trajectory's ``agent_data`` or at
    ``release_trajectory``.  ``calc_reward`` is 0.0: grade the answer file in a reward function
    (``answer_of(agent_data)``)."""

    _sandboxes: ClassVar[dict[int, tuple[Any, Tools]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        name = (config or {}).get("name") or (tool_schema.function.name if tool_schema else None)
        if name not in ("execute_bash", "str_replace_editor", "submit"):
            raise ValueError(f"SandboxTool is one of execute_bash, str_replace_editor, submit; got {name!r}")
        schema = tool_schema or OpenAIFunctionToolSchema.model_validate(
            next(s for s in tool_schemas() if s["function"]["name"] == name))
        self.tool_name = name
        super().__init__(config or {}, schema)

    @classmethod
    def _tools_for(cls, agent_data: Any) -> Tools:
        key = id(agent_data)
        with cls._lock:
            held = cls._sandboxes.get(key)
        if held is not None:
            return held[1]
        sb = _Pools.get().acquire()
        tools = Tools(sb)
        sb.mkdir(tools.paths.output_dir)  # where the tools' descriptions say the answer goes
        with cls._lock:
            cls._sandboxes[key] = (sb, tools)
        try:
            weakref.finalize(agent_data, cls._give_back, key)
        except TypeError:  # not weak-referenceable: release_trajectory() must be called
            pass
        return tools

    @classmethod
    def _give_back(cls, key: int) -> None:
        with cls._lock:
            held = cls._sandboxes.pop(key, None)
        if held is not None:
            held[1].close()
            _Pools.get().release(held[0])

    @classmethod
    def release_trajectory(cls, agent_data: Any) -> None:
        """Give the trajectory's sandbox back now (it is reset in the pool)."""
        cls._give_back(id(agent_data))

    @classmethod
    def answer_of(cls, agent_data: Any) -> str | None:
        """The trajectory's answer file (None when absent or when the trajectory has no sandbox)."""
        with cls._lock:
            held = cls._sandboxes.get(id(agent_data))
        if held is None:
            return None
        try:
            return held[0].read_file(held[1].paths.answer_file, max_bytes=MAX_ANSWER_BYTES).decode("utf-8", "replace")
        except SandboxError:
            return None

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            return ToolResponse(text="Error: SandboxTool needs verl's agent_data (verl 0.9's tool_agent passes it)"), 0.0, {}
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._sandboxes.get(id(agent_data))
        # the trajectory's first call acquires its sandbox (it may wait for one) in a thread
        tools = held[1] if held is not None else await loop.run_in_executor(None, self._tools_for, agent_data)
        try:
            result = await tools.acall(self.tool_name, parameters)
        except ToolError as e:
            return ToolResponse(text=f"Error: {e}"), 0.0, {}
        return ToolResponse(text=result.output), 0.0, {"submitted": result.submitted, **result.data}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0
