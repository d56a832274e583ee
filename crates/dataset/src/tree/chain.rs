//! Hash-chain detection: splits one layer of requests (a trace's top-level requests, or one subagent
//! entry's nested requests) into per-agent chains by hash-id longest-common-prefix evidence, as
//! aiperf 0.13.0.dev20261023 does (`weka_agent_chains.py`, `weka_trace.py::_split_off_preamble`;
//! docs/agentx-v1-reference.md M6).
//!
//! Phase 1 walks the requests in `(t, index)` order: a request extends the deepest same-model chain
//! whose tail is a full prefix of it and has ended by its start (`+ 1e-6` s), else forks from the
//! tail with the deepest LCP. Phase 2 splices the elected continuation of each dead tail back onto
//! it (a join seam: compaction, not a new agent). Workers are then classified aux / reduction /
//! worker group / flat agent. Everything here is pure: indices refer to the caller's slice.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, HashSet};

/// Seconds of slack in every "ended by" comparison (aiperf's `_EPSILON_SECONDS`).
pub(crate) const EPS: f64 = 1e-6;

/// The thresholds of detection and classification (aiperf's `AIPERF_DATASET_WEKA_*` defaults); policy
/// parameters of AgentX v1.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ChainParams {
    /// A seam splice is refused when the gap after the tail exceeds this many seconds **and** ...
    pub(crate) seam_max_gap_s: f64,
    /// ... the fork shares less than this fraction of the tail's blocks.
    pub(crate) seam_min_overlap_ratio: f64,
    /// Aux: at most this many requests (0 disables aux and reduction classification).
    pub(crate) aux_max_requests: usize,
    /// Aux: first input below `max(aux_isl_floor, ⌊aux_isl_ratio · main peak input⌋)`.
    pub(crate) aux_isl_ratio: f64,
    pub(crate) aux_isl_floor: u32,
    /// Aux: a first request on another model than the main chain's is aux.
    pub(crate) aux_cross_model: bool,
    /// Reduction: output in `(0, reduction_osl_max)` (0 disables) ...
    pub(crate) reduction_osl_max: u32,
    /// ... and input > `reduction_ratio · output` (and input ≥ `aux_isl_floor`).
    pub(crate) reduction_ratio: f64,
    /// Worker group: at least this many concurrent forks of one parent request (0 disables).
    pub(crate) worker_group_min: usize,
}

impl Default for ChainParams {
    fn default() -> Self {
        ChainParams {
            seam_max_gap_s: 3600.0,
            seam_min_overlap_ratio: 0.5,
            aux_max_requests: 1,
            aux_isl_ratio: 0.10,
            aux_isl_floor: 16384,
            aux_cross_model: true,
            reduction_osl_max: 4000,
            reduction_ratio: 20.0,
            worker_group_min: 3,
        }
    }
}

/// The fields of one request that detection reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Req<'a> {
    /// Position in its `requests` list (outer or inner index).
    pub(crate) index: u32,
    /// Start, seconds on the root clock.
    pub(crate) t: f64,
    pub(crate) api_time: Option<f64>,
    pub(crate) model: &'a str,
    pub(crate) hash_ids: &'a [u32],
    pub(crate) input: u32,
    pub(crate) output: u32,
}

impl Req<'_> {
    /// Interval end: `t + max(api, 0)`, a missing or non-finite api counting as 0.
    pub(crate) fn end(&self) -> f64 {
        request_end(self.t, self.api_time)
    }
}

/// `start + max(api, 0)`, a missing or non-finite api counting as 0.
pub(crate) fn request_end(start: f64, api_time: Option<f64>) -> f64 {
    start + api_time.filter(|a| a.is_finite()).unwrap_or(0.0).max(0.0)
}

/// Python's float order for values known not to be NaN (`-0.0 == 0.0`).
pub(crate) fn fcmp(a: f64, b: f64) -> Ordering {
    a.partial_cmp(&b).unwrap_or(Ordering::Equal)
}

pub(crate) fn lcp(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Where a chain split off another one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fork {
    /// The chain forked from (resolved through splices for live chains); `None`: no shared prefix.
    pub(crate) parent_chain: Option<usize>,
    /// Index of the tail request it forked from.
    pub(crate) fork_index: Option<u32>,
    /// Blocks shared with that request.
    pub(crate) depth: usize,
    /// `t` of the chain's first request.
    pub(crate) fork_time: f64,
}

/// One phase-1 chain.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Chain {
    /// Positions in the detected slice, in phase-1 order, spliced continuations appended.
    pub(crate) requests: Vec<usize>,
    pub(crate) fork: Option<Fork>,
    pub(crate) spliced_into: Option<usize>,
    /// Position of the last hash-bearing request (phase-1 state).
    tail: Option<usize>,
}

