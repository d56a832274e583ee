//! InferenceX's web app, ported: what it derives from a run's raw files, checked against what the
//! run itself says.
//!
//! The app (SemiAnalysisAI/InferenceX-app, TypeScript) does not trust an aggregate's server
//! numbers: it recomputes them from `server_metrics_export.csv`
//! (`packages/db/src/etl/agentx-server-metrics/{scrape,index,vllm,sglang,trtllm,atom}.ts`), and
//! reads `profile_export.jsonl` for its request timeline (`compute-request-timeline.ts`, version
//! 6) and its headline interactivity (`full-response-interactivity.ts`, with `quantile` and
//! `meanOf` of `queries/agentic-shared.ts`). This module restates those derivations in Rust (its
//! own code, written from the app's rules, not a copy), runs agentx against the simulator speaking
//! each engine family's metric names (`--metric-names vllm|sglang|trtllm|atom`), and asserts the
//! app would publish what agentx's own `run_summary.json` and report say.
//!
//! One known difference, where agentx is right and the app is not: the app reads TensorRT-LLM's
//! counters as `trtllm_prompt_tokens_total`, `trtllm_generation_tokens_total` and
//! `trtllm_prompt_cached_tokens_total`, but a Prometheus parser names a counter's family without
//! `_total` (aiperf's export and agentx's alike: `trtllm_prompt_tokens`), so the app finds no
//! token counters on a TensorRT-LLM run. It then publishes the client's token totals and, for the
//! cache hit rate, the window average of `trtllm_kv_cache_hit_rate`, the engine's rate since it
//! started. The test asserts that the app as written misses the counters, and that agentx's
//! figures are the app's rules applied to the names the export has (`docs/guide/reports.md`, "What InferenceX's app publishes").

use std::collections::{BTreeMap, HashMap};

use agentx::record::{Phase, RequestRecord};
use agentx::sim::{MetricNames, SimConfig};
use serde_json::Value;

use crate::support::{fixture_args, Run, Sim};

// ---------------------------------------------------------------------------------------------
// The CSV section reader (`scrape.ts`).

/// One series of the CSV: its endpoint, labels and numeric statistics.
#[derive(Debug, Clone, Default)]
struct ScrapeSeries {
    endpoint: String,
    labels: BTreeMap<String, String>,
    stats: BTreeMap<String, f64>,
}

/// Metric name to its series, in the CSV's order.
type Scrape = HashMap<String, Vec<ScrapeSeries>>;

/// Columns that are neither a label nor a statistic.
const NOT_LABELS: [&str; 6] = [
    "Endpoint",
    "Type",
    "Metric",
    "Unit",
    "Description",
    "buckets",
];

/// Whether a column holds a statistic: `avg|min|max|std|total|sum|count|rate`, a percentile
/// `pNN[.N][_estimate]`, or `rate_*`, `count_*`, `sum_*`.
fn is_stat_column(column: &str) -> bool {
    if ["avg", "min", "max", "std", "total", "sum", "count", "rate"].contains(&column) {
        return true;
    }
    for prefix in ["rate_", "count_", "sum_"] {
        if let Some(rest) = column.strip_prefix(prefix) {
            return !rest.is_empty() && rest.chars().all(|c| c.is_alphanumeric() || c == '_');
        }
    }
    let Some(rest) = column.strip_prefix('p') else {
        return false;
    };
    let rest = rest.strip_suffix("_estimate").unwrap_or(rest);
    let (whole, fraction) = match rest.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (rest, None),
    };
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    digits(whole) && fraction.is_none_or(digits)
}

/// One CSV line's cells: commas split outside quotes, `""` inside quotes is a quote.
fn csv_cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cell.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

/// JavaScript's `Number(text)` for the decimal numbers a CSV holds: surrounding blanks ignored;
/// `None` for what is not a finite number.
fn js_number(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() {
        return Some(0.0);
    }
    if t.eq_ignore_ascii_case("inf") || t.eq_ignore_ascii_case("nan") || t.contains("infinity") {
        return None;
    }
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// The sections of `server_metrics_export.csv`: a line starting `Endpoint,Type,` opens a section
/// of series; any other `Endpoint,...` header (the info sections) closes it; blank and `#` lines
/// are skipped.
fn parse_scrape_csv(text: &str) -> Scrape {
    let mut scrape = Scrape::new();
    let mut header: Option<Vec<String>> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cells = csv_cells(line);
        if cells[0] == "Endpoint" {
            header = (cells.get(1).map(String::as_str) == Some("Type")).then_some(cells);
            continue;
        }
        let Some(columns) = &header else { continue };
        let mut series = ScrapeSeries {
            endpoint: cells[0].clone(),
            ..ScrapeSeries::default()
        };
        for (i, column) in columns.iter().enumerate() {
            let value = cells.get(i).map_or("", String::as_str);
            if value.is_empty() || NOT_LABELS.contains(&column.as_str()) {
                continue;
            }
            if is_stat_column(column) {
                if let Some(v) = js_number(value) {
                    series.stats.insert(column.clone(), v);
                }
            } else {
                series.labels.insert(column.clone(), value.to_owned());
            }
        }
        let metric = cells.get(2).cloned().unwrap_or_default();
        scrape.entry(metric).or_default().push(series);
    }
    scrape
}

