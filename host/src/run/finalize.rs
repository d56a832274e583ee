//! A run finished after its process ended: `agentx-host finalize DIR` for a run killed by SIGKILL,
//! the OOM killer or a job's time limit. It reads what the run left in its artifact directory (the
//! manifest, written before the first request and again when profiling began; `records.jsonl`,
//! written through as requests complete; `server_metrics_journal.jsonl`, flushed every 5 s), rebuilds
//! the run's plan from the manifest (the scenario by hash, the dataset by digest, the seed and the
//! run id), and writes every export a finished run writes through the same last stage
//! ([`super::outputs::conclude`]), stopped as `killed` with the reason.

use std::path::Path;

use anyhow::{anyhow, bail, Context};

use super::outputs::{self, Ended};
use super::run_dir::RunDir;
use super::{plan, prepare, RunConfig, RunOutcome};
use crate::export::manifest::{Finalized, Manifest};
use crate::record::{scan_records, Phase, RequestRecord, RECORDS_FILE};
use crate::replay::{ReplayOutcome, StopReason, Tally};

/// The reason recorded when none is given.
pub const DEFAULT_REASON: &str =
    "the run's process ended before the run finished (killed: SIGKILL, out of memory or a time limit)";

/// Writes the exports of the unfinished run in `dir`; `cfg` is its recorded command line with the
/// seed, run id, scenario and dataset pinned (what `agentx-host replay` rebuilds).
pub fn finalize(cfg: &RunConfig, dir: &Path, reason: Option<String>) -> anyhow::Result<RunOutcome> {
    let manifest = Manifest::read_dir(dir)?;
    check_unfinished(dir, &manifest)?;
    let (p, mut inst, cfg) = prepare::prepare(cfg)?;
    let planned = match plan::plan(
        &cfg,
        &p,
        &mut inst,
        manifest.seed,
        Some(manifest.run_id.clone()),
    )? {
        plan::Planning::Replay(planned) => planned,
        plan::Planning::Dry(_) => bail!("finalize: the recorded run was a dry run"),
    };
    let mut d = RunDir::reopen(dir, manifest)?;
    let (records, torn) = salvage_records(&d)?;
    let scrape_log = scrapes(
        dir,
        crate::client::scrape_journal::SCRAPE_JOURNAL,
        "server metrics",
    );
    let gpu_log = scrapes(
        dir,
        crate::client::scrape_journal::GPU_TELEMETRY_JOURNAL,
        "GPU telemetry",
    );
    let reason = reason.unwrap_or_else(|| DEFAULT_REASON.to_string());
    let outcome = killed_outcome(&d.manifest, &records, &reason);
    // The last response, or profiling's end (which is at least that).
    let end_ns = outcome
        .profiling_ns
        .map_or_else(|| last_end(&records), |(_, e)| e);
    d.manifest.ended_unix_ns = Some(d.clock.unix_ns(end_ns));
    d.manifest.finalized = Some(Finalized {
        reason: reason.clone(),
        unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos() as u64),
        records: records.len() as u64,
        torn_record: torn,
        server_metrics: scrape_log.is_some(),
    });
    tracing::warn!("finalizing {}: {reason}", dir.display());
    let ended = Ended {
        outcome,
        written: records.len() as u64,
        records,
        url: if cfg.plan.demo {
            "builtin-simulator".to_string()
        } else {
            d.manifest.url.clone()
        },
        scrape_log,
        gpu_log,
    };
    let ctx = super::RunCtx {
        cfg: &cfg,
        prepared: &p,
        planned: &planned,
    };
    outputs::conclude(ctx, &mut d, ended)
}

