"""Model names to model objects: ``--model NAME``.

- ``local``: the embedded local model (its own issue); until it lands, an OpenAI-compatible
  server at ``$SANDBOXLITE_LOCAL_URL`` (default ``http://127.0.0.1:8080/v1``), e.g. llama.cpp's
  ``llama-server``.
- anything else: that model on an OpenAI-compatible endpoint, from ``--base-url`` / ``--api-key``
  or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (vLLM, SGLang, llama.cpp, OpenAI, ...).
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_LOCAL_URL = "http://127.0.0.1:8080/v1"


def resolve_model(
    name: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra_body: dict[str, Any] | None = None,
) -> Any:
    from .model import OpenAIModel

    if name == "local" or name.startswith("local:"):
        url = base_url or os.environ.get("SANDBOXLITE_LOCAL_URL", DEFAULT_LOCAL_URL)
        served = name.split(":", 1)[1] if ":" in name else "local"
        return OpenAIModel(served, base_url=url, api_key=api_key or "sk-local", temperature=temperature,
                           max_tokens=max_tokens, extra_body=extra_body)  # fmt: skip
    return OpenAIModel(
        name,
        base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
        temperature=temperature,
        max_tokens=max_tokens,
        extra_body=extra_body,
    )
