"""The FastAPI app of the sandboxlite OpenEnv environment, made by openenv-core's own ``create_app``.

Endpoints (openenv-core's): ``WS /ws`` (a session: its own environment, hence its own sandbox, for
as long as the connection lasts; what ``SandboxliteEnv`` uses), ``POST /reset`` and ``POST /step``
(stateless: each request gets a new environment, closed after it, so an HTTP step never has an
episode to act in), ``GET /state``, ``/schema``, ``/metadata``, ``/health``, ``/docs``.

    app = make_app(pool=SandboxPool(size=8))                 # or make_app(config=..., max_sessions=8)
    uvicorn.run(app, host="127.0.0.1", port=8000)

    python -m sandboxlite.openenv.server --port 8000 --sessions 8
    uvicorn sandboxlite.openenv.server.app:app --port 8000  # the defaults (4 sessions, SandboxConfig())

Sessions: at most ``max_sessions`` WebSocket sessions at once (openenv-core refuses more with
``CAPACITY_REACHED``); the pool the app makes has as many sandboxes, so a session never waits for
one (a stateless HTTP reset may, up to ``acquire_timeout``).  A session that closes (or whose
connection drops) gives its sandbox back to the pool; the app's own pool is closed at shutdown.
"""

from __future__ import annotations

import argparse
import functools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from openenv.core.env_server.http_server import create_app

from ...config import SandboxConfig
from ...jail.pool import SandboxPool
from ...rl.env import SandboxEnv
from ..models import SandboxliteAction, SandboxliteObservation
from .sandboxlite_environment import SandboxliteEnvironment

__all__ = ["make_app", "serve_in_thread", "main"]


def make_app(pool: SandboxPool | None = None, *, config: SandboxConfig | None = None, max_sessions: int = 4,
             **env_options: Any) -> FastAPI:  # fmt: skip
    """The OpenEnv app: sessions of ``SandboxliteEnvironment`` over ``pool`` (shared; the caller
    closes it), or over a pool of ``max_sessions`` sandboxes of ``config`` that the app makes now
    and closes at shutdown.  ``env_options``: ``SandboxliteEnvironment``'s (``trust_tasks``,
    ``acquire_timeout``) and ``SandboxEnv``'s (``reward_fn``, ``max_steps``, ``bash_timeout``, ...)."""
    if pool is not None and config is not None:
        raise ValueError("give a pool or a config, not both (the pool has its own configuration)")
    SandboxEnv(**{k: v for k, v in env_options.items() if k != "trust_tasks"}).close()  # bad options fail here
    own = pool is None
    if own:
        pool = SandboxPool(config, size=max_sessions)
    try:
        factory = functools.partial(SandboxliteEnvironment, pool, **env_options)
        app = create_app(factory, SandboxliteAction, SandboxliteObservation, env_name="sandboxlite",
                         max_concurrent_envs=max_sessions)  # fmt: skip
    except BaseException:
        if own:
            pool.close()
        raise
    if own:
        app.router.on_shutdown.append(pool.close)
    app.add_exception_handler(WebSocketDisconnect, _peer_gone)
    app.state.sandbox_pool = pool
    return app


async def _peer_gone(websocket: WebSocket, exc: WebSocketDisconnect) -> None:
    """openenv-core 0.3.0 closes a session's WebSocket after the client did (its own client sends
    "close" and closes at once): starlette then raises ``WebSocketDisconnect``, which 0.3.0 does not
    catch, and uvicorn logged a traceback for every session that ended normally (OpenEnv issue
    1159).  The session is over by then (its environment closed): nothing to do."""


def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
                    timeout: float = 30.0) -> tuple[str, Callable[[], None]]:  # fmt: skip
    """Serve ``app`` with uvicorn in a daemon thread of this process (``port`` 0: a free one):
    ``(base_url, stop)``; ``stop()`` shuts the server down (the app's shutdown handlers run)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="sandboxlite-openenv", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"the OpenEnv server did not start on {host}:{sock.getsockname()[1]}")
        time.sleep(0.02)

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout)
        sock.close()

    where = f"[{host}]" if ":" in host else host
    return f"http://{where}:{sock.getsockname()[1]}", stop


def __getattr__(name: str) -> Any:
    """``app``, for ``uvicorn sandboxlite.openenv.server.app:app``: made (its pool started) when asked for."""
    if name == "app":
        global app
        app = make_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Serve the environment: ``python -m sandboxlite.openenv.server [--host H] [--port P] ...``."""
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m sandboxlite.openenv.server",
                                     description="sandboxlite as an OpenEnv environment server")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--sessions", type=int, default=4, help="concurrent sessions = sandboxes in the pool")
    parser.add_argument("--rootfs", default="auto", help="the sandboxes' root (as SandboxConfig.rootfs)")
    parser.add_argument("--max-steps", type=int, default=None, help="model turns per episode (default: the task's)")
    args = parser.parse_args(argv)
    options = {"max_steps": args.max_steps} if args.max_steps is not None else {}
    served = make_app(config=SandboxConfig(rootfs=args.rootfs), max_sessions=args.sessions, **options)
    uvicorn.run(served, host=args.host, port=args.port)
