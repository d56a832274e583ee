//! `agentx-host run`: flags with aiperf's names, [`RunPlan::resolve`] (where flags and environment
//! merge into one checked configuration), the call of the run ([`crate::run::execute`]) and what it
//! prints: the plan of a dry run, the summary and the outputs.
//!
//! Without `--url` the command is a self-contained demo: it starts the built-in simulator on a free
//! port, replays the bundled 24-trace corpus with the built-in default scenario (agentx), and
//! (because a demo is shorter than the scenario's 900 s floor) runs under `--unsafe-override`, so its
//! result is marked as not a valid submission.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Args;

use crate::client::ConnectionReuse;
use crate::metrics::Summary;
use crate::replay;
use crate::run::{Cancel, RunConfig, RunPlan};
pub use crate::run::{RunSettings, BUILTIN_SCENARIO, BUNDLED_CORPUS, MANIFEST_FILE};
use crate::run::{DEMO_CONCURRENCY, DEMO_DURATION_S};

use super::HomeArgs;

/// Flags of `agentx-host run`. Names and meanings follow aiperf's where aiperf has the flag.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The scenario component: a path, `path@sha256:<hex>`, `sha256:<prefix>` or a name in the store.
    /// Defaults to the built-in agentx (the harness's `--scenario agentx`); `agentx-v1` and
    /// `agentx-mvp` name the other built-ins.
    #[arg(value_name = "SCENARIO")]
    pub scenario: Option<String>,
    /// The scenario, as aiperf's and the harness's `--scenario NAME` (the same as the positional).
    #[arg(
        long = "scenario",
        value_name = "SCENARIO",
        conflicts_with = "scenario",
        help_heading = "What to replay"
    )]
    pub scenario_flag: Option<String>,

    /// Seed of start turns and prompt text; drawn (and printed) when unset.
    #[arg(help_heading = "What to replay", long)]
    pub random_seed: Option<u64>,
    /// Replay the recorded assistant turns instead of threading the server's replies into the history.
    /// Env: AGENTX_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES=0 (or the AIPERF_ name).
    #[arg(help_heading = "What to replay", long)]
    pub recorded_assistant: bool,
    /// Where the cache-bust marker goes (the scenario may lock it).
    #[arg(help_heading = "What to replay", long, value_name = "TARGET")]
    pub cache_bust: Option<String>,
    /// A trace file/directory or a corpus name (shorthand for --input-file / --public-dataset).
    #[arg(help_heading = "What to replay", long, value_name = "PATH|NAME", conflicts_with_all = ["public_dataset", "input_file"])]
    pub dataset: Option<String>,
    /// A public corpus by name (resolved from the Hugging Face hub cache).
    #[arg(
        help_heading = "What to replay",
        long,
        value_name = "NAME",
        conflicts_with = "input_file"
    )]
    pub public_dataset: Option<String>,
    /// Local weka traces: a `traces.jsonl` or a directory of `*.json`.
    #[arg(help_heading = "What to replay", long, value_name = "PATH")]
    pub input_file: Option<PathBuf>,
    /// The format of --input-file, by aiperf's loader name: `weka_trace`, `mooncake_trace` or
    /// `tracelab` [default: detected from the first record when only one format fits].
    #[arg(help_heading = "What to replay", long, value_name = "TYPE")]
    pub custom_dataset_type: Option<String>,
    /// Tokens per hash block of a Mooncake or TraceLab corpus [default: 512 mooncake, 64 tracelab]
    /// (weka traces say their own).
    #[arg(
        help_heading = "What to replay",
        long = "isl-block-size",
        visible_alias = "prompt-input-tokens-block-size",
        alias = "synthetic-input-tokens-block-size",
        value_name = "TOKENS"
    )]
    pub isl_block_size: Option<u32>,
    /// Lay every weka trace out in this many tokens per hash block, whatever its `block_size` says,
    /// as agentx-harness 1.0.12's CLI does with 64 (`--trace-block-size 64` reproduces a harness
    /// row) [default: each trace's own].
    #[arg(help_heading = "What to replay", long, value_name = "TOKENS")]
    pub trace_block_size: Option<u32>,
    /// Use only the first N traces (after --max-context-length).
    #[arg(help_heading = "What to replay", long, value_name = "N")]
    pub num_dataset_entries: Option<usize>,
    /// Drop traces whose peak context (prompt plus output tokens of their largest turn) exceeds
    /// this many tokens.
    #[arg(help_heading = "What to replay", long, value_name = "TOKENS")]
    pub max_context_length: Option<u64>,
    /// How the timestamps of requests nested in subagent entries are read: auto, absolute or
    /// relative (session-tree corpora).
    #[arg(help_heading = "What to replay", long, value_name = "BASIS")]
    pub weka_nested_timestamp_basis: Option<String>,
    /// The tokenizer for client-side counts and single-token synthesis words: a tokenizer.json
    /// (file or directory), a Hugging Face model id found in the local hub cache, or `builtin`.
    #[arg(help_heading = "What to replay", long, value_name = "PATH|MODEL")]
    pub tokenizer: Option<String>,
    /// The run id (seeds the markers); a fresh one by default. Pass one to reproduce a plan exactly.
    #[arg(help_heading = "What to replay", long, value_name = "ID")]
    pub run_id: Option<String>,

    /// Server base URL. Without it, the built-in simulator is started and the bundled corpus replayed.
    #[arg(help_heading = "Against what", long, value_name = "URL")]
    pub url: Option<String>,
    /// Request path [default: /v1/chat/completions, or /v1/messages with --endpoint-type anthropic].
    #[arg(help_heading = "Against what", long, value_name = "PATH")]
    pub endpoint: Option<String>,
    /// The API the requests speak: `chat` (OpenAI chat completions) or `anthropic` (Anthropic's
    /// Messages API: `system` and content blocks, `anthropic-version`, the key as `x-api-key`, its
    /// streamed events).
    #[arg(help_heading = "Against what", long, default_value = "chat")]
    pub endpoint_type: String,
    /// Model name sent in every request. With --url and no model, a scenario that discovers it
    /// (agentx) takes the single model `/v1/models` lists; the others require it.
    #[arg(help_heading = "Against what", long, short = 'm')]
    pub model: Option<String>,
    /// Extra request body fields, as aiperf takes them: `key:value` pairs (several per flag, or
    /// comma-separated in one word; `true`/`false`, `null`, integers and decimals are typed, a
    /// value that is a JSON object or array is JSON, anything else a string) or a JSON object of
    /// fields (`'{"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true}}'`). Repeatable;
    /// a later key replaces an earlier one.
    #[arg(help_heading = "Against what", long, value_name = "KEY:VALUE|JSON", num_args = 1..)]
    pub extra_inputs: Vec<String>,
    /// Environment variable that holds the API key sent as `Authorization: Bearer` (`x-api-key`
    /// with --endpoint-type anthropic; never logged).
    #[arg(
        help_heading = "Against what",
        long,
        default_value = "AGENTX_API_KEY",
        value_name = "VAR"
    )]
    pub api_key_env: String,
    /// Speak HTTP/2 without TLS (h2c, prior knowledge) instead of HTTP/1.1.
    #[arg(help_heading = "Against what", long)]
    pub http2: bool,
    /// Close pooled connections idle this long (keep it below the server's keep-alive).
    /// Env: AGENTX_HTTP_KEEPALIVE_TIMEOUT or AIPERF_HTTP_KEEPALIVE_TIMEOUT.
    #[arg(help_heading = "Against what", long, value_name = "SECONDS")]
    pub http_keepalive_timeout: Option<f64>,
    /// Give up a request after this long.
    #[arg(
        help_heading = "Against what",
        long,
        default_value_t = 21600.0,
        value_name = "SECONDS"
    )]
    pub request_timeout_seconds: f64,
    /// Give up connecting after this long.
    #[arg(
        help_heading = "Against what",
        long,
        default_value_t = 30.0,
        value_name = "SECONDS"
    )]
    pub connect_timeout_seconds: f64,
    /// The header that carries each session's correlation id (default `X-Correlation-ID`).
    /// Session headers for routers are switched by AGENTX_HTTP_* / AIPERF_HTTP_* variables:
    /// X_SESSION_AFFINITY_FROM_CORRELATION_ID (on by default), X_SESSION_ID_FROM_CORRELATION_ID,
    /// X_SMG_ROUTING_KEY_FROM_CORRELATION_ID, X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID.
    #[arg(help_heading = "Against what", long, value_name = "NAME")]
    pub session_header: Option<String>,
    /// Dynamo's conversation-aware routing: every request body carries `nvext.session_control`,
    /// keyed by its stream's correlation id (a subagent's by its parent's): `bind` (with the
    /// lease of --dynamo-session-timeout-seconds) on every turn, `close` on a root stream's final
    /// turn. AGENTX_/AIPERF_DYNAMO_SESSION_TRANSPORT=headers sends the session as
    /// X-Dynamo-Session-ID headers instead. Dynamo before 1.3 rejects `bind`.
    #[arg(help_heading = "Against what", long)]
    pub use_dynamo_conv_aware_routing: bool,
    /// The router's inactivity lease of a bound session, whole seconds [default: 300].
    #[arg(help_heading = "Against what", long, value_name = "SECONDS")]
    pub dynamo_session_timeout_seconds: Option<String>,
    /// Which connection each request goes out on: `pooled` (any idle one), `never` (a new one for
    /// every request) or `sticky-user-sessions` (one per session, released after its final turn,
    /// an error or a cancellation).
    #[arg(
        help_heading = "Against what",
        long,
        default_value = "pooled",
        value_name = "STRATEGY"
    )]
    pub connection_reuse_strategy: ConnectionReuse,
    /// Do not ask the server for `/v1/models` before the run (for servers that do not answer it).
    /// The check confirms the server is reachable and serves --model, and counts the lanes and
    /// traces that exceed its context length.
    #[arg(help_heading = "Against what", long)]
    pub skip_preflight: bool,
    /// The simulator preset of a run without --url (h200, cpu-small, max).
    #[arg(
        help_heading = "Against what",
        long,
        default_value = "h200",
        value_name = "PRESET"
    )]
    pub sim_preset: String,

    /// Number of lanes (concurrent sessions; session trees under agentx and agentx-v1) [default: the scenario's; `agentx-host scenario inspect` lists them; 4 without
    /// --url]. A list of points is `agentx-host sweep`'s.
    #[arg(help_heading = "How long and how hard", long, value_name = "N[,N...]")]
    pub concurrency: Option<String>,
    /// Profiling time in seconds [default: the scenario's; `agentx-host scenario inspect` lists them; 30 without --url].
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub benchmark_duration: Option<f64>,
    /// How long in-flight requests may finish after the duration (`inf` waits for all)
    /// [default: the scenario's; 30 when it has none].
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS|inf"
    )]
    pub benchmark_grace_period: Option<String>,
    /// How long the warmup may take to drain: for session trees, the drain of the cache-pressure
    /// stage after its last request (the primers always complete); for single streams, the whole
    /// warmup [default: the scenario's; `inf` (wait for every warmup request) when it has none].
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS|inf"
    )]
    pub warmup_grace_period: Option<String>,
    /// Cancel the run once this fraction of profiling requests failed (checked after
    /// max(concurrency, 10) requests) [default: off].
    #[arg(help_heading = "How long and how hard", long, value_name = "FRACTION")]
    pub failed_request_threshold: Option<f64>,
    /// Earliest start point of a lane, as a fraction of its trace's turns (session trees: of its
    /// tree's span) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, value_name = "FRACTION")]
    pub trajectory_start_min_ratio: Option<f64>,
    /// Latest start point of a lane, as a fraction of its trace's turns (session trees: of its
    /// tree's span) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, value_name = "FRACTION")]
    pub trajectory_start_max_ratio: Option<f64>,
    /// Longest wait between a response and the session's next turn (the recorded think time is
    /// cut to it) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub inter_turn_delay_cap_seconds: Option<f64>,
    /// Wait only the recorded think time between turns, not the whole recorded gap (which also
    /// holds the recorded server time) [default: the scenario's; `agentx-host scenario inspect` lists them].
    #[arg(help_heading = "How long and how hard", long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub use_think_time_only: Option<bool>,
    /// Send each turn as soon as the previous response ended (no think time); the scenarios of
    /// InferenceX refuse it without --unsafe-override.
    #[arg(help_heading = "How long and how hard", long)]
    pub ignore_trace_delays: bool,
    /// During profiling, a session waits at most this long between a response and its next turn
    /// (aiperf's per-trace idle cap; off by default).
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub trace_idle_gap_cap_seconds: Option<f64>,
    /// Session-tree scenarios: N more requests per lane after its warmup primers (aiperf's warmup
    /// pressure stage). Single-stream (0.1.0) scenarios send one warmup request per lane and
    /// warn that the flag has no effect.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "N",
        conflicts_with = "agentic_cache_warmup_duration"
    )]
    pub warmup_requests_per_lane: Option<u64>,
    /// Session-tree scenarios: replay at zero idle delay for this long after the warmup primers.
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub agentic_cache_warmup_duration: Option<f64>,
    /// The warmup grace under aiperf's agentic name; overrides --warmup-grace-period.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "SECONDS|inf"
    )]
    pub agentic_warmup_grace_period: Option<String>,
    /// Session-tree scenarios: the whole-system idle cap (the scenario sets 10 s).
    #[arg(help_heading = "How long and how hard", long, value_name = "SECONDS")]
    pub system_idle_gap_cap_seconds: Option<f64>,
    /// Session-tree scenarios: fire every lane's first request at once instead of spreading them.
    #[arg(help_heading = "How long and how hard", long)]
    pub burst_phase_starts: bool,
    /// Open-loop session arrivals: this many sessions per second start, each a whole tree from
    /// turn 0, with --concurrency their ceiling (an arrival over it is rejected and counted). Only
    /// under a scenario that allows it (`agentx-open`); `agentx` refuses it.
    #[arg(
        help_heading = "How long and how hard",
        long,
        value_name = "PER_SECOND"
    )]
    pub session_arrival_rate: Option<f64>,
    /// With --session-arrival-rate: the arrival process, poisson, constant or gamma
    /// [default: the scenario's; poisson under agentx-open].
    #[arg(help_heading = "How long and how hard", long, value_name = "PATTERN")]
    pub session_arrival_pattern: Option<String>,
    /// With --session-arrival-pattern gamma: the gamma shape of the inter-arrival times (aiperf's
    /// --arrival-smoothness: 1 is poisson, below is burstier, above smoother) [default: 1].
    #[arg(help_heading = "How long and how hard", long, value_name = "SHAPE")]
    pub session_arrival_smoothness: Option<f64>,

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
    pub output_artifact_dir: Option<PathBuf>,
    /// Replace the run in --output-artifact-dir (its files are removed when the new run starts).
    #[arg(help_heading = "Outputs", long)]
    pub overwrite: bool,
    /// Time-slice width of the timeslice exports, seconds [default: no timeslice exports].
    #[arg(help_heading = "Outputs", long, value_name = "SECONDS")]
    pub slice_duration: Option<f64>,
    /// Service-level objectives of a good request, as aiperf's --goodput: space-separated
    /// METRIC:VALUE pairs in each metric's display unit, e.g. "time_to_first_token:2000
    /// inter_token_latency:50 request_latency:60000" (vLLM's ttft, tpot and e2el are accepted). The
    /// exports gain good_request_count, goodput and good_request_fraction.
    #[arg(help_heading = "Outputs", long, value_name = "SLOS", value_parser = |s: &str| crate::metrics::goodput::Goodput::parse(s))]
    pub goodput: Option<crate::metrics::goodput::Goodput>,
    /// With --goodput: a session (a tree with its subagents, in a tree replay) is good when at
    /// least this share of its requests are good; run_summary.json's `summary.sessions` gives the
    /// good sessions and each session's slowdown (replayed over recorded wall time).
    #[arg(help_heading = "Outputs", long, value_name = "SHARE", default_value_t = 1.0, requires = "goodput", value_parser = share)]
    pub session_goodput_share: f64,
    /// Do not scrape the server's Prometheus `/metrics`.
    #[arg(help_heading = "Outputs", long)]
    pub no_server_metrics: bool,
    /// More Prometheus endpoints to scrape besides the server's own `/metrics` (several per flag,
    /// and repeatable: every prefill, decode and frontend endpoint of a disaggregated deployment).
    #[arg(help_heading = "Outputs", long, value_name = "URL", num_args = 1..)]
    pub server_metrics: Vec<String>,
    /// Seconds between progress lines (default 5 on a terminal, 30 otherwise; 0 turns them off).
    #[arg(help_heading = "Outputs", long, value_name = "SECONDS")]
    pub stats_interval: Option<f64>,
    /// Print the plan (lanes, start turns, markers) and send nothing.
    #[arg(help_heading = "Outputs", long)]
    pub dry_run: bool,
    /// With --dry-run: print the plan as JSON.
    #[arg(help_heading = "Outputs", long, requires = "dry_run")]
    pub json: bool,
    /// Exit 1 when the run is not a valid submission.
    #[arg(help_heading = "Outputs", long)]
    pub require_valid: bool,

    /// Stream responses (always on: token timing needs the stream; accepted for aiperf compatibility).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub streaming: bool,
    /// Use the server's usage counts for ISL/OSL (the default; kept for aiperf compatibility).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub use_server_token_count: bool,
    /// Count ISL/OSL on the client (tokenizer-free word model, or --tokenizer) instead of the server's
    /// usage.
    #[arg(
        help_heading = "aiperf and InferenceX compatibility",
        long,
        conflicts_with = "use_server_token_count"
    )]
    pub client_token_count: bool,
    /// Accepted for aiperf compatibility: agentx lets lanes wrap around the dataset whenever there
    /// are more lanes than traces.
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub allow_dataset_wrap: bool,
    /// Accepted for aiperf compatibility: agentx collects no GPU telemetry.
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub no_gpu_telemetry: bool,
    /// Accepted for aiperf compatibility (agentx never runs tokenizer code).
    #[arg(
        help_heading = "aiperf and InferenceX compatibility",
        long,
        hide = true
    )]
    pub tokenizer_trust_remote_code: bool,
    /// Count each request's client-side ISL over the model's chat template (role headers, turn
    /// markers, generation prompt), rendered offline from the tokenizer_config.json (or
    /// chat_template.jinja) beside the --tokenizer's tokenizer.json; an error when there is none.
    /// Records take the server's prompt_tokens under --use-server-token-count, this count otherwise.
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub apply_chat_template: bool,
    /// Send the token limit as `max_tokens` (session-tree scenarios send `max_completion_tokens`,
    /// as aiperf 0.13 and agentx-harness do; single-stream scenarios always send `max_tokens`).
    #[arg(help_heading = "aiperf and InferenceX compatibility", long)]
    pub use_legacy_max_tokens: bool,

    /// Run even if the scenario's locks are broken; the result is then not a valid submission.
    #[arg(help_heading = "Advanced", long)]
    pub unsafe_override: bool,
    /// Truncate every prompt to this many tokens (aiperf's name; InferenceX's scenarios refuse it).
    #[arg(
        help_heading = "Advanced",
        long,
        alias = "max-isl",
        value_name = "TOKENS"
    )]
    pub synthesis_max_isl: Option<i64>,

    /// Run shard I of N (0-based) of one run: every shard plans the whole run and replays the lanes
    /// l with l % N == I, into <output-artifact-dir>/shard-<I>/. Under srun, SLURM_PROCID and
    /// SLURM_NTASKS say it.
    #[arg(long, value_name = "I/N", help_heading = "Sharded runs")]
    pub shard: Option<String>,
    /// N shards, this one's index from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job).
    #[arg(long, value_name = "N", help_heading = "Sharded runs")]
    pub shards: Option<u32>,
    /// Where shard 0 listens for the rendezvous, HOST[:PORT] [env: AGENTX_COORDINATOR; default
    /// under Slurm: the first host of SLURM_JOB_NODELIST].
    #[arg(long, value_name = "HOST[:PORT]", help_heading = "Sharded runs")]
    pub coordinator: Option<String>,
    /// The rendezvous port, when --coordinator names none [env: AGENTX_COORDINATOR_PORT; default
    /// 29517]; a port in --coordinator that differs is an error.
    #[arg(long, value_name = "PORT", help_heading = "Sharded runs")]
    pub coordinator_port: Option<u16>,
    /// Where shard 0 listens for the rendezvous, an address or host of its machine (0.0.0.0: every
    /// interface) [env: AGENTX_COORDINATOR_BIND; default: the host of --coordinator]. Shards prove
    /// the secret in AGENTX_RENDEZVOUS_TOKEN (else one derived from the Slurm job step or the
    /// Kubernetes Job's AGENTX_JOB_UID); shard 0 refuses any other connection.
    #[arg(long, value_name = "ADDR", help_heading = "Sharded runs")]
    pub coordinator_bind: Option<String>,
    /// Seconds every shard may take to join and to plan [default: 300].
    #[arg(long, value_name = "SECONDS", help_heading = "Sharded runs")]
    pub rendezvous_timeout: Option<f64>,
    /// Shard 0 merges every shard's directory into DIR when all are done (a shared filesystem).
    #[arg(long, value_name = "DIR", help_heading = "Sharded runs")]
    pub merge_into: Option<PathBuf>,

    /// Other timing modes: accepted so the scenario can refuse them with its reason.
    #[arg(long, hide = true)]
    pub request_rate: Option<f64>,
    #[arg(long, hide = true)]
    pub arrival_pattern: Option<String>,
    #[arg(long, hide = true)]
    pub user_centric_rate: Option<f64>,
    #[arg(long, hide = true)]
    pub request_rate_ramp_duration: Option<f64>,
    #[arg(long, hide = true)]
    pub fixed_schedule: bool,
    /// Refuse to run unless the dataset's cache key is this (set by `agentx-host replay`).
    #[arg(long, hide = true)]
    pub expect_dataset_key: Option<String>,
    /// Refuse to run unless the scenario's sha256 is this (set by `agentx-host replay`).
    #[arg(long, hide = true)]
    pub expect_scenario_sha256: Option<String>,
    #[command(flatten)]
    pub home: HomeArgs,
}

