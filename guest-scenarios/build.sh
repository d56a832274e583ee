#!/usr/bin/env bash
# build.sh - build the scenario components reproducibly into dist/.
#
#   guest-scenarios/build.sh           build the components into dist/ (+ SHA256SUMS, TOOLCHAIN)
#   guest-scenarios/build.sh --check   rebuild from scratch in a temporary directory and compare with
#                                      the committed dist/ bytes (see "check" below); dist/ is untouched
#
# Toolchain: Debian's rustc-web (the same rustc version as its std source, so -Zbuild-std works for
# wasm32-unknown-unknown), with Debian's wasm-component-ld as the linker, which turns the core module
# into a component directly. The apt packages are installed when missing (as root, or through sudo).
# The native unit tests of the policy crate are NOT run here; CI runs them with rustup's cargo:
#   cargo test --locked --manifest-path guest-scenarios/Cargo.toml -p policy
#
# Reproducibility: committed Cargo.lock and --locked; the release profile in Cargo.toml (one codegen
# unit, LTO, no debug info, stripped, abort); absolute paths of registry and std sources remapped; the
# project's own paths are relative already. The bytes still depend on the Debian revision of rustc-web,
# on wasm-component-ld/wasm-ld and on wit-bindgen: dist/TOOLCHAIN records them.
#
# check: when the installed toolchain is the one in dist/TOOLCHAIN, the fresh build must equal the
# committed components byte for byte. When it differs (Debian replaced a package with a security
# update), the script says so loudly and instead requires two fresh builds, in two different
# directories, to be byte-identical to each other; rebuild and commit dist/ to make it exact again.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
DIST=$HERE/dist
COMPONENTS=(agentx-mvp kvct-v01 agentx-v1 agentx probe-v3 agentx-open agent-wire graph-ir)
APT_PACKAGES=(rustc-web cargo-web rust-web-src rust-web-llvm lld-22 libstd-rust-web-dev)
COMPONENT_LD=/usr/lib/rustlib/x86_64-unknown-linux-gnu/bin/wasm-component-ld
WASM_LD=/usr/bin/wasm-ld-22
CARGO_HOME_DIR=${CARGO_HOME:-$HOME/.cargo}

say() { printf 'build.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

mode=build
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
  *) die "unknown option '$1'; use --check or nothing" ;;
esac

install_toolchain() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q \
    || die "apt-get update failed; install ${APT_PACKAGES[*]} by hand"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${APT_PACKAGES[@]}" \
    || die "apt-get install failed; install ${APT_PACKAGES[*]} by hand"
}

# One line per input that changes the bytes.
toolchain() {
  printf 'rustc-web %s\n' "$(dpkg-query -W -f='${Version}' rustc-web)"
  printf 'rustc %s\n' "$(/usr/bin/rustc -V)"
  printf 'rust-web-src %s\n' "$(dpkg-query -W -f='${Version}' rust-web-src)"
  printf 'wasm-component-ld %s (rust-web-llvm %s)\n' "$("$COMPONENT_LD" --version | awk '{print $2}')" \
    "$(dpkg-query -W -f='${Version}' rust-web-llvm)"
  printf 'wasm-ld %s (lld-22 %s)\n' "$("$WASM_LD" --version | sed 's/^Debian LLD //')" \
    "$(dpkg-query -W -f='${Version}' lld-22)"
  printf 'wit-bindgen %s\n' "$(awk '/^name = "wit-bindgen"$/{getline; gsub(/version = |"/, ""); print; exit}' "$HERE/Cargo.lock")"
}

