//! agentx as a drop-in for the command InferenceX runs today: the routing headers a router keys
//! sessions on, the connection reuse strategies, and InferenceX's own command line. The real binary
//! against the built-in simulator, which records the headers and connection of every request.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use agentx::sim::{Received, SimConfig};

use crate::support::{fixture, fixture_args, Run, Sim};

fn recording_sim() -> Sim {
    let mut cfg = SimConfig::max();
    cfg.record_headers = true;
    Sim::start(cfg)
}

/// A short replay of the fixture corpus against `url` with `extra` flags and `env`.
fn replay(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let mut args = fixture_args("run", url);
    args.extend(["--concurrency", "3", "--benchmark-duration", "2"].map(String::from));
    args.extend(extra.iter().map(std::string::ToString::to_string));
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    r
}

/// The requests of each correlation id, by the header that carried it.
fn by_session<'a>(got: &'a [Received], header: &str) -> HashMap<&'a str, Vec<&'a Received>> {
    let mut m: HashMap<&str, Vec<&Received>> = HashMap::new();
    for r in got {
        let corr = r.header(header).expect("every request carries its session");
        m.entry(corr).or_default().push(r);
    }
    m
}

#[test]
fn session_affinity_is_on_by_default_and_the_correlation_id_is_the_records() {
    let sim = recording_sim();
    let r = replay(&sim.url(), &[], &[]);
    let got = sim.received();
    let recs = r.records();
    assert_eq!(got.len(), recs.len(), "one record per request received");
    let corrs: HashSet<&str> = recs.iter().map(|x| x.correlation_id.as_str()).collect();
    for g in &got {
        let corr = g.header("x-correlation-id").unwrap();
        assert!(corrs.contains(corr), "{corr} is a recorded session");
        assert_eq!(g.header("x-session-affinity"), Some(corr));
        for off in [
            "x-session-id",
            "x-smg-routing-key",
            "x-dynamo-session-id",
            "x-dynamo-parent-session-id",
        ] {
            assert_eq!(g.header(off), None, "{off} is off by default");
        }
        assert_eq!(
            g.headers
                .iter()
                .filter(|(k, _)| k == "x-session-affinity")
                .count(),
            1
        );
    }
    // The lines operators grep a run's log for.
    let log = r.stderr();
    for line in [
        "Phase warmup started | target: 3 requests",
        "Phase warmup complete: 3 returned, 3 ok",
        "Phase profiling started | profiling_index=0 | target: 2.0s duration",
        "Phase profiling complete | completed=",
        "replay_rc=0",
    ] {
        assert!(log.contains(line), "no {line:?} in\n{log}");
    }
    let m = r.json("run_manifest.json");
    assert_eq!(m["http"]["session_headers"][0], "X-Session-Affinity");
    assert_eq!(m["http"]["tcp_user_timeout_ms"], 30000);
}

#[test]
fn environment_switches_turn_each_routing_header_on_or_off() {
    let sim = recording_sim();
    replay(
        &sim.url(),
        &["--session-header", "X-Trace-Session"],
        &[
            ("AGENTX_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID", "0"),
            ("AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID", "1"),
            ("AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID", "true"),
            ("AIPERF_HTTP_X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID", "1"),
            ("AIPERF_HTTP_TCP_USER_TIMEOUT", "900000"),
        ],
    );
    let got = sim.received();
    assert!(!got.is_empty());
    for g in &got {
        assert_eq!(
            g.header("x-correlation-id"),
            None,
            "renamed by --session-header"
        );
        let corr = g.header("x-trace-session").unwrap();
        assert_eq!(g.header("x-session-affinity"), None);
        assert_eq!(g.header("x-session-id"), Some(corr));
        assert_eq!(g.header("x-smg-routing-key"), Some(corr));
        assert_eq!(g.header("x-dynamo-session-id"), Some(corr));
        // Single-stream sessions are roots: no parent.
        assert_eq!(g.header("x-dynamo-parent-session-id"), None);
    }
}