/// `agentx-host replay MANIFEST`: rerun a recorded run with the same inputs and the same plan.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// A `run_manifest.json` (or the artifact directory holding it).
    pub manifest: PathBuf,
    /// Where the rerun writes [default: the recorded run's directory with `-replay`].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output_artifact_dir: Option<PathBuf>,
    /// Replace an earlier rerun in that directory.
    #[arg(long)]
    pub overwrite: bool,
    /// Send to another server (the original URL by default).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The model the server serves (the recorded one by default; needed with --url for a run of
    /// the built-in simulator).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Print the plan and send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --dry-run: print the plan as JSON.
    #[arg(long, requires = "dry_run")]
    pub json: bool,
}

/// What `agentx-host replay` reads of a run manifest: the recorded command line and the inputs it
/// pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRun {
    /// The command line of the run, without the program name.
    pub argv: Vec<String>,
    pub seed: u64,
    pub run_id: String,
    pub scenario_sha256: String,
    /// The dataset's cache key, when the manifest has one.
    pub dataset_key: Option<String>,
    /// The working directory of the run (relative paths in `argv` are relative to it).
    pub cwd: Option<String>,
}

/// A run manifest that cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Manifest(#[from] crate::export::manifest::ManifestError),
    #[error("the recorded command line no longer parses: {0}")]
    Argv(String),
    #[error("the recorded command is not `run`")]
    NotRun,
}

