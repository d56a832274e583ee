//! `run --format graph-ir FILE`: an aiperf Agent Graph IR workload replayed through
//! `replay::graph` (docs/specs/agent-graph-ir.md#9-scheduling-and-concurrency). The workload is
//! loaded and validated as `dataset validate --format graph-ir` does (a refused one stops here
//! with the same findings), the built-in simulator serves without `--url`, and the run directory
//! gets `manifest.json`, `records.jsonl` and the aiperf exports (`export::write_run_exports`).
//!
//! A scenario component decides the replay, as for session traces: `graph-ir` (built in, the
//! default here) or any component whose `describe` lists the `open-loop-replay` knob. The host
//! hands it the flags (`--concurrency`, `--benchmark-duration`, `--request-count`,
//! `--[no-]open-loop-replay`, `--replay-speedup`, and the pacing flags it refuses) and replays
//! what it resolved; the manifest pins the component's sha256 and the workload's.
//!
//! What the host reads from the corpus itself: open-loop admission applies only to a corpus with
//! recorded trace starts (any other runs closed-loop lanes, as in aiperf); an absent concurrency
//! leaves open-loop admission ungated and runs one closed-loop lane, as the component states.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

use crate::cli::run_args::RunArgs;
use crate::dataset::graph_ir;
use crate::export::aiperf::{CoverageRule, RunInfo, WarmupNaming};
use crate::export::manifest::{DatasetId, Manifest, ScenarioId, MANIFEST_FILE};
use crate::export::run_summary::{RunSummary, RUN_SUMMARY};
use crate::record::fsio::Root;
use crate::record::{read_records, Clock, RecordSink};
use crate::replay::graph::{BodyShape, GraphConfig, GraphInputs, GraphOutcome};
use crate::run::artifact_dir::{link_latest, OutputDir};
use crate::scenario::types::{Info, Resolved, Setting, Value};
use crate::scenario::{ReplaySetting, Scenario, ScenarioInstance};

/// The scenario of `run --format graph-ir` when `--scenario` names none.
pub(crate) const DEFAULT_GRAPH_SCENARIO: &str = "graph-ir";

/// The graph scenario loaded and resolved.
struct GraphScenario {
    component: Scenario,
    info: Info,
    resolved: Resolved,
    /// `AGENTX_CONTEXT_OVERFLOW_SUBSTRINGS`, overriding the component's phrases when set.
    overflow_phrases: Option<Vec<String>>,
}

/// Loads `--scenario` (default `graph-ir`), checks that it decides graph replays, and resolves
/// the flags with it (its refusals as one error naming each flag); the instance goes on to the
/// replay, which asks it to classify failed responses.
fn graph_scenario(args: &RunArgs) -> anyhow::Result<(GraphScenario, ScenarioInstance)> {
    let name = args
        .scenario_flag
        .as_deref()
        .unwrap_or(DEFAULT_GRAPH_SCENARIO);
    let component = crate::run::load(Some(name), &args.home.dir())?;
    let mut instance = component.instantiate()?;
    let info = instance.describe()?;
    if !crate::scenario::decides_graph_replays(&info) {
        bail!(
            "--scenario {name}: {} {} replays session traces and does not decide a graph-ir \
             replay (its knobs have no {}); drop --scenario, or name a graph scenario such as \
             --scenario {DEFAULT_GRAPH_SCENARIO}",
            info.name,
            info.version,
            ReplaySetting::OpenLoopReplay.name()
        );
    }
    let (given, overflow_phrases) = given_settings(args)?;
    let resolved =
        super::prepare::resolve_settings(&mut instance, &component, &info, &given, None)?;
    Ok((
        GraphScenario {
            component,
            info,
            resolved,
            overflow_phrases,
        },
        instance,
    ))
}

