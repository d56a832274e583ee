#!/usr/bin/env bash
# The replay half of bench/real-server.sh (which builds llama-server and calls this):
#   real-server-run.sh SERVER MODEL PORT DURATION CONCURRENCY SLOT_CTX WORKDIR
# Starts llama-server, writes a corpus scaled to its slot context, replays it with the MVP scenario
# once per API of AGENTX_REAL_SERVER_APIS (default `chat anthropic`: OpenAI chat completions, then
# Anthropic's Messages API at /v1/messages), makes each replay's `report`, checks the outputs and prints
# the summaries; stops the server on any exit. AGENTX_BIN names an agentx-host to use instead of
# building the release one.
set -euo pipefail
SERVER="$1" MODEL="$2" PORT="$3" DURATION="$4" CONCURRENCY="$5" SLOT_CTX="$6" WORK="$7"
cd "$(dirname "$0")/.."
ROOT="$PWD"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
AGENTX="${AGENTX_BIN:-$TARGET_DIR/release/agentx-host}"
APIS="${AGENTX_REAL_SERVER_APIS:-chat anthropic}"
OUT="$WORK/run-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
step() { echo; echo "=== $* ($(date +%H:%M:%S))"; }

if [ -z "${AGENTX_BIN:-}" ]; then
  step "build agentx-host (release)"
  cargo build --release --locked --bin agentx-host
fi

step "start llama-server on 127.0.0.1:$PORT ($CONCURRENCY slots of $SLOT_CTX tokens)"
"$SERVER" -m "$MODEL" -a smollm2 --host 127.0.0.1 --port "$PORT" -c $((SLOT_CTX * CONCURRENCY)) \
  -np "$CONCURRENCY" -t 2 --metrics --no-webui --no-repack >"$OUT/llama-server.log" 2>&1 &
# --no-repack: with GGML_NATIVE on a CPU that reports AMX (as this VM's does), the repacked AMX
# weight buffers fault (general protection) in the first decode; plain buffers work.
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 $SERVER_PID 2>/dev/null; then echo "llama-server exited:"; tail -20 "$OUT/llama-server.log"; exit 1; fi
  sleep 1
done
curl -s "http://127.0.0.1:$PORT/v1/models" | tee "$OUT/models.json"; echo

# The corpus is scaled to 1.5x the slot context: its sessions compact at 80 % of that, so the longer
# turns overflow the server with llama.cpp's own error; lanes start at 60-95 % of their traces, where
# contexts are longest, so some overflow in warmup and more in the first minutes.
CORPUS_CTX=$((SLOT_CTX * 3 / 2))
step "corpus: dataset synth --context $CORPUS_CTX (server slots: $SLOT_CTX)"
"$AGENTX" dataset synth --traces 60 --seed 5 --context "$CORPUS_CTX" --max-turns 30 -o "$OUT/traces.jsonl"
"$AGENTX" dataset stats "$OUT/traces.jsonl" | head -20

# The cache preflight alone (--require-cache stops before the run either way: `--benchmark-duration 1`
# keeps the run short where it does not): as the server is, then with llama.cpp's prompt cache off.
preflight() {
  local label="$1"; shift
  set +e
  AGENTX_HOME="$WORK/home" "$AGENTX" run --url "http://127.0.0.1:$PORT" --model smollm2 \
    --input-file "$OUT/traces.jsonl" --custom-dataset-type weka_trace --streaming --concurrency 1 \
    --benchmark-duration 1 --benchmark-grace-period 0 --unsafe-override --require-cache \
    --output-artifact-dir "$OUT/preflight-$label" "$@" >"$OUT/preflight-$label.txt" 2>&1
  local code=$?
  set -e
  echo "cache preflight ($label): exit code $code"
  grep -E "cache preflight" "$OUT/preflight-$label.txt" | head -3 || true
  return $code
}
step "cache preflight: as the server is, then with cache_prompt: false"
preflight on || { echo "PROBLEM: the cache preflight did not find llama.cpp's prompt cache working"; exit 1; }
if preflight off --extra-inputs cache_prompt:false; then
  echo "PROBLEM: the cache preflight did not find the prompt cache off under cache_prompt: false"; exit 1
fi

