"""Prompt templates: a system prompt and an instance prompt, overridable with ``--prompt FILE``.

A template file has two sections, ``[system]`` and ``[instance]``; ``{placeholders}`` are filled
with :data:`PLACEHOLDERS` (unknown ones are an error, literal braces are written ``{{`` ``}}``).
The paths (``workdir``, ``input_dir``, ``output_dir``, ``answer_file``) are the sandbox's own
(``Paths.of(sandbox)``): the model is told the directories that exist where it works.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..config import check_network
from ..errors import TaskError
from .paths import DEFAULT_PATHS, Paths

PLACEHOLDERS = ("query", "workdir", "input_dir", "output_dir", "answer_file", "inputs", "inputs_inline", "network")

_SECTION = re.compile(r"^\[(system|instance)\]\s*$", re.M)


def network_note(network: str | None) -> str:
    """What the model is told about the network (the ``{network}`` placeholder)."""
    if network is None:
        return "the network may be off."
    if network == "none":
        return "there is no network: use what is installed."
    if network == "host":
        return "the network is on."
    policy = check_network(network)
    assert policy is not None
    hosts = ", ".join(dict.fromkeys(("*." if r.wildcard else "") + r.host for r in policy.rules))
    pip = " (pip install works)" if any(r.host == "pypi.org" for r in policy.rules) else ""
    return (f"the network reaches only these hosts, through a proxy already set in the environment "
            f"(HTTP_PROXY, HTTPS_PROXY): {hosts}{pip}; every other host is refused.")


@dataclass(frozen=True)
class PromptTemplate:
    system: str
    instance: str
    source: str

    @classmethod
    def load(cls, path: str | None = None, *, mode: str = "sandbox", profile: str = "standard") -> "PromptTemplate":
        """The template file ``path``, else the built-in one for ``mode`` and the model's prompt
        ``profile`` (``small``: the short sandbox prompt of the small-model profile, see ``local.py``)."""
        if path is None:
            name = "vanilla.txt" if mode == "vanilla" else "small.txt" if profile == "small" else "default.txt"
            text = resources.files("sandboxlite.agent").joinpath("templates", name).read_text()
            return cls.parse(text, f"builtin:{name}")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise TaskError("prompt", f"cannot read {path}: {e.strerror}") from None
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str) -> "PromptTemplate":
        parts = _SECTION.split(text)
        sections = {parts[i]: parts[i + 1].strip("\n") for i in range(1, len(parts) - 1, 2)}
        if set(sections) != {"system", "instance"}:
            raise TaskError("prompt", f"{source}: needs a [system] and an [instance] section")
        for name, body in sections.items():
            for _, field, _, _ in string.Formatter().parse(body):
                if field is not None and field not in PLACEHOLDERS:
                    raise TaskError("prompt", f"{source} [{name}]: unknown placeholder {{{field}}} "
                                    f"(known: {', '.join(PLACEHOLDERS)})")  # fmt: skip
        return cls(sections["system"], sections["instance"], source)

    def render(self, query: str, inputs: dict[str, str], *, paths: Paths = DEFAULT_PATHS,
               input_dir: str | None = None, network: str | None = None) -> tuple[str, str]:  # fmt: skip
        """(system, instance) text for a task whose inputs are ``name -> text``, placed in ``input_dir``
        (default ``paths.input_dir``), in a sandbox whose paths are ``paths`` (default: ``/testbed``'s)
        and whose network is ``network`` (``SandboxConfig.network``; None: not known)."""
        if input_dir is None:
            input_dir = paths.input_dir
        listing = "\n".join(f"- {input_dir}/{n} ({len(t.encode())} bytes)" for n, t in sorted(inputs.items()))
        inline = "\n\n".join(f"=== {n} ===\n{t}" for n, t in sorted(inputs.items()))
        values = {
            "query": query,
            "workdir": paths.workdir,
            "input_dir": input_dir,
            "output_dir": paths.output_dir,
            "answer_file": paths.answer_file,
            "inputs": listing or "(none)",
            "inputs_inline": inline,
            "network": network_note(network),
        }
        return self.system.format(**values), self.instance.format(**values).rstrip() + "\n"
