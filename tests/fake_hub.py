"""A loopback server with the Hugging Face hub's file URL layout, for ``sandboxlite data pull``.

``GET|HEAD /datasets/<repo_id>/resolve/<revision>/<path>`` answers with the file and the headers
``huggingface_hub`` requires of a hub (``X-Repo-Commit``, ``ETag``, ``Content-Length``); an unknown
file is a 404 with ``X-Error-Code: EntryNotFound``.  With ``token`` set, a request without
``Authorization: Bearer <token>`` is a 401.  Every request is recorded."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

COMMIT = "5a1dbd0c0ffee0123456789abcdef0123456789a"


class FakeHub:
    def __init__(self, files: dict[tuple[str, str], bytes], *, token: str | None = None) -> None:
        self.files = dict(files)
        self.token = token
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _serve(self, *, body: bool) -> None:
                auth = self.headers.get("Authorization")
                hub.requests.append((self.command, self.path, auth))
                if hub.token is not None and auth != f"Bearer {hub.token}":
                    return self._error(401, "RepoNotFound" if auth is None else "GatedRepo")
                parts = unquote(self.path.split("?")[0]).split("/")
                # "", "datasets", org, name, "resolve", revision, path...
                if len(parts) < 7 or parts[1] != "datasets" or parts[4] != "resolve":
                    return self._error(404, "RepoNotFound")
                repo, revision, path = f"{parts[2]}/{parts[3]}", parts[5], "/".join(parts[6:])
                data = hub.files.get((repo, path))
                if revision not in ("main", COMMIT) or data is None:
                    return self._error(404, "EntryNotFound")
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _error(self, code: int, error_code: str) -> None:
                msg = f"{error_code}: {self.path}".encode()
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                if error_code == "EntryNotFound":  # the repository exists: the hub names its commit
                    self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Content-Length", str(len(msg)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(msg)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.server.shutdown()
        self.server.server_close()
