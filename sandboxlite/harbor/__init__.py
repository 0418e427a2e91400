"""Harbor on sandboxlite: the environment backend Harbor loads by import path,
``sandboxlite.harbor:SandboxliteEnvironment`` (environment.py), and TRL's Harbor harnesses on it
(``sandboxlite.harbor.trl``).

Needs Harbor (Python >= 3.12): ``pip install 'sandboxlite[harbor]'``; on a host with an older Python
(Debian 12), tools/harbor/run gives Harbor Debian 13's.

May import: errors, images, jail, build (and harbor and trl, third-party packages).
"""

from .environment import TYPE, SandboxliteEnvironment, SandboxliteOptions

__all__ = ["TYPE", "SandboxliteEnvironment", "SandboxliteOptions"]
