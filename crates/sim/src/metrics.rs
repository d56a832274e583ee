//! Engine metrics and their Prometheus text exposition, under the names, labels and types of the
//! engine family [`MetricNames`] chooses (vLLM's by default).
//!
//! Each engine owns one [`EngineMetrics`] of lock-free atomics, updated on the request path. The
//! page shows the same simulated quantities under each family's own names, as each engine's source
//! registers them (Python's `prometheus_client` writes a counter's samples, `# HELP` and `# TYPE`
//! with the `_total` suffix, whether the source named it with one or not: `metrics.py:34-35`
//! strips it from the family name and `exposition.py:294-295` adds it back, in prometheus_client
//! 0.23.1, the version aiperf installs; a reader's parser strips it again, `parser.py:293-295`,
//! which is why aiperf's export and agentx's name counters without it):
//!
//! - vLLM (`vllm/v1/metrics/loggers.py`): one series per engine (labels `model_name`, `engine`), as a
//!   data-parallel deployment shows them, so consumers must sum counters across series;
//!   `vllm:prefix_cache_{queries,hits}_total`, `vllm:prompt_tokens_by_source_total{source}`,
//!   `vllm:prompt_tokens_total`,
//!   `vllm:generation_tokens_total`, `vllm:request_success_total{finished_reason}`,
//!   `vllm:num_requests_{running,waiting}`, `vllm:kv_cache_usage_perc` and histograms.
//! - SGLang (`python/sglang/srt/metrics/collector.py`): the tokenizer's counters once for the
//!   server (label `model_name`): `sglang:prompt_tokens_total`, `sglang:generation_tokens_total`,
//!   `sglang:cached_tokens_total{cache_source="device"}` (the simulator has no host tier),
//!   `sglang:num_requests_total` and the latency histograms; the scheduler's gauges once per
//!   data-parallel rank (labels `model_name`, `engine_type="unified"`, `tp_rank`, `pp_rank`,
//!   `dp_rank`): `sglang:num_running_reqs`, `sglang:num_queue_reqs`, `sglang:num_used_tokens`,
//!   `sglang:token_usage` (a fraction), `sglang:max_total_num_tokens`.
//! - TensorRT-LLM (`tensorrt_llm/metrics/collector.py`, `MetricsCollector`, commit 050f80d: the
//!   prefix `trtllm_` at line 144, `Counter(name=... "prompt_tokens_total")` at 229-233 and
//!   `"generation_tokens_total"` at 235-236, `"prompt_cached_tokens_total"` in the prompt-cache
//!   block): one series per server (labels `model_name`, `engine_type="trtllm"`), the engines
//!   summed: `trtllm_prompt_tokens_total`, `trtllm_generation_tokens_total`,
//!   `trtllm_prompt_cached_tokens_total`, `trtllm_request_success_total{finished_reason}`, the
//!   gauges `trtllm_num_requests_{running,waiting}`, `trtllm_kv_cache_utilization` (used over max
//!   blocks, a fraction), `trtllm_kv_cache_hit_rate` (the engine's hit rate since it started, as
//!   its `KvCacheStats.cacheHitRate`), `trtllm_kv_cache_{max,used,free}_blocks`,
//!   `trtllm_kv_cache_tokens_per_block`, and the latency histograms.
//! - ATOM (`atom/entrypoints/openai/metrics.py`, `_AtomMetricsCollector`): one unlabelled series,
//!   already summed over data-parallel ranks: `atom:prompt_tokens_total`,
//!   `atom:generation_tokens_total`, `atom:requests_finished_total`,
//!   `atom:prefix_cache_{requests,cached_tokens,full_tokens}_total`, the gauges
//!   `atom:requests_{running,waiting}`, `atom:kv_cache_blocks_{used,free,total}`,
//!   `atom:kv_cache_usage_ratio`, `atom:prefix_cache_hit_ratio`.
//!
//! Every family's page ends with the simulator's own truth, under `agentx_sim:` names no engine
//! uses: `agentx_sim:kv_evicted_blocks_total{engine,cause="capacity"}` (each engine's prefix-cache
//! evictions, exactly the cache model's `Lru::evicted_total`),
//! `agentx_sim:prompt_miss_tokens_total{engine,cause}` (uncached prompt tokens by why they missed:
//! `cold`, `capacity`, `routing`) and `agentx_sim:router_unkeyed_total{model_name}` (requests a
//! session router found no key on).
//!
//! Histograms carry cumulative `_bucket{le}`, `_sum` and `_count`. Latencies are stored in
//! nanoseconds and rendered in seconds.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::config::MetricNames;

