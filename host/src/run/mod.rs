//! A run as a library call: [`execute`] takes a [`RunConfig`] (what `agentx-host run`'s flags and
//! environment resolve to) and does everything between parsing and the exit code: load and resolve
//! the scenario, open the dataset, plan, start the built-in simulator or reach the server, scrape its
//! metrics, replay, and write the records, the manifest, the summary, the exports and the plots. It
//! returns a [`RunOutcome`] with the artifact paths, the summary and the exit code; a [`Cancel`]
//! handle stops it as Ctrl-C would. The CLI, sweeps ([`sweep`]) and tests call it; it prints nothing
//! but logs.

pub mod artifact_dir;
pub mod merge;
pub mod rendezvous;
pub mod shard;
pub mod sweep;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use serde_json::json;
use tokio::sync::watch;

use crate::client::{Client, ClientConfig, RequestBody};
use crate::dataset::{self, AssistantMode, Dataset, OpenOptions, PromptSynth, TokenCounter};
use crate::metrics::Summary;
use crate::record::{read_records, Clock, RecordSink};
use crate::replay::{self, Plan, PlanParams, ReplayConfig, ReplayInputs, ReplayOutcome};
use crate::scenario;
use crate::scenario::types::{DelayParams, Placement, Resolved, Setting, StartParams, Value};

pub use crate::scenario::builtin::{is_builtin_name, load, BUILTIN_MVP, BUILTIN_SCENARIO};
/// The corpus replayed when no dataset is named (24 synthetic traces, `fixtures/traces-24.jsonl`).
pub const BUNDLED_CORPUS: &[u8] = include_bytes!("../../../fixtures/traces-24.jsonl");
/// The manifest file of a run: its inputs, written before the first request.
pub const MANIFEST_FILE: &str = "run_manifest.json";
/// Lanes of a demo run (no `--url`) unless given.
pub const DEMO_CONCURRENCY: i64 = 4;
/// Profiling seconds of a demo run unless given.
pub const DEMO_DURATION_S: f64 = 30.0;

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The scenario reference (path, `path@sha256:`, store name or hash); `None` for the built-in
    /// default (agentx-v1).
    pub scenario: Option<String>,
    /// `AGENTX_HOME`: the scenario store and caches.
    pub home: PathBuf,
    /// Flags and environment, merged and checked.
    pub plan: RunPlan,
    pub num_dataset_entries: Option<usize>,
    pub max_context_length: Option<u64>,
    /// `--tokenizer`: a path, a hub model id or `builtin`.
    pub tokenizer: Option<String>,
    /// Where the artifacts go: the named directory or a fresh one per run.
    pub output: artifact_dir::OutputDir,
    /// `--overwrite`: a named directory that holds another run is replaced instead of refused.
    pub overwrite: bool,
    pub slice_duration: Option<f64>,
    pub no_server_metrics: bool,
    /// More `/metrics` endpoints besides the server's own.
    pub server_metrics: Vec<String>,
    pub skip_preflight: bool,
    /// Exit code 1 when the run is not a valid submission.
    pub require_valid: bool,
    pub failed_request_threshold: Option<f64>,
    /// Pins the markers; a fresh id when `None`.
    pub run_id: Option<String>,
    /// The simulator preset of a run without a URL.
    pub sim_preset: String,
    /// Refuse to run unless the dataset's cache key / the scenario's sha256 is this.
    pub expect_dataset_key: Option<String>,
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

    fn subscribe(&self) -> watch::Receiver<u32> {
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
    pub run_id: String,
    pub concurrency: u32,
    /// Every file written.
    pub files: Vec<PathBuf>,
    /// How the replay ended (`None` for a dry run).
    pub replay: Option<ReplayOutcome>,
    pub summary: Option<Summary>,
    /// Empty for a valid submission.
    pub submission_invalid_reasons: Vec<String>,
    pub records_path: PathBuf,
    pub records_written: u64,
    /// The plan, for a dry run.
    pub dry_run: Option<DryRun>,
}

impl RunOutcome {
    fn planned(dir: PathBuf, run_id: String, concurrency: u32, d: DryRun) -> RunOutcome {
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
            dry_run: Some(d),
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
    Bundled,
    Spec(String),
    /// A recorded run's corpus that is no longer at its path, by its cache digest (`replay`).
    Cached {
        key: String,
        source: PathBuf,
    },
}

/// The recorded run a rerun (`agentx-host replay`) repeats, as its manifest names it.
#[derive(Debug, Clone)]
pub struct ReplayOf {
    pub run_id: String,
    pub manifest: PathBuf,
}

/// The merged configuration of a run: flags and environment, checked, before the scenario resolves
/// them (the CLI builds it from `agentx-host run`'s flags).
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub demo: bool,
    /// `--concurrency` as given when it lists several points (a sweep's, refused for one run).
    pub concurrency_list: Option<String>,
    pub url: Option<String>,
    pub model: Option<String>,
    pub dataset: DatasetSource,
    /// The loader name the scenario sees.
    pub loader: &'static str,
    pub settings: Vec<Setting>,
    pub extra: Vec<(String, serde_json::Value)>,
    pub grace: Option<Duration>,
    pub warmup_grace: Option<Duration>,
    pub mode: AssistantMode,
    pub use_server_token_count: bool,
    pub overflow_phrases_env: Option<Vec<String>>,
    pub client: ClientConfig,
    pub stats_interval: Option<Duration>,
    /// `--trace-idle-gap-cap-seconds`.
    pub trace_idle_cap: Option<Duration>,
    /// The warmup heartbeat (`*_SERVICE_WARMUP_PROGRESS_LOG_INTERVAL`, 30 s by default).
    pub warmup_progress_interval: Option<Duration>,
    /// Flags accepted for aiperf compatibility that this run does not act on, each with why (with a
    /// 0.1.0 scenario; a session-tree scenario acts on [`TreeFlags`]).
    pub not_acted_on: Vec<String>,
    /// The session-tree flags (agentx-v1.md §4-5).
    pub tree_flags: TreeFlags,
    /// `(variable, prefix)` of `AGENTX_`/`AIPERF_REQUIRED_SERVER_METRIC_PREFIX`: an endpoint none of
    /// whose metrics carries the prefix is warned about.
    pub required_metric_prefix: Option<(String, String)>,
    /// The server-metrics scrape interval (`*_SERVER_METRICS_COLLECTION_INTERVAL`); `None` for the
    /// scraper's default.
    pub scrape_interval: Option<Duration>,
}

/// The flags a session-tree (0.2.0) scenario acts on and a 0.1.0 one does not.
#[derive(Debug, Clone, Default)]
pub struct TreeFlags {
    /// `--burst-phase-starts`: primers all at once, each lane's profiling from its own T0.
    pub burst: bool,
    /// `--warmup-requests-per-lane` / `--agentic-cache-warmup-duration`.
    pub pressure: Option<replay::sched::Pressure>,
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
fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::Absent => serde_json::Value::Null,
        Value::Flag(b) => json!(b),
        Value::Integer(i) => json!(i),
        Value::Number(x) => json!(x),
        Value::Text(t) => json!(t),
        Value::Integers(l) => json!(l),
        Value::Texts(l) => json!(l),
    }
}

