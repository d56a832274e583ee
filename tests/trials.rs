//! `run --trials N` and `--confidence` end to end against the simulator: each trial a complete run
//! with its own seed (or the one seed with `--same-seed`), `trials.json` with every headline
//! figure's spread and the pooled intervals; bad counts and levels refused before anything runs.

use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{fixture_args, Run, Sim};

fn trials_run(url: &str, extra: &[&str]) -> (Run, std::path::PathBuf) {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("trials");
    let mut args = fixture_args("run", url);
    args.extend(
        [
            "--benchmark-duration",
            "2",
            "--concurrency",
            "2",
            "--ignore-trace-delays",
            "--output-artifact-dir",
            out.to_str().unwrap(),
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(std::string::ToString::to_string));
    (Run::exec(home, &args, &[]), out)
}

fn json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn trials_repeat_the_point_and_state_the_spread_between_them() {
    let sim = Sim::start(SimConfig::max());
    let (run, out) = trials_run(&sim.url(), &["--trials", "2", "--confidence", "0.9"]);
    assert_eq!(
        run.code(),
        0,
        "{}\n{}",
        run.stderr(),
        std::fs::read_to_string(out.join("trials.json")).unwrap_or_default()
    );
    let trials = json(&out.join("trials.json"));
    assert_eq!(trials["level"], 0.9);
    assert_eq!(trials["same_seed"], false);
    let seeds: Vec<u64> = trials["trials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, [42, 43], "{trials}");
    let mut sessions = 0;
    for (index, seed) in seeds.iter().enumerate() {
        let dir = out.join(format!("trial_{index}"));
        let manifest = json(&dir.join("run_manifest.json"));
        assert_eq!(manifest["seed"], *seed);
        assert_eq!(
            manifest["argv"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| *a == "--trials")
                .count(),
            0,
            "a trial replays alone"
        );
        let summary = json(&dir.join("run_summary.json"));
        sessions += summary["summary"]["intervals"]["sessions"]
            .as_u64()
            .unwrap();
    }
    // The spread of a figure over the two trials: mean of the two estimates, and an interval.
    let spread = &trials["between"]["output_token_throughput"];
    let estimates: Vec<f64> = (0..2)
        .map(|index| {
            let summary = json(&out.join(format!("trial_{index}/run_summary.json")));
            summary["summary"]["intervals"]["figures"]["output_token_throughput"]["estimate"]
                .as_f64()
                .unwrap()
        })
        .collect();
    assert_eq!(spread["trials"], 2);
    assert!((spread["mean"].as_f64().unwrap() - (estimates[0] + estimates[1]) / 2.0).abs() < 1e-9);
    assert!(spread["lo"].as_f64().unwrap() <= spread["hi"].as_f64().unwrap());
    assert_eq!(
        trials["pooled"]["sessions"], sessions,
        "the pooled sessions are every trial's"
    );
    assert!(
        run.stdout().contains("output_token_throughput"),
        "{}",
        run.stdout()
    );

    let (run, out) = trials_run(&sim.url(), &["--trials", "2", "--same-seed"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let trials = json(&out.join("trials.json"));
    assert_eq!(trials["trials"][1]["seed"], 42);
}

#[test]
fn bad_counts_and_levels_are_refused_before_anything_runs() {
    let sim = Sim::start(SimConfig::max());
    for (flags, says) in [
        (&["--trials", "0"][..], "0 trials: give 1 or more"),
        (&["--confidence", "1.5"][..], "not in (0, 1)"),
        (&["--confidence", "0"][..], "not in (0, 1)"),
        (&["--same-seed"][..], "--trials"),
    ] {
        let (run, out) = trials_run(&sim.url(), flags);
        assert_eq!(run.code(), 2, "{flags:?}");
        assert!(run.stderr().contains(says), "{flags:?}: {}", run.stderr());
        assert!(!out.exists(), "{flags:?} wrote nothing");
    }
    assert_eq!(sim.requests(), 0);
}

fn precision_run(url: &str, scenario: Option<&str>, extra: &[&str]) -> Run {
    let mut args = match scenario {
        Some(scenario) => crate::support::corpus_args(
            "run",
            Some(scenario),
            &crate::support::fixture("traces-24.jsonl"),
            url,
        ),
        None => fixture_args("run", url),
    };
    args.extend(["--concurrency", "8", "--ignore-trace-delays"].map(String::from));
    args.extend(extra.iter().map(std::string::ToString::to_string));
    Run::exec(tempfile::tempdir().unwrap(), &args, &[])
}

/// `--target-precision` stops profiling once the figure's interval is that tight, never before
/// `--min-duration`, as a completed run (exit 0); a scenario that locks the duration refuses it
/// with its rule, and an unknown figure or a minimum past the duration is refused before the run.
#[test]
fn a_precision_target_stops_profiling_early_where_the_scenario_allows_it() {
    let sim = Sim::start(SimConfig::max());
    let kvct = crate::scenario::dist("kvct-v01.wasm");
    let run = precision_run(
        &sim.url(),
        Some(kvct.to_str().unwrap()),
        &[
            "--benchmark-duration",
            "60",
            "--target-precision",
            "request_throughput:25",
            "--min-duration",
            "4",
        ],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let manifest = run.json("run_manifest.json");
    assert_eq!(
        manifest["stop"],
        "target_precision_reached",
        "{}",
        run.stderr()
    );
    let window = manifest["profiling_ns"].as_array().unwrap();
    let profiled_s = (window[1].as_u64().unwrap() - window[0].as_u64().unwrap()) as f64 / 1e9;
    assert!((4.0..60.0).contains(&profiled_s), "profiled {profiled_s} s");
    assert!(
        run.stderr().contains("--target-precision reached after"),
        "{}",
        run.stderr()
    );
    let intervals = &run.summary()["summary"]["intervals"]["figures"]["request_throughput"];
    assert!(intervals["lo"].as_f64().unwrap() <= intervals["hi"].as_f64().unwrap());

    // The default scenario locks the duration.
    let run = precision_run(
        &sim.url(),
        None,
        &[
            "--benchmark-duration",
            "2",
            "--target-precision",
            "ttft_p90:5",
            "--min-duration",
            "1",
        ],
    );
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr().contains("it locks benchmark-duration") && run.stderr().contains("kvct-v01"),
        "{}",
        run.stderr()
    );
    let run = precision_run(
        &sim.url(),
        Some(kvct.to_str().unwrap()),
        &[
            "--benchmark-duration",
            "2",
            "--target-precision",
            "ttft_p91:5",
        ],
    );
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr().contains("ttft_p90"),
        "the names are listed: {}",
        run.stderr()
    );
    let run = precision_run(
        &sim.url(),
        Some(kvct.to_str().unwrap()),
        &[
            "--benchmark-duration",
            "2",
            "--target-precision",
            "ttft_p90:5",
        ],
    );
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr().contains("--min-duration 60 s is longer"),
        "{}",
        run.stderr()
    );
}