/// vLLM's buckets for `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's buckets for `vllm:inter_token_latency_seconds`.
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's buckets for request-level latencies (e2e, queue).
const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A histogram with fixed upper bounds, in integer units (nanoseconds or tokens).
#[derive(Debug)]
pub(crate) struct Histogram {
    /// Upper bounds in the histogram's unit.
    bounds: Vec<u64>,
    /// The same bounds as printed in `le`.
    labels: Vec<f64>,
    /// Per-bucket (not cumulative) counts; the last one is `+Inf`.
    counts: Box<[AtomicU64]>,
    sum: AtomicU64,
    /// Units per printed unit (1e9 for seconds stored as nanoseconds, 1 for tokens).
    scale: f64,
}

impl Histogram {
    fn new(labels: &[f64], scale: f64) -> Histogram {
        Histogram {
            bounds: labels.iter().map(|b| (b * scale).round() as u64).collect(),
            labels: labels.to_vec(),
            counts: (0..=labels.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            scale,
        }
    }

    fn seconds(labels: &[f64]) -> Histogram {
        Histogram::new(labels, 1e9)
    }

    /// Record `count` observations of `value` units.
    #[inline]
    pub(crate) fn observe_n(&self, value: u64, count: u64) {
        if count == 0 {
            return;
        }
        let bucket = self.bounds.partition_point(|&b| b < value);
        self.counts[bucket].fetch_add(count, Relaxed);
        self.sum.fetch_add(value.saturating_mul(count), Relaxed);
    }

    /// Observations so far.
    pub(crate) fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Record one duration (for histograms in seconds).
    #[inline]
    pub(crate) fn observe_duration(&self, duration: Duration) {
        self.observe_n(duration.as_nanos().min(u128::from(u64::MAX)) as u64, 1);
    }
}

/// Prefill-side histogram buckets for token counts: vLLM's 1-2-5 series up to the context length.
fn one_two_five(max: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = 1u64;
    'outer: loop {
        for m in [1, 2, 5] {
            let value = m * exp;
            if value > max {
                break 'outer;
            }
            out.push(value as f64);
        }
        exp = match exp.checked_mul(10) {
            Some(e) => e,
            None => break,
        };
    }
    out
}

/// The counters, gauges and histograms of one engine.
#[derive(Debug)]
pub(crate) struct EngineMetrics {
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub prefix_cache_queries: AtomicU64,
    pub prefix_cache_hits: AtomicU64,
    pub(crate) success_length: AtomicU64,
    pub(crate) success_stop: AtomicU64,
    pub(crate) success_abort: AtomicU64,
    pub(crate) preemptions: AtomicU64,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    /// KV tokens held by running requests (the numerator of `kv_cache_usage_perc`).
    pub(crate) kv_tokens: AtomicU64,
    /// Prefix-cache blocks evicted for capacity (the engine's `Lru::evicted_total`).
    pub(crate) evicted_blocks: AtomicU64,
    /// Uncached prompt tokens no engine had ever cached (and each prompt's uncachable tail).
    pub(crate) miss_cold: AtomicU64,
    /// Uncached prompt tokens an engine had cached and evicted.
    pub(crate) miss_capacity: AtomicU64,
    /// Uncached prompt tokens another engine held.
    pub(crate) miss_routing: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    pub(crate) prompt_len: Histogram,
    pub(crate) generation_len: Histogram,
}

