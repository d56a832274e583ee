//! What a run writes at its end: the last stage (the scenario's verdict, the manifest's end, the
//! summary, the aiperf exports, the plot and the page, a sharded run's merge). The artifact
//! directory and the manifest before the first request are [`super::run_dir`]'s.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context};
use serde_json::json;

use super::config::{RunConfig, RunOutcome};
use super::connect::Connected;
use super::prepare::Prepared;
use super::run_dir::{assistant_mode, dataset_id, scenario_id, RunDir};
use super::{merge, rendezvous, shard_dir_name, RunCtx, MANIFEST_FILE};
use crate::export::run_summary::{ArrivalsSummary, RunSummary, RUN_SUMMARY};
use crate::metrics::Summary;
use crate::record::{scan_records, RecordSink};
use crate::replay::{self, ReplayOutcome};
use crate::scenario;

/// What the replay stage hands to the last one.
pub(super) struct Replayed {
    pub outcome: ReplayOutcome,
    pub tree_counts: Option<replay::sched::TreeCounts>,
    pub scrape_log: Option<crate::metrics::scrape_log::ScrapeLog>,
    /// The GPU telemetry scraped (`--gpu-telemetry`).
    pub gpu_log: Option<crate::metrics::scrape_log::ScrapeLog>,
    /// The shard's end of the rendezvous, and shard 0's coordinator.
    pub finish: Option<rendezvous::Finish>,
    pub coordinator: Option<rendezvous::Coordinator>,
}

