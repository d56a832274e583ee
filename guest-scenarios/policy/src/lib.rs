//! Scenario policy for agentx, shared by the scenario components (`agentx-mvp`, `kvct-v01`).
//!
//! Pure logic, no I/O, no clock, no randomness of its own: every answer is a function of the arguments,
//! exactly as the WIT world `agentx:scenario@0.1.0` demands of a scenario. The crate is `no_std` (with
//! `alloc`) so that it compiles unchanged to the wasm component and natively for its tests; wit-bindgen
//! lives only in the components, which convert at the boundary with [`export_scenario!`].
//!
//! - [`rng`]: numpy-compatible SeedSequence + PCG64 + `choice` (bit-exact, golden-vector tested);
//! - [`start`]: the start-turn rule `k_i`;
//! - [`marker`]: cache-bust markers and salts;
//! - [`classify`]: context-overflow detection;
//! - [`delay`], [`validity`]: inter-turn delays and end-of-run validity;
//! - [`settings`]: the `resolve` machinery (locks, errors, notices, seed drawing);
//! - [`mvp`], [`kvct`]: the two scenarios, each a [`Scenario`].

#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod classify;
pub mod delay;
pub mod kvct;
pub mod marker;
pub mod mvp;
pub mod rng;
pub mod settings;
pub mod start;
pub mod types;
pub mod validity;

mod adapter;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod resolve_tests;

use alloc::string::String;
use alloc::vec::Vec;

use types::*;

/// The exports of the `policy` interface, for one scenario.
pub trait Scenario {
    fn describe() -> Info;
    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>>;
    fn start_turn(params: &StartParams, trajectory: &Trajectory) -> Option<u32>;
    fn plan_starts(params: &StartParams, trajectories: &[Trajectory]) -> Vec<Option<u32>> {
        trajectories
            .iter()
            .map(|t| Self::start_turn(params, t))
            .collect()
    }
    fn cache_bust(target: Placement, session: &SessionId) -> Marker;
    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification;
    fn turn_delay(params: &DelayParams, timing: &TurnTiming) -> f64;
    fn validity(outcome: &Outcome) -> Vec<String>;
}

/// Python's `str(n)` for a non-negative integer, into `buf`, without allocating.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimal_matches_to_string() {
        use alloc::string::ToString;
        for n in [0u64, 7, 10, 42, 1 << 32, u64::MAX, (1 << 63) - 1] {
            let mut b = [0u8; 20];
            assert_eq!(super::decimal(n, &mut b), n.to_string().as_bytes());
        }
    }
}
