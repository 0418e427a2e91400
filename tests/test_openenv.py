"""sandboxlite.openenv: the OpenEnv environment, served by openenv-core's own app (uvicorn on a
loopback port) and driven by openenv-core's own client over real sandboxes; then TRL's
GRPOTrainer with ``environment_factory`` over that client (TRL's OpenEnv integration), on a tiny
random model on CPU.  Needs the ``[openenv]`` extra (openenv-core); the TRL test the ``[trl]`` one.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

try:
    import openenv.core  # noqa: F401  (the real package: tools/setup.sh installs the [openenv] extra)
except ImportError as e:  # a missing extra is a broken setup, not a test to skip
    raise ImportError("openenv-core is missing: pip install -e '.[openenv]' (tools/setup.sh does)") from e

from sandboxlite import SandboxConfig, SandboxPool  # noqa: E402
from sandboxlite.agent.task import Task  # noqa: E402
from sandboxlite.errors import ToolError  # noqa: E402
from sandboxlite.openenv import SandboxliteAction, SandboxliteEnv, SandboxliteState  # noqa: E402
from sandboxlite.openenv.server import SandboxliteEnvironment, make_app, serve_in_thread  # noqa: E402
from sandboxlite.openenv.trl import SandboxliteToolEnv, row_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SESSIONS = 4
SUM = {"id": "sum", "query": "Add the two numbers in /testbed/input/n.txt", "input_files": {"n.txt": "17\n25\n"},
       "metadata": {"answer": "42"}}  # fmt: skip


def bash(command: str) -> SandboxliteAction:
    return SandboxliteAction(tool="execute_bash", arguments={"command": command})


SUBMIT = SandboxliteAction(tool="submit")


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(size=SESSIONS, rootfs="host") as p:
        yield p


@pytest.fixture(scope="module")
def url(pool):
    """openenv-core's app (make_app) under uvicorn, in a thread, on a free loopback port."""
    base_url, stop = serve_in_thread(make_app(pool, max_sessions=SESSIONS))
    yield base_url
    stop()


@pytest.fixture
def client(url, pool):
    """A session (sync client); every test ends with all sandboxes back in the pool."""
    env = SandboxliteEnv(base_url=url).sync()
    env.connect()
    yield env
    env.close()
    assert wait_for(lambda: pool.in_use == 0), f"{pool.in_use} sandboxes still held after the session closed"


