//! `graph-ir`: the scenario of an aiperf Agent Graph IR replay (`run --format graph-ir FILE`,
//! docs/specs/agent-graph-ir.md#9-scheduling-and-concurrency), through `agentx:scenario@0.3.0`.
//!
//! It decides how trace instances are admitted and when the run stops, as aiperf's graph runtime
//! does:
//! - `open-loop-replay` (default on): a corpus with recorded trace starts starts each trace at its
//!   recorded offset divided by `replay-speedup` (default 1.0), its nodes still obeying their
//!   dependencies; off, traces run on closed-loop lanes. A corpus without recorded starts always
//!   runs closed-loop lanes (the host knows the corpus; the rule is stated here and in `describe`);
//! - `concurrency`: one number of trace instances in flight. Absent, open-loop admission is not
//!   gated and closed-loop replay runs one lane;
//! - `benchmark-duration` and `request-count` (LLM node dispatches) are stop conditions under which
//!   freed lanes recycle traces; with neither, a run is one pass over the traces;
//! - `request-rate`, `user-centric-rate`, `fixed-schedule` and `session-arrival-rate` are refused:
//!   a graph's pacing is its recorded delays (aiperf refuses them too). They are errors, not locks:
//!   `unsafe-override` cannot turn them on, because the graph runtime has no use for them.
//!
//! What a graph replay shares with the session replays is `agentx`'s: the context-overflow phrases
//! and rate limit (`context-overflow-substrings`, `context-overflow-rate-limit`, resolved here with
//! `agentx`'s defaults), `classify-error` and the submission rules of `validity`
//! (`policy_harness::agentx`). The tree entry points are `agentx`'s too; a graph replay never calls
//! them.

use policy::settings::Resolver;
use policy::types::{Info, Knob, Lock, Resolved, Setting, Value, Violation};

pub const NAME: &str = "graph-ir";
pub const VERSION: &str = "0.1.0";

const CONCURRENCY: &str = "concurrency";
const DURATION: &str = "benchmark-duration";
const REQUEST_COUNT: &str = "request-count";
const OPEN_LOOP: &str = "open-loop-replay";
const SPEEDUP: &str = "replay-speedup";
const UNSAFE: &str = "unsafe-override";
const SEED: &str = "random-seed";
const OVERFLOW_PHRASES: &str = "context-overflow-substrings";
const OVERFLOW_LIMIT: &str = "context-overflow-rate-limit";
/// The settings a graph replay refuses, each with the reason in aiperf's words.
const REFUSED: [&str; 4] = [
    "request-rate",
    "user-centric-rate",
    "fixed-schedule",
    "session-arrival-rate",
];
const REFUSAL: &str = "cannot pace a graph-ir replay: its pacing is the graph's recorded delays (aiperf refuses it too); use --concurrency (trace instances in flight), --benchmark-duration or --request-count";
/// The settings this scenario reads; any other given setting is left as given.
const KNOBS: [&str; 9] = [
    OVERFLOW_PHRASES,
    OVERFLOW_LIMIT,
    CONCURRENCY,
    DURATION,
    REQUEST_COUNT,
    OPEN_LOOP,
    SPEEDUP,
    UNSAFE,
    SEED,
];

/// `concurrency`: one positive number, or absent.
fn concurrency(r: &mut Resolver) {
    let Some(list) = r.integers(CONCURRENCY, "4") else {
        return;
    };
    match list.as_slice() {
        [n] if *n >= 1 => r.set(CONCURRENCY, Value::Integer(*n)),
        [n] => r.error(
            CONCURRENCY,
            format!("--{CONCURRENCY} {n}: give at least one trace instance in flight, e.g. --{CONCURRENCY} 4"),
        ),
        points => {
            let points: Vec<String> = points.iter().map(i64::to_string).collect();
            r.error(
                CONCURRENCY,
                format!("--{CONCURRENCY} {}: a graph-ir run takes one number of trace instances in flight, not a list of points", points.join(",")),
            );
        }
    }
}

