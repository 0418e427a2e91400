"""TRL: ``SandboxEnvironment``, an ``environment_factory`` for TRL's ``GRPOTrainer`` (PyPI ``trl`` 1.x).

::

    from trl import GRPOConfig, GRPOTrainer
    from sandboxlite.rl.trl import SandboxEnvironment

    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": "Sum the numbers in numbers.txt."}],
         "input_files": {"numbers.txt": "17\\n25\\n"}, "ground_truth": "42", "scorer": "numeric"},
    ])
    trainer = GRPOTrainer(model=model, args=GRPOConfig(...), train_dataset=dataset,
                          environment_factory=SandboxEnvironment)        # or SandboxEnvironment.factory(...)
    trainer.train()

TRL makes one instance per rollout (and reuses them: "construct once, reset often") and, for each
rollout:

- calls ``reset(**row)`` with the dataset row: the instance takes a sandbox from the process's pool,
  writes the row's input files into it, and returns the task's instructions, which TRL appends to
  the last user message.  They name the sandbox's real paths (``Paths.of(sandbox)``: its workdir,
  input directory, output directory and answer file; with ``isolation="landlock"`` the workdir is
  a directory of the sandbox's own, not ``/testbed``).
- exposes every other public method of the class as a tool, its JSON schema built from the type
  hints and the Google-style docstring: ``execute_bash``, ``str_replace_editor`` and ``submit``,
  which run the agent's own tools (``sandboxlite.agent.tools.Tools``: the same persistent shell,
  editor, outputs and error messages as ``sandboxlite run``).  A tool that fails raises; TRL gives
  the message back to the model (``{"error": "..."}``) and counts a tool failure.  Calls after
  ``submit``, and calls once the sandbox was given back, raise too (the call is not run).
- calls ``get_reward()`` once the rollout is complete: the text of the sandbox's answer file is
  scored with the eval scorers (``sandboxlite.eval``), and the sandbox goes back to the pool (reset
  in place there).  No answer file scores 0.

Rows (TRL passes every column of the dataset to ``reset``; columns not listed here are ignored):

- ``prompt``: the chat messages TRL shows the model (a list of ``{"role", "content"}``).  Without a
  ``prompt`` column TRL starts from an empty user message, and ``query`` is put in front of the
  instructions instead.  (TRL reads the column itself: give it in every row or in none; in a
  dataset that has the column, a row whose ``prompt`` is ``None`` makes TRL fail when it appends
  the instructions to that prompt.)
- ``query``: the task's text (needed when there is no ``prompt``; else the last user message of
  ``prompt`` is the question the scorers see).
- ``input_files``: ``{name: text}`` (a JSON object as text works too, as in the paper's rows; a
  ``None`` value is a file this row does not have: ``datasets`` fills the keys of other rows in);
  ``input_path``: where they go (a task path, ``/testbed/...`` meaning under the workdir; default
  the sandbox's input directory).
- the reference: ``ground_truth`` or ``answer`` (a string, a number, or a list of accepted answers
  for the domains that take several), or ``reference``: a domain's own reference dict (as
  ``EvalItem.reference``; needed for ``instruct``), as a dict or as JSON text.
- how to score: ``scorer``, one of ``exact`` (the default), ``numeric``, ``contains``, ``choice``,
  ``math`` (the custom-task scorings of ``sandboxlite.eval.custom``; ``tolerance`` and ``letters``
  are read for ``numeric`` and ``choice``), or ``domain``: an eval domain (``math``, ``physics``,
  ``chem``, ``biomed``, ``long_context``, ``qed``, ``dream``, ``instruct`` or a registered one),
  scored by that domain's scorer.
- a sandboxlite task's fields work as a row too (``Task.to_dict()``): its ``metadata`` supplies
  ``reference`` with ``domain`` (as ``domain_tasks`` makes them), or ``answer`` / ``ground_truth``.
  ``task_rows(tasks)`` turns ``Task`` objects into rows for ``datasets.Dataset.from_list`` (a chat
  ``prompt``, and the nested fields as JSON text so that all rows fit one schema).

A row that cannot be used raises ``ConfigError`` naming the field, before a sandbox is taken.

Sandboxes: without ``pool=``, each process keeps one shared pool per ``SandboxConfig`` (made at
the first ``reset`` in that process, under a lock; a forked child makes its own), and it grows to
as many sandboxes as there are live instances that use it, so a rollout never waits for another
one's sandbox (TRL resets a whole generation batch before it generates).  With ``pool=`` the
instances share that pool and ``reset`` waits up to ``acquire_timeout`` for a free sandbox.  A
sandbox is held from ``reset`` to ``get_reward``; if TRL never calls ``get_reward`` (an exception
in the middle of a batch), the next ``reset`` of the same instance, ``close()``, or the instance
being garbage-collected gives it back, and the pools are closed when the process exits.

Options go to the constructor; ``SandboxEnvironment.factory(**options)`` is the zero-argument
callable TRL wants (``config``, ``pool``, ``bash_timeout``, ``max_output_chars``, ``layout``,
``template``, ``require_submit``, ``acquire_timeout``, ``judge``).  ``check_row(row)`` checks a
row as ``reset`` would, without a sandbox (to validate a dataset before training).

What TRL does that sandboxlite's own agent loop does differently: a failed tool call reaches the
model as ``{'error': '<the agent's message>'}`` rather than ``Error: <message>``; arguments the
method does not take (or a missing required one) fail in Python before the tool is reached, so the
model gets Python's ``TypeError`` text; TRL's ``max_tool_calling_iterations`` and
``max_completion_length`` bound a rollout (there is no ``max_steps``); tool calls are run in
order, one rollout at a time.
"""

