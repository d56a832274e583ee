//! Corpus statistics: sizes, ISL/OSL distributions, and theoretical prefix-cache hit rates.
//!
//! Hit rates follow InferenceX's definitions (docs/specs/inferencex-rows.md#derived-metrics),
//! computed per trace over its requests in order: set-based, a block is a hit if its hash id
//! appeared in an earlier request of the same trace (an infinite cache); longest-prefix, a request
//! hits the longest hash-id prefix it shares with any earlier request of the trace (a prefix cache
//! that never evicts). Rates are hit blocks over all blocks.
//!
//! Session-tree figures ([`TreeStats`]) come from the trees [`super::tree::build`] makes of the traces
//! (subagent entries included, which the cached corpus leaves out).

use std::collections::{HashMap, HashSet};

use std::ops::ControlFlow;

use serde::Serialize;

use super::error::DatasetError;
use super::format::FormatSpec;
use super::tree::chain::ChainClass;
use super::tree::{self, NestedBasis, SessionTree, StreamKind, TreeOptions};
use super::view::{Dataset, Trajectory};
use super::weka::SourceFiles;

/// Summary statistics of a sample, with percentiles by linear interpolation (`k = (n-1)p/100`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Dist {
    /// Sample size.
    pub count: usize,
    /// Arithmetic mean (0 for an empty sample, as every field).
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

impl Dist {
    /// The statistics of sample `values` (all zero when it is empty).
    pub fn of(values: Vec<f64>) -> Dist {
        let Some(sorted) = agentx_record::dist::Sorted::new(values) else {
            return Dist::default();
        };
        Dist {
            count: sorted.len(),
            mean: sorted.mean(),
            min: sorted.min(),
            p50: sorted.percentile(50.0),
            p90: sorted.percentile(90.0),
            p99: sorted.percentile(99.0),
            max: sorted.max(),
        }
    }
}

/// Hit counts of one walk (blocks are hash ids).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HitCounts {
    /// Hash blocks sent over the walk's requests.
    pub blocks: u64,
    /// Blocks seen in any earlier request of the walk (an infinite cache keyed by block).
    pub set_hits: u64,
    /// Blocks in the longest prefix shared with an earlier request (a prefix cache).
    pub prefix_hits: u64,
}

