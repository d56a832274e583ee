//! A concurrency sweep: one run per point, in order, each a complete run directory `conc_<N>/`
//! (manifest, records, exports, plots and the InferenceX report `<result-filename>_conc<N>.json`),
//! then the sweep summary (`export::sweep`) and its views (`export::sweep_views`: the Pareto PNG
//! and report.html). Between points the sweep waits until every scraped
//! server is idle (nothing running or waiting). Every point gets its own run id, hence its own
//! cache-bust markers, so points do not share KV-cache keys without restarting the engines.
//!
//! Nothing finished is lost: the summary is rewritten after every point; a point that fails is
//! recorded with why and the sweep goes on (the exit code is 1 at the end); an interrupt stops the
//! sweep after the current point. `--resume` keeps the points a previous invocation finished with
//! the same inputs (flags, seed, scenario sha256, dataset digest) and refuses a changed input,
//! naming it; without `--resume` a directory that already holds a point's run is refused.

use crate::scenario::ReplaySetting;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use super::find_max::{FindMax, Step};
use super::server_cmd::{self, Server, ServerError, ServerSpec};
use super::{execute, input_ids, Cancel, RunConfig, RunOutcome};
use crate::export::bmk::{self, Identity, Layout};
use crate::export::manifest::{Manifest, ServerInfo};
use crate::export::sweep::{
    FindMaxAnswer, Point, PointStatus, SloPoint, SloReport, Sweep, SweepInputs, Tail, SCHEMA,
};
use crate::metrics::scrape_log::{EndpointLog, ServerSnapshot};
use crate::metrics::slo::SloSet;
use crate::scenario::types::Value;

/// A sweep: the run every point shares, and what differs.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// The run of every point (its concurrency and artifact directory are replaced per point).
    pub run: RunConfig,
    /// The points, strictly increasing.
    pub concurrency: Vec<u32>,
    /// The sweep's directory (`conc_<N>/` below it).
    pub dir: PathBuf,
    /// `--resume`: points already done in `dir` are kept, not rerun.
    pub resume: bool,
    /// `--gpus`: the GPUs serving each point, for the per-GPU figures.
    pub gpus: Option<u32>,
    /// How long to wait for the servers to become idle between points.
    pub idle_timeout: Duration,
    /// `<result-filename>_conc<N>.json`.
    pub result_filename: String,
    /// Who was benchmarked, for each point's report (from InferenceX's environment variables).
    pub identity: Identity,
    /// `--server-cmd`: a fresh server for every point.
    pub server: Option<ServerSpec>,
    /// `--slo`: the objectives each point is judged by (as given, and parsed).
    pub slo: Option<(String, SloSet)>,
    /// `--find-max`: search for the highest concurrency that meets the SLO, the concurrency list
    /// its ladder.
    pub find_max: Option<FindMax>,
}

/// What a sweep did.
#[derive(Debug)]
pub struct SweepOutcome {
    /// The sweep's state as `sweep.json` holds it.
    pub sweep: Sweep,
    /// Every summary file written.
    pub files: Vec<PathBuf>,
    /// Stopped by an interrupt before the last point.
    pub interrupted: bool,
}

impl SweepOutcome {
    /// 0 when every point completed, else 1.
    pub fn code(&self) -> u8 {
        u8::from(self.interrupted || self.sweep.points.iter().any(|p| !p.done()))
    }
}

/// The flags whose value a point replaces or that only the sweep has.
const SWEEP_ONLY: [&str; 5] = [
    "--idle-timeout",
    "--result-filename",
    "--compare",
    "--server-cmd",
    "--server-ready-timeout",
];

