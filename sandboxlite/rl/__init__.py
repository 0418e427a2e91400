"""The RL surface: sandboxes as environments, for training agents with reinforcement learning.

- ``SandboxEnv``: one task in a pooled sandbox, Gymnasium-shaped (``reset`` / ``step`` /
  ``close``), with the agent loop's prompts, tools and message shapes; registered with gymnasium
  as ``sandboxlite/Sandbox-v0`` when gymnasium (the ``[rl]`` extra) is installed.
- ``check_env``: a conformance checker for such environments.
- ``run_groups`` / ``arun_groups``: G episodes per task (GRPO-style groups) run concurrently over
  a ``SandboxPool``, as trainer-ready ``Trajectory`` records with group-normalised advantages;
  ``rollout`` / ``arollout`` for one episode.
- ``rewards``: reward functions (``exact_match``, the default).
- ``adapters.rllm.RllmSandboxEnv``: rllm's multi-turn ``BaseEnv`` interface (duck-typed).
- ``cluster.RayRollouts``: the same groups spread over a Ray cluster (one pool actor per node,
  episodes of a lost actor retried elsewhere; the ``[ray]`` extra).

gymnasium is optional: without it everything works the same, ``SandboxEnv`` is then a plain class.

May import: errors, config, images, state, jail, agent, eval.
"""

from .actions import extract_tokens, to_assistant_message
from .adapters.rllm import RllmSandboxEnv
from .check import RULES, EnvCheckError, check_env
from .env import ENV_ID, ResetNeeded, SandboxEnv, register
from .rewards import domain_reward, domain_tasks, exact_match, normalize_answer, zero_reward
from .rollouts import Group, Trajectory, Turn, arollout, arun_groups, group_advantages, rollout, run_groups
from .spaces import AssistantActionSpace, MessagesSpace

register()  # no-op without gymnasium

__all__ = [
    "SandboxEnv",
    "ResetNeeded",
    "ENV_ID",
    "register",
    "check_env",
    "EnvCheckError",
    "RULES",
    "run_groups",
    "arun_groups",
    "rollout",
    "arollout",
    "Trajectory",
    "Turn",
    "Group",
    "group_advantages",
    "exact_match",
    "domain_reward",
    "domain_tasks",
    "normalize_answer",
    "zero_reward",
    "to_assistant_message",
    "extract_tokens",
    "MessagesSpace",
    "AssistantActionSpace",
    "RllmSandboxEnv",
]
