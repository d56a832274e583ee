//! Configuration of the simulated server: the timing model, the prefix cache, limits and faults.
//!
//! A [`SimConfig`] is plain data with public fields, built from a [`Preset`] and adjusted field by
//! field (by tests, or by the `sim` subcommand from its flags). [`SimConfig::validate`] is the one
//! place that rejects impossible values, so the server itself never meets a zero block size or a
//! rate outside `[0, 1]`.

use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use super::SimError;

/// A named starting point for the timing model and the engine's capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// A ~30B-class model on one H200: fast prefill, ~10 ms decode steps, 256 sequences.
    H200,
    /// A small model on a few CPU cores: slow prefill and decode, 8 sequences, a small cache.
    CpuSmall,
    /// No delays at all: measures the client, never the server.
    Max,
}

impl Preset {
    /// Names accepted by `--preset`.
    pub const NAMES: &'static [&'static str] = &["h200", "cpu-small", "max"];
}

impl FromStr for Preset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "h200" => Ok(Preset::H200),
            "cpu-small" => Ok(Preset::CpuSmall),
            "max" => Ok(Preset::Max),
            other => Err(format!(
                "unknown preset `{other}`; use one of {}",
                Preset::NAMES.join(", ")
            )),
        }
    }
}

/// Whose Prometheus names, labels and counter spellings `GET /metrics` speaks. The quantities are
/// the same simulated ones (prompt, generated and cached tokens, requests, running and waiting
/// requests, KV usage) under each engine's own names, so one run can be checked against every
/// engine family a reader of the exports knows (`sim/metrics.rs` has the names and their sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricNames {
    /// vLLM's `vllm:` names (the default).
    #[default]
    Vllm,
    /// SGLang's `sglang:` names.
    Sglang,
    /// TensorRT-LLM's `trtllm_` names, as `trtllm-serve` exposes them.
    Trtllm,
    /// ATOM's `atom:` names.
    Atom,
}

impl MetricNames {
    /// Names accepted by `--metric-names`.
    pub const NAMES: &'static [&'static str] = &["vllm", "sglang", "trtllm", "atom"];

    /// The value's name, as `--metric-names` takes it.
    pub fn name(self) -> &'static str {
        match self {
            MetricNames::Vllm => "vllm",
            MetricNames::Sglang => "sglang",
            MetricNames::Trtllm => "trtllm",
            MetricNames::Atom => "atom",
        }
    }
}

impl FromStr for MetricNames {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "vllm" => Ok(MetricNames::Vllm),
            "sglang" => Ok(MetricNames::Sglang),
            "trtllm" => Ok(MetricNames::Trtllm),
            "atom" => Ok(MetricNames::Atom),
            other => Err(format!(
                "unknown metric names `{other}`; use one of {}",
                MetricNames::NAMES.join(", ")
            )),
        }
    }
}

/// How the simulator spreads chat requests over its engines (`--router`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Router {
    /// The first non-empty of the session headers agentx and the harness send (`x-session-affinity`,
    /// `x-smg-routing-key`, `x-dynamo-session-id`, `x-session-id`, `x-correlation-id`), hashed over
    /// the engines; round-robin without one (counted in `agentx_sim:router_unkeyed_total`).
    /// agentx always sends `x-correlation-id`, so every stream is pinned.
    #[default]
    AnyHeader,
    /// Only [`SimConfig::router_header`] pins a session. Its first request binds the session to
    /// the engine of its parent ([`SimConfig::router_parent_header`]) when the parent is bound,
    /// else to the hash of its value; requests without it go round-robin and are counted
    /// (`agentx_sim:router_unkeyed_total`).
    Session,
    /// Each request to the next engine, whatever its headers.
    RoundRobin,
    /// The engine with the fewest requests running and waiting when the request arrives (the
    /// lowest index on a tie).
    LeastLoaded,
}

impl Router {
    /// Names accepted by `--router`.
    pub const NAMES: &'static [&'static str] =
        &["any-header", "session", "round-robin", "least-loaded"];

    /// The value's name, as `--router` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Router::AnyHeader => "any-header",
            Router::Session => "session",
            Router::RoundRobin => "round-robin",
            Router::LeastLoaded => "least-loaded",
        }
    }
}

