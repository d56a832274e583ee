//! The nested InferenceX result: the AgentX row of InferenceX's strict result contract
//! (docs/specs/inferencex-rows.md#strict-contract; `schemas/inferencex-agentx-row.schema.json`):
//! `result_schema_version`, identity and `num_gpus`, `request_accounting`, `request_metrics{qps,
//! latency, tokens, throughput, cache, stability}` and `server_metrics{...}`, floats rounded to 5
//! decimals.
//!
//! The row is strict: no top-level key the contract does not name (our additions, the trace
//! metadata and the metric definitions, sit inside `request_metrics`, which the contract leaves
//! open; what the report has to say goes to `warnings`), optional keys are left out rather than
//! null, and a required identity fact that is missing fails the report with the flag to give
//! ([`Identity::row_gaps`]). Figures inside `request_metrics` and `server_metrics` are null when
//! unknown; JSON has no NaN, so none can appear.
//!
//! It owns the nested layout only: records, server metrics and identity are parsed by the parent
//! module, the server figures come from [`super::backends`], and the fixes of the flat layout hold
//! here too (failed requests count in `num_requests_total` and in `request_accounting`, never in a
//! latency; counters are summed across series and gauges averaged; an unknown engine gives
//! `adapter: "unknown"` and its metric names instead of an error).
//!
//! Conventions: latencies in seconds; interactivity figures (`intvty`, `e2e_norm_intvty`,
//! `full_response_intvty`) are tokens/s/user with `pXX = 1 / (the pXX of the time per token)`, the
//! slow tail, while `mean` and `std` are over the per-request reciprocals. `e2e_norm_intvty` is
//! per request `OSL / E2EL`; `full_response_itl` is aiperf's `full_response_inter_token_latency`
//! when the record has it, else `(E2EL - TTFT) / (OSL - 1)` for `OSL >= 2`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::backends::{self, Figures};
use super::{
    percentile, qps_windows, trace_figures, BmkReport, ProfileRecord, RecordPhase, ReportError,
    ReportInput, ServerMetrics, TraceFigures, Traces, PROFILE_AIPERF, SERVER_METRICS,
};
use agentx_metrics::stability::{self, Sample};
use agentx_metrics::Outcome;
use agentx_record::dist::{self, Deviation};

/// The version of InferenceX's result contract this row follows (`result_schema_version`).
pub(crate) const RESULT_SCHEMA_VERSION: u64 = 1;

/// The statistics of every nested distribution.
pub(super) const NESTED_STATS: [&str; 6] = ["mean", "p50", "p75", "p90", "p95", "std"];

/// Labels kept when listing a metric series' source (InferenceX's per-source list).
const SOURCE_LABELS: [&str; 5] = [
    "dynamo_component",
    "component",
    "worker_id",
    "dp_rank",
    "engine",
];

/// Rounds every non-integer number to 5 decimals, in place.
pub(super) fn round5(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(number) = n.as_f64() {
                let rounded = (number * 1e5).round() / 1e5;
                *value = serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(round5),
        Value::Object(o) => o.values_mut().for_each(round5),
        _ => {}
    }
}

fn num(value: Option<f64>) -> Value {
    match value {
        Some(x) if x.is_finite() => json!(x),
        _ => Value::Null,
    }
}

fn null_dist() -> Value {
    Value::Object(
        NESTED_STATS
            .iter()
            .map(|s| (s.to_string(), Value::Null))
            .collect(),
    )
}

fn mean_std(values: &[f64]) -> (f64, f64) {
    let mean = dist::mean(values);
    (mean, dist::std(values, mean, Deviation::Population))
}