impl EngineMetrics {
    /// Empty metrics for an engine with the given context length.
    pub(crate) fn new(max_model_len: u64) -> EngineMetrics {
        let lens = one_two_five(max_model_len);
        EngineMetrics {
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            prefix_cache_queries: AtomicU64::new(0),
            prefix_cache_hits: AtomicU64::new(0),
            success_length: AtomicU64::new(0),
            success_stop: AtomicU64::new(0),
            success_abort: AtomicU64::new(0),
            preemptions: AtomicU64::new(0),
            running: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            kv_tokens: AtomicU64::new(0),
            evicted_blocks: AtomicU64::new(0),
            miss_cold: AtomicU64::new(0),
            miss_capacity: AtomicU64::new(0),
            miss_routing: AtomicU64::new(0),
            ttft: Histogram::seconds(TTFT_BUCKETS),
            itl: Histogram::seconds(ITL_BUCKETS),
            e2e: Histogram::seconds(REQUEST_LATENCY_BUCKETS),
            queue: Histogram::seconds(REQUEST_LATENCY_BUCKETS),
            prompt_len: Histogram::new(&lens, 1.0),
            generation_len: Histogram::new(&lens, 1.0),
        }
    }
}

impl EngineMetrics {
    /// Requests the engine holds now, running or waiting (what `LeastLoaded` compares).
    pub(crate) fn load(&self) -> u64 {
        self.running.load(Relaxed) + self.waiting.load(Relaxed)
    }
}

/// Picks one histogram out of an engine's metrics.
type HistogramOf = fn(&EngineMetrics) -> &Histogram;

/// One value of an engine's metrics.
type ValueOf<'a> = dyn Fn(&EngineMetrics) -> f64 + 'a;

/// What `/metrics` needs to know about the deployment besides the numbers.
pub(crate) struct Exposition<'a> {
    pub model: &'a str,
    pub block_size: u32,
    pub(crate) capacity_tokens: u64,
    pub engines: &'a [&'a EngineMetrics],
    /// Whose names the page speaks.
    pub names: MetricNames,
    /// Requests a session router found no key on.
    pub unkeyed: u64,
}