/// Refuses a directory whose run finished (its summary is written) or that a shard wrote.
fn check_unfinished(dir: &Path, manifest: &Manifest) -> anyhow::Result<()> {
    let summary = dir.join(crate::export::run_summary::RUN_SUMMARY);
    if let (Some(f), true) = (&manifest.finalized, summary.is_file()) {
        bail!(
            "{} was finalized already ({}; {} records): its exports are written",
            dir.display(),
            f.reason,
            f.records
        );
    }
    if let (Some(stop), true) = (&manifest.stop, summary.is_file()) {
        bail!(
            "{} holds a run that finished ({stop}) and wrote its exports: nothing to finalize \
             (`agentx-host plot {}` remakes the plot and the page)",
            dir.display(),
            dir.display()
        );
    }
    if manifest.shard.is_some() {
        bail!(
            "{} is one shard of a sharded run: a sharded run is finished by its shards; rerun it, \
             or merge the shards that finished with `agentx-host merge`",
            dir.display()
        );
    }
    Ok(())
}

/// The records on disk. A last line cut off by the kill (no newline, not JSON) is left out, and
/// `records.jsonl` is rewritten without it so every reader sees whole records; a bad line before
/// the last is an error naming it.
fn salvage_records(dir: &RunDir) -> anyhow::Result<(Vec<RequestRecord>, Option<String>)> {
    let path = dir.out.join(RECORDS_FILE);
    if !path.is_file() {
        bail!("cannot read {}: the run left no records", path.display());
    }
    // Sized by the file's lines: a long run's records are the end's largest allocation, and a
    // vector grown by doubling held up to twice them.
    let mut records = Vec::with_capacity(line_count(&path)?);
    let torn = scan_records(&path, true, |r| records.push(r)).map_err(|e| anyhow!("{e}"))?;
    let Some(t) = torn else {
        return Ok((records, None));
    };
    tracing::warn!(
        "{}:{}: the last record was cut off by the kill ({} bytes); left out",
        path.display(),
        t.line,
        t.bytes
    );
    // The whole records before it stay as they are: the file is cut where the torn line begins.
    dir.art
        .truncate(RECORDS_FILE, t.offset)
        .with_context(|| format!("cannot cut the torn line off {}", path.display()))?;
    Ok((records, Some(format!("line {}: {} bytes", t.line, t.bytes))))
}

/// The lines of the file at `path` (a torn last line counted).
fn line_count(path: &Path) -> anyhow::Result<usize> {
    use std::io::Read;
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut lines = 0;
    loop {
        let read = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if read == 0 {
            return Ok(lines + 1);
        }
        lines += buf[..read].iter().filter(|byte| **byte == b'\n').count();
    }
}

/// The metrics (`what`) scraped until the last journal flush before the end (at most
/// [`crate::client::scrape_journal::FLUSH_EVERY`] lost), from the journal `name`; `None` when the
/// run scraped none (shards but the first, `--no-server-metrics`, no `--gpu-telemetry`) or its
/// journal is unreadable (said why).
fn scrapes(dir: &Path, name: &str, what: &str) -> Option<crate::metrics::scrape_log::ScrapeLog> {
    let path = dir.join(name);
    if !path.is_file() {
        tracing::info!("{} has no {name}: no {what} are exported", dir.display());
        return None;
    }
    match crate::client::scrape_journal::read_journal(&path) {
        Ok(log) => Some(log),
        Err(e) => {
            tracing::warn!("the {what} are not exported: {e}");
            None
        }
    }
}

/// How a killed run ended: the counts of its records, profiling from its noted start (or, for a
/// manifest without one, the first profiling request's intended send) to its last response.
fn killed_outcome(manifest: &Manifest, records: &[RequestRecord], reason: &str) -> ReplayOutcome {
    let first_profiling = records
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .map(|r| r.intended_ns)
        .min();
    let start = manifest.profiling_started_ns.or(first_profiling);
    let stop = match manifest.stop.as_deref() {
        // Killed while writing its exports: the recorded stop stands.
        Some(s) => StopReason::parse(s).unwrap_or(StopReason::Killed),
        None => StopReason::Killed,
    };
    ReplayOutcome {
        stop,
        tally: Tally::of_records(records),
        profiling_ns: start.map(|s| (s, last_end(records).max(s))),
        message: Some(format!("finalized after the run ended: {reason}")),
    }
}

/// The last response's end on the run clock (0 with no records).
fn last_end(records: &[RequestRecord]) -> u64 {
    records.iter().map(|r| r.end_ns).max().unwrap_or(0)
}
