#!/usr/bin/env bash
# What agentx sends against what the reference harness (agentx-harness, `agentx profile --scenario
# agentx`) sends, request for request, on the with-subagents fixture and a synthetic corpus of 120
# trees. Installs agentx-harness from PyPI into a venv (about 1.2 GB), builds agentx (release), then
# runs bench/differential.py, which replays each corpus through both tools against the built-in
# simulator with request recording, prints a table of what matched and what differed, writes
# bench/out-differential/differential.json, and exits 1 on a difference.
#
#   bench/differential.sh                          # both shapes, the `agentx` scenario
#   bench/differential.sh --shapes fixture --duration 30
#   bench/differential.sh --scenario agentx-v1     # another agentx scenario (an unknown name falls
#                                                  # back to agentx-v1 with the preset as flags)
#   bench/differential.sh --shapes generated --duration 30
#       # the generated corpora (bench/differential_corpus.py: block sizes 16, 32, 64, 128, 512) in
#       # two pairings: agentx against the harness run as intended (a copy of the venv whose
#       # weka_trace default_block_size is null, made by bench/harness_as_intended.sh), and
#       # agentx --trace-block-size 64 against the harness CLI as shipped
#   bench/differential.sh --shapes mooncake-flat,mooncake --duration 30
#       # Mooncake corpora (bench/differential_mooncake.py) read by the harness's own mooncake_trace
#       # loader: single-row timestamped sessions, and multi-turn sessions
#
# Every flag after the script's name goes to `bench/differential.py run` (see `--help` there).
# Offline apart from PyPI: the harness gets a local word-level tokenizer (one token per word, as the
# simulator counts), so it needs neither the Hugging Face hub nor tiktoken's downloads.
set -euo pipefail
cd "$(dirname "$0")/.."
HARNESS_VERSION="${HARNESS_VERSION:-1.0.12}"
VENV="${AGENTX_BENCH_VENV:-bench/.venv}"

if ! "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("agentx-harness") != sys.argv[1])' "$HARNESS_VERSION" 2>/dev/null; then
  echo "installing agentx-harness $HARNESS_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "agentx-harness==$HARNESS_VERSION"
fi

INTENDED=()
for arg in "$@"; do
  if [[ "$arg" == *generated* ]]; then
    bench/harness_as_intended.sh "$VENV" "${AGENTX_BENCH_VENV_INTENDED:-bench/.venv-as-intended}"
    INTENDED=(--harness-intended "${AGENTX_BENCH_VENV_INTENDED:-bench/.venv-as-intended}/bin/agentx")
  fi
done

cargo build --release --locked --bin agentx-host
TARGET_DIR="${CARGO_TARGET_DIR:-target}"

exec "$VENV/bin/python" bench/differential.py run \
  --agentx "$TARGET_DIR/release/agentx-host" \
  --harness "$VENV/bin/agentx" \
  "${INTENDED[@]}" \
  "$@"
