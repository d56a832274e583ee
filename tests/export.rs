//! The aiperf-compatible exports written from a record stream: records go through the real sink into
//! `records.jsonl`, are read back, and `export::aiperf::write_all` writes every file into a temporary
//! artifact directory. The schema of each file (keys, units, CSV columns and metric names) is checked
//! against `fixtures/golden/aiperf_export_schema.json`; set `AGENTX_BLESS=1` to rewrite the golden file
//! after an intended change, and review its diff.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use agentx::export::aiperf::{self, ExportError, RunInfo};
use agentx::fsio::Root;
use agentx::record::{
    read_records, Phase, RecordError, RecordSink, RequestRecord, TokenSource, Usage,
};
use serde_json::{json, Value};

const MS: u64 = 1_000_000;
const ANCHOR: u64 = 1_780_000_000_000_000_000;

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/golden/aiperf_export_schema.json")
}

/// A successful profiling request of session `s`, sent at `send_ms`, with content chunks at
/// `chunks_ms` after the send.
fn ok(s: u64, turn: u32, send_ms: u64, chunks_ms: &[u64], isl: u64, osl: u64) -> RequestRecord {
    let send = send_ms * MS;
    let offsets: Vec<u64> = chunks_ms.iter().map(|c| c * MS).collect();
    RequestRecord {
        reply: agentx::record::ReplyStats::default(),
        request_id: format!("req-{s}-{turn}"),
        correlation_id: format!("corr-{s}"),
        session_num: s,
        phase: Phase::Profiling,
        lane: s as u32 % 2,
        trace_id: format!("trace-{s}"),
        turn,
        num_turns: 8,
        recycle_pass: 0,
        intended_ns: send,
        send_ns: send,
        first_byte_ns: Some(send + 2 * MS),
        first_token_ns: offsets.first().map(|o| send + o),
        end_ns: send + offsets.last().copied().unwrap_or(0) + MS,
        chunk_offsets_ns: offsets.into(),
        isl,
        osl,
        token_source: TokenSource::Server,
        usage: Usage {
            prompt_tokens: Some(isl),
            completion_tokens: Some(osl),
            cached_tokens: Some(isl / 2),
            reasoning_tokens: None,
        },
        max_tokens: 256,
        finish_reason: Some("stop".into()),
        cancelled: false,
        context_overflow: false,
        error: None,
        retry: None,
        server_ttft_ns: None,
        tree: None,
        server: None,
        prompt_blocks: None,
    }
}

fn with_error(mut r: RequestRecord, code: u16, kind: &str) -> RequestRecord {
    r.error = Some(RecordError {
        code,
        kind: kind.into(),
        message: format!("{kind} from the server"),
    });
    r.first_token_ns = None;
    r.chunk_offsets_ns.clear();
    r.osl = 0;
    r
}

/// Warmup, successes, an HTTP failure, a context overflow and a cancellation, over a 4 s window.
fn records() -> Vec<RequestRecord> {
    let mut warm = ok(0, 0, 0, &[40, 50, 60], 1_000, 3);
    warm.phase = Phase::Warmup;
    let overflow = RequestRecord {
        reply: agentx::record::ReplyStats::default(),
        context_overflow: true,
        ..with_error(ok(3, 5, 1_800, &[], 200_000, 0), 400, "context_overflow")
    };
    let mut cancelled = ok(4, 2, 4_200, &[100, 120], 900, 2);
    cancelled.cancelled = true;
    cancelled.error = Some(RecordError {
        code: 0,
        kind: "cancelled".into(),
        message: "the run ended".into(),
    });
    // Due 5 ms before it went out: aiperf's clock starts at the send, the scheduled one when due.
    let mut late = ok(1, 1, 1_000, &[150, 170, 190, 260], 4_000, 16);
    late.intended_ns -= 5 * MS;
    vec![
        warm,
        late,
        ok(2, 3, 1_200, &[300, 310, 330], 9_000, 8),
        overflow,
        ok(1, 2, 2_500, &[120, 160], 4_600, 2),
        with_error(ok(2, 4, 3_000, &[], 9_500, 0), 503, "http_error"),
        cancelled,
    ]
}

