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
#
# With --trees (first), session trees instead: agentx's default scenario against agentx-harness 1.0.12
# (`--scenario agentx`) and aiperf 0.13 on the same with-subagents corpus, seed and flags, per concurrency
# level, with both floors. agentx-harness goes into $AGENTX_BENCH_VENV (bench/.venv, as
# bench/differential.sh installs it) and aiperf into a venv of its own, $AIPERF_TREES_VENV
# (bench/.venv-aiperf): both ship a Python package named `aiperf`, so one venv cannot hold the two. The
# rest of the flags go to bench/compare_trees.py (see `--help` there); it prints a table and writes
# bench/out-trees/compare-trees.json and compare-trees.md. Two optional peers join when they can:
# vllm-bench, built from source at a pinned commit by bench/peers/build_vllm_bench.sh (its target
# directory outside the repository), and guidellm 0.8.1, installed by bench/peers/install_guidellm.sh
# into $GUIDELLM_VENV (bench/.venv-guidellm). One that cannot be built or installed prints why, and its
# column stays empty with that reason in the JSON.
#
#   bench/compare.sh --trees                                  # 1, 64, 256, 1024 lanes
#   bench/compare.sh --trees --levels 1,64 --duration 30      # a shorter look
set -euo pipefail
cd "$(dirname "$0")/.."
TREES=0
if [ "${1:-}" = "--trees" ]; then
  TREES=1
  shift
fi
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
VENV="${AGENTX_BENCH_VENV:-bench/.venv}"

if [ "$TREES" = 1 ]; then
  HARNESS_VERSION="${HARNESS_VERSION:-1.0.12}"
  AIPERF_VENV="${AIPERF_TREES_VENV:-bench/.venv-aiperf}"
  if ! "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("agentx-harness") != sys.argv[1])' "$HARNESS_VERSION" 2>/dev/null; then
    echo "installing agentx-harness $HARNESS_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "agentx-harness==$HARNESS_VERSION"
  fi
  if ! "$AIPERF_VENV/bin/aiperf" --version 2>/dev/null | grep -qx "$AIPERF_VERSION"; then
    echo "installing aiperf $AIPERF_VERSION into $AIPERF_VENV"
    python3 -m venv "$AIPERF_VENV"
    "$AIPERF_VENV/bin/pip" install --quiet --disable-pip-version-check "aiperf==$AIPERF_VERSION"
  fi
fi

if [ "$TREES" = 0 ] && ! "$VENV/bin/aiperf" --version 2>/dev/null | grep -q "$AIPERF_VERSION"; then
  echo "installing aiperf $AIPERF_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "aiperf==$AIPERF_VERSION"
fi

# The optional peers: vllm-bench built from source, guidellm in a venv of its own. A peer that cannot be
# built or installed is not fatal: compare_trees.py is told why, and its column stays empty.
PEER_ARGS=()
if [ "$TREES" = 1 ]; then
  for peer in vllm-bench guidellm; do
    script="bench/peers/build_vllm_bench.sh"
    [ "$peer" = guidellm ] && script="bench/peers/install_guidellm.sh"
    err=$(mktemp)
    if path=$("$script" 2>"$err"); then
      PEER_ARGS+=("--$peer" "$path")
    else
      cat "$err" >&2
      PEER_ARGS+=("--why-not" "$peer=$(tail -1 "$err")")
    fi
    rm -f "$err"
  done
fi

if ! command -v cc >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null
fi
cargo build --release --locked --bin agentx-host --example agentx-bench-hyper-floor
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cc -O2 -Wall -o "$TARGET_DIR/release/agentx-bench-floor" bench/floor.c

if [ "$TREES" = 1 ]; then
  exec "$VENV/bin/python" bench/compare_trees.py \
    --agentx "$TARGET_DIR/release/agentx-host" \
    --harness "$VENV/bin/agentx" \
    --aiperf "$AIPERF_VENV/bin/aiperf" \
    --floor "$TARGET_DIR/release/agentx-bench-floor" \
    --hyper-floor "$TARGET_DIR/release/examples/agentx-bench-hyper-floor" \
    "${PEER_ARGS[@]}" "$@"
fi
exec "$VENV/bin/python" bench/compare.py \
  --agentx "$TARGET_DIR/release/agentx-host" \
  --aiperf "$VENV/bin/aiperf" \
  --scenario guest-scenarios/dist/agentx-mvp.wasm \
  --floor "$TARGET_DIR/release/agentx-bench-floor" \
  --hyper-floor "$TARGET_DIR/release/examples/agentx-bench-hyper-floor" \
  "$@"
