//! Where a lane starts in a session tree (AgentX v1.0, docs/specs/session-trees.md#start-point and
//! its warmup; the exact rules are `docs/agentx-v1-reference.md` P2 and P3): the per-lane seed, the
//! instant t* on the root's clock, the streams alive at t* with their next and warm turns, offsets
//! and warmup leads, and the turn-index fallback for a tree without usable timestamps.
//!
//! - Seed: `u64_be(sha256(f"{seed}:{root}:{lane}")[:8])`, numpy's `default_rng` of it.
//! - t*: `lo = start + min·(end−start)`, `hi = max(lo, start + max·(end−start))` over the span of
//!   every stream's finite turn starts; `t* = lo` when `hi == lo` (nothing drawn), else
//!   `lo + (hi−lo)·((u64 >> 11)·2⁻⁵³)` with the generator's first output.
//! - `next(c)`: the first turn in list order whose finite start is ≥ t*.
//! - A root branch whose start is after t* counts only when its spawn turn is already past (its
//!   start ≤ t* and the root's next turn is after it, or the root is finished). A child is alive
//!   when it has a next turn (and, for a branch without a start, its turn 0 is not after t*).
//! - The root is waiting when its next turn is the join turn of a branch with a live child. No
//!   alive stream, or only waiting ones: the lane falls back to the turn-index rule with the same
//!   lane seed (aiperf does not redraw t*).
//! - Warm turn `next − 1`; lead `min(t* − ts(warm), cap)`.
//!
//! Invariant: pure arithmetic on the arguments, f64 in the same operation order as aiperf, so the
//! component and the native tests agree with aiperf's golden vectors bit for bit.

use alloc::string::String;
use alloc::vec::Vec;
use sha2::{Digest, Sha256};

use policy::rng::{choice_index, Pcg64};
use policy::start::candidate_range;

/// One stream of a session tree.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeStream {
    pub conversation_id: String,
    /// Recorded start of every turn (ms on the root clock; NaN when missing).
    pub turn_ts_ms: Vec<f64>,
    pub unsendable: Vec<u32>,
}

/// Children of the root spawned by one root turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    pub branch_id: String,
    /// Indices into the tree's streams.
    pub children: Vec<u32>,
    pub start_ms: Option<f64>,
    pub spawn_turn: Option<u32>,
    /// None for a background branch.
    pub join_turn: Option<u32>,
}

/// A session tree: `streams[0]` is the root.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub trace_id: String,
    pub streams: Vec<TreeStream>,
    pub branches: Vec<Branch>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeParams {
    pub seed: u64,
    pub min_ratio: f64,
    pub max_ratio: f64,
    pub lead_cap_ms: f64,
}

/// Where one stream starts.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamStart {
    pub index: u32,
    pub next_turn: u32,
    pub warm_turn: Option<u32>,
    pub offset_ms: f64,
    pub lead_ms: f64,
    pub waiting: bool,
    pub join_turn: Option<u32>,
    pub branch: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TreeStart {
    pub t_star_ms: Option<f64>,
    pub streams: Vec<StreamStart>,
}

