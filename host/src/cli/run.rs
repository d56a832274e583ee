//! `agentx-host run`: flags with aiperf's names, `RunPlan::resolve` (where flags and environment
//! merge into one checked configuration), the call of the run ([`crate::run::execute`]) and what it
//! prints: the plan of a dry run, the summary and the outputs.
//!
//! Without `--url` the command is a self-contained demo: it starts the built-in simulator on a free
//! port, replays the bundled 24-trace corpus with the built-in default scenario (agentx), and
//! (because a demo is shorter than the scenario's 900 s floor) runs under `--unsafe-override`, so its
//! result is marked as not a valid submission.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::Args;

use crate::metrics::Summary;
use crate::replay;
pub use crate::run::RunSettings;
use crate::run::MANIFEST_FILE;
use crate::run::{Cancel, RunConfig, RunPlan};
use crate::run::{DEMO_CONCURRENCY, DEMO_DURATION_S};

use super::run_args::RunArgs;

/// `agentx-host replay MANIFEST`: rerun a recorded run with the same inputs and the same plan.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// A `run_manifest.json` (or the artifact directory holding it).
    pub(crate) manifest: PathBuf,
    /// Where the rerun writes [default: the recorded run's directory with `-replay`].
    #[arg(long, short = 'o', value_name = "DIR")]
    pub(crate) output_artifact_dir: Option<PathBuf>,
    /// Replace an earlier rerun in that directory.
    #[arg(long)]
    pub(crate) overwrite: bool,
    /// Send to another server (the original URL by default).
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
    /// The model the server serves (the recorded one by default; needed with --url for a run of
    /// the built-in simulator).
    #[arg(long, short = 'm')]
    pub(crate) model: Option<String>,
    /// Print the plan and send nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// With --dry-run: print the plan as JSON.
    #[arg(long, requires = "dry_run")]
    pub(crate) json: bool,
}

/// What `agentx-host replay` reads of a run manifest: the recorded command line and the inputs it
/// pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRun {
    /// The command line of the run, without the program name.
    pub(crate) argv: Vec<String>,
    /// The seed the run drew or was given (start turns and prompt text follow from it).
    pub seed: u64,
    /// The run's id, which seeds the markers; the rerun reuses it to get the same plan.
    pub run_id: String,
    /// The sha256 (hex) of the scenario component the run loaded.
    pub scenario_sha256: String,
    /// The dataset's cache key, when the manifest has one.
    pub dataset_key: Option<String>,
    /// The working directory of the run (relative paths in `argv` are relative to it).
    pub(crate) cwd: Option<String>,
}

/// A run manifest that cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The text is not a run manifest (not JSON, or a field missing or of the wrong type); the
    /// message names the file and the field.
    #[error(transparent)]
    Manifest(#[from] crate::export::manifest::ManifestError),
    /// The recorded command line is refused by this version's parser (a flag renamed or removed);
    /// holds clap's message.
    #[error("the recorded command line no longer parses: {0}")]
    Argv(String),
    /// The recorded command line is another subcommand than `run`.
    #[error("the recorded command is not `run`")]
    NotRun,
}

impl RecordedRun {
    /// Reads the text of a `run_manifest.json` (`path` names it in errors).
    fn parse_at(text: &str, path: &Path) -> Result<RecordedRun, ManifestError> {
        let manifest = crate::export::manifest::Manifest::parse(text, path)?;
        Ok(RecordedRun {
            argv: manifest.argv,
            seed: manifest.seed,
            run_id: manifest.run_id,
            scenario_sha256: manifest.scenario.sha256,
            dataset_key: manifest.dataset.cache_key,
            cwd: manifest.cwd.map(|c| c.display().to_string()),
        })
    }

