//! The configuration of a run ([`RunConfig`], with the flags and environment merged into a
//! [`RunPlan`]), what it answers ([`RunOutcome`]), the [`Cancel`] handle, and the settings the
//! scenario resolved, read once ([`RunSettings`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail};
use serde_json::json;
use tokio::sync::watch;

use super::{artifact_dir, shard};
use crate::client::ClientConfig;
use crate::dataset::{self, AssistantMode};
use crate::metrics::Summary;
use crate::replay::{self, ReplayOutcome};
use crate::scenario;
use crate::scenario::types::{Placement, Resolved, Setting, Value};
use crate::scenario::ReplaySetting;

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The scenario reference (path, `path@sha256:`, store name or hash); `None` for the built-in
    /// default (agentx).
    pub scenario: Option<String>,
    /// `AGENTX_HOME`: the scenario store and caches.
    pub home: PathBuf,
    /// Flags and environment, merged and checked.
    pub plan: RunPlan,
    /// `--num-dataset-entries`: the corpus cut to its first N traces (`None`: all of them).
    pub num_dataset_entries: Option<usize>,
    /// `--max-context-length`: traces whose context would exceed it are left out.
    pub max_context_length: Option<u64>,
    /// `--custom-dataset-type`'s corpus format (`None`: detected).
    pub format: Option<crate::dataset::format::Format>,
    /// `--isl-block-size`: the tokens per hash block of a corpus whose format does not say.
    pub block_size: Option<u32>,
    /// `--trace-block-size`: every weka trace laid out in this many tokens per block.
    pub trace_block_size: Option<u32>,
    /// `--tokenizer`: a path, a hub model id or `builtin`.
    pub tokenizer: Option<String>,
    /// Where the artifacts go: the named directory or a fresh one per run.
    pub output: artifact_dir::OutputDir,
    /// `--overwrite`: a named directory that holds another run is replaced instead of refused.
    pub overwrite: bool,
    /// `--slice-duration`: the time-slice export's slice length (s), or none.
    pub slice_duration: Option<f64>,
    /// `--timeline`: also write `trace.json` (Chrome/Perfetto trace events) at the end.
    pub timeline: bool,
    /// `--otlp-endpoint`: the OTLP/HTTP collector the run's spans go to.
    pub otlp_endpoint: Option<String>,
    /// `--metrics-listen`: where agentx serves its own Prometheus metrics (a shard adds its index
    /// to the port).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `--metrics-linger`: how long the endpoint stays up after the outputs are written.
    pub metrics_linger: std::time::Duration,
    /// The working directory the run's relative paths mean (kept in the manifest).
    pub cwd: Option<PathBuf>,
    /// The dataset cache's directory (`*_DATASET_MMAP_CACHE_DIR`); `None`: `home/datasets`.
    pub dataset_cache_dir: Option<PathBuf>,
    /// `--goodput`: the objectives a good request meets.
    pub goodput: Option<crate::metrics::goodput::Goodput>,
    /// `--session-goodput-share`: the share of a session's requests that must be good.
    pub session_goodput_share: f64,
    /// `--confidence`: the level of the intervals.
    pub confidence: crate::metrics::precision::Level,
    /// `--target-precision`: stop profiling once every figure's interval is this tight.
    pub target_precision: Vec<TargetPrecision>,
    /// `--min-duration`: profiling runs at least this long before a precision target stops it.
    pub min_duration: std::time::Duration,
    /// `--session-slo`: the objectives a session meets.
    pub session_slo: Option<crate::metrics::sessions::SessionSlo>,
    /// `--gpus`: the GPUs behind the server, the per-GPU figures' divisor.
    pub gpus: Option<u32>,
    /// `--no-server-metrics`: no `/metrics` scraping at all.
    pub no_server_metrics: bool,
    /// More `/metrics` endpoints besides the server's own.
    pub server_metrics: Vec<String>,
    /// `--gpu-telemetry`'s exporters (empty under `--no-gpu-telemetry`, which wins).
    pub gpu_telemetry: Vec<String>,
    /// `--skip-preflight`: the first request is the pre-flight check.
    pub skip_preflight: bool,
    /// `--cache-preflight` (`Some(true)`, also under `--require-cache`) or `--no-cache-preflight`
    /// (`Some(false)`); `None`: the scenario's default (`run::harness::cache_preflight_default`).
    pub cache_preflight: Option<bool>,
    /// `--require-cache`: a cache preflight whose verdict is not `works` stops the run before
    /// anything is written.
    pub require_cache: bool,
    /// Exit code 1 when the run is not a valid submission.
    pub require_valid: bool,
    /// `--failed-request-threshold`: the share of failed requests that stops the run.
    pub failed_request_threshold: Option<f64>,
    /// Pins the markers; a fresh id when `None`.
    pub run_id: Option<String>,
    /// The simulator preset of a run without a URL.
    pub sim_preset: String,
    /// Refuse to run unless the dataset's cache key is this.
    pub expect_dataset_key: Option<String>,
    /// Refuse to run unless the scenario's sha256 is this.
    pub expect_scenario_sha256: Option<String>,
    /// `--weka-nested-timestamp-basis`: how a session-tree corpus's nested timestamps are read;
    /// `None` infers it per corpus (`auto`).
    pub nested_basis: Option<dataset::tree::NestedBasis>,
    /// Plan only: nothing is sent or written.
    pub dry_run: bool,
    /// The run this one reruns (`agentx-host replay`), named in the manifest.
    pub replay_of: Option<ReplayOf>,
    /// The command line, kept in the manifest (what `agentx-host replay` reruns).
    pub argv: Vec<String>,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// `--ui dashboard`: draw the live dashboard on stderr in place of the progress bar (when
    /// stderr is a terminal), the log going through this writer meanwhile.
    pub dashboard: Option<crate::dashboard::LogTail>,
    /// Ctrl-C and SIGTERM act on this run (as [`Cancel::interrupt`] does).
    pub signals: bool,
    /// This process's part of a sharded run (`None`: the whole run in one process).
    pub shard: Option<shard::ShardConfig>,
}