impl HitCounts {
    /// Adds the counts of another walk.
    pub fn add(&mut self, other: HitCounts) {
        self.blocks += other.blocks;
        self.set_hits += other.set_hits;
        self.prefix_hits += other.prefix_hits;
    }
    /// `set_hits / blocks` (0 without blocks).
    pub fn set_rate(&self) -> f64 {
        ratio(self.set_hits, self.blocks)
    }
    /// `prefix_hits / blocks` (0 without blocks).
    pub fn prefix_rate(&self) -> f64 {
        ratio(self.prefix_hits, self.blocks)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Theoretical hits of turns `0..=upto` of `traj` (all turns if `upto` is past the end).
pub fn theoretical_hits(traj: Trajectory<'_>, upto: usize) -> HitCounts {
    let mut counts = HitCounts::default();
    let mut seen: HashSet<u32> = HashSet::new();
    // A trie of the hash-id sequences of earlier requests: (node, id) -> child; node 0 is the root.
    let mut trie: HashMap<(u32, u32), u32> = HashMap::new();
    let mut path: Vec<u32> = Vec::new(); // nodes of the previous request's ids, by position
    let mut ids: Vec<u32> = Vec::new();
    for turn in traj.turns().take(upto.saturating_add(1)) {
        let lcp = turn.lcp_with_previous();
        ids.truncate(lcp);
        ids.extend_from_slice(turn.new_hash_ids());
        counts.blocks += ids.len() as u64;
        // Set-based: the shared prefix was all seen in the previous request.
        let mut hits = lcp as u64;
        for id in &ids[lcp..] {
            if seen.contains(id) {
                hits += 1;
            }
        }
        counts.set_hits += hits;
        seen.extend(ids[lcp..].iter().copied());
        // Longest prefix: follow the trie from the shared prefix; create nodes where it ends.
        path.truncate(lcp);
        let mut node = path.last().copied().unwrap_or(0);
        let mut matched = lcp;
        let mut matching = true;
        for &id in &ids[lcp..] {
            let next_free = trie.len() as u32 + 1;
            let child = if matching {
                match trie.get(&(node, id)) {
                    Some(&ch) => {
                        matched += 1;
                        ch
                    }
                    None => {
                        matching = false;
                        trie.insert((node, id), next_free);
                        next_free
                    }
                }
            } else {
                trie.insert((node, id), next_free);
                next_free
            };
            path.push(child);
            node = child;
        }
        counts.prefix_hits += matched as u64;
    }
    counts
}

/// Each turn's theoretical prefix-cache `(hit, total)` blocks as aiperf's loader stamps them: the
/// hits are the leading run of the turn's hash ids already sent by an earlier turn of the trace (an
/// infinite cache keyed by block, matched from the start of the prompt).
pub fn prefix_stamps(traj: Trajectory<'_>) -> Vec<(u32, u32)> {
    let mut seen: HashSet<u32> = HashSet::new();
    traj.turns()
        .map(|turn| {
            // The shared prefix with the previous turn was sent by it.
            let lcp = turn.lcp_with_previous();
            let new = turn.new_hash_ids();
            let hits = lcp + new.iter().take_while(|id| seen.contains(id)).count();
            seen.extend(new.iter().copied());
            (hits as u32, turn.num_hash_ids() as u32)
        })
        .collect()
}

/// Statistics of a whole corpus.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CorpusStats {
    /// Trajectories.
    pub traces: usize,
    /// Requests over all trajectories.
    pub requests: usize,
    /// Subagent entries parsed and not replayed.
    pub subagents_ignored: u64,
    /// Turns per trajectory.
    pub turns_per_trace: Dist,
    /// Input tokens per request.
    pub isl: Dist,
    /// Output tokens per request.
    pub osl: Dist,
    /// Input tokens of each trajectory's first request.
    pub start_isl: Dist,
    /// Input tokens of each trajectory's last request.
    pub end_isl: Dist,
    /// Recorded think time per request, seconds (requests without one left out).
    pub think_time_s: Dist,
    /// Requests that record no output tokens.
    pub out_zero_turns: usize,
    /// Requests whose prompt is not an extension of the previous one (a context cut).
    pub non_monotonic_cuts: usize,
    /// Per trajectory, the share of blocks seen before (trajectories without blocks left out).
    pub per_trace_set_hit_rate: Dist,
    /// Hit counts summed over the trajectories.
    pub hits: HitCounts,
    /// `hits.set_rate()`: the corpus's theoretical hit rate under a block-set cache.
    pub theoretical_hit_rate_set: f64,
    /// `hits.prefix_rate()`: the corpus's theoretical hit rate under a prefix cache.
    pub theoretical_hit_rate_prefix: f64,
}

/// Computes [`CorpusStats`] over every turn of every trajectory.
pub fn corpus_stats(ds: &Dataset) -> CorpusStats {
    let mut stats = CorpusStats {
        traces: ds.len(),
        requests: ds.total_turns(),
        subagents_ignored: ds.subagents_ignored(),
        ..Default::default()
    };
    let (mut turns, mut isl, mut osl, mut start, mut end, mut think, mut per) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for traj in ds.trajectories() {
        turns.push(traj.num_turns() as f64);
        let mut prev_n = 0usize;
        for (k, turn) in traj.turns().enumerate() {
            isl.push(f64::from(turn.input_tokens()));
            osl.push(f64::from(turn.output_tokens()));
            if turn.output_tokens() == 0 {
                stats.out_zero_turns += 1;
            }
            if let Some(think_s) = turn.think_time() {
                think.push(think_s);
            }
            if k > 0 && turn.lcp_with_previous() < prev_n {
                stats.non_monotonic_cuts += 1;
            }
            prev_n = turn.num_hash_ids();
        }
        if let (Some(first), Some(last)) =
            (traj.turn(0), traj.turn(traj.num_turns().wrapping_sub(1)))
        {
            start.push(f64::from(first.input_tokens()));
            end.push(f64::from(last.input_tokens()));
        }
        let hits = theoretical_hits(traj, usize::MAX);
        if hits.blocks > 0 {
            per.push(hits.set_rate());
        }
        stats.hits.add(hits);
    }
    stats.turns_per_trace = Dist::of(turns);
    stats.isl = Dist::of(isl);
    stats.osl = Dist::of(osl);
    stats.start_isl = Dist::of(start);
    stats.end_isl = Dist::of(end);
    stats.think_time_s = Dist::of(think);
    stats.per_trace_set_hit_rate = Dist::of(per);
    stats.theoretical_hit_rate_set = stats.hits.set_rate();
    stats.theoretical_hit_rate_prefix = stats.hits.prefix_rate();
    stats
}

/// Flat worker chains of the top level by class (`::fa:`, `::aux:` with reductions, `::wg:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChainCounts {
    /// Forked-agent chains (`::fa:`).
    pub fa: usize,
    /// Aux chains, reductions included (aiperf names both `aux:NNN`).
    pub aux: usize,
    /// Reductions (also counted in `aux`).
    pub reduction: usize,
    /// Worker-group members (`::wg:`).
    pub wg: usize,
}

