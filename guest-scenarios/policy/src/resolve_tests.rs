//! `resolve` of both scenarios: locks, errors, override, seed drawing, pass-through.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use crate::kvct::Kvct;
use crate::mvp::Mvp;
use crate::types::{Placement, Resolved, SessionId, Setting, Value, Violation};
use crate::Scenario;

fn s(name: &str, value: Value) -> Setting {
    Setting {
        name: name.to_string(),
        value,
        explicit: true,
    }
}

fn default(name: &str, value: Value) -> Setting {
    Setting {
        explicit: false,
        ..s(name, value)
    }
}

fn text(t: &str) -> Value {
    Value::Text(t.to_string())
}

fn minimal() -> Vec<Setting> {
    vec![
        s("loader", text("semianalysis_cc_traces_weka")),
        s("benchmark-duration", Value::Number(1800.0)),
        s("concurrency", Value::Integers(vec![16])),
    ]
}

fn get<'a>(r: &'a Resolved, name: &str) -> &'a Setting {
    r.settings
        .iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("{name} missing from {:?}", r.settings))
}

fn assert_messages(vs: &[Violation]) {
    for v in vs {
        let first = v.message.chars().next().unwrap();
        assert!(!first.is_uppercase(), "not lower-case: {}", v.message);
        assert!(
            v.message.contains(&alloc::format!("--{}", v.setting)),
            "does not name --{}: {}",
            v.setting,
            v.message
        );
    }
}

#[test]
fn mvp_minimal_configuration_gets_every_lock() {
    let r = Mvp::resolve(minimal(), u64::MAX).unwrap();
    assert_eq!((r.seed, r.seed_drawn), ((1 << 63) - 1, true));
    assert!(
        r.warnings.is_empty() && r.invalid_reasons.is_empty(),
        "{r:?}"
    );
    for (name, want) in [
        ("timing-mode", text("agentic_replay")),
        ("ignore-eos", Value::Flag(true)),
        ("use-think-time-only", Value::Flag(true)),
        ("ignore-trace-delays", Value::Flag(false)),
        ("synthesis-max-isl", Value::Absent),
        ("inter-turn-delay-cap-seconds", Value::Number(60.0)),
        ("cache-bust", text("first_turn_prefix")),
        ("concurrency", Value::Integers(vec![16])),
        ("random-seed", Value::Integer(i64::MAX)),
        ("unsafe-override", Value::Flag(false)),
        ("trajectory-start-min-ratio", Value::Number(0.0)),
        ("trajectory-start-max-ratio", Value::Number(0.7)),
        ("context-overflow-rate-limit", Value::Number(0.01)),
        ("benchmark-duration", Value::Number(1800.0)),
        ("loader", text("semianalysis_cc_traces_weka")),
    ] {
        assert_eq!(get(&r, name).value, want, "{name}");
    }
    assert!(!get(&r, "ignore-eos").explicit);
    let Value::Texts(p) = &get(&r, "context-overflow-substrings").value else {
        panic!()
    };
    assert_eq!(p.len(), crate::mvp::OVERFLOW_PHRASES.len());
    // every knob of describe() has an effective value
    for k in Mvp::describe().knobs {
        get(&r, &k.name);
    }
}

#[test]
fn mvp_given_seed_and_inferencex_command_line() {
    let mut g = minimal();
    g.extend([
        s("random-seed", Value::Integer(42)),
        s("trajectory-start-min-ratio", Value::Number(0.25)),
        s("trajectory-start-max-ratio", Value::Number(0.75)),
        s("ignore-eos", Value::Flag(true)),
        s("cache-bust", text("first_turn_prefix")),
        s("inter-turn-delay-cap-seconds", Value::Integer(60)),
        s("num-dataset-entries", Value::Integer(949)),
        default("request-rate", Value::Absent),
    ]);
    let r = Mvp::resolve(g, 7).unwrap();
    assert_eq!((r.seed, r.seed_drawn), (42, false));
    assert_eq!(get(&r, "random-seed").value, Value::Integer(42));
    assert_eq!(
        get(&r, "trajectory-start-min-ratio").value,
        Value::Number(0.25)
    );
    // unknown names pass through unchanged, in place
    assert_eq!(r.settings[3], s("random-seed", Value::Integer(42)));
    assert_eq!(get(&r, "num-dataset-entries").value, Value::Integer(949));
    assert!(r.warnings.is_empty());
}