impl RecordedRun {
    /// Reads the text of a `run_manifest.json` (`path` names it in errors).
    pub fn parse_at(text: &str, path: &Path) -> Result<RecordedRun, ManifestError> {
        let m = crate::export::manifest::Manifest::parse(text, path)?;
        Ok(RecordedRun {
            argv: m.argv,
            seed: m.seed,
            run_id: m.run_id,
            scenario_sha256: m.scenario.sha256,
            dataset_key: m.dataset.cache_key,
            cwd: m.cwd.map(|c| c.display().to_string()),
        })
    }

    /// Reads the manifest at `path`: the recorded run, and its `run` arguments with the seed, run
    /// id, dataset digest and scenario (by hash, see [`pin_scenario`]) pinned.
    pub fn read(path: &Path) -> anyhow::Result<(RecordedRun, RunArgs)> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the manifest {}", path.display()))?;
        let recorded = RecordedRun::parse_at(&text, path)?;
        let mut a = recorded
            .run_args()
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        pin_scenario(&mut a, &recorded.scenario_sha256);
        Ok((recorded, a))
    }

    /// Reads the text of a `run_manifest.json`.
    pub fn parse(text: &str) -> Result<RecordedRun, ManifestError> {
        Self::parse_at(text, Path::new(MANIFEST_FILE))
    }

    /// The recorded `run` command's arguments with the seed, run id, scenario hash and dataset
    /// digest pinned (the scenario as recorded; [`replay_main`] pins its bytes).
    pub fn run_args(&self) -> Result<RunArgs, ManifestError> {
        let full = std::iter::once("agentx-host").chain(self.argv.iter().map(String::as_str));
        let cli = <super::Cli as clap::Parser>::try_parse_from(full)
            .map_err(|e| ManifestError::Argv(e.to_string()))?;
        let super::Command::Run(mut a) = cli.command else {
            return Err(ManifestError::NotRun);
        };
        a.random_seed = Some(self.seed);
        a.run_id = Some(self.run_id.clone());
        a.expect_scenario_sha256 = Some(self.scenario_sha256.clone());
        a.expect_dataset_key = self.dataset_key.clone();
        Ok(*a)
    }
}

