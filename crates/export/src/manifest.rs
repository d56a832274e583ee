//! `run_manifest.json`: the one type of a run's manifest, written by the run (before the first
//! request, and again at its end) and read by `replay` and `merge`. Every field a reader relies on
//! is typed; a manifest of an older version reads with the fields it lacks at their defaults, and the
//! fields only a merged run carries (`shards`, `clock_skew_ns`, `merged_unix_ns`) are kept as they
//! are.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentx_metrics::tree_counts::TreeCounts;

/// The file name of a run's manifest.
pub const MANIFEST_FILE: &str = "run_manifest.json";

/// A run's manifest: everything that pins it, and how it ended. Only `argv`, `run_id`, `seed` and
/// `scenario.sha256` are required to read one (what a rerun needs).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Manifest {
    /// The command line, without the program name (what `replay` reruns).
    pub argv: Vec<String>,
    /// The working directory of the run (relative paths in `argv` are relative to it).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The run this one reruns (`agentx-host replay`).
    #[serde(default)]
    pub replay_of: Option<ReplayOf>,
    /// The run's id (in every marker and request id).
    pub run_id: String,
    /// The seed every random draw of the plan came from.
    pub seed: u64,
    /// The seed was drawn from the host's entropy, not given.
    #[serde(default)]
    pub seed_drawn: bool,
    /// The scenario component the run loaded.
    pub scenario: ScenarioId,
    /// The corpus the run replayed.
    #[serde(default)]
    pub dataset: DatasetId,
    /// Every setting as the scenario resolved it.
    #[serde(default)]
    pub resolved_settings: Vec<SettingRow>,
    /// Every replay setting as the run applied it, `{name: {value, source}}`; the source is
    /// `flag`, `environment`, `demo`, `scenario` or `host default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_settings: Option<AppliedSettings>,
    /// The warnings of the scenario's `resolve`.
    #[serde(default)]
    pub warnings: Vec<WarningRow>,
    /// Flags given for aiperf compatibility that the run does not act on, each with why.
    #[serde(default)]
    pub not_acted_on: Vec<String>,
    /// Why the scenario already knew, before the run, that it cannot be a valid submission.
    #[serde(default)]
    pub resolve_invalid_reasons: Vec<String>,
    /// `--slice-duration`: the time-slice export's slice length (s).
    #[serde(default)]
    pub slice_duration: Option<f64>,
    /// `--goodput`'s objectives (aiperf's tags), for a merge's exports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<String>,
    /// `--session-goodput-share`, with `goodput`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_goodput_share: Option<f64>,
    /// `--confidence`, for a merge's intervals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// `--session-slo`'s objectives, for a merge's session figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_slo: Option<String>,
    /// `--gpus`: the GPUs behind the server, for a merge's per-GPU figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// The HTTP side: session headers, connection reuse, the TCP user timeout.
    #[serde(default)]
    pub http: Option<HttpInfo>,
    /// The cache preflight's result (`--cache-preflight`; none when it did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_preflight: Option<CachePreflight>,
    /// A llama.cpp server's slots (its `/props`), read before the run: the KV capacity the cache
    /// model uses when the server's metrics give none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_slots: Option<agentx_metrics::cache_truth::SlotPool>,
    /// Lanes (over every shard of a sharded run).
    #[serde(default)]
    pub concurrency: u32,
    /// Profiling time (s).
    #[serde(default)]
    pub benchmark_duration_s: f64,
    /// `recorded` or `live`: whose assistant text the history carries.
    #[serde(default)]
    pub assistant_mode: String,
    /// The server the requests went to (`builtin-simulator` for a demo run).
    #[serde(default)]
    pub url: String,
    /// The model the requests named (given, or what the server's `/v1/models` listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Every lane's plan: single-stream lanes or session-tree lanes.
    #[serde(default)]
    pub lanes: Vec<LanePlan>,
    /// The version of agentx-host that ran.
    #[serde(default)]
    pub host_version: String,
    /// The version of wasmtime that ran the scenario.
    #[serde(default)]
    pub wasmtime_version: String,
    /// When the run's clock started (Unix ns): every `_ns` offset of the run counts from it.
    #[serde(default)]
    pub started_unix_ns: u64,
    /// `None` until the run ended.
    #[serde(default)]
    pub ended_unix_ns: Option<u64>,
    /// A shard's place in its run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// The session-tree scheduler's counts (a tree run, once it ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trees: Option<TreeCounts>,
    /// When profiling began on the run's clock (written as it begins, so a killed run keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiling_started_ns: Option<u64>,
    /// Profiling's start and end on the run's clock, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiling_ns: Option<[u64; 2]>,
    /// Why the run stopped, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// A run that never reached its end, finished by `agentx-host finalize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalized: Option<Finalized>,
    /// The server a sweep started for this run (`sweep --server-cmd`), once it was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerInfo>,
    /// A shard's rules for the exports its merge writes (dropped by the merge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_exports: Option<ShardExports>,
    /// A merged run's shards, one row each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<MergedShard>>,
    /// A merged run: the largest difference between two shards' clock offsets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_skew_ns: Option<i64>,
    /// A merged run: when the merge wrote it (Unix ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_unix_ns: Option<u64>,
    /// The OTLP export (`--otlp-endpoint`), once the run ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpInfo>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// The scenario's rules for the exports, kept in a shard's manifest so that the merge writes the