/// Format a number the way Python's prometheus_client does (`3.0`, `0.25`, `+Inf`).
fn num(out: &mut String, value: f64) {
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value.fract() == 0.0 && value.abs() < 1e16 {
        let _ = write!(out, "{value:.1}");
    } else {
        let _ = write!(out, "{value}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, extra: &str, value: f64) {
    out.push_str(name);
    // `extra` starts with a comma, which an unlabelled series drops.
    let extra = if labels.is_empty() {
        extra.trim_start_matches(',')
    } else {
        extra
    };
    if !labels.is_empty() || !extra.is_empty() {
        out.push('{');
        out.push_str(labels);
        out.push_str(extra);
        out.push('}');
    }
    out.push(' ');
    num(out, value);
    out.push('\n');
}

/// Render the Prometheus text exposition of every engine, under the names `exposition.names`
/// chooses.
pub(crate) fn render(exposition: &Exposition<'_>) -> String {
    let mut out = String::with_capacity(16 << 10);
    match exposition.names {
        MetricNames::Vllm => vllm(&mut out, exposition),
        MetricNames::Sglang => sglang(&mut out, exposition),
        MetricNames::Trtllm => trtllm(&mut out, exposition),
        MetricNames::Atom => atom(&mut out, exposition),
    }
    truth(&mut out, exposition);
    out
}

/// The simulator's own counters, on every family's page: evictions, misses by cause, unkeyed
/// requests.
fn truth(out: &mut String, exposition: &Exposition<'_>) {
    let name = "agentx_sim:kv_evicted_blocks_total";
    header(
        out,
        name,
        "counter",
        "Prefix-cache blocks evicted, by cause (capacity: the least recently used block made room).",
    );
    for (i, m) in exposition.engines.iter().enumerate() {
        let labels = format!("engine=\"{i}\"");
        let v = m.evicted_blocks.load(Relaxed) as f64;
        sample(out, name, &labels, ",cause=\"capacity\"", v);
    }
    let name = "agentx_sim:prompt_miss_tokens_total";
    header(
        out,
        name,
        "counter",
        "Uncached prompt tokens by why they missed: cold (never cached anywhere, or the uncachable \
         tail), capacity (evicted), routing (another engine held them).",
    );
    for (i, m) in exposition.engines.iter().enumerate() {
        let labels = format!("engine=\"{i}\"");
        for (cause, v) in [
            ("cold", &m.miss_cold),
            ("capacity", &m.miss_capacity),
            ("routing", &m.miss_routing),
        ] {
            let extra = format!(",cause=\"{cause}\"");
            sample(out, name, &labels, &extra, v.load(Relaxed) as f64);
        }
    }
    metric(
        out,
        "agentx_sim:router_unkeyed_total",
        "counter",
        "Requests the session router found no session header on (sent round-robin).",
        &format!("model_name=\"{}\"", escape_label(exposition.model)),
        exposition.unkeyed as f64,
    );
}

/// vLLM's page: every engine its own series.
fn vllm(out: &mut String, exposition: &Exposition<'_>) {
    let model = escape_label(exposition.model);
    let labels: Vec<String> = (0..exposition.engines.len())
        .map(|i| format!("model_name=\"{model}\",engine=\"{i}\""))
        .collect();
    vllm_gauges_and_counters(out, exposition, &labels);
    vllm_labelled_counters(out, exposition, &labels);
    vllm_histograms(out, exposition, &labels);
    vllm_cache_config(out, exposition);
}

/// vLLM's gauges and its unlabelled counters, one series per engine (`labels`).
fn vllm_gauges_and_counters(out: &mut String, exposition: &Exposition<'_>, labels: &[String]) {
    let each = |out: &mut String, name: &str, f: &dyn Fn(&EngineMetrics) -> f64| {
        for (m, l) in exposition.engines.iter().zip(labels) {
            sample(out, name, l, "", f(m));
        }
    };
    let load = |a: &AtomicU64| a.load(Relaxed) as f64;

    for (name, help, f) in [
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            (|m: &EngineMetrics| m.running.load(Relaxed) as f64) as fn(&EngineMetrics) -> f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            |m| m.waiting.load(Relaxed) as f64,
        ),
    ] {
        header(out, name, "gauge", help);
        each(out, name, &f);
    }
    header(
        out,
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
    );
    let cap = exposition.capacity_tokens.max(1) as f64;
    each(out, "vllm:kv_cache_usage_perc", &|m| {
        (load(&m.kv_tokens) / cap).min(1.0)
    });

    for (name, help, f) in [
        (
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            (|m: &EngineMetrics| m.preemptions.load(Relaxed) as f64) as fn(&EngineMetrics) -> f64,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            |m| m.prefix_cache_queries.load(Relaxed) as f64,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            |m| m.prefix_cache_hits.load(Relaxed) as f64,
        ),
        (
            "vllm:prompt_tokens_total",
            "Number of prefill tokens processed.",
            |m| m.prompt_tokens.load(Relaxed) as f64,
        ),
        (
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            |m| m.generation_tokens.load(Relaxed) as f64,
        ),
    ] {
        header(out, name, "counter", help);
        each(out, name, &f);
    }
}

/// vLLM's counters with a label of their own: prompt tokens by source, requests by finish reason.
fn vllm_labelled_counters(out: &mut String, exposition: &Exposition<'_>, labels: &[String]) {
    let load = |a: &AtomicU64| a.load(Relaxed) as f64;
    // Prompt tokens by where they came from (vLLM V1's `prompt_tokens_by_source`): the prefix
    // cache's hits, the rest computed; the simulator has no external KV transfer.
    let name = "vllm:prompt_tokens_by_source_total";
    header(out, name, "counter", "Number of prompt tokens by source.");
    for (m, l) in exposition.engines.iter().zip(labels) {
        let (prompt, hits) = (
            m.prompt_tokens.load(Relaxed),
            m.prefix_cache_hits.load(Relaxed),
        );
        for (source, v) in [
            ("local_compute", prompt.saturating_sub(hits)),
            ("local_cache_hit", hits),
            ("external_kv_transfer", 0),
        ] {
            sample(out, name, l, &format!(",source=\"{source}\""), v as f64);
        }
    }

    let name = "vllm:request_success_total";
    header(
        out,
        name,
        "counter",
        "Count of successfully processed requests.",
    );
    for (m, l) in exposition.engines.iter().zip(labels) {
        for (reason, v) in [
            ("stop", &m.success_stop),
            ("length", &m.success_length),
            ("abort", &m.success_abort),
        ] {
            sample(
                out,
                name,
                l,
                &format!(",finished_reason=\"{reason}\""),
                load(v),
            );
        }
    }
}

/// vLLM's latency and length histograms.
fn vllm_histograms(out: &mut String, exposition: &Exposition<'_>, labels: &[String]) {
    let hists: [(&str, &str, HistogramOf); 6] = [
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |m| &m.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |m| &m.itl,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            |m| &m.e2e,
        ),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            |m| &m.queue,
        ),
        (
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            |m| &m.prompt_len,
        ),
        (
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            |m| &m.generation_len,
        ),
    ];
    for (name, help, get) in hists {
        header(out, name, "histogram", help);
        for (m, l) in exposition.engines.iter().zip(labels) {
            histogram(out, name, l, &[get(m)]);
        }
    }
}