def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# -- an episode over the WebSocket session -------------------------------------------------------------
def test_reset_steps_submit_reward(client, pool):
    r = client.reset(task=SUM, episode_id="ep-1")
    obs = r.observation
    assert (r.done, r.reward, obs.error) == (False, None, None)
    assert [m["role"] for m in obs.messages] == ["system", "user"] and SUM["query"] in obs.messages[1]["content"]
    assert "/testbed/input/n.txt (6 bytes)" in obs.messages[1]["content"]
    assert [t["function"]["name"] for t in obs.tools] == ["execute_bash", "str_replace_editor", "submit"]
    assert pool.in_use == 1
    state = client.state()
    assert isinstance(state, SandboxliteState)
    assert (state.episode_id, state.step_count, state.task_id, state.done) == ("ep-1", 0, "sum", False)

    r = client.step(bash("cat input/n.txt; pwd"))
    assert r.observation.output == "17\n25\n/testbed\n[exit code: 0]" and r.observation.exit_code == 0
    assert (r.done, r.reward, r.observation.tool_calls) == (False, 0.0, ["execute_bash"])
    r = client.step(bash("cd input && false"))  # the shell persists between steps
    assert r.observation.exit_code == 1 and client.step(bash("pwd")).observation.output.startswith("/testbed/input\n")
    r = client.step(SandboxliteAction(tool="str_replace_editor", arguments={
        "command": "create", "path": "/testbed/output/answer.txt", "file_text": "42\n"}))  # fmt: skip
    assert r.observation.output.startswith("File created successfully at: /testbed/output/answer.txt")
    r = client.step({"tool": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed/output/answer.txt"}})
    assert r.observation.output.endswith("     1\t42\n")
    r = client.step(SUBMIT)
    assert (r.done, r.reward, r.observation.output) == (True, 1.0, "submitted")
    assert (r.observation.answer, r.observation.exit_reason, r.observation.error) == ("42\n", "submitted", None)
    assert wait_for(lambda: pool.in_use == 0)  # the episode ended: its sandbox went back at once
    state = client.state()
    assert (state.step_count, state.done, state.reward, state.exit_reason) == (6, True, 1.0, "submitted")
    # a step after the end is an error observation, not an exception
    r = client.step(bash("ls"))
    assert r.done and "no episode is running" in r.observation.error and r.reward is None


def test_a_wrong_answer_scores_zero_and_reset_starts_afresh(client, pool):
    client.reset(task=Task.from_dict(SUM))  # a Task works too
    client.step(bash("echo 41 > output/answer.txt; echo leftover > /testbed/x"))
    r = client.step(SUBMIT)
    assert (r.done, r.reward, r.observation.answer) == (True, 0.0, "41\n")
    # another episode in the same session: a clean sandbox
    client.reset(task=SUM, max_steps=2)
    assert client.step(bash("ls /testbed/x; ls output")).observation.output.startswith("ls: cannot access")
    r = client.step(bash("true"))  # the reset's max_steps: the second step ends the episode
    assert r.done and r.reward == 0.0 and "max_steps=2" in r.observation.exit_reason
    assert wait_for(lambda: pool.in_use == 0)


def test_bad_actions_are_error_observations(client):
    client.reset(task=SUM)
    cases = [
        (SandboxliteAction(tool="rm_rf"), "unknown tool 'rm_rf'"),
        (SandboxliteAction(tool="execute_bash", arguments="{not json"), "the arguments are not valid JSON"),
        (SandboxliteAction(tool="execute_bash", arguments={"cmd": "ls"}), "execute_bash"),
        (SandboxliteAction(tool="str_replace_editor", arguments={"command": "view", "path": "relative"}), "absolute"),
        (SandboxliteAction(), "did not call a tool"),
        (SandboxliteAction(message="I think the answer is 42."), "did not call a tool"),
        (SandboxliteAction(tool="submit", message={"role": "assistant", "content": "x"}), "not both"),
    ]
    for action, expected in cases:
        r = client.step(action)
        obs = r.observation
        assert not r.done and obs.error is not None and expected in obs.error, (action, obs.error)
        assert expected in obs.output  # what the model is shown
    # a whole assistant message with two calls (as SandboxEnv.step takes it)
    r = client.step(SandboxliteAction(message={"role": "assistant", "content": "two calls", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "echo 1"}'}},
        {"id": "b", "type": "function", "function": {"name": "execute_bash", "arguments": {"command": "exit 5"}}}]}))
    assert r.observation.tool_calls == ["execute_bash", "execute_bash"] and r.observation.exit_code == 5
    assert [m["tool_call_id"] for m in r.observation.messages] == ["a", "b"] and r.observation.error is None
    # an action that does not fit the schema is refused by openenv-core itself (not a server error)
    with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
        client.step({"tool": "submit", "bogus": 1})
    assert not client.state().done and client.step(SUBMIT).done  # the session goes on


def test_bad_resets_are_error_observations(client, pool):
    for kwargs, expected in [
        ({}, "no task"),
        ({"task": {"id": "x"}}, "query"),
        ({"task": {**SUM, "input_dir": "/etc"}}, "host paths"),
        ({"task": {**SUM, "prompt": "/etc/shadow"}}, "host paths"),
        ({"task": {"id": "x", "query": "q", "input_dir": "/nonexistent"}}, "host paths"),  # (not looked up)
        ({"task": SUM, "bogus": 1}, "unknown reset argument"),
    ]:
        r = client.reset(**kwargs)
        assert r.done and expected in r.observation.error, (kwargs, r.observation.error)
        assert pool.in_use == 0
    assert "no episode is running" in client.step(SUBMIT).observation.error


def test_sessions_have_their_own_sandboxes(url, pool):
    with SandboxliteEnv(base_url=url).sync() as a, SandboxliteEnv(base_url=url).sync() as b:
        a.reset(task=SUM)
        b.reset(task={**SUM, "input_files": {"n.txt": "1\n2\n"}})
        assert pool.in_use == 2
        assert a.step(bash("echo secret-a > /testbed/mine; cat input/n.txt")).observation.output.startswith("17\n25")
        out = b.step(bash("cat /testbed/mine; cat input/n.txt")).observation.output
        assert "No such file" in out and "secret-a" not in out and "1\n2\n" in out
        assert a.state().episode_id != b.state().episode_id
    assert wait_for(lambda: pool.in_use == 0), "closed sessions keep their sandboxes"


def test_a_dropped_connection_gives_the_sandbox_back(url, pool):
    env = SandboxliteEnv(base_url=url).sync()
    env.reset(task=SUM)
    assert pool.in_use == 1
    env._run(env.async_client._ws.close())  # the connection drops without a close message
    assert wait_for(lambda: pool.in_use == 0)
    env.close()