impl FromStr for Router {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "any-header" => Ok(Router::AnyHeader),
            "session" => Ok(Router::Session),
            "round-robin" => Ok(Router::RoundRobin),
            "least-loaded" => Ok(Router::LeastLoaded),
            other => Err(format!(
                "unknown router `{other}`; use one of {}",
                Router::NAMES.join(", ")
            )),
        }
    }
}

/// How an engine's prefix cache evicts and what bounds admission (`--eviction`). Both evict with
/// the cache model's [`agentx_metrics::kvmodel::Lru`]: least recently used first, and within one
/// prompt its tail before its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Eviction {
    /// Today's policy: the cache's capacity is also the KV budget admission waits for.
    #[default]
    TailFirst,
    /// The cache model's definition, kept fixed whatever `TailFirst` becomes, with admission
    /// taken off the cache size: requests wait for KV space within `max(cache_capacity_tokens,
    /// max_num_seqs × max_model_len)`, so a small cache changes what is evicted but not the order
    /// requests are admitted in.
    Lru,
}

impl Eviction {
    /// Names accepted by `--eviction`.
    pub const NAMES: &'static [&'static str] = &["tail-first", "lru"];

    /// The value's name, as `--eviction` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Eviction::TailFirst => "tail-first",
            Eviction::Lru => "lru",
        }
    }
}

impl FromStr for Eviction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tail-first" => Ok(Eviction::TailFirst),
            "lru" => Ok(Eviction::Lru),
            other => Err(format!(
                "unknown eviction `{other}`; use one of {}",
                Eviction::NAMES.join(", ")
            )),
        }
    }
}

/// The session header [`Router::Session`] keys on by default (Dynamo's).
pub const DEFAULT_ROUTER_HEADER: &str = "x-dynamo-session-id";
/// The parent-session header [`Router::Session`] binds a child to its parent by (Dynamo's).
pub const DEFAULT_ROUTER_PARENT_HEADER: &str = "x-dynamo-parent-session-id";

/// How long prefill and decode take.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// An engine-like model: queueing behind `max_num_seqs`, prefill proportional to the uncached
    /// prompt tokens (prefills of one engine run one after another), and a decode step that grows
    /// with the number of running sequences.
    Modeled(ModelTiming),
    /// Constant time to first token and inter-token latency for every request, with no queueing,
    /// cache or load effects: for measuring a client's own timing error.
    Fixed {
        /// Time from admission to the first token.
        ttft: Duration,
        /// Time between consecutive tokens.
        itl: Duration,
    },
    /// No delays at all (`--speed max`); chunks are written as fast as the client reads them.
    Instant,
}

/// Parameters of [`Timing::Modeled`]. Durations are real time before `speed` is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTiming {
    /// Prompt tokens computed per second during prefill (cached tokens cost nothing).
    pub prefill_tokens_per_s: f64,
    /// Fixed cost of scheduling a request and running its first step.
    pub prefill_overhead: Duration,
    /// Decode step time with a single running sequence.
    pub itl_base: Duration,
    /// Extra decode step time per additional running sequence of the same engine.
    pub itl_per_seq: Duration,
    /// Time scale: 2.0 runs twice as fast as the model says.
    pub speed: f64,
}

impl ModelTiming {
    /// Scale a modelled duration by the speed factor.
    pub(crate) fn scaled(&self, duration: Duration) -> Duration {
        if self.speed == 1.0 {
            duration
        } else {
            duration.div_f64(self.speed)
        }
    }

    /// Prefill compute time for `uncached` prompt tokens, already scaled.
    pub(crate) fn prefill(&self, uncached: u64) -> Duration {
        let secs = uncached as f64 / self.prefill_tokens_per_s;
        self.scaled(self.prefill_overhead + Duration::from_secs_f64(secs))
    }

    /// Decode step time with `running` sequences on the engine, already scaled.
    pub(crate) fn itl(&self, running: u64) -> Duration {
        let extra = self.itl_per_seq * (running.saturating_sub(1).min(u64::from(u32::MAX)) as u32);
        self.scaled(self.itl_base + extra)
    }
}

