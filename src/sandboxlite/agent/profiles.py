"""Model names to model objects: ``--model NAME``.

- ``local``: the embedded local model (SmolLM2-135M, in-process, see ``local.py``);
  ``local:/path/model.gguf`` any GGUF file; ``$SANDBOXLITE_LOCAL_MODEL`` sets the default file.
  With ``$SANDBOXLITE_LOCAL_URL`` set, ``local`` is an OpenAI-compatible server there instead
  (e.g. llama.cpp's ``llama-server``).
- ``scripted``: a deterministic stand-in that needs no weights (see ``scripted.py``): it looks
  around, writes an answer and submits; for dry runs and for measuring sandbox overhead.
- anything else: that model on an OpenAI-compatible endpoint, from ``--base-url`` / ``--api-key``
  or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (vLLM, SGLang, llama.cpp, OpenAI, ...).
"""

from __future__ import annotations

import os
from typing import Any



def resolve_model(
    name: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    extra_body: dict[str, Any] | None = None,
    constrained: str | None = None,
    top_p: float | None = None,
    seed: int | None = None,
) -> Any:
    """The model ``name`` stands for; sampling settings given as None keep the backend's default
    (the local model's own, an endpoint's: then not sent)."""
    from .model import OpenAIModel

    if name == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel()
    if name == "local" or name.startswith("local:"):
        url = base_url or os.environ.get("SANDBOXLITE_LOCAL_URL")
        if url:
            served = name.split(":", 1)[1] if ":" in name else "local"
            return OpenAIModel(served, base_url=url, api_key=api_key or "sk-local", temperature=temperature,
                               top_p=top_p, max_tokens=max_tokens, seed=seed, extra_body=extra_body)  # fmt: skip
        from .local import LocalModel, resolve_local

        given = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "seed": seed,
                 "constrained": constrained}  # fmt: skip
        options = {k: v for k, v in given.items() if v is not None}
        return LocalModel(resolve_local(name), **options)
    return OpenAIModel(
        name,
        base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
        api_key=api_key or os.environ.get("OPENAI_API_KEY"),
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        seed=seed,
        extra_body=extra_body,
    )
