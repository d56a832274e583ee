//! aiperf's statistics over request records: the per-request metric values of `profile_export.jsonl`,
//! the per-metric distribution stats (avg, min, max, sum, p1..p99, std, count) and the aggregate and
//! derived metrics (request and error counts, benchmark duration, throughputs, context-overflow count).
//!
//! Invariants: pure functions of the records given, no I/O and no clocks. Which records count follows
//! aiperf's agentic replay: warmup records never count; context-overflow records count only towards
//! `context_overflow_count` (aiperf drops them before its metric pipeline); every other record is either
//! valid (no error, not cancelled) and feeds the record metrics, or an error and feeds `error_isl` and
//! `error_request_count`. Times are nanosecond offsets on the run clock; display units are aiperf's
//! (ms for latencies, tokens, sec for durations).

use serde::Serialize;

use super::dist::{nanos_in_passes, Figures, Sorted};
use super::Outcome;
use agentx_record::{Phase, RequestRecord};

/// A metric as aiperf names it: tag (the JSON key), header (the CSV name) and display unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// The JSON key.
    pub tag: &'static str,
    /// The CSV column's name.
    pub header: &'static str,
    /// The display unit.
    pub unit: &'static str,
}

const fn def(tag: &'static str, header: &'static str, unit: &'static str) -> MetricDef {
    MetricDef { tag, header, unit }
}

// Per-request (record) metrics, in the order they are written.
/// aiperf's `input_sequence_length` ("Input Sequence Length", tokens).
pub(crate) const INPUT_SEQUENCE_LENGTH: MetricDef =
    def("input_sequence_length", "Input Sequence Length", "tokens");
/// aiperf's `time_to_first_token` ("Time to First Token", ms).
pub(crate) const TIME_TO_FIRST_TOKEN: MetricDef =
    def("time_to_first_token", "Time to First Token", "ms");
/// aiperf's `time_to_first_output_token` ("Time to First Output Token", ms): to the first
/// non-reasoning output (content or a tool-call delta); absent when the reply had none.
pub(crate) const TIME_TO_FIRST_OUTPUT_TOKEN: MetricDef = def(
    "time_to_first_output_token",
    "Time to First Output Token",
    "ms",
);
/// aiperf's `time_to_second_token` ("Time to Second Token", ms).
pub(crate) const TIME_TO_SECOND_TOKEN: MetricDef =
    def("time_to_second_token", "Time to Second Token", "ms");
/// aiperf's `request_latency` ("Request Latency", ms).
pub(crate) const REQUEST_LATENCY: MetricDef = def("request_latency", "Request Latency", "ms");
/// aiperf's `inter_chunk_latency` ("Inter Chunk Latency", ms).
pub(crate) const INTER_CHUNK_LATENCY: MetricDef =
    def("inter_chunk_latency", "Inter Chunk Latency", "ms");
/// aiperf's `output_sequence_length` ("Output Sequence Length", tokens).
pub(crate) const OUTPUT_SEQUENCE_LENGTH: MetricDef =
    def("output_sequence_length", "Output Sequence Length", "tokens");
/// aiperf's `output_token_count` ("Output Token Count", tokens).
pub(crate) const OUTPUT_TOKEN_COUNT: MetricDef =
    def("output_token_count", "Output Token Count", "tokens");
/// aiperf's `reasoning_token_count` ("Reasoning Token Count", tokens): the server's
/// `reasoning_tokens` with server counts, else the reasoning text's tokens; absent without reasoning.
pub(crate) const REASONING_TOKEN_COUNT: MetricDef =
    def("reasoning_token_count", "Reasoning Token Count", "tokens");
/// aiperf's `inter_token_latency` ("Inter Token Latency", ms).
pub(crate) const INTER_TOKEN_LATENCY: MetricDef =
    def("inter_token_latency", "Inter Token Latency", "ms");
/// aiperf's `output_token_throughput_per_user` ("Output Token Throughput Per User", tokens/sec/user).
pub(crate) const OUTPUT_TOKEN_THROUGHPUT_PER_USER: MetricDef = def(
    "output_token_throughput_per_user",
    "Output Token Throughput Per User",
    "tokens/sec/user",
);
/// aiperf's `full_decode_duration` ("Full Decode Duration", ms).
pub(crate) const FULL_DECODE_DURATION: MetricDef =
    def("full_decode_duration", "Full Decode Duration", "ms");
/// aiperf's `full_response_inter_token_latency` ("Full-Response Inter Token Latency", ms).
pub(crate) const FULL_RESPONSE_INTER_TOKEN_LATENCY: MetricDef = def(
    "full_response_inter_token_latency",
    "Full-Response Inter Token Latency",
    "ms",
);
/// aiperf's `full_response_output_token_throughput_per_user` ("Full-Response Output Token Throughput Per User", tokens/sec/user).
pub(crate) const FULL_RESPONSE_OUTPUT_TOKEN_THROUGHPUT_PER_USER: MetricDef = def(
    "full_response_output_token_throughput_per_user",
    "Full-Response Output Token Throughput Per User",
    "tokens/sec/user",
);
/// aiperf's `usage_prompt_tokens` ("Usage Prompt Tokens", tokens).
pub(crate) const USAGE_PROMPT_TOKENS: MetricDef =
    def("usage_prompt_tokens", "Usage Prompt Tokens", "tokens");
/// aiperf's `usage_completion_tokens` ("Usage Completion Tokens", tokens).
pub(crate) const USAGE_COMPLETION_TOKENS: MetricDef = def(
    "usage_completion_tokens",
    "Usage Completion Tokens",
    "tokens",
);
/// aiperf's `usage_total_tokens` ("Usage Total Tokens", tokens).
pub(crate) const USAGE_TOTAL_TOKENS: MetricDef =
    def("usage_total_tokens", "Usage Total Tokens", "tokens");
/// aiperf's `usage_prompt_cache_read_tokens` ("Usage Prompt Cache Read Tokens", tokens).
pub(crate) const USAGE_PROMPT_CACHE_READ_TOKENS: MetricDef = def(
    "usage_prompt_cache_read_tokens",
    "Usage Prompt Cache Read Tokens",
    "tokens",
);
/// aiperf's `usage_reasoning_tokens` ("Usage Reasoning Tokens", tokens): the usage's
/// `reasoning_tokens`, when the server reported them.
pub(crate) const USAGE_REASONING_TOKENS: MetricDef =
    def("usage_reasoning_tokens", "Usage Reasoning Tokens", "tokens");