/// The chains of one layer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Detection {
    /// Every phase-1 chain, spliced ones included.
    pub(crate) chains: Vec<Chain>,
    /// The chain holding the earliest request.
    pub(crate) main_index: usize,
    /// Live non-main chains ordered by first request `(t, index)`.
    pub(crate) worker_indices: Vec<usize>,
    pub(crate) seams_merged: usize,
    /// Requests without hash ids (kept on chain 0).
    pub(crate) unclassified_empty_hash: usize,
}

struct Phase1<'r, 'a> {
    reqs: &'r [Req<'a>],
    chains: Vec<Chain>,
    chain_of: HashMap<u32, usize>,
    forks_by_tail: HashMap<u32, Vec<usize>>,
    unclassified: usize,
}

impl Phase1<'_, '_> {
    fn append(&mut self, chain: usize, pos: usize) {
        self.chains[chain].requests.push(pos);
        self.chain_of.insert(self.reqs[pos].index, chain);
        if !self.reqs[pos].hash_ids.is_empty() {
            self.chains[chain].tail = Some(pos);
        }
    }

    fn new_chain(&mut self, fork: Option<Fork>) -> usize {
        self.chains.push(Chain {
            requests: Vec::new(),
            fork,
            spliced_into: None,
            tail: None,
        });
        self.chains.len() - 1
    }

    fn classify(&mut self, pos: usize) {
        let req = self.reqs[pos];
        if req.hash_ids.is_empty() {
            self.unclassified += 1;
            if self.chains.is_empty() {
                self.new_chain(None);
            }
            self.chains[0].requests.push(pos);
            self.chain_of.insert(req.index, 0);
            return;
        }
        if self.chains.is_empty() {
            let chain = self.new_chain(None);
            self.append(chain, pos);
            return;
        }
        if let Some(chain) = self.extension_target(&req) {
            self.append(chain, pos);
            return;
        }
        let (parent, depth) = self.max_lcp_chain(req.hash_ids);
        if parent.is_none() && self.chains.iter().all(|chain| chain.tail.is_none()) {
            self.append(0, pos);
            return;
        }
        let fork_index = parent.and_then(|p| self.chains[p].tail.map(|t| self.reqs[t].index));
        let chain = self.new_chain(Some(Fork {
            parent_chain: parent,
            fork_index,
            depth,
            fork_time: req.t,
        }));
        self.append(chain, pos);
        if let (Some(fork_at), true) = (fork_index, depth > 0) {
            self.forks_by_tail.entry(fork_at).or_default().push(chain);
        }
    }

    /// The deepest same-model chain whose tail is a full prefix of `r` and ended by `r.t + EPS`; ties
    /// to the lowest index.
    fn extension_target(&self, req: &Req<'_>) -> Option<usize> {
        let mut best: Option<usize> = None;
        let mut best_len = 0usize;
        for (i, c) in self.chains.iter().enumerate() {
            let Some(tail_pos) = c.tail else { continue };
            let tail = &self.reqs[tail_pos];
            let tail_len = tail.hash_ids.len();
            if tail_len > req.hash_ids.len() || (best.is_some() && tail_len <= best_len) {
                continue;
            }
            if tail.model != req.model || tail.end() > req.t + EPS {
                continue;
            }
            if req.hash_ids[..tail_len] == *tail.hash_ids {
                best = Some(i);
                best_len = tail_len;
            }
        }
        best
    }

    /// The chain whose tail has the greatest `(LCP, tail length)` with `h` (LCP > 0); ties to the
    /// lowest index.
    fn max_lcp_chain(&self, ids: &[u32]) -> (Option<usize>, usize) {
        let mut best = None;
        let mut key = (0usize, 0usize);
        for (i, c) in self.chains.iter().enumerate() {
            let Some(tail_pos) = c.tail else { continue };
            let tail = self.reqs[tail_pos].hash_ids;
            let shared = lcp(tail, ids);
            if shared == 0 {
                continue;
            }
            if (shared, tail.len()) > key {
                best = Some(i);
                key = (shared, tail.len());
            }
        }
        (best, key.0)
    }
}

fn resolve(alias: &HashMap<usize, usize>, mut chain: usize) -> usize {
    while let Some(&next) = alias.get(&chain) {
        chain = next;
    }
    chain
}

