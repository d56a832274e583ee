//! End-of-run submission validity (docs/specs/replay-rules.md#submission-validity).
//!
//! Reasons, in this order: `context_overflow_rate_exceeded` when `overflows / responses` is strictly
//! above the limit (no responses counts as 0 %); `run_cancelled`; `unsafe_override`. Failed requests
//! add no reason, as in aiperf: the failed-request threshold already aborts a run that fails too much
//! (and an aborted run arrives here as cancelled), while a few failures under the threshold are part
//! of measuring a server under load, not a flaw of the run.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::types::Outcome;

pub const DEFAULT_OVERFLOW_RATE_LIMIT: f64 = 0.01;

pub fn overflow_rate(o: &Outcome) -> f64 {
    if o.total_responses == 0 {
        0.0
    } else {
        o.context_overflows as f64 / o.total_responses as f64
    }
}

/// The reasons; `check_overflow_rate` is false for kvct-v01, which had no such rule.
pub fn reasons(o: &Outcome, check_overflow_rate: bool) -> Vec<String> {
    let mut out = Vec::new();
    let limit = if o.overflow_rate_limit.is_nan() {
        DEFAULT_OVERFLOW_RATE_LIMIT
    } else {
        o.overflow_rate_limit
    };
    if check_overflow_rate && overflow_rate(o) > limit {
        out.push("context_overflow_rate_exceeded".to_string());
    }
    if o.cancelled {
        out.push("run_cancelled".to_string());
    }
    if o.unsafe_override {
        out.push("unsafe_override".to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(total: u64, overflows: u64) -> Outcome {
        Outcome {
            total_responses: total,
            context_overflows: overflows,
            failed: 0,
            cancelled: false,
            unsafe_override: false,
            overflow_rate_limit: 0.01,
        }
    }

    #[test]
    fn strictly_above_the_limit() {
        assert!(reasons(&o(100, 1), true).is_empty());
        assert_eq!(
            reasons(&o(100, 2), true),
            ["context_overflow_rate_exceeded"]
        );
        assert!(reasons(&o(0, 0), true).is_empty());
        assert!(reasons(&o(100, 2), false).is_empty());
    }

    #[test]
    fn failures_do_not_invalidate_but_cancel_and_override_do() {
        let mut x = o(100, 0);
        x.failed = 50;
        assert!(reasons(&x, true).is_empty());
        x.cancelled = true;
        x.unsafe_override = true;
        x.context_overflows = 5;
        assert_eq!(
            reasons(&x, true),
            [
                "context_overflow_rate_exceeded",
                "run_cancelled",
                "unsafe_override"
            ]
        );
    }
}
