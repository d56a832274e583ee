//! Session-tree scenario policy (AgentX v1.0) for the `agentx-v1` component, on top of the shared
//! `policy` crate (numpy-compatible generator, markers, overflow classification, the `resolve`
//! machinery).
//!
//! - [`tree`]: where a lane starts in a session tree: the lane seed, t*, the streams alive at it,
//!   their next and warm turns, offsets and warmup leads, the turn-index fallback;
//! - [`agentx_v1`]: the scenario's locks, per-tree marker, end-to-start delay, replay rules and
//!   validity (with metric coverage), a [`TreeScenario`];
//! - [`export_tree_scenario!`]: the component's bindings of `agentx:scenario@0.2.0`.
//!
//! A crate apart from `policy` on purpose: the 0.1.0 components (`agentx-mvp`, `kvct-v01`) are
//! built from `policy`, and new callers of its functions would change what the optimiser inlines
//! there, hence their bytes, hence their sha256 identity. Pure logic, `no_std` with `alloc`.

#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod agentx_v1;
pub mod tree;

mod adapter;
#[cfg(test)]
mod golden_v1;

#[doc(hidden)]
pub use policy::__policy_conversions;
pub use policy::types;

use alloc::string::String;
use alloc::vec::Vec;

use types::{Classification, ErrorResponse, Info, Marker, Placement, Resolved, Setting, Violation};

/// The exports of the 0.2.0 `policy` interface (session trees), for one scenario.
pub trait TreeScenario {
    fn describe() -> Info;
    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>>;
    fn rules(resolved: &[Setting]) -> agentx_v1::ReplayRules;
    fn start_tree(
        params: &tree::TreeParams,
        lane: u32,
        tree: &tree::Tree,
    ) -> Option<tree::TreeStart>;
    fn cache_bust(target: Placement, tree: &agentx_v1::TreeId) -> Marker;
    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification;
    fn turn_delay(params: &agentx_v1::DelayParams, times: &agentx_v1::TurnTimes) -> f64;
    fn validity(outcome: &agentx_v1::Outcome) -> Vec<String>;
}
