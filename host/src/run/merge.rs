//! `agentx-host merge`: the shards of a sharded run made into one artifact directory that reads
//! exactly like a run in one process: the records on one timeline, the manifest (listing the
//! shards and the clock skew measured at the rendezvous), the run summary with the validity decided
//! by the scenario over all shards' counts, the aiperf exports, shard 0's server metrics, the plot
//! and report.html.
//!
//! The timeline: each shard recorded its clock's wall-clock anchor and its offset from the
//! coordinator's clock; a shard's records move by `(anchor + offset) - earliest`, so every time is
//! an offset from the earliest shard's corrected anchor.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

use crate::export::run_summary::{RunSummary, RUN_SUMMARY};
use crate::metrics::Outcome;
use crate::record::{read_records, Phase, RequestRecord, RECORDS_FILE};

use super::MANIFEST_FILE;
use crate::export::manifest::{Manifest, ShardInfo};

/// What a merge wrote.
#[derive(Debug)]
pub struct Merged {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub records: usize,
    /// The largest difference between two shards' clock offsets, ns.
    pub clock_skew_ns: i64,
    pub took: Duration,
    pub submission_invalid_reasons: Vec<String>,
}

/// One shard directory, read.
struct Shard {
    dir: PathBuf,
    manifest: Manifest,
    /// The shard's place (every shard's manifest has one; checked when read).
    shard: ShardInfo,
    summary: RunSummary,
    index: u32,
    count: u32,
    /// Corrected anchor: wall-clock anchor plus the offset to the coordinator's clock.
    anchor: i128,
    records: Vec<RequestRecord>,
}

fn read_shard(dir: &Path) -> anyhow::Result<Shard> {
    let manifest = Manifest::read_dir(dir)
        .map_err(|e| anyhow!("{e}; is this a shard directory of a finished sharded run?"))?;
    let Some(shard) = manifest.shard.clone() else {
        bail!(
            "{} is not a shard's manifest (no \"shard\" block): merge takes the shard-<I> directories of a run made with --shard / SLURM / --shards",
            dir.join(MANIFEST_FILE).display()
        );
    };
    if manifest.ended_unix_ns.is_none() {
        bail!(
            "{}: the shard has not finished (its manifest has no end time); merge it when every shard is done",
            dir.display()
        );
    }
    let summary = RunSummary::read_dir(dir)
        .map_err(|e| anyhow!("{e}; is this a shard directory of a finished sharded run?"))?;
    let started = manifest.started_unix_ns;
    let offset = shard.clock_offset_ns;
    let records = read_records(&dir.join(RECORDS_FILE)).map_err(|e| anyhow!("{e}"))?;
    Ok(Shard {
        dir: dir.to_owned(),
        summary,
        index: shard.index,
        count: shard.count,
        anchor: i128::from(started) + i128::from(offset),
        records,
        manifest,
        shard,
    })
}

/// The field of a manifest that must be the same in every shard.
fn same<T: PartialEq + std::fmt::Display>(
    shards: &[Shard],
    what: &str,
    get: impl Fn(&Shard) -> T,
) -> anyhow::Result<()> {
    let first = get(&shards[0]);
    for s in &shards[1..] {
        let v = get(s);
        if v != first {
            bail!(
                "{} and {} are shards of different runs: {what} {} against {}",
                shards[0].dir.display(),
                s.dir.display(),
                first,
                v
            );
        }
    }
    Ok(())
}

/// Merges the shard directories `dirs` into `out` (created; files in it are replaced). `home` is
/// the agentx cache directory, where the scenario component is found to decide validity.
pub fn merge(dirs: &[PathBuf], out: &Path, home: &Path) -> anyhow::Result<Merged> {
    let t0 = Instant::now();
    if dirs.is_empty() {
        bail!("merge needs the shard directories: agentx-host merge DIR/shard-0 DIR/shard-1 ... -o DIR/merged");
    }
    let mut shards = read_shards(dirs, out)?;
    let tl = Timeline::of(&mut shards);
    let stop = tl
        .stops
        .iter()
        .map(|(s, _)| s.as_str())
        .find(|s| *s != "completed")
        .unwrap_or("completed")
        .to_string();
    let manifest = merged_manifest(&shards, &tl, &stop);
    let cancelled = stop != "completed";

    // Validity over all shards' counts, decided by the scenario component itself.
    let reasons = validity(&shards, &tl.records, cancelled, home).unwrap_or_else(|e| {
        tracing::warn!("the scenario component is not at hand ({e:#}); the merged run keeps every shard's invalid reasons");
        kept_reasons(&shards)
    });
    let files = write_merged(out, &shards, &tl, &manifest, stop, &reasons)?;
    Ok(Merged {
        dir: out.to_owned(),
        files,
        records: tl.records.len(),
        clock_skew_ns: tl.clock_skew_ns,
        took: t0.elapsed(),
        submission_invalid_reasons: reasons,
    })
}