/// `{mean, p50, p75, p90, p95, std}` of a sample (population std, linear percentiles).
pub(super) fn dist(values: &[f64]) -> Value {
    if values.is_empty() {
        return null_dist();
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    let (mean, std) = mean_std(&sorted);
    let pct = |q: f64| num(percentile(&sorted, q));
    json!({"mean": mean, "p50": pct(50.0), "p75": pct(75.0), "p90": pct(90.0), "p95": pct(95.0), "std": std})
}

/// Interactivity from per-request times per token (s): `pXX = 1 / pXX(time)` (the slow tail),
/// `mean` and `std` over the per-request reciprocals. Non-positive times are left out.
pub(super) fn inverse_dist(times: &[f64]) -> Value {
    let mut sorted: Vec<f64> = times.iter().copied().filter(|x| *x > 0.0).collect();
    if sorted.is_empty() {
        return null_dist();
    }
    sorted.sort_unstable_by(f64::total_cmp);
    let inv: Vec<f64> = sorted.iter().map(|x| 1.0 / x).collect();
    let (mean, std) = mean_std(&inv);
    let pct = |q: f64| num(percentile(&sorted, q).map(|t| 1.0 / t));
    json!({"mean": mean, "p50": pct(50.0), "p75": pct(75.0), "p90": pct(90.0), "p95": pct(95.0), "std": std})
}

/// The full-response ITL of a record (s): aiperf's figure, else `(E2EL - TTFT) / (OSL - 1)`.
pub(super) fn full_response_itl(record: &ProfileRecord) -> Option<f64> {
    if let Some(itl) = record.full_response_itl_s {
        return Some(itl);
    }
    let (e2el, ttft, osl) = (record.e2el_s?, record.ttft_s?, record.osl?);
    (osl >= 2.0 && e2el > ttft).then(|| (e2el - ttft) / (osl - 1.0))
}

fn tf(flag: bool) -> &'static str {
    if flag {
        "true"
    } else {
        "false"
    }
}

/// Sets `obj[path]` (dot-separated), creating objects on the way.
fn put_path(obj: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            obj.insert(path.to_string(), value);
        }
        Some((head, rest)) => {
            let child = obj
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !child.is_object() {
                *child = Value::Object(Map::new());
            }
            if let Value::Object(c) = child {
                put_path(c, rest, value);
            }
        }
    }
}

/// Every key of the nested `server_metrics` sections, null until a figure fills it.
const SERVER_KEYS: [&str; 33] = [
    "cache.gpu_cache_hit_rate",
    "cache.cpu_cache_hit_rate",
    "cache.external_cache_hit_rate",
    "cache.overall_cache_hit_rate",
    "cache.prefix_cache_hits",
    "cache.prefix_cache_queries",
    "cache.external_prefix_cache_hits",
    "cache.external_prefix_cache_queries",
    "cache.cached_tokens_by_source",
    "cache.frontend_cache_hit_rate",
    "cache.router_kv_hit_rate",
    "cache.router_shared_cache_hit_rate",
    "cache.frontend_cached_tokens",
    "cache.frontend_input_tokens",
    "kv_cache.gpu_usage_pct",
    "kv_cache.gpu_usage_peak",
    "kv_cache.gpu_total_tokens",
    "kv_cache.cpu_usage_pct",
    "kv_cache.cpu_used_tokens",
    "kv_cache.cpu_total_tokens",
    "kv_offload.bytes_gpu_to_cpu",
    "kv_offload.bytes_cpu_to_gpu",
    "kv_offload.time_gpu_to_cpu",
    "kv_offload.time_cpu_to_gpu",
    "kv_offload.bandwidth_gpu_to_cpu_bytes_per_second",
    "kv_offload.bandwidth_cpu_to_gpu_bytes_per_second",
    "tokens.prompt_total",
    "tokens.generation_total",
    "tokens.requests_completed",
    "tokens.prompt_by_source.gpu_cache_hit",
    "tokens.prompt_by_source.cpu_or_external_cache_hit",
    "tokens.prompt_by_source.computed",
    "tokens.prompt_by_source.raw",
];

