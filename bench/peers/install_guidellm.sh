#!/usr/bin/env bash
# Installs guidellm 0.8.1 from PyPI into a venv of its own ($GUIDELLM_VENV, bench/.venv-guidellm), for
# the session-trees comparison (bench/compare.sh --trees). Prints the `guidellm` executable's path on
# success; prints why and exits non-zero when it cannot install. guidellm depends on torch: the venv
# takes several GiB (PIP_INDEX_URL / PIP_EXTRA_INDEX_URL choose where pip looks, as usual).
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${GUIDELLM_VERSION:-0.8.1}"
VENV="${GUIDELLM_VENV:-bench/.venv-guidellm}"

fail() {
  echo "install_guidellm: $*" >&2
  exit 1
}

if "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("guidellm") != sys.argv[1])' "$VERSION" 2>/dev/null; then
  echo "$VENV/bin/guidellm"
  exit 0
fi
command -v python3 >/dev/null 2>&1 || fail "python3 is not installed"
python3 -m venv "$VENV" || fail "python3 -m venv $VENV failed (is the venv module installed?)"
LOG="$VENV/install.log"
echo "installing guidellm $VERSION into $VENV" >&2
if ! "$VENV/bin/pip" install --disable-pip-version-check "guidellm==$VERSION" >"$LOG" 2>&1; then
  fail "pip install guidellm==$VERSION failed: $(grep -m1 -i 'error' "$LOG" || tail -1 "$LOG") (whole log: $LOG)"
fi
"$VENV/bin/guidellm" --version >/dev/null 2>&1 || fail "$VENV/bin/guidellm --version does not run; see $LOG"
echo "$VENV/bin/guidellm"
