//! Engine metrics and their Prometheus text exposition under vLLM's names and types.
//!
//! Each engine owns one [`EngineMetrics`] of lock-free atomics, updated on the request path. The
//! `/metrics` page renders every engine as its own series (labels `model_name` and `engine`), the
//! way a data-parallel vLLM deployment does, so consumers must sum counters across series.
//! Counters are exposed with the `_total` suffix; histograms carry cumulative `_bucket{le}`,
//! `_sum` and `_count`. Latencies are stored in nanoseconds and rendered in seconds.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

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
pub struct Histogram {
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

    /// Record `n` observations of `value` units.
    #[inline]
    pub fn observe_n(&self, value: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = self.bounds.partition_point(|&b| b < value);
        self.counts[i].fetch_add(n, Relaxed);
        self.sum.fetch_add(value.saturating_mul(n), Relaxed);
    }

    /// Record one duration (for histograms in seconds).
    #[inline]
    pub fn observe_duration(&self, d: Duration) {
        self.observe_n(d.as_nanos().min(u64::MAX as u128) as u64, 1);
    }
}

/// Prefill-side histogram buckets for token counts: vLLM's 1-2-5 series up to the context length.
fn one_two_five(max: u64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut exp = 1u64;
    'outer: loop {
        for m in [1, 2, 5] {
            let v = m * exp;
            if v > max {
                break 'outer;
            }
            out.push(v as f64);
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
pub struct EngineMetrics {
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub prefix_cache_queries: AtomicU64,
    pub prefix_cache_hits: AtomicU64,
    pub success_length: AtomicU64,
    pub success_stop: AtomicU64,
    pub success_abort: AtomicU64,
    pub preemptions: AtomicU64,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    /// KV tokens held by running requests (the numerator of `kv_cache_usage_perc`).
    pub kv_tokens: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    pub queue: Histogram,
    pub prompt_len: Histogram,
    pub generation_len: Histogram,
}

impl EngineMetrics {
    /// Empty metrics for an engine with the given context length.
    pub fn new(max_model_len: u64) -> EngineMetrics {
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
            ttft: Histogram::seconds(TTFT_BUCKETS),
            itl: Histogram::seconds(ITL_BUCKETS),
            e2e: Histogram::seconds(REQUEST_LATENCY_BUCKETS),
            queue: Histogram::seconds(REQUEST_LATENCY_BUCKETS),
            prompt_len: Histogram::new(&lens, 1.0),
            generation_len: Histogram::new(&lens, 1.0),
        }
    }
}

/// Picks one histogram out of an engine's metrics.
type HistogramOf = fn(&EngineMetrics) -> &Histogram;

/// What `/metrics` needs to know about the deployment besides the numbers.
pub struct Exposition<'a> {
    pub model: &'a str,
    pub block_size: u32,
    pub capacity_tokens: u64,
    pub engines: &'a [&'a EngineMetrics],
}

/// Format a number the way Python's prometheus_client does (`3.0`, `0.25`, `+Inf`).
fn num(out: &mut String, v: f64) {
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e16 {
        let _ = write!(out, "{v:.1}");
    } else {
        let _ = write!(out, "{v}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, extra: &str, v: f64) {
    out.push_str(name);
    out.push('{');
    out.push_str(labels);
    out.push_str(extra);
    out.push_str("} ");
    num(out, v);
    out.push('\n');
}

/// Render the Prometheus text exposition of every engine.
pub fn render(x: &Exposition<'_>) -> String {
    let mut out = String::with_capacity(16 << 10);
    let model = escape_label(x.model);
    let labels: Vec<String> = (0..x.engines.len())
        .map(|i| format!("model_name=\"{model}\",engine=\"{i}\""))
        .collect();
    let each = |out: &mut String, name: &str, f: &dyn Fn(&EngineMetrics) -> f64| {
        for (m, l) in x.engines.iter().zip(&labels) {
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
        header(&mut out, name, "gauge", help);
        each(&mut out, name, &f);
    }
    header(
        &mut out,
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
    );
    let cap = x.capacity_tokens.max(1) as f64;
    each(&mut out, "vllm:kv_cache_usage_perc", &|m| {
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
        header(&mut out, name, "counter", help);
        each(&mut out, name, &f);
    }

    let name = "vllm:request_success_total";
    header(
        &mut out,
        name,
        "counter",
        "Count of successfully processed requests.",
    );
    for (m, l) in x.engines.iter().zip(&labels) {
        for (reason, v) in [
            ("stop", &m.success_stop),
            ("length", &m.success_length),
            ("abort", &m.success_abort),
        ] {
            sample(
                &mut out,
                name,
                l,
                &format!(",finished_reason=\"{reason}\""),
                load(v),
            );
        }
    }

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
        header(&mut out, name, "histogram", help);
        for (m, l) in x.engines.iter().zip(&labels) {
            histogram(&mut out, name, l, get(m));
        }
    }

    let name = "vllm:cache_config_info";
    header(
        &mut out,
        name,
        "gauge",
        "Information of the LLMEngine CacheConfig",
    );
    let blocks = x.capacity_tokens / x.block_size.max(1) as u64;
    for (i, _) in x.engines.iter().enumerate() {
        let _ = writeln!(
            out,
            "{name}{{block_size=\"{}\",enable_prefix_caching=\"{}\",engine=\"{i}\",num_gpu_blocks=\"{blocks}\"}} 1.0",
            x.block_size,
            if x.capacity_tokens > 0 { "True" } else { "False" },
        );
    }
    out
}

fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let mut cumulative = 0u64;
    let bucket = format!("{name}_bucket");
    let mut le = String::new();
    for (i, c) in h.counts.iter().enumerate() {
        cumulative += c.load(Relaxed);
        le.clear();
        le.push_str(",le=\"");
        num(&mut le, h.labels.get(i).copied().unwrap_or(f64::INFINITY));
        le.push('"');
        sample(out, &bucket, labels, &le, cumulative as f64);
    }
    sample(out, &format!("{name}_count"), labels, "", cumulative as f64);
    let sum = h.sum.load(Relaxed) as f64 / h.scale;
    sample(out, &format!("{name}_sum"), labels, "", sum);
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
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
