#!/usr/bin/env bash
# The wheel InferenceX's runtime installs: builds agentx's Python wheel (maturin's `bin` bindings, so
# the wheel carries the `agentx-host` binary), installs the file into a fresh venv with pip, and runs
# the venv's `bin/agentx-host`: `--version`, then a short demo run against the built-in simulator.
#
# The wheel is built with cargo's dev profile, stripped: it reuses the debug build of `cargo test`
# (CI builds wasmtime in one profile only). A release wheel is the same command with `--release`.
#
# Usage: tests/py/wheel_test.sh [--expect-reuse] [WORKDIR]
#   --expect-reuse  after `cargo test` (CI) only agentx-host itself should be compiled: a rebuilt
#                   dependency is a warning, a second build of wasmtime an error (the shared crates'
#                   features are unified by the workspace-hack crate, .config/hakari.toml; tokio and
#                   what depends on it are built twice by design: the paused clock's test-util is a
#                   feature of the tests' build only)
#   WORKDIR         where the venvs, the wheel and the demo run go (default: a fresh temporary
#                   directory, removed after)
# Env: PYTHON (default python3), CARGO_TARGET_DIR as cargo reads it.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
expect_reuse=false
if [ "${1:-}" = --expect-reuse ]; then
  expect_reuse=true
  shift
fi
# maturin, pinned: the version that builds the wheel is part of what is tested.
MATURIN_VERSION=1.16.0
python=${PYTHON:-python3}
if [ $# -ge 1 ]; then
  work=$1
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
work=$(cd "$work" && pwd)
now() { date +%s; }

t0=$(now)
"$python" -m venv "$work/build-venv"
"$work/build-venv/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
rm -rf "$work/wheels"
"$work/build-venv/bin/maturin" build --locked --profile dev --strip --out "$work/wheels" 2>&1 \
  | tee "$work/maturin.log"
t1=$(now)
rebuilt=$(sed -n 's/^ *Compiling \([^ ]*\) .*/\1/p' "$work/maturin.log" | grep -vx agentx-host || true)
if $expect_reuse && [ -n "$rebuilt" ]; then
  # A dev-dependency turns on a feature of a crate the host shares with it, so the host's own build
  # resolves that crate (and all that depends on it) otherwise than the tests' build did.
  why="regenerate the workspace-hack crate (cargo hakari generate; cargo tree -e normal,build,dev -f '{p} [{f}]' against -e normal,build shows which feature); tokio and its dependents are expected (test-util)"
  if grep -qx wasmtime <<<"$rebuilt"; then
    echo "wheel test: the wheel's build compiled wasmtime a second time; $why. Rebuilt: $(echo $rebuilt)" >&2
    exit 1
  fi
  echo "wheel test: warning: the wheel's build compiled dependencies the tests had built; $why. Rebuilt: $(echo $rebuilt)" >&2
fi
shopt -s nullglob
wheels=("$work"/wheels/agentx_host-*.whl)
if [ ${#wheels[@]} -ne 1 ]; then
  echo "wheel test: expected one agentx_host-*.whl in $work/wheels, found ${#wheels[@]}" >&2
  exit 1
fi
wheel=${wheels[0]}
echo "wheel test: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $((t1 - t0)) s"

# A fresh venv, as InferenceX makes one per job, and pip install from the file.
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel"
bin=$work/venv/bin/agentx-host
if [ ! -x "$bin" ]; then
  echo "wheel test: pip install put no agentx-host in $work/venv/bin" >&2
  exit 1
fi
want="agentx-host $(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -1)"
got=$("$bin" --version)
if [ "$got" != "$want" ]; then
  echo "wheel test: $bin --version printed '$got', expected '$want'" >&2
  exit 1
fi

# The README's first command, shortened: a demo run from outside the source tree.
demo=$work/demo
rm -rf "$demo"
(cd "$work" && "$bin" run --benchmark-duration 2 --sim-preset max --concurrency 2 \
  --stats-interval 0 --output-artifact-dir "$demo")
for f in run_manifest.json records.jsonl run_summary.json; do
  if [ ! -s "$demo/$f" ]; then
    echo "wheel test: the demo run wrote no $demo/$f" >&2
    exit 1
  fi
done
echo "wheel test: $got from the venv's bin/ ran the demo in $(($(now) - t1)) s"
