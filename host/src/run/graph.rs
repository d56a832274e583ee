//! `run --format graph-ir FILE`: an aiperf Agent Graph IR workload replayed through
//! `replay::graph` (docs/specs/agent-graph-ir.md#9-scheduling-and-concurrency). The workload is
//! loaded and validated as `dataset validate --format graph-ir` does (a refused one stops here
//! with the same findings),
//! the built-in simulator serves without `--url`, and the run directory gets `records.jsonl` and
//! the aiperf exports (`export::write_run_exports`).
//!
//! It is a path of its own beside the session-trace stages: no scenario component resolves its
//! settings (aiperf's graph runtime has no such component), so the flags it reads are read here:
//! `--concurrency` (trace instances in flight, default 1), `--benchmark-duration` (a stop
//! condition: freed lanes recycle traces until it passes); without it the run is one pass over the
//! traces. A timestamped corpus starts its traces at their recorded offsets (open loop, aiperf's
//! default for timestamped replay), any other runs closed-loop lanes. `--request-rate`,
//! `--user-centric-rate` and `--fixed-schedule` are refused, as aiperf refuses them: a graph's
//! pacing is its recorded delays.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

use crate::cli::run_args::RunArgs;
use crate::dataset::graph_ir;
use crate::export::aiperf::{CoverageRule, RunInfo, WarmupNaming};
use crate::record::fsio::Root;
use crate::record::{read_records, Clock, RecordSink};
use crate::replay::graph::{BodyShape, GraphConfig, GraphInputs, GraphOutcome};
use crate::run::artifact_dir::{link_latest, OutputDir};

/// The flags a graph replay refuses, each with whether it was given.
fn refused_flags(args: &RunArgs) -> Vec<&'static str> {
    [
        ("--request-rate", args.request_rate.is_some()),
        ("--user-centric-rate", args.user_centric_rate.is_some()),
        ("--fixed-schedule", args.fixed_schedule),
        ("--trials", args.trials.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, given)| given.then_some(flag))
    .collect()
}

/// The workload's path: `--input-file`, `--dataset`, or the positional (a graph-ir run has no
/// scenario component, so `run --format graph-ir FILE` names the workload there).
fn workload_path(args: &RunArgs) -> anyhow::Result<PathBuf> {
    if let Some(scenario) = &args.scenario_flag {
        bail!("--scenario {scenario}: a graph-ir run has no scenario component; drop the flag");
    }
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

/// The graph replay's settings from the flags.
fn config(
    args: &RunArgs,
    corpus: &graph_ir::GraphCorpus,
    run_id: &str,
) -> anyhow::Result<GraphConfig> {
    let concurrency = match &args.concurrency {
        None => 1,
        Some(text) => text.trim().parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            anyhow!("--concurrency {text}: a graph-ir run takes one number of trace instances in flight (at least 1)")
        })?,
    };
    let duration = match args.benchmark_duration {
        None => None,
        Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
        Some(secs) => bail!("--benchmark-duration {secs}: give a positive number of seconds"),
    };
    Ok(GraphConfig {
        concurrency,
        request_count: None,
        duration,
        open_loop: corpus.timestamped(),
        run_id: run_id.to_owned(),
        use_server_token_count: args.use_server_token_count,
    })
}

/// Runs a graph-ir workload and prints its counts; exit 0, or 1 when a request failed.
pub(crate) fn main(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let refused = refused_flags(args);
    if !refused.is_empty() {
        bail!(
            "{} cannot pace a graph-ir replay: its pacing is the graph's recorded delays \
             (aiperf refuses them too); use --concurrency (trace instances in flight) and \
             --benchmark-duration",
            refused.join(", ")
        );
    }
    if args.dry_run {
        bail!(
            "--dry-run plans session-trace lanes; a graph-ir workload has none: \
             `agentx-host dataset stats --format graph-ir FILE` summarises it"
        );
    }
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
    let run_id = format!("{:016x}", crate::run::draw_seed());
    let cfg = config(args, &corpus, &run_id)?;
    let (client_cfg, url) = crate::cli::run_plan::client_config(args)?;
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
    let mut client_cfg = client_cfg;
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
    let (dir, latest_parent) = run_dir(args, &run_id)?;
    let root = Root::create(&dir)?;
    let sink = RecordSink::create(&root)?;
    let clock = Clock::start();
    let (_interrupts, interrupt) = tokio::sync::watch::channel(0u32);
    let inputs = GraphInputs {
        corpus,
        client: Box::new(client),
        body: BodyShape {
            model,
            extra: args_extra(args)?,
            max_completion_tokens: !args.use_legacy_max_tokens,
            api: client_cfg.api,
        },
        counter: crate::dataset::TokenCounter::Words,
        records: sink.sender(),
        clock,
        interrupt,
    };
    let start_ns = clock.now_ns();
    let outcome = runtime.block_on(crate::replay::graph::run(cfg.clone(), inputs));
    let end_ns = clock.now_ns();
    drop(sim);
    let records_path = sink.path().to_owned();
    sink.close()?;
    let records = read_records(&records_path).map_err(|e| anyhow!(e))?;
    let info = run_info(&run_id, &cfg, clock, (start_ns, end_ns));
    let (files, failed) = crate::export::write_run_exports(&root, &records, &info, None, None);
    if let (Some(parent), Some(name)) = (latest_parent, dir.file_name()) {
        link_latest(&parent, Path::new(name));
    }
    print(&outcome, &dir, files.len());
    if failed {
        return Ok(ExitCode::from(2));
    }
    Ok(if outcome.failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
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

/// What the aiperf exports need beyond the records.
fn run_info(run_id: &str, cfg: &GraphConfig, clock: Clock, window: (u64, u64)) -> RunInfo {
    RunInfo {
        benchmark_id: run_id.to_owned(),
        anchor_unix_ns: clock.anchor_unix_ns(),
        profiling_start_ns: window.0,
        profiling_end_ns: window.1,
        scenario_name: "graph-ir".into(),
        scenario_version: "2.0".into(),
        scenario_sha256: String::new(),
        submission_valid: true,
        submission_invalid_reasons: Vec::new(),
        was_cancelled: false,
        input_config: serde_json::json!({
            "format": "graph-ir",
            "concurrency": cfg.concurrency,
            "benchmark_duration": cfg.duration.map(|d| d.as_secs_f64()),
            "open_loop": cfg.open_loop,
        }),
        seed: None,
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
