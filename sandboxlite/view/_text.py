"""Text fit for the page: no terminal escapes, no raw control characters, no lone surrogates,
and no more than a cap (head and tail kept, what was left out said in the text)."""

from __future__ import annotations

import math
import re

TEXT_CAP = 64 << 10  # characters of one text on the page (an output, an argument, a file)
# CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \), and any other two-character ESC sequence
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
_SURROGATES = re.compile("[\ud800-\udfff]")
MARK = "\n[... {n:,} characters left out by the viewer ...]\n"


def _picture(m: re.Match) -> str:
    c = ord(m.group())
    if c < 0x20:
        return chr(0x2400 + c)  # the Unicode control picture: ␛ for ESC
    return "\u2421" if c == 0x7F else f"\\x{c:02x}"


def clean(text: str) -> str:
    """``text`` without terminal escape sequences; other control characters (but newline and tab)
    shown as their control pictures (ESC as ␛); lone surrogates as U+FFFD."""
    text = _SURROGATES.sub("\ufffd", text)
    text = _ESCAPES.sub("", text)
    return _CONTROLS.sub(_picture, text)


def cap(text: str, limit: int = TEXT_CAP) -> tuple[str, bool]:
    """(``text`` cut to about ``limit`` characters, keeping its beginning and end; whether it was cut)."""
    if len(text) <= limit:
        return text, False
    head, tail = limit * 3 // 4, limit // 4
    return text[:head] + MARK.format(n=len(text) - head - tail) + text[len(text) - tail :], True


def decode(data: bytes) -> str:
    """Bytes as text: what is not UTF-8 replaced (U+FFFD)."""
    return data.decode("utf-8", errors="replace")


def fit(text: object, limit: int = TEXT_CAP) -> tuple[str, bool]:
    """``clean`` and ``cap`` any value (None stays ""; a non-str is shown as its str)."""
    if text is None:
        return "", False
    s = text if isinstance(text, str) else str(text)
    s, cut = cap(s, limit)  # first: cleaning 10 MB costs more than cutting it
    return clean(s), cut


def sanitize(value: object, limit: int = TEXT_CAP) -> object:
    """Every string in ``value`` (dicts, lists, keys too) ``fit``; numbers, booleans, None kept."""
    if isinstance(value, str):
        return fit(value, limit)[0]
    if isinstance(value, dict):
        return {fit(str(k), 1024)[0]: sanitize(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [sanitize(v, limit) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN and infinity are no JSON
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return fit(str(value), limit)[0]
