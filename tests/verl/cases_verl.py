"""sandboxlite.rl.verl against verl's real classes (PyPI verl 0.9, the [verl] extra, in .venv-verl: run by
tests/test_rl_verl.py, since verl's hydra-core and eval's math-verify need different antlr4 runtimes): the registered agent loop
``sandboxlite_agent`` and ``SandboxTool`` inside verl's own ``ToolAgentLoop``.  No GPU here, so a stub stands in
for the inference server only (``server_manager.generate``: token ids in, token ids out, scripted replies
encoded with a tiny byte-level tokenizer built offline, with a chat template that renders tools and tool
calls in the hermes format verl's parser reads); everything else (the token builder that merges turns, the
tool parser, the loops, the output types) is verl's."""

from __future__ import annotations

import asyncio
import gc
import json

import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, DictConfigWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from sandboxlite import SandboxPool
from sandboxlite.rl import verl as slverl

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{{ messages[0]['content'] if messages[0]['role'] == 'system' else '' }}\n# Tools"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}<|im_end|>\n"
    "{%- elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}{%- if m['role'] == 'system' %}"
    "{%- elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{%- for c in m.get('tool_calls') or [] %}\n<tool_call>\n{\"name\": \"{{ c['function']['name'] }}\", \"arguments\": "
    "{{ c['function']['arguments'] if c['function']['arguments'] is string else c['function']['arguments'] | tojson }}}"
    "\n</tool_call>{%- endfor %}<|im_end|>\n{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def tiny_tokenizer():
    """A byte-level tokenizer (every byte a token, no merges) with the chat specials, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    for ch in sorted(ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(SPECIAL)
    t = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    t.chat_template = TEMPLATE
    return t


TOKENIZER = tiny_tokenizer()


def call(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


class ScriptedServer:
    """Stands in for verl's LLMServerClient: each generate() returns the next scripted reply as token ids
    (with made-up logprobs), and records the prompt ids it was given."""

    def __init__(self, replies: list[str]):
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0) + "<|im_end|>"
        ids = TOKENIZER.encode(text, add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def rollout_config(**multi_turn):
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": 8192, "response_length": 8192, "full_determinism": False,
        "multi_turn": {"format": "hermes", "max_assistant_turns": 8, "max_user_turns": 8,
                       "max_parallel_calls": 1, "max_tool_response_length": 4096,
                       "tool_response_truncate_side": "middle", **multi_turn}}}})  # fmt: skip


def run(cls, server, sampling_params, row, **extra):
    """Make the loop inside the event loop (verl captures the running loop at construction), run one row."""

    async def go():
        return await make(cls, server, **extra).run(sampling_params, **row)

    return asyncio.run(go())


def make(cls, server, **extra):
    return cls(trainer_config=DictConfigWrap(rollout_config()), server_manager=server, tokenizer=TOKENIZER,
               processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(OmegaConf.create({})), **extra)


@pytest.fixture(scope="module")
def pool():
    p = SandboxPool(size=2, rootfs="host")
    slverl.SandboxAgentLoop.configure(pool=p)
    yield p
    p.close()


ROW = {
    "raw_prompt": [{"role": "user", "content": "What is the sum of the numbers in numbers.txt?"}],
    "extra_info": {"id": "sum-1", "input_files": {"numbers.txt": "17\n25\n"}},
    "reward_model": {"ground_truth": "42", "style": "rule"},
    "data_source": "toy", "index": 0,
}  # fmt: skip


def test_the_agent_loop_is_registered_with_verl():
    assert _agent_loop_registry["sandboxlite_agent"]["_target_"] == "sandboxlite.rl.verl.SandboxAgentLoop"


def test_a_trajectory_in_a_sandbox(pool):
    wd = "/testbed"
    server = ScriptedServer([
        "Let me look." + call("execute_bash", command="ls input; cat input/numbers.txt"),
        call("execute_bash", command="paste -sd+ input/numbers.txt | bc > output/answer.txt; cat output/answer.txt"),
        call("str_replace_editor", command="view", path="/nowhere/x"),
        call("submit"),
    ])  # fmt: skip
    out = run(slverl.SandboxAgentLoop, server, {"temperature": 1.0}, ROW)
    assert isinstance(out, AgentLoopOutput)
    assert out.reward_score == 1.0 and out.extra_fields["submitted"] and out.extra_fields["answer"] == "42\n"
    assert out.extra_fields["tool_calls"] == 4 and len(server.prompts) == 4
    # the response: the model's tokens (mask 1, its logprobs) and the tool responses between them (mask 0)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    model_tokens = [t for t, m in zip(out.response_ids, out.response_mask) if m == 1]
    tool_tokens = [t for t, m in zip(out.response_ids, out.response_mask) if m == 0]
    model_text, tool_text = TOKENIZER.decode(model_tokens), TOKENIZER.decode(tool_tokens)
    assert "paste -sd+" in model_text and "17\n25" not in model_text
    assert "numbers.txt" in tool_text and "17\n25" in tool_text and "42" in tool_text  # the sandbox's real answers
    assert "/nowhere/x" in tool_text and "does not exist" in tool_text  # the editor's error, for the model
    assert set(out.response_logprobs[i] for i, m in enumerate(out.response_mask) if m == 1) == {-0.5}
    # the prompt is the agent's own, naming the sandbox's paths, and each turn's prompt extends the last
    prompt = TOKENIZER.decode(out.prompt_ids)
    assert f"{wd}/input/numbers.txt" in prompt and "execute_bash" in prompt and "What is the sum" in prompt
    for a, b in zip(server.prompts, server.prompts[1:]):
        assert b[: len(a)] == a
    assert pool.in_use == 0  # the sandbox went back


def test_wrong_answer_and_no_call(pool):
    server = ScriptedServer([call("execute_bash", command="echo 41 > output/answer.txt"), "I am done."])
    out = run(slverl.SandboxAgentLoop, server, {}, ROW)
    assert out.reward_score == 0.0 and not out.extra_fields["submitted"] and out.extra_fields["answer"] == "41\n"
    assert len(server.prompts) == 2
    fresh = ScriptedServer(["no tools at all"])
    out = run(slverl.SandboxAgentLoop, fresh, {}, ROW)
    assert out.reward_score == 0.0 and out.extra_fields["answer"] is None  # the previous episode's file is gone


def test_sandbox_tool_in_verls_own_tool_agent_loop(pool):
    """verl's ToolAgentLoop with SandboxTool: the trajectory keeps one sandbox across calls (verl creates and releases
    a tool instance around every call) and gives it back when verl drops the trajectory."""
    from verl.experimental.agent_loop.agent_loop import ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    tools = [slverl.SandboxTool({"name": n}) for n in ("execute_bash", "str_replace_editor", "submit")]
    server = ScriptedServer([
        call("execute_bash", command="echo 42 > output/answer.txt; cd /tmp && export X=7"),
        call("execute_bash", command="pwd; echo $X; cat /testbed/output/answer.txt"),
        "The answer is 42.",
    ])  # fmt: skip
    out = run(ToolAgentLoop, server, {}, {"raw_prompt": [{"role": "user", "content": "6*7?"}]}, tools=ToolListWrap(tools))
    tool_text = TOKENIZER.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "/tmp\n7\n42" in tool_text, tool_text  # one shell, one sandbox, for the whole trajectory
    del out
    gc.collect()
    assert pool.in_use == 0  # given back when verl dropped the trajectory's data
