//! The one engine table: the inference engines the host knows by their Prometheus metric names,
//! and which names carry each server figure the host reads while and after a run.
//!
//! [`Backend`] recognises an engine by its metric-name prefixes (the report's detection, in
//! InferenceX's order). [`ENGINES`] names, per engine and in the order they are tried, the gauges
//! and counters behind the live `srv` row ([`super::scrape_log::ServerSnapshot`]), the sweep's
//! idle wait (running and waiting requests, read through the same snapshot) and the plot's server
//! panels. The report's richer per-engine figures (cache tiers, offload, tokens by source) are
//! `export::bmk::backends::figures`, keyed by [`Backend`].
//!
//! A new engine: a [`Backend`] variant (name and prefixes), its row in [`ENGINES`], and its report
//! figures in `export::bmk::backends`.
//!
//! Names are as the server-metrics export writes them: a counter without `_total` (the family
//! name a Prometheus parser gives it, aiperf's and agentx's alike), whether the engine registered
//! it with the suffix (TensorRT-LLM's `Counter(name="trtllm_prompt_tokens_total")`,
//! `tensorrt_llm/metrics/collector.py:229-233` at commit 050f80d) or without (ATOM's
//! `CounterMetricFamily("atom:prompt_tokens")`); on the page both read `..._total`. The built-in
//! simulator speaks every family here but llama.cpp and Dynamo (`agentx-host sim --metric-names`).

/// An inference engine whose metric names the host knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Backend {
    /// NVIDIA Dynamo's frontend and components (`dynamo_frontend_`, `dynamo_component_`).
    Dynamo,
    /// ATOM (`atom:`).
    Atom,
    /// SGLang (`sglang:`).
    Sglang,
    /// vLLM (`vllm:`).
    Vllm,
    /// TensorRT-LLM (`trtllm_`).
    TrtLlm,
    /// llama.cpp's server (`llamacpp:`).
    LlamaCpp,
}

impl Backend {
    /// In the order InferenceX's aggregator tries them, then TensorRT-LLM and llama.cpp.
    pub const ALL: [Backend; 6] = [
        Backend::Dynamo,
        Backend::Atom,
        Backend::Sglang,
        Backend::Vllm,
        Backend::TrtLlm,
        Backend::LlamaCpp,
    ];

    /// The lower-case name reports and files use (`vllm`, `trtllm`...).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Dynamo => "dynamo",
            Backend::Atom => "atom",
            Backend::Sglang => "sglang",
            Backend::Vllm => "vllm",
            Backend::TrtLlm => "trtllm",
            Backend::LlamaCpp => "llamacpp",
        }
    }

    /// The metric-name prefixes of this engine.
    pub fn prefixes(self) -> &'static [&'static str] {
        match self {
            Backend::Dynamo => &["dynamo_frontend_", "dynamo_component_"],
            Backend::Atom => &["atom:"],
            Backend::Sglang => &["sglang:"],
            Backend::Vllm => &["vllm:"],
            Backend::TrtLlm => &["trtllm_"],
            Backend::LlamaCpp => &["llamacpp:"],
        }
    }

    /// Whether `metric` (as named in the export, counters without `_total`) is this engine's.
    pub fn owns(self, metric: &str) -> bool {
        self.prefixes().iter().any(|p| metric.starts_with(p))
    }
}

/// A prefix-cache hit rate from the increases of counters since the first scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitRate {
    /// `hits / of`.
    Ratio {
        /// The counter of hits.
        hits: &'static str,
        /// The counter of lookups.
        of: &'static str,
    },
    /// The series of `metric` whose `label` is `value`, over all its series.
    Share {
        /// The counter.
        metric: &'static str,
        /// The label that says which series are hits.
        label: &'static str,
        /// The label's value on the hit series.
        value: &'static str,
    },
    /// `hits / (hits + rest)`: an engine that counts the tokens it reused apart from the ones it
    /// evaluated.
    OverSum {
        /// The counter of reused tokens.
        hits: &'static str,
        /// The counter of evaluated tokens.
        rest: &'static str,
    },
}

/// What the host reads from one engine's `/metrics` page. Each list is tried in order, the first
/// name present wins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Engine {
    /// The engine this row is for.
    pub backend: Backend,
    /// Requests running now (gauges, summed over series and endpoints).
    pub running: &'static [&'static str],
    /// Requests queued now (gauges, summed).
    pub waiting: &'static [&'static str],
    /// GPU KV-cache usage (gauges, averaged), a fraction unless `kv_usage_percent`.
    pub kv_usage: &'static [&'static str],
    /// `kv_usage` is a percentage.
    pub kv_usage_percent: bool,
    /// CPU KV-cache usage (gauges, averaged, a fraction).
    pub(crate) cpu_kv_usage: &'static [&'static str],
    /// The prefix-cache hit rate, the first that can be computed.
    pub hit_rate: &'static [HitRate],
    /// The external (offload) tier's hit rate, the first that can be computed.
    pub(crate) external_hit_rate: &'static [HitRate],
    /// Prompt tokens: the first counter, plus the increases of the others when present (an
    /// engine that counts reused tokens apart).
    pub prompt_tokens: &'static [&'static str],
    /// Generated tokens (a counter).
    pub generation_tokens: Option<&'static str>,
}

