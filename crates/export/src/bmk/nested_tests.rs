//! Tests of the server-metric backends and the nested layout: real metric pages of each engine
//! (`fixtures/metrics/*.prom`) go through the project's Prometheus parser, scrape log and
//! `server_metrics_export.json` writer before the report reads them; the nested report of a
//! hand-made artifact directory is checked against figures computed by hand in the comments.

use std::time::Duration;

use super::backends::{self, Backend};
use super::*;
use crate::server_metrics;
use agentx_metrics::scrape_log::{EndpointLog, ScrapeLog};
use agentx_record::Clock;

const S: u64 = 1_000_000_000;
const END_PAGE: &str = "# agentx-fixture: end page\n";

/// The start and end pages of `fixtures/metrics/<engine>.prom`.
fn pages(engine: &str) -> (String, String) {
    let p = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("fixtures/metrics")
        .join(format!("{engine}.prom"));
    let text = std::fs::read_to_string(&p).unwrap();
    let (a, b) = text.split_once(END_PAGE).expect("two pages");
    (a.to_string(), b.to_string())
}

/// A scrape log of one endpoint per engine, each scraped at 0 s and 10 s.
fn scrape_log(engines: &[&str]) -> ScrapeLog {
    let endpoints = engines
        .iter()
        .map(|e| {
            let (a, b) = pages(e);
            EndpointLog::from_pages(
                &format!("http://{e}:8000/metrics"),
                [(0, Some(a.as_str())), (10 * S, Some(b.as_str()))],
            )
            .unwrap()
        })
        .collect();
    ScrapeLog {
        clock: Clock::start(),
        interval: Duration::from_secs(10),
        endpoints,
    }
}

/// The engines' pages through the server_metrics export and back.
fn exported(engines: &[&str]) -> ServerMetrics {
    let doc = server_metrics::to_json(
        &scrape_log(engines),
        (0, 10 * S),
        &server_metrics::ExportMeta::default(),
    );
    ServerMetrics::parse(&doc.to_string(), Path::new(SERVER_METRICS)).unwrap()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs().max(1.0))
}

#[track_caller]
fn assert_fig(f: &backends::Figures, key: &str, want: f64) {
    assert!(
        close(f.get(key), want),
        "{key}: got {:?}, want {want} (from {:?})",
        f.get(key),
        f.source(key)
    );
}

#[test]
fn each_engine_is_detected_from_its_metric_names() {
    for (engines, adapter, backend) in [
        (&["vllm"][..], "vllm", Some(Backend::Vllm)),
        (&["sglang"][..], "sglang", Some(Backend::Sglang)),
        (&["llamacpp"][..], "llamacpp", Some(Backend::LlamaCpp)),
        (&["dynamo"][..], "dynamo", Some(Backend::Dynamo)),
        (&["atom"][..], "atom", Some(Backend::Atom)),
        (&["trtllm"][..], "trtllm", Some(Backend::TrtLlm)),
        (&["dynamo", "vllm"][..], "dynamo-vllm", Some(Backend::Vllm)),
        (
            &["dynamo", "sglang"][..],
            "dynamo-sglang",
            Some(Backend::Sglang),
        ),
        (&["unknown"][..], "unknown", None),
    ] {
        let d = backends::detect(&exported(engines));
        assert_eq!(d.adapter, adapter, "{engines:?}");
        match backend {
            Some(b) => assert!(d.has(b), "{engines:?}"),
            None => assert!(d.is_unknown()),
        }
        assert!(!d.metric_names.is_empty());
    }
}