/// The `run` command line of one point, from the sweep's: `run` instead of `sweep`, the point's
/// concurrency and directory, the sweep's seed, the URL of the point's server (`--server-cmd`), and
/// without the sweep's own flags.
fn point_argv(
    sweep_argv: &[String],
    concurrency: u32,
    dir: &Path,
    seed: u64,
    url: Option<&str>,
) -> Vec<String> {
    let mut out = vec!["run".to_string()];
    let mut args = sweep_argv.iter().skip(1).peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (arg.as_str(), None),
        };
        let takes_value = SWEEP_ONLY.contains(&flag)
            || (flag == "--url" && url.is_some())
            || matches!(
                flag,
                "--concurrency" | "--output-artifact-dir" | "--artifact-dir" | "--random-seed"
            );
        if flag == "--resume" {
            continue;
        }
        if takes_value {
            if inline.is_none() {
                args.next();
                if flag == "--compare" {
                    args.next();
                }
            }
            continue;
        }
        out.push(arg.clone());
    }
    if let Some(given_url) = url {
        out.extend(["--url".to_string(), given_url.to_string()]);
    }
    out.extend([
        "--concurrency".to_string(),
        concurrency.to_string(),
        "--output-artifact-dir".to_string(),
        dir.display().to_string(),
        "--random-seed".to_string(),
        seed.to_string(),
    ]);
    out
}

/// The sweep's inputs as `--resume` compares them: the command line without `--resume`.
fn inputs_argv(argv: &[String]) -> Vec<String> {
    argv.iter().filter(|a| *a != "--resume").cloned().collect()
}

/// A command line as `--resume` compares it: without `--random-seed` (compared on its own, since a
/// sweep resumed without one goes on with the recorded seed) and `--server-ready-timeout` (how long
/// to wait for a server is no input of a measurement: a resume may wait longer).
fn compared(argv: &[String]) -> Vec<&String> {
    const SKIPPED: [&str; 2] = ["--random-seed", "--server-ready-timeout"];
    let mut out = Vec::with_capacity(argv.len());
    let mut skip = false;
    for a in argv {
        if std::mem::take(&mut skip) {
            continue;
        }
        if SKIPPED.contains(&a.as_str()) {
            skip = true;
        } else if !SKIPPED.iter().any(|f| a.starts_with(&format!("{f}="))) {
            out.push(a);
        }
    }
    out
}

/// What differs between two sweeps' inputs, for the refusal message.
fn differences(old: &SweepInputs, new: &SweepInputs) -> Vec<String> {
    let mut differences = Vec::new();
    if compared(&old.argv) != compared(&new.argv) {
        differences.push(format!(
            "the command line (was `{}`, now `{}`)",
            old.argv.join(" "),
            new.argv.join(" ")
        ));
    }
    if old.seed != new.seed {
        differences.push(format!("the seed (was {}, now {})", old.seed, new.seed));
    }
    if old.scenario_sha256 != new.scenario_sha256 {
        differences.push(format!(
            "the scenario (was sha256:{}, now sha256:{})",
            old.scenario_sha256, new.scenario_sha256
        ));
    }
    if old.dataset_key != new.dataset_key {
        differences.push(format!(
            "the dataset (digest was {}, now {})",
            old.dataset_key, new.dataset_key
        ));
    }
    if old.gpus != new.gpus {
        differences.push(format!("--gpus (was {:?}, now {:?})", old.gpus, new.gpus));
    }
    if old.result_filename != new.result_filename {
        differences.push(format!(
            "--result-filename (was {}, now {})",
            old.result_filename, new.result_filename
        ));
    }
    differences
}

/// The seed the run config names, if any.
pub(super) fn given_seed(cfg: &RunConfig) -> Option<u64> {
    crate::scenario::last_named(&cfg.plan.settings, ReplaySetting::RandomSeed.name()).and_then(
        |s| match s.value {
            Value::Integer(i) => u64::try_from(i).ok(),
            _ => None,
        },
    )
}

