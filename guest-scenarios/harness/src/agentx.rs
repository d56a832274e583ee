//! `agentx`: the scenario InferenceX runs today, agentx-harness's `--scenario agentx` (1.0.12, with
//! the 1.0.14 additions its docs describe), for session trees through `agentx:scenario@0.3.0`.
//!
//! It is `inferencex-agentx-mvp`'s spec (the AgentX v1.0 locks of `policy_trees::agentx_v1`: the
//! harness's MVP spec is aiperf 0.13's) copied with a 3600 s duration and ratios 0.25/0.75, plus a
//! **preset** of flag values applied as if typed where the user gave none
//! (docs/specs/harness-preset.md#preset): seed 42, failed-request threshold 0.10, 10 warmup requests
//! per lane (dropped when `--agentic-cache-warmup-duration` is given), warmup grace 1800 s, trace idle
//! cap 300 s, 393 dataset entries, 1 s slices, server token counts, stats every 30 s, the 30 s grace an
//! explicit duration attaches; and four **environment defaults** for unset variables
//! (docs/specs/harness-preset.md#environment-defaults). Every replay setting of 0.3.0 is decided here.
//!
//! Rules: recorded assistant text (the harness discards live replies), no `X-Session-Affinity`
//! header (1.0.12 has neither the header nor its switch), model discovery from `/v1/models`
//! (1.0.14), synthesized warmup rows without a phase name (1.0.12). Validity: the harness's order,
//! one tag `insufficient_profile_metric_coverage` for every coverage failure (1.0.12), and a phase
//! passes when the TTFT, ITL or streamed-content timeline covers 95 % (1.0.14 adds the last).
//!
//! Where the harness has a defect this scenario does better, as listed in the component's README: a
//! context overflow in warmup is counted, not a run-ending failure (aiperf#1288), and a failed
//! warmup request is judged by the failed-request threshold, not a run-ending failure either.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use policy::settings::Resolver;
use policy::types::{
    Classification, ErrorResponse, Info, Knob, Lock, Marker, Placement, Resolved, Setting, Value,
    Violation,
};
use policy::{classify, mvp};
use policy_trees::agentx_v1;
use policy_trees::tree::{Tree, TreeParams, TreeStart};

use crate::{AssistantText, DelayParams, Outcome, PromptTiling, Rules, TreeId, TurnTimes, REPLAY_SETTINGS};

pub const NAME: &str = "agentx";
pub const VERSION: &str = "1.0.12";

pub const DEFAULT_DURATION_S: f64 = 3600.0;
pub const MIN_COVERAGE: f64 = 0.95;

