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
    ]
}

fn get<'a>(r: &'a Resolved, name: &str) -> &'a Value {
    &r.settings.iter().find(|s| s.name == name).unwrap().value
}

#[test]
fn the_preset_fills_what_the_user_left_out() {
    let r = resolve(base(), 7).unwrap();
    assert_eq!(get(&r, "benchmark-duration"), &Value::Number(3600.0));
    assert_eq!(get(&r, "benchmark-grace-period"), &Value::Number(30.0));
    assert_eq!(get(&r, "trajectory-start-min-ratio"), &Value::Number(0.25));
    assert_eq!(get(&r, "trajectory-start-max-ratio"), &Value::Number(0.75));
    assert_eq!(get(&r, "failed-request-threshold"), &Value::Number(0.10));
    assert_eq!(get(&r, "warmup-requests-per-lane"), &Value::Integer(10));
    assert_eq!(get(&r, "warmup-grace-period"), &Value::Number(1800.0));
    assert_eq!(get(&r, "trace-idle-gap-cap-seconds"), &Value::Number(300.0));
    assert_eq!(get(&r, "num-dataset-entries"), &Value::Integer(393));
    assert_eq!(get(&r, "slice-duration"), &Value::Number(1.0));
    assert_eq!(get(&r, "use-server-token-count"), &Value::Flag(true));
    assert_eq!(get(&r, "stats-interval"), &Value::Number(30.0));
    assert_eq!(get(&r, "http-tcp-user-timeout"), &Value::Integer(900_000));
    assert_eq!(get(&r, "ui-realtime-metrics-enabled"), &Value::Flag(true));
    assert_eq!(get(&r, "system-idle-gap-cap-seconds"), &Value::Number(10.0));
    assert_eq!((r.seed, r.seed_drawn), (42, false));
    assert!(r.invalid_reasons.is_empty(), "{:?}", r.invalid_reasons);
    for name in REPLAY_SETTINGS {
        assert!(r.settings.iter().any(|s| s.name == name), "{name} decided");
    }
    assert_eq!(get(&r, "agentic-cache-warmup-duration"), &Value::Absent);
    assert_eq!(get(&r, "burst-phase-starts"), &Value::Absent);
}

#[test]
fn typed_values_and_host_values_win_over_the_preset() {
    let mut g = base();
    g.push(set("benchmark-duration", Value::Number(1200.0)));
    g.push(set("random-seed", Value::Integer(7)));
    g.push(set("failed-request-threshold", Value::Number(0.5)));
    g.push(set("agentic-cache-warmup-duration", Value::Number(60.0)));
    // A value the host put in without the user (a demo's) stays.
    g.push(Setting {
        name: "stats-interval".into(),
        value: Value::Number(5.0),
        explicit: false,
    });
    let r = resolve(g, 7).unwrap();
    assert_eq!(get(&r, "benchmark-duration"), &Value::Number(1200.0));
    assert_eq!(get(&r, "benchmark-grace-period"), &Value::Number(30.0));
    assert_eq!(r.seed, 7);
    assert_eq!(get(&r, "failed-request-threshold"), &Value::Number(0.5));
    assert_eq!(get(&r, "agentic-cache-warmup-duration"), &Value::Number(60.0));
    assert_eq!(
        get(&r, "warmup-requests-per-lane"),
        &Value::Absent,
        "a warmup by duration drops the per-lane preset"
    );
    assert_eq!(get(&r, "stats-interval"), &Value::Number(5.0));
}

#[test]
fn the_locks_are_agentx_v1s_and_bad_values_name_the_flag() {
    let mut g = base();
    g.push(set("benchmark-duration", Value::Number(60.0)));
    g.push(set("failed-request-threshold", Value::Number(1.5)));
    g.push(set("warmup-requests-per-lane", Value::Integer(3)));
    g.push(set("agentic-cache-warmup-duration", Value::Number(30.0)));
    let v = resolve(g, 7).unwrap_err();
    let names: Vec<&str> = v.iter().map(|x| x.setting.as_str()).collect();
    assert!(names.contains(&"benchmark-duration"), "{names:?}");
    // With the lock overridden, the value errors still refuse the run.
    let mut g = base();
    g.push(set("benchmark-duration", Value::Number(60.0)));
    g.push(set("failed-request-threshold", Value::Number(1.5)));
    g.push(set("warmup-requests-per-lane", Value::Integer(3)));
    g.push(set("agentic-cache-warmup-duration", Value::Number(30.0)));
    g.push(set("unsafe-override", Value::Flag(true)));
    let v = resolve(g, 7).unwrap_err();
    let names: Vec<&str> = v.iter().map(|x| x.setting.as_str()).collect();
    assert!(names.contains(&"failed-request-threshold"), "{names:?}");
    assert!(names.contains(&"agentic-cache-warmup-duration"), "{names:?}");
    assert!(v.iter().all(|x| x.message.contains("--")), "{v:?}");
}

#[test]
fn the_environment_quirk_is_reproduced() {
    let mut g = base();
    g.push(set("dataset-configuration-timeout", Value::Number(2400.0)));
    let v = resolve(g, 7).unwrap_err();
    assert!(v[0].message.contains("AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT"), "{v:?}");
    let mut g = base();
    g.push(set("dataset-configuration-timeout", Value::Number(2400.0)));
    g.push(set("service-profile-configure-timeout", Value::Number(2400.0)));
    assert!(resolve(g, 7).is_ok());
}

#[test]
fn rules_follow_the_harness() {
    let r = resolve(base(), 7).unwrap();
    let rules = rules(&r.settings);
    assert_eq!(rules.assistant_text, AssistantText::Recorded);
    assert_eq!(rules.prompt_tiling, PromptTiling::Reference);
    assert!(!rules.session_affinity_header);
    assert!(rules.discover_model);
    assert_eq!(rules.warmup_phase_name, None);
    assert_eq!(rules.base.trace_idle_cap_seconds, Some(300.0));
    assert_eq!(rules.base.system_idle_cap_seconds, Some(10.0));
    assert!(rules.base.warmup_spread);
    // Where agentx does better: a failed warmup request is judged by the threshold.
    assert!(!rules.base.warmup_failure_aborts);
    let mut g = base();
    g.push(set("burst-phase-starts", Value::Flag(true)));
    let r = resolve(g, 7).unwrap();
    assert!(!super::rules(&r.settings).base.warmup_spread);
}

#[test]
fn coverage_passes_on_any_timeline_with_one_failure_tag() {
    let o = |ttft: Option<f64>, itl: Option<f64>, content: Option<f64>| Outcome {
        base: agentx_v1::Outcome {
            total_responses: 1000,
            context_overflows: 0,
            failed: 0,
            cancelled: false,
            unsafe_override: false,
            overflow_rate_limit: 0.01,
            profiling_seconds: 3600.0,
            ttft_coverage: ttft,
            itl_coverage: itl,
        },
        content_coverage: content,
    };
    assert!(reasons(&o(Some(0.5), Some(0.5), Some(0.96))).is_empty());
    assert!(reasons(&o(Some(0.96), None, None)).is_empty());
    assert_eq!(
        reasons(&o(Some(0.5), Some(0.9), Some(0.9))),
        vec!["insufficient_profile_metric_coverage"]
    );
    assert_eq!(
        reasons(&o(None, None, None)),
        vec!["insufficient_profile_metric_coverage"],
        "the uncheckable case has the same tag in 1.0.12"
    );
    let mut cancelled = o(None, None, None);
    cancelled.base.cancelled = true;
    assert_eq!(reasons(&cancelled), vec!["run_cancelled"]);
}
