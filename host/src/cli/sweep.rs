//! `agentx-host sweep`: the run's flags plus the sweep's (`--concurrency` as a list, `--resume`,
//! `--idle-timeout`, `--result-filename`, `--server-cmd` and `--server-ready-timeout`),
//! the call of [`crate::run::sweep::run_sweep`] and its table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail};
use clap::{Args, Parser};

use super::report::IdentityArgs;
use super::run::run_config;
use super::run_args::RunArgs;
use crate::export::bmk::Identity;
use crate::export::sweep::PointStatus;
use crate::metrics::slo::SloSet;
use crate::run::find_max::FindMax;
use crate::run::server_cmd::ServerSpec;
use crate::run::sweep::{run_sweep, SweepConfig};
use crate::run::Cancel;

/// Flags of `agentx-host sweep`: every flag of `run`, with `--concurrency` a list of points.
#[allow(
    rustdoc::invalid_html_tags,
    reason = "the field docs are the flags' help text, where <NAME> is a placeholder, not HTML"
)]
#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Keep the points a previous invocation of the same sweep finished; run the rest.
    #[arg(long)]
    pub(crate) resume: bool,
    /// Between points, wait at most this long for every server to show nothing running or waiting.
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub(crate) idle_timeout: f64,
    /// Each point's InferenceX report is `conc_<N>/<NAME>_conc<N>.json`.
    #[arg(
        long,
        env = "RESULT_FILENAME",
        default_value = "agentx",
        value_name = "NAME"
    )]
    pub(crate) result_filename: String,
    /// Compare two finished sweeps instead of running one: their points overlaid in the same views
    /// and the ratio B/A per concurrency, written to --output-artifact-dir (sweep_compare.json,
    /// .csv, .png, .html); and, as `agentx-host compare` judges them, each common concurrency's
    /// figures with their intervals and verdicts (compare.json, compare.html).
    #[arg(long, num_args = 2, value_names = ["DIR_A", "DIR_B"])]
    pub(crate) compare: Option<Vec<std::path::PathBuf>>,
    /// Start a fresh server for every point: CMD runs under `sh -c` in a process group of its
    /// own, with `{port}` (a free local port) and `{conc}` (the point's concurrency) filled in; the
    /// point runs against http://127.0.0.1:{port} (or --url, which may hold `{port}`) once
    /// /v1/models answers 200, then the whole group is stopped (SIGTERM, SIGKILL 30 s later). Its
    /// output goes to conc_<N>/server.log. `{{` and `}}` are literal braces; `${VAR}` is left to
    /// the shell.
    #[arg(long, value_name = "CMD")]
    pub(crate) server_cmd: Option<String>,
    /// How long a --server-cmd server may take to answer /v1/models with 200 (engines load their
    /// weights first).
    #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
    pub(crate) server_ready_timeout: f64,
    /// Judge every point by run-level objectives: space-separated FIGURE:BOUND pairs, a
    /// per-request metric with its statistic (time_to_first_token_p90:2000,
    /// inter_token_latency_p99:50, request_latency_avg:30000) or a run figure
    /// (request_throughput:5, good_request_fraction:0.9 with --goodput). Throughputs and fractions
    /// are met at or above their bound, the rest at or below. The verdicts go to sweep.json's `slo`.
    #[arg(long, value_name = "SLOS", value_parser = |s: &str| SloSet::parse(s).map(|x| (s.to_string(), x)))]
    pub(crate) slo: Option<(String, SloSet)>,
    /// Search for the highest concurrency whose point meets --slo: the --concurrency points in
    /// order until one fails, then bisection between the last that met it and the first that did
    /// not. Every point is a normal point of the sweep; --resume retraces the search.
    #[arg(long, requires = "slo")]
    pub(crate) find_max: bool,
    /// Stop the --find-max bisection when the answer and the first failing point are at most N
    /// lanes apart [default: a tenth of the answer, at least 1].
    #[arg(long, value_name = "N", requires = "find_max", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) find_max_resolution: Option<u32>,
}

/// InferenceX's identity variables (RUNNER_TYPE, FRAMEWORK, TP, ...), read from the environment.
#[derive(Debug, Parser)]
struct IdentityEnv {
    #[command(flatten)]
    identity: IdentityArgs,
}