/// The stop conditions: a positive duration and a positive request count, each optional.
fn stop_conditions(r: &mut Resolver) {
    if let Some(seconds) = r.number(DURATION, "600") {
        if !(seconds.is_finite() && seconds > 0.0) {
            r.error(
                DURATION,
                format!("--{DURATION} {seconds}: give a positive number of seconds, e.g. --{DURATION} 600"),
            );
        }
    }
    if let Some(count) = r.integer(REQUEST_COUNT, "100") {
        if count < 1 {
            r.error(
                REQUEST_COUNT,
                format!("--{REQUEST_COUNT} {count}: give at least one LLM node dispatch, e.g. --{REQUEST_COUNT} 100"),
            );
        }
    }
}

/// `open-loop-replay` (default on) and `replay-speedup` (default 1.0, positive).
fn admission(r: &mut Resolver) {
    let open = r.flag(OPEN_LOOP).unwrap_or(true);
    r.set(OPEN_LOOP, Value::Flag(open));
    let speedup = r.number(SPEEDUP, "2.0").unwrap_or(1.0);
    if !(speedup.is_finite() && speedup > 0.0) {
        r.error(
            SPEEDUP,
            format!("--{SPEEDUP} {speedup}: give a positive factor, e.g. --{SPEEDUP} 2.0 (twice as fast)"),
        );
    }
    r.set(SPEEDUP, Value::Number(speedup));
}

pub fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let mut r = Resolver::new(given);
    for name in REFUSED {
        if r.present(name)
            .is_some_and(|(value, _)| *value != Value::Flag(false))
        {
            r.error(name, format!("--{name} {REFUSAL}"));
        }
    }
    concurrency(&mut r);
    stop_conditions(&mut r);
    admission(&mut r);
    r.overflow_phrases(Some(&policy::mvp::OVERFLOW_PHRASES));
    r.overflow_rate_limit(policy::validity::DEFAULT_OVERFLOW_RATE_LIMIT);
    let unsafe_override = r.flag(UNSAFE).unwrap_or(false);
    r.set(UNSAFE, Value::Flag(unsafe_override));
    let (seed, drawn) = r.seed(entropy);
    r.finish(seed, drawn, unsafe_override)
}

fn knob(name: &str, description: &str, default: Option<&str>) -> Knob {
    Knob {
        name: name.to_string(),
        description: description.to_string(),
        default_value: default.map(str::to_string),
    }
}

fn describe() -> Info {
    let knobs = vec![
        knob(CONCURRENCY, "trace instances in flight: the cap on open-loop arrivals (not gated when absent) and the number of closed-loop lanes (1 when absent)", None),
        knob(DURATION, "a stop condition, seconds: freed lanes recycle traces until it passes", None),
        knob(REQUEST_COUNT, "a stop condition: LLM node dispatches, not traces; freed lanes recycle traces until it is reached", None),
        knob(OPEN_LOOP, "a corpus with recorded trace starts starts each trace at its recorded offset (open loop); off, or without recorded starts, traces run on closed-loop lanes", Some("true")),
        knob(SPEEDUP, "divides the recorded trace-start offsets of an open-loop replay", Some("1.0")),
        knob(UNSAFE, "turn lock violations into warnings; the run is then not a valid submission", Some("false")),
        knob(SEED, "the run's seed (recorded; a graph replay draws nothing from it)", None),
        knob(OVERFLOW_PHRASES, "the phrases of a failed response's body that make it a context overflow (agentx's list by default; empty disables detection)", None),
        knob(OVERFLOW_LIMIT, "the largest share of responses that may be context overflows in a valid submission", Some("0.01")),
    ];
    debug_assert_eq!(knobs.len(), KNOBS.len());
    let locks = REFUSED
        .iter()
        .map(|setting| Lock {
            setting: setting.to_string(),
            rule: "refused: a graph's pacing is its recorded delays".to_string(),
        })
        .collect();
    Info {
        name: NAME.to_string(),
        version: VERSION.to_string(),
        description: "aiperf Agent Graph IR v2.0 replay: each trace instance runs its graph (nodes dispatched when their in-edges fire at their anchors plus delays, fan-in gates, channel reducers); recorded trace starts open the traces at their offsets by default, otherwise closed-loop lanes; a stop condition recycles traces, none makes one pass".to_string(),
        knobs,
        locks,
    }
}