# build_in SRC_ROOT TARGET_DIR OUT_DIR: SRC_ROOT holds guest-scenarios/ and wit/ side by side.
build_in() {
  local src=$1 target=$2 out=$3
  mkdir -p "$out"
  (
    cd "$src/guest-scenarios"
    # rustup's shims may come first on PATH: force Debian's compiler, cargo and std source.
    export PATH=/usr/bin:$PATH RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
    export RUSTC_BOOTSTRAP=1  # the std source uses unstable features; rustc-web is a stable build
    export CARGO_TARGET_DIR=$target
    export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=$COMPONENT_LD
    unset CARGO_BUILD_RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
    export RUSTFLAGS="--remap-path-prefix=$CARGO_HOME_DIR/registry/src=/cargo/registry/src --remap-path-prefix=/usr/lib/rustlib/src/rust=/rustc/src -Clink-arg=--wasm-ld-path=$WASM_LD"
    /usr/bin/cargo build --locked --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort \
      "${COMPONENTS[@]/#/-p}"
  )
  for c in "${COMPONENTS[@]}"; do
    cp "$target/wasm32-unknown-unknown/release/${c//-/_}.wasm" "$out/$c.wasm"
  done
}

# copy_sources DEST: the tracked inputs of the build, nothing else (no target/, no dist/).
copy_sources() {
  local dest=$1
  mkdir -p "$dest/guest-scenarios" "$dest/wit"
  cp -r "$ROOT/wit/." "$dest/wit/"
  cp "$HERE/Cargo.toml" "$HERE/Cargo.lock" "$dest/guest-scenarios/"
  for d in policy trees harness "${COMPONENTS[@]}"; do
    mkdir -p "$dest/guest-scenarios/$d"
    cp "$HERE/$d/Cargo.toml" "$dest/guest-scenarios/$d/"
    cp -r "$HERE/$d/src" "$dest/guest-scenarios/$d/"
  done
}

sums() { (cd "$1" && sha256sum "${COMPONENTS[@]/%/.wasm}"); }

install_toolchain
start=$(date +%s)

if [ "$mode" = build ]; then
  build_in "$ROOT" "$HERE/target" "$DIST"
  sums "$DIST" > "$DIST/SHA256SUMS"
  toolchain > "$DIST/TOOLCHAIN"
  say "built in $(( $(date +%s) - start )) s:"
  cat "$DIST/SHA256SUMS" >&2
  ls -l "$DIST" >&2
  exit 0
fi

# --check
[ -f "$DIST/SHA256SUMS" ] && [ -f "$DIST/TOOLCHAIN" ] || die "dist/SHA256SUMS or dist/TOOLCHAIN missing; run guest-scenarios/build.sh and commit dist/"
(cd "$DIST" && sha256sum --quiet -c SHA256SUMS) || die "dist/*.wasm do not match dist/SHA256SUMS; rebuild with guest-scenarios/build.sh and commit dist/"
work=$(mktemp -d "${TMPDIR:-/tmp}/guest-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
copy_sources "$work/a"
build_in "$work/a" "$work/a/target" "$work/out-a"
if toolchain | cmp -s - "$DIST/TOOLCHAIN"; then
  if sums "$work/out-a" | cmp -s - "$DIST/SHA256SUMS"; then
    say "ok: fresh build matches the committed components byte for byte ($(( $(date +%s) - start )) s)"
    cat "$DIST/SHA256SUMS" >&2
    exit 0
  fi
  say "committed:"; cat "$DIST/SHA256SUMS" >&2
  say "fresh build:"; sums "$work/out-a" >&2
  die "the components in dist/ are not what their sources build to; run guest-scenarios/build.sh and commit dist/"
fi
say "################################################################################"
say "WARNING: the installed guest toolchain differs from dist/TOOLCHAIN:"
diff <(cat "$DIST/TOOLCHAIN") <(toolchain) >&2 || true
say "byte equality with the committed components cannot be checked; checking instead that"
say "two fresh builds in different directories are byte-identical to each other"
say "################################################################################"
copy_sources "$work/b-other-dir"
build_in "$work/b-other-dir" "$work/b-other-dir/target" "$work/out-b"
if sums "$work/out-a" | cmp -s - <(sums "$work/out-b"); then
  say "ok (toolchain drift): two fresh builds are identical ($(( $(date +%s) - start )) s):"
  sums "$work/out-a" >&2
  exit 0
fi
sums "$work/out-a" >&2; sums "$work/out-b" >&2
die "two fresh builds differ: the build is not reproducible"
