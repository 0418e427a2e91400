"""PATH (a run's output folder, or a trajectory.json) -> one plain dict the page shows.

::

    {"kind": "run", "source": ..., "task": {...}, "query": ..., "inputs": [{"name", "text"}],
     "prompt": {"system", "user"}, "model": ..., "mode": ..., "steps": [step, ...],
     "network": [request, ...], "files": [file, ...], "answer": ..., "score": {...} | None,
     "exit_reason": ..., "reason": ..., "usage": {...}, "duration_s": ...}

    step: {"index", "text", "reasoning", "calls": [call], "usage", "model_s", "tools_s",
           "error", "finish_reason", "note", "discarded"}
    call: {"id", "name", "arguments" (dict or raw text), "diff" (str_replace / insert / create),
           "output", "exit_code", "duration_s", "truncated", "timed_out", "clipped"}

Every string is cleaned and capped (``_text``): what a page can hold, nothing a terminal would act on.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._files import output_files, read_capped
from ._text import TEXT_CAP, decode, fit, sanitize

MAX_TRAJECTORY_BYTES = 2 << 30  # a trajectory.json larger than this is refused
MAX_STEPS = 5000  # steps shown (the rest are counted)
HINT = "give a run's output folder (the --output-dir of `sandboxlite run`) or its trajectory.json"


def resolve(path: str | os.PathLike) -> tuple[Path, Path | None]:
    """(trajectory.json, the run folder or None): what PATH names; ``ConfigError`` when it is neither."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise ConfigError("PATH", f"{p} does not exist", hint=HINT)
    if p.is_dir():
        traj = p / "trajectory.json"
        if traj.is_file() and not traj.is_symlink():
            return traj, p
        if (p / "results.jsonl").is_file():
            raise ConfigError("PATH", f"{p} is an eval's output folder: load it with load_eval (one run's "
                              "trajectory.json is in PATH/trajectories/<mode>/<domain>/<item>)",
                              hint="`sandboxlite view EVAL_DIR` writes the eval's page and each run's")  # fmt: skip
        raise ConfigError("PATH", f"{p} holds no trajectory.json (a symlink to one is not followed)", hint=HINT)
    if not p.is_file():
        raise ConfigError("PATH", f"{p} is not a regular file or a folder", hint=HINT)
    folder = p.parent if p.name == "trajectory.json" else None
    return p, folder


def _read_trajectory(traj: Path, nofollow: bool) -> dict:
    if nofollow:
        got = read_capped(traj, MAX_TRAJECTORY_BYTES + 1)
        if got is None:
            raise ConfigError("PATH", f"{traj} could not be read (or is a symlink)", hint=HINT)
        raw = got[0]
    else:
        raw = traj.read_bytes()
    if len(raw) > MAX_TRAJECTORY_BYTES:
        raise ConfigError("PATH", f"{traj} is over {MAX_TRAJECTORY_BYTES >> 30} GiB", hint=HINT)
    try:
        data = json.loads(decode(raw))
    except json.JSONDecodeError as e:
        raise ConfigError("PATH", f"{traj} is not JSON ({e})", hint=HINT) from None
    if not isinstance(data, dict) or not ({"messages", "steps"} & set(data)):
        raise ConfigError("PATH", f"{traj} is not a trajectory (no messages, no steps)", hint=HINT)
    return data


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
            return parsed if isinstance(parsed, dict) else raw
        except ValueError:
            return raw
    return raw


def _lines(text: str) -> list[str]:
    """Lines as the page shows them (split at newlines only: not at U+2028 as ``splitlines`` does)."""
    return text.split("\n") if text else []


def _diff(name: str, args: Any) -> str | None:
    """A str_replace_editor edit as a unified diff (create: every line added)."""
    if name != "str_replace_editor" or not isinstance(args, dict):
        return None
    cmd, path = args.get("command"), str(args.get("path") or "file")
    old = new = None
    if cmd == "str_replace":
        old, new = args.get("old_str"), args.get("new_str")
    elif cmd == "create":
        old, new = "", args.get("file_text")
    elif cmd == "insert":
        old, new = "", args.get("new_str")
    if not isinstance(old, str) or not isinstance(new, (str, type(None))):
        return None
    old, new = fit(old)[0], fit(new or "")[0]
    lines = difflib.unified_diff(_lines(old), _lines(new), f"{path} (before)", f"{path} (after)",
                                 lineterm="", n=3)  # fmt: skip
    return "\n".join(lines)


def _call(tc: dict, obs: dict | None) -> dict:
    fn = tc.get("function") or {}
    name = str(fn.get("name") or tc.get("name") or "?")
    args = _arguments(fn.get("arguments", tc.get("arguments")))
    call = {"id": tc.get("id"), "name": name, "arguments": args, "diff": _diff(name, args), "output": None,
            "exit_code": None, "duration_s": None, "truncated": False, "timed_out": False, "clipped": False}  # fmt: skip
    if obs is not None:
        data = obs.get("data") if isinstance(obs.get("data"), dict) else {}
        output, clipped = fit(obs.get("output"), TEXT_CAP)
        call.update(output=output, clipped=clipped, exit_code=data.get("exit_code"),
                    duration_s=data.get("duration_s"), truncated=bool(data.get("truncated")),
                    timed_out=bool(data.get("timed_out")))  # fmt: skip
    return call