/// Runs the sweep.
pub fn run_sweep(cfg: &SweepConfig, cancel: &Cancel) -> anyhow::Result<SweepOutcome> {
    let previous = Sweep::read(&cfg.dir)?;
    // A drawn seed is not an input: a resumed sweep reuses the one it recorded, and only a seed
    // given now must agree with it.
    let seed = match (given_seed(&cfg.run), &previous, cfg.resume) {
        (Some(s), _, _) => s,
        (None, Some(old), true) => {
            tracing::info!(
                seed = old.inputs.seed,
                "--resume: no --random-seed given; the sweep goes on with its recorded seed"
            );
            old.inputs.seed
        }
        (None, _, _) => super::draw_seed(),
    };
    let mut base = cfg.run.clone();
    crate::scenario::set_explicit(
        &mut base.plan.settings,
        ReplaySetting::RandomSeed,
        Value::Integer(seed as i64),
    );
    let ids = input_ids(&base)?;
    let inputs = SweepInputs {
        argv: inputs_argv(&cfg.run.argv),
        concurrency: cfg.concurrency.clone(),
        seed,
        scenario_sha256: ids.scenario_sha256,
        dataset_key: ids.dataset_key,
        gpus: cfg.gpus,
        result_filename: cfg.result_filename.clone(),
    };
    let conc_dir = |concurrency: u32| format!("conc_{concurrency}");
    match (&previous, cfg.resume) {
        (Some(old), true) => {
            let changed = differences(&old.inputs, &inputs);
            if !changed.is_empty() {
                bail!(
                    "--resume: {} holds a sweep with other inputs: {}; rerun with the same inputs, or sweep into another --output-artifact-dir",
                    cfg.dir.display(),
                    changed.join("; ")
                );
            }
        }
        _ => {
            if let Some(concurrency) = cfg.concurrency.iter().find(|&&concurrency| {
                cfg.dir
                    .join(conc_dir(concurrency))
                    .join(super::MANIFEST_FILE)
                    .exists()
            }) {
                bail!(
                    "{} already holds a run of concurrency {concurrency} ({}); pass --resume to keep the finished points of the same sweep, or choose another --output-artifact-dir",
                    cfg.dir.display(),
                    cfg.dir.join(conc_dir(*concurrency)).display()
                );
            }
        }
    }
    // The sweep directory, opened once: the summary, its views, the points' reports and the
    // moved-aside partial runs are written beneath it.
    let root = crate::fsio::Root::create(&cfg.dir).map_err(|e| {
        anyhow!(
            "cannot create the sweep directory {} (--output-artifact-dir): {e}",
            cfg.dir.display()
        )
    })?;
    let mut sweep = Sweep {
        schema: SCHEMA.into(),
        inputs,
        points: Vec::new(),
        slo: cfg.slo.as_ref().map(|(text, _)| SloReport {
            slo: text.clone(),
            points: Vec::new(),
            find_max: None,
        }),
    };
    let servers = metrics_urls(&cfg.run);
    let _signals = cfg.run.signals.then(|| SweepSignals::forward(cancel));
    let mut pass = Pass {
        cfg,
        previous: previous.as_ref().filter(|_| cfg.resume),
        base: &base,
        seed,
        root: &root,
        servers: &servers,
        cancel,
        ran_one: false,
    };
    let mut ladder = cfg.concurrency.iter().copied();
    let mut verdicts = std::collections::BTreeMap::new();
    let mut order = Vec::new();
    let mut interrupted = false;
    loop {
        let concurrency = match &cfg.find_max {
            Some(f) => match f.next(&verdicts) {
                Step::Run(concurrency) => concurrency,
                Step::Done { answer, bracketed } => {
                    let found = find_max_answer(f, answer, bracketed, &order, &sweep, cfg.gpus);
                    sweep
                        .slo
                        .as_mut()
                        .expect("--find-max has an --slo")
                        .find_max = Some(found);
                    break;
                }
            },
            None => match ladder.next() {
                Some(concurrency) => concurrency,
                None => break,
            },
        };
        let Some(point) = pass.point(concurrency, &mut sweep)? else {
            interrupted = true;
            break;
        };
        order.push(concurrency);
        if let (Some((_, slo)), Some(report)) = (&cfg.slo, sweep.slo.as_mut()) {
            let judged = judge(slo, &cfg.dir.join(&point.dir), point.done());
            verdicts.insert(concurrency, judged.meets);
            report.points.retain(|p| p.concurrency != concurrency);
            report.points.push(SloPoint {
                concurrency,
                meets: judged.meets,
                figures: judged.figures,
                goodput: judged.goodput,
                missed: judged.missed,
            });
            report.points.sort_by_key(|p| p.concurrency);
        }
        sweep.points.retain(|p| p.concurrency != concurrency);
        sweep.points.push(point);
        sweep.points.sort_by_key(|p| p.concurrency);
        write(&sweep, &root)?;
        if cancel.interrupts() > 0 {
            interrupted = true;
            break;
        }
    }
    let files = write(&sweep, &root)?;
    Ok(SweepOutcome {
        sweep,
        files,
        interrupted,
    })
}

