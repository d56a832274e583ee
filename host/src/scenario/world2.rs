//! The `agentx:scenario@0.2.0` world (session trees): its bindings, and the conversions of the
//! records both worlds share (settings, info, markers, error classification), so that the calls
//! every scenario answers (`describe`, `resolve`, `classify-error`) keep one host API.

use super::types as v1;

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        world: "scenario",
        path: "wit/v0.2",
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

pub(super) fn value(v: &v1::Value) -> v2::Value {
    match v {
        v1::Value::Absent => v2::Value::Absent,
        v1::Value::Flag(b) => v2::Value::Flag(*b),
        v1::Value::Integer(i) => v2::Value::Integer(*i),
        v1::Value::Number(x) => v2::Value::Number(*x),
        v1::Value::Text(s) => v2::Value::Text(s.clone()),
        v1::Value::Integers(l) => v2::Value::Integers(l.clone()),
        v1::Value::Texts(l) => v2::Value::Texts(l.clone()),
    }
}

fn value_back(v: v2::Value) -> v1::Value {
    match v {
        v2::Value::Absent => v1::Value::Absent,
        v2::Value::Flag(b) => v1::Value::Flag(b),
        v2::Value::Integer(i) => v1::Value::Integer(i),
        v2::Value::Number(x) => v1::Value::Number(x),
        v2::Value::Text(s) => v1::Value::Text(s),
        v2::Value::Integers(l) => v1::Value::Integers(l),
        v2::Value::Texts(l) => v1::Value::Texts(l),
    }
}

pub(super) fn settings(given: &[v1::Setting]) -> Vec<v2::Setting> {
    given
        .iter()
        .map(|s| v2::Setting {
            name: s.name.clone(),
            value: value(&s.value),
            explicit: s.explicit,
        })
        .collect()
}

fn setting_back(s: v2::Setting) -> v1::Setting {
    v1::Setting {
        name: s.name,
        value: value_back(s.value),
        explicit: s.explicit,
    }
}

fn violation_back(v: v2::Violation) -> v1::Violation {
    v1::Violation {
        setting: v.setting,
        message: v.message,
    }
}

pub(super) fn info_back(i: v2::Info) -> v1::Info {
    v1::Info {
        name: i.name,
        version: i.version,
        description: i.description,
        knobs: i
            .knobs
            .into_iter()
            .map(|k| v1::Knob {
                name: k.name,
                description: k.description,
                default_value: k.default_value,
            })
            .collect(),
        locks: i
            .locks
            .into_iter()
            .map(|l| v1::Lock {
                setting: l.setting,
                rule: l.rule,
            })
            .collect(),
    }
}

pub(super) fn resolved_back(
    r: Result<v2::Resolved, Vec<v2::Violation>>,
) -> Result<v1::Resolved, Vec<v1::Violation>> {
    match r {
        Ok(r) => Ok(v1::Resolved {
            settings: r.settings.into_iter().map(setting_back).collect(),
            seed: r.seed,
            seed_drawn: r.seed_drawn,
            warnings: r.warnings.into_iter().map(violation_back).collect(),
            invalid_reasons: r.invalid_reasons,
        }),
        Err(v) => Err(v.into_iter().map(violation_back).collect()),
    }
}

pub(super) fn error_response(r: &v1::ErrorResponse) -> v2::ErrorResponse {
    v2::ErrorResponse {
        status: r.status,
        body_excerpt: r.body_excerpt.clone(),
    }
}

pub(super) fn classification_back(c: v2::Classification) -> v1::Classification {
    v1::Classification {
        class: match c.class {
            v2::ErrorClass::ContextOverflow => v1::ErrorClass::ContextOverflow,
            v2::ErrorClass::Other => v1::ErrorClass::Other,
        },
        matched: c.matched,
    }
}

pub(super) fn placement(p: v1::Placement) -> v2::Placement {
    match p {
        v1::Placement::None => v2::Placement::None,
        v1::Placement::SystemPrefix => v2::Placement::SystemPrefix,
        v1::Placement::SystemSuffix => v2::Placement::SystemSuffix,
        v1::Placement::FirstTurnPrefix => v2::Placement::FirstTurnPrefix,
        v1::Placement::FirstTurnSuffix => v2::Placement::FirstTurnSuffix,
    }
}

pub(super) fn marker_back(m: v2::Marker) -> v1::Marker {
    v1::Marker {
        text: m.text,
        placement: match m.placement {
            v2::Placement::None => v1::Placement::None,
            v2::Placement::SystemPrefix => v1::Placement::SystemPrefix,
            v2::Placement::SystemSuffix => v1::Placement::SystemSuffix,
            v2::Placement::FirstTurnPrefix => v1::Placement::FirstTurnPrefix,
            v2::Placement::FirstTurnSuffix => v1::Placement::FirstTurnSuffix,
        },
    }
}

/// A run's outcome with the 0.2.0 world's metric coverage: (profiling seconds, TTFT and ITL shares).
pub(super) fn outcome(o: v1::Outcome, coverage: (f64, Option<f64>, Option<f64>)) -> v2::Outcome {
    v2::Outcome {
        total_responses: o.total_responses,
        context_overflows: o.context_overflows,
        failed: o.failed,
        cancelled: o.cancelled,
        unsafe_override: o.unsafe_override,
        overflow_rate_limit: o.overflow_rate_limit,
        profiling_seconds: coverage.0,
        ttft_coverage: coverage.1,
        itl_coverage: coverage.2,
    }
}
