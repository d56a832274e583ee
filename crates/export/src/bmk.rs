//! The InferenceX `bmk_agentic` JSON from a run's artifact directory, in two layouts: the seed-era
//! flat keys (docs/specs/inferencex-rows.md#flat-keys, `compute`) and InferenceX's current nested
//! result (docs/specs/inferencex-rows.md#nested-row, `compute_nested` in `nested`). Which engine
//! wrote the server metrics, and the figures read from its metric names, is `backends`'s.
//!
//! Both computations are pure functions over parsed inputs (aiperf records, aiperf server metrics,
//! aiperf's aggregate `profile_export_aiperf.json`, our `run_summary.json`, the identity of the
//! benchmarked system and, when it can be opened, the dataset); the loaders around them
//! (`load_artifacts`, `open_traces`, [`render_dir`], in `load`) only read files.
//! The inputs' types live beside: the records (`records`), aiperf's server metrics and summary
//! (`inputs`), the identity of the benchmarked system (`identity`).
//!
//! Invariants: every key of docs/specs/inferencex-rows.md#flat-keys is present (null when
//! unavailable, with a line in `notes` saying why); warmup records count nowhere; percentiles
//! interpolate linearly (`k = (n-1)p/100`) and `std` is the population deviation, as InferenceX
//! computes them. Where InferenceX's pipeline is wrong this report differs on purpose: failed
//! requests count in `num_requests_total`; server counters are summed across
//! series while gauges are averaged; the external (offload) cache hit rate comes from metrics servers
//! actually export; interactivity is reported under both conventions with distinct keys.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use agentx_dataset::{self as dataset, Dataset, OpenOptions};
use agentx_metrics::percentile;
use agentx_metrics::Outcome;
use agentx_record::dist::{Deviation, Sorted};

pub(crate) mod backends;
mod identity;
mod inputs;
mod load;
mod nested;
mod records;

pub use identity::*;
pub(crate) use inputs::*;
pub use load::*;
pub(crate) use records::*;

pub(crate) use nested::compute_nested;

/// The statistics every distribution is reported with (`{stat}_{metric}` keys).
pub(crate) const STATS: [&str; 5] = ["mean", "p75", "p90", "p95", "std"];

/// The keys InferenceX's `utils/summarize.py` reads from an agentic result
/// (docs/specs/inferencex-rows.md#summarize-keys); a report without any of them breaks the consumer.
#[cfg(test)]
pub(crate) const SUMMARIZE_KEYS: [&str; 24] = [
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

/// The per-request records, read from an artifact directory.
pub(crate) const PROFILE_EXPORT: &str = "profile_export.jsonl";
/// The server metrics export, read when present.
pub(crate) const SERVER_METRICS: &str = "server_metrics_export.json";
pub use super::run_summary::{RunSummary, RUN_SUMMARY};
/// aiperf's aggregate statistics, read when present.
pub const PROFILE_AIPERF: &str = "profile_export_aiperf.json";

/// The report layouts `agentx-host report --layout` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// The seed-era `bmk_agentic` keys (`mean_ttft`, `p90_e2el`, ...) at the top level
    /// (docs/specs/inferencex-rows.md#flat-keys).
    Flat,
    /// InferenceX's current result: identity, `request_accounting`, `request_metrics{...}` and
    /// `server_metrics{...}` (docs/specs/inferencex-rows.md#nested-row).
    #[default]
    Nested,
}

/// Errors of reading an artifact directory or resolving the identity.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line of `profile_export.jsonl` is not a record.
    #[error("{path}:{line}: {message}")]
    Record {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong, and how to fix it where it says.
        message: String,
    },
    /// A file is not what it should be.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong, and how to fix it where it says.
        message: String,
    },
    /// `run_summary.json` could not be read.
    #[error(transparent)]
    RunSummary(#[from] super::run_summary::RunSummaryError),
    /// No run directory was found where one was given.
    #[error(
        "no {file} in {dir} or in any directory directly below it; pass the run's --output-artifact-dir"
    )]
    NoRecords {
        /// The directory given.
        dir: PathBuf,
        /// The run file looked for.
        file: &'static str,
    },
    /// The directory holds several runs and no `latest` link.
    #[error("{dir} holds several runs; name one of them:{candidates}")]
    Ambiguous {
        /// The directory given.
        dir: PathBuf,
        /// The runs found, one per line.
        candidates: String,
    },
    /// The nested layout lacks facts it requires.
    #[error(
        "the InferenceX row (the nested layout) cannot be written; missing or invalid:\n  {}\n(--layout flat writes the seed-era keys without these facts)",
        gaps.join("\n  ")
    )]
    Row {
        /// The missing or invalid facts, one per entry.
        gaps: Vec<String>,
    },
    /// An identity flag or environment variable has a value it may not have.
    #[error("{flag} (or env {env}): {message}")]
    Identity {
        /// The flag.
        flag: &'static str,
        /// The environment variable the flag falls back to.
        env: &'static str,
        /// What is wrong, and how to fix it where it says.
        message: String,
    },
}

