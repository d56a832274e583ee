//! Server-metric backends: which inference engine wrote the metrics of a run's
//! `server_metrics_export.json`, and the cache, KV-cache, offload and token figures read from that
//! engine's metric names, each with the metric it came from.
//!
//! It owns detection and the name-to-figure mapping only; how a metric aggregates across series
//! (counters summed, gauges averaged) is [`ServerMetrics::value_where`]'s, and both report layouts
//! format what [`figures`] returns. Engines are recognised by their metric-name prefixes
//! ([`Backend`], in `metrics::engines`, the engine table the live row and the plot read too):
//!
//! | backend  | prefix | read |
//! |---|---|---|
//! | vLLM     | `vllm:` | `prefix_cache_{hits,queries}`, `external_prefix_cache_*`, `prompt_tokens_by_source{source}`, `kv_cache_usage_perc`, `cpu_kv_cache_usage_perc`, `kv_offload_*`, `prompt_tokens`, `generation_tokens` |
//! | SGLang   | `sglang:` | `cached_tokens{cache_source=device\|host}`, `prompt_tokens`, `generation_tokens`, `token_usage`, `max_total_num_tokens`, `hicache_host_{used,total}_tokens`, `realtime_tokens{mode}`, `cache_hit_rate` |
//! | Dynamo   | `dynamo_frontend_`, `dynamo_component_` | `dynamo_frontend_{input_sequence_tokens,output_tokens,cached_tokens}`, `dynamo_component_{gpu_cache_usage_percent,router_kv_hit_rate,router_shared_cache_hit_rate}` |
//! | ATOM     | `atom:` | `prompt_tokens`, `generation_tokens`, `prefix_cache_{cached,full}_tokens`, `lmcache_loaded_tokens`, `kv_cache_usage_ratio` |
//! | TensorRT-LLM | `trtllm_` | `prompt_tokens`, `generation_tokens`, `prompt_cached_tokens` (counters; `kv_cache_hit_rate`, the engine's rate since it started, only without them), `kv_cache_utilization`, `kv_cache_host_utilization`, `kv_cache_max_blocks` × `kv_cache_tokens_per_block` |
//! | llama.cpp | `llamacpp:` | `prompt_tokens` (tokens evaluated), `prompt_tokens_cached` (tokens reused), `tokens_predicted`, `kv_cache_usage_ratio`, `kv_cache_tokens` |
//!
//! vLLM's GPU and external hit rates come from `prompt_tokens_by_source{source}` when the server
//! exports it (each prompt token counted once, by where it came from), else from the
//! `prefix_cache_*` counters, in the order InferenceX's app reads them.
//!
//! Dynamo fronting vLLM or SGLang workers is `dynamo-vllm` / `dynamo-sglang`: the worker figures
//! come from the engine's names, the frontend and router figures from Dynamo's. Metrics none of
//! these prefixes match are adapter `unknown`, with their names: never an error (InferenceX's own
//! aggregator raises there and writes no result).
//!
//! llama.cpp's `prompt_tokens_total` counts the prompt tokens it evaluated (`n_prompt_tokens_processed`),
//! which excludes the prefix it reused from the cache; the hit rate is therefore
//! `cached / (cached + evaluated)`, and needs `llamacpp:prompt_tokens_cached_total` (exported by the
//! llama-server `bench/real-server.sh` builds): on a build without it the rate is null and the notes
//! say so.

use std::collections::{BTreeMap, BTreeSet};

use super::{MetricKind, ServerMetrics};
pub(crate) use agentx_metrics::engines::Backend;
use agentx_metrics::engines::ENGINES;

/// Which engines wrote the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Detection {
    /// Matched engines, in [`Backend::ALL`] order; empty for an unknown engine.
    pub(crate) backends: Vec<Backend>,
    /// `vllm`, `sglang`, `dynamo-vllm`, …, or `unknown`.
    pub(crate) adapter: String,
    /// Every metric name of the export.
    pub(crate) metric_names: Vec<String>,
}

impl Detection {
    pub(crate) fn has(&self, backend: Backend) -> bool {
        self.backends.contains(&backend)
    }

    pub(crate) fn is_unknown(&self) -> bool {
        self.backends.is_empty()
    }
}

