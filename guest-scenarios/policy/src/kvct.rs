//! `kv-cache-tester-v0.1`: the legacy policy InferenceX ran before aiperf (kv-cache-tester
//! `agentx-minimized`, docs/specs/replay-rules.md#kv-cache-tester-v01), so a run can be repeated
//! with v0.1 semantics on the same host.
//!
//! What differs from agentx-mvp: it **locks nothing** (kv-cache-tester validated no run configuration);
//! its settings are plain defaults: initial users advance into their trace by a fraction in 0.0..0.7
//! (`--advance-min/--advance-max`), think-time-only delays capped at 60 s (`--max-delay 60`), and a
//! salt of eight words prepended to the first user turn of each session (`first_turn_prefix`) instead
//! of the `[rid:…]` marker. Its overflow rule is kv-cache-tester's: the lower-cased error text contains
//! "maximum context length", or "context length", or both "input length" and "context". Validity only
//! knows `run_cancelled` and `unsafe_override`: v0.1 had no overflow-rate rule. The start turn within the
//! range uses the same seeded rule as agentx-mvp (the seed is still drawn and reported when unset), so
//! runs are reproducible from the seed.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::classify::{haystacks, other, overflow};
use crate::settings::Resolver;
use crate::types::{
    Classification, DelayParams, ErrorResponse, Info, Knob, Marker, Outcome, Placement, Resolved,
    SessionId, Setting, StartParams, Trajectory, TurnTiming, Value, Violation,
};
use crate::{classify, delay, marker, start, validity, Scenario};

pub const NAME: &str = "kv-cache-tester-v0.1";
pub const VERSION: &str = "0.1.0";
pub const START_MIN_RATIO: f64 = 0.0;
pub const START_MAX_RATIO: f64 = 0.7;
pub const MAX_DELAY_S: f64 = 60.0;

pub struct Kvct;

fn knob(name: &str, description: &str, default: Option<&str>) -> Knob {
    Knob {
        name: name.to_string(),
        description: description.to_string(),
        default_value: default.map(|d| d.to_string()),
    }
}

fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let mut r = Resolver::new(given);
    r.default("timing-mode", Value::Text("agentic_replay".to_string()));
    match r.flag("use-think-time-only") {
        Some(b) => r.set("use-think-time-only", Value::Flag(b)),
        None => r.set("use-think-time-only", Value::Flag(true)),
    }
    match r.number("inter-turn-delay-cap-seconds", "60") {
        Some(c) if c.is_nan() || c < 0.0 => r.error("inter-turn-delay-cap-seconds", alloc::format!("--inter-turn-delay-cap-seconds {c} is not a number of seconds; pass e.g. --inter-turn-delay-cap-seconds 60")),
        Some(c) => r.set("inter-turn-delay-cap-seconds", Value::Number(c)),
        None => r.set("inter-turn-delay-cap-seconds", Value::Number(MAX_DELAY_S)),
    }
    match r.text("cache-bust", "first_turn_prefix") {
        Some(t) if Placement::parse(&t).is_none() => r.error("cache-bust", alloc::format!("--cache-bust {t} is not a cache-bust target; use one of none, system_prefix, system_suffix, first_turn_prefix, first_turn_suffix")),
        Some(_) => {}
        None => r.set("cache-bust", Value::Text("first_turn_prefix".to_string())),
    }
    crate::mvp::concurrency(&mut r, false);
    let (seed, drawn) = r.seed(entropy);
    let unsafe_override = r.flag("unsafe-override").unwrap_or(false);
    r.set("unsafe-override", Value::Flag(unsafe_override));
    r.start_ratios(START_MIN_RATIO, START_MAX_RATIO);
    r.overflow_phrases(None);
    r.finish(seed, drawn, unsafe_override)
}

/// kv-cache-tester's overflow test, on the raw body and the JSON error message.
fn classify_kvct(resp: &ErrorResponse) -> Classification {
    for h in haystacks(&resp.body_excerpt) {
        if h.contains("maximum context length") {
            return overflow("maximum context length");
        }
        if h.contains("context length") {
            return overflow("context length");
        }
        if h.contains("input length") && h.contains("context") {
            return overflow("input length+context");
        }
    }
    other()
}

impl Scenario for Kvct {
    fn describe() -> Info {
        Info {
            name: NAME.to_string(),
            version: VERSION.to_string(),
            description: "Legacy kv-cache-tester v0.1 replay policy (InferenceX before aiperf): no locks, 0.0-0.7 start range, per-user word salt".to_string(),
            knobs: alloc::vec![
                knob("timing-mode", "how requests are scheduled", Some("agentic_replay")),
                knob("use-think-time-only", "wait the recorded think time between turns (kv-cache-tester's think-only timing)", Some("true")),
                knob("inter-turn-delay-cap-seconds", "upper bound of one inter-turn delay, seconds (kv-cache-tester's --max-delay)", Some("60")),
                knob("cache-bust", "where the per-user eight-word salt goes", Some("first_turn_prefix")),
                knob("concurrency", "number of users (lanes); a list runs one measurement per value", None),
                knob("random-seed", "seed of the start turns; drawn from the host's entropy when unset", None),
                knob("unsafe-override", "marks the run as not a valid submission (nothing is locked)", Some("false")),
                knob("trajectory-start-min-ratio", "lowest start turn as a fraction of the trace's turns (--advance-min)", Some("0")),
                knob("trajectory-start-max-ratio", "highest start turn as a fraction of the trace's turns (--advance-max)", Some("0.7")),
                knob("context-overflow-substrings", "phrases that mark an error as a context overflow; unset: kv-cache-tester's rule (\"maximum context length\", \"context length\", or \"input length\" with \"context\")", None),
            ],
            locks: Vec::new(),
        }
    }

    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
        resolve(given, entropy)
    }

    fn start_turn(params: &StartParams, trajectory: &Trajectory) -> Option<u32> {
        start::start_turn(params, trajectory)
    }

    fn cache_bust(target: Placement, session: &SessionId) -> Marker {
        marker::salt_marker(target, session)
    }

    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification {
        match phrases {
            Some(list) => classify::classify_phrases(response, list),
            None => classify_kvct(response),
        }
    }

    fn turn_delay(params: &DelayParams, timing: &TurnTiming) -> f64 {
        delay::turn_delay(params, timing)
    }

    fn validity(outcome: &Outcome) -> Vec<String> {
        validity::reasons(outcome, false)
    }
}
