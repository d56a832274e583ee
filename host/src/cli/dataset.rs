//! `agentx-host dataset import|inspect|stats|validate|fidelity|synth`: arguments and output of the dataset
//! subcommands (a graph-ir workload's in [`graph_ir`]).
//!
//! Data goes to stdout (tables, or JSON with `--json`), logs to stderr. Errors are returned typed and
//! turned into exit code 2 by the caller.

pub(crate) mod graph_ir;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};

use crate::dataset::prompt::{sendable_starts, AssistantMode, PromptSynth, Tiling};
use crate::dataset::stats::{corpus_stats, dataset_tree_stats, Dist, TreeStats};
use crate::dataset::synth::{write_corpus, SynthOptions};
use crate::dataset::tokens::TokenCounter;
use crate::dataset::warnings::WarningReport;
use crate::dataset::{Dataset, DatasetError, OpenOptions, Trajectory};

/// Arguments of `agentx-host dataset`.
#[derive(Debug, Args)]
pub struct DatasetArgs {
    #[command(subcommand)]
    pub(crate) command: DatasetCommand,
}

/// Where a corpus comes from and how it is cached.
#[derive(Debug, Args)]
pub(crate) struct SourceArgs {
    /// A traces.jsonl, a directory of *.json traces, a corpus name (e.g. semianalysis_cc_traces_weka_062126)
    /// or a cached Hugging Face dataset repository (org/name).
    pub(crate) source: String,
    /// Use only the first N traces (all by default).
    #[arg(long, value_name = "N")]
    pub(crate) num_dataset_entries: Option<usize>,
    /// Drop traces whose peak context (max over requests of in + max(1, out)) exceeds N tokens, then
    /// keep the first --num-dataset-entries of the rest (aiperf's filter-then-cap).
    #[arg(long, value_name = "N")]
    pub(crate) max_context_length: Option<u64>,
    /// Dataset cache directory [default: $AGENTX_DATASET_MMAP_CACHE_DIR, $AIPERF_DATASET_MMAP_CACHE_DIR,
    /// or <--home>/datasets].
    #[arg(long, value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// The agentx cache directory whose `datasets/` holds the cache (as `run --home`).
    #[arg(long, value_name = "DIR")]
    pub(crate) home: Option<PathBuf>,
    /// Refuse a corpus with import warnings (checks beyond aiperf's: `in: 0`, hash ids above 2^32-1,
    /// a first request shorter than the tools+system prefix, ...), naming file:line of each kind.
    #[arg(long)]
    pub(crate) strict: bool,
    /// The corpus format [default: detected from the first record when only one format fits].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(crate) format: Option<FormatArg>,
    /// Tokens per hash block of a mooncake, tracelab or otel corpus [default: 512 mooncake and
    /// agentic-mooncake v1, 64 tracelab and otel] (weka traces say their own; dynamo request traces
    /// and agentic-mooncake v2 declare theirs, which this must equal), and of a graph-ir workload's
    /// stats [default: 64].
    #[arg(long, value_name = "TOKENS")]
    pub(crate) block_size: Option<u32>,
}

/// A corpus format (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FormatArg {
    /// One trace per line (or per *.json file of a directory), hash ids per trace.
    Weka,
    /// One request per line ({timestamp, input_length, output_length, hash_ids}, optionally
    /// session_id and delay), hash ids global to the corpus.
    Mooncake,
    /// One LLM round per line (the TraceLab agentic-coding corpus), subagent sessions joined by timing.
    Tracelab,
    /// NVIDIA Dynamo's `dynamo.request.trace.v1` capture (JSONL or .jsonl.gz): sessions from
    /// agent_context, subagent sessions spawned and joined by Dynamo's rules, hash ids global.
    Dynamo,
    /// Dynamo's Agentic Mooncake: v1 rows with wait_for, or v2 (a header line, then rows with
    /// dependencies); hash ids global.
    AgenticMooncake,
    /// OpenTelemetry GenAI traces: OTLP JSON or flattened spans (one session per line, or one trace
    /// per *.json file), subagents from nested invoke_agent spans.
    Otel,
    /// aiperf's Agent Graph IR v2.0 (JSONL records, or one {graph, traces} JSON document): `dataset
    /// validate` and `dataset stats` only; its replay is not in this build yet.
    GraphIr,
}

