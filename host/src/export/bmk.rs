//! The InferenceX `bmk_agentic` JSON from a run's artifact directory, in two layouts: the seed-era
//! flat keys (domain §5, [`compute`]) and InferenceX's current nested result (inferencex-v1.md §3,
//! [`compute_nested`] in `nested`). Which engine wrote the server metrics, and the figures read from
//! its metric names, is [`backends`]'s.
//!
//! Both computations are pure functions over parsed inputs (aiperf records, aiperf server metrics,
//! aiperf's aggregate `profile_export_aiperf.json`, our `run_summary.json`, the identity of the
//! benchmarked system and, when it can be opened, the dataset); the loaders around them
//! ([`load_artifacts`], [`open_traces`], [`report_dir`], [`render_dir`]) only read files.
//!
//! Invariants: every key of domain §5.2 is present (null when unavailable, with a line in `notes` saying
//! why); warmup records count nowhere; percentiles interpolate linearly (`k = (n-1)p/100`) and `std` is the
//! population deviation, as InferenceX computes them. Where InferenceX's pipeline is wrong this report
//! differs on purpose: failed requests count in `num_requests_total`; server counters are summed across
//! series while gauges are averaged; the external (offload) cache hit rate comes from metrics servers
//! actually export; interactivity is reported under both conventions with distinct keys.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::dataset::{self, Dataset, OpenOptions};
use crate::metrics::dist::{Deviation, Sorted};
use crate::metrics::percentile;
use crate::metrics::Outcome;

pub mod backends;
mod nested;

pub use nested::compute_nested;

/// The statistics every distribution is reported with (`{stat}_{metric}` keys).
pub const STATS: [&str; 5] = ["mean", "p75", "p90", "p95", "std"];

/// The keys InferenceX's `utils/summarize.py` reads from an agentic result (domain §5.5); a report
/// without any of them breaks the consumer.
pub const SUMMARIZE_KEYS: [&str; 24] = [
    "infmax_model_prefix",
    "hw",
    "framework",
    "precision",
    "conc",
    "scenario_type",
    "is_multinode",
    "mean_ttft",
    "p75_ttft",
    "p90_ttft",
    "p95_ttft",
    "mean_tpot",
    "p75_tpot",
    "mean_intvty",
    "p75_intvty",
    "p90_intvty",
    "p95_intvty",
    "mean_e2el",
    "p75_e2el",
    "p90_e2el",
    "p95_e2el",
    "tput_per_gpu",
    "output_tput_per_gpu",
    "input_tput_per_gpu",
];

/// The file names read from an artifact directory.
pub const PROFILE_EXPORT: &str = "profile_export.jsonl";
pub const SERVER_METRICS: &str = "server_metrics_export.json";
pub use super::run_summary::{RunSummary, RUN_SUMMARY};
pub const PROFILE_AIPERF: &str = "profile_export_aiperf.json";

/// The report layouts `agentx-host report --layout` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Layout {
    /// The seed-era `bmk_agentic` keys (`mean_ttft`, `p90_e2el`, ...) at the top level (domain §5).
    Flat,
    /// InferenceX's current result: identity, `request_accounting`, `request_metrics{...}` and
    /// `server_metrics{...}` (inferencex-v1.md §3).
    #[default]
    Nested,
}

/// Errors of reading an artifact directory or resolving the identity.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Record {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error(transparent)]
    RunSummary(#[from] super::run_summary::RunSummaryError),
    #[error(
        "no {file} in {dir} or in any directory directly below it; pass the run's --output-artifact-dir"
    )]
    NoRecords { dir: PathBuf, file: &'static str },
    #[error("{dir} holds several runs; name one of them:{candidates}")]
    Ambiguous { dir: PathBuf, candidates: String },
    #[error("{flag} (or env {env}): {message}")]
    Identity {
        flag: &'static str,
        env: &'static str,
        message: String,
    },
}

// ---------------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------------

/// The phase of a record; records without a phase (older aiperf) are profiling records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordPhase {
    Warmup,
    Profiling,
}

/// What a failed record says went wrong.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Failure {
    pub code: Option<i64>,
    pub kind: Option<String>,
    pub message: Option<String>,
}

impl Failure {
    /// The category InferenceX groups dropped rows by: the error's type (`type`, `error_type` or
    /// `class`), else its code, else its message up to the first ':'.
    pub fn category(&self) -> String {
        if let Some(k) = self.kind.as_deref().filter(|k| !k.is_empty()) {
            return k.to_string();
        }
        if let Some(c) = self.code {
            return c.to_string();
        }
        match self.message.as_deref() {
            Some(m) if !m.trim().is_empty() => m.split(':').next().unwrap_or(m).trim().to_string(),
            _ => "unknown".into(),
        }
    }

    /// A context overflow, as the record writer classified it (`error.type`).
    pub fn is_context_overflow(&self) -> bool {
        self.kind.as_deref().is_some_and(|k| {
            let k = k.to_ascii_lowercase().replace(['_', '-', ' '], "");
            k.contains("contextoverflow")
        })
    }
}

/// One line of `profile_export.jsonl`, reduced to what the report reads. Latencies are in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRecord {
    /// 1-based line in the file, for messages.
    pub line: usize,
    pub conversation_id: String,
    pub turn_index: Option<u64>,
    pub start_ns: Option<u64>,
    pub end_ns: Option<u64>,
    pub phase: RecordPhase,
    pub cancelled: bool,
    pub error: Option<Failure>,
    pub ttft_s: Option<f64>,
    pub e2el_s: Option<f64>,
    pub itl_s: Option<f64>,
    /// aiperf's `full_response_inter_token_latency` (the whole response over its tokens), when the
    /// record writer gave it.
    pub full_response_itl_s: Option<f64>,
    pub isl: Option<f64>,
    pub osl: Option<f64>,
    pub cache_read_tokens: Option<f64>,
}

impl ProfileRecord {
    /// What became of the request ([`Outcome`]); an overflow is an error the record writer typed as one.
    pub fn outcome(&self) -> Outcome {
        Outcome::classify(
            self.error
                .as_ref()
                .is_some_and(Failure::is_context_overflow),
            self.cancelled,
            self.error.is_some(),
        )
    }

    /// Counted as a success: no error and not cancelled.
    pub fn ok(&self) -> bool {
        self.outcome().is_ok()
    }
}

#[derive(Deserialize)]
struct RawRecord {
    metadata: RawMeta,
    #[serde(default)]
    metrics: serde_json::Map<String, Value>,
    #[serde(default)]
    error: Value,
}

#[derive(Deserialize)]
struct RawMeta {
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    turn_index: Option<u64>,
    #[serde(default)]
    request_start_ns: Option<u64>,
    #[serde(default)]
    request_end_ns: Option<u64>,
    #[serde(default)]
    benchmark_phase: Option<String>,
    #[serde(default)]
    was_cancelled: Option<bool>,
}

/// Seconds per unit of a latency metric; aiperf writes `ms`, and a missing unit means `ms`.
fn seconds_per(unit: Option<&str>) -> Option<f64> {
    match unit.map(str::trim) {
        None | Some("ms") | Some("") => Some(1e-3),
        Some("s") | Some("sec") => Some(1.0),
        Some("us") | Some("µs") => Some(1e-6),
        Some("ns") => Some(1e-9),
        _ => None,
    }
}

