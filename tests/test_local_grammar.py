"""The small profile's grammar (issue 39, "valid calls from small models"): each reply of the
embedded model is one command block or a bounded plain answer.

Three tiers: the grammar's text (pure); its language, checked by llama.cpp's own grammar engine
token by token (needs llama-cpp-python and the embedded model's vocabulary, no generation); and
replies the embedded model writes under it (marker ``local_model``), among them turns that the
model, without the grammar, answered with imagined output in bare blocks or kilobytes of prose
(histories taken from ``bench/demo_runs.py`` runs with ``--constrained never``).
"""

import ctypes
import re

import pytest

from sandboxlite.agent import local
from sandboxlite.agent.local import (ANSWER_MAX_CHARS, BLOCK_MAX_LINES, PROSE_MAX_CHARS, LocalModel, small_grammar,
                                     small_reply_problem)  # fmt: skip
from sandboxlite.agent.model import AssistantMessage, parse_text_tool_calls
from sandboxlite.agent.tools import tool_schemas
from sandboxlite.errors import ModelError

TOOLS = tool_schemas()
NAMES = {t["function"]["name"] for t in TOOLS}


def rules(gbnf: str) -> dict[str, str]:
    out = {}
    for line in gbnf.strip().split("\n"):
        name, _, body = line.partition(" ::= ")
        assert name and body and name not in out, line
        out[name] = body
    return out