/// Reruns the run a manifest describes: its command line with the seed, run id, scenario hash and
/// dataset digest pinned.
pub fn replay_main(r: ReplayArgs) -> anyhow::Result<ExitCode> {
    let path = if r.manifest.is_dir() {
        crate::export::bmk::locate_file(&r.manifest, MANIFEST_FILE)?.join(MANIFEST_FILE)
    } else {
        r.manifest.clone()
    };
    let (recorded, mut a) = RecordedRun::read(&path)?;
    let run_dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let run_dir = std::fs::canonicalize(&run_dir).unwrap_or(run_dir);
    let demo = a.url.is_none();
    if let Some(u) = r.url {
        if demo {
            // A run of the built-in simulator sent to a server: what the demo implied is pinned.
            a.concurrency
                .get_or_insert_with(|| crate::run::DEMO_CONCURRENCY.to_string());
            a.benchmark_duration
                .get_or_insert(crate::run::DEMO_DURATION_S);
            a.unsafe_override = true;
            if a.dataset.is_none() && a.public_dataset.is_none() && a.input_file.is_none() {
                a.input_file = Some(crate::run::bundled_corpus(&a.home.dir())?);
            }
            if a.model.is_none() && r.model.is_none() {
                bail!(
                    "{} is a run of the built-in simulator: pass the model the server at {u} serves, e.g. `agentx-host replay {} --url {u} --model NAME`",
                    path.display(),
                    r.manifest.display()
                );
            }
        }
        a.url = Some(u);
    }
    if let Some(m) = r.model {
        a.model = Some(m);
    }
    relocate_inputs(&mut a, &recorded, &run_dir);
    a.output_artifact_dir = Some(match r.output_artifact_dir {
        Some(d) => d,
        None => {
            // Beside the recorded run, wherever that was written (a fresh directory, or a named one).
            let mut d = run_dir.clone().into_os_string();
            d.push("-replay");
            PathBuf::from(d)
        }
    });
    a.overwrite = r.overwrite;
    a.dry_run = r.dry_run;
    a.json = r.json;
    let mut cfg = run_config(&a, recorded.argv.clone())?;
    cfg.replay_of = Some(crate::run::ReplayOf {
        run_id: recorded.run_id.clone(),
        manifest: std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone()),
    });
    cached_dataset(&mut cfg, &recorded);
    execute_and_print(cfg, a.json)
}