/// Distinct endpoints and kept labels of every series.
fn sources_of(server: &ServerMetrics) -> Vec<Value> {
    let mut seen: BTreeSet<(String, BTreeMap<String, String>)> = BTreeSet::new();
    for metric in server.metrics.values() {
        for s in &metric.series {
            let labels: BTreeMap<String, String> = s
                .labels
                .iter()
                .filter(|(k, _)| SOURCE_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            seen.insert((s.endpoint.clone().unwrap_or_default(), labels));
        }
    }
    seen.into_iter()
        .map(|(url, labels)| json!({"endpoint_url": url, "labels": labels}))
        .collect()
}

/// The `server_metrics` object. `isl_sum`, `osl_sum` and `completed` are the successful records'
/// figures the token totals fall back to.
fn server_section(
    server: Option<&ServerMetrics>,
    isl_sum: f64,
    osl_sum: f64,
    completed: u64,
    notes: &mut Vec<String>,
) -> (Value, Option<Figures>) {
    let mut section = Map::new();
    for k in SERVER_KEYS {
        put_path(&mut section, k, Value::Null);
    }
    let figures = server.map(backends::figures);
    let present = figures
        .as_ref()
        .is_some_and(|f| !f.detection.metric_names.is_empty());
    section.insert("present".into(), json!(present));
    section.insert(
        "adapter".into(),
        match &figures {
            Some(f) if present => json!(f.detection.adapter),
            _ => Value::Null,
        },
    );
    section.insert(
        "metric_count".into(),
        json!(figures
            .as_ref()
            .map_or(0, |f| f.detection.metric_names.len())),
    );
    section.insert(
        "sources".into(),
        json!(server.map(sources_of).unwrap_or_default()),
    );
    let mut figure_sources = Map::new();
    match &figures {
        None => notes.push(format!(
            "{SERVER_METRICS} absent: server_metrics figures are null; tokens.prompt_total and generation_total are the records' ISL and OSL sums"
        )),
        Some(f) => {
            for (k, fig) in f.iter() {
                put_path(&mut section, k, json!(fig.value));
                figure_sources.insert(k.to_string(), json!(fig.source));
            }
            if !f.cached_tokens_by_source.is_empty() {
                put_path(
                    &mut section,
                    "cache.cached_tokens_by_source",
                    json!(f.cached_tokens_by_source),
                );
                figure_sources.insert(
                    "cache.cached_tokens_by_source".into(),
                    json!("sglang:cached_tokens{cache_source}"),
                );
            }
            if f.detection.is_unknown() && present {
                section.insert("metric_names".into(), json!(f.detection.metric_names));
            }
            notes.extend(f.notes.iter().cloned());
            for k in ["cache.gpu_cache_hit_rate", "cache.overall_cache_hit_rate"] {
                if let Some(src) = f.source(k) {
                    notes.push(format!(
                        "server_metrics.{k} ({} adapter) from {src}",
                        f.detection.adapter
                    ));
                }
            }
        }
    }
    let has = |k: &str| figures.as_ref().is_some_and(|f| f.get(k).is_some());
    if !has("tokens.prompt_total") {
        put_path(
            &mut section,
            "tokens.prompt_total",
            json!(isl_sum.round() as u64),
        );
        figure_sources.insert(
            "tokens.prompt_total".into(),
            json!("records (sum of input_sequence_length)"),
        );
    }
    if !has("tokens.generation_total") {
        put_path(
            &mut section,
            "tokens.generation_total",
            json!(osl_sum.round() as u64),
        );
        figure_sources.insert(
            "tokens.generation_total".into(),
            json!("records (sum of output_sequence_length)"),
        );
    }
    put_path(&mut section, "tokens.requests_completed", json!(completed));
    section.insert("figure_sources".into(), Value::Object(figure_sources));
    (Value::Object(section), figures)
}

/// Computes the nested report. Pure: the same inputs give the same JSON. Fails when a fact the
/// strict row requires is missing (the error lists each with the flag that gives it).
pub(crate) fn compute_nested(input: &ReportInput<'_>) -> Result<BmkReport, ReportError> {
    let mut notes: Vec<String> = Vec::new();
    let mut report = BmkReport::default();
    put_identity(&mut report, input, &mut notes)?;
    put_power(&mut report, input, &mut notes);
    let ok = put_accounting(&mut report, input, &mut notes);
    let (traces, (isl_sum, osl_sum)) = put_request_metrics(&mut report, input, &ok, &mut notes);

    // Server metrics.
    let (server, figures) =
        server_section(input.server, isl_sum, osl_sum, ok.len() as u64, &mut notes);
    report.set("server_metrics", server);
    // The server's KV pool (InferenceX mirrors server_metrics.kv_cache.gpu_total_tokens here).
    report.set(
        "kv_cache_pool_tokens",
        figures
            .as_ref()
            .and_then(|f| f.get("kv_cache.gpu_total_tokens"))
            .filter(|p| p.is_finite() && *p >= 0.0)
            .map_or(Value::Null, |p| json!(p.round() as u64)),
    );
    if let Some(Value::Object(request_metrics)) = report.get("request_metrics").cloned() {
        let mut request_metrics = request_metrics;
        request_metrics.insert("trace_metadata".into(), traces.meta.clone());
        request_metrics.insert("metric_definitions".into(), definitions());
        report.set("request_metrics", Value::Object(request_metrics));
    }
    let mut warnings: Vec<String> = input
        .run
        .map(|x| x.submission_invalid_reasons.clone())
        .unwrap_or_default();
    warnings.extend(notes);
    if !warnings.is_empty() {
        report.set("warnings", json!(warnings));
    }
    report.round_floats();
    Ok(report)
}

/// InferenceX's power keys (`power_metric_schema_version` 2) from the run's GPU energy over the
/// profiling window (`--gpu-telemetry`): `power_valid` 1 and the seven whole-deployment figures
/// when the reading is whole and counts the row's `num_gpus` GPUs (InferenceX's
/// `expected_gpu_count_mismatch` otherwise), else `power_valid` 0 with the reasons in the
/// warnings. Nothing when the run read no GPU.
fn put_power(report: &mut BmkReport, input: &ReportInput<'_>, notes: &mut Vec<String>) {
    let Some(energy) = input.run.and_then(|run| run.summary.energy.as_ref()) else {
        return;
    };
    report.set("power_metric_schema_version", json!(2));
    let mut reasons: Vec<String> = energy.reasons.clone();
    let expected = input.identity.num_gpus();
    if energy.gpus != expected {
        reasons.push(format!(
            "expected_gpu_count_mismatch: {} GPUs reported energy, the row's num_gpus is {expected}",
            energy.gpus
        ));
    }
    let valid = energy.power_valid && reasons.is_empty();
    report.set("power_valid", json!(u8::from(valid)));
    if !valid {
        notes.extend(reasons.into_iter().map(|reason| format!("power: {reason}")));
        return;
    }
    for (key, value) in [
        ("avg_power_w", energy.avg_power_w),
        ("avg_total_gpu_power_w", energy.avg_total_gpu_power_w),
        ("total_gpu_energy_j", energy.total_gpu_energy_j),
        (
            "joules_per_successful_query",
            energy.joules_per_successful_query,
        ),
        ("joules_per_input_token", energy.joules_per_input_token),
        ("joules_per_output_token", energy.joules_per_output_token),
        ("joules_per_total_token", energy.joules_per_total_token),
    ] {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            report.set(key, json!(value));
        }
    }
}