/// The `--find-max` answer once the search is done: the highest passing concurrency, the first
/// failing one and the objectives it missed, and the jobs and agents per GPU at the answer.
fn find_max_answer(
    search: &FindMax,
    answer: Option<u32>,
    bracketed: bool,
    order: &[u32],
    sweep: &Sweep,
    gpus: Option<u32>,
) -> FindMaxAnswer {
    let report = sweep.slo.as_ref().expect("--find-max has an --slo");
    let first_failing = report.points.iter().find(|p| !p.meets);
    let at_answer = answer.and_then(|n| sweep.points.iter().find(|p| p.concurrency == n));
    FindMaxAnswer {
        max_concurrency: answer,
        bracketed,
        first_failing: first_failing.map(|p| p.concurrency),
        resolution: search.resolution_at(answer.unwrap_or(0)),
        order: order.to_vec(),
        max_goodput: report.max_goodput(),
        bound_by: first_failing.map(|p| p.missed.clone()).unwrap_or_default(),
        jobs_per_hour: at_answer.and_then(|p| p.jobs_per_hour),
        agents_per_gpu: answer
            .zip(gpus)
            .map(|(n, gpus)| f64::from(n) / f64::from(gpus.max(1))),
    }
}

/// A point's verdict under `--slo`, from the aggregate and the run summary its run left (a point
/// that did not complete does not meet it).
fn judge(slo: &SloSet, dir: &Path, done: bool) -> crate::metrics::slo::Judged {
    let aggregate = std::fs::read(dir.join(crate::export::bmk::PROFILE_AIPERF))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let summary = crate::export::run_summary::RunSummary::read_dir(dir)
        .ok()
        .map(|run| run.summary);
    let mut judgement = slo.judge(aggregate.as_ref(), summary.as_ref());
    if !done {
        judgement.meets = false;
        judgement
            .missed
            .insert(0, "the run did not complete".into());
    }
    judgement
}

/// What every point of one sweep invocation shares.
struct Pass<'a> {
    cfg: &'a SweepConfig,
    /// The sweep a `--resume` goes on with.
    previous: Option<&'a Sweep>,
    base: &'a RunConfig,
    seed: u64,
    root: &'a crate::fsio::Root,
    servers: &'a [String],
    cancel: &'a Cancel,
    ran_one: bool,
}