/// Detects the engines from the metric names.
pub(crate) fn detect(server: &ServerMetrics) -> Detection {
    let metric_names: Vec<String> = server.metrics.keys().cloned().collect();
    let backends: Vec<Backend> = Backend::ALL
        .into_iter()
        .filter(|b| metric_names.iter().any(|n| b.owns(n)))
        .collect();
    let adapter = match backends.as_slice() {
        [] => "unknown".to_string(),
        [Backend::Dynamo, rest @ ..] if !rest.is_empty() => {
            let names: Vec<&str> = rest.iter().map(|b| b.name()).collect();
            format!("dynamo-{}", names.join("+"))
        }
        bs => bs.iter().map(|b| b.name()).collect::<Vec<_>>().join("+"),
    };
    Detection {
        backends,
        adapter,
        metric_names,
    }
}

/// One figure and the metric(s) it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figure {
    pub(crate) value: f64,
    pub(crate) source: String,
}

/// The server-side figures of a run, keyed by their place in the nested layout
/// (`cache.gpu_cache_hit_rate`, `kv_cache.gpu_usage_pct`, `tokens.prompt_by_source.computed`, …).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Figures {
    pub(crate) detection: Detection,
    values: BTreeMap<&'static str, Figure>,
    /// Cached prompt tokens by cache tier (`sglang:cached_tokens{cache_source}`), when exported.
    pub(crate) cached_tokens_by_source: BTreeMap<String, f64>,
    /// Why a figure one would expect from this engine is null.
    pub(crate) notes: Vec<String>,
}

impl Figures {
    pub(crate) fn get(&self, key: &str) -> Option<f64> {
        self.values.get(key).map(|f| f.value)
    }

    pub(crate) fn source(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|f| f.source.as_str())
    }

    /// Every figure, by key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, &Figure)> {
        self.values.iter().map(|(k, f)| (*k, f))
    }

    /// Sets `key` unless an earlier (preferred) source already did; ignores `None` and non-finite
    /// values.
    fn put(&mut self, key: &'static str, measured: Option<f64>, source: impl Into<String>) {
        if let Some(value) = measured.filter(|x| x.is_finite()) {
            self.values.entry(key).or_insert(Figure {
                value,
                source: source.into(),
            });
        }
    }

    fn has(&self, key: &str) -> bool {
        self.values.contains_key(key)
    }
}

/// Divides when the denominator is positive.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A level (rate, usage): gauges averaged across series; a histogram's `sum / count`.
fn level(server: &ServerMetrics, name: &str) -> Option<f64> {
    let metric = server.metrics.get(name)?;
    match metric.kind {
        MetricKind::Histogram => {
            let sum: f64 = metric
                .series
                .iter()
                .filter_map(|s| s.stats.get("sum"))
                .sum();
            let count: f64 = metric
                .series
                .iter()
                .filter_map(|s| s.stats.get("count"))
                .sum();
            ratio(Some(sum), Some(count))
        }
        _ => server.value(name),
    }
}

/// A gauge's largest value over the window across its series (each series' `max`, else `avg`).
fn peak(server: &ServerMetrics, name: &str) -> Option<f64> {
    let metric = server.metrics.get(name)?;
    metric
        .series
        .iter()
        .filter_map(|s| s.stats.get("max").or_else(|| s.stats.get("avg")).copied())
        .reduce(f64::max)
}

