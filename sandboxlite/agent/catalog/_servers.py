"""Model servers answering on loopback: Ollama, llama.cpp's llama-server, vLLM, LM Studio.

Each port is asked a few GET requests (``/v1/models`` and what tells the servers apart: Ollama's
``/api/tags``, llama-server's ``/props``, LM Studio's ``/api/v0/models``; Ollama's ``POST
/api/show`` for a model's context), on 127.0.0.1 only, all ports at once, each with a short
timeout; a port nobody listens on costs a refused connect.  Nothing is started, nothing leaves
the machine, no answer over ``MAX_BODY`` is read.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ._found import Found, params_from_name, quant_from_name

# (port, the server usually there)
USUAL_PORTS: tuple[tuple[int, str], ...] = ((11434, "ollama"), (8080, "llama-server"), (8000, "vllm"), (1234, "lmstudio"))
LOOPBACK = "127.0.0.1"
TIMEOUT_S = 0.5  # per request; loopback answers in milliseconds or not at all
MAX_BODY = 4 << 20
MAX_SHOW = 32  # Ollama models asked for their context (one POST each)


@dataclass
class Server:
    """A server that answered on ``port``: its kind and the models it serves."""

    port: int
    kind: str  # "ollama", "llama-server", "vllm", "lmstudio", "openai-compatible"
    models: list[Found] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"


def ollama_port(env: Mapping[str, str]) -> int:
    """Ollama's port: ``$OLLAMA_HOST``'s when it names loopback (``127.0.0.1:11500``,
    ``http://localhost:11500``), else 11434."""
    host = (env.get("OLLAMA_HOST") or "").strip()
    if host:
        parts = urlsplit(host if "://" in host else f"http://{host}")
        try:
            if parts.hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0") and parts.port:
                return parts.port
        except ValueError:
            pass
    return 11434


def ports_to_probe(env: Mapping[str, str]) -> list[tuple[int, str]]:
    """The usual ports (Ollama's from ``$OLLAMA_HOST``) and those in ``$SANDBOXLITE_MODEL_PORTS``
    (``8081,9000``), each once."""
    usual = [(ollama_port(env) if kind == "ollama" else port, kind) for port, kind in USUAL_PORTS]
    extra = []
    for item in filter(None, (env.get("SANDBOXLITE_MODEL_PORTS") or "").replace(" ", "").split(",")):
        if not item.isdigit() or not 0 < int(item) < 65536:
            from ...errors import ConfigError

            raise ConfigError("$SANDBOXLITE_MODEL_PORTS", f"{item!r} is not a port", hint="ports, comma-separated: 8081,9000")
        extra.append((int(item), "?"))
    seen: set[int] = set()
    out = []
    for port, kind in usual + extra:
        if port not in seen:
            seen.add(port)
            out.append((port, kind))
    return out


def _request(port: int, method: str, path: str, body: dict | None = None, timeout: float = TIMEOUT_S) -> Any:
    """The JSON a loopback server answers, or None (refused, timed out, not 200, not JSON, too big)."""
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "Content-Type": "application/json"} if data else {"Accept": "application/json"}
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        if r.status != 200:
            return None
        raw = r.read(MAX_BODY + 1)
        if len(raw) > MAX_BODY:
            return None
        return json.loads(raw)
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def _data(doc: Any) -> list[dict]:
    items = doc.get("data") if isinstance(doc, dict) else None
    return [m for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)] if isinstance(items, list) else []


def probe(port: int, timeout: float = TIMEOUT_S, ollama_at: int = 11434) -> Server | None:
    """What answers on 127.0.0.1:``port``, or None.  An Ollama on ``ollama_at`` (the port
    ``ollama:NAME`` reaches) names its models ``ollama:NAME``; elsewhere ``server:URL#NAME``."""
    openai = _request(port, "GET", "/v1/models", timeout=timeout)
    tags = _request(port, "GET", "/api/tags", timeout=timeout)
    if isinstance(tags, dict) and isinstance(tags.get("models"), list):
        return _ollama(port, tags, timeout, short=port == ollama_at)
    listed = _data(openai)
    if openai is None:
        return None
    if any(m.get("owned_by") == "vllm" for m in listed):
        return _vllm(port, listed)
    props = _request(port, "GET", "/props", timeout=timeout)
    if isinstance(props, dict) and ("default_generation_settings" in props or "model_path" in props):
        return _llama_server(port, listed, props)
    v0 = _request(port, "GET", "/api/v0/models", timeout=timeout)
    if _data(v0):
        return _lmstudio(port, _data(v0))
    server = Server(port, "openai-compatible")
    for m in listed:
        server.models.append(_served(server, m["id"], n_params=params_from_name(m["id"])))
    return server