fn info() -> RunInfo {
    RunInfo {
        benchmark_id: "6f1c2d7e-bench".into(),
        anchor_unix_ns: ANCHOR,
        profiling_start_ns: 1_000 * MS,
        profiling_end_ns: 4_500 * MS,
        scenario_name: "inferencex-agentx-mvp".into(),
        scenario_version: "0.2.0".into(),
        scenario_sha256: "0123456789abcdef".repeat(4),
        submission_valid: true,
        submission_invalid_reasons: vec![],
        was_cancelled: false,
        input_config: json!({"endpoint": {"url": "http://127.0.0.1:0"}, "concurrency": 2}),
        seed: Some(42),
        profiling_duration_ns: Some(3_500 * MS),
        coverage_rule: aiperf::CoverageRule::default(),
        prefix_stamps: (0..4)
            .map(|s| (format!("trace-{s}"), vec![(1, 4); 8]))
            .collect(),
        dataset: Some(json!({
            "source_type": "public_dataset",
            "loader": "semianalysis_cc_traces_weka_062126",
            "hf_dataset_name": "semianalysisai/cc-traces-weka-062126",
            "hf_split": "train",
        })),
        warmup_naming: aiperf::WarmupNaming::default(),
        goodput: None,
        cache: None,
        energy: None,
    }
}

/// Records through the real sink and back, then every export written.
fn exported(slice: Option<f64>) -> (tempfile::TempDir, Vec<PathBuf>, Vec<RequestRecord>) {
    let dir = tempfile::tempdir().unwrap();
    let sink = RecordSink::create(&Root::open(dir.path()).unwrap()).unwrap();
    let tx = sink.sender();
    for r in records() {
        tx.send(r);
    }
    drop(tx);
    sink.close().unwrap();
    let recs = read_records(&dir.path().join("records.jsonl")).unwrap();
    assert_eq!(recs, records());
    let written =
        aiperf::write_all(&Root::open(dir.path()).unwrap(), &recs, &info(), slice).unwrap();
    (dir, written, recs)
}

fn keys(v: &Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// Splits a JSON object into its metric blocks (objects with a `unit`) and its other keys.
fn split_blocks(obj: &Value) -> (BTreeMap<String, Value>, Vec<String>) {
    let mut blocks = BTreeMap::new();
    let mut other = Vec::new();
    for (k, v) in obj.as_object().unwrap() {
        match v.get("unit") {
            Some(u) => {
                blocks.insert(k.clone(), json!({"unit": u, "keys": keys(v)}));
            }
            None => other.push(k.clone()),
        }
    }
    (blocks, other)
}

/// The schema of every export file: keys, units, CSV columns and names; no values.
fn schema(dir: &Path) -> Value {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();

    // profile_export.jsonl: one schema per kind of line.
    let mut lines = BTreeMap::new();
    for l in read(aiperf::PROFILE_EXPORT_JSONL).lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let kind = match (&v["error"], v["metadata"]["benchmark_phase"].as_str()) {
            (Value::Null, Some("warmup")) => "warmup",
            (Value::Null, _) => "success",
            _ if v["metadata"]["was_cancelled"] == true => "cancelled",
            _ => "error",
        };
        let metrics: BTreeMap<String, Value> = v["metrics"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, m)| (k.clone(), m["unit"].clone()))
            .collect();
        let entry = json!({
            "keys": keys(&v),
            "metadata": keys(&v["metadata"]),
            "metric_units": metrics,
            "error": if v["error"].is_null() { json!(null) } else { json!(keys(&v["error"])) },
        });
        lines.entry(kind.to_string()).or_insert(entry);
    }

    // profile_export_aiperf.json.
    let agg: Value = serde_json::from_str(&read(aiperf::PROFILE_EXPORT_JSON)).unwrap();
    let (blocks, other) = split_blocks(&agg);

    // profile_export_aiperf.csv: two sections.
    let csv = read(aiperf::PROFILE_EXPORT_CSV);
    let sections: Vec<Value> = csv
        .trim_end()
        .split("\n\n")
        .map(|sec| {
            let mut ls = sec.lines();
            let header = ls.next().unwrap().to_string();
            let names: Vec<String> = ls
                .map(|l| l.split(',').next().unwrap().to_string())
                .collect();
            json!({"header": header, "metrics": names})
        })
        .collect();

    // Timeslices.
    let ts: Value = serde_json::from_str(&read(aiperf::TIMESLICES_JSON)).unwrap();
    let slices: Vec<Value> = ts["timeslices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let (b, o) = split_blocks(s);
            json!({"blocks": b, "other": o})
        })
        .collect();
    let tcsv = read(aiperf::TIMESLICES_CSV);
    let mut tl = tcsv.lines();
    let theader = tl.next().unwrap().to_string();
    let mut metric_units = BTreeSet::new();
    let mut stats = BTreeSet::new();
    for l in tl {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 5, "{l}");
        metric_units.insert(format!("{} [{}]", f[1], f[2]));
        stats.insert(f[3].to_string());
    }

    json!({
        "profile_export.jsonl": lines,
        "profile_export_aiperf.json": {"blocks": blocks, "other_keys": other,
            "metadata": agg["metadata"], "run_info": keys(&agg["run_info"]),
            "error_summary_item": keys(&agg["error_summary"][0]),
            "error_details": keys(&agg["error_summary"][0]["error_details"])},
        "profile_export_aiperf.csv": sections,
        "profile_export_aiperf_timeslices.json": {"top": keys(&ts), "slices": slices},
        "profile_export_aiperf_timeslices.csv": {"header": theader,
            "metrics": metric_units, "stats": stats},
    })
}