impl ChainCounts {
    fn add(&mut self, class: Option<ChainClass>) {
        match class {
            Some(ChainClass::Agent) => self.fa += 1,
            Some(ChainClass::Aux) => self.aux += 1,
            Some(ChainClass::Reduction) => {
                self.aux += 1;
                self.reduction += 1;
            }
            Some(ChainClass::WorkerGroup { .. }) => self.wg += 1,
            None => {}
        }
    }
}

/// Session-tree figures of a corpus: distributions are over trees, except `children_per_branch`
/// (over branches). A corpus without subagent entries has trees of one stream, unless hash-chain
/// detection splits flat chains off a trace's requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TreeStats {
    /// The nested-timestamp basis inferred for the corpus (aiperf's `auto`).
    pub nested_basis: &'static str,
    /// Trees built.
    pub trees: usize,
    /// Traces whose tree could not be built (aiperf refuses them too), and the first reason.
    pub unbuildable: usize,
    /// The first trace's error, when any tree could not be built.
    pub first_error: Option<String>,
    /// Trees with at least one child stream.
    pub trees_with_children: usize,
    /// Streams per tree.
    pub streams_per_tree: Dist,
    /// Deepest stream of a tree (0: the root alone).
    pub depth: Dist,
    /// Children per branch.
    pub children_per_branch: Dist,
    /// Largest number of a tree's streams whose recorded intervals (first start to last end,
    /// half-open) overlap at one instant.
    pub overlap: Dist,
    /// SPAWN branches over all trees.
    pub branches: usize,
    /// Branches without a join turn, and the trees that have one.
    pub background_branches: usize,
    /// Trees with a background branch.
    pub trees_with_background: usize,
    /// Streams of subagent entries (extra chains of an entry included), and the worker chains among
    /// them by class.
    pub subagent_streams: usize,
    /// Worker chains among the subagent streams, by class.
    pub subagent_chains: ChainCounts,
    /// Subagent entries without a preceding root request.
    pub dropped_subagents: usize,
    /// Flat worker chains of the top level, by class.
    pub flat_chains: ChainCounts,
}

/// The largest number of `tree`'s streams whose `[first start, last end)` intervals overlap at one
/// instant.
pub(crate) fn tree_overlap(tree: &SessionTree) -> usize {
    let mut events: Vec<(f64, i32)> = Vec::new();
    for s in &tree.streams {
        let Some(first_ts) = s.turns.iter().map(|x| x.ts_ms).reduce(f64::min) else {
            continue;
        };
        let last_end = s
            .turns
            .iter()
            .map(|x| x.ts_ms + x.api_time_ms.unwrap_or(0.0))
            .fold(first_ts, f64::max);
        if last_end > first_ts {
            events.push((first_ts, 1));
            events.push((last_end, -1));
        }
    }
    // Ends before starts at one instant: touching intervals do not overlap.
    events.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut cur, mut best) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        best = best.max(cur);
    }
    // A tree whose streams all have empty intervals still has its root.
    (best as usize).max(1)
}

impl TreeStats {
    /// The figures of these trees.
    pub fn of<'a>(trees: impl IntoIterator<Item = &'a SessionTree>, basis: NestedBasis) -> Self {
        let mut stats = TreeStats {
            nested_basis: match basis {
                NestedBasis::Absolute => "absolute",
                NestedBasis::Relative => "relative",
            },
            ..TreeStats::default()
        };
        let (mut streams, mut depth, mut children, mut overlap) = (vec![], vec![], vec![], vec![]);
        for t in trees {
            stats.trees += 1;
            streams.push(t.streams.len() as f64);
            depth.push(f64::from(
                t.streams.iter().map(|x| x.depth).max().unwrap_or(0),
            ));
            overlap.push(tree_overlap(t) as f64);
            if t.streams.len() > 1 {
                stats.trees_with_children += 1;
            }
            stats.branches += t.branches.len();
            let background = t.branches.iter().filter(|b| b.join_turn.is_none()).count();
            stats.background_branches += background;
            if background > 0 {
                stats.trees_with_background += 1;
            }
            children.extend(t.branches.iter().map(|b| b.children.len() as f64));
            stats.dropped_subagents += t.dropped_subagents.len();
            for x in &t.streams {
                match x.kind {
                    StreamKind::Subagent => {
                        stats.subagent_streams += 1;
                        stats.subagent_chains.add(x.class);
                    }
                    StreamKind::Flat => stats.flat_chains.add(x.class),
                    StreamKind::Main => {}
                }
            }
        }
        stats.streams_per_tree = Dist::of(streams);
        stats.depth = Dist::of(depth);
        stats.children_per_branch = Dist::of(children);
        stats.overlap = Dist::of(overlap);
        stats
    }
}

