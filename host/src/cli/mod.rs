//! Command-line arguments (syntax only), the one place where flags and environment merge, and
//! dispatch of the subcommands.
//!
//! Exit codes: 0 the command completed; 1 a run was cancelled or is not a valid submission under
//! `--require-valid`; 2 an error (bad input, setup, a scenario that traps).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::scenario::{self, ScenarioEngine, ScenarioStore, StoredScenario};

pub mod capture;
pub mod compare;
pub mod dataset;
pub(crate) mod extra_inputs;
pub mod finalize;
pub mod in_process;
pub mod merge;
pub mod report;
pub mod run;
pub mod run_args;
pub(crate) mod run_plan;
pub mod shard;
pub mod sim;
pub mod sweep;
pub mod timeline;

pub use in_process::{run_in_process, Finished};

/// Benchmark engine for LLM inference servers under agentic-coding load.
#[derive(Debug, Parser)]
#[command(
    name = "agentx-host",
    version,
    about,
    after_help = "Logging: INFO by default, on stderr. -q shows warnings and errors only, -v adds DEBUG, -vv TRACE. \
                  RUST_LOG (or AGENTX_LOG, which wins) takes a tracing filter, e.g. RUST_LOG=agentx=debug,hyper=info.\n\
                  Exit codes: 0 done; 1 a run was cancelled, or is not a valid submission under --require-valid; 2 an error."
)]
pub struct Cli {
    /// Warnings and errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More log lines: -v DEBUG, -vv TRACE.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `agentx-host`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay agentic sessions against a server under a scenario component (the main job).
    /// Without --url it starts the built-in simulator and replays the bundled corpus.
    Run(Box<run_args::RunArgs>),
    /// Rerun a recorded run from its manifest: same scenario (by hash), dataset (by digest), seed,
    /// run id and so the same plan.
    Replay(run::ReplayArgs),
    /// Inspect, add and list scenario components.
    #[command(subcommand)]
    Scenario(ScenarioCommand),
    /// Run the built-in simulated OpenAI-compatible inference server (vLLM-like).
    Sim(Box<sim::SimArgs>),
    /// Import, inspect, summarize or synthesize weka trace corpora.
    Dataset(dataset::DatasetArgs),
    /// Write every export of a run whose process was killed (SIGKILL, out of memory, a time limit)
    /// from the manifest and records it left, marked as killed with the reason.
    Finalize(finalize::FinalizeArgs),
    /// Write the InferenceX bmk_agentic JSON of a run's artifact directory.
    Report(Box<report::ReportArgs>),
    /// One run per concurrency point into `<dir>/conc_<N>/`, then sweep.json, sweep.csv and the
    /// Pareto view (throughput per GPU against interactivity).
    // The run flags a sweep does not act on (a plan, shards, --overwrite) stay out of its help; given
    // anyway, each is refused with the reason.
    #[command(
        mut_arg("dry_run", |a| a.hide(true)),
        mut_arg("json", |a| a.hide(true)),
        mut_arg("overwrite", |a| a.hide(true)),
        mut_arg("shard", |a| a.hide(true)),
        mut_arg("shards", |a| a.hide(true)),
        mut_arg("coordinator", |a| a.hide(true)),
        mut_arg("coordinator_port", |a| a.hide(true)),
        mut_arg("coordinator_bind", |a| a.hide(true)),
        mut_arg("rendezvous_timeout", |a| a.hide(true)),
        mut_arg("merge_into", |a| a.hide(true)),
        mut_arg("output_artifact_dir", |a| a.help(
            "The sweep's directory: a run per point in conc_<N>/, then sweep.json and its views \
             [default: a fresh artifacts/sweep-<UTC time>-<id>, with artifacts/latest pointing at it; \
             with --resume, the sweep artifacts/latest names]"
        )),
    )]
    Sweep(Box<sweep::SweepArgs>),
    /// Compare run B with run A figure by figure (two runs, two --trials points or two sweeps):
    /// B / A with its interval from session bootstraps of both, and a verdict ("B faster by
    /// 12 % (9 %-15 %)", "no difference shown") holding for all figures together; compare.json and
    /// compare.html.
    Compare(compare::CompareArgs),
    /// Merge the shard directories of a sharded run into one artifact directory that reads like a
    /// run in one process.
    Merge(merge::MergeArgs),
    /// Draw metrics_plots.png and report.html (per-second time series, headline numbers, verdict) from a
    /// run's artifact directory.
    Plot(report::PlotArgs),
    /// Record real agent sessions: a reverse proxy in front of an endpoint (OpenAI chat, Anthropic
    /// Messages, Responses) that passes every reply through as it streams and writes a weka corpus
    /// (counts, times, block ids of the real token stream; no text unless --keep-text).
    Capture(Box<capture::CaptureArgs>),
    /// Write a run as Chrome/Perfetto trace events (trace.json): a track per lane and stream,
    /// request slices, think gaps, subagent arrows, phase edges and the server's gauges.
    Timeline(timeline::TimelineArgs),
}