/// Pins a recorded run's scenario by hash: the original path if it still holds those bytes, a
/// built-in by name (the hash check refuses other bytes), else the store.
pub(super) fn pin_scenario(a: &mut RunArgs, sha: &str) {
    if a.scenario.is_none() {
        a.scenario = a.scenario_flag.take();
    }
    if let Some(s) = &a.scenario {
        let base = s.split('@').next().unwrap_or(s);
        a.scenario = Some(if Path::new(base).exists() {
            format!("{base}@sha256:{sha}")
        } else if crate::run::is_builtin_name(base) {
            base.to_string()
        } else {
            format!("sha256:{sha}")
        });
    }
}

/// A recorded run's relative corpus paths, as seen from here (see [`relocate`]).
pub(super) fn relocate_inputs(a: &mut RunArgs, recorded: &RecordedRun, run_dir: &Path) {
    let cwd = recorded.cwd.as_deref().map(Path::new);
    if let Some(p) = a.input_file.as_mut() {
        *p = relocate(p, cwd, run_dir);
    }
    if let Some(d) = a.dataset.as_mut() {
        if crate::dataset::alias::lookup(d).is_none() || Path::new(d).exists() {
            *d = relocate(Path::new(d), cwd, run_dir).display().to_string();
        }
    }
}