/// The flags a graph scenario reads, as settings (given ones only, each explicit), and the
/// context-overflow phrases of the environment (`AGENTX_CONTEXT_OVERFLOW_SUBSTRINGS`), which
/// override the scenario's list when set.
fn given_settings(args: &RunArgs) -> anyhow::Result<(Vec<Setting>, Option<Vec<String>>)> {
    let mut given = Vec::new();
    let mut put = |name: ReplaySetting, value: Value| {
        given.push(Setting {
            name: name.name().to_string(),
            value,
            explicit: true,
        });
    };
    let overflow_phrases =
        crate::cli::run_plan::overflow_env(&mut |name, value, _| put(name, value))?;
    if let Some(text) = &args.concurrency {
        let list = crate::cli::run_plan::concurrency_points(text, "trace instances", 4)?;
        put(ReplaySetting::Concurrency, Value::Integers(list));
    }
    let numbers = [
        (ReplaySetting::BenchmarkDuration, args.benchmark_duration),
        (ReplaySetting::ReplaySpeedup, args.replay_speedup),
        (ReplaySetting::RequestRate, args.request_rate),
        (ReplaySetting::UserCentricRate, args.user_centric_rate),
        (ReplaySetting::SessionArrivalRate, args.session_arrival_rate),
    ];
    for (name, value) in numbers {
        if let Some(value) = value {
            put(name, Value::Number(value));
        }
    }
    if let Some(count) = args.request_count {
        let count = i64::try_from(count).map_err(|_| {
            anyhow!(
                "--request-count {count} is too large; pass at most {}",
                i64::MAX
            )
        })?;
        put(ReplaySetting::RequestCount, Value::Integer(count));
    }
    if args.open_loop_replay || args.no_open_loop_replay {
        put(
            ReplaySetting::OpenLoopReplay,
            Value::Flag(args.open_loop_replay),
        );
    }
    if args.fixed_schedule {
        put(ReplaySetting::FixedSchedule, Value::Flag(true));
    }
    if args.unsafe_override {
        put(ReplaySetting::UnsafeOverride, Value::Flag(true));
    }
    if let Some(seed) = args.random_seed {
        put(
            ReplaySetting::RandomSeed,
            crate::cli::run_plan::seed_value(seed)?,
        );
    }
    Ok((given, overflow_phrases))
}

/// The workload's path: `--input-file`, `--dataset`, or the positional (`run --format graph-ir
/// FILE` names the workload there; `--scenario` names the component).
fn workload_path(args: &RunArgs) -> anyhow::Result<PathBuf> {
    let given = [
        args.input_file.clone(),
        args.dataset.as_ref().map(PathBuf::from),
        args.scenario.as_ref().map(PathBuf::from),
    ];
    let mut given = given.into_iter().flatten();
    match (given.next(), given.next()) {
        (Some(path), None) => Ok(path),
        (None, _) => bail!("--format graph-ir replays a workload file: give it, e.g. `agentx-host run --format graph-ir FILE`"),
        (Some(first), Some(second)) => bail!(
            "--format graph-ir replays one workload file, and both {} and {} were given: keep one",
            first.display(),
            second.display()
        ),
    }
}

/// The graph replay's settings as the scenario resolved them, applied to this corpus.
fn config(
    resolved: &Resolved,
    corpus: &graph_ir::GraphCorpus,
    run_id: &str,
    use_server_token_count: bool,
) -> anyhow::Result<GraphConfig> {
    let value = |name: ReplaySetting| resolved.setting(name).filter(|v| **v != Value::Absent);
    let number = |name: ReplaySetting| match value(name) {
        Some(Value::Number(x)) => Some(*x),
        Some(Value::Integer(n)) => Some(*n as f64),
        _ => None,
    };
    let concurrency = match value(ReplaySetting::Concurrency) {
        None => None,
        Some(Value::Integer(n)) => Some(*n),
        Some(Value::Integers(list)) if list.len() == 1 => Some(list[0]),
        Some(other) => bail!(
            "the scenario resolved concurrency to {other:?}, not one number of trace instances"
        ),
    };
    let concurrency = concurrency
        .map(|n| u32::try_from(n).ok().filter(|n| *n >= 1).ok_or_else(|| anyhow!("the scenario resolved concurrency to {n}, not a number of trace instances from 1")))
        .transpose()?;
    let duration = number(ReplaySetting::BenchmarkDuration)
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64);
    let request_count = match value(ReplaySetting::RequestCount) {
        Some(Value::Integer(n)) if *n >= 1 => Some(*n as u64),
        _ => None,
    };
    let open_loop_replay = !matches!(
        value(ReplaySetting::OpenLoopReplay),
        Some(Value::Flag(false))
    );
    let replay_speedup = number(ReplaySetting::ReplaySpeedup)
        .filter(|x| x.is_finite() && *x > 0.0)
        .unwrap_or(1.0);
    Ok(GraphConfig {
        concurrency,
        request_count,
        duration,
        open_loop: open_loop_replay && corpus.timestamped(),
        replay_speedup,
        run_id: run_id.to_owned(),
        use_server_token_count,
    })
}

