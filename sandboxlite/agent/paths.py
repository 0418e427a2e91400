"""Where an agent's files are in a sandbox: ``Paths``, derived from ``Sandbox.workdir``.

The workdir is where commands start and relative paths resolve: ``/testbed`` with namespaces
(``SandboxConfig.workdir``, the default), a directory of the sandbox's own on the host with
``isolation="landlock"`` (there ``/testbed`` does not exist).  Prompts, tools, staging, the
answer file and rewards all take their paths from ``Paths.of(sandbox)``, so they name the
directories that exist in the sandbox at hand::

    paths = Paths.of(sb)          # Paths(workdir='/testbed', input_dir='/testbed/input',
                                  #       output_dir='/testbed/output', answer_file='/testbed/output/answer.txt')
    paths.resolve("/testbed/documents")   # a task's path, as it exists in ``sb``

A task file names sandbox paths as ``/testbed/...`` (the documented default): that means "under
the workdir", and ``resolve`` maps it there; ``/tmp/...`` means the sandbox's TMPDIR (``/tmp``
itself with namespaces, the sandbox's own temporary directory with Landlock).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_PATHS", "DEFAULT_WORKDIR", "Paths"]

# the namespace mode's default workdir (SandboxConfig.workdir), and how task files name the workdir
DEFAULT_WORKDIR = "/testbed"


@dataclass(frozen=True)
class Paths:
    """The agent's directories in one sandbox: all under ``workdir``."""

    workdir: str  # where commands start
    input_dir: str  # the task's input files (unless the task says otherwise: ``resolve(task.input_path)``)
    output_dir: str  # what the model produces; copied out at the end of a run
    answer_file: str  # the final answer: what gets graded
    tmp_dir: str = "/tmp"  # the sandbox's TMPDIR (a Landlock sandbox cannot write the host's /tmp)

    @classmethod
    def for_workdir(cls, workdir: str, tmp_dir: str = "/tmp") -> "Paths":
        """The paths of a sandbox whose workdir is ``workdir`` (an absolute path) and TMPDIR ``tmp_dir``."""
        wd = posixpath.normpath(workdir)
        output = posixpath.join(wd, "output")
        return cls(wd, posixpath.join(wd, "input"), output, posixpath.join(output, "answer.txt"), tmp_dir)

    @classmethod
    def paper(cls, workdir: str, tmp_dir: str = "/tmp") -> "Paths":
        """The paper's layout (its RL code and benchmark runner): inputs in ``<workdir>/documents``,
        outputs in the workdir itself, the answer in ``<workdir>/answer.txt``."""
        wd = posixpath.normpath(workdir)
        return cls(wd, posixpath.join(wd, "documents"), wd, posixpath.join(wd, "answer.txt"), tmp_dir)

    @classmethod
    def of(cls, sandbox: Any, layout: str = "sandboxlite") -> "Paths":
        """The paths of ``sandbox`` (a ``Sandbox``: its ``workdir`` and ``tmpdir``) in ``layout``
        (``"sandboxlite"``: input/, output/, output/answer.txt; ``"paper"``: see ``paper``)."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        return getattr(cls, LAYOUTS[layout])(sandbox.workdir, getattr(sandbox, "tmpdir", "/tmp"))

    def resolve(self, path: str) -> str:
        """A task's sandbox path as it exists here: a leading ``/testbed`` (how task files name the
        workdir) becomes ``workdir``, a leading ``/tmp`` the sandbox's TMPDIR; others stay as they are."""
        if self.tmp_dir != "/tmp" and (path == "/tmp" or path.startswith("/tmp/")):
            return self.tmp_dir + path[len("/tmp"):]
        if self.workdir == DEFAULT_WORKDIR:
            return path
        if path == DEFAULT_WORKDIR:
            return self.workdir
        if path.startswith(DEFAULT_WORKDIR + "/"):
            return posixpath.join(self.workdir, path[len(DEFAULT_WORKDIR) + 1 :])
        return path


LAYOUTS = {"sandboxlite": "for_workdir", "paper": "paper"}  # layout -> the classmethod that builds it

# the paths with the default workdir: for what is rendered without a sandbox (vanilla mode)
DEFAULT_PATHS = Paths.for_workdir(DEFAULT_WORKDIR)
