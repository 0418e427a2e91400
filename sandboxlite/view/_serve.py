"""``sandboxlite view --serve``: the page on loopback while a run or an eval is still writing.

The server answers on 127.0.0.1 only and writes nothing.  Routes (GET):

- ``/`` (or ``/view.html``): the live page of PATH (a run folder, a trajectory file, an eval folder);
- ``/data.json``: its data now, as the page embeds it (the page asks every second and renders
  again when it changed: new steps appear without a reload);
- for an eval, ``/<trajectory folder>/view.html`` and ``.../data.json``: a run of it, live as well
  (the eval table's links).  The folder must be inside PATH, reached through no symlink, and hold
  a trajectory.json; anything else is 404.

A request whose ``Host`` is not the server's own loopback address is refused (403): a web page
elsewhere cannot read the trajectories through DNS rebinding.  Data is read again when its file
changed, and at most every ``REFRESH_S`` seconds otherwise.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError
from ._eval import is_eval_dir, load_eval
from ._html import embed_json, render_html
from ._load import load_run, resolve
from ._page import LIVE_CSP
from ._text import sanitize

REFRESH_S = 5.0  # data older than this is read again even when its file did not change
HINT_PORT = "choose another port (--serve PORT), or --serve 0 for any free one"


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
    except OSError:
        return ()
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class _Source:
    """One thing the server shows (the root, or one trajectory folder of an eval): its data,
    loaded again when its stamp file changed or it is older than ``REFRESH_S``."""

    def __init__(self, load: Callable[[], dict], stamp_file: Path) -> None:
        self._load, self._stamp_file = load, stamp_file
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._at = 0.0
        self._data: dict = {}

    def data(self) -> dict:
        with self._lock:
            key = _stamp(self._stamp_file)
            if key != self._key or time.monotonic() - self._at > REFRESH_S:
                self._data = sanitize(self._load())
                self._key, self._at = key, time.monotonic()
            return self._data


class ViewServer(ThreadingHTTPServer):
    """The live view of ``path`` on ``127.0.0.1:port`` (0: any free port; ``server_port`` says)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: str | os.PathLike, port: int = 0) -> None:
        root = Path(path)
        self.is_eval = is_eval_dir(root)
        if self.is_eval:
            self.root = root
            top = _Source(lambda: load_eval(root, page_dir=root), root / "results.jsonl")
        else:
            traj, _ = resolve(root)  # ConfigError for a PATH that is neither
            self.root = root
            top = _Source(lambda: load_run(root), traj)
        self.sources: dict[str, _Source] = {"": top}
        self._sources_lock = threading.Lock()
        try:
            super().__init__(("127.0.0.1", port), _Handler)
        except OSError as e:
            raise ConfigError("--serve", f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}",
                              hint=HINT_PORT) from None  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/"

    def source(self, rel: str) -> _Source | None:
        """The source for ``rel`` ("" the root; else an eval's trajectory folder), or None."""
        if rel == "":
            return self.sources[""]
        if not self.is_eval:
            return None
        with self._sources_lock:
            if rel in self.sources:
                return self.sources[rel]
            folder = _inside(self.root, rel)
            if folder is None:
                return None
            src = self.sources[rel] = _Source(lambda: load_run(folder), folder / "trajectory.json")
            return src


def _inside(root: Path, rel: str) -> Path | None:
    """``root/rel`` when it is a folder inside ``root`` reached through no symlink and holding a
    regular trajectory.json; else None."""
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("", ".", "..") or "\0" in p for p in parts):
        return None
    at = root
    for p in parts:
        at = at / p
        try:
            if not stat.S_ISDIR(os.lstat(at).st_mode):
                return None
        except OSError:
            return None
    try:
        st = os.lstat(at / "trajectory.json")
    except OSError:
        return None
    return at if stat.S_ISREG(st.st_mode) else None


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "sandboxlite-view"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        pass  # quiet: the CLI says where it serves

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", LIVE_CSP)
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").lower()
        port = self.server.server_port
        return host in (f"127.0.0.1:{port}", f"localhost:{port}")

    def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        if not self._host_ok():
            self._send(403, b"sandboxlite view: only http://127.0.0.1:PORT/ may ask\n", "text/plain; charset=utf-8")
            return
        path = unquote(urlsplit(self.path).path)
        if path.endswith("/"):
            path += "view.html"
        folder, _, leaf = path.lstrip("/").rpartition("/")
        src = self.server.source(folder) if leaf in ("view.html", "data.json") else None
        if src is None:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")
            return
        try:
            data = src.data()
        except ConfigError as e:
            self._send(503, f"{e}\n".encode(), "text/plain; charset=utf-8")
            return
        if leaf == "data.json":
            self._send(200, embed_json(data).encode(), "application/json; charset=utf-8")
        else:
            self._send(200, render_html(data, live=True).encode(), "text/html; charset=utf-8")
