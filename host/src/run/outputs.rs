//! What a run writes: the artifact directory opened once every check passed, the manifest (before
//! the first request and at the end), and the last stage (the scenario's verdict, the summary, the
//! aiperf exports, the plot and the page, a sharded run's merge).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use serde_json::json;

use super::config::{value_json, RunConfig, RunOutcome};
use super::connect::Connected;
use super::plan::{prefix_stamps, Planned};
use super::prepare::Prepared;
use super::{artifact_dir, host_name, merge, rendezvous, shard_dir_name, MANIFEST_FILE};
use crate::dataset::AssistantMode;
use crate::export::manifest::{
    self, DatasetId, HttpInfo, Manifest, ScenarioId, SettingRow, ShardInfo, WarningRow,
};
use crate::export::run_summary::{RunSummary, RUN_SUMMARY};
use crate::fsio::Root;
use crate::metrics::Summary;
use crate::record::{scan_records, Clock, RecordSink};
use crate::replay::{self, ReplayOutcome};
use crate::scenario;

/// A run's artifact directory once it is open: the run's clock and the manifest (rewritten as the
/// run learns more).
pub(super) struct RunDir {
    /// The run's directory (`out` or, for a shard, its parent).
    pub run_dir: PathBuf,
    /// Where this process writes.
    pub out: PathBuf,
    pub art: Root,
    pub clock: Clock,
    pub manifest: Manifest,
    /// The manifest's rewrite when profiling begins, off the scheduler's thread.
    noting: std::sync::Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl RunDir {
    /// Opens the directory (only now that every check passed), starts the record sink (returned
    /// beside it) and the clock, and writes the manifest before the first request.
    pub fn open(
        cfg: &RunConfig,
        p: &Prepared,
        planned: &Planned,
        model: &str,
        member: Option<&rendezvous::Member>,
    ) -> anyhow::Result<(RunDir, RecordSink)> {
        let run_dir = cfg
            .output
            .resolve(&p.info.name, &planned.run_id, cfg.shard.is_some());
        let out = match &cfg.shard {
            Some(sh) => run_dir.join(shard_dir_name(sh.index)),
            None => run_dir.clone(),
        };
        let art = artifact_dir::open(&cfg.output, &run_dir, &out, cfg.overwrite)?;
        let sink = RecordSink::create(&art)?;
        let clock = Clock::start();
        let mut manifest = manifest_of(cfg, p, planned, clock.anchor_unix_ns());
        manifest.model = Some(model.to_string());
        if let (Some(sh), Some(m)) = (&cfg.shard, member) {
            manifest.shard = Some(ShardInfo {
                index: sh.index,
                count: sh.count,
                source: sh.source.to_string(),
                coordinator: sh.coordinator.clone(),
                host: host_name(),
                lanes: match &planned.tree {
                    Some(tp) => tp.own_lanes().iter().map(|l| l.lane).collect(),
                    None => planned.plan.lanes.iter().map(|l| l.lane).collect(),
                },
                pool: match &planned.tree {
                    Some(tp) => tp.owned_trees(),
                    None => planned.plan.pool.len(),
                },
                clock_offset_ns: m.clock_offset_ns,
                clock_rtt_ns: m.clock_rtt_ns as i64,
                rendezvous_s: m.joined_in.as_secs_f64(),
                rendezvous: None,
            });
            // What the merge's exports follow that the records do not say.
            manifest
                .extra
                .insert(SHARD_EXPORTS.into(), shard_exports(p, planned));
        }
        let d = RunDir {
            run_dir,
            out,
            art,
            clock,
            manifest,
            noting: Default::default(),
        };
        d.write_manifest()?;
        Ok((d, sink))
    }

    /// An artifact directory a run left (a run finished afterwards by [`super::finalize`]), with
    /// its manifest as read and the run's clock rebuilt from the recorded start.
    pub fn reopen(dir: &std::path::Path, manifest: Manifest) -> anyhow::Result<RunDir> {
        let art = Root::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        Ok(RunDir {
            run_dir: dir.to_path_buf(),
            out: dir.to_path_buf(),
            art,
            clock: Clock::from_anchor_unix_ns(manifest.started_unix_ns),
            manifest,
            noting: Default::default(),
        })
    }

    /// What the replay calls when profiling begins: the manifest is rewritten with the start
    /// (from a thread of its own: the scheduler does not wait on the disk), so a run killed later
    /// keeps its profiling window. [`RunDir::profiling_noted`] waits for the write.
    pub fn on_profiling(&self) -> Box<dyn FnOnce(u64) + Send> {
        let mut m = self.manifest.clone();
        let out = self.out.clone();
        let noting = self.noting.clone();
        Box::new(move |ns| {
            m.profiling_started_ns = Some(ns);
            let write = move || {
                let r = Root::open(&out)
                    .and_then(|r| r.write_atomic(MANIFEST_FILE, m.to_json_pretty().as_bytes()));
                if let Err(e) = r {
                    tracing::warn!(
                        "cannot note the start of profiling in {}: {e}",
                        out.join(MANIFEST_FILE).display()
                    );
                }
            };
            match std::thread::Builder::new()
                .name("agentx-manifest".into())
                .spawn(write)
            {
                Ok(h) => *noting.lock().unwrap_or_else(|p| p.into_inner()) = Some(h),
                Err(e) => tracing::warn!("cannot note the start of profiling: {e}"),
            }
        })
    }

    /// Waits until the manifest's profiling rewrite is on disk (before the run's own last write).
    pub fn profiling_noted(&self) {
        let h = self.noting.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Writes the manifest as it stands (atomically: readers see the old or the new one).
    pub fn write_manifest(&self) -> anyhow::Result<()> {
        self.art
            .write_atomic(MANIFEST_FILE, self.manifest.to_json_pretty().as_bytes())
            .with_context(|| format!("cannot write {}", self.out.join(MANIFEST_FILE).display()))?;
        Ok(())
    }
}

/// The manifest key of a shard's [`shard_exports`] (the merge reads it, and drops it).
pub(super) const SHARD_EXPORTS: &str = "shard_exports";

/// The scenario's rules for the exports, kept in a shard's manifest so that `merge` writes the
/// exports this run would have written in one process: the coverage rule and the warmup's phase
/// name.
fn shard_exports(p: &Prepared, planned: &Planned) -> serde_json::Value {
    json!({
        "coverage_required_ratio": planned
            .tree
            .as_ref()
            .map_or(crate::export::aiperf::COVERAGE_REQUIRED_RATIO, |t| t.rules.min_metric_coverage),
        "coverage_content": p.decisions.decides_settings,
        "warmup_phase_name": p.decisions.warmup_phase_name,
    })
}

fn assistant_mode(m: AssistantMode) -> &'static str {
    match m {
        AssistantMode::Live => "live",
        AssistantMode::Recorded => "recorded",
    }
}

/// The manifest of a run about to start: every input that pins it.
fn manifest_of(cfg: &RunConfig, p: &Prepared, planned: &Planned, started_unix: u64) -> Manifest {
    let rp = &cfg.plan;
    let resolved = &p.resolved;
    let lanes = match &planned.tree {
        Some(tp) => tp.own_lanes().iter().map(|l| json!(l)).collect(),
        None => planned.plan.lanes.iter().map(|l| json!(l)).collect(),
    };
    Manifest {
        argv: cfg.argv.clone(),
        cwd: std::env::current_dir().ok(),
        replay_of: cfg.replay_of.as_ref().map(|r| manifest::ReplayOf {
            run_id: r.run_id.clone(),
            manifest: r.manifest.clone(),
        }),
        run_id: planned.run_id.clone(),
        seed: planned.seed,
        seed_drawn: resolved.seed_drawn,
        scenario: scenario_id(p),
        dataset: dataset_id(p, cfg.num_dataset_entries),
        resolved_settings: resolved
            .settings
            .iter()
            .map(|s| SettingRow {
                name: s.name.clone(),
                value: value_json(&s.value),
                explicit: s.explicit,
            })
            .collect(),
        replay_settings: Some(p.applied_settings()),
        warnings: resolved
            .warnings
            .iter()
            .map(|w| WarningRow {
                setting: w.setting.clone(),
                message: w.message.clone(),
            })
            .collect(),
        not_acted_on: p.not_acted_on.clone(),
        resolve_invalid_reasons: resolved.invalid_reasons.clone(),
        slice_duration: cfg.slice_duration,
        goodput: cfg.goodput.as_ref().map(|g| g.spec()),
        session_goodput_share: cfg.goodput.as_ref().map(|_| cfg.session_goodput_share),
        http: Some(HttpInfo {
            correlation_header: rp.client.routing.correlation.as_str().to_string(),
            session_headers: rp
                .client
                .routing
                .names()
                .iter()
                .map(|n| n.to_string())
                .collect(),
            connection_reuse_strategy: rp.client.reuse.as_str().to_string(),
            tcp_user_timeout_ms: rp.client.tcp_user_timeout.map(|d| d.as_millis() as u64),
        }),
        concurrency: p.settings.concurrency,
        benchmark_duration_s: p.settings.duration.as_secs_f64(),
        assistant_mode: assistant_mode(rp.mode).to_string(),
        url: rp
            .url
            .clone()
            .unwrap_or_else(|| format!("builtin-simulator:{}", cfg.sim_preset)),
        lanes,
        host_version: env!("CARGO_PKG_VERSION").to_string(),
        wasmtime_version: scenario::WASMTIME_VERSION.to_string(),
        started_unix_ns: started_unix,
        ended_unix_ns: None,
        shard: None,
        trees: None,
        profiling_started_ns: None,
        profiling_ns: None,
        stop: None,
        finalized: None,
        model: None,
        server: None,
        extra: Default::default(),
    }
}

/// The scenario as the manifest and the run summary name it.
fn scenario_id(p: &Prepared) -> ScenarioId {
    ScenarioId {
        name: p.info.name.clone(),
        version: p.info.version.clone(),
        sha256: p.sc.hash().to_string(),
        source: p.sc.path().to_owned(),
    }
}

/// What the replay stage hands to the last one.
pub(super) struct Replayed {
    pub outcome: ReplayOutcome,
    pub tree_counts: Option<replay::sched::TreeCounts>,
    pub scrape_log: Option<crate::metrics::scrape_log::ScrapeLog>,
    /// The shard's end of the rendezvous, and shard 0's coordinator.
    pub finish: Option<rendezvous::Finish>,
    pub coordinator: Option<rendezvous::Coordinator>,
}

/// The scenario's verdict on the finished run: the 0.1.0 or the 0.2.0 validity call (with the
/// duration coverage), merged with the reasons `resolve` gave.
fn verdict(
    p: &Prepared,
    outcome: &ReplayOutcome,
    records: &[crate::record::RequestRecord],
) -> anyhow::Result<Vec<String>> {
    let t = &outcome.tally;
    let s = &p.settings;
    let mut inst = p.sc.instantiate()?;
    // Warmup responses count in the overflow rate (numerator and denominator): an overflow in
    // warmup is as much a sign of a too-short context as one in profiling.
    let base = scenario::types::Outcome {
        total_responses: t.requests + t.warmup_requests,
        context_overflows: t.context_overflows + t.warmup_overflows,
        failed: t.failed,
        cancelled: outcome.stop.cancelled(),
        unsafe_override: s.unsafe_override,
        overflow_rate_limit: s.rate_limit,
    };
    let reasons = if p.trees {
        // Coverage is measured against the configured duration (aiperf's
        // metric_duration_coverage); none when profiling never began.
        let prof = records
            .iter()
            .filter(|r| r.phase == crate::record::Phase::Profiling);
        let cov = outcome.profiling_ns.and_then(|(p0, _)| {
            crate::metrics::stats::Coverage::of(prof, p0, s.duration.as_nanos() as u64)
        });
        inst.tree_validity(
            base,
            scenario::TreeCoverage {
                profiling_seconds: s.duration.as_secs_f64(),
                ttft: cov.map(|c| c.ttft_ratio),
                itl: cov.map(|c| c.inter_token_latency_ratio),
                content: cov.map(|c| c.streaming_content_ratio),
            },
        )?
    } else {
        inst.validity(base)?
    };
    Ok(scenario::check::invalid_reasons(
        reasons,
        &p.resolved.invalid_reasons,
    ))
}

/// The last stage: the verdict, the manifest's end, the summary, the exports and plots, and a
/// sharded run's end (shard 0 waits for the others and merges). Each export failure is reported;
/// none loses the records.
pub(super) fn finish(
    cfg: &RunConfig,
    rt: &tokio::runtime::Runtime,
    p: &Prepared,
    planned: &Planned,
    conn: &Connected,
    (mut d, sink): (RunDir, RecordSink),
    r: Replayed,
) -> anyhow::Result<RunOutcome> {
    let written = sink.close()?;
    let records_path = d.out.join(crate::record::RECORDS_FILE);
    // Sized by the count written: a long run's records are the end's largest allocation.
    let mut records = Vec::with_capacity(written as usize);
    scan_records(&records_path, false, |r| records.push(r))
        .map_err(|e| anyhow!("reading back records: {e}"))?;
    d.manifest.trees = r.tree_counts.as_ref().map(|c| json!(c));
    d.manifest.ended_unix_ns = Some(d.clock.unix_ns(d.clock.now_ns()));
    let ended = Ended {
        outcome: r.outcome,
        records,
        written,
        url: if cfg.plan.demo {
            "builtin-simulator".to_string()
        } else {
            conn.ccfg.url.clone()
        },
        scrape_log: r.scrape_log,
    };
    let mut out = conclude(cfg, p, planned, &mut d, ended)?;
    if let (Some(fin), Some(sh)) = (r.finish, &cfg.shard) {
        let (merged, failed) = finish_shards(cfg, rt, sh, fin, r.coordinator, &mut d)?;
        out.files.extend(merged);
        if failed {
            out.code = 2;
        }
    }
    Ok(out)
}

/// What a run leaves for its last stage: how the replay ended, the records read back, and the
/// server metrics scraped.
pub(super) struct Ended {
    pub outcome: ReplayOutcome,
    pub records: Vec<crate::record::RequestRecord>,
    /// Records written to `records.jsonl`.
    pub written: u64,
    /// Where the requests went, as the summary names it.
    pub url: String,
    pub scrape_log: Option<crate::metrics::scrape_log::ScrapeLog>,
}

/// The end every run shares, reached in its own process or afterwards by [`super::finalize`]: the
/// verdict, the manifest's end, the summary and the exports; the exit code (2 when an export
/// failed, 1 when the run stopped early or is invalid under `--require-valid`).
pub(super) fn conclude(
    cfg: &RunConfig,
    p: &Prepared,
    planned: &Planned,
    d: &mut RunDir,
    e: Ended,
) -> anyhow::Result<RunOutcome> {
    let records_path = d.out.join(crate::record::RECORDS_FILE);
    let outcome = e.outcome;
    let reasons = verdict(p, &outcome, &e.records)?;
    d.manifest.profiling_ns = outcome.profiling_ns.map(|(a, b)| [a, b]);
    d.manifest.profiling_started_ns = outcome.profiling_ns.map(|(a, _)| a);
    d.manifest.stop = Some(outcome.stop.as_str().to_string());
    d.write_manifest()?;
    let mut summary = Summary::of(&e.records);
    if let Some(g) = &cfg.goodput {
        summary.goodput = Some(g.of_run(&e.records));
        let times = match &planned.tree {
            Some(tp) => tp.recorded_times(&e.records),
            None => super::plan::recorded_times(p.ds, &e.records),
        };
        let share = cfg.session_goodput_share;
        summary.sessions = Some(crate::metrics::sessions::figures(
            &e.records, g, share, &times,
        ));
    }
    let server_window = e.scrape_log.as_ref().map(|log| {
        let w = outcome.profiling_ns.unwrap_or((0, 0));
        crate::export::server_metrics::window_summary(log, w)
    });
    let summary_path = write_summary(
        cfg,
        p,
        planned,
        &e.url,
        d,
        &outcome,
        &reasons,
        e.written,
        (&summary, server_window),
    )?;
    let mut files = vec![
        records_path.clone(),
        d.out.join(MANIFEST_FILE),
        summary_path,
    ];
    let (written_files, export_failed) = exports(
        cfg,
        p,
        planned,
        d,
        &outcome,
        &reasons,
        &e.records,
        e.scrape_log.as_ref(),
    );
    files.extend(written_files);
    let code = if export_failed {
        2
    } else if outcome.stop.cancelled() || (cfg.require_valid && !reasons.is_empty()) {
        1
    } else {
        0
    };
    Ok(RunOutcome {
        code,
        dir: d.out.clone(),
        run_id: planned.run_id.clone(),
        concurrency: p.settings.concurrency,
        files,
        replay: Some(outcome),
        summary: Some(summary),
        submission_invalid_reasons: reasons,
        records_path,
        records_written: e.written,
        dry_run: None,
    })
}

/// Writes `run_summary.json`; returns its path.
#[allow(clippy::too_many_arguments)]
fn write_summary(
    cfg: &RunConfig,
    p: &Prepared,
    planned: &Planned,
    url: &str,
    d: &RunDir,
    outcome: &ReplayOutcome,
    reasons: &[String],
    written: u64,
    (summary, server_window): (
        &Summary,
        Option<crate::export::run_summary::ServerMetricsWindow>,
    ),
) -> anyhow::Result<PathBuf> {
    let rp = &cfg.plan;
    let doc = RunSummary {
        run_id: Some(planned.run_id.clone()),
        stop: Some(outcome.stop.as_str().to_owned()),
        message: outcome.message.clone(),
        scenario: Some(scenario_id(p).into()),
        dataset: Some(dataset_id(p, None)),
        seed: Some(planned.seed),
        seed_drawn: p.resolved.seed_drawn,
        concurrency: Some(p.settings.concurrency.into()),
        benchmark_duration_s: Some(p.settings.duration.as_secs_f64()),
        assistant_mode: Some(assistant_mode(rp.mode).to_owned()),
        url: Some(url.to_string()),
        model: d.manifest.model.clone(),
        started_unix_ns: Some(d.clock.anchor_unix_ns()),
        submission_valid: Some(reasons.is_empty()),
        submission_invalid_reasons: reasons.to_vec(),
        records: Some(written),
        summary: summary.clone(),
        host_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        wasmtime_version: Some(scenario::WASMTIME_VERSION.to_owned()),
        shards: None,
        server_metrics_window: server_window,
        extra: Default::default(),
    };
    let mut doc = doc;
    if let Some(a) = arrivals_json(p, d.manifest.trees.as_ref(), outcome.profiling_ns) {
        doc.extra.insert("arrivals".into(), a);
    }
    let path = d.out.join(RUN_SUMMARY);
    d.art
        .write_atomic(RUN_SUMMARY, doc.to_json_pretty().as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// An open-loop run's arrivals as `run_summary.json` gives them: the process, the ceiling, the
/// counts of the manifest's `trees.arrivals`, and the offered and admitted rates per second of
/// the arrival window (profiling up to the duration).
fn arrivals_json(
    p: &Prepared,
    trees: Option<&serde_json::Value>,
    profiling_ns: Option<(u64, u64)>,
) -> Option<serde_json::Value> {
    let o = p.settings.arrivals.as_ref()?;
    let counts: crate::replay::arrivals::ArrivalCounts = trees
        .and_then(|t| t.get("arrivals"))
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    // Arrivals come until the duration (or an earlier stop), not through the grace's drain.
    let span = profiling_ns.map_or(0.0, |(a, b)| b.saturating_sub(a) as f64 / 1e9);
    let secs = span.min(p.settings.duration.as_secs_f64());
    let (offered, admitted) = counts.rates(secs);
    let mut j = o.spec.json();
    j["ceiling"] = json!(o.slots);
    j["offered"] = json!(counts.offered);
    j["admitted"] = json!(counts.admitted);
    j["rejected"] = json!(counts.rejected);
    j["skipped"] = json!(counts.skipped);
    j["offered_rate_per_s"] = json!(offered);
    j["admitted_rate_per_s"] = json!(admitted);
    Some(j)
}

/// The aiperf-compatible exports, the server metrics, the plot and the page.
#[allow(clippy::too_many_arguments)]
fn exports(
    cfg: &RunConfig,
    p: &Prepared,
    planned: &Planned,
    d: &RunDir,
    outcome: &ReplayOutcome,
    reasons: &[String],
    records: &[crate::record::RequestRecord],
    scrape_log: Option<&crate::metrics::scrape_log::ScrapeLog>,
) -> (Vec<PathBuf>, bool) {
    let (p0, p1) = outcome.profiling_ns.unwrap_or((0, 0));
    let input_config = json!(d.manifest.resolved_settings);
    let info = crate::export::aiperf::RunInfo {
        benchmark_id: planned.run_id.clone(),
        anchor_unix_ns: d.clock.anchor_unix_ns(),
        profiling_start_ns: p0,
        profiling_end_ns: p1,
        scenario_name: p.info.name.clone(),
        scenario_version: p.info.version.clone(),
        scenario_sha256: p.sc.hash().to_string(),
        submission_valid: reasons.is_empty(),
        submission_invalid_reasons: reasons.to_vec(),
        was_cancelled: outcome.stop.cancelled(),
        input_config: input_config.clone(),
        seed: Some(planned.seed),
        profiling_duration_ns: Some(p.settings.duration.as_nanos() as u64),
        coverage_rule: crate::export::aiperf::CoverageRule {
            required_ratio: planned
                .tree
                .as_ref()
                .map_or(crate::export::aiperf::COVERAGE_REQUIRED_RATIO, |t| {
                    t.rules.min_metric_coverage
                }),
            content: p.decisions.decides_settings,
        },
        prefix_stamps: match &planned.tree {
            Some(tp) => tp.prefix_stamps(records),
            None => prefix_stamps(p.ds, records),
        },
        dataset: p
            .ds
            .alias()
            .map(|alias| alias_dataset_json(alias, cfg.num_dataset_entries)),
        warmup_naming: crate::export::aiperf::WarmupNaming(p.decisions.warmup_phase_name.clone()),
        goodput: cfg.goodput.clone(),
    };
    let server = scrape_log.map(|log| {
        check_scrapes(cfg, log);
        let meta = crate::export::server_metrics::ExportMeta {
            benchmark_id: Some(planned.run_id.clone()),
            input_config,
        };
        (log, meta)
    });
    write_exports(
        &d.art,
        records,
        &info,
        cfg.slice_duration,
        server.as_ref().map(|(log, meta)| (*log, meta)),
    )
}

/// Warnings about the scrapes: an endpoint without the engine prefix InferenceX's recipe names,
/// and failed scrapes.
fn check_scrapes(cfg: &RunConfig, log: &crate::metrics::scrape_log::ScrapeLog) {
    if let Some((k, prefix)) = &cfg.plan.required_metric_prefix {
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
}

/// A sharded run's end: this shard is done; shard 0 waits for the others, records the rendezvous
/// report and merges into `--merge-into`. Returns the merged files and whether the merge failed.
fn finish_shards(
    cfg: &RunConfig,
    rt: &tokio::runtime::Runtime,
    sh: &super::shard::ShardConfig,
    fin: rendezvous::Finish,
    coordinator: Option<rendezvous::Coordinator>,
    d: &mut RunDir,
) -> anyhow::Result<(Vec<PathBuf>, bool)> {
    let wait = sh.timeout.max(Duration::from_secs(600));
    if let Err(e) = rt.block_on(fin.done(wait)) {
        tracing::error!("rendezvous: {e:#}");
    }
    let Some(c) = coordinator else {
        return Ok((Vec::new(), false));
    };
    match rt.block_on(c.finish(wait)) {
        Ok(report) => {
            if !report.lost.is_empty() {
                tracing::error!(lost = ?report.lost, "rendezvous: shards were lost before they were done");
            }
            if let Some(s) = d.manifest.shard.as_mut() {
                s.rendezvous = Some(json!(report));
            }
            d.write_manifest()?;
        }
        Err(e) => tracing::error!("rendezvous: {e:#}"),
    }
    let Some(into) = &sh.merge_into else {
        return Ok((Vec::new(), false));
    };
    let dirs: Vec<PathBuf> = (0..sh.count)
        .map(|i| d.run_dir.join(shard_dir_name(i)))
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
            Ok((m.files, false))
        }
        Err(e) => {
            tracing::error!("--merge-into {}: {e:#}", into.display());
            Ok((Vec::new(), true))
        }
    }
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
fn dataset_id(p: &Prepared, entries: Option<usize>) -> DatasetId {
    DatasetId {
        source: p.ds.source_path().to_owned(),
        alias: p.ds.alias().map(|x| x.name.to_string()),
        cache_key: Some(p.dataset_key.clone()),
        traces: p.ds.len(),
        num_dataset_entries: entries,
        trace_block_size: p.ds.corpus_format().trace_block_size,
        harness_notes: p.harness_notes.clone(),
    }
}

/// The aiperf `metadata.dataset` block of a named corpus.
pub(crate) fn alias_dataset_json(
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
