//! Scenario policy through the WIT world `agentx:scenario@0.3.0`, where the component decides the
//! whole replay, and the `agentx` scenario (agentx-harness's `--scenario agentx` preset).
//!
//! - [`agentx`]: the scenario: the AgentX v1.0 locks of `policy_trees::agentx_v1` under the
//!   harness's preset of flag values and environment defaults, every replay setting decided, its
//!   replay rules and validity (with the streaming-content coverage of 1.0.14);
//! - [`ScenarioV3`]: the exports of 0.3.0 for one scenario; [`export_scenario_v3!`]: its bindings.
//!
//! A crate apart from `policy` and `policy-trees` on purpose: new callers of their functions would
//! change what the optimiser inlines there, hence the bytes, hence the sha256 identity of the
//! components built from them. Pure logic, `no_std` with `alloc`.

#![no_std]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod agentx;

mod adapter;

#[doc(hidden)]
pub use policy::__policy_conversions;
pub use policy::types;
pub use policy_trees::agentx_v1::{DelayParams, ReplayRules, TreeId, TurnTimes};
pub use policy_trees::tree;
#[doc(hidden)]
pub use policy_trees::agentx_v1::Outcome as policy_trees_outcome;

use alloc::string::String;
use alloc::vec::Vec;

use types::{Classification, ErrorResponse, Info, Marker, Placement, Resolved, Setting, Violation};

/// The replay settings a 0.3.0 component decides: its `resolve` answers a value (absent: off or
/// none) for each, and the host applies exactly that.
pub const REPLAY_SETTINGS: [&str; 23] = [
    "concurrency",
    "benchmark-duration",
    "benchmark-grace-period",
    "trajectory-start-min-ratio",
    "trajectory-start-max-ratio",
    "cache-bust",
    "inter-turn-delay-cap-seconds",
    "use-think-time-only",
    "ignore-trace-delays",
    "ignore-eos",
    "unsafe-override",
    "context-overflow-rate-limit",
    "failed-request-threshold",
    "warmup-requests-per-lane",
    "agentic-cache-warmup-duration",
    "warmup-grace-period",
    "trace-idle-gap-cap-seconds",
    "system-idle-gap-cap-seconds",
    "burst-phase-starts",
    "num-dataset-entries",
    "slice-duration",
    "use-server-token-count",
    "stats-interval",
];

/// What a request carries for the turns before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssistantText {
    /// The trace's recorded assistant text (the reference's `DELTAS_WITH_RESPONSES`).
    Recorded,
    /// The server's live replies, the recorded text until a stream has one.
    Live,
}

/// How a turn's prompt is laid out of its hash ids after the common prefix with the turn before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptTiling {
    /// Exactly the recorded input tokens.
    RecordedLength,
    /// As agentx-harness 1.0.12 and aiperf 0.13 lay it out (`weka_synth_buf.py`): new blocks start
    /// at the hash ids' common prefix even past the previous prompt's full blocks.
    Reference,
}

/// The mechanism's parameters of 0.3.0: those of 0.2.0 and the new ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub base: ReplayRules,
    pub assistant_text: AssistantText,
    pub prompt_tiling: PromptTiling,
    pub session_affinity_header: bool,
    pub discover_model: bool,
    pub warmup_phase_name: Option<String>,
}

/// End-of-run counts with the three coverages of the profiling phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub base: policy_trees::agentx_v1::Outcome,
    pub content_coverage: Option<f64>,
}

/// The exports of the 0.3.0 `policy` interface, for one scenario.
pub trait ScenarioV3 {
    fn describe() -> Info;
    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>>;
    fn rules(resolved: &[Setting]) -> Rules;
    fn start_tree(
        params: &tree::TreeParams,
        lane: u32,
        tree: &tree::Tree,
    ) -> Option<tree::TreeStart>;
    fn cache_bust(target: Placement, tree: &TreeId) -> Marker;
    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification;
    fn turn_delay(params: &DelayParams, times: &TurnTimes) -> f64;
    fn validity(outcome: &Outcome) -> Vec<String>;
}