def _step(raw: dict, position: int) -> dict:
    assistant = raw.get("assistant") if isinstance(raw.get("assistant"), dict) else {}
    observations = [o for o in raw.get("observations") or [] if isinstance(o, dict)]
    by_id = {o.get("call_id"): o for o in observations}
    calls = []
    for i, tc in enumerate(t for t in assistant.get("tool_calls") or [] if isinstance(t, dict)):
        obs = by_id.get(tc.get("id")) or (observations[i] if i < len(observations) else None)
        calls.append(_call(tc, obs))
    known = {c["id"] for c in calls}
    for o in observations:  # results of calls the model wrote as text (no tool_calls entry)
        if o.get("call_id") not in known:
            calls.append(_call({"id": o.get("call_id"), "name": o.get("tool"), "arguments": o.get("arguments")}, o))
    return {"index": raw.get("index", position), "text": assistant.get("content"),
            "reasoning": assistant.get("reasoning_content") or assistant.get("reasoning"), "calls": calls,
            "usage": raw.get("usage") or {}, "model_s": raw.get("model_s"), "tools_s": raw.get("tools_s"),
            "error": raw.get("error"), "finish_reason": raw.get("finish_reason"), "note": raw.get("note"),
            "discarded": raw.get("discarded") or []}  # fmt: skip


def _steps_from_messages(messages: list) -> list[dict]:
    """Steps rebuilt from the messages (a vanilla run, or a trajectory without ``steps``)."""
    steps, results = [], {}
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "tool":
            results[m.get("tool_call_id")] = {"call_id": m.get("tool_call_id"), "output": m.get("content")}
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "assistant":
            obs = [results[tc.get("id")] for tc in m.get("tool_calls") or [] if tc.get("id") in results]
            steps.append(_step({"assistant": m, "observations": obs}, len(steps) + 1))
    return steps


def _prompt(t: dict) -> dict:
    messages = [m for m in t.get("messages") or [] if isinstance(m, dict)]
    first = next((s for s in t.get("steps") or [] if isinstance(s, dict) and isinstance(s.get("prompt"), dict)), None)
    system = next((m.get("content") for m in messages if m.get("role") == "system"), None)
    if system is None and first is not None:
        system = first["prompt"].get("system")
    user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    return {"system": system, "user": user}


def _task(t: dict, prompt: dict) -> tuple[dict, Any, list[dict]]:
    """(the task's fields, its query (or the prompt holding it, ``query_in_prompt``), its input files)."""
    task = dict(t.get("task") or {}) if isinstance(t.get("task"), dict) else {}
    query = task.pop("query", None)
    if query is None:  # stored once, in the prompt the model saw (TrajectoryWriter)
        query = prompt.get("user")
        task["query_in_prompt"] = True
    files = task.pop("input_files", None) or {}
    inputs = [{"name": k, "text": v} for k, v in files.items()] if isinstance(files, dict) else []
    return task, query, inputs


def _from_record(rec: dict) -> dict:
    return {"score": rec.get("score"), "extracted": rec.get("extracted"), "error": rec.get("error"),
            "domain": rec.get("domain"), "id": rec.get("id")}  # fmt: skip


def _score(t: dict, traj: Path, record: dict | None = None) -> dict | None:
    """The score: trajectory.json's own, else ``record`` (the eval's record of this run, when the
    caller has it), else the record of an eval whose results.jsonl names this run."""
    if "score" in t:
        return {"score": t.get("score"), "extracted": t.get("extracted"), "error": None}
    if record is not None:
        return _from_record(record)
    here = traj.resolve()
    for up in list(here.parents)[:5]:
        results = up / "results.jsonl"
        if not results.is_file() or results.is_symlink():
            continue
        rel = str(here.relative_to(up))
        got = read_capped(results, 256 << 20)
        for line in decode(got[0]).splitlines() if got else []:
            if rel not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("trajectory") == rel:
                return _from_record(rec)
    return None


def load_run(path: str | os.PathLike, *, record: dict | None = None) -> dict:
    """The run at ``path`` (its output folder, or a trajectory.json) as one plain dict (see above).
    ``record``: the eval's record of this run, when the caller has it (no results.jsonl is searched)."""
    traj, folder = resolve(path)
    t = _read_trajectory(traj, nofollow=folder is not None)
    raw_steps = [s for s in t.get("steps") or [] if isinstance(s, dict)]
    steps = [_step(s, i + 1) for i, s in enumerate(raw_steps[:MAX_STEPS])]
    if not raw_steps:
        steps = _steps_from_messages(t.get("messages") or [])[:MAX_STEPS]
    prompt = _prompt(t)
    task, query, inputs = _task(t, prompt)
    answer = t.get("answer")
    files, files_left_out = [], 0
    if folder is not None:
        got = read_capped(folder / "answer.txt", TEXT_CAP + 1)
        if got is not None and answer is None:
            answer = decode(got[0])
        files, files_left_out = output_files(folder / "files")
    network = [r for r in t.get("network_requests") or [] if isinstance(r, dict)]
    data = {"kind": "run", "source": str(folder if folder is not None else traj), "task": task, "query": query,
            "inputs": inputs, "prompt": prompt, "model": t.get("model"), "mode": t.get("mode"),
            "model_info": t.get("model_info"), "limits": t.get("limits"), "started_at": t.get("started_at"),
            "steps": steps, "steps_left_out": max(0, len(raw_steps) - MAX_STEPS), "network": network,
            "files": files, "files_left_out": files_left_out, "skipped_outputs": t.get("skipped_outputs") or [],
            "answer": answer, "score": _score(t, traj, record), "exit_reason": t.get("exit_reason"),
            "reason": t.get("reason"), "usage": t.get("usage") or {}, "duration_s": t.get("duration_s")}  # fmt: skip
    return sanitize(data)
