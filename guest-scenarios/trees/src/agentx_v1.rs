//! `inferencex-agentx-v1`: aiperf 0.13's `inferencex-agentx-mvp` scenario as it now behaves (AgentX
//! v1.0, docs/specs/session-trees.md; aiperf 0.13.0.dev20261023), for session trees through the WIT
//! world `agentx:scenario@0.2.0`.
//!
//! Locks (docs/specs/session-trees.md#scenario-locks, in aiperf's order; an explicit conflicting
//! value is a violation, unset ones get the scenario's value): agentic-replay timing; streaming on;
//! `ignore-eos` on; no `--ignore-trace-delays`, no `--synthesis-max-isl`; the loader one of the
//! allowed corpora (`public-dataset`: the with-subagents series, 061326, 061526, 062126 and their
//! `_256k`; a local `weka_trace` corpus is always a violation); `cache-bust` `first_turn_prefix`;
//! duration 1800 s by default and at least 900 s; trajectory ratios 0.0 / 1.0 unless given; no
//! inter-turn delay cap; system idle cap 10 s; metric coverage 0.95. `use-think-time-only` and the
//! trace idle cap are not locked.
//!
//! Choices where the spec leaves a point open or aiperf has a quirk (tested here, listed in the
//! component's README): a negative recorded API time shortens the next delay as aiperf does (the
//! recorded data say so, and the golden trees carry it); an unusable t* falls back to the turn-index
//! rule with the lane's seed, as aiperf does (no redraw); a 0.13 warmup overflow aborts aiperf's run,
//! while this scenario counts it (`warmup-failure-aborts` applies to other failures only, and the
//! overflow counts in the overflow rate that decides validity).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use policy::settings::Resolver;
pub use policy::types::DelayParams;
use policy::types::{
    Classification, ErrorResponse, Info, Knob, Lock, Marker, Placement, Resolved, SessionId,
    Setting, Value, Violation,
};
use policy::{classify, marker, mvp, validity};

use crate::tree::{Tree, TreeParams, TreeStart};

pub const NAME: &str = "inferencex-agentx-v1";
pub const VERSION: &str = "1.0.0";

pub const MIN_DURATION_S: f64 = 900.0;
pub const DEFAULT_DURATION_S: f64 = 1800.0;
pub const SYSTEM_IDLE_CAP_S: f64 = 10.0;
pub const MIN_METRIC_COVERAGE: f64 = 0.95;
/// Coverage is checked for profiling phases at least this long (seconds).
pub const COVERAGE_MIN_PHASE_S: f64 = 900.0;

/// The corpora the scenario allows (docs/specs/session-trees.md#allowed-corpora): every name the
/// host resolves to a public corpus and that aiperf's scenario lists, without the no-subagents ones.
pub const ALLOWED_CORPORA: [&str; 14] = [
    "semianalysis_cc_traces_weka_with_subagents",
    "semianalysis_cc_traces_weka_with_subagents_256k",
    "semianalysis_cc_traces_weka_with_subagents_060226",
    "semianalysis_cc_traces_weka_with_subagents_060226_256k",
    "semianalysis_cc_traces_weka_with_subagents_060526",
    "semianalysis_cc_traces_weka_with_subagents_060526_256k",
    "semianalysis_cc_traces_weka_with_subagents_060826",
    "semianalysis_cc_traces_weka_with_subagents_060826_256k",
    "semianalysis_cc_traces_weka_061326",
    "semianalysis_cc_traces_weka_061326_256k",
    "semianalysis_cc_traces_weka_061526",
    "semianalysis_cc_traces_weka_061526_256k",
    "semianalysis_cc_traces_weka_062126",
    "semianalysis_cc_traces_weka_062126_256k",
];

/// The identity of one tree: every stream of it carries one marker.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeId {
    pub run_id: String,
    /// Trees of this base trace minted before this one (warmup and profiling share the count).
    pub pass: u32,
    pub lane: u32,
    pub trace_id: String,
}

/// Recorded timing of a turn and the one before it in its stream (ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TurnTimes {
    pub ts_ms: f64,
    pub prev_ts_ms: f64,
    pub prev_api_ms: Option<f64>,
    pub think_time_ms: Option<f64>,
}