const NONE: &[&str] = &[];

/// The engines, in the order their names are tried (vLLM first: its names are what most servers,
/// the built-in simulator among them, export).
pub const ENGINES: [Engine; 6] = [
    Engine {
        backend: Backend::Vllm,
        running: &["vllm:num_requests_running"],
        waiting: &["vllm:num_requests_waiting"],
        // V0 named the usage gauge `gpu_cache_usage_perc` (a fraction despite its name).
        kv_usage: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        kv_usage_percent: false,
        cpu_kv_usage: &["vllm:cpu_cache_usage_perc"],
        // Prompt tokens by where they came from, over all prompt tokens, first (as InferenceX's
        // app reads them); a build without that counter, hits over lookups.
        hit_rate: &[
            HitRate::Share {
                metric: "vllm:prompt_tokens_by_source",
                label: "source",
                value: "local_cache_hit",
            },
            HitRate::Ratio {
                hits: "vllm:prefix_cache_hits",
                of: "vllm:prefix_cache_queries",
            },
        ],
        external_hit_rate: &[
            HitRate::Share {
                metric: "vllm:prompt_tokens_by_source",
                label: "source",
                value: "external_kv_transfer",
            },
            HitRate::Ratio {
                hits: "vllm:external_prefix_cache_hits",
                of: "vllm:external_prefix_cache_queries",
            },
        ],
        prompt_tokens: &["vllm:prompt_tokens"],
        generation_tokens: Some("vllm:generation_tokens"),
    },
    Engine {
        backend: Backend::Sglang,
        running: &["sglang:num_running_reqs"],
        waiting: &["sglang:num_queue_reqs"],
        kv_usage: &["sglang:token_usage"],
        kv_usage_percent: false,
        cpu_kv_usage: NONE,
        // Cached over prompt tokens, as InferenceX's app reads it; a build without the cached
        // counter, the realtime split by mode.
        hit_rate: &[
            HitRate::Ratio {
                hits: "sglang:cached_tokens",
                of: "sglang:prompt_tokens",
            },
            HitRate::Share {
                metric: "sglang:realtime_tokens",
                label: "mode",
                value: "prefill_cache",
            },
        ],
        external_hit_rate: &[],
        prompt_tokens: &["sglang:prompt_tokens"],
        generation_tokens: Some("sglang:generation_tokens"),
    },
    Engine {
        backend: Backend::LlamaCpp,
        running: &["llamacpp:requests_processing"],
        waiting: &["llamacpp:requests_deferred"],
        kv_usage: &["llamacpp:kv_cache_usage_ratio"],
        kv_usage_percent: false,
        cpu_kv_usage: NONE,
        // `prompt_tokens` counts the evaluated tokens only; builds without the cached counter
        // have no rate.
        hit_rate: &[HitRate::OverSum {
            hits: "llamacpp:prompt_tokens_cached",
            rest: "llamacpp:prompt_tokens",
        }],
        external_hit_rate: &[],
        prompt_tokens: &["llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached"],
        generation_tokens: Some("llamacpp:tokens_predicted"),
    },
    Engine {
        backend: Backend::Atom,
        // `_AtomMetricsCollector` (`atom/entrypoints/openai/metrics.py`): every series unlabelled,
        // summed over data-parallel ranks.
        running: &["atom:requests_running"],
        waiting: &["atom:requests_waiting"],
        kv_usage: &["atom:kv_cache_usage_ratio"],
        kv_usage_percent: false,
        cpu_kv_usage: NONE,
        // The prompt tokens prefix-cache accounting considered, as InferenceX's app divides by;
        // a build without that counter, its prompt tokens.
        hit_rate: &[
            HitRate::Ratio {
                hits: "atom:prefix_cache_cached_tokens",
                of: "atom:prefix_cache_full_tokens",
            },
            HitRate::Ratio {
                hits: "atom:prefix_cache_cached_tokens",
                of: "atom:prompt_tokens",
            },
        ],
        external_hit_rate: &[HitRate::Ratio {
            hits: "atom:lmcache_loaded_tokens",
            of: "atom:prefix_cache_full_tokens",
        }],
        prompt_tokens: &["atom:prompt_tokens"],
        generation_tokens: Some("atom:generation_tokens"),
    },
    Engine {
        backend: Backend::TrtLlm,
        // `MetricsCollector` (`tensorrt_llm/metrics/collector.py`), one series per server.
        running: &["trtllm_num_requests_running"],
        waiting: &["trtllm_num_requests_waiting"],
        // Used over max blocks, a fraction.
        kv_usage: &["trtllm_kv_cache_utilization"],
        kv_usage_percent: false,
        cpu_kv_usage: &["trtllm_kv_cache_host_utilization"],
        // The counters, not the `trtllm_kv_cache_hit_rate` gauge: that is the engine's rate since it
        // started, warmup and earlier runs included.
        hit_rate: &[HitRate::Ratio {
            hits: "trtllm_prompt_cached_tokens",
            of: "trtllm_prompt_tokens",
        }],
        external_hit_rate: &[],
        prompt_tokens: &["trtllm_prompt_tokens"],
        generation_tokens: Some("trtllm_generation_tokens"),
    },
    Engine {
        backend: Backend::Dynamo,
        running: NONE,
        waiting: NONE,
        kv_usage: &["dynamo_component_gpu_cache_usage_percent"],
        kv_usage_percent: true,
        cpu_kv_usage: NONE,
        hit_rate: &[HitRate::Ratio {
            hits: "dynamo_frontend_cached_tokens",
            of: "dynamo_frontend_input_sequence_tokens",
        }],
        external_hit_rate: &[],
        prompt_tokens: &["dynamo_frontend_input_sequence_tokens"],
        generation_tokens: Some("dynamo_frontend_output_tokens"),
    },
];