/// Runs a graph-ir workload and prints its counts; exit 0, or 1 when a request failed. `argv` is
/// the command line after the program name (kept in the manifest).
pub(crate) fn main(args: &RunArgs, argv: Vec<String>) -> anyhow::Result<ExitCode> {
    if args.trials.is_some() {
        bail!("--trials repeats a session-trace run; a graph-ir replay is one run: repeat the command");
    }
    if args.dry_run {
        bail!(
            "--dry-run plans session-trace lanes; a graph-ir workload has none: \
             `agentx-host dataset stats --format graph-ir FILE` summarises it"
        );
    }
    let (scenario, instance) = graph_scenario(args)?;
    let path = workload_path(args)?;
    // In process, a relative path is the command's working directory's.
    let path = match crate::cli::in_process::current_dir() {
        Some(cwd) if path.is_relative() && crate::cli::in_process::in_process() => cwd.join(path),
        _ => path,
    };
    let corpus = Arc::new(graph_ir::load(&path, false)?);
    for warning in corpus.warnings() {
        tracing::warn!("{warning}");
    }
    let workload = WorkloadId::of(&path, &corpus)?;
    let run_id = format!("{:016x}", crate::run::draw_seed());
    let cfg = config(
        &scenario.resolved,
        &corpus,
        &run_id,
        !args.client_token_count,
    )?;
    let (dir, latest_parent) = run_dir(args, &run_id)?;
    let root = Root::create(&dir)?;
    let mut manifest = manifest(args, argv, &scenario, &workload, &cfg);
    write_manifest(&root, &manifest)?;
    let classifier = (instance, scenario.overflow_phrases.clone());
    let served = serve(args, &root, cfg.clone(), corpus, classifier)?;
    manifest.ended_unix_ns = Some(served.clock.unix_ns(served.window_ns.1));
    manifest.model = Some(served.model.clone());
    manifest.stop = Some(stop_reason(&cfg, &served).to_owned());
    manifest.profiling_ns = Some([served.window_ns.0, served.window_ns.1]);
    manifest.profiling_started_ns = Some(served.window_ns.0);
    write_manifest(&root, &manifest)?;
    let records = read_records(&served.records_path).map_err(|e| anyhow!(e))?;
    let reasons = verdict(&scenario, &cfg, &served, &records)?;
    let info = run_info(&run_id, &cfg, &scenario, &served, &reasons);
    let (files, failed) = crate::export::write_run_exports(&root, &records, &info, None, None);
    write_summary(&root, &manifest, (&cfg, &served), &records, &reasons)?;
    if let (Some(parent), Some(name)) = (latest_parent, dir.file_name()) {
        link_latest(&parent, Path::new(name));
    }
    print(&served.outcome, &dir, files.len());
    if failed {
        return Ok(ExitCode::from(2));
    }
    Ok(if served.outcome.failed > 0 || served.interrupted {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// What a finished replay leaves: its counts, the records file, the clock and the window.
struct Served {
    /// Ctrl-C or SIGTERM stopped the replay (nothing new dispatched after the first).
    interrupted: bool,
    outcome: GraphOutcome,
    records_path: PathBuf,
    model: String,
    clock: Clock,
    window_ns: (u64, u64),
}

/// Replays the corpus against `--url` or the built-in simulator, its records into `root`.
fn serve(
    args: &RunArgs,
    root: &Root,
    cfg: GraphConfig,
    corpus: Arc<graph_ir::GraphCorpus>,
    (scenario, overflow_phrases): (ScenarioInstance, Option<Vec<String>>),
) -> anyhow::Result<Served> {
    let (mut client_cfg, url) = crate::cli::run_plan::client_config(args)?;
    let runtime = crate::run::runtime()?;
    let sim = match url {
        Some(_) => None,
        None => {
            let preset: crate::sim::Preset = args
                .sim_preset
                .parse()
                .map_err(|e| anyhow!("--sim-preset {}: {e}", args.sim_preset))?;
            Some(
                crate::sim::SimThread::start(crate::sim::SimConfig::preset(preset))
                    .context("cannot start the built-in simulator")?,
            )
        }
    };
    if let Some(sim) = &sim {
        client_cfg.url = sim.url();
    }
    let model = match (&args.model, &sim) {
        (Some(model), _) => model.clone(),
        (None, Some(sim)) => sim.model().to_owned(),
        (None, None) => bail!("--model is required with --url: the model name the server serves"),
    };
    let client = {
        let _entered = runtime.enter();
        crate::client::Client::new(&client_cfg)?
    };
    let sink = RecordSink::create(root)?;
    let clock = Clock::start();
    let cancel = super::Cancel::new();
    runtime.spawn(super::forward_signals(cancel.clone()));
    let inputs = GraphInputs {
        corpus,
        client: Box::new(client),
        body: BodyShape {
            model: model.clone(),
            extra: args_extra(args)?,
            max_completion_tokens: !args.use_legacy_max_tokens,
            api: client_cfg.api,
        },
        counter: crate::dataset::TokenCounter::Words,
        records: sink.sender(),
        clock,
        interrupt: cancel.subscribe(),
        scenario,
        overflow_phrases,
    };
    let start_ns = clock.now_ns();
    let outcome = runtime.block_on(crate::replay::graph::run(cfg, inputs));
    let end_ns = clock.now_ns();
    drop(sim);
    let records_path = sink.path().to_owned();
    sink.close()?;
    Ok(Served {
        interrupted: cancel.interrupts() > 0,
        outcome,
        records_path,
        model,
        clock,
        window_ns: (start_ns, end_ns),
    })
}

/// The workload as the manifest pins it: its path, its bytes' sha256, its traces.
struct WorkloadId {
    path: PathBuf,
    sha256: String,
    traces: usize,
}

impl WorkloadId {
    fn of(path: &Path, corpus: &graph_ir::GraphCorpus) -> anyhow::Result<WorkloadId> {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read the workload {}", path.display()))?;
        Ok(WorkloadId {
            path: path.to_owned(),
            sha256: hex::encode(Sha256::digest(&bytes)),
            traces: corpus.traces().len(),
        })
    }
}

/// Writes `run_manifest.json` as it stands.
fn write_manifest(root: &Root, manifest: &Manifest) -> anyhow::Result<()> {
    root.write_atomic(MANIFEST_FILE, manifest.to_json_pretty().as_bytes())
        .with_context(|| format!("cannot write {MANIFEST_FILE}"))?;
    Ok(())
}

/// `--extra-inputs` as the session-trace runs read them.
fn args_extra(args: &RunArgs) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    crate::cli::extra_inputs::extra_inputs(&args.extra_inputs, &args.endpoint_type)
}

/// The artifact directory: `--output-artifact-dir`, else `artifacts/graph-ir-<time>-<id>` (in
/// the command's working directory), with the parent whose `latest` link names it.
fn run_dir(args: &RunArgs, run_id: &str) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let out: OutputDir = crate::cli::in_process::output_dir(args.output_artifact_dir.clone());
    let dir = out.resolve("graph-ir", run_id, false);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the run directory {}", dir.display()))?;
    Ok((dir, out.latest_parent().map(Path::to_owned)))
}

/// The manifest of a graph replay about to start: what pins it (the component's and the
/// workload's sha256, the resolved settings, the command line). Its session-trace fields stay
/// empty: a graph replay has no lanes plan.
fn manifest(
    args: &RunArgs,
    argv: Vec<String>,
    scenario: &GraphScenario,
    workload: &WorkloadId,
    cfg: &GraphConfig,
) -> Manifest {
    let resolved = &scenario.resolved;
    let started_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    let (resolved_settings, warnings) = super::run_dir::resolved_rows(resolved);
    Manifest {
        argv,
        cwd: crate::cli::in_process::current_dir().or_else(|| std::env::current_dir().ok()),
        run_id: cfg.run_id.clone(),
        seed: resolved.seed,
        seed_drawn: resolved.seed_drawn,
        scenario: ScenarioId {
            name: scenario.info.name.clone(),
            version: scenario.info.version.clone(),
            sha256: scenario.component.hash().to_string(),
            source: scenario.component.path().to_owned(),
        },
        dataset: DatasetId {
            source: workload.path.clone(),
            cache_key: Some(format!("graph-ir:sha256:{}", workload.sha256)),
            traces: workload.traces,
            ..DatasetId::default()
        },
        resolved_settings,
        warnings,
        resolve_invalid_reasons: resolved.invalid_reasons.clone(),
        concurrency: cfg.concurrency.unwrap_or(0),
        benchmark_duration_s: cfg.duration.map_or(0.0, |d| d.as_secs_f64()),
        assistant_mode: "live".to_string(),
        url: args
            .url
            .clone()
            .unwrap_or_else(|| format!("builtin-simulator:{}", args.sim_preset)),
        host_version: env!("CARGO_PKG_VERSION").to_string(),
        wasmtime_version: crate::scenario::WASMTIME_VERSION.to_string(),
        started_unix_ns,
        ..Manifest::default()
    }
}

/// Why the replay stopped, in `run_summary.json`'s words: an interrupt, its request count spent,
/// its duration passed, or every trace instance ended (`completed`).
fn stop_reason(cfg: &GraphConfig, served: &Served) -> &'static str {
    let elapsed_ns = served.window_ns.1.saturating_sub(served.window_ns.0);
    if served.interrupted {
        "interrupted"
    } else if cfg
        .request_count
        .is_some_and(|count| served.outcome.dispatches >= count)
    {
        "request-count"
    } else if cfg
        .duration
        .is_some_and(|duration| elapsed_ns >= duration.as_nanos() as u64)
    {
        "duration"
    } else {
        "completed"
    }
}