/// The scalar value and unit of `metrics[name]` (`{"value","unit"}` or a bare number); `None` when absent
/// or null.
fn metric_value<'a>(
    metrics: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<(f64, Option<&'a str>)>, String> {
    let (v, unit) = match metrics.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => (
            o.get("value").unwrap_or(&Value::Null),
            o.get("unit").and_then(Value::as_str),
        ),
        Some(v) => (v, None),
    };
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => n
            .as_f64()
            .map(|x| Some((x, unit)))
            .ok_or_else(|| format!("metrics.{name}.value is not a finite number")),
        other => Err(format!(
            "metrics.{name}.value must be a number, got {}",
            kind_of(other)
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A latency metric in seconds, kept only when > 0 (InferenceX's `_ms_to_s`).
fn latency(metrics: &serde_json::Map<String, Value>, name: &str) -> Result<Option<f64>, String> {
    let Some((v, unit)) = metric_value(metrics, name)? else {
        return Ok(None);
    };
    let per = seconds_per(unit).ok_or_else(|| {
        format!(
            "metrics.{name}.unit {:?} is not a time unit (ms, s, us, ns)",
            unit.unwrap_or_default()
        )
    })?;
    let s = v * per;
    Ok((s > 0.0).then_some(s))
}

/// Python truthiness of the `error` field: null, false, "" and empty containers mean no error.
fn failure_of(v: &Value) -> Option<Failure> {
    match v {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Object(o) if o.is_empty() => None,
        Value::Object(o) => Some(Failure {
            code: o.get("code").and_then(Value::as_i64),
            kind: ["type", "error_type", "class"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str))
                .map(str::to_owned),
            message: o.get("message").and_then(Value::as_str).map(str::to_owned),
        }),
        Value::String(s) => Some(Failure {
            message: Some(s.clone()),
            ..Failure::default()
        }),
        other => Some(Failure {
            message: Some(other.to_string()),
            ..Failure::default()
        }),
    }
}

/// Parses one record line (1-based `line` for messages).
fn parse_record(text: &str, line: usize) -> Result<ProfileRecord, String> {
    let raw: RawRecord = serde_json::from_str(text).map_err(|e| {
        format!("not an aiperf record ({e}); each line must be one JSON object with `metadata`, `metrics` and `error`")
    })?;
    let phase = match raw.metadata.benchmark_phase.as_deref() {
        None | Some("profiling") => RecordPhase::Profiling,
        Some("warmup") => RecordPhase::Warmup,
        Some(other) => {
            return Err(format!(
                "metadata.benchmark_phase {other:?} is not \"warmup\" or \"profiling\""
            ))
        }
    };
    let m = &raw.metrics;
    let count =
        |name: &str| -> Result<Option<f64>, String> { Ok(metric_value(m, name)?.map(|(v, _)| v)) };
    Ok(ProfileRecord {
        line,
        conversation_id: raw.metadata.conversation_id.unwrap_or_default(),
        turn_index: raw.metadata.turn_index,
        start_ns: raw.metadata.request_start_ns,
        end_ns: raw.metadata.request_end_ns,
        phase,
        cancelled: raw.metadata.was_cancelled.unwrap_or(false),
        error: failure_of(&raw.error),
        ttft_s: latency(m, "time_to_first_token")?,
        e2el_s: latency(m, "request_latency")?,
        itl_s: latency(m, "inter_token_latency")?,
        full_response_itl_s: latency(m, "full_response_inter_token_latency")?,
        isl: count("input_sequence_length")?,
        osl: count("output_sequence_length")?,
        cache_read_tokens: count("usage_prompt_cache_read_tokens")?,
    })
}

/// Parses the text of a `profile_export.jsonl`; `path` names the file in errors (`path:line: ...`).
pub fn parse_profile_export(text: &str, path: &Path) -> Result<Vec<ProfileRecord>, ReportError> {
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        out.push(
            parse_record(l, i + 1).map_err(|message| ReportError::Record {
                path: path.to_owned(),
                line: i + 1,
                message,
            })?,
        );
    }
    Ok(out)
}

/// How a server metric aggregates across its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Increases over the window: series are summed (`stats.total`).
    Counter,
    /// Levels (usage, queue lengths, percentages): series are averaged (`stats.avg`).
    Gauge,
    Histogram,
}

/// One `(endpoint, labels)` series of a server metric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    pub endpoint: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The numeric entries of `stats`.
    pub stats: BTreeMap<String, f64>,
    /// The numeric entries of each of `timeslices` (with `--slice-duration`), in order.
    pub timeslices: Vec<BTreeMap<String, f64>>,
}

/// One server metric of `server_metrics_export.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerMetric {
    pub kind: MetricKind,
    pub series: Vec<Series>,
}

/// The parts of aiperf's `server_metrics_export.json` the report reads: metrics by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerMetrics {
    pub metrics: BTreeMap<String, ServerMetric>,
}

impl ServerMetrics {
    /// Parses the file's text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<ServerMetrics, ReportError> {
        let err = |message: String| ReportError::File {
            path: path.to_owned(),
            message,
        };
        let doc: Value = serde_json::from_str(text).map_err(|e| {
            err(format!(
                "not JSON ({e}); expected aiperf's server metrics export"
            ))
        })?;
        let mut out = ServerMetrics::default();
        let metrics = match doc.get("metrics") {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(err(format!(
                    "`metrics` must be an object keyed by metric name, got {}",
                    kind_of(other)
                )))
            }
        };
        for (name, m) in metrics {
            let series_v = match m.get("series") {
                Some(Value::Array(a)) => a.as_slice(),
                None | Some(Value::Null) => &[],
                Some(other) => {
                    return Err(err(format!(
                        "metrics[{name:?}].series must be a list, got {}",
                        kind_of(other)
                    )))
                }
            };
            let mut series = Vec::with_capacity(series_v.len());
            for (i, s) in series_v.iter().enumerate() {
                let stats = match s.get("stats") {
                    Some(Value::Object(o)) => o
                        .iter()
                        .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
                        .collect(),
                    None | Some(Value::Null) => BTreeMap::new(),
                    Some(other) => {
                        return Err(err(format!(
                            "metrics[{name:?}].series[{i}].stats must be an object, got {}",
                            kind_of(other)
                        )))
                    }
                };
                let labels = match s.get("labels") {
                    Some(Value::Object(o)) => o
                        .iter()
                        .map(|(k, v)| {
                            let v = v
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| v.to_string());
                            (k.clone(), v)
                        })
                        .collect(),
                    _ => BTreeMap::new(),
                };
                let timeslices = s
                    .get("timeslices")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_object)
                            .map(|o| {
                                o.iter()
                                    .filter_map(|(k, v)| v.as_f64().map(|x| (k.clone(), x)))
                                    .collect()
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                series.push(Series {
                    timeslices,
                    endpoint: s
                        .get("endpoint_url")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    labels,
                    stats,
                });
            }
            let declared = m.get("type").and_then(Value::as_str);
            let kind = match declared {
                Some("counter") => MetricKind::Counter,
                Some("histogram") => MetricKind::Histogram,
                Some("gauge") | Some("unknown") => MetricKind::Gauge,
                // No type: a series with an increase over the window is a counter.
                _ if series.iter().any(|s| s.stats.contains_key("total")) => MetricKind::Counter,
                _ => MetricKind::Gauge,
            };
            out.metrics
                .insert(name.clone(), ServerMetric { kind, series });
        }
        Ok(out)
    }

    /// The metric's value over the window, aggregated by its kind over the series `keep` accepts:
    /// counters sum `total` (8 engines' increases add up), gauges average `avg` (8 engines at 50% read
    /// 50%), histograms sum `sum`. `None` when the metric or the stat is absent.
    pub fn value_where(&self, name: &str, keep: impl Fn(&Series) -> bool) -> Option<f64> {
        let m = self.metrics.get(name)?;
        let stat = match m.kind {
            MetricKind::Counter => "total",
            MetricKind::Gauge => "avg",
            MetricKind::Histogram => "sum",
        };
        let vals: Vec<f64> = m
            .series
            .iter()
            .filter(|s| keep(s))
            .filter_map(|s| s.stats.get(stat).copied())
            .collect();
        if vals.is_empty() {
            return None;
        }
        let sum: f64 = vals.iter().sum();
        Some(match m.kind {
            MetricKind::Gauge => sum / vals.len() as f64,
            _ => sum,
        })
    }

    /// [`Self::value_where`] over every series.
    pub fn value(&self, name: &str) -> Option<f64> {
        self.value_where(name, |_| true)
    }

    /// The value over the series whose label `key` equals `want`.
    pub fn value_labelled(&self, name: &str, key: &str, want: &str) -> Option<f64> {
        self.value_where(name, |s| {
            s.labels.get(key).map(String::as_str) == Some(want)
        })
    }
}

