//! Deterministic fault decisions for one request.
//!
//! Every request draws the same fixed sequence of numbers from a ChaCha8 stream seeded with
//! `seed ^ key`, where the key identifies the request (its `X-Request-ID` when sent, else its
//! arrival number). A decision therefore depends only on the seed, the request and its own rate,
//! never on other requests or on the other fault rates, so raising one rate never reshuffles the
//! victims of another.

use std::time::Duration;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::config::Faults;
use super::stream::StreamFaults;

/// The faults that hit one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct FaultPlan {
    /// Answer with this status (500 or 503) instead of a completion.
    pub fail: Option<u16>,
    /// Where the response is cut, stalled or corrupted (token indices).
    pub stream: StreamFaults,
}

/// Decide the faults of a request with `total_tokens` to generate.
pub(crate) fn plan(faults: &Faults, key: u64, total_tokens: u64) -> FaultPlan {
    let mut rng = ChaCha8Rng::seed_from_u64(faults.seed ^ key);
    let last = total_tokens.saturating_sub(1);
    // Always draw every number, so each decision is independent of the other rates: first the five
    // uniforms that decide (fail, its status, reset, stall, malformed), then the three positions.
    let [u_fail, u_status, u_reset, u_stall, u_bad]: [f64; 5] = rng.random();
    let reset_pos = rng.random_range(1..=last.max(1));
    let stall_pos = rng.random_range(1..=last.max(1));
    let bad_pos = rng.random_range(0..=last);
    // Drawn after the first eight, so adding them moved no earlier decision.
    let [u_truncate, u_error]: [f64; 2] = rng.random();
    let truncate_pos = rng.random_range(1..=last.max(1));
    let error_pos = rng.random_range(1..=last.max(1));
    let clamp = |p: u64| p.min(last);
    FaultPlan {
        fail: (u_fail < faults.fail_rate).then_some(if u_status < 0.5 { 500 } else { 503 }),
        stream: StreamFaults {
            reset_after: (u_reset < faults.reset_rate).then_some(clamp(reset_pos)),
            stall_before: (u_stall < faults.stall_rate && faults.stall > Duration::ZERO)
                .then_some(clamp(stall_pos)),
            stall: faults.stall,
            malformed_before: (u_bad < faults.malformed_rate).then_some(bad_pos),
            truncate_after: (u_truncate < faults.truncate_rate).then_some(clamp(truncate_pos)),
            error_after: (u_error < faults.stream_error_rate).then_some(clamp(error_pos)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_are_deterministic_and_follow_rates() {
        let f = Faults {
            seed: 42,
            fail_rate: 0.25,
            reset_rate: 0.5,
            stall: Duration::from_millis(10),
            stall_rate: 1.0,
            malformed_rate: 0.0,
            truncate_rate: 0.0,
            stream_error_rate: 0.0,
            malformed_tool_call_rate: 0.0,
            stop_after: None,
            die_at: None,
            gpu_counter_reset_every: None,
        };
        let mut fails = 0;
        let mut resets = 0;
        for key in 0..4000u64 {
            let a = plan(&f, key, 100);
            let b = plan(&f, key, 100);
            assert_eq!(a.fail, b.fail);
            assert_eq!(a.stream.reset_after, b.stream.reset_after);
            fails += u32::from(a.fail.is_some());
            if let Some(p) = a.stream.reset_after {
                resets += 1;
                assert!((1..100).contains(&p));
            }
            let s = a.stream.stall_before.unwrap();
            assert!((1..100).contains(&s));
            assert!(a.stream.malformed_before.is_none());
        }
        assert!((800..1200).contains(&fails), "{fails}");
        assert!((1800..2200).contains(&resets), "{resets}");
    }

    #[test]
    fn one_rate_does_not_reshuffle_another() {
        let mut f = Faults {
            seed: 1,
            reset_rate: 0.3,
            ..Faults::default()
        };
        let before: Vec<_> = (0..200)
            .map(|k| plan(&f, k, 10).stream.reset_after)
            .collect();
        f.fail_rate = 0.9;
        f.malformed_rate = 0.5;
        let after: Vec<_> = (0..200)
            .map(|k| plan(&f, k, 10).stream.reset_after)
            .collect();
        assert_eq!(before, after);
    }

    #[test]
    fn single_token_positions_stay_in_range() {
        let f = Faults {
            reset_rate: 1.0,
            stall_rate: 1.0,
            stall: Duration::from_millis(1),
            malformed_rate: 1.0,
            ..Faults::default()
        };
        let p = plan(&f, 3, 1);
        assert_eq!(p.stream.reset_after, Some(0));
        assert_eq!(p.stream.stall_before, Some(0));
        assert_eq!(p.stream.malformed_before, Some(0));
    }
}
