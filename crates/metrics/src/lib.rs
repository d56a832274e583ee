//! Pure statistics over request records: percentiles, per-metric distributions, and the run summary.
//! No I/O and no clocks: everything here is a function of the records it is given.
//!
//! Each rule has one home here: the distribution kernel ([`dist`]), what became of a request
//! ([`outcome`]), the server engines' metric names ([`engines`]), the GPU exporters' names
//! ([`gpu`]) and a window's GPU energy ([`energy`]), the within-run stability
//! block of InferenceX's row ([`stability`]), the full-response interactivity InferenceX's app
//! publishes ([`interactivity`]) and the KV cache model the simulator's engines run ([`kvmodel`]).

#![forbid(unsafe_code)]

pub mod cache_truth;
pub mod energy;
pub mod engines;
pub mod goodput;
pub mod gpu;
pub mod interactivity;
pub mod jobs;
pub mod kvmodel;
pub mod live;
pub mod precision;
pub mod prometheus;
pub mod routing_seen;
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
    pub fn of(values: Vec<f64>) -> Option<Dist> {
        let sorted = dist::Sorted::new(values)?;
        Some(Dist {
            count: sorted.len(),
            avg: sorted.mean(),
            min: sorted.min(),
            p50: sorted.percentile(50.0),
            p90: sorted.percentile(90.0),
            p99: sorted.percentile(99.0),
            max: sorted.max(),
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
    /// The sessions under `--session-slo`: how many met every objective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_slo: Option<sessions::SessionSloFigures>,
    /// The GPUs' energy over the profiling window (`--gpu-telemetry`): joules, power, joules per
    /// token, request and job, and whether the reading is whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<energy::EnergyReport>,
    /// The headline figures' confidence intervals: a session bootstrap, seeded from the run's seed
    /// (`--confidence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<precision::Intervals>,
    /// The jobs: traces replayed whole inside the profiling window, per hour, per GPU, per lane
    /// and per user (set by the run, which knows the corpus's trees and the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<jobs::JobFigures>,
    /// Where the time to first token went, in milliseconds, when the server said (the built-in
    /// simulator's headers, Dynamo's `nvext` timing): waiting for the prefill, the prefill, the
    /// rest of the server's TTFT, and what the client added (send lag included). Absent when no
    /// successful request carried a server figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_breakdown_ms: Option<TtftBreakdown>,
    /// Where each session's turns landed, when the responses named their worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing: Option<routing_seen::RoutingSeen>,
    /// The replies' reasoning and tool calls: time to first output token, reasoning tokens, tool
    /// calls and their parse failures; absent when no successful reply reasoned or called a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<ReplyFigures>,
    /// The cache truth: the hit the prompts allowed and why each missed token missed (set by the
    /// run, which knows the server's KV capacity); absent when the records have no prompt chains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<cache_truth::CacheReport>,
    /// The full-response ITL and interactivity as InferenceX's app publishes them (with p99.9, the
    /// population deviation and the slow-tail `p90 = 1 / p90(ITL)`); absent when no successful
    /// request had two output tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub full_response: Option<interactivity::FullResponseInteractivity>,
}

impl Summary {
    /// The figures of `records` (warmup records are counted, not measured).
    pub fn of(records: &[RequestRecord]) -> Summary {
        let mut summary = Summary::default();
        let (mut ttft, mut itl, mut lat, mut lag, mut isl, mut osl) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let (mut scheduled_ttft, mut scheduled_lat) = (vec![], vec![]);
        let (mut first, mut last) = (u64::MAX, 0u64);
        let mut cached = Some(0u64);
        for r in records {
            if r.phase == Phase::Warmup {
                summary.warmup_requests += 1;
                if r.context_overflow {
                    summary.warmup_context_overflows += 1;
                }
                continue;
            }
            match Outcome::of(r) {
                Outcome::ContextOverflow => {
                    summary.context_overflows += 1;
                    continue;
                }
                Outcome::Cancelled => {
                    summary.cancelled += 1;
                    continue;
                }
                Outcome::Failed => {
                    summary.requests_failed += 1;
                    continue;
                }
                Outcome::Ok => {}
            }
            summary.requests_ok += 1;
            first = first.min(r.send_ns);
            last = last.max(r.end_ns);
            summary.input_tokens += r.isl;
            summary.output_tokens += r.osl;
            cached = cached.and_then(|c| r.usage.cached_tokens.map(|x| c + x));
            let to_ms = |ns: f64| ns / 1e6;
            if let Some(ttft_ns) = r.ttft_ns() {
                ttft.push(to_ms(ttft_ns as f64));
            }
            if let Some(itl_ns) = r.itl_ns() {
                itl.push(to_ms(itl_ns));
            }
            if let Some(latency_ns) = r.latency_ns() {
                lat.push(to_ms(latency_ns as f64));
            }
            if let Some(scheduled_ttft_ns) = r.scheduled_ttft_ns() {
                scheduled_ttft.push(to_ms(scheduled_ttft_ns as f64));
            }
            if let Some(scheduled_latency_ns) = r.scheduled_latency_ns() {
                scheduled_lat.push(to_ms(scheduled_latency_ns as f64));
            }
            lag.push(to_ms(r.send_lag_ns() as f64));
            isl.push(r.isl as f64);
            osl.push(r.osl as f64);
        }
        if summary.requests_ok > 0 {
            summary.duration_s = (last.saturating_sub(first)) as f64 / 1e9;
            summary.cached_tokens = cached;
        }
        let duration = summary.duration_s.max(1e-9);
        if summary.requests_ok > 0 {
            summary.request_throughput = summary.requests_ok as f64 / duration;
            summary.output_token_throughput = summary.output_tokens as f64 / duration;
            summary.input_token_throughput = summary.input_tokens as f64 / duration;
        }
        summary.ttft_ms = Dist::of(ttft);
        summary.itl_ms = Dist::of(itl);
        summary.latency_ms = Dist::of(lat);
        summary.scheduled_ttft_ms = Dist::of(scheduled_ttft);
        summary.scheduled_latency_ms = Dist::of(scheduled_lat);
        summary.send_lag_ms = Dist::of(lag);
        summary.isl = Dist::of(isl);
        summary.osl = Dist::of(osl);
        summary.full_response = interactivity::FullResponseInteractivity::of(records);
        summary.ttft_breakdown_ms = TtftBreakdown::of(records);
        summary.routing = routing_seen::RoutingSeen::of(records);
        summary.reply = ReplyFigures::of(records);
        summary
    }
}

/// What the successful profiling replies said beyond their content (reasoning models, agents that
/// call tools): aiperf's time to first output token (after the reasoning) and reasoning tokens,
/// and agentx's tool-call counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplyFigures {
    /// Milliseconds from each request's start to its first non-reasoning output (aiperf's
    /// `time_to_first_output_token`); equal to the TTFT for a reply without reasoning.
    pub ttfo_ms: Option<Dist>,
    /// Reasoning tokens over the replies (aiperf's `total_reasoning_tokens`).
    pub reasoning_tokens: u64,
    /// Replies that reasoned.
    pub reasoning_replies: u64,
    /// Tool calls the replies made.
    pub tool_calls: u64,
    /// Tool calls whose arguments were not valid JSON when the stream ended.
    pub tool_call_parse_failures: u64,
}

impl ReplyFigures {
    /// Over the successful profiling records; `None` when none reasoned or called a tool.
    pub fn of(records: &[RequestRecord]) -> Option<ReplyFigures> {
        let mut figures = ReplyFigures::default();
        let mut ttfo = Vec::new();
        let ok = records
            .iter()
            .filter(|r| r.phase == Phase::Profiling && Outcome::of(r) == Outcome::Ok);
        for record in ok {
            let reply = &record.reply;
            if let Some(tokens) = reply.reasoning_tokens.filter(|tokens| *tokens > 0) {
                figures.reasoning_tokens += tokens;
                figures.reasoning_replies += 1;
            }
            figures.tool_calls += u64::from(reply.tool_calls);
            figures.tool_call_parse_failures += u64::from(reply.tool_call_parse_failures);
            if let Some(ns) = record.ttfo_ns() {
                ttfo.push(ns as f64 / 1e6);
            }
        }
        if figures.reasoning_replies == 0 && figures.tool_calls == 0 {
            return None;
        }
        figures.ttfo_ms = Dist::of(ttfo);
        Some(figures)
    }
}

/// Where the time to first token of the successful profiling requests went, each part a
/// distribution in milliseconds over the requests that gave it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TtftBreakdown {
    /// Waiting before the prefill began (the server's queue).
    pub queue: Option<Dist>,
    /// The prefill.
    pub prefill: Option<Dist>,
    /// The rest of the server's own TTFT (its TTFT less queue and prefill: scheduling, the first
    /// decode step, the frontend), for requests that gave all three.
    pub server_other: Option<Dist>,
    /// What the client added: the scheduled TTFT (send lag included) less the server's TTFT.
    pub client: Option<Dist>,
}