/// Reads the shards, in index order, and checks they are one run's, each once, none missing, and
/// that `out` is none of them.
fn read_shards(dirs: &[PathBuf], out: &Path) -> anyhow::Result<Vec<Shard>> {
    let mut shards = dirs
        .iter()
        .map(|d| read_shard(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    shards.sort_by_key(|s| s.index);
    same(&shards, "run id", |s| s.manifest.run_id.clone())?;
    same(&shards, "scenario", |s| s.manifest.scenario.sha256.clone())?;
    same(&shards, "dataset", |s| {
        s.manifest.dataset.cache_key.clone().unwrap_or_default()
    })?;
    same(&shards, "seed", |s| s.manifest.seed)?;
    same(&shards, "shard count", |s| s.shard.count)?;
    let count = shards[0].count;
    let have: Vec<u32> = shards.iter().map(|s| s.index).collect();
    if let Some(w) = have.windows(2).find(|w| w[0] == w[1]) {
        bail!("shard {} is given twice", w[0]);
    }
    let missing: Vec<String> = (0..count)
        .filter(|i| !have.contains(i))
        .map(|i| i.to_string())
        .collect();
    if !missing.is_empty() {
        bail!(
            "the run has {count} shards but shards {} are missing; pass every shard-<I> directory",
            missing.join(", ")
        );
    }
    if out.exists() && dirs.iter().any(|d| same_dir(d, out)) {
        bail!("-o {} is one of the shard directories", out.display());
    }
    Ok(shards)
}

/// The shards on one timeline: every record shifted onto the earliest shard's clock.
struct Timeline {
    /// The earliest corrected anchor.
    anchor: i128,
    /// Every shard's records, ordered by end (then request id).
    records: Vec<RequestRecord>,
    /// Profiling's start and end over all shards.
    window: Option<(u64, u64)>,
    /// The manifest's `shards` rows.
    shard_rows: Vec<Value>,
    clock_skew_ns: i64,
    /// Each shard's stop and message.
    stops: Vec<(String, Option<String>)>,
}

impl Timeline {
    /// Moves the records out of `shards`.
    fn of(shards: &mut [Shard]) -> Timeline {
        let anchor = shards.iter().map(|s| s.anchor).min().unwrap_or(0);
        let mut records = Vec::new();
        let mut window: Option<(u64, u64)> = None;
        let mut shard_rows = Vec::new();
        let offsets: Vec<i64> = shards.iter().map(|s| s.shard.clock_offset_ns).collect();
        let clock_skew_ns = offsets.iter().max().unwrap_or(&0) - offsets.iter().min().unwrap_or(&0);
        let mut stops = Vec::new();
        for s in shards.iter_mut() {
            let delta = (s.anchor - anchor) as u64;
            for r in &mut s.records {
                r.intended_ns += delta;
                r.send_ns += delta;
                r.end_ns += delta;
                r.first_byte_ns = r.first_byte_ns.map(|x| x + delta);
                r.first_token_ns = r.first_token_ns.map(|x| x + delta);
            }
            if let Some([a, b]) = s.manifest.profiling_ns {
                let (a, b) = (a + delta, b + delta);
                window = Some(window.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
            }
            let stop = s.summary.stop_or_completed().to_string();
            shard_rows.push(json!({
                "index": s.index,
                "dir": s.dir,
                "host": s.shard.host,
                "lanes": s.shard.lanes,
                "records": s.records.len(),
                "stop": stop,
                "clock_offset_ns": s.shard.clock_offset_ns,
                "clock_rtt_ns": s.shard.clock_rtt_ns,
                "started_unix_ns": s.manifest.started_unix_ns,
                "shift_ns": delta,
                "profiling_ns": s.manifest.profiling_ns,
            }));
            stops.push((stop, s.summary.message.clone()));
            records.append(&mut s.records);
        }
        records.sort_by(|a, b| {
            a.end_ns
                .cmp(&b.end_ns)
                .then_with(|| a.request_id.cmp(&b.request_id))
        });
        Timeline {
            anchor,
            records,
            window,
            shard_rows,
            clock_skew_ns,
            stops,
        }
    }
}

/// The manifest: shard 0's, with the whole plan and the shards.
fn merged_manifest(shards: &[Shard], tl: &Timeline, stop: &str) -> Manifest {
    let m0 = &shards[0].manifest;
    let mut manifest = m0.clone();
    let mut lanes: Vec<Value> = shards
        .iter()
        .flat_map(|s| s.manifest.lanes.iter().cloned())
        .collect();
    lanes.sort_by_key(|l| l["lane"].as_u64().unwrap_or(0));
    manifest.lanes = lanes;
    manifest.shard = None;
    manifest.extra.insert("shards".into(), json!(tl.shard_rows));
    manifest
        .extra
        .insert("clock_skew_ns".into(), json!(tl.clock_skew_ns));
    manifest.started_unix_ns = tl.anchor as u64;
    manifest.ended_unix_ns = shards.iter().filter_map(|s| s.manifest.ended_unix_ns).max();
    manifest.profiling_ns = tl.window.map(|(a, b)| [a, b]);
    manifest.extra.insert(
        "merged_unix_ns".into(),
        json!(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)),
    );
    manifest.stop = Some(stop.to_string());
    manifest
}

/// Every shard's invalid reasons, each once (when the scenario cannot decide the merged run).
fn kept_reasons(shards: &[Shard]) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for s in shards {
        for r in &s.summary.submission_invalid_reasons {
            if !all.contains(r) {
                all.push(r.clone());
            }
        }
    }
    all
}

/// Writes the merged records, manifest, summary, server metrics and exports; returns the files.
fn write_merged(
    out: &Path,
    shards: &[Shard],
    tl: &Timeline,
    manifest: &Manifest,
    stop: String,
    reasons: &[String],
) -> anyhow::Result<Vec<PathBuf>> {
    let (records, anchor) = (&tl.records, tl.anchor);
    let (p0, p1) = tl.window.unwrap_or((0, 0));
    let m0 = &shards[0].manifest;
    let count = shards[0].count;
    let cancelled = stop != "completed";
    let message: Vec<String> = tl
        .stops
        .iter()
        .enumerate()
        .filter_map(|(i, (_, m))| m.as_ref().map(|m| format!("shard {i}: {m}")))
        .collect();
    let art = crate::fsio::Root::create(out)
        .with_context(|| format!("cannot create the merge directory {} (-o)", out.display()))?;
    let mut files = Vec::new();
    let put = |name: &str, data: &[u8]| {
        art.write_atomic(name, data)
            .with_context(|| format!("cannot write {}", art.join(name).display()))
    };
    let mut jsonl = Vec::with_capacity(records.len() * 512);
    for r in records {
        serde_json::to_writer(&mut jsonl, r)?;
        jsonl.push(b'\n');
    }
    files.push(put(RECORDS_FILE, &jsonl)?);
    files.push(put(MANIFEST_FILE, manifest.to_json_pretty().as_bytes())?);
    let goodput = match &m0.goodput {
        Some(spec) => Some(
            crate::metrics::goodput::Goodput::parse(spec)
                .map_err(|e| anyhow!("shard 0's manifest: goodput {spec:?}: {e}"))?,
        ),
        None => None,
    };
    let mut summary = crate::metrics::Summary::of(records);
    if let Some(g) = &goodput {
        summary.goodput = Some(g.of_run(records));
        let share = m0.session_goodput_share.unwrap_or(1.0);
        let times = dataset_of(m0)
            .map(|ds| super::plan::recorded_times(&ds, records))
            .unwrap_or_default();
        summary.sessions = Some(crate::metrics::sessions::figures(records, g, share, &times));
    }
    let mut doc = shards[0].summary.clone();
    doc.stop = Some(stop);
    doc.message = (!message.is_empty()).then(|| message.join("; "));
    doc.records = Some(records.len() as u64);
    doc.summary = summary;
    doc.submission_valid = Some(reasons.is_empty());
    doc.submission_invalid_reasons = reasons.to_vec();
    doc.started_unix_ns = Some(anchor as u64);
    doc.shards = Some(count);
    files.push(put(RUN_SUMMARY, doc.to_json_pretty().as_bytes())?);
    // Shard 0 scraped the servers for the whole run; its files hold the server's view.
    for name in [
        crate::export::server_metrics::JSON_FILE,
        crate::export::server_metrics::CSV_FILE,
    ] {
        if let Ok(bytes) = std::fs::read(shards[0].dir.join(name)) {
            files.push(put(name, &bytes)?);
        }
    }
    let info = crate::export::aiperf::RunInfo {
        benchmark_id: m0.run_id.clone(),
        anchor_unix_ns: anchor as u64,
        profiling_start_ns: p0,
        profiling_end_ns: p1,
        scenario_name: m0.scenario.name.clone(),
        scenario_version: m0.scenario.version.clone(),
        scenario_sha256: m0.scenario.sha256.clone(),
        submission_valid: reasons.is_empty(),
        submission_invalid_reasons: reasons.to_vec(),
        was_cancelled: cancelled,
        input_config: json!(m0.resolved_settings),
        seed: Some(m0.seed),
        profiling_duration_ns: Some((m0.benchmark_duration_s * 1e9) as u64),
        // Sharded runs replay single-stream scenarios (0.1.0), whose rule is aiperf 0.13's.
        coverage_rule: Default::default(),
        prefix_stamps: stamps(m0, records),
        dataset: m0
            .dataset
            .alias
            .as_deref()
            .and_then(crate::dataset::alias::lookup)
            .map(|a| super::outputs::alias_dataset_json(a, m0.dataset.num_dataset_entries)),
        warmup_naming: Default::default(),
        goodput,
    };
    let slice = m0.slice_duration;
    let (written, failed) = super::outputs::write_exports(&art, records, &info, slice, None);
    files.extend(written);
    if failed {
        bail!(
            "some exports of the merged run could not be written into {} (see the errors above); the merged records are in {}",
            out.display(),
            art.join(RECORDS_FILE).display()
        );
    }
    Ok(files)
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The theoretical prefix-cache stamps of the replayed traces, from the corpus the manifest names
/// (empty, with a note, when it is not at hand).
fn stamps(
    m: &Manifest,
    records: &[RequestRecord],
) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
    dataset_of(m)
        .map(|ds| super::plan::prefix_stamps(&ds, records))
        .unwrap_or_default()
}

/// The dataset the shards replayed, for what the merge reads of the corpus (the theoretical
/// prefix-cache hit rate, the sessions' recorded times); `None`, with a warning, when it is gone.
fn dataset_of(m: &Manifest) -> Option<crate::dataset::Dataset> {
    let src = m.dataset.source.display().to_string();
    if src.is_empty() {
        return None;
    }
    match crate::dataset::Dataset::open_path(&m.dataset.source, &Default::default()) {
        Ok(ds) => Some(ds),
        Err(e) => {
            tracing::warn!(
                "{src}: {e}; the merged export has no theoretical prefix-cache hit rate or session slowdown"
            );
            None
        }
    }
}

/// The scenario's verdict on the merged counts (warmup responses count in the overflow rate, as
/// in a run), plus the reasons `resolve` gave before the run.
fn validity(
    shards: &[Shard],
    records: &[RequestRecord],
    cancelled: bool,
    home: &Path,
) -> anyhow::Result<Vec<String>> {
    let m = &shards[0].manifest;
    let sha = m.scenario.sha256.as_str();
    let source = m.scenario.source.to_str().unwrap_or_default();
    let sc = if let Some(stem) = source.strip_prefix("builtin:") {
        super::load(Some(stem), home)?
    } else if Path::new(source).is_file() {
        super::load(Some(&format!("{source}@sha256:{sha}")), home)?
    } else {
        super::load(Some(&format!("sha256:{sha}")), home)?
    };
    if sc.hash() != sha {
        bail!(
            "the scenario at hand is sha256:{} but the run used sha256:{sha}",
            sc.hash()
        );
    }
    let setting = |name: &str| {
        m.resolved_settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.clone())
            .unwrap_or(Value::Null)
    };
    let (mut total, mut overflows, mut failed) = (0u64, 0u64, 0u64);
    for r in records {
        total += 1;
        match Outcome::of(r) {
            Outcome::ContextOverflow => overflows += 1,
            Outcome::Failed if r.phase == Phase::Profiling => failed += 1,
            _ => {}
        }
    }
    let mut inst = sc.instantiate()?;
    let reasons = inst.validity(crate::scenario::types::Outcome {
        total_responses: total,
        context_overflows: overflows,
        failed,
        cancelled,
        unsafe_override: setting("unsafe-override").as_bool().unwrap_or(false),
        overflow_rate_limit: setting("context-overflow-rate-limit")
            .as_f64()
            .unwrap_or(0.01),
    })?;
    Ok(crate::scenario::check::invalid_reasons(
        reasons,
        &m.resolve_invalid_reasons,
    ))
}