def test_the_session_limit(url, pool):
    clients = [SandboxliteEnv(base_url=url).sync() for _ in range(SESSIONS)]
    try:
        for c in clients:
            c.reset(task=SUM)
        assert pool.in_use == SESSIONS
        async def one_more() -> dict:  # (the raw protocol: openenv-core's client may see the close first)
            from websockets.asyncio.client import connect

            async with connect(url.replace("http://", "ws://") + "/ws") as ws:
                return json.loads(await asyncio.wait_for(ws.recv(), 30))

        refused = asyncio.run(one_more())
        assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED", refused
    finally:
        for c in clients:
            c.close()
    assert wait_for(lambda: pool.in_use == 0)


def test_the_async_client(url, pool):
    async def episode(answer: str) -> float:
        async with SandboxliteEnv(base_url=url) as env:
            await env.reset(task=SUM)
            await env.step(bash(f"echo {answer} > output/answer.txt"))
            return (await env.step(SUBMIT)).reward

    async def both():
        return await asyncio.gather(episode("42"), episode("40"))

    assert asyncio.run(both()) == [1.0, 0.0]
    assert wait_for(lambda: pool.in_use == 0)


def test_the_stateless_http_endpoints(url, pool):
    status, body = post(url, "/reset", {"task": SUM, "seed": 1})
    assert status == 200 and body["done"] is False and body["observation"]["task_id"] == "sum"
    assert wait_for(lambda: pool.in_use == 0)  # the request's environment was closed
    status, body = post(url, "/step", {"action": {"tool": "submit"}})  # no session, hence no episode
    assert status == 200 and "no episode is running" in body["observation"]["error"]
    status, body = post(url, "/step", {"action": {"tool": 3}})
    assert status == 422
    with urllib.request.urlopen(url + "/schema", timeout=30) as r:
        schema = json.loads(r.read())
    assert {"tool", "arguments", "message"} <= set(schema["action"]["properties"])
    with urllib.request.urlopen(url + "/metadata", timeout=30) as r:
        assert json.loads(r.read())["name"] == "sandboxlite"


def test_the_environment_in_process():
    """The Environment itself, with a pool of its own (closed with it)."""
    env = SandboxliteEnvironment(config=SandboxConfig(rootfs="host"))
    assert env.state.done and env.step(SUBMIT).error
    obs = env.reset(task=SUM)
    assert not obs.done and env.sandbox_env.sandbox is not None
    own = env.sandbox_env.pool
    assert own.size == 1 and own.in_use == 1
    env.close()
    assert own.closed and env.sandbox_env is None