#[test]
fn bad_switches_and_timeouts_are_refused_with_the_variable_named() {
    let sim = recording_sim();
    let corpus = fixture("traces-24.jsonl");
    let base = [
        "run",
        "--url",
        &sim.url(),
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--dry-run",
    ]
    .map(str::to_owned);
    let args: Vec<&str> = base.iter().map(String::as_str).collect();
    for (env, want) in [
        (
            ("AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID", "maybe"),
            "AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID=\"maybe\" is not a boolean",
        ),
        (
            ("AIPERF_HTTP_TCP_USER_TIMEOUT", "0"),
            "AIPERF_HTTP_TCP_USER_TIMEOUT=\"0\" is not a number of milliseconds",
        ),
    ] {
        let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[env]);
        assert_eq!(r.code(), 2, "{}", r.stderr());
        assert!(r.stderr().contains(want), "{}", r.stderr());
    }
    let mut bad = args.clone();
    bad.extend(["--connection-reuse-strategy", "always"]);
    let r = Run::exec(tempfile::tempdir().unwrap(), &bad, &[]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("use pooled, never or sticky-user-sessions"),
        "{}",
        r.stderr()
    );
    assert_eq!(sim.requests(), 0, "nothing sent");
}

#[test]
fn connection_reuse_strategies_pooled_never_and_sticky() {
    // never: a new connection for every request.
    let sim = recording_sim();
    replay(&sim.url(), &["--connection-reuse-strategy", "never"], &[]);
    let got = sim.received();
    let conns: HashSet<u64> = got.iter().map(|g| g.conn).collect();
    assert_eq!(conns.len(), got.len(), "never reuses a connection");

    // sticky: each session on one connection, and no connection serves two sessions.
    let sim = recording_sim();
    replay(
        &sim.url(),
        &[
            "--connection-reuse-strategy",
            "sticky-user-sessions",
            "--trace-idle-gap-cap-seconds",
            "0.01",
        ],
        &[],
    );
    let got = sim.received();
    let sessions = by_session(&got, "x-correlation-id");
    let mut owner: HashMap<u64, &str> = HashMap::new();
    let mut multi_turn = 0;
    for (corr, reqs) in &sessions {
        let conns: HashSet<u64> = reqs.iter().map(|g| g.conn).collect();
        assert_eq!(conns.len(), 1, "session {corr} used connections {conns:?}");
        let c = *conns.iter().next().unwrap();
        assert_eq!(
            *owner.entry(c).or_insert(corr),
            *corr,
            "connection {c} shared"
        );
        multi_turn += usize::from(reqs.len() > 1);
    }
    assert!(multi_turn > 0, "some session sent several turns");

    // pooled: connections are reused across sessions (three lanes, many turns).
    let sim = recording_sim();
    replay(&sim.url(), &["--trace-idle-gap-cap-seconds", "0.01"], &[]);
    let got = sim.received();
    let conns: HashSet<u64> = got.iter().map(|g| g.conn).collect();
    assert!(
        got.len() >= 20 && conns.len() <= 6,
        "{} connections for {} requests",
        conns.len(),
        got.len()
    );
}

/// A Hugging Face hub cache holding the fixture corpus as InferenceX's current default corpus, and
/// a small tokenizer as `deepseek-ai/DeepSeek-R1-0528`.
fn hub_cache(with_tokenizer: bool) -> tempfile::TempDir {
    let hub = tempfile::tempdir().unwrap();
    let repo = hub
        .path()
        .join("datasets--semianalysisai--cc-traces-weka-062126");
    std::fs::create_dir_all(repo.join("snapshots/abc")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "abc").unwrap();
    std::fs::copy(
        fixture("traces-24.jsonl"),
        repo.join("snapshots/abc/traces.jsonl"),
    )
    .unwrap();
    if with_tokenizer {
        let model = hub
            .path()
            .join("models--deepseek-ai--DeepSeek-R1-0528/snapshots/r1");
        std::fs::create_dir_all(&model).unwrap();
        let vocab: serde_json::Map<String, serde_json::Value> =
            ["the", "and", "for", "this", "code"]
                .iter()
                .enumerate()
                .map(|(i, w)| (w.to_string(), serde_json::json!(i)))
                .collect();
        let tj = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
        });
        std::fs::write(model.join("tokenizer.json"), tj.to_string()).unwrap();
    }
    hub
}