/// Typed reads of the scenario's resolved settings.
struct Effective<'a>(&'a Resolved);

impl Effective<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0
            .settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| &s.value)
            .filter(|v| !matches!(v, Value::Absent))
    }
    fn number(&self, name: &str) -> Option<f64> {
        match self.get(name)? {
            Value::Number(x) => Some(*x),
            Value::Integer(i) => Some(*i as f64),
            _ => None,
        }
    }
    fn flag(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            Value::Flag(b) => Some(*b),
            _ => None,
        }
    }
    fn text(&self, name: &str) -> Option<&str> {
        match self.get(name)? {
            Value::Text(t) => Some(t),
            _ => None,
        }
    }
    fn concurrency(&self) -> Option<i64> {
        match self.get("concurrency")? {
            Value::Integers(l) => l.first().copied(),
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }
}

/// The settings of a run as the host uses them, read from the configuration the scenario resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    pub concurrency: u32,
    pub duration: Duration,
    pub min_ratio: f64,
    pub max_ratio: f64,
    pub placement: Placement,
    pub cap: Option<f64>,
    pub think_only: bool,
    pub ignore_delays: bool,
    pub unsafe_override: bool,
    pub rate_limit: f64,
    pub ignore_eos: Option<bool>,
}

impl RunSettings {
    /// Reads and checks the settings of `resolve`'s answer.
    pub fn of(resolved: &Resolved) -> anyhow::Result<RunSettings> {
        let eff = Effective(resolved);
        let conc = eff.concurrency().ok_or_else(|| {
            anyhow!("--concurrency is required: the number of lanes, e.g. --concurrency 16")
        })?;
        let concurrency = u32::try_from(conc)
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| anyhow!("--concurrency {conc} is not a positive number of lanes"))?;
        let duration = eff.number("benchmark-duration").ok_or_else(|| {
            anyhow!("--benchmark-duration is required: profiling time in seconds, e.g. --benchmark-duration 1800")
        })?;
        Ok(RunSettings {
            concurrency,
            duration: positive_secs("--benchmark-duration", duration)?,
            min_ratio: eff.number("trajectory-start-min-ratio").unwrap_or(0.0),
            max_ratio: eff.number("trajectory-start-max-ratio").unwrap_or(0.7),
            placement: placement(eff.text("cache-bust").unwrap_or("none"))?,
            cap: eff.number("inter-turn-delay-cap-seconds"),
            think_only: eff.flag("use-think-time-only").unwrap_or(true),
            ignore_delays: eff.flag("ignore-trace-delays").unwrap_or(false),
            unsafe_override: eff.flag("unsafe-override").unwrap_or(false),
            rate_limit: eff.number("context-overflow-rate-limit").unwrap_or(0.01),
            ignore_eos: eff.flag("ignore-eos"),
        })
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
pub fn positive_secs(flag: &str, v: f64) -> anyhow::Result<Duration> {
    match Duration::try_from_secs_f64(v) {
        Ok(d) if d > Duration::ZERO && v <= MAX_SECS => Ok(d),
        _ => bail!("{flag} {v} must be a positive number of seconds (at most {MAX_SECS})"),
    }
}

/// A fresh id: 128 bits from the OS-seeded thread generator, as 32 hex digits.
fn fresh_id() -> String {
    use rand::RngExt;
    format!("{:032x}", rand::rng().random::<u128>())
}

/// The entropy the scenario draws a seed from when `--random-seed` is unset.
fn entropy() -> u64 {
    use rand::RngExt;
    rand::rng().random()
}

/// Writes the bundled corpus under the cache directory (once) and returns its path.
pub fn bundled_corpus(home: &Path) -> anyhow::Result<PathBuf> {
    let path = home.join("bundled").join("traces-24.jsonl");
    if std::fs::read(&path).ok().as_deref() != Some(BUNDLED_CORPUS) {
        crate::fsio::Root::create(home)
            .and_then(|h| h.write_atomic("bundled/traces-24.jsonl", BUNDLED_CORPUS))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(path)
}

/// The dataset a run replays, opened (and imported into the cache on first use).
fn open_dataset(cfg: &RunConfig) -> anyhow::Result<Dataset> {
    let opts = OpenOptions {
        num_dataset_entries: cfg.num_dataset_entries,
        max_context_length: cfg.max_context_length,
        max_osl: None,
        cache_dir: None,
    };
    Ok(match &cfg.plan.dataset {
        DatasetSource::Bundled => Dataset::open_path(&bundled_corpus(&cfg.home)?, &opts)?,
        DatasetSource::Spec(s) => Dataset::open(s, &opts)?,
        DatasetSource::Cached { key, source } => Dataset::open_cached(key, source.clone(), &opts)?,
    })
}

/// What pins a run's inputs besides its flags: the scenario component's sha256 and the dataset's
/// cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputIds {
    pub scenario_sha256: String,
    pub dataset_key: String,
}

/// Loads the scenario and opens the dataset of `cfg` without running anything.
pub fn input_ids(cfg: &RunConfig) -> anyhow::Result<InputIds> {
    let sc = load(cfg.scenario.as_deref(), &cfg.home)?;
    let ds = open_dataset(cfg)?;
    Ok(InputIds {
        scenario_sha256: sc.hash().to_string(),
        dataset_key: hex::encode(ds.cache_key().0),
    })
}

/// A seed drawn for a run that was given none (a sweep draws one for all its points).
pub fn draw_seed() -> u64 {
    entropy() & (i64::MAX as u64)
}

/// Runs `cfg` to its end (or a dry run's plan); `cancel` stops it early.
pub fn execute(cfg: RunConfig, cancel: &Cancel) -> anyhow::Result<RunOutcome> {
    let rp = &cfg.plan;
    let home = cfg.home.clone();
    let shard_sub = cfg.shard.as_ref().map(|sh| shard_dir_name(sh.index));
    if !cfg.dry_run {
        // Refused before anything loads; checked again before the directory is touched.
        cfg.output.check(shard_sub.as_deref(), cfg.overwrite)?;
    }
    // A rerun of a run that named no scenario takes the recorded component by its hash (the
    // default may have changed since; the built-ins are found by hash too).
    let sc = match (&cfg.scenario, &cfg.expect_scenario_sha256) {
        (None, Some(h)) => {
            load(Some(&format!("sha256:{h}")), &home).or_else(|_| load(None, &home))?
        }
        _ => load(cfg.scenario.as_deref(), &home)?,
    };
    if let Some(want) = &cfg.expect_scenario_sha256 {
        if sc.hash() != want {
            bail!(
                "the scenario is sha256:{} but the manifest recorded sha256:{want}; pass the recorded component (add it with `agentx-host scenario add FILE`)",
                sc.hash()
            );
        }
    }
    let mut inst = sc.instantiate()?;
    let info = inst.describe()?;
    let trees = sc.world() == scenario::World::V0_2;
    if trees && cfg.shard.is_some() {
        bail!(
            "the scenario {} {} replays session trees, which a sharded run (--shard, Slurm, Kubernetes) does not split yet; run it in one process, or shard agentx-mvp",
            info.name,
            info.version
        );
    }
    let resolved = match inst.resolve(&rp.settings, entropy())? {
        Ok(r) => r,
        Err(violations) => {
            let mut msg = format!(
                "the scenario {} {} (sha256:{}) refuses this configuration:",
                info.name,
                info.version,
                &sc.hash()[..16]
            );
            for v in &violations {
                msg.push_str(&format!("\n  {}: {}", flag_of(&v.setting), v.message));
            }
            if let Some(c) = &rp.concurrency_list {
                msg.push_str(&format!(
                    "\n(for one run per concurrency, `agentx-host sweep --concurrency {c}`)"
                ));
            }
            bail!(msg);
        }
    };
    if let Some(c) = &rp.concurrency_list {
        bail!(
            "--concurrency {c}: a run has one concurrency; for one run per point use `agentx-host sweep --concurrency {c}`"
        );
    }
    log_resolve_warnings(&resolved);
    let not_acted_on = TreeFlags::not_acted_on(&rp.not_acted_on, trees);
    for w in &not_acted_on {
        tracing::warn!("accepted but not acted on: {w}");
    }
    let RunSettings {
        concurrency: conc,
        duration,
        min_ratio,
        max_ratio,
        placement,
        cap,
        think_only,
        ignore_delays,
        unsafe_override,
        rate_limit,
        ignore_eos,
    } = RunSettings::of(&resolved)?;
    // One connection per lane (more while trees fan out), plus the process's own files; a dry run
    // says so too, before the run would meet it.
    let needed = u64::from(conc) * 2 + 256;
    if let Err((soft, hard)) = crate::client::ensure_open_files(needed) {
        tracing::warn!(
            "--concurrency {conc} may need about {needed} open files (connections), but the open-file limit is {soft} (hard limit {hard}); \
             raise it (`ulimit -n {needed}`) or connections will fail with `Too many open files`"
        );
    }
    let seed = resolved.seed;
    if resolved.seed_drawn {
        tracing::info!(
            seed,
            "no --random-seed given; drew one (pass --random-seed {seed} to reproduce)"
        );
    }
    let mut extra = rp.extra.clone();
    if let Some(b) = ignore_eos {
        if !extra.iter().any(|(k, _)| k == "ignore_eos") {
            extra.push(("ignore_eos".into(), json!(b)));
        }
    }

    // Dataset.
    let counter = match cfg.tokenizer.as_deref() {
        None => TokenCounter::Words,
        Some(spec) => match dataset::tokens::resolve_tokenizer(spec) {
            Ok(src) => {
                tracing::info!("--tokenizer {spec}: {}", src.describe());
                src.counter()
                    .map_err(|e| anyhow!("--tokenizer {spec}: {e}"))?
            }
            // Token counts come from the server's usage unless --client-token-count: a tokenizer
            // that is not at hand only costs the exact single-token synthesis vocabulary.
            Err(e) if rp.use_server_token_count => {
                tracing::warn!(
                    "--tokenizer {spec}: {e}; using the built-in tokenizer-free word model for prompt \
                     synthesis (token counts come from the server's usage)"
                );
                TokenCounter::Words
            }
            Err(e) => bail!("--tokenizer {spec}: {e}"),
        },
    };
    let ds = open_dataset(&cfg)?;

    let dataset_key = hex::encode(ds.cache_key().0);
    if let Some(want) = &cfg.expect_dataset_key {
        if &dataset_key != want {
            bail!(
                "the dataset {} has digest {dataset_key} but the manifest recorded {want}; the corpus (or --num-dataset-entries) changed",
                ds.source_path().display()
            );
        }
    }
    let ds: &'static Dataset = Box::leak(Box::new(ds));

    // A sharded run meets the other shards before planning: they must agree on what pins the plan,
    // and shard 0's run id and seed become everyone's.
    let mut rt = None;
    let mut joined = None;
    let mut seed = seed;
    let mut run_id = cfg.run_id.clone();
    if let (Some(sh), false) = (&cfg.shard, cfg.dry_run) {
        if conc < sh.count {
            bail!(
                "{} shards for --concurrency {conc}: every shard needs at least one lane; use at most {conc} shards",
                sh.count
            );
        }
        let runtime = runtime()?;
        let hello = rendezvous::Hello {
            index: sh.index,
            count: sh.count,
            run_id: run_id.clone(),
            seed,
            seed_drawn: resolved.seed_drawn,
            scenario_sha256: sc.hash().to_string(),
            dataset_key: dataset_key.clone(),
            concurrency: conc,
            settings: resolved
                .settings
                .iter()
                .filter(|s| s.name != "random-seed")
                .map(|s| (s.name.clone(), value_json(&s.value)))
                .collect(),
            failed_request_threshold: cfg.failed_request_threshold,
            host: host_name(),
        };
        let coordinator = if sh.index == 0 {
            let addr = std::net::SocketAddr::from(([0, 0, 0, 0], sh.port));
            Some(runtime.block_on(rendezvous::Coordinator::start(
                addr,
                hello.clone(),
                sh.timeout,
            ))?)
        } else {
            None
        };
        // Shard 0 reaches its own coordinator over loopback.
        let target = if sh.index == 0 {
            format!("127.0.0.1:{}", sh.port)
        } else {
            sh.coordinator.clone()
        };
        tracing::info!(
            shard = sh.index,
            shards = sh.count,
            coordinator = %target,
            source = sh.source,
            "rendezvous: joining"
        );
        let member = runtime.block_on(rendezvous::Member::join(&target, &hello, sh.timeout))?;
        tracing::info!(
            run_id = %member.run_id,
            seed = member.seed,
            clock_offset_ms = member.clock_offset_ns as f64 / 1e6,
            rtt_ms = member.clock_rtt_ns as f64 / 1e6,
            joined_s = member.joined_in.as_secs_f64(),
            "rendezvous: joined"
        );
        seed = member.seed;
        run_id = Some(member.run_id.clone());
        rt = Some(runtime);
        joined = Some((member, coordinator));
    }
    let synth: &'static PromptSynth = Box::leak(Box::new(PromptSynth::for_counter(seed, &counter)));

    let run_id = run_id.unwrap_or_else(fresh_id);
    let params = PlanParams {
        concurrency: conc,
        start: StartParams {
            seed,
            min_ratio,
            max_ratio,
        },
        delay: DelayParams {
            think_time_only: think_only,
            cap_seconds: cap,
        },
        placement,
        mode: rp.mode,
        run_id: run_id.clone(),
    };
    let tree_plan = if trees {
        let tp = plan_trees(TreeDryRun {
            ds,
            basis: cfg.nested_basis,
            dataset_key: &dataset_key,
            inst: &mut inst,
            info: &info,
            hash: sc.hash(),
            resolved: &resolved,
            concurrency: conc,
            seed,
            ratios: (min_ratio, max_ratio),
            placement,
            run_id: run_id.clone(),
            think_only,
            cap,
        })?;
        if cfg.dry_run {
            return Ok(RunOutcome::planned(
                cfg.output.resolve(&info.name, &run_id, cfg.shard.is_some()),
                run_id,
                conc,
                DryRun {
                    json: tp.json,
                    table: tp.table,
                },
            ));
        }
        Some(tp)
    } else {
        None
    };
    let full_plan = if trees {
        Plan {
            lanes: Vec::new(),
            pool: Vec::new(),
            delays: Vec::new(),
            wrapped: false,
        }
    } else {
        Plan::build(ds, &mut inst, &params)?
    };
    let mut plan = match &cfg.shard {
        Some(sh) => full_plan.shard(sh.index, sh.count),
        None => full_plan.clone(),
    };
    if ignore_delays {
        plan.delays.iter_mut().flatten().for_each(|d| *d = 0.0);
    }
    if plan.wrapped {
        warn_shared(conc, plan.pool.len(), "usable traces");
    }

    if cfg.dry_run {
        let mut json = json!({
            "scenario": {"name": info.name, "version": info.version, "sha256": sc.hash()},
            "run_id": run_id,
            "seed": seed,
            "concurrency": conc,
            "dataset": {"traces": ds.len(), "usable": plan.pool.len(), "cache_key": dataset_key},
            "lanes": plan.lanes,
        });
        if let Some(sh) = &cfg.shard {
            json["shard"] = json!({"index": sh.index, "count": sh.count, "pool": plan.pool.len()});
        }
        let mut table = plan.table();
        for l in &plan.lanes {
            table.push_str(&format!("\nlane {:>4} marker {:?}", l.lane, l.marker));
        }
        return Ok(RunOutcome::planned(
            cfg.output.resolve(&info.name, &run_id, cfg.shard.is_some()),
            run_id,
            conc,
            DryRun { json, table },
        ));
    }
    match &tree_plan {
        Some(tp) => tracing::debug!("plan:\n{}", tp.table),
        None => {
            let (min, med, max) = plan.percent_spread();
            tracing::info!(
                "plan: {} lanes; start turn as % of trace: min {min:.1}%, median {med:.1}%, max {max:.1}% (-v lists the lanes)",
                plan.lanes.len()
            );
            tracing::debug!("plan:\n{}", plan.table());
        }
    }

    let rt = match rt {
        Some(rt) => rt,
        None => runtime()?,
    };
    let sim = if rp.demo {
        let preset: crate::sim::Preset = cfg
            .sim_preset
            .parse()
            .map_err(|e| anyhow!("--sim-preset {}: {e}", cfg.sim_preset))?;
        Some(
            crate::sim::SimThread::start(crate::sim::SimConfig::preset(preset))
                .context("cannot start the built-in simulator")?,
        )
    } else {
        None
    };
    let mut ccfg = rp.client.clone();
    let model = match (&sim, &rp.model) {
        (_, Some(m)) => m.clone(),
        (Some(s), None) => s.model().to_owned(),
        (None, None) => unreachable!("checked in RunPlan::resolve"),
    };
    if let Some(s) = &sim {
        ccfg.url = s.url();
        tracing::info!(url = %ccfg.url, preset = %cfg.sim_preset, "built-in simulator started");
    }
    let client = {
        let _g = rt.enter();
        Client::new(&ccfg)?
    };
    if !cfg.skip_preflight {
        let pf = rt.block_on(crate::client::preflight::check(
            &client,
            &model,
            ccfg.connect_timeout.min(PREFLIGHT_TIMEOUT),
        ));
        match pf {
            Ok(p) if tree_plan.is_none() => report_preflight(&p, &plan, ds, &model),
            Ok(p) => {
                if let Some(n) = &p.note {
                    tracing::warn!("pre-flight: {n}");
                }
            }
            // Nothing was sent and nothing written: an earlier run in the directory stays as it was.
            Err(e) => return Err(anyhow!(e)),
        }
    }

    // The artifact directory, opened once and only now that every check passed: every file of the
    // run is written beneath it.
    let run_dir = cfg.output.resolve(&info.name, &run_id, cfg.shard.is_some());
    let out_dir = &match &shard_sub {
        Some(sub) => run_dir.join(sub),
        None => run_dir.clone(),
    };
    let art = artifact_dir::open(&cfg.output, &run_dir, out_dir, cfg.overwrite)?;
    let sink = RecordSink::create(&art)?;
    let clock = Clock::start();
    let started_unix = clock.anchor_unix_ns();
    let mut manifest = json!({
        "argv": cfg.argv,
        "cwd": std::env::current_dir().ok(),
        "replay_of": cfg.replay_of.as_ref().map(|r| json!({"run_id": r.run_id, "manifest": r.manifest})),
        "run_id": run_id,
        "seed": seed,
        "seed_drawn": resolved.seed_drawn,
        "scenario": {"name": info.name, "version": info.version, "sha256": sc.hash(), "source": sc.path()},
        "dataset": dataset_json(ds, &dataset_key, cfg.num_dataset_entries),
        "resolved_settings": resolved.settings.iter().map(|s| json!({"name": s.name, "value": value_json(&s.value), "explicit": s.explicit})).collect::<Vec<_>>(),
        "warnings": resolved.warnings.iter().map(|w| json!({"setting": w.setting, "message": w.message})).collect::<Vec<_>>(),
        "not_acted_on": not_acted_on,
        "resolve_invalid_reasons": resolved.invalid_reasons,
        "slice_duration": cfg.slice_duration,
        "http": {
            "correlation_header": rp.client.routing.correlation.as_str(),
            "session_headers": rp.client.routing.names(),
            "connection_reuse_strategy": rp.client.reuse.as_str(),
            "tcp_user_timeout_ms": rp.client.tcp_user_timeout.map(|d| d.as_millis() as u64),
        },
        "concurrency": conc,
        "benchmark_duration_s": duration.as_secs_f64(),
        "assistant_mode": match rp.mode { AssistantMode::Live => "live", AssistantMode::Recorded => "recorded" },
        "url": rp.url.clone().unwrap_or_else(|| format!("builtin-simulator:{}", cfg.sim_preset)),
        "lanes": match &tree_plan {
            Some(tp) => json!(tp.lanes),
            None => json!(plan.lanes),
        },
        "host_version": env!("CARGO_PKG_VERSION"),
        "wasmtime_version": scenario::WASMTIME_VERSION,
        "started_unix_ns": started_unix,
        "ended_unix_ns": null,
    });
    if let (Some(sh), Some((m, _))) = (&cfg.shard, &joined) {
        manifest["shard"] = json!({
            "index": sh.index,
            "count": sh.count,
            "source": sh.source,
            "coordinator": sh.coordinator,
            "host": host_name(),
            "lanes": plan.lanes.iter().map(|l| l.lane).collect::<Vec<_>>(),
            "pool": plan.pool.len(),
            "clock_offset_ns": m.clock_offset_ns,
            "clock_rtt_ns": m.clock_rtt_ns,
            "rendezvous_s": m.joined_in.as_secs_f64(),
        });
    }
    let manifest_path = out_dir.join(MANIFEST_FILE);
    let write_manifest = |m: &serde_json::Value| {
        art.write_atomic(MANIFEST_FILE, serde_json::to_string_pretty(m)?.as_bytes())
            .with_context(|| format!("cannot write {}", manifest_path.display()))
    };
    write_manifest(&manifest)?;

    let body = RequestBody::new(&model, true, true, &extra);
    let int_rx = cancel.subscribe();
    let replay_cfg = ReplayConfig {
        duration,
        grace: rp.grace,
        warmup_grace: rp.warmup_grace,
        failed_request_threshold: cfg.failed_request_threshold,
        placement,
        mode: rp.mode,
        use_server_token_count: rp.use_server_token_count,
        overflow_phrases: rp.overflow_phrases_env.clone(),
        run_id: run_id.clone(),
        stats_interval: rp.stats_interval,
        trace_idle_cap: rp.trace_idle_cap,
        warmup_progress_interval: rp.warmup_progress_interval,
    };
    tracing::info!(
        scenario = %format!("{} {} sha256:{}", info.name, info.version, sc.hash()),
        run_id = %run_id,
        seed,
        concurrency = conc,
        duration_s = duration.as_secs_f64(),
        url = %client.uri(),
        model = %model,
        mode = ?rp.mode,
        "replay starting"
    );
    // Server metrics: scraped from the start of warmup to after the end, exported over profiling.
    // In a sharded run only shard 0 scrapes: the servers are the same for all.
    let scraper = if cfg.no_server_metrics || cfg.shard.as_ref().is_some_and(|s| s.index != 0) {
        None
    } else {
        let mut urls = vec![crate::client::scrape::metrics_url(&ccfg.url)?];
        for u in &cfg.server_metrics {
            urls.push(
                crate::client::scrape::metrics_url(u)
                    .with_context(|| format!("--server-metrics {u}"))?,
            );
        }
        let mut scfg = crate::client::scrape::ScrapeConfig::new(urls);
        if let Some(i) = rp.scrape_interval {
            scfg.interval = i;
        }
        let _g = rt.enter();
        Some(std::sync::Arc::new(crate::client::scrape::Scraper::start(
            scfg, clock,
        )?))
    };
    let srv_row: Option<replay::SrvRowFn> = scraper.as_ref().map(|s| {
        let s = s.clone();
        let prev = std::sync::Mutex::new(None::<(f64, f64, u64)>);
        let f: replay::SrvRowFn = std::sync::Arc::new(move || {
            let snap = s.snapshot();
            let at = snap.at_ns?;
            let (pi, go) = (snap.prompt_tokens, snap.generation_tokens);
            let mut p = prev.lock().ok()?;
            let (tin, tout) = match (*p, pi, go) {
                (Some((a, b, t0)), Some(x), Some(y)) if at > t0 => {
                    let dt = (at - t0) as f64 / 1e9;
                    (Some((x - a) / dt), Some((y - b) / dt))
                }
                _ => (None, None),
            };
            if let (Some(x), Some(y)) = (pi, go) {
                *p = Some((x, y, at));
            }
            Some(crate::ui::SrvRow {
                prefix_cache_hit: snap.prefix_cache_hit_rate.map(|r| r * 100.0),
                ext_cache_hit: snap.external_cache_hit_rate.map(|r| r * 100.0),
                kv_usage: snap.kv_usage.map(|r| r * 100.0),
                running: snap.running,
                waiting: snap.waiting,
                tput_in: tin,
                tput_out: tout,
            })
        });
        f
    });
    // A sharded run: say this shard is ready, and start warmup when every shard is.
    let mut finish = None;
    let mut coordinator = None;
    let link = match joined {
        Some((mut member, coord)) => {
            let sh = cfg.shard.as_ref().expect("joined only when sharded");
            rt.block_on(member.ready(sh.timeout))?;
            let (link, fin) = {
                let _g = rt.enter();
                member.link(sh.index, sh.count)
            };
            finish = Some(fin);
            coordinator = coord;
            Some(link)
        }
        None => None,
    };
    let (outcome, scrape_log) = rt.block_on(async {
        if cfg.signals {
            tokio::spawn(forward_signals(cancel.clone()));
        }
        let inputs = ReplayInputs {
            dataset: ds,
            synth,
            counter: counter.clone(),
            client,
            body,
            scenario: inst,
            records: sink.sender(),
            clock,
            interrupt: int_rx,
            progress: cfg.progress,
            srv_row,
            on_profiling: None,
            shard: link,
        };
        let (outcome, counts) = match tree_plan.as_ref() {
            Some(tp) => {
                let o = replay::sched::run(replay_cfg, tp.sched_plan(&rp.tree_flags), inputs).await;
                (o.replay, Some(o.counts))
            }
            None => (replay::run(replay_cfg, plan.clone(), inputs).await, None),
        };
        // The final scrape comes after profiling ended, so counters capture the end state.
        let log = match scraper.map(std::sync::Arc::try_unwrap) {
            Some(Ok(s)) => Some(s.stop().await),
            Some(Err(_)) => {
                tracing::warn!(
                    "the metrics scraper is still shared; server metrics are not exported"
                );
                None
            }
            None => None,
        };
        ((outcome, counts), log)
    });
    let (outcome, tree_counts) = outcome;
    drop(sim);
    let written = sink.close()?;
    let records_path = out_dir.join(crate::record::RECORDS_FILE);

    // Validity and summary.
    let t = &outcome.tally;
    let mut inst = sc.instantiate()?;
    // Warmup responses count in the overflow rate (numerator and denominator): an overflow in
    // warmup is as much a sign of a too-short context as one in profiling.
    let records = read_records(&records_path).map_err(|e| anyhow!("reading back records: {e}"))?;
    let base = scenario::types::Outcome {
        total_responses: t.requests + t.warmup_requests,
        context_overflows: t.context_overflows + t.warmup_overflows,
        failed: t.failed,
        cancelled: outcome.stop.cancelled(),
        unsafe_override,
        overflow_rate_limit: rate_limit,
    };
    let reasons = if trees {
        // Coverage is measured against the configured duration (aiperf's
        // metric_duration_coverage); none when profiling never began.
        let prof: Vec<_> = records
            .iter()
            .filter(|r| r.phase == crate::record::Phase::Profiling)
            .collect();
        let cov = outcome.profiling_ns.and_then(|(p0, _)| {
            crate::metrics::stats::Coverage::of(
                prof.iter().copied(),
                p0,
                duration.as_nanos() as u64,
            )
        });
        inst.tree_validity(
            base,
            (
                duration.as_secs_f64(),
                cov.map(|c| c.ttft_ratio),
                cov.map(|c| c.inter_token_latency_ratio),
            ),
        )?
    } else {
        inst.validity(base)?
    };
    let reasons = scenario::check::invalid_reasons(reasons, &resolved.invalid_reasons);
    if let Some(c) = &tree_counts {
        manifest["trees"] = json!(c);
    }
    manifest["ended_unix_ns"] = json!(clock.unix_ns(clock.now_ns()));
    manifest["profiling_ns"] = json!(outcome.profiling_ns.map(|(a, b)| [a, b]));
    manifest["stop"] = json!(outcome.stop.as_str());
    write_manifest(&manifest)?;
    let summary = Summary::of(&records);
    let doc = json!({
        "run_id": run_id,
        "stop": outcome.stop.as_str(),
        "message": outcome.message,
        "scenario": {"name": info.name, "version": info.version, "sha256": sc.hash(), "source": sc.path()},
        "dataset": dataset_json(ds, &dataset_key, None),
        "seed": seed,
        "seed_drawn": resolved.seed_drawn,
        "concurrency": conc,
        "benchmark_duration_s": duration.as_secs_f64(),
        "assistant_mode": match rp.mode { AssistantMode::Live => "live", AssistantMode::Recorded => "recorded" },
        "url": if rp.demo { "builtin-simulator".to_string() } else { ccfg.url.clone() },
        "model": model,
        "started_unix_ns": started_unix,
        "submission_valid": reasons.is_empty(),
        "submission_invalid_reasons": reasons,
        "records": written,
        "summary": summary,
        "host_version": env!("CARGO_PKG_VERSION"),
        "wasmtime_version": scenario::WASMTIME_VERSION,
    });
    let summary_path = out_dir.join("run_summary.json");
    art.write_atomic(
        "run_summary.json",
        serde_json::to_string_pretty(&doc)?.as_bytes(),
    )
    .with_context(|| format!("cannot write {}", summary_path.display()))?;
    // aiperf-compatible exports, server metrics, plots: each failure is reported, none loses the records.
    let (p0, p1) = outcome.profiling_ns.unwrap_or((0, 0));
    let input_config = json!(manifest["resolved_settings"]);
    let info = crate::export::aiperf::RunInfo {
        benchmark_id: run_id.clone(),
        anchor_unix_ns: clock.anchor_unix_ns(),
        profiling_start_ns: p0,
        profiling_end_ns: p1,
        scenario_name: info.name.clone(),
        scenario_version: info.version.clone(),
        scenario_sha256: sc.hash().to_string(),
        submission_valid: reasons.is_empty(),
        submission_invalid_reasons: reasons.clone(),
        was_cancelled: outcome.stop.cancelled(),
        input_config: input_config.clone(),
        seed: Some(seed),
        profiling_duration_ns: Some(duration.as_nanos() as u64),
        prefix_stamps: match &tree_plan {
            Some(tp) => tp.prefix_stamps(&records),
            None => prefix_stamps(ds, &records),
        },
        dataset: ds
            .alias()
            .map(|alias| alias_dataset_json(alias, cfg.num_dataset_entries)),
    };
    let mut files = vec![
        records_path.clone(),
        out_dir.join(MANIFEST_FILE),
        summary_path.clone(),
    ];
    let mut server = None;
    if let Some(log) = &scrape_log {
        if let Some((k, prefix)) = &rp.required_metric_prefix {
            // InferenceX recipes name the engine's metric prefix (`vllm:`, `sglang:`, `atom:`): an
            // endpoint without it gives a falsely healthy, partial view of the servers.
            for e in &log.endpoints {
                if !e.families.keys().any(|n| n.starts_with(prefix.trim())) {
                    tracing::warn!(
                        "{k}={prefix}: no metric of {} starts with {prefix:?}; check the --server-metrics URLs",
                        e.url
                    );
                }
            }
        }
        if log.failed_scrapes() > 0 {
            tracing::warn!(
                failed = log.failed_scrapes(),
                scrapes = log.scrapes(),
                "some /metrics scrapes failed (counted in server_metrics_export.json)"
            );
        }
        let meta = crate::export::server_metrics::ExportMeta {
            benchmark_id: Some(run_id.clone()),
            input_config,
        };
        server = Some((log, meta));
    }
    let (written_files, mut export_failed) = write_exports(
        &art,
        &records,
        &info,
        cfg.slice_duration,
        server.as_ref().map(|(log, meta)| (*log, meta)),
    );
    files.extend(written_files);
    // A sharded run: this shard is done; shard 0 waits for the others and merges.
    if let (Some(fin), Some(sh)) = (finish, &cfg.shard) {
        let wait = sh.timeout.max(Duration::from_secs(600));
        if let Err(e) = rt.block_on(fin.done(wait)) {
            tracing::error!("rendezvous: {e:#}");
        }
        if let Some(c) = coordinator {
            match rt.block_on(c.finish(wait)) {
                Ok(report) => {
                    if !report.lost.is_empty() {
                        tracing::error!(lost = ?report.lost, "rendezvous: shards were lost before they were done");
                    }
                    manifest["shard"]["rendezvous"] = json!(report);
                    write_manifest(&manifest)?;
                }
                Err(e) => tracing::error!("rendezvous: {e:#}"),
            }
            if let Some(into) = &sh.merge_into {
                let dirs: Vec<PathBuf> = (0..sh.count)
                    .map(|i| run_dir.join(shard_dir_name(i)))
                    .collect();
                match merge::merge(&dirs, into, &cfg.home) {
                    Ok(m) => {
                        tracing::info!(
                            dir = %into.display(),
                            records = m.records,
                            secs = m.took.as_secs_f64(),
                            "merged {} shards",
                            dirs.len()
                        );
                        files.extend(m.files);
                    }
                    Err(e) => {
                        export_failed = true;
                        tracing::error!("--merge-into {}: {e:#}", into.display());
                    }
                }
            }
        }
    }
    let code = if export_failed {
        2
    } else if outcome.stop.cancelled() || (cfg.require_valid && !reasons.is_empty()) {
        1
    } else {
        0
    };
    Ok(RunOutcome {
        code,
        dir: out_dir.clone(),
        run_id,
        concurrency: conc,
        files,
        replay: Some(outcome),
        summary: Some(summary),
        submission_invalid_reasons: reasons,
        records_path,
        records_written: written,
        dry_run: None,
    })
}

/// The flag a user sets for the scenario setting `setting` (the settings carry aiperf's names; the
/// dataset loader is chosen by the dataset flags).
pub fn flag_of(setting: &str) -> String {
    match setting {
        "loader" => "the dataset (--public-dataset / --input-file)".to_string(),
        s => format!("--{s}"),
    }
}

/// The scenario's warnings. Under `--unsafe-override` (given, or implied by a demo) the rules the
/// run breaks are expected: one line names them, the scenario's own words go to DEBUG.
fn log_resolve_warnings(resolved: &Resolved) {
    let overridden = resolved
        .invalid_reasons
        .iter()
        .any(|r| r == "unsafe_override");
    if !overridden {
        for w in &resolved.warnings {
            tracing::warn!("{}: {}", flag_of(&w.setting), w.message);
        }
        return;
    }
    let mut names: Vec<String> = resolved
        .warnings
        .iter()
        .map(|w| flag_of(&w.setting))
        .collect();
    names.dedup();
    if names.is_empty() {
        tracing::info!("--unsafe-override: not a valid submission");
    } else {
        tracing::info!(
            "--unsafe-override: outside the scenario's rules for {}; not a valid submission (-v shows the rules)",
            names.join(", ")
        );
    }
    for w in &resolved.warnings {
        tracing::debug!("{}: {}", flag_of(&w.setting), w.message);
    }
}

/// The warning of a run with more lanes than `what` (traces or trees): each is replayed on
/// several lanes at once, each with its own start and marker; past a hundred lanes apiece, the
/// prefix cache sees mostly one corpus's prefixes.
fn warn_shared(conc: u32, n: usize, what: &str) {
    let per = (conc as usize).div_ceil(n.max(1));
    if per >= 100 {
        tracing::warn!(
            "{n} {what} for {conc} lanes: each is replayed on about {per} lanes at once (own start and marker each); \
             a larger corpus gives a more realistic cache load (--dataset, or fewer lanes)"
        );
    } else {
        tracing::warn!(
            "{n} {what} for {conc} lanes: lanes share them, about {per} lanes each (each with its own start and marker)"
        );
    }
}

/// What planning a session-tree run needs.
struct TreeDryRun<'a> {
    ds: &'a Dataset,
    basis: Option<dataset::tree::NestedBasis>,
    dataset_key: &'a str,
    inst: &'a mut scenario::ScenarioInstance,
    info: &'a scenario::types::Info,
    hash: &'a str,
    resolved: &'a Resolved,
    concurrency: u32,
    seed: u64,
    ratios: (f64, f64),
    placement: Placement,
    run_id: String,
    think_only: bool,
    cap: Option<f64>,
}