/// Writes `run_summary.json`: the manifest's identity of the run, how it stopped, the records'
/// figures.
fn write_summary(
    root: &Root,
    manifest: &Manifest,
    (cfg, served): (&GraphConfig, &Served),
    records: &[crate::record::RequestRecord],
    reasons: &[String],
) -> anyhow::Result<()> {
    let doc = RunSummary {
        run_id: Some(manifest.run_id.clone()),
        stop: Some(stop_reason(cfg, served).to_owned()),
        message: None,
        scenario: Some(manifest.scenario.clone().into()),
        dataset: Some(manifest.dataset.clone()),
        seed: Some(manifest.seed),
        seed_drawn: manifest.seed_drawn,
        concurrency: cfg.concurrency.map(u64::from),
        benchmark_duration_s: cfg.duration.map(|d| d.as_secs_f64()),
        assistant_mode: Some(manifest.assistant_mode.clone()),
        url: Some(manifest.url.clone()),
        model: manifest.model.clone(),
        started_unix_ns: Some(served.clock.anchor_unix_ns()),
        submission_valid: Some(reasons.is_empty()),
        submission_invalid_reasons: reasons.to_vec(),
        records: Some(records.len() as u64),
        summary: crate::metrics::Summary::of(records),
        host_version: Some(manifest.host_version.clone()),
        wasmtime_version: Some(manifest.wasmtime_version.clone()),
        ..RunSummary::default()
    };
    root.write_atomic(RUN_SUMMARY, doc.to_json_pretty().as_bytes())
        .with_context(|| format!("cannot write {RUN_SUMMARY}"))?;
    Ok(())
}

