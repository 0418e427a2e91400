"""Model names to model objects: ``--model NAME``.

- ``local``: the embedded local model (SmolLM2-135M, in-process, see ``local.py``);
  ``local:/path/model.gguf`` any GGUF file; ``$SANDBOXLITE_LOCAL_MODEL`` sets the default file.
  With ``$SANDBOXLITE_LOCAL_URL`` set, ``local`` is an OpenAI-compatible server there instead
  (e.g. llama.cpp's ``llama-server``).
- ``auto``: the strongest model found on this machine (a loopback server's first, else the
  largest chat GGUF that fits in memory, else the embedded one; ``catalog`` says how);
  ``ollama:NAME`` an Ollama model (its server's, else its GGUF from Ollama's store in-process);
  ``server:URL[#MODEL]`` the (one, or the named) model an OpenAI-compatible server lists.
- ``scripted``: a deterministic stand-in that needs no weights (see ``scripted.py``): it looks
  around, writes an answer and submits; for dry runs and for measuring sandbox overhead.
- anything else: that model on an OpenAI-compatible endpoint, from ``--base-url`` / ``--api-key``
  or ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (vLLM, SGLang, llama.cpp, OpenAI, ...).  With no
  endpoint given the name is refused (``ConfigError``), never sent to OpenAI's public endpoint by
  default: a mistyped ``local:`` name would otherwise leave the machine (OpenAI itself:
  ``--base-url https://api.openai.com/v1``).

Bad names are ``ConfigError`` (the CLI's exit code 2): a ``local:PATH`` that is no file, a name
with no endpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError


def in_process_local(name: str, base_url: str | None = None) -> bool:
    """Whether ``name`` is the in-process local model (``local``/``local:PATH`` with no server
    given by ``base_url`` or ``$SANDBOXLITE_LOCAL_URL``)."""
    return (name == "local" or name.startswith("local:")) and not (base_url or os.environ.get("SANDBOXLITE_LOCAL_URL"))


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
    tool_format: str | None = None,
    context_tokens: int | None = None,
    profile: str | None = None,
) -> Any:
    """The model ``name`` stands for; sampling settings given as None keep the backend's default
    (the local model's own, an endpoint's: then not sent).  ``tool_format`` (an endpoint's:
    "native", "text" or "auto", see ``OpenAIModel``) and ``context_tokens`` (an endpoint's context
    size, for clipping tool outputs to fit) do not apply to the in-process local model, which
    always writes its calls as text and knows its own context: giving them for it is an error.
    ``profile`` (the in-process local model's prompt profile: "auto", "small", "standard", see
    ``local.py``) is an error for the others."""
    from .catalog import resolve_short
    from .model import OpenAIModel

    short = resolve_short(name, base_url=base_url)
    if short is not None:
        name, base_url = short.name, short.base_url
        api_key = api_key or ("sk-local" if base_url else None)
    if profile is not None and not in_process_local(name, base_url):
        raise ConfigError("--profile", "applies to the in-process local model (--model local or local:PATH), "
                          f"not to {name!r}", hint="leave it out")  # fmt: skip
    if name == "scripted":
        from .scripted import ScriptedModel

        return ScriptedModel()
    if name == "local" or name.startswith("local:"):
        url = base_url or os.environ.get("SANDBOXLITE_LOCAL_URL")
        if url:
            served = name.split(":", 1)[1] if ":" in name else "local"
            return OpenAIModel(served, base_url=url, api_key=api_key or "sk-local", temperature=temperature,
                               top_p=top_p, max_tokens=max_tokens, seed=seed, extra_body=extra_body,
                               tool_format=tool_format, context_tokens=context_tokens)  # fmt: skip
        from .local import LocalModel, resolve_local

        for option, value in (("--tool-format", tool_format), ("--context-tokens", context_tokens)):
            if value is not None:
                raise ConfigError(option, "applies to a model behind an endpoint; the in-process local model always "
                                  "writes its tool calls as text and knows its context size",
                                  hint="leave it out, or serve the model and give --base-url")  # fmt: skip

        spec = name.split(":", 1)[1] if ":" in name else os.environ.get("SANDBOXLITE_LOCAL_MODEL", "")
        if spec and not Path(spec).expanduser().is_file():
            where = "--model" if ":" in name else "$SANDBOXLITE_LOCAL_MODEL"
            raise ConfigError("model", f"no GGUF model file at {Path(spec).expanduser()} (from {where})",
                              hint="give the path of a .gguf file: --model local:/path/model.gguf "
                              "(`sandboxlite models` lists the local ones)")  # fmt: skip
        given = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "seed": seed,
                 "constrained": constrained, "profile": profile}  # fmt: skip
        options = {k: v for k, v in given.items() if v is not None}
        return LocalModel(resolve_local(name), **options)
    base_url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        raise ConfigError("model", f"{name!r} is not a local model (local, local:/path/model.gguf) nor scripted, "
                          "and no endpoint is given for it",
                          hint=f"a GGUF file: --model local:/path/model.gguf; a server: --model {name} --base-url URL "
                          "(or $OPENAI_BASE_URL; OpenAI itself: --base-url https://api.openai.com/v1)")  # fmt: skip
    return OpenAIModel(
        name,
        base_url=base_url,
        api_key=api_key or os.environ.get("OPENAI_API_KEY"),
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        seed=seed,
        extra_body=extra_body,
        tool_format=tool_format,
        context_tokens=context_tokens,
    )