/// Faults injected on demand. Every decision is drawn from `seed` and the request's identity
/// (its `X-Request-ID`, or its arrival number), so a rerun with the same requests fails the same
/// requests in the same places.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    /// Seed of every fault decision.
    pub seed: u64,
    /// Fraction of chat requests answered 500 or 503 instead of a completion.
    pub fail_rate: f64,
    /// Fraction of streams whose connection is cut mid-stream.
    pub reset_rate: f64,
    /// Length of a stall (a pause in the middle of a stream). Real time, never scaled.
    pub stall: Duration,
    /// Fraction of streams that stall once for `stall`.
    pub stall_rate: f64,
    /// Fraction of streams that carry one malformed SSE event.
    pub malformed_rate: f64,
    /// Fraction of streams that end cleanly mid-answer, without the API's end marker (`data:
    /// [DONE]`, `message_stop`, `response.completed`): the body ends, the connection stays.
    pub truncate_rate: f64,
    /// Fraction of streams that end mid-answer with the API's error event (chat's `{"error"}`
    /// chunk, Anthropic's `error`, the Responses API's `response.failed`).
    pub stream_error_rate: f64,
    /// Fraction of the tool calls ([`Replies::tool_call_rate`]) whose arguments are streamed as
    /// text that is not valid JSON (the object never closes).
    pub malformed_tool_call_rate: f64,
    /// Stop accepting connections after this many requests (later requests on open connections
    /// get the connection closed without an answer).
    pub stop_after: Option<u64>,
    /// The engine dies at this chat request (counted from 1): that request gets no answer, every
    /// open connection is closed (streams cut mid-response) and new connections are refused, as
    /// when an engine crashes (out of KV memory at 98-100 % usage, a CUDA error).
    pub die_at: Option<u64>,
    /// Every this many `GET /dcgm/metrics` pages, every GPU's energy counter restarts from 0 (an
    /// exporter or driver restart), for tests of the energy's reset handling: a window longer than
    /// that many scrapes sees at least one reset, however long the run before it took.
    pub gpu_counter_reset_every: Option<u32>,
}

/// What a streamed reply holds beside its text: reasoning before it, a tool call after it. Both are
/// part of the reply's output tokens, so the reply still ends at `max_tokens` exactly.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Replies {
    /// Reasoning tokens streamed before the content of every reply (chat's
    /// `delta.reasoning_content`, an Anthropic `thinking` block, a Responses `reasoning` item),
    /// reported as the usage's reasoning tokens. A reply without `ignore_eos` draws its content
    /// length as before and adds these; any reply is cut at `max_tokens`, reasoning first.
    pub reasoning_tokens: u32,
    /// Fraction of replies that end with one tool call (deterministic by the fault seed and the
    /// request), its arguments streamed in pieces: the first tool of the request's `tools`, else
    /// [`DEFAULT_TOOL_NAME`].
    pub tool_call_rate: f64,
}

/// The tool a reply calls when its request names no tools.
pub const DEFAULT_TOOL_NAME: &str = "read_file";

/// The simulated GPU behind each engine (`--gpu-power`): its power follows the engine's running
/// requests, `idle_w + per_running_w × running`, and `GET /dcgm/metrics` serves it as
/// dcgm-exporter does (`gpu` module).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuModel {
    /// Watts with nothing running.
    pub idle_w: f64,
    /// Watts each running request adds.
    pub per_running_w: f64,
    /// Serve `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (without it, a reader integrates the power).
    pub energy_counter: bool,
}

/// The most watts a [`GpuModel`] figure takes (in milliwatts times a running count, its power
/// stays far inside 64 bits).
pub const MAX_GPU_WATTS: f64 = 1e6;

