"""`sandboxlite models` and `--model auto` on laid-out stores and loopback servers, in turn.

    .venv/bin/python bench/models_demo.py [--json PATH] [--max-steps 4]

In a home folder of its own: a Hugging Face cache as the hub writes it with the embedded GGUF
placed in it, an Ollama store (its manifest layout, the same GGUF as a blob); an Ollama-shaped
API on loopback (``/api/tags``, ``/api/show``, ``/v1/models``, ``/v1/chat/completions``) serving
"qwen3:4b", and a llama-server-shaped one (``/props``, ``meta``) serving the 135M GGUF.  Then
``sandboxlite models`` and one ``sandboxlite run --model auto`` per state, each time with one
source fewer: both servers -> the Ollama one (more parameters); Ollama stopped -> llama-server;
both stopped -> the largest chat GGUF on disk (run in-process by llama.cpp, a real run); the
stores removed -> the embedded model.  The servers' replies are scripted (a bash call writing the
answer, then submit): what is shown is the choice, that the run goes to it, and the time it
took.  Prints a table and writes JSON (``sandboxlite.bench.models_demo/1``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fake_models import fake_llama_server, fake_ollama, hf_cache, ollama_store  # noqa: E402
from tests.fake_openai import FakeOpenAIServer  # noqa: E402

QUERY = "What is 2 + 3? Write just the number to /testbed/output/answer.txt, then submit."
SB = [str(ROOT / ".venv" / "bin" / "sandboxlite")] if (ROOT / ".venv" / "bin" / "sandboxlite").exists() else \
    [sys.executable, "-m", "sandboxlite"]  # fmt: skip


def script() -> list:
    return [FakeOpenAIServer.text_reply("ok")] + [
        FakeOpenAIServer.tool_call_reply("execute_bash", {"command": "echo 5 > /testbed/output/answer.txt"}),
        FakeOpenAIServer.tool_call_reply("submit", {}),
    ]


def run_auto(env: dict, out: Path, max_steps: int) -> dict:
    t0 = time.monotonic()
    p = subprocess.run([*SB, "run", "--query", QUERY, "--output-dir", str(out), "--quiet", "--max-steps",
                        str(max_steps)], env=env, capture_output=True, text=True, timeout=1800)  # fmt: skip
    wall = time.monotonic() - t0
    line = next((x for x in p.stderr.splitlines() if x.startswith("model: ")), "(no model line)")
    answer = (out / "answer.txt").read_text().strip() if (out / "answer.txt").is_file() else None
    return {"model_line": line, "exit_code": p.returncode, "wall_s": round(wall, 2), "answer": answer,
            "stderr_tail": p.stderr.strip().splitlines()[-1:]}  # fmt: skip


def models(env: dict) -> tuple[str, float]:
    t0 = time.monotonic()
    p = subprocess.run([*SB, "models"], env=env, capture_output=True, text=True, timeout=120)
    return p.stdout + p.stderr, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="default: bench/results/models-demo-<time>.json")
    ap.add_argument("--max-steps", type=int, default=4)
    args = ap.parse_args()
    from sandboxlite.agent.local import embedded_model

    gguf = embedded_model().path
    work = Path(tempfile.mkdtemp(prefix="sbl-models-"))
    home = work / "home"
    hub = hf_cache(home / ".cache" / "huggingface" / "hub",
                   {"HuggingFaceTB/SmolLM2-135M-Instruct-GGUF": {"SmolLM2-135M-Instruct.Q4_1.gguf": gguf}})  # fmt: skip
    store = ollama_store(home / ".ollama" / "models", {"smollm2:135m": gguf})
    ollama = fake_ollama({"qwen3:4b": {"size": 2_500_000_000, "parameter_size": "4.0B", "quantization_level": "Q4_K_M",
                                       "context_length": 40960},
                          "smollm2:135m": {"size": gguf.stat().st_size, "parameter_size": "134.52M",
                                           "quantization_level": "Q4_1", "context_length": 8192}},
                         responses=script()).start()  # fmt: skip
    llama = fake_llama_server("SmolLM2-135M-Instruct.Q4_1.gguf", 134_515_008, 8192, responses=script()).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "HF_", "SANDBOXLITE_MODEL"))}
    env.update(HOME=str(home), OLLAMA_HOST=f"127.0.0.1:{ollama.port}", SANDBOXLITE_MODEL_PORTS=str(llama.port),
               OLLAMA_MODELS=str(store), NO_PROXY="127.0.0.1,localhost")  # fmt: skip
    rows, listings = [], {}
    try:
        text, secs = models(env)
        listings["everything"] = {"output": text, "seconds": round(secs, 3)}
        print(f"$ sandboxlite models    ({secs:.2f} s)\n{text}")
        states = [("both servers, both stores", None),
                  ("Ollama's server stopped", ollama.stop),
                  ("llama-server stopped too", llama.stop),
                  ("the stores removed too", lambda: (shutil.rmtree(hub), shutil.rmtree(store)))]  # fmt: skip
        for i, (state, change) in enumerate(states):
            if change is not None:
                change()
            if i == 2:
                text, secs = models(env)
                listings["files only"] = {"output": text, "seconds": round(secs, 3)}
                print(f"$ sandboxlite models    (servers stopped; {secs:.2f} s)\n{text}")
            r = run_auto(env, work / f"out{i}", args.max_steps)
            r["state"] = state
            rows.append(r)
            print(f"{state}: {r['model_line']}\n    exit {r['exit_code']}, {r['wall_s']} s, answer {r['answer']!r}")
    finally:
        ollama.stop()
        llama.stop()
    print("\n| state | --model auto chose | exit | wall s |\n|---|---|---:|---:|")
    for r in rows:
        chose = r["model_line"].removeprefix("model: auto -> ")
        print(f"| {r['state']} | {chose} | {r['exit_code']} | {r['wall_s']} |")
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / f"models-demo-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "sandboxlite.bench.models_demo/1", "listings": listings, "runs": rows}, indent=2))
    print(f"\nwrote {path}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
