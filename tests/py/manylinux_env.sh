# Sourced (`. tests/py/manylinux_env.sh VENV`): makes this shell's cargo builds for the host triple
# manylinux2014 builds, linked and their C code compiled by zig for glibc 2.17
# (tests/py/zig-cc-manylinux2014), in the usual target/debug and target/release.
#
# CI sources it before `cargo test`, so the wheel step (tests/py/wheel_test.sh --manylinux, which
# sources it too) finds every crate built with the same linker and C compiler and compiles only
# agentx-host. The values must be the same in both: the cc crate's build scripts rerun when CC_<triple>
# changes, and what depends on ring, mimalloc and wasmtime is then compiled again.
#
# VENV: a venv with tests/py/wheel-requirements.txt installed (created by the caller).
if [ $# -ne 1 ] || [ ! -x "$1/bin/maturin" ] || ! "$1/bin/python3" -m ziglang version >/dev/null 2>&1; then
  echo "manylinux_env.sh: usage: . tests/py/manylinux_env.sh VENV, VENV a venv with tests/py/wheel-requirements.txt installed (maturin and ziglang); got '${1:-}'" >&2
  return 1
fi
AGENTX_ZIG_VENV=$(cd "$1" && pwd)
agentx_zig_cc="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/zig-cc-manylinux2014"
export AGENTX_ZIG_VENV
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER="$agentx_zig_cc"
export CC_x86_64_unknown_linux_gnu="$agentx_zig_cc"
unset agentx_zig_cc