/// Stops a run from another thread: the first [`Cancel::interrupt`] lets in-flight requests drain
/// and starts nothing new; the second cancels them.
#[derive(Debug, Clone)]
pub struct Cancel(Arc<watch::Sender<u32>>);

impl Default for Cancel {
    fn default() -> Self {
        Cancel::new()
    }
}

impl Cancel {
    /// A handle nothing has interrupted yet.
    pub fn new() -> Cancel {
        Cancel(Arc::new(watch::channel(0u32).0))
    }

    /// One interrupt, like one Ctrl-C.
    pub fn interrupt(&self) {
        self.0.send_modify(|n| *n += 1);
    }

    /// Interrupts so far.
    pub fn interrupts(&self) -> u32 {
        *self.0.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u32> {
        self.0.subscribe()
    }
}

/// The plan of a `--dry-run`.
#[derive(Debug, Clone)]
pub struct DryRun {
    /// Scenario, run id, seed, concurrency, dataset and lanes.
    pub json: serde_json::Value,
    /// The lane table and every lane's marker, as text.
    pub table: String,
}

/// What a run did.
#[derive(Debug)]
pub struct RunOutcome {
    /// The process exit code: 0, 1 (cancelled, or not valid with `require_valid`), 2 (an export
    /// could not be written).
    pub code: u8,
    /// The artifact directory.
    pub dir: PathBuf,
    /// The run's id (the markers' and the manifest's).
    pub run_id: String,
    /// Lanes, as the scenario resolved them.
    pub concurrency: u32,
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// How the replay ended (`None` for a dry run).
    pub replay: Option<ReplayOutcome>,
    /// The summary of the records (`None` for a dry run).
    pub summary: Option<Summary>,
    /// Empty for a valid submission.
    pub submission_invalid_reasons: Vec<String>,
    /// `records.jsonl`.
    pub records_path: PathBuf,
    /// Records written to it.
    pub records_written: u64,
    /// The plan, for a dry run.
    pub dry_run: Option<DryRun>,
}

impl RunOutcome {
    pub(crate) fn planned(
        dir: PathBuf,
        run_id: String,
        concurrency: u32,
        dry_run: DryRun,
    ) -> RunOutcome {
        RunOutcome {
            code: 0,
            records_path: dir.join(crate::record::RECORDS_FILE),
            dir,
            run_id,
            concurrency,
            files: Vec::new(),
            replay: None,
            summary: None,
            submission_invalid_reasons: Vec::new(),
            records_written: 0,
            dry_run: Some(dry_run),
        }
    }