/// The scenario's verdict on the finished run: the 0.1.0 or the 0.2.0 validity call (with the
/// duration coverage), merged with the reasons `resolve` gave.
fn verdict(
    prepared: &Prepared,
    outcome: &ReplayOutcome,
    records: &[crate::record::RequestRecord],
) -> anyhow::Result<Vec<String>> {
    let t = &outcome.tally;
    let settings = &prepared.settings;
    let mut inst = prepared.sc.instantiate()?;
    // Warmup responses count in the overflow rate (numerator and denominator): an overflow in
    // warmup is as much a sign of a too-short context as one in profiling.
    let base = scenario::types::Outcome {
        total_responses: t.requests + t.warmup_requests,
        context_overflows: t.context_overflows + t.warmup_overflows,
        failed: t.failed,
        cancelled: outcome.stop.cancelled(),
        unsafe_override: settings.unsafe_override,
        overflow_rate_limit: settings.rate_limit,
    };
    let reasons = if prepared.trees {
        // Coverage is measured against the configured duration (aiperf's
        // metric_duration_coverage); none when profiling never began.
        let prof = records
            .iter()
            .filter(|r| r.phase == crate::record::Phase::Profiling);
        let cov = outcome.profiling_ns.and_then(|(p0, _)| {
            crate::metrics::stats::Coverage::of(prof, p0, settings.duration.as_nanos() as u64)
        });
        inst.tree_validity(
            base,
            scenario::TreeCoverage {
                profiling_seconds: settings.duration.as_secs_f64(),
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
        &prepared.resolved.invalid_reasons,
    ))
}

/// The last stage: the verdict, the manifest's end, the summary, the exports and plots, and a
/// sharded run's end (shard 0 waits for the others and merges). Each export failure is reported;
/// none loses the records.
pub(super) fn finish(
    ctx: RunCtx<'_>,
    runtime: &tokio::runtime::Runtime,
    conn: &Connected,
    (mut dir, sink): (RunDir, RecordSink),
    replayed: Replayed,
) -> anyhow::Result<RunOutcome> {
    let cfg = ctx.cfg;
    let written = sink.close()?;
    // The sink's watchers are gone: the OTLP export sends what it holds and its stream spans.
    if let Some(exporter) = dir.otlp.take() {
        dir.manifest.otlp = Some(finish_otlp(runtime, exporter, cfg));
    }
    let records_path = dir.out.join(crate::record::RECORDS_FILE);
    // Sized by the count written: a long run's records are the end's largest allocation.
    let mut records = Vec::with_capacity(written as usize);
    scan_records(&records_path, false, |r| records.push(r))
        .map_err(|e| anyhow!("reading back records: {e}"))?;
    dir.manifest.trees = replayed.tree_counts;
    dir.manifest.ended_unix_ns = Some(dir.clock.unix_ns(dir.clock.now_ns()));
    let ended = Ended {
        outcome: replayed.outcome,
        records,
        written,
        url: if cfg.plan.demo {
            "builtin-simulator".to_string()
        } else {
            conn.ccfg.url.clone()
        },
        scrape_log: replayed.scrape_log,
        gpu_log: replayed.gpu_log,
    };
    let mut out = conclude(ctx, &mut dir, ended)?;
    if let (Some(fin), Some(sh)) = (replayed.finish, &cfg.shard) {
        let (merged, failed) =
            finish_shards(cfg, runtime, sh, fin, replayed.coordinator, &mut dir)?;
        out.files.extend(merged);
        if failed {
            out.code = 2;
        }
    }
    Ok(out)
}

/// How long the OTLP export may take at the end to send what it holds.
const OTLP_DRAIN: Duration = Duration::from_secs(30);

/// Ends the OTLP export (its collector gets [`OTLP_DRAIN`] to take the rest) and says what it did.
fn finish_otlp(
    runtime: &tokio::runtime::Runtime,
    exporter: crate::telemetry::otlp::Exporter,
    cfg: &RunConfig,
) -> crate::export::manifest::OtlpInfo {
    let stats = runtime.block_on(exporter.finish(OTLP_DRAIN));
    let endpoint = cfg.otlp_endpoint.clone().unwrap_or_default();
    if stats.spans_dropped > 0 {
        tracing::warn!(
            sent = stats.spans_sent,
            dropped = stats.spans_dropped,
            "OTLP export to {endpoint}: {} spans dropped ({})",
            stats.spans_dropped,
            stats.last_error.as_deref().unwrap_or("the queue was full")
        );
    } else {
        tracing::info!(sent = stats.spans_sent, "OTLP export to {endpoint}: done");
    }
    crate::export::manifest::OtlpInfo {
        endpoint,
        spans_sent: stats.spans_sent,
        spans_dropped: stats.spans_dropped,
        batches_failed: stats.batches_failed,
        last_error: stats.last_error,
    }
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
    /// The GPU telemetry scraped (`--gpu-telemetry`).
    pub gpu_log: Option<crate::metrics::scrape_log::ScrapeLog>,
}

/// The end every run shares, reached in its own process or afterwards by [`super::finalize`]: the
/// verdict, the manifest's end, the summary and the exports; the exit code (2 when an export
/// failed, 1 when the run stopped early or is invalid under `--require-valid`).
pub(super) fn conclude(
    ctx: RunCtx<'_>,
    dir: &mut RunDir,
    ended: Ended,
) -> anyhow::Result<RunOutcome> {
    let RunCtx {
        cfg,
        prepared,
        planned,
    } = ctx;
    let records_path = dir.out.join(crate::record::RECORDS_FILE);
    let outcome = &ended.outcome;
    let reasons = verdict(prepared, outcome, &ended.records)?;
    dir.manifest.profiling_ns = outcome.profiling_ns.map(|(a, b)| [a, b]);
    dir.manifest.profiling_started_ns = outcome.profiling_ns.map(|(a, _)| a);
    dir.manifest.stop = Some(outcome.stop.as_str().to_string());
    dir.write_manifest()?;
    let mut summary = Summary::of(&ended.records);
    summary.cache = cache_truth(cfg, &ended, dir.manifest.server_slots);
    if let (Some(cache), Some(log), Some(window)) = (
        summary.cache.as_mut(),
        ended.scrape_log.as_ref(),
        ended.outcome.profiling_ns,
    ) {
        cache.measured_counters = crate::export::bmk::counter_hit(log, window);
    }
    judge_run(ctx, &ended, &mut summary);
    let server_window = ended.scrape_log.as_ref().map(|log| {
        let window = outcome.profiling_ns.unwrap_or((0, 0));
        crate::export::server_metrics::window_summary(log, window)
    });
    let summary_path = write_summary(ctx, dir, &ended, &reasons, &summary, server_window)?;
    let mut files = vec![
        records_path.clone(),
        dir.out.join(MANIFEST_FILE),
        summary_path,
    ];
    let (written_files, mut export_failed) = exports(ctx, dir, &ended, &reasons, &summary);
    files.extend(written_files);
    if cfg.timeline {
        match write_timeline(dir, ended.scrape_log.as_ref()) {
            Ok(path) => files.push(path),
            Err(e) => {
                tracing::error!("{e:#}");
                export_failed = true;
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
        dir: dir.out.clone(),
        run_id: planned.run_id.clone(),
        concurrency: prepared.settings.concurrency,
        files,
        records_written: ended.written,
        replay: Some(ended.outcome),
        summary: Some(summary),
        submission_invalid_reasons: reasons,
        records_path,
        dry_run: None,
    })
}

/// What the run judged beyond the records' own figures: its jobs, the GPUs' energy, the sessions
/// under `--session-slo` and `--goodput`, and the headline figures' intervals (a session bootstrap
/// at `--confidence`, seeded from the run's seed, over the same judgments).
fn judge_run(ctx: RunCtx<'_>, ended: &Ended, summary: &mut Summary) {
    let RunCtx {
        cfg,
        prepared,
        planned,
    } = ctx;
    let records = &ended.records;
    let window_ns = ended.outcome.profiling_ns.unwrap_or((0, 0));
    let times = planned.recorded_times(&prepared.ds, records);
    let shapes = planned.job_shapes(records);
    summary.jobs = crate::metrics::jobs::figures(
        records,
        &shapes,
        &times,
        crate::metrics::jobs::JobDenominators {
            window_ns,
            lanes: prepared.closed_loop_lanes(),
            gpus: cfg.gpus,
        },
    );
    summary.energy = energy(ended, summary, prepared, cfg.gpus);
    summary.session_slo = cfg
        .session_slo
        .as_ref()
        .map(|slo| slo.judge(records, &times));
    if let Some(goodput) = &cfg.goodput {
        summary.goodput = Some(goodput.of_run(records));
        let share = cfg.session_goodput_share;
        summary.sessions = Some(crate::metrics::sessions::figures(
            records, goodput, share, &times,
        ));
    }
    use crate::metrics::precision;
    let judged = precision::RunJudgments {
        goodput: cfg
            .goodput
            .as_ref()
            .map(|goodput| (goodput, cfg.session_goodput_share)),
        session_slo: cfg.session_slo.as_ref(),
        recorded: &times,
        shapes: &shapes,
        energy_j: summary.energy.as_ref().and_then(|e| e.total_gpu_energy_j),
    };
    let table = precision::run_table(records, window_ns.1.saturating_sub(window_ns.0), &judged);
    let intervals = precision::bootstrap(
        &table,
        &precision::FIGURES,
        cfg.confidence,
        None,
        planned.seed,
    );
    if let Some(warning) = &intervals.warning {
        tracing::warn!("intervals: {warning}");
    }
    summary.intervals = Some(intervals);
}

/// The GPUs' energy over the profiling window, per successful request, token and whole job
/// (`--gpu-telemetry`); `None` when the run scraped no GPU or has no profiling window. With
/// `--gpus`, another count of GPUs reporting makes the power invalid (InferenceX's rule).
fn energy(
    ended: &Ended,
    summary: &Summary,
    prepared: &super::prepare::Prepared,
    gpus: Option<u32>,
) -> Option<crate::metrics::energy::EnergyReport> {
    let log = ended.gpu_log.as_ref()?;
    let window = ended.outcome.profiling_ns?;
    let denominators = crate::metrics::energy::Denominators {
        requests_ok: summary.requests_ok,
        input_tokens: summary.input_tokens,
        output_tokens: summary.output_tokens,
        jobs_ok: summary.jobs.as_ref().map(|jobs| jobs.ok),
        lanes: prepared.closed_loop_lanes().map(u64::from),
        expected_gpus: gpus.map(u64::from),
    };
    let report = crate::metrics::energy::EnergyReport::of(log, window, denominators);
    for reason in &report.reasons {
        tracing::warn!("GPU energy: {reason}");
    }
    Some(report)
}

/// The run's cache truth: the records' prompt chains through the cache model, at the block size
/// and KV capacity `--kv-block-size` and `--kv-capacity-tokens` give, else the server's metrics
/// report, else (the capacity) a llama.cpp server's slots (a flag that contradicts the server is
/// kept, with both in the report's notes).
fn cache_truth(
    cfg: &RunConfig,
    ended: &Ended,
    server_slots: Option<crate::metrics::cache_truth::SlotPool>,
) -> Option<crate::metrics::cache_truth::CacheReport> {
    use crate::metrics::cache_truth::{self, ModelSpec};
    let mut notes = Vec::new();
    let mut server = ended.scrape_log.as_ref().map_or(
        ModelSpec {
            block_size: None,
            capacity_tokens: None,
        },
        |log| cache_truth::server_reading(log, &mut notes),
    );
    if server.capacity_tokens.is_none() {
        server.capacity_tokens = server_slots.map(|pool| pool.capacity());
    }
    let block_size = flag_or_server(
        cfg.plan.kv_block_size,
        server.block_size,
        "kv-block-size",
        &mut notes,
    );
    let capacity_tokens = flag_or_server(
        cfg.plan.kv_capacity_tokens,
        server.capacity_tokens,
        "kv-capacity-tokens",
        &mut notes,
    );
    let spec = ModelSpec {
        block_size,
        capacity_tokens,
    };
    let mut report = cache_truth::cache_report(&ended.records, &spec)?;
    for note in &notes {
        tracing::warn!("cache truth: {note}");
    }
    notes.append(&mut report.notes);
    report.notes = notes;
    Some(report)
}

/// The flag `--{flag}`'s value when given (noting a server reading it contradicts), else the
/// server's reading.
fn flag_or_server<T: PartialEq + std::fmt::Display>(
    given: Option<T>,
    reported: Option<crate::metrics::cache_truth::Sourced<T>>,
    flag: &str,
    notes: &mut Vec<String>,
) -> Option<crate::metrics::cache_truth::Sourced<T>> {
    let Some(value) = given else {
        return reported;
    };
    if let Some(reported) = reported.filter(|reported| reported.value != value) {
        notes.push(format!(
            "--{flag} {value} contradicts the server's {} ({}); the model uses the flag",
            reported.value, reported.source
        ));
    }
    Some(crate::metrics::cache_truth::Sourced {
        value,
        source: format!("--{flag}"),
    })
}

/// Writes `run_summary.json`; returns its path.
fn write_summary(
    ctx: RunCtx<'_>,
    dir: &RunDir,
    ended: &Ended,
    reasons: &[String],
    summary: &Summary,
    server_window: Option<crate::export::run_summary::ServerMetricsWindow>,
) -> anyhow::Result<PathBuf> {
    let RunCtx {
        cfg,
        prepared,
        planned,
    } = ctx;
    let (outcome, url, written) = (&ended.outcome, &ended.url, ended.written);
    let run_plan = &cfg.plan;
    let doc = RunSummary {
        run_id: Some(planned.run_id.clone()),
        stop: Some(outcome.stop.as_str().to_owned()),
        message: outcome.message.clone(),
        scenario: Some(scenario_id(prepared).into()),
        dataset: Some(dataset_id(prepared, None)),
        seed: Some(planned.seed),
        seed_drawn: prepared.resolved.seed_drawn,
        concurrency: Some(prepared.settings.concurrency.into()),
        benchmark_duration_s: Some(prepared.settings.duration.as_secs_f64()),
        assistant_mode: Some(assistant_mode(run_plan.mode).to_owned()),
        url: Some(url.clone()),
        model: dir.manifest.model.clone(),
        started_unix_ns: Some(dir.clock.anchor_unix_ns()),
        submission_valid: Some(reasons.is_empty()),
        submission_invalid_reasons: reasons.to_vec(),
        records: Some(written),
        summary: summary.clone(),
        host_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        wasmtime_version: Some(scenario::WASMTIME_VERSION.to_owned()),
        shards: None,
        server_metrics_window: server_window,
        http: dir.manifest.http.clone(),
        arrivals: arrivals_summary(prepared, dir.manifest.trees.as_ref(), outcome.profiling_ns),
        extra: serde_json::Map::default(),
    };
    let path = dir.out.join(RUN_SUMMARY);
    dir.art
        .write_atomic(RUN_SUMMARY, doc.to_json_pretty().as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// An open-loop run's arrivals as `run_summary.json` gives them: the process, the ceiling, the
/// counts of the manifest's `trees.arrivals`, and the offered and admitted rates per second of
/// the arrival window (profiling up to the duration).
fn arrivals_summary(
    prepared: &Prepared,
    trees: Option<&crate::metrics::tree_counts::TreeCounts>,
    profiling_ns: Option<(u64, u64)>,
) -> Option<ArrivalsSummary> {
    let open_loop = prepared.settings.arrivals.as_ref()?;
    let counts = trees.and_then(|t| t.arrivals).unwrap_or_default();
    // Arrivals come until the duration (or an earlier stop), not through the grace's drain.
    let span = profiling_ns.map_or(0.0, |(a, b)| b.saturating_sub(a) as f64 / 1e9);
    let secs = span.min(prepared.settings.duration.as_secs_f64());
    let (offered, admitted) = counts.rates(secs);
    let spec = &open_loop.spec;
    Some(ArrivalsSummary {
        rate_per_s: spec.rate,
        pattern: spec.pattern.name().to_string(),
        smoothness: spec.smoothness,
        expected_cv: spec.expected_cv(),
        ceiling: open_loop.slots,
        counts,
        offered_rate_per_s: offered,
        admitted_rate_per_s: admitted,
    })
}

/// `--timeline`: the run as trace events, next to its records.
fn write_timeline(
    dir: &RunDir,
    scrape_log: Option<&crate::metrics::scrape_log::ScrapeLog>,
) -> anyhow::Result<PathBuf> {
    use crate::export::timeline::{self, TIMELINE_FILE};
    let path = dir.out.join(TIMELINE_FILE);
    let file = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let counts = timeline::write_timeline(&dir.out, scrape_log, file)
        .with_context(|| format!("writing {}", path.display()))?;
    tracing::info!(
        requests = counts.requests,
        slices = counts.slices,
        flows = counts.flows,
        counter_samples = counts.counter_samples,
        "timeline: {}",
        path.display()
    );
    Ok(path)
}

/// The aiperf-compatible exports, the server metrics, the plot and the page.
fn exports(
    ctx: RunCtx<'_>,
    dir: &RunDir,
    ended: &Ended,
    reasons: &[String],
    summary: &Summary,
) -> (Vec<PathBuf>, bool) {
    let RunCtx {
        cfg,
        prepared,
        planned,
    } = ctx;
    let (outcome, records) = (&ended.outcome, &ended.records);
    let scrape_log = ended.scrape_log.as_ref();
    let (p0, p1) = outcome.profiling_ns.unwrap_or((0, 0));
    let input_config = json!(dir.manifest.resolved_settings);
    let info = crate::export::aiperf::RunInfo {
        benchmark_id: planned.run_id.clone(),
        anchor_unix_ns: dir.clock.anchor_unix_ns(),
        profiling_start_ns: p0,
        profiling_end_ns: p1,
        scenario_name: prepared.info.name.clone(),
        scenario_version: prepared.info.version.clone(),
        scenario_sha256: prepared.sc.hash().to_string(),
        submission_valid: reasons.is_empty(),
        submission_invalid_reasons: reasons.to_vec(),
        was_cancelled: outcome.stop.cancelled(),
        input_config: input_config.clone(),
        seed: Some(planned.seed),
        profiling_duration_ns: Some(prepared.settings.duration.as_nanos() as u64),
        coverage_rule: crate::export::aiperf::CoverageRule {
            required_ratio: planned.coverage_required_ratio(),
            content: prepared.decisions.decides_settings,
        },
        prefix_stamps: planned.prefix_stamps(&prepared.ds, records),
        dataset: prepared
            .ds
            .alias()
            .map(|alias| crate::export::aiperf::alias_dataset_json(alias, cfg.num_dataset_entries)),
        warmup_naming: crate::export::aiperf::WarmupNaming(
            prepared.decisions.warmup_phase_name.clone(),
        ),
        goodput: cfg.goodput.clone(),
        cache: summary.cache.clone(),
        energy: summary
            .energy
            .clone()
            .zip(ended.gpu_log.as_ref())
            .map(|(energy, log)| {
                crate::export::gpu_telemetry::GpuWindow::of(
                    log,
                    (p0, p1),
                    dir.clock.anchor_unix_ns(),
                    energy,
                )
            }),
    };
    let server = scrape_log.map(|log| {
        check_scrapes(cfg, log);
        let meta = crate::export::server_metrics::ExportMeta {
            benchmark_id: Some(planned.run_id.clone()),
            input_config,
        };
        (log, meta)
    });
    let (mut files, mut failed) = crate::export::write_run_exports(
        &dir.art,
        records,
        &info,
        cfg.slice_duration,
        server.as_ref().map(|(log, meta)| (*log, meta)),
    );
    if let Some(log) = &ended.gpu_log {
        match crate::export::gpu_telemetry::write_jsonl(&dir.art, log, dir.clock.anchor_unix_ns()) {
            Ok(path) => files.push(path),
            Err(e) => {
                tracing::error!(
                    "cannot write {}: {e}",
                    crate::export::gpu_telemetry::JSONL_FILE
                );
                failed = true;
            }
        }
    }
    (files, failed)
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
    runtime: &tokio::runtime::Runtime,
    shard: &super::shard::ShardConfig,
    fin: rendezvous::Finish,
    coordinator: Option<rendezvous::Coordinator>,
    dir: &mut RunDir,
) -> anyhow::Result<(Vec<PathBuf>, bool)> {
    let wait = shard.timeout.max(Duration::from_secs(600));
    if let Err(e) = runtime.block_on(fin.done(wait)) {
        tracing::error!("rendezvous: {e:#}");
    }
    let Some(c) = coordinator else {
        return Ok((Vec::new(), false));
    };
    match runtime.block_on(c.finish(wait)) {
        Ok(report) => {
            if !report.lost.is_empty() {
                tracing::error!(lost = ?report.lost, "rendezvous: shards were lost before they were done");
            }
            if let Some(s) = dir.manifest.shard.as_mut() {
                s.rendezvous = Some(report);
            }
            dir.write_manifest()?;
        }
        Err(e) => tracing::error!("rendezvous: {e:#}"),
    }
    let Some(into) = &shard.merge_into else {
        return Ok((Vec::new(), false));
    };
    let dirs: Vec<PathBuf> = (0..shard.count)
        .map(|i| dir.run_dir.join(shard_dir_name(i)))
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