/// Counters: the first of `total`, `sum`, `max`, `avg` a series has.
const COUNTER_KEYS: [&str; 4] = ["total", "sum", "max", "avg"];
/// Gauges combined by their largest value: `max`, else `avg`, else `total`.
const GAUGE_KEYS: [&str; 3] = ["max", "avg", "total"];
/// Gauges combined by their mean: `avg`, else `max`, else `total`.
const GAUGE_AVG_KEYS: [&str; 3] = ["avg", "max", "total"];

fn series_stat(series: &ScrapeSeries, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| series.stats.get(*k).copied())
}

fn series_of<'a>(scrape: &'a Scrape, names: &[&str]) -> impl Iterator<Item = &'a ScrapeSeries> {
    names
        .iter()
        .flat_map(|n| scrape.get(*n).into_iter().flatten())
        .collect::<Vec<_>>()
        .into_iter()
}

/// A counter's total over every series of `names` that `keep` keeps; `None` when none has one.
fn sum_stat(scrape: &Scrape, names: &[&str], keep: impl Fn(&ScrapeSeries) -> bool) -> Option<f64> {
    series_of(scrape, names)
        .filter(|s| keep(s))
        .filter_map(|s| series_stat(s, &COUNTER_KEYS))
        .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
}

fn counter(scrape: &Scrape, names: &[&str]) -> Option<f64> {
    sum_stat(scrape, names, |_| true)
}

/// How a gauge's series are combined.
#[derive(Clone, Copy)]
enum Combine {
    Max,
    Mean,
}

/// A gauge over every series of `names`: the largest value, or the mean of the series'.
fn gauge_stat(scrape: &Scrape, names: &[&str], combine: Combine) -> Option<f64> {
    let keys: &[&str] = match combine {
        Combine::Max => &GAUGE_KEYS,
        Combine::Mean => &GAUGE_AVG_KEYS,
    };
    let values: Vec<f64> = series_of(scrape, names)
        .filter_map(|s| series_stat(s, keys))
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(match combine {
        Combine::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        Combine::Mean => values.iter().sum::<f64>() / values.len() as f64,
    })
}

/// A counter's totals by the value of one label (series without the label left out).
fn sum_by_label(scrape: &Scrape, name: &str, label: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in series_of(scrape, &[name]) {
        if let (Some(key), Some(v)) = (s.labels.get(label), series_stat(s, &COUNTER_KEYS)) {
            *out.entry(key.clone()).or_insert(0.0) += v;
        }
    }
    out
}

fn rate(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 => Some(n / d),
        _ => None,
    }
}

/// A gauge above 1.5 is a percentage.
fn fraction(v: Option<f64>) -> Option<f64> {
    v.map(|x| if x > 1.5 { x / 100.0 } else { x })
}

// ---------------------------------------------------------------------------------------------
// Each engine family's reading (`vllm.ts`, `sglang.ts`, `trtllm.ts`, `atom.ts`).

/// What an engine's parser reads from the scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ScrapeScalars {
    gpu_cache_hit_rate: Option<f64>,
    external_cache_hit_rate: Option<f64>,
    gpu_kv_cache_usage: Option<f64>,
    prompt_tokens: Option<f64>,
    generation_tokens: Option<f64>,
}

fn vllm_scalars(scrape: &Scrape) -> ScrapeScalars {
    let mut gpu = rate(
        counter(scrape, &["vllm:prefix_cache_hits"]),
        counter(scrape, &["vllm:prefix_cache_queries"]),
    );
    let mut external = rate(
        counter(scrape, &["vllm:external_prefix_cache_hits"]),
        counter(scrape, &["vllm:external_prefix_cache_queries"]),
    );
    let by_source = sum_by_label(scrape, "vllm:prompt_tokens_by_source", "source");
    let all: f64 = by_source.values().sum();
    if all > 0.0 {
        if let Some(local) = by_source.get("local_cache_hit") {
            gpu = Some(local / all);
        }
        if let Some(transfer) = by_source.get("external_kv_transfer") {
            external = Some(transfer / all);
        }
    }
    ScrapeScalars {
        gpu_cache_hit_rate: gpu,
        external_cache_hit_rate: external,
        gpu_kv_cache_usage: fraction(gauge_stat(
            scrape,
            &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
            Combine::Max,
        )),
        prompt_tokens: counter(scrape, &["vllm:prompt_tokens"]),
        generation_tokens: counter(scrape, &["vllm:generation_tokens"]),
    }
}

fn sglang_scalars(scrape: &Scrape) -> ScrapeScalars {
    let prompt = counter(scrape, &["sglang:prompt_tokens"]);
    let cached = sum_by_label(scrape, "sglang:cached_tokens", "cache_source");
    ScrapeScalars {
        gpu_cache_hit_rate: rate(cached.get("device").copied(), prompt),
        external_cache_hit_rate: rate(cached.get("host").copied(), prompt),
        gpu_kv_cache_usage: fraction(gauge_stat(scrape, &["sglang:token_usage"], Combine::Max)),
        prompt_tokens: prompt,
        generation_tokens: counter(scrape, &["sglang:generation_tokens"]),
    }
}