from __future__ import annotations

import atexit
import functools
import json
import math
import os
import threading
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..agent.paths import DEFAULT_WORKDIR, LAYOUTS, Paths
from ..agent.prompts import PromptTemplate
from ..agent.run import MAX_ANSWER_BYTES, stage_inputs, task_inputs
from ..agent.task import Task
from ..agent.tools import Tools
from ..config import SandboxConfig
from ..errors import ConfigError, SandboxClosed, SandboxError, ToolError
from ..eval.custom import SCORINGS
from ..jail.pool import SandboxPool
from ..jail.sandbox import Sandbox

__all__ = ["SandboxEnvironment", "SCORERS", "check_row", "close_pools", "task_rows"]

SCORERS = SCORINGS  # the custom-task scorings: exact, numeric, contains, choice, math
_QUERY_KEYS = ("query", "problem_statement", "question", "problem")  # sandboxlite's, the paper's, rllm's
_ANSWER_KEYS = ("ground_truth", "answer")


# -- the row -------------------------------------------------------------------------------------
@dataclass
class _Row:
    """What ``reset`` read from a dataset row (checked)."""

    id: str
    query: str  # the question (for the instructions when there is no prompt, and for the scorers)
    has_prompt: bool  # the row has chat messages: TRL shows them, the query is not repeated
    input_files: dict[str, str] = field(default_factory=dict)
    input_dir: str | None = None  # a host directory copied in instead
    input_path: str | None = None  # a task path (/testbed/... = under the workdir)
    scorer: str | None = None  # a custom scoring (SCORERS)
    domain: str | None = None  # an eval domain
    reference: dict[str, Any] | None = None  # what the domain's scorer needs
    ground_truth: Any = None
    tolerance: float = 1e-6
    letters: str | None = None


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, (str, list, tuple)) and not (value.strip() if isinstance(value, str)
                                                                            else value))  # fmt: skip