/// agentx's own: the tool calls a reply made; absent for a reply without one.
pub(crate) const TOOL_CALL_COUNT: MetricDef = def("tool_call_count", "Tool Call Count", "calls");
/// agentx's own: the tool calls of a reply whose arguments were not valid JSON at the end of the
/// stream; written beside `tool_call_count`, so its `sum` is the run's parse failures.
pub(crate) const TOOL_CALL_PARSE_FAILURE_COUNT: MetricDef = def(
    "tool_call_parse_failure_count",
    "Tool Call Parse Failure Count",
    "calls",
);
/// aiperf's `error_isl` ("Error Input Sequence Length", tokens).
pub(crate) const ERROR_ISL: MetricDef = def("error_isl", "Error Input Sequence Length", "tokens");
/// agentx's own: the time to first token from when the request was due (`credit_issued_ns`), send
/// lag included; `time_to_first_token` counts from the request's start, as aiperf does.
pub(crate) const SCHEDULED_TIME_TO_FIRST_TOKEN: MetricDef = def(
    "scheduled_time_to_first_token",
    "Scheduled Time to First Token",
    "ms",
);
/// agentx's own: the request latency from when the request was due, send lag included.
pub(crate) const SCHEDULED_REQUEST_LATENCY: MetricDef = def(
    "scheduled_request_latency",
    "Scheduled Request Latency",
    "ms",
);

/// Every record metric, in output order: aiperf's, then agentx's schedule-anchored pair and tool
/// calls.
pub(crate) const RECORD_METRICS: [MetricDef; 24] = [
    INPUT_SEQUENCE_LENGTH,
    TIME_TO_FIRST_TOKEN,
    TIME_TO_FIRST_OUTPUT_TOKEN,
    TIME_TO_SECOND_TOKEN,
    REQUEST_LATENCY,
    INTER_CHUNK_LATENCY,
    OUTPUT_SEQUENCE_LENGTH,
    OUTPUT_TOKEN_COUNT,
    REASONING_TOKEN_COUNT,
    FULL_DECODE_DURATION,
    INTER_TOKEN_LATENCY,
    FULL_RESPONSE_INTER_TOKEN_LATENCY,
    OUTPUT_TOKEN_THROUGHPUT_PER_USER,
    FULL_RESPONSE_OUTPUT_TOKEN_THROUGHPUT_PER_USER,
    USAGE_PROMPT_TOKENS,
    USAGE_COMPLETION_TOKENS,
    USAGE_TOTAL_TOKENS,
    USAGE_PROMPT_CACHE_READ_TOKENS,
    USAGE_REASONING_TOKENS,
    SCHEDULED_TIME_TO_FIRST_TOKEN,
    SCHEDULED_REQUEST_LATENCY,
    TOOL_CALL_COUNT,
    TOOL_CALL_PARSE_FAILURE_COUNT,
    ERROR_ISL,
];

// Aggregate and derived metrics (one value each).
/// aiperf's `request_count` ("Request Count", requests).
pub(crate) const REQUEST_COUNT: MetricDef = def("request_count", "Request Count", "requests");
/// aiperf's `error_request_count` ("Error Request Count", requests).
pub(crate) const ERROR_REQUEST_COUNT: MetricDef =
    def("error_request_count", "Error Request Count", "requests");
/// Successful plus failed requests (aiperf's `completed_request_count`); left out when 0.
pub(crate) const COMPLETED_REQUEST_COUNT: MetricDef = def(
    "completed_request_count",
    "Completed Requests (Success + Error)",
    "requests",
);
/// aiperf's `context_overflow_count` ("Context Overflow Count", requests).
pub(crate) const CONTEXT_OVERFLOW_COUNT: MetricDef = def(
    "context_overflow_count",
    "Context Overflow Count",
    "requests",
);
/// Warmup responses classified as context overflows: not failures, but they count in the overflow
/// rate that decides a submission's validity.
pub(crate) const WARMUP_CONTEXT_OVERFLOW_COUNT: MetricDef = def(
    "warmup_context_overflow_count",
    "Warmup Context Overflow Count",
    "requests",
);
/// Context overflows left out of the records (all of them, in agentic replay); written only when
/// there are some, as aiperf does.
pub(crate) const SKIPPED_CONTEXT_OVERFLOW_COUNT: MetricDef = def(
    "skipped_context_overflow_count",
    "Skipped Context Overflow Count",
    "requests",
);
/// `1 / percentile(latency_s / OSL, p)`: output tokens per second a user sees end to end.
pub(crate) const E2E_NORMALIZED_INTERACTIVITY_P75: MetricDef = def(
    "e2e_normalized_interactivity_p75",
    "E2E Normalized Interactivity p75",
    "tokens/sec/user",
);
/// aiperf's `e2e_normalized_interactivity_p90` ("E2E Normalized Interactivity p90", tokens/sec/user).
pub(crate) const E2E_NORMALIZED_INTERACTIVITY_P90: MetricDef = def(
    "e2e_normalized_interactivity_p90",
    "E2E Normalized Interactivity p90",
    "tokens/sec/user",
);
/// aiperf's `min_request_timestamp` ("Minimum Request Timestamp", ns).
pub(crate) const MIN_REQUEST_TIMESTAMP: MetricDef =
    def("min_request_timestamp", "Minimum Request Timestamp", "ns");
/// aiperf's `max_response_timestamp` ("Maximum Response Timestamp", ns).
pub(crate) const MAX_RESPONSE_TIMESTAMP: MetricDef =
    def("max_response_timestamp", "Maximum Response Timestamp", "ns");
/// aiperf's `benchmark_duration` ("Benchmark Duration", sec).
pub(crate) const BENCHMARK_DURATION: MetricDef =
    def("benchmark_duration", "Benchmark Duration", "sec");
/// aiperf's `total_isl` ("Total Input Sequence Length", tokens).
pub(crate) const TOTAL_ISL: MetricDef = def("total_isl", "Total Input Sequence Length", "tokens");
/// aiperf's `total_osl` ("Total Output Sequence Length", tokens).
pub(crate) const TOTAL_OSL: MetricDef = def("total_osl", "Total Output Sequence Length", "tokens");
/// aiperf's `total_usage_prompt_cache_read_tokens` ("Total Usage Prompt Cache Read Tokens", tokens).
pub(crate) const TOTAL_USAGE_PROMPT_CACHE_READ_TOKENS: MetricDef = def(
    "total_usage_prompt_cache_read_tokens",
    "Total Usage Prompt Cache Read Tokens",
    "tokens",
);
/// aiperf's `total_reasoning_tokens` ("Total Reasoning Tokens", tokens): the sum of
/// `reasoning_token_count`; absent when no record had reasoning.
pub(crate) const TOTAL_REASONING_TOKENS: MetricDef =
    def("total_reasoning_tokens", "Total Reasoning Tokens", "tokens");
