"""The page: one HTML file, the data embedded as JSON that no content can close, rendered by the
inline script of ``_page``; it names no URL and fetches nothing (its CSP forbids it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._eval_page import EVAL_CSS, EVAL_JS
from ._page import CSP, CSS, JS, LIVE_CSP, LIVE_JS
from ._text import sanitize

# in the JSON text these can only occur inside strings: escaped, no content can end the script
# element or open a comment, and U+2028/2029 cannot end a line of script
_ESCAPE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def embed_json(data: object) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">``."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.translate(_ESCAPE)


def render_html(data: dict, *, live: bool = False) -> str:
    """The page for ``data`` (a ``load_run`` dict, or a ``load_eval`` one: ``kind`` "eval").  The
    title is the page's own (the script sets the run's): nothing of the data is outside the JSON
    element.  ``live``: the page of ``sandboxlite view --serve``, which asks its server for the data
    again every second and renders what changed (its CSP allows requests to its own origin only)."""
    data = sanitize(data)  # load_run's already is; any other dict gets the same treatment
    is_eval = isinstance(data, dict) and data.get("kind") == "eval"
    css, js, what = (CSS + EVAL_CSS, EVAL_JS, "eval") if is_eval else (CSS, JS, "run")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{LIVE_CSP if live else CSP}\">\n"
        "<meta name=\"referrer\" content=\"no-referrer\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>sandboxlite {what}</title>\n<style>{css}</style>\n</head>\n<body>\n"
        "<header id=\"top\"></header>\n<main id=\"app\"></main>\n"
        f"<noscript>This page needs JavaScript to show the {what} (it runs only its own inline script).</noscript>\n"
        f"<script type=\"application/json\" id=\"data\">{embed_json(data)}</script>\n"
        f"<script>{js}</script>\n" + (f"<script>{LIVE_JS}</script>\n" if live else "") + "</body>\n</html>\n"
    )


def write_html(data: dict, out: str | os.PathLike) -> Path:
    """Write the page for ``data`` to ``out`` (atomically: a temporary file renamed over it); returns
    the path written."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(render_html(data), encoding="utf-8")
    os.replace(tmp, out)
    return out