/// The seed of lane `lane` on trace `root`: the first 8 bytes of `sha256(f"{seed}:{root}:{lane}")`,
/// big-endian.
pub fn lane_seed(seed: u64, root: &str, lane: u32) -> u64 {
    let d = Sha256::digest(alloc::format!("{seed}:{root}:{lane}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
}

/// `numpy.random.default_rng(entropy).uniform(lo, hi)` as aiperf calls it (hi > lo).
pub fn uniform(entropy: u64, lo: f64, hi: f64) -> f64 {
    let u = Pcg64::from_entropy(entropy).next_u64();
    let d = (u >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0);
    lo + (hi - lo) * d
}

/// The span `[start, end]` of every finite turn start of the tree.
pub fn span(tree: &Tree) -> Option<(f64, f64)> {
    let mut out: Option<(f64, f64)> = None;
    for s in &tree.streams {
        for &t in s.turn_ts_ms.iter().filter(|t| t.is_finite()) {
            out = Some(match out {
                None => (t, t),
                Some((a, b)) => (a.min(t), b.max(t)),
            });
        }
    }
    out
}

/// t* for a span and seed.
pub fn t_star(entropy: u64, span: (f64, f64), min_ratio: f64, max_ratio: f64) -> f64 {
    let (start, end) = span;
    let lo = start + min_ratio * (end - start);
    let mut hi = start + max_ratio * (end - start);
    if hi < lo {
        hi = lo;
    }
    if hi == lo {
        lo
    } else {
        uniform(entropy, lo, hi)
    }
}

/// The first turn (in list order) whose finite start is at or after `t`.
fn next_at(s: &TreeStream, t: f64) -> Option<u32> {
    s.turn_ts_ms
        .iter()
        .position(|&ts| ts.is_finite() && ts >= t)
        .map(|i| i as u32)
}

fn ts(s: &TreeStream, turn: u32) -> f64 {
    s.turn_ts_ms.get(turn as usize).copied().unwrap_or(f64::NAN)
}

/// The streams alive at `t` with their next turns, or `None` when nothing can start there.
pub fn snapshot(tree: &Tree, t: f64, lead_cap_ms: f64) -> Option<Vec<StreamStart>> {
    let root = tree.streams.first()?;
    let root_next = next_at(root, t);
    let start = |index: u32, s: &TreeStream, next: u32| {
        let at = ts(s, next);
        let warm_turn = next.checked_sub(1);
        let lead_ms = warm_turn.map_or(0.0, |w| {
            let lead = t - ts(s, w);
            if lead.is_finite() {
                lead.min(lead_cap_ms)
            } else {
                0.0
            }
        });
        StreamStart {
            index,
            next_turn: next,
            warm_turn,
            offset_ms: if at.is_finite() {
                (at - t).max(0.0)
            } else {
                0.0
            },
            lead_ms,
            waiting: false,
            join_turn: None,
            branch: None,
        }
    };
    let mut children = Vec::new();
    let mut pending_joins = Vec::new();
    for (bi, b) in tree.branches.iter().enumerate() {
        let kids = || {
            b.children
                .iter()
                .filter_map(|&c| Some((c, tree.streams.get(c as usize)?)))
        };
        let start_b = match b.start_ms.filter(|x| x.is_finite()) {
            Some(x) => Some(x),
            None => kids()
                .map(|(_, s)| ts(s, 0))
                .filter(|x| x.is_finite())
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x)))),
        };
        if let Some(sb) = start_b {
            if t < sb {
                let past = b.spawn_turn.is_some_and(|sp| {
                    let at = ts(root, sp);
                    at.is_finite() && at <= t && root_next.is_none_or(|n| n > sp)
                });
                if !past {
                    continue;
                }
            }
        }
        let before = children.len();
        for (c, s) in kids() {
            let Some(next) = next_at(s, t) else {
                continue;
            };
            if start_b.is_none() && t < ts(s, 0) {
                continue;
            }
            let mut st = start(c, s, next);
            st.join_turn = b.join_turn;
            st.branch = Some(bi as u32);
            children.push(st);
        }
        if children.len() > before {
            if let Some(j) = b.join_turn {
                pending_joins.push(j);
            }
        }
    }
    let mut out = Vec::with_capacity(children.len() + 1);
    if let Some(n) = root_next {
        let mut st = start(0, root, n);
        if pending_joins.contains(&n) {
            st.waiting = true;
            st.join_turn = Some(n);
        }
        out.push(st);
    }
    out.extend(children);
    if out.is_empty() || out.iter().all(|s| s.waiting) {
        return None;
    }
    Some(out)
}

/// Where lane `lane` starts in `tree`: t* and its snapshot, else the turn-index fallback on the root
/// (warm turn k, next turn k+1) with the same lane seed; `None` when neither can start.
pub fn start_tree(p: &TreeParams, lane: u32, tree: &Tree) -> Option<TreeStart> {
    let root = tree.streams.first()?;
    let entropy = lane_seed(p.seed, &tree.trace_id, lane);
    if let Some(sp) = span(tree) {
        let t = t_star(entropy, sp, p.min_ratio, p.max_ratio);
        if let Some(streams) = snapshot(tree, t, p.lead_cap_ms) {
            return Some(TreeStart {
                t_star_ms: Some(t),
                streams,
            });
        }
    }
    let n = root.turn_ts_ms.len() as u32;
    let k = pick(entropy, n, &root.unsendable, p.min_ratio, p.max_ratio)?;
    Some(TreeStart {
        t_star_ms: None,
        streams: alloc::vec![StreamStart {
            index: 0,
            next_turn: k + 1,
            warm_turn: Some(k),
            offset_ms: 0.0,
            lead_ms: 0.0,
            waiting: false,
            join_turn: None,
            branch: None,
        }],
    })
}

/// The turn-index start: `default_rng(entropy).choice(candidates)` over the candidates of
/// `policy::start` (`k` and `k + 1` sendable), or `None` when there is none.
fn pick(
    entropy: u64,
    num_turns: u32,
    unsendable: &[u32],
    min_ratio: f64,
    max_ratio: f64,
) -> Option<u32> {
    let (lo, hi) = candidate_range(num_turns, min_ratio, max_ratio)?;
    let kept: Vec<u32> = (lo..=hi)
        .filter(|k| !unsendable.contains(k) && !unsendable.contains(&(k + 1)))
        .collect();
    let n = u32::try_from(kept.len()).ok().filter(|&n| n > 0)?;
    Some(kept[choice_index(entropy, n) as usize])
}
