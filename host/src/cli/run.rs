//! `agentx-host run`: flags with aiperf's names, [`RunPlan::resolve`] (where flags and environment
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
use crate::run::{Cancel, RunConfig, RunPlan};
pub use crate::run::{RunSettings, BUILTIN_SCENARIO, BUNDLED_CORPUS, MANIFEST_FILE};
use crate::run::{DEMO_CONCURRENCY, DEMO_DURATION_S};

use super::run_args::RunArgs;

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
    let env = |k: &str| super::in_process::env_var(k);
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
        output: super::in_process::output_dir(a.output_artifact_dir.clone()),
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
        progress: super::in_process::stderr_is_terminal(),
        signals: !super::in_process::in_process(),
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
