//! The aiperf-compatible exports of a run, written from its request records: `profile_export.jsonl`
//! (one line per request), `profile_export_aiperf.json` / `.csv` (the profiling aggregate) and, with a
//! slice duration, `profile_export_aiperf_timeslices.json` / `.csv`.
//!
//! Invariants: every number comes from `metrics::stats`; this module only names, orders and formats.
//! Times in the files are Unix nanoseconds (run-clock offset plus the clock's Unix anchor) or UTC
//! ISO-8601 strings. Context-overflow records are left out of `profile_export.jsonl` (aiperf drops them
//! in agentic replay) but counted in `context_overflow_count`; warmup rows are written, marked
//! `benchmark_phase: "warmup"`, and excluded from the aggregate and the time slices. Each file is
//! replaced atomically, so a reader never sees half of one.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value as Json};

use agentx_metrics::goodput::Goodput;
use agentx_metrics::stats::{
    self, Aggregate, Class, MetricDef, Stats, Value, PERCENTILES, STAT_KEYS,
};
use agentx_record::{Phase, RecordError, RequestRecord};

/// The per-request records file, one JSON object per line.
pub const PROFILE_EXPORT_JSONL: &str = "profile_export.jsonl";
/// The aggregate statistics file (JSON).
pub const PROFILE_EXPORT_JSON: &str = "profile_export_aiperf.json";
/// The aggregate statistics file (CSV).
pub const PROFILE_EXPORT_CSV: &str = "profile_export_aiperf.csv";
/// The per-time-slice statistics file (JSON), written when a slice duration is given.
pub const TIMESLICES_JSON: &str = "profile_export_aiperf_timeslices.json";
/// The per-time-slice statistics file (CSV), written when a slice duration is given.
pub const TIMESLICES_CSV: &str = "profile_export_aiperf_timeslices.csv";

/// The `profile_export_aiperf.json` schema this writes (1.5: count/sum, run_info,
/// runtime_submission_invalid_reasons).
pub(crate) const SCHEMA_VERSION: &str = "1.5";

/// More slices than this is a mistaken `--slice-duration`, not a plot anyone can read.
pub(crate) const MAX_SLICES: u64 = 100_000;

/// What the exports need to know about the run beyond its records.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The run's unique id (`benchmark_id`).
    pub benchmark_id: String,
    /// Unix time (ns) of the run clock's anchor: record offsets plus this are Unix times.
    pub anchor_unix_ns: u64,
    /// The profiling phase's start, as a run-clock offset (ns).
    pub profiling_start_ns: u64,
    /// The profiling phase's end, as a run-clock offset (ns).
    pub profiling_end_ns: u64,
    /// The scenario's name.
    pub scenario_name: String,
    /// The scenario's version.
    pub scenario_version: String,
    /// sha256 (hex) of the scenario component.
    pub scenario_sha256: String,
    /// The run met the submission rules.
    pub submission_valid: bool,
    /// Why it did not; empty when valid.
    pub submission_invalid_reasons: Vec<String>,
    /// The run was cut short (interrupt, failed-request threshold).
    pub was_cancelled: bool,
    /// The resolved configuration, written as `input_config`.
    pub input_config: Json,
    /// The random seed the run used.
    pub seed: Option<u64>,
    /// The configured profiling duration (ns), for `metadata.metric_duration_coverage`.
    pub profiling_duration_ns: Option<u64>,
    /// The coverage the scenario requires (its `required_ratio`), and whether it counts the
    /// streamed-content timeline (then `streaming_content_ratio` is written beside the others).
    pub coverage_rule: CoverageRule,
    /// Per trace id, each turn's theoretical prefix-cache `(hit, total)` blocks (the stamps aiperf's
    /// loader puts on turns); empty when the corpus is not at hand.
    pub prefix_stamps: HashMap<String, Vec<(u32, u32)>>,
    /// `metadata.dataset`: the public corpus's provenance (`None` for local files).
    pub dataset: Option<Json>,
    /// How `profile_export.jsonl` names the phases (the reference the run follows).
    pub warmup_naming: WarmupNaming,
    /// `--goodput`: its figures join the aggregate metrics.
    pub goodput: Option<Goodput>,
    /// The cache truth, written as `agentx_cache` (its totals and its rows by turn index).
    pub cache: Option<agentx_metrics::cache_truth::CacheReport>,
    /// The GPUs over the window (`--gpu-telemetry`): aiperf's energy metrics
    /// (`nvidia_total_gpu_energy`, ...) and `telemetry_data`.
    pub energy: Option<crate::gpu_telemetry::GpuWindow>,
}

/// How `profile_export.jsonl` names the warmup phase: the one place that choice lives. In both
/// references the agentic warmup is synthesized outside the declared phases, so it has no
/// `phase_index` and no `profiling_index`, `phase_kind` is `warmup`, and the profiling phase (the
/// only declared one) has `phase_index` 0, `profiling_index` 0 and `phase_name` `profiling`
/// (aiperf 0.13.0.dev20261023 timing/config.py:177-203 and 617-676, config/flags/converter.py:531-533;
/// agentx-harness 1.0.12 timing/config.py:166-191 and 644-666). They differ in the warmup's
/// `phase_name`, which the scenario decides: `WarmupNaming::aiperf013` or
/// `WarmupNaming::harness1012` (or another name a component picks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmupNaming(pub Option<String>);

impl WarmupNaming {
    /// aiperf 0.13: `phase_name` `agentic.warmup` (`AGENTIC_WARMUP_PHASE_NAME`,
    /// timing/config.py:45, stamped at 654-663); agentx-v1 runs, and the default.
    pub(crate) fn aiperf013() -> WarmupNaming {
        WarmupNaming(Some("agentic.warmup".to_string()))
    }

    /// agentx-harness 1.0.12: no `phase_name` (null; the synthesized phase sets none,
    /// timing/config.py:644-648).
    #[cfg(test)]
    pub(crate) fn harness1012() -> WarmupNaming {
        WarmupNaming(None)
    }
}

impl Default for WarmupNaming {
    fn default() -> Self {
        WarmupNaming::aiperf013()
    }
}

/// A phase's naming fields in `profile_export.jsonl`.
struct PhaseNames<'a> {
    index: Option<u32>,
    profiling_index: Option<u32>,
    name: Option<&'a str>,
    kind: &'static str,
}

impl WarmupNaming {
    fn of(&self, phase: Phase) -> PhaseNames<'_> {
        match phase {
            Phase::Profiling => PhaseNames {
                index: Some(0),
                profiling_index: Some(0),
                name: Some("profiling"),
                kind: "profiling",
            },
            Phase::Warmup => PhaseNames {
                index: None,
                profiling_index: None,
                name: self.0.as_deref(),
                kind: "warmup",
            },
        }
    }
}