/// exports the run would have written in one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShardExports {
    /// The share of profiling a metric's timeline must cover to be reported.
    pub coverage_required_ratio: f64,
    /// Whether the coverage rule reads the streamed content's timeline too (a 0.3.0 component).
    pub coverage_content: bool,
    /// The warmup rows' `phase_name` (`None`: no name).
    pub warmup_phase_name: Option<String>,
}

/// One shard of a merged run, as the merge read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MergedShard {
    /// The shard's index.
    pub index: u32,
    /// Its artifact directory.
    pub dir: PathBuf,
    /// The host it ran on.
    pub host: String,
    /// The lanes it replayed.
    pub lanes: Vec<u32>,
    /// The records it wrote.
    pub records: usize,
    /// How the shard stopped.
    pub stop: String,
    /// Its wall clock's offset from the coordinator's (ns, positive: behind).
    pub clock_offset_ns: i64,
    /// The round trip of the ping that measured the offset (ns).
    pub clock_rtt_ns: i64,
    /// When its clock started (Unix ns).
    pub started_unix_ns: u64,
    /// How far its records moved onto the merged run's clock.
    pub shift_ns: u64,
    /// Its profiling window on the merged run's clock.
    pub profiling_ns: Option<[u64; 2]>,
}

/// How `agentx-host finalize` finished a run that did not reach its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Finalized {
    /// Why the run ended (given with `--reason`, or that its process ended without finishing).
    pub reason: String,
    /// When the exports were written (Unix ns).
    pub unix_ns: u64,
    /// The records the exports were written from.
    pub records: u64,
    /// A last line of `records.jsonl` cut off by the kill (left out; `None` when there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torn_record: Option<String>,
    /// Whether the server metrics scraped before the end were at hand (the scrape journal).
    pub server_metrics: bool,
}

/// The recorded run a rerun (`agentx-host replay`) repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReplayOf {
    /// The recorded run's id.
    pub run_id: String,
    /// Its `run_manifest.json`.
    pub manifest: PathBuf,
}

/// The scenario component a run loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ScenarioId {
    /// The component's name, as its `describe` gives it.
    #[serde(default)]
    pub name: String,
    /// Its version.
    #[serde(default)]
    pub version: String,
    /// The sha256 of its bytes, hex: what pins it.
    pub sha256: String,
    /// Where it was loaded from (a path, or `builtin:<name>`).
    #[serde(default)]
    pub source: PathBuf,
}

/// The corpus a run replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DatasetId {
    /// The path the corpus was read from.
    #[serde(default)]
    pub source: PathBuf,
    /// The corpus name it was given by (`--public-dataset`, a named corpus), if any.
    #[serde(default)]
    pub alias: Option<String>,
    /// The dataset's cache key (its digest), hex.
    #[serde(default)]
    pub cache_key: Option<String>,
    /// Traces in the corpus (after `--num-dataset-entries`).
    #[serde(default)]
    pub traces: usize,
    /// `--num-dataset-entries`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_dataset_entries: Option<usize>,
    /// `--trace-block-size`: every trace laid out in this many tokens per hash block, whatever it
    /// declares (`None`: each trace as it declares).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_block_size: Option<u32>,
    /// Where the replay of this corpus parts from agentx-harness 1.0.12's CLI, and what the
    /// harness would refuse in it (each also logged as a warning).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harness_notes: Vec<HarnessNote>,
}

