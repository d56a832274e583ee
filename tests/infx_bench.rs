//! The command line InferenceX's `python3 -m infx.bench agentic` builds (`replay_argv`,
//! docs/specs/inferencex-rows.md#replay_argv), with `aiperf profile` replaced by `agentx-host run`,
//! and the environment its runner sets: through `--dry-run`, and for real against the built-in
//! simulator, which logs every request's headers and body fields (`--record-requests`). Dynamo's
//! `nvext.session_control`, the Qwen3.5 `--extra-inputs` blob, the routing headers and
//! `--apply-chat-template`'s ISL.

use std::collections::HashMap;
use std::path::Path;

use agentx::dataset::tokens::TokenCounter;
use agentx::record::{read_records, RequestRecord};
use agentx::sim::SimConfig;
use serde_json::{json, Value};

use crate::support::{fixture, Run, Sim};

/// The served model's Hugging Face id (`$MODEL`, the `--tokenizer`).
const MODEL: &str = "Qwen/Qwen3.5-397B-A17B-FP8";

/// InferenceX's `--extra-inputs` for Qwen3.5: one JSON object, one word of `AIPERF_EXTRA_INPUTS`.
const QWEN_BLOB: &str = r#"{"chat_template_kwargs":{"enable_thinking":true},"presence_penalty":0,"temperature":0.6,"top_k":20,"top_p":0.95}"#;

/// A Hugging Face cache holding `corpus` as InferenceX's default corpus and the fixture's Qwen
/// (ChatML) tokenizer with its chat template as [`MODEL`].
fn hub_cache(corpus: &str) -> tempfile::TempDir {
    let hub = tempfile::tempdir().unwrap();
    let repo = hub
        .path()
        .join("datasets--semianalysisai--cc-traces-weka-062126");
    std::fs::create_dir_all(repo.join("snapshots/abc")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "abc").unwrap();
    std::fs::copy(fixture(corpus), repo.join("snapshots/abc/traces.jsonl")).unwrap();
    let snap = hub
        .path()
        .join("models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/q1");
    std::fs::create_dir_all(&snap).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture("chat-template/qwen2.5").join(f), snap.join(f)).unwrap();
    }
    hub
}

/// `replay_argv` for a `dynamo-*` framework with `AIPERF_MAX_CONTEXT_LENGTH`,
/// `AIPERF_SERVER_METRICS_URLS`, `AIPERF_APPLY_CHAT_TEMPLATE=true` and
/// `AIPERF_BENCHMARK_GRACE_PERIOD` set, in its order; `duration` and `warmup` as the runner's
/// `DURATION` and `AIPERF_WARMUP_REQUESTS_PER_LANE` (a duration under 900 s adds
/// `--unsafe-override`, as the runner does).
fn replay_argv(url: &str, out: &Path, duration: &str, warmup: &str) -> Vec<String> {
    let mut argv: Vec<String> = [
        "run",
        "--scenario",
        "agentx",
        "--url",
        url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        "agentx-sim",
        "--tokenizer",
        MODEL,
        "--concurrency",
        "4",
        "--benchmark-duration",
        duration,
        "--failed-request-threshold",
        "0.10",
        "--warmup-requests-per-lane",
        warmup,
        "--trace-idle-gap-cap-seconds",
        "1",
        "--warmup-grace-period",
        "1800",
        "--extra-inputs",
        QWEN_BLOB,
        "--use-dynamo-conv-aware-routing",
        "--dynamo-session-timeout-seconds",
        "3600",
        "--tokenizer-trust-remote-code",
        "--max-context-length",
        "200000",
        "--server-metrics",
    ]
    .map(str::to_owned)
    .to_vec();
    argv.push(format!("{url}/metrics"));
    argv.push("--output-artifact-dir".into());
    argv.push(out.join("aiperf_artifacts").display().to_string());
    if duration.parse::<f64>().unwrap() < 900.0 {
        argv.push("--unsafe-override".into());
    }
    argv.extend(
        [
            "--public-dataset",
            "semianalysis_cc_traces_weka_062126",
            "--apply-chat-template",
            "--benchmark-grace-period",
            "30",
        ]
        .map(str::to_owned),
    );
    argv
}

