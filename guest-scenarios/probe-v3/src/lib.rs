//! `probe-v3`: a test component of `agentx:scenario@0.3.0`, not a benchmark scenario. Every replay
//! setting it decides and every rule it returns differs from agentx-v1's and from the host's flag
//! defaults, so that a test of the host can tell that the replay followed the component: a 6 s
//! profiling phase with a 2 s grace, 3 cache-pressure requests per lane, a 0.5 s trace idle cap,
//! burst starts, client token counts, 6 dataset entries, 2 s slices, a 0.9 failed-request
//! threshold, 2-token warmup requests, a 2 s system idle cap, live assistant text, no
//! `X-Session-Affinity`, model discovery, warmup rows named `probe.warmup`, and a 0.5 coverage.
//! No lock; lanes may not share trees (`allow-wrap` off), for the test of the host's refusal.

use policy::settings::Resolver;
use policy::types::{
    Classification, ErrorResponse, Info, Marker, Placement, Resolved, Setting, Value, Violation,
};
use policy_harness::tree::{Tree, TreeParams, TreeStart};
use policy_harness::{
    AssistantText, DelayParams, PromptTiling, Outcome, ReplayRules, Rules, TreeId, TurnTimes, REPLAY_SETTINGS,
};
use policy_trees::agentx_v1;

fn defaults() -> [(&'static str, Value); 20] {
    [
        ("concurrency", Value::Integers(vec![2])),
        ("benchmark-duration", Value::Number(6.0)),
        ("benchmark-grace-period", Value::Number(2.0)),
        ("trajectory-start-min-ratio", Value::Number(0.1)),
        ("trajectory-start-max-ratio", Value::Number(0.2)),
        ("cache-bust", Value::Text("first_turn_prefix".into())),
        ("use-think-time-only", Value::Flag(false)),
        ("ignore-trace-delays", Value::Flag(false)),
        ("ignore-eos", Value::Flag(true)),
        ("context-overflow-rate-limit", Value::Number(0.5)),
        ("failed-request-threshold", Value::Number(0.9)),
        ("warmup-requests-per-lane", Value::Integer(3)),
        ("warmup-grace-period", Value::Number(120.0)),
        ("trace-idle-gap-cap-seconds", Value::Number(0.5)),
        ("system-idle-gap-cap-seconds", Value::Number(2.0)),
        ("burst-phase-starts", Value::Flag(true)),
        ("num-dataset-entries", Value::Integer(6)),
        ("slice-duration", Value::Number(2.0)),
        ("use-server-token-count", Value::Flag(false)),
        ("stats-interval", Value::Number(0.0)),
    ]
}

fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let mut r = Resolver::new(given);
    for (name, value) in defaults() {
        r.default(name, value);
    }
    for name in REPLAY_SETTINGS {
        if r.get(name).is_none() {
            r.set(name, Value::Absent);
        }
    }
    let (seed, drawn) = r.seed(entropy);
    let unsafe_override = r.flag("unsafe-override").unwrap_or(false);
    r.set("unsafe-override", Value::Flag(unsafe_override));
    r.finish(seed, drawn, unsafe_override)
}

fn rules(resolved: &[Setting]) -> Rules {
    let base = agentx_v1::rules(resolved);
    Rules {
        base: ReplayRules {
            warmup_max_tokens: 2,
            warmup_spread: base.warmup_spread,
            system_idle_cap_seconds: base.system_idle_cap_seconds,
            trace_idle_cap_seconds: base.trace_idle_cap_seconds,
            overflow_ends_tree: true,
            warmup_failure_aborts: false,
            recycle_from_turn_zero: true,
            allow_wrap: false,
            min_metric_coverage: 0.5,
        },
        assistant_text: AssistantText::Live,
        prompt_tiling: PromptTiling::RecordedLength,
        session_affinity_header: false,
        discover_model: true,
        warmup_phase_name: Some("probe.warmup".into()),
    }
}

struct Probe;

impl policy_harness::ScenarioV3 for Probe {
    fn describe() -> Info {
        Info {
            name: "probe-v3".into(),
            version: "1.0.0".into(),
            description: "a test component of agentx:scenario@0.3.0 (not a benchmark)".into(),
            knobs: Vec::new(),
            locks: Vec::new(),
        }
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
            Some(list) => policy::classify::classify_phrases(response, list),
            None => policy::classify::classify_phrases(response, &policy::mvp::OVERFLOW_PHRASES),
        }
    }

    fn turn_delay(params: &DelayParams, times: &TurnTimes) -> f64 {
        agentx_v1::turn_delay(params, times)
    }

    fn validity(outcome: &Outcome) -> Vec<String> {
        let mut reasons = agentx_v1::reasons(&outcome.base);
        reasons.retain(|r| !r.contains("coverage"));
        reasons
    }
}

policy_harness::export_scenario_v3!(crate::Probe);
