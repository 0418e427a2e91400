"""Model files on disk: the Hugging Face cache, Ollama's store, LM Studio's folder, and the paths
in ``$SANDBOXLITE_MODELS``.  Reading only: nothing is downloaded, moved or started.

Where each keeps its files (as each tool writes them):

- Hugging Face hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
  ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``; a repository is
  ``models--ORG--NAME/`` with ``snapshots/<commit>/<file>`` symlinks into ``blobs/``.
- Ollama: ``$OLLAMA_MODELS``, else ``~/.ollama/models`` (and the Linux service's
  ``/usr/share/ollama/.ollama/models``); ``manifests/<registry>/<namespace>/<model>/<tag>`` are
  OCI-style JSON manifests whose ``application/vnd.ollama.image.model`` layer is a GGUF blob at
  ``blobs/sha256-<hex>``.
- LM Studio: ``~/.lmstudio/models/<publisher>/<repo>/*.gguf`` (older: ``~/.cache/lm-studio/models``).
- ``$SANDBOXLITE_MODELS``: files or folders, separated by ``:``.

A split GGUF (``-00001-of-00003.gguf``) is one model: its first part, the parts' sizes summed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from ._found import Found, params_from_name, quant_from_name
from ._gguf import GGUFError, GGUFInfo, read_gguf

MAX_FILES = 2000  # per root: a folder of everything is not scanned forever
MAX_DEPTH = 6
MAX_MANIFEST = 1 << 20
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)


def hf_cache_dirs(env: Mapping[str, str], home: Path) -> list[Path]:
    if env.get("HF_HUB_CACHE"):
        return [Path(env["HF_HUB_CACHE"]).expanduser()]
    if env.get("HF_HOME"):
        return [Path(env["HF_HOME"]).expanduser() / "hub"]
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else home / ".cache"
    return [cache / "huggingface" / "hub"]


def ollama_dirs(env: Mapping[str, str], home: Path, system: bool = True) -> list[Path]:
    if env.get("OLLAMA_MODELS"):
        return [Path(env["OLLAMA_MODELS"]).expanduser()]
    dirs = [home / ".ollama" / "models"]
    if system:
        dirs.append(Path("/usr/share/ollama/.ollama/models"))
    return dirs


def lmstudio_dirs(home: Path) -> list[Path]:
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def gguf_files(root: Path) -> Iterator[Path]:
    """The ``.gguf`` files under ``root`` (symlinks to files followed, folders not), at most
    ``MAX_FILES``, ``MAX_DEPTH`` folders deep; split models once (their first part)."""
    if root.is_file():
        yield root
        return
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath).relative_to(root).parts.__len__() >= MAX_DEPTH:
            dirnames.clear()
        dirnames.sort()
        for name in sorted(filenames):
            if not name.lower().endswith(".gguf"):
                continue
            m = _SPLIT.match(name)
            if m and int(m.group("part")) != 1:
                continue
            count += 1
            if count > MAX_FILES:
                return
            yield Path(dirpath) / name


def _file_entry(path: Path, ref: str, name: str, source: str) -> Found:
    """A ``Found`` for a GGUF file: its header read, a split model's parts summed."""
    size, note = None, ""
    m = _SPLIT.match(path.name)
    parts = [path]
    if m:
        total = int(m.group("total"))
        parts = [path.with_name(f"{m.group('stem')}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]
        have = [p for p in parts if p.is_file()]
        if len(have) < total:
            note = f"incomplete: {len(have)} of {total} parts"
        parts = have
    try:
        info: GGUFInfo | None = read_gguf(path)
    except GGUFError as e:
        info, note = None, f"unreadable: {e}"
    try:
        size = sum(p.stat().st_size for p in parts)
    except OSError:
        pass
    if info is None:
        return Found(ref=ref, name=name, source=source, where=str(path), size=size, kind="unknown", note=note,
                     n_params=params_from_name(name), quantisation=quant_from_name(path.name))  # fmt: skip
    return Found(
        ref=ref, name=name, source=source, where=str(path), size=size,
        quantisation=info.quantisation or quant_from_name(path.name), context_length=info.context_length,
        n_params=info.n_params or params_from_name(name), kind=info.kind, note=note,
        kv_bytes_8k=info.kv_bytes(min(8192, info.context_length or 8192)),
    )  # fmt: skip


def find_hf_cache(env: Mapping[str, str], home: Path) -> list[Found]:
    out: list[Found] = []
    seen: set[str] = set()
    for cache in hf_cache_dirs(env, home):
        if not cache.is_dir():
            continue
        for repo in sorted(cache.glob("models--*")):
            if not (repo / "snapshots").is_dir():
                continue
            repo_name = repo.name[len("models--"):].replace("--", "/")
            # the snapshot refs/main names first, then the others
            main = (repo / "refs" / "main").read_text().strip() if (repo / "refs" / "main").is_file() else ""
            snaps = sorted((repo / "snapshots").iterdir(), key=lambda p: (p.name != main, p.name))
            for snap in snaps:
                for f in gguf_files(snap):
                    real = os.path.realpath(f)
                    if real in seen or not os.path.isfile(real):
                        continue  # a dangling link: a download that did not finish
                    seen.add(real)
                    rel = f.relative_to(snap).as_posix()
                    out.append(_file_entry(f, f"local:{f}", f"{repo_name}/{rel}", "hf-cache"))
    return out


def ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's display name: ``model:tag`` for its own library, else with namespace (and host)."""
    if registry == OLLAMA_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def ollama_blob(store: Path, digest: str) -> Path:
    algo, _, hexd = digest.partition(":")
    new, old = store / "blobs" / f"{algo}-{hexd}", store / "blobs" / f"{algo}:{hexd}"
    return new if new.exists() or not old.exists() else old


def ollama_manifests(store: Path) -> Iterator[tuple[str, Path]]:
    """(display name, manifest path) for each model tag in the Ollama store at ``store``."""
    base = store / "manifests"
    if not base.is_dir():
        return
    for manifest in sorted(base.glob("*/*/*/*")):
        if not manifest.is_file() or manifest.name.startswith("."):
            continue
        registry, namespace, model, tag = manifest.relative_to(base).parts
        yield ollama_name(registry, namespace, model, tag), manifest


def ollama_model_blob(store: Path, manifest: Path) -> tuple[Path | None, str]:
    """The GGUF blob an Ollama manifest names, or (None, why not)."""
    try:
        if manifest.stat().st_size > MAX_MANIFEST:
            return None, "a manifest over 1 MiB"
        doc = json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        return None, f"unreadable manifest: {e}"
    layers = doc.get("layers") if isinstance(doc, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER and isinstance(layer.get("digest"), str):
            blob = ollama_blob(store, layer["digest"])
            return (blob, "") if blob.is_file() else (None, f"its model blob {blob.name} is missing")
    return None, "no model layer (a safetensors or remote model)"


def find_ollama(env: Mapping[str, str], home: Path, system: bool = True) -> list[Found]:
    out: list[Found] = []
    for store in ollama_dirs(env, home, system):
        for name, manifest in ollama_manifests(store):
            blob, why = ollama_model_blob(store, manifest)
            if blob is None:
                out.append(Found(ref=f"ollama:{name}", name=name, source="ollama", where=str(manifest), kind="unknown",
                                 note=why, n_params=params_from_name(name)))  # fmt: skip
                continue
            f = _file_entry(blob, f"ollama:{name}", name, "ollama")
            out.append(f)
    return out


def find_ollama_blob(name: str, env: Mapping[str, str], home: Path, system: bool = True) -> Path | None:
    """The GGUF blob of Ollama model ``name`` (``:latest`` when no tag) in the store, or None."""
    want = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
    for store in ollama_dirs(env, home, system):
        for found, manifest in ollama_manifests(store):
            if found == want:
                return ollama_model_blob(store, manifest)[0]
    return None


def find_lmstudio(home: Path) -> list[Found]:
    out: list[Found] = []
    for root in lmstudio_dirs(home):
        if not root.is_dir():
            continue
        for f in gguf_files(root):
            rel = f.relative_to(root).as_posix()
            out.append(_file_entry(f, f"local:{f}", rel, "lmstudio"))
    return out


def find_paths(env: Mapping[str, str]) -> list[Found]:
    out: list[Found] = []
    for item in filter(None, (env.get("SANDBOXLITE_MODELS") or "").split(os.pathsep)):
        root = Path(item).expanduser()
        if not root.exists():
            out.append(Found(ref="", name=str(root), source="SANDBOXLITE_MODELS", where=str(root), kind="unknown",
                             note="no such file or folder"))  # fmt: skip
            continue
        for f in gguf_files(root):
            out.append(_file_entry(f, f"local:{f}", f.name, "SANDBOXLITE_MODELS"))
    return out
