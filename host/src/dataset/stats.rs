//! Corpus statistics: sizes, ISL/OSL distributions, and theoretical prefix-cache hit rates.
//!
//! Hit rates follow InferenceX's definitions (domain §3.3), computed per trace over its requests in
//! order: set-based, a block is a hit if its hash id appeared in an earlier request of the same trace
//! (an infinite cache); longest-prefix, a request hits the longest hash-id prefix it shares with any
//! earlier request of the trace (a prefix cache that never evicts). Rates are hit blocks over all blocks.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::view::{Dataset, Trajectory};

/// Summary statistics of a sample, with percentiles by linear interpolation (`k = (n-1)p/100`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Dist {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Linear-interpolation percentile of sorted data.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    crate::metrics::percentile(sorted, p).unwrap_or(0.0)
}

impl Dist {
    pub fn of(mut v: Vec<f64>) -> Dist {
        if v.is_empty() {
            return Dist::default();
        }
        v.sort_by(f64::total_cmp);
        Dist {
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            p50: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
            max: v[v.len() - 1],
        }
    }
}

/// Hit counts of one walk (blocks are hash ids).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HitCounts {
    pub blocks: u64,
    pub set_hits: u64,
    pub prefix_hits: u64,
}

impl HitCounts {
    pub fn add(&mut self, o: HitCounts) {
        self.blocks += o.blocks;
        self.set_hits += o.set_hits;
        self.prefix_hits += o.prefix_hits;
    }
    pub fn set_rate(&self) -> f64 {
        ratio(self.set_hits, self.blocks)
    }
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
    let mut c = HitCounts::default();
    let mut seen: HashSet<u32> = HashSet::new();
    // A trie of the hash-id sequences of earlier requests: (node, id) -> child; node 0 is the root.
    let mut trie: HashMap<(u32, u32), u32> = HashMap::new();
    let mut path: Vec<u32> = Vec::new(); // nodes of the previous request's ids, by position
    let mut ids: Vec<u32> = Vec::new();
    for turn in traj.turns().take(upto.saturating_add(1)) {
        let lcp = turn.lcp_with_previous();
        ids.truncate(lcp);
        ids.extend_from_slice(turn.new_hash_ids());
        c.blocks += ids.len() as u64;
        // Set-based: the shared prefix was all seen in the previous request.
        let mut hits = lcp as u64;
        for id in &ids[lcp..] {
            if seen.contains(id) {
                hits += 1;
            }
        }
        c.set_hits += hits;
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
        c.prefix_hits += matched as u64;
    }
    c
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
    pub traces: usize,
    pub requests: usize,
    pub subagents_ignored: u64,
    pub turns_per_trace: Dist,
    pub isl: Dist,
    pub osl: Dist,
    pub start_isl: Dist,
    pub end_isl: Dist,
    pub think_time_s: Dist,
    pub out_zero_turns: usize,
    pub non_monotonic_cuts: usize,
    pub per_trace_set_hit_rate: Dist,
    pub hits: HitCounts,
    pub theoretical_hit_rate_set: f64,
    pub theoretical_hit_rate_prefix: f64,
}

/// Computes [`CorpusStats`] over every turn of every trajectory.
pub fn corpus_stats(ds: &Dataset) -> CorpusStats {
    let mut s = CorpusStats {
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
                s.out_zero_turns += 1;
            }
            if let Some(x) = turn.think_time() {
                think.push(x);
            }
            if k > 0 && turn.lcp_with_previous() < prev_n {
                s.non_monotonic_cuts += 1;
            }
            prev_n = turn.num_hash_ids();
        }
        if let (Some(a), Some(b)) = (traj.turn(0), traj.turn(traj.num_turns().wrapping_sub(1))) {
            start.push(f64::from(a.input_tokens()));
            end.push(f64::from(b.input_tokens()));
        }
        let h = theoretical_hits(traj, usize::MAX);
        if h.blocks > 0 {
            per.push(h.set_rate());
        }
        s.hits.add(h);
    }
    s.turns_per_trace = Dist::of(turns);
    s.isl = Dist::of(isl);
    s.osl = Dist::of(osl);
    s.start_isl = Dist::of(start);
    s.end_isl = Dist::of(end);
    s.think_time_s = Dist::of(think);
    s.per_trace_set_hit_rate = Dist::of(per);
    s.theoretical_hit_rate_set = s.hits.set_rate();
    s.theoretical_hit_rate_prefix = s.hits.prefix_rate();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_interpolates() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert_eq!(percentile(&v, 100.0), 4.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(Dist::of(vec![]).count, 0);
    }
}