/// InferenceX's `build_replay_cmd` line (docs/specs/inferencex-rows.md#build_replay_cmd) with
/// `aiperf profile --scenario inferencex-agentx-mvp` replaced by `agentx-host run`, plus
/// `--dry-run --json`.
fn inferencex_line(url: &str) -> Vec<String> {
    let metrics = format!("{url}/metrics");
    let line = format!(
        "run --url {url} --endpoint /v1/chat/completions --endpoint-type chat --streaming \
         --model agentx-sim --tokenizer deepseek-ai/DeepSeek-R1-0528 --concurrency 4 \
         --benchmark-duration 1800 --stats-interval 30 --random-seed 42 \
         --failed-request-threshold 0.10 --trajectory-start-min-ratio 0.25 \
         --trajectory-start-max-ratio 0.75 --warmup-requests-per-lane 10 \
         --trace-idle-gap-cap-seconds 300 --warmup-grace-period 1800 --use-server-token-count \
         --extra-inputs thinking:true --no-gpu-telemetry --tokenizer-trust-remote-code \
         --max-context-length 51600 --num-dataset-entries 393 --slice-duration 1.0 \
         --server-metrics {metrics} {metrics} --output-artifact-dir results/aiperf_artifacts \
         --public-dataset semianalysis_cc_traces_weka_062126 --dry-run --json"
    );
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn inferencex_current_command_line_runs_through_dry_run() {
    let sim = recording_sim();
    let hub = hub_cache(true);
    let line = inferencex_line(&sim.url());
    let args: Vec<&str> = line.iter().map(String::as_str).collect();
    let env = [
        ("HF_HUB_CACHE", hub.path().to_str().unwrap()),
        ("AIPERF_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES", "0"),
        ("AIPERF_HTTP_TCP_USER_TIMEOUT", "900000"),
        ("AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID", "1"),
        ("AIPERF_SERVER_METRICS_COLLECTION_INTERVAL", "1.0"),
        ("AIPERF_UI_REALTIME_METRICS_ENABLED", "true"),
    ];
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(plan["concurrency"], 4);
    assert_eq!(plan["lanes"].as_array().unwrap().len(), 4);
    // The fixture's 24 traces, less the 4 whose peak context (prompt plus output of the largest turn)
    // exceeds 51,600 tokens: 51,800, 51,812, 52,156 and 63,907; the next largest is 51,500.
    assert_eq!(plan["dataset"]["traces"], 20);
    let log = r.stderr();
    for want in ["--tokenizer deepseek-ai/DeepSeek-R1-0528:", "dropped=4"] {
        assert!(log.contains(want), "no {want:?} in\n{log}");
    }
    assert!(!log.contains("replay_rc"), "a plan replays nothing: {log}");
    // The line runs the default scenario, agentx (the harness's `--scenario agentx`): every lane
    // starts at an instant t* with its alive streams and marker.
    assert_eq!(plan["scenario"]["name"], "agentx");
    assert_eq!(plan["rules"]["warmup_max_tokens"], 1);
    for l in plan["lanes"].as_array().unwrap() {
        assert!(l["t_star_ms"].is_number(), "{l}");
        assert!(!l["streams"].as_array().unwrap().is_empty(), "{l}");
        assert!(l["marker"].as_str().unwrap().starts_with("[rid:"), "{l}");
    }
    assert!(
        !log.contains("accepted but not acted on: --warmup-requests-per-lane"),
        "a session-tree scenario acts on it"
    );
    assert_eq!(sim.requests(), 0, "a dry run sends nothing");

    // The same line with the single-stream agentx-mvp: the session-tree flags are named, not
    // silently ignored.
    let mut mvp: Vec<&str> = args.clone();
    mvp.insert(1, "agentx-mvp");
    let r = Run::exec(tempfile::tempdir().unwrap(), &mvp, &env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        r.stderr()
            .contains("accepted but not acted on: --warmup-requests-per-lane 10"),
        "{}",
        r.stderr()
    );
    let plan: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert!(plan["lanes"][0]["start_turn"].is_number(), "{plan}");

    // Without the tokenizer in the cache the run goes on with the word model (server counts), and
    // says how to fetch it.
    let hub = hub_cache(false);
    let env = [("HF_HUB_CACHE", hub.path().to_str().unwrap())];
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        r.stderr()
            .contains("hf download deepseek-ai/DeepSeek-R1-0528"),
        "{}",
        r.stderr()
    );

    // A corpus missing from the cache is refused with the command that fetches it.
    let empty = tempfile::tempdir().unwrap();
    let env = [
        ("HF_HUB_CACHE", empty.path().to_str().unwrap()),
        ("HOME", empty.path().to_str().unwrap()),
    ];
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &env);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("hf download semianalysisai/cc-traces-weka-062126"),
        "{}",
        r.stderr()
    );
}

