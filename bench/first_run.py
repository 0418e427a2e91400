"""README command 1 on a fresh clone with empty caches: its wall time, and when the first result
shows.

    .venv/bin/python bench/first_run.py --commit HEAD --label after
    .venv/bin/python bench/first_run.py --commit 558bf65 --label before
    .venv/bin/python bench/first_run.py --commit HEAD --label after-ollama --fake-ollama

The clone at ``--commit`` runs the first command of its own README (the first line of its first
```bash block) with a home, pip cache, sandboxlite cache (``$SANDBOXLITE_HOME``: images, wheels)
and XDG cache of its own, all empty: the venv, every pip download, the llama.cpp compile and the
images are made from nothing.  What it cannot make fresh: the system packages (installed on this
machine already) and the Debian mirror's speed.  Root's shared llama.cpp wheel in
``/var/cache/sandboxlite/wheels`` is moved aside for the run (an old setup.sh reads it from
there) and put back after.  ``--fake-ollama`` answers as Ollama on ``127.0.0.1:11434`` for the run
(scripted replies: a bash call writing the answer, then submit), as a machine with Ollama running
would.  Prints the wall time and when each ``setup:`` line appeared; writes JSON
(``sandboxlite.bench.first_run/1``) to bench/results/first-run-<label>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_WHEELS = Path("/var/cache/sandboxlite/wheels")


def readme_command(clone: Path) -> str:
    text = (clone / "README.md").read_text()
    m = re.search(r"```bash\n(.+?)\n", text)
    if not m:
        raise SystemExit("no ```bash block in the README")
    return m.group(1).strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--label", required=True)
    ap.add_argument("--fake-ollama", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its caches")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix=f"first-run-{args.label}-"))
    base.chmod(0o755)  # as root, sandboxes run as unprivileged uids: the images below must be reachable
    clone = base / "sandboxlite"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.commit], check=True)
    command = readme_command(clone)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PIP_", "SANDBOXLITE_", "OLLAMA"))}
    env.update(HOME=str(base / "home"), XDG_CACHE_HOME=str(base / "cache"), PIP_CACHE_DIR=str(base / "pip"),
               SANDBOXLITE_HOME=str(base / "sbl"), PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")  # fmt: skip
    (base / "home").mkdir()
    moved = None
    if SHARED_WHEELS.is_dir():
        moved = SHARED_WHEELS.with_name("wheels.first-run-aside")
        SHARED_WHEELS.rename(moved)
    server = None
    if args.fake_ollama:
        sys.path.insert(0, str(ROOT))
        from tests.fake_models import fake_ollama
        from tests.fake_openai import FakeOpenAIServer

        script = [FakeOpenAIServer.text_reply("ok"),
                  FakeOpenAIServer.tool_call_reply("execute_bash", {"command": "echo 5 > /testbed/output/answer.txt"}),
                  FakeOpenAIServer.tool_call_reply("submit", {})]  # fmt: skip
        server = fake_ollama({"qwen3:4b": {"size": 2_500_000_000, "parameter_size": "4.0B",
                                           "quantization_level": "Q4_K_M"}}, responses=script, port=11434).start()  # fmt: skip
    lines: list[tuple[float, str]] = []
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(["bash", "-c", command], cwd=clone, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)  # fmt: skip
        assert p.stdout is not None
        for line in p.stdout:
            t = time.monotonic() - t0
            lines.append((round(t, 1), line.rstrip("\n")))
            print(f"[{t:7.1f}s] {line}", end="", flush=True)
        rc = p.wait()
    finally:
        wall = time.monotonic() - t0
        if server is not None:
            server.stop()
        if moved is not None:
            if SHARED_WHEELS.exists():
                shutil.rmtree(SHARED_WHEELS)
            moved.rename(SHARED_WHEELS)
    marks = {}
    for t, line in lines:
        for key, pat in (("compile_started", "compiling llama.cpp"), ("compiled", "llama.cpp compiled"),
                         ("model_found", "found a model here"), ("doctor", "sandboxlite doctor"),
                         ("model_line", "model: "), ("first_step", "step 1")):  # fmt: skip
            if pat in line and key not in marks:
                marks[key] = t
    result = {"schema": "sandboxlite.bench.first_run/1", "label": args.label, "commit": args.commit,
              "command": command, "fake_ollama": args.fake_ollama, "exit_code": rc, "wall_s": round(wall, 1),
              "marks_s": marks, "tail": [x for _, x in lines[-8:]]}  # fmt: skip
    print(f"\n{args.label} ({args.commit}): exit {rc}, {wall / 60:.1f} min; marks {marks}")
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / f"first-run-{args.label}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
