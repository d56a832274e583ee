//! The `agentx:scenario@0.2.0` world (session trees): its bindings, and the conversions of the
//! records both worlds share (settings, info, markers, error classification), so that the calls
//! every scenario answers (`describe`, `resolve`, `classify-error`) keep one host API.

use super::types as v1;

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        world: "scenario",
        path: "../../wit/v0.2",
        additional_derives: [PartialEq],
    });
}

use bindings::exports::agentx::scenario::policy as v2;

/// The guest-facing types of `agentx:scenario@0.2.0` that 0.1.0 has not.
pub mod types {
    pub use super::bindings::exports::agentx::scenario::policy::{
        Branch, DelayParams, Outcome, ReplayRules, StreamStart, Tree, TreeId, TreeParams,
        TreeStart, TreeStream, TurnTimes,
    };
}

super::shared::shared_conversions!(v2);

/// A run's outcome with the 0.2.0 world's metric coverage (TTFT and ITL; 0.2.0 has no content share).
pub(super) fn outcome(outcome: v1::Outcome, coverage: super::TreeCoverage) -> v2::Outcome {
    v2::Outcome {
        total_responses: outcome.total_responses,
        context_overflows: outcome.context_overflows,
        failed: outcome.failed,
        cancelled: outcome.cancelled,
        unsafe_override: outcome.unsafe_override,
        overflow_rate_limit: outcome.overflow_rate_limit,
        profiling_seconds: coverage.profiling_seconds,
        ttft_coverage: coverage.ttft,
        itl_coverage: coverage.itl,
    }
}