/// The server-side figures of `server`, from every engine detected (the first source of a figure
/// wins).
pub(crate) fn figures(server: &ServerMetrics) -> Figures {
    let detection = detect(server);
    let mut out = Figures {
        detection,
        values: BTreeMap::new(),
        cached_tokens_by_source: BTreeMap::new(),
        notes: Vec::new(),
    };
    let detected = out.detection.clone();
    if detected.has(Backend::Vllm) {
        vllm(server, &mut out);
    }
    if detected.has(Backend::Sglang) {
        sglang(server, &mut out);
    }
    if detected.has(Backend::Atom) {
        atom(server, &mut out);
    }
    if detected.has(Backend::TrtLlm) {
        trtllm(server, &mut out);
    }
    if detected.has(Backend::LlamaCpp) {
        llamacpp(server, &mut out);
    }
    if detected.has(Backend::Dynamo) {
        dynamo(server, &mut out);
    }
    // The peak KV usage, which InferenceX's app publishes as `gpu_kv_cache_usage_pct`, beside the
    // window average `kv_cache.gpu_usage_pct` the aggregator's row carries.
    for e in ENGINES.iter().filter(|e| detected.has(e.backend)) {
        for name in e.kv_usage {
            let scale = if e.kv_usage_percent { 0.01 } else { 1.0 };
            out.put(
                "kv_cache.gpu_usage_peak",
                peak(server, name).map(|v| v * scale),
                format!("{name} (its peak over the window, the largest of every series)"),
            );
        }
    }
    // The legacy CPU tier rate InferenceX's first pipeline read (`vllm:cpu_prefix_cache_*`, which no
    // server exports) carries the offload tier's rate unless such metrics exist.
    let cpu = out.get("cache.external_cache_hit_rate");
    let cpu_src = out
        .source("cache.external_cache_hit_rate")
        .unwrap_or_default()
        .to_string();
    out.put("cache.cpu_cache_hit_rate", cpu, cpu_src);
    // Without a split by tier, the overall rate is the GPU tier's.
    let gpu = out.get("cache.gpu_cache_hit_rate");
    if !out.has("cache.external_cache_hit_rate") {
        let src = out
            .source("cache.gpu_cache_hit_rate")
            .unwrap_or_default()
            .to_string();
        out.put("cache.overall_cache_hit_rate", gpu, src);
    }
    for dir in ["gpu_to_cpu", "cpu_to_gpu"] {
        let (bytes_k, time_k, bw_k) = match dir {
            "gpu_to_cpu" => (
                "kv_offload.bytes_gpu_to_cpu",
                "kv_offload.time_gpu_to_cpu",
                "kv_offload.bandwidth_gpu_to_cpu_bytes_per_second",
            ),
            _ => (
                "kv_offload.bytes_cpu_to_gpu",
                "kv_offload.time_cpu_to_gpu",
                "kv_offload.bandwidth_cpu_to_gpu_bytes_per_second",
            ),
        };
        let bandwidth = ratio(out.get(bytes_k), out.get(time_k));
        let src = format!(
            "{} / {}",
            out.source(bytes_k).unwrap_or_default(),
            out.source(time_k).unwrap_or_default()
        );
        out.put(bw_k, bandwidth, src);
    }
    if out.detection.is_unknown() && !out.detection.metric_names.is_empty() {
        out.notes.push(format!(
            "server metrics from an engine none of vLLM, SGLang, TensorRT-LLM, Dynamo, ATOM or llama.cpp matches ({} metric(s), listed under server_metrics.metric_names): server cache and KV figures are null",
            out.detection.metric_names.len()
        ));
    }
    out
}

fn vllm(server: &ServerMetrics, figures: &mut Figures) {
    let hits = server.value("vllm:prefix_cache_hits");
    let queries = server.value("vllm:prefix_cache_queries");
    let ext_hits = server.value("vllm:external_prefix_cache_hits");
    let ext_queries = server.value("vllm:external_prefix_cache_queries");
    vllm_by_source(server, figures);
    figures.put("cache.prefix_cache_hits", hits, "vllm:prefix_cache_hits");
    figures.put(
        "cache.prefix_cache_queries",
        queries,
        "vllm:prefix_cache_queries",
    );
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(hits, queries),
        "vllm:prefix_cache_hits / vllm:prefix_cache_queries",
    );
    figures.put(
        "cache.external_prefix_cache_hits",
        ext_hits,
        "vllm:external_prefix_cache_hits",
    );
    figures.put(
        "cache.external_prefix_cache_queries",
        ext_queries,
        "vllm:external_prefix_cache_queries",
    );
    figures.put(
        "cache.external_cache_hit_rate",
        ratio(ext_hits, ext_queries),
        "vllm:external_prefix_cache_hits / vllm:external_prefix_cache_queries",
    );
    figures.put(
        "cache.cpu_cache_hit_rate",
        ratio(
            server.value("vllm:cpu_prefix_cache_hits"),
            server.value("vllm:cpu_prefix_cache_queries"),
        ),
        "vllm:cpu_prefix_cache_hits / vllm:cpu_prefix_cache_queries",
    );
    if let (Some(hits_total), Some(queries_total)) = (hits, queries) {
        // Tokens missing the local cache are what the external tier is asked for.
        figures.put(
            "cache.overall_cache_hit_rate",
            ratio(Some(hits_total + ext_hits.unwrap_or(0.0)), Some(queries_total)),
            "(vllm:prefix_cache_hits + vllm:external_prefix_cache_hits) / vllm:prefix_cache_queries",
        );
    }
    for (key, name, alt, dir) in [
        (
            "kv_offload.bytes_gpu_to_cpu",
            "vllm:kv_offload_bytes_gpu_to_cpu",
            "vllm:kv_offload_total_bytes",
            "GPU_to_CPU",
        ),
        (
            "kv_offload.bytes_cpu_to_gpu",
            "vllm:kv_offload_bytes_cpu_to_gpu",
            "vllm:kv_offload_total_bytes",
            "CPU_to_GPU",
        ),
        (
            "kv_offload.time_gpu_to_cpu",
            "vllm:kv_offload_time_gpu_to_cpu",
            "vllm:kv_offload_total_time",
            "GPU_to_CPU",
        ),
        (
            "kv_offload.time_cpu_to_gpu",
            "vllm:kv_offload_time_cpu_to_gpu",
            "vllm:kv_offload_total_time",
            "CPU_to_GPU",
        ),
    ] {
        figures.put(key, server.value(name), name);
        figures.put(
            key,
            server.value_labelled(alt, "transfer_type", dir),
            format!("{alt}{{transfer_type={dir}}}"),
        );
    }
    for name in ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"] {
        figures.put("kv_cache.gpu_usage_pct", server.value(name), name);
    }
    for name in ["vllm:cpu_kv_cache_usage_perc", "vllm:cpu_cache_usage_perc"] {
        figures.put("kv_cache.cpu_usage_pct", server.value(name), name);
    }
    figures.put(
        "tokens.prompt_total",
        server.value("vllm:prompt_tokens"),
        "vllm:prompt_tokens",
    );
    figures.put(
        "tokens.generation_total",
        server.value("vllm:generation_tokens"),
        "vllm:generation_tokens",
    );
}