/// The dataset behind the records, or why it could not be had.
#[derive(Debug)]
pub(crate) enum Traces {
    /// The dataset was opened.
    Available {
        /// The opened dataset.
        dataset: Dataset,
        /// Its name, as the report writes it.
        name: String,
    },
    /// It could not be: the report's trace figures are null.
    Unavailable {
        /// Why it could not be opened.
        reason: String,
    },
}

/// Everything [`compute`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReportInput<'a> {
    pub(crate) records: &'a [ProfileRecord],
    /// `None` when `server_metrics_export.json` is absent.
    pub(crate) server: Option<&'a ServerMetrics>,
    pub(crate) run: Option<&'a RunSummary>,
    /// `None` when `profile_export_aiperf.json` is absent.
    pub(crate) aiperf: Option<&'a AiperfSummary>,
    pub(crate) identity: &'a Identity,
    pub(crate) traces: &'a Traces,
}

// ---------------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------------

/// The `bmk_agentic` JSON: keys in the order InferenceX writes them, then the additions.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BmkReport {
    fields: Vec<(String, Value)>,
}

impl BmkReport {
    /// Sets `key`, replacing an earlier value in place.
    pub(crate) fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.fields.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((key, value)),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key` as a number (`None` when absent, null or not a number).
    pub(crate) fn f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Value::as_f64)
    }

    /// Rounds every non-integer number to 5 decimals (the nested layout's precision).
    pub(crate) fn round_floats(&mut self) {
        for (_, v) in &mut self.fields {
            nested::round5(v);
        }
    }

    /// Pretty JSON with keys in report order.
    pub(crate) fn to_json_pretty(&self) -> String {
        // Serializing a Vec of finite-number or plain values cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }
}

impl Serialize for BmkReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.fields.len()))?;
        for (k, v) in &self.fields {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// A number, or null when absent or not finite (JSON has no NaN).
fn num(value: Option<f64>) -> Value {
    match value {
        Some(x) if x.is_finite() => json!(x),
        _ => Value::Null,
    }
}

/// mean, p75, p90, p95 and population std of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stats {
    pub(crate) mean: f64,
    pub(crate) p75: f64,
    pub(crate) p90: f64,
    pub(crate) p95: f64,
    pub(crate) std: f64,
}

impl Stats {
    pub(crate) fn of(values: &[f64]) -> Option<Stats> {
        let sorted = Sorted::new(values.to_vec())?;
        Some(Stats {
            mean: sorted.mean(),
            p75: sorted.percentile(75.0),
            p90: sorted.percentile(90.0),
            p95: sorted.percentile(95.0),
            std: sorted.std(Deviation::Population),
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

fn put_stats(report: &mut BmkReport, name: &str, stats: Option<Stats>) {
    for stat in STATS {
        report.set(format!("{stat}_{name}"), num(stats.map(|s| s.get(stat))));
    }
}

/// Requests completed per 1-second tumbling window from the first end
/// (docs/specs/inferencex-rows.md#derived-metrics): the windows' counts, or, when no full window fits,
/// `Err(n / span)` as InferenceX's fallback `mean_qps`. `None` for fewer than two ends or a zero span.
pub(crate) fn qps_windows(ends_ns: &[u64]) -> Option<Result<Vec<f64>, f64>> {
    if ends_ns.len() < 2 {
        return None;
    }
    let mut ends = ends_ns.to_vec();
    ends.sort_unstable();
    let (first, last) = (ends[0], ends[ends.len() - 1]);
    if last == first {
        return None;
    }
    const W: u64 = 1_000_000_000;
    let mut windows = Vec::new();
    let mut window_start = first;
    let mut i = 0usize;
    while window_start + W <= last {
        while i < ends.len() && ends[i] < window_start {
            i += 1;
        }
        let j = ends[i..].partition_point(|&x| x < window_start + W) + i;
        windows.push((j - i) as f64);
        window_start += W;
    }
    if windows.is_empty() {
        return Some(Err(ends.len() as f64 / ((last - first) as f64 / 1e9)));
    }
    Some(Ok(windows))
}

/// Strips the `::…` suffix a conversation id may carry after the trace id.
pub(crate) fn trace_id_of(conversation_id: &str) -> &str {
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
    let mut figures = TraceFigures {
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
                figures.notes.push(format!("trace metadata unavailable ({reason}): *_output_tokens_expected are null; the theoretical cache hit rate is {PROFILE_AIPERF}'s"));
            } else {
                figures.notes.push(format!("trace metadata unavailable ({reason}): theoretical_cache_hit_rate and *_output_tokens_expected are null"));
            }
            figures.meta["reason"] = json!(reason);
        }
        Traces::Available { dataset, name } => {
            let by_id: HashMap<&str, dataset::Trajectory<'_>> = dataset
                .trajectories()
                .map(|figures| (figures.id(), figures))
                .collect();
            let mut expected = Vec::new();
            let mut max_turn: BTreeMap<&str, u64> = BTreeMap::new();
            let mut missing: BTreeMap<&str, ()> = BTreeMap::new();
            for x in ok {
                let tid = trace_id_of(&x.conversation_id);
                let Some(traj) = by_id.get(tid) else {
                    missing.insert(tid, ());
                    continue;
                };
                if let Some(turn_index) = x.turn_index {
                    if let Some(turn) = traj.turn(turn_index as usize) {
                        expected.push(f64::from(turn.output_tokens()));
                    }
                    let max_seen = max_turn.entry(tid).or_insert(0);
                    *max_seen = (*max_seen).max(turn_index);
                }
            }
            let mut hits = dataset::stats::HitCounts::default();
            for (tid, turn_index) in &max_turn {
                hits.add(dataset::stats::theoretical_hits(
                    by_id[tid],
                    *turn_index as usize,
                ));
            }
            figures.expected = Some(expected);
            if hits.blocks > 0 {
                figures.rate = Some(hits.set_rate());
                figures.rate_source = Some(format!(
                    "dataset {name} (block hashes of the turns replayed)"
                ));
                figures.prefix_rate = Some(hits.prefix_rate());
            }
            if !missing.is_empty() {
                figures.notes.push(format!(
                    "{} conversation id(s) of the records are not in dataset {name} (e.g. {:?}); they are left out of the trace-derived figures",
                    missing.len(),
                    missing.keys().next().copied().unwrap_or_default()
                ));
            }
            figures.meta = json!({
                "status": "available",
                "dataset": name,
                "traces_matched": max_turn.len(),
                "traces_missing": missing.len(),
            });
        }
    }
    if let Some(rate) = aiperf_rate {
        figures.rate = Some(rate);
        figures.rate_source = Some(format!("{PROFILE_AIPERF} theoretical_prefix_cache_hit"));
    }
    figures
}

/// The identity figures both layouts derive the same way: concurrency and model (the run's when
/// not given), and TP, EP and DP-attention (summed over prefill and decode on multi-node).
pub(crate) struct Basics {
    pub(crate) conc: Option<u64>,
    pub(crate) model: String,
    pub(crate) tp: u64,
    pub(crate) ep: u64,
    pub(crate) dpa: bool,
}

impl Basics {
    pub(crate) fn of(input: &ReportInput<'_>, notes: &mut Vec<String>) -> Basics {
        let identity = input.identity;
        let conc = identity.conc.or(input.run.and_then(|x| x.concurrency));
        if conc.is_none() {
            notes.push(
                "conc is null: pass --conc (or CONC); run_summary.json has no concurrency".into(),
            );
        }
        let model = if identity.model.is_empty() {
            input.run.and_then(|x| x.model.clone()).unwrap_or_default()
        } else {
            identity.model.clone()
        };
        let (tensor_parallel, expert_parallel, dpa) = match &identity.multinode {
            None => (identity.tp, identity.ep, identity.dp_attention),
            Some(m) => (
                m.prefill_tp + m.decode_tp,
                m.prefill_ep.max(m.decode_ep),
                m.prefill_dp_attention || m.decode_dp_attention,
            ),
        };
        Basics {
            conc,
            model,
            tp: tensor_parallel,
            ep: expert_parallel,
            dpa,
        }
    }
}

/// Computes the report. Pure: the same inputs give the same JSON.
pub(crate) fn compute(input: &ReportInput<'_>) -> BmkReport {
    let mut notes: Vec<String> = Vec::new();
    let mut report = BmkReport::default();
    put_identity(&mut report, input, &mut notes);
    let counts = Counts::of(input);
    report.set("num_requests_total", counts.total);
    report.set("num_requests_successful", counts.ok.len() as u64);
    put_qps(&mut report, &counts.ok, &mut notes);

    // Latencies (s) and interactivity.
    let ok = &counts.ok;
    let col =
        |f: fn(&ProfileRecord) -> Option<f64>| ok.iter().filter_map(|x| f(x)).collect::<Vec<f64>>();
    let ttft = Stats::of(&col(|x| x.ttft_s));
    let e2el = Stats::of(&col(|x| x.e2el_s));
    let itl_v = col(|x| x.itl_s);
    let itl = Stats::of(&itl_v);
    let intvty = Stats::of(&itl_v.iter().map(|x| 1.0 / x).collect::<Vec<_>>());
    put_stats(&mut report, "ttft", ttft);
    put_stats(&mut report, "e2el", e2el);
    put_stats(&mut report, "itl", itl);
    put_stats(&mut report, "tpot", itl);
    put_stats(&mut report, "intvty", intvty);

    // Workload.
    let isl_v = col(|x| x.isl);
    let osl_v = col(|x| x.osl);
    put_stats(&mut report, "input_tokens", Stats::of(&isl_v));
    put_stats(&mut report, "output_tokens_actual", Stats::of(&osl_v));

    // Trace metadata: expected output lengths and the theoretical cache hit rate.
    let traces = trace_figures(input, ok);
    put_stats(
        &mut report,
        "output_tokens_expected",
        traces.expected.as_deref().and_then(Stats::of),
    );
    report.set("theoretical_cache_hit_rate", num(traces.rate));
    if matches!(input.traces, Traces::Available { .. }) {
        report.set("theoretical_prefix_cache_hit_rate", num(traces.prefix_rate));
    }
    notes.extend(traces.notes);

    let server = ServerValues::of(input.server, &mut notes);
    let sums = (isl_v.iter().sum::<f64>(), osl_v.iter().sum::<f64>());
    put_server_totals(&mut report, &server, ok, sums);
    put_throughput(&mut report, input.identity, ok, sums, &mut notes);
    put_additions(&mut report, &counts, &server, itl);
    report.set("server_metric_sources", Value::Object(server.sources));
    report.set("server_metrics_adapter", server.adapter);
    report.set("trace_metadata", traces.meta);
    report.set(
        "theoretical_cache_hit_rate_source",
        traces.rate_source.map_or(Value::Null, Value::from),
    );
    put_run(&mut report, input.run, &mut notes);
    report.set("notes", json!(notes));
    report
}

/// Identity (docs/specs/inferencex-rows.md#flat-keys).
fn put_identity(report: &mut BmkReport, input: &ReportInput<'_>, notes: &mut Vec<String>) {
    let identity = input.identity;
    let Basics {
        conc,
        model,
        tp,
        ep,
        dpa,
    } = Basics::of(input, notes);
    let flag = |b: bool| if b { "true" } else { "false" };
    report.set("hw", identity.hw.clone());
    report.set("conc", conc.map_or(Value::Null, |c| json!(c)));
    report.set("image", identity.image.clone());
    report.set("model", model);
    report.set("infmax_model_prefix", identity.model_prefix.clone());
    report.set("framework", identity.framework.clone());
    report.set("precision", identity.precision.clone());
    report.set("spec_decoding", identity.spec_decoding.clone());
    report.set("disagg", identity.disagg);
    report.set("scenario_type", "agentic-coding");
    report.set("is_multinode", identity.multinode.is_some());
    report.set("tp", tp);
    report.set("ep", ep);
    report.set("dp_attention", flag(dpa));
    report.set("offloading", identity.offloading.clone());
    if let Some(multinode) = &identity.multinode {
        report.set("prefill_num_workers", multinode.prefill_num_workers);
        report.set("prefill_tp", multinode.prefill_tp);
        report.set("prefill_ep", multinode.prefill_ep);
        report.set("prefill_dp_attention", flag(multinode.prefill_dp_attention));
        report.set(
            "num_prefill_gpu",
            multinode.prefill_num_workers * multinode.prefill_tp,
        );
        report.set("decode_num_workers", multinode.decode_num_workers);
        report.set("decode_tp", multinode.decode_tp);
        report.set("decode_ep", multinode.decode_ep);
        report.set("decode_dp_attention", flag(multinode.decode_dp_attention));
        report.set(
            "num_decode_gpu",
            multinode.decode_num_workers * multinode.decode_tp,
        );
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
fn put_qps(report: &mut BmkReport, ok: &[&ProfileRecord], notes: &mut Vec<String>) {
    let ends: Vec<u64> = ok.iter().filter_map(|x| x.end_ns).collect();
    match qps_windows(&ends) {
        Some(Ok(w)) => put_stats(report, "qps", Stats::of(&w)),
        Some(Err(mean)) => {
            put_stats(report, "qps", None);
            report.set("mean_qps", num(Some(mean)));
            notes.push("no full 1-second window of request ends: only mean_qps (requests over the span of ends) is reported".into());
        }
        None => put_stats(report, "qps", None),
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
                let engine_figures = backends::figures(m);
                let flat_keys = FLAT_SERVER_KEYS
                    .iter()
                    .chain(&[("gpu_kv_cache_usage_pct", "kv_cache.gpu_usage_pct")]);
                for (flat, key) in flat_keys {
                    server_vals.insert(flat, engine_figures.get(key));
                    if let Some(src) = engine_figures.source(key) {
                        sources.insert(flat.to_string(), json!(src));
                    }
                }
                if !engine_figures.detection.metric_names.is_empty() {
                    adapter = json!(engine_figures.detection.adapter);
                }
                if engine_figures.detection.is_unknown() && !engine_figures.detection.metric_names.is_empty() {
                    let names = &engine_figures.detection.metric_names;
                    let shown = names.iter().take(40).cloned().collect::<Vec<_>>().join(", ");
                    let more = names.len().saturating_sub(40);
                    notes.push(format!(
                        "server metrics from an unknown engine (none of vLLM, SGLang, TensorRT-LLM, Dynamo, ATOM, llama.cpp): {shown}{}",
                        if more > 0 { format!(" and {more} more") } else { String::new() }
                    ));
                } else {
                    notes.extend(engine_figures.notes.iter().cloned());
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

    fn get(&self, key: &str) -> Option<f64> {
        self.vals.get(key).copied().flatten()
    }
}

/// The server's cache, offload and token figures, with the records' sums (ISL, OSL) standing in for
/// the token totals a server did not export; the records' own cache hit rate.
fn put_server_totals(
    report: &mut BmkReport,
    server: &ServerValues,
    ok: &[&ProfileRecord],
    (isl_sum, osl_sum): (f64, f64),
) {
    let server_value = |k: &str| server.get(k);
    for k in [
        "server_gpu_cache_hit_rate",
        "server_cpu_cache_hit_rate",
        "kv_offload_bytes_gpu_to_cpu",
        "kv_offload_bytes_cpu_to_gpu",
        "kv_offload_time_gpu_to_cpu",
        "kv_offload_time_cpu_to_gpu",
        "cpu_kv_cache_usage_pct",
    ] {
        report.set(k, num(server_value(k)));
    }
    let tok = |v: Option<f64>, fallback: f64| json!(v.unwrap_or(fallback).round() as u64);
    report.set(
        "total_prompt_tokens",
        tok(server_value("total_prompt_tokens"), isl_sum),
    );
    report.set(
        "total_generation_tokens",
        tok(server_value("total_generation_tokens"), osl_sum),
    );
    report.set("total_requests_completed", ok.len() as u64);
    let cache_read: Option<f64> = ok
        .iter()
        .map(|x| x.cache_read_tokens.zip(x.isl).map(|(c, _)| c))
        .sum();
    let all_isl = ok.iter().all(|x| x.isl.is_some());
    report.set(
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
    report: &mut BmkReport,
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
    report.set("input_tput_tps", num(tin));
    report.set("output_tput_tps", num(tout));
    report.set("total_tput_tps", num(ttot));
    report.set("duration_seconds", num(duration));
    report.set("tput_per_gpu", num(per_gpu(ttot)));
    report.set("output_tput_per_gpu", num(per_gpu(tout)));
    report.set("input_tput_per_gpu", num(per_gpu(tin)));
    if gpus == 0 {
        notes.push("the GPU count is 0 (TP, or prefill and decode workers x TP): per-GPU throughputs are null".into());
    }
}

/// Additions beyond InferenceX's schema.
fn put_additions(
    report: &mut BmkReport,
    counts: &Counts<'_>,
    server: &ServerValues,
    itl: Option<Stats>,
) {
    let server_value = |k: &str| server.get(k);
    let (total, ok) = (counts.total, &counts.ok);
    report.set("num_requests_failed", total - ok.len() as u64);
    report.set("num_requests_cancelled", counts.cancelled);
    report.set("num_warmup_requests_excluded", counts.warmup as u64);
    report.set("context_overflow_count", counts.overflows);
    report.set(
        "context_overflow_rate",
        if total == 0 {
            0.0
        } else {
            counts.overflows as f64 / total as f64
        },
    );
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for x in counts.prof.iter().filter(|x| !x.outcome().is_ok()) {
        let kind = x.error.as_ref().map_or("cancelled".into(), |e| {
            e.kind.clone().unwrap_or_else(|| "unknown".into())
        });
        *errors.entry(kind).or_default() += 1;
    }
    report.set("errors_by_type", json!(errors));
    report.set(
        "server_external_cache_hit_rate",
        num(server_value("server_external_cache_hit_rate")),
    );
    report.set(
        "gpu_kv_cache_usage_pct",
        num(server_value("gpu_kv_cache_usage_pct")),
    );
    for stat in ["mean", "p75", "p90", "p95"] {
        let itl_stat = itl.map(|s| s.get(stat));
        report.set(
            format!("{stat}_intvty_at_tpot"),
            num(itl_stat.filter(|x| *x > 0.0).map(|x| 1.0 / x)),
        );
    }
    report.set(
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
fn put_run(report: &mut BmkReport, run: Option<&RunSummary>, notes: &mut Vec<String>) {
    if let Some(run) = run {
        report.set(
            "dataset",
            json!({"alias": run.dataset_alias(), "source": run.dataset_source()}),
        );
        report.set(
            "scenario",
            run.scenario.as_ref().map_or(Value::Null, |s| json!(s)),
        );
        report.set("seed", run.seed.map_or(Value::Null, |s| json!(s)));
        report.set(
            "submission_valid",
            run.submission_valid.map_or(Value::Null, Value::Bool),
        );
        report.set(
            "submission_invalid_reasons",
            json!(run.submission_invalid_reasons),
        );
    } else {
        notes.push(format!(
            "{RUN_SUMMARY} absent: dataset, scenario, seed and submission validity are unknown"
        ));
    }
}

/// The prefix-cache hit the server's counters give over `window` of `log`, by tier: the report's
/// `cache.*` figures by the same rule (`backends`), for the run's cache truth. `None` when no
/// engine's hit counter is in the log.
pub fn counter_hit(
    log: &agentx_metrics::scrape_log::ScrapeLog,
    window: (u64, u64),
) -> Option<agentx_metrics::cache_truth::CounterHit> {
    let doc =
        crate::server_metrics::to_json(log, window, &crate::server_metrics::ExportMeta::default());
    let metrics = ServerMetrics::of_doc(&doc, Path::new(crate::server_metrics::JSON_FILE)).ok()?;
    let figures = backends::figures(&metrics);
    let hit = agentx_metrics::cache_truth::CounterHit {
        device: figures.get("cache.gpu_cache_hit_rate"),
        device_source: figures
            .source("cache.gpu_cache_hit_rate")
            .map(str::to_owned),
        host: figures.get("cache.cpu_cache_hit_rate").filter(|_| {
            figures.source("cache.cpu_cache_hit_rate")
                != figures.source("cache.external_cache_hit_rate")
        }),
        external: figures.get("cache.external_cache_hit_rate"),
        overall: figures.get("cache.overall_cache_hit_rate"),
    };
    (hit.device.is_some() || hit.external.is_some() || hit.overall.is_some()).then_some(hit)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod nested_tests;