/// Why the run is not a valid submission, as the scenario's `validity` judges its records (the
/// overflow rate, an interrupt, the TTFT and ITL coverage of the profiling window: the configured
/// duration, or the replay's own span without one), with the reasons its `resolve` gave.
fn verdict(
    scenario: &GraphScenario,
    cfg: &GraphConfig,
    served: &Served,
    records: &[crate::record::RequestRecord],
) -> anyhow::Result<Vec<String>> {
    let resolved = &scenario.resolved;
    let overflows = records.iter().filter(|r| r.context_overflow).count() as u64;
    let failed = records
        .iter()
        .filter(|r| r.error.is_some() && !r.context_overflow && !r.cancelled)
        .count() as u64;
    let base = crate::scenario::types::Outcome {
        total_responses: records.len() as u64,
        context_overflows: overflows,
        failed,
        cancelled: served.interrupted,
        unsafe_override: matches!(
            resolved.setting(ReplaySetting::UnsafeOverride),
            Some(Value::Flag(true))
        ),
        // A component that states no limit has no overflow-rate rule.
        overflow_rate_limit: match resolved.setting(ReplaySetting::ContextOverflowRateLimit) {
            Some(Value::Number(limit)) => *limit,
            _ => 1.0,
        },
    };
    let span_ns = served.window_ns.1.saturating_sub(served.window_ns.0);
    let duration_ns = cfg.duration.map_or(span_ns, |d| d.as_nanos() as u64);
    let coverage = crate::metrics::stats::Coverage::of(records, served.window_ns.0, duration_ns);
    let reasons = scenario.component.instantiate()?.tree_validity(
        base,
        crate::scenario::TreeCoverage {
            profiling_seconds: duration_ns as f64 / 1e9,
            ttft: coverage.map(|c| c.ttft_ratio),
            itl: coverage.map(|c| c.inter_token_latency_ratio),
            content: coverage.map(|c| c.streaming_content_ratio),
        },
    )?;
    Ok(crate::scenario::check::invalid_reasons(
        reasons,
        &resolved.invalid_reasons,
    ))
}