    /// A valid submission.
    pub fn valid(&self) -> bool {
        self.submission_invalid_reasons.is_empty()
    }
}

/// Where the dataset comes from.
#[derive(Debug, Clone)]
pub enum DatasetSource {
    /// The corpus bundled in the binary (a run without `--dataset`).
    Bundled,
    /// `--dataset`: a path, a corpus name or a hub id.
    Spec(String),
    /// A recorded run's corpus that is no longer at its path, by its cache digest (`replay`).
    Cached {
        /// The dataset's cache key.
        key: String,
        /// The path the recorded run read it from.
        source: PathBuf,
    },
}

/// The recorded run a rerun (`agentx-host replay`) repeats, as its manifest names it.
#[derive(Debug, Clone)]
pub struct ReplayOf {
    /// The recorded run's id.
    pub run_id: String,
    /// Its `run_manifest.json`.
    pub manifest: PathBuf,
}

/// The merged configuration of a run: flags and environment, checked, before the scenario resolves
/// them (the CLI builds it from `agentx-host run`'s flags).
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// No `--url`: the built-in simulator serves the run, with the demo's defaults.
    pub demo: bool,
    /// `--concurrency` as given when it lists several points (a sweep's, refused for one run).
    pub concurrency_list: Option<String>,
    /// `--url`: the server's base URL.
    pub url: Option<String>,
    /// `--model`: the model the requests name (`None`: the first `/v1/models` lists).
    pub model: Option<String>,
    /// Where the corpus comes from.
    pub dataset: DatasetSource,
    /// The loader name the scenario sees.
    pub loader: &'static str,
    /// The replay settings handed to the scenario's `resolve`, as the flags and environment gave
    /// them (the last entry naming a setting decides it).
    pub settings: Vec<Setting>,
    /// `--extra-inputs`: fields merged into every request body.
    pub extra: Vec<(String, serde_json::Value)>,
    /// `--benchmark-grace-period`; `None` waits for every in-flight request.
    pub grace: Option<Duration>,
    /// `--warmup-grace-period`; `None` waits for every warmup request.
    pub warmup_grace: Option<Duration>,
    /// Whether history carries the recorded assistant text or the server's live answers.
    pub mode: AssistantMode,
    /// `--use-legacy-max-tokens`: session trees send `max_tokens` instead of
    /// `max_completion_tokens`.
    pub legacy_max_tokens: bool,
    /// `mode` was asked for (`--recorded-assistant`, `*_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES`),
    /// not defaulted.
    pub mode_given: bool,
    /// `--use-server-token-count`: token counts from the server's `usage`, not the tokenizer.
    pub use_server_token_count: bool,
    /// `--use-dynamo-conv-aware-routing` (body transport): each body's `nvext.session_control`.
    pub dynamo: Option<crate::client::DynamoRouting>,
    /// `--server-timing`: every body asks for the server's worker and timing figures.
    pub server_timing: bool,
    /// `--kv-block-size`: the server's KV block size, for the prompt chains and the cache model.
    pub kv_block_size: Option<u32>,
    /// `--kv-capacity-tokens`: the server's KV capacity, for the cache model.
    pub kv_capacity_tokens: Option<u64>,
    /// `--apply-chat-template`: client-side ISL over the model's rendered chat template.
    pub apply_chat_template: bool,
    /// The host's own request-shape settings (`use-dynamo-conv-aware-routing`,
    /// `dynamo-session-timeout-seconds`, `apply-chat-template`): name, value, source; the scenario
    /// never sees them. Shown with the applied settings.
    pub host_settings: Vec<(&'static str, serde_json::Value, &'static str)>,
    /// The context-overflow phrases the environment set, in place of the scenario's.
    pub overflow_phrases_env: Option<Vec<String>>,
    /// The HTTP client's settings: URL, API, pool, timeouts, routing headers.
    pub client: ClientConfig,
    /// `--stats-interval`: how often the live statistics are logged (`None`: never).
    pub stats_interval: Option<Duration>,
    /// `--trace-idle-gap-cap-seconds`.
    pub trace_idle_cap: Option<Duration>,
    /// The warmup heartbeat (`*_SERVICE_WARMUP_PROGRESS_LOG_INTERVAL`, 30 s by default).
    pub warmup_progress_interval: Option<Duration>,
    /// Flags accepted for aiperf compatibility that this run does not act on, each with why (with a
    /// 0.1.0 scenario; a session-tree scenario acts on [`TreeFlags`]).
    pub not_acted_on: Vec<String>,
    /// The session-tree flags (docs/specs/session-trees.md#warmup, and its profiling schedule).
    pub tree_flags: TreeFlags,
    /// `(variable, prefix)` of `AGENTX_`/`AIPERF_REQUIRED_SERVER_METRIC_PREFIX`: an endpoint none of
    /// whose metrics carries the prefix is warned about.
    pub required_metric_prefix: Option<(String, String)>,
    /// The server-metrics scrape interval (`*_SERVER_METRICS_COLLECTION_INTERVAL`); `None` for the
    /// scraper's default.
    pub scrape_interval: Option<Duration>,
    /// The GPU telemetry scrape interval (`*_GPU_COLLECTION_INTERVAL`); `None` for the scraper's
    /// default (333 ms, aiperf's).
    pub gpu_scrape_interval: Option<Duration>,
    /// `*_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID` as the environment set it (it then wins
    /// over the scenario's default).
    pub session_affinity_env: Option<bool>,
    /// Where each setting handed to the scenario came from: `flag`, `environment` or `demo` (the
    /// values a run without --url implies); a resolved setting not listed is the scenario's.
    pub sources: Vec<(String, &'static str)>,
    /// `--trace-context`, when given; `None`: on unless the scenario's wire is the harness's.
    pub trace_context: Option<bool>,
}

/// The flags a session-tree (0.2.0) scenario acts on and a 0.1.0 one does not.
#[derive(Debug, Clone, Default)]
pub struct TreeFlags {
    /// `--burst-phase-starts`: primers all at once, each lane's profiling from its own T0.
    pub burst: bool,
    /// `--warmup-requests-per-lane` / `--agentic-cache-warmup-duration`.
    pub pressure: Option<replay::sched::Pressure>,
    /// Open-loop session arrivals, as the scenario resolved them (never from the flags alone).
    pub arrivals: Option<replay::sched::OpenLoop>,
}

impl TreeFlags {
    /// The flags of `not_acted_on` entries a session-tree scenario acts on.
    const ACTED_ON: [&'static str; 5] = [
        "--warmup-requests-per-lane",
        "--agentic-cache-warmup-duration",
        "--burst-phase-starts",
        "--weka-nested-timestamp-basis",
        "--system-idle-gap-cap-seconds",
    ];

