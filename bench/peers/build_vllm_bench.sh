#!/usr/bin/env bash
# Builds vllm-bench, vLLM's Rust benchmark client, from source at a pinned commit, for the session-trees
# comparison (bench/compare.sh --trees). Prints the binary's path on success; prints why and exits
# non-zero when it cannot build.
#
#   bench/peers/build_vllm_bench.sh                # the pinned commit of the standalone repository
#   VLLM_BENCH_BIN=/opt/bin/vllm-bench bench/peers/build_vllm_bench.sh
#
# Where the source comes from:
# - by default the standalone repository (vllm-project/vllm-bench) at VLLM_BENCH_COMMIT: its last commit
#   before it was archived and moved into vllm-project/vllm under rust/src/bench;
# - with VLLM_GIT and VLLM_COMMIT set, a vllm checkout at that commit instead: `cargo build -p vllm-bench`
#   in its rust/ workspace.
# VLLM_BENCH_GIT (or VLLM_GIT) may be a URL or a local git directory. The source and cargo's target
# directory live outside the repository ($VLLM_BENCH_WORK, ~/.cache/agentx-bench by default); only the
# binary is copied to $VLLM_BENCH_BIN (bench/.peers/bin/vllm-bench by default). An existing binary built
# from the same commit is kept.
set -euo pipefail
cd "$(dirname "$0")/../.."

COMMIT="${VLLM_BENCH_COMMIT:-f3131823f167aa1e6f31a48be1ae15a18667a534}"
GIT="${VLLM_BENCH_GIT:-https://github.com/vllm-project/vllm-bench.git}"
PACKAGE_DIR="."
if [ -n "${VLLM_GIT:-}" ]; then
  [ -n "${VLLM_COMMIT:-}" ] || { echo "build_vllm_bench: VLLM_GIT is set but VLLM_COMMIT is not: pin the vllm commit to build" >&2; exit 2; }
  COMMIT="$VLLM_COMMIT"
  GIT="$VLLM_GIT"
  PACKAGE_DIR="rust"
fi
WORK="${VLLM_BENCH_WORK:-$HOME/.cache/agentx-bench}"
SRC="$WORK/vllm-bench-src-$COMMIT"
TARGET="$WORK/vllm-bench-target"
BIN="${VLLM_BENCH_BIN:-bench/.peers/bin/vllm-bench}"

fail() {
  echo "build_vllm_bench: $*" >&2
  exit 1
}

if [ -x "$BIN" ] && [ "$(cat "$BIN.commit" 2>/dev/null)" = "$COMMIT" ]; then
  echo "$BIN"
  exit 0
fi
command -v cargo >/dev/null 2>&1 || fail "cargo is not installed (https://rustup.rs); vllm-bench is built from source"
command -v git >/dev/null 2>&1 || fail "git is not installed"

if [ ! -d "$SRC/.git" ]; then
  rm -rf "$SRC"
  mkdir -p "$SRC"
  git -C "$SRC" init -q
  if ! git -C "$SRC" fetch -q --depth 1 "$GIT" "$COMMIT" 2>"$SRC.fetch.log" &&
    ! git -C "$SRC" fetch -q "$GIT" 2>>"$SRC.fetch.log"; then
    rm -rf "$SRC"
    fail "cannot fetch $GIT (commit $COMMIT): $(tail -1 "$SRC.fetch.log")"
  fi
  git -C "$SRC" -c advice.detachedHead=false checkout -q "$COMMIT" 2>"$SRC.fetch.log" || {
    rm -rf "$SRC"
    fail "commit $COMMIT is not in $GIT: $(tail -1 "$SRC.fetch.log")"
  }
fi

echo "building vllm-bench at $COMMIT (target dir $TARGET)" >&2
LOG="$WORK/vllm-bench-build.log"
if ! (cd "$SRC/$PACKAGE_DIR" && nice cargo build --release --locked -p vllm-bench --target-dir "$TARGET") >"$LOG" 2>&1; then
  fail "cargo build failed at $COMMIT: $(grep -m1 '^error' "$LOG" || tail -1 "$LOG") (whole log: $LOG)"
fi
mkdir -p "$(dirname "$BIN")"
cp "$TARGET/release/vllm-bench" "$BIN"
echo "$COMMIT" >"$BIN.commit"
echo "$BIN"