impl TtftBreakdown {
    /// The breakdown of `records`' successful profiling requests; `None` when none gave a server
    /// figure.
    pub fn of(records: &[RequestRecord]) -> Option<TtftBreakdown> {
        let ms = |ns: u64| ns as f64 / 1e6;
        let (mut queue, mut prefill, mut other, mut client) = (vec![], vec![], vec![], vec![]);
        let measured = records
            .iter()
            .filter(|rec| rec.phase == Phase::Profiling && Outcome::of(rec) == Outcome::Ok);
        for rec in measured {
            let server = rec.server.as_ref();
            let queue_ns = server.and_then(|side| side.queue_ns);
            let prefill_ns = server.and_then(|side| side.prefill_ns);
            queue.extend(queue_ns.map(ms));
            prefill.extend(prefill_ns.map(ms));
            if let (Some(ttft), Some(waited), Some(computed)) =
                (rec.server_ttft(), queue_ns, prefill_ns)
            {
                other.push(ms(ttft.saturating_sub(waited + computed)));
            }
            client.extend(rec.client_ttft_ns().map(ms));
        }
        let breakdown = TtftBreakdown {
            queue: Dist::of(queue),
            prefill: Dist::of(prefill),
            server_other: Dist::of(other),
            client: Dist::of(client),
        };
        (breakdown != TtftBreakdown::default()).then_some(breakdown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::{testkit, ServerSide};

    #[test]
    fn the_ttft_splits_into_the_servers_queue_prefill_rest_and_the_clients_share() {
        // TTFT 50 ms from the send, 2 ms of send lag; the server's own TTFT 40 ms of which 10 ms
        // queue and 25 ms prefill.
        let mut rec = testkit::rec(100, &[50, 60], 1000, 2);
        rec.intended_ns = rec.send_ns - 2_000_000;
        rec.server_ttft_ns = Some(40_000_000);
        rec.server = Some(ServerSide {
            queue_ns: Some(10_000_000),
            prefill_ns: Some(25_000_000),
            ..ServerSide::default()
        });
        // A failed request and one without server figures count for nothing but the client share
        // they cannot give.
        let bare = testkit::rec(300, &[50, 60], 1000, 2);
        let records = [rec, testkit::failed(200, 10), bare];
        let split = TtftBreakdown::of(&records).expect("one request gave server figures");
        let median = |part: &Option<Dist>| part.as_ref().map(|dist| (dist.count, dist.p50));
        assert_eq!(median(&split.queue), Some((1, 10.0)));
        assert_eq!(median(&split.prefill), Some((1, 25.0)));
        assert_eq!(median(&split.server_other), Some((1, 5.0)));
        // 50 + 2 (send lag) - 40.
        assert_eq!(median(&split.client), Some((1, 12.0)));
        assert_eq!(TtftBreakdown::of(&records[1..]), None);
    }
}