/// Every engine's names for one figure, in table order.
pub fn names(names_of: impl Fn(&Engine) -> &'static [&'static str]) -> Vec<&'static str> {
    ENGINES
        .iter()
        .flat_map(|e| names_of(e).iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape_log::{EndpointLog, ServerSnapshot};

    /// A vLLM page with both hit-rate sources: prompt tokens by source (60 local cache hits, 10
    /// from an external transfer, 30 computed) and the lookups' counters (80 hits of 160 queried).
    fn vllm_page(scale: f64) -> String {
        let counter = |name: &str, labels: &str, v: f64| {
            format!("# TYPE {name} counter\n{name}{labels} {}\n", v * scale)
        };
        [
            "# TYPE vllm:prompt_tokens_by_source counter\n".to_string(),
            format!(
                "vllm:prompt_tokens_by_source_total{{source=\"local_cache_hit\"}} {}\n",
                60.0 * scale
            ),
            format!(
                "vllm:prompt_tokens_by_source_total{{source=\"external_kv_transfer\"}} {}\n",
                10.0 * scale
            ),
            format!(
                "vllm:prompt_tokens_by_source_total{{source=\"local_compute\"}} {}\n",
                30.0 * scale
            ),
            counter("vllm:prefix_cache_hits_total", "", 80.0),
            counter("vllm:prefix_cache_queries_total", "", 160.0),
        ]
        .concat()
    }

    #[test]
    fn vllm_hit_rates_read_prompt_tokens_by_source_first() {
        let pages = [vllm_page(0.0), vllm_page(1.0)];
        let log = EndpointLog::from_pages(
            "http://localhost:8000/metrics",
            [(0, Some(pages[0].as_str())), (1, Some(pages[1].as_str()))],
        )
        .unwrap();
        let live = ServerSnapshot::of(std::iter::once(&log));
        // 60 of 100 prompt tokens from the local cache, 10 of 100 transferred: not the lookups'
        // 80 of 160 (which did not move between the two pages anyway).
        assert_eq!(live.prefix_cache_hit_rate, Some(0.6));
        assert_eq!(live.external_cache_hit_rate, Some(0.1));
    }

    #[test]
    fn every_backend_has_a_row_and_owns_its_names() {
        for b in Backend::ALL {
            let e = ENGINES.iter().find(|e| e.backend == b);
            let e = e.unwrap_or_else(|| panic!("{} has no row in ENGINES", b.name()));
            let mut all: Vec<&str> = [e.running, e.waiting, e.kv_usage, e.cpu_kv_usage]
                .concat()
                .into_iter()
                .chain(e.prompt_tokens.iter().copied())
                .chain(e.generation_tokens)
                .collect();
            for h in e.hit_rate.iter().chain(e.external_hit_rate) {
                all.extend(match *h {
                    HitRate::Ratio { hits, of } => [hits, of],
                    HitRate::Share { metric, .. } => [metric, metric],
                    HitRate::OverSum { hits, rest } => [hits, rest],
                });
            }
            for n in all {
                assert!(b.owns(n), "{n} is not {}'s", b.name());
            }
        }
    }
}
