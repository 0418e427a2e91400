"""``--model auto``: the strongest model found that this machine can run.

The rule, a pure function of what was found and two host facts (memory, whether llama.cpp is
installed), so it is tested without either:

1. a model a running server serves (the server already holds it in memory): the one with the
   most parameters (as the server or the name says; unknown counts as none), no embedding models;
2. else the chat/instruct GGUF file with the most parameters whose weights plus an 8k-token KV
   cache plus ``OVERHEAD`` fit in ``FIT_SHARE`` of the memory available, when llama.cpp
   (llama-cpp-python, the ``[local]`` extra) is installed to run it;
3. else the embedded model (``local``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ._found import Found, human_bytes, human_params

SERVER_LABELS = {"ollama": "Ollama", "llama-server": "llama.cpp's llama-server", "vllm": "vLLM", "lmstudio": "LM Studio",
                 "openai-compatible": "OpenAI-compatible"}  # fmt: skip
FIT_SHARE = 0.8
OVERHEAD = 512 << 20  # llama.cpp's compute buffers and the process


@dataclass(frozen=True)
class Choice:
    """What ``--model auto`` stands for: ``ref`` (a ``--model`` value) and why."""

    ref: str
    reason: str
    found: Found | None = None
    passed_over: list[tuple[Found, str]] = field(default_factory=list)  # (a model, why it was not chosen)


def memory_needed(f: Found) -> int | None:
    """The memory a GGUF file needs in-process at 8k context (None: its size is unknown)."""
    if f.size is None:
        return None
    kv = f.kv_bytes_8k if f.kv_bytes_8k is not None else f.size // 8
    return f.size + kv + OVERHEAD


def available_memory(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process can still use: MemAvailable, lowered to the cgroup's room (memory.max
    minus memory.current) when a limit is set; None when neither can be read."""
    avail = None
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path(cgroup, "memory.max").read_text().strip()
        if limit != "max":
            room = int(limit) - int(Path(cgroup, "memory.current").read_text())
            avail = room if avail is None else min(avail, room)
    except (OSError, ValueError):
        pass
    return avail


def llama_cpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def choose(found: list[Found], *, memory: int | None, can_run_gguf: bool) -> Choice:
    """The model ``--model auto`` uses among ``found`` (see the module's rule)."""
    passed: list[tuple[Found, str]] = []
    served = [f for f in found if f.served]
    for f in served:
        if f.kind == "other":
            passed.append((f, "not a chat model"))
    served = [f for f in served if f.kind != "other"]
    if served:
        best = max(served, key=lambda f: f.n_params or 0)  # max keeps the first of equals: port order
        others = len(served) - 1
        size = f", {human_params(best.n_params)} parameters" if best.n_params else ""
        more = f"; the largest of {len(served)} served models" if others else ""
        label = SERVER_LABELS.get(best.source.split(":", 1)[1], best.source)
        return Choice(best.ref, f"a server answers at {best.where} ({label}){more}{size}",
                      best, passed + [(f, "a server's model with fewer parameters") for f in served if f is not best])  # fmt: skip

    files = [f for f in found if not f.served and f.source != "embedded"]
    fitting = []
    for f in files:
        need = memory_needed(f)
        if f.kind != "chat":
            passed.append((f, {"other": "not a chat model", "base": "a base model (no instruct/chat tuning)"}.get(
                f.kind, f.note or "its header could not be read")))  # fmt: skip
        elif f.note.startswith(("incomplete", "unreadable")):
            passed.append((f, f.note))
        elif not can_run_gguf:
            passed.append((f, "llama.cpp is not installed: pip install 'sandboxlite[local]'"))
        elif need is not None and memory is not None and need > FIT_SHARE * memory:
            passed.append((f, f"needs about {human_bytes(need)}; {human_bytes(memory)} is available"))
        else:
            fitting.append(f)
    if fitting:
        best = max(fitting, key=lambda f: (f.n_params or 0, f.size or 0))
        passed += [(f, "a smaller model") for f in fitting if f is not best]
        need = memory_needed(best)
        fits = f", needs about {human_bytes(need)} of {human_bytes(memory)} available" if need and memory else ""
        q = f" {best.quantisation}" if best.quantisation else ""
        return Choice(best.ref, f"the largest chat model on disk that fits ({best.source}: "
                      f"{human_params(best.n_params)}{q}{fits}); no model server answers on loopback", best, passed)  # fmt: skip
    embedded = next((f for f in found if f.source == "embedded"), None)
    why = "no model server answers on loopback and no other chat model on disk fits" if files else \
        "no model server answers on loopback and no other model file was found"  # fmt: skip
    return Choice("local", f"the embedded model: {why}", embedded, passed)
