"""Adapters to RL frameworks' environment interfaces, duck-typed (the frameworks are not imported).

- ``rllm.RllmSandboxEnv``: rllm's ``BaseEnv`` (reset / step / close / from_dict / is_multithread_safe).
"""

from .rllm import RllmSandboxEnv, task_from_row

__all__ = ["RllmSandboxEnv", "task_from_row"]