# -- the grammar's text ------------------------------------------------------------------------------
def test_the_grammar_is_a_block_or_an_answer():
    g = rules(small_grammar(TOOLS))
    assert g["root"] == "answer | call"
    assert g["call"] == '(prose "\\n" "\\n"?)? block'  # prose is optional; the block ends the reply
    assert g["block"] == '"```" lang "\\n" body "\\n```"'  # closed, nothing after it
    assert g["lang"] == '"bash" | "python"'
    assert f"{{0,{ANSWER_MAX_CHARS - 1}}}" in g["answer"] and f"{{0,{PROSE_MAX_CHARS - 1}}}" in g["prose"]
    assert PROSE_MAX_CHARS < ANSWER_MAX_CHARS  # past the prose's bound only the answer goes on
    assert f"{{0,{BLOCK_MAX_LINES - 1}}}" in g["body"] and g["body"].startswith("first ")  # not blank
    assert "tool_call" not in small_grammar(TOOLS) and "name" not in small_grammar(TOOLS)  # no JSON call
    # every rule used is defined, every rule defined is used
    bare = [re.sub(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]', " ", body) for body in g.values()]
    assert set(re.findall(r"[a-z]+", " ".join(bare))) == set(g) - {"root"}


def test_without_execute_bash_the_grammar_is_the_answer_alone():
    g = rules(small_grammar([t for t in TOOLS if t["function"]["name"] != "execute_bash"]))
    assert g["root"] == "answer" and "block" not in g and "call" not in g


@pytest.mark.parametrize("text, problem", [
    ("```bash\nls\n```", None),  # a call (checked by its calls)
    ("Paris", None),
    ("x" * ANSWER_MAX_CHARS, None),
    ("x" * (ANSWER_MAX_CHARS + 1), "an answer longer than"),
    ("Output:\n```\n42\n```", "a code block that is not a command"),
    ("  \n", "an empty reply"),
])  # fmt: skip
def test_what_the_retry_mode_regenerates(text, problem):
    calls = parse_text_tool_calls(text, NAMES, code_blocks=True)
    got = small_reply_problem(text, calls)
    assert got == problem if problem is None else got.startswith(problem)


# -- the grammar's language, by llama.cpp -------------------------------------------------------------
@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("llama_cpp", reason="the [local] extra is not installed (tools/setup.sh installs it)")
    return LocalModel(local.embedded_model(), max_tokens=200)


def accepts(model: LocalModel, gbnf: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets the model write ``text`` (as its tokens) and then stop."""
    import llama_cpp

    vocab = model.llm._model.vocab
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    assert sampler, "llama.cpp could not parse the grammar"

    def allowed(token: int) -> bool:  # a one-candidate array: the grammar sets its logit to -inf or not
        cand = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(id=token, logit=0.0, p=0.0))
        arr = llama_cpp.llama_token_data_array(data=cand, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(arr))
        return cand[0].logit != float("-inf")

    try:
        for token in model.llm.tokenize(text.encode(), add_bos=False, special=False):
            if not allowed(token):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return allowed(llama_cpp.llama_vocab_eos(vocab))  # the end: only where the grammar is complete
    finally:
        llama_cpp.llama_sampler_free(sampler)


FOUR_LINES = "\n".join(["The sum is 42 and here is why it is so."] * 4)


@pytest.mark.parametrize("text", [
    "5",
    "The capital of France is Paris.",
    FOUR_LINES,
    "x" * ANSWER_MAX_CHARS,
    'The error is in `main`: File "<stdin>", line 8; 2 < 3.',  # inline code, a < that is no tag
    "```bash\nls /testbed/input\n```",
    "Let me look:\n```bash\nls /testbed/input\n```",
    "Let me look:\n\n```python\nwith open('/testbed/input/numbers.txt') as f:\n    print(sum(int(x) for x in f))\n```",
    "```bash\ncat <<'EOF' > /testbed/output/answer.txt\n42\nEOF\n```",  # a here-document
    "p" * PROSE_MAX_CHARS + "\n```bash\nls\n```",
    "```bash\n" + "echo\n" * BLOCK_MAX_LINES + "```",
])  # fmt: skip
def test_llama_cpp_accepts(smol, text):
    assert accepts(smol, small_grammar(TOOLS), text)


@pytest.mark.parametrize("text", [
    "```\n42\n```",  # a bare block: imagined output
    "Output:\n```text\n42\n```",  # a block in another language
    "```bash\nls\n```\nOutput:\n```\na.txt\n```",  # anything after the command
    "```bash\nls\n```\n",
    "```bash\nls",  # not closed
    "```bash\n\n```",  # an empty command
    "```bash\n   \nls\n```",  # its first line blank
    '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
    "I will answer. <tool_call>",
    "<think>hm</think>42",
    "It said <tool_response> twice",
    " 42",  # a blank first character
    "",
    "x" * (ANSWER_MAX_CHARS + 1),  # too long
    "The answer is:\n```\n42",
    "p" * (PROSE_MAX_CHARS + 1) + "\n```bash\nls\n```",  # too much prose before the command
    "```bash\n" + "echo\n" * (BLOCK_MAX_LINES + 1) + "```",  # too many lines
])  # fmt: skip
def test_llama_cpp_refuses(smol, text):
    assert not accepts(smol, small_grammar(TOOLS), text)


def test_only_answers_without_execute_bash(smol):
    gbnf = small_grammar([t for t in TOOLS if t["function"]["name"] == "submit"])
    assert accepts(smol, gbnf, "Paris") and not accepts(smol, gbnf, "```bash\nls\n```")


# -- the wiring: which grammar each mode passes, and that it is made once ------------------------------
def generations(model, monkeypatch, replies):
    seen = []

    def fake(prompt, grammar):
        seen.append(grammar)
        return replies[len(seen) - 1], {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "stop"

    monkeypatch.setattr(model, "_generate", fake)
    return seen


MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]


def test_the_small_profile_is_constrained_by_default(smol):
    assert smol.profile == "small" and smol.constrained == "always" and smol.info["constrained"] == "always"


def test_each_mode_passes_its_grammar(smol, monkeypatch):
    saved = smol.constrained, smol.profile
    try:
        smol.constrained = "always"
        seen = generations(smol, monkeypatch, ["Paris"])
        smol.complete(MESSAGES, TOOLS)
        assert seen[0]._grammar == small_grammar(TOOLS)

        smol.constrained = "never"  # as before: no grammar
        seen = generations(smol, monkeypatch, ["Paris"])
        smol.complete(MESSAGES, TOOLS)
        assert seen == [None]

        smol.constrained = "retry"  # a plain answer is a reply: no retry; a bare block is none
        seen = generations(smol, monkeypatch, ["Paris", "Output:\n```\n42\n```", "```bash\nls\n```"])
        assert smol.complete(MESSAGES, TOOLS).content == "Paris" and seen == [None]
        reply = smol.complete(MESSAGES, TOOLS)
        assert seen[1] is None and seen[2]._grammar == small_grammar(TOOLS)
        assert reply.tool_calls and reply.usage["constrained_retry"] == 1
        assert reply.discarded[0]["error"] == "a code block that is not a command"

        smol.constrained, smol.profile = "always", "standard"  # the standard profile: its JSON grammar, as before
        seen = generations(smol, monkeypatch, ['<tool_call>{"name": "submit", "arguments": {}}</tool_call>'])
        smol.complete(MESSAGES, TOOLS)
        assert "alternative" in seen[0]._grammar and "```" not in seen[0]._grammar
    finally:
        smol.constrained, smol.profile = saved


def test_the_grammar_is_made_once_per_tool_set(smol, monkeypatch):
    made = []
    real = local.small_grammar
    monkeypatch.setattr(local, "small_grammar", lambda tools: made.append(1) or real(tools))
    saved = smol.profile, dict(smol._grammars)
    smol._grammars.clear()
    try:
        first = smol._grammar(TOOLS)
        assert smol._grammar(TOOLS) is first and len(made) == 1
        fewer = smol._grammar(TOOLS[:1])
        assert fewer is not first and len(made) == 2
        smol.profile = "standard"
        assert smol._grammar(TOOLS) is not first and len(made) == 2  # (the JSON one, apart)
    finally:
        smol.profile = saved[0]
        smol._grammars.clear()
        smol._grammars.update(saved[1])


def test_a_grammar_llama_cpp_cannot_parse_is_an_error(smol, monkeypatch):
    monkeypatch.setattr(local, "small_grammar", lambda tools: "root ::= [a")
    saved = dict(smol._grammars)
    smol._grammars.clear()
    try:
        with pytest.raises(ModelError, match="could not parse"):
            smol._grammar(TOOLS)
    finally:
        smol._grammars.clear()
        smol._grammars.update(saved)


# -- the embedded model under it ----------------------------------------------------------------------
SYSTEM = "You work on a Linux computer. Python 3 is installed; there is no network: use what is installed."


def task(query: str, inputs: str = "(none)") -> list[dict]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{query}\n\nInput files:\n{inputs}\nSave the files you make in /testbed/output.\n"}]  # fmt: skip


DEMO_002 = task("What is the capital of France? Write only the city name.")
DEMO_004 = task("Read the input file numbers.txt, which contains two numbers on separate lines. Calculate their sum "
                "and write only the result.", "- /testbed/input/numbers.txt (5 bytes)")  # fmt: skip
# demo_002 after a command and its imagined output: without the grammar the model went on with
# "Output:\n```\nNew file created.\n```" blocks (format errors, three in a row ended the run)
AFTER_TOUCH = DEMO_002 + [
    {"role": "assistant", "content": "To create a new file in a new file, you can use the command `touch file.txt` to "
     "create a new file in a new file.\n\n```bash\n# Create a new file in a new file\ntouch file.txt\n```"
     + "\n\nOutput:\n```\nNew file created.\n```" * 16},
    {"role": "user", "content": "<tool_response>\n[exit code: 0]\n</tool_response>"},
]  # fmt: skip
# demo_004 after a failing script: without the grammar the model answered with 2 KB of prose
AFTER_TRACEBACK = DEMO_004 + [
    {"role": "assistant", "content": '```python\ndef sum_numbers_with_one_line():\n    with open("numbers.txt", "r") '
     'as file:\n        numbers = [int(line.strip().lstrip()) for line in file]\n        return sum(numbers)\n\n'
     'def main():\n    with open("numbers.txt", "w") as file:\n        for num in numbers:\n            '
     'file.write(str(num) + "\\n")\n\n# Test the function\nmain()\n```\n\nOutput:\n```\n1\n2\n3\n```'},
    {"role": "user", "content": '<tool_response>\nTraceback (most recent call last):\n  File "<stdin>", line 12, in '
     "<module>\n  File \"<stdin>\", line 8, in main\nNameError: name 'numbers' is not defined\n[exit code: 1]\n"
     "</tool_response>"},
]  # fmt: skip


def judge(reply: AssistantMessage) -> str:
    """"command": one execute_bash call, its one block closed and last (or cut by max_tokens);
    "answer": no call, what the loop takes as the answer, within the bound; else what is wrong."""
    text = reply.content or ""
    if reply.tool_calls:
        fences = text.count("```")
        one = len(reply.tool_calls) == 1 and reply.tool_calls[0].name == "execute_bash"
        closed = fences == 2 and text.endswith("```") or reply.finish_reason == "length" and fences == 1
        return "command" if one and closed and re.search(r"```(bash|python)\n", text) else f"malformed call: {text!r}"
    return small_reply_problem(text, []) or "answer"


def replies(model: LocalModel, messages: list[dict], seeds, mode: str) -> list[AssistantMessage]:
    from sandboxlite.errors import FormatError

    saved = model.constrained
    model.constrained = mode
    out = []
    try:
        for seed in seeds:
            model.llm.set_seed(seed)
            try:
                out.append(model.complete(messages, TOOLS))
            except FormatError as e:  # (a reply that is no call, kept on the error)
                out.append(e.reply)
    finally:
        model.constrained = saved
    return out


@pytest.mark.local_model
@pytest.mark.parametrize("messages", [DEMO_002, DEMO_004, AFTER_TOUCH, AFTER_TRACEBACK],
                         ids=["demo_002", "demo_004", "after-touch", "after-traceback"])  # fmt: skip
def test_every_reply_under_the_grammar_is_a_command_or_an_answer(smol, messages):
    got = [judge(r) for r in replies(smol, messages, (1, 2, 3), "always")]
    assert set(got) <= {"command", "answer"}, got


@pytest.mark.local_model
def test_without_the_grammar_the_same_turns_go_wrong(smol):
    """The turns above, with the seeds above, without the grammar: what the grammar prevents
    (a bare block of imagined output; prose past the answer's bound, or ending in such a block)."""
    bare = [judge(r) for r in replies(smol, AFTER_TOUCH, (1, 2, 3), "never")]
    assert bare.count("a code block that is not a command") >= 2, bare
    prose = [judge(r) for r in replies(smol, AFTER_TRACEBACK, (1, 2, 3, 4), "never")]
    assert set(prose) - {"command", "answer"}, prose


@pytest.mark.local_model
def test_a_run_under_the_grammar_has_no_format_errors(smol, tmp_path):
    """demo_002 whole, in a sandbox: every step is a command or the answer that ends it."""
    import json

    from sandboxlite.agent.loop import AgentLimits
    from sandboxlite.agent.outcome import ExitReason
    from sandboxlite.agent.run import run_task
    from sandboxlite.agent.task import Task

    t = Task.from_dict({"id": "capital", "query": "What is the capital of France? Write only the city name.",
                        "max_steps": 4})  # fmt: skip
    smol.llm.set_seed(1)
    r = run_task(t, smol, output_dir=tmp_path, limits=AgentLimits(max_steps=4))
    steps = json.loads((tmp_path / "trajectory.json").read_text())["steps"]
    assert steps and [s["error"] for s in steps] == [None] * len(steps)
    assert r.reason is not ExitReason.FORMAT_ERRORS
    if r.submitted:  # the answer, within its bound
        assert 0 < len(r.answer.strip()) <= ANSWER_MAX_CHARS + r.answer.count("<") + r.answer.count("`")