/// A recorded corpus file that moved or is gone: the recorded digest finds its cache entry.
pub(super) fn cached_dataset(cfg: &mut RunConfig, recorded: &RecordedRun) {
    if let (crate::run::DatasetSource::Spec(spec), Some(key)) =
        (&cfg.plan.dataset, &recorded.dataset_key)
    {
        let local = crate::dataset::alias::lookup(spec).is_none();
        if local && !Path::new(spec).exists() {
            tracing::info!(
                "the recorded dataset {spec} is not at hand; using its cached copy (digest {})",
                &key[..key.len().min(16)]
            );
            cfg.plan.dataset = crate::run::DatasetSource::Cached {
                key: key.clone(),
                source: PathBuf::from(spec),
            };
        }
    }
}

/// A relative dataset path of a recorded run, as seen from this working directory: unchanged when
/// it exists here; else under the recorded working directory; else under the nearest ancestor of the
/// run's directory that has it (the recorded digest refuses a wrong file either way).
fn relocate(p: &Path, cwd: Option<&Path>, run_dir: &Path) -> PathBuf {
    if p.is_absolute() || p.exists() {
        return p.to_owned();
    }
    cwd.into_iter()
        .chain(run_dir.ancestors())
        .map(|base| base.join(p))
        .find(|c| c.exists())
        .unwrap_or_else(|| p.to_owned())
}

/// `agentx-host run`; `argv` is the command line after the program name (kept in the manifest).
pub fn main(a: RunArgs, argv: Vec<String>) -> anyhow::Result<ExitCode> {
    let cfg = run_config(&a, argv)?;
    execute_and_print(cfg, a.json)
}

/// Runs `cfg` and prints the plan of a dry run (as JSON with `json`), or the summary and outputs.
fn execute_and_print(cfg: RunConfig, json: bool) -> anyhow::Result<ExitCode> {
    let out = crate::run::execute(cfg, &Cancel::new())?;
    print_outcome(&out, json)
}