/// The environment the runner sets (docs/specs/inferencex-rows.md#runner-environment) for `url`,
/// with the hub cache.
fn runner_env(url: &str, hub: &Path) -> Vec<(String, String)> {
    [
        ("HF_HUB_CACHE", hub.display().to_string()),
        ("MODEL", MODEL.into()),
        ("MODEL_PREFIX", "qwen3.5".into()),
        ("FRAMEWORK", "dynamo-sglang".into()),
        ("CONC", "4".into()),
        ("AIPERF_LIVE_FAILED_REQUEST_THRESHOLD", "0.10".into()),
        ("AIPERF_TRACE_IDLE_GAP_CAP_SECONDS", "1".into()),
        ("AGENTIC_WARMUP_GRACE_PERIOD", "1800".into()),
        ("AIPERF_DYNAMO_SESSION_TIMEOUT_SECONDS", "3600".into()),
        ("AIPERF_EXPERIMENTAL_FAST", "0".into()),
        (
            "AIPERF_HTTP_X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID",
            "false".into(),
        ),
        ("AIPERF_UNSAFE_OVERRIDE", "false".into()),
        ("AIPERF_USE_DYNAMO_CONV_AWARE_ROUTING", "1".into()),
        ("AIPERF_MAX_CONTEXT_LENGTH", "200000".into()),
        ("AIPERF_SERVER_METRICS_URLS", format!("{url}/metrics")),
        ("AIPERF_APPLY_CHAT_TEMPLATE", "true".into()),
        ("AIPERF_BENCHMARK_GRACE_PERIOD", "30".into()),
        ("AIPERF_EXTRA_INPUTS", QWEN_BLOB.into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

fn exec(argv: &[String], env: &[(String, String)]) -> Run {
    let args: Vec<&str> = argv.iter().map(String::as_str).collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Run::exec(tempfile::tempdir().unwrap(), &args, &env)
}

#[test]
fn the_infx_bench_line_runs_through_dry_run() {
    let sim = Sim::start(SimConfig::max());
    let hub = hub_cache("traces-24.jsonl");
    let out = tempfile::tempdir().unwrap();
    let mut argv = replay_argv(&sim.url(), out.path(), "3600", "10");
    argv.extend(["--dry-run", "--json"].map(str::to_owned));
    let env = runner_env(&sim.url(), hub.path());
    let r = exec(&argv, &env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(plan["scenario"]["name"], "agentx");
    assert_eq!(plan["lanes"].as_array().unwrap().len(), 4);
    let s = &plan["settings"];
    assert_eq!(
        s["use-dynamo-conv-aware-routing"],
        json!({"value": "body", "source": "flag"})
    );
    assert_eq!(
        s["dynamo-session-timeout-seconds"],
        json!({"value": 3600, "source": "flag"})
    );
    assert_eq!(s["apply-chat-template"]["source"], "flag");
    let template = s["apply-chat-template"]["value"].as_str().unwrap();
    assert!(template.ends_with("tokenizer_config.json"), "{template}");
    assert_eq!(s["benchmark-grace-period"]["value"], 30.0);
    assert_eq!(s["warmup-requests-per-lane"]["value"], 10);
    assert_eq!(s["trace-idle-gap-cap-seconds"]["value"], 1.0);
    assert_eq!(s["failed-request-threshold"]["value"], 0.1);
    // The preset's settings, which the line leaves to `--scenario agentx`.
    assert_eq!(s["random-seed"]["value"], 42);
    assert_eq!(s["use-server-token-count"]["value"], true);
    assert_eq!(plan["rules"]["session_affinity_header"], false);
    let log = r.stderr();
    // The runner's variables agree with the line, so nothing is said of them.
    assert!(!log.contains("runner's variable"), "{log}");
    assert_eq!(sim.requests(), 0, "a dry run sends nothing");

    // The preset's flags are still accepted when given explicitly.
    let mut explicit = argv.clone();
    explicit.extend(
        "--endpoint-type chat --streaming --stats-interval 30 --random-seed 42 \
         --trajectory-start-min-ratio 0.25 --trajectory-start-max-ratio 0.75 \
         --use-server-token-count --no-gpu-telemetry --num-dataset-entries 393 --slice-duration 1.0"
            .split_whitespace()
            .map(str::to_owned),
    );
    let r = exec(&explicit, &env);
    assert_eq!(r.code(), 0, "{}", r.stderr());

    // A runner variable the line contradicts is named (the flag decides, as with the harness).
    let mut env2 = env.clone();
    env2.push(("AIPERF_MAX_CONTEXT_LENGTH".into(), "131072".into()));
    let r = exec(&argv, &env2);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        r.stderr()
            .contains("AIPERF_MAX_CONTEXT_LENGTH=131072 is InferenceX's runner's variable, which it turns into --max-context-length"),
        "{}",
        r.stderr()
    );

    // Dynamo's header transport: the setting says so, and the lease is not sent.
    let mut env3 = env.clone();
    env3.push(("AIPERF_DYNAMO_SESSION_TRANSPORT".into(), "headers".into()));
    let r = exec(&argv, &env3);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(
        plan["settings"]["use-dynamo-conv-aware-routing"]["value"],
        "headers"
    );
    assert_eq!(
        plan["settings"]["dynamo-session-timeout-seconds"]["value"],
        Value::Null
    );

    // No chat template beside the tokenizer: an error naming where it looked.
    std::fs::remove_file(
        hub.path()
            .join("models--Qwen--Qwen3.5-397B-A17B-FP8/snapshots/q1/tokenizer_config.json"),
    )
    .unwrap();
    let r = exec(&argv, &env);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let e = r.stderr();
    assert!(
        e.contains("no chat template beside")
            && e.contains("chat_template.jinja")
            && e.contains("hf download"),
        "{e}"
    );
}

/// One request as the simulator logged it.
fn logged(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The records of the run whose line wrote to `out/aiperf_artifacts`.
fn records(out: &Path) -> Vec<RequestRecord> {
    read_records(&out.join("aiperf_artifacts/records.jsonl")).unwrap()
}

/// The records of a run by request id.
fn by_request_id(recs: &[RequestRecord]) -> HashMap<&str, &RequestRecord> {
    recs.iter().map(|r| (r.request_id.as_str(), r)).collect()
}

#[test]
fn the_infx_bench_line_sends_dynamo_session_control_the_blob_and_the_harness_headers() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("requests.jsonl");
    let mut cfg = SimConfig::max();
    cfg.record_requests = Some(log_path.clone());
    let sim = Sim::start(cfg);
    let hub = hub_cache("traces-subagents-8.jsonl");
    let argv = replay_argv(&sim.url(), dir.path(), "4", "1");
    let r = exec(&argv, &runner_env(&sim.url(), hub.path()));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = records(dir.path());
    let recs_by_id = by_request_id(&recs);
    let got = logged(&log_path);
    assert_eq!(
        got.len(),
        recs.len(),
        "one record per request the server saw"
    );
    let (mut closes, mut children) = (0, 0);
    for g in &got {
        let h = &g["headers"];
        let id = h["x-request-id"].as_str().expect("x-request-id");
        let rec = recs_by_id[id];
        let corr = h["x-correlation-id"].as_str().unwrap();
        assert_eq!(corr, rec.correlation_id);
        // The harness's default headers: no X-Session-Affinity, no Dynamo session headers.
        for off in ["x-session-affinity", "x-session-id", "x-dynamo-session-id"] {
            assert!(h.get(off).is_none(), "{off} in {g}");
        }
        let v = &g["other_values"];
        for (k, want) in [
            ("chat_template_kwargs", json!({"enable_thinking": true})),
            ("presence_penalty", json!(0)),
            ("temperature", json!(0.6)),
            ("top_k", json!(20)),
            ("top_p", json!(0.95)),
        ] {
            assert_eq!(v[k], want, "{k} in {g}");
        }
        let parent = rec
            .tree
            .as_ref()
            .and_then(|t| t.parent_correlation_id.as_deref());
        let last = rec.turn + 1 >= rec.num_turns;
        let sc = &v["nvext"]["session_control"];
        let want = match (parent, last) {
            (None, true) => json!({"session_id": corr, "action": "close"}),
            _ => json!({"session_id": parent.unwrap_or(corr), "action": "bind", "timeout": 3600}),
        };
        assert_eq!(sc, &want, "{g}");
        closes += usize::from(sc["action"] == "close");
        children += usize::from(parent.is_some());
    }
    assert!(closes > 0, "some root stream reached its final turn");
    assert!(children > 0, "some subagent stream ran");
    let m: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("aiperf_artifacts/run_manifest.json")).unwrap(),
    )
    .unwrap();
    let applied = m.to_string();
    assert!(
        applied
            .contains("\"use-dynamo-conv-aware-routing\":{\"source\":\"flag\",\"value\":\"body\"}"),
        "the manifest keeps the setting: {applied}"
    );
    // The result row of the line's artifacts meets the shipped contract, stability block included.
    let run_dir = dir.path().join("aiperf_artifacts");
    let row_path = dir.path().join("agg.json");
    let out = crate::support::agentx_command(dir.path(), crate::row_contract::ROW_IDENTITY)
        .args([
            "report",
            run_dir.to_str().unwrap(),
            "-o",
            row_path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: Value = serde_json::from_slice(&std::fs::read(&row_path).unwrap()).unwrap();
    crate::row_contract::assert_row(&row);
    let st = &row["request_metrics"]["stability"];
    assert!(st.is_object(), "{row}");
}

/// `--apply-chat-template` with client-side counts: each record's ISL is its prompt rendered by
/// the Qwen (ChatML) template and counted by its tokenizer. The simulator counts the messages'
/// text with the same tokenizer, so by the template each request adds 3 tokens per message
/// (`<|im_start|>`, the role, `<|im_end|>`), 2 for the generation prompt (`<|im_start|>assistant`)
/// and 15 for the default system prompt when the first message is not a system message.
#[test]
fn apply_chat_template_counts_the_rendered_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("requests.jsonl");
    let mut cfg = SimConfig::max();
    cfg.record_requests = Some(log_path.clone());
    cfg.tokenizer =
        TokenCounter::from_file(&fixture("chat-template/qwen2.5/tokenizer.json")).unwrap();
    let sim = Sim::start(cfg);
    let hub = hub_cache("traces-24.jsonl");
    let mut argv = replay_argv(&sim.url(), dir.path(), "2", "1");
    argv.push("--client-token-count".into());
    let r = exec(&argv, &runner_env(&sim.url(), hub.path()));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = records(dir.path());
    let recs_by_id = by_request_id(&recs);
    let got = logged(&log_path);
    assert!(!got.is_empty());
    for g in &got {
        let rec = recs_by_id[g["headers"]["x-request-id"].as_str().unwrap()];
        let roles = g["roles"].as_array().unwrap();
        let n = roles.len() as u64;
        let default_system = if roles[0] == "system" { 0 } else { 15 };
        let want = g["prompt_tokens"].as_u64().unwrap() + 3 * n + 2 + default_system;
        assert_eq!(rec.isl, want, "{g}");
    }
}
