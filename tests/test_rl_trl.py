"""sandboxlite.rl.trl.SandboxEnvironment: TRL's environment_factory over real sandboxes.

The first part drives the class directly (real sandboxes, namespace and Landlock isolation); the
last runs TRL's real GRPOTrainer with ``environment_factory`` for two optimizer steps on a tiny
random model on CPU (it needs the ``[trl]`` extra and is skipped without it).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandboxlite import Mount, Sandbox, SandboxConfig, SandboxPool
from sandboxlite.agent.paths import Paths
from sandboxlite.agent.run import stage_inputs
from sandboxlite.agent.task import Task
from sandboxlite.agent.tools import Tools, tool_schemas
from sandboxlite.errors import ConfigError, ToolError
from sandboxlite.eval.items import EvalItem
from sandboxlite.rl import trl as trl_env
from sandboxlite.rl.trl import SandboxEnvironment, close_pools, task_rows

ROOT = Path(__file__).resolve().parent.parent
NUMBERS = {"numbers.txt": "17\n25\n"}


@pytest.fixture(autouse=True)
def _no_leftover_pools():
    """Every test starts and ends without shared pools: their sandboxes are closed afterwards,
    also those a failed test left acquired (the tests check what they hold themselves)."""
    close_pools()
    yield
    sandboxes = [sb for shared in trl_env._POOLS for pool in shared.pools for sb in pool._all]
    close_pools()
    for sb in sandboxes:
        sb.close()


def row(**extra):
    return {"query": "Sum the numbers in numbers.txt.", "input_files": dict(NUMBERS), "ground_truth": "42",
            "scorer": "numeric", **extra}  # fmt: skip


# -- reset, the tools, the reward ------------------------------------------------------------------
def test_reset_tools_submit_reward_release():
    env = SandboxEnvironment()
    text = env.reset(**row())
    sb, paths = env.sandbox, env.paths
    assert paths == Paths.of(sb) and paths.workdir == sb.workdir
    # the instructions: the query, then the sandbox's real paths and the staged file
    assert text.startswith("You are a capable assistant") and "Sum the numbers in numbers.txt." in text
    assert f"{paths.input_dir}/numbers.txt (6 bytes)" in text and paths.answer_file in text
    assert sb.read_file(f"{paths.input_dir}/numbers.txt") == b"17\n25\n"
    # the persistent shell: cd carries over
    out = env.execute_bash(command="cd input && awk '{s += $1} END {print s}' numbers.txt")
    assert out == "42\n[exit code: 0]"
    assert env.execute_bash(command="pwd") == f"{paths.input_dir}\n[exit code: 0]"
    assert "created" in env.str_replace_editor(command="create", path=paths.answer_file, file_text="41\n")
    assert "has been edited" in env.str_replace_editor(command="str_replace", path=paths.answer_file,
                                                       old_str="41", new_str="42")  # fmt: skip
    assert env.str_replace_editor(command="view", path=paths.answer_file).endswith(":\n     1\t42\n")
    assert env.submit() == "submitted" and env.submitted and env.tool_calls == 6
    # after submit: nothing runs (the marker is never written)
    for call in (lambda: env.execute_bash(command="touch late"), lambda: env.submit(),
                 lambda: env.str_replace_editor(command="create", path=f"{paths.workdir}/late", file_text="x")):
        with pytest.raises(ToolError, match="submit was already called"):
            call()
    assert sb.exec("ls late").exit_code != 0 and env.tool_calls == 6
    # the reward: the answer file, scored by the eval scorer the row names
    assert env.get_reward() == 1.0
    assert env.answer == "42\n" and env.score.extracted == "42" and env.score.details == {"scoring": "numeric"}
    assert env.sandbox is None and env.get_reward() == 1.0  # released; the same value again
    with pytest.raises(ToolError, match=r"rollout is over: get_reward\(\) scored it and gave its sandbox back"):
        env.execute_bash(command="ls")
    shared = trl_env._POOLS[0]
    assert [p.in_use for p in shared.pools] == [0] and sb.alive()  # back in the pool, reset
    assert sb.exec("ls input").exit_code != 0


def test_rewards_come_from_the_scorer():
    """A wrong answer, a right one written differently, no answer file, and require_submit."""
    env = SandboxEnvironment()
    for answer, want in (("41", 0.0), ("The sum is \\boxed{42.0}", 1.0), (None, 0.0)):
        env.reset(**row())
        if answer is not None:
            env.sandbox.write_file(env.paths.answer_file, answer)
        assert env.get_reward() == want, answer
    assert env.answer is None and env.score is None
    strict = SandboxEnvironment(require_submit=True)
    strict.reset(**row())
    strict.execute_bash(command="echo 42 > output/answer.txt")
    assert strict.get_reward() == 0.0 and strict.answer == "42\n"


def test_the_tools_are_the_agents():
    """The same calls through SandboxEnvironment and through agent.tools.Tools on a sandbox staged
    the same way give the same texts and the same errors."""
    calls = [
        ("execute_bash", {"command": "cd input; ls; echo err >&2; exit 3"}),
        ("execute_bash", {"command": "pwd; export X=1"}),
        ("execute_bash", {"command": "echo $X; sleep 5", "timeout": 0.3}),
        ("execute_bash", {"command": "   "}),
        ("execute_bash", {"command": "true", "timeout": "5"}),
        ("str_replace_editor", {"command": "view", "path": "/testbed"}),
        ("str_replace_editor", {"command": "create", "path": "/testbed/a.py", "file_text": "x = 1\nx = 1\n"}),
        ("str_replace_editor", {"command": "str_replace", "path": "/testbed/a.py", "old_str": "x = 1"}),
        ("str_replace_editor", {"command": "insert", "path": "/testbed/a.py", "insert_line": 1, "new_str": "y\n"}),
        ("str_replace_editor", {"command": "view", "path": "/testbed/a.py", "view_range": [2, 9]}),
        ("str_replace_editor", {"command": "delete", "path": "/testbed/a.py"}),
        ("str_replace_editor", {"command": "view", "path": "relative.txt"}),
        ("submit", {}),
    ]

    def run(call):
        try:
            return call()
        except ToolError as e:
            return f"ToolError: {e}"

    env = SandboxEnvironment(config=SandboxConfig(isolation="namespaces"))
    env.reset(**row())
    got = [run(lambda: getattr(env, name)(**args)) for name, args in calls]
    with Sandbox(isolation="namespaces") as sb:
        stage_inputs(sb, Task(id="t", query="q", input_files=dict(NUMBERS)))
        with Tools(sb) as tools:
            want = [run(lambda: tools.call(name, args).output) for name, args in calls]
    assert got == want
    assert "timed out after 0.3 s" in got[2] and got[4].startswith("ToolError: execute_bash: argument 'timeout'")
    env.get_reward()


def test_the_prompt_column_and_query_text():
    """With a chat prompt (TRL shows it) the instructions follow it and do not repeat the
    question; a row without one gets the query in front; files and reference as JSON text,
    a None file (datasets' filling) dropped, input_path, the paper's query key."""
    env = SandboxEnvironment()
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add the numbers up."}]
    text = env.reset(prompt=prompt, input_files=json.dumps({"numbers.txt": "1\n2\n", "other.txt": None}),
                     input_path="/testbed/documents", ground_truth=3, scorer="numeric", id="t-1")  # fmt: skip
    assert text.startswith("\n\nYou are a capable assistant") and "Add the numbers up" not in text
    assert f"{env.paths.workdir}/documents/numbers.txt (4 bytes)" in text and "other.txt" not in text
    assert env.execute_bash(command="cat documents/numbers.txt") == "1\n2\n[exit code: 0]"
    env.execute_bash(command="echo 3 > output/answer.txt")
    assert env.get_reward() == 1.0
    text = env.reset(problem_statement="What is 2+2?", ground_truth="4")  # the default scorer: exact
    assert "What is 2+2?" in text and f"Input files in {env.paths.input_dir}:\n(none)" in text
    env.sandbox.write_file(env.paths.answer_file, "Answer: 4")
    assert env.get_reward() == 1.0 and env.score.details == {"scoring": "exact"}
    paper = SandboxEnvironment(layout="paper")
    text = paper.reset(**row())
    wd = paper.paths.workdir
    assert paper.paths.answer_file == f"{wd}/answer.txt" and f"{wd}/documents/numbers.txt" in text
    paper.execute_bash(command="echo 42 > answer.txt")
    assert paper.get_reward() == 1.0


def test_domain_scorers_and_task_rows():
    """``domain`` rows use that eval domain's scorer; task_rows turns Task objects (as domain_tasks
    makes them) into rows of one datasets schema."""
    env = SandboxEnvironment()
    env.reset(query="What is 2^10?", domain="math", ground_truth="1024")
    env.sandbox.write_file(env.paths.answer_file, "so \\boxed{2^{10}}")
    assert env.get_reward() == 1.0  # math-verify: 2^{10} == 1024
    env.reset(query="Which is a noble gas?\nA. N\nB. Ar", domain="chem", ground_truth="B")
    env.sandbox.write_file(env.paths.answer_file, "\\boxed{A}")
    assert env.get_reward() == 0.0 and env.score.extracted == "A"
    tasks = [
        EvalItem("d1", "dream", "Who left?\nA. Tom\nB. Ann", {"label": "B", "letters": "AB", "question": "Who left?"},
                 files={"dialogue.txt": "Ann: bye\n"}, input_path="/testbed/documents").to_task(),  # fmt: skip
        Task(id="plain", query="What is 6*7?", metadata={"answer": "42"}),
    ]
    rows = task_rows(tasks)
    assert rows[0]["domain"] == "dream" and json.loads(rows[0]["reference"])["label"] == "B"
    assert rows[1]["ground_truth"] == "42" and rows[1]["scorer"] == "exact"
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(rows)  # one schema: missing columns are None
    text = env.reset(**ds[0])
    assert f"{env.paths.workdir}/documents/dialogue.txt" in text
    env.execute_bash(command="echo 'Answer: B' > output/answer.txt")
    assert env.get_reward() == 1.0
    env.reset(**ds[1])
    env.execute_bash(command="echo 42 > output/answer.txt")
    assert env.get_reward() == 1.0


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"query": None}, "query"),
        ({"query": 7}, "query"),
        ({"prompt": "just text"}, "prompt"),
        ({"prompt": [{"role": "assistant", "content": "hi"}]}, "prompt"),
        ({"input_files": {"../x": "y"}}, "input_files['../x']"),
        ({"input_files": {"a": 1}}, "input_files['a']"),
        ({"input_files": "{not json"}, "input_files"),
        ({"input_files": ["a"]}, "input_files"),
        ({"input_path": "/etc/x"}, "input_path"),
        ({"scorer": "fuzzy"}, "scorer"),
        ({"scorer": None, "domain": "nope"}, "domain"),
        ({"domain": "math"}, "scorer"),  # both
        ({"ground_truth": None}, "ground_truth"),
        ({"ground_truth": {"a": 1}}, "ground_truth"),
        ({"scorer": None, "domain": "instruct"}, "reference"),
        ({"scorer": None, "domain": "math", "reference": "[1]"}, "reference"),
        ({"tolerance": -1}, "tolerance"),
        ({"metadata": "x"}, "metadata"),
    ],
)
def test_bad_rows_name_the_field(bad, field):
    with SandboxPool(size=1) as pool:
        env = SandboxEnvironment(pool=pool)
        with pytest.raises(ConfigError) as e:
            env.reset(**row(**bad))
        assert e.value.field == field, e.value
        assert pool.in_use == 0 and env.sandbox is None  # checked before a sandbox is taken


def test_bad_options():
    for options, field in (({"layout": "x"}, "layout"), ({"bash_timeout": 0}, "bash_timeout"),
                           ({"config": {}}, "config"), ({"pool": "p"}, "pool")):  # fmt: skip
        with pytest.raises(ConfigError) as e:
            SandboxEnvironment.factory(**options)
        assert e.value.field == field


def test_landlock_paths():
    """isolation="landlock": the workdir is the sandbox's own host directory, and the instructions,
    the tools and the answer file all name it."""
    env = SandboxEnvironment.factory(config=SandboxConfig(isolation="landlock"))()
    text = env.reset(**row())
    wd = env.sandbox.workdir
    assert env.sandbox.info["isolation"] == "landlock" and wd != "/testbed"
    assert "/testbed" not in text.replace(wd, "<workdir>")
    assert f"Your working directory is {wd}." in text and f"{wd}/input/numbers.txt" in text
    assert env.paths.answer_file == f"{wd}/output/answer.txt"
    assert env.execute_bash(command="pwd; cat input/numbers.txt") == f"{wd}\n17\n25\n[exit code: 0]"
    env.str_replace_editor(command="create", path=env.paths.answer_file, file_text="42")
    assert env.submit() == "submitted" and env.get_reward() == 1.0


# -- sandboxes: the per-process pool, no leaks ----------------------------------------------------------
def test_one_pool_per_process_grows_with_the_instances():
    """Instances reset from many threads at once share one lazily made pool set per config, with a
    sandbox for each of them (none waits); another config gets its own."""
    assert trl_env._POOLS == []
    envs = [SandboxEnvironment() for _ in range(6)]
    barrier = threading.Barrier(len(envs))
    errors = []

    def go(env):
        try:
            barrier.wait()
            env.reset(**row())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(e,)) for e in envs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(trl_env._POOLS) == 1 and trl_env._POOLS[0].capacity == 6
    assert len({id(e.sandbox) for e in envs}) == 6
    for e in envs:
        assert e.get_reward() == 0.0
    envs[0].reset(**row())  # free sandboxes are reused: no new pool
    assert trl_env._POOLS[0].capacity == 6
    envs[0].get_reward()
    other = SandboxEnvironment(config=SandboxConfig(isolation="namespaces", env={"X": "1"}))
    other.reset(**row())
    assert len(trl_env._POOLS) == 2 and other.execute_bash(command="echo $X") == "1\n[exit code: 0]"
    other.close()


def test_no_leak_without_get_reward():
    """TRL may never call get_reward (an exception mid-batch): the next reset, close(), or the
    instance being dropped gives the sandbox back; a closed instance refuses to reset."""
    with SandboxPool(size=1) as pool:
        env = SandboxEnvironment(pool=pool, acquire_timeout=5)
        env.reset(**row())
        first = env.sandbox
        env.execute_bash(command="touch stale")
        env.reset(**row())  # the pool has one sandbox: the first one went back (reset)
        assert env.sandbox is first and first.exec("ls stale").exit_code != 0
        env.close()
        assert pool.in_use == 0 and env.sandbox is None
        with pytest.raises(ToolError, match="rollout is over"):
            env.execute_bash(command="ls")
        with pytest.raises(Exception, match="closed"):
            env.reset(**row())
        dropped = SandboxEnvironment(pool=pool)
        dropped.reset(**row())
        assert pool.in_use == 1
        del dropped
        gc.collect()
        assert pool.in_use == 0 and pool.idle == 1


def test_a_sandbox_that_fails_ends_the_rollout():
    with SandboxPool(size=1) as pool:
        env = SandboxEnvironment(pool=pool)
        env.reset(**row())
        env.sandbox.close()  # the jail goes away under the tools
        with pytest.raises(ToolError, match="the sandbox failed"):
            env.execute_bash(command="echo 42 > output/answer.txt")
        with pytest.raises(ToolError, match="failed earlier"):
            env.submit()
        assert env.get_reward() == 0.0 and pool.in_use == 0  # given back (the pool restarts or replaces it)
        env.reset(**row())
        assert env.execute_bash(command="echo ok") == "ok\n[exit code: 0]"
        env.close()


# -- what TRL reads from the class -------------------------------------------------------------------------
def test_the_tools_trl_sees():
    """TRL takes every public function of the class but reset/get_reward for a tool (close is not
    one) and builds each schema from the type hints and docstring with transformers'
    get_json_schema: the agent's parameters, types and required ones."""
    import inspect

    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    cls = SandboxEnvironment.factory(bash_timeout=30).func
    names = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]  # fmt: skip
    assert names == ["execute_bash", "str_replace_editor", "submit"]
    env = cls(bash_timeout=30)
    json_type = {"string": "string", "number": "number", "integer": "integer", "array": "array"}
    for agent_schema in tool_schemas(30.0):
        fn = agent_schema["function"]
        schema = get_json_schema(getattr(env, fn["name"]))["function"]
        params, want = schema["parameters"], fn["parameters"]
        assert list(params["properties"]) == list(want["properties"])
        assert params.get("required", []) == want["required"]
        for name, prop in want["properties"].items():
            assert params["properties"][name]["type"] == json_type[prop["type"]]
            assert params["properties"][name].get("enum") == prop.get("enum")
    assert "(default 30)" in get_json_schema(env.execute_bash)["function"]["parameters"]["properties"]["timeout"][
        "description"]  # fmt: skip
    assert "(default 120)" in get_json_schema(SandboxEnvironment().execute_bash)["function"]["parameters"][
        "properties"]["timeout"]["description"]  # fmt: skip
    env.close()