fn everything_wrong() -> Vec<Setting> {
    vec![
        s("request-rate", Value::Number(5.0)),
        s("fixed-schedule", Value::Flag(true)),
        s("fixed-schedule-start-offset", Value::Integer(10)),
        s("ignore-eos", Value::Flag(false)),
        s("use-think-time-only", Value::Flag(false)),
        s("ignore-trace-delays", Value::Flag(true)),
        s("synthesis-max-isl", Value::Integer(8192)),
        s("loader", text("mooncake_trace")),
        s("benchmark-duration", Value::Number(600.0)),
        s("inter-turn-delay-cap-seconds", Value::Number(30.0)),
        s("cache-bust", text("system_prefix")),
        s("concurrency", Value::Integers(vec![8, 16, 32])),
    ]
}

#[test]
fn mvp_collects_every_violation() {
    let v = Mvp::resolve(everything_wrong(), 0).unwrap_err();
    let names: Vec<&str> = v.iter().map(|x| x.setting.as_str()).collect();
    assert_eq!(
        names,
        [
            "request-rate",
            "fixed-schedule",
            "fixed-schedule-start-offset",
            "ignore-eos",
            "use-think-time-only",
            "ignore-trace-delays",
            "synthesis-max-isl",
            "loader",
            "benchmark-duration",
            "inter-turn-delay-cap-seconds",
            "cache-bust",
            "concurrency"
        ]
    );
    assert_messages(&v);
    let d = v
        .iter()
        .find(|x| x.setting == "benchmark-duration")
        .unwrap();
    assert!(
        d.message
            .starts_with("--benchmark-duration 600 is below the scenario's minimum of 900 s;"),
        "{}",
        d.message
    );
}

#[test]
fn mvp_unsafe_override_downgrades_and_keeps_the_users_values() {
    let mut g = everything_wrong();
    g.push(s("unsafe-override", Value::Flag(true)));
    let r = Mvp::resolve(g, 5).unwrap();
    assert_eq!(r.warnings.len(), 12);
    assert_eq!(r.invalid_reasons, ["unsafe_override"]);
    assert_eq!(get(&r, "benchmark-duration").value, Value::Number(600.0));
    assert_eq!(get(&r, "ignore-eos").value, Value::Flag(false));
    assert_eq!(get(&r, "cache-bust").value, text("system_prefix"));
    assert_eq!(
        get(&r, "concurrency").value,
        Value::Integers(vec![8, 16, 32])
    );
    assert_eq!(get(&r, "synthesis-max-isl").value, Value::Integer(8192));
}

#[test]
fn mvp_errors_are_never_downgraded() {
    let mut g = minimal();
    g[1] = s("benchmark-duration", text("half an hour"));
    g.push(s("trajectory-start-min-ratio", Value::Number(0.9)));
    g.push(s("trajectory-start-max-ratio", Value::Number(0.1)));
    g.push(s("random-seed", Value::Integer(-1)));
    g.push(s("unsafe-override", Value::Flag(true)));
    let v = Mvp::resolve(g, 0).unwrap_err();
    let names: Vec<&str> = v.iter().map(|x| x.setting.as_str()).collect();
    assert_eq!(
        names,
        [
            "benchmark-duration",
            "random-seed",
            "trajectory-start-min-ratio"
        ]
    );
    assert_messages(&v);
    assert!(
        v[0].message.contains("expects a number"),
        "{}",
        v[0].message
    );
}

#[test]
fn mvp_missing_required_settings() {
    let v = Mvp::resolve(Vec::new(), 0).unwrap_err();
    let names: Vec<&str> = v.iter().map(|x| x.setting.as_str()).collect();
    assert_eq!(names, ["concurrency", "loader", "benchmark-duration"]);
    assert_messages(&v);
}

#[test]
fn mvp_overflow_knobs_are_notices() {
    let mut g = minimal();
    g.push(s("context-overflow-substrings", Value::Texts(Vec::new())));
    g.push(s("context-overflow-rate-limit", Value::Number(0.05)));
    let r = Mvp::resolve(g, 0).unwrap();
    assert_eq!(r.warnings.len(), 2);
    assert!(r.invalid_reasons.is_empty());
    assert_messages(&r.warnings);
}