/// TensorRT-LLM under the counter names `counters` gives: the app's own (`..._total`), or the
/// names the export has.
fn trtllm_scalars(scrape: &Scrape, counters: [&str; 3]) -> ScrapeScalars {
    let [prompt_name, generation_name, cached_name] = counters;
    let prompt = counter(scrape, &[prompt_name]);
    ScrapeScalars {
        gpu_cache_hit_rate: fraction(gauge_stat(
            scrape,
            &["trtllm_kv_cache_hit_rate"],
            Combine::Mean,
        ))
        .or_else(|| rate(counter(scrape, &[cached_name]), prompt)),
        external_cache_hit_rate: None,
        gpu_kv_cache_usage: fraction(gauge_stat(
            scrape,
            &["trtllm_kv_cache_utilization"],
            Combine::Max,
        )),
        prompt_tokens: prompt,
        generation_tokens: counter(scrape, &[generation_name]),
    }
}

/// The app's TensorRT-LLM counter names.
const TRTLLM_APP_NAMES: [&str; 3] = [
    "trtllm_prompt_tokens_total",
    "trtllm_generation_tokens_total",
    "trtllm_prompt_cached_tokens_total",
];
/// The same counters as a Prometheus parser names them (aiperf's export, agentx's).
const TRTLLM_EXPORT_NAMES: [&str; 3] = [
    "trtllm_prompt_tokens",
    "trtllm_generation_tokens",
    "trtllm_prompt_cached_tokens",
];

/// ATOM's names in every spelling the app accepts: `atom:` and Atomesh's `atom_`, with and
/// without `_total`.
fn atom_names(stem: &str) -> [String; 4] {
    [
        format!("atom:{stem}"),
        format!("atom_{stem}"),
        format!("atom:{stem}_total"),
        format!("atom_{stem}_total"),
    ]
}

fn atom_counter(scrape: &Scrape, stem: &str) -> Option<f64> {
    let names = atom_names(stem);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    counter(scrape, &names)
}

fn atom_scalars(scrape: &Scrape) -> ScrapeScalars {
    let full = atom_counter(scrape, "prefix_cache_full_tokens");
    ScrapeScalars {
        gpu_cache_hit_rate: rate(atom_counter(scrape, "prefix_cache_cached_tokens"), full),
        external_cache_hit_rate: rate(atom_counter(scrape, "lmcache_loaded_tokens"), full),
        gpu_kv_cache_usage: fraction(gauge_stat(
            scrape,
            &["atom:kv_cache_usage_ratio", "atom_kv_cache_usage_ratio"],
            Combine::Max,
        )),
        prompt_tokens: atom_counter(scrape, "prompt_tokens"),
        generation_tokens: atom_counter(scrape, "generation_tokens"),
    }
}

/// The AgentX server metrics the app publishes for an aggregated (not disaggregated) run
/// (`deriveAgentxServerMetrics` in `index.ts`, its server-log pool aside).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Published {
    server_gpu_cache_hit_rate: Option<f64>,
    server_external_cache_hit_rate: Option<f64>,
    gpu_kv_cache_usage_pct: Option<f64>,
    total_prompt_tokens: Option<f64>,
    total_generation_tokens: Option<f64>,
}

/// The client's token totals the app falls back to: mean tokens × completed requests.
#[derive(Debug, Clone, Copy)]
struct ClientTokens {
    prompt: Option<f64>,
    generation: Option<f64>,
}

fn publish(scrape: &Scrape, whole: ScrapeScalars, client: ClientTokens) -> Published {
    // A rate above 1: the hit and query counters' windows do not line up.
    let hit_rate = |v: Option<f64>| v.filter(|x| *x <= 1.0);
    let tokens = |frontend: &str, engine: Option<f64>, client: Option<f64>| {
        counter(scrape, &[frontend])
            .or(engine)
            .or(client)
            .map(f64::round)
    };
    Published {
        server_gpu_cache_hit_rate: hit_rate(whole.gpu_cache_hit_rate),
        server_external_cache_hit_rate: hit_rate(whole.external_cache_hit_rate),
        gpu_kv_cache_usage_pct: whole.gpu_kv_cache_usage.or_else(|| {
            fraction(gauge_stat(
                scrape,
                &["dynamo_component_gpu_cache_usage_percent"],
                Combine::Max,
            ))
        }),
        total_prompt_tokens: tokens(
            "dynamo_frontend_input_sequence_tokens",
            whole.prompt_tokens,
            client.prompt,
        ),
        total_generation_tokens: tokens(
            "dynamo_frontend_output_tokens",
            whole.generation_tokens,
            client.generation,
        ),
    }
}