/// vLLM's cache configuration, an info gauge per engine.
fn vllm_cache_config(out: &mut String, exposition: &Exposition<'_>) {
    let name = "vllm:cache_config_info";
    header(
        out,
        name,
        "gauge",
        "Information of the LLMEngine CacheConfig",
    );
    let blocks = exposition.capacity_tokens / u64::from(exposition.block_size.max(1));
    for (i, _) in exposition.engines.iter().enumerate() {
        let _ = writeln!(
            out,
            "{name}{{block_size=\"{}\",enable_prefix_caching=\"{}\",engine=\"{i}\",num_gpu_blocks=\"{blocks}\"}} 1.0",
            exposition.block_size,
            if exposition.capacity_tokens > 0 { "True" } else { "False" },
        );
    }
}

/// One histogram series: the bucket counts of `hists` added up (engines share their bounds).
fn histogram(out: &mut String, name: &str, labels: &str, hists: &[&Histogram]) {
    let Some(first) = hists.first() else {
        return;
    };
    let mut cumulative = 0u64;
    let bucket = format!("{name}_bucket");
    let mut bound = String::new();
    for i in 0..first.counts.len() {
        cumulative += hists.iter().map(|h| h.counts[i].load(Relaxed)).sum::<u64>();
        bound.clear();
        bound.push_str(",le=\"");
        num(
            &mut bound,
            first.labels.get(i).copied().unwrap_or(f64::INFINITY),
        );
        bound.push('"');
        sample(out, &bucket, labels, &bound, cumulative as f64);
    }
    sample(out, &format!("{name}_count"), labels, "", cumulative as f64);
    let sum = hists
        .iter()
        .map(|h| h.sum.load(Relaxed) as f64)
        .sum::<f64>()
        / first.scale;
    sample(out, &format!("{name}_sum"), labels, "", sum);
}

/// A counter's value summed over the engines.
fn total(exposition: &Exposition<'_>, counter: fn(&EngineMetrics) -> u64) -> f64 {
    exposition.engines.iter().map(|m| counter(m) as f64).sum()
}

/// The engines' KV tokens held now over their capacity, at most 1.
fn kv_usage(exposition: &Exposition<'_>, engines: &[&EngineMetrics]) -> f64 {
    let held: f64 = engines
        .iter()
        .map(|m| m.kv_tokens.load(Relaxed) as f64)
        .sum();
    let capacity = (exposition.capacity_tokens.max(1) * engines.len().max(1) as u64) as f64;
    (held / capacity).min(1.0)
}

