//! The hit a prefix cache allows a corpus before any request is sent: the corpus's own hash-id
//! blocks, played by a number of lanes in recorded time, through the cache model's LRU
//! (`agentx_metrics::kvmodel::Lru`, the run's cache truth uses the same) at a KV capacity, and
//! through an infinite cache.
//!
//! What it plays ([`WalkSpec`]): each lane starts one trace at a turn (a plan's start, or turn 0),
//! optionally sending the turn before it first as a warmup (looked up, not counted, before every
//! lane's first counted request); a lane whose trace ends takes the next trace of a queue (the
//! plan's recycle order; a recycled trace goes to the back when `recycle` is on). A lane's next
//! request is due after the recorded gap between the two requests' starts (`t`); a trace's last
//! request holds its lane for its recorded `api_time`. Requests are played in order of due time,
//! ties by lane. With a horizon, the walk stops at the first request due after it.
//!
//! What it reports ([`PlannedHit`]): cached prompt tokens over prompt tokens of the counted
//! requests (the one definition of a hit), in the corpus's blocks: a request of `n` tokens in
//! blocks of `b` caches its `n / b` full blocks and can hit its first `(n - 1) / b`.
//!
//! Keys: a block's key chains its hash id to the keys before it and to its session, so a block
//! matches only after the same prefix. Per-trace hash ids (weka) are salted by the trace; a scenario
//! that busts the cache per session (`unique_sessions`) salts each session apart, so a recycled
//! trace shares nothing with its earlier pass. Global hash ids (Mooncake) share across traces.
//!
//! It is a model of the corpus as recorded: only a trace's top-level requests (subagent entries
//! are outside the cached corpus), recorded timing in place of the server's, and the corpus's
//! block size.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use agentx_metrics::kvmodel::Lru;
use agentx_tokens::blocks::mix64;
use serde::Serialize;

use super::view::{Dataset, Trajectory};

/// Where one lane starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneStart {
    /// The trace (dataset index).
    pub trace: usize,
    /// The first counted turn.
    pub first_turn: usize,
    /// Whether the turn before `first_turn` is sent first, as a warmup.
    pub warm: bool,
}

/// What to walk.
#[derive(Debug, Clone, PartialEq)]
pub struct WalkSpec {
    /// One entry per lane.
    pub lanes: Vec<LaneStart>,
    /// Traces a lane takes when its trace ends, in order (each from turn 0).
    pub queue: Vec<usize>,
    /// A finished trace goes back to the end of the queue.
    pub recycle: bool,
    /// Each session is its own prefix (a cache-bust marker per session).
    pub unique_sessions: bool,
    /// The KV capacity in tokens; `None`: the infinite cache alone.
    pub capacity_tokens: Option<u64>,
    /// Stop at the first request due after this many seconds of recorded time; `None`: when
    /// every lane is out of traces.
    pub horizon_s: Option<f64>,
}

/// The hit the walk found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedHit {
    /// Lanes played.
    pub lanes: usize,
    /// Counted requests.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Tokens per block (the corpus's).
    pub block_size: u32,
    /// Cached over prompt tokens with an infinite cache.
    pub infinite: f64,
    /// The KV capacity of `at_capacity`, tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_tokens: Option<u64>,
    /// Cached over prompt tokens with an LRU of `capacity_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_capacity: Option<f64>,
    /// Blocks the LRU evicted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted_blocks: Option<u64>,
    /// Recorded seconds the counted requests span (the due time of the last one).
    pub span_s: f64,
    /// Why the walk stopped short of its horizon, when it did: a corpus that records no time
    /// between requests (played once through), or the walk's request budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

impl PlannedHit {
    /// The rates in a phrase: `infinite 89.0%, LRU of 200000 tokens 75.5% (67778 blocks evicted)`,
    /// or the infinite one and how to get the other.
    pub fn rates(&self) -> String {
        let at_capacity = match (self.at_capacity, self.capacity_tokens) {
            (Some(rate), Some(tokens)) => format!(
                ", LRU of {tokens} tokens {:.1}% ({} blocks evicted)",
                100.0 * rate,
                self.evicted_blocks.unwrap_or(0)
            ),
            _ => " (--kv-capacity-tokens adds an LRU of a server's size)".to_owned(),
        };
        format!("infinite {:.1}%{at_capacity}", 100.0 * self.infinite)
    }
}