/// What the figures mean (`request_metrics.metric_definitions`).
fn definitions() -> Value {
    json!({
        "latency": "seconds; percentiles interpolate linearly (k = (n-1)p/100); std is the population deviation",
        "intvty": "tokens/s/user; pXX = 1/(pXX of the per-request time per token), the slow tail; mean and std over the per-request reciprocals",
        "e2e_norm_intvty": "per request OSL / E2EL, pXX at the slow tail as intvty",
        "full_response_itl": "aiperf's full_response_inter_token_latency, else (E2EL - TTFT) / (OSL - 1) for OSL >= 2",
        "stability": "600 s windows on credit_issued_ns (else request_start_ns) over the successful profiling requests, roots by source_trace_id (else conversation_id); convergence of the cumulative p75/p90 at 300 s checkpoints within 5 % (log ratio) of the final value, confirmed for 1200 s",
        "server_aggregation": "counters summed across series (endpoints, engines); gauges averaged across series",
        "kv_cache_usage": "the server's fraction (0..1) as exported, time-averaged per series",
    })
}

/// `result_schema_version`, the identity, `num_gpus` and the dataset; fails when the strict row
/// cannot be written for want of a fact.
fn put_identity(
    report: &mut BmkReport,
    input: &ReportInput<'_>,
    notes: &mut Vec<String>,
) -> Result<(), ReportError> {
    let identity = input.identity;
    let super::Basics {
        conc,
        model,
        tp,
        ep,
        dpa,
    } = super::Basics::of(input, notes);
    notes.retain(|n| !n.starts_with("conc is null"));
    let gaps = identity.row_gaps(conc, &model);
    if !gaps.is_empty() {
        return Err(ReportError::Row { gaps });
    }
    report.set("result_schema_version", RESULT_SCHEMA_VERSION);
    report.set("hw", identity.hw.clone());
    report.set("conc", conc.map_or(Value::Null, |c| json!(c)));
    report.set("image", identity.image.clone());
    report.set("recipe_fingerprint", identity.recipe_fingerprint.clone());
    report.set("model", model);
    report.set("infmax_model_prefix", identity.model_prefix.clone());
    report.set("framework", identity.framework.clone());
    report.set("precision", identity.precision.clone());
    report.set("spec_decoding", identity.spec_decoding.clone());
    report.set("disagg", identity.disagg);
    report.set("scenario_type", "agentic-coding");
    report.set("is_multinode", identity.multinode.is_some());
    report.set("num_gpus", identity.num_gpus());
    report.set("tp", tp);
    report.set("ep", ep);
    report.set("dp_attention", tf(dpa));
    report.set("kv_offloading", identity.offloading.clone());
    report.set("kv_offload_backend", json!(identity.kv_offload_backend));
    report.set("allocated_cpu_dram_gb", identity.allocated_cpu_dram_gb);
    match &identity.multinode {
        None => {
            report.set("pp", identity.pp);
            report.set("dcp_size", identity.dcp_size);
            report.set("pcp_size", identity.pcp_size);
        }
        Some(m) => {
            report.set("prefill_num_workers", m.prefill_num_workers);
            report.set("prefill_tp", m.prefill_tp);
            report.set("prefill_pp", m.prefill_pp);
            report.set("prefill_dcp_size", m.prefill_dcp_size);
            report.set("prefill_pcp_size", m.prefill_pcp_size);
            report.set("prefill_ep", m.prefill_ep);
            report.set("prefill_dp_attention", tf(m.prefill_dp_attention));
            report.set("num_prefill_gpu", m.prefill_gpus());
            report.set("decode_num_workers", m.decode_num_workers);
            report.set("decode_tp", m.decode_tp);
            report.set("decode_pp", m.decode_pp);
            report.set("decode_dcp_size", m.decode_dcp_size);
            report.set("decode_pcp_size", m.decode_pcp_size);
            report.set("decode_ep", m.decode_ep);
            report.set("decode_dp_attention", tf(m.decode_dp_attention));
            report.set("num_decode_gpu", m.decode_gpus());
            if let (Some(prefill), Some(dataset_json)) = (&identity.prefill_hw, &identity.decode_hw)
            {
                report.set("prefill_hw", prefill.clone());
                report.set("decode_hw", dataset_json.clone());
            }
        }
    }
    if let Some(router) = &identity.router {
        report.set("router", json!(router));
    }
    if let Some(p2p) = &identity.kv_p2p_transfer {
        report.set("kv_p2p_transfer", p2p.clone());
    }
    let dataset = input.aiperf.and_then(|a| a.dataset.clone()).or_else(|| {
        input
            .run
            .map(|run| json!({"alias": run.dataset_alias(), "source": run.dataset_source()}))
    });
    if let Some(dataset_json) = dataset.filter(Value::is_object) {
        report.set("dataset", dataset_json);
    }
    Ok(())
}