/// KV blocks in use: the tokens held, in whole blocks.
fn used_blocks(exposition: &Exposition<'_>) -> f64 {
    let block = u64::from(exposition.block_size.max(1));
    exposition
        .engines
        .iter()
        .map(|m| m.kv_tokens.load(Relaxed).div_ceil(block) as f64)
        .sum()
}

/// The KV blocks of every engine.
fn max_blocks(exposition: &Exposition<'_>) -> f64 {
    (exposition.capacity_tokens / u64::from(exposition.block_size.max(1))
        * exposition.engines.len() as u64) as f64
}

/// Cached prompt tokens over the prompt tokens looked up, since the engines started.
fn lifetime_hit_rate(exposition: &Exposition<'_>) -> f64 {
    let queries = total(exposition, |m| m.prefix_cache_queries.load(Relaxed));
    if queries > 0.0 {
        total(exposition, |m| m.prefix_cache_hits.load(Relaxed)) / queries
    } else {
        0.0
    }
}

/// Writes one metric of one series.
fn metric(out: &mut String, name: &str, kind: &str, help: &str, labels: &str, value: f64) {
    header(out, name, kind, help);
    sample(out, name, labels, "", value);
}

/// SGLang's page: the tokenizer's counters and histograms once for the server, the scheduler's
/// gauges once per data-parallel rank.
fn sglang(out: &mut String, exposition: &Exposition<'_>) {
    let model = escape_label(exposition.model);
    let server = format!("model_name=\"{model}\"");
    for (name, help, of) in [
        (
            "sglang:prompt_tokens_total",
            "Number of prefill tokens processed.",
            (|m: &EngineMetrics| m.prompt_tokens.load(Relaxed)) as fn(&EngineMetrics) -> u64,
        ),
        (
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            |m| m.generation_tokens.load(Relaxed),
        ),
    ] {
        metric(out, name, "counter", help, &server, total(exposition, of));
    }
    let name = "sglang:cached_tokens_total";
    header(
        out,
        name,
        "counter",
        "Number of cached prompt tokens by source (device/host/storage).",
    );
    let cached = total(exposition, |m| m.prefix_cache_hits.load(Relaxed));
    sample(out, name, &server, ",cache_source=\"device\"", cached);
    let requests: f64 = exposition
        .engines
        .iter()
        .map(|m| m.prompt_len.count() as f64)
        .sum();
    metric(
        out,
        "sglang:num_requests_total",
        "counter",
        "Number of requests processed.",
        &server,
        requests,
    );
    let hists: [(&str, &str, HistogramOf); 3] = [
        (
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |m| &m.ttft,
        ),
        (
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            |m| &m.itl,
        ),
        (
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            |m| &m.e2e,
        ),
    ];
    for (name, help, get) in hists {
        header(out, name, "histogram", help);
        let all: Vec<&Histogram> = exposition.engines.iter().map(|m| get(m)).collect();
        histogram(out, name, &server, &all);
    }
    let rank = |i: usize| {
        format!("model_name=\"{model}\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\",dp_rank=\"{i}\"")
    };
    let gauges: [(&str, &str, &ValueOf); 5] = [
        (
            "sglang:num_running_reqs",
            "The number of running requests.",
            &|m| m.running.load(Relaxed) as f64,
        ),
        (
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue.",
            &|m| m.waiting.load(Relaxed) as f64,
        ),
        (
            "sglang:num_used_tokens",
            "The number of used tokens.",
            &|m| m.kv_tokens.load(Relaxed) as f64,
        ),
        ("sglang:token_usage", "The token usage.", &|m| {
            kv_usage(exposition, &[m])
        }),
        (
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            &|_| exposition.capacity_tokens as f64,
        ),
    ];
    for (name, help, value) in gauges {
        header(out, name, "gauge", help);
        for (i, m) in exposition.engines.iter().enumerate() {
            sample(out, name, &rank(i), "", value(m));
        }
    }
}

