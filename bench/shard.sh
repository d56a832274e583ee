#!/usr/bin/env bash
# One process against 2 and 4 shards of the same run (merged), against the built-in simulator on
# its own core: requests, throughput and TTFT side by side, the shards' start spread, the
# rendezvous time and the merge time of a 30-minute run's records. The default scenario (session
# trees) unless --mvp. Builds agentx (release), then runs bench/shard.py, which prints a table and
# writes bench/out/shard/shard.json.
#
#   bench/shard.sh                               # concurrency 128, 60 s of profiling, 1, 2, 4 processes
#   bench/shard.sh --concurrency 64 --duration 20 --shards 2
#   bench/shard.sh --mvp --concurrency 256       # single streams (agentx-mvp)
#
# A benchmark, not a test: it is not part of .ci/run and asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin agentx-host
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
exec python3 bench/shard.py --agentx "$TARGET_DIR/release/agentx-host" "$@"
