"""What an evaluation's results depend on, and its fingerprint: the guard of a safe resume.

``run_settings`` gathers every setting that changes a task's result (the model and its endpoint,
the sampling, the limits, the prompts, the scoring, the root filesystem and its digest, the
network, the isolation, sandboxlite's version, the selection seed); ``fingerprint`` is a short
hash of them.  ``data_digests`` hashes each domain's items (a changed dataset is a changed run).
What only selects *which* tasks run (domains, modes, ``--limit``, ``--ids``, repeats, workers) is
not part of it: a run extended with more items or another mode resumes.

``differences(old, new)`` lists what changed, for the message that refuses a resume.  All of it
is pure, given the facts (``rootfs_identity`` reads the image's manifest).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import __version__

FINGERPRINT_CHARS = 8


def _sha(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def rootfs_identity(spec: str) -> dict[str, Any]:
    """``{"name", "digest"}`` of the root filesystem ``spec`` stands for (``auto`` resolved).

    An image has the digest of its manifest; a directory or the host has none (``None``).
    """
    from ..images import auto_choice, image_root
    from ..images.manifest import read_manifest

    name = auto_choice()[0] if spec == "auto" else spec
    if name == "host" or "/" in name:
        return {"name": name, "digest": None}
    try:
        digest = read_manifest(image_root(name).parent).get("digest")
    except Exception:  # a missing image fails later, where the sandbox starts, with its own message
        digest = None
    return {"name": name, "digest": digest}


def prompt_digests(modes: tuple[str, ...] = ("sandbox", "vanilla"), prompt: str | None = None,
                   profile: str = "standard") -> dict[str, str]:  # fmt: skip
    from ..agent.prompts import PromptTemplate

    out = {}
    for mode in modes:
        t = PromptTemplate.load(prompt, mode=mode, profile=profile)
        out[mode] = f"{t.source} sha256:{_sha([t.system, t.instance])[:16]}"
    return out


def model_identity(model: Any, name: str) -> dict[str, Any]:
    """The model's name, endpoint, sampling settings and (local models) its file."""
    info = getattr(model, "info", None) or {}
    ident: dict[str, Any] = {"name": name, "endpoint": getattr(model, "endpoint", None),
                             "sampling": dict(getattr(model, "sampling", None) or {})}  # fmt: skip
    if info.get("path"):
        path = Path(info["path"])
        try:
            ident["file"] = {"name": path.name, "bytes": path.stat().st_size}
        except OSError:
            ident["file"] = {"name": path.name}
    return ident


def run_settings(cfg: Any, model: Any, *, model_name: str, judge: Any = None,
                 environ: Mapping[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Everything of ``cfg`` (an ``EvalConfig``) and the model that changes results."""
    from ..agent.run import model_profile

    env = os.environ if environ is None else environ
    judge_model = getattr(judge, "model", None)
    return {
        "model": model_identity(model, model_name),
        "judge": model_identity(judge_model, getattr(judge_model, "name", "?")) if judge is not None else None,
        "limits": {"max_steps": cfg.max_steps, "timeout_s": cfg.timeout_s, "token_budget": cfg.token_budget},
        "prompts": prompt_digests(prompt=cfg.prompt, profile=model_profile(model)),
        "scoring": cfg.scoring,
        "rootfs": rootfs_identity(cfg.rootfs),
        "network": cfg.network,
        "isolation": env.get("SANDBOXLITE_ISOLATION") or "auto",
        "seed": cfg.seed,
        "sandboxlite": __version__,
    }


def fingerprint(settings: dict[str, Any]) -> str:
    return _sha(settings)[:FINGERPRINT_CHARS]


def data_digests(items_by_domain: dict[str, list[Any]]) -> dict[str, str]:
    """domain -> a digest of its items (id, query, reference, files), as loaded."""
    out = {}
    for domain, items in items_by_domain.items():
        rows = sorted([i.id, i.query, i.reference, i.files, i.input_path] for i in items)
        out[domain] = "sha256:" + _sha(rows)[:16]
    return out


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"limits.max_steps: 50 -> 10"`` for every setting that differs (a missing one as ``-``)."""
    a, b = _flatten(old), _flatten(new)
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "-") != b.get(key, "-"):
            out.append(f"{key}: {json.dumps(a.get(key, '-'), default=str)} -> {json.dumps(b.get(key, '-'), default=str)}")
    return out


def data_differences(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """Domains whose data changed (a domain only one side has is no difference)."""
    return [f"data.{d}: {old[d]} -> {new[d]}" for d in sorted(set(old) & set(new)) if old[d] != new[d]]
