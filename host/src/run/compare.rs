//! `agentx-host compare A B` (and `sweep --compare`'s intervals): reads two run, trials or sweep
//! directories, rebuilds each run's session table with the judgments its manifest records (as the
//! run and the merge build it, [`crate::metrics::precision::run_table`]) and compares them figure
//! by figure ([`crate::metrics::precision::compare::ratio`]). The layout of the result is
//! [`crate::export::compare`]'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};

use crate::export::compare::{CompareReport, Family, Kind, PointFamily};
use crate::export::manifest::{Manifest, MANIFEST_FILE};
use crate::export::run_summary::{RunSummary, RUN_SUMMARY};
use crate::export::sweep::SWEEP_JSON;
use crate::metrics::precision::{self, Level, SessionTable};
use crate::record::RequestRecord;

/// The file a `--trials` point writes beside its `trial_<i>/` runs.
pub const TRIALS_JSON: &str = "trials.json";

/// What a compared directory holds: the run directories to pool or to pair.
enum Holding {
    Run(PathBuf),
    Trials(Vec<PathBuf>),
    Sweep(BTreeMap<u32, PathBuf>),
}

impl Holding {
    fn kind(&self) -> Kind {
        match self {
            Holding::Run(_) => Kind::Run,
            Holding::Trials(_) => Kind::Trials,
            Holding::Sweep(_) => Kind::Sweep,
        }
    }
}

/// Compares B with A at `level` (`None`: A's `--confidence`, else 0.95), seeded from A's seed.
pub fn compare(
    path_a: &Path,
    path_b: &Path,
    level: Option<Level>,
) -> anyhow::Result<CompareReport> {
    let (held_a, held_b) = (holding("A", path_a)?, holding("B", path_b)?);
    if held_a.kind() != held_b.kind() {
        anyhow::bail!(
            "A {} is a {} directory and B {} is a {} directory: compare a run with a run, trials with trials, a sweep with a sweep",
            path_a.display(),
            held_a.kind().name(),
            path_b.display(),
            held_b.kind().name()
        );
    }
    let mut report = CompareReport {
        a: path_a.display().to_string(),
        b: path_b.display().to_string(),
        kind: held_a.kind(),
        level: 0.0,
        whole: None,
        points: Vec::new(),
        notes: Vec::new(),
    };
    match (held_a, held_b) {
        (Holding::Sweep(points_a), Holding::Sweep(points_b)) => {
            let mut common = points_a
                .iter()
                .filter_map(|(conc, dir)| Some((*conc, dir, points_b.get(conc)?)))
                .peekable();
            let Some((_, first_a, _)) = common.peek() else {
                anyhow::bail!(
                    "the sweeps {} and {} have no finished concurrency in common: A ran {:?}, B ran {:?}",
                    path_a.display(),
                    path_b.display(),
                    points_a.keys().collect::<Vec<_>>(),
                    points_b.keys().collect::<Vec<_>>()
                );
            };
            let (level, seed) = level_and_seed(level, &manifest_of(first_a)?)?;
            report.level = level.get();
            for (concurrency, dir_a, dir_b) in common {
                let family = pair(
                    std::slice::from_ref(dir_a),
                    std::slice::from_ref(dir_b),
                    level,
                    seed,
                )?;
                report.points.push(PointFamily {
                    concurrency,
                    family,
                });
            }
            for (side, only, other) in [("A", &points_a, &points_b), ("B", &points_b, &points_a)] {
                for conc in only.keys().filter(|conc| !other.contains_key(conc)) {
                    report
                        .notes
                        .push(format!("concurrency {conc}: finished only in {side}"));
                }
            }
        }
        (held_a, held_b) => {
            let (dirs_a, dirs_b) = (run_dirs(held_a), run_dirs(held_b));
            let (level, seed) = level_and_seed(level, &manifest_of(&dirs_a[0])?)?;
            report.level = level.get();
            report.whole = Some(pair(&dirs_a, &dirs_b, level, seed)?);
        }
    }
    Ok(report)
}

/// The run directories of a run or trials holding.
fn run_dirs(held: Holding) -> Vec<PathBuf> {
    match held {
        Holding::Run(dir) => vec![dir],
        Holding::Trials(dirs) => dirs,
        Holding::Sweep(points) => points.into_values().collect(),
    }
}

/// `--confidence`, else the first run's, else 0.95; and the first run's seed.
fn level_and_seed(given: Option<Level>, first: &Manifest) -> anyhow::Result<(Level, u64)> {
    let level = match given {
        Some(level) => level,
        None => Level::new(first.confidence.unwrap_or(0.95))
            .map_err(|e| anyhow!("A's {MANIFEST_FILE}: confidence {e}"))?,
    };
    Ok((level, first.seed))
}