/// Prints a run's outcome: the plan of a dry run (as JSON with `json`), or the summary and outputs.
pub(super) fn print_outcome(out: &crate::run::RunOutcome, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(d) = &out.dry_run {
        if json {
            outln!("{}", serde_json::to_string_pretty(&d.json)?);
        } else {
            outln!("{}", d.table);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let (Some(o), Some(s)) = (&out.replay, &out.summary) {
        print_summary(
            o,
            s,
            &out.submission_invalid_reasons,
            out.concurrency,
            &out.records_path,
            out.records_written,
        );
        print_arrivals(&out.dir);
        outln!("outputs       {}", out.dir.display());
        for f in &out.files {
            if let Some(name) = f.file_name() {
                outln!("  {}", name.to_string_lossy());
            }
        }
        let page = out.dir.join(crate::export::html::HTML_FILE);
        if page.is_file() {
            outln!("page          {}", page.display());
        }
        outln!(
            "next          agentx-host report {}   (the InferenceX result row)",
            out.dir.display()
        );
        if let Some(m) = &o.message {
            errln!("{m}");
        }
    }
    Ok(ExitCode::from(out.code))
}

/// The line a run without `--url` starts with: what it implies that was not given.
fn demo_banner(a: &RunArgs) -> Option<String> {
    if a.url.is_some() {
        return None;
    }
    let mut implied = vec![format!("the built-in simulator ({})", a.sim_preset)];
    if a.dataset.is_none() && a.public_dataset.is_none() && a.input_file.is_none() {
        implied.push("the bundled 24-trace corpus".into());
    }
    if a.concurrency.is_none() {
        implied.push(format!("concurrency {DEMO_CONCURRENCY}"));
    }
    if a.benchmark_duration.is_none() {
        implied.push(format!("{DEMO_DURATION_S} s"));
    }
    if !a.unsafe_override {
        implied.push("--unsafe-override (not a valid submission)".into());
    }
    Some(format!(
        "no --url: a demo run with {}; pass --url to measure a real server",
        implied.join(", ")
    ))
}

/// The run configuration of `agentx-host run`'s flags and environment.
pub fn run_config(a: &RunArgs, argv: Vec<String>) -> anyhow::Result<RunConfig> {
    if let Some(b) = demo_banner(a) {
        tracing::info!("{b}");
    }
    let flags = super::shard::ShardFlags {
        shard: a.shard.clone(),
        shards: a.shards,
        coordinator: a.coordinator.clone(),
        port: a.coordinator_port,
        bind: a.coordinator_bind.clone(),
        timeout: a.rendezvous_timeout,
        merge_into: a.merge_into.clone(),
    };
    let env = |k: &str| std::env::var(k).ok();
    let (shard, job_run_id) = match super::shard::resolve(&flags, &env)? {
        Some((c, id)) => (Some(c), id),
        None => (None, None),
    };
    Ok(RunConfig {
        shard,
        plan: RunPlan::resolve(a)?,
        scenario: a.scenario.clone().or_else(|| a.scenario_flag.clone()),
        home: a.home.dir(),
        num_dataset_entries: a.num_dataset_entries,
        max_context_length: a.max_context_length,
        format: super::run_plan::corpus_format(a)?,
        block_size: a.isl_block_size,
        trace_block_size: a.trace_block_size,
        tokenizer: a.tokenizer.clone(),
        output: crate::run::artifact_dir::OutputDir::from_flag(a.output_artifact_dir.clone()),
        overwrite: a.overwrite,
        slice_duration: a.slice_duration,
        goodput: a.goodput.clone(),
        session_goodput_share: a.session_goodput_share,
        no_server_metrics: a.no_server_metrics,
        server_metrics: a.server_metrics.clone(),
        skip_preflight: a.skip_preflight,
        require_valid: a.require_valid,
        failed_request_threshold: a.failed_request_threshold,
        run_id: a.run_id.clone().or(job_run_id),
        sim_preset: a.sim_preset.clone(),
        expect_dataset_key: a.expect_dataset_key.clone(),
        expect_scenario_sha256: a.expect_scenario_sha256.clone(),
        nested_basis: match a.weka_nested_timestamp_basis.as_deref() {
            Some("absolute") => Some(crate::dataset::tree::NestedBasis::Absolute),
            Some("relative") => Some(crate::dataset::tree::NestedBasis::Relative),
            _ => None,
        },
        dry_run: a.dry_run,
        replay_of: None,
        argv,
        progress: std::io::stderr().is_terminal(),
        signals: true,
    })
}

/// An open-loop run's arrivals, as its `run_summary.json` gives them (nothing for a closed loop).
fn print_arrivals(dir: &Path) {
    let Ok(doc) = crate::export::run_summary::RunSummary::read_dir(dir) else {
        return;
    };
    let Some(a) = doc.extra.get("arrivals") else {
        return;
    };
    let n = |k: &str| a[k].as_u64().unwrap_or(0);
    let rate = |k: &str| a[k].as_f64().map_or("-".into(), |x| format!("{x:.3}/s"));
    outln!(
        "arrivals      {} {}/s: offered {} ({}), admitted {} ({}), rejected {} over {} in flight, skipped {} behind schedule",
        a["pattern"].as_str().unwrap_or("-"),
        a["rate_per_s"],
        n("offered"),
        rate("offered_rate_per_s"),
        n("admitted"),
        rate("admitted_rate_per_s"),
        n("rejected"),
        n("ceiling"),
        n("skipped")
    );
}

/// `--session-goodput-share`: a share in (0, 1].
fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{s:?} is not a share in (0, 1], e.g. 0.9")),
    }
}