/// The mechanism's parameters for a resolved configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReplayRules {
    pub warmup_max_tokens: u32,
    pub warmup_spread: bool,
    pub system_idle_cap_seconds: Option<f64>,
    pub trace_idle_cap_seconds: Option<f64>,
    pub overflow_ends_tree: bool,
    pub warmup_failure_aborts: bool,
    pub recycle_from_turn_zero: bool,
    pub allow_wrap: bool,
    pub min_metric_coverage: f64,
}

/// End-of-run counts with the profiling phase's metric coverage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub total_responses: u64,
    pub context_overflows: u64,
    pub failed: u64,
    pub cancelled: bool,
    pub unsafe_override: bool,
    pub overflow_rate_limit: f64,
    pub profiling_seconds: f64,
    pub ttft_coverage: Option<f64>,
    pub itl_coverage: Option<f64>,
}

/// The id a marker is keyed by: the conversation id cut at the first `::`.
pub fn base_trace_id(id: &str) -> &str {
    id.split_once("::").map_or(id, |(b, _)| b)
}

/// `"[rid:" + sha256(f"{run_id}:{pass}:{lane}:{base}").hex[:12] + "]"` placed for `target`.
pub fn tree_marker(target: Placement, t: &TreeId) -> Marker {
    marker::rid_marker(
        target,
        &SessionId {
            run_id: t.run_id.clone(),
            recycle_pass: t.pass,
            lane: t.lane,
            trace_id: base_trace_id(&t.trace_id).to_string(),
        },
    )
}

/// The end-to-start delay (ms): the recorded think time under `think_time_only` when there is one,
/// else `ts − prev_ts − prev_api` (a missing or non-finite API time counts as 0; a negative one is
/// used as recorded), floored at 0 and capped at `cap_seconds` when given.
pub fn turn_delay(p: &DelayParams, t: &TurnTimes) -> f64 {
    let raw = match t
        .think_time_ms
        .filter(|x| p.think_time_only && x.is_finite())
    {
        Some(think) => think,
        None => {
            let api = t.prev_api_ms.filter(|a| a.is_finite()).unwrap_or(0.0);
            t.ts_ms - t.prev_ts_ms - api
        }
    };
    let d = if raw.is_finite() { raw.max(0.0) } else { 0.0 };
    match p.cap_seconds {
        Some(c) if c.is_finite() && c >= 0.0 => d.min(c * 1000.0),
        _ => d,
    }
}