/// The pooled runs of A against the pooled runs of B.
fn pair(dirs_a: &[PathBuf], dirs_b: &[PathBuf], level: Level, seed: u64) -> anyhow::Result<Family> {
    let (table_a, table_b) = (pooled_table(dirs_a)?, pooled_table(dirs_b)?);
    Ok(
        precision::compare::ratio(&table_a, &table_b, &precision::FIGURES, level, None, seed)
            .into(),
    )
}

/// What `compare` reads of a directory, named `side` in errors.
fn holding(side: &str, dir: &Path) -> anyhow::Result<Holding> {
    if !dir.is_dir() {
        anyhow::bail!(
            "{side} {}: no such directory; give a run, trials or sweep directory (an --output-artifact-dir)",
            dir.display()
        );
    }
    if dir.join(TRIALS_JSON).is_file() {
        let mut trials: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
            .with_context(|| format!("{side} {}", dir.display()))?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let index = name.strip_prefix("trial_")?.parse().ok()?;
                entry
                    .path()
                    .join(RUN_SUMMARY)
                    .is_file()
                    .then(|| (index, entry.path()))
            })
            .collect();
        trials.sort();
        if trials.is_empty() {
            anyhow::bail!(
                "{side} {}: its {TRIALS_JSON} names trials, but no trial_<i>/ holds a finished run ({RUN_SUMMARY})",
                dir.display()
            );
        }
        return Ok(Holding::Trials(
            trials.into_iter().map(|(_, dir)| dir).collect(),
        ));
    }
    if dir.join(RUN_SUMMARY).is_file() {
        return Ok(Holding::Run(dir.to_owned()));
    }
    if dir.join(SWEEP_JSON).is_file() {
        let sweep = crate::export::sweep_views::read_sweep(dir)
            .map_err(|e| anyhow!("{side} {}: {e}", dir.display()))?;
        // The last finished point of each concurrency counts.
        let points = sweep
            .points
            .iter()
            .filter(|point| point.done())
            .map(|point| (point.concurrency, dir.join(&point.dir)))
            .collect();
        return Ok(Holding::Sweep(points));
    }
    anyhow::bail!(
        "{side} {} is not a run, trials or sweep directory: it holds no {RUN_SUMMARY}, {TRIALS_JSON} or {SWEEP_JSON}; give the --output-artifact-dir of a finished `run` or `sweep`",
        dir.display()
    )
}

/// One run as `compare` reads it.
struct RunFiles {
    manifest: Manifest,
    records: Vec<RequestRecord>,
    window_ns: u64,
    energy_j: Option<f64>,
}

/// A run's manifest.
fn manifest_of(dir: &Path) -> anyhow::Result<Manifest> {
    Manifest::read_dir(dir).map_err(|e| anyhow!("{e}"))
}

fn read_run(dir: &Path) -> anyhow::Result<RunFiles> {
    let manifest = manifest_of(dir)?;
    let [start, end] = manifest.profiling_ns.ok_or_else(|| {
        anyhow!(
            "{}: no profiling window (profiling_ns): the run never profiled, so it has no figures to compare",
            dir.join(MANIFEST_FILE).display()
        )
    })?;
    let summary = RunSummary::read_dir(dir).map_err(|e| anyhow!("{e}"))?;
    let records = crate::record::read_records(&dir.join(crate::record::RECORDS_FILE))
        .map_err(|e| anyhow!("{e}"))?;
    Ok(RunFiles {
        manifest,
        records,
        window_ns: end.saturating_sub(start),
        energy_j: summary
            .summary
            .energy
            .as_ref()
            .and_then(|energy| energy.total_gpu_energy_j),
    })
}

/// The session table of the runs in `dirs` pooled (their sessions together over the sum of their
/// windows, their energy summed when every run has one), judged by the first run's manifest.
pub(super) fn pooled_table(dirs: &[PathBuf]) -> anyhow::Result<SessionTable> {
    let runs = dirs
        .iter()
        .map(|dir| read_run(dir))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let first = &runs[0].manifest;
    let judgments = super::merge::RecordedJudgments::of(
        first,
        &dirs[0].join(MANIFEST_FILE).display().to_string(),
    )?;
    let records: Vec<RequestRecord> = runs
        .iter()
        .flat_map(|run| run.records.iter().cloned())
        .collect();
    let window_ns = runs.iter().map(|run| run.window_ns).sum();
    let energy_j = runs.iter().map(|run| run.energy_j).sum::<Option<f64>>();
    let is_tree_run = records.iter().any(|record| record.tree.is_some());
    let dataset = super::merge::dataset_of(first);
    let (times, shapes) = super::merge::corpus_facts(dataset.as_ref(), is_tree_run, &records);
    let judged = judgments.run_judgments(&times, &shapes, energy_j);
    Ok(precision::run_table(&records, window_ns, &judged))
}
