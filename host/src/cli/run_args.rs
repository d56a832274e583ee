//! The flags of `agentx-host run` ([`RunArgs`]): names and meanings follow aiperf's where aiperf has
//! the flag. Parsing only; `run_plan` turns them into a checked plan.

use std::path::PathBuf;

use clap::Args;

use super::HomeArgs;
use crate::client::ConnectionReuse;

/// Flags of `agentx-host run`. Names and meanings follow aiperf's where aiperf has the flag.
#[allow(
    rustdoc::invalid_html_tags,
    reason = "the field docs are the flags' help text, where <NAME> is a placeholder, not HTML"
)]
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The scenario component: a path, `path@sha256:<hex>`, `sha256:<prefix>` or a name in the store.
    /// Defaults to the built-in agentx (the harness's `--scenario agentx`); `agentx-v1` and
    /// `agentx-mvp` name the other built-ins.
    #[arg(value_name = "SCENARIO")]
    pub(crate) scenario: Option<String>,
    /// The scenario, as aiperf's and the harness's `--scenario NAME` (the same as the positional).
    #[arg(
        long = "scenario",
        value_name = "SCENARIO",
        conflicts_with = "scenario",
        help_heading = "What to replay"
    )]
    pub(crate) scenario_flag: Option<String>,

    /// Seed of start turns and prompt text; drawn (and printed) when unset.
    #[arg(help_heading = "What to replay", long)]
    pub random_seed: Option<u64>,
    /// Replay the recorded assistant turns instead of threading the server's replies into the history.
    /// Env: AGENTX_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES=0 (or the AIPERF_ name).
    #[arg(help_heading = "What to replay", long)]
    pub(crate) recorded_assistant: bool,
    /// Where the cache-bust marker goes (the scenario may lock it).
    #[arg(help_heading = "What to replay", long, value_name = "TARGET")]
    pub(crate) cache_bust: Option<String>,
    /// A trace file/directory or a corpus name (shorthand for --input-file / --public-dataset).
    #[arg(help_heading = "What to replay", long, value_name = "PATH|NAME", conflicts_with_all = ["public_dataset", "input_file"])]
    pub(crate) dataset: Option<String>,
    /// A public corpus by name (resolved from the Hugging Face hub cache).
    #[arg(
        help_heading = "What to replay",
        long,
        value_name = "NAME",
        conflicts_with = "input_file"
    )]
    pub(crate) public_dataset: Option<String>,
    /// Local weka traces: a `traces.jsonl` or a directory of `*.json`.
    #[arg(help_heading = "What to replay", long, value_name = "PATH")]
    pub(crate) input_file: Option<PathBuf>,
    /// The format of --input-file, by aiperf's loader name: `weka_trace`, `mooncake_trace` or
    /// `tracelab`, by Dynamo's `dynamo` (request traces) and `agentic_mooncake`, by `otel`
    /// (OpenTelemetry GenAI traces, agentx's own name), or by `dataset --format`'s name [default:
    /// detected from the first record when only one format fits]. `graph-ir` (aiperf's Agent Graph
    /// IR) replays its traces' graphs with --concurrency trace instances in flight.
    #[arg(
        help_heading = "What to replay",
        long,
        visible_alias = "format",
        value_name = "TYPE"
    )]
    pub(crate) custom_dataset_type: Option<String>,
    /// Tokens per hash block of a Mooncake, TraceLab or OTel corpus [default: 512 mooncake, 64
    /// tracelab and otel] (weka traces say their own; a Dynamo corpus's rows declare theirs, which
    /// this must equal).
    #[arg(
        help_heading = "What to replay",
        long = "isl-block-size",
        visible_alias = "prompt-input-tokens-block-size",
        alias = "synthetic-input-tokens-block-size",
        value_name = "TOKENS"
    )]
    pub(crate) isl_block_size: Option<u32>,
    /// Lay every weka trace out in this many tokens per hash block, whatever its `block_size` says,
    /// as agentx-harness 1.0.12's CLI does with 64 (`--trace-block-size 64` reproduces a harness
    /// row) [default: each trace's own].
    #[arg(help_heading = "What to replay", long, value_name = "TOKENS")]
    pub(crate) trace_block_size: Option<u32>,
    /// Use only the first N traces (after --max-context-length).
    #[arg(help_heading = "What to replay", long, value_name = "N")]
    pub(crate) num_dataset_entries: Option<usize>,
    /// Drop traces whose peak context (prompt plus output tokens of their largest turn) exceeds
    /// this many tokens.
    #[arg(help_heading = "What to replay", long, value_name = "TOKENS")]
    pub(crate) max_context_length: Option<u64>,
    /// How the timestamps of requests nested in subagent entries are read: auto, absolute or
    /// relative (session-tree corpora).
    #[arg(help_heading = "What to replay", long, value_name = "BASIS")]
    pub(crate) weka_nested_timestamp_basis: Option<String>,
    /// The tokenizer for client-side counts and single-token synthesis words: a tokenizer.json
    /// (file or directory), a Hugging Face model id found in the local hub cache, or `builtin`.
    #[arg(help_heading = "What to replay", long, value_name = "PATH|MODEL")]
    pub(crate) tokenizer: Option<String>,
    /// The run id (seeds the markers); a fresh one by default. Pass one to reproduce a plan exactly.
    #[arg(help_heading = "What to replay", long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Server base URL. Without it, the built-in simulator is started and the bundled corpus replayed.
    #[arg(help_heading = "Against what", long, value_name = "URL")]
    pub(crate) url: Option<String>,
    /// GPUs behind the server: the divisor of the per-GPU figures (throughput and jobs per hour
    /// per GPU).
    #[arg(help_heading = "Against what", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) gpus: Option<u32>,
    /// Request path [default: /v1/chat/completions, /v1/messages with --endpoint-type anthropic,
    /// /v1/responses with --endpoint-type responses].
    #[arg(help_heading = "Against what", long, value_name = "PATH")]
    pub(crate) endpoint: Option<String>,
    /// The API the requests speak: `chat` (OpenAI chat completions), `anthropic` (Anthropic's
    /// Messages API: `system` and content blocks, `anthropic-version`, the key as `x-api-key`, its
    /// streamed events) or `responses` (the OpenAI Responses API: `input` items,
    /// `max_output_tokens`, its streamed `response.*` events).
    #[arg(help_heading = "Against what", long, default_value = "chat")]
    pub(crate) endpoint_type: String,
    /// Model name sent in every request. With --url and no model, a scenario that discovers it
    /// (agentx) takes the single model `/v1/models` lists; the others require it.
    #[arg(help_heading = "Against what", long, short = 'm')]
    pub(crate) model: Option<String>,
    /// Extra request body fields, as aiperf takes them: `key:value` pairs (several per flag, or
    /// comma-separated in one word; `true`/`false`, `null`, integers and decimals are typed, a
    /// value that is a JSON object or array is JSON, anything else a string) or a JSON object of
    /// fields (`'{"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true}}'`). Repeatable;
    /// a later key replaces an earlier one.
    #[arg(help_heading = "Against what", long, value_name = "KEY:VALUE|JSON", num_args = 1..)]
    pub(crate) extra_inputs: Vec<String>,
    /// Environment variable that holds the API key sent as `Authorization: Bearer` (`x-api-key`
    /// with --endpoint-type anthropic; never logged).
    #[arg(
        help_heading = "Against what",
        long,
        default_value = "AGENTX_API_KEY",
        value_name = "VAR"
    )]
    pub(crate) api_key_env: String,
    /// Speak HTTP/2 without TLS (h2c, prior knowledge) instead of HTTP/1.1.
    #[arg(help_heading = "Against what", long)]
    pub(crate) http2: bool,
    /// Close pooled connections idle this long (keep it below the server's keep-alive).
    /// Env: AGENTX_HTTP_KEEPALIVE_TIMEOUT or AIPERF_HTTP_KEEPALIVE_TIMEOUT.
    #[arg(help_heading = "Against what", long, value_name = "SECONDS")]
    pub(crate) http_keepalive_timeout: Option<f64>,
    /// Give up a request after this long.
    #[arg(
        help_heading = "Against what",
        long,
        default_value_t = 21600.0,
        value_name = "SECONDS"
    )]
    pub(crate) request_timeout_seconds: f64,
    /// Give up connecting after this long.
    #[arg(
        help_heading = "Against what",
        long,
        default_value_t = 30.0,
        value_name = "SECONDS"
    )]
    pub(crate) connect_timeout_seconds: f64,
    /// The header that carries each session's correlation id (default `X-Correlation-ID`).
    /// Session headers for routers are switched by AGENTX_HTTP_* / AIPERF_HTTP_* variables:
    /// X_SESSION_AFFINITY_FROM_CORRELATION_ID (on by default), X_SESSION_ID_FROM_CORRELATION_ID,
    /// X_SMG_ROUTING_KEY_FROM_CORRELATION_ID, X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID.
    #[arg(help_heading = "Against what", long, value_name = "NAME")]
    pub(crate) session_header: Option<String>,
    /// The session headers a router keys on, as one profile in place of the AGENTX_HTTP_* switches:
    /// `dynamo` (X-Dynamo-Session-ID, X-Dynamo-Parent-Session-ID on subagents, X-Dynamo-Session-Final
    /// on each stream's last turn: what Dynamo routes by since it removed the body's
    /// session_control), `smg` (X-SMG-Routing-Key), `session-id` (X-Session-ID), `claude-code` and
    /// `codex` (the headers those agents send), `custom:NAME` (NAME carries the correlation id) or
    /// `none`. X-Correlation-ID is always sent. Under the agentx scenario a profile the harness
    /// cannot send makes the run not a valid submission
    #[arg(help_heading = "Against what", long, value_name = "PROFILE", value_parser = |text: &str| text.parse::<crate::client::routing::Profile>())]
    pub(crate) routing_headers: Option<crate::client::routing::Profile>,
    /// Dynamo's conversation-aware routing: every request body carries `nvext.session_control`,
    /// keyed by its stream's correlation id (a subagent's by its parent's): `bind` (with the
    /// lease of --dynamo-session-timeout-seconds) on every turn, `close` on a root stream's final
    /// turn. AGENTX_/AIPERF_DYNAMO_SESSION_TRANSPORT=headers sends the session as
    /// X-Dynamo-Session-ID headers instead. Dynamo before 1.3 rejects `bind`.
    #[arg(help_heading = "Against what", long)]
    pub(crate) use_dynamo_conv_aware_routing: bool,
    /// Ask the server for its own worker and timing figures on every response (Dynamo's
    /// `nvext.extra_fields: ["worker_id", "timing"]`, merged into an `nvext` of --extra-inputs):
    /// each record then keeps the decode and prefill workers, the queue, prefill, TTFT and total
    /// times and the router's predicted cache hit, and the summary splits the TTFT. Under the agentx
    /// scenario the run is then not a valid submission (the harness sends no such field)
    #[arg(help_heading = "Against what", long)]
    pub(crate) server_timing: bool,
    /// The server's KV block size in tokens, for the cache model: each prompt is hashed as sent in
    /// blocks of this many words, and the achievable hit is modelled at it [default: the built-in
    /// simulator's, else 16 (vLLM's); a block size the server reports
    /// (`vllm:cache_config_info`) that is a multiple of it is used for the model]
    #[arg(help_heading = "Against what", long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(crate) kv_block_size: Option<u32>,
    /// The server's KV cache capacity in tokens, for the achievable hit at that capacity
    /// [default: what the server reports: vLLM `num_gpu_blocks` x `block_size`, SGLang
    /// `max_total_num_tokens`, TRT-LLM's max blocks; a reading that disagrees is kept beside it]
    #[arg(help_heading = "Against what", long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) kv_capacity_tokens: Option<u64>,
    /// The router's inactivity lease of a bound session, whole seconds [default: 300].
    #[arg(help_heading = "Against what", long, value_name = "SECONDS")]
    pub(crate) dynamo_session_timeout_seconds: Option<String>,
    /// Which connection each request goes out on: `pooled` (any idle one), `never` (a new one for
    /// every request) or `sticky-user-sessions` (one per session, released after its final turn,
    /// an error or a cancellation).
    #[arg(
        help_heading = "Against what",
        long,
        default_value = "pooled",
        value_name = "STRATEGY"
    )]
    pub(crate) connection_reuse_strategy: ConnectionReuse,
    /// Do not ask the server for `/v1/models` before the run (for servers that do not answer it).
    /// The check confirms the server is reachable and serves --model, and counts the lanes and
    /// traces that exceed its context length.
    #[arg(help_heading = "Against what", long)]
    pub(crate) skip_preflight: bool,
    /// Before the run, send one two-turn conversation twice and check that the server's prefix
    /// cache answers the repeat and that its responses count the cached tokens (4 requests, before
    /// every measurement window, no records). The verdict goes into the manifest
    /// (`cache_preflight`); a warning says what is wrong and its likely cause. On by default,
    /// except under the scenarios whose wire follows a reference request for request (agentx,
    /// agentx-v1, agentx-mvp and every component that decides every setting), where this flag
    /// turns it on
    #[arg(
        help_heading = "Against what",
        long,
        conflicts_with = "no_cache_preflight"
    )]
    pub(crate) cache_preflight: bool,
    /// Do not run the cache preflight.
    #[arg(help_heading = "Against what", long)]
    pub(crate) no_cache_preflight: bool,
    /// Stop before the run, with nothing written, when the cache preflight does not find a prefix
    /// cache that works and counts its hits (runs the preflight under every scenario)
    #[arg(
        help_heading = "Against what",
        long,
        conflicts_with = "no_cache_preflight"
    )]
    pub(crate) require_cache: bool,
    /// The simulator preset of a run without --url (h200, cpu-small, max).
    #[arg(
        help_heading = "Against what",
        long,
        default_value = "h200",
        value_name = "PRESET"
    )]
    pub(crate) sim_preset: String,

    /// Number of lanes (concurrent sessions; session trees under agentx and agentx-v1) [default: the scenario's; `agentx-host scenario inspect` lists them; 4 without
    /// --url]. A list of points is `agentx-host sweep`'s.
    #[arg(help_heading = "How long and how hard", long, value_name = "N[,N...]")]
    pub(crate) concurrency: Option<String>,
    /// Profiling time in seconds [default: the scenario's; `agentx-host scenario inspect` lists them; 30 without --url].
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub(crate) benchmark_duration: Option<f64>,
    /// How long in-flight requests may finish after the duration (`inf` waits for all)
    /// [default: the scenario's; 30 when it has none].
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS|inf"
    )]
    pub(crate) benchmark_grace_period: Option<String>,
    /// How long the warmup may take to drain: for session trees, the drain of the cache-pressure
    /// stage after its last request (the primers always complete); for single streams, the whole
    /// warmup [default: the scenario's; `inf` (wait for every warmup request) when it has none].
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS|inf"
    )]
    pub(crate) warmup_grace_period: Option<String>,
    /// Cancel the run once this fraction of profiling requests failed (checked after
    /// max(concurrency, 10) requests) [default: off].
    #[arg(help_heading = "How long and how hard", long, value_name = "FRACTION")]
    pub(crate) failed_request_threshold: Option<f64>,
    /// Earliest start point of a lane, as a fraction of its trace's turns (session trees: of its
    /// tree's span) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, value_name = "FRACTION")]
    pub(crate) trajectory_start_min_ratio: Option<f64>,
    /// Latest start point of a lane, as a fraction of its trace's turns (session trees: of its
    /// tree's span) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, value_name = "FRACTION")]
    pub(crate) trajectory_start_max_ratio: Option<f64>,
    /// Longest wait between a response and the session's next turn (the recorded think time is
    /// cut to it) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub(crate) inter_turn_delay_cap_seconds: Option<f64>,
    /// Wait only the recorded think time between turns, not the whole recorded gap (which also
    /// holds the recorded server time) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub(crate) use_think_time_only: Option<bool>,
    /// Send each turn as soon as the previous response ended (no think time); the scenarios of
    /// InferenceX refuse it without --unsafe-override.
    #[arg(help_heading = "How long and how hard", long)]
    pub(crate) ignore_trace_delays: bool,
    /// During profiling, a session waits at most this long between a response and its next turn
    /// (aiperf's per-trace idle cap; off by default).
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub(crate) trace_idle_gap_cap_seconds: Option<f64>,
    /// Session-tree scenarios: N more requests per lane after its warmup primers (aiperf's warmup
    /// pressure stage). Single-stream (0.1.0) scenarios send one warmup request per lane and
    /// warn that the flag has no effect.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "N",
        conflicts_with = "agentic_cache_warmup_duration"
    )]
    pub(crate) warmup_requests_per_lane: Option<u64>,
    /// Session-tree scenarios: replay at zero idle delay for this long after the warmup primers.
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub(crate) agentic_cache_warmup_duration: Option<f64>,
    /// The warmup grace under aiperf's agentic name; overrides --warmup-grace-period.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS|inf"
    )]
    pub(crate) agentic_warmup_grace_period: Option<String>,
    /// Session-tree scenarios: the whole-system idle cap (the scenario sets 10 s).
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub(crate) system_idle_gap_cap_seconds: Option<f64>,
    /// Session-tree scenarios: fire every lane's first request at once instead of spreading them.
    #[arg(help_heading = "How long and how hard", long)]
    pub(crate) burst_phase_starts: bool,
    /// Open-loop session arrivals: this many sessions per second start, each a whole tree from
    /// turn 0, with --concurrency their ceiling (an arrival over it is rejected and counted). Only
    /// under a scenario that allows it (`agentx-open`); `agentx` refuses it.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "PER_SECOND"
    )]
    pub(crate) session_arrival_rate: Option<f64>,
    /// With --session-arrival-rate: the arrival process, poisson, constant or gamma
    /// [default: the scenario's; poisson under agentx-open].
    #[arg(help_heading = "How long and how hard", long, value_name = "PATTERN")]
    pub(crate) session_arrival_pattern: Option<String>,
    /// With --session-arrival-pattern gamma: the gamma shape of the inter-arrival times (aiperf's
    /// --arrival-smoothness: 1 is poisson, below is burstier, above smoother) [default: 1].
    #[arg(help_heading = "How long and how hard", long, value_name = "SHAPE")]
    pub(crate) session_arrival_smoothness: Option<f64>,
    /// How a request carries the agent's tools: `tools` (tool schemas in the request, each recorded
    /// tool-using turn as a tool call and its result) or `text` (the tools as system text)
    /// [default: the scenario's; tools under agent-wire]. Only under a scenario that lists the
    /// `wire` knob (`agent-wire`); `agentx` refuses `--wire tools`.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "text|tools"
    )]
    pub(crate) wire: Option<String>,
    /// Whether the history's assistant turns carry the live reply's reasoning: `keep` or `drop`
    /// [default: the scenario's; drop under agent-wire]. Only under a scenario that lists the knob
    /// (`agent-wire`).
    #[arg(help_heading = "How long and how hard", long, value_name = "keep|drop")]
    pub(crate) reasoning_in_history: Option<String>,
    /// A graph-ir run's stop condition: this many LLM node dispatches (not traces), freed lanes
    /// recycling traces until then. Only under a scenario that lists the knob (`graph-ir`, the
    /// default of `--format graph-ir`).
    #[arg(help_heading = "How long and how hard", long, value_name = "N")]
    pub(crate) request_count: Option<u64>,
    /// A graph-ir corpus with recorded trace starts: start each trace at its recorded offset, its
    /// nodes still obeying their dependencies [default: the scenario's; on under graph-ir].
    #[arg(
        help_heading = "How long and how hard",
        long,
        overrides_with = "no_open_loop_replay"
    )]
    pub(crate) open_loop_replay: bool,
    /// A graph-ir corpus with recorded trace starts: run its traces on closed-loop lanes instead
    /// (--concurrency of them).
    #[arg(
        help_heading = "How long and how hard",
        long,
        overrides_with = "open_loop_replay"
    )]
    pub(crate) no_open_loop_replay: bool,
    /// A graph-ir open-loop replay: divide the recorded trace-start offsets by this factor
    /// [default: the scenario's; 1.0 under graph-ir].
    #[arg(help_heading = "How long and how hard", long, value_name = "FACTOR")]
    pub(crate) replay_speedup: Option<f64>,

    /// Directory of the run's outputs [default: a fresh artifacts/<scenario>-<UTC time>-<id>, with
    /// artifacts/latest pointing at it]. A directory that holds another run is refused unless
    /// --overwrite.
    #[arg(
        help_heading = "Outputs",
        long,
        short = 'o',
        alias = "artifact-dir",
        value_name = "DIR"
    )]
    pub(crate) output_artifact_dir: Option<PathBuf>,
    /// Replace the run in --output-artifact-dir (its files are removed when the new run starts).
    #[arg(help_heading = "Outputs", long)]
    pub(crate) overwrite: bool,
    /// Time-slice width of the timeslice exports, seconds [default: no timeslice exports].
    #[arg(help_heading = "Outputs", long, value_name = "SECONDS")]
    pub(crate) slice_duration: Option<f64>,
    /// Also write trace.json: the run as Chrome/Perfetto trace events (what `agentx-host timeline`
    /// writes afterwards).
    #[arg(help_heading = "Outputs", long)]
    pub(crate) timeline: bool,
    /// Export one OTLP span per request and per session to this collector (OTLP/HTTP protobuf;
    /// `http://host:4318`, `/v1/traces` added). Spans a slow collector cannot take are dropped and
    /// counted; the run never waits for it.
    #[arg(help_heading = "Outputs", long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Serve agentx's own Prometheus metrics (requests sent, in flight and completed by phase,
    /// tokens, TTFT/ITL/latency/send-lag histograms, busy lanes, active sessions, client CPU) at
    /// http://ADDR/metrics while the run goes: `HOST:PORT`, or a port alone for every interface
    /// (`9400` is `0.0.0.0:9400`; port 0 takes a free one, logged). Shard I of a sharded run
    /// listens on PORT+I. A port in use is refused before any request
    #[arg(help_heading = "Outputs", long, value_name = "ADDR", value_parser = metrics_addr)]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
    /// With --metrics-listen: keep serving this long after the run's outputs are written, so a
    /// Prometheus takes the final values [default: 0]
    #[arg(help_heading = "Outputs", long, value_name = "SECONDS", requires = "metrics_listen", value_parser = linger)]
    pub(crate) metrics_linger: Option<f64>,
    /// Send a W3C `traceparent` with every request, so a server's spans join agentx's [default:
    /// on, except under a scenario whose wire is the harness's (agentx)].
    #[arg(help_heading = "Outputs", long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub(crate) trace_context: Option<bool>,
    /// Service-level objectives of a good request, as aiperf's --goodput: space-separated
    /// METRIC:VALUE pairs in each metric's display unit, e.g. "time_to_first_token:2000
    /// inter_token_latency:50 request_latency:60000" (vLLM's ttft, tpot and e2el are accepted). The
    /// exports gain good_request_count, goodput and good_request_fraction.
    #[arg(help_heading = "Outputs", long, value_name = "SLOS", value_parser = |s: &str| crate::metrics::goodput::Goodput::parse(s))]
    pub(crate) goodput: Option<crate::metrics::goodput::Goodput>,
    /// With --goodput: a session (a tree with its subagents, in a tree replay) is good when at
    /// least this share of its requests are good; run_summary.json's `summary.sessions` gives the
    /// good sessions and each session's slowdown (replayed over recorded wall time).
    #[arg(help_heading = "Outputs", long, value_name = "SHARE", default_value_t = 1.0, requires = "goodput", value_parser = share)]
    pub(crate) session_goodput_share: f64,
    /// Objectives a session meets, judged on its own requests: space-separated NAME:BOUND pairs of
    /// `ttft_p90:MS` (p90 of its times to first token), `e2e_interactivity:TOK_S` (its E2E-normalized
    /// interactivity p90, at least), `output_speed:TOK_S` (median output speed of its requests, at
    /// least) and `slowdown:X` (replayed over recorded wall time, at most). An AgentPerf-style tier
    /// is "ttft_p90:2000 output_speed:20". run_summary.json's `summary.session_slo` counts the
    /// sessions meeting them; `sweep --slo sessions_meeting_slo:F --find-max` finds the most
    /// concurrent agents at which a share F does.
    #[arg(help_heading = "Outputs", long, value_name = "SLOS", value_parser = |s: &str| crate::metrics::sessions::SessionSlo::parse(s))]
    pub(crate) session_slo: Option<crate::metrics::sessions::SessionSlo>,
    /// The confidence level of the headline figures' intervals (run_summary.json's
    /// `summary.intervals`: a session bootstrap seeded from the run's seed), of `--trials`' spread
    /// and of `compare`'s verdicts.
    #[arg(help_heading = "Outputs", long, visible_alias = "confidence-level", value_name = "LEVEL", default_value = "0.95", value_parser = confidence_level)]
    pub(crate) confidence: crate::metrics::precision::Level,
    /// Do not scrape the server's Prometheus `/metrics`.
    #[arg(help_heading = "Outputs", long)]
    pub(crate) no_server_metrics: bool,
    /// More Prometheus endpoints to scrape besides the server's own `/metrics` (several per flag,
    /// and repeatable: every prefill, decode and frontend endpoint of a disaggregated deployment).
    #[arg(help_heading = "Outputs", long, value_name = "URL", num_args = 1..)]
    pub(crate) server_metrics: Vec<String>,
    /// GPU telemetry exporters to scrape (Prometheus text: NVIDIA's DCGM exporter, default port
    /// 9400, or AMD's Device Metrics Exporter, port 5000; a base URL gets `/metrics`), several per
    /// flag and repeatable (one per node). Scraped on the run's clock with a boundary scrape at each
    /// phase edge (interval: AGENTX_GPU_COLLECTION_INTERVAL or AIPERF_GPU_COLLECTION_INTERVAL);
    /// run_summary.json's `summary.energy` gives the profiling window's energy, power and joules
    /// per token, request and job. Run DCGM's exporter with `-c 1000` (its default refreshes every
    /// 30 s).
    #[arg(help_heading = "Outputs", long, value_name = "URL", num_args = 1..)]
    pub(crate) gpu_telemetry: Vec<String>,
    /// Seconds between progress lines (default 5 on a terminal, 30 otherwise; 0 turns them off).
    #[arg(help_heading = "Outputs", long, value_name = "SECONDS")]
    pub(crate) stats_interval: Option<f64>,
    /// What stderr shows while the run goes: `progress` (a progress bar on a terminal, progress
    /// lines otherwise) or `dashboard` (a live terminal dashboard: throughput, TTFT and ITL
    /// sparklines, the stage, lanes, the server's cache and queue, the last errors and log lines;
    /// without a terminal, the progress lines). Ctrl-C drains the run either way
    #[arg(help_heading = "Outputs", long, value_enum, default_value_t = UiMode::Progress)]
    pub(crate) ui: UiMode,
    /// Print the plan (lanes, start turns, markers) and send nothing.
    #[arg(help_heading = "Outputs", long)]
    pub(crate) dry_run: bool,
    /// Run the point N times, each a complete run in `<dir>/trial_<i>/` with the seed plus i, then
    /// `<dir>/trials.json`: each headline figure's spread between the trials (mean, deviation,
    /// range, the Student-t interval of the mean at --confidence) and the intervals of every
    /// trial's sessions pooled.
    #[arg(help_heading = "How long and how hard", long, alias = "num-profile-runs", value_name = "N", value_parser = trials_count, conflicts_with_all = ["dry_run", "shard"])]
    pub(crate) trials: Option<u32>,
    /// With --trials: every trial uses the one seed, so the trials differ by the server only (the
    /// workload is the same each time).
    #[arg(help_heading = "How long and how hard", long, requires = "trials")]
    pub(crate) same_seed: bool,
    /// Stop profiling once FIG's interval (at --confidence) is within PCT % of its estimate, e.g.
    /// `output_token_throughput:5` (repeatable: every target must be met). Checked every few
    /// seconds, never before --min-duration; the duration stays the limit. A scenario that locks
    /// the duration (agentx, agentx-mvp) refuses it. FIG is a headline figure: ttft_p50, ttft_p90,
    /// ttft_p99, itl_p50, itl_p90, latency_p90, request_throughput, output_token_throughput,
    /// total_token_throughput, cache_hit, goodput, jobs_per_hour, ...
    #[arg(help_heading = "How long and how hard", long, value_name = "FIG:PCT", value_parser = target_precision, conflicts_with = "trials")]
    pub(crate) target_precision: Vec<crate::run::config::TargetPrecision>,
    /// With --target-precision: profile at least this long before stopping early.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS",
        default_value_t = 60.0,
        requires = "target_precision"
    )]
    pub(crate) min_duration: f64,
    /// With --dry-run: print the plan as JSON.
    #[arg(help_heading = "Outputs", long, requires = "dry_run")]
    pub(crate) json: bool,
    /// Exit 1 when the run is not a valid submission.
    #[arg(help_heading = "Outputs", long)]
    pub(crate) require_valid: bool,

    /// Stream responses (always on: token timing needs the stream; accepted for aiperf compatibility).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub(crate) streaming: bool,
    /// Use the server's usage counts for ISL/OSL (the default; kept for aiperf compatibility).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub(crate) use_server_token_count: bool,
    /// Count ISL/OSL on the client (tokenizer-free word model, or --tokenizer) instead of the server's
    /// usage.
    #[arg(
        help_heading = "aiperf and InferenceX compatibility",
        long,
        conflicts_with = "use_server_token_count"
    )]
    pub(crate) client_token_count: bool,
    /// Accepted for aiperf compatibility: agentx lets lanes wrap around the dataset whenever there
    /// are more lanes than traces.
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub(crate) allow_dataset_wrap: bool,
    /// Collect no GPU telemetry, even with --gpu-telemetry (it wins, as in aiperf).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub(crate) no_gpu_telemetry: bool,
    /// Accepted for aiperf compatibility (agentx never runs tokenizer code).
    #[arg(
        help_heading = "aiperf and InferenceX compatibility",
        long,
        hide = true
    )]
    pub(crate) tokenizer_trust_remote_code: bool,
    /// Count each request's client-side ISL over the model's chat template (role headers, turn
    /// markers, generation prompt), rendered offline from the tokenizer_config.json (or
    /// chat_template.jinja) beside the --tokenizer's tokenizer.json; an error when there is none.
    /// Records take the server's prompt_tokens under --use-server-token-count, this count otherwise.
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub(crate) apply_chat_template: bool,
    /// Send the token limit as `max_tokens` (session-tree scenarios send `max_completion_tokens`,
    /// as aiperf 0.13 and agentx-harness do; single-stream scenarios always send `max_tokens`).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub(crate) use_legacy_max_tokens: bool,

    /// Run even if the scenario's locks are broken; the result is then not a valid submission.
    #[arg(help_heading = "Advanced", long)]
    pub(crate) unsafe_override: bool,
    /// Truncate every prompt to this many tokens (aiperf's name; InferenceX's scenarios refuse it).
    #[arg(
        help_heading = "Advanced",
        long,
        alias = "max-isl",
        value_name = "TOKENS"
    )]
    pub(crate) synthesis_max_isl: Option<i64>,

    /// Run shard I of N (0-based) of one run: every shard plans the whole run and replays the lanes
    /// l with l % N == I, into <output-artifact-dir>/shard-<I>/. Under srun, SLURM_PROCID and
    /// SLURM_NTASKS say it.
    #[arg(long, value_name = "I/N", help_heading = "Sharded runs")]
    pub(crate) shard: Option<String>,
    /// N shards, this one's index from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job).
    #[arg(long, value_name = "N", help_heading = "Sharded runs")]
    pub(crate) shards: Option<u32>,
    /// Where shard 0 listens for the rendezvous, HOST[:PORT] [env: AGENTX_COORDINATOR; default
    /// under Slurm: the first host of SLURM_JOB_NODELIST].
    #[arg(long, value_name = "HOST[:PORT]", help_heading = "Sharded runs")]
    pub(crate) coordinator: Option<String>,
    /// The rendezvous port, when --coordinator names none [env: AGENTX_COORDINATOR_PORT; default
    /// 29517]; a port in --coordinator that differs is an error.
    #[arg(long, value_name = "PORT", help_heading = "Sharded runs")]
    pub(crate) coordinator_port: Option<u16>,
    /// Where shard 0 listens for the rendezvous, an address or host of its machine (0.0.0.0: every
    /// interface) [env: AGENTX_COORDINATOR_BIND; default: the host of --coordinator]. Shards prove
    /// the secret in AGENTX_RENDEZVOUS_TOKEN (else one derived from the Slurm job step or the
    /// Kubernetes Job's AGENTX_JOB_UID); shard 0 refuses any other connection.
    #[arg(long, value_name = "ADDR", help_heading = "Sharded runs")]
    pub(crate) coordinator_bind: Option<String>,
    /// Seconds every shard may take to join and to plan [default: 300].
    #[arg(long, value_name = "SECONDS", help_heading = "Sharded runs")]
    pub(crate) rendezvous_timeout: Option<f64>,
    /// Shard 0 merges every shard's directory into DIR when all are done (a shared filesystem).
    #[arg(long, value_name = "DIR", help_heading = "Sharded runs")]
    pub(crate) merge_into: Option<PathBuf>,

    /// Other timing modes: accepted so the scenario can refuse them with its reason.
    #[arg(long, hide = true)]
    pub(crate) request_rate: Option<f64>,
    #[arg(long, hide = true)]
    pub(crate) arrival_pattern: Option<String>,
    #[arg(long, hide = true)]
    pub(crate) user_centric_rate: Option<f64>,
    #[arg(long, hide = true)]
    pub(crate) request_rate_ramp_duration: Option<f64>,
    #[arg(long, hide = true)]
    pub(crate) fixed_schedule: bool,
    /// Refuse to run unless the dataset's cache key is this (set by `agentx-host replay`).
    #[arg(long, hide = true)]
    pub expect_dataset_key: Option<String>,
    /// Refuse to run unless the scenario's sha256 is this (set by `agentx-host replay`).
    #[arg(long, hide = true)]
    pub expect_scenario_sha256: Option<String>,
    #[command(flatten)]
    pub(crate) home: HomeArgs,
}

