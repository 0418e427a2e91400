"""The task format (``task.json``): what to solve, with which inputs, under which limits.

::

    {
      "id": "demo_004",                      # required: letters, digits, "._-"
      "query": "Sum the numbers in numbers.txt.",   # required
      "input_files": {"numbers.txt": "17\\n25"},   # name -> text, placed in input_path
      "input_dir": "/host/dir",              # or: a host directory copied to input_path
      "input_path": "/testbed/input",        # where the inputs go in the sandbox (under /testbed or /tmp)
      "rootfs": "auto",                      # as SandboxConfig.rootfs
      "image": "python:3.12-slim",           # or: a container image in the store (the same as rootfs=)
      "network": "none",                     # "none" or "host"
      "max_steps": 50,                       # model turns
      "timeout_s": 1800,                     # wall time of the whole run
      "model": null,                         # default model (the CLI's --model wins)
      "prompt": null,                        # a prompt template file (see prompts.py)
      "metadata": {}                         # free-form: domain, ground truth, ... (kept in the trajectory)
    }

Unknown keys and wrong types raise ``TaskError`` naming the key and the expected type.

Sandbox paths: ``/testbed`` in a task means the sandbox's working directory (``Sandbox.workdir``:
``/testbed`` itself with namespaces, the default; a directory of the sandbox's own with
``isolation="landlock"``).  So ``input_path`` ``"/testbed/input"`` is ``<workdir>/input`` where the
task runs (``Paths.resolve``, in ``agent/paths.py``); a ``/tmp/...`` path stays as it is.  The
prompt tells the model the real paths; a ``query`` that names ``/testbed`` itself is shown as written.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import check_network
from ..errors import ConfigError, TaskError
from .paths import DEFAULT_PATHS, DEFAULT_WORKDIR

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# key -> (python types, description for error messages, required)
_FIELDS: dict[str, tuple[tuple[type, ...], str, bool]] = {
    "id": ((str,), "a string of letters, digits, '.', '_' or '-'", True),
    "query": ((str,), "a non-empty string", True),
    "input_files": ((dict,), "an object mapping file names to text", False),
    "input_dir": ((str,), "a host directory path", False),
    "input_path": ((str,), "an absolute sandbox path under /testbed or /tmp", False),
    "rootfs": ((str,), 'a string ("auto", "host", an image name or a directory)', False),
    "image": ((str,), "a container image reference (sandboxlite image list)", False),
    "network": ((str,), '"none", "host" or "allow:RULE,..."', False),
    "max_steps": ((int,), "a positive integer", False),
    "timeout_s": ((int, float), "a positive number of seconds", False),
    "model": ((str, type(None)), "a model name or null", False),
    "prompt": ((str, type(None)), "a prompt template file path or null", False),
    "metadata": ((dict,), "an object", False),
}


@dataclass(frozen=True)
class Task:
    id: str
    query: str
    input_files: dict[str, str] = field(default_factory=dict)
    input_dir: str | None = None
    input_path: str = DEFAULT_PATHS.input_dir  # "/testbed/input": <workdir>/input where the task runs
    rootfs: str = "auto"
    network: str = "none"
    max_steps: int = 50
    timeout_s: float = 1800.0
    model: str | None = None
    prompt: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, *, base_dir: str | os.PathLike | None = None) -> "Task":
        """Validate a decoded task.json; relative paths are taken from ``base_dir``."""
        if not isinstance(data, dict):
            raise TaskError("task", f"expected a JSON object, got {type(data).__name__}")
        for key in data:
            if key not in _FIELDS:
                raise TaskError(key, f"unknown key (allowed: {', '.join(_FIELDS)})")
        for key, (types, what, required) in _FIELDS.items():
            if key not in data:
                if required:
                    raise TaskError(key, f"missing; expected {what}")
                continue
            value = data[key]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise TaskError(key, f"expected {what}, got {type(value).__name__} {value!r:.60}")
        if not _ID.match(data["id"]):
            raise TaskError("id", f"expected {_FIELDS['id'][1]} (at most 128), got {data['id']!r:.60}")
        if not data["query"].strip():
            raise TaskError("query", "must not be empty")
        files = data.get("input_files", {})
        for name, text in files.items():
            if not isinstance(text, str):
                raise TaskError(f"input_files[{name!r}]", f"expected text (a string), got {type(text).__name__}")
            parts = Path(name).parts
            if not name or name.startswith("/") or ".." in parts or "\0" in name:
                raise TaskError(f"input_files[{name!r}]", "expected a relative file name without '..'")
        if "input_files" in data and "input_dir" in data:
            raise TaskError("input_dir", "give either input_files or input_dir, not both")
        if "input_path" in data:
            ip = data["input_path"]
            parts = Path(ip).parts
            if not ip.startswith((DEFAULT_WORKDIR + "/", "/tmp/")) or ".." in parts or "\0" in ip or len(parts) < 3:
                raise TaskError("input_path", f"expected {_FIELDS['input_path'][1]} (not the directory itself), got {ip!r:.60}")
        try:
            check_network(data.get("network", "none"))
        except ConfigError as e:
            raise TaskError("network", e.message.removeprefix("network: "), hint=e.hint) from None
        if data.get("max_steps", 1) <= 0:
            raise TaskError("max_steps", "expected a positive integer")
        if data.get("timeout_s", 1) <= 0:
            raise TaskError("timeout_s", "expected a positive number of seconds")
        values = dict(data)
        if "image" in values:  # the root by another name: rootfs
            image = values.pop("image")
            if values.get("rootfs", image) not in ("auto", image):
                raise TaskError("image", f"{image!r} and rootfs {values['rootfs']!r} both name the root: give one")
            values["rootfs"] = image
        for key in ("input_dir", "prompt"):
            if values.get(key) and base_dir is not None and not os.path.isabs(values[key]):
                values[key] = str(Path(base_dir) / values[key])
        if values.get("input_dir") and not os.path.isdir(values["input_dir"]):
            raise TaskError("input_dir", f"{values['input_dir']} is not a directory")
        if values.get("prompt") and not os.path.isfile(values["prompt"]):
            raise TaskError("prompt", f"{values['prompt']} does not exist")
        return cls(**values)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Task":
        """A task file; ``"-"`` reads the task from stdin (relative paths then from the current directory)."""
        if str(path) == "-":
            return cls.parse(sys.stdin.buffer.read(), "the task on stdin", base_dir=os.getcwd())
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise TaskError("task", f"cannot read {p}: {e.strerror}") from None
        return cls.parse(raw, str(p), base_dir=p.parent)

    @classmethod
    def parse(cls, raw: bytes | str, source: str, *, base_dir: str | os.PathLike | None = None) -> "Task":
        """A task from the text of a task file (``source`` names it in error messages)."""
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8-sig")  # a BOM is tolerated
            except UnicodeDecodeError as e:
                raise TaskError("task", f"{source} is not UTF-8 text (byte {e.start} is {raw[e.start:e.start + 1]!r})",
                                hint="save it as UTF-8, e.g. iconv -f LATIN1 -t UTF-8 OLD > NEW") from None  # fmt: skip
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as e:
            raise TaskError("task", f"{source} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        if not isinstance(data, dict):
            raise TaskError("task", f"{source}: expected a JSON object, got {type(data).__name__}",
                            hint='a task looks like {"id": "t1", "query": "..."} (see sandboxlite.agent.task)')  # fmt: skip
        return cls.from_dict(data, base_dir=base_dir)

    @classmethod
    def one_off(cls, query: str) -> "Task":
        """The task of ``sandboxlite run --query TEXT``: id "query", every other field its default."""
        return cls.from_dict({"id": "query", "query": query})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