    /// `not_acted_on` as it stands for a scenario of `world`.
    pub fn not_acted_on(list: &[String], trees: bool) -> Vec<String> {
        list.iter()
            .filter(|w| !trees || !Self::ACTED_ON.iter().any(|f| w.starts_with(f)))
            .cloned()
            .collect()
    }
}

/// JSON of a scenario setting value.
pub(crate) fn value_json(value: &Value) -> serde_json::Value {
    match value {
        Value::Absent => serde_json::Value::Null,
        Value::Flag(b) => json!(b),
        Value::Integer(i) => json!(i),
        Value::Number(x) => json!(x),
        Value::Text(t) => json!(t),
        Value::Integers(l) => json!(l),
        Value::Texts(l) => json!(l),
    }
}

/// Typed reads of the scenario's resolved settings. A value the component returned as `absent`
/// reads as off; a name it did not return at all is [`Effective::missing`] (a 0.1.0 or 0.2.0
/// component that does not know it: the host's own default then applies).
struct Effective<'a>(&'a Resolved);

impl Effective<'_> {
    fn missing(&self, name: ReplaySetting) -> bool {
        self.0.setting(name).is_none()
    }
    fn get(&self, name: ReplaySetting) -> Option<&Value> {
        self.0.setting(name).filter(|v| !matches!(v, Value::Absent))
    }
    fn number(&self, name: ReplaySetting) -> Option<f64> {
        match self.get(name)? {
            Value::Number(x) => Some(*x),
            Value::Integer(i) => Some(*i as f64),
            _ => None,
        }
    }
    fn flag(&self, name: ReplaySetting) -> Option<bool> {
        match self.get(name)? {
            Value::Flag(b) => Some(*b),
            _ => None,
        }
    }
    fn text(&self, name: ReplaySetting) -> Option<&str> {
        match self.get(name)? {
            Value::Text(t) => Some(t),
            _ => None,
        }
    }
    fn concurrency(&self) -> Option<i64> {
        match self.get(ReplaySetting::Concurrency)? {
            Value::Integers(l) => l.first().copied(),
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }
    /// Seconds, or `None` for `inf` (or off).
    fn seconds_or_inf(&self, name: ReplaySetting) -> anyhow::Result<Option<Duration>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Text(t)) if t.trim().eq_ignore_ascii_case("inf") => Ok(None),
            Some(v) => match self.number(name) {
                Some(x) if (0.0..=MAX_SECS).contains(&x) => Ok(Some(Duration::from_secs_f64(x))),
                _ => bail!("the scenario resolved --{name} to {}, which is not a number of seconds or `inf`", value_json(v)),
            },
        }
    }
}

