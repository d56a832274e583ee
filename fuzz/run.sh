#!/usr/bin/env bash
# Coverage-guided fuzzing of agentx's parsers and checks with cargo-fuzz and libFuzzer.
#
#   fuzz/run.sh build            build the instrumented targets (fuzz/target)
#   fuzz/run.sh smoke [SECS]     every target for SECS seconds (default 5); CI runs this
#   fuzz/run.sh long N [T...]    N executions of each target (or of the targets T...); prints
#                                executions, seconds, exec/s and the result per target
#   fuzz/run.sh repro T FILE     run target T on one input (a crash artifact, a corpus file)
#
# Runs on stable Rust: libFuzzer's instrumentation flags are unstable rustc flags, so RUSTC_BOOTSTRAP=1
# lets stable rustc accept them, and `-s none` skips AddressSanitizer (needs -Zbuild-std/nightly-only
# support and the targets are safe Rust). Debug assertions and overflow checks are on. New inputs go to
# fuzz/target/corpus/T (fuzz/corpus/T holds the committed seeds, read only); a crash is written to
# fuzz/artifacts/T/. One fuzzer process at a time.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
TARGETS=(sse weka prometheus manifest scenario_results)
# 16 codegen units: the library pulls wasmtime, whose single-unit instrumented build is several times
# slower; the code under test runs a little slower for it. The smoke builds without optimisation
# (`--dev`, the dev profile of fuzz/Cargo.toml): a few seconds per target need coverage, not speed, and
# that build from scratch takes about half the time of the optimised one the long runs use.
BUILD=(-s none --debug-assertions --codegen-units 16)
SMOKE_BUILD=(-s none --dev --codegen-units 16)
LIMITS=(-timeout=10 -rss_limit_mb=2048 -max_len=8192)

build() { cargo fuzz build "${BUILD[@]}" "$@"; }

# run TARGET LIBFUZZER_ARGS...: prints one result line; returns libFuzzer's status.
run() {
  local t=$1; shift
  mkdir -p "target/corpus/$t" "artifacts/$t"
  local log="target/logs/$t.log"
  mkdir -p target/logs
  local start end rc=0
  start=$(date +%s.%N)
  cargo fuzz run "${BUILD[@]}" "$t" "target/corpus/$t" "corpus/$t" -- \
    "${LIMITS[@]}" -print_final_stats=1 "$@" >"$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local execs secs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  execs=${execs:-0}
  # libFuzzer's own time ("Done N runs in S second(s)"), else the wall time (the build included).
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  [ -n "$secs" ] && [ "$secs" != 0 ] ||
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  local result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc; see fuzz/$log and fuzz/artifacts/$t/)"
  fi
  printf '%-17s %12s execs %9s s %10s exec/s  %s\n' "$t" "$execs" "$secs" \
    "$(awk -v n="$execs" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')" "$result"
  if [ "$rc" -ne 0 ]; then
    grep -E "panicked|ERROR: libFuzzer|SUMMARY|Test unit written|timeout|out-of-memory" "$log" | head -20 >&2 || true
  fi
  return "$rc"
}

mode=${1:-smoke}
shift || true
case "$mode" in
  build)
    build
    ;;
  smoke)
    secs=${1:-5}
    BUILD=("${SMOKE_BUILD[@]}")
    build
    fail=0
    for t in "${TARGETS[@]}"; do
      run "$t" -max_total_time="$secs" || fail=1
    done
    exit "$fail"
    ;;
  long)
    n=${1:?usage: fuzz/run.sh long N [TARGET...]}
    shift
    [ $# -gt 0 ] || set -- "${TARGETS[@]}"
    build
    fail=0
    for t in "$@"; do
      run "$t" -runs="$n" || fail=1
    done
    exit "$fail"
    ;;
  repro)
    t=${1:?usage: fuzz/run.sh repro TARGET FILE}
    cargo fuzz run "${BUILD[@]}" "$t" "${2:?usage: fuzz/run.sh repro TARGET FILE}"
    ;;
  *)
    echo "usage: fuzz/run.sh build | smoke [SECS] | long N [TARGET...] | repro TARGET FILE" >&2
    exit 2
    ;;
esac