/// A planned session-tree run: the corpus's trees (from the dataset cache), every lane's start, the
/// scenario's rules and every turn's delay, with the plan's JSON and table for `--dry-run`.
struct TreePlanned {
    corpus: &'static dataset::tree::corpus::TreeCorpus,
    lanes: Vec<replay::tree::TreeLane>,
    next_draw: usize,
    rules: scenario::types_v2::ReplayRules,
    delays_ms: Vec<Vec<f64>>,
    json: serde_json::Value,
    table: String,
}

impl TreePlanned {
    fn sched_plan(&self, flags: &TreeFlags) -> replay::sched::TreePlan {
        replay::sched::TreePlan {
            streams: &self.corpus.streams,
            trees: &self.corpus.trees,
            first_stream: &self.corpus.first_stream,
            lanes: self.lanes.clone(),
            next_draw: self.next_draw,
            rules: self.rules,
            delays_ms: self.delays_ms.clone(),
            burst: flags.burst,
            pressure: flags.pressure,
        }
    }

    /// The theoretical prefix-cache stamps of every stream the profiling records replayed, by
    /// conversation id.
    fn prefix_stamps(
        &self,
        records: &[crate::record::RequestRecord],
    ) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
        let wanted: std::collections::HashSet<&str> = records
            .iter()
            .filter(|r| r.phase == crate::record::Phase::Profiling)
            .map(|r| r.trace_id.as_str())
            .collect();
        let mut out = std::collections::HashMap::new();
        for t in &self.corpus.trees {
            for s in &t.streams {
                if wanted.contains(s.id.as_str()) && !out.contains_key(&s.id) {
                    out.insert(
                        s.id.clone(),
                        s.turns
                            .iter()
                            .map(|x| (x.prefix_hit_blocks, x.prefix_total_blocks))
                            .collect(),
                    );
                }
            }
        }
        out
    }
}

