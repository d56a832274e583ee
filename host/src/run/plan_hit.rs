//! The dry run's achievable hit: the plan's lanes (each lane's trace, its start and warmup turn,
//! then the recycle queue) through the cache model before any request is sent
//! ([`crate::dataset::achievable`]), for the profiling time in recorded time, with an infinite
//! cache and, given `--kv-capacity-tokens`, an LRU of that size.

use crate::dataset::achievable::{self, LaneStart, PlannedHit, WalkSpec};
use crate::dataset::Dataset;
use crate::replay::tree::TreeLane;
use crate::replay::Plan;

/// The walk of a single-stream plan: each lane warms its start turn and is counted from the next;
/// a finished trace goes to the back of the recycle queue.
pub(super) fn of_streams(
    ds: &Dataset,
    plan: &Plan,
    capacity_tokens: Option<u64>,
    horizon_s: f64,
) -> Option<PlannedHit> {
    let lanes: Vec<LaneStart> = plan
        .lanes
        .iter()
        .map(|lane| LaneStart {
            trace: lane.trace,
            first_turn: lane.start_turn as usize + 1,
            warm: true,
        })
        .collect();
    let queue = rest_of(&plan.pool, &lanes);
    let unique_sessions = plan.lanes.iter().any(|lane| !lane.marker.is_empty());
    achievable::walk(
        ds,
        &WalkSpec {
            lanes,
            queue,
            recycle: true,
            unique_sessions,
            capacity_tokens,
            horizon_s: Some(horizon_s),
        },
    )
}

/// The walk of a session-tree plan, over each tree's top-level requests: a lane starts at the
/// first request at or after its t*, with the one before as its warmup.
pub(super) fn of_trees(
    ds: &Dataset,
    lanes: &[TreeLane],
    capacity_tokens: Option<u64>,
    horizon_s: f64,
) -> Option<PlannedHit> {
    let starts: Vec<LaneStart> = lanes
        .iter()
        .filter_map(|lane| {
            let trajectory = ds.trajectory(lane.tree)?;
            let first_turn = lane.t_star_ms.map_or(0, |t_star_ms| {
                trajectory
                    .turns()
                    .position(|turn| turn.t() * 1000.0 >= t_star_ms)
                    .unwrap_or(trajectory.num_turns())
            });
            Some(LaneStart {
                trace: lane.tree,
                first_turn,
                warm: true,
            })
        })
        .collect();
    let all: Vec<usize> = (0..ds.len()).collect();
    let queue = rest_of(&all, &starts);
    let unique_sessions = lanes.iter().any(|lane| !lane.marker.is_empty());
    achievable::walk(
        ds,
        &WalkSpec {
            lanes: starts,
            queue,
            recycle: true,
            unique_sessions,
            capacity_tokens,
            horizon_s: Some(horizon_s),
        },
    )
}

/// `pool` without the traces the lanes start with, in order.
fn rest_of(pool: &[usize], lanes: &[LaneStart]) -> Vec<usize> {
    let started: std::collections::HashSet<usize> = lanes.iter().map(|lane| lane.trace).collect();
    pool.iter()
        .copied()
        .filter(|trace| !started.contains(trace))
        .collect()
}

/// The dry run's table line.
pub(super) fn table_line(hit: &PlannedHit, trees: bool) -> String {
    let scope = if trees {
        "the trees' top-level requests, "
    } else {
        ""
    };
    let stopped = hit
        .stopped
        .as_ref()
        .map_or(String::new(), |why| format!("; {why}"));
    format!(
        "achievable hit in plan order: {}; \
         {scope}{} requests in {:.0} s of recorded time, {}-token blocks of the corpus{stopped}",
        hit.rates(),
        hit.requests,
        hit.span_s,
        hit.block_size
    )
}
