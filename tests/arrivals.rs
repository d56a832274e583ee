//! Open-loop session arrivals end to end (`--scenario agentx-open --session-arrival-rate`): the
//! inter-arrival statistics of the sessions a run against the built-in simulator started (on the
//! instants each was due, as its records keep them; the send lags, the machine's jitter, are
//! reported), the dry run's arrival plan, and the refusals (a scenario that forbids arrivals, bad
//! values).
//!
//! Tolerances (the draws are seeded, so they are the same on every run): over the admitted
//! sessions, the rate within 2 % and the CV
//! within 0.05 of the seeded draws' own over the same arrivals; the rate within three standard
//! errors of the mean of the configured one for poisson (3/sqrt(n): 16 % for the 334 arrivals of
//! seed 7, whose draws run 11 % fast) and 2 % for constant; the CV of the gaps within 0.15 of 1 for
//! poisson and under 0.1 for constant. These are judged when at most 5 % of the arrivals were skipped
//! behind schedule: a machine too loaded to keep the schedule (counted skips) measures its load.

use agentx::record::{Phase, RequestRecord};
use agentx::replay::arrivals::{ArrivalSpec, Pattern};
use agentx::sim::SimConfig;

use crate::support::{fixture, Run, Sim};

const RATE: f64 = 20.0;
const SECONDS: &str = "15";

fn args<'a>(url: &'a str, corpus: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "run",
        "--scenario",
        "agentx-open",
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus,
        "--random-seed",
        "7",
        "--unsafe-override",
        "--concurrency",
        "512",
        "--benchmark-duration",
        SECONDS,
        "--benchmark-grace-period",
        "0",
        "--stats-interval",
        "0",
        "--session-arrival-rate",
        "20",
    ];
    a.extend_from_slice(extra);
    a
}

/// Rate per second and coefficient of variation of the gaps between sorted instants (seconds).
fn stats(mut at: Vec<f64>) -> (f64, f64) {
    at.sort_by(f64::total_cmp);
    let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    (1.0 / mean, var.sqrt() / mean)
}

/// The root turn-0 profiling records: one per admitted session.
fn admitted_roots(run: &Run) -> Vec<RequestRecord> {
    run.records()
        .into_iter()
        .filter(|r| r.phase == Phase::Profiling && r.turn == 0)
        .filter(|r| r.tree.as_ref().is_some_and(|t| t.agent_depth == 0))
        .collect()
}

/// The admitted sessions' send lags (send less due, seconds).
fn admitted_lags(run: &Run) -> Vec<f64> {
    admitted_roots(run)
        .iter()
        .map(|r| r.send_lag_ns() as f64 / 1e9)
        .collect()
}

/// The admitted sessions of a run: `(ordinal, the instant its first request was due, seconds)`
/// (the ordinal is the tree's marker pass). The due instants are the schedule the replay kept;
/// when each request actually went out adds the machine's jitter (its send lag), which a loaded
/// machine makes large, so the schedule is judged on the due instants and the lags are reported.
fn admitted(run: &Run) -> Vec<(usize, f64)> {
    admitted_roots(run)
        .iter()
        .map(|r| (r.recycle_pass as usize, r.intended_ns as f64 / 1e9))
        .collect()
}

#[test]
fn measured_arrivals_have_the_patterns_rate_and_variation() {
    let sim = Sim::start(SimConfig::max());
    let url = sim.url();
    let corpus = fixture("traces-subagents-8.jsonl");
    let corpus = corpus.to_str().unwrap();
    for (pattern, rate_tol, cv_ok) in [
        ("poisson", None, (0.85, 1.15)),
        ("constant", Some(0.02), (0.0, 0.1)),
    ] {
        let run = Run::in_process(
            tempfile::tempdir().unwrap(),
            &args(&url, corpus, &["--session-arrival-pattern", pattern]),
            &[],
        );
        assert_eq!(run.code(), 0, "{}", run.stderr());
        let sessions = admitted(&run);
        let n = sessions.len();
        let (rate, cv) = stats(sessions.iter().map(|s| s.1).collect());
        // The seeded draws of the same arrivals.
        let spec = ArrivalSpec::new(RATE, Pattern::parse(pattern).unwrap(), None, 7).unwrap();
        let offsets = spec.offsets(sessions.iter().map(|s| s.0).max().unwrap() + 1);
        let (drawn, drawn_cv) = stats(sessions.iter().map(|s| offsets[s.0]).collect());
        eprintln!("{pattern}: {n} sessions, measured {rate:.3}/s (configured {RATE}, drawn {drawn:.3}), cv {cv:.3} (drawn {drawn_cv:.3})");
        let a = &run.summary()["arrivals"];
        assert_eq!(a["pattern"], pattern, "{a}");
        assert_eq!(a["admitted"].as_u64(), Some(n as u64), "{a}");
        assert_eq!(a["rejected"], 0, "{a}");
        assert!(a["admitted_rate_per_s"].as_f64().unwrap() > 0.0, "{a}");
        // Nothing is over the ceiling; every arrival is admitted or, late, skipped and counted.
        let (offered, skipped) = (
            a["offered"].as_u64().unwrap(),
            a["skipped"].as_u64().unwrap(),
        );
        assert_eq!(offered, n as u64 + skipped, "{a}");
        // The replay keeps the drawn schedule of the arrivals it admitted.
        assert!(
            (rate / drawn - 1.0).abs() <= 0.02,
            "{pattern}: rate {rate}, drawn {drawn}"
        );
        if skipped * 20 > offered {
            // A machine too loaded to keep the schedule skips arrivals (counted, above): the gaps
            // then describe the load, not the pattern.
            eprintln!("{pattern}: {skipped} of {offered} arrivals skipped behind schedule (machine loaded); the pattern's rate and CV are not judged");
            continue;
        }
        assert!(n >= 250, "{pattern}: {n} sessions");
        // How late each admitted arrival went out against its due instant: reported, not judged
        // (a figure of the machine's load, not of the schedule).
        let lags: Vec<f64> = admitted_lags(&run);
        let lag_mean = lags.iter().sum::<f64>() / lags.len() as f64;
        let lag_std =
            (lags.iter().map(|l| (l - lag_mean).powi(2)).sum::<f64>() / lags.len() as f64).sqrt();
        eprintln!(
            "{pattern}: send lags mean {:.2} ms, std {:.2} ms",
            lag_mean * 1e3,
            lag_std * 1e3
        );
        assert!(
            (cv - drawn_cv).abs() <= 0.05,
            "{pattern}: cv {cv}, drawn {drawn_cv}"
        );
        // The draws have the pattern's rate (poisson: three standard errors of a mean of n
        // exponential gaps) and variation.
        let rate_tol = rate_tol.unwrap_or(3.0 / (n as f64).sqrt());
        assert!(
            (rate / RATE - 1.0).abs() <= rate_tol,
            "{pattern}: rate {rate}"
        );
        assert!(cv >= cv_ok.0 && cv <= cv_ok.1, "{pattern}: cv {cv}");
        assert!(run.stdout().contains("arrivals      "), "{}", run.stdout());
    }
}

