#!/usr/bin/env bash
# One process at concurrency 256 against two shards of 128 lanes each (merged), against the built-in
# simulator on this machine: throughput and TTFT side by side, the shards' start spread, the
# rendezvous time and the merge time of a 30-minute run's records. Builds agentx (release), then runs
# bench/shard.py, which prints a table and writes bench/out/shard/shard.json.
#
#   bench/shard.sh                               # concurrency 256, 60 s of profiling (about 6 min)
#   bench/shard.sh --concurrency 64 --duration 20
#
# A benchmark, not a test: it is not part of .ci/run and asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin agentx-host
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
exec python3 bench/shard.py --agentx "$TARGET_DIR/release/agentx-host" "$@"
