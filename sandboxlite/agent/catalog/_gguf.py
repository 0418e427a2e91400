"""What a GGUF file says about itself, read from its header in pure Python (no llama.cpp).

GGUF (llama.cpp's format, versions 2 and 3): ``GGUF``, a version, the tensor count, the count of
key/value pairs, the pairs (typed values; arrays such as the vocabulary), then one record per
tensor (name, dimensions, type, offset).  ``read_gguf`` reads the pairs it needs and the tensor
shapes (for the parameter count) and skips the rest; it reads at most ``MAX_HEADER`` bytes and
refuses a header that claims more (a damaged or hostile file says so, it never exhausts memory).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

MAX_HEADER = 256 << 20  # a real header (a 256k-token vocabulary, templates) is tens of MiB at most
MAX_STRING = 16 << 20
MAX_COUNT = 1 << 24

# llama.cpp's llama_ftype (general.file_type): the quantisation most tensors have
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
    19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
    26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
    36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}  # fmt: skip

# architectures that are no chat model: embedding and vision encoders, projectors
NOT_CHAT_ARCHS = {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert", "modern-bert",
                  "clip", "t5encoder", "wavtokenizer-dec"}  # fmt: skip
NOT_CHAT_TYPES = {"adapter", "mmproj", "imatrix", "clip-vision"}
_INSTRUCT = re.compile(r"instruct|chat|(?:^|[-_ .])it(?:$|[-_ .])|assistant|hermes|coder", re.IGNORECASE)
_BASE = re.compile(r"(?:^|[-_ .])base(?:$|[-_ .])", re.IGNORECASE)

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# the keys worth keeping (the rest, e.g. the vocabulary, is skipped)
_WANTED = re.compile(r"^general\.(architecture|name|basename|finetune|size_label|file_type|type|quantized_by)$"
                     r"|^tokenizer\.chat_template$"
                     r"|^[\w.-]+\.(context_length|block_count|embedding_length|attention\.head_count(_kv)?"
                     r"|attention\.key_length|attention\.value_length)$")  # fmt: skip


class GGUFError(ValueError):
    """Not a GGUF file, or one whose header cannot be read."""


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF header says: the fields ``sandboxlite models`` shows and ``--model auto`` weighs."""

    path: Path
    size: int  # the file's bytes (about the weights' memory)
    version: int
    architecture: str | None
    name: str | None
    quantisation: str | None  # from general.file_type; None when the file does not say
    context_length: int | None  # what the model was trained for
    n_params: int | None  # summed over the tensors' shapes
    has_chat_template: bool
    kind: str  # "chat" (an instruct/chat model), "base", or "other" (embedding, projector, ...)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)

    def kv_bytes(self, n_ctx: int) -> int | None:
        """The KV cache at ``n_ctx`` tokens in f16 (llama.cpp's default), or None if the header
        lacks the shapes."""
        arch = self.architecture or ""
        m = self.metadata
        layers, embd = m.get(f"{arch}.block_count"), m.get(f"{arch}.embedding_length")
        heads, heads_kv = m.get(f"{arch}.attention.head_count"), m.get(f"{arch}.attention.head_count_kv")
        if not all(isinstance(v, int) and v > 0 for v in (layers, embd, heads)):
            return None
        heads_kv = heads_kv if isinstance(heads_kv, int) and heads_kv > 0 else heads
        head_dim = embd // heads
        k = m.get(f"{arch}.attention.key_length") or head_dim
        v = m.get(f"{arch}.attention.value_length") or head_dim
        return int(layers * n_ctx * heads_kv * (k + v) * 2)


