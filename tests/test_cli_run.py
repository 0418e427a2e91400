"""``sandboxlite run`` as a new user expects it (issue 19, faults 9-12): one-off queries and stdin
tasks, the task's fields as options, numbers checked, an exit code for every way a run ends, a
reused output folder, the query stored once in trajectory.json.

CliRunner for parsing and exit codes (real sandboxes, the real openai client against the loopback
server of ``fake_openai``); a real subprocess for the signals."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.agent.model import FakeModel
from sandboxlite.agent.run import TrajectoryWriter, run_task
from sandboxlite.agent.task import Task
from sandboxlite.cli import EXIT_MODEL, EXIT_NOT_SUBMITTED, EXIT_USAGE, main

from .fake_openai import FakeOpenAIServer as S

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo_004.json"
OK = S.text_reply("OK")  # the answer to run's preflight request


def run(*args, input=None, env=None):
    return CliRunner().invoke(main, ["run", *args], input=input, env=env)


def bash_reply(cmd):
    return S.tool_call_reply("execute_bash", {"command": cmd})


def traj(out):
    return json.loads((Path(out) / "trajectory.json").read_text())


@pytest.fixture
def no_openai_env(monkeypatch):
    """No endpoint or key from the environment; any attempt to leave loopback fails at once."""
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "SANDBOXLITE_LOCAL_URL", "SANDBOXLITE_LOCAL_MODEL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


# -- fault 9: a one-off query, a task on stdin, the task's fields as options ------------------------
def test_a_one_off_query_needs_no_task_file(tmp_path):
    r = run("--query", "What is 6*7?", "--model", "scripted", "--quiet", "--output-dir", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    t = traj(tmp_path / "o")
    assert t["task"]["id"] == "query" and t["exit_reason"] == "submitted"
    assert any("What is 6*7?" in (m.get("content") or "") for m in t["messages"])


def test_a_task_from_stdin(tmp_path):
    task = {"id": "from-stdin", "query": "Sum the numbers in numbers.txt.", "input_files": {"numbers.txt": "1\n2\n"}}
    r = run("-", "--model", "scripted", "--quiet", "--output-dir", str(tmp_path / "o"), input=json.dumps(task))
    assert r.exit_code == 0, r.output
    assert traj(tmp_path / "o")["task"]["id"] == "from-stdin"
    r = run("-", "--model", "scripted", "--output-dir", str(tmp_path / "bad"), input="{not json")
    assert r.exit_code == EXIT_USAGE and "stdin" in r.stderr and "not valid JSON" in r.stderr


@pytest.mark.parametrize("args, words", [
    ((), "give a task file"),
    ((str(DEMO), "--query", "q"), "not both"),
])  # fmt: skip
def test_exactly_one_of_task_file_and_query(args, words):
    r = run(*args, "--model", "scripted")
    assert r.exit_code == EXIT_USAGE and words in r.stderr and "--query" in r.stderr


def test_input_dir_network_rootfs_and_timeout_override_the_task(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "f.txt").write_text("from the host dir")
    with S([OK, bash_reply("cat /testbed/input/f.txt > /testbed/output/answer.txt; "
                           "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > /testbed/output/nics"),
            S.tool_call_reply("submit", {})]) as srv:  # fmt: skip
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k", "--quiet",
                "--input-dir", str(inputs), "--network", "host", "--rootfs", "host", "--timeout", "300",
                "--output-dir", str(tmp_path / "o"))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "from the host dir"  # the directory replaced the task's input_files
    t = traj(tmp_path / "o")
    assert (t["task"]["rootfs"], t["task"]["network"], t["task"]["timeout_s"]) == ("host", "host", 300.0)
    assert t["task"]["input_dir"] == str(inputs) and t["task"]["input_files"] == {}
    assert t["limits"]["max_wall_s"] == 300.0
    host_nics = {line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]}
    assert set((tmp_path / "o" / "files" / "nics").read_text().split()) == host_nics  # the host's network


def test_timeout_ends_the_run(tmp_path):
    with S([OK, S.slow(1.5, bash_reply("true")), bash_reply("true")]) as srv:
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k", "--quiet",
                "--timeout", "1", "--output-dir", str(tmp_path / "o"))  # fmt: skip
    assert r.exit_code == EXIT_NOT_SUBMITTED and "wall time" in r.stderr
    assert traj(tmp_path / "o")["reason"] == "wall_time"


def test_help_names_every_model_kind():
    r = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert r.exit_code == 0
    model_help = r.stdout.split("--model")[1].split("\n  -")[0]
    for word in ("local", "local:", "scripted", "--base-url"):
        assert word in model_help, model_help
    for opt in ("--query", "--input-dir", "--network", "--rootfs", "--timeout", "--overwrite"):
        assert opt in r.stdout


# -- fault 10: numbers and JSON checked ---------------------------------------------------------------
@pytest.mark.parametrize("option, value", [
    ("--max-steps", "0"), ("--max-steps", "-1"), ("--temperature", "-3"), ("--max-tokens", "-5"),
    ("--token-budget", "0"), ("--timeout", "0"), ("--extra-body", "[1]"), ("--extra-body", "{bad"),
])  # fmt: skip
def test_bad_numbers_and_json_are_refused(tmp_path, option, value):
    r = run(str(DEMO), "--model", "scripted", "--quiet", option, value, "--output-dir", str(tmp_path / "o"))
    assert r.exit_code == EXIT_USAGE, r.output
    assert option in r.stderr
    assert not (tmp_path / "o").exists()  # refused before anything ran


# -- fault 11: exit codes -----------------------------------------------------------------------------
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_run_with_its_code_and_keeps_the_outputs(tmp_path, sig, code):
    out = tmp_path / "o"
    with S([OK, bash_reply("echo 42 > /testbed/output/answer.txt"), S.slow(60, bash_reply("true"))]) as srv:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        p = subprocess.Popen([sys.executable, "-m", "sandboxlite.cli", "run", str(DEMO), "--model", "m",
                              "--base-url", srv.base_url, "--api-key", "k", "--quiet", "--output-dir", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        try:
            while len(srv.requests) < 3 and p.poll() is None:  # the third request: the slow one
                time.sleep(0.05)
            assert p.poll() is None, p.communicate()
            p.send_signal(sig)
            stdout, stderr = p.communicate(timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert p.returncode == code, stderr
    assert "Aborted!" not in stderr and "Traceback" not in stderr and "interrupted" in stderr
    t = traj(out)
    assert t["reason"] == "interrupted" and t["exit_reason"] == "interrupted" and len(t["steps"]) == 1
    assert (out / "answer.txt").read_text() == "42\n" and (out / "files" / "answer.txt").read_text() == "42\n"


def test_an_unknown_rootfs_is_bad_input_with_a_hint_that_works(tmp_path):
    task = tmp_path / "t.json"
    task.write_text(json.dumps({"id": "t", "query": "q", "rootfs": "nosuch"}))
    r = run(str(task), "--model", "scripted", "--output-dir", str(tmp_path / "o"))
    assert r.exit_code == EXIT_USAGE, r.output
    assert "rootfs" in r.stderr and "nosuch" in r.stderr and "Hint:" in r.stderr
    assert "rootfs build nosuch" not in r.stderr  # no such profile: that command fails
    assert "sandboxlite rootfs build lean" in r.stderr  # a profile that exists
    from sandboxlite.images.build import profile_names

    assert "lean" in profile_names()
    r = run("--query", "q", "--rootfs", "/no/such/dir", "--model", "scripted")
    assert r.exit_code == EXIT_USAGE and "--rootfs" in r.stderr and "/no/such/dir" in r.stderr


def test_a_missing_gguf_file_is_bad_input(tmp_path):
    r = run(str(DEMO), "--model", "local:/nope.gguf", "--output-dir", str(tmp_path / "o"))
    assert r.exit_code == EXIT_USAGE, r.output
    assert "no GGUF model file at /nope.gguf" in r.stderr and "Hint:" in r.stderr


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe{\x00}\x00", "not UTF-8"),
    (b"{", "not valid JSON"),
    (b"[1, 2]", "expected a JSON object"),
])  # fmt: skip
def test_a_task_file_that_is_not_utf8_json_is_bad_input(tmp_path, content, words):
    task = tmp_path / "t.json"
    task.write_bytes(content)
    r = run(str(task), "--model", "scripted")
    assert r.exit_code == EXIT_USAGE, r.output
    assert words in r.stderr and str(task) in r.stderr
    assert isinstance(r.exception, SystemExit)  # a message, no traceback


def test_a_base_url_that_is_no_url_fails_at_once_as_bad_input(tmp_path, no_openai_env):
    r = run(str(DEMO), "--model", "m", "--base-url", "notaurl", "--output-dir", str(tmp_path / "o"))
    assert r.exit_code == EXIT_USAGE, r.output
    assert "notaurl" in r.stderr and "http://" in r.stderr and "--base-url" in r.stderr
    assert not (tmp_path / "o").exists()


def test_an_unknown_model_name_without_an_endpoint_is_refused(tmp_path, no_openai_env):
    r = run(str(DEMO), "--model", "nosuchlocal:/x.gguf", "--output-dir", str(tmp_path / "o"))
    assert r.exit_code == EXIT_USAGE, r.output
    assert "nosuchlocal:/x.gguf" in r.stderr and "--base-url" in r.stderr and "local:/" in r.stderr
    assert not (tmp_path / "o").exists()


def test_the_preflight_runs_before_the_sandbox_and_endpoint_failures_are_3(tmp_path, no_openai_env):
    with S([S.error(404, "no such model")]) as srv:
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k",
                "--output-dir", str(tmp_path / "o"))  # fmt: skip
        assert r.exit_code == EXIT_MODEL and "404" in r.stderr and "model name" in r.stderr
        assert len(srv.requests) == 1 and srv.requests[0]["max_tokens"] == 1  # the preflight, nothing more
    assert not (tmp_path / "o").exists()
    with S([S.error(501, "not implemented")]) as srv:  # not retried
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k")
        assert r.exit_code == EXIT_MODEL and "501" in r.stderr and len(srv.requests) == 1
    r = run(str(DEMO), "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k")  # nothing listens
    assert r.exit_code == EXIT_MODEL and "could not connect" in r.stderr


def test_no_api_key_is_said(tmp_path, no_openai_env):
    with S([S.error(403, "forbidden")]) as srv:
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url)
    assert r.exit_code == EXIT_MODEL and "403" in r.stderr and "no API key is set" in r.stderr
    assert "--api-key" in r.stderr


# -- fault 12: a reused output folder; the query stored once -------------------------------------------
def test_a_non_empty_output_dir_is_refused_without_overwrite(tmp_path):
    out = tmp_path / "o"
    (out / "files").mkdir(parents=True)
    (out / "answer.txt").write_text("stale")
    r = run(str(DEMO), "--model", "scripted", "--quiet", "--output-dir", str(out))
    assert r.exit_code == EXIT_USAGE, r.output
    assert "not empty" in r.stderr and "--overwrite" in r.stderr
    assert (out / "answer.txt").read_text() == "stale"  # untouched


def test_overwrite_empties_the_folder_and_nothing_outside_it(tmp_path):
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "keep.txt").write_text("keep")
    (outside / "sub" / "keep2.txt").write_text("keep")
    out = tmp_path / "o"
    (out / "files" / "deep").mkdir(parents=True)
    (out / "answer.txt").write_text("stale")
    (out / "files" / "deep" / "old.txt").write_text("stale")
    (out / "link-to-outside").symlink_to(outside)
    (out / "files" / "link-in-files").symlink_to(outside / "sub")
    r = run(str(DEMO), "--model", "scripted", "--quiet", "--overwrite", "--output-dir", str(out))
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == ["answer.txt", "files", "trajectory.json"]
    assert not (out / "files" / "deep").exists() and (out / "answer.txt").read_text() != "stale"
    assert (outside / "keep.txt").read_text() == "keep" and (outside / "sub" / "keep2.txt").read_text() == "keep"
    link = tmp_path / "link"
    link.symlink_to(outside)
    r = run(str(DEMO), "--model", "scripted", "--quiet", "--overwrite", "--output-dir", str(link))
    assert r.exit_code == EXIT_USAGE and "symlink" in r.stderr
    assert (outside / "keep.txt").exists()


def test_the_query_is_stored_once(tmp_path):
    query = "Count the numbers. QUERY-MARKER " + "z" * 50_000
    task = Task.from_dict({"id": "q1", "query": query, "input_files": {"n.txt": "1\n"}})
    seen = []

    def check(agent, step):  # the file as it is after every step: valid, the query once
        text = (tmp_path / "trajectory.json").read_text()
        seen.append(text.count("QUERY-MARKER"))
        json.loads(text)

    script = [{"tool": "execute_bash", "arguments": {"command": f"echo {i}"}} for i in range(4)]
    script += [{"tool": "execute_bash", "arguments": {"command": "echo 1 > /testbed/output/answer.txt"}},
               {"tool": "submit", "arguments": {}}]  # fmt: skip
    r = run_task(task, FakeModel(script), output_dir=tmp_path, on_step=check)
    assert r.submitted and seen == [1] * 6
    text = (tmp_path / "trajectory.json").read_text()
    assert text.count("QUERY-MARKER") == 1
    t = json.loads(text)
    assert "query" not in t["task"]
    assert t["task"]["query_sha256"] == hashlib.sha256(query.encode()).hexdigest()
    assert t["task"]["query_chars"] == len(query)
    assert query in t["messages"][1]["content"]


def test_a_template_without_the_query_keeps_it_in_the_header(tmp_path):
    prompt = tmp_path / "p.txt"
    prompt.write_text("[system]\nYou solve tasks.\n[instance]\nSolve the task in the input folder.\n")
    task = Task.from_dict({"id": "q2", "query": "QUERY-MARKER two", "prompt": str(prompt)})
    r = run_task(task, FakeModel([{"tool": "submit", "arguments": {}}] * 2), output_dir=tmp_path)
    text = (tmp_path / "trajectory.json").read_text()
    assert text.count("QUERY-MARKER") == 1 and json.loads(text)["task"]["query"] == "QUERY-MARKER two"
    assert r.steps == 2


def test_the_trajectory_writer_rewrites_only_what_changed(tmp_path):
    path = tmp_path / "t.json"
    w = TrajectoryWriter(path, {"task": {"id": "x"}, "model": "m"})
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "BIG" * 1000}]
    for i in range(5):
        msgs.append({"role": "assistant", "content": f"reply {i}"})
        w.update(messages=list(msgs), steps=[{"i": k} for k in range(i + 1)])
        assert json.loads(path.read_text()) == w.data
    msgs[3] = {**msgs[3], "content": "clipped"}  # an earlier message changed (clipping)
    w.update(messages=msgs[:-1], steps=[])  # and the list got shorter
    assert json.loads(path.read_text()) == w.data
    w.update(messages=msgs, exit_reason="done", final=True)
    assert json.loads(path.read_text()) == w.data and path.read_text().startswith("{\n")


# -- fault 8: a server without a tool-call parser ---------------------------------------------------
def test_tool_format_text_and_auto_from_the_cli(tmp_path, no_openai_env):
    call = '<tool_call>{"name": "execute_bash", "arguments": {"command": "echo 42 > /testbed/output/answer.txt"}}</tool_call>'
    done = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    with S([OK, S.text_reply(call), S.text_reply(done)]) as srv:
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k", "--quiet",
                "--tool-format", "text", "--output-dir", str(tmp_path / "t"))  # fmt: skip
        sent = srv.requests[1:]
    assert r.exit_code == 0 and r.stdout.strip() == "42", r.output
    assert all("tools" not in q for q in sent) and "<tools>" in sent[0]["messages"][0]["content"]
    refused = S.error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
    with S([OK, refused, S.text_reply(call), S.text_reply(done)]) as srv:
        r = run(str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k", "--quiet",
                "--tool-format", "auto", "--context-tokens", "8192", "--output-dir", str(tmp_path / "a"))  # fmt: skip
        sent = srv.requests[1:]
    assert r.exit_code == 0 and r.stdout.strip() == "42", r.output  # before: the 400 ended the run (exit 3)
    assert "tools" in sent[0] and "tools" not in sent[1] and "tools" not in sent[2]


def test_tool_format_is_refused_for_the_in_process_model():
    r = run(str(DEMO), "--model", "local:/nope.gguf", "--tool-format", "text")
    assert r.exit_code == EXIT_USAGE and "--tool-format" in r.stderr
    assert run(str(DEMO), "--tool-format", "json").exit_code == EXIT_USAGE
