"""Registry credentials, found where docker and podman keep them.

    find_credentials(registry)   (username, password) for a registry, or None for anonymous pulls

Looked up in order, the first file that has the registry winning:
  ``$REGISTRY_AUTH_FILE``, ``$XDG_RUNTIME_DIR/containers/auth.json`` (podman login),
  ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json`` (docker login).
In a file: ``credHelpers[registry]`` names a credential helper, else ``auths[registry]`` holds an
``auth`` (base64 ``user:password``) or ``username``/``password``, else ``credsStore`` names a
helper for every registry.  A helper is the program ``docker-credential-NAME``, run with ``get``
and the registry on stdin, as docker runs it (an argv, no shell; its output is JSON).

A file that exists but cannot be read or parsed is an error that names it (silently pulling
anonymously would turn "wrong file" into "not found" from the registry).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, NamedTuple

from ..errors import ImageError

DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")
HELPER_TIMEOUT = 30.0
MAX_FILE = 4 << 20


class Credentials(NamedTuple):
    username: str
    password: str


def auth_files(env: Mapping[str, str] | None = None) -> list[Path]:
    """The files that may hold credentials, in the order they are asked."""
    env = os.environ if env is None else env
    files = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    if env.get("XDG_RUNTIME_DIR"):
        files.append(Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    docker = Path(env["DOCKER_CONFIG"]) if env.get("DOCKER_CONFIG") else Path(env.get("HOME") or "~").expanduser() / ".docker"
    files.append(docker / "config.json")
    return files


def find_credentials(registry: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials the user saved for ``registry`` (``docker.io``, ``ghcr.io``, ``host:5000``), or None."""
    keys = _keys(registry)
    for path in auth_files(env):
        doc = _read(path)
        if doc is None:
            continue
        found = _from_config(doc, keys, path)
        if found is not None:
            return found
    return None


def _keys(registry: str) -> list[str]:
    """The spellings a config may use for a registry (docker writes docker.io's as its v1 URL)."""
    if registry in ("docker.io", "index.docker.io", "registry-1.docker.io"):
        return list(DOCKER_HUB_KEYS)
    return [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/", f"https://{registry}/v2/"]


def _read(path: Path) -> dict | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ImageError(f"cannot read the credentials file {path}: {e.strerror}",
                         hint="fix its permissions, or point REGISTRY_AUTH_FILE / DOCKER_CONFIG elsewhere") from None
    try:
        doc = json.loads(data) if len(data) <= MAX_FILE else None
    except (ValueError, UnicodeDecodeError):
        doc = None
    if not isinstance(doc, dict):
        raise ImageError(f"the credentials file {path} is not a JSON object",
                         hint="repair it (docker login / podman login rewrite it) or move it away")
    return doc


def _from_config(doc: dict, keys: list[str], path: Path) -> Credentials | None:
    helpers = doc.get("credHelpers") if isinstance(doc.get("credHelpers"), dict) else {}
    for key in keys:
        if isinstance(helpers.get(key), str):
            return run_helper(helpers[key], key)
    auths = doc.get("auths") if isinstance(doc.get("auths"), dict) else {}
    for key in keys:
        entry = auths.get(key)
        if isinstance(entry, dict):
            found = _from_entry(entry, key, path)
            if found is not None:
                return found
    if isinstance(doc.get("credsStore"), str) and doc["credsStore"]:
        return run_helper(doc["credsStore"], keys[0])
    return None


def _from_entry(entry: dict, key: str, path: Path) -> Credentials | None:
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            user, colon, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            colon = ""
        if not colon:
            raise ImageError(f"the 'auth' of {key!r} in {path} is not base64 of USER:PASSWORD",
                             hint=f"log in again (docker login {key}) or remove that entry")
        return Credentials(user, password)
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
        return Credentials(entry["username"], entry["password"])
    return None  # (an entry with only a identitytoken or nothing: not credentials we can send)


def run_helper(name: str, registry: str) -> Credentials | None:
    """``docker-credential-NAME get`` for ``registry``: its credentials, or None when it has none."""
    program = shutil.which(f"docker-credential-{name}")
    if program is None:
        raise ImageError(f"the credential helper docker-credential-{name} (named in your docker config) is not "
                         "on PATH", hint="install it, or give --username and --password-stdin")  # fmt: skip
    try:
        done = subprocess.run([program, "get"], input=registry.encode(), capture_output=True,
                              timeout=HELPER_TIMEOUT, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ImageError(f"the credential helper {program} failed: {e}",
                         hint="run it by hand (echo REGISTRY | docker-credential-NAME get)") from None
    if done.returncode != 0:
        if b"credentials not found" in done.stdout.lower() + done.stderr.lower():
            return None
        raise ImageError(f"the credential helper {program} exited {done.returncode}: "
                         f"{(done.stderr or done.stdout).decode(errors='replace').strip()[:300]}",
                         hint="run it by hand (echo REGISTRY | docker-credential-NAME get)")  # fmt: skip
    try:
        doc = json.loads(done.stdout)
        return Credentials(str(doc["Username"]), str(doc["Secret"]))
    except (ValueError, KeyError, TypeError):
        raise ImageError(f"the credential helper {program} did not print JSON with Username and Secret",
                         hint="check the helper (echo REGISTRY | docker-credential-NAME get)") from None