#[test]
fn vllm_page_figures() {
    // Deltas over the window, engine 0 + engine 1: queries 6000+4000, hits 4500+2500, external
    // queries 1500+1500 and hits 500+500, prompt 6000+4000, generation 300+200; by source: compute
    // 1000+1000, local cache 4500+2500, external 500+500. KV usage averages (0.2,0.6) and (0.4,0.8).
    let f = backends::figures(&exported(&["vllm"]));
    assert_fig(&f, "cache.prefix_cache_hits", 7000.0);
    assert_fig(&f, "cache.prefix_cache_queries", 10000.0);
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.7);
    // By source first, as InferenceX's app reads it: the external transfers' share of every prompt
    // token (1000 of 10000), so GPU 0.7 + external 0.1 is the overall 0.8.
    assert_fig(&f, "cache.external_cache_hit_rate", 0.1);
    assert_fig(&f, "cache.cpu_cache_hit_rate", 0.1);
    // (7000 local + 1000 external) / 10000 prompt tokens.
    assert_fig(&f, "cache.overall_cache_hit_rate", 0.8);
    assert_fig(&f, "tokens.prompt_by_source.computed", 2000.0);
    assert_fig(&f, "tokens.prompt_by_source.raw", 10000.0);
    // Two engines at 40% and 60% read 50%, not 100%.
    assert_fig(&f, "kv_cache.gpu_usage_pct", 0.5);
    assert_fig(&f, "tokens.prompt_total", 10000.0);
    assert_fig(&f, "tokens.generation_total", 500.0);
    assert_eq!(
        f.source("cache.gpu_cache_hit_rate"),
        Some("vllm:prompt_tokens_by_source{source=local_cache_hit} / all of vllm:prompt_tokens_by_source")
    );
    // The peak of the usage gauge (0.8 on engine 1), which InferenceX's app publishes.
    assert_fig(&f, "kv_cache.gpu_usage_peak", 0.8);
}

#[test]
fn sglang_page_figures() {
    // Deltas: prompt 10000-2000 = 8000, generation 400, cached device 5000-1000 = 4000, host 1000.
    let f = backends::figures(&exported(&["sglang"]));
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.5);
    assert_fig(&f, "cache.external_cache_hit_rate", 0.125);
    // Every cached token (4000 + 1000) over the prompt tokens, before the cache_hit_rate gauge.
    assert_fig(&f, "cache.overall_cache_hit_rate", 0.625);
    assert_eq!(f.cached_tokens_by_source.get("device"), Some(&4000.0));
    assert_eq!(f.cached_tokens_by_source.get("host"), Some(&1000.0));
    assert_fig(&f, "kv_cache.gpu_usage_pct", 0.4);
    assert_fig(&f, "kv_cache.gpu_total_tokens", 500000.0);
    // HiCache host pool: (10000 + 30000) / 2 used of 100000.
    assert_fig(&f, "kv_cache.cpu_used_tokens", 20000.0);
    assert_fig(&f, "kv_cache.cpu_usage_pct", 0.2);
    assert_fig(&f, "tokens.prompt_by_source.computed", 3000.0);
    assert_fig(&f, "tokens.prompt_total", 8000.0);
    assert_fig(&f, "tokens.generation_total", 400.0);
}

#[test]
fn trtllm_page_figures() {
    // Deltas: prompt 12000-2000 = 10000, generation 500, cached 7000-1000 = 6000.
    let f = backends::figures(&exported(&["trtllm"]));
    // The counters' window, not the gauge's lifetime rate (0.9, then 0.7).
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.6);
    assert_eq!(
        f.source("cache.gpu_cache_hit_rate"),
        Some("trtllm_prompt_cached_tokens / trtllm_prompt_tokens")
    );
    assert_fig(&f, "cache.overall_cache_hit_rate", 0.6);
    assert_fig(&f, "tokens.prompt_total", 10000.0);
    assert_fig(&f, "tokens.generation_total", 500.0);
    assert_fig(&f, "tokens.prompt_by_source.computed", 4000.0);
    // Utilization 0.2 then 0.6: the window's mean and its peak.
    assert_fig(&f, "kv_cache.gpu_usage_pct", 0.4);
    assert_fig(&f, "kv_cache.gpu_usage_peak", 0.6);
    // 4096 blocks of 32 tokens.
    assert_fig(&f, "kv_cache.gpu_total_tokens", 131072.0);
    assert!(f.get("cache.external_cache_hit_rate").is_none());
}

#[test]
fn llamacpp_page_figures() {
    // Deltas: evaluated prompt tokens 2500-500 = 2000, cached 6000, predicted 400.
    let f = backends::figures(&exported(&["llamacpp"]));
    // 6000 reused of 6000 + 2000 received.
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.75);
    assert_fig(&f, "cache.overall_cache_hit_rate", 0.75);
    assert_fig(&f, "tokens.prompt_total", 8000.0);
    assert_fig(&f, "tokens.prompt_by_source.computed", 2000.0);
    assert_fig(&f, "tokens.prompt_by_source.gpu_cache_hit", 6000.0);
    assert_fig(&f, "tokens.generation_total", 400.0);
    assert_fig(&f, "kv_cache.gpu_usage_pct", 0.2);
    assert!(f
        .source("cache.gpu_cache_hit_rate")
        .unwrap()
        .contains("llamacpp:prompt_tokens_cached"));
    assert!(f.notes.is_empty(), "{:?}", f.notes);
}

#[test]
fn a_llamacpp_build_without_the_cached_counter_has_a_null_rate_and_says_so() {
    let strip = |p: &str| {
        p.lines()
            .filter(|l| !l.contains("prompt_tokens_cached"))
            .fold(String::new(), |mut page, line| {
                page.push_str(line);
                page.push('\n');
                page
            })
    };
    let (a, b) = pages("llamacpp");
    let (a, b) = (strip(&a), strip(&b));
    let endpoint = EndpointLog::from_pages(
        "http://llama:8080/metrics",
        [(0, Some(a.as_str())), (10 * S, Some(b.as_str()))],
    )
    .unwrap();
    let log = ScrapeLog {
        clock: Clock::start(),
        interval: Duration::from_secs(10),
        endpoints: vec![endpoint],
    };
    let doc = server_metrics::to_json(&log, (0, 10 * S), &server_metrics::ExportMeta::default());
    let metrics = ServerMetrics::parse(&doc.to_string(), Path::new(SERVER_METRICS)).unwrap();
    let engine_figures = backends::figures(&metrics);
    assert_eq!(engine_figures.detection.adapter, "llamacpp");
    assert_eq!(engine_figures.get("cache.gpu_cache_hit_rate"), None);
    assert_fig(&engine_figures, "tokens.prompt_total", 2000.0);
    assert!(engine_figures
        .notes
        .iter()
        .any(|n| n.contains("prompt_tokens_cached")));
}

#[test]
fn dynamo_and_atom_page_figures() {
    // Dynamo frontend: cached 15000 of 20000 input tokens; workers at (0.2,0.4) and (0.4,0.6).
    let f = backends::figures(&exported(&["dynamo"]));
    assert_fig(&f, "cache.frontend_cache_hit_rate", 0.75);
    assert_fig(&f, "cache.frontend_input_tokens", 20000.0);
    assert_fig(&f, "cache.frontend_cached_tokens", 15000.0);
    assert_fig(&f, "cache.router_kv_hit_rate", 0.7);
    assert_fig(&f, "cache.router_shared_cache_hit_rate", 0.2);
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.75);
    assert_fig(&f, "kv_cache.gpu_usage_pct", 0.4);
    assert_fig(&f, "tokens.generation_total", 1000.0);
    // Dynamo in front of vLLM workers: the workers' figures first, the frontend's alongside.
    let f = backends::figures(&exported(&["dynamo", "vllm"]));
    assert_eq!(f.detection.adapter, "dynamo-vllm");
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.7);
    assert_fig(&f, "cache.frontend_cache_hit_rate", 0.75);
    // ATOM: cached 3000 and LMCache 500 of 5000 looked up.
    let f = backends::figures(&exported(&["atom"]));
    assert_fig(&f, "cache.gpu_cache_hit_rate", 0.6);
    assert_fig(&f, "cache.external_cache_hit_rate", 0.1);
    assert_fig(&f, "cache.overall_cache_hit_rate", 0.7);
    assert_fig(&f, "kv_cache.gpu_usage_pct", 0.6);
    assert_fig(&f, "tokens.prompt_total", 5000.0);
    assert_fig(&f, "tokens.generation_total", 250.0);
}

// ---------------------------------------------------------------------------------------------------
// The nested report of a hand-made artifact directory
// ---------------------------------------------------------------------------------------------------

/// Five rows: a warmup row, an error row and three successes (R1 to R3); times in seconds.
const RECORDS: &str = r#"{"metadata":{"conversation_id":"w::0","turn_index":0,"request_start_ns":0,"request_end_ns":900000000,"benchmark_phase":"warmup"},"metrics":{"time_to_first_token":{"value":999,"unit":"ms"},"request_latency":{"value":900,"unit":"ms"},"inter_token_latency":{"value":9,"unit":"ms"},"input_sequence_length":{"value":50000},"output_sequence_length":{"value":100}},"error":null}
{"metadata":{"conversation_id":"a::1","turn_index":0,"request_start_ns":1000000000,"request_end_ns":3100000000,"benchmark_phase":"profiling"},"metrics":{"time_to_first_token":{"value":100,"unit":"ms"},"request_latency":{"value":2100,"unit":"ms"},"inter_token_latency":{"value":20,"unit":"ms"},"input_sequence_length":{"value":1000},"output_sequence_length":{"value":101}},"error":null}
{"metadata":{"conversation_id":"b::1","turn_index":0,"request_start_ns":1500000000,"request_end_ns":2700000000,"benchmark_phase":"profiling"},"metrics":{"time_to_first_token":{"value":200,"unit":"ms"},"request_latency":{"value":1200,"unit":"ms"},"inter_token_latency":{"value":25,"unit":"ms"},"full_response_inter_token_latency":{"value":30,"unit":"ms"},"input_sequence_length":{"value":2000},"output_sequence_length":{"value":41}},"error":null}
{"metadata":{"conversation_id":"c::1","turn_index":0,"request_start_ns":2500000000,"request_end_ns":2600000000,"benchmark_phase":"profiling"},"metrics":{},"error":{"code":500,"type":"http_error","message":"Internal Server Error: boom"}}
{"metadata":{"conversation_id":"d::1","turn_index":0,"request_start_ns":2000000000,"request_end_ns":5000000000,"benchmark_phase":"profiling"},"metrics":{"time_to_first_token":{"value":300,"unit":"ms"},"request_latency":{"value":3000,"unit":"ms"},"inter_token_latency":null,"input_sequence_length":{"value":3000},"output_sequence_length":{"value":1}},"error":null}
"#;

/// aiperf's aggregate: 5 hits over 8 turns (the `%` average says the same).
const AIPERF: &str = r#"{"request_count":{"unit":"requests","avg":5},
"theoretical_prefix_cache_hit":{"unit":"%","avg":62.5,"sum":5,"count":8},
"metadata":{"dataset":{"alias":"semianalysis_cc_traces_weka_062126","entries":3}}}"#;

fn artifact_dir(engine: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "agentx-nested-{engine}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(PROFILE_EXPORT), RECORDS).unwrap();
    std::fs::write(dir.join(PROFILE_AIPERF), AIPERF).unwrap();
    server_metrics::write(
        &agentx_record::fsio::Root::open(&dir).unwrap(),
        &scrape_log(&[engine]),
        (0, 10 * S),
    )
    .unwrap();
    dir
}

#[track_caller]
fn at(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} is {:?}", v.pointer(path)))
}

/// Checks `{mean,p50,p75,p90,p95,std}` at `path` to the 5 decimals the report keeps.
#[track_caller]
fn dist_is(v: &Value, path: &str, want: [f64; 6]) {
    for (stat, w) in NESTED_STATS_ORDER.iter().zip(want) {
        let got = at(v, &format!("{path}/{stat}"));
        assert!(
            (got - w).abs() <= 6e-6,
            "{path}/{stat}: got {got}, want {w}"
        );
    }
}

const NESTED_STATS_ORDER: [&str; 6] = ["mean", "p50", "p75", "p90", "p95", "std"];

/// The request side of the hand-made run, the same for every engine.
fn check_request_side(v: &Value) {
    // Five lines: warmup and error rows count in the total; three successes.
    assert_eq!(v["num_requests_total"], json!(5));
    assert_eq!(v["num_requests_successful"], json!(3));
    let acc = &v["request_accounting"];
    assert_eq!(acc["records_total"], json!(5));
    assert_eq!(acc["records_profiled"], json!(3));
    assert_eq!(acc["records_dropped_total"], json!(2));
    assert_eq!(acc["records_warmup_dropped"], json!(1));
    assert_eq!(acc["records_error_dropped"], json!(1));
    assert_eq!(acc["error_categories"], json!({"http_error": 1}));
    // Identity: TP 2 x PP 2 x PCP 1 = 4 GPUs.
    assert_eq!(v["tp"], json!(2));
    assert_eq!(v["pp"], json!(2));
    assert_eq!(v["dcp_size"], json!(2));
    assert_eq!(v["pcp_size"], json!(1));
    assert_eq!(
        v["dataset"]["alias"],
        json!("semianalysis_cc_traces_weka_062126")
    );

    let metrics = &v["request_metrics"];
    // QPS: ends 2.7, 3.1, 5.0 s; 1-s windows from 2.7: [2.7,3.7) holds 2, [3.7,4.7) holds 0, and
    // [4.7,5.7) does not fit before the last end. Windows [2, 0]: mean 1, p50 1, p75 1.5, p90 1.8,
    // p95 1.9, std 1.
    dist_is(metrics, "/qps", [1.0, 1.0, 1.5, 1.8, 1.9, 1.0]);
    assert_eq!(metrics["qps"]["samples"], json!(2));
    // TTFT 0.1, 0.2, 0.3 s: percentiles at k = 2p/100 (p75: 0.25, p90: 0.28, p95: 0.29); std
    // sqrt((0.01 + 0 + 0.01)/3) = 0.0816497.
    dist_is(
        metrics,
        "/latency/ttft",
        [0.2, 0.2, 0.25, 0.28, 0.29, (0.02f64 / 3.0).sqrt()],
    );
    // E2EL 1.2, 2.1, 3.0: mean 2.1; p75 2.1 + 0.5*0.9 = 2.55, p90 2.82, p95 2.91; std sqrt(1.62/3).
    dist_is(
        metrics,
        "/latency/e2el",
        [2.1, 2.1, 2.55, 2.82, 2.91, (1.62f64 / 3.0).sqrt()],
    );
    // ITL 0.020, 0.025 (R3 has one output token, no ITL): k = p/100; std 0.0025. TPOT = ITL.
    let itl = [0.0225, 0.0225, 0.02375, 0.0245, 0.02475, 0.0025];
    dist_is(metrics, "/latency/itl", itl);
    dist_is(metrics, "/latency/tpot", itl);
    // Interactivity: pXX = 1/ITL at pXX (44.444, 42.105, 40.816, 40.404); mean and std of the
    // per-request 1/ITL = 50 and 40: 45 and 5.
    dist_is(
        metrics,
        "/latency/intvty",
        [
            45.0,
            1.0 / 0.0225,
            1.0 / 0.02375,
            1.0 / 0.0245,
            1.0 / 0.02475,
            5.0,
        ],
    );
    // E2E-normalised: E2EL/OSL per request = 2.1/101, 1.2/41, 3.0/1 (sorted that way); p50 is the
    // middle one (41/1.2 = 34.1667 tok/s); p75 at k = 1.5: 1/((1.2/41 + 3)/2); p90 at k = 1.8:
    // 1/(1.2/41 + 0.8*(3 - 1.2/41)); p95 at k = 1.9. Mean of 101/2.1, 41/1.2, 1/3 = 27.5317.
    let (a, b, c) = (2.1 / 101.0, 1.2 / 41.0, 3.0);
    let rates: [f64; 3] = [1.0 / a, 1.0 / b, 1.0 / c];
    let mean = rates.iter().sum::<f64>() / 3.0;
    let std = (rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
    dist_is(
        metrics,
        "/latency/e2e_norm_intvty",
        [
            mean,
            1.0 / b,
            1.0 / (b + 0.5 * (c - b)),
            1.0 / (b + 0.8 * (c - b)),
            1.0 / (b + 0.9 * (c - b)),
            std,
        ],
    );
    // Full-response ITL: R1 computed (2.1 - 0.1)/(101 - 1) = 0.02; R2 as written, 0.03 (not the
    // (1.2 - 0.2)/40 = 0.025 it would compute); R3 has OSL 1 and none. Mean 0.025, std 0.005.
    dist_is(
        metrics,
        "/latency/full_response_itl",
        [0.025, 0.025, 0.0275, 0.029, 0.0295, 0.005],
    );
    // 1/0.02 = 50 and 1/0.03 = 33.333: mean 41.667, std 8.333; pXX = 1/(pXX of 0.02, 0.03).
    dist_is(
        metrics,
        "/latency/full_response_intvty",
        [
            125.0 / 3.0,
            40.0,
            1.0 / 0.0275,
            1.0 / 0.029,
            1.0 / 0.0295,
            25.0 / 3.0,
        ],
    );
    // Tokens: ISL 1000, 2000, 3000; OSL 1, 41, 101 (mean 143/3, p75 41 + 0.5*60 = 71, p90 89,
    // p95 95).
    dist_is(
        metrics,
        "/tokens/input",
        [
            2000.0,
            2000.0,
            2500.0,
            2800.0,
            2900.0,
            (2e6f64 / 3.0).sqrt(),
        ],
    );
    let osl: [f64; 3] = [1.0, 41.0, 101.0];
    let om = 143.0 / 3.0;
    let ostd = (osl.iter().map(|x| (x - om).powi(2)).sum::<f64>() / 3.0).sqrt();
    dist_is(
        metrics,
        "/tokens/output_actual",
        [om, 41.0, 71.0, 89.0, 95.0, ostd],
    );
    // Throughput over 1.0 s (first start) to 5.0 s (last end) = 4 s: 6000/4 = 1500 input tok/s,
    // 143/4 = 35.75 output, 1535.75 total; per GPU (4): 375, 8.9375, 383.9375.
    assert_eq!(at(metrics, "/throughput/duration_seconds"), 4.0);
    assert_eq!(at(metrics, "/throughput/input/tokens_per_second"), 1500.0);
    assert_eq!(at(metrics, "/throughput/output/tokens_per_second"), 35.75);
    assert_eq!(at(metrics, "/throughput/total/tokens_per_second"), 1535.75);
    assert_eq!(metrics["throughput"]["per_gpu"]["gpus"], json!(4));
    assert_eq!(
        at(metrics, "/throughput/per_gpu/input/tokens_per_second"),
        375.0
    );
    assert_eq!(
        at(metrics, "/throughput/per_gpu/output/tokens_per_second"),
        8.9375
    );
    assert_eq!(
        at(metrics, "/throughput/per_gpu/total/tokens_per_second"),
        383.9375
    );
    // aiperf's theoretical_prefix_cache_hit: sum/count = 5/8.
    assert_eq!(at(metrics, "/cache/theoretical_cache_hit_rate"), 0.625);
}

/// What a CI job exports for the row, on `engine`.
fn row_input(engine: &str) -> IdentityInput {
    IdentityInput {
        hw: Some("h200".into()),
        conc: Some("4".into()),
        image: Some("img".into()),
        model: Some("test-model".into()),
        model_prefix: Some("test".into()),
        precision: Some("fp8".into()),
        tp: Some("2".into()),
        pp: Some("2".into()),
        dcp_size: Some("2".into()),
        framework: Some(engine.into()),
        ..IdentityInput::default()
    }
}

/// Fails with every violation when `row` is not valid under the shipped row schema.
#[track_caller]
pub(crate) fn assert_row(row: &Value) {
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("schemas/inferencex-agentx-row.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(row)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not an InferenceX row:\n{}",
        errors.join("\n")
    );
}

fn nested_report_of(engine: &str) -> Value {
    let dir = artifact_dir(engine);
    let identity = Identity::resolve(&row_input(engine)).unwrap();
    let text = render_dir(
        &dir,
        &identity,
        None,
        &OpenOptions::default(),
        Layout::Nested,
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_row(&v);
    v
}

#[test]
fn nested_report_of_a_vllm_run_matches_the_hand_computation() {
    let v = nested_report_of("vllm");
    check_request_side(&v);
    let s = &v["server_metrics"];
    assert_eq!(s["present"], json!(true));
    assert_eq!(s["adapter"], json!("vllm"));
    // 13 families on the page (num_requests_running ... time_to_first_token_seconds).
    assert_eq!(s["metric_count"], json!(13));
    // Two engines behind one URL.
    assert_eq!(s["sources"].as_array().unwrap().len(), 2);
    // By source: local 7000, external 1000 of 10000 prompt tokens (the counters: hits 4500 + 2500
    // of queries 6000 + 4000, external 1000 of 3000 queried).
    assert_eq!(at(s, "/cache/gpu_cache_hit_rate"), 0.7);
    assert_eq!(at(s, "/cache/external_cache_hit_rate"), 0.1);
    assert_eq!(at(s, "/cache/cpu_cache_hit_rate"), 0.1);
    assert_eq!(at(s, "/cache/overall_cache_hit_rate"), 0.8);
    assert_eq!(at(s, "/cache/prefix_cache_hits"), 7000.0);
    assert_eq!(at(s, "/cache/prefix_cache_queries"), 10000.0);
    assert_eq!(at(s, "/cache/external_prefix_cache_hits"), 1000.0);
    assert_eq!(at(s, "/cache/external_prefix_cache_queries"), 3000.0);
    // KV usage: engine 0 averages (0.2 + 0.6)/2 = 0.4, engine 1 (0.4 + 0.8)/2 = 0.6; mean 0.5.
    assert_eq!(at(s, "/kv_cache/gpu_usage_pct"), 0.5);
    assert_eq!(at(s, "/tokens/prompt_total"), 10000.0);
    assert_eq!(at(s, "/tokens/generation_total"), 500.0);
    assert_eq!(at(s, "/tokens/requests_completed"), 3.0);
    assert_eq!(at(s, "/tokens/prompt_by_source/gpu_cache_hit"), 7000.0);
    assert_eq!(
        at(s, "/tokens/prompt_by_source/cpu_or_external_cache_hit"),
        1000.0
    );
    assert_eq!(at(s, "/tokens/prompt_by_source/computed"), 2000.0);
    assert_eq!(at(s, "/tokens/prompt_by_source/raw"), 10000.0);
    assert_eq!(s["kv_offload"]["bytes_gpu_to_cpu"], Value::Null);
    assert_eq!(v["kv_cache_pool_tokens"], Value::Null);
}

#[test]
fn nested_report_of_an_sglang_run_matches_the_hand_computation() {
    let v = nested_report_of("sglang");
    check_request_side(&v);
    let s = &v["server_metrics"];
    assert_eq!(s["adapter"], json!("sglang"));
    assert_eq!(s["metric_count"], json!(13));
    // Cached on device 5000 - 1000 = 4000 and on host 1000 of 10000 - 2000 = 8000 prompt tokens.
    assert_eq!(at(s, "/cache/gpu_cache_hit_rate"), 0.5);
    assert_eq!(at(s, "/cache/external_cache_hit_rate"), 0.125);
    assert_eq!(at(s, "/cache/overall_cache_hit_rate"), 0.625);
    assert_eq!(
        s["cache"]["cached_tokens_by_source"],
        json!({"device": 4000.0, "host": 1000.0})
    );
    // token_usage (0.3 + 0.5)/2; HiCache host (10000 + 30000)/2 = 20000 of 100000.
    assert_eq!(at(s, "/kv_cache/gpu_usage_pct"), 0.4);
    assert_eq!(at(s, "/kv_cache/gpu_total_tokens"), 500000.0);
    assert_eq!(at(s, "/kv_cache/cpu_used_tokens"), 20000.0);
    assert_eq!(at(s, "/kv_cache/cpu_total_tokens"), 100000.0);
    assert_eq!(at(s, "/kv_cache/cpu_usage_pct"), 0.2);
    assert_eq!(at(s, "/tokens/prompt_total"), 8000.0);
    assert_eq!(at(s, "/tokens/generation_total"), 400.0);
    // 8000 - 4000 - 1000 computed.
    assert_eq!(at(s, "/tokens/prompt_by_source/computed"), 3000.0);
    assert_eq!(v["kv_cache_pool_tokens"], json!(500000));
}

#[test]
fn nested_report_of_a_llamacpp_run_matches_the_hand_computation() {
    let v = nested_report_of("llamacpp");
    check_request_side(&v);
    let s = &v["server_metrics"];
    assert_eq!(s["adapter"], json!("llamacpp"));
    // 14 families: upstream's 7 counters and 4 gauges, kv_cache_usage_ratio and kv_cache_tokens,
    // prompt_tokens_cached.
    assert_eq!(s["metric_count"], json!(14));
    // Evaluated 2500 - 500 = 2000, reused 6000: 6000 / 8000.
    assert_eq!(at(s, "/cache/gpu_cache_hit_rate"), 0.75);
    assert_eq!(at(s, "/cache/overall_cache_hit_rate"), 0.75);
    assert_eq!(at(s, "/tokens/prompt_total"), 8000.0);
    assert_eq!(at(s, "/tokens/generation_total"), 400.0);
    assert_eq!(at(s, "/tokens/prompt_by_source/computed"), 2000.0);
    // kv_cache_usage_ratio (0.1 + 0.3)/2.
    assert_eq!(at(s, "/kv_cache/gpu_usage_pct"), 0.2);
    let notes = v["warnings"].to_string();
    assert!(
        notes.contains("server_metrics.cache.gpu_cache_hit_rate (llamacpp adapter) from llamacpp:prompt_tokens_cached"),
        "{notes}"
    );
    assert_eq!(
        s["figure_sources"]["tokens.generation_total"],
        json!("llamacpp:tokens_predicted")
    );
}

#[test]
fn an_unknown_engine_is_reported_with_its_metric_names() {
    let m = exported(&["unknown"]);
    let records = vec![];
    let id = Identity::resolve(&row_input("tgi")).unwrap();
    let traces = Traces::Unavailable {
        reason: "test".into(),
    };
    let input = ReportInput {
        records: &records,
        server: Some(&m),
        run: None,
        aiperf: None,
        identity: &id,
        traces: &traces,
    };
    let v: Value = serde_json::from_str(&compute_nested(&input).unwrap().to_json_pretty()).unwrap();
    assert_row(&v);
    let s = &v["server_metrics"];
    assert_eq!(s["present"], json!(true));
    assert_eq!(s["adapter"], json!("unknown"));
    assert_eq!(s["metric_count"], json!(4));
    assert_eq!(
        s["metric_names"],
        json!([
            "process_cpu_seconds",
            "tgi_batch_current_size",
            "tgi_queue_size",
            "tgi_request_count"
        ])
    );
    assert_eq!(s["cache"]["gpu_cache_hit_rate"], Value::Null);
    assert!(v["warnings"].to_string().contains("none of vLLM, SGLang"));
    // The flat layout says the same in its notes.
    let flat = compute(&input);
    assert_eq!(flat.get("server_metrics_adapter"), Some(&json!("unknown")));
    assert!(flat
        .get("notes")
        .unwrap()
        .to_string()
        .contains("tgi_queue_size"));
}

#[test]
fn the_flat_layout_gains_the_llamacpp_hit_rate_and_aiperf_theoretical_rate() {
    let m = exported(&["llamacpp"]);
    let p = Path::new(PROFILE_EXPORT);
    let records = parse_profile_export(RECORDS, p).unwrap();
    let aiperf = AiperfSummary::parse(AIPERF, Path::new(PROFILE_AIPERF)).unwrap();
    let id = Identity::default();
    let traces = Traces::Unavailable {
        reason: "test".into(),
    };
    let r = compute(&ReportInput {
        records: &records,
        server: Some(&m),
        run: None,
        aiperf: Some(&aiperf),
        identity: &id,
        traces: &traces,
    });
    assert_eq!(r.f64("server_gpu_cache_hit_rate"), Some(0.75));
    assert_eq!(r.get("total_prompt_tokens"), Some(&json!(8000)));
    assert_eq!(r.f64("theoretical_cache_hit_rate"), Some(0.625));
    // Failed requests still count in the flat total; warmup does not.
    assert_eq!(r.get("num_requests_total"), Some(&json!(4)));
    assert_eq!(r.get("num_requests_successful"), Some(&json!(3)));
}

#[test]
fn theoretical_hit_rate_is_sum_over_count_else_the_percent_average() {
    let parse = |t: &str| {
        AiperfSummary::parse(t, Path::new(PROFILE_AIPERF))
            .unwrap()
            .theoretical_cache_hit_rate
    };
    assert_eq!(parse(AIPERF), Some(0.625));
    assert_eq!(
        parse(r#"{"theoretical_prefix_cache_hit":{"unit":"%","avg":40}}"#),
        Some(0.4)
    );
    assert_eq!(
        parse(r#"{"theoretical_prefix_cache_hit":{"unit":"ratio","avg":40}}"#),
        None
    );
    assert_eq!(parse("{}"), None);
}

#[test]
fn gpus_are_tp_pp_pcp_on_one_node_and_prefill_plus_decode_on_several() {
    let one = Identity {
        tp: 4,
        pp: 2,
        pcp_size: 2,
        dcp_size: 4,
        ..Identity::default()
    };
    assert_eq!(one.num_gpus(), 16);
    let multi = Identity::resolve(&IdentityInput {
        is_multinode: Some("true".into()),
        prefill_num_workers: Some("2".into()),
        prefill_tp: Some("4".into()),
        decode_num_workers: Some("1".into()),
        decode_tp: Some("8".into()),
        pp: Some("2".into()),
        ..IdentityInput::default()
    })
    .unwrap();
    assert_eq!(multi.num_gpus(), 16);
}

#[test]
fn nested_floats_are_rounded_to_5_decimals() {
    let mut v = json!({"a": 1.0 / 3.0, "b": [2.0 / 3.0, 7], "c": {"d": 0.123456789}});
    nested::round5(&mut v);
    assert_eq!(
        v,
        json!({"a": 0.33333, "b": [0.66667, 7], "c": {"d": 0.12346}})
    );
}

#[test]
fn error_categories_follow_inferencex() {
    let f = |v: Value| failure_of(&v).unwrap().category();
    assert_eq!(f(json!({"type": "timeout", "code": 504})), "timeout");
    assert_eq!(f(json!({"error_type": "ReadError"})), "ReadError");
    assert_eq!(f(json!({"code": 429, "message": "x"})), "429");
    assert_eq!(f(json!("ConnectionReset: peer closed")), "ConnectionReset");
}