/// Plans a session-tree run (a 0.2.0 scenario): the corpus's trees, every lane's t*, marker and
/// alive streams, the rules and the delays.
fn plan_trees(d: TreeDryRun<'_>) -> anyhow::Result<TreePlanned> {
    let t0 = std::time::Instant::now();
    let corpus = dataset::tree::corpus::TreeCorpus::open(
        d.ds,
        &dataset::tree::corpus::TreeOpen {
            basis: d.basis,
            ..Default::default()
        },
    )?;
    let opened_in = t0.elapsed();
    let corpus: &'static dataset::tree::corpus::TreeCorpus = Box::leak(Box::new(corpus));
    let trees: Vec<_> = corpus.trees.iter().map(replay::tree::wit_tree).collect();
    let built_in = t0.elapsed();
    let rules = d.inst.rules(&d.resolved.settings)?;
    let planned = replay::tree::plan_lanes(
        &trees,
        &replay::tree::TreePlanParams {
            concurrency: d.concurrency,
            seed: d.seed,
            min_ratio: d.ratios.0,
            max_ratio: d.ratios.1,
            lead_cap_ms: rules.system_idle_cap_seconds.unwrap_or(10.0) * 1000.0,
            placement: d.placement,
            run_id: d.run_id.clone(),
        },
        d.inst,
    )?;
    let lanes = planned.lanes;
    let planned_in = t0.elapsed() - built_in;
    // Every turn's end-to-start delay, from the scenario's rule.
    let dp = scenario::types_v2::DelayParams {
        think_time_only: d.think_only,
        cap_seconds: d.cap,
    };
    let mut delays_ms = Vec::with_capacity(corpus.streams.len());
    for (i, t) in corpus.trees.iter().enumerate() {
        for (si, s) in t.streams.iter().enumerate() {
            let traj = corpus.stream(i, si);
            let mut v = vec![0.0; s.turns.len()];
            for (k, w) in s.turns.windows(2).enumerate() {
                v[k + 1] = d.inst.tree_turn_delay(
                    dp,
                    scenario::types_v2::TurnTimes {
                        ts_ms: w[1].ts_ms,
                        prev_ts_ms: w[0].ts_ms,
                        prev_api_ms: w[0].api_time_ms,
                        think_time_ms: traj
                            .turn(k + 1)
                            .and_then(|x| x.think_time())
                            .map(|x| x * 1e3),
                    },
                )?;
            }
            delays_ms.push(v);
        }
    }
    let delays_in = t0.elapsed() - built_in - planned_in;
    tracing::info!(
        "session-tree plan: {} lanes over {} trees in {:.0} ms",
        lanes.len(),
        trees.len(),
        t0.elapsed().as_secs_f64() * 1e3
    );
    tracing::debug!(
        trees_cache = ?corpus.outcome(),
        open_ms = format!("{:.2}", opened_in.as_secs_f64() * 1e3),
        build_ms = format!("{:.2}", built_in.as_secs_f64() * 1e3),
        plan_ms = format!("{:.2}", planned_in.as_secs_f64() * 1e3),
        delays_ms = format!("{:.2}", delays_in.as_secs_f64() * 1e3),
        "session-tree plan timings"
    );
    if trees.len() < d.concurrency as usize {
        warn_shared(d.concurrency, trees.len(), "trees");
    }
    if lanes.len() < d.concurrency as usize {
        bail!(
            "only {} of {} lanes could start: the corpus has {} trees, none of the others has a usable start",
            lanes.len(),
            d.concurrency,
            trees.len()
        );
    }
    let streams: usize = trees.iter().map(|t| t.streams.len()).sum();
    let json = json!({
        "scenario": {"name": d.info.name, "version": d.info.version, "sha256": d.hash,
                     "world": scenario::World::V0_2.as_str()},
        "run_id": d.run_id,
        "seed": d.seed,
        "concurrency": d.concurrency,
        "dataset": {"traces": d.ds.len(), "trees": trees.len(), "streams": streams, "cache_key": d.dataset_key},
        "rules": {
            "warmup_max_tokens": rules.warmup_max_tokens,
            "warmup_spread": rules.warmup_spread,
            "system_idle_cap_seconds": rules.system_idle_cap_seconds,
            "trace_idle_cap_seconds": rules.trace_idle_cap_seconds,
        },
        "planning_ms": planned_in.as_secs_f64() * 1e3,
        "lanes": lanes,
    });
    let mut table = format!(
        "{:>5}  {:<24} {:>12}  streams (next/warm, offset ms)",
        "lane", "trace", "t* (ms)"
    );
    for l in &lanes {
        let t = l
            .t_star_ms
            .map_or("turn-index".to_string(), |t| format!("{t:.1}"));
        let s: Vec<String> = l
            .streams
            .iter()
            .map(|s| {
                format!(
                    "{} {}/{}{} +{:.0}",
                    s.conversation_id,
                    s.next_turn,
                    s.warm_turn.map_or("-".into(), |w| w.to_string()),
                    if s.waiting { " (waits)" } else { "" },
                    s.offset_ms
                )
            })
            .collect();
        table.push_str(&format!(
            "\n{:>5}  {:<24} {:>12}  {}",
            l.lane,
            l.trace_id,
            t,
            s.join("; ")
        ));
    }
    Ok(TreePlanned {
        corpus,
        lanes,
        next_draw: planned.next_draw,
        rules,
        delays_ms,
        json,
        table,
    })
}