/// Request accounting: every line counts; errors (any phase) and warmup rows are dropped. Returns
/// the profiled (successful) records.
fn put_accounting<'a>(
    report: &mut BmkReport,
    input: &ReportInput<'a>,
    notes: &mut Vec<String>,
) -> Vec<&'a ProfileRecord> {
    let records = input.records;
    let mut categories: BTreeMap<String, u64> = BTreeMap::new();
    let mut error_dropped = 0u64;
    let mut warmup_dropped = 0u64;
    let mut ok: Vec<&ProfileRecord> = Vec::new();
    for x in records {
        if !x.outcome().is_ok() {
            error_dropped += 1;
            let category = x
                .error
                .as_ref()
                .map_or("cancelled".into(), super::records::Failure::category);
            *categories.entry(category).or_default() += 1;
        } else if x.phase == RecordPhase::Warmup {
            warmup_dropped += 1;
        } else {
            ok.push(x);
        }
    }
    // Context overflows the record writer did not write (aiperf drops their rows) are requests too.
    let overflow_rows = records
        .iter()
        .filter(|x| x.outcome() == Outcome::ContextOverflow)
        .count() as u64;
    let unwritten = input
        .run
        .map_or(0, |x| x.summary.context_overflows)
        .saturating_sub(overflow_rows);
    if unwritten > 0 {
        *categories.entry("context_overflow".into()).or_default() += unwritten;
        notes.push(format!(
            "{unwritten} context overflow(s) counted by run_summary.json have no row in profile_export.jsonl: they count in num_requests_total and request_accounting.error_categories"
        ));
    }
    let records_total = records.len() as u64;
    report.set("num_requests_total", records_total + unwritten);
    report.set("num_requests_successful", ok.len() as u64);
    report.set(
        "request_accounting",
        json!({
            "records_total": records_total,
            "records_profiled": ok.len(),
            "records_dropped_total": error_dropped + warmup_dropped,
            "records_warmup_dropped": warmup_dropped,
            "records_error_dropped": error_dropped,
            "error_categories": categories,
        }),
    );
    ok
}