/// The graph replay's scenario.
pub struct GraphIr;

policy_harness::agentx_with_own_settings!(GraphIr);

policy_harness::export_scenario_v3!(crate::GraphIr);

#[cfg(test)]
mod tests {
    use super::*;

    fn given(name: &str, value: Value) -> Setting {
        Setting {
            name: name.to_string(),
            value,
            explicit: true,
        }
    }

    fn value_of<'a>(resolved: &'a Resolved, name: &str) -> Option<&'a Value> {
        resolved
            .settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| &s.value)
    }

    #[test]
    fn defaults_are_open_loop_at_recorded_speed_with_no_cap() {
        let resolved = resolve(vec![], 7).unwrap();
        assert_eq!(value_of(&resolved, OPEN_LOOP), Some(&Value::Flag(true)));
        assert_eq!(value_of(&resolved, SPEEDUP), Some(&Value::Number(1.0)));
        assert_eq!(value_of(&resolved, CONCURRENCY), None);
        assert!(resolved.seed_drawn);
        assert_eq!(
            value_of(&resolved, OVERFLOW_LIMIT),
            Some(&Value::Number(0.01))
        );
        assert!(
            matches!(value_of(&resolved, OVERFLOW_PHRASES), Some(Value::Texts(list)) if !list.is_empty())
        );
        assert!(resolved.invalid_reasons.is_empty());
    }

    #[test]
    fn one_concurrency_and_stop_conditions_pass() {
        let resolved = resolve(
            vec![
                given(CONCURRENCY, Value::Integers(vec![4])),
                given(REQUEST_COUNT, Value::Integer(20)),
                given(OPEN_LOOP, Value::Flag(false)),
            ],
            0,
        )
        .unwrap();
        assert_eq!(value_of(&resolved, CONCURRENCY), Some(&Value::Integer(4)));
        assert_eq!(value_of(&resolved, OPEN_LOOP), Some(&Value::Flag(false)));
    }

    #[test]
    fn pacing_flags_are_refused_even_under_unsafe_override() {
        let err = resolve(
            vec![
                given("request-rate", Value::Number(2.0)),
                given("fixed-schedule", Value::Flag(true)),
                given(UNSAFE, Value::Flag(true)),
            ],
            0,
        )
        .unwrap_err();
        let settings: Vec<&str> = err.iter().map(|v| v.setting.as_str()).collect();
        assert_eq!(settings, ["request-rate", "fixed-schedule"]);
        assert!(
            err[0].message.contains("recorded delays"),
            "{}",
            err[0].message
        );
        // `fixed-schedule` given as off is no pacing at all.
        assert!(resolve(vec![given("fixed-schedule", Value::Flag(false))], 0).is_ok());
    }

    #[test]
    fn bad_values_name_the_flag_and_an_example() {
        let err = resolve(
            vec![
                given(CONCURRENCY, Value::Integers(vec![2, 4])),
                given(DURATION, Value::Number(0.0)),
                given(REQUEST_COUNT, Value::Integer(0)),
                given(SPEEDUP, Value::Number(-1.0)),
            ],
            0,
        )
        .unwrap_err();
        let settings: Vec<&str> = err.iter().map(|v| v.setting.as_str()).collect();
        assert_eq!(settings, [CONCURRENCY, DURATION, REQUEST_COUNT, SPEEDUP]);
        assert!(err.iter().all(|v| v.message.starts_with("--")));
    }
}