/// Done when: an export directory from `agentx-host run` fills every key InferenceX's current
/// aggregator reads (docs/specs/inferencex-rows.md#what-the-aggregator-reads) with a value, passes
/// its validator's `request_count` check, and `report` makes the nested result from it.
#[test]
fn a_run_fills_every_key_the_inferencex_aggregator_reads() {
    let sim = recording_sim();
    let hub = hub_cache(false);
    let url = sim.url();
    let args = [
        "run",
        "--url",
        &url,
        "--model",
        "agentx-sim",
        "--public-dataset",
        "semianalysis_cc_traces_weka_062126",
        "--random-seed",
        "42",
        "--unsafe-override",
        "--concurrency",
        "3",
        "--benchmark-duration",
        "3",
        "--benchmark-grace-period",
        "10",
        "--stats-interval",
        "1",
        "--slice-duration",
        "1.0",
        "--trace-idle-gap-cap-seconds",
        "0.05",
        "--output-artifact-dir",
        "results/aiperf_artifacts",
    ];
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HF_HUB_CACHE", hub.path().to_str().unwrap()),
        ("AIPERF_SERVER_METRICS_COLLECTION_INTERVAL", "0.2"),
        ("AIPERF_REQUIRED_SERVER_METRIC_PREFIX", "sglang:"),
    ];
    let r = Run::exec(dir, &args, &env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let art = r.dir.path().join("results/aiperf_artifacts");
    let profiled = profile_rows_have_what_the_aggregator_reads(&art);
    // The run's --trace-idle-gap-cap-seconds 0.05.
    no_tree_waits_past_the_idle_gap_cap(&art, 50_000_000);
    let agg = aggregate_passes_the_validator(&art, profiled);

    // server_metrics_export: the metrics object and a non-empty CSV.
    let sm: serde_json::Value =
        serde_json::from_str(&read(&art, "server_metrics_export.json")).unwrap();
    assert!(sm["metrics"].as_object().is_some_and(|m| !m.is_empty()));
    assert!(read(&art, "server_metrics_export.csv").lines().count() > 1);

    nested_report_of_the_run(&r, &art, &hub, &agg, profiled);
    // The realtime block's server row and the phase lines, as operators grep them.
    let log = r.stderr();
    for want in [
        "prefix_cache_hit=",
        "kv_usage=",
        "queue=",
        "tput_in=",
        "Phase profiling progress | returned=",
        "AIPERF_REQUIRED_SERVER_METRIC_PREFIX=sglang:: no metric of",
    ] {
        assert!(log.contains(want), "no {want:?} in\n{log}");
    }
}

/// A file of the run's export directory.
fn read(art: &Path, name: &str) -> String {
    std::fs::read_to_string(art.join(name)).unwrap()
}

/// profile_export.jsonl: every error-free profiling row has what the aggregator reads; the number
/// of those rows.
fn profile_rows_have_what_the_aggregator_reads(art: &Path) -> usize {
    let mut profiled = 0;
    for line in read(art, "profile_export.jsonl").lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let md = &row["metadata"];
        assert!(md["benchmark_phase"].is_string());
        if !row["error"].is_null() || md["benchmark_phase"] != "profiling" {
            continue;
        }
        profiled += 1;
        for k in ["request_start_ns", "request_end_ns", "turn_index"] {
            assert!(md[k].is_u64(), "{k} in {row}");
        }
        assert!(md["conversation_id"].is_string());
        let m = &row["metrics"];
        let mut tags = vec![
            "time_to_first_token",
            "request_latency",
            "input_sequence_length",
            "output_sequence_length",
        ];
        if m["output_sequence_length"]["value"].as_u64().unwrap() >= 2 {
            tags.extend([
                "inter_token_latency",
                "full_response_inter_token_latency",
                "full_response_output_token_throughput_per_user",
            ]);
        }
        for t in tags {
            assert!(m[t]["value"].as_f64().is_some(), "{t} in {row}");
        }
    }
    assert!(profiled > 10, "{profiled} profiling rows");
    profiled
}