    /// Reads the manifest at `path`: the recorded run, and its `run` arguments with the seed, run
    /// id, dataset digest and scenario (by hash, see [`pin_scenario`]) pinned.
    pub(crate) fn read(path: &Path) -> anyhow::Result<(RecordedRun, RunArgs)> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the manifest {}", path.display()))?;
        let recorded = RecordedRun::parse_at(&text, path)?;
        let mut run_args = recorded
            .run_args()
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        pin_scenario(&mut run_args, &recorded.scenario_sha256);
        Ok((recorded, run_args))
    }

    /// Reads the text of a `run_manifest.json`.
    pub fn parse(text: &str) -> Result<RecordedRun, ManifestError> {
        Self::parse_at(text, Path::new(MANIFEST_FILE))
    }

    /// The recorded `run` command's arguments with the seed, run id, scenario hash and dataset
    /// digest pinned (the scenario as recorded; `replay_main` pins its bytes).
    pub fn run_args(&self) -> Result<RunArgs, ManifestError> {
        let full = std::iter::once("agentx-host").chain(self.argv.iter().map(String::as_str));
        let cli = <super::Cli as clap::Parser>::try_parse_from(full)
            .map_err(|e| ManifestError::Argv(e.to_string()))?;
        let super::Command::Run(mut args) = cli.command else {
            return Err(ManifestError::NotRun);
        };
        args.random_seed = Some(self.seed);
        args.run_id = Some(self.run_id.clone());
        args.expect_scenario_sha256 = Some(self.scenario_sha256.clone());
        args.expect_dataset_key.clone_from(&self.dataset_key);
        Ok(*args)
    }
}

/// Reruns the run a manifest describes: its command line with the seed, run id, scenario hash and
/// dataset digest pinned.
pub(crate) fn replay_main(replay: ReplayArgs) -> anyhow::Result<ExitCode> {
    let path = if replay.manifest.is_dir() {
        crate::export::bmk::locate_file(&replay.manifest, MANIFEST_FILE)?.join(MANIFEST_FILE)
    } else {
        replay.manifest.clone()
    };
    let (recorded, mut run_args) = RecordedRun::read(&path)?;
    let run_dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let run_dir = std::fs::canonicalize(&run_dir).unwrap_or(run_dir);
    let demo = run_args.url.is_none();
    if let Some(url) = replay.url {
        if demo {
            // A run of the built-in simulator sent to a server: what the demo implied is pinned.
            run_args
                .concurrency
                .get_or_insert_with(|| crate::run::DEMO_CONCURRENCY.to_string());
            run_args
                .benchmark_duration
                .get_or_insert(crate::run::DEMO_DURATION_S);
            run_args.unsafe_override = true;
            if run_args.dataset.is_none()
                && run_args.public_dataset.is_none()
                && run_args.input_file.is_none()
            {
                run_args.input_file = Some(crate::run::bundled_corpus(&run_args.home.dir())?);
            }
            if run_args.model.is_none() && replay.model.is_none() {
                bail!(
                    "{} is a run of the built-in simulator: pass the model the server at {url} serves, e.g. `agentx-host replay {} --url {url} --model NAME`",
                    path.display(),
                    replay.manifest.display()
                );
            }
        }
        run_args.url = Some(url);
    }
    if let Some(model) = replay.model {
        run_args.model = Some(model);
    }
    relocate_inputs(&mut run_args, &recorded, &run_dir);
    run_args.output_artifact_dir = Some(match replay.output_artifact_dir {
        Some(dir) => dir,
        None => {
            // Beside the recorded run, wherever that was written (a fresh directory, or a named one).
            let mut beside = run_dir.clone().into_os_string();
            beside.push("-replay");
            PathBuf::from(beside)
        }
    });
    run_args.overwrite = replay.overwrite;
    run_args.dry_run = replay.dry_run;
    run_args.json = replay.json;
    let mut cfg = run_config(&run_args, recorded.argv.clone())?;
    cfg.replay_of = Some(crate::run::ReplayOf {
        run_id: recorded.run_id.clone(),
        manifest: std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone()),
    });
    cached_dataset(&mut cfg, &recorded);
    execute_and_print(&cfg, run_args.json)
}

/// Pins a recorded run's scenario by hash: the original path if it still holds those bytes, a
/// built-in by name (the hash check refuses other bytes), else the store.
pub(super) fn pin_scenario(args: &mut RunArgs, sha: &str) {
    if args.scenario.is_none() {
        args.scenario = args.scenario_flag.take();
    }
    if let Some(scenario) = &args.scenario {
        let base = scenario.split('@').next().unwrap_or(scenario);
        args.scenario = Some(if Path::new(base).exists() {
            format!("{base}@sha256:{sha}")
        } else if crate::run::is_builtin_name(base) {
            base.to_string()
        } else {
            format!("sha256:{sha}")
        });
    }
}