/// One way a run's replay of its corpus parts from agentx-harness 1.0.12's CLI, or a reason the
/// harness would refuse the corpus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HarnessNote {
    /// What the note is about.
    pub kind: HarnessNoteKind,
    /// How many it concerns: the traces laid out in other blocks (`block_size`), or the places in
    /// the corpus (file:line) the harness would refuse (`refused`).
    pub count: u64,
    /// What differs, why, and how to reproduce the harness (or fix the corpus).
    pub message: String,
}

/// What a [`HarnessNote`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HarnessNoteKind {
    /// The traces are laid out in other blocks than the harness CLI's 64 tokens.
    BlockSize,
    /// The harness would refuse the corpus (a scenario other than `agentx` replays it).
    Refused,
}

/// A setting as the scenario resolved it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SettingRow {
    /// The setting's name.
    pub name: String,
    /// The value the scenario resolved it to.
    pub value: Value,
    /// Whether the flags or the environment gave it (not the scenario's default).
    pub explicit: bool,
}

/// One lane of a run's plan as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LanePlan {
    /// A session-tree lane: the tree it starts with and where each of its streams starts.
    Tree(TreeLanePlan),
    /// A single-stream lane: the trace it starts with and the turn it starts at.
    Stream(StreamLanePlan),
}

impl LanePlan {
    /// The lane's index.
    pub fn lane(&self) -> u32 {
        match self {
            LanePlan::Tree(tree) => tree.lane,
            LanePlan::Stream(stream) => stream.lane,
        }
    }
}

/// A single-stream lane's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StreamLanePlan {
    /// The lane's index, from 0.
    pub lane: u32,
    /// The trace the lane starts with.
    pub trace_id: String,
    /// The trace's turns.
    pub turns: u32,
    /// The warmup turn k; profiling resumes at k+1.
    pub start_turn: u32,
    /// The cache-bust marker of the lane's first session.
    pub marker: String,
}

/// A session-tree lane's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TreeLanePlan {
    /// The lane's index, from 0.
    pub lane: u32,
    /// The base trace of the lane's first tree.
    pub trace_id: String,
    /// t* on the root's clock (ms); `None` for a lane started by the turn-index fallback.
    pub t_star_ms: Option<f64>,
    /// The tree's cache-bust marker (every stream of the tree carries it).
    pub marker: String,
    /// Trees of this base trace minted before this one.
    pub pass: u32,
    /// The tree's streams alive at t*.
    pub streams: Vec<TreeStreamPlan>,
}

/// Where one stream of a lane's first tree starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TreeStreamPlan {
    /// The stream's conversation id in the corpus.
    pub conversation_id: String,
    /// The first turn profiling sends.
    pub next_turn: u32,
    /// The turn warmup sends to warm the cache, if any.
    pub warm_turn: Option<u32>,
    /// The stream's start on the root's clock (ms).
    pub offset_ms: f64,
    /// How long before t* the warm turn was recorded (ms, capped).
    pub lead_ms: f64,
    /// The root waits for its children's join before `next_turn`.
    pub waiting: bool,
}

/// Every replay setting as a run applied it, by name.
pub type AppliedSettings = std::collections::BTreeMap<String, AppliedSetting>;

/// A replay setting as the run applied it, and where its value came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AppliedSetting {
    /// The value (a number, text, flag, list or `null` for off).
    pub value: Value,
    /// `flag`, `environment`, `demo`, `scenario` or `host default`.
    pub source: String,
}

impl AppliedSetting {
    /// `value`, which came from `source`.
    pub fn new(value: Value, source: &str) -> AppliedSetting {
        AppliedSetting {
            value,
            source: source.to_string(),
        }
    }
}

/// A warning of the scenario's `resolve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WarningRow {
    /// The setting it concerns.
    pub setting: String,
    /// What the scenario said.
    pub message: String,
}

/// The HTTP side of a run: the headers that carry the session, the reuse strategy, the timeout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HttpInfo {
    /// The header that carries each session's correlation id.
    pub correlation_header: String,
    /// The session-affinity headers sent with it (a profile's every header that it can send).
    pub session_headers: Vec<String>,
    /// `--routing-headers`'s profile (`dynamo`, `custom:NAME`...), when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_profile: Option<String>,
    /// How connections are reused across requests.
    pub connection_reuse_strategy: String,
    /// `*_HTTP_TCP_USER_TIMEOUT` (ms), when set.
    pub tcp_user_timeout_ms: Option<u64>,
    /// Every request carried a W3C `traceparent`.
    #[serde(default)]
    pub trace_context: bool,
}

