//! Pure statistics over request records: percentiles, per-metric distributions, and the run summary.
//! No I/O and no clocks: everything here is a function of the records it is given.
//!
//! Each rule has one home here: the distribution kernel ([`dist`]), what became of a request
//! ([`outcome`]), the server engines' metric names ([`engines`]), the within-run stability
//! block of InferenceX's row ([`stability`]) and the full-response interactivity InferenceX's app
//! publishes ([`interactivity`]).

#![forbid(unsafe_code)]

pub mod engines;
pub mod goodput;
pub mod interactivity;
pub mod prometheus;
pub mod scrape_log;
pub mod sessions;
pub mod slo;
pub mod stability;
pub mod stats;
pub mod tree_counts;

use serde::{Deserialize, Serialize};

pub use agentx_record::{dist, outcome};
pub use outcome::Outcome;

use agentx_record::{Phase, RequestRecord};

pub use dist::percentile;

/// Distribution summary of one metric.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct Dist {
    /// How many values.
    pub count: usize,
    /// Their mean.
    pub avg: f64,
    /// The smallest.
    pub min: f64,
    /// The median (linear interpolation, as numpy).
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

impl Dist {
    /// `None` for no values.
    pub fn of(v: Vec<f64>) -> Option<Dist> {
        let s = dist::Sorted::new(v)?;
        Some(Dist {
            count: s.len(),
            avg: s.mean(),
            min: s.min(),
            p50: s.percentile(50.0),
            p90: s.percentile(90.0),
            p99: s.percentile(99.0),
            max: s.max(),
        })
    }
}

/// The headline figures of a run (profiling phase, successful requests), as `run_summary.json`'s
/// `summary` holds them (a figure an older file lacks reads as its default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct Summary {
    /// Profiling requests that succeeded (every figure below but the counts is theirs).
    pub requests_ok: u64,
    /// Profiling requests that failed, context overflows and cancellations apart.
    pub requests_failed: u64,
    /// Profiling requests the scenario classified as context overflows.
    pub context_overflows: u64,
    /// Profiling requests cancelled (at the end of the run, the threshold or an interrupt).
    pub cancelled: u64,
    /// Warmup requests, whatever became of them.
    pub warmup_requests: u64,
    /// Warmup responses classified as context overflows (counted in `warmup_requests` too).
    pub warmup_context_overflows: u64,
    /// Seconds from the first profiling send to the last profiling end.
    pub duration_s: f64,
    /// Prompt tokens of the successful requests.
    pub input_tokens: u64,
    /// Output tokens of the successful requests.
    pub output_tokens: u64,
    /// Cached prompt tokens the responses reported; `None` when a response did not say.
    pub cached_tokens: Option<u64>,
    /// Successful requests per second of `duration_s`.
    pub request_throughput: f64,
    /// Output tokens per second of `duration_s`.
    pub output_token_throughput: f64,
    /// Prompt tokens per second of `duration_s`.
    pub input_token_throughput: f64,
    /// Milliseconds, on aiperf's clock: from each request's start (`request_start_ns`).
    pub ttft_ms: Option<Dist>,
    /// Milliseconds between output tokens, each request's mean (aiperf's inter-token latency).
    pub itl_ms: Option<Dist>,
    /// Milliseconds from each request's start to its last content chunk (aiperf's request latency).
    pub latency_ms: Option<Dist>,
    /// Milliseconds from when each request was due (`credit_issued_ns`): the time to first token
    /// and the latency a user of the schedule saw, send lag included.
    pub scheduled_ttft_ms: Option<Dist>,
    /// The latency from when each request was due.
    pub scheduled_latency_ms: Option<Dist>,
    /// Milliseconds between intended and actual send: what separates the two clocks.
    pub send_lag_ms: Option<Dist>,
    /// Prompt tokens per request.
    pub isl: Option<Dist>,
    /// Output tokens per request.
    pub osl: Option<Dist>,
    /// `--goodput`'s figures (absent without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<goodput::GoodputFigures>,
    /// The sessions under `--goodput`: how many were good, and their slowdown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<sessions::SessionFigures>,
    /// The full-response ITL and interactivity as InferenceX's app publishes them (with p99.9, the
    /// population deviation and the slow-tail `p90 = 1 / p90(ITL)`); absent when no successful
    /// request had two output tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_response: Option<interactivity::FullResponseInteractivity>,
}

impl Summary {
    /// The figures of `records` (warmup records are counted, not measured).
    pub fn of(records: &[RequestRecord]) -> Summary {
        let mut s = Summary::default();
        let (mut ttft, mut itl, mut lat, mut lag, mut isl, mut osl) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let (mut scheduled_ttft, mut scheduled_lat) = (vec![], vec![]);
        let (mut first, mut last) = (u64::MAX, 0u64);
        let mut cached = Some(0u64);
        for r in records {
            if r.phase == Phase::Warmup {
                s.warmup_requests += 1;
                if r.context_overflow {
                    s.warmup_context_overflows += 1;
                }
                continue;
            }
            match Outcome::of(r) {
                Outcome::ContextOverflow => {
                    s.context_overflows += 1;
                    continue;
                }
                Outcome::Cancelled => {
                    s.cancelled += 1;
                    continue;
                }
                Outcome::Failed => {
                    s.requests_failed += 1;
                    continue;
                }
                Outcome::Ok => {}
            }
            s.requests_ok += 1;
            first = first.min(r.send_ns);
            last = last.max(r.end_ns);
            s.input_tokens += r.isl;
            s.output_tokens += r.osl;
            cached = cached.and_then(|c| r.usage.cached_tokens.map(|x| c + x));
            let ms = |ns: f64| ns / 1e6;
            if let Some(t) = r.ttft_ns() {
                ttft.push(ms(t as f64));
            }
            if let Some(t) = r.itl_ns() {
                itl.push(ms(t));
            }
            if let Some(t) = r.latency_ns() {
                lat.push(ms(t as f64));
            }
            if let Some(t) = r.scheduled_ttft_ns() {
                scheduled_ttft.push(ms(t as f64));
            }
            if let Some(t) = r.scheduled_latency_ns() {
                scheduled_lat.push(ms(t as f64));
            }
            lag.push(ms(r.send_lag_ns() as f64));
            isl.push(r.isl as f64);
            osl.push(r.osl as f64);
        }
        if s.requests_ok > 0 {
            s.duration_s = (last.saturating_sub(first)) as f64 / 1e9;
            s.cached_tokens = cached;
        }
        let d = s.duration_s.max(1e-9);
        if s.requests_ok > 0 {
            s.request_throughput = s.requests_ok as f64 / d;
            s.output_token_throughput = s.output_tokens as f64 / d;
            s.input_token_throughput = s.input_tokens as f64 / d;
        }
        s.ttft_ms = Dist::of(ttft);
        s.itl_ms = Dist::of(itl);
        s.latency_ms = Dist::of(lat);
        s.scheduled_ttft_ms = Dist::of(scheduled_ttft);
        s.scheduled_latency_ms = Dist::of(scheduled_lat);
        s.send_lag_ms = Dist::of(lag);
        s.isl = Dist::of(isl);
        s.osl = Dist::of(osl);
        s.full_response = interactivity::FullResponseInteractivity::of(records);
        s
    }
}