impl FormatArg {
    /// The session-trace format this names; `None` for graph-ir, which is not a session-trace corpus
    /// (it is read by `dataset::graph_ir`, not the cache).
    fn trace_format(self) -> Option<crate::dataset::format::Format> {
        use crate::dataset::format::Format;
        match self {
            FormatArg::Weka => Some(Format::Weka),
            FormatArg::Mooncake => Some(Format::Mooncake),
            FormatArg::Tracelab => Some(Format::Tracelab),
            FormatArg::Dynamo => Some(Format::Dynamo),
            FormatArg::AgenticMooncake => Some(Format::AgenticMooncake),
            FormatArg::Otel => Some(Format::Otel),
            FormatArg::GraphIr => None,
        }
    }
}

impl SourceArgs {
    /// `--cache-dir`, else `--home`'s datasets directory; `None`: the default cache.
    fn cache_dir(&self) -> Option<PathBuf> {
        self.cache_dir.clone().or_else(|| {
            self.home
                .as_ref()
                .map(|home| home.join(crate::dataset::cache::DATASETS_SUBDIR))
        })
    }

    fn open(&self) -> Result<Dataset, DatasetError> {
        if self.format == Some(FormatArg::GraphIr) {
            return Err(graph_ir::not_replayable("this command"));
        }
        let dataset = Dataset::open(
            &self.source,
            &OpenOptions {
                num_dataset_entries: self.num_dataset_entries,
                max_context_length: self.max_context_length,
                max_osl: None,
                cache_dir: self.cache_dir(),
                format: self.format.and_then(FormatArg::trace_format),
                block_size: self.block_size,
                trace_block_size: None,
            },
        )?;
        if self.strict {
            dataset.check_strict()?;
        }
        Ok(dataset)
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ModeArg {
    Recorded,
    Live,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DatasetCommand {
    /// Check a corpus without replaying it: every error with its place and fix (exit code 2), and its
    /// warnings. A session-trace corpus is imported into the cache (as `import`); a graph-ir workload
    /// is read, normalised and validated.
    Validate {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Validate a corpus and build its cache entry (or find it); print what it holds and its warnings.
    Import {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show the traces of a corpus, the turns of one trace, or the messages of one turn.
    Inspect {
        #[command(flatten)]
        source: SourceArgs,
        /// Show this trace (by id).
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        /// Show the trace at this position in dataset order.
        #[arg(long, value_name = "I", conflicts_with = "trace")]
        index: Option<usize>,
        /// With --trace/--index: print the chat messages of this turn as JSON.
        #[arg(long, value_name = "K")]
        turn: Option<usize>,
        /// Assistant content of printed messages.
        #[arg(long, value_enum, default_value = "recorded")]
        mode: ModeArg,
        /// Seed of the synthesized text.
        #[arg(
            long = "random-seed",
            alias = "seed",
            default_value_t = 0,
            value_name = "SEED"
        )]
        seed: u64,
        /// Count tokens and pick synthesis words with this tokenizer.json.
        #[arg(long, value_name = "PATH")]
        tokenizer: Option<PathBuf>,
    },
    /// Corpus statistics: sizes, ISL/OSL percentiles, theoretical cache-hit rates.
    Stats {
        #[command(flatten)]
        source: SourceArgs,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        achievable: AchievableArgs,
    },
    /// How faithfully a run replayed a corpus (a capture, say): input and output tokens and the
    /// gaps inside each stream, planned against replayed; each tree's shape against the replayed
    /// instances that ran it whole; the hit the corpus allows against the run's. Exit code 1 when a
    /// tree's shape differs or the input tokens are off by more than --isl-tolerance.
    Fidelity {
        #[command(flatten)]
        source: SourceArgs,
        /// The run's artifact directory (it holds records.jsonl).
        run_dir: PathBuf,
        /// Largest relative input-token error, at the 99th percentile of the matched requests.
        #[arg(long, default_value_t = 0.01, value_name = "FRACTION")]
        isl_tolerance: f64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write a synthetic corpus with the shape of the public 949-trace corpus (with --subagents, of
    /// the 393-trace with-subagents corpus).
    Synth {
        /// Number of traces [default: 949; 393 with --subagents].
        #[arg(long)]
        traces: Option<usize>,
        /// Seed of the generator.
        #[arg(
            long = "random-seed",
            alias = "seed",
            default_value_t = 0,
            value_name = "SEED"
        )]
        seed: u64,
        /// Output traces.jsonl.
        #[arg(short, long, value_name = "PATH")]
        output: PathBuf,
        /// Cap every request's input tokens (contexts are compacted below it).
        #[arg(long = "synthesis-max-isl", alias = "max-isl", value_name = "TOKENS")]
        max_isl: Option<u32>,
        /// Cap the turns of every trace.
        #[arg(long, value_name = "N")]
        max_turns: Option<usize>,
        /// Scale the whole trace shape (tools+system prefix, growth per turn, outputs) to a server
        /// context of this many tokens, e.g. 4096: most traces fit, the long-context few grow past it.
        #[arg(long, value_name = "TOKENS")]
        context: Option<u32>,
        /// Write the with-subagents shape: subagent entries (parallel fan-out joined by a later root
        /// turn, background subagents) and flat worker chains that hash-chain detection splits off.
        #[arg(long)]
        subagents: bool,
    },
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn source_bytes(dataset: &Dataset) -> u64 {
    let path = dataset.source_path();
    if path.is_dir() {
        std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|entry| entry.metadata().ok())
                    .filter(std::fs::Metadata::is_file)
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    } else {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }
}

/// The human warning section: a total line, then counts by kind with their first places.
fn print_warnings(warnings: &WarningReport) {
    if warnings.is_empty() {
        outln!("warnings     0");
        return;
    }
    outln!(
        "warnings     {} (beyond aiperf's checks; --strict refuses them)",
        warnings.total
    );
    for line in warnings.lines() {
        outln!("  {line}");
    }
}

fn dist_row(name: &str, dist: &Dist) -> String {
    format!(
        "{name:<18} {:>10.1} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>10.0}",
        dist.mean, dist.min, dist.p50, dist.p90, dist.p99, dist.max
    )
}

/// The session-tree section of `dataset stats`.
fn print_trees(trees: &TreeStats) {
    outln!(
        "session trees               {} (nested timestamps {}; {} not buildable)",
        trees.trees,
        trees.nested_basis,
        trees.unbuildable
    );
    if let Some(error) = &trees.first_error {
        outln!("  first error               {error}");
    }
    outln!("  with child streams        {}", trees.trees_with_children);
    outln!(
        "  branches                  {} ({} background, in {} trees)",
        trees.branches,
        trees.background_branches,
        trees.trees_with_background
    );
    outln!(
        "  subagent streams          {} ({} dropped entries; extra chains fa {}, aux {}, wg {})",
        trees.subagent_streams,
        trees.dropped_subagents,
        trees.subagent_chains.fa,
        trees.subagent_chains.aux,
        trees.subagent_chains.wg
    );
    let flat = &trees.flat_chains;
    outln!(
        "  flat chains               fa {}, aux {} (reductions {}), wg {}",
        flat.fa,
        flat.aux,
        flat.reduction,
        flat.wg
    );
    outln!(
        "{:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "",
        "mean",
        "min",
        "p50",
        "p90",
        "p99",
        "max"
    );
    outln!("{}", dist_row("streams per tree", &trees.streams_per_tree));
    outln!("{}", dist_row("depth", &trees.depth));
    outln!(
        "{}",
        dist_row("children/branch", &trees.children_per_branch)
    );
    outln!("{}", dist_row("overlap", &trees.overlap));
}

/// Runs a dataset subcommand.
/// Runs a `dataset` command.
pub(crate) fn main(args: DatasetArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.command {
        DatasetCommand::Fidelity {
            source,
            run_dir,
            isl_tolerance,
            json,
        } => fidelity(&source, &run_dir, isl_tolerance, json),
        DatasetCommand::Validate { source, json } => validate(&source, json),
        command => {
            run(command)?;
            Ok(std::process::ExitCode::SUCCESS)
        }
    }
}

/// `dataset fidelity`: the report, printed, and whether it is within tolerance.
fn fidelity(
    source: &SourceArgs,
    run_dir: &Path,
    isl_tolerance: f64,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    if !run_dir.join(crate::record::RECORDS_FILE).is_file() {
        anyhow::bail!(
            "{} holds no {}: name a run's artifact directory",
            run_dir.display(),
            crate::record::RECORDS_FILE
        );
    }
    let dataset = source.open()?;
    let report = crate::run::fidelity::fidelity(&dataset, run_dir, source.cache_dir())?;
    let within = report.within(isl_tolerance);
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_fidelity(&report, isl_tolerance, within);
    }
    Ok(match within {
        true => std::process::ExitCode::SUCCESS,
        false => std::process::ExitCode::from(1),
    })
}

fn print_fidelity(report: &crate::run::fidelity::FidelityReport, tolerance: f64, within: bool) {
    outln!(
        "matched requests   {} ({} ok records of no corpus turn)",
        report.matched,
        report.unmatched
    );
    outln!(
        "{:<18} {:>10} {:>10} {:>10} {:>10}",
        "",
        "mean",
        "p50",
        "p99",
        "max"
    );
    for (name, spread, scale) in [
        ("ISL error %", &report.isl_relative_error, 100.0),
        ("OSL error %", &report.osl_relative_error, 100.0),
        ("gap error ms", &report.gap_error_ms, 1.0),
    ] {
        outln!(
            "{name:<18} {:>10.3} {:>10.3} {:>10.3} {:>10.3}",
            spread.mean * scale,
            spread.p50 * scale,
            spread.p99 * scale,
            spread.max * scale
        );
    }
    for tree in &report.trees {
        outln!(
            "tree {:<24} planned {:?}, replayed whole {:?}: {}",
            tree.trace_id,
            tree.planned,
            tree.replayed_whole,
            if tree.equal { "equal" } else { "DIFFERENT" }
        );
    }
    outln!(
        "hit                planned {:.1} %, replayed {}",
        report.planned_hit * 100.0,
        report
            .replayed_hit
            .map_or("- (no cache truth in the run)".into(), |hit| format!(
                "{:.1} %",
                hit * 100.0
            ))
    );
    outln!(
        "verdict            {} (tree shapes equal, ISL p99 error within {:.2} %)",
        if within {
            "within tolerance"
        } else {
            "OUT OF TOLERANCE"
        },
        tolerance * 100.0
    );
}

/// Runs a `dataset` command that reads or writes corpora only.
fn run(command: DatasetCommand) -> Result<(), DatasetError> {
    match command {
        DatasetCommand::Fidelity { .. } | DatasetCommand::Validate { .. } => Ok(()),
        DatasetCommand::Import { source, json } => import(&source, json),
        DatasetCommand::Inspect {
            source,
            trace,
            index,
            turn,
            mode,
            seed,
            tokenizer,
        } => {
            let dataset = source.open()?;
            let Some(traj) = pick_trajectory(&dataset, trace.as_deref(), index)? else {
                list_trajectories(&dataset);
                return Ok(());
            };
            let mode = match mode {
                ModeArg::Recorded => AssistantMode::Recorded,
                ModeArg::Live => AssistantMode::Live,
            };
            match turn {
                Some(turn) => print_turn_messages(traj, turn, mode, seed, tokenizer),
                None => {
                    print_turns(traj);
                    Ok(())
                }
            }
        }
        DatasetCommand::Stats {
            source,
            json,
            achievable,
        } => stats(&source, json, &achievable),
        DatasetCommand::Synth {
            traces,
            seed,
            output,
            max_isl,
            max_turns,
            context,
            subagents,
        } => synth(
            &SynthOptions {
                traces: traces.unwrap_or(if subagents { 393 } else { 949 }),
                seed,
                max_isl,
                max_turns,
                context,
                subagents,
            },
            &output,
        ),
    }
}

/// The format of a corpus that is not weka, for `--json` output (`None` for weka, whose output is
/// what it was before other formats existed).
fn format_json(dataset: &Dataset) -> Option<serde_json::Value> {
    let spec = dataset.corpus_format();
    (spec.format != crate::dataset::format::Format::Weka).then(|| {
        let mut value = serde_json::to_value(spec).unwrap_or_default();
        value["global_hash_ids"] = dataset.global_hash_ids().into();
        if let Some(t) = dataset
            .trajectory(0)
            .filter(|_| spec.format.embeds_block_size())
        {
            value["block_size"] = t.block_size().into();
        }
        value
    })
}

/// The human format line of a corpus that is not weka.
fn print_format(dataset: &Dataset) {
    let spec = dataset.corpus_format();
    if spec.format == crate::dataset::format::Format::Weka {
        return;
    }
    let scope = if dataset.global_hash_ids() {
        "global to the corpus"
    } else {
        "per trace"
    };
    // A Dynamo corpus declares its block size in its rows: its traces hold it.
    let block_size = match dataset.trajectory(0) {
        Some(t) if spec.format.embeds_block_size() => t.block_size(),
        _ => spec.block_size(),
    };
    let mut line = format!(
        "format       {} (block size {block_size}, hash ids {scope}",
        spec.format,
    );
    if let Some(join) = spec.tracelab {
        line.push_str(&format!(
            "; subagent join {}, codex join {}, min spawn {} ms",
            if join.subagents { "on" } else { "off" },
            if join.codex { "on" } else { "off" },
            join.min_spawn_ms
        ));
    }
    outln!("{line})");
}

/// What an OTel corpus holds beyond its traces, read from its source; `None` for another format.
fn otel_summary(
    dataset: &Dataset,
) -> Result<Option<crate::dataset::otel::OtelSummary>, DatasetError> {
    let spec = dataset.corpus_format();
    if spec.format != crate::dataset::format::Format::Otel {
        return Ok(None);
    }
    crate::dataset::otel::summarize(dataset.source_path(), &spec).map(Some)
}

/// `dataset stats --json`'s `otel`: the summary, and which history each session can replay.
fn otel_json(otel: &crate::dataset::otel::OtelSummary) -> serde_json::Value {
    let mut value = serde_json::to_value(otel).unwrap_or_default();
    value["history_trace_sessions"] = (otel.sessions - otel.sessions_without_requests).into();
    value["history_runtime_sessions"] = otel.runtime_sessions.into();
    value
}

/// The human lines of an OTel corpus's summary.
fn print_otel(otel: &crate::dataset::otel::OtelSummary) {
    let replayed = otel.sessions - otel.sessions_without_requests;
    outln!(
        "otel sessions               {replayed} replayed of {} ({} subagents)",
        otel.sessions,
        otel.subagents
    );
    outln!(
        "otel requests               {} ({} with messages, {} prefixes assumed)",
        otel.requests,
        otel.requests_with_messages,
        otel.assumed_prefix
    );
    outln!(
        "otel history=runtime        {} of {replayed} sessions (history=trace: all)",
        otel.runtime_sessions
    );
    outln!(
        "otel spans dropped          {} error, {} duplicate, {} without token counts ({} estimated)",
        otel.error_spans,
        otel.duplicate_spans,
        otel.untokenized_spans,
        otel.estimated_tokens
    );
}

/// `dataset import`: imports (or maps from the cache) and says what it found.
fn import(source: &SourceArgs, json: bool) -> Result<(), DatasetError> {
    let started = Instant::now();
    let dataset = source.open()?;
    let secs = started.elapsed().as_secs_f64();
    let raw = source_bytes(&dataset);
    if json {
        let mut doc = serde_json::json!({
            "source": dataset.source_path().display().to_string(),
            "corpus": dataset.alias().map(|a| a.name),
            "traces": dataset.len(),
            "requests": dataset.total_turns(),
            "subagents_ignored": dataset.subagents_ignored(),
            "cache": dataset.cache_path().display().to_string(),
            "outcome": format!("{:?}", dataset.outcome()),
            "cache_bytes": dataset.cache_bytes(),
            "source_bytes": raw,
            "seconds": secs,
            "warnings": dataset.warnings(),
            "selection": dataset.selection(),
        });
        if let Some(format) = format_json(&dataset) {
            doc["format"] = format;
        }
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    outln!("source       {}", dataset.source_path().display());
    if let Some(alias) = dataset.alias() {
        outln!("corpus       {} ({})", alias.name, alias.repo);
    }
    print_format(&dataset);
    outln!("traces       {}", dataset.len());
    if let Some(selection) = dataset.selection() {
        outln!(
            "selection    {} kept, {} dropped by --max-context-length {} (scanned {}; peak context {}..{})",
            selection.kept,
            selection.dropped,
            selection.max_context_length.unwrap_or(0),
            selection.scanned,
            selection.smallest_peak,
            selection.largest_peak
        );
    }
    outln!("requests     {}", dataset.total_turns());
    outln!("subagents    {} ignored", dataset.subagents_ignored());
    outln!(
        "cache        {} ({:?})",
        dataset.cache_path().display(),
        dataset.outcome()
    );
    outln!(
        "size         {:.1} MiB cache / {:.1} MiB source ({:.1}%)",
        mib(dataset.cache_bytes()),
        mib(raw),
        100.0 * dataset.cache_bytes() as f64 / raw.max(1) as f64
    );
    outln!("seconds      {secs:.3}");
    print_warnings(&dataset.warnings());
    Ok(())
}

/// The trajectory `--trace` or `--index` names; `None` without either.
fn pick_trajectory<'data>(
    dataset: &'data Dataset,
    trace: Option<&str>,
    index: Option<usize>,
) -> Result<Option<Trajectory<'data>>, DatasetError> {
    Ok(match (trace, index) {
        (Some(id), _) => Some(dataset.find(id).ok_or_else(|| {
            DatasetError::Argument(format!(
                "--trace {id:?}: no such trace id in {}",
                dataset.source_path().display()
            ))
        })?),
        (None, Some(i)) => Some(dataset.trajectory(i).ok_or_else(|| {
            DatasetError::Argument(format!(
                "--index {i}: the dataset has {} traces (0..{})",
                dataset.len(),
                dataset.len()
            ))
        })?),
        (None, None) => None,
    })
}

/// `dataset inspect` without a trace: one line per trajectory.
fn list_trajectories(dataset: &Dataset) {
    outln!(
        "{:>5} {:<24} {:>6} {:>9} {:>9} {:>9}",
        "index",
        "id",
        "turns",
        "start_in",
        "end_in",
        "subagents"
    );
    for trajectory in dataset.trajectories() {
        if crate::out::stdout_closed() {
            break;
        }
        let first = trajectory.turn(0).map_or(0, |turn| turn.input_tokens());
        let last = trajectory
            .turn(trajectory.num_turns().wrapping_sub(1))
            .map_or(0, |turn| turn.input_tokens());
        outln!(
            "{:>5} {:<24} {:>6} {:>9} {:>9} {:>9}",
            trajectory.index(),
            trajectory.id(),
            trajectory.num_turns(),
            first,
            last,
            trajectory.subagents()
        );
    }
}

/// `dataset inspect --turn K`: the chat messages of turn K as JSON.
fn print_turn_messages(
    traj: Trajectory<'_>,
    turn: usize,
    mode: AssistantMode,
    seed: u64,
    tokenizer: Option<PathBuf>,
) -> Result<(), DatasetError> {
    let counter = match tokenizer {
        Some(path) => {
            TokenCounter::from_file(&path).map_err(|e| DatasetError::Argument(e.to_string()))?
        }
        None => TokenCounter::Words,
    };
    let synth = PromptSynth::for_counter(seed, &counter);
    let conv = synth
        .conversation(traj, turn, mode)
        .map_err(|e| DatasetError::Argument(format!("--turn: {e}")))?;
    let msgs = conv.messages(None);
    let tokens: u64 = msgs
        .iter()
        .map(|message| counter.count(&message.content))
        .sum();
    errln!(
        "trace {:?} turn {turn}: {} messages, {tokens} tokens (recorded in: {})",
        traj.id(),
        msgs.len(),
        traj.turn(turn)
            .map_or(0, |recorded| recorded.input_tokens())
    );
    outln!(
        "{}",
        serde_json::to_string_pretty(&msgs).unwrap_or_default()
    );
    Ok(())
}

/// `dataset inspect --trace/--index`: the trajectory's turns, one line each.
fn print_turns(traj: Trajectory<'_>) {
    outln!(
        "trace {:?}: {} turns, block_size {}, tool_tokens {}, system_tokens {}, subagents {}, models {}",
        traj.id(),
        traj.num_turns(),
        traj.block_size(),
        traj.tool_tokens(),
        traj.system_tokens(),
        traj.subagents(),
        traj.models().collect::<Vec<_>>().join(",")
    );
    let live = sendable_starts(traj, AssistantMode::Live, Tiling::RecordedLength);
    outln!(
        "{:>5} {:>10} {:>8} {:>4} {:>8} {:>6} {:>6} {:>6} {:<9} {:>9}",
        "turn",
        "t",
        "think",
        "type",
        "in",
        "out",
        "ids",
        "lcp",
        "stop",
        "live_start"
    );
    for (index, turn) in traj.turns().enumerate() {
        if crate::out::stdout_closed() {
            break;
        }
        outln!(
            "{:>5} {:>10.3} {:>8} {:>4} {:>8} {:>6} {:>6} {:>6} {:<9} {:>9}",
            index,
            turn.t(),
            turn.think_time().map_or("-".into(), |x| format!("{x:.3}")),
            turn.kind().as_str(),
            turn.input_tokens(),
            turn.output_tokens(),
            turn.num_hash_ids(),
            turn.lcp_with_previous(),
            if turn.stop().is_empty() {
                "-"
            } else {
                turn.stop()
            },
            if live[index] { "yes" } else { "no" }
        );
    }
}

/// The cache model's walk of `dataset stats` ([`crate::dataset::achievable`]).
#[derive(Debug, Args)]
pub(crate) struct AchievableArgs {
    /// Lanes that play the traces side by side for the achievable hit (each trace once, from its
    /// first turn, in dataset order and recorded time)
    #[arg(
        long,
        default_value_t = 1,
        value_name = "N",
        requires = "kv_capacity_tokens",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    concurrency: u32,
    /// A server's KV capacity in tokens: adds the hit an LRU of that size allows the lanes, beside
    /// an infinite cache's (every block of the corpus through the cache model, so not without it)
    #[arg(long, value_name = "TOKENS")]
    kv_capacity_tokens: Option<u64>,
}

/// `dataset stats`.
fn stats(source: &SourceArgs, json: bool, walk: &AchievableArgs) -> Result<(), DatasetError> {
    if source.format == Some(FormatArg::GraphIr) {
        if let Some(capacity) = walk.kv_capacity_tokens {
            return Err(DatasetError::Argument(format!(
                "--kv-capacity-tokens {capacity}: the achievable-hit walk plays session traces in \
                 recorded time; a graph-ir workload has no such lanes: drop the flag"
            )));
        }
        return graph_ir::stats(source, json);
    }
    let dataset = source.open()?;
    let corpus = corpus_stats(&dataset);
    let trees = dataset_tree_stats(&dataset)?;
    let otel = otel_summary(&dataset)?;
    // The walk touches every block of the corpus: only when a capacity asks for it.
    let achievable = walk.kv_capacity_tokens.and_then(|capacity_tokens| {
        crate::dataset::achievable::walk(
            &dataset,
            &crate::dataset::achievable::corpus_order(
                walk.concurrency as usize,
                Some(capacity_tokens),
                dataset.len(),
            ),
        )
    });
    if json {
        let mut doc = serde_json::to_value(&corpus).unwrap_or_default();
        if let Some(fields) = doc.as_object_mut() {
            fields.insert(
                "warnings".into(),
                serde_json::to_value(dataset.warnings()).unwrap_or_default(),
            );
            fields.insert(
                "trees".into(),
                serde_json::to_value(&trees).unwrap_or_default(),
            );
            if let Some(format) = format_json(&dataset) {
                fields.insert("format".into(), format);
            }
            if let Some(otel) = &otel {
                fields.insert("otel".into(), otel_json(otel));
            }
            if let Some(achievable) = &achievable {
                fields.insert(
                    "achievable".into(),
                    serde_json::to_value(achievable).unwrap_or_default(),
                );
            }
        }
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    if dataset.corpus_format().format != crate::dataset::format::Format::Weka {
        outln!(
            "format                      {}",
            dataset.corpus_format().format
        );
    }
    outln!("traces                      {}", corpus.traces);
    outln!("requests                    {}", corpus.requests);
    outln!("subagent entries ignored    {}", corpus.subagents_ignored);
    outln!("out: 0 turns                {}", corpus.out_zero_turns);
    outln!("non-monotonic cuts          {}", corpus.non_monotonic_cuts);
    outln!(
        "theoretical hit rate (set)  {:.2}%",
        100.0 * corpus.theoretical_hit_rate_set
    );
    outln!(
        "theoretical hit rate (lcp)  {:.2}%",
        100.0 * corpus.theoretical_hit_rate_prefix
    );
    if let Some(otel) = &otel {
        print_otel(otel);
    }
    if let Some(hit) = &achievable {
        print_achievable(hit);
    }
    outln!();
    outln!(
        "{:<18} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "",
        "mean",
        "min",
        "p50",
        "p90",
        "p99",
        "max"
    );
    outln!("{}", dist_row("turns per trace", &corpus.turns_per_trace));
    outln!("{}", dist_row("isl", &corpus.isl));
    outln!("{}", dist_row("osl", &corpus.osl));
    outln!("{}", dist_row("start isl", &corpus.start_isl));
    outln!("{}", dist_row("end isl", &corpus.end_isl));
    outln!("{}", dist_row("think time (s)", &corpus.think_time_s));
    let hit = &corpus.per_trace_set_hit_rate;
    outln!(
        "{:<18} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>10.4}",
        "per-trace hit",
        hit.mean,
        hit.min,
        hit.p50,
        hit.p90,
        hit.p99,
        hit.max
    );
    outln!();
    print_trees(&trees);
    outln!();
    print_warnings(&dataset.warnings());
    Ok(())
}

/// `dataset validate`: a graph-ir workload through its validator, any other corpus through its import.
fn validate(source: &SourceArgs, json: bool) -> anyhow::Result<std::process::ExitCode> {
    if source.format == Some(FormatArg::GraphIr) {
        return graph_ir::validate(source, json);
    }
    let dataset = source.open()?;
    let warnings = dataset.warnings();
    if json {
        let doc = serde_json::json!({
            "source": dataset.source_path().display().to_string(),
            "format": dataset.corpus_format().format,
            "valid": true,
            "traces": dataset.len(),
            "requests": dataset.total_turns(),
            "warnings": warnings,
        });
        outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        outln!(
            "valid {} corpus: {} traces, {} requests",
            dataset.corpus_format().format,
            dataset.len(),
            dataset.total_turns()
        );
        print_warnings(&warnings);
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The achievable-hit lines of `dataset stats`.
fn print_achievable(hit: &crate::dataset::achievable::PlannedHit) {
    outln!("achievable hit              {}", hit.rates());
    outln!(
        "  the cache model over {} lane(s) in recorded time, {}-token blocks, {} requests, {:.0} s",
        hit.lanes,
        hit.block_size,
        hit.requests,
        hit.span_s
    );
}

/// `dataset synth`.
fn synth(opts: &SynthOptions, output: &std::path::Path) -> Result<(), DatasetError> {
    let started = Instant::now();
    let sum = write_corpus(opts, output)?;
    outln!(
        "wrote {} traces, {} requests, {:.1} MiB to {} in {:.1} s",
        sum.traces,
        sum.requests,
        mib(sum.bytes),
        output.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