/// What the scenario asks of the profiling phase's coverage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoverageRule {
    /// The share of the profiling window (0-1) the timelines must cover.
    pub required_ratio: f64,
    /// Whether the streamed-content timeline counts (then `streaming_content_ratio` is written).
    pub content: bool,
}

impl Default for CoverageRule {
    /// aiperf 0.13's: 95 % of the TTFT or ITL timeline.
    fn default() -> Self {
        CoverageRule {
            required_ratio: COVERAGE_REQUIRED_RATIO,
            content: false,
        }
    }
}

/// Failures to write the exports, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// An export file could not be written.
    #[error("cannot write {path}: {source}; check that the artifact directory is writable and has space (--output-artifact-dir)")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An export document could not be serialised to JSON.
    #[error("cannot encode {path}: {source}")]
    Encode {
        /// The file being written.
        path: PathBuf,
        /// The serialisation error.
        #[source]
        source: serde_json::Error,
    },
    /// `--slice-duration` is zero, negative or not finite.
    #[error("--slice-duration {value}: must be a positive, finite number of seconds (e.g. 1.0)")]
    SliceDuration {
        /// The given slice duration, in seconds.
        value: f64,
    },
    /// `--slice-duration` would cut the profiling window into more slices than allowed.
    #[error("--slice-duration {value}: cuts the {window_s:.3} s profiling window into {slices} slices, more than {max}; use a longer slice")]
    TooManySlices {
        /// The given slice duration, in seconds.
        value: f64,
        /// The profiling window, in seconds.
        window_s: f64,
        /// How many slices the window would have.
        slices: u64,
        /// The most slices allowed.
        max: u64,
    },
}

/// A JSON object that keeps its keys in insertion order (the crate's `serde_json` sorts them), so
/// the files read like aiperf's: metadata first, metric blocks in a stable order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ordered(Vec<(String, Entry)>);

/// A value of an [`Ordered`] object: plain JSON or a nested ordered object.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    Json(Json),
    Object(Ordered),
    List(Vec<Ordered>),
}

impl Ordered {
    fn put(&mut self, key: &str, value: impl Into<Json>) {
        self.0.push((key.to_string(), Entry::Json(value.into())));
    }

    fn put_ordered(&mut self, key: &str, value: Ordered) {
        self.0.push((key.to_string(), Entry::Object(value)));
    }

    /// Converts to a plain `serde_json::Value` (keys sorted).
    #[cfg(test)]
    pub(crate) fn into_json(self) -> Json {
        Json::Object(
            self.0
                .into_iter()
                .map(|(k, v)| match v {
                    Entry::Json(j) => (k, j),
                    Entry::Object(o) => (k, o.into_json()),
                    Entry::List(l) => (
                        k,
                        Json::Array(l.into_iter().map(Ordered::into_json).collect()),
                    ),
                })
                .collect(),
        )
    }
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            match v {
                Entry::Json(j) => map.serialize_entry(k, j)?,
                Entry::Object(o) => map.serialize_entry(k, o)?,
                Entry::List(l) => map.serialize_entry(k, l)?,
            }
        }
        map.end()
    }
}

fn unix(info: &RunInfo, ns: u64) -> u64 {
    info.anchor_unix_ns.saturating_add(ns)
}

/// The error a failed or cancelled record carries; a cancellation without a recorded error gets
/// aiperf's code and type for one.
fn record_error(record: &RequestRecord) -> Option<RecordError> {
    match (&record.error, record.cancelled) {
        (Some(e), _) => Some(e.clone()),
        (None, true) => Some(RecordError {
            code: 499,
            kind: "RequestCancellationError".into(),
            message: "request was cancelled at the end of the run".into(),
        }),
        (None, false) => None,
    }
}

/// One `profile_export.jsonl` line (aiperf's `MetricRecordInfo`), or `None` for a context-overflow
/// record, which aiperf's agentic replay drops.
///
/// Every aiperf-named metric is on aiperf's clock: `time_to_first_token` and `request_latency` count
/// from `request_start_ns` (the request's start, before a connection is taken). The same two from
/// when the request was due (`credit_issued_ns`, send lag included) are agentx's own
/// `scheduled_time_to_first_token` and `scheduled_request_latency`.
pub(crate) fn record_line(record: &RequestRecord, info: &RunInfo) -> Option<Ordered> {
    if record.context_overflow {
        return None;
    }
    let mut metadata = Ordered::default();
    metadata.put("session_num", record.session_num);
    metadata.put("x_request_id", record.request_id.as_str());
    metadata.put("x_correlation_id", record.correlation_id.as_str());
    metadata.put("conversation_id", record.trace_id.as_str());
    metadata.put("turn_index", record.turn);
    let tree = record.tree.as_ref();
    metadata.put(
        "source_trace_id",
        tree.map_or(record.trace_id.as_str(), |t| t.source_trace_id.as_str()),
    );
    // A session-tree turn's source request (aiperf's Weka loader: the top-level index, plus the
    // index within a subagent's requests). Single-stream turns do not keep their position in the
    // dataset cache, and records written before the fields existed lack it: null, as aiperf writes
    // for loaders that do not provide them.
    metadata.put("source_outer_idx", tree.and_then(|t| t.source_outer_idx));
    metadata.put("source_inner_idx", tree.and_then(|t| t.source_inner_idx));
    metadata.put(
        "source_kind",
        match tree.map(|t| t.agent_depth) {
            Some(d) if d > 0 && record.trace_id.contains("::sa:") => "weka_subagent",
            Some(d) if d > 0 => "weka_flat",
            _ => "weka_main",
        },
    );
    metadata.put("credit_issued_ns", unix(info, record.intended_ns));
    metadata.put("request_start_ns", unix(info, record.send_ns));
    metadata.put(
        "request_ack_ns",
        record.first_byte_ns.map(|t| unix(info, t)),
    );
    metadata.put("request_end_ns", unix(info, record.end_ns));
    metadata.put("worker_id", format!("worker_{}", record.lane));
    metadata.put("record_processor_id", "record_processor_0");
    metadata.put("benchmark_phase", record.phase.as_str());
    let names = info.warmup_naming.of(record.phase);
    metadata.put("phase_index", names.index);
    metadata.put("profiling_index", names.profiling_index);
    metadata.put("phase_name", names.name);
    metadata.put("phase_kind", names.kind);
    metadata.put("was_cancelled", record.cancelled);
    metadata.put(
        "cancellation_time_ns",
        record.cancelled.then(|| unix(info, record.end_ns)),
    );
    metadata.put("context_overflow_skip", record.context_overflow);
    // Single-stream sessions are the roots of their own trees.
    match tree {
        Some(t) => {
            metadata.put("agent_depth", t.agent_depth);
            metadata.put("parent_correlation_id", t.parent_correlation_id.as_deref());
            metadata.put("root_correlation_id", t.root_correlation_id.as_str());
        }
        None => {
            metadata.put("agent_depth", 0);
            metadata.put("parent_correlation_id", Json::Null);
            metadata.put("root_correlation_id", record.correlation_id.as_str());
        }
    }

    let mut metrics = Ordered::default();
    for (m, v) in stats::record_values(record) {
        let mut block = Ordered::default();
        block.put("value", json!(v));
        block.put("unit", m.unit);
        metrics.put_ordered(m.tag, block);
    }

    let mut line = Ordered::default();
    line.put_ordered("metadata", metadata);
    line.put_ordered("metrics", metrics);
    line.put(
        "error",
        record_error(record).map_or(
            Json::Null,
            |e| json!({ "code": e.code, "type": e.kind, "message": e.message }),
        ),
    );
    Some(line)
}