/// Why a run is not a valid submission, in aiperf's order: `unsafe_override`,
/// `context_overflow_rate_exceeded`, `run_cancelled`, then the coverage of an uncancelled profiling
/// phase of at least 900 s: `insufficient_profile_metric_coverage` when neither the TTFT nor the
/// ITL timeline covers 95 % of it, `profile_metric_coverage_validation_failed` when neither could
/// be computed.
pub fn reasons(o: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    if o.unsafe_override {
        out.push("unsafe_override".to_string());
    }
    let v01 = policy::types::Outcome {
        total_responses: o.total_responses,
        context_overflows: o.context_overflows,
        failed: o.failed,
        cancelled: false,
        unsafe_override: false,
        overflow_rate_limit: o.overflow_rate_limit,
    };
    out.extend(validity::reasons(&v01, true));
    if o.cancelled {
        out.push("run_cancelled".to_string());
    } else if o.profiling_seconds >= COVERAGE_MIN_PHASE_S {
        match (o.ttft_coverage, o.itl_coverage) {
            (None, None) => out.push("profile_metric_coverage_validation_failed".to_string()),
            (a, b) => {
                let best = a.unwrap_or(0.0).max(b.unwrap_or(0.0));
                if best < MIN_METRIC_COVERAGE {
                    out.push("insufficient_profile_metric_coverage".to_string());
                }
            }
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

fn lock(setting: &str, rule: &str) -> Lock {
    Lock {
        setting: setting.to_string(),
        rule: rule.to_string(),
    }
}

/// Forbids an explicit value of `name` (other than `ok`), with `why`.
fn forbid(r: &mut Resolver, name: &str, ok: Option<&Value>, why: &str) {
    if let Some(v) = r.explicit(name).cloned() {
        if Some(&v) != ok && v != Value::Absent {
            r.lock(
                name,
                format!(
                    "--{name} {} {why}; remove --{name}",
                    policy::settings::render(&v)
                ),
            );
        }
    }
}

pub fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let mut r = Resolver::new(given);
    for name in [
        "request-rate",
        "arrival-pattern",
        "user-centric-rate",
        "request-rate-ramp-duration",
        "adaptive-scale",
    ] {
        forbid(
            &mut r,
            name,
            Some(&Value::Flag(false)),
            "conflicts with the scenario's timing: it replays agentic session trees (agentic_replay)",
        );
    }
    r.set("timing-mode", Value::Text("agentic_replay".to_string()));
    for (name, why) in [
        (
            "streaming",
            "is not allowed: the scenario measures streamed responses",
        ),
        (
            "ignore-eos",
            "is not allowed: the scenario generates each turn's recorded output length",
        ),
    ] {
        match r.flag(name) {
            Some(false) if r.explicit(name).is_some() => {
                r.lock(name, format!("--{name} false {why}; remove --{name} false"))
            }
            _ => r.set(name, Value::Flag(true)),
        }
    }
    match r.flag("ignore-trace-delays") {
        Some(true) if r.explicit("ignore-trace-delays").is_some() => r.lock("ignore-trace-delays", "--ignore-trace-delays is not allowed: the scenario replays the recorded delays; remove --ignore-trace-delays".to_string()),
        _ => r.set("ignore-trace-delays", Value::Flag(false)),
    }
    forbid(
        &mut r,
        "synthesis-max-isl",
        None,
        "would drop long requests, and the scenario forbids input truncation",
    );
    let think = r.flag("use-think-time-only").unwrap_or(false);
    r.set("use-think-time-only", Value::Flag(think));

    // Loader: an allowed public corpus.
    let corpus = r.text("public-dataset", "semianalysis_cc_traces_weka_062126");
    match (r.text("loader", "semianalysis_cc_traces_weka").as_deref(), corpus.as_deref()) {
        (_, Some(c)) if ALLOWED_CORPORA.contains(&c) => {}
        (_, Some(c)) => r.lock("public-dataset", format!("--public-dataset {c} is not one the scenario allows; use semianalysis_cc_traces_weka_062126 (InferenceX's current corpus) or another of: {}", ALLOWED_CORPORA.join(", "))),
        (Some("weka_trace"), None) => r.lock("loader", "a local weka_trace corpus is never a valid submission under this scenario; use --public-dataset semianalysis_cc_traces_weka_062126".to_string()),
        (Some(l), None) => r.lock("loader", format!("--loader {l} is not allowed: the scenario replays the public weka corpora; use --public-dataset semianalysis_cc_traces_weka_062126")),
        (None, None) => r.lock("loader", "no dataset given: the scenario replays the public weka corpora; use --public-dataset semianalysis_cc_traces_weka_062126".to_string()),
    }

    match r.text("cache-bust", "first_turn_prefix") {
        Some(t) if Placement::parse(&t).is_none() => r.error("cache-bust", format!("--cache-bust {t} is not a cache-bust target; use one of none, system_prefix, system_suffix, first_turn_prefix, first_turn_suffix")),
        Some(t) if t != "first_turn_prefix" && r.explicit("cache-bust").is_some() => r.lock("cache-bust", format!("--cache-bust {t} differs from the scenario's first_turn_prefix (one marker per tree, before the first user message); remove --cache-bust")),
        _ => r.set("cache-bust", Value::Text("first_turn_prefix".to_string())),
    }

    match r.number("benchmark-duration", "1800") {
        Some(d) if !(d.is_finite() && d > 0.0) => r.error("benchmark-duration", format!("--benchmark-duration {d} is not a positive number of seconds; pass e.g. --benchmark-duration 1800")),
        Some(d) if d < MIN_DURATION_S => r.lock("benchmark-duration", format!("--benchmark-duration {d} is below the scenario's minimum of 900 s; pass --benchmark-duration 1800 (the default), or add --unsafe-override to run anyway as an invalid submission")),
        Some(_) => {}
        None => {
            r.set("benchmark-duration", Value::Number(DEFAULT_DURATION_S));
            if r.present("benchmark-grace-period").is_none() {
                r.set("benchmark-grace-period", Value::Number(30.0));
            }
        }
    }
    forbid(
        &mut r,
        "inter-turn-delay-cap-seconds",
        None,
        "is not allowed: the scenario never caps a recorded delay",
    );
    match r.number("system-idle-gap-cap-seconds", "10") {
        Some(c)
            if c != SYSTEM_IDLE_CAP_S && r.explicit("system-idle-gap-cap-seconds").is_some() =>
        {
            r.lock(
                "system-idle-gap-cap-seconds",
                format!(
                    "--system-idle-gap-cap-seconds {c} differs from the scenario's 10 s; remove it"
                ),
            )
        }
        _ => r.set(
            "system-idle-gap-cap-seconds",
            Value::Number(SYSTEM_IDLE_CAP_S),
        ),
    }
    concurrency(&mut r);
    let (seed, drawn) = r.seed(entropy);
    let unsafe_override = r.flag("unsafe-override").unwrap_or(false);
    r.set("unsafe-override", Value::Flag(unsafe_override));
    r.start_ratios(0.0, 1.0);
    r.overflow_phrases(Some(&mvp::OVERFLOW_PHRASES));
    r.overflow_rate_limit(validity::DEFAULT_OVERFLOW_RATE_LIMIT);
    r.finish(seed, drawn, unsafe_override)
}

/// `concurrency`: required, positive, one value (a sweep runs one run per value).
fn concurrency(r: &mut Resolver) {
    match r.integers("concurrency", "16") {
        None if r.present("concurrency").is_none() => r.error("concurrency", "--concurrency is required: the number of lanes (trees in flight), e.g. --concurrency 16".to_string()),
        None => {}
        Some(list) if list.is_empty() || list.iter().any(|&c| c <= 0) => r.error("concurrency", "--concurrency must be one positive number of lanes, e.g. --concurrency 16".to_string()),
        Some(list) if list.len() > 1 => r.lock("concurrency", format!("--concurrency {list:?} is a sweep; the scenario measures one concurrency per run: use `agentx-host sweep`, or one run per value")),
        Some(list) => r.set("concurrency", Value::Integers(list)),
    }
}

/// The replay rules of a resolved configuration.
pub fn rules(resolved: &[Setting]) -> ReplayRules {
    let number = |name: &str| {
        resolved
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| match s.value {
                Value::Number(x) => Some(x),
                Value::Integer(i) => Some(i as f64),
                _ => None,
            })
    };
    let flag = |name: &str| {
        resolved
            .iter()
            .find(|s| s.name == name)
            .is_some_and(|s| s.value == Value::Flag(true))
    };
    ReplayRules {
        warmup_max_tokens: 1,
        warmup_spread: !flag("burst-phase-starts"),
        system_idle_cap_seconds: Some(
            number("system-idle-gap-cap-seconds").unwrap_or(SYSTEM_IDLE_CAP_S),
        ),
        trace_idle_cap_seconds: number("trace-idle-gap-cap-seconds"),
        overflow_ends_tree: true,
        warmup_failure_aborts: true,
        recycle_from_turn_zero: true,
        allow_wrap: true,
        min_metric_coverage: MIN_METRIC_COVERAGE,
    }
}

/// The scenario of session trees, as the 0.2.0 world exports it.
pub struct AgentxV1;

impl crate::TreeScenario for AgentxV1 {
    fn describe() -> Info {
        Info {
            name: NAME.to_string(),
            version: VERSION.to_string(),
            description: "InferenceX agentic-coding benchmark, AgentX v1.0: replay recorded Claude Code session trees (subagents, flat agents, instant start points) as aiperf 0.13's inferencex-agentx-mvp scenario does".to_string(),
            knobs: alloc::vec![
                knob("timing-mode", "how requests are scheduled; the scenario sets agentic_replay", Some("agentic_replay")),
                knob("streaming", "stream responses", Some("true")),
                knob("ignore-eos", "generate each turn's recorded output length", Some("true")),
                knob("use-think-time-only", "wait the recorded think time where there is one", Some("false")),
                knob("public-dataset", "the public corpus replayed", None),
                knob("benchmark-duration", "profiling seconds", Some("1800")),
                knob("cache-bust", "where each tree's marker goes", Some("first_turn_prefix")),
                knob("system-idle-gap-cap-seconds", "longest idle gap of the whole system", Some("10")),
                knob("trace-idle-gap-cap-seconds", "longest idle gap of one tree", None),
                knob("trajectory-start-min-ratio", "earliest t* as a fraction of the tree's span", Some("0.0")),
                knob("trajectory-start-max-ratio", "latest t* as a fraction of the tree's span", Some("1.0")),
                knob("concurrency", "trees in flight (lanes)", None),
                knob("random-seed", "seed of every draw", None),
                knob("context-overflow-rate-limit", "largest share of overflows in a valid run", Some("0.01")),
            ],
            locks: alloc::vec![
                lock("timing-mode", "agentic_replay; other timing options are refused"),
                lock("streaming", "true; an explicit false is refused"),
                lock("ignore-eos", "true; an explicit false is refused"),
                lock("ignore-trace-delays", "refused"),
                lock("synthesis-max-isl", "refused: no input truncation"),
                lock("public-dataset", "one of the allowed public corpora; a local corpus is never valid"),
                lock("cache-bust", "first_turn_prefix"),
                lock("benchmark-duration", "1800 s by default, at least 900 s"),
                lock("inter-turn-delay-cap-seconds", "refused"),
                lock("system-idle-gap-cap-seconds", "10"),
                lock("concurrency", "a single value"),
            ],
        }
    }

    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
        resolve(given, entropy)
    }

    fn rules(resolved: &[Setting]) -> ReplayRules {
        rules(resolved)
    }

    fn start_tree(params: &TreeParams, lane: u32, tree: &Tree) -> Option<TreeStart> {
        crate::tree::start_tree(params, lane, tree)
    }

    fn cache_bust(target: Placement, tree: &TreeId) -> Marker {
        tree_marker(target, tree)
    }

    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification {
        match phrases {
            Some(list) => classify::classify_phrases(response, list),
            None => classify::classify_phrases(response, &mvp::OVERFLOW_PHRASES),
        }
    }

    fn turn_delay(params: &DelayParams, times: &TurnTimes) -> f64 {
        turn_delay(params, times)
    }

    fn validity(outcome: &Outcome) -> Vec<String> {
        reasons(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn set(name: &str, value: Value) -> Setting {
        Setting {
            name: name.to_string(),
            value,
            explicit: true,
        }
    }

    fn base() -> Vec<Setting> {
        vec![
            set("concurrency", Value::Integers(vec![8])),
            set(
                "public-dataset",
                Value::Text("semianalysis_cc_traces_weka_062126".into()),
            ),
            set("random-seed", Value::Integer(42)),
        ]
    }

    fn get<'a>(r: &'a Resolved, name: &str) -> &'a Value {
        &r.settings.iter().find(|s| s.name == name).unwrap().value
    }

    #[test]
    fn defaults_fill_and_the_run_is_valid() {
        let r = resolve(base(), 7).unwrap();
        assert_eq!(get(&r, "benchmark-duration"), &Value::Number(1800.0));
        assert_eq!(get(&r, "trajectory-start-min-ratio"), &Value::Number(0.0));
        assert_eq!(get(&r, "trajectory-start-max-ratio"), &Value::Number(1.0));
        assert_eq!(get(&r, "system-idle-gap-cap-seconds"), &Value::Number(10.0));
        assert_eq!(
            get(&r, "cache-bust"),
            &Value::Text("first_turn_prefix".into())
        );
        assert!(r.invalid_reasons.is_empty(), "{:?}", r.invalid_reasons);
        let rules = rules(&r.settings);
        assert_eq!(rules.system_idle_cap_seconds, Some(10.0));
        assert_eq!(rules.warmup_max_tokens, 1);
        assert!(rules.warmup_spread);
    }

    #[test]
    fn locks_name_what_to_change() {
        let mut g = base();
        g.push(set("benchmark-duration", Value::Number(60.0)));
        g.push(set("inter-turn-delay-cap-seconds", Value::Number(60.0)));
        g.push(set("system-idle-gap-cap-seconds", Value::Number(5.0)));
        g[1] = set(
            "public-dataset",
            Value::Text("semianalysis_cc_traces_weka".into()),
        );
        let v = resolve(g, 7).unwrap_err();
        let names: Vec<&str> = v.iter().map(|x| x.setting.as_str()).collect();
        for n in [
            "benchmark-duration",
            "inter-turn-delay-cap-seconds",
            "system-idle-gap-cap-seconds",
            "public-dataset",
        ] {
            assert!(names.contains(&n), "{n} in {names:?}");
        }
        // A local corpus is a violation, and unsafe-override turns it into an invalid run.
        let mut g = base();
        g.remove(1);
        g.push(set("loader", Value::Text("weka_trace".into())));
        g.push(set("unsafe-override", Value::Flag(true)));
        let r = resolve(g, 7).unwrap();
        assert_eq!(r.invalid_reasons, vec!["unsafe_override".to_string()]);
    }

    #[test]
    fn delays_follow_aiperf_including_a_negative_api_time() {
        let p = DelayParams {
            think_time_only: false,
            cap_seconds: None,
        };
        let t = |ts, prev, api| TurnTimes {
            ts_ms: ts,
            prev_ts_ms: prev,
            prev_api_ms: api,
            think_time_ms: Some(1.0),
        };
        assert_eq!(
            turn_delay(&p, &t(10_000.0, 4_000.0, Some(2_000.0))),
            4_000.0
        );
        assert_eq!(turn_delay(&p, &t(10_000.0, 4_000.0, None)), 6_000.0);
        assert_eq!(
            turn_delay(&p, &t(10_000.0, 4_000.0, Some(f64::NAN))),
            6_000.0
        );
        // Negative API time: used as recorded (aiperf's quirk; sa-07-edge turn 3 gets 4500 ms).
        assert_eq!(turn_delay(&p, &t(10_000.0, 6_000.0, Some(-500.0))), 4_500.0);
        assert_eq!(turn_delay(&p, &t(10_000.0, 9_000.0, Some(5_000.0))), 0.0);
        let think = DelayParams {
            think_time_only: true,
            cap_seconds: None,
        };
        assert_eq!(
            turn_delay(&think, &t(10_000.0, 4_000.0, Some(2_000.0))),
            1.0
        );
    }

    #[test]
    fn validity_adds_coverage_for_long_phases() {
        let o = |cancelled, secs, ttft: Option<f64>, itl: Option<f64>| Outcome {
            total_responses: 1000,
            context_overflows: 20,
            failed: 0,
            cancelled,
            unsafe_override: true,
            overflow_rate_limit: 0.01,
            profiling_seconds: secs,
            ttft_coverage: ttft,
            itl_coverage: itl,
        };
        assert_eq!(
            reasons(&o(false, 1800.0, Some(0.5), Some(0.9))),
            vec![
                "unsafe_override",
                "context_overflow_rate_exceeded",
                "insufficient_profile_metric_coverage"
            ]
        );
        assert_eq!(
            reasons(&o(false, 1800.0, Some(0.5), Some(0.96))).len(),
            2,
            "either timeline may cover"
        );
        assert_eq!(
            reasons(&o(false, 1800.0, None, None))[2],
            "profile_metric_coverage_validation_failed"
        );
        assert_eq!(
            reasons(&o(false, 600.0, Some(0.1), None)).len(),
            2,
            "short phases are not checked"
        );
        assert_eq!(
            reasons(&o(true, 1800.0, Some(0.1), None))[2],
            "run_cancelled"
        );
    }
}