/// What the aiperf exports need beyond the records.
fn run_info(
    run_id: &str,
    cfg: &GraphConfig,
    scenario: &GraphScenario,
    served: &Served,
    reasons: &[String],
) -> RunInfo {
    let resolved = &scenario.resolved;
    RunInfo {
        benchmark_id: run_id.to_owned(),
        anchor_unix_ns: served.clock.anchor_unix_ns(),
        profiling_start_ns: served.window_ns.0,
        profiling_end_ns: served.window_ns.1,
        scenario_name: scenario.info.name.clone(),
        scenario_version: scenario.info.version.clone(),
        scenario_sha256: scenario.component.hash().to_string(),
        submission_valid: reasons.is_empty(),
        submission_invalid_reasons: reasons.to_vec(),
        was_cancelled: served.interrupted,
        input_config: serde_json::json!({
            "format": "graph-ir",
            "concurrency": cfg.concurrency,
            "benchmark_duration": cfg.duration.map(|d| d.as_secs_f64()),
            "request_count": cfg.request_count,
            "open_loop": cfg.open_loop,
            "replay_speedup": cfg.replay_speedup,
        }),
        seed: Some(resolved.seed),
        profiling_duration_ns: cfg.duration.map(|d| d.as_nanos() as u64),
        coverage_rule: CoverageRule::default(),
        prefix_stamps: std::collections::HashMap::default(),
        dataset: None,
        warmup_naming: WarmupNaming::default(),
        goodput: None,
        cache: None,
        energy: None,
    }
}

/// The run's counts, for the terminal.
fn print(outcome: &GraphOutcome, dir: &Path, files: usize) {
    outln!(
        "graph-ir replay: {} trace instance(s), {} complete; {} request(s), {} failed; {} node(s) \
         never dispatched",
        outcome.instances,
        outcome.complete,
        outcome.dispatches,
        outcome.failed,
        outcome.stalled
    );
    outln!("run directory: {} ({files} export files)", dir.display());
}