# -- TRL's GRPOTrainer, end to end ----------------------------------------------------------------------------
def _tiny_tokenizer(texts, added):
    """A byte-level BPE tokenizer trained on ``texts`` (1024 tokens, offline) with the Qwen2.5 chat
    template TRL ships (TRL recognises it and parses ``<tool_call>`` JSON in the model's output)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(list(texts) + [qwen2_5_chat_template], trainers.BpeTrainer(
        vocab_size=1024, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))  # fmt: skip
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=["<|im_start|>"], padding_side="left")  # fmt: skip
    hf.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", *added])
    hf.chat_template = qwen2_5_chat_template
    return hf


def test_grpo_trainer_with_environment_factory(host_dir, monkeypatch):
    """TRL's real GRPOTrainer trains a tiny random Qwen2 model for two optimizer steps on CPU with
    ``environment_factory`` (a subclass of SandboxEnvironment that only records what happened).

    How tool calls happen: a random model emits no tool calls, so generation is steered through a
    documented TRL hook: ``GRPOConfig.generation_kwargs``, which TRL passes into the
    ``GenerationConfig`` of ``model.generate``.  Its ``sequence_bias`` (a standard transformers
    generation option) adds +100 to the logit of the next token of a scripted reply whenever the
    tokens before it match: ``<tool_call>`` after the generation prompt, then one of two
    execute_bash calls (each a single added token: "append to the host-visible marker file, then
    write 41 (or 42) to output/answer.txt"), ``</tool_call>``, ``<|im_end|>``.  The two calls get
    the same bias, so the model's own logits pick one: the answers, hence the rewards, vary within
    each group.  After a tool response the next reply is ``submit`` (a longer, higher-biased match),
    after "submitted" a late execute_bash call (which the environment refuses: TRL hands the error
    back to the model), and ``max_tool_calling_iterations=3`` ends the rollout.  Everything after
    generation is TRL's own: parsing the calls from the text (its Qwen response template), running
    them on the environment, the tool-response tokens (masked out of the loss), ``get_reward``, the
    advantages, the loss (log-probabilities from the unbiased model) and the optimizer.

    It asserts that the tools ran in the sandboxes (the marker file, a host directory mounted into
    them, has one line per rollout and none from the refused late call), that the rewards are the
    scorer's (1 for answers 42, 0 for 41, both present, logged by TRL with a non-zero std), and that
    the weights changed.
    """
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import get_json_schema
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    host_dir.chmod(0o777)  # a root caller's sandboxes run as uids of their own
    marker = host_dir / "calls"
    marker.write_text("")
    marker.chmod(0o666)

    def bash(command):
        return json.dumps({"name": "execute_bash", "arguments": {"command": command}})

    chunks = {
        "42": bash(f"echo call >> {marker}; echo 42 > output/answer.txt"),
        "41": bash(f"echo call >> {marker}; echo 41 > output/answer.txt"),
        "submit": json.dumps({"name": "submit", "arguments": {}}),
        "late": bash(f"echo late >> {marker}"),
    }
    records = []

    class Recorded(SandboxEnvironment):
        def get_reward(self):
            reward = super().get_reward()
            records.append({"answer": self.answer, "reward": reward, "score": self.score, "submitted": self.submitted,
                            "instructions": self.instructions})  # fmt: skip
            return reward

    config = SandboxConfig(mounts=[Mount(str(host_dir), str(host_dir), rw=True)])
    factory = Recorded.factory(config=config)
    probe = factory()
    schemas = [json.dumps(get_json_schema(m)) for m in (probe.execute_bash, probe.str_replace_editor, probe.submit)]
    probe.close()
    template = (ROOT / "sandboxlite/agent/templates/default.txt").read_text()
    tokenizer = _tiny_tokenizer([*schemas, template] * 3, list(chunks.values()))

    def ids(text):
        return tokenizer.encode(text, add_special_tokens=False)

    call = {k: tokenizer.convert_tokens_to_ids(v) for k, v in chunks.items()}
    open_, close_, end = tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>", "<|im_end|>"])
    bias = 100.0
    sequence_bias = [
        [ids("<|im_start|>assistant\n") + [open_], bias],
        [[open_, call["41"]], bias],
        [[open_, call["42"]], bias],
        *[[[c, close_], bias] for c in call.values()],
        [[close_, end], bias],
        [ids("</tool_response><|im_end|>\n<|im_start|>assistant\n<tool_call>") + [call["submit"]], 2 * bias],
        [ids("\nsubmitted\n</tool_response><|im_end|>\n<|im_start|>assistant\n<tool_call>") + [call["late"]], 3 * bias],
    ]

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id))  # fmt: skip
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    questions = ["What is 6*7?", "What is 40+2?"]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}], "ground_truth": "42", "scorer": "numeric"}
                                 for q in questions] * 4)  # fmt: skip
    args = GRPOConfig(
        output_dir=str(host_dir / "out"), per_device_train_batch_size=8, num_generations=4, max_steps=2,
        max_completion_length=256, learning_rate=1e-2, weight_decay=0.0, logging_steps=1, report_to="none",
        use_cpu=True, save_strategy="no", seed=0, dataloader_num_workers=0, max_tool_calling_iterations=3,
        generation_kwargs={"sequence_bias": sequence_bias},
    )  # fmt: skip
    trainer = GRPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=factory)  # fmt: skip
    assert [t.__name__ for t in trainer.tools] == ["execute_bash", "str_replace_editor", "submit"]
    trainer.train()

    # the tools ran in the sandboxes: one marker line per rollout; the call after submit never ran
    rollouts = 2 * 8
    assert marker.read_text() == "call\n" * rollouts
    assert len(records) == rollouts and all(r["submitted"] for r in records)
    assert all(r["instructions"].startswith("\n\nYou are a capable assistant") for r in records)
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2
    for h in logs:
        assert h["tools/call_frequency"] == 3.0  # bash, submit, the late call ...
        assert h["tools/failure_frequency"] == pytest.approx(1 / 3)  # ... which was refused
        # 4 replies of 4 tokens each: TRL counts the model's tokens only, the tool responses between
        # them (much longer) are masked out of the loss
        assert h["completions/mean_length"] == 16.0
    # the rewards are the scorer's: 1 for 42, 0 for 41, both seen, logged by TRL
    assert {(r["answer"], r["reward"]) for r in records} == {("42\n", 1.0), ("41\n", 0.0)}
    assert all(r["score"].details == {"scoring": "numeric"} for r in records)
    assert any(h["reward_std"] > 0 for h in logs)
    assert sum(h["rewards/Recorded/mean"] for h in logs) == pytest.approx(
        sum(r["reward"] for r in records) / 8)  # fmt: skip
    # the weights changed
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    for env in trainer._environment_pool[None]:
        assert env.sandbox is None  # every rollout gave its sandbox back


def test_example_help_and_dry_run():
    """examples/trl_grpo.py: --help (no TRL needed), and --dry-run: the dataset from the demo tasks,
    the GRPOConfig and one rollout's start, without loading a model."""
    script = ROOT / "examples" / "trl_grpo.py"
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--model" in r.stdout and "--dry-run" in r.stdout, r.stderr
    pytest.importorskip("trl")
    r = subprocess.run([sys.executable, str(script), "--model", "/nonexistent/model", "--dry-run"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    demos = len(list((ROOT / "examples").glob("demo_*.json")))
    assert f"{demos} rows" in r.stdout and "GRPOConfig(" in r.stdout, r.stdout
    assert "row 0 in " in r.stdout and "write the final answer to" in r.stdout
