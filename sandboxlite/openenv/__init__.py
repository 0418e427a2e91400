"""sandboxlite as an OpenEnv environment (openenv-core 0.3: the ``[openenv]`` extra).

Laid out as openenv-core's environment template lays one out:

- ``models``: ``SandboxliteAction`` (a tool call: ``tool`` + ``arguments``, or a whole assistant
  ``message``), ``SandboxliteObservation`` (the prompt and tool schemas after reset; a tool's
  output, exit code, error, done and reward after a step), ``SandboxliteState``.
- ``server``: ``SandboxliteEnvironment`` (openenv-core's ``Environment``: ``reset`` / ``step`` /
  ``state`` over ``sandboxlite.rl.SandboxEnv``, an episode being a task in a pooled sandbox) and
  ``make_app`` (openenv-core's ``create_app``: HTTP + WebSocket, one environment, hence one
  sandbox, per WebSocket session); ``python -m sandboxlite.openenv.server`` serves it.
- ``client``: ``SandboxliteEnv``, openenv-core's ``EnvClient`` for it (async; ``.sync()``).
- ``trl``: ``SandboxliteToolEnv``, TRL's ``environment_factory`` over that client (TRL's
  OpenEnv integration).

::

    from sandboxlite.openenv import SandboxliteAction, SandboxliteEnv

    with SandboxliteEnv(base_url="http://127.0.0.1:8000").sync() as env:
        r = env.reset(task={"id": "sum", "query": "Add the numbers in /testbed/input/n.txt",
                            "input_files": {"n.txt": "17\\n25\\n"}, "metadata": {"answer": "42"}})
        r = env.step(SandboxliteAction(tool="execute_bash", arguments={"command": "cat input/n.txt"}))
        r.observation.output, r.observation.exit_code
        r = env.step(SandboxliteAction(tool="submit"))    # r.done, r.reward

May import: errors, config, jail, agent, rl.
"""

from .client import SandboxliteEnv
from .models import SandboxliteAction, SandboxliteObservation, SandboxliteState

__all__ = ["SandboxliteAction", "SandboxliteObservation", "SandboxliteState", "SandboxliteEnv"]
