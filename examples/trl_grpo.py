"""GRPO with TRL on sandboxlite tasks: every rollout gets a sandbox of its own (the agent's tools
execute_bash, str_replace_editor and submit) and its answer file is scored by the eval scorers.

    pip install -e '.[trl]'
    python examples/trl_grpo.py --model Qwen/Qwen3-0.6B                      # the demo tasks (examples/demo_*.json)
    python examples/trl_grpo.py --model /models/Qwen3-4B --domain math --data-dir ../shared/eval-data --limit 64
    python examples/trl_grpo.py --model /models/Qwen3-4B --tasks mine.jsonl  # task.json dicts or rows, one a line
    python examples/trl_grpo.py --model /models/Qwen3-4B --dry-run           # the dataset and GRPOConfig only

``--model`` is anything ``AutoModelForCausalLM.from_pretrained`` takes (a Hub name or a local
directory).  Its chat template must support tool calls, and TRL must be able to parse them from
the model's output: TRL sets the parser itself for the templates it knows (Qwen2.5/Qwen3, Llama
3.1/3.2, GLM-4-MoE, GPT-OSS, Gemma 4, ...); for another one, set ``tokenizer.response_template``.

The environment is ``sandboxlite.rl.trl.SandboxEnvironment`` (see its module docstring): TRL calls
``reset(**row)`` per rollout (a sandbox from the process's pool, the row's files staged, the task's
instructions appended to the prompt), runs the model's tool calls on it, and calls
``get_reward()`` (the answer file scored, the sandbox given back).  Rows come from
``task_rows(tasks)``: sandboxlite ``Task`` objects (``domain_tasks`` for an eval domain's items)
as a chat ``prompt`` plus the fields the environment reads.
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
from sandboxlite.errors import TaskError  # noqa: E402
from sandboxlite.rl.trl import SandboxEnvironment, check_row, task_rows  # noqa: E402

DEMO_TASKS = sorted(HERE.glob("demo_*.json"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a model name or directory (AutoModelForCausalLM.from_pretrained)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--tasks", nargs="+", type=Path, metavar="FILE",
                     help="task.json files, or .jsonl files of task dicts or rows (default: examples/demo_*.json)")
    src.add_argument("--domain", help="an eval domain (math, physics, chem, biomed, long_context, ...): its items")
    p.add_argument("--data-dir", type=Path, help="the eval data folder (with --domain)")
    p.add_argument("--limit", type=int, default=None, help="with --domain: this many items (a seeded sample)")
    p.add_argument("--output-dir", default="output/trl-grpo")
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--num-generations", type=int, default=4, help="rollouts per prompt (GRPO's group)")
    p.add_argument("--batch-size", type=int, default=8, help="per_device_train_batch_size (rollouts per step)")
    p.add_argument("--learning-rate", type=float, default=1e-6)
    p.add_argument("--max-completion-length", type=int, default=4096, help="tokens per rollout, tool outputs included")
    p.add_argument("--max-tool-calls", type=int, default=20, help="max_tool_calling_iterations")
    p.add_argument("--rootfs", default="auto", help="the sandboxes' root filesystem (as `sandboxlite run --rootfs`)")
    p.add_argument("--isolation", default="auto", choices=["auto", "namespaces", "landlock"])
    p.add_argument("--bash-timeout", type=float, default=120.0, help="execute_bash's default timeout (seconds)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU (use_cpu, no bf16; the default without a GPU)")
    p.add_argument("--dry-run", action="store_true", help="build the dataset and GRPOConfig, print them, and stop")
    args = p.parse_args(argv)
    if args.domain and not args.data_dir:
        p.error("--domain needs --data-dir")
    return args


def load_rows(args: argparse.Namespace) -> list[dict]:
    """The dataset rows: an eval domain's items, task files, or rows given as they are."""
    if args.domain:
        from sandboxlite.rl import domain_tasks

        return task_rows(domain_tasks(args.domain, args.data_dir, limit=args.limit))
    rows: list[dict] = []
    for path in args.tasks or DEMO_TASKS:
        if path.suffix == ".jsonl":
            items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        else:
            items = [json.loads(path.read_text(encoding="utf-8"))]
        for item in items:
            try:  # a task.json dict becomes a row; anything else is a row already
                rows.extend(task_rows([Task.from_dict(item, base_dir=path.parent)]))
            except TaskError:
                rows.append(item)
    for i, r in enumerate(rows):
        if r.get("prompt") is None:  # TRL reads the prompt column itself: every row gets one (the query)
            query = next((r[k] for k in ("query", "problem_statement", "question", "problem") if r.get(k)), None)
            if isinstance(query, str):
                rows[i] = r = {**r, "prompt": [{"role": "user", "content": query}]}
        try:
            check_row(r)
        except ValueError as e:
            raise SystemExit(f"row {i} ({r.get('id', '?')}): {e}") from None
    # every row with every column: Dataset.from_list takes the columns from the first row
    columns = list(dict.fromkeys(c for r in rows for c in r))
    return [{c: r.get(c) for c in columns} for r in rows]


def build(args: argparse.Namespace):
    """(dataset, GRPOConfig, environment factory): everything but the model."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    cpu = args.cpu or not torch.cuda.is_available()
    rows = load_rows(args)
    dataset = Dataset.from_list(rows)
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=args.max_tool_calls,
        logging_steps=1,
        report_to="none",
        **({"use_cpu": True, "bf16": False} if cpu else {}),
    )
    factory = SandboxEnvironment.factory(config=SandboxConfig(rootfs=args.rootfs, isolation=args.isolation),
                                         bash_timeout=args.bash_timeout)  # fmt: skip
    return dataset, config, factory


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dataset, config, factory = build(args)
    print(f"{len(dataset)} rows, columns {dataset.column_names}")
    print(f"GRPOConfig(output_dir={config.output_dir!r}, max_steps={config.max_steps}, "
          f"num_generations={config.num_generations}, "
          f"per_device_train_batch_size={config.per_device_train_batch_size}, "
          f"learning_rate={config.learning_rate}, max_completion_length={config.max_completion_length}, "
          f"max_tool_calling_iterations={config.max_tool_calling_iterations})")  # fmt: skip
    if args.dry_run:  # one rollout's start, to show what the model is given
        env = factory()
        try:
            text = env.reset(**dataset[0])
            print(f"row 0 in {env.sandbox.workdir}: the instructions TRL appends to the prompt:\n{text}")
        finally:
            env.close()
        return 0

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model)
    trainer = GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=factory)  # fmt: skip
    trainer.train()
    trainer.save_model(args.output_dir)
    print(f"saved to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