def test_the_server_as_a_process():
    """``python -m sandboxlite.openenv.server`` as a user starts it (then an episode and SIGTERM)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proc = subprocess.Popen([sys.executable, "-m", "sandboxlite.openenv.server", "--port", str(port),
                             "--sessions", "1", "--rootfs", "host"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        def healthy() -> bool:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    return json.loads(r.read())["status"] == "healthy"
            except OSError:
                return proc.poll() is not None  # (died: stop waiting)

        assert wait_for(healthy, 60) and proc.poll() is None, proc.stdout.read() if proc.poll() is not None else ""
        with SandboxliteEnv(base_url=url).sync() as env:
            env.reset(task=SUM)
            env.step(bash("awk '{s+=$1} END {print s}' input/n.txt > output/answer.txt"))
            assert env.step(SUBMIT).reward == 1.0
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    # uvicorn shuts down (the app's pool closed) and then re-raises the signal it caught
    assert proc.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in out, out
    assert "Traceback" not in out, out


# -- TRL's OpenEnv integration ------------------------------------------------------------------------------
def test_rows_and_the_tool_env(url, pool):
    assert row_task({"task": json.dumps(SUM)}) == SUM
    assert row_task({"prompt": [{"role": "user", "content": "What is 17+25?"}], "input_files": '{"n.txt": "1"}',
                     "answer": "42"}) == {"id": "trl", "query": "What is 17+25?", "input_files": {"n.txt": "1"},
                                          "metadata": {"answer": "42"}}  # fmt: skip
    env = SandboxliteToolEnv(url)
    try:
        text = env.reset(prompt=[{"role": "user", "content": "Sum them."}], task=SUM)
        assert text.startswith("\n\n") and "/testbed/output/answer.txt" in text
        assert env.execute_bash(command="cat input/n.txt") == "17\n25\n[exit code: 0]"
        with pytest.raises(ToolError, match="str_replace_editor: unknown command 'delete'; use one of: view, create"):
            env.str_replace_editor(command="delete", path="/testbed/x")
        assert "created" in env.str_replace_editor(command="create", path="/testbed/output/answer.txt", file_text="42")
        assert env.submit() == "submitted" and env.get_reward() == 1.0
        with pytest.raises(ToolError, match="the episode is over"):
            env.execute_bash(command="ls")
        env.reset(task=SUM)
        assert env.get_reward() == 0.0 and not env.done
    finally:
        env.close()
    assert wait_for(lambda: pool.in_use == 0)


def _tiny_tokenizer(texts, added):
    """A byte-level BPE tokenizer trained on ``texts`` (offline) with the Qwen2.5 chat template TRL
    ships (TRL parses ``<tool_call>`` JSON in the model's output with it); as in test_rl_trl."""
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


def test_grpo_trainer_over_the_openenv_server(url, pool, tmp_path, monkeypatch):
    """TRL's real GRPOTrainer, ``environment_factory=SandboxliteToolEnv.factory(url)``: each rollout a
    session on the server, its tool calls OpenEnv steps, its reward the environment's.

    A random model calls no tools, so generation is steered as in test_rl_trl: GRPOConfig's
    ``generation_kwargs`` ``sequence_bias`` makes the next token of a scripted reply likely: a
    ``<tool_call>`` writing 41 or 42 to the answer file (the same bias: the model's own logits pick,
    so rewards vary), then ``submit``, then a late call that the environment refuses.  Parsing the
    calls, running them, the rewards, the loss and the optimizer step are TRL's own."""
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import get_json_schema
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")

    def call(name, **arguments):
        return json.dumps({"name": name, "arguments": arguments})

    chunks = {"42": call("execute_bash", command="echo 42 > output/answer.txt"),
              "41": call("execute_bash", command="echo 41 > output/answer.txt"),
              "submit": call("submit"), "late": call("execute_bash", command="touch late")}  # fmt: skip
    records = []

    class Recorded(SandboxliteToolEnv):
        def get_reward(self):
            reward = super().get_reward()
            records.append((self.observation.answer, reward, self.done))
            return reward

    probe = Recorded(url)
    schemas = [json.dumps(get_json_schema(m)) for m in (probe.execute_bash, probe.str_replace_editor, probe.submit)]
    probe.close()
    template = (ROOT / "sandboxlite/agent/templates/default.txt").read_text()
    tokenizer = _tiny_tokenizer([*schemas, template] * 3, list(chunks.values()))

    def ids(text):
        return tokenizer.encode(text, add_special_tokens=False)

    tok = {k: tokenizer.convert_tokens_to_ids(v) for k, v in chunks.items()}
    open_, close_, end = tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>", "<|im_end|>"])
    bias = 100.0
    sequence_bias = [
        [ids("<|im_start|>assistant\n") + [open_], bias],
        [[open_, tok["41"]], bias],
        [[open_, tok["42"]], bias],
        *[[[t, close_], bias] for t in tok.values()],
        [[close_, end], bias],
        [ids("</tool_response><|im_end|>\n<|im_start|>assistant\n<tool_call>") + [tok["submit"]], 2 * bias],
        [ids("\nsubmitted\n</tool_response><|im_end|>\n<|im_start|>assistant\n<tool_call>") + [tok["late"]], 3 * bias],
    ]
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id))  # fmt: skip
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}], "task": json.dumps({**SUM, "query": q})}
                                 for q in ("What is 17+25?", "Add the numbers.")] * 4)  # fmt: skip
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=SESSIONS, num_generations=SESSIONS, max_steps=2,
        max_completion_length=256, learning_rate=1e-2, weight_decay=0.0, logging_steps=1, report_to="none",
        use_cpu=True, save_strategy="no", seed=0, dataloader_num_workers=0, max_tool_calling_iterations=3,
        generation_kwargs={"sequence_bias": sequence_bias},
    )  # fmt: skip
    trainer = GRPOTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                          environment_factory=Recorded.factory(url))  # fmt: skip
    try:
        assert [t.__name__ for t in trainer.tools] == ["execute_bash", "str_replace_editor", "submit"]
        trainer.train()
    finally:
        for env in trainer._environment_pool[None]:
            env.close()
    rollouts = 2 * SESSIONS
    assert len(records) == rollouts and all(done for _, _, done in records)
    assert {(answer, reward) for answer, reward, _ in records} == {("42\n", 1.0), ("41\n", 0.0)}
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and any(h["reward_std"] > 0 for h in logs)
    for h in logs:
        assert h["tools/call_frequency"] == 3.0 and h["tools/failure_frequency"] == pytest.approx(1 / 3)
    assert sum(h["rewards/Recorded/mean"] for h in logs) == pytest.approx(sum(r for _, r, _ in records) / SESSIONS)
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)
    assert wait_for(lambda: pool.in_use == 0)


def test_the_example_dry_run():
    """examples/openenv_trl.py --dry-run: the server, one episode through the TRL env, no model."""
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "openenv_trl.py"), "--dry-run"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env={**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1"})  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "reward 1.0" in r.stdout, r.stdout
