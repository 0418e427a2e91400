"""Egress policies: which hosts a sandbox may reach through the proxy (``network="allow:<rules>"``).

A policy is a list of rules, comma-separated after ``allow:``:

- a host name, ``pypi.org`` (that host only; ``pypi.org:8443`` names a port);
- a wildcard, ``*.example.org`` (every name below example.org, not example.org itself);
- a preset, a name without a dot: ``pypi`` (the Python package index and its file host),
  ``debian`` (Debian's archive), or one defined in the user's presets file.

Everything else is denied, and so is every IP literal: rules name hosts, and the proxy resolves
them itself (a sandbox has no resolver), so a rule cannot be bypassed by an address.  Without a
port, a rule allows 80 and 443.  Decisions are a pure function of the policy and the request
(``Policy.decide``); the proxy only carries them out.

User presets: a JSON file ``{"presets": {"NAME": ["host", "*.domain", ...]}}`` at
``$SANDBOXLITE_PRESETS``, else ``$XDG_CONFIG_HOME/sandboxlite/presets.json`` (``~/.config`` by
default); a user preset may not reuse a built-in name.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

PREFIX = "allow:"
DEFAULT_PORTS = frozenset({80, 443})
BUILTIN_PRESETS: dict[str, tuple[str, ...]] = {
    "pypi": ("pypi.org", "files.pythonhosted.org"),
    "debian": ("deb.debian.org", "security.debian.org"),
}
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_PRESET = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Rule:
    """One allowed host pattern: ``host`` (``suffix``: a wildcard, any name below it) and its ports."""

    host: str
    wildcard: bool
    ports: frozenset[int]
    source: str  # how the user wrote it: "pypi.org", "*.example.org", "preset pypi"

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        return host.endswith("." + self.host) if self.wildcard else host == self.host


@dataclass(frozen=True)
class Decision:
    allowed: bool
    rule: str | None  # the rule that allowed it (None when denied)
    reason: str  # for the log and for the answer a denied client gets

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True)
class Policy:
    """An allowlist of host rules (see the module docstring); ``spec`` is what the user wrote."""

    rules: tuple[Rule, ...]
    spec: str

    @classmethod
    def parse(cls, spec: str, presets: Mapping[str, list[str] | tuple[str, ...]] | None = None) -> "Policy":
        """``spec`` is ``allow:RULE,RULE,...``; ``presets``: the user's (default: from the presets
        file).  ConfigError naming the rule that is wrong."""
        if not isinstance(spec, str) or not spec.startswith(PREFIX):
            raise ConfigError("network", f"an allowlist is written {PREFIX}RULE,RULE,..., got {spec!r}")
        body = spec[len(PREFIX):]
        items = [r.strip() for r in body.split(",")]
        if not body.strip() or any(not r for r in items):
            raise ConfigError("network", f"{spec!r}: empty rule", hint='e.g. network="allow:pypi,*.example.org"')
        known = dict(BUILTIN_PRESETS)
        user = load_presets() if presets is None else dict(presets)
        for name, hosts in user.items():
            if name in BUILTIN_PRESETS:
                raise ConfigError("network", f"user preset {name!r} reuses a built-in preset's name")
            if not _PRESET.match(name):
                raise ConfigError("network", f"user preset name {name!r}: lower-case letters, digits, - and _")
            known[name] = tuple(hosts)
        rules: list[Rule] = []
        for item in items:
            if _PRESET.match(item) and "." not in item:
                if item not in known:
                    raise ConfigError("network", f"unknown preset {item!r} (known: {', '.join(sorted(known))})",
                                      hint="a host name has a dot (example.org); presets are defined in "
                                      f"{presets_file()}")  # fmt: skip
                rules += [_rule(h, f"preset {item}") for h in known[item]]
            else:
                rules.append(_rule(item, item))
        return cls(tuple(rules), spec)

    def decide(self, host: str, port: int) -> Decision:
        """Whether a request to ``host:port`` is allowed, and by which rule (or why not)."""
        try:
            name = normalize_host(host)
        except ValueError as e:
            return Decision(False, None, f"{host!r} is not a host name ({e})")
        if _is_ip(name):
            return Decision(False, None, f"{host} is an IP address; the allowlist names hosts ({self.spec})")
        if not isinstance(port, int) or not 0 < port < 65536:
            return Decision(False, None, f"port {port!r} is not a port")
        for rule in self.rules:
            if rule.matches(name, port):
                return Decision(True, rule.source, f"allowed by {rule.source}")
        return Decision(False, None, f"{name}:{port} is not in the allowlist {self.spec}")


def _rule(text: str, source: str) -> Rule:
    host, ports = text, DEFAULT_PORTS
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("network", f"rule {text!r}: {port!r} is not a port")
        ports = frozenset({int(port)})
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise ConfigError("network", f"rule {text!r}: a wildcard is only allowed as the first label (*.example.org)")
    try:
        name = normalize_host(host)
    except ValueError as e:
        raise ConfigError("network", f"rule {text!r}: {e}") from None
    if _is_ip(name):
        raise ConfigError("network", f"rule {text!r}: an IP address; the allowlist names hosts")
    if wildcard and "." not in name:
        raise ConfigError("network", f"rule {text!r}: a wildcard over a whole top-level domain is too wide")
    return Rule(name, wildcard, ports, source)


def normalize_host(host: str) -> str:
    """``host`` lower-cased, without a trailing dot, IDNA-encoded; ValueError if it is no host name
    (or, for IP literals, returned as the address)."""
    if not isinstance(host, str) or not host:
        raise ValueError("empty")
    h = host.strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if _is_ip(h):
        return h
    if h.endswith("."):  # the root: pypi.org. is pypi.org
        h = h[:-1]
    try:
        h = h.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError("not a valid international name") from None
    if len(h) > 253 or not all(_LABEL.match(label) for label in h.split(".")):
        raise ValueError("labels are letters, digits and inner hyphens, at most 63 each")
    return h


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    # forms inet_aton takes that ipaddress does not: 127.1, 0x7f.1, 2130706433
    return bool(re.fullmatch(r"(0x[0-9a-f]+|\d+)(\.(0x[0-9a-f]+|\d+)){0,3}", text))


def presets_file(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("SANDBOXLITE_PRESETS"):
        return Path(env["SANDBOXLITE_PRESETS"])
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "sandboxlite" / "presets.json"


def load_presets(environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """The user's presets (none when the file does not exist); ConfigError for a malformed file."""
    path = presets_file(environ)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("network", f"cannot read the presets file {path}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError("network", f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    presets = data.get("presets") if isinstance(data, dict) else None
    if not isinstance(presets, dict) or not all(
        isinstance(v, list) and v and all(isinstance(h, str) for h in v) for v in presets.values()
    ):
        raise ConfigError("network", f'{path}: expected {{"presets": {{"NAME": ["host", ...]}}}}')
    unknown = set(data) - {"presets"}
    if unknown:
        raise ConfigError("network", f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    return {k: tuple(v) for k, v in presets.items()}