/// Detects the chains of `reqs` (indices must be distinct).
pub(crate) fn detect(reqs: &[Req<'_>], params: &ChainParams) -> Detection {
    if reqs.is_empty() {
        return Detection {
            chains: Vec::new(),
            main_index: 0,
            worker_indices: Vec::new(),
            seams_merged: 0,
            unclassified_empty_hash: 0,
        };
    }
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by(|&a, &b| fcmp(reqs[a].t, reqs[b].t).then(reqs[a].index.cmp(&reqs[b].index)));
    let mut state = Phase1 {
        reqs,
        chains: Vec::new(),
        chain_of: HashMap::new(),
        forks_by_tail: HashMap::new(),
        unclassified: 0,
    };
    for &pos in &order {
        state.classify(pos);
    }
    let pos_of: HashMap<u32, usize> = reqs.iter().enumerate().map(|(i, r)| (r.index, i)).collect();
    let Phase1 {
        mut chains,
        mut chain_of,
        mut forks_by_tail,
        unclassified,
        ..
    } = state;
    let mut alias: HashMap<usize, usize> = HashMap::new();
    let seams = resolve_seams(
        reqs,
        &pos_of,
        &mut chains,
        &mut chain_of,
        &mut forks_by_tail,
        &mut alias,
        params,
    );
    for c in &mut chains {
        if c.spliced_into.is_none() {
            if let Some(fork) = c.fork.as_mut() {
                fork.parent_chain = fork.parent_chain.map(|pc| resolve(&alias, pc));
            }
        }
    }
    let main_index = resolve(&alias, chain_of[&reqs[order[0]].index]);
    let mut workers: Vec<usize> = (0..chains.len())
        .filter(|&i| chains[i].spliced_into.is_none() && i != main_index)
        .collect();
    workers.sort_by(|&a, &b| {
        let (first_a, first_b) = (&reqs[chains[a].requests[0]], &reqs[chains[b].requests[0]]);
        fcmp(first_a.t, first_b.t).then(first_a.index.cmp(&first_b.index))
    });
    Detection {
        chains,
        main_index,
        worker_indices: workers,
        seams_merged: seams,
        unclassified_empty_hash: unclassified,
    }
}

fn last_hash_pos(reqs: &[Req<'_>], chain: &Chain) -> Option<usize> {
    chain
        .requests
        .iter()
        .rev()
        .copied()
        .find(|&p| !reqs[p].hash_ids.is_empty())
}

/// Phase 2: visits fork-source requests in ascending index order and splices the elected
/// continuation onto each tail that is still its chain's last hash-bearing request.
fn resolve_seams(
    reqs: &[Req<'_>],
    pos_of: &HashMap<u32, usize>,
    chains: &mut [Chain],
    chain_of: &mut HashMap<u32, usize>,
    forks_by_tail: &mut HashMap<u32, Vec<usize>>,
    alias: &mut HashMap<usize, usize>,
    params: &ChainParams,
) -> usize {
    let mut seams = 0;
    let mut keys: BinaryHeap<Reverse<u32>> = forks_by_tail.keys().map(|&k| Reverse(k)).collect();
    let mut processed: HashSet<u32> = HashSet::new();
    while let Some(Reverse(fork_at)) = keys.pop() {
        if !processed.insert(fork_at) {
            continue;
        }
        let owner = resolve(alias, chain_of[&fork_at]);
        let tail_pos = pos_of[&fork_at];
        if last_hash_pos(reqs, &chains[owner]) != Some(tail_pos) {
            continue;
        }
        let registered: Vec<usize> = forks_by_tail[&fork_at]
            .iter()
            .copied()
            .filter(|&ci| chains[ci].spliced_into.is_none())
            .collect();
        let Some(elected) = elect(reqs, chains, &registered, &reqs[tail_pos], params) else {
            continue;
        };
        let moved = chains[elected].requests.clone();
        for &q in &moved {
            chain_of.insert(reqs[q].index, owner);
        }
        chains[owner].requests.extend(moved);
        chains[elected].spliced_into = Some(owner);
        alias.insert(elected, owner);
        seams += 1;
        let Some(new_tail) = last_hash_pos(reqs, &chains[owner]) else {
            continue;
        };
        // Re-key the consumed tail's other forks against the merged chain's new tail.
        let new_idx = reqs[new_tail].index;
        let mut rekeyed = false;
        for &ci in &registered {
            if ci == elected || chains[ci].spliced_into.is_some() || chains[ci].fork.is_none() {
                continue;
            }
            let first = reqs[chains[ci].requests[0]].hash_ids;
            let shared = lcp(reqs[new_tail].hash_ids, first);
            if shared == 0 {
                continue;
            }
            let fork = chains[ci].fork.as_mut().expect("checked above");
            fork.fork_index = Some(new_idx);
            fork.depth = shared;
            fork.parent_chain = Some(owner);
            forks_by_tail.entry(new_idx).or_default().push(ci);
            rekeyed = true;
        }
        if rekeyed {
            processed.remove(&new_idx);
            keys.push(Reverse(new_idx));
        }
    }
    seams
}

/// The seam continuation among the forks registered on a dead tail: positive depth, starts after the
/// tail ended, same model, not seam-blocked; the deepest wins, then the earliest fork, then the
/// lowest chain index.
fn elect(
    reqs: &[Req<'_>],
    chains: &[Chain],
    registered: &[usize],
    tail: &Req<'_>,
    params: &ChainParams,
) -> Option<usize> {
    let t_end = tail.end();
    let tail_blocks = tail.hash_ids.len();
    let mut best: Option<(usize, &Fork)> = None;
    for &ci in registered {
        let Some(fork) = chains[ci].fork.as_ref() else {
            continue;
        };
        let first = &reqs[chains[ci].requests[0]];
        if fork.depth == 0 || t_end > first.t + EPS || first.model != tail.model {
            continue;
        }
        if tail_blocks > 0 {
            let gap = first.t - t_end;
            let overlap = fork.depth as f64 / tail_blocks as f64;
            if gap > params.seam_max_gap_s && overlap < params.seam_min_overlap_ratio {
                continue;
            }
        }
        let better = match best {
            None => true,
            Some((bi, bf)) => fork
                .depth
                .cmp(&bf.depth)
                .then(fcmp(bf.fork_time, fork.fork_time))
                .then(bi.cmp(&ci))
                .is_gt(),
        };
        if better {
            best = Some((ci, fork));
        }
    }
    best.map(|(ci, _)| ci)
}

/// The earliest request of a layer set aside before detection when it shares no prefix with any
/// other hash-bearing request and either has `out ≤ 64` (a title-generation call) or none of its
/// blocks recur. Returns its position in `reqs`.
pub(crate) fn preamble(reqs: &[Req<'_>]) -> Option<usize> {
    if reqs.len() < 2 {
        return None;
    }
    let first = (0..reqs.len())
        .min_by(|&a, &b| fcmp(reqs[a].t, reqs[b].t).then(reqs[a].index.cmp(&reqs[b].index)))?;
    let req = &reqs[first];
    if req.hash_ids.is_empty() {
        return None;
    }
    let others = || reqs.iter().enumerate().filter(move |&(i, _)| i != first);
    if others().any(|(_, o)| !o.hash_ids.is_empty() && lcp(req.hash_ids, o.hash_ids) > 0) {
        return None;
    }
    if req.output > 64 {
        let blocks: HashSet<u32> = others()
            .flat_map(|(_, o)| o.hash_ids.iter().copied())
            .collect();
        if req.hash_ids.iter().any(|h| blocks.contains(h)) {
            return None;
        }
    }
    Some(first)
}

/// The class of a worker chain (first match wins, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChainClass {
    /// A short one-shot on another model or from a small fresh context (`aux:NNN`).
    Aux,
    /// A same-model large-input, short-output one-shot (emitted as `aux:NNN` too).
    Reduction,
    /// Member `member` of concurrent fan-out group `group` (`wg:GGG_MMM`).
    WorkerGroup { group: usize, member: usize },
    /// A flat agent (`fa:NNN`).
    Agent,
}

impl ChainClass {
    /// Aux or reduction.
    #[cfg(test)]
    pub(crate) fn is_aux(self) -> bool {
        matches!(self, ChainClass::Aux | ChainClass::Reduction)
    }

    /// The conversation-id suffix of worker number `ordinal` of its layer.
    pub(crate) fn suffix(self, ordinal: usize) -> String {
        match self {
            ChainClass::Aux | ChainClass::Reduction => format!("aux:{ordinal:03}"),
            ChainClass::WorkerGroup { group, member } => format!("wg:{group:03}_{member:03}"),
            ChainClass::Agent => format!("fa:{ordinal:03}"),
        }
    }
}

/// aiperf's `is_aux_chain`.
pub(crate) fn is_aux(
    chain: &[&Req<'_>],
    main_peak_in: u32,
    main_model: Option<&str>,
    params: &ChainParams,
) -> bool {
    let Some(first) = chain.first() else {
        return false;
    };
    if chain.len() > params.aux_max_requests {
        return false;
    }
    if params.aux_cross_model && main_model.is_some_and(|m| m != first.model) {
        return true;
    }
    let threshold = (params.aux_isl_ratio * f64::from(main_peak_in)) as i64;
    i64::from(first.input) < threshold.max(i64::from(params.aux_isl_floor))
}

/// aiperf's `is_reduction_chain`.
pub(crate) fn is_reduction(chain: &[&Req<'_>], params: &ChainParams) -> bool {
    if params.reduction_osl_max == 0 || chain.len() != 1 {
        return false;
    }
    let r = chain[0];
    r.output > 0
        && r.output < params.reduction_osl_max
        && r.input >= params.aux_isl_floor
        && f64::from(r.input) > params.reduction_ratio * f64::from(r.output)
}

/// A worker's `(first t, max end, first index, chain)`.
type Interval = (f64, f64, u32, usize);

/// `(group, member)` of each worker in a concurrent fan-out: workers forked at depth > 0 from the
/// same parent request, in connected components of overlapping `[first t, max end)` intervals
/// (touching does not overlap) of at least `worker_group_min` members; groups numbered by their
/// earliest `(t0, first index)`, members by `(t0, first index)`.
pub(crate) fn worker_groups(
    reqs: &[Req<'_>],
    detection: &Detection,
    params: &ChainParams,
) -> HashMap<usize, (usize, usize)> {
    let mut out = HashMap::new();
    if params.worker_group_min == 0 {
        return out;
    }
    // Buckets by fork point in first-seen order.
    let mut buckets: Vec<((usize, u32), Vec<Interval>)> = Vec::new();
    for &ci in &detection.worker_indices {
        let chain = &detection.chains[ci];
        let Some(fork) = &chain.fork else { continue };
        let (Some(parent_chain), Some(fork_at)) = (fork.parent_chain, fork.fork_index) else {
            continue;
        };
        if fork.depth == 0 || chain.requests.is_empty() {
            continue;
        }
        let first = &reqs[chain.requests[0]];
        let t1 = chain
            .requests
            .iter()
            .map(|&q| reqs[q].end())
            .fold(f64::NEG_INFINITY, f64::max);
        let cand = (first.t, t1, first.index, ci);
        match buckets
            .iter_mut()
            .find(|(k, _)| *k == (parent_chain, fork_at))
        {
            Some((_, v)) => v.push(cand),
            None => buckets.push(((parent_chain, fork_at), vec![cand])),
        }
    }
    let mut groups: Vec<Vec<Interval>> = Vec::new();
    for (_, mut cands) in buckets {
        cands.sort_by(|a, b| fcmp(a.0, b.0).then(a.2.cmp(&b.2)));
        let mut comp: Vec<Interval> = Vec::new();
        let mut max_end = f64::NEG_INFINITY;
        for chain in cands {
            if !comp.is_empty() && max_end <= chain.0 {
                groups.push(std::mem::take(&mut comp));
            }
            max_end = if comp.is_empty() {
                chain.1
            } else {
                max_end.max(chain.1)
            };
            comp.push(chain);
        }
        groups.push(comp);
    }
    groups.retain(|group| group.len() >= params.worker_group_min);
    // Members are already in (t0, index) order: the minimum is the first.
    groups.sort_by(|a, b| fcmp(a[0].0, b[0].0).then(a[0].2.cmp(&b[0].2)));
    for (group, comp) in groups.iter().enumerate() {
        for (member, chain) in comp.iter().enumerate() {
            out.insert(chain.3, (group, member));
        }
    }
    out
}

/// Classifies worker `chain_index` of `d` against the detected main chain (preamble excluded).
pub(crate) fn classify(
    reqs: &[Req<'_>],
    detection: &Detection,
    chain_index: usize,
    groups: &HashMap<usize, (usize, usize)>,
    params: &ChainParams,
) -> ChainClass {
    let main: Vec<&Req<'_>> = detection.chains[detection.main_index]
        .requests
        .iter()
        .map(|&q| &reqs[q])
        .collect();
    let peak = main.iter().map(|r| r.input).max().unwrap_or(0);
    let model = main.first().map(|r| r.model);
    let chain: Vec<&Req<'_>> = detection.chains[chain_index]
        .requests
        .iter()
        .map(|&q| &reqs[q])
        .collect();
    if is_aux(&chain, peak, model, params) {
        ChainClass::Aux
    } else if is_reduction(&chain, params) {
        ChainClass::Reduction
    } else if let Some(&(group, member)) = groups.get(&chain_index) {
        ChainClass::WorkerGroup { group, member }
    } else {
        ChainClass::Agent
    }
}