/// The most requests one walk plays (a long horizon over a small corpus recycles it many times).
const MAX_WALKED_REQUESTS: u64 = 500_000;

/// Infinite capacity, in blocks (the LRU's largest).
const UNBOUNDED_BLOCKS: u64 = u32::MAX as u64 - 1;

/// One lane's place in the walk.
struct LaneState {
    trace: usize,
    turn: usize,
    salt: u64,
}

/// The two caches and the counts.
struct Caches {
    infinite: Lru,
    bounded: Option<Lru>,
    block_size: u32,
    requests: u64,
    prompt_tokens: u64,
    infinite_hit_tokens: u64,
    bounded_hit_tokens: u64,
}

impl Caches {
    /// Looks one request up in both caches (and caches it); counts it when `counted`.
    fn request(&mut self, trajectory: Trajectory<'_>, turn: usize, salt: u64, counted: bool) {
        let Some(request) = trajectory.turn(turn) else {
            return;
        };
        let tokens = u64::from(request.input_tokens());
        let block = u64::from(self.block_size.max(1));
        let full = usize::try_from(tokens / block).unwrap_or(usize::MAX);
        let usable = usize::try_from(tokens.saturating_sub(1) / block).unwrap_or(usize::MAX);
        let mut key = mix64(salt);
        let keys: Vec<u64> = request
            .hash_ids()
            .iter()
            .take(full)
            .map(|id| {
                key = mix64(key ^ u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                key
            })
            .collect();
        let infinite = self.infinite.lookup_and_insert(&keys, usable).hit_blocks as u64;
        let bounded = self.bounded.as_mut().map_or(0, |lru| {
            lru.lookup_and_insert(&keys, usable).hit_blocks as u64
        });
        if counted {
            self.requests += 1;
            self.prompt_tokens += tokens;
            self.infinite_hit_tokens += infinite * block;
            self.bounded_hit_tokens += bounded * block;
        }
    }
}

/// Recorded seconds from turn `turn`'s start to the next request of its lane: the gap to the
/// next turn's start, or the last turn's `api_time`.
fn gap_after(trajectory: Trajectory<'_>, turn: usize) -> f64 {
    let Some(request) = trajectory.turn(turn) else {
        return 0.0;
    };
    let gap = match trajectory.turn(turn + 1) {
        Some(next) => next.t() - request.t(),
        None => request.api_time().unwrap_or(0.0),
    };
    if gap.is_finite() {
        gap.max(0.0)
    } else {
        0.0
    }
}

/// Walks `spec` over `dataset`; `None` when no lane has a trace.
pub fn walk(dataset: &Dataset, spec: &WalkSpec) -> Option<PlannedHit> {
    let first = dataset.trajectory(spec.lanes.first()?.trace)?;
    let block_size = first.block_size().max(1);
    let mut caches = Caches {
        infinite: Lru::new(UNBOUNDED_BLOCKS),
        bounded: spec
            .capacity_tokens
            .map(|tokens| Lru::new(tokens / u64::from(block_size))),
        block_size,
        requests: 0,
        prompt_tokens: 0,
        infinite_hit_tokens: 0,
        bounded_hit_tokens: 0,
    };
    let global = first.global_hash_ids();
    let mut sessions = 0u64;
    let mut salt_of = |trace: usize| {
        sessions += 1;
        match (global, spec.unique_sessions) {
            (_, true) => mix64(sessions),
            (true, false) => 0,
            (false, false) => mix64(trace as u64 ^ 0x5bd1_e995),
        }
    };
    let mut lanes = Vec::with_capacity(spec.lanes.len());
    for start in &spec.lanes {
        let salt = salt_of(start.trace);
        let trajectory = dataset.trajectory(start.trace)?;
        if start.warm && start.first_turn > 0 {
            caches.request(trajectory, start.first_turn - 1, salt, false);
        }
        lanes.push(LaneState {
            trace: start.trace,
            turn: start.first_turn,
            salt,
        });
    }
    let mut queue: VecDeque<usize> = spec.queue.iter().copied().collect();
    // One pass: the lanes' traces from their starts and the queue's whole.
    let one_pass: u64 = spec
        .lanes
        .iter()
        .map(|start| {
            dataset.trajectory(start.trace).map_or(0, |trajectory| {
                trajectory.num_turns().saturating_sub(start.first_turn)
            })
        })
        .chain(spec.queue.iter().map(|&trace| {
            dataset
                .trajectory(trace)
                .map_or(0, |trajectory| trajectory.num_turns())
        }))
        .sum::<usize>() as u64;
    let mut walked = 0u64;
    let mut stopped = None;
    // Due times in microseconds of recorded time, then the lane: a total order.
    let mut due: BinaryHeap<Reverse<(u64, usize)>> =
        (0..lanes.len()).map(|lane| Reverse((0, lane))).collect();
    let horizon_us = spec
        .horizon_s
        .map(|seconds| (seconds.max(0.0) * 1e6) as u64);
    let mut last_us = 0;
    while let Some(Reverse((at_us, lane))) = due.pop() {
        if horizon_us.is_some_and(|horizon| at_us > horizon) {
            break;
        }
        let state = &mut lanes[lane];
        let Some(trajectory) = dataset.trajectory(state.trace) else {
            continue;
        };
        if state.turn < trajectory.num_turns() {
            caches.request(trajectory, state.turn, state.salt, true);
            last_us = at_us;
            walked += 1;
        }
        if spec.recycle && at_us == 0 && walked >= one_pass.max(1) {
            stopped = Some(format!(
                "the corpus records no time between requests: each trace played once ({walked} requests)"
            ));
            break;
        }
        if walked >= MAX_WALKED_REQUESTS {
            stopped = Some(format!(
                "stopped after {walked} requests, {:.0} s of recorded time",
                at_us as f64 / 1e6
            ));
            break;
        }
        let next_us = at_us + (gap_after(trajectory, state.turn) * 1e6) as u64;
        state.turn += 1;
        if state.turn >= trajectory.num_turns() {
            if spec.recycle {
                queue.push_back(state.trace);
            }
            let Some(next) = queue.pop_front() else {
                continue;
            };
            *state = LaneState {
                trace: next,
                turn: 0,
                salt: salt_of(next),
            };
        }
        due.push(Reverse((next_us, lane)));
    }
    let rate = |hit: u64| {
        if caches.prompt_tokens == 0 {
            0.0
        } else {
            hit as f64 / caches.prompt_tokens as f64
        }
    };
    Some(PlannedHit {
        lanes: lanes.len(),
        requests: caches.requests,
        prompt_tokens: caches.prompt_tokens,
        block_size,
        infinite: rate(caches.infinite_hit_tokens),
        capacity_tokens: spec.capacity_tokens,
        at_capacity: caches
            .bounded
            .as_ref()
            .map(|_| rate(caches.bounded_hit_tokens)),
        evicted_blocks: caches.bounded.as_ref().map(Lru::evicted_total),
        span_s: last_us as f64 / 1e6,
        stopped,
    })
}

/// The walk of `dataset stats`: `concurrency` lanes playing every trace once from turn 0, in
/// dataset order, each trace its own session.
pub fn corpus_order(concurrency: usize, capacity_tokens: Option<u64>, traces: usize) -> WalkSpec {
    let lanes = concurrency.max(1).min(traces);
    WalkSpec {
        lanes: (0..lanes)
            .map(|trace| LaneStart {
                trace,
                first_turn: 0,
                warm: false,
            })
            .collect(),
        queue: (lanes..traces).collect(),
        recycle: false,
        unique_sessions: false,
        capacity_tokens,
        horizon_s: None,
    }
}

#[cfg(test)]
mod tests;