/// `--session-goodput-share`: a share in (0, 1].
fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err(format!("{text:?} is not a share in (0, 1], e.g. 0.9")),
    }
}

/// `--metrics-listen`'s value: `HOST:PORT`, or a port alone (every interface).
fn metrics_addr(value: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(port) = value.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([0, 0, 0, 0], port)));
    }
    value
        .to_socket_addrs()
        .map_err(|error| {
            format!("`{value}` is not HOST:PORT or a port ({error}); e.g. 9400 or 127.0.0.1:9400")
        })?
        .next()
        .ok_or_else(|| format!("`{value}` names no address; e.g. 9400 or 127.0.0.1:9400"))
}

/// `--metrics-linger`'s value: seconds, at least 0.
fn linger(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.0..=86_400.0).contains(&secs) => Ok(secs),
        _ => Err(format!(
            "`{value}` is not a number of seconds from 0 to 86400"
        )),
    }
}

/// `--ui`: what stderr shows while a run goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum UiMode {
    /// A progress bar on a terminal, progress lines otherwise.
    Progress,
    /// The live dashboard on a terminal, progress lines otherwise.
    Dashboard,
}

/// `--confidence`: a level in (0, 1).
fn confidence_level(text: &str) -> Result<crate::metrics::precision::Level, String> {
    let level: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number; give a level in (0, 1), e.g. 0.95"))?;
    crate::metrics::precision::Level::new(level)
}

/// `--trials`: 1 or more.
fn trials_count(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(0) => Err("0 trials: give 1 or more".to_string()),
        Ok(count) => Ok(count),
        Err(_) => Err(format!("{text:?} is not a count of trials; give 1 or more")),
    }
}

/// `--target-precision FIG:PCT`: a headline figure and a half-width in percent of its estimate.
fn target_precision(text: &str) -> Result<crate::run::config::TargetPrecision, String> {
    let (name, percent) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not FIG:PCT, e.g. output_token_throughput:5"))?;
    let figure = crate::metrics::precision::Figure::parse(name.trim())?;
    let percent: f64 = percent
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| p.is_finite() && *p > 0.0 && *p < 100.0)
        .ok_or_else(|| format!("{text:?}: PCT must be a percentage in (0, 100), e.g. 5"))?;
    Ok(crate::run::config::TargetPrecision { figure, percent })
}