/// --trace-idle-gap-cap-seconds (`cap_ns`): no profiling turn of a tree waits longer than that
/// after the tree's last response when nothing of the tree was in flight.
fn no_tree_waits_past_the_idle_gap_cap(art: &Path, cap_ns: u64) {
    let recs = agentx::record::read_records(&art.join("records.jsonl")).unwrap();
    let mut trees: HashMap<&str, Vec<&agentx::record::RequestRecord>> = HashMap::new();
    for x in recs
        .iter()
        .filter(|x| x.phase == agentx::record::Phase::Profiling)
    {
        let root = x.tree.as_ref().map_or(x.correlation_id.as_str(), |t| {
            t.root_correlation_id.as_str()
        });
        trees.entry(root).or_default().push(x);
    }
    let mut gaps = 0;
    for v in trees.values_mut() {
        v.sort_by_key(|x| x.intended_ns);
        for (i, x) in v.iter().enumerate().skip(1) {
            let busy = v[..i].iter().any(|p| p.end_ns > x.intended_ns);
            if busy {
                continue;
            }
            let end = v[..i].iter().map(|p| p.end_ns).max().unwrap();
            assert!(
                x.intended_ns <= end + cap_ns,
                "{} waited {} ns",
                x.request_id,
                x.intended_ns - end
            );
            gaps += 1;
        }
    }
    assert!(gaps > 0);
}

/// profile_export_aiperf.json: request_count an object (the validator's check), the theoretical
/// hit rate from sum/count, the corpus's provenance, the power window; the parsed file.
fn aggregate_passes_the_validator(art: &Path, profiled: usize) -> serde_json::Value {
    let agg: serde_json::Value =
        serde_json::from_str(&read(art, "profile_export_aiperf.json")).unwrap();
    assert_eq!(agg["request_count"]["unit"], "requests");
    assert_eq!(
        agg["request_count"]["avg"].as_f64().unwrap() as usize,
        profiled
    );
    assert!(agg["error_request_count"]["avg"].is_number());
    assert!(agg["completed_request_count"]["avg"].as_f64().unwrap() >= profiled as f64);
    let th = &agg["theoretical_prefix_cache_hit"];
    let (sum, count) = (th["sum"].as_f64().unwrap(), th["count"].as_f64().unwrap());
    assert!(count > 0.0 && sum > 0.5 * count, "{th}");
    assert!((th["avg"].as_f64().unwrap() - 100.0 * sum / count).abs() < 1e-9);
    assert_eq!(
        agg["metadata"]["dataset"],
        serde_json::json!({
            "source_type": "public_dataset",
            "loader": "semianalysis_cc_traces_weka_062126",
            "hf_dataset_name": "semianalysisai/cc-traces-weka-062126",
            "hf_split": "train",
            // The agentx preset's 393 entries count as given (the harness's entries_explicit).
            "num_dataset_entries": 393,
        })
    );
    for k in ["start_time", "end_time"] {
        let t = agg[k].as_str().unwrap();
        assert_eq!(t.len(), "2026-05-17T14:00:00.000000".len(), "{k} {t}");
    }
    assert!(
        agg["e2e_normalized_interactivity_p90"]["avg"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    agg
}

/// The nested report `report` makes of the run's directory (`agg`: its aggregate export).
fn nested_report_of_the_run(
    r: &Run,
    art: &Path,
    hub: &tempfile::TempDir,
    agg: &serde_json::Value,
    profiled: usize,
) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(["report", art.to_str().unwrap()])
        .envs(crate::row_contract::ROW_IDENTITY.iter().copied())
        .env("HF_HUB_CACHE", hub.path())
        .env("AGENTX_HOME", r.dir.path().join("home"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    crate::row_contract::assert_row(&rep);
    // The stability block from the records' credit clock and source trace ids.
    let st = &rep["request_metrics"]["stability"];
    assert!(st["root_trajectory_count"].as_u64().unwrap() > 0, "{st}");
    assert!(
        st["root_trajectory_kish_effective_count"].as_f64().unwrap() > 0.0,
        "{st}"
    );
    let lat = &rep["request_metrics"]["latency"];
    for k in [
        "ttft",
        "e2el",
        "itl",
        "intvty",
        "full_response_itl",
        "full_response_intvty",
    ] {
        assert!(lat[k]["mean"].as_f64().is_some(), "{k}: {lat}");
    }
    assert!(
        rep["request_metrics"]["cache"]["theoretical_cache_hit_rate"]
            .as_f64()
            .is_some()
    );
    assert_eq!(rep["server_metrics"]["adapter"], "vllm");
    assert!(rep["server_metrics"]["cache"]["gpu_cache_hit_rate"]
        .as_f64()
        .is_some());
    assert_eq!(rep["dataset"], agg["metadata"]["dataset"]);
    assert_eq!(
        rep["request_accounting"]["records_profiled"]
            .as_u64()
            .unwrap() as usize,
        profiled
    );
}