#[test]
fn every_export_matches_the_golden_schema() {
    let (dir, written, _) = exported(Some(1.0));
    let names: Vec<String> = written
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "profile_export.jsonl",
            "profile_export_aiperf.json",
            "profile_export_aiperf.csv",
            "profile_export_aiperf_timeslices.json",
            "profile_export_aiperf_timeslices.csv",
        ]
    );
    let actual = schema(dir.path());
    let path = golden_path();
    if std::env::var_os("AGENTX_BLESS").is_some() {
        let mut text = serde_json::to_string_pretty(&actual).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
    }
    let golden: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(
        actual == golden,
        "export schema differs from {}; actual:\n{}",
        path.display(),
        serde_json::to_string_pretty(&actual).unwrap()
    );
}

/// The first profiling success, computed by hand: due at 995 ms, sent at 1,000 ms (request start),
/// response headers at +2 ms, content chunks at +150, +170, +190, +260 ms, the end at +261 ms; 4,000
/// prompt tokens (2,000 cached), 16 output tokens. Every aiperf-named field is on aiperf's clock
/// (from `request_start_ns`); the scheduled pair counts from `credit_issued_ns`.
fn every_aiperf_named_metric_by_hand(line: &Value) {
    let md = &line["metadata"];
    assert_eq!(md["credit_issued_ns"], ANCHOR + 995 * MS);
    assert_eq!(md["request_start_ns"], ANCHOR + 1_000 * MS);
    assert_eq!(md["request_ack_ns"], ANCHOR + 1_002 * MS);
    assert_eq!(md["request_end_ns"], ANCHOR + 1_261 * MS);
    let m = &line["metrics"];
    let value = |tag: &str| -> f64 {
        m[tag]["value"]
            .as_f64()
            .unwrap_or_else(|| panic!("{tag} missing from {m}"))
    };
    let close = |tag: &str, want: f64| {
        let got = value(tag);
        assert!((got - want).abs() < 1e-9, "{tag}: {got} against {want}");
    };
    close("input_sequence_length", 4_000.0);
    close("time_to_first_token", 150.0);
    close("time_to_second_token", 20.0);
    close("request_latency", 260.0);
    assert_eq!(m["inter_chunk_latency"]["value"], json!([20.0, 20.0, 70.0]));
    close("output_sequence_length", 16.0);
    close("output_token_count", 16.0);
    // From the first content chunk to the end of the response: 261 - 150 ms.
    close("full_decode_duration", 111.0);
    // Decode over OSL - 1: (260 - 150) / 15 and 111 / 15 ms.
    close("inter_token_latency", 110.0 / 15.0);
    close("full_response_inter_token_latency", 111.0 / 15.0);
    close("output_token_throughput_per_user", 1_000.0 / (110.0 / 15.0));
    close(
        "full_response_output_token_throughput_per_user",
        1_000.0 / (111.0 / 15.0),
    );
    close("usage_prompt_tokens", 4_000.0);
    close("usage_completion_tokens", 16.0);
    close("usage_total_tokens", 4_016.0);
    close("usage_prompt_cache_read_tokens", 2_000.0);
    close("scheduled_time_to_first_token", 155.0);
    close("scheduled_request_latency", 265.0);
    for (tag, unit) in [
        ("time_to_first_token", "ms"),
        ("request_latency", "ms"),
        ("scheduled_time_to_first_token", "ms"),
        ("inter_token_latency", "ms"),
        ("output_token_throughput_per_user", "tokens/sec/user"),
    ] {
        assert_eq!(m[tag]["unit"], unit, "{tag}");
    }
}