/// TensorRT-LLM's page: one series for the server (`trtllm-serve` has one collector), the engines
/// summed.
fn trtllm(out: &mut String, exposition: &Exposition<'_>) {
    let labels = format!(
        "model_name=\"{}\",engine_type=\"trtllm\"",
        escape_label(exposition.model)
    );
    let name = "trtllm_request_success_total";
    header(
        out,
        name,
        "counter",
        "Count of successfully processed requests.",
    );
    for (reason, of) in [
        (
            "stop",
            (|m: &EngineMetrics| m.success_stop.load(Relaxed)) as fn(&EngineMetrics) -> u64,
        ),
        ("length", |m| m.success_length.load(Relaxed)),
    ] {
        let extra = format!(",finished_reason=\"{reason}\"");
        sample(out, name, &labels, &extra, total(exposition, of));
    }
    for (name, help, of) in [
        (
            "trtllm_prompt_tokens_total",
            "Cumulative number of prompt (input) tokens processed.",
            (|m: &EngineMetrics| m.prompt_tokens.load(Relaxed)) as fn(&EngineMetrics) -> u64,
        ),
        (
            "trtllm_generation_tokens_total",
            "Cumulative number of generation (output) tokens produced.",
            |m| m.generation_tokens.load(Relaxed),
        ),
        (
            "trtllm_prompt_cached_tokens_total",
            "Process-lifetime total prompt tokens served from KV cache.",
            |m| m.prefix_cache_hits.load(Relaxed),
        ),
    ] {
        metric(out, name, "counter", help, &labels, total(exposition, of));
    }
    let max = max_blocks(exposition);
    let used = used_blocks(exposition).min(max);
    for (name, help, v) in [
        (
            "trtllm_num_requests_running",
            "Number of active requests",
            total(exposition, |m| m.running.load(Relaxed)),
        ),
        (
            "trtllm_num_requests_waiting",
            "Number of queued requests",
            total(exposition, |m| m.waiting.load(Relaxed)),
        ),
        (
            "trtllm_kv_cache_hit_rate",
            "KV cache hit rate",
            lifetime_hit_rate(exposition),
        ),
        (
            "trtllm_kv_cache_utilization",
            "KV cache utilization",
            kv_usage(exposition, exposition.engines),
        ),
        (
            "trtllm_kv_cache_max_blocks",
            "Maximum number of KV cache blocks",
            max,
        ),
        (
            "trtllm_kv_cache_free_blocks",
            "Number of free KV cache blocks",
            max - used,
        ),
        (
            "trtllm_kv_cache_used_blocks",
            "Number of used KV cache blocks",
            used,
        ),
        (
            "trtllm_kv_cache_tokens_per_block",
            "Number of tokens per KV cache block",
            f64::from(exposition.block_size),
        ),
    ] {
        metric(out, name, "gauge", help, &labels, v);
    }
    let hists: [(&str, &str, HistogramOf); 4] = [
        (
            "trtllm_time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            |m| &m.ttft,
        ),
        (
            "trtllm_time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            |m| &m.itl,
        ),
        (
            "trtllm_e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            |m| &m.e2e,
        ),
        (
            "trtllm_request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            |m| &m.queue,
        ),
    ];
    for (name, help, get) in hists {
        header(out, name, "histogram", help);
        let all: Vec<&Histogram> = exposition.engines.iter().map(|m| get(m)).collect();
        histogram(out, name, &labels, &all);
    }
}