#[test]
fn the_section_reader_skips_info_sections_and_reads_stats_and_labels() {
    let csv = "Endpoint,Type,Metric,Unit,model_name,cache_source,total,p99.9_estimate,rate_per_s,Description\n\
               http://a/metrics,counter,sglang:cached_tokens,tokens,m,device,120,,2.5,\"cached, by source\"\n\
               http://a/metrics,counter,sglang:cached_tokens,tokens,m,host,30,,,x\n\
               \n\
               Endpoint,Metric,Key,Value,Description\n\
               http://a/metrics,sglang:info,version,0.5,not a series\n\
               # a comment\r\n\
               Endpoint,Type,Metric,Unit,engine,avg,max,Description\n\
               http://a/metrics,gauge,vllm:kv_cache_usage_perc,ratio,0,40,87.5,pct\n\
               http://b/metrics,gauge,vllm:kv_cache_usage_perc,ratio,1,0.2,0.3,frac\n";
    let scrape = parse_scrape_csv(csv);
    assert!(!scrape.contains_key("sglang:info"));
    let cached = &scrape["sglang:cached_tokens"];
    assert_eq!(cached.len(), 2);
    assert_eq!(cached[0].labels["cache_source"], "device");
    assert_eq!(cached[0].endpoint, "http://a/metrics");
    assert_eq!(cached[0].stats["rate_per_s"], 2.5);
    assert!(!cached[0].labels.contains_key("Description"));
    let by = sum_by_label(&scrape, "sglang:cached_tokens", "cache_source");
    assert_eq!((by["device"], by["host"]), (120.0, 30.0));
    // The largest value is 87.5, a percentage.
    let usage = gauge_stat(&scrape, &["vllm:kv_cache_usage_perc"], Combine::Max);
    assert_eq!(fraction(usage), Some(0.875));
    assert_eq!(
        gauge_stat(&scrape, &["vllm:kv_cache_usage_perc"], Combine::Mean),
        Some(20.1)
    );
    assert!(is_stat_column("p99.9_estimate") && is_stat_column("count_per_s"));
    assert!(!is_stat_column("model_name") && !is_stat_column("p") && !is_stat_column("p9x"));
}

// ---------------------------------------------------------------------------------------------
// The timeline (`compute-request-timeline.ts`) and the interactivity
// (`full-response-interactivity.ts`) from `profile_export.jsonl`.

/// One request of the timeline. JSON integers are read as doubles, as JavaScript reads them.
#[derive(Debug, Clone, PartialEq)]
struct TimelineRequest {
    conversation: String,
    replay: Option<usize>,
    turn: f64,
    worker: String,
    depth: f64,
    phase: String,
    credit: f64,
    start: f64,
    ack: Option<f64>,
    end: f64,
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    isl: Option<f64>,
    osl: Option<f64>,
    cancelled: bool,
}

/// A number, or the `value` of a `{value, unit}` metric.
fn read_num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.get("value").and_then(Value::as_f64))
        .filter(|x| x.is_finite())
}

/// The replay a record belongs to: `root_correlation_id`, else `x_correlation_id`.
fn replay_key(md: &Value) -> Option<&str> {
    let key = md
        .get("root_correlation_id")
        .and_then(Value::as_str)
        .or_else(|| md.get("x_correlation_id").and_then(Value::as_str))?;
    (!key.is_empty()).then_some(key)
}

