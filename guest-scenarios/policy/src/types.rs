//! Plain Rust mirrors of the records and variants of `wit/scenario.wit` (`agentx:scenario/types`).
//!
//! The policy crate knows nothing of wit-bindgen, so that all of the scenario logic compiles and is
//! tested natively; each component converts between these and its generated bindings field for field
//! (see `export_scenario!`). Names and meanings follow the WIT file exactly.

use alloc::string::String;
use alloc::vec::Vec;

/// A configuration value as the host hands it over.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Absent,
    Flag(bool),
    Integer(i64),
    Number(f64),
    Text(String),
    Integers(Vec<i64>),
    Texts(Vec<String>),
}

/// One option of the run configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub name: String,
    pub value: Value,
    pub explicit: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Knob {
    pub name: String,
    pub description: String,
    pub default_value: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Lock {
    pub setting: String,
    pub rule: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Info {
    pub name: String,
    pub version: String,
    pub description: String,
    pub knobs: Vec<Knob>,
    pub locks: Vec<Lock>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    pub setting: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub settings: Vec<Setting>,
    pub seed: u64,
    pub seed_drawn: bool,
    pub warnings: Vec<Violation>,
    pub invalid_reasons: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub trace_id: String,
    pub num_turns: u32,
    pub unsendable: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartParams {
    pub seed: u64,
    pub min_ratio: f64,
    pub max_ratio: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    None,
    SystemPrefix,
    SystemSuffix,
    FirstTurnPrefix,
    FirstTurnSuffix,
}

impl Placement {
    /// The spelling of `--cache-bust`.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::None => "none",
            Placement::SystemPrefix => "system_prefix",
            Placement::SystemSuffix => "system_suffix",
            Placement::FirstTurnPrefix => "first_turn_prefix",
            Placement::FirstTurnSuffix => "first_turn_suffix",
        }
    }

    pub fn parse(text: &str) -> Option<Placement> {
        [
            Placement::None,
            Placement::SystemPrefix,
            Placement::SystemSuffix,
            Placement::FirstTurnPrefix,
            Placement::FirstTurnSuffix,
        ]
        .into_iter()
        .find(|p| p.as_str() == text)
    }

    pub fn is_prefix(self) -> bool {
        matches!(self, Placement::SystemPrefix | Placement::FirstTurnPrefix)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SessionId {
    pub run_id: String,
    pub recycle_pass: u32,
    pub lane: u32,
    pub trace_id: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub text: String,
    pub placement: Placement,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ErrorResponse {
    pub status: u16,
    pub body_excerpt: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    ContextOverflow,
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    pub class: ErrorClass,
    pub matched: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnTiming {
    pub think_time: Option<f64>,
    pub timestamp_gap: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayParams {
    pub think_time_only: bool,
    pub cap_seconds: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub total_responses: u64,
    pub context_overflows: u64,
    pub failed: u64,
    pub cancelled: bool,
    pub unsafe_override: bool,
    pub overflow_rate_limit: f64,
}
