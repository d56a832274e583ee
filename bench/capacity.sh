#!/usr/bin/env bash
# The largest concurrency one agentx process sustains on this machine with the client under one core
# (CPU 1; the simulator on CPU 0) before the send lag's p99 passes 10 ms, for session trees (the
# default scenario) and single streams (agentx-mvp). Builds agentx (release), then runs
# bench/capacity.py, which prints each point and writes bench/out/capacity/capacity.json.
#
#   bench/capacity.sh                                  # ladder 256..4096, 30 s per point
#   bench/capacity.sh --ladder 512,1024 --worlds trees --duration 60
#
# A benchmark, not a test: it is not part of .ci/run and asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin agentx-host
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
exec python3 bench/capacity.py --agentx "$TARGET_DIR/release/agentx-host" "$@"