/// The name of shard `i`'s directory under a sharded run's `--output-artifact-dir`.
pub fn shard_dir_name(i: u32) -> String {
    format!("shard-{i}")
}

/// A multi-thread runtime with every driver.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// This machine's host name, for messages and manifests.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The aiperf `metadata.dataset` block of a named corpus.
fn alias_dataset_json(
    alias: &crate::dataset::alias::Alias,
    entries: Option<usize>,
) -> serde_json::Value {
    let mut d = json!({
        "source_type": "public_dataset",
        "loader": alias.name,
        "hf_dataset_name": alias.repo,
        "hf_split": "train",
    });
    if let Some(n) = entries {
        d["num_dataset_entries"] = json!(n);
    }
    d
}

/// The exports of a finished run, or of a merge of shards, beside its records: the aiperf files,
/// the server metrics (from the scrape log when there is one), the plot and report.html. Each
/// failure is logged and none loses the records; returns the files written and whether an export
/// the pipelines read could not be written.
pub(crate) fn write_exports(
    art: &crate::fsio::Root,
    records: &[crate::record::RequestRecord],
    info: &crate::export::aiperf::RunInfo,
    slice_duration: Option<f64>,
    server: Option<(
        &crate::metrics::scrape_log::ScrapeLog,
        &crate::export::server_metrics::ExportMeta,
    )>,
) -> (Vec<PathBuf>, bool) {
    let mut files = Vec::new();
    let mut failed = false;
    match crate::export::aiperf::write_all(art, records, info, slice_duration) {
        Ok(f) => files.extend(f),
        Err(e) => {
            failed = true;
            tracing::error!("{e}");
        }
    }
    if let Some((log, meta)) = server {
        let window = (info.profiling_start_ns, info.profiling_end_ns);
        match crate::export::server_metrics::write_with(art, log, window, meta) {
            Ok(f) => files.extend(f),
            Err(e) => {
                failed = true;
                tracing::error!("{e}");
            }
        }
    }
    if !records.is_empty() {
        match crate::export::plot::plot_into(
            art.path(),
            art,
            crate::export::plot::PLOT_FILE.as_ref(),
        ) {
            Ok(p) => files.push(p),
            Err(e) => tracing::warn!("no plot: {e}"),
        }
        files.extend(crate::export::html::write_after_run(art));
    }
    (files, failed)
}

