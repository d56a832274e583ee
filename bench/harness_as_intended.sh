#!/usr/bin/env bash
# agentx-harness run as its weka loader intends: a copy of the harness venv in which ONE value is
# changed, the weka_trace plugin's `default_block_size` (64 -> null) in aiperf/plugin/plugins.yaml.
#
# agentx-harness 1.0.12's composers pass that plugin default into the loader's user-override slot,
# so its CLI lays every weka trace out in 64-token blocks whatever the trace's `block_size` says
# (docs/agentx-v1-reference.md, "Block size"). With the default null, the loader's own precedence
# (user override > trace-declared > 64) is reached and each trace is laid out as it declares.
#
#   bench/harness_as_intended.sh [SOURCE_VENV] [DEST_VENV]
#       defaults: bench/.venv  bench/.venv-as-intended
#
# Copies SOURCE_VENV to DEST_VENV (once; the copy's scripts are pointed at its own interpreter),
# patches the one line, prints what it changed and checks, through the copy's own plugin registry,
# that weka_trace's default is now None and every other loader's is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC="$(cd "${1:-bench/.venv}" && pwd)"
DEST="${2:-bench/.venv-as-intended}"
if [ ! -x "$DEST/bin/python" ]; then
  echo "copying $SRC to $DEST"
  cp -a "$SRC" "$DEST"
fi
DEST="$(cd "$DEST" && pwd)"
# Console scripts carry the source venv's interpreter in their first line.
for f in "$DEST"/bin/*; do
  if [ -f "$f" ] && head -c 2 "$f" | grep -q '#!'; then
    sed -i "1s|^#!$SRC/|#!$DEST/|" "$f"
  fi
done
"$DEST/bin/python" - "$SRC" "$DEST" <<'PY'
import pathlib, sys
src, dest = sys.argv[1], sys.argv[2]
import aiperf
yaml = pathlib.Path(aiperf.__file__).parent / "plugin" / "plugins.yaml"
if not str(yaml).startswith(dest):
    raise SystemExit(f"{yaml} is not inside {dest}: the copy imports another aiperf")
lines = yaml.read_text().splitlines(keepends=True)
start = next(i for i, l in enumerate(lines) if l.rstrip() == "  weka_trace:")
end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  ") and not lines[i].startswith("   ") and lines[i].strip()), len(lines))
hits = [i for i in range(start, end) if lines[i].strip().startswith("default_block_size:")]
if len(hits) != 1:
    raise SystemExit(f"{yaml}: expected one default_block_size in the weka_trace entry, found {len(hits)}")
i = hits[0]
before = lines[i].strip()
if before == "default_block_size: null":
    print(f"{yaml}:{i + 1}: weka_trace default_block_size already null")
else:
    lines[i] = lines[i].replace(before, "default_block_size: null")
    yaml.write_text("".join(lines))
    print(f"patched {yaml}:{i + 1} (the weka_trace entry, line {start + 1}): `{before}` -> `default_block_size: null`; nothing else changed")
PY
# The registry of each venv, read back: only weka_trace differs.
check='
from aiperf.plugin import plugins
import json
names = ["weka_trace", "mooncake_trace", "bailian_trace", "baseten_trace"]
out = {}
for n in names:
    try:
        out[n] = plugins.get_dataset_loader_metadata(n).default_block_size
    except Exception as e:
        out[n] = f"error: {e}"
print(json.dumps(out, sort_keys=True))'
shipped="$("$SRC/bin/python" -c "$check")"
intended="$("$DEST/bin/python" -c "$check")"
echo "plugin default_block_size as shipped:     $shipped"
echo "plugin default_block_size as intended:    $intended"
diff -r -q "$SRC/lib" "$DEST/lib" -x __pycache__ || true