/// A JSON artifact file's text, or an error naming the file.
fn json_doc(text: &str, path: &Path) -> Result<Value, ReportError> {
    serde_json::from_str(text).map_err(|e| ReportError::File {
        path: path.to_owned(),
        message: format!("not JSON ({e})"),
    })
}

/// The parts of `profile_export_aiperf.json` the report reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AiperfSummary {
    /// `theoretical_prefix_cache_hit`: `sum / count`, else `avg / 100` when its unit is `%`.
    pub theoretical_cache_hit_rate: Option<f64>,
    /// `metadata.dataset`, copied into the nested result as `dataset`.
    pub dataset: Option<Value>,
}

impl AiperfSummary {
    pub fn parse(text: &str, path: &Path) -> Result<AiperfSummary, ReportError> {
        let doc = json_doc(text, path)?;
        let t = doc.get("theoretical_prefix_cache_hit");
        let f = |k: &str| t.and_then(|t| t.get(k)).and_then(Value::as_f64);
        let rate = match (f("sum"), f("count")) {
            (Some(s), Some(c)) if c > 0.0 => Some(s / c),
            _ => match (
                f("avg"),
                t.and_then(|t| t.get("unit")).and_then(Value::as_str),
            ) {
                (Some(a), Some("%")) => Some(a / 100.0),
                _ => None,
            },
        };
        Ok(AiperfSummary {
            theoretical_cache_hit_rate: rate.filter(|x| x.is_finite()),
            dataset: doc
                .pointer("/metadata/dataset")
                .filter(|v| !v.is_null())
                .cloned(),
        })
    }
}

/// Prefill and decode topology of a multinode (disaggregated) deployment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Multinode {
    pub prefill_num_workers: u64,
    pub prefill_tp: u64,
    pub prefill_ep: u64,
    pub prefill_dp_attention: bool,
    pub decode_num_workers: u64,
    pub decode_tp: u64,
    pub decode_ep: u64,
    pub decode_dp_attention: bool,
}

/// Who was benchmarked (domain §5.2 identity keys), from flags or InferenceX's environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub hw: String,
    pub conc: Option<u64>,
    pub image: String,
    pub model: String,
    pub model_prefix: String,
    pub framework: String,
    pub precision: String,
    pub spec_decoding: String,
    pub disagg: bool,
    pub tp: u64,
    pub ep: u64,
    pub dp_attention: bool,
    pub offloading: String,
    /// `Some` when `IS_MULTINODE` is true.
    pub multinode: Option<Multinode>,
    /// Pipeline parallelism (default 1).
    pub pp: u64,
    /// Decode context parallelism (default 1; shares the TP GPUs).
    pub dcp_size: u64,
    /// Prefill context parallelism (default 1).
    pub pcp_size: u64,
    /// Nested-layout identity strings, null when not given.
    pub recipe_fingerprint: Option<String>,
    pub kv_offload_backend: Option<String>,
    pub allocated_cpu_dram_gb: Option<String>,
    pub router: Option<String>,
    pub kv_p2p_transfer: Option<String>,
    pub prefill_hw: Option<String>,
    pub decode_hw: Option<String>,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            hw: String::new(),
            conc: None,
            image: String::new(),
            model: String::new(),
            model_prefix: String::new(),
            framework: String::new(),
            precision: String::new(),
            spec_decoding: "none".into(),
            disagg: false,
            tp: 1,
            ep: 1,
            dp_attention: false,
            offloading: "none".into(),
            multinode: None,
            pp: 1,
            dcp_size: 1,
            pcp_size: 1,
            recipe_fingerprint: None,
            kv_offload_backend: None,
            allocated_cpu_dram_gb: None,
            router: None,
            kv_p2p_transfer: None,
            prefill_hw: None,
            decode_hw: None,
        }
    }
}

/// Raw identity values as given (flag or environment); empty strings count as unset.
#[derive(Debug, Clone, Default)]
pub struct IdentityInput {
    pub hw: Option<String>,
    pub conc: Option<String>,
    pub image: Option<String>,
    pub model: Option<String>,
    pub model_prefix: Option<String>,
    pub framework: Option<String>,
    pub precision: Option<String>,
    pub spec_decoding: Option<String>,
    pub disagg: Option<String>,
    pub is_multinode: Option<String>,
    pub tp: Option<String>,
    pub ep: Option<String>,
    pub dp_attention: Option<String>,
    pub offloading: Option<String>,
    pub prefill_num_workers: Option<String>,
    pub prefill_tp: Option<String>,
    pub prefill_ep: Option<String>,
    pub prefill_dp_attention: Option<String>,
    pub decode_num_workers: Option<String>,
    pub decode_tp: Option<String>,
    pub decode_ep: Option<String>,
    pub decode_dp_attention: Option<String>,
    pub pp: Option<String>,
    pub dcp_size: Option<String>,
    pub pcp_size: Option<String>,
    pub recipe_fingerprint: Option<String>,
    pub kv_offload_backend: Option<String>,
    pub allocated_cpu_dram_gb: Option<String>,
    pub router: Option<String>,
    pub kv_p2p_transfer: Option<String>,
    pub prefill_hw: Option<String>,
    pub decode_hw: Option<String>,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

fn int_of(
    v: &Option<String>,
    default: u64,
    flag: &'static str,
    env: &'static str,
) -> Result<u64, ReportError> {
    match given(v) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| ReportError::Identity {
            flag,
            env,
            message: format!("{s:?} is not a non-negative integer"),
        }),
    }
}