/// What the OTLP export of a run did (`--otlp-endpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OtlpInfo {
    /// The collector's traces URL.
    pub endpoint: String,
    /// Spans the collector took (one per request record and one per stream).
    pub spans_sent: u64,
    /// Spans dropped: a full queue, or batches the collector refused or did not take in time.
    pub spans_dropped: u64,
    /// Batches that failed.
    pub batches_failed: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// What the cache preflight found: the same two-turn conversation sent twice before the run,
/// outside every counter window, judged from the repeat's cached tokens (agentx-client's
/// `preflight::cache`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CachePreflight {
    /// What it found.
    pub verdict: CacheVerdict,
    /// What was found, in one sentence with the figures.
    pub finding: String,
    /// The likely causes when the verdict is not `works`, the likeliest first.
    #[serde(default)]
    pub causes: Vec<String>,
    /// What to change, where one change fixes it.
    #[serde(default)]
    pub fix: Option<String>,
    /// The repeat's cached tokens over its prompt tokens (`None`: no usage, or a failure).
    #[serde(default)]
    pub repeat_hit_rate: Option<f64>,
    /// What the server's `/metrics` said of its prefix cache.
    #[serde(default)]
    pub claim: CacheClaim,
    /// The probe's requests, in the order sent.
    #[serde(default)]
    pub turns: Vec<CacheProbeTurn>,
}

/// The cache preflight's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheVerdict {
    /// The repeat was answered from the cache, and the responses say so.
    Works,
    /// The responses carry no cached-token count (no `usage`, or no `prompt_tokens_details`).
    NoUsageField,
    /// The responses counted no cached token while the server claims prefix caching or says
    /// nothing of it.
    NoHitWhileClaimed,
    /// The server says its prefix caching is off.
    CachingOff,
    /// A probe request failed or timed out.
    Inconclusive,
}

/// What the server's `/metrics` said of its prefix cache (vLLM's `cache_config_info`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CacheClaim {
    /// `enable_prefix_caching`: on, off, or `None` when the server says nothing.
    pub prefix_caching: Option<bool>,
    /// The distinct `engine` labels: data-parallel engines behind the port.
    pub engines: Option<u32>,
    /// Tokens per cache block.
    pub block_size: Option<u64>,
    /// Why nothing was read, or what was missing.
    pub note: Option<String>,
}

/// One request of the cache preflight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CacheProbeTurn {
    /// 1: the conversation's first sending; 2: the repeat.
    pub pass: u8,
    /// The turn of the conversation, 1 or 2.
    pub turn: u8,
    /// The prompt's words (the word model's count).
    pub prompt_words: u64,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u64>,
    /// The response carried a `usage` object.
    pub usage: bool,
    /// Why the request failed.
    pub error: Option<String>,
}

/// A shard's place in a sharded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShardInfo {
    /// This shard's index, from 0.
    pub index: u32,
    /// Shards in the run.
    pub count: u32,
    /// Where the index came from (`--shard`, Slurm, a Kubernetes job).
    #[serde(default)]
    pub source: String,
    /// `HOST:PORT` of shard 0's rendezvous.
    #[serde(default)]
    pub coordinator: String,
    /// The host this shard ran on.
    #[serde(default)]
    pub host: String,
    /// The lanes this shard replayed.
    #[serde(default)]
    pub lanes: Vec<u32>,
    /// Traces (or trees) this shard recycles.
    #[serde(default)]
    pub pool: usize,
    /// Its wall clock's offset from the coordinator's (ns, positive: behind).
    #[serde(default)]
    pub clock_offset_ns: i64,
    /// The round trip of the ping that measured the offset (ns).
    #[serde(default)]
    pub clock_rtt_ns: i64,
    /// How long the rendezvous took (s).
    #[serde(default)]
    pub rendezvous_s: f64,
    /// Shard 0's report of the rendezvous, once every shard was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous: Option<RendezvousReport>,
}

/// What shard 0's rendezvous coordinator saw, once every shard was done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RendezvousReport {
    /// Shards whose connection dropped before they were done.
    pub lost: Vec<u32>,
    /// Every shard that joined, as the coordinator saw it.
    pub shards: Vec<ShardSeen>,
}