/// agentx's own: tool calls whose arguments did not parse, over the valid records; absent when no
/// reply made a tool call.
pub(crate) const TOTAL_TOOL_CALL_PARSE_FAILURES: MetricDef = def(
    "total_tool_call_parse_failures",
    "Total Tool Call Parse Failures",
    "calls",
);
/// aiperf's `request_throughput` ("Request Throughput", requests/sec).
pub(crate) const REQUEST_THROUGHPUT: MetricDef =
    def("request_throughput", "Request Throughput", "requests/sec");
/// aiperf's `output_token_throughput` ("Output Token Throughput", tokens/sec).
pub(crate) const OUTPUT_TOKEN_THROUGHPUT: MetricDef = def(
    "output_token_throughput",
    "Output Token Throughput",
    "tokens/sec",
);
/// aiperf's `total_token_throughput` ("Total Token Throughput", tokens/sec).
pub(crate) const TOTAL_TOKEN_THROUGHPUT: MetricDef = def(
    "total_token_throughput",
    "Total Token Throughput",
    "tokens/sec",
);
/// aiperf's `input_token_throughput` ("Input Token Throughput", tokens/sec).
pub(crate) const INPUT_TOKEN_THROUGHPUT: MetricDef = def(
    "input_token_throughput",
    "Input Token Throughput",
    "tokens/sec",
);

/// A per-request metric value in display units.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// A count.
    Int(u64),
    /// A measure.
    Float(f64),
    /// One value per chunk or token (`inter_chunk_latency`).
    List(Vec<f64>),
}

impl Value {
    /// The value as a number, when it is one (`None` for a list).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Float(v) => Some(*v),
            Value::List(_) => None,
        }
    }

    /// The values this contributes to the run's distribution (a list contributes each element, as
    /// aiperf flattens list metrics such as `inter_chunk_latency`).
    fn push_into(&self, out: &mut Vec<f64>) {
        match self {
            Value::Int(v) => out.push(*v as f64),
            Value::Float(v) => out.push(*v),
            Value::List(v) => out.extend_from_slice(v),
        }
    }
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

/// How a record counts in aiperf's aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Warmup: excluded from every profiling figure.
    Warmup,
    /// A context overflow: dropped from records and error counts, counted in `context_overflow_count`.
    ContextOverflow,
    /// No error and not cancelled.
    Valid,
    /// Failed or cancelled (aiperf records a cancellation as an error).
    Error,
}

/// How `record` counts in aiperf's aggregate.
pub fn class(record: &RequestRecord) -> Class {
    if record.phase == Phase::Warmup {
        return Class::Warmup;
    }
    match Outcome::of(record) {
        Outcome::ContextOverflow => Class::ContextOverflow,
        Outcome::Ok => Class::Valid,
        Outcome::Failed | Outcome::Cancelled => Class::Error,
    }
}

/// The metrics of one request as `profile_export.jsonl` carries them, in output order. A failed or
/// cancelled request carries only `error_isl`; a metric that cannot be computed (no chunks, OSL < 2,
/// no usage) is absent, as in aiperf.
pub fn record_values(record: &RequestRecord) -> Vec<(MetricDef, Value)> {
    values_of(record, ChunkGaps::Listed)
}

/// [`record_values`] without the inter-chunk latencies' list: what a reader of one request's
/// figures (a goodput objective, a bootstrap cell, the distributions) takes, without a list of a
/// value a chunk built per request and dropped.
pub fn record_scalar_values(record: &RequestRecord) -> Vec<(MetricDef, Value)> {
    values_of(record, ChunkGaps::Left)
}

/// Whether [`values_of`] lists a request's inter-chunk latencies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ChunkGaps {
    Listed,
    Left,
}

/// [`record_values`], the inter-chunk list as `chunk_gaps` says.
fn values_of(record: &RequestRecord, chunk_gaps: ChunkGaps) -> Vec<(MetricDef, Value)> {
    if !Outcome::of(record).is_ok() {
        return vec![(ERROR_ISL, Value::Int(record.isl))];
    }
    let mut out = vec![(INPUT_SEQUENCE_LENGTH, Value::Int(record.isl))];
    if let Some(ttft) = record.ttft_ns() {
        out.push((TIME_TO_FIRST_TOKEN, Value::Float(ms(ttft as f64))));
    }
    if let Some(ttfo) = record.ttfo_ns() {
        out.push((TIME_TO_FIRST_OUTPUT_TOKEN, Value::Float(ms(ttfo as f64))));
    }
    let offsets = &record.chunk_offsets_ns;
    if let Some(second_ns) = offsets.gaps().next() {
        out.push((TIME_TO_SECOND_TOKEN, Value::Float(ms(second_ns as f64))));
    }
    if let Some(latency) = record.latency_ns() {
        out.push((REQUEST_LATENCY, Value::Float(ms(latency as f64))));
    }
    if offsets.len() >= 2 && chunk_gaps == ChunkGaps::Listed {
        let gaps = offsets.gaps().map(|gap_ns| ms(gap_ns as f64)).collect();
        out.push((INTER_CHUNK_LATENCY, Value::List(gaps)));
    }
    out.push((OUTPUT_SEQUENCE_LENGTH, Value::Int(record.osl)));
    // aiperf's output tokens are the OSL less the reasoning (clamped at 0, as aiperf clamps).
    let reasoning = record.reply.reasoning_tokens;
    let output_tokens = record.osl.saturating_sub(reasoning.unwrap_or(0));
    out.push((OUTPUT_TOKEN_COUNT, Value::Int(output_tokens)));
    if let Some(reasoning) = reasoning {
        out.push((REASONING_TOKEN_COUNT, Value::Int(reasoning)));
    }
    if let Some(decode_ns) = record.full_decode_ns() {
        out.push((FULL_DECODE_DURATION, Value::Float(ms(decode_ns as f64))));
    }
    let itl = record.itl_ns();
    let full = record.full_response_itl_ns();
    if let Some(itl) = itl {
        out.push((INTER_TOKEN_LATENCY, Value::Float(ms(itl))));
    }
    if let Some(full_itl) = full {
        out.push((
            FULL_RESPONSE_INTER_TOKEN_LATENCY,
            Value::Float(ms(full_itl)),
        ));
    }
    if let Some(itl) = itl.filter(|x| *x > 0.0) {
        out.push((OUTPUT_TOKEN_THROUGHPUT_PER_USER, Value::Float(1e9 / itl)));
    }
    if let Some(full_itl) = full.filter(|x| *x > 0.0) {
        out.push((
            FULL_RESPONSE_OUTPUT_TOKEN_THROUGHPUT_PER_USER,
            Value::Float(1e9 / full_itl),
        ));
    }
    let usage = &record.usage;
    if let Some(prompt) = usage.prompt_tokens {
        out.push((USAGE_PROMPT_TOKENS, Value::Int(prompt)));
    }
    if let Some(completion) = usage.completion_tokens {
        out.push((USAGE_COMPLETION_TOKENS, Value::Int(completion)));
    }
    if let (Some(prompt), Some(completion)) = (usage.prompt_tokens, usage.completion_tokens) {
        out.push((USAGE_TOTAL_TOKENS, Value::Int(prompt + completion)));
    }
    if let Some(cached) = usage.cached_tokens {
        out.push((USAGE_PROMPT_CACHE_READ_TOKENS, Value::Int(cached)));
    }
    if let Some(reasoning) = usage.reasoning_tokens {
        out.push((USAGE_REASONING_TOKENS, Value::Int(reasoning)));
    }
    if let Some(scheduled_ttft) = record.scheduled_ttft_ns() {
        out.push((
            SCHEDULED_TIME_TO_FIRST_TOKEN,
            Value::Float(ms(scheduled_ttft as f64)),
        ));
    }
    if let Some(scheduled_latency) = record.scheduled_latency_ns() {
        out.push((
            SCHEDULED_REQUEST_LATENCY,
            Value::Float(ms(scheduled_latency as f64)),
        ));
    }
    let reply = &record.reply;
    if reply.tool_calls > 0 {
        out.push((TOOL_CALL_COUNT, Value::Int(u64::from(reply.tool_calls))));
        out.push((
            TOOL_CALL_PARSE_FAILURE_COUNT,
            Value::Int(u64::from(reply.tool_call_parse_failures)),
        ));
    }
    out
}

