"""TRL's Harbor integration (``trl.experimental.harbor``, TRL >= 1.16) with sandboxlite as the sandbox.

TRL's ``HarborEnv`` hands Harbor a built-in backend name (``environment_type="docker"``, ``"e2b"``,
...), and a name cannot carry an import path, which is how Harbor loads a third-party backend.
These are TRL's harnesses whose sandbox is a ``SandboxliteEnvironment`` instead::

    from trl.experimental.harbor import HarborSpec

    spec = HarborSpec("path/to/tasks", agent="sandboxlite.harbor.trl:HarborBashEnv",
                      environment_type="sandboxlite")
    trainer = GRPOTrainer(..., train_dataset=spec.train_dataset,
                          environment_factory=spec.environment_factory, reward_funcs=spec.reward_funcs)

Your own harness (a ``HarborEnv`` subclass with its tool methods): ``on_sandboxlite(MyEnv)``, or
list ``SandboxliteHarbor`` before it in the bases.  The environment's ``--ek`` options
(``public_network``, ``build_network``) are the class attribute ``environment_options``.

Per ``reset``: the previous task's sandbox is closed, the task's image built or reused (one build
per content; trials of one task share it), a sandbox started from it in milliseconds with the task's
own network (``network_mode`` and ``allowed_hosts`` of its ``[environment]``; TRL passes no policy,
which Harbor reads as the public network), the task's healthcheck run, and ``/workdir`` and ``/home/user/input`` made, as TRL's docker path does.  TRL's
re-upload of the Dockerfile's ``COPY`` sources (for backends whose builds drop them) is not needed:
sandboxlite's builds keep them.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

try:
    from trl.experimental.harbor import HarborBashEnv as _TRLBashEnv
    from trl.experimental.harbor import HarborEnv as _TRLHarborEnv
except ImportError as e:
    raise ImportError(f"sandboxlite.harbor.trl needs TRL >= 1.16 with its Harbor integration: pip install "
                      f"'trl>=1.16' ({e})") from e

from .environment import TYPE, SandboxliteEnvironment


class SandboxliteHarbor:
    """Mixin for a TRL ``HarborEnv``: its sandbox is a ``SandboxliteEnvironment``.  Put it first in the
    bases (``class MyEnv(SandboxliteHarbor, HarborEnv)``), or use ``on_sandboxlite(MyEnv)``."""

    #: options of the environment (``SandboxliteOptions``: public_network, build_network)
    environment_options: ClassVar[dict[str, Any]] = {}

    def __new__(cls, *args: Any, environment_type: str = TYPE, **kwargs: Any) -> Any:
        # checked before TRL's __init__ runs: an instance it never set up would warn when collected
        if environment_type != TYPE:
            raise ValueError(f"{cls.__name__} runs its tasks on sandboxlite, but environment_type is "
                             f"{environment_type!r}: pass environment_type={TYPE!r} (HarborSpec's default is "
                             f"'docker'), or use TRL's own harness for another backend")  # fmt: skip
        return super().__new__(cls)

    def __init__(self, *args: Any, environment_type: str = TYPE, **kwargs: Any) -> None:
        super().__init__(*args, environment_type=environment_type, **kwargs)

    async def _start(self, task_dir: str) -> str:
        from harbor.models.task.task import Task
        from harbor.models.trial.paths import TrialPaths

        await self._stop()  # the previous task's sandbox
        self._task = Task(task_dir=Path(task_dir))
        self._paths = TrialPaths(trial_dir=Path(tempfile.mkdtemp(prefix="harbor_trl_")))
        self._env = SandboxliteEnvironment(
            environment_dir=self._task.paths.environment_dir,
            environment_name=self._task.short_name,
            session_id=uuid.uuid4().hex,
            trial_paths=self._paths,
            task_env_config=self._task.config.environment,
            # the task's own network (TRL passes none, which Harbor reads as the public network)
            network_policy=self._task.config.environment.resolve_baseline(),
            **dict(self.environment_options),
        )
        await self._env.start(force_build=False)
        await self._env.run_healthcheck()
        await self._env.exec("mkdir -p /workdir /home/user/input")
        await self._setup()
        return self._task.instruction


def on_sandboxlite(env_cls: type[_TRLHarborEnv], **environment_options: Any) -> type[_TRLHarborEnv]:
    """``env_cls`` (a TRL ``HarborEnv`` subclass: a harness) with sandboxlite as its sandbox.

    The class is made at run time, so it cannot be pickled: for ``AsyncGRPOTrainer`` (which pickles
    the environment factory to its rollout worker) write ``class MyEnv(SandboxliteHarbor, Mine)`` at
    a module's top level instead."""
    if not (isinstance(env_cls, type) and issubclass(env_cls, _TRLHarborEnv)):
        raise TypeError(f"on_sandboxlite takes a trl.experimental.harbor.HarborEnv subclass, got {env_cls!r}")
    attrs = {"__doc__": env_cls.__doc__,
             "environment_options": {**SandboxliteHarbor.environment_options, **environment_options}}  # fmt: skip
    return type(f"Sandboxlite{env_cls.__name__}", (SandboxliteHarbor, env_cls), attrs)


class HarborEnv(SandboxliteHarbor, _TRLHarborEnv):
    """TRL's ``HarborEnv`` (no tools of its own: subclass it with your harness) on sandboxlite."""


class HarborBashEnv(SandboxliteHarbor, _TRLBashEnv):
    """TRL's single-``bash``-tool harness (submit by writing ``/workdir/answer.txt``) on sandboxlite."""


__all__ = ["HarborBashEnv", "HarborEnv", "SandboxliteHarbor", "on_sandboxlite"]
