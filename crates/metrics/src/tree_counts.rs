//! What the session-tree scheduler counted beyond the request tally ([`TreeCounts`]), and an
//! open-loop run's arrivals ([`ArrivalCounts`]): the replay fills them, the run manifest keeps them
//! (`trees`), and the summary derives the arrival rates from them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the scheduler counted beyond the request tally.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TreeCounts {
    /// Trees started in profiling (the lanes' first trees and every recycled one).
    pub trees_started: u64,
    /// Trees that drained (in profiling and in the warmup's cache-pressure stage).
    pub trees_drained: u64,
    /// Child streams spawned during profiling.
    pub children_spawned: u64,
    /// Turns that waited for their children's join.
    pub join_waits: u64,
    /// Turns that waited for the replay barrier.
    pub barrier_waits: u64,
    /// Held turns released because nothing in their tree could complete what they waited for.
    pub forced_releases: u64,
    /// Times the system idle cap moved the pending timers earlier.
    pub system_idle_shifts: u64,
    /// How far the system idle cap moved them in all (s).
    pub system_idle_shifted_s: f64,
    /// Times the per-tree idle cap moved a tree's pending timers earlier.
    pub tree_idle_shifts: u64,
    /// Depth-0 warmup primers that overflowed the context (their lanes start a fresh tree).
    pub warmup_root_overflows: u64,
    /// Child warmup primers that failed (their streams go on).
    pub warmup_child_failures: u64,
    /// Depth-0 warmup primers that failed under rules that judge warmup failures by the threshold
    /// (their lanes start a fresh tree).
    pub warmup_root_failures: u64,
    /// Requests of the warmup's cache-pressure stage.
    pub pressure_requests: u64,
    /// Trees the cache-pressure stage recycled.
    pub pressure_trees: u64,
    /// Responses for trees that had already been replaced (none expected).
    pub late_events: u64,
    /// The most requests in flight at once.
    pub peak_in_flight: u64,
    /// An open-loop run's arrivals: offered, admitted, rejected over the ceiling, skipped behind
    /// schedule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<ArrivalCounts>,
}

impl TreeCounts {
    /// Adds `other`'s counts to these (a sharded run's merge): every count summed, the arrivals
    /// too; `peak_in_flight` is summed as well, an upper bound the merge replaces with the peak
    /// over every shard's records. Each field is named, so a new one cannot be left out.
    pub fn absorb(&mut self, other: &TreeCounts) {
        let TreeCounts {
            trees_started,
            trees_drained,
            children_spawned,
            join_waits,
            barrier_waits,
            forced_releases,
            system_idle_shifts,
            system_idle_shifted_s,
            tree_idle_shifts,
            warmup_root_overflows,
            warmup_child_failures,
            warmup_root_failures,
            pressure_requests,
            pressure_trees,
            late_events,
            peak_in_flight,
            arrivals,
        } = other;
        self.trees_started += trees_started;
        self.trees_drained += trees_drained;
        self.children_spawned += children_spawned;
        self.join_waits += join_waits;
        self.barrier_waits += barrier_waits;
        self.forced_releases += forced_releases;
        self.system_idle_shifts += system_idle_shifts;
        self.system_idle_shifted_s += system_idle_shifted_s;
        self.tree_idle_shifts += tree_idle_shifts;
        self.warmup_root_overflows += warmup_root_overflows;
        self.warmup_child_failures += warmup_child_failures;
        self.warmup_root_failures += warmup_root_failures;
        self.pressure_requests += pressure_requests;
        self.pressure_trees += pressure_trees;
        self.late_events += late_events;
        self.peak_in_flight += peak_in_flight;
        if let Some(theirs) = arrivals {
            let ours = self.arrivals.get_or_insert_with(ArrivalCounts::default);
            ours.offered += theirs.offered;
            ours.admitted += theirs.admitted;
            ours.rejected += theirs.rejected;
            ours.skipped += theirs.skipped;
        }
    }
}

/// What the arrivals of a run came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ArrivalCounts {
    /// Arrivals whose time came during profiling: admitted + rejected + skipped.
    pub offered: u64,
    /// Arrivals that started a session.
    pub admitted: u64,
    /// Arrivals over the --concurrency ceiling (not queued).
    pub rejected: u64,
    /// Arrivals skipped because the replay was more than one inter-arrival behind.
    pub skipped: u64,
}

impl ArrivalCounts {
    /// The offered and admitted rates over `seconds` of profiling.
    pub fn rates(&self, seconds: f64) -> (Option<f64>, Option<f64>) {
        if seconds > 0.0 && seconds.is_finite() {
            (
                Some(self.offered as f64 / seconds),
                Some(self.admitted as f64 / seconds),
            )
        } else {
            (None, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorbing_sums_every_count_and_the_arrivals() {
        let shard = TreeCounts {
            trees_started: 3,
            system_idle_shifted_s: 1.5,
            arrivals: Some(ArrivalCounts {
                offered: 5,
                admitted: 4,
                rejected: 1,
                skipped: 0,
            }),
            ..TreeCounts::default()
        };
        let mut merged = TreeCounts::default();
        merged.absorb(&shard);
        merged.absorb(&shard);
        assert_eq!(merged.trees_started, 6);
        assert_eq!(merged.system_idle_shifted_s, 3.0);
        assert_eq!(
            merged.arrivals.map(|a| (a.offered, a.admitted, a.rejected)),
            Some((10, 8, 2))
        );
        let closed_loop = TreeCounts::default();
        let mut merged_closed = TreeCounts::default();
        merged_closed.absorb(&closed_loop);
        assert_eq!(merged_closed.arrivals, None);
    }
}
