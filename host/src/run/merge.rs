//! `agentx-host merge`: the shards of a sharded run made into one artifact directory that reads
//! exactly like a run in one process: the records on one timeline, the manifest (the whole plan,
//! a session-tree run's counts summed, the shards and the clock skew measured at the rendezvous),
//! the run summary with the validity decided by the scenario over all shards' counts (a
//! session-tree scenario's with the duration coverage of all shards' records), the aiperf exports
//! (by the rules each shard's manifest keeps), shard 0's server metrics, the plot and report.html.
//!
//! The timeline: each shard recorded its clock's wall-clock anchor and its offset from the
//! coordinator's clock; a shard's records move by `(anchor + offset) - earliest`, so every time is
//! an offset from the earliest shard's corrected anchor.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value};

use crate::export::run_summary::{RunSummary, RUN_SUMMARY};
use crate::metrics::tree_counts::TreeCounts;
use crate::metrics::Outcome;
use crate::record::{read_records, Phase, RequestRecord, RECORDS_FILE};
use crate::scenario::ReplaySetting;

use super::MANIFEST_FILE;
use crate::export::manifest::{LanePlan, Manifest, MergedShard, ShardInfo};

/// What a merge wrote.
#[derive(Debug)]
pub struct Merged {
    /// The merged run's artifact directory.
    pub dir: PathBuf,
    /// Every file the merge wrote.
    pub files: Vec<PathBuf>,
    /// Records on the merged timeline.
    pub records: usize,
    /// The largest difference between two shards' clock offsets, ns.
    pub clock_skew_ns: i64,
    /// How long the merge took.
    pub took: Duration,
    /// The scenario's verdict over every shard's records; empty for a valid submission.
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
        let value = get(s);
        if value != first {
            bail!(
                "{} and {} are shards of different runs: {what} {} against {}",
                shards[0].dir.display(),
                s.dir.display(),
                first,
                value
            );
        }
    }
    Ok(())
}

