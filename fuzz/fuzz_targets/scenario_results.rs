//! The host's checks of what a scenario component answers (`agentx::scenario::check` and
//! `agentx::cli::run::RunSettings`): a fake scenario whose every answer is arbitrary (start turns,
//! plan-starts lists, delays, markers, the resolved configuration, validity reasons). Checks no
//! panic, and that whatever the host accepts is safe to use the way the host uses it: start turns
//! inside their trajectory, delays that can be scheduled, markers that stay valid JSON, run
//! settings within range.
#![no_main]

use std::time::{Duration, Instant};

use agentx::cli::run::RunSettings;
use agentx::dataset::prompt::push_json_escaped;
use agentx::scenario::check;
use agentx::scenario::types::{Placement, Resolved, Setting, Trajectory, Value, Violation};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

/// The settings the host reads, so that the fuzzer finds them often; `Other` is any name.
#[derive(Arbitrary, Debug)]
enum Name {
    Concurrency,
    BenchmarkDuration,
    MinRatio,
    MaxRatio,
    CacheBust,
    Cap,
    ThinkOnly,
    IgnoreDelays,
    UnsafeOverride,
    RateLimit,
    IgnoreEos,
    Other(String),
}

impl Name {
    fn as_string(&self) -> String {
        match self {
            Name::Concurrency => "concurrency",
            Name::BenchmarkDuration => "benchmark-duration",
            Name::MinRatio => "trajectory-start-min-ratio",
            Name::MaxRatio => "trajectory-start-max-ratio",
            Name::CacheBust => "cache-bust",
            Name::Cap => "inter-turn-delay-cap-seconds",
            Name::ThinkOnly => "use-think-time-only",
            Name::IgnoreDelays => "ignore-trace-delays",
            Name::UnsafeOverride => "unsafe-override",
            Name::RateLimit => "context-overflow-rate-limit",
            Name::IgnoreEos => "ignore-eos",
            Name::Other(s) => s,
        }
        .to_string()
    }
}

/// A mirror of the WIT `value` variant.
#[derive(Arbitrary, Debug)]
enum FakeValue {
    Absent,
    Flag(bool),
    Integer(i64),
    Number(f64),
    Text(String),
    /// One of the cache-bust targets the host knows.
    Target(u8),
    Integers(Vec<i64>),
    Texts(Vec<String>),
}

impl FakeValue {
    fn wit(self) -> Value {
        match self {
            FakeValue::Absent => Value::Absent,
            FakeValue::Flag(b) => Value::Flag(b),
            FakeValue::Integer(i) => Value::Integer(i),
            FakeValue::Number(x) => Value::Number(x),
            FakeValue::Text(t) => Value::Text(t),
            FakeValue::Target(i) => Value::Text(
                [
                    "none",
                    "system_prefix",
                    "system_suffix",
                    "first_turn_prefix",
                    "first_turn_suffix",
                ][usize::from(i) % 5]
                    .to_string(),
            ),
            FakeValue::Integers(l) => Value::Integers(l),
            FakeValue::Texts(l) => Value::Texts(l),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FakePlacement {
    None,
    SystemPrefix,
    SystemSuffix,
    FirstTurnPrefix,
    FirstTurnSuffix,
}

impl FakePlacement {
    fn wit(&self) -> Placement {
        match self {
            FakePlacement::None => Placement::None,
            FakePlacement::SystemPrefix => Placement::SystemPrefix,
            FakePlacement::SystemSuffix => Placement::SystemSuffix,
            FakePlacement::FirstTurnPrefix => Placement::FirstTurnPrefix,
            FakePlacement::FirstTurnSuffix => Placement::FirstTurnSuffix,
        }
    }
}

/// Every answer of a scenario component, arbitrary.
#[derive(Arbitrary, Debug)]
struct FakeScenario {
    /// `resolve`: the effective configuration.
    settings: Vec<(Name, FakeValue, bool)>,
    seed: u64,
    seed_drawn: bool,
    invalid_reasons: Vec<String>,
    /// The trajectories the host asks about (turn counts) and `plan-starts`' answer.
    num_turns: Vec<u32>,
    starts: Vec<Option<u32>>,
    /// `start-turn` for one trajectory.
    start: (Option<u32>, u32),
    /// `turn-delay` answers.
    delays: Vec<f64>,
    /// `cache-bust`: the configured target and the marker text answered.
    target: FakePlacement,
    marker: String,
    /// `validity`.
    validity: Vec<String>,
}

fuzz_target!(|f: FakeScenario| {
    // resolve -> the run's settings.
    let resolved = Resolved {
        settings: f
            .settings
            .into_iter()
            .map(|(n, v, explicit)| Setting {
                name: n.as_string(),
                value: v.wit(),
                explicit,
            })
            .collect(),
        seed: f.seed,
        seed_drawn: f.seed_drawn,
        warnings: vec![Violation {
            setting: "x".into(),
            message: "y".into(),
        }],
        invalid_reasons: f.invalid_reasons,
    };
    // No flags given; the drawn-seed bit also picks whether the component answers every replay
    // setting (0.3.0) or leaves the gaps to the flags (earlier worlds).
    let fallback = agentx::run::config::Fallback::default();
    match RunSettings::of(&resolved, f.seed_drawn, &fallback) {
        Ok(s) => {
            assert!(s.concurrency > 0);
            assert!(s.duration > Duration::ZERO);
            // The run's end is scheduled as a deadline.
            assert!(Instant::now().checked_add(s.duration).is_some());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }

    // plan-starts and start-turn.
    let trajectories: Vec<Trajectory> = f
        .num_turns
        .iter()
        .enumerate()
        .map(|(i, &n)| Trajectory {
            trace_id: format!("t{i}"),
            num_turns: n,
            unsendable: vec![],
        })
        .collect();
    if check::plan_starts(&f.starts, &trajectories).is_ok() {
        assert_eq!(f.starts.len(), trajectories.len());
        for (k, t) in f.starts.iter().zip(&trajectories) {
            if let Some(k) = k {
                assert!(*k < t.num_turns);
            }
        }
    }
    let (k, n) = f.start;
    if check::start_turn(k, n).is_ok() {
        assert!(k.is_none_or(|k| k < n));
    }

    // turn-delay: an accepted delay is waited for as `response end + delay`, as the lanes do.
    let now = Instant::now();
    for d in f.delays {
        match check::turn_delay(d) {
            Ok(d) => {
                assert!(d.is_finite() && d >= 0.0);
                let _due = now + Duration::from_secs_f64(d);
            }
            Err(m) => assert!(!m.is_empty()),
        }
    }

    // cache-bust: the marker is written into the request's JSON.
    let target = f.target.wit();
    match check::cache_bust(target, &f.marker) {
        Some(b) => {
            assert!(target != Placement::None && !f.marker.is_empty());
            let mut json = b"\"".to_vec();
            push_json_escaped(&mut json, b.text);
            json.push(b'"');
            let back: String = serde_json::from_slice(&json).expect("the marker is valid JSON");
            assert_eq!(back, f.marker);
        }
        None => assert!(target == Placement::None || f.marker.is_empty()),
    }

    // validity: the reasons reported.
    let reasons = check::invalid_reasons(f.validity.clone(), &resolved.invalid_reasons);
    assert!(reasons.starts_with(&f.validity));
    for r in &resolved.invalid_reasons {
        assert!(reasons.contains(r));
    }
});