#[test]
fn kvct_locks_nothing() {
    assert!(Kvct::describe().locks.is_empty());
    let mut g = everything_wrong();
    g.retain(|x| x.name != "inter-turn-delay-cap-seconds");
    let r = Kvct::resolve(g, 99).unwrap();
    assert!(
        r.warnings.is_empty() && r.invalid_reasons.is_empty(),
        "{r:?}"
    );
    assert_eq!((r.seed, r.seed_drawn), (99, true));
    assert_eq!(
        get(&r, "inter-turn-delay-cap-seconds").value,
        Value::Number(60.0)
    );
    assert_eq!(
        get(&r, "trajectory-start-max-ratio").value,
        Value::Number(0.7)
    );
    assert_eq!(get(&r, "cache-bust").value, text("system_prefix"));
    assert_eq!(get(&r, "use-think-time-only").value, Value::Flag(false));
    assert!(r
        .settings
        .iter()
        .all(|x| x.name != "context-overflow-substrings"));
}

#[test]
fn kvct_defaults() {
    let r = Kvct::resolve(vec![s("concurrency", Value::Integer(8))], 3).unwrap();
    assert_eq!(get(&r, "cache-bust").value, text("first_turn_prefix"));
    assert_eq!(get(&r, "use-think-time-only").value, Value::Flag(true));
    assert_eq!(get(&r, "timing-mode").value, text("agentic_replay"));
    assert!(r
        .settings
        .iter()
        .all(|x| x.name != "context-overflow-substrings"));
    let r = Kvct::resolve(
        vec![
            s("concurrency", Value::Integer(8)),
            s("unsafe-override", Value::Flag(true)),
        ],
        3,
    )
    .unwrap();
    assert_eq!(r.invalid_reasons, ["unsafe_override"]);
}

#[test]
fn kvct_overflow_rule_and_salt() {
    use crate::types::{ErrorClass, ErrorResponse, Outcome};
    let c = |b: &str| {
        Kvct::classify_error(
            &ErrorResponse {
                status: 400,
                body_excerpt: b.to_string(),
            },
            None,
        )
    };
    assert_eq!(
        c("This model's maximum context length is 8192 tokens")
            .matched
            .as_deref(),
        Some("maximum context length")
    );
    assert_eq!(
        c("The input (9000 tokens) is longer than the model's context length (8192 tokens).")
            .matched
            .as_deref(),
        Some("context length")
    );
    assert_eq!(
        c("Input length 9000 exceeds the context window")
            .matched
            .as_deref(),
        Some("input length+context")
    );
    // kv-cache-tester did not know llama.cpp's wording
    assert_eq!(
        c(r#"{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error"}}"#).class,
        ErrorClass::Other
    );
    let sid = SessionId {
        run_id: "r".to_string(),
        recycle_pass: 0,
        lane: 2,
        trace_id: "trace_0001".to_string(),
    };
    let m = Kvct::cache_bust(Placement::FirstTurnPrefix, &sid);
    assert!(
        !m.text.starts_with("[rid:") && m.text.ends_with("\n\n") && m.text.split(' ').count() == 8,
        "{:?}",
        m.text
    );
    assert_eq!(Kvct::cache_bust(Placement::None, &sid).text, "");
    let o = Outcome {
        total_responses: 10,
        context_overflows: 5,
        failed: 0,
        cancelled: false,
        unsafe_override: false,
        overflow_rate_limit: 0.01,
    };
    assert!(Kvct::validity(&o).is_empty());
    assert_eq!(Mvp::validity(&o), ["context_overflow_rate_exceeded"]);
}

#[test]
fn the_two_scenarios_differ_where_they_should() {
    let sid = SessionId {
        run_id: "r".to_string(),
        recycle_pass: 1,
        lane: 0,
        trace_id: "t".to_string(),
    };
    let a: String = Mvp::cache_bust(Placement::FirstTurnPrefix, &sid).text;
    let b: String = Kvct::cache_bust(Placement::FirstTurnPrefix, &sid).text;
    assert_ne!(a, b);
    assert_ne!(Mvp::describe().name, Kvct::describe().name);
}