def _json_field(name: str, value: Any, what: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else None
        except json.JSONDecodeError as e:
            raise ConfigError(name, f"is text but not JSON {what} ({e.msg} at position {e.pos})") from None
    return value


def _prompt_question(prompt: Any) -> str:
    """The question in a TRL chat prompt: the text of its last user message."""
    if not isinstance(prompt, (list, tuple)) or not all(isinstance(m, Mapping) for m in prompt):
        kind = "text" if isinstance(prompt, str) else type(prompt).__name__
        raise ConfigError("prompt", f"expected a list of chat messages ({{'role': ..., 'content': ...}}), got {kind}: "
                          "TRL calls tools only for conversational prompts",
                          hint="put plain text in a 'query' column and leave 'prompt' out")  # fmt: skip
    for m in reversed(prompt):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content blocks
                return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            break
    raise ConfigError("prompt", "has no user message with text content (TRL appends the instructions to it)")


def _parse_row(row: Mapping[str, Any]) -> _Row:
    metadata = row.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ConfigError("metadata", f"expected an object, got {type(metadata).__name__}")
    meta = dict(metadata or {})
    query, has_prompt = _row_query(row)
    input_files = _row_input_files(row)
    input_dir, input_path = _row_input_place(row, input_files)
    scorer, domain = _row_scoring(row, meta)
    ground_truth, reference = _row_reference(row, meta, domain)
    _, tolerance = _pick(row, meta, "tolerance")
    if tolerance is None:
        tolerance = 1e-6
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not tolerance >= 0:
        raise ConfigError("tolerance", f"expected a non-negative number, got {tolerance!r}")
    _, letters = _pick(row, meta, "letters")
    if letters is not None and not (isinstance(letters, str) and letters.isalpha()):
        raise ConfigError("letters", f"expected the option letters as text (e.g. 'ABCD'), got {letters!r}")
    if domain is not None and reference is None:
        reference = _domain_reference(domain, ground_truth, query, letters, row, meta)
    _, raw_id = _pick(row, meta, "id", "task_id", "uid")
    return _Row(id=str(raw_id) if raw_id is not None else "trl", query=query, has_prompt=has_prompt,
                input_files=input_files, input_dir=input_dir, input_path=input_path,
                scorer=scorer if domain is None else None,
                domain=domain, reference=dict(reference) if reference is not None else None,
                ground_truth=ground_truth, tolerance=float(tolerance), letters=letters)  # fmt: skip


def _pick(row: Mapping[str, Any], meta: Mapping[str, Any], *keys: str) -> tuple[str | None, Any]:
    """The first of ``keys`` the row (else its metadata) has, and its value."""
    for source in (row, meta):
        for k in keys:
            if not _missing(source.get(k)):
                return k, source[k]
    return None, None


def _row_query(row: Mapping[str, Any]) -> tuple[str, bool]:
    """The row's question, and whether it has a chat ``prompt`` (whose last user message is the
    question when no query key is given)."""
    prompt = row.get("prompt")
    has_prompt = prompt is not None
    query_key = next((k for k in _QUERY_KEYS if not _missing(row.get(k))), "query")
    query = row.get(query_key)
    if query is not None and not isinstance(query, str):
        raise ConfigError(query_key, f"expected a string, got {type(query).__name__}")
    if has_prompt:
        question = _prompt_question(prompt)
        query = query if not _missing(query) else question
    elif _missing(query):
        raise ConfigError("query", "the row has neither a 'query' (the task's text) nor a 'prompt' (chat messages)")
    assert isinstance(query, str)
    return query, has_prompt


def _row_input_files(row: Mapping[str, Any]) -> dict[str, str]:
    """The row's ``input_files`` (an object, or JSON text of one), checked: relative names, text."""
    files = _json_field("input_files", row.get("input_files"), "(an object mapping file names to text)")
    if files is None:
        files = {}
    if not isinstance(files, Mapping):
        raise ConfigError("input_files", f"expected an object mapping file names to text, got {type(files).__name__}")
    input_files: dict[str, str] = {}
    for name, text in files.items():
        if text is None:  # a key another row has (datasets makes one struct of all rows' keys)
            continue
        where = f"input_files[{name!r}]"
        if not isinstance(name, str) or not name or name.startswith("/") or "\0" in name \
                or ".." in name.split("/"):  # fmt: skip
            raise ConfigError(where, "expected a relative file name without '..'")
        if not isinstance(text, str):
            raise ConfigError(where, f"expected text (a string), got {type(text).__name__}")
        input_files[name] = text
    return input_files


def _row_input_place(row: Mapping[str, Any], input_files: dict[str, str]) -> tuple[str | None, str | None]:
    """The row's ``input_dir`` (a host directory, instead of ``input_files``) and ``input_path`` (where
    the inputs go in the sandbox), checked."""
    input_dir = row.get("input_dir")  # a task's host directory (Task.input_dir)
    if input_dir is not None:
        if not isinstance(input_dir, str) or not os.path.isdir(input_dir):
            raise ConfigError("input_dir", f"expected a host directory, got {input_dir!r:.80}")
        if input_files:
            raise ConfigError("input_dir", "give either input_files or input_dir, not both")
    input_path = row.get("input_path")
    if input_path is not None:
        parts = [p for p in str(input_path).split("/") if p]
        if not isinstance(input_path, str) or not input_path.startswith((DEFAULT_WORKDIR + "/", "/tmp/")) \
                or ".." in parts or "\0" in input_path or len(parts) < 2:  # fmt: skip
            raise ConfigError("input_path", f"expected a sandbox directory under {DEFAULT_WORKDIR} or /tmp "
                              f"(not the directory itself), got {input_path!r:.60}")  # fmt: skip
    return input_dir, input_path


def _row_scoring(row: Mapping[str, Any], meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """How the row is scored: (a custom ``scorer``, an eval ``domain``), at most one of them."""
    _, scorer = _pick(row, meta, "scorer")
    domain = row.get("domain")
    if _missing(domain) and meta.get("reference") is not None:  # a task of domain_tasks: its metadata
        domain = meta.get("domain")  # (alone, a task's metadata domain is only a label, e.g. "demo")
    domain = None if _missing(domain) else domain
    if scorer is not None and (not isinstance(scorer, str) or scorer not in SCORERS):
        raise ConfigError("scorer", f"expected one of {', '.join(SCORERS)}, got {scorer!r}",
                          hint="an eval domain's scorer is chosen with 'domain' instead")  # fmt: skip
    if domain is not None:
        from ..eval.domains import domains

        known = domains()
        if not isinstance(domain, str) or domain not in known:
            raise ConfigError("domain", f"unknown eval domain {domain!r} (known: {', '.join(known)})",
                              hint="a custom scoring (exact, numeric, ...) is chosen with 'scorer'")  # fmt: skip
    if scorer is not None and domain is not None:
        raise ConfigError("scorer", f"give either scorer ({scorer!r}) or domain ({domain!r}), not both")
    return scorer, domain


def _row_reference(row: Mapping[str, Any], meta: Mapping[str, Any], domain: str | None) -> tuple[Any, Any]:
    """What the answer is scored against: (the ground truth, a domain's reference object), at least
    one of them, and the ground truth when there is no domain to read the reference."""
    answer_key, ground_truth = _pick(row, meta, *_ANSWER_KEYS)
    _, reference = _pick(row, meta, "reference")
    reference = _json_field("reference", reference, "(a domain's reference object)")
    if reference is not None and not isinstance(reference, Mapping):
        raise ConfigError("reference", f"expected an object (a domain's reference), got {type(reference).__name__}")
    if ground_truth is not None and not isinstance(ground_truth, (str, int, float, list, tuple)) \
            or isinstance(ground_truth, bool):  # fmt: skip
        raise ConfigError(answer_key or "ground_truth", "expected a string, a number or a list of them, "
                          f"got {type(ground_truth).__name__}")  # fmt: skip
    if ground_truth is None and reference is None:
        raise ConfigError("ground_truth", "the row has no reference answer to score against: give 'ground_truth' "
                          "(or 'answer'), or 'domain' with a 'reference' object")  # fmt: skip
    if domain is None and ground_truth is None:
        raise ConfigError("ground_truth", "a 'reference' object needs a 'domain' (whose scorer reads it); "
                          "the custom scorers compare with 'ground_truth' (or 'answer')")  # fmt: skip
    return ground_truth, reference


def _answers(ground_truth: Any) -> list[str]:
    return [str(a) for a in ground_truth] if isinstance(ground_truth, (list, tuple)) else [str(ground_truth)]


def _domain_reference(domain: str, ground_truth: Any, query: str, letters: str | None, row: Mapping,
                      meta: Mapping) -> dict[str, Any]:  # fmt: skip
    """A built-in domain's reference made from a plain ground truth (as the domain's loader makes it)."""
    one = str(ground_truth[0]) if isinstance(ground_truth, (list, tuple)) and ground_truth else str(ground_truth)
    if domain == "math":
        return {"answer": one}
    if domain in ("chem", "biomed", "dream"):
        return {"label": one.strip().upper(), "letters": (letters or "ABCD").upper(), "question": query}
    if domain == "long_context":
        return {"answer": one, "question": query}
    if domain == "qed":
        return {"answers": _answers(ground_truth), "question": query}
    if domain == "physics":
        get = lambda k: row.get(k) if row.get(k) is not None else meta.get(k)  # noqa: E731
        return {"answers": _answers(ground_truth), "answer_type": get("answer_type"), "unit": get("unit"),
                "question": query}  # fmt: skip
    raise ConfigError("reference", f"domain {domain!r} scores against its own reference object, which a plain "
                      "ground truth cannot make: give the row a 'reference' (as its EvalItem.reference)")  # fmt: skip


def _score(row: _Row, answer: str, judge: Any) -> Any:
    """The eval scorer's ``Score`` for ``answer`` (the text of the answer file)."""
    from ..eval.items import EvalItem

    if row.domain is not None:
        from ..eval.domains import get_domain

        d = get_domain(row.domain)
        assert row.reference is not None
        return d.score(EvalItem(_safe_id(row.id), d.name, row.query, row.reference), answer, judge)
    from ..eval.custom import score_row

    ref = {"answer": row.ground_truth, "scoring": row.scorer or "exact", "tolerance": row.tolerance,
           "letters": row.letters}  # fmt: skip
    if isinstance(row.ground_truth, (list, tuple)):  # several accepted answers: the best
        return max((score_row(answer, {**ref, "answer": str(a)}) for a in row.ground_truth),
                   key=lambda s: s.value, default=score_row(answer, {**ref, "answer": ""}))  # fmt: skip
    return score_row(answer, ref)


def _safe_id(text: str) -> str:
    from ..eval.domains import safe_id

    return safe_id(text)


def check_row(row: Mapping[str, Any]) -> None:
    """Check a dataset row as ``reset`` would (``ConfigError`` naming the field), without a sandbox:
    to validate a dataset before training."""
    if not isinstance(row, Mapping):
        raise ConfigError("row", f"expected a mapping of column -> value, got {type(row).__name__}")
    _parse_row(row)


def task_rows(tasks: Any) -> list[dict[str, Any]]:
    """Dataset rows for TRL from sandboxlite ``Task`` objects (e.g. ``domain_tasks("math", data_dir)``)
    or task.json dicts, all with the same columns (``None`` where a row has nothing):
    ``prompt`` (the query as one user message), ``id``, ``input_files`` and ``reference`` as JSON
    text (so that rows with different files or domains fit one ``datasets`` schema),
    ``input_path``, and ``domain`` + ``reference`` or ``ground_truth`` + ``scorer`` (from the
    task's ``metadata``: ``domain`` and ``reference`` as ``domain_tasks`` makes them, else
    ``answer`` or ``ground_truth``, scored ``exact`` unless the metadata names a ``scorer``).
    A ground truth that is a list in some rows and text in others does not fit one schema."""
    from .env import as_task

    rows = []
    for t in tasks:
        task = as_task(t)
        if task is None:
            raise ConfigError("tasks", "expected Task objects or task dicts, got None")
        meta = dict(task.metadata or {})
        # every row has every column (Dataset.from_list takes the columns from the first row)
        row: dict[str, Any] = {"id": task.id, "prompt": [{"role": "user", "content": task.query}],
                               "input_files": json.dumps(task.input_files, ensure_ascii=False),
                               "input_path": task.input_path, "domain": None, "reference": None,
                               "ground_truth": None, "scorer": None}  # fmt: skip
        if task.input_dir:
            raise ConfigError(f"{task.id}.input_dir", "rows carry their files as text: give the task input_files")
        if meta.get("domain") is not None and meta.get("reference") is not None:
            row["domain"] = meta["domain"]
            row["reference"] = json.dumps(meta["reference"], ensure_ascii=False)
        elif any(meta.get(k) is not None for k in _ANSWER_KEYS):
            answer = next(meta[k] for k in ("answer", "ground_truth") if meta.get(k) is not None)
            row["ground_truth"] = [str(a) for a in answer] if isinstance(answer, (list, tuple)) else str(answer)
            row["scorer"] = meta.get("scorer") or "exact"
        else:
            raise ConfigError(f"{task.id}.metadata", "the task has no reference to score against: metadata needs "
                              "'domain' and 'reference' (as domain_tasks makes them), or 'answer'")  # fmt: skip
        rows.append(row)
    return rows


# -- the process's pools -----------------------------------------------------------------------------
class _SharedPools:
    """The sandboxes of one ``SandboxConfig`` in this process: pools added as more live instances
    use it, so there is always one free for an instance that holds none."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.pools: list[SandboxPool] = []
        self.users: weakref.WeakSet = weakref.WeakSet()  # instances that took a sandbox from here
        self.lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return sum(p.size for p in self.pools)

    def acquire(self, user: Any, timeout: float | None) -> tuple[SandboxPool, Sandbox]:
        with self.lock:
            self.users.add(user)
            short = len(self.users) - self.capacity
            if short > 0:
                self.pools.append(SandboxPool(self.config, size=short))
            pools = list(self.pools)
        for pool in pools:
            try:
                return pool, pool.acquire(timeout=0)
            except TimeoutError:
                continue
        # every sandbox is held (by instances used from other threads): wait for one
        return pools[-1], pools[-1].acquire(timeout)

    def close(self) -> None:
        with self.lock:
            pools, self.pools = self.pools, []
        for p in pools:
            p.close()


_POOLS: list[_SharedPools] = []
_POOLS_LOCK = threading.Lock()
_POOLS_PID = os.getpid()


def _shared(config: SandboxConfig) -> _SharedPools:
    """This process's pools for ``config`` (made once, under a lock; a forked child makes its own)."""
    global _POOLS_PID
    with _POOLS_LOCK:
        if _POOLS_PID != os.getpid():  # forked: the parent's sandboxes are the parent's (not closed here)
            _POOLS.clear()
            _POOLS_PID = os.getpid()
        for shared in _POOLS:
            if shared.config == config:
                return shared
        shared = _SharedPools(config)
        _POOLS.append(shared)
        return shared


def close_pools() -> None:
    """Close this process's shared pools (they are made again at the next ``reset``).  Sandboxes
    still held by instances are closed when those give them back.  Runs at exit."""
    with _POOLS_LOCK:
        if _POOLS_PID != os.getpid():
            return
        shared = list(_POOLS)
        _POOLS.clear()
    for s in shared:
        s.close()


atexit.register(close_pools)


# -- the environment ---------------------------------------------------------------------------------
class _Held:
    """The sandbox an instance holds, apart from the instance (its finalizer gives it back)."""

    __slots__ = ("pool", "sandbox", "tools")

    def __init__(self) -> None:
        self.pool: SandboxPool | None = None
        self.sandbox: Sandbox | None = None
        self.tools: Tools | None = None

    def give_back(self) -> None:
        pool, sb, tools = self.pool, self.sandbox, self.tools
        self.pool = self.sandbox = self.tools = None
        if tools is not None:
            try:
                tools.close()
            except Exception:  # the sandbox may have died; the pool replaces it
                pass
        if sb is not None:
            if pool is not None:
                pool.release(sb)  # reset in place there (replaced if it crashed)
            else:
                sb.close()


@dataclass
class _Episode:
    row: _Row
    paths: Paths
    instructions: str
    submitted: bool = False
    failure: str | None = None  # the sandbox failed under a tool
    released: bool = False
    tool_calls: int = 0
    answer: str | None = None
    score: Any = None  # the eval Score
    reward: float | None = None


class _NotATool:
    """A method TRL does not take for a tool.

    TRL exposes as tools the public attributes of the class that are plain functions
    (``inspect.getmembers(type(env), inspect.isfunction)``); this descriptor is not one, yet
    ``env.close()`` is an ordinary bound method."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        return self if obj is None else types.MethodType(self.fn, obj)


_DEFAULT_BASH_TIMEOUT = 120.0  # as the execute_bash docstring says


class SandboxEnvironment:
    """One rollout's sandbox for TRL's ``GRPOTrainer(environment_factory=...)`` (see the module docstring).

    ``SandboxEnvironment`` itself is a valid zero-argument factory (the defaults: a per-process
    pool of sandboxes of ``SandboxConfig()``); ``SandboxEnvironment.factory(**options)`` makes one
    with options.  Options:

    - ``config``: the sandboxes' ``SandboxConfig`` (rootfs, isolation, mounts, limits, ...).
    - ``pool``: a ``SandboxPool`` to take them from instead (``reset`` then waits up to
      ``acquire_timeout`` seconds for a free one; size it to TRL's generation batch).
    - ``bash_timeout``, ``max_output_chars``: as for the agent's ``Tools``.
    - ``layout``: ``"sandboxlite"`` (input/, output/answer.txt) or ``"paper"`` (documents/, answer.txt).
    - ``template``: a prompt template file (``[system]`` and ``[instance]``, see ``agent.prompts``).
    - ``require_submit``: score 0 when the model never called ``submit``.
    - ``judge``: the LLM judge for the domains that use one (physics, long_context).

    The public state (properties, not tools): ``sandbox``, ``paths``, ``submitted``,
    ``tool_calls``, ``answer``, ``score`` (the eval ``Score``), ``reward``.
    """

    def __init__(
        self,
        *,
        config: SandboxConfig | None = None,
        pool: SandboxPool | None = None,
        bash_timeout: float = _DEFAULT_BASH_TIMEOUT,
        max_output_chars: int = 20000,
        layout: str = "sandboxlite",
        template: str | None = None,
        require_submit: bool = False,
        acquire_timeout: float | None = 600.0,
        judge: Any = None,
    ) -> None:
        if config is not None and pool is not None:
            raise ConfigError("config", "give either config (for the per-process pool) or pool, not both")
        if config is not None and not isinstance(config, SandboxConfig):
            raise ConfigError("config", f"expected a SandboxConfig, got {type(config).__name__}")
        if pool is not None and not isinstance(pool, SandboxPool):
            raise ConfigError("pool", f"expected a SandboxPool, got {type(pool).__name__}")
        if layout not in LAYOUTS:
            raise ConfigError("layout", f"expected one of {', '.join(LAYOUTS)}, got {layout!r}")
        for name, value in (("bash_timeout", bash_timeout), ("max_output_chars", max_output_chars)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ConfigError(name, f"must be a positive number, got {value!r}")
        self._config = config
        self._pool = pool
        self._tool_options = {"bash_timeout": float(bash_timeout), "max_output_chars": int(max_output_chars)}
        self._layout = layout
        self._template = PromptTemplate.load(template, mode="sandbox")
        self._require_submit = bool(require_submit)
        self._acquire_timeout = acquire_timeout
        self._judge = judge
        self._lock = threading.RLock()
        self._held = _Held()
        self._episode: _Episode | None = None
        self._closed = False
        # gives the sandbox back if the instance is dropped while it holds one (and at exit)
        self._finalizer = weakref.finalize(self, _Held.give_back, self._held)

    @classmethod
    def factory(cls, **options: Any) -> Callable[[], "SandboxEnvironment"]:
        """A zero-argument callable that makes instances with ``options`` (for ``environment_factory``).
        The options are checked now.  With another ``bash_timeout`` than 120, the instances are of
        a subclass whose ``execute_bash`` schema says so (the model reads the default there)."""
        cls(**options).close()  # fail here, not inside the trainer
        target = cls
        seconds = float(options.get("bash_timeout", _DEFAULT_BASH_TIMEOUT))
        if seconds != _DEFAULT_BASH_TIMEOUT:
            target = _with_bash_timeout(cls, seconds)
        return functools.partial(target, **options)

    # -- state (properties: TRL does not take them for tools) ------------------------------------
    @property
    def sandbox(self) -> Sandbox | None:
        """The sandbox of the rollout (None before ``reset`` and once given back)."""
        return self._held.sandbox

    @property
    def paths(self) -> Paths | None:
        """Where the rollout's files are in its sandbox."""
        return self._episode.paths if self._episode is not None else None

    @property
    def instructions(self) -> str | None:
        """What the last ``reset`` returned."""
        return self._episode.instructions if self._episode is not None else None

    @property
    def submitted(self) -> bool:
        return self._episode is not None and self._episode.submitted

    @property
    def tool_calls(self) -> int:
        """Tool calls of the rollout that ran (refused ones included, calls after the end not)."""
        return self._episode.tool_calls if self._episode is not None else 0

    @property
    def answer(self) -> str | None:
        """The text of the answer file, read by ``get_reward`` (None: no file)."""
        return self._episode.answer if self._episode is not None else None

    @property
    def score(self) -> Any:
        """The eval ``Score`` of the answer (set by ``get_reward``)."""
        return self._episode.score if self._episode is not None else None

    @property
    def reward(self) -> float | None:
        return self._episode.reward if self._episode is not None else None

    # -- TRL's interface ------------------------------------------------------------------------------
    def reset(self, **row: Any) -> str:
        """Start a rollout of the task in ``row`` (a dataset row): take a sandbox, write the row's
        input files into it, and return the instructions TRL appends to the last user message
        (``ConfigError`` naming the field for a row that cannot be used)."""
        parsed = _parse_row(row)  # before a sandbox is taken
        with self._lock:
            if self._closed:
                raise SandboxClosed("this SandboxEnvironment is closed", hint="make a new one")
            self._episode = None
            self._held.give_back()  # a rollout TRL did not finish (no get_reward)
            pool, sb = self._acquire()
            self._held.pool, self._held.sandbox = pool, sb
            try:
                paths = Paths.of(sb, self._layout)
                where = {"input_path": parsed.input_path} if parsed.input_path else {}
                task = Task(id="trl", query=parsed.query, input_files=parsed.input_files, input_dir=parsed.input_dir,
                            **where)  # fmt: skip
                input_dir = stage_inputs(sb, task, paths)
                system, instance = self._template.render("" if parsed.has_prompt else parsed.query, task_inputs(task),
                                                         paths=paths, input_dir=input_dir)  # fmt: skip
                self._held.tools = Tools(sb, paths=paths, **self._tool_options)
            except BaseException:
                self._held.give_back()
                raise
            if parsed.has_prompt:  # the question is in the prompt already: the instructions follow it
                text = f"\n\n{system.strip()}\n\n{instance.strip()}\n"
            else:  # TRL's prompt is an empty user message: this is all of it
                text = f"{system.strip()}\n\n{instance.strip()}\n"
            self._episode = _Episode(parsed, paths, text)
            return text

    def _acquire(self) -> tuple[SandboxPool | None, Sandbox]:
        if self._pool is not None:
            return self._pool, self._pool.acquire(self._acquire_timeout)
        return _shared(self._config or SandboxConfig()).acquire(self, self._acquire_timeout)

    def get_reward(self) -> float:
        """Score the rollout: the text of the sandbox's answer file, with the eval scorer the row
        names (0.0 without an answer file, or without ``submit`` when ``require_submit``); the
        sandbox goes back to the pool.  Called again, it returns the same value."""
        with self._lock:
            ep = self._episode
            if ep is None:
                raise RuntimeError("get_reward() before reset(): there is no rollout to score")
            if ep.reward is not None:
                return ep.reward
            sb = self._held.sandbox
            try:
                if sb is not None and not ep.released:
                    try:
                        raw = sb.read_file(ep.paths.answer_file, max_bytes=MAX_ANSWER_BYTES)
                        ep.answer = raw.decode("utf-8", "replace")
                    except SandboxError:  # no answer file (or the sandbox failed)
                        ep.answer = None
            finally:
                ep.released = True
                self._held.give_back()
            if ep.answer is None or (self._require_submit and not ep.submitted):
                ep.reward = 0.0
                return 0.0
            ep.score = _score(ep.row, ep.answer, self._judge)
            value = float(ep.score.value)
            if not math.isfinite(value):
                raise ValueError(f"the scorer returned {value} for row {ep.row.id!r}")
            ep.reward = value
            return value

    # -- the tools (TRL reads their schemas from the type hints and these docstrings) ----------------
    def execute_bash(self, command: str, timeout: float | None = None) -> str:
        """Run a bash command on the Linux computer (the sandbox) and see its output.

        The shell is persistent: it starts in the working directory the task names, and `cd`,
        exported variables and functions carry over to the next call. The task's input files are in
        its input directory; write what you produce to its output directory. You see stdout, then
        stderr (after a [stderr] line), then the exit code; very long output keeps only its beginning
        and end, so redirect it to a file and grep it. Run long jobs in the background
        (`cmd > log 2>&1 &`) and check on them. Commands get no input (stdin is empty): pass flags
        such as -y instead of waiting for prompts.

        Args:
            command: The bash command(s) to run.
            timeout: Seconds before the command is killed (default 120).

        Returns:
            The command's output and exit code.
        """
        return self._call("execute_bash", {"command": command, "timeout": timeout})

    def str_replace_editor(
        self,
        command: Literal["view", "create", "str_replace", "insert"],
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> str:
        """View, create and edit files on the computer. Paths must be absolute (under the working directory
        the task names).

        * view: show a file with line numbers (like `cat -n`), optionally only the lines in
        view_range=[start, end] (1-based; end -1 means to the end of the file); for a directory, list
        its files and subdirectories two levels deep (hidden ones left out).
        * create: write file_text to a new file (parent directories are created). It refuses an
        existing file: change that with str_replace.
        * str_replace: replace old_str with new_str in the file. old_str must match exactly one place
        in the file, character for character (whitespace and indentation included; leave out the line
        numbers that view shows): include enough surrounding lines to make it unique. An empty new_str
        deletes old_str.
        * insert: insert new_str as new lines after line insert_line (0 inserts at the top of the file).
        To give your final answer, write it to the answer file the task names (e.g. with create), then
        call submit.

        Args:
            command: The operation: view, create, str_replace or insert.
            path: Absolute path of the file or directory.
            file_text: create: the content of the new file.
            old_str: str_replace: the exact text to replace (one match).
            new_str: str_replace: the replacement text (empty to delete); insert: the text to insert.
            insert_line: insert: new_str goes after this line (0 = at the top of the file).
            view_range: view (files only): [start, end] lines to show, 1-based; end -1 = to the end.

        Returns:
            What the editor did, or the file's lines.
        """
        return self._call("str_replace_editor", {"command": command, "path": path, "file_text": file_text,
                                                 "old_str": old_str, "new_str": new_str, "insert_line": insert_line,
                                                 "view_range": view_range})  # fmt: skip

    def submit(self) -> str:
        """Finish the task.

        Before calling it, write your final answer to the answer file the task names yourself with the
        other tools (submit takes no arguments and does not write anything). After submit you cannot act
        any more: check your output files first.

        Returns:
            "submitted".
        """
        return self._call("submit", {})

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one of the agent's tools; ``ToolError`` (for the model) when it fails or cannot run."""
        with self._lock:
            ep, tools = self._episode, self._held.tools
            if ep is None:
                raise ToolError(f"{name}: there is no task in progress (reset() was not called)")
            if ep.released or tools is None:
                raise ToolError(f"{name}: this rollout is over: get_reward() scored it and gave its sandbox back "
                                "to the pool (the call was not run)")  # fmt: skip
            if ep.submitted:
                raise ToolError(f"{name}: submit was already called, so the task is finished and no more tool "
                                "calls are run (this one was not)")  # fmt: skip
            if ep.failure is not None:
                raise ToolError(f"{name}: the sandbox failed earlier ({ep.failure}); no more tool calls are run")
            ep.tool_calls += 1
            try:
                # None means "not given", as in the agent's argument checking
                result = tools.call(name, {k: v for k, v in arguments.items() if v is not None})
            except ToolError:
                raise
            except SandboxError as e:  # the jail failed under the tool: the rollout cannot go on
                ep.failure = f"{type(e).__name__}: {e}"
                raise ToolError(f"{name}: the sandbox failed ({ep.failure}); no more tool calls are run") from e
            if result.submitted:
                ep.submitted = True
            return result.output

    # -- lifetime (not tools) ------------------------------------------------------------------------
    @_NotATool
    def close(self) -> None:
        """Give the sandbox back (if one is held) and refuse further resets.  Idempotent."""
        with self._lock:
            self._closed = True
            if self._episode is not None:
                self._episode.released = True
            self._finalizer()  # _Held.give_back, once

    def __enter__(self) -> "SandboxEnvironment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ep = self._episode
        if self._closed:
            state = "closed"
        elif ep is None:
            state = "idle"
        elif ep.released:
            state = f"scored {ep.reward}"
        else:
            state = "submitted" if ep.submitted else f"running ({ep.tool_calls} tool calls)"
        return f"<SandboxEnvironment {state}>"


@functools.lru_cache(maxsize=None)
def _with_bash_timeout(cls: type, seconds: float) -> type:
    """``cls`` with an ``execute_bash`` whose docstring (hence TRL's schema) names ``seconds`` as the default."""
    base = cls.execute_bash

    def execute_bash(self, command: str, timeout: float | None = None) -> str:  # type: ignore[no-untyped-def]
        return base(self, command, timeout)

    execute_bash.__doc__ = base.__doc__.replace(f"(default {_DEFAULT_BASH_TIMEOUT:g})", f"(default {seconds:g})")
    execute_bash.__qualname__ = f"{cls.__qualname__}.execute_bash"
    return type(cls.__name__, (cls,), {"execute_bash": execute_bash, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})  # fmt: skip
