//! The `--failed-request-threshold` rule: which profiling requests it judges and when their failed
//! share stops the run. One rule for single-stream runs, session-tree runs (both judge in
//! [`super::account`]) and sharded runs (the rendezvous judges the shards' summed tallies).
//!
//! As aiperf (docs/agentx-v1-reference.md M5): warmup is not judged; a context overflow is judged
//! as a success (counted, never a failure); a cancelled request is not judged; the run stops when
//! more than `threshold` of the judged requests failed, once at least `max(concurrency, 10)` are
//! judged.
//!
//! Warmup under a scenario whose rules do not abort on a failed warmup request
//! (`warmup-failure-aborts` false, the `agentx` scenario): the warmup requests are judged by the
//! same rule, over the warmup's own tally, with the same floor. The reference aborts at the first
//! failed root request instead (agentx-harness 1.0.12 credit/callback_handler.py:296-323), so a
//! 1 % fault rate at 256 lanes almost never gets a run through its warmup.

use super::Tally;

impl Tally {
    /// The profiling requests the threshold judges: every answered one, context overflows
    /// included; cancelled requests are not judged.
    pub fn threshold_judged(&self) -> u64 {
        self.requests.saturating_sub(self.cancelled)
    }

    /// Whether the failed share of the judged requests is above `threshold`, once at least
    /// `max(concurrency, 10)` are judged.
    pub fn threshold_exceeded(&self, threshold: f64, concurrency: u64) -> bool {
        let judged = self.threshold_judged();
        exceeds(self.failed, judged, threshold, concurrency)
    }

    /// The warmup requests the threshold judges (answered ones, overflows included).
    pub(crate) fn warmup_judged(&self) -> u64 {
        self.warmup_requests.saturating_sub(self.warmup_cancelled)
    }

    /// [`Tally::threshold_exceeded`] over the warmup's requests.
    pub(crate) fn warmup_threshold_exceeded(&self, threshold: f64, concurrency: u64) -> bool {
        exceeds(
            self.warmup_failed,
            self.warmup_judged(),
            threshold,
            concurrency,
        )
    }
}

/// More than `threshold` of `judged` failed, once at least `max(concurrency, 10)` are judged.
fn exceeds(failed: u64, judged: u64, threshold: f64, concurrency: u64) -> bool {
    judged >= concurrency.max(10) && failed as f64 / judged as f64 > threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(ok: u64, failed: u64, overflows: u64, cancelled: u64) -> Tally {
        Tally {
            requests: ok + failed + overflows + cancelled,
            ok,
            failed,
            context_overflows: overflows,
            cancelled,
            ..Tally::default()
        }
    }

    /// aiperf's rule, read from agentx-harness 1.0.12 (aiperf 0.13.0.dev20261023 alike; its
    /// lines after "0.13:"). Under an agentic-replay scenario an overflow record is flagged
    /// `context_overflow_skip` (records/record_processor_service.py:87-98, 348-351; 0.13: 134-145,
    /// 587-590) and `_handle_context_overflow_skip` counts it as a success
    /// (`update_from_request(metadata, None)`, records/records_manager.py:831-841; 0.13:
    /// 1299-1309): it is in the denominator `total_records` (success + error,
    /// records/records_tracker.py:84-86, 350-370) and never in `error_records`. The abort
    /// (records_manager.py:694-723; 0.13: 1100-1140) is profiling only, waits for
    /// `total >= max(concurrency, 10)` (583-594; 0.13: 150-170), and fires on
    /// `error_records / total > threshold`, strictly. A cancelled credit emits no record
    /// (workers/worker.py:839; 0.13: 1490-1494), so it is in neither count.
    #[test]
    fn overflows_are_judged_as_successes_and_cancellations_not_at_all() {
        // 3 failures of 21 judged (10 of them overflows): 14 %, not above 20 %. Leaving the
        // overflows out would make it 3 of 11, 27 %, and stop the run.
        let t = tally(8, 3, 10, 0);
        assert_eq!(t.threshold_judged(), 21);
        assert!(!t.threshold_exceeded(0.20, 4));
        assert!(t.threshold_exceeded(0.14, 4));
        // Exactly at the threshold is not above it: 2 of 20.
        assert!(!tally(0, 2, 18, 0).threshold_exceeded(0.10, 4));
        // Overflows never count as failures: a run of only overflows is never stopped.
        assert!(!tally(0, 0, 50, 0).threshold_exceeded(0.0, 4));
        // Cancelled requests are not judged: 3 of 12 judged, with 100 cancelled.
        let t = tally(9, 3, 0, 100);
        assert_eq!(t.threshold_judged(), 12);
        assert!(t.threshold_exceeded(0.2, 4));
        assert!(!t.threshold_exceeded(0.25, 4));
    }

    /// Warmup: the same rule over the warmup's own counts; profiling counts do not mix in.
    #[test]
    fn warmup_is_judged_by_the_same_rule_over_its_own_counts() {
        let mut t = Tally {
            warmup_requests: 256,
            warmup_failed: 3,
            warmup_overflows: 4,
            warmup_cancelled: 6,
            failed: 200,
            requests: 200,
            ..Tally::default()
        };
        assert_eq!(t.warmup_judged(), 250);
        // 1.2 % failed: far from 10 %.
        assert!(!t.warmup_threshold_exceeded(0.10, 200));
        t.warmup_failed = 26;
        assert!(t.warmup_threshold_exceeded(0.10, 200));
        // 10.4 %, but 250 judged is below the floor of 256 lanes.
        assert!(!t.warmup_threshold_exceeded(0.10, 256));
        // The floor: 9 of 9 failed primers of one lane are not judged yet.
        let t = Tally {
            warmup_requests: 9,
            warmup_failed: 9,
            ..Tally::default()
        };
        assert!(!t.warmup_threshold_exceeded(0.10, 1));
    }

    #[test]
    fn nothing_is_judged_below_max_concurrency_or_ten() {
        // 9 of 9 failed, but fewer than 10 judged.
        assert!(!tally(0, 9, 0, 0).threshold_exceeded(0.5, 1));
        // The tenth judged request may be an overflow: it counts toward the floor.
        assert!(tally(0, 9, 1, 0).threshold_exceeded(0.5, 1));
        // With 16 lanes the floor is 16.
        assert!(!tally(5, 10, 0, 0).threshold_exceeded(0.5, 16));
        assert!(tally(6, 10, 0, 0).threshold_exceeded(0.5, 16));
        // Nothing judged: never exceeded (and no division by zero).
        assert!(!tally(0, 0, 0, 7).threshold_exceeded(0.0, 0));
    }
}
