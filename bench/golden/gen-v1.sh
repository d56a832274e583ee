#!/usr/bin/env bash
# Regenerates the AgentX v1 golden vectors in fixtures/golden/v1_*.json by running aiperf
# 0.13.0.dev20261023's own loader, chain detection, trajectory source, warmup strategy and
# cache-bust code on fixtures/traces-subagents-8.jsonl and fixtures/traces-24.jsonl.
#
#   bash bench/golden/gen-v1.sh [VENV_DIR]
#
# VENV_DIR (or $AGENTX_GOLDEN_VENV) is reused when it already holds the pinned aiperf; otherwise a
# venv is created there (default: a fresh temporary directory, removed afterwards). Needs python3
# (3.11-3.13, aiperf's range) and PyPI. Nothing is written into the repository except
# fixtures/golden/v1_*.json; `git diff fixtures/golden` shows any change.
set -euo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)

venv="${1:-${AGENTX_GOLDEN_VENV:-}}"
cleanup=""
if [ -z "$venv" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/agentx-golden-v1.XXXXXX")
  venv="$tmp/venv"
  cleanup="$tmp"
fi
trap '[ -n "$cleanup" ] && rm -rf "$cleanup"' EXIT

case "$(realpath -m "$venv")/" in
  "$(realpath .)"/*) echo "gen-v1.sh: keep the venv outside the repository ($venv)" >&2; exit 2 ;;
esac

if ! "$venv/bin/python" -c 'import aiperf, sys; sys.exit(aiperf.__version__ != "0.13.0.dev20261023")' 2>/dev/null; then
  echo "=== venv $venv: installing bench/golden/requirements-v1.txt"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r bench/golden/requirements-v1.txt
fi
echo "=== venv ready (+$(( $(date +%s) - start ))s)"

python3 bench/golden/make_subagent_fixture.py --check
AIPERF_DATASET_WEKA_PARALLEL_WORKERS=1 "$venv/bin/python" bench/golden/gen_v1.py
echo "=== done (+$(( $(date +%s) - start ))s)"