def _served(server: Server, model_id: str, *, ref: str | None = None, **kw: Any) -> Found:
    kind = kw.pop("kind", None) or ("other" if "embed" in model_id.lower() else "unknown")
    return Found(ref=ref or f"server:{server.base_url}#{model_id}", name=model_id, source=f"server:{server.kind}",
                 where=server.base_url, kind=kind, quantisation=kw.pop("quantisation", None) or quant_from_name(model_id),
                 **kw)  # fmt: skip


def _ollama(port: int, tags: dict, timeout: float, short: bool) -> Server:
    server = Server(port, "ollama")
    for i, m in enumerate(x for x in tags["models"] if isinstance(x, dict) and isinstance(x.get("name"), str)):
        name = m["name"]
        details = m.get("details") if isinstance(m.get("details"), dict) else {}
        ctx = None
        if i < MAX_SHOW:
            show = _request(port, "POST", "/api/show", {"model": name}, timeout=timeout)
            info = show.get("model_info") if isinstance(show, dict) else None
            if isinstance(info, dict):
                ctx = next((v for k, v in info.items() if k.endswith(".context_length") and isinstance(v, int)), None)
        families = " ".join(str(f) for f in (details.get("families") or []) if f) + " " + str(details.get("family") or "")
        kind = "other" if ("bert" in families or "embed" in name.lower()) else "chat"
        server.models.append(_served(
            server, name, ref=f"ollama:{name}" if short else None, kind=kind,
            size=m.get("size") if isinstance(m.get("size"), int) else None,
            quantisation=details.get("quantization_level") or None, context_length=ctx,
            n_params=params_from_name(str(details.get("parameter_size") or "")) or params_from_name(name),
        ))  # fmt: skip
    return server


def _vllm(port: int, listed: list[dict]) -> Server:
    server = Server(port, "vllm")
    for m in listed:
        ctx = m.get("max_model_len") if isinstance(m.get("max_model_len"), int) else None
        server.models.append(_served(server, m["id"], context_length=ctx, n_params=params_from_name(m["id"])))
    return server


def _llama_server(port: int, listed: list[dict], props: dict) -> Server:
    server = Server(port, "llama-server")
    settings = props.get("default_generation_settings") if isinstance(props.get("default_generation_settings"), dict) else {}
    n_ctx = settings.get("n_ctx") if isinstance(settings.get("n_ctx"), int) else None
    for m in listed:
        meta = m.get("meta") if isinstance(m.get("meta"), dict) else {}
        params = meta.get("n_params") if isinstance(meta.get("n_params"), int) else params_from_name(m["id"])
        server.models.append(_served(server, m["id"], kind="chat", context_length=n_ctx or meta.get("n_ctx_train"),
                                     n_params=params, size=meta.get("size") if isinstance(meta.get("size"), int) else None))  # fmt: skip
    return server


def _lmstudio(port: int, listed: list[dict]) -> Server:
    server = Server(port, "lmstudio")
    for m in listed:
        kind = "other" if m.get("type") == "embeddings" else "chat"
        note = "" if m.get("state") in (None, "loaded") else f"{m.get('state')} (LM Studio loads it on first use)"
        ctx = m.get("max_context_length") if isinstance(m.get("max_context_length"), int) else None
        server.models.append(_served(server, m["id"], kind=kind, quantisation=m.get("quantization") or None,
                                     context_length=ctx, n_params=params_from_name(m["id"]), note=note))  # fmt: skip
    return server


def find_servers(env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_S) -> list[Server]:
    """The servers answering on the usual loopback ports (and ``$SANDBOXLITE_MODEL_PORTS``), in
    port order of ``ports_to_probe``."""
    env = os.environ if env is None else env
    ports = ports_to_probe(env)
    with ThreadPoolExecutor(max_workers=len(ports)) as pool:
        found = list(pool.map(lambda p: probe(p[0], timeout, ollama_port(env)), ports))
    return [s for s in found if s is not None]


def served_models(base_url: str, timeout: float = 2.0) -> list[str] | None:
    """The model ids an OpenAI-compatible server at ``base_url`` lists (``GET {base_url}/models``),
    or None when it does not answer.  Any host (a ``server:URL`` the user named), plain HTTP or
    HTTPS."""
    parts = urlsplit(base_url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    try:
        conn = cls(parts.hostname or "", parts.port, timeout=timeout)
    except ValueError:
        return None
    try:
        conn.request("GET", parts.path.rstrip("/") + "/models", headers={"Accept": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return None
        raw = r.read(MAX_BODY + 1)
        return [m["id"] for m in _data(json.loads(raw))] if len(raw) <= MAX_BODY else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()