/// vLLM's prompt tokens by where they came from (local compute, the local prefix cache, an
/// external KV transfer through an offload connector), and the hit rates they give: each over all
/// prompt tokens, ahead of the `prefix_cache_*` counters' (InferenceX's app reads them first).
fn vllm_by_source(server: &ServerMetrics, figures: &mut Figures) {
    let by_source =
        |src: &str| server.value_labelled("vllm:prompt_tokens_by_source", "source", src);
    let (compute, local, external) = (
        by_source("local_compute"),
        by_source("local_cache_hit"),
        by_source("external_kv_transfer"),
    );
    let raw = server.value("vllm:prompt_tokens_by_source");
    if raw.is_none_or(|r| r <= 0.0) {
        return;
    }
    let src = "vllm:prompt_tokens_by_source{source}";
    figures.put("tokens.prompt_by_source.gpu_cache_hit", local, src);
    figures.put(
        "tokens.prompt_by_source.cpu_or_external_cache_hit",
        external,
        src,
    );
    figures.put("tokens.prompt_by_source.computed", compute, src);
    figures.put("tokens.prompt_by_source.raw", raw, src);
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(local, raw),
        "vllm:prompt_tokens_by_source{source=local_cache_hit} / all of vllm:prompt_tokens_by_source",
    );
    figures.put(
        "cache.external_cache_hit_rate",
        ratio(external, raw),
        "vllm:prompt_tokens_by_source{source=external_kv_transfer} / all of vllm:prompt_tokens_by_source",
    );
    figures.put(
        "cache.overall_cache_hit_rate",
        ratio(Some(local.unwrap_or(0.0) + external.unwrap_or(0.0)), raw),
        "(local_cache_hit + external_kv_transfer) / all of vllm:prompt_tokens_by_source",
    );
}