impl Pass<'_> {
    /// The point of concurrency `concurrency`: kept from the sweep resumed, or run now. `None`:
    /// interrupted before it ran. A point that cannot wait for idle servers is recorded as failed
    /// (and the sweep summary written).
    fn point(&mut self, concurrency: u32, sweep: &mut Sweep) -> anyhow::Result<Option<Point>> {
        let cfg = self.cfg;
        let rel = format!("conc_{concurrency}");
        let dir = cfg.dir.join(&rel);
        if let Some(point) = self
            .previous
            .and_then(|s| {
                s.points
                    .iter()
                    .find(|point| point.concurrency == concurrency && point.done())
            })
            .filter(|_| dir.join(crate::export::run_summary::RUN_SUMMARY).exists())
        {
            tracing::info!("sweep: concurrency {concurrency} finished before; kept (--resume)");
            let mut point = point.clone();
            point.status = PointStatus::Resumed;
            return Ok(Some(point));
        }
        if self.cancel.interrupts() > 0 {
            return Ok(None);
        }
        // A point's fresh server has nothing left to finish.
        if self.ran_one && !self.servers.is_empty() && cfg.server.is_none() {
            if let Err(e) = wait_idle(self.servers, cfg.idle_timeout, self.cancel) {
                tracing::error!("sweep: concurrency {concurrency} not run: {e}");
                let failed = Point::failed(concurrency, rel, e);
                sweep
                    .points
                    .retain(|point| point.concurrency != concurrency);
                sweep.points.push(failed.clone());
                write(sweep, self.root)?;
                return Ok(Some(failed));
            }
        }
        if dir.exists() {
            // A failed point of a resumed sweep: its partial run is moved aside, not overwritten.
            let aside_rel = format!("{rel}.failed-{}", super::fresh_id());
            let aside = cfg.dir.join(&aside_rel);
            self.root
                .rename(&rel, &aside_rel)
                .map_err(|e| anyhow!("cannot move the unfinished {} aside: {e}", dir.display()))?;
            tracing::warn!(
                "sweep: the unfinished run of concurrency {concurrency} was moved to {}",
                aside.display()
            );
        }
        tracing::info!("sweep: concurrency {concurrency} into {}", dir.display());
        let mut run = self.base.clone();
        crate::scenario::set_explicit(
            &mut run.plan.settings,
            ReplaySetting::Concurrency,
            Value::Integers(vec![i64::from(concurrency)]),
        );
        run.output = super::artifact_dir::OutputDir::Given(dir.clone());
        run.run_id = None;
        run.argv = point_argv(&cfg.run.argv, concurrency, &dir, self.seed, None);
        // The sweep forwards the signals itself (below), between points too.
        run.signals = false;
        self.ran_one = true;
        let point = match &cfg.server {
            Some(spec) => served_point(spec, concurrency, rel, run, cfg, self.root, self.cancel),
            None => run_point(concurrency, rel, &run, cfg, self.root, self.cancel),
        };
        if let Some(e) = &point.error {
            tracing::error!("sweep: concurrency {concurrency} failed: {e}");
        }
        Ok(Some(point))
    }
}

/// The summary and its views (the Pareto PNG and report.html; a view that cannot be written is a
/// warning), after every point.
fn write(sweep: &Sweep, dir: &crate::fsio::Root) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = sweep.write(dir)?;
    files.extend(crate::export::sweep_views::write_views(dir, sweep));
    Ok(files)
}

/// One point's run, and its row.
fn run_point(
    concurrency: u32,
    rel: String,
    run: &RunConfig,
    cfg: &SweepConfig,
    root: &crate::fsio::Root,
    cancel: &Cancel,
) -> Point {
    match execute(run, cancel) {
        Ok(out) => point_of(concurrency, rel, &out, cfg, root),
        Err(e) => Point::failed(concurrency, rel, format!("{e:#}")),
    }
}