# One replay of the corpus in API $1 (chat keeps the unsuffixed output names), its report and checks.
replay() {
API="$1"
SUFFIX=""
[ "$API" = chat ] || SUFFIX="-$API"
step "replay ($API): MVP scenario, concurrency $CONCURRENCY, ${DURATION} s, --unsafe-override"
set +e
AGENTX_HOME="$WORK/home" "$AGENTX" run --url "http://127.0.0.1:$PORT" --model smollm2 \
  --input-file "$OUT/traces.jsonl" --custom-dataset-type weka_trace --streaming \
  --concurrency "$CONCURRENCY" --benchmark-duration "$DURATION" --benchmark-grace-period 60 \
  --random-seed 42 --unsafe-override --stats-interval 30 \
  --trajectory-start-min-ratio 0.6 --trajectory-start-max-ratio 0.95 \
  --endpoint-type "$API" --output-artifact-dir "$OUT/artifacts$SUFFIX" ${AGENTX_REAL_SERVER_EXTRA:-} \
  2>"$OUT/agentx$SUFFIX.log" \
  | tee "$OUT/summary$SUFFIX.txt"
CODE=${PIPESTATUS[0]}
set -e
echo "agentx exit code $CODE"
grep -E "pre-flight|Phase warmup complete|Keep-Alive|retried" "$OUT/agentx$SUFFIX.log" | head -10 || true

step "report ($API)"
"$AGENTX" report "$OUT/artifacts$SUFFIX" -o "$OUT/agg_bmk$SUFFIX.json" --hw cpu-2core --framework llamacpp \
  --precision q4_1 --tp 1 --conc "$CONCURRENCY" --model SmolLM2-135M-Instruct \
  --image llama.cpp:local --model-prefix smollm2

step "checks ($API)"
python3 - "$OUT" "$SUFFIX" <<'EOF'
import json, os, sys, collections, pathlib
out = pathlib.Path(sys.argv[1]); suffix = sys.argv[2]; art = out / ("artifacts" + suffix)
recs = [json.loads(l) for l in open(art / "records.jsonl")]
kinds = collections.Counter()
unclassified = []
for r in recs:
    if r["error"] is None:
        kinds["ok"] += 1
    elif r["context_overflow"]:
        kinds["context_overflow (" + r["phase"] + ")"] += 1
    elif r["cancelled"]:
        kinds["cancelled at the end"] += 1
    else:
        kinds["failed: " + r["error"]["type"]] += 1
        unclassified.append(r["error"])
retried = sum(1 for r in recs if r.get("retry"))
print(f"records {len(recs)}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + f"; retried {retried}")
over = [r for r in recs if r["context_overflow"]]
if over:
    print("overflow message:", over[0]["error"]["message"][:160])
files = ["records.jsonl", "run_manifest.json", "run_summary.json", "profile_export.jsonl",
         "profile_export_aiperf.json", "profile_export_aiperf.csv", "server_metrics_export.json",
         "server_metrics_export.csv", "metrics_plots.png"]
missing = [f for f in files if not (art / f).exists()]
sm = (art / "server_metrics_export.json").read_text() if (art / "server_metrics_export.json").exists() else ""
import re
llama = sorted(set(re.findall(r'"(llamacpp:[a-z_]+)"', sm)))
print("llamacpp metrics exported:", ", ".join(llama[:12]) or "none")
agg = json.load(open(out / ("agg_bmk" + suffix + ".json")))
summ = json.load(open(art / "run_summary.json"))
s = summ["summary"]
def d(x, k="p50"):
    return "-" if not x else f"{x[k]:.1f}"
print(f"profiling {s['duration_s']:.0f} s: {s['requests_ok']} ok, {s['requests_failed']} failed, "
      f"{s['context_overflows']} overflow, {s['cancelled']} cancelled, warmup {s['warmup_requests']} "
      f"({s.get('warmup_context_overflows', 0)} overflow)")
print(f"throughput {s['output_token_throughput']:.1f} output tok/s, {s['input_token_throughput']:.0f} input tok/s; "
      f"TTFT p50 {d(s['ttft_ms'])} ms p99 {d(s['ttft_ms'], 'p99')} ms; ITL p50 {d(s['itl_ms'])} ms")
srv = agg.get("server_metrics", {})
hits = {k: v for k, v in srv.get("cache", {}).items() if "hit" in k}
hits["theoretical_cache_hit_rate"] = agg.get("request_metrics", {}).get("cache", {}).get("theoretical_cache_hit_rate")
print(f"report (nested): adapter {srv.get('adapter')}; cache hit rates: {hits}")
cache = s.get("cache")
if cache:
    rate = lambda r: "null" if r.get("value") is None else f"{100 * r['value']:.1f} %"
    ach = cache["achievable"]
    cap = cache.get("capacity_tokens") or {}
    print(f"cache truth: {cache['requests']} requests, {cache['prompt_tokens']} prompt tokens; block "
          f"{cache['block_size']['value']} ({cache['block_size']['source']}), capacity "
          f"{cap.get('value')} ({cap.get('source')})")
    print(f"  measured {rate(cache['measured'])}; achievable: infinite {rate(ach['infinite'])}, "
          f"at capacity {rate(ach['pooled_at_capacity'])}, per worker as routed {rate(ach['per_worker_as_routed'])}")
    print("  missed tokens: " + ", ".join(f"{k} {v}" for k, v in cache["miss"].items()))
    for note in cache.get("notes", []):
        print("  note:", note)
problems = []
if unclassified: problems.append(f"{len(unclassified)} unclassified failures: {unclassified[:3]}")
if missing: problems.append(f"missing outputs: {missing}")
if not llama: problems.append("no llamacpp:* metric in server_metrics_export.json")
if not cache: problems.append("no cache truth in run_summary.json")
elif "/props" not in ((cache.get("capacity_tokens") or {}).get("source") or "") and "--kv-capacity-tokens" not in os.environ.get("AGENTX_REAL_SERVER_EXTRA", ""):
    problems.append(f"the cache model's capacity did not come from llama.cpp's /props: {cache.get('capacity_tokens')}")
if problems:
    print("PROBLEMS:\n  " + "\n  ".join(problems)); sys.exit(1)
print("all requests succeeded or were classified; exports, report and llamacpp metrics present")
EOF
}

for api in $APIS; do replay "$api"; done
echo "outputs in $OUT"