/// TensorRT-LLM's figures (`tensorrt_llm/metrics/collector.py`, `MetricsCollector`): the prompt,
/// cached and generated token counters, KV utilization, and the pool from blocks × tokens per block.
fn trtllm(server: &ServerMetrics, figures: &mut Figures) {
    let prompt = server.value("trtllm_prompt_tokens");
    let cached = server.value("trtllm_prompt_cached_tokens");
    figures.put(
        "cache.prefix_cache_hits",
        cached,
        "trtllm_prompt_cached_tokens",
    );
    figures.put("cache.prefix_cache_queries", prompt, "trtllm_prompt_tokens");
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(cached, prompt),
        "trtllm_prompt_cached_tokens / trtllm_prompt_tokens",
    );
    // The gauge is the engine's rate since it started (warmup and earlier runs included): only a
    // server without the counters falls back to its window average.
    figures.put(
        "cache.gpu_cache_hit_rate",
        level(server, "trtllm_kv_cache_hit_rate"),
        "trtllm_kv_cache_hit_rate (the engine's rate since it started, averaged over the window)",
    );
    if let Some(prompt_total) = prompt {
        let src = "trtllm_prompt_tokens and trtllm_prompt_cached_tokens";
        figures.put("tokens.prompt_by_source.raw", Some(prompt_total), src);
        figures.put("tokens.prompt_by_source.gpu_cache_hit", cached, src);
        figures.put(
            "tokens.prompt_by_source.computed",
            cached.map(|c| (prompt_total - c).max(0.0)),
            src,
        );
    }
    figures.put(
        "kv_cache.gpu_usage_pct",
        server.value("trtllm_kv_cache_utilization"),
        "trtllm_kv_cache_utilization",
    );
    figures.put(
        "kv_cache.cpu_usage_pct",
        server.value("trtllm_kv_cache_host_utilization"),
        "trtllm_kv_cache_host_utilization",
    );
    let pool = pool_tokens(
        server,
        "trtllm_kv_cache_max_blocks",
        "trtllm_kv_cache_tokens_per_block",
    );
    figures.put(
        "kv_cache.gpu_total_tokens",
        pool,
        "trtllm_kv_cache_max_blocks x trtllm_kv_cache_tokens_per_block, per endpoint",
    );
    figures.put("tokens.prompt_total", prompt, "trtllm_prompt_tokens");
    figures.put(
        "tokens.generation_total",
        server.value("trtllm_generation_tokens"),
        "trtllm_generation_tokens",
    );
}

/// Blocks × tokens per block, summed over endpoints (each its own pool), from the gauges' peaks.
fn pool_tokens(server: &ServerMetrics, blocks: &str, per_block: &str) -> Option<f64> {
    let peak_by_endpoint = |name: &str| -> Option<BTreeMap<String, f64>> {
        let metric = server.metrics.get(name)?;
        let mut out = BTreeMap::new();
        for s in &metric.series {
            if let Some(max) = s.stats.get("max") {
                let entry = out
                    .entry(s.endpoint.clone().unwrap_or_default())
                    .or_insert(*max);
                *entry = entry.max(*max);
            }
        }
        Some(out)
    };
    let (blocks, per_block) = (peak_by_endpoint(blocks)?, peak_by_endpoint(per_block)?);
    let mut total = 0.0;
    for (endpoint, count) in &blocks {
        total += count * per_block.get(endpoint)?;
    }
    (!blocks.is_empty()).then_some(total)
}

