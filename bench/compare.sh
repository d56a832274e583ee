#!/usr/bin/env bash
# agentx against aiperf on this machine: replay cost and timing overhead at concurrency 1, 64, 256 and
# 1024, and dataset preparation. Installs aiperf from PyPI into a venv, builds agentx (release), then
# runs bench/compare.py, which prints a table and writes bench/out/compare.json.
#
#   bench/compare.sh                       # the full comparison (about 25 min plus aiperf's dataset build)
#   bench/compare.sh --levels 1,64 --duration 30 --skip-prep   # a shorter look
#
# Every flag after the script's name goes to bench/compare.py (see `--help` there). A benchmark, not a
# test: it is not part of .ci/run and asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
VENV="${AGENTX_BENCH_VENV:-bench/.venv}"

if ! "$VENV/bin/aiperf" --version 2>/dev/null | grep -q "$AIPERF_VERSION"; then
  echo "installing aiperf $AIPERF_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "aiperf==$AIPERF_VERSION"
fi

if ! command -v cc >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
fi
cargo build --release --locked --bin agentx-host --example agentx-bench-hyper-floor
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cc -O2 -Wall -o "$TARGET_DIR/release/agentx-bench-floor" bench/floor.c

exec "$VENV/bin/python" bench/compare.py \
  --agentx "$TARGET_DIR/release/agentx-host" \
  --aiperf "$VENV/bin/aiperf" \
  --scenario guest-scenarios/dist/agentx-mvp.wasm \
  --floor "$TARGET_DIR/release/agentx-bench-floor" \
  --hyper-floor "$TARGET_DIR/release/examples/agentx-bench-hyper-floor" \
  "$@"