/// The sweep's directory: `--output-artifact-dir`, else a fresh `artifacts/sweep-<UTC time>-<id>`
/// (and `artifacts/latest` pointing at it); `--resume` without the flag resumes `artifacts/latest`
/// when that is a sweep.
fn sweep_dir(given: Option<&Path>, resume: bool) -> anyhow::Result<PathBuf> {
    use crate::run::artifact_dir::{OutputDir, DEFAULT_PARENT, LATEST_LINK};
    if let Some(dir) = given {
        return Ok(dir.to_owned());
    }
    let parent = Path::new(DEFAULT_PARENT);
    if resume {
        let latest = parent.join(LATEST_LINK);
        if latest.join(crate::export::sweep::SWEEP_JSON).exists() {
            let newest = std::fs::canonicalize(&latest).unwrap_or(latest);
            tracing::info!("--resume: the newest sweep, {}", newest.display());
            return Ok(newest);
        }
        anyhow::bail!(
            "--resume: {} is not a sweep; name the sweep's directory with --output-artifact-dir DIR",
            latest.display()
        );
    }
    let sweep_id = format!("{:016x}", rand::RngExt::random::<u64>(&mut rand::rng()));
    Ok(OutputDir::default().resolve("sweep", &sweep_id, false))
}

/// Points `artifacts/latest` at a fresh sweep directory once the sweep wrote it.
fn link_fresh_sweep(given: Option<&Path>, dir: &Path) {
    if let (None, Some(name), true) = (given, dir.file_name(), dir.is_dir()) {
        crate::run::artifact_dir::link_latest(
            Path::new(crate::run::artifact_dir::DEFAULT_PARENT),
            Path::new(name),
        );
    }
}

/// `--server-cmd` with `--url` and `--server-ready-timeout`; a `{port}` in `--url` needs the flag.
fn server_spec(args: &SweepArgs) -> anyhow::Result<Option<ServerSpec>> {
    let Some(cmd) = &args.server_cmd else {
        if args
            .run
            .url
            .as_deref()
            .is_some_and(|u| u.contains("{port}"))
        {
            anyhow::bail!(
                "--url {:?}: {{port}} is the port of a server the sweep starts; pass --server-cmd CMD, or give the server's port",
                args.run.url.as_deref().unwrap_or_default()
            );
        }
        return Ok(None);
    };
    let timeout = crate::run::positive_secs("--server-ready-timeout", args.server_ready_timeout)?;
    Ok(Some(ServerSpec::new(
        cmd,
        args.run.url.as_deref(),
        timeout,
    )?))
}