/// The percentiles aiperf reports, with their keys.
pub const PERCENTILES: [(&str, f64); 9] = [
    ("p1", 1.0),
    ("p5", 5.0),
    ("p10", 10.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
];

/// The distribution of one record metric, as aiperf's `MetricResult` has it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// The mean.
    pub avg: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The 1th percentile (linear interpolation, as numpy).
    pub p1: f64,
    /// The 5th percentile (linear interpolation, as numpy).
    pub p5: f64,
    /// The 10th percentile (linear interpolation, as numpy).
    pub p10: f64,
    /// The 25th percentile (linear interpolation, as numpy).
    pub p25: f64,
    /// The 50th percentile (linear interpolation, as numpy).
    pub p50: f64,
    /// The 75th percentile (linear interpolation, as numpy).
    pub p75: f64,
    /// The 90th percentile (linear interpolation, as numpy).
    pub p90: f64,
    /// The 95th percentile (linear interpolation, as numpy).
    pub p95: f64,
    /// The 99th percentile (linear interpolation, as numpy).
    pub p99: f64,
    /// Population standard deviation (`ddof = 0`). aiperf's schema page calls it "sample", but its
    /// code computes inference metrics with `np.std(..., ddof=0)`, and InferenceX's post-processor uses
    /// `statistics.pstdev`; matching the numbers users compare against matters more than the label.
    pub std: f64,
    /// How many values.
    pub count: usize,
    /// Their sum.
    pub sum: f64,
}

impl Stats {
    /// `None` for no values. NaNs are not expected (every value is a finite duration or count).
    pub fn of(values: &[f64]) -> Option<Stats> {
        Stats::of_vec(values.to_vec())
    }

    /// As [`Stats::of`], sorting `v` in place (no copy: a long run's flattened inter-chunk
    /// latencies run to millions of values).
    pub(crate) fn of_vec(values: Vec<f64>) -> Option<Stats> {
        let sorted = Sorted::new(values)?;
        Some(Stats::of_figures(&sorted.figures(&Stats::PERCENTILES)))
    }

    /// The percentiles every distribution reports.
    const PERCENTILES: [f64; 9] = [1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0];

    /// The statistics of a sample's figures (the [`Stats::PERCENTILES`] among them).
    fn of_figures(figures: &Figures) -> Stats {
        let at_percentile = |p| figures.percentile(p).unwrap_or(f64::NAN);
        Stats {
            avg: figures.mean,
            min: figures.min,
            max: figures.max,
            p1: at_percentile(1.0),
            p5: at_percentile(5.0),
            p10: at_percentile(10.0),
            p25: at_percentile(25.0),
            p50: at_percentile(50.0),
            p75: at_percentile(75.0),
            p90: at_percentile(90.0),
            p95: at_percentile(95.0),
            p99: at_percentile(99.0),
            std: figures.std_population,
            count: figures.len,
            sum: figures.sum,
        }
    }

    /// A statistic by its aiperf key (`avg`, `min`, `max`, `sum`, `p1`..`p99`, `std`, `count`).
    pub fn get(&self, key: &str) -> Option<f64> {
        Some(match key {
            "avg" => self.avg,
            "min" => self.min,
            "max" => self.max,
            "sum" => self.sum,
            "std" => self.std,
            "count" => self.count as f64,
            "p1" => self.p1,
            "p5" => self.p5,
            "p10" => self.p10,
            "p25" => self.p25,
            "p50" => self.p50,
            "p75" => self.p75,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            _ => return None,
        })
    }
}

/// aiperf's stat columns, in its CSV order.
pub const STAT_KEYS: [&str; 14] = [
    "avg", "min", "max", "sum", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std",
];

/// The distribution of every record metric that has at least one value, in output order: the
/// success metrics over valid records, `error_isl` over error records. Warmup and context-overflow
/// records are skipped.
pub fn distributions<'a, I>(records: I) -> Vec<(MetricDef, Stats)>
where
    I: IntoIterator<Item = &'a RequestRecord>,
    I::IntoIter: Clone,
{
    distributions_of_phase(records, Phase::Profiling)
}

