"""task.json validation and prompt templates (pure: no sandbox)."""

import json
from pathlib import Path

import pytest

from sandboxlite.agent.prompts import PromptTemplate
from sandboxlite.agent.task import Task
from sandboxlite.errors import TaskError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_minimal_and_full_tasks():
    t = Task.from_dict({"id": "t1", "query": "2+3?"})
    assert (t.rootfs, t.network, t.max_steps, t.input_files) == ("auto", "none", 50, {})
    t = Task.from_dict({"id": "t.2-x", "query": "q", "input_files": {"a/b.txt": "x"}, "network": "host",
                        "max_steps": 3, "timeout_s": 9.5, "model": None, "metadata": {"gt": 1}})
    assert t.input_files == {"a/b.txt": "x"} and t.timeout_s == 9.5


@pytest.mark.parametrize("data, key, words", [
    ({"query": "q"}, "id", "missing"),
    ({"id": "t", "query": "q", "bogus": 1}, "bogus", "unknown key"),
    ({"id": "t", "query": 5}, "query", "expected a non-empty string, got int"),
    ({"id": "t", "query": " "}, "query", "must not be empty"),
    ({"id": "a b", "query": "q"}, "id", "letters"),
    ({"id": "t", "query": "q", "max_steps": "10"}, "max_steps", "positive integer, got str"),
    ({"id": "t", "query": "q", "max_steps": True}, "max_steps", "got bool"),
    ({"id": "t", "query": "q", "max_steps": 0}, "max_steps", "positive"),
    ({"id": "t", "query": "q", "network": "all"}, "network", "must be none, host or allow:RULE"),
    ({"id": "t", "query": "q", "network": "allow:pypy"}, "network", "unknown preset 'pypy'"),
    ({"id": "t", "query": "q", "network": "allow:1.2.3.4"}, "network", "an IP address"),
    ({"id": "t", "query": "q", "input_files": {"../x": "y"}}, "input_files['../x']", "relative"),
    ({"id": "t", "query": "q", "input_files": {"x": 3}}, "input_files['x']", "text"),
    ({"id": "t", "query": "q", "input_files": {}, "input_dir": "/tmp"}, "input_dir", "either"),
    ({"id": "t", "query": "q", "input_dir": "/definitely/missing"}, "input_dir", "not a directory"),
])  # fmt: skip
def test_bad_tasks_name_the_key(data, key, words):
    with pytest.raises(TaskError) as e:
        Task.from_dict(data)
    assert e.value.key == key and words in str(e.value), str(e.value)


def test_load_reports_json_errors(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"id": "x",\n "query": }')
    with pytest.raises(TaskError, match="not valid JSON.*line 2"):
        Task.load(bad)
    with pytest.raises(TaskError, match="cannot read"):
        Task.load(tmp_path / "missing.json")


def test_relative_paths_are_taken_from_the_task_file(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "p.txt").write_text("[system]\ns\n[instance]\n{query}\n")
    f = tmp_path / "t.json"
    f.write_text(json.dumps({"id": "t", "query": "q", "input_dir": "in", "prompt": "p.txt"}))
    t = Task.load(f)
    assert t.input_dir == str(tmp_path / "in") and t.prompt == str(tmp_path / "p.txt")


def test_shipped_examples_are_valid():
    files = sorted(EXAMPLES.glob("*.json"))
    assert len(files) >= 10
    for f in files:
        Task.load(f)


def test_default_prompt_has_the_papers_layout():
    system, instance = PromptTemplate.load().render("Find x.", {"data.csv": "a,b\n"})
    for needle in ("/testbed", "/testbed/input", "/testbed/output", "/testbed/output/answer.txt", "submit"):
        assert needle in system + instance
    assert "Find x." in instance and "/testbed/input/data.csv (4 bytes)" in instance
    v_system, v_instance = PromptTemplate.load(mode="vanilla").render("Find x.", {"data.csv": "a,b\n"})
    assert "=== data.csv ===\na,b" in v_instance and "/testbed" not in v_system


def test_custom_templates_are_checked(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("[system]\nS {workdir}\n[instance]\nQ: {query} {{literal}}\n")
    s, i = PromptTemplate.load(str(p)).render("why?", {})
    assert s == "S /testbed" and i == "Q: why? {literal}\n"
    p.write_text("[system]\nS {nope}\n[instance]\n{query}\n")
    with pytest.raises(TaskError, match="unknown placeholder {nope}"):
        PromptTemplate.load(str(p))
    p.write_text("no sections")
    with pytest.raises(TaskError, match=r"\[system\] and an \[instance\]"):
        PromptTemplate.load(str(p))