/// Everything the simulated server needs to know.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Model name served by `/v1/models` and used when a request names none.
    pub model: String,
    /// Reject requests that name another model with vLLM's 404 (otherwise any name is served).
    pub strict_model: bool,
    /// Context length: prompt plus requested output tokens may not exceed it.
    pub max_model_len: u64,
    /// Tokens per prefix-cache block (vLLM's default is 16).
    pub block_size: u32,
    /// Prefix-cache and KV capacity of each engine, in tokens.
    pub cache_capacity_tokens: u64,
    /// Sequences an engine runs at once; later requests wait in a FIFO queue.
    pub max_num_seqs: u32,
    /// Data-parallel engines behind the one port, each with its own cache, queue and metrics.
    pub engines: u32,
    /// How requests are spread over the engines.
    pub router: Router,
    /// The session header [`Router::Session`] keys on (case-insensitive).
    pub router_header: String,
    /// The header naming a session's parent session, for [`Router::Session`] (case-insensitive).
    pub router_parent_header: String,
    /// How the prefix cache evicts and what bounds admission.
    pub eviction: Eviction,
    /// The timing model.
    pub timing: Timing,
    /// Without `ignore_eos`, the output stops early at a length drawn from `[n/2, 3n/2]` for this
    /// `n` (never beyond `max_tokens`).
    pub natural_output_tokens: u32,
    /// Tokens per streamed content chunk (vLLM sends one).
    pub tokens_per_chunk: u32,
    /// Seed of the generated text.
    pub seed: u64,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// How prompt tokens are counted: words (agentx's tokenizer-free synthesis) or a tokenizer.json.
    pub tokenizer: agentx_tokens::TokenCounter,
    /// Reasoning and tool calls in streamed replies.
    pub replies: Replies,
    /// Injected faults.
    pub faults: Faults,
    /// When connections are closed between requests.
    pub keep_alive: KeepAliveConfig,
    /// Keep the headers of every chat request with the connection it came on (tests of routing
    /// headers and connection reuse read them back with `SimHandle::received`).
    pub record_headers: bool,
    /// Write one JSON line per chat request to this file (`--record-requests`; see the `record`
    /// module for the fields).
    pub record_requests: Option<std::path::PathBuf>,
    /// Hold a streamed answer's headers until its first token is due (`--headers-at-first-token`).
    pub headers_at_first_token: bool,
    /// Whose metric names `/metrics` speaks (`--metric-names`).
    pub metric_names: MetricNames,
    /// One simulated GPU per engine, served at `GET /dcgm/metrics` (`--gpu-power`); none without.
    pub gpu: Option<GpuModel>,
}

/// How long the server keeps a connection between requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeepAliveConfig {
    /// A connection idle this long is closed (hyper's header read timeout).
    pub idle: Duration,
    /// A connection is closed after this many requests (`Connection: close` on the last answer).
    pub max: Option<u32>,
    /// Every answer carries `Keep-Alive: timeout=T[, max=N]`, as llama.cpp's do.
    pub header: bool,
}

impl Default for KeepAliveConfig {
    fn default() -> Self {
        KeepAliveConfig {
            idle: Duration::from_secs(30),
            max: None,
            header: false,
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig::preset(Preset::H200)
    }
}

impl SimConfig {
    /// The configuration of a preset, listening on 127.0.0.1 port 0.
    pub fn preset(preset: Preset) -> SimConfig {
        let base = SimConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            model: "agentx-sim".to_string(),
            strict_model: false,
            max_model_len: 131_072,
            block_size: 16,
            cache_capacity_tokens: 1_048_576,
            max_num_seqs: 256,
            engines: 1,
            router: Router::AnyHeader,
            router_header: DEFAULT_ROUTER_HEADER.to_string(),
            router_parent_header: DEFAULT_ROUTER_PARENT_HEADER.to_string(),
            eviction: Eviction::TailFirst,
            timing: Timing::Instant,
            natural_output_tokens: 256,
            tokens_per_chunk: 1,
            seed: 0,
            max_body_bytes: 64 << 20,
            tokenizer: agentx_tokens::TokenCounter::Words,
            replies: Replies::default(),
            faults: Faults::default(),
            keep_alive: KeepAliveConfig::default(),
            record_headers: false,
            record_requests: None,
            headers_at_first_token: false,
            metric_names: MetricNames::Vllm,
            gpu: None,
        };
        match preset {
            Preset::H200 => SimConfig {
                timing: Timing::Modeled(ModelTiming {
                    prefill_tokens_per_s: 25_000.0,
                    prefill_overhead: Duration::from_millis(15),
                    itl_base: Duration::from_millis(10),
                    itl_per_seq: Duration::from_micros(60),
                    speed: 1.0,
                }),
                ..base
            },
            Preset::CpuSmall => SimConfig {
                max_model_len: 32_768,
                cache_capacity_tokens: 65_536,
                max_num_seqs: 8,
                timing: Timing::Modeled(ModelTiming {
                    prefill_tokens_per_s: 400.0,
                    prefill_overhead: Duration::from_millis(50),
                    itl_base: Duration::from_millis(40),
                    itl_per_seq: Duration::from_millis(5),
                    speed: 1.0,
                }),
                ..base
            },
            Preset::Max => SimConfig {
                max_num_seqs: 4096,
                timing: Timing::Instant,
                ..base
            },
        }
    }

    /// The H200-like preset.
    pub fn h200() -> SimConfig {
        SimConfig::preset(Preset::H200)
    }

    /// The no-delay preset.
    pub fn max() -> SimConfig {
        SimConfig::preset(Preset::Max)
    }