/// Options shared by every command that loads scenarios.
#[derive(Debug, Clone, Args)]
pub struct HomeArgs {
    /// The agentx cache directory (scenario store, compiled scenarios, datasets).
    /// Defaults to $XDG_CACHE_HOME/agentx or ~/.cache/agentx.
    #[arg(long, env = "AGENTX_HOME", value_name = "DIR", global = true)]
    pub home: Option<PathBuf>,
}

impl HomeArgs {
    /// The cache directory: `--home`/`AGENTX_HOME`, else the XDG cache directory.
    pub fn dir(&self) -> PathBuf {
        self.home
            .clone()
            .unwrap_or_else(crate::dataset::cache::agentx_home)
    }
}

/// The subcommands of `agentx-host scenario`.
#[derive(Debug, Subcommand)]
pub enum ScenarioCommand {
    /// Print a scenario's hash, size, WIT package, description, knobs and locks.
    Inspect {
        /// A path, `path@sha256:<hex>`, `sha256:<hex prefix>` or a scenario name in the store.
        reference: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Where the store is.
        #[command(flatten)]
        home: HomeArgs,
    },
    /// Validate a component and add it to the local content-addressed store.
    Add {
        /// The component file.
        file: PathBuf,
        /// Where the store is.
        #[command(flatten)]
        home: HomeArgs,
    },
    /// List the built-in scenarios (the default first), then the store's, newest first.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Where the store is.
        #[command(flatten)]
        home: HomeArgs,
    },
}

/// Parse the command line, run it, and map the result to the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&log_filter(
        std::env::var("AGENTX_LOG").ok(),
        std::env::var("RUST_LOG").ok(),
        cli.quiet,
        cli.verbose,
    ));
    execute(cli, std::env::args().skip(1).collect())
}

/// Runs a parsed command line (`argv` is what it was parsed from, without the program name) and
/// maps the result to the exit code.
fn execute(cli: Cli, argv: Vec<String>) -> ExitCode {
    // Commands that send requests (not a plan, not a comparison of finished sweeps).
    let replays = match &cli.command {
        Command::Run(a) => !a.dry_run,
        Command::Replay(r) => !r.dry_run,
        Command::Sweep(s) => s.compare.is_none(),
        _ => false,
    };
    let (code, replayed) = match run(cli, argv) {
        Ok(code) => (code, replays),
        Err(e) => {
            errln!("error: {e:#}");
            (ExitCode::from(2), false)
        }
    };
    if replayed {
        // The line InferenceX's wrapper prints and its operators grep for.
        let rc = exit_code_number(code);
        tracing::info!("replay_rc={rc}");
    }
    code
}

/// The number of an exit code this program returns (2 for one it does not).
fn exit_code_number(code: ExitCode) -> u8 {
    (0u8..=255)
        .find(|c| ExitCode::from(*c) == code)
        .unwrap_or(2)
}

/// The log filter: `AGENTX_LOG`, else `RUST_LOG` (tracing's filter syntax), else the level of
/// `-q`/`-v` (INFO by default).
fn log_filter(agentx: Option<String>, rust: Option<String>, quiet: bool, verbose: u8) -> String {
    if let Some(f) = agentx.or(rust).filter(|f| !f.trim().is_empty()) {
        return f;
    }
    match (quiet, verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    }
    .to_string()
}

