#!/usr/bin/env bash
# The wheel InferenceX's runtime installs: builds agentx's Python wheel (maturin's `bin` bindings, so
# the wheel carries the `agentx-host` binary), installs the file into a fresh venv with pip, and runs
# the venv's `bin/agentx-host`: `--version`, then a short demo run against the built-in simulator.
#
# The wheel is built with cargo's dev profile, stripped: it reuses the debug build of `cargo test`
# (CI builds wasmtime in one profile only). The release wheels are deploy/wheel/build.sh's.
#
# Usage: tests/py/wheel_test.sh [--expect-reuse] [--manylinux] [WORKDIR]
#   --expect-reuse  after `cargo test` (CI) only agentx-host itself should be compiled: a rebuilt
#                   dependency is a warning, a second build of wasmtime an error (the shared crates'
#                   features are unified by the workspace-hack crate, .config/hakari.toml; tokio and
#                   what depends on it are built twice by design: the paused clock's test-util is a
#                   feature of the tests' build only)
#   --manylinux     the wheel as it is published (CI): tagged manylinux2014 (manylinux_2_17_x86_64,
#                   pyproject.toml), linked and its C code compiled by zig for glibc 2.17
#                   (tests/py/manylinux_env.sh; with --expect-reuse, `cargo test` must have run with
#                   the same environment, or every crate is compiled again: cargo's fingerprint holds
#                   the linker), then checked by deploy/wheel/check_wheel.py (the tag, the highest
#                   GLIBC_ symbol version the binary needs, `auditwheel show`), and pip must refuse
#                   the same wheel tagged for aarch64. Without it: a wheel for this host's glibc
#                   (manylinux_2_<N> of this machine), linked as `cargo build` links, no zig needed.
#   WORKDIR         where the venvs, the wheel and the demo run go (default: a fresh temporary
#                   directory, removed after)
# Env: PYTHON (default python3), CARGO_TARGET_DIR as cargo reads it, AGENTX_ZIG_VENV (--manylinux:
# a venv with tests/py/wheel-requirements.txt installed, as .ci/run makes one before the tests;
# default: those tools are installed into the build venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
expect_reuse=false
manylinux=false
while [ $# -ge 1 ]; do
  case $1 in
    --expect-reuse) expect_reuse=true ;;
    --manylinux) manylinux=true ;;
    -*) echo "wheel test: unknown option $1 (usage: tests/py/wheel_test.sh [--expect-reuse] [--manylinux] [WORKDIR])" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
# The build tools, pinned (tests/py/wheel-requirements.txt): the versions that build and check the
# wheel are part of what is tested.
requirements=$repo/tests/py/wheel-requirements.txt
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
if $manylinux; then
  tools=${AGENTX_ZIG_VENV:-$work/build-venv}
  if [ ! -x "$tools/bin/maturin" ] || [ ! -x "$tools/bin/auditwheel" ]; then
    "$python" -m venv "$tools"
    "$tools/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  fi
  # shellcheck source=manylinux_env.sh
  . "$repo/tests/py/manylinux_env.sh" "$tools"
  compatibility=manylinux2014
else
  tools=$work/build-venv
  "$python" -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "$(grep '^maturin==' "$requirements")"
  # pyproject.toml asks for manylinux2014, which a binary linked against this machine's glibc is not
  compatibility=$("$python" -c 'import platform; lib, ver = platform.libc_ver(); print("manylinux_" + ver.replace(".", "_") if lib == "glibc" else "linux")')
fi
rm -rf "$work/wheels"
"$tools/bin/maturin" build --locked --profile dev --strip --compatibility "$compatibility" \
  --out "$work/wheels" 2>&1 | tee "$work/maturin.log"
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

if $manylinux; then
  "$tools/bin/python3" "$repo/deploy/wheel/check_wheel.py" "$wheel" --arch x86_64 \
    --auditwheel "$tools/bin/auditwheel"
  # A wheel for a platform this host lacks fails at install, with pip's own message.
  foreign=$work/foreign/$(basename "$wheel" | sed 's/-[^-]*\.whl$/-manylinux2014_aarch64.manylinux_2_17_aarch64.whl/')
  mkdir -p "$work/foreign"
  cp "$wheel" "$foreign"
  "$python" -m venv "$work/foreign-venv"
  if "$work/foreign-venv/bin/pip" install --no-index --disable-pip-version-check "$foreign" \
    >"$work/foreign.log" 2>&1; then
    echo "wheel test: pip installed $foreign, a wheel tagged for aarch64, on $(uname -m)" >&2
    exit 1
  fi
  if ! grep -q "is not a supported wheel on this platform" "$work/foreign.log"; then
    echo "wheel test: pip refused $foreign otherwise than for its platform tag:" >&2
    cat "$work/foreign.log" >&2
    exit 1
  fi
  echo "wheel test: pip refuses the aarch64-tagged copy: $(grep -o 'ERROR: .*' "$work/foreign.log")"
  t1=$(now)
fi

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