    /// Reject values the server cannot run with, naming the field and how to fix it.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |field: &'static str, why: String| Err(SimError::Config { field, why });
        if self.block_size == 0 {
            return bad("block_size", "must be at least 1".into());
        }
        if self.max_num_seqs == 0 {
            return bad("max_num_seqs", "must be at least 1".into());
        }
        if self.engines == 0 || self.engines > 1024 {
            return bad(
                "engines",
                format!("must be in 1..=1024, got {}", self.engines),
            );
        }
        if self.max_model_len == 0 {
            return bad("max_model_len", "must be at least 1".into());
        }
        if self.tokens_per_chunk == 0 {
            return bad("tokens_per_chunk", "must be at least 1".into());
        }
        if self.model.is_empty() {
            return bad("model", "must not be empty".into());
        }
        for (field, name) in [
            ("router_header", &self.router_header),
            ("router_parent_header", &self.router_parent_header),
        ] {
            if hyper::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return bad(
                    field,
                    format!("`{name}` is not an HTTP header name; use letters, digits and `-`, such as {DEFAULT_ROUTER_HEADER}"),
                );
            }
        }
        if let Timing::Modeled(m) = &self.timing {
            if !(m.prefill_tokens_per_s.is_finite() && m.prefill_tokens_per_s > 0.0) {
                return bad(
                    "prefill_tokens_per_s",
                    format!("must be a positive number, got {}", m.prefill_tokens_per_s),
                );
            }
            if !(m.speed.is_finite() && m.speed > 0.0) {
                return bad(
                    "speed",
                    format!("must be a positive number or `max`, got {}", m.speed),
                );
            }
        }
        if let Some(gpu) = &self.gpu {
            for (field, watts) in [("idle_w", gpu.idle_w), ("per_running_w", gpu.per_running_w)] {
                if !(watts.is_finite() && (0.0..=MAX_GPU_WATTS).contains(&watts)) {
                    return bad(
                        field,
                        format!("must be watts from 0 to {MAX_GPU_WATTS}, got {watts}"),
                    );
                }
            }
        }
        let faults = &self.faults;
        for (field, rate) in [
            ("fail_rate", faults.fail_rate),
            ("reset_rate", faults.reset_rate),
            ("stall_rate", faults.stall_rate),
            ("malformed_rate", faults.malformed_rate),
            ("truncate_rate", faults.truncate_rate),
            ("stream_error_rate", faults.stream_error_rate),
            ("malformed_tool_call_rate", faults.malformed_tool_call_rate),
            ("tool_call_rate", self.replies.tool_call_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return bad(field, format!("must be a fraction in [0, 1], got {rate}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_validate() {
        for name in Preset::NAMES {
            let p: Preset = name.parse().unwrap();
            SimConfig::preset(p).validate().unwrap();
        }
        assert!("gpu"
            .parse::<Preset>()
            .unwrap_err()
            .contains("h200, cpu-small, max"));
    }

    #[test]
    fn validate_names_the_field() {
        let mut c = SimConfig::h200();
        c.faults.stall_rate = 1.5;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("stall_rate"), "{e}");
        let mut c = SimConfig::h200();
        c.block_size = 0;
        assert!(c.validate().unwrap_err().to_string().contains("block_size"));
    }

    #[test]
    fn routers_and_evictions_parse_by_name() {
        for name in Router::NAMES {
            assert_eq!(name.parse::<Router>().unwrap().name(), *name);
        }
        for name in Eviction::NAMES {
            assert_eq!(name.parse::<Eviction>().unwrap().name(), *name);
        }
        assert!("sticky"
            .parse::<Router>()
            .unwrap_err()
            .contains("any-header, session, round-robin, least-loaded"));
        assert!("fifo"
            .parse::<Eviction>()
            .unwrap_err()
            .contains("tail-first, lru"));
        let mut c = SimConfig::max();
        c.router_header = "bad name".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("router_header") && e.contains("bad name"), "{e}");
    }

    #[test]
    fn modeled_timing_scales() {
        let Timing::Modeled(mut m) = SimConfig::h200().timing else {
            unreachable!()
        };
        let one = m.prefill(25_000);
        assert_eq!(one, Duration::from_millis(1015));
        m.speed = 2.0;
        assert_eq!(m.prefill(25_000), Duration::from_micros(507_500));
        assert!(m.itl(100) > m.itl(1));
    }
}
