"""One model found on this machine: a file or a model a loopback server serves."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE_LABEL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])")
_QUANT = re.compile(r"(?<![A-Za-z0-9])((?:IQ|Q)\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4)(?![A-Za-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class Found:
    """A model ``sandboxlite models`` lists.  ``ref`` is what ``--model`` takes to use it."""

    ref: str  # "local", "local:/path/x.gguf", "ollama:NAME", "server:http://127.0.0.1:PORT/v1#ID"
    name: str  # as its source names it
    source: str  # "embedded", "hf-cache", "ollama", "lmstudio", "SANDBOXLITE_MODELS", "server:<kind>"
    where: str  # a path or a URL
    size: int | None = None  # bytes on disk (a server's: as it reports, if it does)
    quantisation: str | None = None
    context_length: int | None = None  # trained (files) or served (servers that say)
    n_params: int | None = None
    kind: str = "chat"  # "chat", "base", "other" (no chat model: embeddings, projectors), "unknown"
    note: str = ""  # anything the user should know (unreadable, incomplete, not loaded, ...)
    kv_bytes_8k: int | None = None  # the KV cache at 8192 tokens (files whose header says)

    @property
    def served(self) -> bool:
        return self.source.startswith("server:")


def params_from_name(name: str) -> int | None:
    """A parameter count a model's name states ("Qwen3-4B", "llama3.2:3b", "SmolLM2-135M"), or None."""
    best = None
    for m in _SIZE_LABEL.finditer(name or ""):
        n = float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6)
        best = max(best or 0, int(n))
    return best


def quant_from_name(name: str) -> str | None:
    """The quantisation a file or model name states ("...-Q4_K_M.gguf" -> "Q4_K_M"), or None."""
    m = _QUANT.search(name or "")
    return m.group(1).upper() if m else None


def human_params(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"