/// The log's writer: stderr, except while `run --ui dashboard` draws (it holds the lines, then
/// writes them out).
pub(crate) fn log_tail() -> crate::dashboard::LogTail {
    static LOG_TAIL: std::sync::OnceLock<crate::dashboard::LogTail> = std::sync::OnceLock::new();
    LOG_TAIL.get_or_init(crate::dashboard::LogTail::new).clone()
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|e| {
        errln!("warning: the log filter {filter:?} does not parse ({e}); logging at INFO");
        tracing_subscriber::EnvFilter::new("info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // stderr, or held while a dashboard draws.
        .with_writer(log_tail())
        // Colours only on a terminal: a log file (InferenceX's benchmark.log) stays greppable.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn run(cli: Cli, argv: Vec<String>) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run::main(&args, argv),
        Command::Finalize(a) => finalize::main(a),
        Command::Timeline(a) => timeline::main(&a),
        Command::Capture(args) => capture::main(&args),
        Command::Replay(args) => run::replay_main(args),
        Command::Scenario(cmd) => scenario_command(cmd),
        Command::Sim(args) => Ok(sim::main(&args)),
        Command::Report(args) => report::main(*args),
        Command::Sweep(args) => sweep::main(&args, argv),
        Command::Plot(args) => report::plot_main(&args),
        Command::Merge(args) => merge::main(&args),
        Command::Compare(args) => compare::main(&args),
        Command::Dataset(args) => dataset::main(args),
    }
}

/// Load a scenario reference (a path, the store, or a built-in component by name or hash) with the
/// default sandbox limits.
pub fn load_scenario(reference: &str, home: &Path) -> anyhow::Result<scenario::Scenario> {
    crate::run::load(Some(reference), home)
}

fn scenario_command(cmd: ScenarioCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ScenarioCommand::Inspect {
            reference,
            json,
            home,
        } => {
            let sc = load_scenario(&reference, &home.dir())?;
            let info = sc.instantiate()?.describe()?;
            if json {
                let v = serde_json::json!({
                    "sha256": sc.hash(),
                    "size": sc.size(),
                    "path": sc.path(),
                    "wit_package": scenario::WIT_PACKAGE,
                    "wit_version": sc.world().version(),
                    "world": sc.world().as_str(),
                    "replays": sc.world().replays(),
                    "name": info.name,
                    "version": info.version,
                    "description": info.description,
                    "knobs": info.knobs.iter().map(|k| serde_json::json!({
                        "name": k.name, "description": k.description, "default": k.default_value,
                    })).collect::<Vec<_>>(),
                    "locks": info.locks.iter().map(|l| serde_json::json!({
                        "setting": l.setting, "rule": l.rule,
                    })).collect::<Vec<_>>(),
                });
                outln!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                outln!("sha256:      {}", sc.hash());
                outln!("size:        {} bytes", sc.size());
                outln!("path:        {}", sc.path().display());
                outln!(
                    "wit:         {} ({})",
                    sc.world().as_str(),
                    sc.world().replays()
                );
                outln!("name:        {}", info.name);
                outln!("version:     {}", info.version);
                outln!("description: {}", info.description);
                outln!("knobs:");
                for k in &info.knobs {
                    let d = k.default_value.as_deref().unwrap_or("-");
                    outln!("  {:<32} default {:<20} {}", k.name, d, k.description);
                }
                outln!("locks:");
                for l in &info.locks {
                    outln!("  {:<32} {}", l.setting, l.rule);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ScenarioCommand::Add { file, home } => {
            let home = home.dir();
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let engine = ScenarioEngine::new(scenario::Limits::default(), Some(&home))?;
            let sc = engine.load_bytes(&file, &bytes, None)?;
            let info = sc.instantiate()?.describe()?;
            let meta = StoredScenario {
                sha256: sc.hash().to_string(),
                name: info.name,
                version: info.version,
                description: info.description,
                size: bytes.len() as u64,
                added_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                source: file.display().to_string(),
            };
            let store = ScenarioStore::new(&home);
            let path = store.add(&bytes, &meta)?;
            outln!(
                "added {} {} sha256:{} -> {}",
                meta.name,
                meta.version,
                meta.sha256,
                path.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        ScenarioCommand::List { json, home } => {
            let builtins = scenario::builtin::list();
            let store_dir = home.dir();
            let list = ScenarioStore::new(&store_dir).list()?;
            if json {
                let v = serde_json::json!({"builtin": builtins, "store": list});
                outln!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                outln!("built in:");
                for b in &builtins {
                    let name = format!("{} ({})", b.name, b.alias);
                    outln!(
                        "  sha256:{}  {:<40} {} bytes{}",
                        b.sha256,
                        name,
                        b.size,
                        if b.default { "  [default]" } else { "" }
                    );
                }
                outln!("store ({}):", store_dir.display());
                if list.is_empty() {
                    outln!("  (empty; add a component with `agentx-host scenario add FILE`)");
                }
                for m in list {
                    let name = format!("{} {}", m.name, m.version);
                    outln!("  sha256:{}  {:<40} {} bytes", m.sha256, name, m.size);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