/// [`distributions`] over the records of `phase` (aiperf's `warmup_metrics` are the warmup's).
pub fn distributions_of_phase<'a, I>(records: I, phase: Phase) -> Vec<(MetricDef, Stats)>
where
    I: IntoIterator<Item = &'a RequestRecord>,
    I::IntoIter: Clone,
{
    let kept = records
        .into_iter()
        .filter(|r| r.phase == phase && !r.context_overflow);
    let count = kept.clone().count();
    let mut values: Vec<Vec<f64>> = RECORD_METRICS
        .iter()
        .map(|_| Vec::with_capacity(count))
        .collect();
    for r in kept.clone() {
        for (m, v) in record_scalar_values(r) {
            if let Some(index) = RECORD_METRICS.iter().position(|d| d.tag == m.tag) {
                v.push_into(&mut values[index]);
            }
        }
    }
    // A long run's inter-chunk latencies run to tens of millions: they are not gathered from
    // `record_values` as milliseconds but walked in passes over the records' own chunk times
    // (the same figures to the bit: `dist::nanos_in_passes`).
    let ok = kept.filter(|r| Outcome::of(r).is_ok());
    let gaps = || ok.clone().flat_map(|r| r.chunk_offsets_ns.gaps());
    let mut chunk_gaps = nanos_in_passes(gaps, CHUNK_GAPS_PER_PASS, &Stats::PERCENTILES);
    RECORD_METRICS
        .iter()
        .zip(values)
        .filter_map(|(m, v)| {
            let stats = match m.tag == INTER_CHUNK_LATENCY.tag {
                true => chunk_gaps.take().map(|figures| Stats::of_figures(&figures)),
                false => Stats::of_vec(v),
            };
            stats.map(|s| (*m, s))
        })
        .collect()
}

/// How many inter-chunk latencies a pass of [`distributions_of_phase`] sorts at most (one bucket
/// of 65,536 ns may hold more): 16 MB of them, where a 20-minute run at 256 lanes has 19 million.
const CHUNK_GAPS_PER_PASS: usize = 1 << 22;

/// aiperf's E2E-normalized interactivity at p75 and p90: `1 / percentile(latency_s / OSL, p)`
/// over valid profiling records whose latency, OSL, TTFT and ISL are all positive. Left out when no
/// record qualifies.
pub fn e2e_normalized_interactivity<'a, I>(records: I) -> Vec<(MetricDef, Value)>
where
    I: IntoIterator<Item = &'a RequestRecord>,
{
    let mut ratio: Vec<f64> = records
        .into_iter()
        .filter(|r| class(r) == Class::Valid && r.osl > 0 && r.isl > 0)
        .filter(|r| r.ttft_ns().is_some_and(|t| t > 0))
        .filter_map(|r| {
            let latency_ns = r.latency_ns().filter(|latency_ns| *latency_ns > 0)?;
            Some(latency_ns as f64 / 1e9 / r.osl as f64)
        })
        .filter(|x| x.is_finite())
        .collect();
    ratio.sort_unstable_by(f64::total_cmp);
    [
        (E2E_NORMALIZED_INTERACTIVITY_P75, 75.0),
        (E2E_NORMALIZED_INTERACTIVITY_P90, 90.0),
    ]
    .into_iter()
    .filter_map(|(m, p)| {
        let percentile_ratio = super::percentile(&ratio, p)?;
        let interactivity = 1.0 / percentile_ratio;
        (percentile_ratio > 0.0 && interactivity.is_finite())
            .then_some((m, Value::Float(interactivity)))
    })
    .collect()
}

/// How much of a profiling phase the latency signals cover (aiperf's
/// `metadata.metric_duration_coverage`): the latest first token, and the latest end of a record
/// with an inter-token latency, as fractions of the configured duration from the phase start; and
/// (agentx-harness 1.0.14's `streaming_content_ratio`) the latest streamed content chunk of any
/// profiling request, cancelled and failed streams included.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Coverage {
    /// How far into profiling the last valid first token came (0 to 1).
    pub ttft_ratio: f64,
    /// How far into profiling the last valid request with an ITL ended.
    pub inter_token_latency_ratio: f64,
    /// How far into profiling the last content chunk of any record came.
    pub streaming_content_ratio: f64,
}

impl Coverage {
    /// Over valid profiling records; `None` without a positive duration.
    pub fn of<'a, I>(records: I, phase_start_ns: u64, duration_ns: u64) -> Option<Coverage>
    where
        I: IntoIterator<Item = &'a RequestRecord>,
    {
        if duration_ns == 0 {
            return None;
        }
        let (mut ttft_at, mut itl_at, mut content_at) = (None::<u64>, None::<u64>, None::<u64>);
        for r in records {
            if let Some(last) = r.chunk_offsets_ns.last() {
                let content_ns = r.send_ns + last;
                content_at = Some(content_at.map_or(content_ns, |m| m.max(content_ns)));
            }
            if class(r) != Class::Valid {
                continue;
            }
            if let Some(first_token_ns) = r.first_token_ns {
                ttft_at = Some(ttft_at.map_or(first_token_ns, |m| m.max(first_token_ns)));
            }
            if r.itl_ns().is_some_and(f64::is_finite) {
                itl_at = Some(itl_at.map_or(r.end_ns, |m| m.max(r.end_ns)));
            }
        }
        let ratio = |at: Option<u64>| {
            at.map_or(0.0, |t| {
                (t.saturating_sub(phase_start_ns) as f64 / duration_ns as f64).clamp(0.0, 1.0)
            })
        };
        Some(Coverage {
            ttft_ratio: ratio(ttft_at),
            inter_token_latency_ratio: ratio(itl_at),
            streaming_content_ratio: ratio(content_at),
        })
    }
}

/// The run-level aggregate and derived metrics of docs/specs/aiperf-metrics.md#aggregates, over
/// profiling records.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aggregate {
    /// Valid records.
    pub request_count: u64,
    /// Failed or cancelled records (context overflows excluded).
    pub error_request_count: u64,
    /// Context overflows of the profiling phase.
    pub context_overflow_count: u64,
    /// Context overflows of the warmup phase (not in any other figure).
    pub warmup_context_overflow_count: u64,
    /// Earliest send of a valid record (run-clock offset, ns).
    pub min_request_ns: Option<u64>,
    /// Latest end of a valid record (run-clock offset, ns).
    pub max_response_ns: Option<u64>,
    /// Seconds the throughputs divide by: `max_response - min_request`, or the window's length.
    pub duration_s: Option<f64>,
    /// Prompt tokens of the valid records.
    pub total_isl: u64,
    /// Output tokens of the valid records.
    pub(crate) total_osl: u64,
    /// Sum of `cached_tokens` over valid records that reported it; `None` when none did.
    pub(crate) total_cached_tokens: Option<u64>,
    /// Sum of the reasoning tokens over valid records that had reasoning; `None` when none did.
    pub(crate) total_reasoning_tokens: Option<u64>,
    /// Tool calls of the valid records, and those whose arguments did not parse.
    pub(crate) tool_calls: (u64, u64),
    /// Valid requests per second of `duration_s`.
    pub request_throughput: Option<f64>,
    /// Output tokens per second of `duration_s`.
    pub output_token_throughput: Option<f64>,
    /// Prompt and output tokens per second of `duration_s`.
    pub total_token_throughput: Option<f64>,
    /// Prompt tokens per second of `duration_s`.
    pub input_token_throughput: Option<f64>,
}

