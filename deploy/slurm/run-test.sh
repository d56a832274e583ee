#!/usr/bin/env bash
# End-to-end test of a sharded agentx run under Slurm, on a one-node cluster started on this machine.
#
#   sudo deploy/slurm/run-test.sh target/release/agentx-host
#
# It brings the local cluster up (local-cluster.sh up: installs slurm-wlm and munge with apt if
# needed), submits agentx.sbatch with `sbatch --wait` (2 tasks, global concurrency 8, 20 s, against
# `agentx-host sim` on the batch host, replaying the repository's fixtures/traces-24.jsonl), checks
# the merged result and the report, prints a PASS or FAIL line per check, and tears the cluster down
# on exit. Exit status 0 only if every check passed.
#
# Environment:
#   AGENTX_TEST_DIR   where the run's files go (default: a new /tmp/agentx-slurm-test.XXXXXX, kept)
#   KEEP_CLUSTER=1    leave the cluster running afterwards
#   SLURM_LOCAL_DIR   passed on to local-cluster.sh
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

CONCURRENCY=8
SHARDS=2
DURATION=20
# sbatch --wait gives up after this long (the run itself takes well under a minute).
JOB_TIMEOUT=300

if [ $# -ne 1 ]; then
    echo "usage: $0 PATH/TO/agentx-host" >&2
    exit 2
fi
case "$1" in
/*) BIN=$1 ;;
*) BIN=$PWD/$1 ;;
esac
if [ ! -x "$BIN" ]; then
    echo "FAIL binary: $BIN is not an executable file" >&2
    exit 2
fi

failures=0
pass() { echo "PASS $*"; }
fail() {
    echo "FAIL $*"
    failures=$((failures + 1))
}

WORK=${AGENTX_TEST_DIR:-$(mktemp -d /tmp/agentx-slurm-test.XXXXXX)}
mkdir -p "$WORK"
OUT=$WORK/run
rm -rf "$OUT"
echo "test directory: $WORK"

jobid=
# shellcheck disable=SC2317 # called by the EXIT trap
teardown() {
    if [ -n "$jobid" ] && squeue -h -j "$jobid" 2>/dev/null | grep -q .; then
        scancel "$jobid" 2>/dev/null
    fi
    if [ "${KEEP_CLUSTER:-0}" != 1 ]; then
        "$HERE/local-cluster.sh" down >/dev/null 2>&1 || echo "warning: local-cluster.sh down failed" >&2
    fi
}
trap teardown EXIT
for sig in TERM INT HUP; do
    # shellcheck disable=SC2064 # expand $sig now
    trap "echo 'FAIL interrupted by SIG$sig' >&2; exit 143" "$sig"
done

# ---- cluster -----------------------------------------------------------------------------------
if ! "$HERE/local-cluster.sh" up; then
    fail "cluster: local-cluster.sh up failed"
    exit 1
fi
if hosts=$(cd "$WORK" && timeout 60 srun -n "$SHARDS" hostname 2>&1); then
    pass "cluster: srun -n $SHARDS ran on $(echo "$hosts" | sort | uniq -c | awk '{ printf "%s%s x%s", sep, $2, $1; sep=", " }')"
else
    fail "cluster: srun -n $SHARDS hostname failed: $hosts"
    exit 1
fi

# ---- the sharded run ---------------------------------------------------------------------------
submit_log=$WORK/sbatch.txt
start=$SECONDS
(
    cd "$WORK" &&
        env AGENTX="$BIN" URL= MODEL= \
            CONCURRENCY="$CONCURRENCY" DURATION="$DURATION" OUT="$OUT" SCENARIO= \
            DATASET_ARGS="--input-file $REPO/fixtures/traces-24.jsonl --custom-dataset-type weka_trace" \
            EXTRA_ARGS="--random-seed 42 --unsafe-override" \
            SIM_ARGS="--preset h200 --speed 4" \
            timeout "$JOB_TIMEOUT" sbatch --wait --parsable \
            --ntasks="$SHARDS" --time=10 --job-name=agentx-test \
            --output="$WORK/slurm-%j.out" \
            "$HERE/agentx.sbatch"
) >"$submit_log" 2>&1
rc=$?
jobid=$(grep -m1 -o '^[0-9][0-9]*' "$submit_log" || true)
elapsed=$((SECONDS - start))
job_out=$WORK/slurm-$jobid.out
if [ "$rc" -eq 0 ]; then
    pass "job: sbatch --wait agentx.sbatch (job $jobid) exited 0 after ${elapsed}s"
else
    what="exited $rc"
    [ "$rc" -eq 124 ] && what="did not finish within ${JOB_TIMEOUT}s"
    fail "job: sbatch --wait agentx.sbatch (job ${jobid:-?}) $what after ${elapsed}s"
    echo "----- sbatch's output -----"
    cat "$submit_log"
    if [ -n "$jobid" ] && [ -f "$job_out" ]; then
        echo "----- last 60 lines of $job_out -----"
        tail -n 60 "$job_out"
    fi
    if [ -f "$OUT/sim.log" ]; then
        echo "----- last 20 lines of $OUT/sim.log -----"
        tail -n 20 "$OUT/sim.log"
    fi
fi

# ---- the merged result -------------------------------------------------------------------------
for i in $(seq 0 $((SHARDS - 1))); do
    if [ -d "$OUT/shard-$i" ]; then
        pass "shards: $OUT/shard-$i exists"
    else
        fail "shards: $OUT/shard-$i is missing"
    fi
done

M=$OUT/merged
checks=$(
    python3 - "$M" "$CONCURRENCY" "$SHARDS" <<'PY' 2>&1
import json
import os
import sys

merged, concurrency, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
failed = False


def report(ok, what):
    global failed
    print(("PASS " if ok else "FAIL ") + what)
    failed |= not ok


# records.jsonl: non-empty, every line an object with an integer lane, every lane 0..N-1 present.
path = os.path.join(merged, "records.jsonl")
lanes = {}
bad = []
try:
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                lane = json.loads(line)["lane"]
                if not isinstance(lane, int) or isinstance(lane, bool):
                    raise TypeError(f"lane is {lane!r}")
                lanes[lane] = lanes.get(lane, 0) + 1
            except (ValueError, KeyError, TypeError) as e:
                bad.append(f"line {n}: {type(e).__name__} {e}")
except OSError as e:
    report(False, f"records: cannot read {path}: {e}")
else:
    total = sum(lanes.values())
    report(total > 0, f"records: {path} has {total} records")
    report(not bad, "records: every line is JSON with an integer `lane`"
           + (f" ({len(bad)} bad, first: {bad[0]})" if bad else ""))
    want = set(range(concurrency))
    missing = sorted(want - lanes.keys())
    extra = sorted(lanes.keys() - want)
    report(not missing and not extra,
           f"records: lanes 0..{concurrency - 1} all present"
           + (f"; missing {missing}" if missing else "")
           + (f"; unexpected {extra}" if extra else "")
           + " (records per lane: " + ", ".join(f"{k}:{v}" for k, v in sorted(lanes.items())) + ")")

# run_manifest.json: `shards` is an array with one entry per shard.
path = os.path.join(merged, "run_manifest.json")
try:
    with open(path) as f:
        manifest = json.load(f)
    s = manifest.get("shards") if isinstance(manifest, dict) else None
    report(isinstance(s, list) and len(s) == shards,
           f"manifest: {path} lists {len(s) if isinstance(s, list) else 'no'} shards (key `shards`), want {shards}")
except (OSError, ValueError) as e:
    report(False, f"manifest: cannot read {path}: {e}")

# profile_export_aiperf.json: present and JSON.
path = os.path.join(merged, "profile_export_aiperf.json")
try:
    with open(path) as f:
        json.load(f)
    report(True, f"aiperf export: {path} exists and is JSON")
except (OSError, ValueError) as e:
    report(False, f"aiperf export: {path}: {e}")

sys.exit(1 if failed else 0)
PY
)
py_rc=$?
echo "$checks"
n=$(grep -c '^FAIL' <<<"$checks")
[ "$py_rc" -ne 0 ] && [ "$n" -eq 0 ] && n=1 # python itself failed
failures=$((failures + n))

# ---- the merged plan is the unsharded one -------------------------------------------------------
# The dry run in one process with the merged run's id plans what the shards replayed together:
# every lane's trace, t*, marker and alive streams (the default scenario replays session trees).
dry=$WORK/dry-run.json
run_id=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])' "$M/run_manifest.json" 2>/dev/null)
if [ -n "$run_id" ] && (cd "$WORK" && "$BIN" run --url http://127.0.0.1:9 --model agentx-sim \
    --concurrency "$CONCURRENCY" --benchmark-duration "$DURATION" \
    --input-file "$REPO/fixtures/traces-24.jsonl" --custom-dataset-type weka_trace \
    --random-seed 42 --unsafe-override --run-id "$run_id" --dry-run --json) >"$dry" 2>"$WORK/dry-run.log" &&
    python3 - "$M/run_manifest.json" "$dry" <<'PY'
import json
import sys

merged = json.load(open(sys.argv[1]))
plan = json.load(open(sys.argv[2]))
sys.exit(0 if merged["lanes"] == plan["lanes"] and plan["lanes"] and "streams" in plan["lanes"][0] else 1)
PY
then
    pass "plan: the merged session-tree plan is the unsharded dry run's (run id $run_id)"
else
    fail "plan: the merged lanes differ from \`run --dry-run --json --run-id ${run_id:-?}\` in one process (see $dry, $WORK/dry-run.log)"
fi

# ---- the report --------------------------------------------------------------------------------
if "$BIN" report --help >/dev/null 2>&1; then
    pass "report: agentx-host report --help"
else
    fail "report: agentx-host report --help failed"
fi
report_log=$WORK/report.txt
# The row's deployment facts (InferenceX's contract requires them; a real job takes them from its
# environment: RUNNER_TYPE, IMAGE, MODEL_PREFIX, FRAMEWORK, PRECISION).
if "$BIN" report "$M" -o "$OUT/report.json" --hw cpu --image local/agentx-host \
    --model-prefix agentx-sim --framework sim --precision bf16 >"$report_log" 2>&1 &&
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$OUT/report.json" 2>/dev/null; then
    pass "report: agentx-host report $M -o $OUT/report.json wrote JSON"
else
    fail "report: agentx-host report $M -o $OUT/report.json (no JSON file; output: $(tail -n 5 "$report_log" | tr '\n' ' '))"
fi

# ---- verdict -----------------------------------------------------------------------------------
if [ "$failures" -eq 0 ]; then
    echo "PASS sharded Slurm run (files in $WORK)"
    exit 0
fi
echo "FAIL sharded Slurm run: $failures failing check(s) (files in $WORK)"
exit 1