/// `request_metrics` (QPS, latency, tokens, throughput, cache); returns the trace figures and the
/// records' ISL and OSL sums for the server section.
fn put_request_metrics(
    report: &mut BmkReport,
    input: &ReportInput<'_>,
    ok: &[&ProfileRecord],
    notes: &mut Vec<String>,
) -> (TraceFigures, (f64, f64)) {
    let identity = input.identity;
    let col =
        |f: fn(&ProfileRecord) -> Option<f64>| ok.iter().filter_map(|x| f(x)).collect::<Vec<f64>>();
    let qps = qps_dist(ok, notes);
    let itl = col(|x| x.itl_s);
    let fr_itl: Vec<f64> = ok.iter().filter_map(|x| full_response_itl(x)).collect();
    let e2e_per_token: Vec<f64> = ok
        .iter()
        .filter_map(|x| match (x.e2el_s, x.osl) {
            (Some(e), Some(o)) if o > 0.0 => Some(e / o),
            _ => None,
        })
        .collect();
    let latency = json!({
        "ttft": dist(&col(|x| x.ttft_s)),
        "e2el": dist(&col(|x| x.e2el_s)),
        "itl": dist(&itl),
        "tpot": dist(&itl),
        "intvty": inverse_dist(&itl),
        "e2e_norm_intvty": inverse_dist(&e2e_per_token),
        "full_response_itl": dist(&fr_itl),
        "full_response_intvty": inverse_dist(&fr_itl),
    });
    let isl_v = col(|x| x.isl);
    let osl_v = col(|x| x.osl);
    let traces = trace_figures(input, ok);
    notes.extend(traces.notes.iter().cloned());
    let tokens = json!({
        "input": dist(&isl_v),
        "output_actual": dist(&osl_v),
        "output_expected": traces.expected.as_deref().map_or_else(null_dist, dist),
    });
    let (isl_sum, osl_sum): (f64, f64) = (isl_v.iter().sum(), osl_v.iter().sum());
    let start = ok.iter().filter_map(|x| x.start_ns).min();
    let end = ok.iter().filter_map(|x| x.end_ns).max();
    let duration = match (start, end) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
        _ => None,
    };
    let tput = |sum: f64| duration.map(|d| sum / d);
    let (tin, tout) = (tput(isl_sum), tput(osl_sum));
    let ttot = tin.zip(tout).map(|(a, b)| a + b);
    let gpus = identity.num_gpus();
    let per_gpu = |v: Option<f64>| v.filter(|_| gpus > 0).map(|x| x / gpus as f64);
    if gpus == 0 {
        notes.push("the GPU count is 0 (TP x PP x PCP, or prefill and decode workers x TP): per-GPU throughputs are null".into());
    }
    let throughput = json!({
        "input": {"tokens_per_second": num(tin)},
        "output": {"tokens_per_second": num(tout)},
        "total": {"tokens_per_second": num(ttot)},
        "duration_seconds": num(duration),
        "per_gpu": {
            "gpus": gpus,
            "input": {"tokens_per_second": num(per_gpu(tin))},
            "output": {"tokens_per_second": num(per_gpu(tout))},
            "total": {"tokens_per_second": num(per_gpu(ttot))},
        },
    });
    let cache = json!({
        "theoretical_cache_hit_rate": num(traces.rate),
        "theoretical_cache_hit_rate_source": traces.rate_source,
    });
    if traces.rate.is_none() && !matches!(input.traces, Traces::Available { .. }) {
        notes.push(format!(
            "request_metrics.cache.theoretical_cache_hit_rate is null: no {PROFILE_AIPERF} theoretical_prefix_cache_hit and no dataset"
        ));
    }
    let stability = stability_of(input, ok, duration, notes);
    report.set(
        "request_metrics",
        json!({
            "qps": qps,
            "latency": latency,
            "tokens": tokens,
            "throughput": throughput,
            "cache": cache,
            "stability": stability,
        }),
    );
    (traces, (isl_sum, osl_sum))
}