/// What the flags and environment say of the replay settings, for a component of an earlier world
/// that does not answer them (the defaults: nothing given).
#[derive(Debug, Clone, Default)]
pub struct Fallback {
    /// `--benchmark-grace-period` ([`RunSettings::grace`]).
    pub grace: Option<Duration>,
    /// `--warmup-grace-period` ([`RunSettings::warmup_grace`]).
    pub warmup_grace: Option<Duration>,
    /// `--failed-request-threshold`.
    pub failed_request_threshold: Option<f64>,
    /// `--warmup-requests-per-lane` / `--agentic-cache-warmup-duration`.
    pub pressure: Option<replay::sched::Pressure>,
    /// `--trace-idle-gap-cap-seconds`.
    pub trace_idle_cap: Option<Duration>,
    /// `--burst-phase-starts`.
    pub burst: bool,
    /// `--num-dataset-entries`.
    pub num_dataset_entries: Option<usize>,
    /// `--slice-duration` (s).
    pub slice_duration: Option<f64>,
    /// `--use-server-token-count`.
    pub use_server_token_count: bool,
    /// `--stats-interval`.
    pub stats_interval: Option<Duration>,
    /// `*_HTTP_TCP_USER_TIMEOUT`.
    pub tcp_user_timeout: Option<Duration>,
}

impl Fallback {
    /// What `cfg`'s flags and environment say.
    pub fn of(cfg: &RunConfig) -> Fallback {
        let rp = &cfg.plan;
        Fallback {
            grace: rp.grace,
            warmup_grace: rp.warmup_grace,
            failed_request_threshold: cfg.failed_request_threshold,
            pressure: rp.tree_flags.pressure,
            trace_idle_cap: rp.trace_idle_cap,
            burst: rp.tree_flags.burst,
            num_dataset_entries: cfg.num_dataset_entries,
            slice_duration: cfg.slice_duration,
            use_server_token_count: rp.use_server_token_count,
            stats_interval: rp.stats_interval,
            tcp_user_timeout: rp.client.tcp_user_timeout,
        }
    }
}

/// The settings of a run as the host uses them, read from the configuration the scenario resolved.
/// Every field is what the component answered; where a 0.1.0 or 0.2.0 component does not answer a
/// setting, the value of the flags and environment ([`RunPlan`]) stands, with the host's default
/// when none was given (a 0.3.0 component answers them all: [`scenario::REPLAY_SETTINGS`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Lanes (`concurrency`).
    pub concurrency: u32,
    /// Profiling time (`benchmark-duration`).
    pub duration: Duration,
    /// The earliest start of a lane, as a share of its trace (`trajectory-start-min-ratio`).
    pub min_ratio: f64,
    /// The latest start of a lane, as a share of its trace (`trajectory-start-max-ratio`).
    pub max_ratio: f64,
    /// Where the cache-bust marker goes (`cache-bust`).
    pub placement: Placement,
    /// The longest inter-turn delay replayed (s; `inter-turn-delay-cap-seconds`), or no cap.
    pub cap: Option<f64>,
    /// Delays replay think time only, not the server's recorded latency (`use-think-time-only`).
    pub think_only: bool,
    /// Turns follow each other without the recorded delays (`ignore-trace-delays`).
    pub ignore_delays: bool,
    /// Violations are warnings, and the run is not a valid submission (`unsafe-override`).
    pub unsafe_override: bool,
    /// The share of context overflows a valid run stays under (`context-overflow-rate-limit`).
    pub rate_limit: f64,
    /// `ignore_eos` in every body, when the scenario says (`ignore-eos`).
    pub ignore_eos: Option<bool>,
    /// `benchmark-grace-period`; `None` waits for every in-flight request.
    pub grace: Option<Duration>,
    /// `warmup-grace-period`; `None` waits for every warmup request.
    pub warmup_grace: Option<Duration>,
    /// The share of failed requests that stops the run (`failed-request-threshold`).
    pub failed_request_threshold: Option<f64>,
    /// The cache-pressure warmup stage (`warmup-requests-per-lane`, `agentic-cache-warmup-duration`).
    pub pressure: Option<replay::sched::Pressure>,
    /// The longest idle gap replayed inside a trace (`trace-idle-gap-cap-seconds`).
    pub trace_idle_cap: Option<Duration>,
    /// Every lane's primers at once, each lane's profiling from its own start
    /// (`burst-phase-starts`).
    pub burst: bool,
    /// The corpus cut to its first N traces (`num-dataset-entries`).
    pub num_dataset_entries: Option<usize>,
    /// The time-slice export's slice length (s; `slice-duration`).
    pub slice_duration: Option<f64>,
    /// Token counts from the server's `usage` (`use-server-token-count`).
    pub use_server_token_count: bool,
    /// How often live statistics are logged (`stats-interval`; `None`: never).
    pub stats_interval: Option<Duration>,
    /// `http-tcp-user-timeout` (ms), from the environment or the scenario's default.
    pub tcp_user_timeout: Option<Duration>,
    /// Open-loop session arrivals, as a scenario that allows them resolved them
    /// ([`RunSettings::open_loop`]).
    pub arrivals: Option<replay::sched::OpenLoop>,
    /// The agent's wire, as a scenario that decides it resolved it ([`RunSettings::agent_wire`]);
    /// `None`: the text wire without reasoning, as every other scenario sends.
    pub agent_wire: Option<AgentWire>,
}