#[test]
fn jsonl_and_aggregate_agree_with_the_records() {
    let (dir, _, recs) = exported(None);
    assert!(!dir.path().join(aiperf::TIMESLICES_JSON).exists());
    let text = std::fs::read_to_string(dir.path().join(aiperf::PROFILE_EXPORT_JSONL)).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Every record but the context overflow, in record order.
    let expected: Vec<&RequestRecord> = recs.iter().filter(|r| !r.context_overflow).collect();
    assert_eq!(lines.len(), expected.len());
    for (l, r) in lines.iter().zip(&expected) {
        let md = &l["metadata"];
        assert_eq!(md["x_request_id"], r.request_id.as_str());
        assert_eq!(md["x_correlation_id"], r.correlation_id.as_str());
        assert_eq!(md["conversation_id"], r.trace_id.as_str());
        assert_eq!(md["turn_index"], r.turn);
        assert_eq!(md["session_num"], r.session_num);
        assert_eq!(md["request_start_ns"], ANCHOR + r.send_ns);
        assert_eq!(md["request_end_ns"], ANCHOR + r.end_ns);
        assert_eq!(md["benchmark_phase"], r.phase.as_str());
    }
    every_aiperf_named_metric_by_hand(&lines[1]);

    let agg: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(aiperf::PROFILE_EXPORT_JSON)).unwrap(),
    )
    .unwrap();
    assert_eq!(agg["request_count"]["avg"], 3.0);
    assert_eq!(agg["error_request_count"]["avg"], 2.0);
    assert_eq!(agg["context_overflow_count"]["avg"], 1.0);
    // Valid sends 1.0 .. 2.5 s, last valid end 2.5 + 0.16 + 0.001 s.
    let d = agg["benchmark_duration"]["avg"].as_f64().unwrap();
    assert!((d - 1.661).abs() < 1e-9, "{d}");
    assert_eq!(agg["total_isl"]["avg"], 17_600);
    // Unix nanoseconds stay exact integers (an f64 would round them).
    assert_eq!(agg["max_response_timestamp"]["avg"], ANCHOR + 2_661 * MS);
    assert_eq!(agg["time_to_first_token"]["count"], 3);
    assert_eq!(agg["time_to_first_token"]["min"], 120.0);
    assert_eq!(agg["time_to_first_token"]["max"], 300.0);
    // The late request's 5 ms: the scheduled TTFTs are 155, 300 and 120 ms.
    assert_eq!(agg["scheduled_time_to_first_token"]["max"], 300.0);
    let mean = agg["scheduled_time_to_first_token"]["avg"]
        .as_f64()
        .unwrap();
    assert!((mean - 575.0 / 3.0).abs() < 1e-9, "{mean}");
    let mean = agg["time_to_first_token"]["avg"].as_f64().unwrap();
    assert!((mean - 570.0 / 3.0).abs() < 1e-9, "{mean}");
    assert_eq!(agg["error_isl"]["count"], 2);
    assert_eq!(agg["start_time_utc"], "2026-05-28T20:26:41.000000Z");
    assert!(agg["time_zone"].is_string());
    assert_eq!(agg["metadata"]["scenario"]["name"], "inferencex-agentx-mvp");
    assert_eq!(agg["input_config"]["concurrency"], 2);
}

#[test]
fn a_bad_slice_duration_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = aiperf::write_all(
        &Root::open(dir.path()).unwrap(),
        &records(),
        &info(),
        Some(0.0),
    )
    .unwrap_err();
    assert!(matches!(err, ExportError::SliceDuration { .. }));
    assert!(err.to_string().contains("--slice-duration"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn no_records_still_write_a_readable_set() {
    let dir = tempfile::tempdir().unwrap();
    let written =
        aiperf::write_all(&Root::open(dir.path()).unwrap(), &[], &info(), Some(2.0)).unwrap();
    assert_eq!(written.len(), 5);
    let agg: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(aiperf::PROFILE_EXPORT_JSON)).unwrap(),
    )
    .unwrap();
    assert_eq!(agg["request_count"]["avg"], 0.0);
    assert!(agg.get("benchmark_duration").is_none());
    assert_eq!(
        std::fs::read_to_string(dir.path().join(aiperf::PROFILE_EXPORT_JSONL)).unwrap(),
        ""
    );
    let csv = std::fs::read_to_string(dir.path().join(aiperf::PROFILE_EXPORT_CSV)).unwrap();
    assert!(
        csv.starts_with("Metric,Value\nContext Overflow Count,0\n"),
        "{csv}"
    );
}