/// The timeline of a profile: every record with a start (`credit_issued_ns`, else
/// `request_start_ns`) and an end, relative to the earliest start, in start order; replays ranked
/// by their first start.
fn timeline(jsonl: &str) -> Vec<TimelineRequest> {
    let rows: Vec<Value> = jsonl
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let bounds = |md: &Value| {
        let ns = |k: &str| md.get(k).and_then(Value::as_f64);
        Some((
            ns("credit_issued_ns").or(ns("request_start_ns"))?,
            ns("request_end_ns")?,
        ))
    };
    let mut origin = f64::INFINITY;
    let mut first: HashMap<&str, f64> = HashMap::new();
    for row in &rows {
        let md = &row["metadata"];
        let Some((start, _)) = bounds(md) else {
            continue;
        };
        origin = origin.min(start);
        if let Some(key) = replay_key(md) {
            let e = first.entry(key).or_insert(start);
            *e = e.min(start);
        }
    }
    let mut ranked: Vec<(&str, f64)> = first.into_iter().collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(b.0)));
    let rank: HashMap<&str, usize> = ranked
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (*k, i))
        .collect();
    let mut out = Vec::new();
    for row in &rows {
        let (md, m) = (&row["metadata"], &row["metrics"]);
        let Some((credit, end)) = bounds(md) else {
            continue;
        };
        let ns = |k: &str| md.get(k).and_then(Value::as_f64);
        let text = |k: &str| {
            md.get(k)
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned()
        };
        out.push(TimelineRequest {
            conversation: text("conversation_id"),
            replay: replay_key(md).and_then(|k| rank.get(k).copied()),
            turn: ns("turn_index").unwrap_or(0.0),
            worker: text("worker_id"),
            depth: ns("agent_depth").unwrap_or(0.0),
            phase: text("benchmark_phase"),
            credit: credit - origin,
            start: ns("request_start_ns").unwrap_or(credit) - origin,
            ack: ns("request_ack_ns").map(|a| a - origin),
            end: end - origin,
            ttft_ms: read_num(&m["time_to_first_token"]),
            tpot_ms: read_num(&m["time_per_output_token"])
                .or_else(|| read_num(&m["inter_token_latency"])),
            isl: read_num(&m["input_sequence_length"]),
            osl: read_num(&m["output_sequence_length"]),
            cancelled: md["was_cancelled"] == Value::Bool(true),
        });
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// A `{value, unit}` time in seconds (a bare number or an unknown unit: milliseconds).
fn seconds(v: &Value) -> Option<f64> {
    let x = read_num(v)?;
    let unit = v.get("unit").and_then(Value::as_str).unwrap_or("ms");
    Some(match unit.to_lowercase().as_str() {
        "ns" | "nanosecond" | "nanoseconds" => x / 1e9,
        "us" | "µs" | "microsecond" | "microseconds" => x / 1e6,
        "s" | "sec" | "second" | "seconds" => x,
        _ => x / 1e3,
    })
}

/// One record's full-response ITL in seconds per token: error-free profiling records only; the
/// exported figure when positive, else the decode time (`full_decode_duration`, else the request's
/// span less TTFT, else `http_req_duration` less TTFT) over `OSL - 1`.
fn full_response_itl(row: &Value) -> Option<f64> {
    if !row["error"].is_null() && row["error"] != Value::Bool(false) {
        return None;
    }
    let (md, m) = (&row["metadata"], &row["metrics"]);
    if let Some(phase) = md.get("benchmark_phase").and_then(Value::as_str) {
        if !phase.is_empty() && phase != "profiling" {
            return None;
        }
    }
    if let Some(v) = seconds(&m["full_response_inter_token_latency"]).filter(|v| *v > 0.0) {
        return Some(v);
    }
    let osl = read_num(&m["output_sequence_length"]).filter(|o| *o >= 2.0)?;
    let decode = match seconds(&m["full_decode_duration"]) {
        Some(d) => d,
        None => {
            let ttft = seconds(&m["time_to_first_token"])?;
            let ns = |k: &str| md.get(k).and_then(Value::as_f64);
            match (ns("request_start_ns"), ns("request_end_ns")) {
                (Some(a), Some(b)) => (b - a) / 1e9 - ttft,
                _ => seconds(&m["http_req_duration"])? - ttft,
            }
        }
    };
    (decode.is_finite() && decode > 0.0).then(|| decode / (osl - 1.0))
}

/// The app's percentile: linear between the ranks around `(n - 1)·q` of ascending values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let pos = (n - 1) as f64 * q;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            if lo == hi {
                sorted[lo]
            } else {
                sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
            }
        }
    }
}

fn mean_of(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// The population standard deviation, 0 below two values.
fn population_std(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let mean = mean_of(values);
    let squares: Vec<f64> = values.iter().map(|v| (v - mean) * (v - mean)).collect();
    mean_of(&squares).sqrt()
}

/// What the app publishes of a profile: `{stat}_itl` and `{stat}_intvty` for mean, median, p75,
/// p90, p95, p99, p99.9, and `std_itl`, `std_intvty`, keyed as the app keys them.
fn interactivity(jsonl: &str) -> BTreeMap<String, f64> {
    let samples: Vec<f64> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|row| full_response_itl(&row))
        .filter(|s| s.is_finite() && *s > 0.0)
        .collect();
    let mut out = BTreeMap::new();
    if samples.is_empty() {
        return out;
    }
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let stats = [
        ("mean", mean_of(&sorted)),
        ("median", quantile(&sorted, 0.5)),
        ("p75", quantile(&sorted, 0.75)),
        ("p90", quantile(&sorted, 0.9)),
        ("p95", quantile(&sorted, 0.95)),
        ("p99", quantile(&sorted, 0.99)),
        ("p99.9", quantile(&sorted, 0.999)),
    ];
    for (stat, itl) in stats {
        out.insert(format!("{stat}_itl"), itl);
        out.insert(format!("{stat}_intvty"), 1.0 / itl);
    }
    out.insert("std_itl".into(), population_std(&samples));
    let reciprocals: Vec<f64> = samples.iter().map(|s| 1.0 / s).collect();
    out.insert("std_intvty".into(), population_std(&reciprocals));
    out.insert("n".into(), samples.len() as f64);
    out
}