/// A recorded run's relative corpus paths, as seen from here (see [`relocate`]).
pub(super) fn relocate_inputs(args: &mut RunArgs, recorded: &RecordedRun, run_dir: &Path) {
    let cwd = recorded.cwd.as_deref().map(Path::new);
    if let Some(path) = args.input_file.as_mut() {
        *path = relocate(path, cwd, run_dir);
    }
    if let Some(dataset) = args.dataset.as_mut() {
        if crate::dataset::alias::lookup(dataset).is_none() || Path::new(dataset).exists() {
            *dataset = relocate(Path::new(dataset), cwd, run_dir)
                .display()
                .to_string();
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
fn relocate(path: &Path, cwd: Option<&Path>, run_dir: &Path) -> PathBuf {
    if path.is_absolute() || path.exists() {
        return path.to_owned();
    }
    cwd.into_iter()
        .chain(run_dir.ancestors())
        .map(|base| base.join(path))
        .find(|candidate| candidate.exists())
        .unwrap_or_else(|| path.to_owned())
}

/// `agentx-host run`; `argv` is the command line after the program name (kept in the manifest).
pub(crate) fn main(args: &RunArgs, argv: Vec<String>) -> anyhow::Result<ExitCode> {
    if args.custom_dataset_type.as_deref() == Some("graph-ir") {
        return crate::run::graph::main(args, argv);
    }
    let cfg = run_config(args, argv)?;
    if let Some(count) = args.trials {
        let trials = crate::run::trials::TrialsConfig {
            count,
            same_seed: args.same_seed,
        };
        return run_trials(&cfg, trials, args.output_artifact_dir.as_deref());
    }
    execute_and_print(&cfg, args.json)
}

/// `--trials`: the trials into the given directory (or a fresh `artifacts/trials-<time>-<id>`,
/// which `artifacts/latest` then names), each trial's summary as a run prints it, then the
/// spread of the headline figures.
fn run_trials(
    cfg: &RunConfig,
    trials: crate::run::trials::TrialsConfig,
    given: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    use crate::run::artifact_dir::{OutputDir, DEFAULT_PARENT};
    let dir = given.map_or_else(
        || {
            let id = format!("{:016x}", crate::run::draw_seed());
            OutputDir::default().resolve("trials", &id, false)
        },
        std::path::Path::to_owned,
    );
    let outcome = crate::run::trials::run_trials(cfg, trials, &dir, &Cancel::new())?;
    if let (None, Some(name)) = (given, dir.file_name()) {
        crate::run::artifact_dir::link_latest(
            std::path::Path::new(DEFAULT_PARENT),
            std::path::Path::new(name),
        );
    }
    let summary = &outcome.summary;
    for trial in &summary.trials {
        outln!(
            "trial {}       seed {}, {} ({})",
            trial.index,
            trial.seed,
            trial.stop.as_deref().unwrap_or("not run"),
            trial.error.as_deref().unwrap_or(&trial.dir)
        );
    }
    for (name, spread) in &summary.between {
        let interval = match (spread.lo, spread.hi) {
            (Some(lo), Some(hi)) => format!(" [{lo:.4}, {hi:.4}]"),
            _ => String::new(),
        };
        outln!(
            "  {name:<26} mean {:.4}{interval}  sd {:.4}  range {:.4}-{:.4} over {} trials",
            spread.mean,
            spread.sd,
            spread.min,
            spread.max,
            spread.trials
        );
    }
    outln!(
        "outputs       {}",
        dir.join(crate::export::trials::TRIALS_JSON).display()
    );
    Ok(ExitCode::from(outcome.code))
}

/// Runs `cfg` and prints the plan of a dry run (as JSON with `json`), or the summary and outputs.
fn execute_and_print(cfg: &RunConfig, json: bool) -> anyhow::Result<ExitCode> {
    let outcome = crate::run::execute(cfg, &Cancel::new())?;
    print_outcome(&outcome, json)
}

/// Prints a run's outcome: the plan of a dry run (as JSON with `json`), or the summary and outputs.
pub(super) fn print_outcome(
    outcome: &crate::run::RunOutcome,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(dry_run) = &outcome.dry_run {
        if json {
            outln!("{}", serde_json::to_string_pretty(&dry_run.json)?);
        } else {
            outln!("{}", dry_run.table);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let (Some(replayed), Some(summary)) = (&outcome.replay, &outcome.summary) {
        print_summary(
            replayed,
            summary,
            &outcome.submission_invalid_reasons,
            outcome.concurrency,
            &outcome.records_path,
            outcome.records_written,
        );
        print_arrivals(&outcome.dir);
        outln!("outputs       {}", outcome.dir.display());
        for file in &outcome.files {
            if let Some(name) = file.file_name() {
                outln!("  {}", name.to_string_lossy());
            }
        }
        let page = outcome.dir.join(crate::export::html::HTML_FILE);
        if page.is_file() {
            outln!("page          {}", page.display());
        }
        outln!(
            "next          agentx-host report {}   (the InferenceX result row)",
            outcome.dir.display()
        );
        if let Some(message) = &replayed.message {
            errln!("{message}");
        }
    }
    Ok(ExitCode::from(outcome.code))
}

/// The line a run without `--url` starts with: what it implies that was not given.
fn demo_banner(args: &RunArgs) -> Option<String> {
    if args.url.is_some() {
        return None;
    }
    let mut implied = vec![format!("the built-in simulator ({})", args.sim_preset)];
    if args.dataset.is_none() && args.public_dataset.is_none() && args.input_file.is_none() {
        implied.push("the bundled 24-trace corpus".into());
    }
    if args.concurrency.is_none() {
        implied.push(format!("concurrency {DEMO_CONCURRENCY}"));
    }
    if args.benchmark_duration.is_none() {
        implied.push(format!("{DEMO_DURATION_S} s"));
    }
    if !args.unsafe_override {
        implied.push("--unsafe-override (not a valid submission)".into());
    }
    Some(format!(
        "no --url: a demo run with {}; pass --url to measure a real server",
        implied.join(", ")
    ))
}

/// The run configuration of `agentx-host run`'s flags and environment.
pub(crate) fn run_config(args: &RunArgs, argv: Vec<String>) -> anyhow::Result<RunConfig> {
    if let Some(banner) = demo_banner(args) {
        tracing::info!("{banner}");
    }
    let flags = super::shard::ShardFlags {
        shard: args.shard.clone(),
        shards: args.shards,
        coordinator: args.coordinator.clone(),
        port: args.coordinator_port,
        bind: args.coordinator_bind.clone(),
        timeout: args.rendezvous_timeout,
        merge_into: args.merge_into.clone(),
    };
    let env = |name: &str| super::in_process::env_var(name);
    let (shard, job_run_id) = match super::shard::resolve(&flags, &env)? {
        Some((config, id)) => (Some(config), id),
        None => (None, None),
    };
    Ok(RunConfig {
        shard,
        plan: RunPlan::resolve(args)?,
        scenario: args.scenario.clone().or_else(|| args.scenario_flag.clone()),
        home: args.home.dir(),
        num_dataset_entries: args.num_dataset_entries,
        max_context_length: args.max_context_length,
        format: super::run_plan::corpus_format(args)?,
        block_size: args.isl_block_size,
        trace_block_size: args.trace_block_size,
        tokenizer: args.tokenizer.clone(),
        output: super::in_process::output_dir(args.output_artifact_dir.clone()),
        overwrite: args.overwrite,
        slice_duration: args.slice_duration,
        timeline: args.timeline,
        otlp_endpoint: args.otlp_endpoint.clone(),
        metrics_listen: args.metrics_listen,
        metrics_linger: std::time::Duration::from_secs_f64(args.metrics_linger.unwrap_or(0.0)),
        cwd: super::in_process::current_dir(),
        dataset_cache_dir: [
            "AGENTX_DATASET_MMAP_CACHE_DIR",
            "AIPERF_DATASET_MMAP_CACHE_DIR",
        ]
        .iter()
        .find_map(|name| super::in_process::env_var(name).filter(|dir| !dir.is_empty()))
        .map(PathBuf::from),
        goodput: args.goodput.clone(),
        session_goodput_share: args.session_goodput_share,
        gpus: args.gpus,
        session_slo: args.session_slo.clone(),
        confidence: args.confidence,
        target_precision: args.target_precision.clone(),
        min_duration: crate::run::positive_secs("--min-duration", args.min_duration)?,
        no_server_metrics: args.no_server_metrics,
        server_metrics: args.server_metrics.clone(),
        gpu_telemetry: gpu_telemetry_urls(args)?,
        skip_preflight: args.skip_preflight,
        cache_preflight: if args.cache_preflight || args.require_cache {
            Some(true)
        } else if args.no_cache_preflight {
            Some(false)
        } else {
            None
        },
        require_cache: args.require_cache,
        require_valid: args.require_valid,
        failed_request_threshold: args.failed_request_threshold,
        run_id: args.run_id.clone().or(job_run_id),
        sim_preset: args.sim_preset.clone(),
        expect_dataset_key: args.expect_dataset_key.clone(),
        expect_scenario_sha256: args.expect_scenario_sha256.clone(),
        nested_basis: match args.weka_nested_timestamp_basis.as_deref() {
            Some("absolute") => Some(crate::dataset::tree::NestedBasis::Absolute),
            Some("relative") => Some(crate::dataset::tree::NestedBasis::Relative),
            _ => None,
        },
        dry_run: args.dry_run,
        replay_of: None,
        argv,
        progress: super::in_process::stderr_is_terminal(),
        dashboard: (args.ui == super::run_args::UiMode::Dashboard).then(super::log_tail),
        signals: !super::in_process::in_process(),
    })
}

/// An open-loop run's arrivals, as its `run_summary.json` gives them (nothing for a closed loop).
fn print_arrivals(dir: &Path) {
    let Ok(doc) = crate::export::run_summary::RunSummary::read_dir(dir) else {
        return;
    };
    let Some(arrivals) = doc.arrivals else {
        return;
    };
    let rate = |per_s: Option<f64>| per_s.map_or("-".into(), |x| format!("{x:.3}/s"));
    let counts = arrivals.counts;
    outln!(
        "arrivals      {} {}/s: offered {} ({}), admitted {} ({}), rejected {} over {} in flight, skipped {} behind schedule",
        arrivals.pattern,
        serde_json::json!(arrivals.rate_per_s),
        counts.offered,
        rate(arrivals.offered_rate_per_s),
        counts.admitted,
        rate(arrivals.admitted_rate_per_s),
        counts.rejected,
        arrivals.ceiling,
        counts.skipped
    );
}

/// The cache truth's two lines: measured and achievable hit, then the misses by cause, each a
/// share of the prompt tokens.
fn print_cache_truth(cache: &crate::metrics::cache_truth::CacheReport) {
    let rate = |rate: &crate::metrics::cache_truth::Rate| {
        rate.value
            .map_or("-".to_string(), |value| format!("{:.1}%", 100.0 * value))
    };
    let counters = cache
        .measured_counters
        .as_ref()
        .and_then(|counters| counters.device.or(counters.overall))
        .map_or(String::new(), |hit| {
            format!(" (counters {:.1}%)", 100.0 * hit)
        });
    outln!(
        "cache hit     measured {}{counters}  achievable {} as routed, {} pooled at capacity, {} infinite (model at {}-token blocks, {} worker(s))",
        rate(&cache.measured),
        rate(&cache.achievable.per_worker_as_routed),
        rate(&cache.achievable.pooled_at_capacity),
        rate(&cache.achievable.infinite),
        cache.block_size.value,
        cache.workers
    );
    let share = |tokens: Option<u64>| match tokens {
        Some(tokens) if cache.prompt_tokens > 0 => {
            format!("{:.1}%", 100.0 * tokens as f64 / cache.prompt_tokens as f64)
        }
        _ => "-".to_string(),
    };
    let miss = &cache.miss;
    outln!(
        "cache misses  cold {}  bust {}  divergence {}  capacity {}  routing {}  context cap {}  unexplained {}  surplus {} (of prompt tokens)",
        share(Some(miss.cold)),
        share(Some(miss.bust)),
        share(Some(miss.divergence)),
        share(Some(miss.capacity)),
        share(Some(miss.routing)),
        share(Some(miss.context_cap)),
        share(miss.unexplained),
        share(miss.surplus)
    );
}

fn print_summary(
    outcome: &replay::ReplayOutcome,
    summary: &Summary,
    reasons: &[String],
    concurrency: u32,
    records: &Path,
    written: u64,
) {
    let row = |dist: &Option<crate::metrics::Dist>| match dist {
        Some(dist) => format!(
            "p50 {:>9.2}  p90 {:>9.2}  p99 {:>9.2}  max {:>9.2}",
            dist.p50, dist.p90, dist.p99, dist.max
        ),
        None => "-".to_string(),
    };
    outln!(
        "run {} after {:.1} s of profiling at concurrency {concurrency}",
        outcome.stop.as_str(),
        outcome
            .profiling_ns
            .map(|(start, end)| (end - start) as f64 / 1e9)
            .unwrap_or(0.0)
    );
    outln!(
        "requests      {} ok, {} failed, {} context overflow, {} cancelled, {} warmup ({} context overflow)",
        summary.requests_ok,
        summary.requests_failed,
        summary.context_overflows,
        summary.cancelled,
        summary.warmup_requests,
        summary.warmup_context_overflows
    );
    outln!(
        "throughput    {:.2} req/s, {:.0} output tok/s, {:.0} input tok/s",
        summary.request_throughput,
        summary.output_token_throughput,
        summary.input_token_throughput
    );
    // With the cache truth, its `cache hit` line says the same over the server's prompt tokens.
    if let Some(cached) = summary.cached_tokens.filter(|_| summary.cache.is_none()) {
        if summary.input_tokens > 0 {
            outln!(
                "prefix cache  {:.1}% of input tokens served from cache",
                100.0 * cached as f64 / summary.input_tokens as f64
            );
        }
    }
    outln!("ttft (ms)     {}", row(&summary.ttft_ms));
    if let Some(reply) = &summary.reply {
        outln!("ttfo (ms)     {}", row(&reply.ttfo_ms));
        outln!(
            "replies       {} reasoning tokens in {} replies, {} tool calls ({} not valid JSON)",
            reply.reasoning_tokens,
            reply.reasoning_replies,
            reply.tool_calls,
            reply.tool_call_parse_failures
        );
    }
    outln!("itl (ms)      {}", row(&summary.itl_ms));
    outln!("latency (ms)  {}", row(&summary.latency_ms));
    outln!("send lag (ms) {}", row(&summary.send_lag_ms));
    // The same two figures from when each request was due: send lag included.
    outln!("sched ttft    {}", row(&summary.scheduled_ttft_ms));
    outln!("sched latency {}", row(&summary.scheduled_latency_ms));
    if let Some(split) = &summary.ttft_breakdown_ms {
        // Medians of each part, over the requests that gave it (they need not add up).
        let median = |part: &Option<crate::metrics::Dist>| {
            part.as_ref()
                .map_or("-".to_string(), |dist| format!("{:.1}", dist.p50))
        };
        outln!(
            "ttft split    p50 queue {}  prefill {}  server other {}  client {} (ms, the server's own figures)",
            median(&split.queue),
            median(&split.prefill),
            median(&split.server_other),
            median(&split.client)
        );
    }
    if let Some(routing) = &summary.routing {
        outln!(
            "workers       {} served; {} of {} sessions stayed on one worker, {} switches",
            routing.workers,
            routing.sessions_on_one_worker,
            routing.sessions,
            routing.worker_switches
        );
    }
    if let Some(cache) = &summary.cache {
        print_cache_truth(cache);
    }
    if let Some(goodput) = &summary.goodput {
        outln!(
            "goodput       {:.2} good req/s, {} good requests ({:.1}% of those sent)",
            goodput.goodput,
            goodput.good_request_count,
            100.0 * goodput.good_request_fraction
        );
    }
    if let Some(sessions) = &summary.sessions {
        let slowdown = sessions.slowdown.as_ref().map_or("-".into(), |dist| {
            format!(
                "slowdown p50 {:.2}  p90 {:.2}  p99 {:.2}",
                dist.p50, dist.p90, dist.p99
            )
        });
        outln!(
            "sessions      {} of {} good ({:.0}% of their requests good); {slowdown}",
            sessions.good_sessions,
            sessions.sessions,
            100.0 * sessions.share
        );
    }
    if let Some(jobs) = &summary.jobs {
        print_jobs(jobs);
    }
    if let Some(energy) = &summary.energy {
        print_energy(energy);
    }
    if let Some(intervals) = &summary.intervals {
        print_intervals(intervals);
    }
    if reasons.is_empty() {
        outln!("submission    valid");
    } else {
        outln!("submission    not valid: {}", reasons.join(", "));
    }
    outln!("records       {} ({written} requests)", records.display());
}

/// `--gpu-telemetry`'s exporter URLs: empty under `--no-gpu-telemetry` (which wins, with a
/// warning); aiperf's collector keywords and CSV files are refused with the fix.
fn gpu_telemetry_urls(args: &RunArgs) -> anyhow::Result<Vec<String>> {
    if args.gpu_telemetry.is_empty() {
        return Ok(Vec::new());
    }
    if args.no_gpu_telemetry {
        tracing::warn!(
            "--no-gpu-telemetry wins over --gpu-telemetry: no GPU telemetry is collected"
        );
        return Ok(Vec::new());
    }
    let mut urls = Vec::new();
    for given in &args.gpu_telemetry {
        let lower = given.to_ascii_lowercase();
        let keyword = ["pynvml", "amdsmi", "dashboard"].contains(&lower.as_str());
        let csv = std::path::Path::new(given)
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("csv"));
        if keyword || csv {
            anyhow::bail!(
                "--gpu-telemetry {given}: agentx scrapes telemetry exporters only (no local collector or metrics CSV); give the exporter's URL, e.g. http://node1:9400/metrics (DCGM) or http://node1:5000/metrics (AMD)"
            );
        }
        let url = crate::client::scrape::metrics_url(given)
            .map_err(|e| anyhow::anyhow!("--gpu-telemetry {given}: {e}"))?;
        urls.push(url);
    }
    Ok(urls)
}

/// The precision line: the level, the sessions resampled and the intervals of three headline
/// figures (every figure's is in run_summary.json), with the warning of a small run.
fn print_intervals(intervals: &crate::metrics::precision::Intervals) {
    let shown: Vec<String> = ["ttft_p90", "output_token_throughput", "jobs_per_hour"]
        .iter()
        .filter_map(|name| {
            let interval = intervals.figures.get(*name)?;
            Some(format!(
                "{name} {:.4} [{:.4}, {:.4}]",
                interval.estimate, interval.lo, interval.hi
            ))
        })
        .collect();
    outln!(
        "precision     {:.0}% intervals over {} sessions: {}{}",
        100.0 * intervals.level,
        intervals.sessions,
        shown.join(", "),
        intervals
            .warning
            .as_ref()
            .map_or(String::new(), |warning| format!("; {warning}"))
    );
}

/// The energy line: joules, power and joules per output token and job over the window, or why the
/// reading is partial.
fn print_energy(energy: &crate::metrics::energy::EnergyReport) {
    let figure = |value: Option<f64>, unit: &str| {
        value.map_or("-".to_string(), |v| format!("{v:.3} {unit}"))
    };
    let source = energy.source.map_or("no reading", |source| match source {
        crate::metrics::energy::EnergySource::EnergyCounter => "energy counter",
        crate::metrics::energy::EnergySource::PowerIntegration => "integrated power",
        crate::metrics::energy::EnergySource::Mixed => "counter and integrated power",
    });
    outln!(
        "energy        {} over {} GPUs ({source}), {} average; {} per output token, {} per job{}",
        figure(energy.total_gpu_energy_j, "J"),
        energy.gpus,
        figure(energy.avg_total_gpu_power_w, "W"),
        figure(energy.joules_per_output_token, "J"),
        figure(energy.joules_per_job, "J"),
        if energy.partial {
            format!("; partial: {}", energy.reasons.join("; "))
        } else {
            String::new()
        }
    );
}

/// The jobs line: whole jobs and their rates, the partial ones counted apart.
fn print_jobs(jobs: &crate::metrics::jobs::JobFigures) {
    let mut rates = format!("{:.1}/h", jobs.jobs_per_hour);
    if let Some(per_gpu) = jobs.jobs_per_hour_per_gpu {
        rates.push_str(&format!(", {per_gpu:.1}/h per GPU"));
    }
    if let Some(per_user) = jobs.jobs_per_hour_per_user {
        rates.push_str(&format!(", {per_user:.1}/h per user"));
    }
    let slowdown = jobs.slowdown.as_ref().map_or(String::new(), |dist| {
        format!("; slowdown p50 {:.2}", dist.p50)
    });
    outln!(
        "jobs          {} whole ({rates}){slowdown}; partial: {} begun before the window, {} cut by its end; {} ended early, {} with errors",
        jobs.ok,
        jobs.partial_start,
        jobs.partial_end,
        jobs.ended_early,
        jobs.with_errors
    );
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