/// Runs `agentx-host sweep`.
pub(crate) fn main(args: &SweepArgs, argv: Vec<String>) -> anyhow::Result<ExitCode> {
    if let Some(dirs) = &args.compare {
        return compare_sweeps(args, &argv, dirs);
    }
    let concurrency = parse_concurrency(args.run.concurrency.as_deref().ok_or_else(|| {
        anyhow!("--concurrency is required: the sweep's points, e.g. --concurrency 1,4,16,64,256")
    })?)?;
    if args.run.overwrite {
        return Err(anyhow!(
            "--overwrite: a sweep keeps the points it finished; pass --resume to go on with the same sweep, or sweep into another --output-artifact-dir"
        ));
    }
    if args.run.dry_run {
        return Err(anyhow!(
            "--dry-run plans one run; pass it to `agentx-host run --concurrency N` for a point's plan"
        ));
    }
    let mut first = args.run.clone();
    first.concurrency = Some(concurrency[0].to_string());
    let server = server_spec(args)?;
    if let Some(spec) = &server {
        // Checked as a run against the first point's port; each point gets its own.
        first.url = Some(spec.url.fill(&[("port", "1")]));
    }
    let run = run_config(&first, argv)?;
    if let Some(trials) = args.run.trials {
        anyhow::bail!(
            "--trials {trials} on a sweep: a sweep's points are not repeated yet; repeat one point with `agentx-host run --trials {trials} --concurrency N`, or run the sweep again with another --random-seed and compare the two with `agentx-host compare`"
        );
    }
    if run.shard.is_some() {
        anyhow::bail!(
            "a sweep runs in one process: shard each point with `agentx-host run --shard I/N` (or srun) instead"
        );
    }
    let identity = IdentityEnv::try_parse_from(["agentx-host"])
        .map_err(|e| anyhow!("{e}"))?
        .identity;
    let idle_timeout = crate::run::positive_secs("--idle-timeout", args.idle_timeout)?;
    let dir = sweep_dir(args.run.output_artifact_dir.as_deref(), args.resume)?;
    if let Some((text, slo)) = &args.slo {
        slo_needs_are_met(text, slo, &run)?;
    }
    let find_max = args.find_max.then(|| FindMax {
        ladder: concurrency.clone(),
        resolution: args.find_max_resolution,
    });
    let cfg = SweepConfig {
        dir: dir.clone(),
        run,
        slo: args.slo.clone(),
        find_max,
        concurrency,
        resume: args.resume,
        gpus: args.run.gpus,
        idle_timeout,
        result_filename: args.result_filename.clone(),
        identity: Identity::resolve(&identity.into())?,
        server,
    };
    let out = run_sweep(&cfg, &Cancel::new());
    link_fresh_sweep(args.run.output_artifact_dir.as_deref(), &dir);
    let out = out?;
    let cell = |value: Option<f64>, decimals: usize| {
        value.map_or("-".into(), |v| format!("{v:.decimals$}"))
    };
    outln!(
        "{:>6}  {:<9}  {:>8}  {:>8}  {:>12}  {:>10}  {:>10}  {:>8}  valid",
        "conc",
        "status",
        "ok",
        "failed",
        "tok/s",
        "ttft p90",
        "itl p50",
        "tok/s/u"
    );
    for point in &out.sweep.points {
        let status = match point.status {
            PointStatus::Completed => "completed",
            PointStatus::Resumed => "resumed",
            PointStatus::Failed => "failed",
        };
        outln!(
            "{:>6}  {:<9}  {:>8}  {:>8}  {:>12}  {:>10}  {:>10}  {:>8}  {}",
            point.concurrency,
            status,
            point.requests_ok,
            point.requests_failed,
            cell(point.total_token_throughput, 0),
            cell(point.ttft_ms.p90, 1),
            cell(point.itl_ms.p50, 2),
            cell(point.interactivity, 1),
            if point.valid { "yes" } else { "no" }
        );
        if let Some(server) = &point.server {
            let ended = server
                .exit
                .as_ref()
                .map_or("running".into(), std::string::ToString::to_string);
            let ready = server.ready_s.map_or("never ready".into(), |secs| {
                format!("ready after {secs:.1} s")
            });
            outln!(
                "        server pid {} on port {}, {ready}, {ended}",
                server.pid,
                server.port
            );
        }
        if let Some(error) = &point.error {
            outln!("        {error}");
        }
    }
    print_slo(&out.sweep);
    outln!("sweep         {}", dir.display());
    for file in &out.files {
        if let Some(name) = file.file_name() {
            outln!("  {}", name.to_string_lossy());
        }
    }
    if out.interrupted {
        errln!("interrupted: the finished points are kept; rerun with --resume to run the rest");
    }
    Ok(ExitCode::from(out.code()))
}