/// `profile_export.jsonl`: one line per request in the order given, context overflows left out.
#[cfg(test)]
pub(crate) fn records_jsonl(
    records: &[RequestRecord],
    info: &RunInfo,
) -> Result<String, serde_json::Error> {
    let mut out = Vec::new();
    write_records_jsonl(&mut out, records, info).map_err(serde_json::Error::io)?;
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// [`records_jsonl`] written line by line to `out` (a long run's export runs to gigabytes).
pub(crate) fn write_records_jsonl(
    out: &mut dyn std::io::Write,
    records: &[RequestRecord],
    info: &RunInfo,
) -> std::io::Result<()> {
    for r in records {
        if let Some(line) = record_line(r, info) {
            serde_json::to_writer(&mut *out, &line)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// A record metric's block: unit and every statistic.
fn stats_block(metric: &MetricDef, stats: &Stats) -> Ordered {
    let mut block = Ordered::default();
    block.put("unit", metric.unit);
    block.put("avg", stats.avg);
    block.put("min", stats.min);
    block.put("max", stats.max);
    for (k, _) in PERCENTILES {
        block.put(k, stats.get(k).unwrap_or(0.0));
    }
    block.put("std", stats.std);
    block.put("count", stats.count);
    block.put("sum", stats.sum);
    block
}

/// An aggregate or derived metric's block: unit and the value as `avg`.
fn scalar_block(metric: &MetricDef, value: &Value) -> Ordered {
    let mut block = Ordered::default();
    block.put("unit", metric.unit);
    block.put("avg", json!(value));
    block
}

/// The run's aggregate and derived metrics, and the goodput figures when `--goodput` was given.
fn run_values(records: &[RequestRecord], info: &RunInfo) -> Vec<(MetricDef, Value)> {
    let mut values = Aggregate::of(records.iter()).run_values(info.anchor_unix_ns);
    if let Some(goodput) = &info.goodput {
        values.extend(goodput.of_run(records).values());
    }
    values
}

fn profiling(records: &[RequestRecord]) -> Vec<&RequestRecord> {
    records
        .iter()
        .filter(|r| stats::class(r) != Class::Warmup)
        .collect()
}

/// aiperf's `error_summary`: each distinct error of the profiling phase with its count, most
/// frequent first (ties in first-seen order).
fn error_summary(records: &[&RequestRecord]) -> Json {
    let mut seen: Vec<(RecordError, u64)> = Vec::new();
    let mut index_of: HashMap<(u16, String, String), usize> = HashMap::new();
    for r in records {
        if stats::class(r) != Class::Error {
            continue;
        }
        let Some(error) = record_error(r) else {
            continue;
        };
        let key = (error.code, error.kind.clone(), error.message.clone());
        match index_of.get(&key) {
            Some(&i) => seen[i].1 += 1,
            None => {
                index_of.insert(key, seen.len());
                seen.push((error, 1));
            }
        }
    }
    seen.sort_by_key(|error| std::cmp::Reverse(error.1));
    Json::Array(
        seen.into_iter()
            .map(|(error, n)| {
                json!({
                    "error_details": { "code": error.code, "type": error.kind, "message": error.message },
                    "count": n,
                })
            })
            .collect(),
    )
}

/// `profile_export_aiperf.json`: the profiling phase's aggregate.
pub(crate) fn aggregate_json(records: &[RequestRecord], info: &RunInfo) -> Ordered {
    let prof = profiling(records);
    let mut aggregate = Ordered::default();
    aggregate.put("schema_version", SCHEMA_VERSION);
    aggregate.put("benchmark_id", info.benchmark_id.as_str());
    let (start, end) = (
        unix(info, info.profiling_start_ns),
        unix(info, info.profiling_end_ns),
    );
    // aiperf writes naive local times; the zone and the UTC instants are written beside them.
    aggregate.put("start_time", iso_local(start));
    aggregate.put("end_time", iso_local(end));
    aggregate.put("time_zone", utc_offset(start));
    aggregate.put("start_time_utc", iso_utc(start));
    aggregate.put("end_time_utc", iso_utc(end));
    aggregate.put("was_cancelled", info.was_cancelled);
    for (m, s) in stats::distributions(prof.iter().copied()) {
        aggregate.put_ordered(m.tag, stats_block(&m, &s));
    }
    for (m, v) in run_values(records, info) {
        aggregate.put_ordered(m.tag, scalar_block(&m, &v));
    }
    for (m, v) in stats::e2e_normalized_interactivity(prof.iter().copied()) {
        aggregate.put_ordered(m.tag, scalar_block(&m, &v));
    }
    if let Some(block) = theoretical_prefix_cache_hit(&prof, info) {
        aggregate.put_ordered("theoretical_prefix_cache_hit", block);
    }
    if let Some(gpus) = &info.energy {
        for (tag, unit, value) in crate::gpu_telemetry::aggregate_metrics(&gpus.energy, gpus.vendor)
        {
            aggregate.put(&tag, json!({"unit": unit, "avg": value}));
        }
        aggregate.put("telemetry_data", gpus.telemetry_data.clone());
    }
    if let Some(cache) = &info.cache {
        // agentx's own key beside aiperf's: the achievable and measured hit, the misses by cause.
        aggregate.put(
            "agentx_cache",
            serde_json::to_value(cache).unwrap_or(Json::Null),
        );
    }
    aggregate.put("error_summary", error_summary(&prof));
    aggregate.put(
        "runtime_submission_invalid_reasons",
        info.submission_invalid_reasons.clone(),
    );
    let mut scenario = Ordered::default();
    scenario.put("name", info.scenario_name.as_str());
    scenario.put("version", info.scenario_version.as_str());
    scenario.put("component_sha256", info.scenario_sha256.as_str());
    let mut metadata = Ordered::default();
    metadata.put_ordered("scenario", scenario);
    metadata.put("submission_valid", info.submission_valid);
    metadata.put(
        "submission_invalid_reasons",
        info.submission_invalid_reasons.clone(),
    );
    if let Some(dataset) = &info.dataset {
        metadata.put("dataset", dataset.clone());
    }
    if let Some(dur) = info.profiling_duration_ns {
        if let Some(coverage) =
            stats::Coverage::of(prof.iter().copied(), info.profiling_start_ns, dur)
        {
            let mut entry = json!({
                "phase_name": "profiling",
                "expected_duration_seconds": dur as f64 / 1e9,
                "required_ratio": info.coverage_rule.required_ratio,
                "ttft_ratio": coverage.ttft_ratio,
                "inter_token_latency_ratio": coverage.inter_token_latency_ratio,
            });
            if info.coverage_rule.content {
                entry["streaming_content_ratio"] = json!(coverage.streaming_content_ratio);
            }
            metadata.put("metric_duration_coverage", json!([entry]));
        }
    }
    aggregate.put_ordered("metadata", metadata);
    let warm: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| stats::class(r) == Class::Warmup && !r.context_overflow)
        .collect();
    let mut warmup = Ordered::default();
    for (m, s) in stats::distributions_of_phase(warm.iter().copied(), Phase::Warmup) {
        warmup.put_ordered(m.tag, stats_block(&m, &s));
    }
    aggregate.put_ordered("warmup_metrics", warmup);
    aggregate.put(
        "run_info",
        json!({
            "benchmark_id": info.benchmark_id,
            "sweep_id": null,
            "random_seed": info.seed,
            "trial": 0,
            "run_label": "run_0001",
            "variation_label": "base",
            "variation_index": 0,
            "variation_values": {},
            "cli_command": null,
        }),
    );
    aggregate.put("input_config", info.input_config.clone());
    aggregate
}

/// The share of the profiling phase that latency signals must cover (aiperf's 0.95; reported, not
/// enforced, for 0.1.0 scenarios).
pub const COVERAGE_REQUIRED_RATIO: f64 = 0.95;

/// aiperf's `theoretical_prefix_cache_hit`: over valid profiling records, the hit blocks (clamped
/// to the total) and total blocks of each record's turn; `None` when no record has a stamp.
fn theoretical_prefix_cache_hit(prof: &[&RequestRecord], info: &RunInfo) -> Option<Ordered> {
    let (mut hit, mut total) = (0u64, 0u64);
    for r in prof {
        if stats::class(r) != Class::Valid {
            continue;
        }
        let Some(&(hit_tokens, turn_tokens)) = info
            .prefix_stamps
            .get(&r.trace_id)
            .and_then(|v| v.get(r.turn as usize))
        else {
            continue;
        };
        if turn_tokens == 0 {
            continue;
        }
        hit += u64::from(hit_tokens.min(turn_tokens));
        total += u64::from(turn_tokens);
    }
    (total > 0).then(|| {
        let mut block = Ordered::default();
        block.put("unit", "%");
        block.put("avg", 100.0 * hit as f64 / total as f64);
        block.put("sum", hit);
        block.put("count", total);
        block
    })
}

/// A CSV field, quoted when it has to be.
fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// aiperf's CSV name of a metric: header with the unit in parentheses (none for counts).
fn csv_name(metric: &MetricDef) -> String {
    if matches!(metric.unit, "count" | "requests") {
        metric.header.to_string()
    } else {
        format!("{} ({})", metric.header, metric.unit)
    }
}

/// Counts, token totals and timestamps are integers; everything else has two decimals, as aiperf
/// formats its CSV.
fn csv_scalar(metric: &MetricDef, value: &Value) -> String {
    match value {
        Value::Int(i) => i.to_string(),
        Value::Float(f) if metric.unit == "requests" && f.fract() == 0.0 => format!("{f:.0}"),
        Value::Float(f) => format!("{f:.2}"),
        Value::List(_) => String::new(),
    }
}

/// `profile_export_aiperf.csv`: aiperf's two sections, record metrics with every statistic (sorted
/// by tag), a blank line, then the single-valued metrics (sorted by tag).
pub(crate) fn aggregate_csv(records: &[RequestRecord], info: &RunInfo) -> String {
    let prof = profiling(records);
    let mut dists = stats::distributions(prof.iter().copied());
    dists.sort_by_key(|(m, _)| m.tag);
    let mut scalars = run_values(records, info);
    scalars.sort_by_key(|(m, _)| m.tag);
    let mut out = String::new();
    if !dists.is_empty() {
        out.push_str("Metric");
        for k in STAT_KEYS {
            out.push(',');
            out.push_str(k);
        }
        out.push('\n');
        for (m, s) in &dists {
            out.push_str(&csv_field(&csv_name(m)));
            for k in STAT_KEYS {
                out.push_str(&format!(",{:.2}", s.get(k).unwrap_or(0.0)));
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out.push_str("Metric,Value\n");
    for (m, v) in &scalars {
        out.push_str(&format!(
            "{},{}\n",
            csv_field(&csv_name(m)),
            csv_scalar(m, v)
        ));
    }
    out
}

/// One time slice of the profiling window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slice {
    pub(crate) index: usize,
    /// Run-clock offsets (ns); `end_ns` is the nominal end, past the window for a partial slice.
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    /// False for a final slice cut short by the end of the window.
    pub(crate) is_complete: bool,
    pub(crate) distributions: Vec<(MetricDef, Stats)>,
    pub(crate) aggregate: Aggregate,
}

/// Cuts the profiling window into slices of `slice_s` seconds and computes each one's statistics.
/// A request belongs to the slice its send falls in (requests sent outside the window go to the
/// nearest slice); throughputs divide by the part of the slice inside the window.
pub(crate) fn timeslices(
    records: &[RequestRecord],
    info: &RunInfo,
    slice_s: f64,
) -> Result<Vec<Slice>, ExportError> {
    let slice_ns = slice_s * 1e9;
    if !slice_ns.is_finite() || slice_ns < 1.0 {
        return Err(ExportError::SliceDuration { value: slice_s });
    }
    let slice_ns = slice_ns.round() as u64;
    let (start, end) = (
        info.profiling_start_ns,
        info.profiling_end_ns.max(info.profiling_start_ns),
    );
    let slice_count = (end - start).div_ceil(slice_ns).max(1);
    if slice_count > MAX_SLICES {
        return Err(ExportError::TooManySlices {
            value: slice_s,
            window_s: (end - start) as f64 / 1e9,
            slices: slice_count,
            max: MAX_SLICES,
        });
    }
    let slice_count = slice_count as usize;
    let mut members: Vec<Vec<&RequestRecord>> = vec![Vec::new(); slice_count];
    for r in profiling(records) {
        let slice = (r.send_ns.saturating_sub(start) / slice_ns) as usize;
        members[slice.min(slice_count - 1)].push(r);
    }
    Ok(members
        .into_iter()
        .enumerate()
        .map(|(slice, rs)| {
            let slice_start = start + slice as u64 * slice_ns;
            let slice_end = slice_start + slice_ns;
            let inside = slice_end.min(end).saturating_sub(slice_start);
            let mut aggregate = Aggregate::in_window(rs.iter().copied(), inside);
            // A slice's span is its window, not a benchmark duration: leave that out of its block.
            aggregate.min_request_ns = None;
            aggregate.max_response_ns = None;
            aggregate.duration_s = None;
            Slice {
                index: slice,
                start_ns: slice_start,
                end_ns: slice_end,
                is_complete: slice_end <= end,
                distributions: stats::distributions(rs.iter().copied()),
                aggregate,
            }
        })
        .collect())
}

/// `profile_export_aiperf_timeslices.json`.
pub(crate) fn timeslices_json(slices: &[Slice], info: &RunInfo) -> Ordered {
    let list = slices
        .iter()
        .map(|s| {
            let mut slice_json = Ordered::default();
            slice_json.put("timeslice_index", s.index);
            slice_json.put("start_ns", unix(info, s.start_ns));
            slice_json.put("end_ns", unix(info, s.end_ns));
            slice_json.put("is_complete", s.is_complete);
            for (m, st) in &s.distributions {
                slice_json.put_ordered(m.tag, stats_block(m, st));
            }
            for (m, v) in s.aggregate.values(info.anchor_unix_ns) {
                slice_json.put_ordered(m.tag, scalar_block(&m, &v));
            }
            slice_json
        })
        .collect::<Vec<_>>();
    let mut slice_json = Ordered::default();
    slice_json.0.push(("timeslices".into(), Entry::List(list)));
    slice_json.put("input_config", info.input_config.clone());
    slice_json
}

/// `profile_export_aiperf_timeslices.csv`: tidy `Timeslice,Metric,Unit,Stat,Value` rows, metrics
/// sorted by tag within a slice, single-valued metrics as stat `avg`.
pub(crate) fn timeslices_csv(slices: &[Slice], info: &RunInfo) -> String {
    let mut out = String::from("Timeslice,Metric,Unit,Stat,Value\n");
    for s in slices {
        enum Row<'a> {
            Dist(&'a Stats),
            Scalar(Value),
        }
        let mut rows: Vec<(MetricDef, Row)> = s
            .distributions
            .iter()
            .map(|(m, st)| (*m, Row::Dist(st)))
            .collect();
        rows.extend(
            s.aggregate
                .values(info.anchor_unix_ns)
                .into_iter()
                .map(|(m, v)| (m, Row::Scalar(v))),
        );
        rows.sort_by_key(|(m, _)| m.tag);
        for (m, row) in rows {
            let lead = format!("{},{},{}", s.index, csv_field(m.header), csv_field(m.unit));
            match row {
                Row::Dist(st) => {
                    for k in STAT_KEYS {
                        out.push_str(&format!("{lead},{k},{:.2}\n", st.get(k).unwrap_or(0.0)));
                    }
                }
                Row::Scalar(v) => out.push_str(&format!("{lead},avg,{}\n", csv_scalar(&m, &v))),
            }
        }
    }
    out
}

/// Writes every aiperf export of the run into `dir` (the timeslice files only with a slice
/// duration, in seconds) and returns the paths written, in order.
pub fn write_all(
    dir: &agentx_record::fsio::Root,
    records: &[RequestRecord],
    info: &RunInfo,
    slice_duration: Option<f64>,
) -> Result<Vec<PathBuf>, ExportError> {
    // Validate the slice duration before writing anything, so a bad flag leaves no partial set.
    let slices = slice_duration
        .map(|s| timeslices(records, info, s))
        .transpose()?;
    let jsonl = dir.join(PROFILE_EXPORT_JSONL);
    dir.write_atomic_with(PROFILE_EXPORT_JSONL, |w| {
        write_records_jsonl(w, records, info)
    })
    .map_err(|source| ExportError::Write {
        path: jsonl.clone(),
        source,
    })?;
    let mut written = vec![jsonl];
    let mut put = |name: &str, data: Result<String, serde_json::Error>| {
        let path = dir.join(name);
        let data = data.map_err(|source| ExportError::Encode {
            path: path.clone(),
            source,
        })?;
        dir.write_atomic(name, data.as_bytes())
            .map_err(|source| ExportError::Write {
                path: path.clone(),
                source,
            })?;
        written.push(path);
        Ok::<(), ExportError>(())
    };
    put(
        PROFILE_EXPORT_JSON,
        serde_json::to_string_pretty(&aggregate_json(records, info)),
    )?;
    put(PROFILE_EXPORT_CSV, Ok(aggregate_csv(records, info)))?;
    if let Some(slices) = &slices {
        put(
            TIMESLICES_JSON,
            serde_json::to_string_pretty(&timeslices_json(slices, info)),
        )?;
        put(TIMESLICES_CSV, Ok(timeslices_csv(slices, info)))?;
    }
    Ok(written)
}

/// Unix nanoseconds as a naive local ISO-8601 time with microseconds, as aiperf writes
/// `start_time` (`datetime.fromtimestamp(...)`), e.g. `2026-05-17T14:00:00.000000`.
pub(crate) fn iso_local(unix_ns: u64) -> String {
    chrono::DateTime::from_timestamp_nanos(unix_ns as i64)
        .with_timezone(&chrono::Local)
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

/// The local time zone's UTC offset at `unix_ns`, e.g. `+02:00`.
pub(crate) fn utc_offset(unix_ns: u64) -> String {
    chrono::DateTime::from_timestamp_nanos(unix_ns as i64)
        .with_timezone(&chrono::Local)
        .format("%:z")
        .to_string()
}

/// Unix nanoseconds as UTC ISO-8601 with microseconds, e.g. `2026-05-17T12:00:00.000000Z`.
pub(crate) fn iso_utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let micros = (unix_ns % 1_000_000_000) / 1_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), by 400-year eras.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let march_month = (5 * doy + 2) / 153;
    let day = (doy - (153 * march_month + 2) / 5 + 1) as u32;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The aiperf `metadata.dataset` block of a named corpus.
pub fn alias_dataset_json(
    alias: &agentx_dataset::alias::Alias,
    entries: Option<usize>,
) -> serde_json::Value {
    let mut dataset = json!({
        "source_type": "public_dataset",
        "loader": alias.name,
        "hf_dataset_name": alias.repo,
        "hf_split": "train",
    });
    if let Some(entries_count) = entries {
        dataset["num_dataset_entries"] = json!(entries_count);
    }
    dataset
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::{failed, rec};
    use agentx_record::Phase;

    fn info() -> RunInfo {
        RunInfo {
            benchmark_id: "bench-1".into(),
            anchor_unix_ns: 1_700_000_000_000_000_000,
            profiling_start_ns: 1_000_000_000,
            profiling_end_ns: 3_500_000_000,
            scenario_name: "inferencex-agentx-mvp".into(),
            scenario_version: "0.1.0".into(),
            scenario_sha256: "ab".repeat(32),
            submission_valid: false,
            submission_invalid_reasons: vec!["context_overflow_rate_exceeded".into()],
            was_cancelled: false,
            input_config: json!({"concurrency": 2}),
            seed: Some(42),
            profiling_duration_ns: Some(2_000_000_000),
            coverage_rule: CoverageRule::default(),
            prefix_stamps: HashMap::from([("trace-a".to_string(), vec![(3, 4), (9, 9)])]),
            dataset: None,
            warmup_naming: WarmupNaming::aiperf013(),
            goodput: None,
            cache: None,
            energy: None,
        }
    }

    fn records() -> Vec<RequestRecord> {
        let mut warm = rec(0, &[5, 10], 10, 2);
        warm.phase = Phase::Warmup;
        let mut over = failed(1200, 900);
        over.context_overflow = true;
        over.error.as_mut().unwrap().kind = "context_overflow".into();
        let mut cancelled = rec(3000, &[100], 20, 1);
        cancelled.cancelled = true;
        vec![
            warm,
            rec(1000, &[100, 200], 100, 20),
            over,
            rec(1100, &[300, 1899], 300, 30),
            failed(2000, 7),
            failed(2500, 8),
            cancelled,
        ]
    }

    #[test]
    fn iso_utc_formats_known_instants() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            iso_utc(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456Z"
        );
        // A leap day.
        assert_eq!(
            iso_utc(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000Z"
        );
    }

    /// aiperf copies each turn's loader indices into the record metadata (agentx-harness 1.0.12,
    /// aiperf/workers/worker.py:1465-1485 `source_turn = turns[-1]`;
    /// records/record_processor_service.py:254-255): a root or flat turn has its top-level
    /// request's index and a null inner index, a subagent turn its marker's index and its index
    /// among the subagent's requests (dataset/loader/weka_trace.py:1683, 1985-1986, 2080). A loader
    /// that gives none (and a tree record written before the fields existed) exports nulls.
    #[test]
    fn jsonl_source_indices_come_from_tree_records_and_stay_null_otherwise() {
        let info = info();
        let line = |r: &RequestRecord| record_line(r, &info).unwrap().into_json();
        let single = rec(1000, &[100, 200], 100, 20);
        let md = &line(&single)["metadata"];
        assert_eq!(md["source_outer_idx"], Json::Null);
        assert_eq!(md["source_inner_idx"], Json::Null);
        let mut v = serde_json::to_value(&single).unwrap();
        v["tree"] = json!({"agent_depth": 1, "root_correlation_id": "root",
            "parent_correlation_id": "root", "source_trace_id": "trace-a",
            "prefix_hit_blocks": 1, "prefix_total_blocks": 2});
        let old: RequestRecord = serde_json::from_value(v.clone()).unwrap();
        let md = &line(&old)["metadata"];
        assert_eq!(md["source_outer_idx"], Json::Null);
        assert_eq!(md["source_inner_idx"], Json::Null);
        v["tree"]["source_outer_idx"] = json!(4);
        v["tree"]["source_inner_idx"] = json!(2);
        let sub: RequestRecord = serde_json::from_value(v).unwrap();
        let md = &line(&sub)["metadata"];
        assert_eq!(md["source_outer_idx"], 4);
        assert_eq!(md["source_inner_idx"], 2);
        let mut main = sub.clone();
        let t = main.tree.as_mut().unwrap();
        (t.agent_depth, t.source_inner_idx) = (0, None);
        let md = &line(&main)["metadata"];
        assert_eq!(md["source_outer_idx"], 4);
        assert_eq!(md["source_inner_idx"], Json::Null);
        // A record round-trips with the fields, and without them when they are unknown.
        let text = serde_json::to_string(&sub).unwrap();
        assert!(text.contains("\"source_inner_idx\":2"));
        assert!(!serde_json::to_string(&old)
            .unwrap()
            .contains("source_outer_idx"));
    }

    #[test]
    fn jsonl_drops_overflow_keeps_warmup_and_marks_errors() {
        let info = info();
        let text = records_jsonl(&records(), &info).unwrap();
        let lines: Vec<Json> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 6, "7 records less the context overflow");
        assert_eq!(lines[0]["metadata"]["benchmark_phase"], "warmup");
        let ok = &lines[1];
        assert_eq!(ok["error"], Json::Null);
        assert_eq!(
            ok["metadata"]["request_start_ns"],
            1_700_000_001_000_000_000u64
        );
        assert_eq!(ok["metadata"]["conversation_id"], "trace-a");
        assert_eq!(ok["metrics"]["time_to_first_token"]["value"], 100.0);
        assert_eq!(ok["metrics"]["time_to_first_token"]["unit"], "ms");
        assert_eq!(ok["metrics"]["input_sequence_length"]["value"], 100);
        assert_eq!(
            ok["metrics"]["inter_chunk_latency"]["value"],
            json!([100.0])
        );
        let bad = &lines[3];
        assert_eq!(
            bad["metrics"],
            json!({"error_isl": {"value": 7, "unit": "tokens"}})
        );
        assert_eq!(
            bad["error"],
            json!({"code": 500, "type": "http_error", "message": "internal error"})
        );
        let c = &lines[5];
        assert_eq!(c["metadata"]["was_cancelled"], true);
        assert_eq!(
            c["metadata"]["cancellation_time_ns"],
            c["metadata"]["request_end_ns"]
        );
        assert_eq!(c["error"]["code"], 499);
        // Keys come out in aiperf's order, not sorted.
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("{\"metadata\":{\"session_num\""));
    }

    #[test]
    fn goodput_joins_the_aggregate_only_when_asked() {
        let j = aggregate_json(&records(), &info()).into_json();
        assert!(j.get("goodput").is_none() && j.get("good_request_count").is_none());
        let info = RunInfo {
            goodput: Some(agentx_metrics::goodput::Goodput::parse("ttft:150").unwrap()),
            ..info()
        };
        let j = aggregate_json(&records(), &info).into_json();
        // Of the two successes (TTFT 100 and 300 ms) one is good; three more failed or were
        // cancelled; the benchmark duration is 2 s.
        assert_eq!(
            j["good_request_count"],
            json!({"unit": "requests", "avg": 1.0})
        );
        assert_eq!(j["goodput"], json!({"unit": "requests/sec", "avg": 0.5}));
        assert_eq!(
            j["good_request_fraction"],
            json!({"unit": "ratio", "avg": 0.2})
        );
        let csv = aggregate_csv(&records(), &info);
        assert!(csv.contains("Goodput (requests/sec),0.50"), "{csv}");
        assert!(csv.contains("\nGood Request Count,1\n"), "{csv}");
    }

    #[test]
    fn aggregate_counts_profiling_only() {
        let info = info();
        let j = aggregate_json(&records(), &info).into_json();
        assert_eq!(j["request_count"], json!({"unit": "requests", "avg": 2.0}));
        // Two failures and one cancellation; the overflow is counted apart.
        assert_eq!(j["error_request_count"]["avg"], 3.0);
        assert_eq!(j["context_overflow_count"]["avg"], 1.0);
        assert_eq!(j["benchmark_duration"], json!({"unit": "sec", "avg": 2.0}));
        assert_eq!(j["request_throughput"]["avg"], 1.0);
        assert_eq!(j["output_token_throughput"]["avg"], 25.0);
        // Warmup's ISL 10 is not in the distribution.
        assert_eq!(j["input_sequence_length"]["min"], 100.0);
        assert_eq!(j["input_sequence_length"]["count"], 2);
        assert_eq!(j["error_isl"]["count"], 3);
        assert_eq!(j["start_time_utc"], "2023-11-14T22:13:21.000000Z");
        // aiperf's naive local time, with the zone written beside it.
        assert_eq!(j["start_time"], iso_local(1_700_000_001_000_000_000));
        assert!(!j["start_time"].as_str().unwrap().ends_with('Z'));
        assert_eq!(j["time_zone"], utc_offset(1_700_000_001_000_000_000));
        assert_eq!(j["metadata"]["submission_valid"], false);
        assert_eq!(
            j["metadata"]["scenario"]["component_sha256"],
            "ab".repeat(32)
        );
        let es = j["error_summary"].as_array().unwrap();
        assert_eq!(es[0]["count"], 2);
        assert_eq!(es[0]["error_details"]["code"], 500);
        assert_eq!(es[1]["error_details"]["code"], 499);
        assert_eq!(j["run_info"]["random_seed"], 42);
    }

    #[test]
    fn aggregate_has_the_schema_1_5_additions() {
        let j = aggregate_json(&records(), &info()).into_json();
        let close = |v: &Json, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;
        // Latency over OSL, seconds per token: 0.200/20 = 0.01 and 1.899/30 = 0.0633. Linear
        // percentiles: p75 = 0.01 + 0.75·0.0533 = 0.049975, p90 = 0.01 + 0.9·0.0533 = 0.05797.
        let p75 = &j["e2e_normalized_interactivity_p75"];
        assert_eq!(p75["unit"], "tokens/sec/user");
        assert!(close(&p75["avg"], 1.0 / 0.049975), "{p75}");
        assert!(close(
            &j["e2e_normalized_interactivity_p90"]["avg"],
            1.0 / 0.05797
        ));
        // Both valid records replay trace-a's turn 0, stamped 3 hits of 4 blocks.
        assert_eq!(
            j["theoretical_prefix_cache_hit"],
            json!({"unit": "%", "avg": 75.0, "sum": 6, "count": 8})
        );
        // The overflow is the skip path's only count.
        assert_eq!(j["skipped_context_overflow_count"]["avg"], 1.0);
        // Profiling starts at 1.0 s and is configured for 2 s: the last first token comes at
        // 1.1 + 0.3 = 1.4 s (0.2 of it), the last end with an ITL at 1.1 + 1.899 + 0.001 = 3.0 s.
        let cov = &j["metadata"]["metric_duration_coverage"][0];
        assert_eq!(cov["phase_name"], "profiling");
        assert_eq!(cov["required_ratio"], 0.95);
        assert!(close(&cov["ttft_ratio"], 0.2), "{cov}");
        assert!(close(&cov["inter_token_latency_ratio"], 1.0), "{cov}");
        // The warmup's one record (ISL 10) is the warmup metrics' only sample.
        assert_eq!(j["warmup_metrics"]["input_sequence_length"]["avg"], 10.0);
        assert_eq!(j["warmup_metrics"]["input_sequence_length"]["count"], 1);
        assert!(j["runtime_submission_invalid_reasons"].is_array());
        // A local corpus has no public-dataset provenance.
        assert!(j["metadata"].get("dataset").is_none());
    }

    #[test]
    fn records_carry_tree_fields_and_full_response_metrics() {
        let text = records_jsonl(&records(), &info()).unwrap();
        let ok: Json = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        let md = &ok["metadata"];
        assert_eq!(md["agent_depth"], 0);
        assert_eq!(md["parent_correlation_id"], Json::Null);
        assert_eq!(md["root_correlation_id"], md["x_correlation_id"]);
        assert_eq!(md["source_trace_id"], "trace-a");
        assert_eq!(md["credit_issued_ns"], md["request_start_ns"]);
        assert_eq!(md["phase_kind"], "profiling");
        assert_eq!(md["profiling_index"], 0);
        assert_eq!(md["context_overflow_skip"], false);
        // First token at 100 ms, last chunk at 200 ms, end at 201 ms; OSL 20.
        let m = &ok["metrics"];
        let v = |k: &str| m[k]["value"].as_f64().unwrap();
        assert!((v("full_decode_duration") - 101.0).abs() < 1e-9);
        assert!((v("inter_token_latency") - 100.0 / 19.0).abs() < 1e-9);
        assert!((v("full_response_inter_token_latency") - 101.0 / 19.0).abs() < 1e-9);
        assert!(
            (v("full_response_output_token_throughput_per_user") - 19_000.0 / 101.0).abs() < 1e-9
        );
        assert_eq!(md["phase_index"], 0);
        assert_eq!(md["phase_name"], "profiling");
        let warm: Json = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let wm = &warm["metadata"];
        assert_eq!(wm["benchmark_phase"], "warmup");
        assert_eq!(wm["phase_index"], Json::Null);
        assert_eq!(wm["profiling_index"], Json::Null);
        assert_eq!(wm["phase_name"], "agentic.warmup");
        assert_eq!(wm["phase_kind"], "warmup");
    }

    /// The warmup's naming follows the reference the run passes down: aiperf 0.13 names the
    /// synthesized phase `agentic.warmup` (timing/config.py:45, 654-663), agentx-harness 1.0.12
    /// gives it no name (timing/config.py:644-648); neither indexes it, and the profiling phase is
    /// index 0 in both (aiperf 0.13 timing/config.py:182-203).
    #[test]
    fn warmup_rows_are_named_as_the_reference_the_run_follows() {
        let names = |naming: WarmupNaming| {
            let info = RunInfo {
                warmup_naming: naming,
                ..info()
            };
            let text = records_jsonl(&records(), &info).unwrap();
            text.lines()
                .map(|l| {
                    let md = serde_json::from_str::<Json>(l).unwrap()["metadata"].clone();
                    (
                        md["benchmark_phase"].as_str().unwrap().to_owned(),
                        md["phase_name"].clone(),
                        md["phase_index"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let n = names(WarmupNaming::aiperf013());
        let h = names(WarmupNaming::harness1012());
        assert_eq!(n[0], ("warmup".into(), json!("agentic.warmup"), Json::Null));
        assert_eq!(h[0], ("warmup".into(), Json::Null, Json::Null));
        for rows in [&n, &h] {
            assert!(rows[1..]
                .iter()
                .all(|r| r == &("profiling".into(), json!("profiling"), json!(0))));
        }
    }

    #[test]
    fn csv_has_aiperf_sections() {
        let info = info();
        let csv = aggregate_csv(&records(), &info);
        let mut parts = csv.split("\n\n");
        let req = parts.next().unwrap();
        let sys = parts.next().unwrap();
        let header = req.lines().next().unwrap();
        assert_eq!(
            header,
            "Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std"
        );
        for l in req.lines() {
            assert_eq!(l.split(',').count(), 15, "{l}");
        }
        assert!(req.contains("\nTime to First Token (ms),"));
        assert!(req.contains("\nInput Sequence Length (tokens),200.00,100.00,300.00,400.00,"));
        let mut sys_lines = sys.lines();
        assert_eq!(sys_lines.next(), Some("Metric,Value"));
        let rows: Vec<&str> = sys_lines.collect();
        assert!(rows.contains(&"Request Count,2"));
        assert!(rows.contains(&"Context Overflow Count,1"));
        assert!(rows.contains(&"Benchmark Duration (sec),2.00"));
        assert!(rows.contains(&"Request Throughput (requests/sec),1.00"));
        assert!(rows.iter().all(|r| r.split(',').count() == 2));
    }

    #[test]
    fn timeslices_cut_the_window() {
        let info = info(); // window 1.0 s .. 3.5 s
        let s = timeslices(&records(), &info, 1.0).unwrap();
        assert_eq!(s.len(), 3);
        assert!(s[0].is_complete && s[1].is_complete && !s[2].is_complete);
        // Slice 0: the two successes (sent at 1.0 and 1.1 s) and the overflow (1.2 s).
        assert_eq!(s[0].aggregate.request_count, 2);
        assert_eq!(s[0].aggregate.context_overflow_count, 1);
        assert_eq!(s[0].aggregate.request_throughput, Some(2.0));
        // Slice 1: failures at 2.0 and 2.5 s; slice 2: the cancellation at 3.0 s, 0.5 s inside.
        assert_eq!(s[1].aggregate.error_request_count, 2);
        assert_eq!(s[2].aggregate.error_request_count, 1);
        assert_eq!(s[2].aggregate.request_throughput, None);
        let j = timeslices_json(&s, &info).into_json();
        assert_eq!(j["timeslices"][0]["timeslice_index"], 0);
        assert_eq!(j["timeslices"][2]["is_complete"], false);
        assert_eq!(j["timeslices"][0]["time_to_first_token"]["unit"], "ms");
        assert!(j["timeslices"][0].get("benchmark_duration").is_none());
        let csv = timeslices_csv(&s, &info);
        assert!(csv.starts_with("Timeslice,Metric,Unit,Stat,Value\n"));
        assert!(csv.contains("\n0,Request Count,requests,avg,2\n"));
        assert!(csv.contains("\n0,Time to First Token,ms,p50,200.00\n"));
        assert!(csv.lines().all(|l| l.split(',').count() == 5));

        assert!(matches!(
            timeslices(&records(), &info, 0.0),
            Err(ExportError::SliceDuration { .. })
        ));
        assert!(matches!(
            timeslices(&records(), &info, f64::NAN),
            Err(ExportError::SliceDuration { .. })
        ));
        assert!(matches!(
            timeslices(&records(), &info, 1e-6),
            Err(ExportError::TooManySlices { .. })
        ));
    }

    #[test]
    fn write_all_names_the_file_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let root = agentx_record::fsio::Root::open(dir.path()).unwrap();
        // A directory where the file should be.
        let blocker = dir.path().join(PROFILE_EXPORT_JSONL).join("x");
        std::fs::create_dir_all(&blocker).unwrap();
        let err = write_all(&root, &records(), &info(), None).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("profile_export.jsonl"), "{msg}");
        std::fs::remove_dir_all(dir.path().join(PROFILE_EXPORT_JSONL)).unwrap();
        let ok = write_all(&root, &records(), &info(), Some(1.0)).unwrap();
        assert_eq!(ok.len(), 5);
        assert!(ok.iter().all(|p| p.is_file()));
        // A bad slice duration writes nothing.
        let d2 = tempfile::tempdir().unwrap();
        let r2 = agentx_record::fsio::Root::open(d2.path()).unwrap();
        assert!(write_all(&r2, &records(), &info(), Some(-1.0)).is_err());
        assert_eq!(std::fs::read_dir(d2.path()).unwrap().count(), 0);
    }
}
