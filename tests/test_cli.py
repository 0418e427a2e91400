"""The CLI parses, runs and maps errors to exit codes (click's CliRunner, real sandboxes)."""

import json
from pathlib import Path

from click.testing import CliRunner

from sandboxlite.cli import EXIT_MODEL, EXIT_NOT_SUBMITTED, EXIT_SANDBOX, EXIT_USAGE, main

from .fake_openai import FakeOpenAIServer

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo_004.json"


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input)


def test_exec_passes_exit_code_and_output():
    r = run("exec", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert r.exit_code == 7
    assert r.stdout == "out\n" and "err\n" in r.stderr


def test_exec_stdin_env_and_mount(host_dir):
    (host_dir / "f.txt").write_text("from host")
    r = run("exec", "--mount", f"{host_dir}:/in:ro", "--env", "A=1", "--", "sh", "-c", "cat /in/f.txt; echo $A; cat",
            input="piped")
    assert r.exit_code == 0, r.output
    assert r.stdout == "from host1\npiped"


def test_exec_timeout_is_124():
    r = run("exec", "--timeout", "0.3", "--", "sleep", "10")
    assert r.exit_code == 124 and "timed out" in r.stderr


def test_exec_not_found_is_127():
    assert run("exec", "--", "no-such-program").exit_code == 127


def test_bad_config_is_usage_error(tmp_path):
    r = run("exec", "--mount", "/definitely/not/here:/x", "--", "true")
    assert r.exit_code == EXIT_USAGE and "does not exist" in r.stderr
    r = run("exec", "--env", "NOEQUALS", "--", "true")
    assert r.exit_code == EXIT_USAGE and "KEY=VALUE" in r.stderr


def test_setup_failure_is_125_with_hint(monkeypatch):
    monkeypatch.setenv("SANDBOXLITE_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setenv("PATH", "/nonexistent")
    r = run("exec", "--", "true")
    assert r.exit_code == EXIT_SANDBOX
    assert "Hint:" in r.stderr


def test_doctor_reports_each_check():
    r = run("doctor")
    assert r.exit_code == 0, r.output
    for name in ("bubblewrap", "user namespaces", "seccomp", "cgroups", "identity", "executor", "rootfs", "sandbox"):
        assert f"] {name}:" in r.stdout


def test_run_exit_code_follows_how_the_run_ended(tmp_path):
    """A model error is exit code 3 (the run's reason, not the text, decides), a limit is 1."""
    S = FakeOpenAIServer
    with S([S.text_reply("OK"), S.error(401, "bad key")]) as srv:  # "OK": the preflight's answer
        r = run("run", str(DEMO), "--model", "m", "--base-url", srv.base_url, "--api-key", "k", "--mode", "vanilla",
                "--output-dir", str(tmp_path / "err"))  # fmt: skip
    assert r.exit_code == EXIT_MODEL and "the run ended without an answer: model error: " in r.stderr
    t = json.loads((tmp_path / "err" / "trajectory.json").read_text())
    assert t["reason"] == "model_error" and t["exit_reason"].startswith("model error: ")
    r = run("run", str(DEMO), "--model", "scripted", "--max-steps", "1", "--quiet",
            "--output-dir", str(tmp_path / "lim"))  # fmt: skip
    assert r.exit_code == EXIT_NOT_SUBMITTED and "limits exceeded: max_steps=1 reached" in r.stderr
    assert json.loads((tmp_path / "lim" / "trajectory.json").read_text())["reason"] == "max_steps"