/// Merges the shard directories `dirs` into `out` (created; files in it are replaced). `home` is
/// the agentx cache directory, where the scenario component is found to decide validity.
pub fn merge(dirs: &[PathBuf], out: &Path, home: &Path) -> anyhow::Result<Merged> {
    let started = Instant::now();
    if dirs.is_empty() {
        bail!("merge needs the shard directories: agentx-host merge DIR/shard-0 DIR/shard-1 ... -o DIR/merged");
    }
    let mut shards = read_shards(dirs, out)?;
    let timeline = Timeline::of(&mut shards);
    let stop = timeline
        .stops
        .iter()
        .map(|(s, _)| s.as_str())
        .find(|s| *s != "completed")
        .unwrap_or("completed")
        .to_string();
    let manifest = merged_manifest(&shards, &timeline, &stop);
    let cancelled = stop != "completed";

    // Validity over all shards' counts, decided by the scenario component itself.
    let reasons = validity(&shards, &timeline, cancelled, home).unwrap_or_else(|e| {
        tracing::warn!("the scenario component is not at hand ({e:#}); the merged run keeps every shard's invalid reasons");
        kept_reasons(&shards)
    });
    let files = write_merged(out, &shards, &timeline, &manifest, stop, &reasons)?;
    Ok(Merged {
        dir: out.to_owned(),
        files,
        records: timeline.records.len(),
        clock_skew_ns: timeline.clock_skew_ns,
        took: started.elapsed(),
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
    if let Some(pair) = have.windows(2).find(|pair| pair[0] == pair[1]) {
        bail!("shard {} is given twice", pair[0]);
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
    shard_rows: Vec<MergedShard>,
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
            if let Some([start, end]) = s.manifest.profiling_ns {
                let (start, end) = (start + delta, end + delta);
                window = Some(window.map_or((start, end), |(x, y)| (x.min(start), y.max(end))));
            }
            let stop = s.summary.stop_or_completed().to_string();
            shard_rows.push(MergedShard {
                index: s.index,
                dir: s.dir.clone(),
                host: s.shard.host.clone(),
                lanes: s.shard.lanes.clone(),
                records: s.records.len(),
                stop: stop.clone(),
                clock_offset_ns: s.shard.clock_offset_ns,
                clock_rtt_ns: s.shard.clock_rtt_ns,
                started_unix_ns: s.manifest.started_unix_ns,
                shift_ns: delta,
                profiling_ns: s.manifest.profiling_ns,
            });
            stops.push((stop, s.summary.message.clone()));
            records.append(&mut s.records);
        }
        records.sort_by(|start, end| {
            start
                .end_ns
                .cmp(&end.end_ns)
                .then_with(|| start.request_id.cmp(&end.request_id))
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
fn merged_manifest(shards: &[Shard], timeline: &Timeline, stop: &str) -> Manifest {
    let first = &shards[0].manifest;
    let mut manifest = first.clone();
    let mut lanes: Vec<LanePlan> = shards
        .iter()
        .flat_map(|s| s.manifest.lanes.iter().cloned())
        .collect();
    lanes.sort_by_key(LanePlan::lane);
    manifest.lanes = lanes;
    manifest.shard = None;
    manifest.shard_exports = None;
    manifest.trees = tree_counts(shards, &timeline.records);
    manifest.shards = Some(timeline.shard_rows.clone());
    manifest.clock_skew_ns = Some(timeline.clock_skew_ns);
    manifest.started_unix_ns = timeline.anchor as u64;
    manifest.ended_unix_ns = shards.iter().filter_map(|s| s.manifest.ended_unix_ns).max();
    manifest.profiling_ns = timeline.window.map(|(a, b)| [a, b]);
    manifest.merged_unix_ns = Some(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    manifest.stop = Some(stop.to_string());
    manifest
}

/// The session-tree counts of the merged run: every shard's counts summed, and the peak of
/// requests in flight at once over all shards' records (`None` for a single-stream run).
fn tree_counts(shards: &[Shard], records: &[RequestRecord]) -> Option<TreeCounts> {
    let mut merged: Option<TreeCounts> = None;
    for counts in shards.iter().filter_map(|s| s.manifest.trees.as_ref()) {
        merged
            .get_or_insert_with(TreeCounts::default)
            .absorb(counts);
    }
    let mut merged = merged?;
    merged.peak_in_flight = peak_in_flight(records);
    Some(merged)
}

/// The most requests in flight at once over `records` (a request that ends when another is sent
/// is not in flight with it).
fn peak_in_flight(records: &[RequestRecord]) -> u64 {
    let mut edges: Vec<(u64, i64)> = records
        .iter()
        .flat_map(|r| [(r.send_ns, 1), (r.end_ns, -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut peak) = (0i64, 0i64);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as u64
}

/// The scenario's rules for the exports that a shard's manifest keeps (`shard_exports`): the
/// coverage rule and the warmup's naming; aiperf 0.13's when absent.
fn export_rules(
    manifest: &Manifest,
) -> (
    crate::export::aiperf::CoverageRule,
    crate::export::aiperf::WarmupNaming,
) {
    let Some(rules) = &manifest.shard_exports else {
        return (
            crate::export::aiperf::CoverageRule::default(),
            crate::export::aiperf::WarmupNaming::default(),
        );
    };
    let rule = crate::export::aiperf::CoverageRule {
        required_ratio: rules.coverage_required_ratio,
        content: rules.coverage_content,
    };
    (
        rule,
        crate::export::aiperf::WarmupNaming(rules.warmup_phase_name.clone()),
    )
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
    timeline: &Timeline,
    manifest: &Manifest,
    stop: String,
    reasons: &[String],
) -> anyhow::Result<Vec<PathBuf>> {
    let (records, anchor) = (&timeline.records, timeline.anchor);
    let (profiling_start, profiling_end) = timeline.window.unwrap_or((0, 0));
    let first = &shards[0].manifest;
    let count = shards[0].count;
    let cancelled = stop != "completed";
    let message: Vec<String> = timeline
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
    let judgments = RecordedJudgments::of(first, "shard 0's manifest")?;
    let is_tree_run = records.iter().any(|r| r.tree.is_some());
    let dataset = dataset_of(first);
    let (summary, energy) =
        merged_summary(shards, timeline, &judgments, dataset.as_ref(), is_tree_run)?;
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
    // Shard 0 scraped the servers and GPUs for the whole run; its files hold their view.
    for name in [
        crate::export::server_metrics::JSON_FILE,
        crate::export::server_metrics::CSV_FILE,
        crate::export::gpu_telemetry::JSONL_FILE,
    ] {
        if let Ok(bytes) = std::fs::read(shards[0].dir.join(name)) {
            files.push(put(name, &bytes)?);
        }
    }
    let info = crate::export::aiperf::RunInfo {
        benchmark_id: first.run_id.clone(),
        anchor_unix_ns: anchor as u64,
        profiling_start_ns: profiling_start,
        profiling_end_ns: profiling_end,
        scenario_name: first.scenario.name.clone(),
        scenario_version: first.scenario.version.clone(),
        scenario_sha256: first.scenario.sha256.clone(),
        submission_valid: reasons.is_empty(),
        submission_invalid_reasons: reasons.to_vec(),
        was_cancelled: cancelled,
        input_config: json!(first.resolved_settings),
        seed: Some(first.seed),
        profiling_duration_ns: Some((first.benchmark_duration_s * 1e9) as u64),
        coverage_rule: export_rules(first).0,
        prefix_stamps: stamps(dataset.as_ref(), records),
        dataset: first
            .dataset
            .alias
            .as_deref()
            .and_then(crate::dataset::alias::lookup)
            .map(|a| {
                crate::export::aiperf::alias_dataset_json(a, first.dataset.num_dataset_entries)
            }),
        warmup_naming: export_rules(first).1,
        goodput: judgments.goodput,
        cache: doc.summary.cache.clone(),
        energy,
    };
    let slice = first.slice_duration;
    let (written, failed) = crate::export::write_run_exports(&art, records, &info, slice, None);
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

fn same_dir(first: &Path, second: &Path) -> bool {
    match (std::fs::canonicalize(first), std::fs::canonicalize(second)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The theoretical prefix-cache stamps of the replayed traces: a tree run's from its records, a
/// single-stream run's from its corpus `ds` (empty when it is not at hand).
fn stamps(
    ds: Option<&crate::dataset::Dataset>,
    records: &[RequestRecord],
) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
    if records.iter().any(|r| r.tree.is_some()) {
        return tree_stamps(records);
    }
    ds.map(|ds| super::plan::prefix_stamps(ds, records))
        .unwrap_or_default()
}

/// The merged run's summary over every shard's records: the figures, the cache truth, the jobs, the
/// GPUs' energy (with their platform), the sessions and the intervals, judged as shard 0's manifest
/// records.
fn merged_summary(
    shards: &[Shard],
    timeline: &Timeline,
    judgments: &RecordedJudgments,
    dataset: Option<&crate::dataset::Dataset>,
    is_tree_run: bool,
) -> anyhow::Result<(
    crate::metrics::Summary,
    Option<crate::export::gpu_telemetry::GpuWindow>,
)> {
    let records = &timeline.records;
    let (profiling_start, profiling_end) = timeline.window.unwrap_or((0, 0));
    let first = &shards[0].manifest;
    let (times, shapes) = corpus_facts(dataset, is_tree_run, records);
    let mut summary = crate::metrics::Summary::of(records);
    // Each shard registered its own first senders: a block two shards both sent counts as each
    // one's own, so the model may predict a miss where the server hit (surplus), never the reverse.
    summary.cache = crate::metrics::cache_truth::cache_report(
        records,
        &crate::metrics::cache_truth::ModelSpec {
            block_size: None,
            capacity_tokens: first.server_slots.map(|pool| pool.capacity()),
        },
    );
    summary.jobs = crate::metrics::jobs::figures(
        records,
        &shapes,
        &times,
        crate::metrics::jobs::JobDenominators {
            window_ns: (profiling_start, profiling_end),
            lanes: (first.concurrency > 0).then_some(first.concurrency),
            gpus: first.gpus,
        },
    );
    // Shard 0's scrapes are on its own clock: the merged window moved back onto it.
    let shard0_delta = u64::try_from(shards[0].anchor - timeline.anchor).unwrap_or(0);
    let energy = merged_energy(
        &shards[0].dir,
        (
            profiling_start.saturating_sub(shard0_delta),
            profiling_end.saturating_sub(shard0_delta),
        ),
        &summary,
        first,
    );
    summary.energy = energy.as_ref().map(|gpus| gpus.energy.clone());
    if let Some(slo) = &judgments.session_slo {
        summary.session_slo = Some(slo.judge(records, &times));
    }
    summary.intervals = Some(merged_intervals(
        records,
        (profiling_start, profiling_end),
        &summary,
        first,
        (&times, &shapes),
        judgments,
    )?);
    if let Some(goodput_spec) = &judgments.goodput {
        summary.goodput = Some(goodput_spec.of_run(records));
        summary.sessions = Some(crate::metrics::sessions::figures(
            records,
            goodput_spec,
            judgments.session_goodput_share,
            &times,
        ));
    }
    Ok((summary, energy))
}

/// The merged run's intervals over every shard's sessions, with the judgments shard 0's manifest
/// records, at its `--confidence` and seed.
fn merged_intervals(
    records: &[RequestRecord],
    window: (u64, u64),
    summary: &crate::metrics::Summary,
    first: &Manifest,
    (times, shapes): (
        &crate::metrics::sessions::RecordedTimes,
        &crate::metrics::jobs::JobShapes,
    ),
    judgments: &RecordedJudgments,
) -> anyhow::Result<crate::metrics::precision::Intervals> {
    use crate::metrics::precision;
    let level = precision::Level::new(first.confidence.unwrap_or(0.95))
        .map_err(|e| anyhow!("shard 0's manifest: confidence {e}"))?;
    let energy_j = summary.energy.as_ref().and_then(|e| e.total_gpu_energy_j);
    let judged = judgments.run_judgments(times, shapes, energy_j);
    let table = precision::run_table(records, window.1.saturating_sub(window.0), &judged);
    Ok(precision::bootstrap(
        &table,
        &precision::FIGURES,
        level,
        None,
        first.seed,
    ))
}

/// The GPUs' energy over the merged window from shard 0's GPU telemetry journal (the only shard
/// that scrapes), per request, token and job of every shard, and their platform; `None` without
/// one.
fn merged_energy(
    shard0: &Path,
    window: (u64, u64),
    summary: &crate::metrics::Summary,
    first: &Manifest,
) -> Option<crate::export::gpu_telemetry::GpuWindow> {
    let path = shard0.join(crate::client::scrape_journal::GPU_TELEMETRY_JOURNAL);
    if !path.is_file() {
        return None;
    }
    let log = match crate::client::scrape_journal::read_journal(&path) {
        Ok(log) => log,
        Err(e) => {
            tracing::warn!("the merged run has no GPU energy: {e}");
            return None;
        }
    };
    let denominators = crate::metrics::energy::Denominators {
        requests_ok: summary.requests_ok,
        input_tokens: summary.input_tokens,
        output_tokens: summary.output_tokens,
        jobs_ok: summary.jobs.as_ref().map(|jobs| jobs.ok),
        lanes: (first.concurrency > 0).then_some(u64::from(first.concurrency)),
        expected_gpus: first.gpus.map(u64::from),
    };
    let report = crate::metrics::energy::EnergyReport::of(&log, window, denominators);
    let anchor = first.started_unix_ns;
    Some(crate::export::gpu_telemetry::GpuWindow::of(
        &log, window, anchor, report,
    ))
}

/// What the merge reads of the corpus the shards replayed: each stream's recorded times (the
/// slowdown's baseline) and, for a session-tree run, each tree's streams (what a whole job runs),
/// from the trees as the default nested basis builds them. Empty without the corpus.
pub(super) fn corpus_facts(
    dataset: Option<&crate::dataset::Dataset>,
    is_tree_run: bool,
    records: &[RequestRecord],
) -> (
    crate::metrics::sessions::RecordedTimes,
    crate::metrics::jobs::JobShapes,
) {
    let Some(ds) = dataset else {
        return Default::default();
    };
    if !is_tree_run {
        return (
            super::plan::recorded_times(ds, records),
            crate::metrics::jobs::JobShapes::new(),
        );
    }
    let open = crate::dataset::tree::corpus::TreeOpen::default();
    match crate::dataset::tree::corpus::TreeCorpus::open(ds, &open) {
        Ok(corpus) => (
            super::plan::tree_recorded_times(&corpus, records),
            super::plan::job_shapes(&corpus, records),
        ),
        Err(e) => {
            tracing::warn!(
                "{}: its session trees: {e}; the merged export has no session slowdown, and its jobs are judged by the streams the records show",
                ds.source_path().display()
            );
            Default::default()
        }
    }
}

/// The judgments a run's manifest records, parsed: `--goodput` with its session share and
/// `--session-slo` (what a merge, `compare` and `--trials` judge read-back runs by).
pub(super) struct RecordedJudgments {
    pub(super) goodput: Option<crate::metrics::goodput::Goodput>,
    pub(super) session_goodput_share: f64,
    pub(super) session_slo: Option<crate::metrics::sessions::SessionSlo>,
}

impl RecordedJudgments {
    /// What `manifest` records; `whose` names it in an error.
    pub(super) fn of(manifest: &Manifest, whose: &str) -> anyhow::Result<RecordedJudgments> {
        let goodput = manifest
            .goodput
            .as_deref()
            .map(|spec| {
                crate::metrics::goodput::Goodput::parse(spec)
                    .map_err(|e| anyhow!("{whose}: goodput {spec:?}: {e}"))
            })
            .transpose()?;
        let session_slo = manifest
            .session_slo
            .as_deref()
            .map(|spec| {
                crate::metrics::sessions::SessionSlo::parse(spec)
                    .map_err(|e| anyhow!("{whose}: session_slo {spec:?}: {e}"))
            })
            .transpose()?;
        Ok(RecordedJudgments {
            goodput,
            session_goodput_share: manifest.session_goodput_share.unwrap_or(1.0),
            session_slo,
        })
    }

    /// The session table's judgments, with the corpus facts and the run's energy.
    pub(super) fn run_judgments<'a>(
        &'a self,
        recorded: &'a crate::metrics::sessions::RecordedTimes,
        shapes: &'a crate::metrics::jobs::JobShapes,
        energy_j: Option<f64>,
    ) -> crate::metrics::precision::RunJudgments<'a> {
        crate::metrics::precision::RunJudgments {
            goodput: self
                .goodput
                .as_ref()
                .map(|goodput| (goodput, self.session_goodput_share)),
            session_slo: self.session_slo.as_ref(),
            recorded,
            shapes,
            energy_j,
        }
    }
}

/// The dataset the shards replayed, for what the merge reads of the corpus (the theoretical
/// prefix-cache hit rate, the sessions' recorded times); `None`, with a warning, when it is gone.
pub(super) fn dataset_of(manifest: &Manifest) -> Option<crate::dataset::Dataset> {
    let src = manifest.dataset.source.display().to_string();
    if src.is_empty() {
        return None;
    }
    match crate::dataset::Dataset::open_path(
        &manifest.dataset.source,
        &crate::dataset::OpenOptions::default(),
    ) {
        Ok(ds) => Some(ds),
        Err(e) => {
            tracing::warn!(
                "{src}: {e}; the merged export has no theoretical prefix-cache hit rate or session slowdown"
            );
            None
        }
    }
}

/// The stamps of a session-tree run's streams, as its records carry them (each turn's own).
fn tree_stamps(records: &[RequestRecord]) -> std::collections::HashMap<String, Vec<(u32, u32)>> {
    let mut out: std::collections::HashMap<String, Vec<(u32, u32)>> =
        std::collections::HashMap::default();
    for r in records.iter().filter(|r| r.phase == Phase::Profiling) {
        let Some(tree) = &r.tree else { continue };
        let stamps = out.entry(r.trace_id.clone()).or_default();
        let turn = r.turn as usize;
        if stamps.len() <= turn {
            stamps.resize(turn + 1, (0, 0));
        }
        stamps[turn] = (tree.prefix_hit_blocks, tree.prefix_total_blocks);
    }
    out
}

/// The scenario's verdict on the merged counts (warmup responses count in the overflow rate, as
/// in a run), plus the reasons `resolve` gave before the run.
fn validity(
    shards: &[Shard],
    timeline: &Timeline,
    cancelled: bool,
    home: &Path,
) -> anyhow::Result<Vec<String>> {
    let (records, window) = (&timeline.records, timeline.window);
    let manifest = &shards[0].manifest;
    let sha = manifest.scenario.sha256.as_str();
    let source = manifest.scenario.source.to_str().unwrap_or_default();
    let component = if let Some(stem) = source.strip_prefix("builtin:") {
        super::load(Some(stem), home)?
    } else if Path::new(source).is_file() {
        super::load(Some(&format!("{source}@sha256:{sha}")), home)?
    } else {
        super::load(Some(&format!("sha256:{sha}")), home)?
    };
    if component.hash() != sha {
        bail!(
            "the scenario at hand is sha256:{} but the run used sha256:{sha}",
            component.hash()
        );
    }
    let setting = |name: ReplaySetting| {
        manifest
            .resolved_setting(name.name())
            .unwrap_or(&Value::Null)
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
    let mut inst = component.instantiate()?;
    let base = crate::scenario::types::Outcome {
        total_responses: total,
        context_overflows: overflows,
        failed,
        cancelled,
        unsafe_override: setting(ReplaySetting::UnsafeOverride)
            .as_bool()
            .unwrap_or(false),
        overflow_rate_limit: setting(ReplaySetting::ContextOverflowRateLimit)
            .as_f64()
            .unwrap_or(0.01),
    };
    let reasons = if component.world().trees() {
        // Coverage over every shard's profiling records, from profiling's start over all shards
        // against the configured duration (as a run in one process measures it).
        let prof = records.iter().filter(|r| r.phase == Phase::Profiling);
        let cov = window.and_then(|(p0, _)| {
            crate::metrics::stats::Coverage::of(
                prof,
                p0,
                (manifest.benchmark_duration_s * 1e9) as u64,
            )
        });
        inst.tree_validity(
            base,
            crate::scenario::TreeCoverage {
                profiling_seconds: manifest.benchmark_duration_s,
                ttft: cov.map(|c| c.ttft_ratio),
                itl: cov.map(|c| c.inter_token_latency_ratio),
                content: cov.map(|c| c.streaming_content_ratio),
            },
        )?
    } else {
        inst.validity(base)?
    };
    Ok(crate::scenario::check::invalid_reasons(
        reasons,
        &manifest.resolve_invalid_reasons,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::testkit::rec;
    use crate::record::TreeInfo;

    fn tree_rec(send_ms: u64, trace: &str, turn: u32, stamp: (u32, u32)) -> RequestRecord {
        let mut r = rec(send_ms, &[5, 10], 100, 2);
        r.trace_id = trace.into();
        r.turn = turn;
        r.tree = Some(TreeInfo {
            agent_depth: 0,
            root_correlation_id: "s0".into(),
            parent_correlation_id: None,
            source_trace_id: trace.into(),
            prefix_hit_blocks: stamp.0,
            prefix_total_blocks: stamp.1,
            source_outer_idx: None,
            source_inner_idx: None,
        });
        r
    }

    /// The merged run's peak counts requests of every shard that overlap; one that ends as another
    /// is sent does not overlap it.
    #[test]
    fn the_peak_in_flight_is_over_every_shards_records() {
        // Each request takes 11 ms: 0-11, 5-16 and 11-22 (the first ends as the third is sent).
        let recs = [
            rec(0, &[5, 10], 1, 1),
            rec(5, &[5, 10], 1, 1),
            rec(11, &[5, 10], 1, 1),
        ];
        assert_eq!(peak_in_flight(&recs), 2);
        assert_eq!(peak_in_flight(&[]), 0);
    }

    /// A tree run's stamps come from its records, per stream and turn, as the run in one process
    /// takes them from its corpus.
    #[test]
    fn tree_stamps_are_the_records_own() {
        let recs = [
            tree_rec(0, "t::sa:1", 2, (3, 4)),
            tree_rec(1, "t", 0, (0, 2)),
        ];
        let s = tree_stamps(&recs);
        assert_eq!(s["t::sa:1"], vec![(0, 0), (0, 0), (3, 4)]);
        assert_eq!(s["t"], vec![(0, 2)]);
    }
}