/// ATOM's page: unlabelled series, already summed over the data-parallel ranks.
fn atom(out: &mut String, exposition: &Exposition<'_>) {
    let finished = total(exposition, |m| m.success_stop.load(Relaxed))
        + total(exposition, |m| m.success_length.load(Relaxed))
        + total(exposition, |m| m.success_abort.load(Relaxed));
    let prefills: f64 = exposition
        .engines
        .iter()
        .map(|m| m.prompt_len.count() as f64)
        .sum();
    let max = max_blocks(exposition);
    let used = used_blocks(exposition).min(max);
    for (name, help, v) in [
        (
            "atom:requests_running",
            "Number of requests currently running across data-parallel ranks.",
            total(exposition, |m| m.running.load(Relaxed)),
        ),
        (
            "atom:requests_waiting",
            "Number of requests waiting across data-parallel ranks.",
            total(exposition, |m| m.waiting.load(Relaxed)),
        ),
        (
            "atom:kv_cache_blocks_used",
            "Number of allocated KV-cache blocks.",
            used,
        ),
        (
            "atom:kv_cache_blocks_free",
            "Number of free KV-cache blocks.",
            max - used,
        ),
        (
            "atom:kv_cache_blocks_total",
            "Total number of KV-cache blocks.",
            max,
        ),
        (
            "atom:kv_cache_usage_ratio",
            "Fraction of KV-cache blocks currently allocated.",
            kv_usage(exposition, exposition.engines),
        ),
        (
            "atom:prefix_cache_hit_ratio",
            "Admitted prefix-cache token hit ratio.",
            lifetime_hit_rate(exposition),
        ),
    ] {
        metric(out, name, "gauge", help, "", v);
    }
    for (name, help, v) in [
        (
            "atom:requests_finished_total",
            "Number of requests completed by the scheduler.",
            finished,
        ),
        (
            "atom:prompt_tokens_total",
            "Number of prompt tokens in completed requests.",
            total(exposition, |m| m.prompt_tokens.load(Relaxed)),
        ),
        (
            "atom:generation_tokens_total",
            "Number of generated tokens in completed requests.",
            total(exposition, |m| m.generation_tokens.load(Relaxed)),
        ),
        (
            "atom:prefix_cache_requests_total",
            "Number of prefill requests observed by prefix-cache accounting.",
            prefills,
        ),
        (
            "atom:prefix_cache_cached_tokens_total",
            "Number of prompt tokens served from the admitted prefix cache.",
            total(exposition, |m| m.prefix_cache_hits.load(Relaxed)),
        ),
        (
            "atom:prefix_cache_full_tokens_total",
            "Number of prompt tokens considered by prefix-cache accounting.",
            total(exposition, |m| m.prefix_cache_queries.load(Relaxed)),
        ),
    ] {
        metric(out, name, "counter", help, "", v);
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_two_five_stops_at_max() {
        assert_eq!(
            one_two_five(1000),
            vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_inclusive() {
        let m = EngineMetrics::new(100);
        m.ttft.observe_duration(Duration::from_millis(1)); // le 0.001 (inclusive)
        m.ttft.observe_duration(Duration::from_millis(30)); // le 0.04
        m.ttft.observe_duration(Duration::from_secs(5000)); // +Inf
        m.prompt_tokens.store(7, Relaxed);
        let text = render(&Exposition {
            model: "m",
            block_size: 16,
            capacity_tokens: 1600,
            engines: &[&m],
            names: MetricNames::Vllm,
            unkeyed: 0,
        });
        let l = "model_name=\"m\",engine=\"0\"";
        for want in [
            format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.001\"}} 1.0"),
            format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.02\"}} 1.0"),
            format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"0.04\"}} 2.0"),
            format!("vllm:time_to_first_token_seconds_bucket{{{l},le=\"+Inf\"}} 3.0"),
            format!("vllm:time_to_first_token_seconds_count{{{l}}} 3.0"),
            format!("vllm:time_to_first_token_seconds_sum{{{l}}} 5000.031"),
            format!("vllm:prompt_tokens_total{{{l}}} 7.0"),
            "# TYPE vllm:prompt_tokens_total counter".to_string(),
            "# TYPE vllm:kv_cache_usage_perc gauge".to_string(),
        ] {
            assert!(text.contains(&want), "missing {want}\n{text}");
        }
    }
}
