#!/usr/bin/env python3
"""Writes the committed seed corpora under fuzz/corpus/<target>/ from fixtures/ and hand-made
realistic examples. Seeds are kept small (a few KiB): libFuzzer mutates small inputs best.
Run from the repository root: python3 fuzz/seeds/make_seeds.py"""
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- weka: the adversarial fixtures (one defect each) and shrunk real traces ----
inv = os.path.join(ROOT, "fixtures", "invalid")
for fn in sorted(os.listdir(inv)):
    if fn.endswith(".jsonl"):
        for i, line in enumerate(open(os.path.join(inv, fn), encoding="utf-8")):
            if line.strip():
                put("weka", f"invalid-{fn[:-6]}-{i + 1}.json", line.strip())


def shrink(t, turns, blocks):
    t = dict(t)
    t["tool_tokens"] = min(t.get("tool_tokens", 0), 64 * blocks // 2)
    t["system_tokens"] = min(t.get("system_tokens", 0), 64 * blocks // 2)
    reqs = []
    for r in t["requests"][:turns]:
        r = dict(r)
        if "hash_ids" in r:
            r["hash_ids"] = r["hash_ids"][:blocks]
        reqs.append(r)
    t["requests"] = reqs
    return t


traces = [json.loads(l) for l in open(os.path.join(ROOT, "fixtures", "traces-24.jsonl"), encoding="utf-8")]
for i in (0, 5, 11):
    put("weka", f"real-{traces[i]['id']}.json", json.dumps(shrink(traces[i], 3, 12), separators=(",", ":")))
sub = shrink(traces[2], 2, 8)
sub["requests"].append({
    "type": "subagent", "t": 9.5, "agent_id": "a1", "subagent_type": "Explore", "duration_ms": 1200.0,
    "total_tokens": 5000, "tool_use_count": 3, "status": "completed", "models": ["claude-haiku"],
    "tool_tokens": 0, "system_tokens": 0,
    "requests": [{"t": 9.6, "type": "n", "model": "claude-haiku", "in": 300, "out": 20, "hash_ids": [1, 2, 3, 4, 5],
                  "input_types": ["text"], "output_types": ["text"], "stop": "end_turn", "api_time": 0.5}],
})
put("weka", "subagent.json", json.dumps(sub, indent=1))
put("weka", "minimal.json", '{"id":"x","block_size":64,"hash_id_scope":"local","requests":[{"t":0,"type":"n","in":1,"out":1,"hash_ids":[]}]}')

# ---- prometheus: vLLM, SGLang and edge cases of the text format ----
put("prometheus", "vllm.txt", """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-0.6B"} 3.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 1000.0
# TYPE vllm:external_prefix_cache_hits counter
vllm:external_prefix_cache_hits_total{engine="0"} 42.0
vllm:external_prefix_cache_hits_created{engine="0"} 1.7e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 5000.031
""")
put("prometheus", "sglang.txt", """# HELP sglang:cached_tokens_total The number of prefix cache tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m"} 77.0
# HELP sglang:e2e_request_latency_seconds Summary of latency.
# TYPE sglang:e2e_request_latency_seconds summary
sglang:e2e_request_latency_seconds{quantile="0.5"} 1.5
sglang:e2e_request_latency_seconds_sum 12.0
sglang:e2e_request_latency_seconds_count 8
""")
put("prometheus", "edge.txt", "# a comment\r\nuntyped_metric 1 1700000000000\n  \t\nescaped{path=\"C:\\\\dir\",msg=\"a \\\"q\\\"\\nline\"} NaN\nneg -Inf\n# HELP h help with \\\\ and \\n\n# TYPE h untyped\nh +Inf -5\n")
put("prometheus", "bad.txt", "# TYPE x counter\n# TYPE x gauge\nx{a=\"1\" 2\n")

# ---- sse: OpenAI-compatible streams (first byte seeds the cut points) ----
chunk = lambda c: 'data: ' + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": c}}]}) + "\n\n"
put("sse", "openai.txt", "\x07" + chunk("Hel") + chunk("lo") + 'data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2}}\n\n' + "data: [DONE]\n\n")
put("sse", "crlf-comments.txt", b"\x03: keep-alive\r\n\r\nevent: message\r\nid: 7\rdata:{\"b\":\"\xc3\xa9\"}\r\n\r\ndata: line1\ndata: line2\n\n:comment\ndata: [DONE]\r\r")
put("sse", "partial.txt", b"\x11data: {\"x\"\r\ndata: \xff\xfe\n\ndata: tail")

# ---- manifest: run_manifest.json as `agentx-host run` writes it ----
manifest = {
    "argv": ["run", "--url", "http://127.0.0.1:8000", "--model", "Qwen/Qwen3-0.6B", "--concurrency", "16",
             "--benchmark-duration", "1800", "--input-file", "fixtures/traces-24.jsonl",
             "--custom-dataset-type", "weka_trace", "--cache-bust", "system_prefix",
             "--output-artifact-dir", "artifacts/run1", "agentx-mvp"],
    "run_id": "3f2a9c0d5e6b7a81",
    "seed": 42,
    "seed_drawn": False,
    "scenario": {"name": "agentx-mvp", "version": "0.1.0",
                 "sha256": "9b8c2f0e3d4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344",
                 "source": "guest-scenarios/dist/agentx-mvp.wasm"},
    "dataset": {"source": "fixtures/traces-24.jsonl", "alias": None,
                "cache_key": "0b7c1e4f5a6d3c2b1a09f8e7d6c5b4a3", "traces": 24, "num_dataset_entries": None},
    "resolved_settings": [{"name": "concurrency", "value": [16], "explicit": True},
                          {"name": "benchmark-duration", "value": 1800.0, "explicit": True}],
    "warnings": [],
    "concurrency": 16,
    "benchmark_duration_s": 1800.0,
    "assistant_mode": "live",
    "url": "http://127.0.0.1:8000",
    "lanes": [{"lane": 0, "trace": 3, "trace_id": "trace_0004", "turns": 24, "start_turn": 7, "marker": "[run 3f2a] "}],
    "host_version": "0.1.0",
    "wasmtime_version": "48.0.8",
    "started_unix_ns": 1764763200000000000,
    "ended_unix_ns": None,
}
put("manifest", "run.json", json.dumps(manifest, indent=2))
demo = dict(manifest, argv=["run", "--unsafe-override", "--benchmark-duration", "30", "--dry-run", "--json"],
            url="builtin-simulator:h200", seed=18446744073709551615)
put("manifest", "demo.json", json.dumps(demo))
put("manifest", "not-run.json", json.dumps(dict(manifest, argv=["sim", "--port", "0"])))
put("manifest", "missing.json", json.dumps({"argv": ["run"], "seed": -1, "scenario": {}}))

# ---- scenario_results: arbitrary bytes (the fuzzer builds a FakeScenario from them) ----
rng = random.Random(16)
for i, n in enumerate((16, 64, 256, 1024)):
    put("scenario_results", f"random-{i}", bytes(rng.randrange(256) for _ in range(n)))