/// The dataset as the manifest and the run summary name it (`num_dataset_entries` when given).
fn dataset_json(ds: &Dataset, key: &str, entries: Option<usize>) -> serde_json::Value {
    let mut d = json!({
        "source": ds.source_path(),
        "alias": ds.alias().map(|x| x.name),
        "cache_key": key,
        "traces": ds.len(),
    });
    if let Some(n) = entries {
        d["num_dataset_entries"] = json!(n);
    }
    d
}

/// The theoretical prefix-cache stamps of every trace the profiling records replayed.
fn prefix_stamps(
    ds: &Dataset,
    records: &[crate::record::RequestRecord],
) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
    let mut out = std::collections::HashMap::new();
    for r in records {
        if r.phase != crate::record::Phase::Profiling || out.contains_key(&r.trace_id) {
            continue;
        }
        if let Some(t) = ds.find(&r.trace_id) {
            out.insert(r.trace_id.clone(), dataset::stats::prefix_stamps(t));
        }
    }
    out
}

/// The longest the pre-flight `GET /v1/models` may take (a server that does not answer in that time
/// is warned about, not refused).
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(10);

/// Logs what the pre-flight check found: the served model, its context length, and how much of the
/// plan will overflow it.
fn report_preflight(
    p: &crate::client::preflight::Preflight,
    plan: &Plan,
    ds: &Dataset,
    model: &str,
) {
    if let Some(n) = &p.note {
        tracing::warn!("pre-flight: {n}");
    }
    let Some(len) = p.max_model_len else {
        if p.note.is_none() {
            tracing::info!("pre-flight: the server serves `{model}` and reports no context length");
        }
        return;
    };
    let o = plan.over_context(ds, len);
    let line = format!(
        "pre-flight: the server serves `{model}` with a context of {len} tokens; \
         {} of {} lanes start above it and {} of {} traces grow past it (prompt plus max_tokens, recorded counts)",
        o.lanes,
        plan.lanes.len(),
        o.traces,
        o.pool
    );
    if o.lanes > 0 || o.traces > 0 {
        tracing::warn!(
            "{line}: those requests will end as context overflows (counted, not failures; \
             they count towards the scenario's overflow rate limit)"
        );
    } else {
        tracing::info!("{line}");
    }
}

/// Ctrl-C and SIGTERM: each one bumps the counter (first: drain; second: cancel in-flight).
async fn forward_signals(cancel: Cancel) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        #[cfg(unix)]
        let got = match term.as_mut() {
            Some(t) => tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = t.recv() => r.is_some(),
            },
            None => tokio::signal::ctrl_c().await.is_ok(),
        };
        #[cfg(not(unix))]
        let got = tokio::signal::ctrl_c().await.is_ok();
        if !got {
            return;
        }
        if cancel.interrupts() == 0 {
            tracing::warn!("interrupt: no new turns start; in-flight requests drain (interrupt again to cancel them)");
        }
        cancel.interrupt();
    }
}