/// One shard as the rendezvous coordinator saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ShardSeen {
    /// The shard's index.
    pub index: u32,
    /// The host name the shard reported.
    pub host: String,
    /// The address its connection came from.
    pub peer: String,
}

/// A server started for one run (`sweep --server-cmd`): what ran, where, how soon it was ready and
/// how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerInfo {
    /// The command after substitution, as `sh -c` ran it.
    pub command: String,
    /// The local port picked for it (`{port}`).
    pub port: u16,
    /// The process id of its shell, which leads its process group.
    pub pid: u32,
    /// The URL the run targeted.
    pub url: String,
    /// Seconds from the start until `/v1/models` answered 200; `None` when it never did.
    pub ready_s: Option<f64>,
    /// Its stdout and stderr, relative to the run's directory.
    pub log: String,
    /// How it ended; `None` while it runs.
    pub exit: Option<ServerExit>,
}

/// How a started server ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerExit {
    /// Whether it exited on its own, was stopped, or was killed.
    pub how: ServerEnd,
    /// Its shell's exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended its shell, when one did.
    pub signal: Option<i32>,
}

impl ServerExit {
    /// `exit code N`, `signal N`, or `no exit status`.
    pub fn status(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit code {c}"),
            (None, Some(s)) => format!("signal {s}"),
            (None, None) => "no exit status".into(),
        }
    }
}

impl std::fmt::Display for ServerExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.how {
            ServerEnd::Exited => "exited",
            ServerEnd::Terminated => "terminated",
            ServerEnd::Killed => "killed",
        };
        write!(f, "{how} ({})", self.status())
    }
}

/// Who ended a started server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServerEnd {
    /// It exited on its own, before it was stopped.
    Exited,
    /// Its process group ended on SIGTERM.
    Terminated,
    /// Its process group outlived the grace period after SIGTERM and was sent SIGKILL.
    Killed,
}

/// A manifest that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The manifest's path.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not a run manifest (the error names the field).
    #[error("{}: not a run manifest: {source}", path.display())]
    Parse {
        /// The manifest's path.
        path: PathBuf,
        /// What is wrong, and where.
        source: serde_path_to_error::Error<serde_json::Error>,
    },
}

impl Manifest {
    /// Reads the text of a manifest; `path` names it in errors (with the field that is wrong).
    pub fn parse(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|source| ManifestError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Reads `dir/run_manifest.json`.
    pub fn read_dir(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        Manifest::parse(&text, &path)
    }

    /// The value the scenario resolved the setting `name` to: its last row naming it, as every
    /// list of settings reads (`agentx_scenario::last_named`).
    pub fn resolved_setting(&self, name: &str) -> Option<&Value> {
        self.resolved_settings
            .iter()
            .rev()
            .find(|row| row.name == name)
            .map(|row| &row.value)
    }

    /// The manifest as the file holds it.
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"{"argv": ["run", "--url", "http://h:8000"], "run_id": "r1", "seed": 7,
        "scenario": {"name": "inferencex-agentx-mvp", "version": "0.1.0", "sha256": "ab"},
        "dataset": {"source": "t.jsonl", "cache_key": "cd", "traces": 3},
        "concurrency": 4, "benchmark_duration_s": 60.0, "started_unix_ns": 1, "ended_unix_ns": null,
        "clock_skew_ns": 2, "future_field": {"x": 1}}"#;

    #[test]
    fn an_older_manifest_reads_and_keeps_what_it_does_not_type() {
        let m = Manifest::parse(OLD, Path::new("m.json")).unwrap();
        assert_eq!(m.seed, 7);
        assert_eq!(m.cwd, None);
        assert_eq!(m.ended_unix_ns, None);
        assert_eq!(m.dataset.cache_key.as_deref(), Some("cd"));
        let back: Value = serde_json::from_str(&m.to_json_pretty()).unwrap();
        assert_eq!(back["future_field"]["x"], 1);
        assert_eq!(back["clock_skew_ns"], 2);
        assert!(back.get("shards").is_none());
        assert!(back["ended_unix_ns"].is_null());
        assert!(back.get("shard").is_none());
    }

    #[test]
    fn a_wrong_field_is_named_with_its_path() {
        let bad = OLD.replace("\"seed\": 7", "\"seed\": \"seven\"");
        let e = Manifest::parse(&bad, Path::new("m.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.json") && e.contains("seed"), "{e}");
    }
}
