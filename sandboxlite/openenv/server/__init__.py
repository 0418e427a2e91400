"""The server side of the sandboxlite OpenEnv environment: the ``Environment`` and its app."""

from .app import make_app, serve_in_thread
from .sandboxlite_environment import SandboxliteEnvironment

__all__ = ["SandboxliteEnvironment", "make_app", "serve_in_thread"]