/// How requests carry the agent's tools and reasoning, as the `agent-wire` scenario resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentWire {
    /// `wire`: tool schemas, calls and results in the request, or the tools as system text.
    pub wire: dataset::Wire,
    /// `reasoning-in-history keep`: the history's assistant turns carry the live reply's reasoning.
    pub keep_reasoning: bool,
}

impl RunSettings {
    /// Reads and checks the settings of `resolve`'s answer; `fallback` holds what the flags and
    /// environment said, for the settings a component of an earlier world does not answer
    /// (`decides`: a 0.3.0 component, which must answer them all).
    pub fn of(
        resolved: &Resolved,
        decides: bool,
        fallback: &Fallback,
    ) -> anyhow::Result<RunSettings> {
        let eff = Effective(resolved);
        if decides {
            let missing: Vec<&str> = scenario::REPLAY_SETTINGS
                .into_iter()
                .filter(|setting| eff.missing(*setting))
                .map(ReplaySetting::name)
                .collect();
            if !missing.is_empty() {
                bail!(
                    "the scenario is an {} component but did not decide {}; a component of that world answers every replay setting (absent for off): rebuild it, or use one that does",
                    scenario::World::V0_3.as_str(),
                    missing.join(", ")
                );
            }
        }
        let conc = eff.concurrency().ok_or_else(|| {
            anyhow!("--concurrency is required: the number of lanes, e.g. --concurrency 16")
        })?;
        let concurrency = u32::try_from(conc)
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| anyhow!("--concurrency {conc} is not a positive number of lanes"))?;
        let duration = eff.number(ReplaySetting::BenchmarkDuration).ok_or_else(|| {
            anyhow!("--benchmark-duration is required: profiling time in seconds, e.g. --benchmark-duration 1800")
        })?;
        // A setting the component answered, else (an earlier world's component) the flags' value.
        let or_plan = |name: ReplaySetting| !eff.missing(name);
        let secs = |name: ReplaySetting, flag: &str| -> anyhow::Result<Option<Duration>> {
            eff.number(name).map(|x| positive_secs(flag, x)).transpose()
        };
        let pressure = if or_plan(ReplaySetting::WarmupRequestsPerLane)
            || or_plan(ReplaySetting::AgenticCacheWarmupDuration)
        {
            match (
                eff.number(ReplaySetting::WarmupRequestsPerLane),
                secs(
                    ReplaySetting::AgenticCacheWarmupDuration,
                    "--agentic-cache-warmup-duration",
                )?,
            ) {
                (Some(n), _) if n >= 0.0 => {
                    Some(replay::sched::Pressure::RequestsPerLane(n as u64))
                }
                (None, Some(d)) => Some(replay::sched::Pressure::Duration(d)),
                _ => None,
            }
        } else {
            fallback.pressure
        };
        Ok(RunSettings {
            concurrency,
            duration: positive_secs(ReplaySetting::BenchmarkDuration.name(), duration)?,
            min_ratio: eff.number(ReplaySetting::TrajectoryStartMinRatio).unwrap_or(0.0),
            max_ratio: eff.number(ReplaySetting::TrajectoryStartMaxRatio).unwrap_or(0.7),
            placement: placement(eff.text(ReplaySetting::CacheBust).unwrap_or("none"))?,
            cap: eff.number(ReplaySetting::InterTurnDelayCapSeconds),
            think_only: eff.flag(ReplaySetting::UseThinkTimeOnly).unwrap_or(true),
            ignore_delays: eff.flag(ReplaySetting::IgnoreTraceDelays).unwrap_or(false),
            unsafe_override: eff.flag(ReplaySetting::UnsafeOverride).unwrap_or(false),
            rate_limit: eff.number(ReplaySetting::ContextOverflowRateLimit).unwrap_or(0.01),
            ignore_eos: eff.flag(ReplaySetting::IgnoreEos),
            grace: match or_plan(ReplaySetting::BenchmarkGracePeriod) {
                true => eff.seconds_or_inf(ReplaySetting::BenchmarkGracePeriod)?,
                false => fallback.grace,
            },
            warmup_grace: match or_plan(ReplaySetting::WarmupGracePeriod) {
                true => eff.seconds_or_inf(ReplaySetting::WarmupGracePeriod)?,
                false => fallback.warmup_grace,
            },
            failed_request_threshold: match or_plan(ReplaySetting::FailedRequestThreshold) {
                true => eff.number(ReplaySetting::FailedRequestThreshold),
                false => fallback.failed_request_threshold,
            },
            pressure,
            trace_idle_cap: match or_plan(ReplaySetting::TraceIdleGapCapSeconds) {
                true => secs(ReplaySetting::TraceIdleGapCapSeconds, "--trace-idle-gap-cap-seconds")?,
                false => fallback.trace_idle_cap,
            },
            burst: match or_plan(ReplaySetting::BurstPhaseStarts) {
                true => eff.flag(ReplaySetting::BurstPhaseStarts).unwrap_or(false),
                false => fallback.burst,
            },
            num_dataset_entries: match or_plan(ReplaySetting::NumDatasetEntries) {
                true => eff.number(ReplaySetting::NumDatasetEntries).map(|n| n.max(0.0) as usize),
                false => fallback.num_dataset_entries,
            },
            slice_duration: match or_plan(ReplaySetting::SliceDuration) {
                true => eff.number(ReplaySetting::SliceDuration),
                false => fallback.slice_duration,
            },
            use_server_token_count: match or_plan(ReplaySetting::UseServerTokenCount) {
                true => eff.flag(ReplaySetting::UseServerTokenCount).unwrap_or(false),
                false => fallback.use_server_token_count,
            },
            stats_interval: match or_plan(ReplaySetting::StatsInterval) {
                true => match eff.number(ReplaySetting::StatsInterval) {
                    Some(0.0) => None,
                    Some(x) => Some(positive_secs(ReplaySetting::StatsInterval.name(), x)?),
                    None => None,
                },
                false => fallback.stats_interval,
            },
            tcp_user_timeout: match or_plan(ReplaySetting::HttpTcpUserTimeout) {
                true => match eff.number(ReplaySetting::HttpTcpUserTimeout) {
                    Some(ms) if (1.0..=1e9).contains(&ms) => Some(Duration::from_millis(ms as u64)),
                    Some(ms) => bail!("the scenario resolved http-tcp-user-timeout to {ms} ms, which is not a number of milliseconds from 1"),
                    None => None,
                },
                false => fallback.tcp_user_timeout,
            },
            arrivals: None,
            agent_wire: None,
        })
    }

    /// The agent's wire of the resolved settings. Only a scenario that decides it (`allows`: its
    /// `describe` lists the `wire` knob, and it decides every setting) answers it; the host then
    /// applies exactly what it returned. A scenario that does not is refused by the caller when the
    /// flags ask for it.
    pub fn agent_wire(&mut self, resolved: &Resolved, allows: bool) -> anyhow::Result<()> {
        if !allows {
            return Ok(());
        }
        let eff = Effective(resolved);
        let wire = match eff.text(ReplaySetting::Wire) {
            None => dataset::Wire::Text,
            Some(name) => dataset::Wire::parse(name).ok_or_else(|| {
                anyhow!("the scenario resolved wire to {name:?}, which this host does not know (text, tools)")
            })?,
        };
        let keep_reasoning = match eff.text(ReplaySetting::ReasoningInHistory) {
            None | Some("drop") => false,
            Some("keep") => true,
            Some(other) => bail!("the scenario resolved reasoning-in-history to {other:?}, which this host does not know (keep, drop)"),
        };
        self.agent_wire = Some(AgentWire {
            wire,
            keep_reasoning,
        });
        Ok(())
    }

    /// The open-loop session arrivals of the resolved settings. Only a scenario that allows them
    /// (`allows`: its `describe` lists the `session-arrival-rate` knob, and it decides every
    /// setting) answers them; the host then applies exactly what it returned, drawn from the run's
    /// seed, with `--concurrency` the ceiling. A scenario that does not allow them is refused by
    /// the caller before this is read.
    pub fn open_loop(&mut self, resolved: &Resolved, allows: bool) -> anyhow::Result<()> {
        use replay::arrivals::{ArrivalSpec, Pattern};
        let eff = Effective(resolved);
        let rate = match (allows, eff.get(ReplaySetting::SessionArrivalRate)) {
            (true, Some(v)) => match eff.number(ReplaySetting::SessionArrivalRate) {
                Some(x) => x,
                None => bail!("the scenario resolved session-arrival-rate to {}, which is not a number of sessions per second", value_json(v)),
            },
            _ => return Ok(()),
        };
        let pattern = match eff.text(ReplaySetting::SessionArrivalPattern) {
            None => Pattern::Poisson,
            Some(p) => Pattern::parse(p).ok_or_else(|| {
                anyhow!("the scenario resolved session-arrival-pattern to {p:?}, which this host does not know (poisson, constant, gamma)")
            })?,
        };
        let smoothness = eff.number(ReplaySetting::SessionArrivalSmoothness);
        let spec = ArrivalSpec::new(rate, pattern, smoothness, resolved.seed)?;
        if self.pressure.is_some() {
            bail!("the scenario resolved both open-loop arrivals and a cache-pressure warmup; an arrival replays its tree from turn 0, with no warmup");
        }
        self.arrivals = Some(replay::sched::OpenLoop {
            spec,
            slots: self.concurrency,
        });
        Ok(())
    }

    /// `cfg` with every setting the scenario decided in place of what the flags said, and the
    /// decisions of `decisions` (the assistant text, the affinity header's default): what the
    /// later stages read.
    pub fn apply(&self, cfg: &RunConfig, decisions: &scenario::Decisions) -> RunConfig {
        let mut c = cfg.clone();
        c.failed_request_threshold = self.failed_request_threshold;
        c.num_dataset_entries = self.num_dataset_entries;
        c.slice_duration = self.slice_duration;
        let rp = &mut c.plan;
        rp.grace = self.grace;
        rp.warmup_grace = self.warmup_grace;
        rp.trace_idle_cap = self.trace_idle_cap;
        rp.tree_flags.pressure = self.pressure;
        rp.tree_flags.burst = self.burst;
        rp.tree_flags.arrivals = self.arrivals;
        rp.use_server_token_count = self.use_server_token_count;
        rp.stats_interval = self.stats_interval;
        rp.client.tcp_user_timeout = self.tcp_user_timeout;
        match decisions.assistant_text {
            Some(scenario::AssistantText::Recorded) => rp.mode = AssistantMode::Recorded,
            Some(scenario::AssistantText::Live) => rp.mode = AssistantMode::Live,
            None => {}
        }
        if rp.session_affinity_env.is_none() {
            rp.client.routing.session_affinity = decisions.session_affinity_header;
        }
        // A component that decides every setting (agentx) keeps the harness's wire, request for
        // request: no header of agentx's own unless asked for.
        rp.client.trace_context = rp.trace_context.unwrap_or(!decisions.decides_settings);
        c
    }
}

fn placement(name: &str) -> anyhow::Result<Placement> {
    Ok(match name {
        "none" => Placement::None,
        "system_prefix" => Placement::SystemPrefix,
        "system_suffix" => Placement::SystemSuffix,
        "first_turn_prefix" => Placement::FirstTurnPrefix,
        "first_turn_suffix" => Placement::FirstTurnSuffix,
        other => {
            bail!("the scenario resolved cache-bust to {other:?}, which this host does not know")
        }
    })
}

/// The longest time a flag takes, seconds (about 31 years): a longer one cannot be a timer deadline.
pub const MAX_SECS: f64 = 1e9;

/// A positive duration of at most [`MAX_SECS`], or an error naming `flag`.
pub fn positive_secs(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d > Duration::ZERO && secs <= MAX_SECS => Ok(d),
        _ => bail!("{flag} {secs} must be a positive number of seconds (at most {MAX_SECS})"),
    }
}

/// One `--target-precision` target: a headline figure and the half-width of its interval it must
/// reach, in percent of its estimate.
#[derive(Debug, Clone, Copy)]
pub struct TargetPrecision {
    /// The figure.
    pub figure: &'static crate::metrics::precision::Figure,
    /// The half-width, % of the estimate.
    pub percent: f64,
}
