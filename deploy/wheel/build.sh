#!/usr/bin/env bash
# The release wheels of agentx: `maturin build --release --zig` for manylinux2014 (glibc 2.17 and
# newer), x86_64 or aarch64 (Grace: GH200, GB200, GB300), then the same check CI runs on its dev
# wheel (deploy/wheel/check_wheel.py: the platform tag, the highest GLIBC_ symbol version the binary
# needs, `auditwheel show`). zig (PyPI `ziglang`) is the linker and C compiler for either target, so
# no cross toolchain and no sysroot are needed; only the target's Rust standard library
# (`rustup target add aarch64-unknown-linux-gnu`).
#
# Usage: deploy/wheel/build.sh [--target TRIPLE] [--out DIR]
#   --target  x86_64-unknown-linux-gnu (default) or aarch64-unknown-linux-gnu
#   --out     where the wheel goes (default: dist)
# Env: PYTHON (default python3); WHEEL_TOOLS_VENV, the venv of tests/py/wheel-requirements.txt
# (default: target/wheel-tools, made on first use).
#
# The build goes to target/<TRIPLE>/release (maturin --zig always passes --target): a release build
# of its own, beside target/release.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
triple=x86_64-unknown-linux-gnu
out=dist
while [ $# -ge 1 ]; do
  case $1 in
    --target) triple=${2:?--target needs a triple}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    *) echo "build.sh: unknown argument $1 (usage: deploy/wheel/build.sh [--target TRIPLE] [--out DIR])" >&2; exit 2 ;;
  esac
  shift
done
case $triple in
  x86_64-unknown-linux-gnu) arch=x86_64 ;;
  aarch64-unknown-linux-gnu) arch=aarch64 ;;
  *) echo "build.sh: --target $triple: the release wheels are x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu" >&2; exit 2 ;;
esac
if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
  echo "build.sh: the Rust standard library for $triple is not installed: run 'rustup target add $triple'" >&2
  exit 1
fi
python=${PYTHON:-python3}
tools=${WHEEL_TOOLS_VENV:-$repo/target/wheel-tools}
if [ ! -x "$tools/bin/maturin" ] || [ ! -x "$tools/bin/auditwheel" ] \
  || ! "$tools/bin/python3" -m ziglang version >/dev/null 2>&1; then
  "$python" -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check -r "$repo/tests/py/wheel-requirements.txt"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/agentx_host-*"$arch".whl
start=$(date +%s)
"$tools/bin/maturin" build --release --locked --strip --zig --target "$triple" \
  --compatibility manylinux2014 --out "$out"
shopt -s nullglob
wheels=("$out"/agentx_host-*manylinux_2_17_"$arch".whl)
if [ ${#wheels[@]} -ne 1 ]; then
  echo "build.sh: expected one agentx_host-*manylinux_2_17_$arch.whl in $out, found ${#wheels[@]}" >&2
  exit 1
fi
echo "build.sh: built $(basename "${wheels[0]}") in $(($(date +%s) - start)) s"
"$tools/bin/python3" "$repo/deploy/wheel/check_wheel.py" "${wheels[0]}" --arch "$arch" \
  --auditwheel "$tools/bin/auditwheel"
