//! `agentx-host dataset fidelity CORPUS RUN_DIR`: how faithfully a run replayed its corpus, request
//! by request. Each ok record is matched to the corpus turn it replayed (its stream's conversation
//! id and turn), and the report puts planned against replayed: input and output tokens (relative
//! error), the end-to-start gaps inside a stream, each tree's shape (streams and their turn counts)
//! against the replayed instances that ran a whole tree, and the hit the corpus allows against the
//! hit the run's prompts allowed (the cache-truth model's infinite cache).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{anyhow, Context};
use serde::Serialize;

use crate::dataset::tree::corpus::{TreeCorpus, TreeOpen};
use crate::dataset::Dataset;
use crate::record::{dist, Phase, RequestRecord};

/// Spread of an error over the matched requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ErrorSpread {
    /// Requests it covers.
    pub count: usize,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl ErrorSpread {
    fn of(mut values: Vec<f64>) -> ErrorSpread {
        if values.is_empty() {
            return ErrorSpread::default();
        }
        values.sort_by(f64::total_cmp);
        ErrorSpread {
            count: values.len(),
            mean: dist::mean(&values),
            p50: dist::percentile(&values, 50.0).unwrap_or(0.0),
            p99: dist::percentile(&values, 99.0).unwrap_or(0.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

/// One tree's shape: its streams' turn counts, in stream order.
pub type Shape = Vec<usize>;

/// How one corpus tree was replayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TreeFidelity {
    /// The trace.
    pub trace_id: String,
    /// Its shape in the corpus.
    pub planned: Shape,
    /// The shapes of the replayed instances that ran every stream from its first turn.
    pub replayed_whole: Vec<Shape>,
    /// Every whole instance had the corpus's shape (and there was at least one).
    pub equal: bool,
}

/// The fidelity report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FidelityReport {
    /// Ok records matched to a corpus turn.
    pub matched: usize,
    /// Ok records of no corpus turn (another corpus, or a mid-tree warmup start).
    pub unmatched: usize,
    /// |replayed − planned| / planned input tokens.
    pub isl_relative_error: ErrorSpread,
    /// |replayed − planned| / planned output tokens (profiling turns with output planned).
    pub osl_relative_error: ErrorSpread,
    /// |replayed − planned| end-to-start gap inside a stream (both turns profiling), milliseconds.
    pub gap_error_ms: ErrorSpread,
    /// Each tree's shape, planned against replayed.
    pub trees: Vec<TreeFidelity>,
    /// The corpus's theoretical prefix hit (the trace's own earlier requests).
    pub planned_hit: f64,
    /// The run's achievable hit with an infinite cache (its `run_summary.json`'s cache truth).
    pub replayed_hit: Option<f64>,
}

impl FidelityReport {
    /// Whether every tree kept its shape and the ISL is within `isl_tolerance` (relative) at the
    /// 99th percentile.
    pub fn within(&self, isl_tolerance: f64) -> bool {
        self.trees.iter().all(|tree| tree.equal)
            && self.matched > 0
            && self.isl_relative_error.p99 <= isl_tolerance
    }
}

/// A corpus turn: its tree, stream and planned figures.
struct Planned {
    input: u32,
    output: u32,
    gap_ms: Option<f64>,
}

/// The fidelity of the run in `run_dir` to the corpus `corpus` (its session trees cached in
/// `cache_dir`, else the default cache).
pub fn fidelity(
    corpus: &Dataset,
    run_dir: &Path,
    cache_dir: Option<std::path::PathBuf>,
) -> anyhow::Result<FidelityReport> {
    let trees = TreeCorpus::open(
        corpus,
        &TreeOpen {
            cache_dir,
            ..TreeOpen::default()
        },
    )
    .context("building the corpus's session trees")?;
    let mut planned: HashMap<(&str, u32), Planned> = HashMap::new();
    for (tree_index, tree) in trees.trees.iter().enumerate() {
        for (stream_index, stream) in tree.streams.iter().enumerate() {
            let trajectory = trees.stream(tree_index, stream_index);
            for (turn_index, turn) in stream.turns.iter().enumerate() {
                let Some(recorded) = trajectory.turn(turn_index) else {
                    continue;
                };
                let gap_ms = turn_index.checked_sub(1).map(|previous| {
                    let before = &stream.turns[previous];
                    turn.ts_ms - before.ts_ms - before.api_time_ms.unwrap_or(0.0)
                });
                planned.insert(
                    (stream.id.as_str(), turn_index as u32),
                    Planned {
                        input: recorded.input_tokens(),
                        output: recorded.output_tokens(),
                        gap_ms,
                    },
                );
            }
        }
    }
    let records_path = run_dir.join(crate::record::RECORDS_FILE);
    let records = crate::record::read_records(&records_path).map_err(|e| anyhow!("{e}"))?;
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.error.is_none()).collect();
    let (mut isl, mut osl, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
    let mut matched = 0;
    let mut previous_end: HashMap<(&str, u32), (u64, Phase)> = HashMap::new();
    for record in &ok {
        previous_end.insert(
            (&record.correlation_id, record.turn),
            (record.end_ns, record.phase),
        );
    }
    for record in &ok {
        let Some(plan) = planned.get(&(record.trace_id.as_str(), record.turn)) else {
            continue;
        };
        matched += 1;
        isl.push(relative(record.isl, u64::from(plan.input)));
        // Warmup requests are cut to the scenario's warmup length, and a stream's first profiling
        // turn waits for profiling to begin: both by design, so only profiling is judged there.
        if record.phase != Phase::Profiling {
            continue;
        }
        if plan.output > 0 {
            osl.push(relative(record.osl, u64::from(plan.output)));
        }
        let before = record
            .turn
            .checked_sub(1)
            .and_then(|turn| previous_end.get(&(record.correlation_id.as_str(), turn)))
            .filter(|(_, phase)| *phase == Phase::Profiling)
            .map(|(end, _)| end);
        if let (Some(gap), Some(&end)) = (plan.gap_ms, before) {
            let replayed = record.send_ns.saturating_sub(end) as f64 / 1e6;
            gaps.push((replayed - gap.max(0.0)).abs());
        }
    }
    let summary = crate::export::run_summary::RunSummary::read_dir(run_dir).ok();
    Ok(FidelityReport {
        matched,
        unmatched: ok.len() - matched,
        isl_relative_error: ErrorSpread::of(isl),
        osl_relative_error: ErrorSpread::of(osl),
        gap_error_ms: ErrorSpread::of(gaps),
        trees: tree_shapes(&trees, &ok),
        planned_hit: crate::dataset::stats::corpus_stats(corpus).theoretical_hit_rate_prefix,
        replayed_hit: summary
            .and_then(|summary| summary.summary.cache)
            .and_then(|cache| cache.achievable.infinite.value),
    })
}

fn relative(replayed: u64, planned: u64) -> f64 {
    (replayed as f64 - planned as f64).abs() / (planned.max(1) as f64)
}

/// Each corpus tree's shape against the replayed instances (records of one root correlation id)
/// that started every stream at its first turn.
fn tree_shapes(trees: &TreeCorpus, ok: &[&RequestRecord]) -> Vec<TreeFidelity> {
    // Per instance (root correlation id): per stream id, the turns replayed.
    let mut instances: BTreeMap<&str, BTreeMap<&str, Vec<u32>>> = BTreeMap::new();
    for record in ok {
        let root = record
            .tree
            .as_ref()
            .map_or(record.correlation_id.as_str(), |tree| {
                tree.root_correlation_id.as_str()
            });
        instances
            .entry(root)
            .or_default()
            .entry(&record.trace_id)
            .or_default()
            .push(record.turn);
    }
    trees
        .trees
        .iter()
        .map(|tree| {
            let planned: Shape = tree.streams.iter().map(|s| s.turns.len()).collect();
            let ids: Vec<&str> = tree.streams.iter().map(|s| s.id.as_str()).collect();
            let replayed_whole: Vec<Shape> = instances
                .values()
                .filter(|streams| streams.contains_key(ids[0]))
                .filter(|streams| streams.values().all(|turns| turns.contains(&0)))
                .filter(|streams| streams.keys().all(|id| ids.contains(id)))
                .filter(|streams| {
                    // A whole instance: its root ran to its last planned turn.
                    streams[ids[0]].len() >= planned[0]
                })
                .map(|streams| {
                    ids.iter()
                        .map(|id| streams.get(id).map_or(0, Vec::len))
                        .collect()
                })
                .collect();
            TreeFidelity {
                trace_id: tree.trace_id.clone(),
                equal: !replayed_whole.is_empty()
                    && replayed_whole.iter().all(|shape| *shape == planned),
                planned,
                replayed_whole,
            }
        })
        .collect()
}