/// The preset of agentx-harness 1.0.12 (`common/scenario/inferencex_agentx_mvp.py`:43-70 and the
/// converter's candidates, `config/flags/converter.py`:503-527), in the order it is applied: the
/// duration, the ratios, then the flag defaults. An explicit duration attaches the default 30 s
/// profiling grace (`config/flags/_converter_profiling.py`:464-468), which the preset's duration
/// counts as.
fn preset() -> [(&'static str, Value); 14] {
    [
        ("benchmark-duration", Value::Number(DEFAULT_DURATION_S)),
        ("trajectory-start-min-ratio", Value::Number(0.25)),
        ("trajectory-start-max-ratio", Value::Number(0.75)),
        ("random-seed", Value::Integer(42)),
        ("failed-request-threshold", Value::Number(0.10)),
        ("warmup-requests-per-lane", Value::Integer(10)),
        ("warmup-grace-period", Value::Number(1800.0)),
        ("trace-idle-gap-cap-seconds", Value::Number(300.0)),
        ("num-dataset-entries", Value::Integer(393)),
        ("slice-duration", Value::Number(1.0)),
        ("use-server-token-count", Value::Flag(true)),
        ("stats-interval", Value::Number(30.0)),
        ("benchmark-grace-period", Value::Number(30.0)),
        ("streaming", Value::Flag(true)),
    ]
}

/// The environment defaults (`common/environment.py`:302-305, 1230-1233, 1495-1496, 724-728), by
/// the setting the host names each variable with.
pub const ENVIRONMENT: [(&str, &str, Value); 4] = [
    (
        "dataset-configuration-timeout",
        "AIPERF_DATASET_CONFIGURATION_TIMEOUT",
        Value::Number(1800.0),
    ),
    (
        "service-profile-configure-timeout",
        "AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT",
        Value::Number(1800.0),
    ),
    (
        "ui-realtime-metrics-enabled",
        "AIPERF_UI_REALTIME_METRICS_ENABLED",
        Value::Flag(true),
    ),
    (
        "http-tcp-user-timeout",
        "AIPERF_HTTP_TCP_USER_TIMEOUT",
        Value::Integer(900_000),
    ),
];

/// Puts the preset where the configuration has no value at all (a value the host put in without
/// the user, such as a demo's duration, stays: it is the host's, not the harness's, default).
fn apply_preset(given: &mut Vec<Setting>) {
    let has = |g: &Vec<Setting>, n: &str| g.iter().any(|s| s.name == n && s.value != Value::Absent);
    let cache_warmup = has(given, "agentic-cache-warmup-duration");
    for (name, value) in preset() {
        if name == "warmup-requests-per-lane" && cache_warmup {
            continue;
        }
        if !has(given, name) {
            given.retain(|s| s.name != name);
            given.push(Setting {
                name: name.to_string(),
                value,
                explicit: false,
            });
        }
    }
    for (name, _, value) in ENVIRONMENT {
        if !has(given, name) {
            given.retain(|s| s.name != name);
            given.push(Setting {
                name: name.to_string(),
                value,
                explicit: false,
            });
        }
    }
}

/// A number of seconds, or the text `inf`; errors name the flag.
fn seconds_or_inf(r: &mut Resolver, name: &str) {
    match r.present(name).map(|(v, _)| v.clone()) {
        Some(Value::Text(t)) if t.eq_ignore_ascii_case("inf") => {}
        Some(Value::Text(t)) => r.error(name, format!("--{name} {t} is not a number of seconds or `inf`; pass e.g. --{name} 30")),
        Some(_) => match r.number(name, "30") {
            Some(x) if x.is_finite() && x >= 0.0 => {}
            Some(x) => r.error(name, format!("--{name} {x} is not a non-negative number of seconds; pass e.g. --{name} 30")),
            None => {}
        },
        None => {}
    }
}

/// Checks the values the preset fills (a user's value of the wrong kind is an error, never
/// silently replaced).
fn check_values(r: &mut Resolver) {
    if let Some(x) = r.number("failed-request-threshold", "0.10") {
        if !(0.0..=1.0).contains(&x) {
            r.error("failed-request-threshold", format!("--failed-request-threshold {x} is outside 0..1; pass a fraction, e.g. --failed-request-threshold 0.10"));
        }
    }
    let per_lane = r.integer("warmup-requests-per-lane", "10");
    if matches!(per_lane, Some(n) if n < 0) {
        r.error("warmup-requests-per-lane", "--warmup-requests-per-lane must be 0 or more requests per lane, e.g. --warmup-requests-per-lane 10".to_string());
    }
    let pressure = r.number("agentic-cache-warmup-duration", "60");
    if let (Some(_), Some(_)) = (
        r.explicit("warmup-requests-per-lane").cloned(),
        r.explicit("agentic-cache-warmup-duration").cloned(),
    ) {
        r.error("agentic-cache-warmup-duration", "--agentic-cache-warmup-duration and --warmup-requests-per-lane exclude each other; pass one".to_string());
    }
    for (name, x) in [
        ("agentic-cache-warmup-duration", pressure),
        ("trace-idle-gap-cap-seconds", r.number("trace-idle-gap-cap-seconds", "300")),
        ("slice-duration", r.number("slice-duration", "1.0")),
    ] {
        if matches!(x, Some(x) if !(x.is_finite() && x > 0.0)) {
            r.error(name, format!("--{name} must be a positive number of seconds"));
        }
    }
    if matches!(r.number("stats-interval", "30"), Some(x) if !(x.is_finite() && x >= 0.0)) {
        r.error("stats-interval", "--stats-interval must be 0 (off) or a positive number of seconds, e.g. --stats-interval 30".to_string());
    }
    if matches!(r.integer("num-dataset-entries", "393"), Some(n) if n <= 0) {
        r.error("num-dataset-entries", "--num-dataset-entries must be a positive number of traces, e.g. --num-dataset-entries 393".to_string());
    }
    r.flag("use-server-token-count");
    r.flag("burst-phase-starts");
    seconds_or_inf(r, "benchmark-grace-period");
    seconds_or_inf(r, "warmup-grace-period");
    environment(r);
}

/// The harness re-validates its environment after applying the defaults
/// (`common/environment.py`:1886-1893): a service configure timeout below the dataset
/// configuration timeout fails the run, so a user's dataset timeout above 1800 s alone fails.
/// Reproduced: the run is refused with both values named.
fn environment(r: &mut Resolver) {
    let dataset = r.number("dataset-configuration-timeout", "1800");
    let profile = r.number("service-profile-configure-timeout", "1800");
    if let (Some(d), Some(p)) = (dataset, profile) {
        if p < d {
            r.error("dataset-configuration-timeout", format!("AIPERF_DATASET_CONFIGURATION_TIMEOUT={d} is above AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT={p}, which the harness refuses; set AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT to at least {d}"));
        }
    }
    r.integer("http-tcp-user-timeout", "900000");
    r.flag("ui-realtime-metrics-enabled");
}

pub fn resolve(mut given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    apply_preset(&mut given);
    // The AgentX v1.0 locks and their defaults (the harness's MVP spec is aiperf 0.13's).
    let base = agentx_v1::resolve(given, entropy);
    let (mut resolved, mut errors) = match base {
        Ok(r) => (Some(r), Vec::new()),
        Err(v) => (None, v),
    };
    // The preset's values are checked on the configuration as resolved (or as given when the locks
    // refused it, so that every finding comes at once).
    let settings = resolved
        .as_ref()
        .map(|r| r.settings.clone())
        .unwrap_or_default();
    let mut r = Resolver::new(settings);
    if resolved.is_some() {
        check_values(&mut r);
        for name in REPLAY_SETTINGS {
            if r.get(name).is_none() {
                r.set(name, Value::Absent);
            }
        }
        // The request count of a warmup stage given by duration is the duration's.
        if r.present("agentic-cache-warmup-duration").is_some() {
            r.set("warmup-requests-per-lane", Value::Absent);
        }
    }
    let checked = r.finish(0, false, true);
    match (&mut resolved, checked) {
        (Some(res), Ok(c)) => res.settings = c.settings,
        (_, Err(e)) => errors.extend(e),
        (None, Ok(_)) => {}
    }
    match resolved {
        Some(res) if errors.is_empty() => Ok(res),
        _ => Err(errors),
    }
}

/// The replay rules: AgentX v1.0's, with the trace idle cap and burst as resolved, and the 0.3.0
/// decisions of the harness.
pub fn rules(resolved: &[Setting]) -> Rules {
    let mut base = agentx_v1::rules(resolved);
    // agentx: a failed root request in warmup is judged by the failed-request threshold (the lane
    // starts a fresh tree) instead of ending the run at the first (1.0.12
    // credit/callback_handler.py:296-323, which makes a 1 % fault rate at 256 lanes fatal).
    base.warmup_failure_aborts = false;
    Rules {
        base,
        assistant_text: AssistantText::Recorded,
        prompt_tiling: PromptTiling::Reference,
        session_affinity_header: false,
        discover_model: true,
        warmup_phase_name: None,
    }
}

/// Why a run is not a valid submission, in the harness's order (`exporters/aggregate/
/// aggregate_base_exporter.py`:69-149): `unsafe_override`, `context_overflow_rate_exceeded`,
/// `run_cancelled`, then for an uncancelled profiling phase of at least 900 s
/// `insufficient_profile_metric_coverage` unless the TTFT, ITL or streamed-content timeline covers
/// 95 % of it (`records/records_manager.py`:2133-2136: one tag for every failure, the uncheckable
/// case included; the content ratio is 1.0.14's).
pub fn reasons(o: &Outcome) -> Vec<String> {
    let mut base = o.base;
    base.profiling_seconds = 0.0;
    let mut out = agentx_v1::reasons(&base);
    if !o.base.cancelled && o.base.profiling_seconds >= agentx_v1::COVERAGE_MIN_PHASE_S {
        let best = [o.base.ttft_coverage, o.base.itl_coverage, o.content_coverage]
            .into_iter()
            .flatten()
            .fold(None::<f64>, |m, x| Some(m.map_or(x, |m| m.max(x))));
        if best.is_none_or(|b| b < MIN_COVERAGE) {
            out.push("insufficient_profile_metric_coverage".to_string());
        }
    }
    out
}

fn knob(name: &str, description: &str, default: Option<&str>) -> Knob {
    Knob {
        name: name.to_string(),
        description: description.to_string(),
        default_value: default.map(|d| d.to_string()),
    }
}

fn describe() -> Info {
    let mut base = <agentx_v1::AgentxV1 as policy_trees::TreeScenario>::describe();
    let mut knobs: Vec<Knob> = base
        .knobs
        .into_iter()
        .filter(|k| !matches!(k.name.as_str(), "benchmark-duration" | "trajectory-start-min-ratio" | "trajectory-start-max-ratio" | "trace-idle-gap-cap-seconds" | "random-seed"))
        .collect();
    knobs.extend([
        knob("benchmark-duration", "profiling seconds", Some("3600")),
        knob("benchmark-grace-period", "seconds in-flight requests may finish after profiling", Some("30")),
        knob("trajectory-start-min-ratio", "earliest t* as a fraction of the tree's span", Some("0.25")),
        knob("trajectory-start-max-ratio", "latest t* as a fraction of the tree's span", Some("0.75")),
        knob("random-seed", "seed of every draw", Some("42")),
        knob("failed-request-threshold", "largest share of failed profiling requests before the run is cancelled", Some("0.10")),
        knob("warmup-requests-per-lane", "cache-pressure warmup requests per lane after the primers", Some("10")),
        knob("agentic-cache-warmup-duration", "cache-pressure warmup by time instead of requests", None),
        knob("warmup-grace-period", "seconds the warmup drain may take", Some("1800")),
        knob("trace-idle-gap-cap-seconds", "longest idle gap of one tree", Some("300")),
        knob("burst-phase-starts", "fire the warmup primers at once", Some("false")),
        knob("num-dataset-entries", "traces taken from the corpus", Some("393")),
        knob("slice-duration", "seconds per time slice of the exports", Some("1.0")),
        knob("use-server-token-count", "token counts from the server's usage", Some("true")),
        knob("stats-interval", "seconds between realtime blocks", Some("30")),
    ]);
    for (name, var, value) in ENVIRONMENT {
        knobs.push(knob(name, var, Some(&policy::settings::render(&value))));
    }
    base.locks.push(Lock {
        setting: "dataset-configuration-timeout".to_string(),
        rule: "at most service-profile-configure-timeout (the harness re-validates its environment)".to_string(),
    });
    Info {
        name: NAME.to_string(),
        version: VERSION.to_string(),
        description: "InferenceX agentic-coding benchmark as agentx-harness's --scenario agentx runs it: AgentX v1.0 session trees under the harness's preset (3600 s, t* ratios 0.25/0.75, seed 42, 10 cache-pressure warmup requests per lane, trace idle cap 300 s, failed-request threshold 0.10)".to_string(),
        knobs,
        locks: base.locks,
    }
}

/// The `agentx` scenario, as the 0.3.0 world exports it.
pub struct Agentx;

impl crate::ScenarioV3 for Agentx {
    fn describe() -> Info {
        describe()
    }

    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
        resolve(given, entropy)
    }

    fn rules(resolved: &[Setting]) -> Rules {
        rules(resolved)
    }

    fn start_tree(params: &TreeParams, lane: u32, tree: &Tree) -> Option<TreeStart> {
        policy_trees::tree::start_tree(params, lane, tree)
    }

    fn cache_bust(target: Placement, tree: &TreeId) -> Marker {
        agentx_v1::tree_marker(target, tree)
    }

    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification {
        match phrases {
            Some(list) => classify::classify_phrases(response, list),
            None => classify::classify_phrases(response, &mvp::OVERFLOW_PHRASES),
        }
    }

    fn turn_delay(params: &DelayParams, times: &TurnTimes) -> f64 {
        agentx_v1::turn_delay(params, times)
    }

    fn validity(outcome: &Outcome) -> Vec<String> {
        reasons(outcome)
    }
}

#[cfg(test)]
mod tests;