/// One point against a server started for it (`--server-cmd`): a free port, the server, its
/// readiness, the run, the stop of the server's group; the server in the point's row and manifest.
/// A server that does not become ready fails this point only.
fn served_point(
    spec: &ServerSpec,
    concurrency: u32,
    rel: String,
    mut run: RunConfig,
    cfg: &SweepConfig,
    root: &crate::fsio::Root,
    cancel: &Cancel,
) -> Point {
    let log = format!("{rel}/{}", server_cmd::LOG_FILE);
    let started = server_cmd::free_port().and_then(|port| {
        let (command, url) = spec.fill(port, concurrency);
        let base = crate::client::base_url(&url, &run.plan.client.endpoint).map_err(|e| {
            ServerError::Template {
                flag: "--url",
                text: spec.url.text().to_owned(),
                why: format!("on port {port}: {e}"),
            }
        })?;
        root.subdir(&rel).map_err(|source| ServerError::Log {
            path: root.join(&rel),
            source,
        })?;
        Server::start(
            &command,
            port,
            &base.url,
            &root.join(&log),
            server_cmd::LOG_FILE,
        )
    });
    let mut server = match started {
        Ok(s) => s,
        Err(e) => return Point::failed(concurrency, rel, e.to_string()),
    };
    let url = server.info().url.clone();
    run.plan.url = Some(url.clone());
    run.plan.client.url.clone_from(&url);
    // The point's run names the sweep's seed (set in `run_sweep`).
    let seed = given_seed(&run).unwrap_or_default();
    run.argv = point_argv(
        &cfg.run.argv,
        concurrency,
        &cfg.dir.join(&rel),
        seed,
        Some(&url),
    );
    if let Err(e) = server.wait_ready(&run.plan.client, spec.ready_timeout, cancel) {
        let mut p = Point::failed(concurrency, rel, e.to_string());
        p.server = Some(server.stop(server_cmd::STOP_GRACE));
        return p;
    }
    let mut p = run_point(concurrency, rel.clone(), &run, cfg, root, cancel);
    let died = server.exited();
    let info = server.stop(server_cmd::STOP_GRACE);
    if died {
        let status = info
            .exit
            .as_ref()
            .map_or_else(String::new, agentx_export::manifest::ServerExit::status);
        let why = format!("the server exited during the run ({status}); see {log}");
        p.status = PointStatus::Failed;
        p.error = Some(match p.error.take() {
            Some(e) => format!("{why}; {e}"),
            None => why,
        });
    }
    record_server(root, &rel, &info);
    p.server = Some(info);
    p
}

/// Adds the point's server to its run manifest (a run that failed before its directory opened
/// has none).
fn record_server(root: &crate::fsio::Root, rel: &str, info: &ServerInfo) {
    let dir = root.join(rel);
    if !dir.join(super::MANIFEST_FILE).exists() {
        return;
    }
    let mut manifest = match Manifest::read_dir(&dir) {
        Ok(manifest) => manifest,
        Err(e) => {
            tracing::warn!("the server is not recorded in the point's manifest: {e}");
            return;
        }
    };
    manifest.server = Some(info.clone());
    let rel = format!("{rel}/{}", super::MANIFEST_FILE);
    if let Err(e) = root.write_atomic(&rel, manifest.to_json_pretty().as_bytes()) {
        tracing::warn!("cannot write {}: {e}", root.join(&rel).display());
    }
}