/// `request_metrics.stability` of the successful profiling requests, over the run's configured
/// duration (`run_summary.json`), else the measured span of the requests.
fn stability_of(
    input: &ReportInput<'_>,
    ok: &[&ProfileRecord],
    measured_s: Option<f64>,
    notes: &mut Vec<String>,
) -> Value {
    let configured = input.run.and_then(|x| x.benchmark_duration_s);
    if configured.is_none() {
        notes.push(format!(
            "request_metrics.stability: no configured benchmark duration in run_summary.json; the windows and checkpoints span the measured {}",
            measured_s.map_or("nothing (no request has both ends)".into(), |d| format!("{d:.3} s"))
        ));
    }
    let samples: Vec<Sample<'_>> = ok
        .iter()
        .map(|x| Sample {
            at_ns: x.credit_issued_ns.or(x.start_ns),
            root: x.source_trace_id.as_deref().unwrap_or(&x.conversation_id),
            ttft_s: x.ttft_s,
            e2el_s: x.e2el_s,
            itl_s: x.itl_s,
        })
        .collect();
    serde_json::to_value(stability::stability(&samples, configured.or(measured_s)))
        .unwrap_or(Value::Null)
}

/// QPS over the 1-second windows of request ends.
fn qps_dist(ok: &[&ProfileRecord], notes: &mut Vec<String>) -> Value {
    let ends: Vec<u64> = ok.iter().filter_map(|x| x.end_ns).collect();
    match qps_windows(&ends) {
        Some(Ok(w)) => {
            let mut dist_json = dist(&w);
            dist_json["window_seconds"] = json!(1.0);
            dist_json["samples"] = json!(w.len());
            dist_json
        }
        Some(Err(mean)) => {
            notes.push("no full 1-second window of request ends: only qps.mean (requests over the span of ends) is reported".into());
            let mut dist_json = null_dist();
            dist_json["mean"] = num(Some(mean));
            dist_json["window_seconds"] = json!(1.0);
            dist_json["samples"] = json!(0);
            dist_json
        }
        None => {
            let mut dist_json = null_dist();
            dist_json["window_seconds"] = json!(1.0);
            dist_json["samples"] = json!(0);
            dist_json
        }
    }
}