impl Aggregate {
    /// The whole profiling phase: `benchmark_duration = max_response_timestamp -
    /// min_request_timestamp` over valid records, as aiperf computes it.
    pub fn of<'a, I>(records: I) -> Aggregate
    where
        I: IntoIterator<Item = &'a RequestRecord>,
    {
        let mut aggregate = Aggregate::counts(records);
        if let (Some(min_request_ns), Some(max_response_ns)) =
            (aggregate.min_request_ns, aggregate.max_response_ns)
        {
            aggregate.set_duration(max_response_ns.saturating_sub(min_request_ns) as f64 / 1e9);
        }
        aggregate
    }

    /// A window of the run (a time slice): throughputs divide by the window's length, as aiperf's
    /// windowed results do.
    pub fn in_window<'a, I>(records: I, window_ns: u64) -> Aggregate
    where
        I: IntoIterator<Item = &'a RequestRecord>,
    {
        let mut aggregate = Aggregate::counts(records);
        aggregate.set_duration(window_ns as f64 / 1e9);
        aggregate
    }

    fn counts<'a, I>(records: I) -> Aggregate
    where
        I: IntoIterator<Item = &'a RequestRecord>,
    {
        let mut aggregate = Aggregate::default();
        for r in records {
            match class(r) {
                Class::Warmup => {
                    if r.context_overflow {
                        aggregate.warmup_context_overflow_count += 1;
                    }
                }
                Class::ContextOverflow => aggregate.context_overflow_count += 1,
                Class::Error => aggregate.error_request_count += 1,
                Class::Valid => {
                    aggregate.request_count += 1;
                    aggregate.min_request_ns = Some(
                        aggregate
                            .min_request_ns
                            .map_or(r.send_ns, |m| m.min(r.send_ns)),
                    );
                    aggregate.max_response_ns = Some(
                        aggregate
                            .max_response_ns
                            .map_or(r.end_ns, |m| m.max(r.end_ns)),
                    );
                    aggregate.total_isl += r.isl;
                    aggregate.total_osl += r.osl;
                    if let Some(cached) = r.usage.cached_tokens {
                        aggregate.total_cached_tokens =
                            Some(aggregate.total_cached_tokens.unwrap_or(0) + cached);
                    }
                    if let Some(reasoning) = r.reply.reasoning_tokens {
                        aggregate.total_reasoning_tokens =
                            Some(aggregate.total_reasoning_tokens.unwrap_or(0) + reasoning);
                    }
                    aggregate.tool_calls.0 += u64::from(r.reply.tool_calls);
                    aggregate.tool_calls.1 += u64::from(r.reply.tool_call_parse_failures);
                }
            }
        }
        aggregate
    }

    /// Sets the duration and the throughputs over it; a zero duration leaves them absent (aiperf
    /// raises "no metric value" rather than dividing by zero).
    fn set_duration(&mut self, duration_s: f64) {
        self.duration_s = Some(duration_s);
        if duration_s > 0.0 && self.request_count > 0 {
            self.request_throughput = Some(self.request_count as f64 / duration_s);
            self.output_token_throughput = Some(self.total_osl as f64 / duration_s);
            self.input_token_throughput = Some(self.total_isl as f64 / duration_s);
            self.total_token_throughput =
                Some((self.total_isl + self.total_osl) as f64 / duration_s);
        }
    }

    /// [`Aggregate::values`] of the whole run: the warmup's context overflows follow the profiling
    /// ones (a time slice, which never holds warmup, leaves them out).
    pub fn run_values(&self, anchor_unix_ns: u64) -> Vec<(MetricDef, Value)> {
        let mut values = self.values(anchor_unix_ns);
        let insert_at = values
            .iter()
            .position(|(m, _)| m.tag == CONTEXT_OVERFLOW_COUNT.tag)
            .map_or(values.len(), |i| i + 1);
        values.insert(
            insert_at,
            (
                WARMUP_CONTEXT_OVERFLOW_COUNT,
                Value::Float(self.warmup_context_overflow_count as f64),
            ),
        );
        if self.context_overflow_count > 0 {
            values.insert(
                insert_at + 1,
                (
                    SKIPPED_CONTEXT_OVERFLOW_COUNT,
                    Value::Float(self.context_overflow_count as f64),
                ),
            );
        }
        values
    }

    /// The aggregate as aiperf's `(metric, value)` pairs in output order, with timestamps made Unix
    /// by `anchor_unix_ns`. Metrics without a value are left out. Counts are floats, as aiperf writes
    /// them (`"avg": 20.0`); timestamps and token totals stay integers, because Unix nanoseconds do
    /// not fit an f64 exactly.
    pub fn values(&self, anchor_unix_ns: u64) -> Vec<(MetricDef, Value)> {
        let count = |n: u64| Value::Float(n as f64);
        let mut out = vec![
            (REQUEST_COUNT, count(self.request_count)),
            (ERROR_REQUEST_COUNT, count(self.error_request_count)),
            (CONTEXT_OVERFLOW_COUNT, count(self.context_overflow_count)),
        ];
        let completed = self.request_count + self.error_request_count;
        if completed > 0 {
            out.insert(2, (COMPLETED_REQUEST_COUNT, count(completed)));
        }
        let unix = |t: Option<u64>| t.map(|t| Value::Int(anchor_unix_ns.saturating_add(t)));
        let float = |v: Option<f64>| v.map(Value::Float);
        let rest = [
            (MIN_REQUEST_TIMESTAMP, unix(self.min_request_ns)),
            (MAX_RESPONSE_TIMESTAMP, unix(self.max_response_ns)),
            (BENCHMARK_DURATION, float(self.duration_s)),
            (TOTAL_ISL, Some(Value::Int(self.total_isl))),
            (TOTAL_OSL, Some(Value::Int(self.total_osl))),
            (
                TOTAL_USAGE_PROMPT_CACHE_READ_TOKENS,
                self.total_cached_tokens.map(Value::Int),
            ),
            (
                TOTAL_REASONING_TOKENS,
                self.total_reasoning_tokens.map(Value::Int),
            ),
            (
                TOTAL_TOOL_CALL_PARSE_FAILURES,
                (self.tool_calls.0 > 0).then_some(Value::Int(self.tool_calls.1)),
            ),
            (REQUEST_THROUGHPUT, float(self.request_throughput)),
            (OUTPUT_TOKEN_THROUGHPUT, float(self.output_token_throughput)),
            (TOTAL_TOKEN_THROUGHPUT, float(self.total_token_throughput)),
            (INPUT_TOKEN_THROUGHPUT, float(self.input_token_throughput)),
        ];
        out.extend(rest.into_iter().filter_map(|(m, v)| v.map(|v| (m, v))));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::{failed, rec};

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn stats_match_hand_computed_values() {
        let s = Stats::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            (s.count, s.sum, s.avg, s.min, s.max),
            (4, 10.0, 2.5, 1.0, 4.0)
        );
        // Population std: mean 2.5, squared deviations 2.25+0.25+0.25+2.25 = 5, /4 = 1.25.
        assert!(close(s.std, 1.25f64.sqrt()));
        // k = 3p/100: p1 -> 1.03, p25 -> 1.75, p50 -> 2.5, p75 -> 3.25, p99 -> 3.97.
        assert!(close(s.p1, 1.03));
        assert!(close(s.p5, 1.15));
        assert!(close(s.p10, 1.3));
        assert!(close(s.p25, 1.75));
        assert!(close(s.p50, 2.5));
        assert!(close(s.p75, 3.25));
        assert!(close(s.p90, 3.7));
        assert!(close(s.p95, 3.85));
        assert!(close(s.p99, 3.97));
        assert_eq!(s.get("p99"), Some(s.p99));
        assert_eq!(s.get("count"), Some(4.0));
        assert_eq!(s.get("p42"), None);
        let one = Stats::of(&[7.0]).unwrap();
        assert_eq!((one.std, one.p1, one.p99), (0.0, 7.0, 7.0));
        assert!(Stats::of(&[]).is_none());
    }