/// Ctrl-C and SIGTERM for the whole sweep, so an interrupt between points or while a point's server
/// starts is seen (a point's run then listens for none of its own). The handlers are installed
/// before [`SweepSignals::forward`] returns; the forwarding ends when this is dropped.
struct SweepSignals {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SweepSignals {
    fn forward(cancel: &Cancel) -> SweepSignals {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, installed) = std::sync::mpsc::channel::<()>();
        let cancel = cancel.clone();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                let _ = ready.send(());
                return;
            };
            rt.block_on(async move {
                #[cfg(unix)]
                {
                    use tokio::signal::unix::{signal, SignalKind};
                    // Installing a handler once keeps it for the process's life.
                    let _ = signal(SignalKind::interrupt());
                    let _ = signal(SignalKind::terminate());
                }
                let _ = ready.send(());
                tokio::select! {
                    () = super::forward_signals(cancel) => {}
                    _ = stopped => {}
                }
            });
        });
        let _ = installed.recv();
        SweepSignals {
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for SweepSignals {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A point's row from its run outcome and its InferenceX report (written next to the run).
fn point_of(
    concurrency: u32,
    rel: String,
    out: &RunOutcome,
    cfg: &SweepConfig,
    root: &crate::fsio::Root,
) -> Point {
    let (Some(replay), Some(summary)) = (&out.replay, &out.summary) else {
        return Point::failed(concurrency, rel, "the run produced no outcome".into());
    };
    let mut point = Point::failed(concurrency, rel.clone(), String::new());
    point.error = None;
    point.status = PointStatus::Completed;
    if replay.stop.cancelled() {
        point.status = PointStatus::Failed;
        point.error = Some(format!(
            "the run stopped early ({}){}",
            replay.stop.as_str(),
            replay
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    } else if out.code == 2 {
        point.status = PointStatus::Failed;
        point.error = Some("an export could not be written (see the log)".into());
    }
    point.run_id = Some(out.run_id.clone());
    point.requests_ok = summary.requests_ok;
    point.requests_failed = summary.requests_failed;
    point.context_overflows = summary.context_overflows;
    let total = summary.input_token_throughput + summary.output_token_throughput;
    let some = |value: f64| (summary.requests_ok > 0).then_some(value);
    point.total_token_throughput = some(total);
    point.output_token_throughput = some(summary.output_token_throughput);
    if let Some(gpus) = cfg.gpus.filter(|gpus| *gpus > 0) {
        point.total_token_throughput_per_gpu = point
            .total_token_throughput
            .map(|tput| tput / f64::from(gpus));
        point.output_token_throughput_per_gpu = point
            .output_token_throughput
            .map(|tput| tput / f64::from(gpus));
    }
    if let Some(jobs) = &summary.jobs {
        point.jobs_ok = Some(jobs.ok);
        point.jobs_partial = Some(jobs.partial_start + jobs.partial_end);
        point.jobs_per_hour = Some(jobs.jobs_per_hour);
        point.jobs_per_hour_per_gpu = jobs.jobs_per_hour_per_gpu;
        point.jobs_per_hour_per_user = jobs.jobs_per_hour_per_user;
    }
    let tail = |dist: &Option<crate::metrics::Dist>| Tail {
        p50: dist.as_ref().map(|d| d.p50),
        p90: dist.as_ref().map(|d| d.p90),
        p99: dist.as_ref().map(|d| d.p99),
    };
    point.ttft_ms = tail(&summary.ttft_ms);
    point.itl_ms = tail(&summary.itl_ms);
    point.e2e_ms = tail(&summary.latency_ms);
    point.interactivity = point.itl_ms.p50.filter(|x| *x > 0.0).map(|x| 1000.0 / x);
    point.valid = out.valid();
    point
        .invalid_reasons
        .clone_from(&out.submission_invalid_reasons);
    // The point's InferenceX report (nested layout), named as InferenceX names it.
    let name = format!("{}_conc{concurrency}.json", cfg.result_filename);
    match bmk::render_dir(
        &out.dir,
        &cfg.identity,
        None,
        &crate::dataset::OpenOptions::default(),
        Layout::Nested,
    ) {
        Ok(json) => {
            let report_json: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
            let cache = &report_json["server_metrics"]["cache"];
            point.server_cache_hit_rate = cache["overall_cache_hit_rate"]
                .as_f64()
                .or_else(|| cache["gpu_cache_hit_rate"].as_f64());
            let report = format!("{rel}/{name}");
            match root.write_atomic(&report, format!("{json}\n").as_bytes()) {
                Ok(_) => point.report = Some(report),
                Err(e) => tracing::warn!("cannot write {}: {e}", root.join(&report).display()),
            }
        }
        Err(e) => tracing::warn!("no report for concurrency {concurrency}: {e}"),
    }
    point
}

/// The `/metrics` URLs the sweep watches between points: the server's and `--server-metrics`'s.
fn metrics_urls(run: &RunConfig) -> Vec<String> {
    if run.no_server_metrics {
        return Vec::new();
    }
    let Some(url) = &run.plan.url else {
        // A demo sweep starts a fresh simulator for every point.
        return Vec::new();
    };
    std::iter::once(url)
        .chain(&run.server_metrics)
        .filter_map(|u| crate::client::scrape::metrics_url(u).ok())
        .collect()
}

/// Waits until every server reports nothing running and nothing waiting (vLLM, SGLang, llama.cpp,
/// ATOM gauges). A server whose page has none of those gauges counts as idle; one that cannot be
/// read is retried until the timeout.
fn wait_idle(urls: &[String], timeout: Duration, cancel: &Cancel) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    // One GET of a page takes at most 10 s.
    let reader = {
        let _g = rt.enter();
        crate::client::scrape::PageReader::new(Duration::from_secs(10))
    };
    let started = Instant::now();
    let mut logged = false;
    loop {
        let mut busy = Vec::new();
        for u in urls {
            match rt.block_on(reader.read(u)) {
                Ok(text) => {
                    let log = EndpointLog::from_pages(u, [(0, Some(text.as_str()))])
                        .map_err(|e| format!("{u}: {e}"));
                    match log {
                        Ok(log) => {
                            let snapshot = ServerSnapshot::of(std::iter::once(&log));
                            let (running, waiting) = (
                                snapshot.running.unwrap_or(0.0),
                                snapshot.waiting.unwrap_or(0.0),
                            );
                            if running + waiting > 0.0 {
                                busy.push(format!("{u}: {running} running, {waiting} waiting"));
                            }
                        }
                        Err(e) => busy.push(e),
                    }
                }
                Err(e) => busy.push(format!("{u}: {e}")),
            }
        }
        if busy.is_empty() {
            if logged {
                tracing::info!(
                    "sweep: servers idle after {:.1} s",
                    started.elapsed().as_secs_f64()
                );
            }
            return Ok(());
        }
        let last = busy.join("; ");
        if !logged {
            tracing::info!("sweep: waiting for the servers to become idle ({last})");
            logged = true;
        }
        if started.elapsed() >= timeout || cancel.interrupts() > 0 {
            return Err(format!(
                "the servers did not become idle within --idle-timeout {:.0} s ({last}); raise --idle-timeout or check the server",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(500).min(timeout));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_points_command_line_is_a_run_of_that_point() {
        let argv: Vec<String> = [
            "sweep",
            "--url",
            "http://h:8000",
            "--concurrency",
            "1,4",
            "--resume",
            "--gpus=8",
            "--output-artifact-dir",
            "out",
            "--result-filename",
            "r",
            "--benchmark-duration",
            "60",
        ]
        .map(String::from)
        .to_vec();
        let p = point_argv(&argv, 4, Path::new("out/conc_4"), 7, None);
        // --gpus is a run flag too: each point divides its own figures by it.
        assert_eq!(
            p.join(" "),
            "run --url http://h:8000 --gpus=8 --benchmark-duration 60 --concurrency 4 --output-artifact-dir out/conc_4 --random-seed 7"
        );
        assert!(!inputs_argv(&argv).contains(&"--resume".to_string()));
        // A point of a sweep with --server-cmd runs against its server's URL.
        let argv: Vec<String> = [
            "sweep",
            "--server-cmd",
            "serve --port {port}",
            "--server-ready-timeout=60",
            "--concurrency",
            "1,4",
        ]
        .map(String::from)
        .to_vec();
        let p = point_argv(
            &argv,
            1,
            Path::new("o/conc_1"),
            7,
            Some("http://127.0.0.1:5"),
        );
        assert_eq!(
            p.join(" "),
            "run --url http://127.0.0.1:5 --concurrency 1 --output-artifact-dir o/conc_1 --random-seed 7"
        );
        // --resume may wait longer for a server.
        let longer: Vec<String> = argv.iter().map(|a| a.replace("=60", "=900")).collect();
        assert_eq!(compared(&argv), compared(&longer));
        assert_ne!(compared(&argv), compared(&argv[..2]));
    }
}