fn print_summary(
    o: &replay::ReplayOutcome,
    s: &Summary,
    reasons: &[String],
    conc: u32,
    records: &Path,
    written: u64,
) {
    let d = |x: &Option<crate::metrics::Dist>| match x {
        Some(d) => format!(
            "p50 {:>9.2}  p90 {:>9.2}  p99 {:>9.2}  max {:>9.2}",
            d.p50, d.p90, d.p99, d.max
        ),
        None => "-".to_string(),
    };
    outln!(
        "run {} after {:.1} s of profiling at concurrency {conc}",
        o.stop.as_str(),
        o.profiling_ns
            .map(|(a, b)| (b - a) as f64 / 1e9)
            .unwrap_or(0.0)
    );
    outln!(
        "requests      {} ok, {} failed, {} context overflow, {} cancelled, {} warmup ({} context overflow)",
        s.requests_ok,
        s.requests_failed,
        s.context_overflows,
        s.cancelled,
        s.warmup_requests,
        s.warmup_context_overflows
    );
    outln!(
        "throughput    {:.2} req/s, {:.0} output tok/s, {:.0} input tok/s",
        s.request_throughput,
        s.output_token_throughput,
        s.input_token_throughput
    );
    if let Some(c) = s.cached_tokens {
        if s.input_tokens > 0 {
            outln!(
                "prefix cache  {:.1}% of input tokens served from cache",
                100.0 * c as f64 / s.input_tokens as f64
            );
        }
    }
    outln!("ttft (ms)     {}", d(&s.ttft_ms));
    outln!("itl (ms)      {}", d(&s.itl_ms));
    outln!("latency (ms)  {}", d(&s.latency_ms));
    outln!("send lag (ms) {}", d(&s.send_lag_ms));
    // The same two figures from when each request was due: send lag included.
    outln!("sched ttft    {}", d(&s.scheduled_ttft_ms));
    outln!("sched latency {}", d(&s.scheduled_latency_ms));
    if let Some(g) = &s.goodput {
        outln!(
            "goodput       {:.2} good req/s, {} good requests ({:.1}% of those sent)",
            g.goodput,
            g.good_request_count,
            100.0 * g.good_request_fraction
        );
    }
    if let Some(x) = &s.sessions {
        let slowdown = x.slowdown.as_ref().map_or("-".into(), |d| {
            format!(
                "slowdown p50 {:.2}  p90 {:.2}  p99 {:.2}",
                d.p50, d.p90, d.p99
            )
        });
        outln!(
            "sessions      {} of {} good ({:.0}% of their requests good); {slowdown}",
            x.good_sessions,
            x.sessions,
            100.0 * x.share
        );
    }
    if reasons.is_empty() {
        outln!("submission    valid");
    } else {
        outln!("submission    not valid: {}", reasons.join(", "));
    }
    outln!("records       {} ({written} requests)", records.display());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{positive_secs, MAX_SECS};
    use std::time::Duration;

    const MANIFEST: &str = r#"{"argv": ["run", "--url", "http://127.0.0.1:8000", "--concurrency", "4",
        "--benchmark-duration", "60", "agentx-mvp"],
        "run_id": "r1", "seed": 42, "scenario": {"sha256": "ab12"}, "dataset": {"cache_key": "k9"}}"#;

    /// Found by the `scenario_results` fuzz target (a resolved `benchmark-duration`): a tiny positive
    /// value became a zero duration, a huge finite one panicked in `Duration::from_secs_f64` or when
    /// the deadline was computed.
    #[test]
    fn seconds_are_positive_and_fit_a_deadline() {
        for v in [
            1e-300,
            1e300,
            1.8e19,
            1e10,
            -1.0,
            0.0,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert!(positive_secs("--x", v).is_err(), "{v}");
        }
        for v in [1e-9, 0.5, 1800.0, MAX_SECS] {
            let d = positive_secs("--x", v).unwrap();
            assert!(d > Duration::ZERO);
            let _ = std::time::Instant::now() + d;
        }
    }

    #[test]
    fn manifest_pins_the_recorded_inputs() {
        let r = RecordedRun::parse(MANIFEST).unwrap();
        assert_eq!(r.seed, 42);
        assert_eq!(r.dataset_key.as_deref(), Some("k9"));
        let a = r.run_args().unwrap();
        assert_eq!(a.random_seed, Some(42));
        assert_eq!(a.run_id.as_deref(), Some("r1"));
        assert_eq!(a.expect_scenario_sha256.as_deref(), Some("ab12"));
        assert_eq!(a.expect_dataset_key.as_deref(), Some("k9"));
        assert_eq!(a.scenario.as_deref(), Some("agentx-mvp"));
    }

    #[test]
    fn manifest_errors_name_the_field() {
        let err = |t: &str| RecordedRun::parse(t).unwrap_err().to_string();
        assert!(err("{").contains("not a run manifest"), "{}", err("{"));
        assert!(err(r#"{"seed": 1}"#).contains("missing field `argv`"));
        assert!(err(r#"{"argv": [1], "seed": 1}"#).contains("argv[0]"));
        assert!(err(r#"{"argv": [], "seed": -1}"#).contains("seed"));
        assert!(err(r#"{"argv": [], "seed": 1, "run_id": "r"}"#).contains("scenario"));
        assert!(
            err(r#"{"argv": [], "seed": 1, "run_id": "r", "scenario": {}}"#).contains("sha256")
        );
        let run = |argv: &str| {
            RecordedRun::parse(&format!(
                r#"{{"argv": {argv}, "seed": 1, "run_id": "r", "scenario": {{"sha256": "x"}}}}"#
            ))
            .unwrap()
            .run_args()
            .unwrap_err()
        };
        assert!(matches!(run(r#"["sim"]"#), ManifestError::NotRun));
        assert!(matches!(
            run(r#"["run", "--no-such-flag"]"#),
            ManifestError::Argv(_)
        ));
    }
}