def read_gguf(path: str | Path) -> GGUFInfo:
    """The header of the GGUF file at ``path``; ``GGUFError`` when it is none or is damaged."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            return _read(f, path, size)
    except OSError as e:
        raise GGUFError(f"{path}: {e.strerror or e}") from None
    except (struct.error, UnicodeDecodeError, MemoryError) as e:
        raise GGUFError(f"{path}: a damaged GGUF header ({e})") from None


class _Reader:
    def __init__(self, f: BinaryIO, limit: int) -> None:
        self.f, self.left = f, limit

    def take(self, n: int) -> bytes:
        if n > self.left:
            raise GGUFError(f"the header runs past {MAX_HEADER >> 20} MiB or the end of the file")
        b = self.f.read(n)
        if len(b) != n:
            raise GGUFError("the file ends inside its header")
        self.left -= n
        return b

    def skip(self, n: int) -> None:
        if n > self.left:
            raise GGUFError(f"the header runs past {MAX_HEADER >> 20} MiB or the end of the file")
        self.f.seek(n, 1)
        self.left -= n

    def scalar(self, t: int) -> Any:
        fmt = _SCALARS[t]
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self, keep: bool = True) -> str | None:
        n = self.u64()
        if n > MAX_STRING:
            raise GGUFError(f"a string of {n} bytes in the header")
        if not keep:
            self.skip(n)
            return None
        return self.take(n).decode("utf-8", "replace")

    def value(self, t: int, keep: bool) -> Any:
        if t in _SCALARS:
            if keep:
                return self.scalar(t)
            self.skip(struct.calcsize(_SCALARS[t]))
            return None
        if t == _STRING:
            return self.string(keep)
        if t == _ARRAY:
            inner, n = self.u32(), self.u64()
            if n > MAX_COUNT:
                raise GGUFError(f"an array of {n} items in the header")
            if inner in _SCALARS and not keep:  # fixed width: skip at once
                self.skip(n * struct.calcsize(_SCALARS[inner]))
                return None
            items = [self.value(inner, keep) for _ in range(n)]
            return items if keep else None
        raise GGUFError(f"an unknown value type {t} in the header")


def _read(f: BinaryIO, path: Path, size: int) -> GGUFInfo:
    r = _Reader(f, min(MAX_HEADER, size))
    if r.take(4) != b"GGUF":
        raise GGUFError(f"{path} is not a GGUF file (no GGUF magic)")
    version = r.u32()
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version} (this reader knows 2 and 3)")
    n_tensors, n_kv = r.u64(), r.u64()
    if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
        raise GGUFError(f"{path}: a header that claims {n_tensors} tensors and {n_kv} keys")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string() or ""
        t = r.u32()
        keep = bool(_WANTED.match(key))
        v = r.value(t, keep)
        if keep:
            meta[key] = v
    n_params = 0
    for _ in range(n_tensors):
        r.string(keep=False)
        dims = r.u32()
        if dims > 8:
            raise GGUFError(f"{path}: a tensor of {dims} dimensions")
        count = 1
        for _ in range(dims):
            count *= r.u64()
        r.skip(4 + 8)  # type, offset
        n_params += count
    arch = meta.get("general.architecture")
    ftype = meta.get("general.file_type")
    ctx = meta.get(f"{arch}.context_length") if arch else None
    name = meta.get("general.name") or meta.get("general.basename")
    return GGUFInfo(
        path=path, size=size, version=version, architecture=arch, name=name,
        quantisation=FILE_TYPES.get(ftype, f"type {ftype}") if isinstance(ftype, int) else None,
        context_length=ctx if isinstance(ctx, int) else None, n_params=n_params or None,
        has_chat_template=bool(meta.get("tokenizer.chat_template")),
        kind=_kind(meta, path), metadata=meta,
    )  # fmt: skip


def _kind(meta: dict[str, Any], path: Path) -> str:
    """"other" for what is no chat model; "chat" when its names say instruct/chat (or it has a
    chat template and no name says base); else "base"."""
    arch = str(meta.get("general.architecture") or "")
    if arch in NOT_CHAT_ARCHS or str(meta.get("general.type") or "") in NOT_CHAT_TYPES or "mmproj" in path.name.lower():
        return "other"
    names = " ".join(str(meta.get(k) or "") for k in ("general.name", "general.finetune", "general.basename"))
    names += " " + path.name
    if _INSTRUCT.search(names):
        return "chat"
    if meta.get("tokenizer.chat_template") and not _BASE.search(names):
        return "chat"
    return "base"


def write_gguf(path: str | Path, metadata: dict[str, Any], tensors: list[tuple[str, list[int]]] = ()) -> Path:
    """A small GGUF file (header only, no tensor data) with ``metadata`` and ``tensors`` (name,
    shape): for tests and for laying out fake model stores.  Values: str, bool, int (uint32 below
    2**32, else uint64), float, lists of str or int."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))

    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    def v(x: Any) -> bytes:
        if isinstance(x, bool):
            return struct.pack("<I?", 7, x)
        if isinstance(x, int):
            return struct.pack("<IQ", 10, x) if x >= 1 << 32 or x < 0 else struct.pack("<II", 4, x)
        if isinstance(x, float):
            return struct.pack("<If", 6, x)
        if isinstance(x, str):
            return struct.pack("<I", _STRING) + s(x)
        if isinstance(x, list):
            if all(isinstance(i, str) for i in x):
                return struct.pack("<IIQ", _ARRAY, _STRING, len(x)) + b"".join(s(i) for i in x)
            return struct.pack("<IIQ", _ARRAY, 4, len(x)) + b"".join(struct.pack("<I", i) for i in x)
        raise TypeError(f"no GGUF value for {x!r}")

    for k, x in metadata.items():
        out += s(k) + v(x)
    for name, shape in tensors:
        out += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", 0, 0)
    path = Path(path)
    path.write_bytes(bytes(out))
    return path