fn bool_of(v: &Option<String>, flag: &'static str, env: &'static str) -> Result<bool, ReportError> {
    match given(v).map(str::to_ascii_lowercase).as_deref() {
        None => Ok(false),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(other) => Err(ReportError::Identity {
            flag,
            env,
            message: format!("{other:?} is not a boolean; use true or false"),
        }),
    }
}

impl Identity {
    /// Resolves raw values with InferenceX's defaults (TP 1, EP 1, spec decoding "none", offloading
    /// "none", booleans false).
    pub fn resolve(i: &IdentityInput) -> Result<Identity, ReportError> {
        let s = |v: &Option<String>| given(v).unwrap_or_default().to_owned();
        let opt = |v: &Option<String>| given(v).map(str::to_owned);
        let is_multinode = bool_of(&i.is_multinode, "--is-multinode", "IS_MULTINODE")?;
        let multinode = if is_multinode {
            Some(Multinode {
                prefill_num_workers: int_of(
                    &i.prefill_num_workers,
                    0,
                    "--prefill-num-workers",
                    "PREFILL_NUM_WORKERS",
                )?,
                prefill_tp: int_of(&i.prefill_tp, 0, "--prefill-tp", "PREFILL_TP")?,
                prefill_ep: int_of(&i.prefill_ep, 1, "--prefill-ep", "PREFILL_EP")?,
                prefill_dp_attention: bool_of(
                    &i.prefill_dp_attention,
                    "--prefill-dp-attention",
                    "PREFILL_DP_ATTN",
                )?,
                decode_num_workers: int_of(
                    &i.decode_num_workers,
                    0,
                    "--decode-num-workers",
                    "DECODE_NUM_WORKERS",
                )?,
                decode_tp: int_of(&i.decode_tp, 0, "--decode-tp", "DECODE_TP")?,
                decode_ep: int_of(&i.decode_ep, 1, "--decode-ep", "DECODE_EP")?,
                decode_dp_attention: bool_of(
                    &i.decode_dp_attention,
                    "--decode-dp-attention",
                    "DECODE_DP_ATTN",
                )?,
            })
        } else {
            None
        };
        Ok(Identity {
            hw: s(&i.hw),
            conc: match given(&i.conc) {
                None => None,
                Some(_) => Some(int_of(&i.conc, 0, "--conc", "CONC")?),
            },
            image: s(&i.image),
            model: s(&i.model),
            model_prefix: s(&i.model_prefix),
            framework: s(&i.framework),
            precision: s(&i.precision),
            spec_decoding: given(&i.spec_decoding).unwrap_or("none").to_owned(),
            disagg: bool_of(&i.disagg, "--disagg", "DISAGG")?,
            tp: int_of(&i.tp, 1, "--tp", "TP")?,
            ep: int_of(&i.ep, 1, "--ep", "EP_SIZE")?,
            dp_attention: bool_of(&i.dp_attention, "--dp-attention", "DP_ATTENTION")?,
            offloading: given(&i.offloading).unwrap_or("none").to_owned(),
            multinode,
            pp: int_of(&i.pp, 1, "--pp", "PP_SIZE")?,
            dcp_size: int_of(&i.dcp_size, 1, "--dcp-size", "DCP_SIZE")?,
            pcp_size: int_of(&i.pcp_size, 1, "--pcp-size", "PCP_SIZE")?,
            recipe_fingerprint: opt(&i.recipe_fingerprint),
            kv_offload_backend: opt(&i.kv_offload_backend),
            allocated_cpu_dram_gb: opt(&i.allocated_cpu_dram_gb),
            router: opt(&i.router),
            kv_p2p_transfer: opt(&i.kv_p2p_transfer),
            prefill_hw: opt(&i.prefill_hw),
            decode_hw: opt(&i.decode_hw),
        })
    }

    /// GPUs the throughput is divided by: TP x PP x PCP on one node (decode context parallelism
    /// shares the TP GPUs), prefill plus decode GPUs on several.
    pub fn num_gpus(&self) -> u64 {
        match &self.multinode {
            None => self.tp * self.pp * self.pcp_size,
            Some(m) => m.prefill_num_workers * m.prefill_tp + m.decode_num_workers * m.decode_tp,
        }
    }
}

/// The dataset behind the records, or why it could not be had.
#[derive(Debug)]
pub enum Traces {
    Available { dataset: Dataset, name: String },
    Unavailable { reason: String },
}

/// Everything [`compute`] reads.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    pub records: &'a [ProfileRecord],
    /// `None` when `server_metrics_export.json` is absent.
    pub server: Option<&'a ServerMetrics>,
    pub run: Option<&'a RunSummary>,
    /// `None` when `profile_export_aiperf.json` is absent.
    pub aiperf: Option<&'a AiperfSummary>,
    pub identity: &'a Identity,
    pub traces: &'a Traces,
}

// ---------------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------------

/// The `bmk_agentic` JSON: keys in the order InferenceX writes them, then the additions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BmkReport {
    fields: Vec<(String, Value)>,
}