    /// The inter-chunk latencies gathered as nanosecond counts give, to the bit, the statistics of
    /// every record's list of them in `record_values` (aiperf's flattened values): gaps over
    /// 4.29 s, ties, a one-chunk reply, a failed request, a context overflow left out.
    #[test]
    fn chunk_gaps_are_the_flattened_record_lists() {
        let mut records = vec![
            rec(0, &[20, 30, 30, 45], 10, 4),
            rec(5, &[7_000, 7_010, 12_000, 12_001], 10, 4),
            rec(9, &[15], 10, 1),
            rec(11, &[3, 13, 23, 33, 43], 10, 5),
            failed(12, 10),
        ];
        let mut overflow = rec(13, &[1, 90_000], 10, 2);
        overflow.context_overflow = true;
        records.push(overflow);
        records[1].chunk_offsets_ns = vec![7_000_000_001, 7_010_000_000, 12_000_000_007].into();
        let flattened: Vec<f64> = records
            .iter()
            .filter(|r| !r.context_overflow)
            .flat_map(record_values)
            .filter(|(m, _)| m.tag == INTER_CHUNK_LATENCY.tag)
            .flat_map(|(_, v)| match v {
                Value::List(gaps) => gaps,
                _ => unreachable!("inter-chunk latency is a list"),
            })
            .collect();
        assert_eq!(flattened.len(), 3 + 2 + 4);
        let gathered = distributions(&records)
            .into_iter()
            .find(|(m, _)| m.tag == INTER_CHUNK_LATENCY.tag)
            .unwrap()
            .1;
        let expected = Stats::of(&flattened).unwrap();
        let bits = |s: &Stats| {
            [
                "avg", "min", "max", "sum", "std", "count", "p1", "p25", "p50", "p90", "p99",
            ]
            .map(|key| s.get(key).unwrap().to_bits())
        };
        assert_eq!(bits(&gathered), bits(&expected));
    }

    #[test]
    fn record_values_follow_aiperf_definitions() {
        // Sent at 100 ms, chunks at +20, +30, +60 ms; 4 output tokens.
        let mut r = rec(100, &[20, 30, 60], 50, 4);
        // Due at 95 ms, sent 5 ms late: aiperf's TTFT and latency count from the send
        // (`request_start_ns`), the scheduled pair from when it was due (`credit_issued_ns`).
        r.intended_ns = 95_000_000;
        r.usage.cached_tokens = Some(32);
        let v = record_values(&r);
        let get = |tag: &str| v.iter().find(|(m, _)| m.tag == tag).map(|(_, x)| x.clone());
        assert_eq!(get("input_sequence_length"), Some(Value::Int(50)));
        assert_eq!(get("time_to_first_token"), Some(Value::Float(20.0)));
        assert_eq!(
            get("scheduled_time_to_first_token"),
            Some(Value::Float(25.0))
        );
        assert_eq!(get("time_to_second_token"), Some(Value::Float(10.0)));
        assert_eq!(get("request_latency"), Some(Value::Float(60.0)));
        assert_eq!(get("scheduled_request_latency"), Some(Value::Float(65.0)));
        assert_eq!(
            get("inter_chunk_latency"),
            Some(Value::List(vec![10.0, 30.0]))
        );
        assert_eq!(get("output_sequence_length"), Some(Value::Int(4)));
        assert_eq!(get("output_token_count"), Some(Value::Int(4)));
        // (60 - 20) / (4 - 1) ms: the same on either clock.
        let Some(Value::Float(itl)) = get("inter_token_latency") else {
            panic!("no itl")
        };
        assert!(close(itl, 40.0 / 3.0));
        let Some(Value::Float(tps)) = get("output_token_throughput_per_user") else {
            panic!("no tps")
        };
        assert!(close(tps, 1000.0 / (40.0 / 3.0)));
        assert_eq!(get("usage_prompt_tokens"), Some(Value::Int(50)));
        assert_eq!(get("usage_completion_tokens"), Some(Value::Int(4)));
        assert_eq!(get("usage_total_tokens"), Some(Value::Int(54)));
        assert_eq!(get("usage_prompt_cache_read_tokens"), Some(Value::Int(32)));
        assert_eq!(get("error_isl"), None);

        // One chunk, one token: no TTST, ICL, ITL or per-user throughput.
        let v = record_values(&rec(0, &[20], 10, 1));
        let tags: Vec<&str> = v.iter().map(|(m, _)| m.tag).collect();
        assert!(!tags.contains(&"time_to_second_token"));
        assert!(!tags.contains(&"inter_chunk_latency"));
        assert!(!tags.contains(&"inter_token_latency"));
        assert!(!tags.contains(&"output_token_throughput_per_user"));

        let f = record_values(&failed(0, 77));
        assert_eq!(f, vec![(ERROR_ISL, Value::Int(77))]);
        let mut c = rec(0, &[20, 40], 10, 3);
        c.cancelled = true;
        assert_eq!(record_values(&c), vec![(ERROR_ISL, Value::Int(10))]);
    }

