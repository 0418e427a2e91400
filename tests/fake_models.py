"""Model stores and servers laid out as the real tools lay them out, for the catalog's tests and
bench/models_demo.py: a Hugging Face hub cache (blobs, snapshots of symlinks, refs/main), an
Ollama store (OCI-style manifests, ``blobs/sha256-<hex>``), an LM Studio folder; loopback servers
shaped as Ollama (``/api/tags``, ``/api/show``, ``/v1/models``, ``/v1/chat/completions``),
llama-server (``/props``, ``meta`` in ``/v1/models``), vLLM and LM Studio (``/api/v0/models``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from .fake_openai import FakeOpenAIServer

from sandboxlite.agent.catalog import write_gguf


def tiny_gguf(path: Path, name: str, params: int, *, arch: str = "llama", ctx: int = 32768, file_type: int = 15,
              chat_template: bool = True, layers: int = 36, embd: int = 2560, heads: int = 32, heads_kv: int = 8,
              extra: dict | None = None) -> Path:  # fmt: skip
    """A header-only GGUF that says it is ``name`` with ``params`` parameters (one tensor of that
    many elements; no weights: it cannot be run, only read)."""
    meta = {"general.architecture": arch, "general.name": name, "general.file_type": file_type,
            f"{arch}.context_length": ctx, f"{arch}.block_count": layers, f"{arch}.embedding_length": embd,
            f"{arch}.attention.head_count": heads, f"{arch}.attention.head_count_kv": heads_kv}  # fmt: skip
    if chat_template:
        meta["tokenizer.chat_template"] = "{% for m in messages %}{{ m.content }}{% endfor %}"
    meta.update(extra or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_gguf(path, meta, [("weights", [params])])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _place(src: Path, dst: Path) -> None:
    """``src`` at ``dst``: a hard link when both are on one file system, else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def hf_cache(hub: Path, repos: dict[str, dict[str, Path]], commit: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """A hub cache at ``hub``: for each ``org/name`` its files (name -> a file to place) as the hub
    writes them: ``models--org--name/blobs/<sha256>``, ``snapshots/<commit>/<file>`` a relative
    symlink to the blob, ``refs/main`` holding the commit."""
    for repo, files in repos.items():
        base = hub / ("models--" + repo.replace("/", "--"))
        (base / "refs").mkdir(parents=True, exist_ok=True)
        (base / "refs" / "main").write_text(commit)
        for name, src in files.items():
            blob = base / "blobs" / _sha256(src)
            if not blob.exists():
                _place(src, blob)
            link = base / "snapshots" / commit / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    return hub


def ollama_store(store: Path, models: dict[str, Path]) -> Path:
    """An Ollama store at ``store``: for each name (``smollm2:135m``, ``someone/tiny:latest``) a
    manifest under ``manifests/registry.ollama.ai/<namespace>/<model>/<tag>`` whose model layer is
    the GGUF at ``blobs/sha256-<hex>``, with template and params layers as ``ollama pull`` leaves."""
    blobs = store / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)

    def blob_of(data: bytes | Path) -> dict:
        if isinstance(data, Path):
            digest, size = _sha256(data), data.stat().st_size
            if not (blobs / f"sha256-{digest}").exists():
                _place(data, blobs / f"sha256-{digest}")
        else:
            digest, size = hashlib.sha256(data).hexdigest(), len(data)
            (blobs / f"sha256-{digest}").write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": size}

    for name, gguf in models.items():
        path, _, tag = name.rpartition(":")
        namespace, _, model = path.rpartition("/")
        manifest = store / "manifests" / "registry.ollama.ai" / (namespace or "library") / model / (tag or "latest")
        manifest.parent.mkdir(parents=True, exist_ok=True)
        config = blob_of(json.dumps({"model_format": "gguf", "model_family": "llama"}).encode())
        layers = [
            {"mediaType": "application/vnd.ollama.image.model", **blob_of(gguf)},
            {"mediaType": "application/vnd.ollama.image.template", **blob_of(b"{{ .Prompt }}")},
            {"mediaType": "application/vnd.ollama.image.params", **blob_of(b'{"stop": ["<|im_end|>"]}')},
        ]
        manifest.write_text(json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **config}, "layers": layers,
        }))  # fmt: skip
    return store


def lmstudio_dir(home: Path) -> Path:
    """LM Studio's models folder under ``home`` (``~/.lmstudio/models``)."""
    return home / ".lmstudio" / "models"


def fake_ollama(models: dict[str, dict], responses: list | None = None, port: int = 0) -> FakeOpenAIServer:
    """A loopback server shaped as Ollama serving ``models`` (name -> {"size", "parameter_size",
    "quantization_level", "context_length", "family"}): ``/api/tags``, ``/api/version``, ``POST
    /api/show``, and its OpenAI-compatible ``/v1`` (``responses`` scripted)."""
    tags = {"models": [{"name": n, "model": n, "modified_at": "2026-12-01T10:00:00Z", "size": m.get("size", 0),
                        "digest": hashlib.sha256(n.encode()).hexdigest(),
                        "details": {"format": "gguf", "family": m.get("family", "llama"),
                                    "families": [m.get("family", "llama")],
                                    "parameter_size": m.get("parameter_size", ""),
                                    "quantization_level": m.get("quantization_level", "")}}
                       for n, m in models.items()]}  # fmt: skip

    def show(body: dict) -> dict:
        m = models.get((body or {}).get("model") or (body or {}).get("name"), {})
        return {"details": {}, "model_info": {"general.architecture": "llama",
                                              "llama.context_length": m.get("context_length", 4096)}}  # fmt: skip

    return FakeOpenAIServer(
        responses, port=port,
        models=[{"id": n, "object": "model", "created": 0, "owned_by": "library"} for n in models],
        routes={"GET /api/tags": tags, "GET /api/version": {"version": "0.13.0"}, "POST /api/show": show},
    )  # fmt: skip


def fake_llama_server(model_id: str, n_params: int, n_ctx: int = 8192, responses: list | None = None,
                      port: int = 0) -> FakeOpenAIServer:  # fmt: skip
    """A loopback server shaped as llama.cpp's llama-server serving one GGUF."""
    return FakeOpenAIServer(
        responses, port=port, model=model_id,
        models=[{"id": model_id, "object": "model", "created": 0, "owned_by": "llamacpp",
                 "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx_train": 8192, "n_embd": 576,
                          "n_params": n_params, "size": n_params // 2}}],
        routes={"GET /props": {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1,
                               "model_path": f"/models/{model_id}"}, "GET /health": {"status": "ok"}},
    )  # fmt: skip


def fake_vllm(model_id: str, max_model_len: int = 32768, responses: list | None = None) -> FakeOpenAIServer:
    return FakeOpenAIServer(responses, model=model_id, models=[
        {"id": model_id, "object": "model", "created": 0, "owned_by": "vllm", "root": model_id,
         "max_model_len": max_model_len}])  # fmt: skip


def fake_lmstudio(models: list[dict], responses: list | None = None) -> FakeOpenAIServer:
    """LM Studio: ``/v1/models`` and its own ``/api/v0/models`` (type, quantization, state,
    max_context_length)."""
    return FakeOpenAIServer(
        responses, models=[{"id": m["id"], "object": "model", "owned_by": "organization_owner"} for m in models],
        routes={"GET /api/v0/models": {"object": "list", "data": [{"object": "model", **m} for m in models]}},
    )  # fmt: skip