impl BmkReport {
    /// Sets `key`, replacing an earlier value in place.
    pub fn set(&mut self, key: impl Into<String>, v: impl Into<Value>) {
        let key = key.into();
        let v = v.into();
        match self.fields.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = v,
            None => self.fields.push((key, v)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key` as a number (`None` when absent, null or not a number).
    pub fn f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(k, _)| k.as_str())
    }

    /// Rounds every non-integer number to 5 decimals (the nested layout's precision).
    pub fn round_floats(&mut self) {
        for (_, v) in &mut self.fields {
            nested::round5(v);
        }
    }

    /// Pretty JSON with keys in report order.
    pub fn to_json_pretty(&self) -> String {
        // Serializing a Vec of finite-number or plain values cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }
}

impl Serialize for BmkReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.fields.len()))?;
        for (k, v) in &self.fields {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A number, or null when absent or not finite (JSON has no NaN).
fn num(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!(x),
        _ => Value::Null,
    }
}

/// mean, p75, p90, p95 and population std of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub mean: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub std: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Option<Stats> {
        let s = Sorted::new(values.to_vec())?;
        Some(Stats {
            mean: s.mean(),
            p75: s.percentile(75.0),
            p90: s.percentile(90.0),
            p95: s.percentile(95.0),
            std: s.std(Deviation::Population),
        })
    }

    fn get(&self, stat: &str) -> f64 {
        match stat {
            "mean" => self.mean,
            "p75" => self.p75,
            "p90" => self.p90,
            "p95" => self.p95,
            _ => self.std,
        }
    }
}

fn put_stats(r: &mut BmkReport, name: &str, s: Option<Stats>) {
    for stat in STATS {
        r.set(format!("{stat}_{name}"), num(s.map(|s| s.get(stat))));
    }
}

/// Requests completed per 1-second tumbling window from the first end (domain §3.3): the windows'
/// counts, or, when no full window fits, `Err(n / span)` as InferenceX's fallback `mean_qps`.
/// `None` for fewer than two ends or a zero span.
pub fn qps_windows(ends_ns: &[u64]) -> Option<Result<Vec<f64>, f64>> {
    if ends_ns.len() < 2 {
        return None;
    }
    let mut e = ends_ns.to_vec();
    e.sort_unstable();
    let (first, last) = (e[0], e[e.len() - 1]);
    if last == first {
        return None;
    }
    const W: u64 = 1_000_000_000;
    let mut windows = Vec::new();
    let mut t = first;
    let mut i = 0usize;
    while t + W <= last {
        while i < e.len() && e[i] < t {
            i += 1;
        }
        let j = e[i..].partition_point(|&x| x < t + W) + i;
        windows.push((j - i) as f64);
        t += W;
    }
    if windows.is_empty() {
        return Some(Err(e.len() as f64 / ((last - first) as f64 / 1e9)));
    }
    Some(Ok(windows))
}

/// Strips the `::…` suffix a conversation id may carry after the trace id.
pub fn trace_id_of(conversation_id: &str) -> &str {
    conversation_id
        .split_once("::")
        .map_or(conversation_id, |(a, _)| a)
}

/// Divides when the denominator is positive.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The flat layout's server keys and the figure of [`backends::figures`] each one is.
const FLAT_SERVER_KEYS: [(&str, &str); 10] = [
    ("server_gpu_cache_hit_rate", "cache.gpu_cache_hit_rate"),
    ("server_cpu_cache_hit_rate", "cache.cpu_cache_hit_rate"),
    ("kv_offload_bytes_gpu_to_cpu", "kv_offload.bytes_gpu_to_cpu"),
    ("kv_offload_bytes_cpu_to_gpu", "kv_offload.bytes_cpu_to_gpu"),
    ("kv_offload_time_gpu_to_cpu", "kv_offload.time_gpu_to_cpu"),
    ("kv_offload_time_cpu_to_gpu", "kv_offload.time_cpu_to_gpu"),
    ("cpu_kv_cache_usage_pct", "kv_cache.cpu_usage_pct"),
    ("total_prompt_tokens", "tokens.prompt_total"),
    ("total_generation_tokens", "tokens.generation_total"),
    (
        "server_external_cache_hit_rate",
        "cache.external_cache_hit_rate",
    ),
];

/// What the dataset (and aiperf's aggregate) say about the successful records.
struct TraceFigures {
    /// Expected output lengths of the records whose turn was found; `None` without the dataset.
    expected: Option<Vec<f64>>,
    /// The theoretical cache hit rate: aiperf's `theoretical_prefix_cache_hit`, else the dataset's.
    rate: Option<f64>,
    /// Where `rate` came from.
    rate_source: Option<String>,
    /// The dataset's prefix-only rate, when the dataset is available.
    prefix_rate: Option<f64>,
    meta: Value,
    notes: Vec<String>,
}

fn trace_figures(input: &ReportInput<'_>, ok: &[&ProfileRecord]) -> TraceFigures {
    let mut t = TraceFigures {
        expected: None,
        rate: None,
        rate_source: None,
        prefix_rate: None,
        meta: json!({"status": "unavailable"}),
        notes: Vec::new(),
    };
    let aiperf_rate = input.aiperf.and_then(|a| a.theoretical_cache_hit_rate);
    match input.traces {
        Traces::Unavailable { reason } => {
            if aiperf_rate.is_some() {
                t.notes.push(format!("trace metadata unavailable ({reason}): *_output_tokens_expected are null; the theoretical cache hit rate is {PROFILE_AIPERF}'s"));
            } else {
                t.notes.push(format!("trace metadata unavailable ({reason}): theoretical_cache_hit_rate and *_output_tokens_expected are null"));
            }
            t.meta["reason"] = json!(reason);
        }
        Traces::Available { dataset, name } => {
            let by_id: HashMap<&str, dataset::Trajectory<'_>> =
                dataset.trajectories().map(|t| (t.id(), t)).collect();
            let mut expected = Vec::new();
            let mut max_turn: BTreeMap<&str, u64> = BTreeMap::new();
            let mut missing: BTreeMap<&str, ()> = BTreeMap::new();
            for x in ok {
                let tid = trace_id_of(&x.conversation_id);
                let Some(traj) = by_id.get(tid) else {
                    missing.insert(tid, ());
                    continue;
                };
                if let Some(k) = x.turn_index {
                    if let Some(turn) = traj.turn(k as usize) {
                        expected.push(f64::from(turn.output_tokens()));
                    }
                    let e = max_turn.entry(tid).or_insert(0);
                    *e = (*e).max(k);
                }
            }
            let mut hits = dataset::stats::HitCounts::default();
            for (tid, k) in &max_turn {
                hits.add(dataset::stats::theoretical_hits(by_id[tid], *k as usize));
            }
            t.expected = Some(expected);
            if hits.blocks > 0 {
                t.rate = Some(hits.set_rate());
                t.rate_source = Some(format!(
                    "dataset {name} (block hashes of the turns replayed)"
                ));
                t.prefix_rate = Some(hits.prefix_rate());
            }
            if !missing.is_empty() {
                t.notes.push(format!(
                    "{} conversation id(s) of the records are not in dataset {name} (e.g. {:?}); they are left out of the trace-derived figures",
                    missing.len(),
                    missing.keys().next().copied().unwrap_or_default()
                ));
            }
            t.meta = json!({
                "status": "available",
                "dataset": name,
                "traces_matched": max_turn.len(),
                "traces_missing": missing.len(),
            });
        }
    }
    if let Some(r) = aiperf_rate {
        t.rate = Some(r);
        t.rate_source = Some(format!("{PROFILE_AIPERF} theoretical_prefix_cache_hit"));
    }
    t
}

/// The identity figures both layouts derive the same way: concurrency and model (the run's when
/// not given), and TP, EP and DP-attention (summed over prefill and decode on multi-node).
pub(crate) struct Basics {
    pub conc: Option<u64>,
    pub model: String,
    pub tp: u64,
    pub ep: u64,
    pub dpa: bool,
}

impl Basics {
    pub(crate) fn of(input: &ReportInput<'_>, notes: &mut Vec<String>) -> Basics {
        let id = input.identity;
        let conc = id.conc.or(input.run.and_then(|x| x.concurrency));
        if conc.is_none() {
            notes.push(
                "conc is null: pass --conc (or CONC); run_summary.json has no concurrency".into(),
            );
        }
        let model = if id.model.is_empty() {
            input.run.and_then(|x| x.model.clone()).unwrap_or_default()
        } else {
            id.model.clone()
        };
        let (tp, ep, dpa) = match &id.multinode {
            None => (id.tp, id.ep, id.dp_attention),
            Some(m) => (
                m.prefill_tp + m.decode_tp,
                m.prefill_ep.max(m.decode_ep),
                m.prefill_dp_attention || m.decode_dp_attention,
            ),
        };
        Basics {
            conc,
            model,
            tp,
            ep,
            dpa,
        }
    }
}

/// Computes the report. Pure: the same inputs give the same JSON.
pub fn compute(input: &ReportInput<'_>) -> BmkReport {
    let mut notes: Vec<String> = Vec::new();
    let mut r = BmkReport::default();
    put_identity(&mut r, input, &mut notes);
    let c = Counts::of(input);
    r.set("num_requests_total", c.total);
    r.set("num_requests_successful", c.ok.len() as u64);
    put_qps(&mut r, &c.ok, &mut notes);

    // Latencies (s) and interactivity.
    let ok = &c.ok;
    let col =
        |f: fn(&ProfileRecord) -> Option<f64>| ok.iter().filter_map(|x| f(x)).collect::<Vec<f64>>();
    let ttft = Stats::of(&col(|x| x.ttft_s));
    let e2el = Stats::of(&col(|x| x.e2el_s));
    let itl_v = col(|x| x.itl_s);
    let itl = Stats::of(&itl_v);
    let intvty = Stats::of(&itl_v.iter().map(|x| 1.0 / x).collect::<Vec<_>>());
    put_stats(&mut r, "ttft", ttft);
    put_stats(&mut r, "e2el", e2el);
    put_stats(&mut r, "itl", itl);
    put_stats(&mut r, "tpot", itl);
    put_stats(&mut r, "intvty", intvty);

    // Workload.
    let isl_v = col(|x| x.isl);
    let osl_v = col(|x| x.osl);
    put_stats(&mut r, "input_tokens", Stats::of(&isl_v));
    put_stats(&mut r, "output_tokens_actual", Stats::of(&osl_v));

    // Trace metadata: expected output lengths and the theoretical cache hit rate.
    let t = trace_figures(input, ok);
    put_stats(
        &mut r,
        "output_tokens_expected",
        t.expected.as_deref().and_then(Stats::of),
    );
    r.set("theoretical_cache_hit_rate", num(t.rate));
    if matches!(input.traces, Traces::Available { .. }) {
        r.set("theoretical_prefix_cache_hit_rate", num(t.prefix_rate));
    }
    notes.extend(t.notes);

    let server = ServerValues::of(input.server, &mut notes);
    let sums = (isl_v.iter().sum::<f64>(), osl_v.iter().sum::<f64>());
    put_server_totals(&mut r, &server, ok, sums);
    put_throughput(&mut r, input.identity, ok, sums, &mut notes);
    put_additions(&mut r, &c, &server, itl);
    r.set("server_metric_sources", Value::Object(server.sources));
    r.set("server_metrics_adapter", server.adapter);
    r.set("trace_metadata", t.meta);
    r.set(
        "theoretical_cache_hit_rate_source",
        t.rate_source.map_or(Value::Null, Value::from),
    );
    put_run(&mut r, input.run, &mut notes);
    r.set("notes", json!(notes));
    r
}

/// Identity (domain §5.2).
fn put_identity(r: &mut BmkReport, input: &ReportInput<'_>, notes: &mut Vec<String>) {
    let id = input.identity;
    let Basics {
        conc,
        model,
        tp,
        ep,
        dpa,
    } = Basics::of(input, notes);
    let tf = |b: bool| if b { "true" } else { "false" };
    r.set("hw", id.hw.clone());
    r.set("conc", conc.map_or(Value::Null, |c| json!(c)));
    r.set("image", id.image.clone());
    r.set("model", model);
    r.set("infmax_model_prefix", id.model_prefix.clone());
    r.set("framework", id.framework.clone());
    r.set("precision", id.precision.clone());
    r.set("spec_decoding", id.spec_decoding.clone());
    r.set("disagg", id.disagg);
    r.set("scenario_type", "agentic-coding");
    r.set("is_multinode", id.multinode.is_some());
    r.set("tp", tp);
    r.set("ep", ep);
    r.set("dp_attention", tf(dpa));
    r.set("offloading", id.offloading.clone());
    if let Some(m) = &id.multinode {
        r.set("prefill_num_workers", m.prefill_num_workers);
        r.set("prefill_tp", m.prefill_tp);
        r.set("prefill_ep", m.prefill_ep);
        r.set("prefill_dp_attention", tf(m.prefill_dp_attention));
        r.set("num_prefill_gpu", m.prefill_num_workers * m.prefill_tp);
        r.set("decode_num_workers", m.decode_num_workers);
        r.set("decode_tp", m.decode_tp);
        r.set("decode_ep", m.decode_ep);
        r.set("decode_dp_attention", tf(m.decode_dp_attention));
        r.set("num_decode_gpu", m.decode_num_workers * m.decode_tp);
    }
}

/// Counts: warmup excluded from everything; failures count in the total.
struct Counts<'a> {
    warmup: usize,
    prof: Vec<&'a ProfileRecord>,
    ok: Vec<&'a ProfileRecord>,
    overflows: u64,
    total: u64,
    cancelled: u64,
}

impl<'a> Counts<'a> {
    fn of(input: &ReportInput<'a>) -> Counts<'a> {
        let warmup = input
            .records
            .iter()
            .filter(|x| x.phase == RecordPhase::Warmup)
            .count();
        let prof: Vec<&ProfileRecord> = input
            .records
            .iter()
            .filter(|x| x.phase == RecordPhase::Profiling)
            .collect();
        let ok: Vec<&ProfileRecord> = prof.iter().copied().filter(|x| x.ok()).collect();
        let overflow_in_file = prof
            .iter()
            .filter(|x| x.outcome() == Outcome::ContextOverflow)
            .count() as u64;
        // The run summary counts overflows even when the record writer drops their rows (aiperf does);
        // rows it did write are already in the file's count.
        let overflows = input
            .run
            .map_or(0, |x| x.summary.context_overflows)
            .max(overflow_in_file);
        let total = prof.len() as u64 + (overflows - overflow_in_file);
        let cancelled = prof
            .iter()
            .filter(|x| x.outcome() == Outcome::Cancelled)
            .count() as u64;
        Counts {
            warmup,
            prof,
            ok,
            overflows,
            total,
            cancelled,
        }
    }
}

/// Requests per second over the 1-second windows of request ends.
fn put_qps(r: &mut BmkReport, ok: &[&ProfileRecord], notes: &mut Vec<String>) {
    let ends: Vec<u64> = ok.iter().filter_map(|x| x.end_ns).collect();
    match qps_windows(&ends) {
        Some(Ok(w)) => put_stats(r, "qps", Stats::of(&w)),
        Some(Err(mean)) => {
            put_stats(r, "qps", None);
            r.set("mean_qps", num(Some(mean)));
            notes.push("no full 1-second window of request ends: only mean_qps (requests over the span of ends) is reported".into());
        }
        None => put_stats(r, "qps", None),
    }
}

/// The server's figures by flat key, where each came from, and the engine that wrote them.
struct ServerValues {
    vals: HashMap<&'static str, Option<f64>>,
    sources: serde_json::Map<String, Value>,
    adapter: Value,
}

impl ServerValues {
    fn of(server: Option<&ServerMetrics>, notes: &mut Vec<String>) -> ServerValues {
        let mut sources = serde_json::Map::new();
        let mut server_vals: HashMap<&'static str, Option<f64>> = HashMap::new();
        let mut adapter = Value::Null;
        match server {
            Some(m) => {
                let f = backends::figures(m);
                let flat_keys = FLAT_SERVER_KEYS
                    .iter()
                    .chain(&[("gpu_kv_cache_usage_pct", "kv_cache.gpu_usage_pct")]);
                for (flat, key) in flat_keys {
                    server_vals.insert(flat, f.get(key));
                    if let Some(src) = f.source(key) {
                        sources.insert(flat.to_string(), json!(src));
                    }
                }
                if !f.detection.metric_names.is_empty() {
                    adapter = json!(f.detection.adapter);
                }
                if f.detection.is_unknown() && !f.detection.metric_names.is_empty() {
                    let names = &f.detection.metric_names;
                    let shown = names.iter().take(40).cloned().collect::<Vec<_>>().join(", ");
                    let more = names.len().saturating_sub(40);
                    notes.push(format!(
                        "server metrics from an unknown engine (none of vLLM, SGLang, Dynamo, ATOM, llama.cpp): {shown}{}",
                        if more > 0 { format!(" and {more} more") } else { String::new() }
                    ));
                } else {
                    notes.extend(f.notes.iter().cloned());
                }
            }
            None => notes.push(format!(
                "{SERVER_METRICS} absent: server fields are null; total_prompt_tokens and total_generation_tokens are the records' ISL and OSL sums"
            )),
        }
        ServerValues {
            vals: server_vals,
            sources,
            adapter,
        }
    }

    fn get(&self, k: &str) -> Option<f64> {
        self.vals.get(k).copied().flatten()
    }
}

/// The server's cache, offload and token figures, with the records' sums (ISL, OSL) standing in for
/// the token totals a server did not export; the records' own cache hit rate.
fn put_server_totals(
    r: &mut BmkReport,
    server: &ServerValues,
    ok: &[&ProfileRecord],
    (isl_sum, osl_sum): (f64, f64),
) {
    let sv = |k: &str| server.get(k);
    for k in [
        "server_gpu_cache_hit_rate",
        "server_cpu_cache_hit_rate",
        "kv_offload_bytes_gpu_to_cpu",
        "kv_offload_bytes_cpu_to_gpu",
        "kv_offload_time_gpu_to_cpu",
        "kv_offload_time_cpu_to_gpu",
        "cpu_kv_cache_usage_pct",
    ] {
        r.set(k, num(sv(k)));
    }
    let tok = |v: Option<f64>, fallback: f64| json!(v.unwrap_or(fallback).round() as u64);
    r.set(
        "total_prompt_tokens",
        tok(sv("total_prompt_tokens"), isl_sum),
    );
    r.set(
        "total_generation_tokens",
        tok(sv("total_generation_tokens"), osl_sum),
    );
    r.set("total_requests_completed", ok.len() as u64);
    let cache_read: Option<f64> = ok
        .iter()
        .map(|x| x.cache_read_tokens.zip(x.isl).map(|(c, _)| c))
        .sum();
    let all_isl = ok.iter().all(|x| x.isl.is_some());
    r.set(
        "response_cache_hit_rate",
        num(if all_isl && !ok.is_empty() {
            ratio(cache_read, Some(isl_sum))
        } else {
            None
        }),
    );
}

/// Throughput over the span of the successful requests.
fn put_throughput(
    r: &mut BmkReport,
    id: &Identity,
    ok: &[&ProfileRecord],
    (isl_sum, osl_sum): (f64, f64),
    notes: &mut Vec<String>,
) {
    let start = ok.iter().filter_map(|x| x.start_ns).min();
    let end = ok.iter().filter_map(|x| x.end_ns).max();
    let duration = match (start, end) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    let tput = |sum: f64| duration.map(|d| sum / d);
    let gpus = id.num_gpus();
    let per_gpu = |v: Option<f64>| v.filter(|_| gpus > 0).map(|x| x / gpus as f64);
    let (tin, tout) = (tput(isl_sum), tput(osl_sum));
    let ttot = tin.zip(tout).map(|(a, b)| a + b);
    r.set("input_tput_tps", num(tin));
    r.set("output_tput_tps", num(tout));
    r.set("total_tput_tps", num(ttot));
    r.set("duration_seconds", num(duration));
    r.set("tput_per_gpu", num(per_gpu(ttot)));
    r.set("output_tput_per_gpu", num(per_gpu(tout)));
    r.set("input_tput_per_gpu", num(per_gpu(tin)));
    if gpus == 0 {
        notes.push("the GPU count is 0 (TP, or prefill and decode workers x TP): per-GPU throughputs are null".into());
    }
}

/// Additions beyond InferenceX's schema.
fn put_additions(r: &mut BmkReport, c: &Counts<'_>, server: &ServerValues, itl: Option<Stats>) {
    let sv = |k: &str| server.get(k);
    let (total, ok) = (c.total, &c.ok);
    r.set("num_requests_failed", total - ok.len() as u64);
    r.set("num_requests_cancelled", c.cancelled);
    r.set("num_warmup_requests_excluded", c.warmup as u64);
    r.set("context_overflow_count", c.overflows);
    r.set(
        "context_overflow_rate",
        if total == 0 {
            0.0
        } else {
            c.overflows as f64 / total as f64
        },
    );
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for x in c.prof.iter().filter(|x| !x.outcome().is_ok()) {
        let kind = x.error.as_ref().map_or("cancelled".into(), |e| {
            e.kind.clone().unwrap_or_else(|| "unknown".into())
        });
        *errors.entry(kind).or_default() += 1;
    }
    r.set("errors_by_type", json!(errors));
    r.set(
        "server_external_cache_hit_rate",
        num(sv("server_external_cache_hit_rate")),
    );
    r.set("gpu_kv_cache_usage_pct", num(sv("gpu_kv_cache_usage_pct")));
    for stat in ["mean", "p75", "p90", "p95"] {
        let t = itl.map(|s| s.get(stat));
        r.set(
            format!("{stat}_intvty_at_tpot"),
            num(t.filter(|x| *x > 0.0).map(|x| 1.0 / x)),
        );
    }
    r.set(
        "metric_definitions",
        json!({
            "intvty": "statistics of per-request interactivity 1/ITL (tokens/s/user); pXX_intvty is the pXX percentile of that distribution, the fast side (about 1/p(100-XX) TPOT)",
            "intvty_at_tpot": "fixed-seq-len convention: pXX_intvty_at_tpot = 1/pXX_tpot, the interactivity at the pXX (slow-tail) TPOT; mean_intvty_at_tpot = 1/mean_tpot",
            "tpot": "equal to itl (no speculative-decoding distinction in agentic runs)",
            "percentile": "linear interpolation, k = (n-1)p/100; std is the population standard deviation",
            "server_aggregation": "counters are summed across series (endpoints, engines); gauges and percentages are averaged across series",
            "cpu_kv_cache_usage_pct": "the server's fraction (0..1) as exported, time-averaged per series",
            "context_overflow_rate": "context_overflow_count / num_requests_total (profiling phase)",
        }),
    );
}

/// What the run summary says of the run: dataset, scenario, seed, validity.
fn put_run(r: &mut BmkReport, run: Option<&RunSummary>, notes: &mut Vec<String>) {
    if let Some(run) = run {
        r.set(
            "dataset",
            json!({"alias": run.dataset_alias(), "source": run.dataset_source()}),
        );
        r.set(
            "scenario",
            run.scenario.as_ref().map_or(Value::Null, |s| json!(s)),
        );
        r.set("seed", run.seed.map_or(Value::Null, |s| json!(s)));
        r.set(
            "submission_valid",
            run.submission_valid.map_or(Value::Null, Value::Bool),
        );
        r.set(
            "submission_invalid_reasons",
            json!(run.submission_invalid_reasons),
        );
    } else {
        notes.push(format!(
            "{RUN_SUMMARY} absent: dataset, scenario, seed and submission validity are unknown"
        ));
    }
}

// ---------------------------------------------------------------------------------------------------
// I/O around `compute`
// ---------------------------------------------------------------------------------------------------

/// The parsed files of an artifact directory.
#[derive(Debug, Clone)]
pub struct Artifacts {
    /// The directory the files were read from (a per-run subdirectory when the given one had none).
    pub dir: PathBuf,
    pub records: Vec<ProfileRecord>,
    pub server: Option<ServerMetrics>,
    pub run: Option<RunSummary>,
    pub aiperf: Option<AiperfSummary>,
}

/// The directory holding `profile_export.jsonl` (see [`locate_file`]).
pub fn locate(dir: &Path) -> Result<PathBuf, ReportError> {
    locate_file(dir, PROFILE_EXPORT)
}

/// The run directory `dir` means, by the run file `file` it must hold: `dir` itself, else its
/// `latest` link (agentx's per-run default directories), else the one directory directly below it
/// that has one (aiperf's per-run layout). Several candidates and no `latest` are refused with the
/// candidates listed.
pub fn locate_file(dir: &Path, file: &'static str) -> Result<PathBuf, ReportError> {
    if dir.join(file).is_file() {
        return Ok(dir.to_owned());
    }
    let latest = dir.join(crate::fsio::LATEST_LINK);
    if latest.join(file).is_file() {
        return Ok(latest);
    }
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| ReportError::Read {
            path: dir.to_owned(),
            source,
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join(file).is_file())
        .collect();
    subs.sort();
    match subs.len() {
        0 => Err(ReportError::NoRecords {
            dir: dir.to_owned(),
            file,
        }),
        1 => Ok(subs.remove(0)),
        _ => Err(ReportError::Ambiguous {
            dir: dir.to_owned(),
            candidates: subs
                .iter()
                .map(|p| format!("\n  {}", p.display()))
                .collect(),
        }),
    }
}

fn read(path: &Path) -> Result<Option<String>, ReportError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReportError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Reads the records (required), the server metrics and the run summary (both optional).
pub fn load_artifacts(dir: &Path) -> Result<Artifacts, ReportError> {
    let dir = locate(dir)?;
    let p = dir.join(PROFILE_EXPORT);
    let text = read(&p)?.ok_or_else(|| ReportError::NoRecords {
        dir: dir.clone(),
        file: PROFILE_EXPORT,
    })?;
    let records = parse_profile_export(&text, &p)?;
    let sp = dir.join(SERVER_METRICS);
    let server = read(&sp)?
        .map(|t| ServerMetrics::parse(&t, &sp))
        .transpose()?;
    let rp = dir.join(RUN_SUMMARY);
    let run = read(&rp)?.map(|t| RunSummary::parse(&t, &rp)).transpose()?;
    let ap = dir.join(PROFILE_AIPERF);
    let aiperf = read(&ap)?
        .map(|t| AiperfSummary::parse(&t, &ap))
        .transpose()?;
    Ok(Artifacts {
        dir,
        records,
        server,
        run,
        aiperf,
    })
}

/// Opens the dataset the run replayed: `spec` when given (a path or a name of the alias table), else
/// the run summary's alias, else its source path. Failure is not an error: the report says why.
pub fn open_traces(run: Option<&RunSummary>, spec: Option<&str>, opts: &OpenOptions) -> Traces {
    let unavailable = |reason: String| Traces::Unavailable { reason };
    let spec = match spec {
        Some(s) => s.to_owned(),
        None => {
            let Some(run) = run else {
                return unavailable(format!(
                    "no {RUN_SUMMARY} names the dataset; pass --dataset PATH|NAME"
                ));
            };
            match (run.dataset_alias(), run.dataset_source()) {
                (Some(a), _) if dataset::alias::lookup(a).is_some() => a.to_owned(),
                (_, Some(src)) if Path::new(src).exists() => src.to_owned(),
                (Some(a), _) => {
                    return unavailable(format!(
                    "dataset {a:?} is not in the alias table (known: {}); pass --dataset PATH|NAME",
                    dataset::alias::known_names()
                ))
                }
                (None, Some(src)) => {
                    return unavailable(format!(
                        "the run's dataset {src} no longer exists; pass --dataset PATH|NAME"
                    ))
                }
                (None, None) => {
                    return unavailable(format!(
                        "{RUN_SUMMARY} names no dataset; pass --dataset PATH|NAME"
                    ))
                }
            }
        }
    };
    match Dataset::open(&spec, opts) {
        Ok(ds) => {
            let name = ds
                .alias()
                .map(|a| a.name.to_owned())
                .unwrap_or_else(|| ds.source_path().display().to_string());
            Traces::Available { dataset: ds, name }
        }
        Err(e) => unavailable(format!("cannot open dataset {spec}: {e}")),
    }
}

/// Reads an artifact directory and computes its report (flat layout).
pub fn report_dir(
    dir: &Path,
    identity: &Identity,
    dataset_spec: Option<&str>,
    opts: &OpenOptions,
) -> Result<BmkReport, ReportError> {
    let a = load_artifacts(dir)?;
    let traces = open_traces(a.run.as_ref(), dataset_spec, opts);
    Ok(compute(&a.input(identity, &traces)))
}

impl Artifacts {
    /// The inputs of [`compute`] and [`compute_nested`].
    pub fn input<'a>(&'a self, identity: &'a Identity, traces: &'a Traces) -> ReportInput<'a> {
        ReportInput {
            records: &self.records,
            server: self.server.as_ref(),
            run: self.run.as_ref(),
            aiperf: self.aiperf.as_ref(),
            identity,
            traces,
        }
    }
}

/// Reads an artifact directory and writes its report in `layout` as pretty JSON.
pub fn render_dir(
    dir: &Path,
    identity: &Identity,
    dataset_spec: Option<&str>,
    opts: &OpenOptions,
    layout: Layout,
) -> Result<String, ReportError> {
    let a = load_artifacts(dir)?;
    let traces = open_traces(a.run.as_ref(), dataset_spec, opts);
    let input = a.input(identity, &traces);
    Ok(match layout {
        Layout::Flat => compute(&input).to_json_pretty(),
        Layout::Nested => compute_nested(&input).to_json_pretty(),
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod nested_tests;