fn sglang(server: &ServerMetrics, figures: &mut Figures) {
    let prompt = server.value("sglang:prompt_tokens");
    let device = server.value_where("sglang:cached_tokens", |s| {
        s.labels
            .get("cache_source")
            .is_none_or(|cached| cached == "device")
    });
    let host = server.value_labelled("sglang:cached_tokens", "cache_source", "host");
    let all_cached = server.value("sglang:cached_tokens");
    if let Some(metric) = server.metrics.get("sglang:cached_tokens") {
        let mut sources: BTreeSet<String> = BTreeSet::new();
        for s in &metric.series {
            sources.insert(
                s.labels
                    .get("cache_source")
                    .cloned()
                    .unwrap_or_else(|| "device".into()),
            );
        }
        for src in sources {
            let cached = server.value_where("sglang:cached_tokens", |s| {
                s.labels
                    .get("cache_source")
                    .map_or("device", String::as_str)
                    == src
            });
            if let Some(cached) = cached {
                figures.cached_tokens_by_source.insert(src, cached);
            }
        }
    }
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(device, prompt),
        "sglang:cached_tokens{cache_source=device} / sglang:prompt_tokens",
    );
    let cache = server.value_labelled("sglang:realtime_tokens", "mode", "prefill_cache");
    let compute = server.value_labelled("sglang:realtime_tokens", "mode", "prefill_compute");
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(cache, cache.zip(compute).map(|(a, b)| a + b)),
        "sglang:realtime_tokens{mode=prefill_cache} / (prefill_cache + prefill_compute)",
    );
    figures.put(
        "cache.external_cache_hit_rate",
        ratio(host, prompt),
        "sglang:cached_tokens{cache_source=host} / sglang:prompt_tokens",
    );
    figures.put(
        "cache.overall_cache_hit_rate",
        ratio(all_cached, prompt),
        "sglang:cached_tokens (every cache_source) / sglang:prompt_tokens",
    );
    figures.put(
        "cache.overall_cache_hit_rate",
        level(server, "sglang:cache_hit_rate"),
        "sglang:cache_hit_rate",
    );
    figures.put(
        "cache.prefix_cache_hits",
        device,
        "sglang:cached_tokens{cache_source=device}",
    );
    figures.put("cache.prefix_cache_queries", prompt, "sglang:prompt_tokens");
    figures.put(
        "cache.external_prefix_cache_hits",
        host,
        "sglang:cached_tokens{cache_source=host}",
    );
    if let Some(prompt_total) = prompt {
        let src = "sglang:prompt_tokens and sglang:cached_tokens{cache_source}";
        figures.put("tokens.prompt_by_source.raw", Some(prompt_total), src);
        figures.put("tokens.prompt_by_source.gpu_cache_hit", device, src);
        figures.put(
            "tokens.prompt_by_source.cpu_or_external_cache_hit",
            host,
            src,
        );
        figures.put(
            "tokens.prompt_by_source.computed",
            all_cached.map(|c| (prompt_total - c).max(0.0)),
            src,
        );
    }
    figures.put(
        "kv_cache.gpu_usage_pct",
        server.value("sglang:token_usage"),
        "sglang:token_usage",
    );
    figures.put(
        "kv_cache.gpu_total_tokens",
        server.value("sglang:max_total_num_tokens"),
        "sglang:max_total_num_tokens",
    );
    let used = server.value("sglang:hicache_host_used_tokens");
    let total = server.value("sglang:hicache_host_total_tokens");
    figures.put(
        "kv_cache.cpu_used_tokens",
        used,
        "sglang:hicache_host_used_tokens",
    );
    figures.put(
        "kv_cache.cpu_total_tokens",
        total,
        "sglang:hicache_host_total_tokens",
    );
    figures.put(
        "kv_cache.cpu_usage_pct",
        ratio(used, total),
        "sglang:hicache_host_used_tokens / sglang:hicache_host_total_tokens",
    );
    figures.put("tokens.prompt_total", prompt, "sglang:prompt_tokens");
    figures.put(
        "tokens.generation_total",
        server.value("sglang:generation_tokens"),
        "sglang:generation_tokens",
    );
}

fn atom(server: &ServerMetrics, figures: &mut Figures) {
    let prompt = server.value("atom:prompt_tokens");
    let cached = server.value("atom:prefix_cache_cached_tokens");
    let full = server.value("atom:prefix_cache_full_tokens");
    let loaded = server.value("atom:lmcache_loaded_tokens");
    let (queries, qsrc) = match full {
        Some(v) => (Some(v), "atom:prefix_cache_full_tokens"),
        None => (prompt, "atom:prompt_tokens"),
    };
    figures.put(
        "cache.prefix_cache_hits",
        cached,
        "atom:prefix_cache_cached_tokens",
    );
    figures.put("cache.prefix_cache_queries", queries, qsrc);
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(cached, queries),
        format!("atom:prefix_cache_cached_tokens / {qsrc}"),
    );
    figures.put(
        "cache.external_prefix_cache_hits",
        loaded,
        "atom:lmcache_loaded_tokens",
    );
    figures.put(
        "cache.external_cache_hit_rate",
        ratio(loaded, queries),
        format!("atom:lmcache_loaded_tokens / {qsrc}"),
    );
    if cached.is_some() || loaded.is_some() {
        figures.put(
            "cache.overall_cache_hit_rate",
            ratio(Some(cached.unwrap_or(0.0) + loaded.unwrap_or(0.0)), queries),
            format!("(atom:prefix_cache_cached_tokens + atom:lmcache_loaded_tokens) / {qsrc}"),
        );
    }
    figures.put(
        "kv_cache.gpu_usage_pct",
        server.value("atom:kv_cache_usage_ratio"),
        "atom:kv_cache_usage_ratio",
    );
    figures.put("tokens.prompt_total", prompt, "atom:prompt_tokens");
    figures.put(
        "tokens.generation_total",
        server.value("atom:generation_tokens"),
        "atom:generation_tokens",
    );
}

