//! The inter-turn delay (docs/specs/replay-rules.md#inter-turn-delay): how long a lane waits after
//! the previous response ends before it sends the next turn.
//!
//! With think-time-only (both scenarios' default) the recorded `think_time` is used, falling back to the
//! gap between the two request starts when the trace has no think time; without it the gap is used,
//! falling back to the think time. Missing both, or a NaN, means no wait; a negative value waits 0. The
//! cap (60 s in both scenarios) bounds the result when it is a finite, non-negative number.

use crate::types::{DelayParams, TurnTiming};

pub fn turn_delay(p: &DelayParams, t: &TurnTiming) -> f64 {
    let known = |x: Option<f64>| x.filter(|v| !v.is_nan());
    let (first, second) = if p.think_time_only {
        (t.think_time, t.timestamp_gap)
    } else {
        (t.timestamp_gap, t.think_time)
    };
    let raw = known(first).or(known(second)).unwrap_or(0.0);
    let d = if raw > 0.0 { raw } else { 0.0 };
    match p.cap_seconds {
        Some(cap) if cap >= 0.0 => d.min(cap),
        _ => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(think_only: bool, cap: Option<f64>, think: Option<f64>, gap: Option<f64>) -> f64 {
        turn_delay(
            &DelayParams {
                think_time_only: think_only,
                cap_seconds: cap,
            },
            &TurnTiming {
                think_time: think,
                timestamp_gap: gap,
            },
        )
    }

    #[test]
    fn think_time_first_then_gap() {
        assert_eq!(d(true, Some(60.0), Some(12.0), Some(19.0)), 12.0);
        assert_eq!(d(true, Some(60.0), None, Some(19.0)), 19.0);
        assert_eq!(d(true, Some(60.0), Some(f64::NAN), Some(19.0)), 19.0);
        assert_eq!(d(false, Some(60.0), Some(12.0), Some(19.0)), 19.0);
        assert_eq!(d(false, Some(60.0), Some(12.0), None), 12.0);
    }

    #[test]
    fn capped_and_never_negative() {
        assert_eq!(d(true, Some(60.0), Some(3600.0), None), 60.0);
        assert_eq!(d(true, None, Some(3600.0), None), 3600.0);
        assert_eq!(d(true, Some(f64::INFINITY), Some(3600.0), None), 3600.0);
        assert_eq!(d(true, Some(60.0), Some(-2.0), Some(5.0)), 0.0);
        assert_eq!(d(true, Some(60.0), None, None), 0.0);
        assert_eq!(d(true, Some(f64::NAN), Some(7.0), None), 7.0);
    }
}
