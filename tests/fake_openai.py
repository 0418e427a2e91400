"""A scripted OpenAI-compatible HTTP server, for testing model code through the real client.

::

    with FakeOpenAIServer([FakeOpenAIServer.tool_call_reply("execute_bash", {"command": "ls"}),
                           FakeOpenAIServer.error(500, "boom"),
                           FakeOpenAIServer.text_reply("done")]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")
        ...
        assert srv.requests[0]["messages"][0]["role"] == "system"

Each POST /v1/chat/completions takes the next scripted response: a chat.completion
body (a dict), an ``error(...)``, ``slow(seconds, response)``, ``disconnect()``, or a
callable ``(request_body) -> response``.  When the script runs out the server answers
400 "script exhausted" (not retried by clients, so a test fails fast).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
_ids = itertools.count(1)


@dataclass
class ScriptedError:
    status: int
    body: dict
    headers: dict = field(default_factory=dict)


@dataclass
class Slow:
    seconds: float
    response: Any


class Disconnect:
    """Close the connection without answering."""


class FakeOpenAIServer:
    def __init__(self, responses: list | None = None, *, model: str = "fake-model", models: list[dict] | None = None,
                 routes: dict[str, Any] | None = None, port: int = 0) -> None:
        self.model = model
        # GET /v1/models lists these (default: one entry for ``model``); ``routes`` answers other
        # paths, "GET /api/tags" or "POST /api/show": a JSON body or a callable (request body) -> body
        self.models = models
        self.routes = dict(routes or {})
        self.bind_port = port
        self.requests: list[dict] = []  # every request body, parsed
        self.headers: list[dict] = []  # and its headers (names lower-cased)
        self._script: deque = deque(responses or [])
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> FakeOpenAIServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.bind_port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the server is not running"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script ------------------------------------------------------------------------
    def push(self, *responses: Any) -> FakeOpenAIServer:
        with self._lock:
            self._script.extend(responses)
        return self

    @property
    def remaining(self) -> int:
        return len(self._script)

    def _take(self, body: dict, headers: dict) -> Any:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if not self._script:
                n = len(self.requests)
                return self.error(400, f"FakeOpenAIServer: script exhausted (request {n})", code="script_exhausted")
            response = self._script.popleft()
        return response(body) if callable(response) else response

    # -- response builders -------------------------------------------------------------
    @staticmethod
    def completion(
        message: dict, *, finish_reason: str = "stop", usage: dict | None = None, model: str = "fake-model"
    ) -> dict:
        """A full chat.completion body around one assistant ``message``."""
        return {
            "id": f"chatcmpl-fake-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", **message},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": dict(DEFAULT_USAGE if usage is None else usage),
        }

    @staticmethod
    def text_reply(
        text: str | None,
        *,
        reasoning_content: str | None = None,
        finish_reason: str = "stop",
        usage: dict | None = None,
    ) -> dict:
        message: dict[str, Any] = {"content": text}
        if reasoning_content is not None:
            message["reasoning_content"] = reasoning_content
        return FakeOpenAIServer.completion(message, finish_reason=finish_reason, usage=usage)

    @staticmethod
    def tool_call_reply(
        name: str,
        arguments: dict | str,
        *,
        content: str | None = None,
        id: str | None = None,
        reasoning_content: str | None = None,
        usage: dict | None = None,
    ) -> dict:
        """One tool call; ``arguments`` as a str is sent verbatim (to test invalid JSON)."""
        call = {"name": name, "arguments": arguments, "id": id}
        return FakeOpenAIServer.multi_tool_reply(
            [call], content=content, reasoning_content=reasoning_content, usage=usage
        )

    @staticmethod
    def multi_tool_reply(
        calls: list, *, content: str | None = None, reasoning_content: str | None = None, usage: dict | None = None
    ) -> dict:
        """Several tool calls: each ``(name, arguments)``, ``(name, arguments, id)`` or
        ``{"name": .., "arguments": .., "id": ..}``."""
        tool_calls = []
        for i, call in enumerate(calls):
            if isinstance(call, dict):
                name, args, cid = call["name"], call.get("arguments", {}), call.get("id")
            else:
                name, args, cid = (*call, None)[:3]
            text = args if isinstance(args, str) else json.dumps(args)
            tool_calls.append(
                {
                    "id": cid or f"call_fake_{next(_ids)}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": text},
                }
            )
        message: dict[str, Any] = {"content": content, "tool_calls": tool_calls}
        if reasoning_content is not None:
            message["reasoning_content"] = reasoning_content
        return FakeOpenAIServer.completion(message, finish_reason="tool_calls", usage=usage)

    @staticmethod
    def error(
        status: int, message: str, *, type: str | None = None, code: str | None = None, headers: dict | None = None
    ) -> ScriptedError:
        """An error response shaped like OpenAI's: {"error": {"message", "type", "code", "param"}}."""
        kind = type or ("invalid_request_error" if status < 500 else "server_error")
        body = {"error": {"message": message, "type": kind, "code": code, "param": None}}
        return ScriptedError(status, body, dict(headers or {}))

    @staticmethod
    def slow(seconds: float, response: Any) -> Slow:
        """Wait ``seconds`` before answering with ``response`` (to make the client time out)."""
        return Slow(seconds, response)

    @staticmethod
    def disconnect() -> Disconnect:
        return Disconnect()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAIServer  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def _route(self, method: str, body: dict | None) -> bool:
        route = self.fake.routes.get(f"{method} {self.path.rstrip('/')}")
        if route is None:
            return False
        self._answer(route(body) if callable(route) else route)
        return True

    def do_GET(self) -> None:
        if self._route("GET", None):
            return
        if self.path.rstrip("/") == "/v1/models":
            models = self.fake.models if self.fake.models is not None else \
                [{"id": self.fake.model, "object": "model", "owned_by": "fake"}]  # fmt: skip
            self._send(200, {"object": "list", "data": models})
        else:
            self._send(404, {"error": {"message": f"no route GET {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if f"POST {self.path.rstrip('/')}" in self.fake.routes:
            try:
                self._route("POST", json.loads(raw or b"{}"))
            except json.JSONDecodeError:
                self._send(400, {"error": "not JSON"})
            return
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route POST {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as e:
            self._send(400, {"error": {"message": f"request body is not JSON: {e}", "type": "invalid_request_error"}})
            return
        self._answer(self.fake._take(body, {k.lower(): v for k, v in self.headers.items()}))

    def _answer(self, response: Any) -> None:
        if isinstance(response, Slow):
            time.sleep(response.seconds)
            response = response.response
        if isinstance(response, Disconnect):
            self.close_connection = True
            self.connection.close()
        elif isinstance(response, ScriptedError):
            self._send(response.status, response.body, response.headers)
        else:
            self._send(200, response)

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass
