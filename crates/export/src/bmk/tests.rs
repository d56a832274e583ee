//! Unit tests of the `bmk_agentic` computation against hand-computed values and InferenceX's own output.

use super::*;

fn fixture(p: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("fixtures/report")
        .join(p)
}

fn worked_records() -> Vec<ProfileRecord> {
    let p = fixture("worked/profile_export.jsonl");
    parse_profile_export(&std::fs::read_to_string(&p).unwrap(), &p).unwrap()
}

fn worked_server() -> ServerMetrics {
    let p = fixture("worked/server_metrics_export.json");
    ServerMetrics::parse(&std::fs::read_to_string(&p).unwrap(), &p).unwrap()
}

fn worked_identity() -> Identity {
    Identity {
        hw: "b200".into(),
        conc: Some(8),
        image: "img".into(),
        model: "test-model".into(),
        model_prefix: "test".into(),
        framework: "vllm".into(),
        precision: "fp4".into(),
        tp: 4,
        ..Identity::default()
    }
}

fn no_traces() -> Traces {
    Traces::Unavailable {
        reason: "test".into(),
    }
}

fn report(
    records: &[ProfileRecord],
    server: Option<&ServerMetrics>,
    run: Option<&RunSummary>,
) -> BmkReport {
    compute(&ReportInput {
        records,
        server,
        run,
        aiperf: None,
        identity: &worked_identity(),
        traces: &no_traces(),
    })
}

/// A profiling record with the given latencies (ms) and times (ns).
#[allow(clippy::too_many_arguments)]
fn rec(
    conv: &str,
    turn: u64,
    isl: f64,
    osl: f64,
    ttft_ms: f64,
    e2e_ms: f64,
    itl_ms: f64,
    s: u64,
    e: u64,
) -> ProfileRecord {
    ProfileRecord {
        line: 0,
        conversation_id: conv.into(),
        turn_index: Some(turn),
        start_ns: Some(s),
        end_ns: Some(e),
        credit_issued_ns: None,
        source_trace_id: None,
        phase: RecordPhase::Profiling,
        cancelled: false,
        error: None,
        ttft_s: Some(ttft_ms / 1e3),
        e2el_s: Some(e2e_ms / 1e3),
        scheduled_ttft_s: None,
        ttfo_s: None,
        scheduled_e2el_s: None,
        itl_s: Some(itl_ms / 1e3),
        full_response_itl_s: None,
        isl: Some(isl),
        osl: Some(osl),
        cache_read_tokens: None,
    }
}

fn failed(kind: &str) -> ProfileRecord {
    ProfileRecord {
        error: Some(Failure {
            code: Some(500),
            kind: Some(kind.into()),
            message: Some("boom".into()),
        }),
        ttft_s: None,
        e2el_s: None,
        scheduled_ttft_s: None,
        ttfo_s: None,
        scheduled_e2el_s: None,
        itl_s: None,
        osl: None,
        ..rec(
            "trace-A",
            3,
            999.0,
            0.0,
            0.0,
            0.0,
            0.0,
            1_000_000_000,
            1_200_000_000,
        )
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// The number of decimals `key`'s value is written with in `text` (the worked example is rounded).
fn decimals(text: &str, key: &str) -> i32 {
    let at = text.find(&format!("\"{key}\":")).unwrap() + key.len() + 3;
    let v: String = text[at..]
        .chars()
        .take_while(|c| !matches!(c, ',' | '}' | '\n'))
        .collect();
    v.trim().split_once('.').map_or(0, |(_, d)| d.len() as i32)
}

#[test]
fn the_worked_example_gives_inferencex_numbers() {
    // docs/specs/inferencex-rows.md#worked-example: the output of InferenceX's script on these same
    // 5 records and server metrics.
    let text = std::fs::read_to_string(fixture("worked/expected_ix.json")).unwrap();
    let want: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    let server = worked_server();
    let r = report(&worked_records(), Some(&server), None);
    for (k, w) in &want {
        let got = r.get(k).unwrap_or_else(|| panic!("missing key {k}"));
        match (w, got) {
            (Value::Number(w), Value::Number(g)) => {
                let (w, g) = (w.as_f64().unwrap(), g.as_f64().unwrap());
                // Equal to the digits shown.
                let tol = 0.5 * 10f64.powi(-decimals(&text, k)) + 1e-12;
                assert!(close(g, w, tol), "{k}: got {g}, InferenceX wrote {w}");
            }
            _ => assert_eq!(got, w, "{k}"),
        }
    }
}

#[test]
fn worked_example_exact_values() {
    let server = worked_server();
    let r = report(&worked_records(), Some(&server), None);
    // QPS windows from the first end (2.0 s): [2,3) 2 ends, [3,4) 1, [4,5) 1.
    assert!(close(r.f64("mean_qps").unwrap(), 4.0 / 3.0, 1e-12));
    assert!(close(r.f64("p75_qps").unwrap(), 1.5, 1e-12));
    assert!(close(
        r.f64("std_qps").unwrap(),
        (2.0f64 / 9.0).sqrt(),
        1e-12
    ));
    // TTFT 30,32,33,35,40 ms: p90 at k = 3.6 -> 35 + 0.6*5 = 38 ms; pstdev sqrt(58/5).
    assert!(close(r.f64("p90_ttft").unwrap(), 0.038, 1e-12));
    assert!(close(
        r.f64("std_ttft").unwrap(),
        (58.0f64 / 5.0).sqrt() / 1e3,
        1e-12
    ));
    // Throughput: 840 input and 275 output tokens over 1.0 s .. 5.1 s.
    assert!(close(r.f64("duration_seconds").unwrap(), 4.1, 1e-12));
    assert!(close(r.f64("input_tput_tps").unwrap(), 840.0 / 4.1, 1e-9));
    assert!(close(
        r.f64("tput_per_gpu").unwrap(),
        1115.0 / 4.1 / 4.0,
        1e-9
    ));
    // Interactivity: the mean of reciprocals, not the reciprocal of the mean.
    let inv: f64 = [18.0, 18.5, 17.5, 19.0, 18.2]
        .iter()
        .map(|x| 1000.0 / x)
        .sum::<f64>()
        / 5.0;
    assert!(close(r.f64("mean_intvty").unwrap(), inv, 1e-9));
    assert_eq!(r.get("total_prompt_tokens"), Some(&json!(12345)));
    assert_eq!(r.get("server_external_cache_hit_rate"), Some(&Value::Null));
}

#[test]
fn every_section_5_2_key_is_present_even_without_data() {
    let r = report(&[], None, None);
    for k in SUMMARIZE_KEYS {
        assert!(r.get(k).is_some(), "{k}");
    }
    for k in [
        "num_requests_total",
        "theoretical_cache_hit_rate",
        "server_gpu_cache_hit_rate",
        "server_cpu_cache_hit_rate",
        "kv_offload_bytes_gpu_to_cpu",
        "cpu_kv_cache_usage_pct",
        "total_prompt_tokens",
        "response_cache_hit_rate",
        "duration_seconds",
        "mean_output_tokens_expected",
        "std_qps",
    ] {
        assert!(r.get(k).is_some(), "{k}");
    }
    assert_eq!(r.get("num_requests_total"), Some(&json!(0)));
    assert_eq!(r.get("context_overflow_rate"), Some(&json!(0.0)));
}

#[test]
fn failed_requests_count_in_the_total_only() {
    let mut recs = worked_records();
    recs.push(failed("http_error"));
    recs.push(ProfileRecord {
        cancelled: true,
        ..rec(
            "trace-B",
            2,
            10.0,
            1.0,
            5.0,
            6.0,
            1.0,
            1_000_000_000,
            1_100_000_000,
        )
    });
    let r = report(&recs, None, None);
    assert_eq!(r.get("num_requests_total"), Some(&json!(7)));
    assert_eq!(r.get("num_requests_successful"), Some(&json!(5)));
    assert_eq!(r.get("num_requests_failed"), Some(&json!(2)));
    assert_eq!(r.get("num_requests_cancelled"), Some(&json!(1)));
    assert_eq!(r.get("total_requests_completed"), Some(&json!(5)));
    assert_eq!(
        r.get("errors_by_type"),
        Some(&json!({"cancelled": 1, "http_error": 1}))
    );
    // Failures change no latency or throughput figure.
    assert!(close(r.f64("mean_ttft").unwrap(), 0.034, 1e-12));
    assert_eq!(r.get("total_prompt_tokens"), Some(&json!(840)));
}

#[test]
fn warmup_is_excluded_from_everything() {
    let mut recs = worked_records();
    let mut w = rec(
        "trace-A",
        0,
        10_000.0,
        5_000.0,
        9_000.0,
        30_000.0,
        900.0,
        0,
        9_000_000_000,
    );
    w.phase = RecordPhase::Warmup;
    recs.push(w.clone());
    let mut wf = failed("context_overflow");
    wf.phase = RecordPhase::Warmup;
    recs.push(wf);
    let with = report(&recs, None, None);
    let without = report(&worked_records(), None, None);
    for (k, v) in &without.fields {
        if k != "num_warmup_requests_excluded" && k != "notes" {
            assert_eq!(with.get(k), Some(v), "{k}");
        }
    }
    assert_eq!(with.get("num_warmup_requests_excluded"), Some(&json!(2)));
    assert_eq!(with.get("context_overflow_count"), Some(&json!(0)));
}

#[test]
fn context_overflows_from_records_or_the_run_summary() {
    let mut recs = worked_records();
    recs.push(failed("context_overflow"));
    let r = report(&recs, None, None);
    assert_eq!(r.get("context_overflow_count"), Some(&json!(1)));
    assert_eq!(r.get("num_requests_total"), Some(&json!(6)));
    assert!(close(
        r.f64("context_overflow_rate").unwrap(),
        1.0 / 6.0,
        1e-12
    ));
    // A writer that drops overflow rows (aiperf does) leaves the count to the run summary, and the
    // dropped rows still count as requests.
    let mut run = RunSummary::default();
    run.summary.context_overflows = 3;
    let r = report(&recs, None, Some(&run));
    assert_eq!(r.get("context_overflow_count"), Some(&json!(3)));
    assert_eq!(r.get("num_requests_total"), Some(&json!(8)));
    assert!(close(
        r.f64("context_overflow_rate").unwrap(),
        3.0 / 8.0,
        1e-12
    ));
}

fn series(labels: &[(&str, &str)], stats: &[(&str, f64)]) -> Value {
    json!({
        "endpoint_url": "http://h:8000/metrics",
        "labels": labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "stats": stats.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    })
}

fn server(doc: &Value) -> ServerMetrics {
    ServerMetrics::parse(&doc.to_string(), Path::new("server_metrics_export.json")).unwrap()
}

#[test]
fn counters_sum_and_gauges_average_across_series() {
    // InferenceX test 7: 100+200 hits over 400+600 queries = 0.3.
    let engines = |v: f64| {
        (0..8)
            .map(|e| {
                series(
                    &[("engine", &e.to_string())],
                    &[("avg", v), ("max", 1.0), ("min", 0.0)],
                )
            })
            .collect::<Vec<_>>()
    };
    let m = server(&json!({"metrics": {
        "vllm:prefix_cache_hits": {"type": "counter", "series": [
            series(&[("engine", "0")], &[("total", 100.0)]), series(&[("engine", "1")], &[("total", 200.0)])]},
        "vllm:prefix_cache_queries": {"type": "counter", "series": [
            series(&[("engine", "0")], &[("total", 400.0)]), series(&[("engine", "1")], &[("total", 600.0)])]},
        "vllm:kv_cache_usage_perc": {"type": "gauge", "series": engines(0.5)},
        "vllm:cpu_kv_cache_usage_perc": {"type": "gauge", "series": [
            series(&[("engine", "0")], &[("avg", 0.2), ("max", 0.9)]),
            series(&[("engine", "1")], &[("avg", 0.4), ("max", 0.9)])]},
        "vllm:prompt_tokens": {"type": "counter", "series": [
            series(&[("engine", "0")], &[("total", 1000.0)]), series(&[("engine", "1")], &[("total", 234.0)])]},
    }}));
    let r = report(&worked_records(), Some(&m), None);
    assert!(close(
        r.f64("server_gpu_cache_hit_rate").unwrap(),
        0.3,
        1e-12
    ));
    // 8 DP engines at 50% read 50%, not 400%.
    assert!(close(r.f64("gpu_kv_cache_usage_pct").unwrap(), 0.5, 1e-12));
    assert!(close(r.f64("cpu_kv_cache_usage_pct").unwrap(), 0.3, 1e-12));
    assert_eq!(r.get("total_prompt_tokens"), Some(&json!(1234)));
    // Untyped metrics: a `total` makes a counter, otherwise a gauge.
    let m = server(&json!({"metrics": {
        "x:c": {"series": [series(&[], &[("total", 1.0)]), series(&[], &[("total", 2.0)])]},
        "x:g": {"series": [series(&[], &[("avg", 1.0)]), series(&[], &[("avg", 2.0)])]},
    }}));
    assert_eq!(m.value("x:c"), Some(3.0));
    assert_eq!(m.value("x:g"), Some(1.5));
    assert_eq!(m.value("x:none"), None);
}

#[test]
fn external_cache_hit_rate_from_vllm_external_prefix_cache() {
    let m = server(&json!({"metrics": {
        "vllm:external_prefix_cache_hits": {"type": "counter", "series": [
            series(&[("engine", "0")], &[("total", 30.0)]), series(&[("engine", "1")], &[("total", 10.0)])]},
        "vllm:external_prefix_cache_queries": {"type": "counter", "series": [
            series(&[("engine", "0")], &[("total", 100.0)]), series(&[("engine", "1")], &[("total", 60.0)])]},
    }}));
    let r = report(&worked_records(), Some(&m), None);
    assert!(close(
        r.f64("server_external_cache_hit_rate").unwrap(),
        0.25,
        1e-12
    ));
    assert!(close(
        r.f64("server_cpu_cache_hit_rate").unwrap(),
        0.25,
        1e-12
    ));
    assert_eq!(r.get("server_gpu_cache_hit_rate"), Some(&Value::Null));
    assert_eq!(
        r.get("server_metric_sources").unwrap()["server_external_cache_hit_rate"],
        json!("vllm:external_prefix_cache_hits / vllm:external_prefix_cache_queries")
    );
}

#[test]
fn sglang_names() {
    let m = server(&json!({"metrics": {
        "sglang:prompt_tokens": {"type": "counter", "series": [series(&[], &[("total", 1000.0)])]},
        "sglang:generation_tokens": {"type": "counter", "series": [series(&[], &[("total", 77.0)])]},
        "sglang:cached_tokens": {"type": "counter", "series": [
            series(&[("cache_source", "device")], &[("total", 600.0)]),
            series(&[("cache_source", "host")], &[("total", 150.0)])]},
        "sglang:token_usage": {"type": "gauge", "series": [series(&[], &[("avg", 0.7)])]},
    }}));
    let r = report(&worked_records(), Some(&m), None);
    assert!(close(
        r.f64("server_gpu_cache_hit_rate").unwrap(),
        0.6,
        1e-12
    ));
    assert!(close(
        r.f64("server_external_cache_hit_rate").unwrap(),
        0.15,
        1e-12
    ));
    assert!(close(r.f64("gpu_kv_cache_usage_pct").unwrap(), 0.7, 1e-12));
    assert_eq!(r.get("total_prompt_tokens"), Some(&json!(1000)));
    assert_eq!(r.get("total_generation_tokens"), Some(&json!(77)));
    // Without cached_tokens, the realtime prefill split: 300 cached of 300+900.
    let m = server(&json!({"metrics": {
        "sglang:realtime_tokens": {"type": "counter", "series": [
            series(&[("mode", "prefill_cache")], &[("total", 300.0)]),
            series(&[("mode", "prefill_compute")], &[("total", 900.0)]),
            series(&[("mode", "decode")], &[("total", 5000.0)])]},
    }}));
    let r = report(&worked_records(), Some(&m), None);
    assert!(close(
        r.f64("server_gpu_cache_hit_rate").unwrap(),
        0.25,
        1e-12
    ));
}

#[test]
fn missing_server_metrics_fall_back_and_say_so() {
    // InferenceX test 4.
    let r = report(&worked_records(), None, None);
    assert_eq!(r.get("server_gpu_cache_hit_rate"), Some(&Value::Null));
    assert_eq!(r.get("total_prompt_tokens"), Some(&json!(840)));
    assert_eq!(r.get("total_generation_tokens"), Some(&json!(275)));
    assert_eq!(r.get("total_requests_completed"), Some(&json!(5)));
    let notes = r.get("notes").unwrap().to_string();
    assert!(
        notes.contains("server_metrics_export.json absent"),
        "{notes}"
    );
}

#[test]
fn response_cache_hit_rate_needs_every_record() {
    // InferenceX test 5: 60 cached of 100.
    let mut one = rec("trace-A", 0, 100.0, 50.0, 30.0, 1000.0, 18.0, 1, 2);
    one.cache_read_tokens = Some(60.0);
    let r = report(std::slice::from_ref(&one), None, None);
    assert!(close(r.f64("response_cache_hit_rate").unwrap(), 0.6, 1e-12));
    let two = [
        one,
        rec("trace-A", 1, 100.0, 50.0, 30.0, 1000.0, 18.0, 3, 4),
    ];
    let r = report(&two, None, None);
    assert_eq!(r.get("response_cache_hit_rate"), Some(&Value::Null));
}

#[test]
fn interactivity_under_both_conventions() {
    let r = report(&worked_records(), None, None);
    // ITL 17.5, 18, 18.2, 18.5, 19 ms; p75 TPOT = 18.5 ms.
    let at = r.f64("p75_intvty_at_tpot").unwrap();
    assert!(close(at, 1000.0 / 18.5, 1e-9));
    // The per-request convention's p75 is the fast side: 1000/18 (the p25 ITL).
    assert!(close(r.f64("p75_intvty").unwrap(), 1000.0 / 18.0, 1e-9));
    assert!(r.f64("p75_intvty").unwrap() > at);
    assert!(close(
        r.f64("mean_intvty_at_tpot").unwrap(),
        1.0 / 0.01824,
        1e-9
    ));
    let defs = r.get("metric_definitions").unwrap();
    assert!(defs["intvty"].as_str().unwrap().contains("per-request"));
    assert!(defs["intvty_at_tpot"]
        .as_str()
        .unwrap()
        .contains("1/pXX_tpot"));
}

#[test]
fn qps_windows_by_hand() {
    let s = 1_000_000_000u64;
    // Ends at 0, 0.5, 1.2, 1.9, 2.5 s: windows [0,1) 2, [1,2) 2; [2,3) does not fit before 2.5.
    let w = qps_windows(&[0, s / 2, 12 * s / 10, 19 * s / 10, 25 * s / 10]).unwrap();
    assert_eq!(w, Ok(vec![2.0, 2.0]));
    // No full window: n over the span.
    assert_eq!(qps_windows(&[0, s / 2]), Some(Err(4.0)));
    assert_eq!(qps_windows(&[s]), None);
    assert_eq!(qps_windows(&[s, s]), None);
    let r = report(
        &[
            rec("a", 0, 1.0, 1.0, 1.0, 1.0, 1.0, 0, s / 4),
            rec("a", 1, 1.0, 1.0, 1.0, 1.0, 1.0, 0, s / 2),
        ],
        None,
        None,
    );
    assert!(close(r.f64("mean_qps").unwrap(), 8.0, 1e-12));
    assert_eq!(r.get("p75_qps"), Some(&Value::Null));
}

#[test]
fn stats_interpolate_and_use_the_population_std() {
    let s = Stats::of(&[1.0, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(s.mean, 2.5);
    assert!(close(s.p75, 3.25, 1e-12));
    assert!(close(s.p90, 3.7, 1e-12));
    assert!(close(s.p95, 3.85, 1e-12));
    assert!(close(s.std, 1.25f64.sqrt(), 1e-12));
    assert_eq!(Stats::of(&[7.0]).unwrap().std, 0.0);
    assert!(Stats::of(&[]).is_none());
}

fn traces_available(cache: &Path) -> Traces {
    let ds = Dataset::open_path(
        &fixture("traces.jsonl"),
        &OpenOptions {
            num_dataset_entries: None,
            max_context_length: None,
            max_osl: None,
            cache_dir: Some(cache.to_owned()),
            format: None,
            block_size: None,
            trace_block_size: None,
        },
    )
    .unwrap();
    Traces::Available {
        dataset: ds,
        name: "traces.jsonl".into(),
    }
}

#[test]
fn trace_metadata_gives_theoretical_hits_and_expected_outputs() {
    // InferenceX test 8: trace-A turns 0..2 hit 3+4 of 3+4+5 blocks, trace-B 2 of 2+4: 9/18.
    let cache = tempfile::tempdir().unwrap();
    let traces = traces_available(cache.path());
    let mut recs = worked_records();
    recs[0].conversation_id = "trace-A::lane3".into();
    let r = compute(&ReportInput {
        records: &recs,
        server: None,
        run: None,
        aiperf: None,
        identity: &worked_identity(),
        traces: &traces,
    });
    assert!(close(
        r.f64("theoretical_cache_hit_rate").unwrap(),
        0.5,
        1e-12
    ));
    assert!(close(
        r.f64("mean_output_tokens_expected").unwrap(),
        55.0,
        1e-12
    ));
    assert_eq!(r.get("trace_metadata").unwrap()["traces_matched"], json!(2));
    // Unknown ids are left out and named.
    recs[1].conversation_id = "trace-Z".into();
    let r = compute(&ReportInput {
        records: &recs,
        server: None,
        run: None,
        aiperf: None,
        identity: &worked_identity(),
        traces: &traces,
    });
    assert!(r.get("notes").unwrap().to_string().contains("trace-Z"));
}

#[test]
fn unavailable_trace_metadata_is_said() {
    let r = report(&worked_records(), None, None);
    assert_eq!(r.get("theoretical_cache_hit_rate"), Some(&Value::Null));
    assert_eq!(r.get("mean_output_tokens_expected"), Some(&Value::Null));
    assert_eq!(
        r.get("trace_metadata").unwrap()["status"],
        json!("unavailable")
    );
    assert!(r
        .get("notes")
        .unwrap()
        .to_string()
        .contains("trace metadata unavailable"));
}

#[test]
fn open_traces_resolves_from_the_run_summary() {
    let cache = tempfile::tempdir().unwrap();
    let opts = OpenOptions {
        num_dataset_entries: None,
        max_context_length: None,
        max_osl: None,
        cache_dir: Some(cache.path().to_owned()),
        format: None,
        block_size: None,
        trace_block_size: None,
    };
    let run = RunSummary {
        dataset: Some(crate::manifest::DatasetId {
            source: fixture("traces.jsonl"),
            ..Default::default()
        }),
        ..RunSummary::default()
    };
    assert!(matches!(
        open_traces(Some(&run), None, &opts),
        Traces::Available { .. }
    ));
    let run = RunSummary {
        dataset: Some(crate::manifest::DatasetId {
            alias: Some("no_such_corpus".into()),
            ..Default::default()
        }),
        ..RunSummary::default()
    };
    match open_traces(Some(&run), None, &opts) {
        Traces::Unavailable { reason } => assert!(reason.contains("alias table"), "{reason}"),
        Traces::Available { .. } => panic!("opened an unknown alias"),
    }
    match open_traces(None, None, &opts) {
        Traces::Unavailable { reason } => assert!(reason.contains("--dataset"), "{reason}"),
        Traces::Available { .. } => panic!(),
    }
}

#[test]
fn bad_records_name_file_and_line() {
    let p = Path::new("dir/profile_export.jsonl");
    let good = std::fs::read_to_string(fixture("worked/profile_export.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    let text = format!("{first}\n\n{{\"metadata\": 3}}\n");
    let e = parse_profile_export(&text, p).unwrap_err().to_string();
    assert!(
        e.starts_with("dir/profile_export.jsonl:3: not an aiperf record"),
        "{e}"
    );
    let text = first.replace("\"profiling\"", "\"cooldown\"");
    let e = parse_profile_export(&text, p).unwrap_err().to_string();
    assert!(
        e.contains(":1: metadata.benchmark_phase \"cooldown\""),
        "{e}"
    );
    let text = first.replace("\"unit\": \"ms\"", "\"unit\": \"parsecs\"");
    let e = parse_profile_export(&text, p).unwrap_err().to_string();
    assert!(e.contains("is not a time unit"), "{e}");
    let text = first.replace(
        "{\"value\": 30.0, \"unit\": \"ms\"}",
        "{\"value\": \"fast\"}",
    );
    let e = parse_profile_export(&text, p).unwrap_err().to_string();
    assert!(
        e.contains("metrics.time_to_first_token.value must be a number, got a string"),
        "{e}"
    );
}

#[test]
fn records_parse_units_errors_and_phases() {
    let line = json!({"metadata": {"conversation_id": "c", "turn_index": 2, "request_start_ns": 5,
        "request_end_ns": 9, "benchmark_phase": "warmup", "was_cancelled": true},
        "metrics": {"time_to_first_token": {"value": 2.0, "unit": "s"}, "request_latency": 0,
            "inter_chunk_latency": {"value": [1, 2], "unit": "ms"}, "error_isl": {"value": 10, "unit": "tokens"}},
        "error": {"code": 400, "type": "context_overflow", "message": "maximum context length"}});
    let r = parse_profile_export(&line.to_string(), Path::new("x"))
        .unwrap()
        .remove(0);
    assert_eq!(r.phase, RecordPhase::Warmup);
    assert!(r.cancelled);
    assert_eq!(r.ttft_s, Some(2.0));
    assert_eq!(r.e2el_s, None, "latencies <= 0 are dropped");
    assert!(r.error.as_ref().unwrap().is_context_overflow());
    assert!(!r.ok());
    for e in [json!(null), json!({}), json!(""), json!(false)] {
        let mut l = line.clone();
        l["error"] = e;
        l["metadata"]["was_cancelled"] = json!(false);
        assert!(parse_profile_export(&l.to_string(), Path::new("x")).unwrap()[0].ok());
    }
}

#[test]
fn identity_from_inferencex_variables() {
    let i = Identity::resolve(&IdentityInput {
        is_multinode: Some("true".into()),
        disagg: Some("1".into()),
        prefill_num_workers: Some("5".into()),
        prefill_tp: Some("4".into()),
        prefill_ep: Some("4".into()),
        prefill_dp_attention: Some("true".into()),
        decode_num_workers: Some("1".into()),
        decode_tp: Some("8".into()),
        decode_ep: Some("8".into()),
        tp: Some(String::new()),
        ..IdentityInput::default()
    })
    .unwrap();
    assert_eq!(i.num_gpus(), 28);
    let r = compute(&ReportInput {
        records: &worked_records(),
        server: None,
        run: None,
        aiperf: None,
        identity: &i,
        traces: &no_traces(),
    });
    assert_eq!(r.get("is_multinode"), Some(&json!(true)));
    assert_eq!(r.get("tp"), Some(&json!(12)));
    assert_eq!(r.get("ep"), Some(&json!(8)));
    assert_eq!(r.get("dp_attention"), Some(&json!("true")));
    assert_eq!(r.get("num_prefill_gpu"), Some(&json!(20)));
    assert_eq!(r.get("decode_dp_attention"), Some(&json!("false")));
    assert!(close(
        r.f64("tput_per_gpu").unwrap(),
        1115.0 / 4.1 / 28.0,
        1e-9
    ));
    let e = Identity::resolve(&IdentityInput {
        tp: Some("four".into()),
        ..IdentityInput::default()
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        e,
        "--tp (or env TP): \"four\" is not a non-negative integer"
    );
    let d = Identity::resolve(&IdentityInput::default()).unwrap();
    assert_eq!(d, Identity::default());
}

#[test]
fn run_summary_fills_conc_model_and_validity() {
    let text = json!({"dataset": {"alias": "semianalysis_cc_traces_weka", "source": "/x/traces.jsonl"},
        "scenario": {"name": "agentx-mvp", "version": "1"}, "seed": 42, "concurrency": 16, "model": "m",
        "submission_valid": false, "submission_invalid_reasons": ["context_overflow_rate_exceeded"],
        "summary": {"context_overflows": 2}}).to_string();
    let run = RunSummary::parse(&text, Path::new("run_summary.json")).unwrap();
    assert_eq!(run.summary.context_overflows, 2);
    let id = Identity::default();
    let r = compute(&ReportInput {
        records: &worked_records(),
        server: None,
        run: Some(&run),
        aiperf: None,
        identity: &id,
        traces: &no_traces(),
    });
    assert_eq!(r.get("conc"), Some(&json!(16)));
    assert_eq!(r.get("model"), Some(&json!("m")));
    assert_eq!(r.get("seed"), Some(&json!(42)));
    assert_eq!(r.get("submission_valid"), Some(&json!(false)));
    assert_eq!(
        r.get("dataset").unwrap()["alias"],
        json!("semianalysis_cc_traces_weka")
    );
    assert_eq!(r.get("context_overflow_count"), Some(&json!(2)));
}

#[test]
fn keys_keep_inferencex_order_in_json() {
    let r = report(&worked_records(), None, None);
    let s = r.to_json_pretty();
    let pos = |k: &str| s.find(&format!("\"{k}\"")).unwrap();
    assert!(pos("hw") < pos("conc"));
    assert!(pos("num_requests_total") < pos("mean_qps"));
    assert!(pos("mean_ttft") < pos("input_tput_tps"));
    let back: Value = serde_json::from_str(&s).unwrap();
    assert_eq!(back["scenario_type"], json!("agentic-coding"));
}