#[test]
fn the_interactivity_port_follows_the_apps_rules() {
    let row = |phase: &str, error: &str, metrics: &str| {
        format!(
            r#"{{"metadata":{{"benchmark_phase":"{phase}","request_start_ns":1000000000,"request_end_ns":1500000000}},"metrics":{metrics},"error":{error}}}"#
        )
    };
    let jsonl = [
        row("profiling", "null", r#"{"full_response_inter_token_latency":{"value":40,"unit":"ms"}}"#),
        row("profiling", "null", r#"{"full_response_inter_token_latency":{"value":0.01,"unit":"s"}}"#),
        // Derived: (0.5 s - 0.1 s) / (21 - 1) = 0.02 s.
        row("profiling", "null", r#"{"time_to_first_token":{"value":100,"unit":"ms"},"output_sequence_length":{"value":21}}"#),
        row("warmup", "null", r#"{"full_response_inter_token_latency":{"value":5,"unit":"ms"}}"#),
        row("profiling", r#"{"code":500}"#, r#"{"full_response_inter_token_latency":{"value":5,"unit":"ms"}}"#),
        row("profiling", "null", r#"{"output_sequence_length":{"value":1}}"#),
    ]
    .join("\n");
    let f = interactivity(&jsonl);
    assert_eq!(f["n"], 3.0);
    assert!((f["median_itl"] - 0.02).abs() < 1e-15);
    // (3 - 1)·0.9 = 1.8 between 0.02 and 0.04.
    assert!((f["p90_itl"] - 0.036).abs() < 1e-15);
    assert!((f["p90_intvty"] - 1.0 / 0.036).abs() < 1e-9);
    assert!((f["mean_intvty"] - 1.0 / (0.07 / 3.0)).abs() < 1e-9);
    // 1/ITL: 25, 100, 50.
    let m = 175.0 / 3.0;
    let var = ((25.0 - m) * (25.0 - m) + (100.0 - m) * (100.0 - m) + (50.0 - m) * (50.0 - m)) / 3.0;
    assert!((f["std_intvty"] - f64::sqrt(var)).abs() < 1e-9);
    // The app's percentile is agentx's kernel.
    for q in [0.5, 0.75, 0.9, 0.95, 0.99, 0.999] {
        let v = [0.01, 0.02, 0.04, 0.5, 0.7];
        let ours = agentx::metrics::dist::percentile(&v, q * 100.0).unwrap();
        assert!((quantile(&v, q) - ours).abs() <= 1e-15 * ours, "q {q}");
    }
}

// ---------------------------------------------------------------------------------------------
// Runs against the simulator in each engine family.

/// A short agentx-mvp replay of the fixture corpus against a simulator speaking `names`, its
/// server scraped every 0.2 s.
fn run_against(names: MetricNames) -> Run {
    let mut cfg = SimConfig::h200();
    cfg.metric_names = names;
    if let agentx::sim::Timing::Modeled(m) = &mut cfg.timing {
        m.speed = 8.0;
    }
    cfg.natural_output_tokens = 48;
    let sim = Sim::start(cfg);
    let mut args = fixture_args("run", &sim.url());
    // The realtime block every second, its `srv` row among it.
    let at = args.iter().position(|a| a == "--stats-interval").unwrap();
    args[at + 1] = "1".into();
    args.extend(
        [
            "--concurrency",
            "4",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
        ]
        .map(str::to_owned),
    );
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &args,
        &[("AIPERF_SERVER_METRICS_COLLECTION_INTERVAL", "0.2")],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    run
}

/// `agentx-host report DIR`: the nested row of the run.
fn nested_report(run: &Run) -> Value {
    let out = crate::support::agentx_command(run.dir.path(), crate::row_contract::ROW_IDENTITY)
        .args(["report", run.artifacts().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `a` and `b` agree to the row's 5 decimals.
fn close5(a: Option<f64>, b: Option<f64>, what: &str) {
    close_within(a, b, 6e-6, what);
}

/// `a` and `b` agree within `tolerance`.
fn close_within(a: Option<f64>, b: Option<f64>, tolerance: f64, what: &str) {
    match (a, b) {
        (Some(x), Some(y)) => assert!((x - y).abs() <= tolerance, "{what}: app {x}, agentx {y}"),
        _ => panic!("{what}: app {a:?}, agentx {b:?}"),
    }
}

/// The server figures the app derives from the CSV equal agentx's report.
fn assert_server_figures(names: MetricNames, run: &Run, row: &Value) {
    let csv = std::fs::read_to_string(run.artifacts().join("server_metrics_export.csv")).unwrap();
    let scrape = parse_scrape_csv(&csv);
    let sm = &row["server_metrics"];
    let agentx = |path: &str| sm.pointer(path).and_then(Value::as_f64);
    let rm = &row["request_metrics"];
    let completed = row["request_accounting"]["records_profiled"].as_f64();
    let mean = |path: &str| rm.pointer(path).and_then(Value::as_f64);
    let client = ClientTokens {
        prompt: mean("/tokens/input/mean")
            .zip(completed)
            .map(|(m, n)| m * n),
        generation: mean("/tokens/output_actual/mean")
            .zip(completed)
            .map(|(m, n)| m * n),
    };
    let whole = match names {
        MetricNames::Vllm => vllm_scalars(&scrape),
        MetricNames::Sglang => sglang_scalars(&scrape),
        MetricNames::Atom => atom_scalars(&scrape),
        MetricNames::Trtllm => {
            // The app as written finds none of the counters: a parser names them without `_total`.
            let as_written = trtllm_scalars(&scrape, TRTLLM_APP_NAMES);
            assert_eq!(
                (as_written.prompt_tokens, as_written.generation_tokens),
                (None, None),
                "the export names TensorRT-LLM's counters without _total"
            );
            assert!(scrape.contains_key("trtllm_prompt_tokens"));
            // The gauge comes first in the app: the engine's rate since it started, averaged.
            assert!(as_written.gpu_cache_hit_rate.is_some());
            eprintln!(
                "trtllm as the app reads it: gpu cache hit rate {:?} (the gauge), token totals from the client",
                as_written.gpu_cache_hit_rate
            );
            // agentx: the app's rules on the names the export has, the counters ahead of the gauge.
            let mut exported = trtllm_scalars(&scrape, TRTLLM_EXPORT_NAMES);
            exported.gpu_cache_hit_rate = rate(
                counter(&scrape, &["trtllm_prompt_cached_tokens"]),
                exported.prompt_tokens,
            );
            exported
        }
    };
    assert!(
        whole.prompt_tokens.is_some(),
        "{}: no prompt counter",
        names.name()
    );
    let app = publish(&scrape, whole, client);
    let family = names.name();
    assert_eq!(sm["adapter"], family);
    close5(
        app.server_gpu_cache_hit_rate,
        agentx("/cache/gpu_cache_hit_rate"),
        &format!("{family} gpu cache hit rate"),
    );
    assert!(
        app.server_gpu_cache_hit_rate.unwrap() > 0.0,
        "{family}: a replay of a corpus hits"
    );
    // No external tier in the simulator: vLLM's by-source counter says 0 of the prompt tokens came
    // from one, the other families have no such counter.
    if app.server_external_cache_hit_rate.is_some() {
        close5(
            app.server_external_cache_hit_rate,
            agentx("/cache/external_cache_hit_rate"),
            &format!("{family} external cache hit rate"),
        );
    } else {
        assert_eq!(agentx("/cache/external_cache_hit_rate"), None, "{family}");
    }
    assert!(
        app.server_external_cache_hit_rate.is_none_or(|r| r == 0.0),
        "{family}"
    );
    assert_eq!(
        app.total_prompt_tokens,
        agentx("/tokens/prompt_total"),
        "{family} prompt tokens"
    );
    assert_eq!(
        app.total_generation_tokens,
        agentx("/tokens/generation_total"),
        "{family} generation tokens"
    );
    // The CSV writes a gauge to 4 decimals (as aiperf's `_format_number` does), the row to 5.
    close_within(
        app.gpu_kv_cache_usage_pct,
        agentx("/kv_cache/gpu_usage_peak"),
        5e-5 + 6e-6,
        &format!("{family} peak KV usage"),
    );
    assert!(app.gpu_kv_cache_usage_pct.unwrap() > 0.0, "{family}");
    eprintln!("{family}: {app:?}");
}

/// The interactivity the app publishes from `profile_export.jsonl` equals the run summary's.
fn assert_interactivity(run: &Run, row: &Value) {
    let jsonl = std::fs::read_to_string(run.artifacts().join("profile_export.jsonl")).unwrap();
    let app = interactivity(&jsonl);
    let summary = run.summary();
    let fr = &summary["summary"]["full_response"];
    assert_eq!(fr["requests"].as_f64(), Some(app["n"]), "{fr}");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
    for (stat, ours) in [
        ("mean", "mean"),
        ("median", "p50"),
        ("p75", "p75"),
        ("p90", "p90"),
        ("p95", "p95"),
        ("p99", "p99"),
        ("p99.9", "p99.9"),
        ("std", "std"),
    ] {
        let itl = fr["itl_s"][ours].as_f64().unwrap();
        let intvty = fr["tokens_per_s_per_user"][ours].as_f64().unwrap();
        assert!(
            close(app[&format!("{stat}_itl")], itl),
            "{stat} itl: app {} vs {itl}",
            app[&format!("{stat}_itl")]
        );
        assert!(
            close(app[&format!("{stat}_intvty")], intvty),
            "{stat} intvty: app {} vs {intvty}",
            app[&format!("{stat}_intvty")]
        );
    }
    eprintln!(
        "interactivity over {} requests: p90 {:.2}, p99.9 {:.2}, mean {:.2}, std {:.2} tokens/s/user",
        app["n"], app["p90_intvty"], app["p99.9_intvty"], app["mean_intvty"], app["std_intvty"]
    );
    // The report page shows them: the p99.9 interactivity as its table writes it.
    let page = std::fs::read_to_string(run.artifacts().join("report.html")).unwrap();
    let p99_9 = format!(
        "{:.2}",
        fr["tokens_per_s_per_user"]["p99.9"].as_f64().unwrap()
    );
    assert!(page.contains("As InferenceX publishes it") && page.contains(&p99_9));
    // The slow-tail p90 is the row's `full_response_intvty.p90` too.
    let row_p90 = row["request_metrics"]["latency"]["full_response_intvty"]["p90"].as_f64();
    close5(
        Some(app["p90_intvty"]),
        row_p90,
        "full-response interactivity p90",
    );
}

/// The live `srv` row reads the family's names: the cache hit rate, KV usage and token throughput.
fn assert_live_row(names: MetricNames, run: &Run) {
    let log = run.stderr();
    let rows: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("srv  prefix_cache_hit="))
        .collect();
    let known = |row: &str, field: &str| {
        row.split_whitespace()
            .find_map(|w| w.strip_prefix(field))
            .is_some_and(|v| v != "-" && !v.starts_with("-/"))
    };
    assert!(
        rows.iter()
            .any(|r| ["prefix_cache_hit=", "kv_usage=", "tput_in_srv="]
                .iter()
                .all(|f| known(r, f))),
        "{}: {rows:?}",
        names.name()
    );
}

/// The timeline the app draws holds every exported record, on the records' own clock.
fn assert_timeline(run: &Run) {
    let jsonl = std::fs::read_to_string(run.artifacts().join("profile_export.jsonl")).unwrap();
    let t = timeline(&jsonl);
    let records: Vec<RequestRecord> = run
        .records()
        .into_iter()
        .filter(|r| !r.context_overflow)
        .collect();
    assert_eq!(t.len(), records.len());
    assert_eq!(t.iter().map(|x| x.credit).reduce(f64::min), Some(0.0));
    let first_intended = records.iter().map(|r| r.intended_ns).min().unwrap();
    // A recycled trace's turns share (trace, turn, phase): a request matches one of them.
    let mut by_request: HashMap<(String, u64, &str), Vec<&RequestRecord>> = HashMap::new();
    for r in &records {
        let phase = if r.phase == Phase::Warmup {
            "warmup"
        } else {
            "profiling"
        };
        by_request
            .entry((r.trace_id.clone(), u64::from(r.turn), phase))
            .or_default()
            .push(r);
    }
    // JavaScript doubles hold unix nanoseconds to about 256 ns.
    let near = |a: f64, b: u64| (a - b as f64).abs() <= 1024.0;
    for x in &t {
        assert!(
            x.replay.is_some() && x.worker.starts_with("worker_"),
            "{x:?}"
        );
        assert!(x.credit <= x.start && x.start <= x.end, "{x:?}");
        assert!(x.isl.is_some() && !x.cancelled, "{x:?}");
        assert!(
            x.ttft_ms.is_some_and(|v| v > 0.0) && x.ack.is_some(),
            "{x:?}"
        );
        assert_eq!(x.depth, 0.0);
        let key = (x.conversation.clone(), x.turn as u64, x.phase.as_str());
        let candidates = by_request.get(&key).map_or(&[][..], Vec::as_slice);
        let same = candidates.iter().find(|r| {
            near(x.credit, r.intended_ns - first_intended)
                && near(x.end - x.start, r.end_ns - r.send_ns)
        });
        let r = same.unwrap_or_else(|| panic!("no record of {x:?}"));
        assert_eq!(x.osl, Some(r.osl as f64));
        assert_eq!(x.isl, Some(r.isl as f64));
        if r.osl >= 2 {
            assert!(x.tpot_ms.is_some_and(|v| v > 0.0), "{x:?}");
        }
    }
}

/// Every name of an engine's row in the engine table (what the live `srv` row, the sweep's idle
/// wait and the plot read) is on the simulator's page of that family, with the type it has there.
#[test]
fn the_engine_table_reads_every_family_the_simulator_speaks() {
    use agentx::metrics::engines::{Backend, HitRate, ENGINES};
    use agentx::metrics::prometheus::{self, MetricType};
    for (names, backend) in [
        (MetricNames::Vllm, Backend::Vllm),
        (MetricNames::Sglang, Backend::Sglang),
        (MetricNames::Trtllm, Backend::TrtLlm),
        (MetricNames::Atom, Backend::Atom),
    ] {
        let mut cfg = SimConfig::max();
        cfg.metric_names = names;
        cfg.engines = 2;
        let sim = Sim::start(cfg);
        let page = sim.metrics_text();
        let families = prometheus::parse(&page).unwrap_or_else(|e| panic!("{}: {e}", names.name()));
        let kind = |name: &str| families.iter().find(|f| f.name == name).map(|f| f.kind);
        let row = ENGINES.iter().find(|e| e.backend == backend).unwrap();
        let gauges = [row.running, row.waiting, &row.kv_usage[..1]].concat();
        for name in gauges {
            assert_eq!(
                kind(name),
                Some(MetricType::Gauge),
                "{}: {name}\n{page}",
                names.name()
            );
        }
        // The first hit rate the engine table tries is the one the simulator's page answers.
        let hit_counters: Vec<&str> = match row.hit_rate.first().copied() {
            Some(HitRate::Ratio { hits, of }) => vec![hits, of],
            Some(HitRate::Share { metric, .. }) => vec![metric],
            other => panic!("{}: no hit rate of counters: {other:?}", names.name()),
        };
        let counters = hit_counters
            .into_iter()
            .chain([row.prompt_tokens[0], row.generation_tokens.unwrap()]);
        for name in counters {
            assert_eq!(
                kind(name),
                Some(MetricType::Counter),
                "{}: {name}\n{page}",
                names.name()
            );
            assert!(
                page.contains(&format!("# TYPE {name}_total counter")),
                "{name}"
            );
        }
        // Nothing of another family.
        for other in Backend::ALL.into_iter().filter(|b| *b != backend) {
            assert!(
                families.iter().all(|f| !other.owns(&f.name)),
                "{}",
                other.name()
            );
        }
    }
}

#[test]
fn the_apps_numbers_are_the_runs_own_in_every_engine_family() {
    for names in [
        MetricNames::Vllm,
        MetricNames::Sglang,
        MetricNames::Trtllm,
        MetricNames::Atom,
    ] {
        let run = run_against(names);
        let row = nested_report(&run);
        assert_server_figures(names, &run, &row);
        assert_interactivity(&run, &row);
        assert_timeline(&run);
        assert_live_row(names, &run);
    }
}