/// Builds the session tree of every trace of `files` that `keep` accepts (with the corpus's inferred
/// nested-timestamp basis and the default tree options) and summarizes them. Reads the source once, or
/// twice when a trace turns out to need the relative basis.
pub fn tree_stats(
    files: &SourceFiles,
    keep: impl Fn(&str) -> bool,
) -> Result<TreeStats, DatasetError> {
    tree_stats_of(&FormatSpec::WEKA, files, keep)
}

/// [`tree_stats`] of a source in format `spec`.
pub(crate) fn tree_stats_of(
    spec: &FormatSpec,
    files: &SourceFiles,
    keep: impl Fn(&str) -> bool,
) -> Result<TreeStats, DatasetError> {
    let pass = |basis: NestedBasis| -> Result<Option<TreeStats>, DatasetError> {
        let opts = TreeOptions {
            basis,
            ..TreeOptions::default()
        };
        let mut trees: Vec<SessionTree> = Vec::new();
        let (mut failed, mut first_error, mut relative) = (0usize, None, false);
        super::any_format::scan(spec, files, |t| {
            if !keep(&t.id) {
                return Ok(ControlFlow::Continue(()));
            }
            if basis == NestedBasis::Absolute
                && NestedBasis::infer(std::iter::once(&t)) == NestedBasis::Relative
            {
                relative = true;
                return Ok(ControlFlow::Break(()));
            }
            match tree::build(&t, &opts) {
                Ok(mut tree) => {
                    // The figures need the shape only: drop the per-turn predecessor lists.
                    for stats in &mut tree.streams {
                        for turn in &mut stats.turns {
                            turn.replay_predecessors = Vec::new();
                        }
                    }
                    trees.push(tree);
                }
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        if relative {
            return Ok(None);
        }
        let mut stats = TreeStats::of(&trees, basis);
        stats.unbuildable = failed;
        stats.first_error = first_error;
        Ok(Some(stats))
    };
    match pass(NestedBasis::Absolute)? {
        Some(stats) => Ok(stats),
        None => Ok(pass(NestedBasis::Relative)?.expect("no basis check under relative")),
    }
}

/// [`tree_stats`] of the traces of an opened dataset (its selection), read from its source.
pub fn dataset_tree_stats(ds: &Dataset) -> Result<TreeStats, DatasetError> {
    let ids: HashSet<&str> = ds.trajectories().map(|t| t.id()).collect();
    tree_stats_of(
        &ds.corpus_format(),
        &SourceFiles::from_path(ds.source_path())?,
        |id| ids.contains(id),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dist_of_a_sample() {
        let d = Dist::of(vec![4.0, 1.0, 3.0, 2.0]);
        assert_eq!((d.p50, d.min, d.max, d.mean), (2.5, 1.0, 4.0, 2.5));
        assert_eq!(Dist::of(vec![]).count, 0);
    }

    #[test]
    fn tree_figures_of_the_subagent_fixture() {
        let f = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fixtures/traces-subagents-8.jsonl");
        let s = tree_stats(&SourceFiles::Jsonl(f), |_| true).unwrap();
        assert_eq!(s.nested_basis, "absolute");
        assert_eq!((s.trees, s.unbuildable), (8, 0));
        // sa-02's two overlapping subagents run beside the root.
        assert!(s.overlap.max >= 3.0, "{s:?}");
        assert_eq!(s.depth.max, 1.0);
        // sa-03's async subagent outlives the root.
        assert!(s.background_branches >= 1, "{s:?}");
        assert_eq!(s.dropped_subagents, 1);
        assert!(s.flat_chains.wg >= 3 && s.flat_chains.fa >= 1 && s.flat_chains.aux >= 1);
        assert!(s.children_per_branch.max >= 2.0);
    }

    #[test]
    fn tree_figures_without_subagents() {
        let f = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fixtures/traces-24.jsonl");
        let s = tree_stats(&SourceFiles::Jsonl(f), |_| true).unwrap();
        assert_eq!(
            (s.trees, s.subagent_streams, s.background_branches),
            (24, 0, 0)
        );
        assert_eq!(s.streams_per_tree.p50, 1.0);
        // Three streaming/non-streaming twins whose millisecond-rounded start falls 1 ms before the
        // first one's end: detection splits each off as a one-request chain of its own, a reduction
        // (large input, short output), which aiperf names `aux`.
        assert_eq!(
            s.flat_chains,
            ChainCounts {
                aux: 3,
                reduction: 3,
                ..ChainCounts::default()
            }
        );
        assert_eq!(s.trees_with_children, 3);
        let s = tree_stats(
            &SourceFiles::Jsonl(
                std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                    .join("fixtures/traces-24.jsonl"),
            ),
            |id| id != "trace_0005" && id != "trace_0014" && id != "trace_0024",
        )
        .unwrap();
        assert_eq!(s.trees, 21);
        assert_eq!(
            (s.streams_per_tree.max, s.overlap.max, s.branches),
            (1.0, 1.0, 0)
        );
    }
}