fn llamacpp(server: &ServerMetrics, figures: &mut Figures) {
    // prompt_tokens counts the tokens evaluated; cached ones are reused and not evaluated.
    let evaluated = server.value("llamacpp:prompt_tokens");
    let cached = server.value("llamacpp:prompt_tokens_cached");
    let received = evaluated
        .zip(cached)
        .map(|(evaluated_total, c)| evaluated_total + c);
    let rate_src =
        "llamacpp:prompt_tokens_cached / (llamacpp:prompt_tokens_cached + llamacpp:prompt_tokens)";
    figures.put(
        "cache.gpu_cache_hit_rate",
        ratio(cached, received),
        rate_src,
    );
    figures.put(
        "cache.overall_cache_hit_rate",
        ratio(cached, received),
        rate_src,
    );
    figures.put(
        "cache.prefix_cache_hits",
        cached,
        "llamacpp:prompt_tokens_cached",
    );
    figures.put(
        "cache.prefix_cache_queries",
        received,
        "llamacpp:prompt_tokens_cached + llamacpp:prompt_tokens",
    );
    if cached.is_none() {
        figures.notes.push("this llama.cpp build exports no llamacpp:prompt_tokens_cached_total, so its cache hit rate is null; llamacpp:prompt_tokens counts only the prompt tokens it evaluated".into());
    }
    if let Some(evaluated_total) = evaluated {
        let src = "llamacpp:prompt_tokens (evaluated) and llamacpp:prompt_tokens_cached";
        figures.put(
            "tokens.prompt_by_source.computed",
            Some(evaluated_total),
            src,
        );
        figures.put("tokens.prompt_by_source.gpu_cache_hit", cached, src);
        figures.put("tokens.prompt_by_source.raw", received, src);
    }
    figures.put(
        "tokens.prompt_total",
        received,
        "llamacpp:prompt_tokens + llamacpp:prompt_tokens_cached",
    );
    figures.put(
        "tokens.prompt_total",
        evaluated,
        "llamacpp:prompt_tokens (evaluated tokens only: no cached-token counter)",
    );
    figures.put(
        "tokens.generation_total",
        server.value("llamacpp:tokens_predicted"),
        "llamacpp:tokens_predicted",
    );
    figures.put(
        "kv_cache.gpu_usage_pct",
        server.value("llamacpp:kv_cache_usage_ratio"),
        "llamacpp:kv_cache_usage_ratio",
    );
}

fn dynamo(server: &ServerMetrics, figures: &mut Figures) {
    let input = server.value("dynamo_frontend_input_sequence_tokens");
    let cached = server.value("dynamo_frontend_cached_tokens");
    figures.put(
        "cache.frontend_input_tokens",
        input,
        "dynamo_frontend_input_sequence_tokens",
    );
    figures.put(
        "cache.frontend_cached_tokens",
        cached,
        "dynamo_frontend_cached_tokens",
    );
    let rate_src = "dynamo_frontend_cached_tokens / dynamo_frontend_input_sequence_tokens";
    figures.put(
        "cache.frontend_cache_hit_rate",
        ratio(cached, input),
        rate_src,
    );
    figures.put(
        "cache.router_kv_hit_rate",
        level(server, "dynamo_component_router_kv_hit_rate"),
        "dynamo_component_router_kv_hit_rate",
    );
    figures.put(
        "cache.router_shared_cache_hit_rate",
        level(server, "dynamo_component_router_shared_cache_hit_rate"),
        "dynamo_component_router_shared_cache_hit_rate",
    );
    // Worker figures (from vLLM or SGLang names) come first; the frontend's fill what they lack.
    figures.put("cache.gpu_cache_hit_rate", ratio(cached, input), rate_src);
    figures.put(
        "cache.overall_cache_hit_rate",
        ratio(cached, input),
        rate_src,
    );
    figures.put(
        "kv_cache.gpu_usage_pct",
        level(server, "dynamo_component_gpu_cache_usage_percent"),
        "dynamo_component_gpu_cache_usage_percent",
    );
    figures.put(
        "tokens.prompt_total",
        input,
        "dynamo_frontend_input_sequence_tokens",
    );
    figures.put(
        "tokens.generation_total",
        server.value("dynamo_frontend_output_tokens"),
        "dynamo_frontend_output_tokens",
    );
}