#[test]
fn the_dry_run_shows_the_arrival_plan() {
    let dry = |extra: &[&str]| {
        let mut a = vec![
            "run",
            "--scenario",
            "agentx-open",
            "--dry-run",
            "--json",
            "--random-seed",
            "7",
            "--session-arrival-rate",
            "2",
        ];
        a.extend_from_slice(extra);
        let run = Run::in_process(tempfile::tempdir().unwrap(), &a, &[]);
        assert_eq!(run.code(), 0, "{}", run.stderr());
        serde_json::from_str::<serde_json::Value>(&run.stdout()).unwrap()
    };
    let p = dry(&[
        "--session-arrival-pattern",
        "gamma",
        "--session-arrival-smoothness",
        "4",
    ]);
    let a = &p["arrivals"];
    assert_eq!(a["pattern"], "gamma", "{a}");
    assert_eq!(a["smoothness"], 4.0, "{a}");
    assert_eq!(a["expected_cv"], 0.5, "{a}");
    assert_eq!(a["ceiling"], 4, "{a}");
    assert_eq!(a["first_offsets_s"].as_array().unwrap().len(), 20, "{a}");
    assert_eq!(p["lanes"], serde_json::json!([]));
    assert_eq!(
        p["settings"]["session-arrival-rate"]["value"], 2.0,
        "{}",
        p["settings"]
    );
    // The same seed, the same arrival times.
    let again = dry(&[
        "--session-arrival-pattern",
        "gamma",
        "--session-arrival-smoothness",
        "4",
    ]);
    assert_eq!(again["arrivals"]["first_offsets_s"], a["first_offsets_s"]);
    let constant = dry(&["--session-arrival-pattern", "constant"]);
    assert_eq!(constant["arrivals"]["first_offsets_s"][3], 1.5);
}

#[test]
fn arrivals_are_refused_where_not_allowed_and_bad_values_name_the_flag() {
    let fails = |a: &[&str], want: &str| {
        let mut args = vec!["run", "--dry-run", "--random-seed", "7"];
        args.extend_from_slice(a);
        let run = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_ne!(run.code(), 0, "{args:?}");
        assert!(run.stderr().contains(want), "{args:?}: {}", run.stderr());
    };
    // The default agentx forbids it, with its own timing rule.
    fails(
        &["--session-arrival-rate", "2"],
        "--session-arrival-rate 2.0: the scenario does not allow open-loop session arrivals (its timing-mode lock: agentic_replay",
    );
    fails(
        &["--scenario", "agentx-v1", "--session-arrival-rate", "2"],
        "does not allow open-loop session arrivals",
    );
    let open = ["--scenario", "agentx-open"];
    for (extra, want) in [
        (
            vec!["--session-arrival-rate", "0"],
            "--session-arrival-rate 0 is not a positive number",
        ),
        (
            vec!["--session-arrival-rate", "inf"],
            "--session-arrival-rate inf is not a positive number",
        ),
        (
            vec!["--session-arrival-rate", "NaN"],
            "--session-arrival-rate NaN is not a positive number",
        ),
        (
            vec![
                "--session-arrival-rate",
                "1",
                "--session-arrival-pattern",
                "bursty",
            ],
            "--session-arrival-pattern \"bursty\" is not an arrival pattern",
        ),
        (
            vec!["--session-arrival-pattern", "gamma"],
            "--session-arrival-pattern gamma needs --session-arrival-rate",
        ),
        (
            vec![
                "--session-arrival-rate",
                "1",
                "--session-arrival-smoothness",
                "2",
            ],
            "--session-arrival-smoothness 2 applies to gamma arrivals only",
        ),
        (
            vec![
                "--session-arrival-rate",
                "1",
                "--session-arrival-pattern",
                "gamma",
                "--session-arrival-smoothness=-1",
            ],
            "--session-arrival-smoothness -1 is not a positive gamma shape",
        ),
        (
            vec![
                "--session-arrival-rate",
                "1",
                "--warmup-requests-per-lane",
                "3",
            ],
            "--warmup-requests-per-lane does not apply to open-loop arrivals",
        ),
    ] {
        let mut a = open.to_vec();
        a.extend(extra);
        fails(&a, want);
    }
}