/// `sweep --compare A B`: the two sweeps overlaid (`sweep_compare.*`) and the same verdicts as
/// `agentx-host compare`, per common concurrency.
fn compare_sweeps(
    args: &SweepArgs,
    argv: &[String],
    dirs: &[std::path::PathBuf],
) -> anyhow::Result<ExitCode> {
    let out = &args
        .run
        .output_artifact_dir
        .clone()
        .unwrap_or_else(|| crate::run::artifact_dir::DEFAULT_PARENT.into());
    let files = crate::export::sweep_views::write_compare(&dirs[0], &dirs[1], out)?;
    let comparison = crate::export::sweep_views::compare(
        &crate::export::sweep_views::read_sweep(&dirs[0])?,
        &crate::export::sweep_views::read_sweep(&dirs[1])?,
        &dirs[0].display().to_string(),
        &dirs[1].display().to_string(),
    );
    out!("{}", comparison.csv());
    for note in &comparison.notes {
        errln!("note: {note}");
    }
    // The same verdicts as `agentx-host compare`, per common concurrency.
    let given_level = argv
        .iter()
        .any(|arg| arg.starts_with("--confidence"))
        .then_some(args.run.confidence);
    let verdicts = crate::run::compare::compare(&dirs[0], &dirs[1], given_level)?;
    for line in verdicts.lines() {
        outln!("{line}");
    }
    let mut files = files;
    files.extend(super::compare::write(&verdicts, out)?);
    outln!("compare       {}", out.display());
    for file in &files {
        if let Some(name) = file.file_name() {
            outln!("  {}", name.to_string_lossy());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses `--slo` objectives whose figures the runs would not measure, naming the flag to add.
fn slo_needs_are_met(
    text: &str,
    slo: &crate::metrics::slo::SloSet,
    run: &crate::run::RunConfig,
) -> anyhow::Result<()> {
    for flag in slo.needs() {
        let (given, fix) = match flag {
            "--goodput" => (
                run.goodput.is_some(),
                "add --goodput with the per-request objectives",
            ),
            "--session-slo" => (
                run.session_slo.is_some(),
                "add --session-slo with the objectives a session meets, e.g. \"ttft_p90:2000 output_speed:20\"",
            ),
            _ => (run.gpus.is_some(), "add --gpus N"),
        };
        if !given {
            anyhow::bail!(
                "--slo {text:?} names {}, which only a run with {flag} measures: {fix}",
                slo.naming(flag).join(", ")
            );
        }
    }
    Ok(())
}

/// Each point's verdict under --slo, and the --find-max answer.
fn print_slo(sweep: &crate::export::sweep::Sweep) {
    let Some(slo_report) = &sweep.slo else { return };
    let verdicts: Vec<String> = slo_report
        .points
        .iter()
        .map(|point| {
            format!(
                "{} {}",
                point.concurrency,
                if point.meets { "meets" } else { "fails" }
            )
        })
        .collect();
    outln!("slo           {}: {}", slo_report.slo, verdicts.join(", "));
    if let Some(found) = &slo_report.find_max {
        match (found.max_concurrency, found.bracketed) {
            (Some(max), true) => outln!(
                "find-max      concurrency {max} meets the SLO; {} does not, bound by {} (resolution {} lanes)",
                found.first_failing.map_or("-".into(), |x| x.to_string()),
                found.bound_by_text(),
                found.resolution
            ),
            (Some(max), false) => outln!(
                "find-max      concurrency {max}, the last point given, meets the SLO: the maximum may lie above it; extend --concurrency"
            ),
            (None, _) => outln!(
                "find-max      not even concurrency {} meets the SLO; start --concurrency lower",
                found.order.first().map_or("-".into(), std::string::ToString::to_string)
            ),
        }
        if let (Some(max), Some(jobs)) = (found.max_concurrency, found.jobs_per_hour) {
            let per_gpu = found.agents_per_gpu.map_or(String::new(), |agents| {
                format!(", {agents:.2} agents per GPU")
            });
            outln!("max-agents    {max} concurrent agents: {jobs:.1} jobs/h{per_gpu}");
        }
        if let Some(best) = &found.max_goodput {
            outln!(
                "max-goodput   concurrency {} has the most goodput of the points that meet the SLO: {:.2} good requests/s",
                best.concurrency,
                best.goodput
            );
        }
    }
}

/// Parses `--concurrency 1,4,16`: positive, strictly increasing, not empty.
fn parse_concurrency(text: &str) -> anyhow::Result<Vec<u32>> {
    let mut out: Vec<u32> = Vec::new();
    for part in text.split(',') {
        let point = part.trim();
        if point.is_empty() {
            continue;
        }
        let lanes: u32 = point
            .parse()
            .ok()
            .filter(|&lanes| lanes > 0)
            .ok_or_else(|| {
                anyhow!("--concurrency {text:?}: {point:?} is not a positive number of lanes")
            })?;
        out.push(lanes);
    }
    if out.is_empty() {
        bail!("--concurrency is empty: a sweep needs its points, e.g. --concurrency 1,4,16,64,256");
    }
    if out.windows(2).any(|w| w[1] <= w[0]) {
        let mut sorted = out.clone();
        sorted.sort_unstable();
        sorted.dedup();
        let list = sorted
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        bail!(
            "--concurrency {text:?} must list each point once, in increasing order (the sweep runs them in order); pass --concurrency {list}"
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_lists_are_positive_and_increasing() {
        assert_eq!(parse_concurrency("1,4, 16").unwrap(), vec![1, 4, 16]);
        let e = parse_concurrency("4,1,16").unwrap_err().to_string();
        assert!(e.contains("pass --concurrency 1,4,16"), "{e}");
        let e = parse_concurrency("4,4").unwrap_err().to_string();
        assert!(e.contains("each point once"), "{e}");
        assert!(parse_concurrency("")
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert!(parse_concurrency("1,x")
            .unwrap_err()
            .to_string()
            .contains("\"x\""));
        assert!(parse_concurrency("0").is_err());
    }
}