    #[test]
    fn reasoning_and_tool_calls_follow_aiperf_and_are_absent_without_them() {
        // Sent at 100 ms; reasoning chunks at +20, +30, the first output at +60 ms; 10 tokens.
        let mut r = rec(100, &[20, 30, 60], 50, 10);
        r.reply.first_output_ns = Some(160_000_000);
        r.reply.reasoning_tokens = Some(4);
        r.usage.reasoning_tokens = Some(4);
        r.reply.tool_calls = 2;
        r.reply.tool_call_parse_failures = 1;
        let v = record_values(&r);
        let get = |tag: &str| v.iter().find(|(m, _)| m.tag == tag).map(|(_, x)| x.clone());
        assert_eq!(get("time_to_first_token"), Some(Value::Float(20.0)));
        assert_eq!(get("time_to_first_output_token"), Some(Value::Float(60.0)));
        assert_eq!(get("reasoning_token_count"), Some(Value::Int(4)));
        assert_eq!(get("usage_reasoning_tokens"), Some(Value::Int(4)));
        // The OSL holds the reasoning; aiperf's output tokens do not.
        assert_eq!(get("output_sequence_length"), Some(Value::Int(10)));
        assert_eq!(get("output_token_count"), Some(Value::Int(6)));
        assert_eq!(get("tool_call_count"), Some(Value::Int(2)));
        assert_eq!(get("tool_call_parse_failure_count"), Some(Value::Int(1)));
        let aggregate = Aggregate::of([&r, &r]).values(0);
        let total = |tag: &str| {
            aggregate
                .iter()
                .find(|(m, _)| m.tag == tag)
                .map(|(_, x)| x.clone())
        };
        assert_eq!(total("total_reasoning_tokens"), Some(Value::Int(8)));
        assert_eq!(total("total_tool_call_parse_failures"), Some(Value::Int(2)));

        let plain = rec(0, &[20, 30], 10, 3);
        let tags: Vec<&str> = record_values(&plain).iter().map(|(m, _)| m.tag).collect();
        for absent in [
            "time_to_first_output_token",
            "reasoning_token_count",
            "usage_reasoning_tokens",
            "tool_call_count",
            "tool_call_parse_failure_count",
        ] {
            assert!(!tags.contains(&absent), "{absent}");
        }
        let aggregate = Aggregate::of([&plain]).values(0);
        assert!(aggregate.iter().all(
            |(m, _)| !m.tag.starts_with("total_reasoning") && !m.tag.starts_with("total_tool")
        ));
    }

    #[test]
    fn distributions_skip_warmup_and_overflow_and_flatten_lists() {
        let mut warm = rec(0, &[1000], 9999, 2);
        warm.phase = Phase::Warmup;
        let mut over = failed(5, 123_456);
        over.context_overflow = true;
        let recs = vec![
            warm,
            over,
            rec(10, &[10, 20], 100, 2),
            rec(20, &[30, 60, 70], 300, 3),
            failed(30, 40),
        ];
        let d = distributions(&recs);
        let get = |tag: &str| d.iter().find(|(m, _)| m.tag == tag).map(|(_, s)| s.clone());
        let isl = get("input_sequence_length").unwrap();
        assert_eq!((isl.count, isl.sum, isl.avg), (2, 400.0, 200.0));
        let ttft = get("time_to_first_token").unwrap();
        assert_eq!((ttft.min, ttft.max, ttft.avg), (10.0, 30.0, 20.0));
        let icl = get("inter_chunk_latency").unwrap();
        // Gaps 10 | 30, 10 flattened.
        assert_eq!(
            (icl.count, icl.sum, icl.min, icl.max),
            (3, 50.0, 10.0, 30.0)
        );
        let e = get("error_isl").unwrap();
        assert_eq!((e.count, e.sum), (1, 40.0));
        assert!(get("usage_prompt_cache_read_tokens").is_none());
        // Output order follows RECORD_METRICS.
        let order: Vec<usize> = d
            .iter()
            .map(|(m, _)| RECORD_METRICS.iter().position(|x| x == m).unwrap())
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn aggregate_counts_duration_and_throughputs() {
        let mut warm = rec(0, &[5], 1000, 10);
        warm.phase = Phase::Warmup;
        let mut over = failed(50, 900);
        over.context_overflow = true;
        let mut cancelled = rec(1500, &[100], 10, 1);
        cancelled.cancelled = true;
        let mut valid_a = rec(1000, &[100, 200], 100, 20); // ends 1000 + 200 + 1 = 1201 ms
        valid_a.usage.cached_tokens = Some(60);
        let valid_b = rec(1100, &[300, 1899], 300, 30); // ends 1100 + 1899 + 1 = 3000 ms
        let recs = vec![warm, over, valid_a, valid_b, failed(2000, 7), cancelled];
        let aggregate = Aggregate::of(&recs);
        assert_eq!(aggregate.request_count, 2);
        assert_eq!(aggregate.error_request_count, 2);
        assert_eq!(aggregate.context_overflow_count, 1);
        assert_eq!(aggregate.min_request_ns, Some(1_000_000_000));
        assert_eq!(aggregate.max_response_ns, Some(3_000_000_000));
        assert_eq!(aggregate.duration_s, Some(2.0));
        assert_eq!((aggregate.total_isl, aggregate.total_osl), (400, 50));
        assert_eq!(aggregate.total_cached_tokens, Some(60));
        assert_eq!(aggregate.request_throughput, Some(1.0));
        assert_eq!(aggregate.output_token_throughput, Some(25.0));
        assert_eq!(aggregate.input_token_throughput, Some(200.0));
        assert_eq!(aggregate.total_token_throughput, Some(225.0));
        let values = aggregate.values(1_000);
        let get = |tag: &str| {
            values
                .iter()
                .find(|(m, _)| m.tag == tag)
                .map(|(_, x)| x.clone())
        };
        assert_eq!(
            get("min_request_timestamp"),
            Some(Value::Int(1_000_001_000))
        );
        assert_eq!(get("benchmark_duration"), Some(Value::Float(2.0)));
        assert_eq!(get("context_overflow_count"), Some(Value::Float(1.0)));
        assert_eq!(
            get("total_usage_prompt_cache_read_tokens"),
            Some(Value::Int(60))
        );

        let window = Aggregate::in_window(&recs, 4_000_000_000);
        assert_eq!(window.duration_s, Some(4.0));
        assert_eq!(window.request_throughput, Some(0.5));

        let none = Aggregate::of(&[failed(0, 1)]);
        assert_eq!((none.request_count, none.error_request_count), (0, 1));
        assert_eq!(none.duration_s, None);
        assert_eq!(none.request_throughput, None);
        let names: Vec<&str> = none.values(0).iter().map(|(m, _)| m.tag).collect();
        assert!(!names.contains(&"request_throughput"));
        assert!(names.contains(&"request_count"));
    }
}
