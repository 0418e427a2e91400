"""GRPO with TRL against sandboxlite as an OpenEnv environment: TRL's OpenEnv integration
(``environment_factory``), each rollout a session on a sandboxlite OpenEnv server, hence a sandbox
of its own (the agent's tools execute_bash, str_replace_editor and submit), its reward the task's.

    pip install -e '.[trl,openenv]'
    python examples/openenv_trl.py --model Qwen/Qwen3-0.6B             # the demo tasks; a server in this process
    python -m sandboxlite.openenv.server --port 8000 --sessions 8      # or a server of its own (elsewhere) ...
    python examples/openenv_trl.py --model Qwen/Qwen3-0.6B --env-url http://127.0.0.1:8000   # ... used from here
    python examples/openenv_trl.py --dry-run                           # the server and one scripted episode, no model

The environment class is ``sandboxlite.openenv.trl.SandboxliteToolEnv``: TRL calls ``reset(**row)``
(the row's ``task``: a task.json object as JSON text), the model's tool calls become OpenEnv steps
on the server, and ``get_reward()`` gives the reward the environment computed when the model
submitted (exact match against ``metadata["answer"]``; the demo tasks' ``ground_truth`` is used as
that).  The server needs a session per rollout in flight: ``--sessions`` >= ``--batch-size``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from sandboxlite import SandboxConfig  # noqa: E402
from sandboxlite.agent.task import Task  # noqa: E402
from sandboxlite.openenv.server import make_app, serve_in_thread  # noqa: E402
from sandboxlite.openenv.trl import SandboxliteToolEnv  # noqa: E402

DEMO_TASKS = sorted(HERE.glob("demo_*.json"))
SUM = {"id": "sum", "query": "Add the two numbers in /testbed/input/n.txt.", "input_files": {"n.txt": "17\n25\n"},
       "metadata": {"answer": "42"}}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a model name or directory (AutoModelForCausalLM.from_pretrained)")
    p.add_argument("--tasks", nargs="+", type=Path, metavar="FILE", help="task.json files (default: examples/demo_*.json)")
    p.add_argument("--env-url", help="a running server (python -m sandboxlite.openenv.server); default: one started here")
    p.add_argument("--sessions", type=int, default=None, help="the server started here: sessions (default --batch-size)")
    p.add_argument("--rootfs", default="auto", help="the server started here: the sandboxes' root filesystem")
    p.add_argument("--output-dir", default="output/openenv-grpo")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--num-generations", type=int, default=4, help="rollouts per prompt (GRPO's group)")
    p.add_argument("--batch-size", type=int, default=8, help="per_device_train_batch_size (rollouts per step)")
    p.add_argument("--learning-rate", type=float, default=1e-6)
    p.add_argument("--max-completion-length", type=int, default=4096, help="tokens per rollout, tool outputs included")
    p.add_argument("--max-tool-calls", type=int, default=20, help="max_tool_calling_iterations")
    p.add_argument("--dry-run", action="store_true", help="start the server, run one scripted episode, and stop")
    args = p.parse_args(argv)
    if not args.dry_run and not args.model:
        p.error("--model is needed (or --dry-run)")
    return args


def load_rows(paths: list[Path]) -> list[dict]:
    """One row per task: its query as the chat prompt, the task as JSON text (one dataset schema)."""
    rows = []
    for path in paths:
        task = Task.load(path).to_dict()
        meta = task["metadata"] = dict(task.get("metadata") or {})
        if meta.get("answer") is None and meta.get("ground_truth") is not None:
            meta["answer"] = meta["ground_truth"]  # the environment's default reward: exact match on metadata.answer
        rows.append({"prompt": [{"role": "user", "content": task["query"]}], "task": json.dumps(task)})
    return rows


def dry_run(url: str) -> None:
    """One episode as TRL would run it, the model's calls scripted."""
    env = SandboxliteToolEnv(url)
    try:
        text = env.reset(prompt=[{"role": "user", "content": SUM["query"]}], task=json.dumps(SUM))
        print(f"the instructions TRL appends to the prompt:\n{text}")
        print("execute_bash ->", env.execute_bash(command="awk '{s += $1} END {print s}' input/n.txt > output/answer.txt"))
        print("submit ->", env.submit())
        print(f"reward {env.get_reward()}")
    finally:
        env.close()


def train(args: argparse.Namespace, url: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    cpu = not torch.cuda.is_available()
    dataset = Dataset.from_list(load_rows(args.tasks or DEMO_TASKS))
    config = GRPOConfig(
        output_dir=args.output_dir, max_steps=args.max_steps, num_generations=args.num_generations,
        per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate,
        max_completion_length=args.max_completion_length, max_tool_calling_iterations=args.max_tool_calls,
        logging_steps=1, report_to="none", **({"use_cpu": True, "bf16": False} if cpu else {}),
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model)
    trainer = GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=SandboxliteToolEnv.factory(url))  # fmt: skip
    try:
        trainer.train()
    finally:
        for env in trainer._environment_pool.get(None, []):  # end the sessions (their sandboxes go back)
            env.close()
    trainer.save_model(args.output_dir)
    print(f"saved to {args.output_dir}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = None
    url = args.env_url
    if url is None:  # a server in this process, on a loopback port
        sessions = args.sessions or (1 if args.dry_run else args.batch_size)
        app = make_app(config=SandboxConfig(rootfs=args.rootfs), max_sessions=sessions)
        url, stop = serve_in_thread(app)
        print(f"sandboxlite OpenEnv server at {url} ({sessions} sessions)")
    try:
        dry_run(url) if args.dry_run else train(args, url)
    finally:
        if stop is not None:
            stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
