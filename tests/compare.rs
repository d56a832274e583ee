//! `agentx-host compare A B` against real runs of the simulator: two runs that differ only by
//! their seed show no difference on any figure; a server 1.25 times as fast shows B faster on ITL
//! by the factor it was made faster; directories that are not comparable are refused, naming them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentx::sim::{ModelTiming, SimConfig, Timing};
use serde_json::Value;

use crate::support::{corpus_args, fixture, Run, Sim};

/// A simulator whose decode step is 10 ms scaled by `speed`, plus `per_seq` for each other
/// sequence running, and whose prefill costs 5 ms plus 1 µs per uncached prompt token.
fn sim(speed: f64, per_seq: Duration) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Modeled(ModelTiming {
        prefill_tokens_per_s: 1e6,
        prefill_overhead: Duration::from_millis(5),
        itl_base: Duration::from_millis(10),
        itl_per_seq: per_seq,
        speed,
    });
    Sim::start(cfg)
}

/// The fixture corpus cut to its first two requests per trace, each answering 4 to 8 tokens: a
/// session takes about 0.2 s, so a few seconds hold dozens of them.
fn short_corpus(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(fixture("traces-24.jsonl")).unwrap();
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut trace: Value = serde_json::from_str(line).unwrap();
        let requests = trace["requests"].as_array_mut().unwrap();
        requests.truncate(2);
        let mut input = 0;
        let mut output = 0;
        for (turn, request) in requests.iter_mut().enumerate() {
            let tokens = 4 + (index + turn) % 5;
            request["out"] = Value::from(tokens);
            input += request["in"].as_u64().unwrap();
            output += tokens;
        }
        trace["totals"]["parent_tokens"] = serde_json::json!({"input": input, "output": output});
        lines.push(trace.to_string());
    }
    let path = dir.join("short-24.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// A run of the short corpus under `scenario` against `url` into `out` for `seconds`, then
/// `extra`.
fn run(url: &str, corpus: &Path, out: &Path, seed: &str, seconds: &str, extra: &[&str]) {
    let mut args = corpus_args("run", None, corpus, url);
    let at = args.iter().position(|arg| arg == "--random-seed").unwrap();
    seed.clone_into(&mut args[at + 1]);
    args.extend(
        [
            "--benchmark-duration",
            seconds,
            "--ignore-trace-delays",
            "--output-artifact-dir",
            out.to_str().unwrap(),
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
}

/// One closed-loop lane of the `agentx-mvp` scenario.
const ONE_LANE: [&str; 4] = ["--scenario", "agentx-mvp", "--concurrency", "1"];

/// `agentx-host compare A B -o OUT --json`.
fn compare(a: &Path, b: &Path, out: &Path) -> Run {
    let args = [
        "compare".to_owned(),
        a.display().to_string(),
        b.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
        "--json".to_owned(),
    ];
    Run::exec(tempfile::tempdir().unwrap(), &args, &[])
}

/// The sessions a run's intervals were computed over.
fn sessions(run: &Path) -> u64 {
    let text = std::fs::read_to_string(run.join("run_summary.json")).unwrap();
    let summary: Value = serde_json::from_str(&text).unwrap();
    summary["summary"]["intervals"]["sessions"]
        .as_u64()
        .unwrap()
}

/// `compare.json` as written, checked to be what `--json` printed.
fn written(r: &Run, out: &Path) -> Value {
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("compare.json")).unwrap()).unwrap();
    let printed: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(file, printed);
    assert!(out.join("compare.html").is_file());
    file
}

#[test]
fn runs_that_differ_only_by_their_seed_show_no_difference() {
    let work = tempfile::tempdir().unwrap();
    let corpus = short_corpus(work.path());
    // Sessions arrive at random (an open loop), so the number running, and with it the decode
    // step, varies from request to request: a figure's spread is the workload's, not the host's
    // timer jitter.
    let server = sim(1.0, Duration::from_millis(5));
    let open = [
        "--scenario",
        "agentx-open",
        "--concurrency",
        "64",
        "--session-arrival-rate",
        "15",
    ];
    // Both at once against one server: whatever else loads the host loads both alike.
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::thread::scope(|scope| {
        scope.spawn(|| run(&server.url(), &corpus, &a, "42", "3", &open));
        run(&server.url(), &corpus, &b, "43", "3", &open);
    });
    assert!(
        sessions(&a) >= 30 && sessions(&b) >= 30,
        "{} {}",
        sessions(&a),
        sessions(&b)
    );
    let out = work.path().join("cmp");
    let r = compare(&a, &b, &out);
    let json = written(&r, &out);
    assert_eq!(json["kind"], "run");
    assert_eq!(json["level"], 0.95);
    let figures = json["figures"].as_object().unwrap();
    // TTFT, ITL and latency quantiles, three throughputs, the cache hit and jobs at least.
    assert!(figures.len() >= 9, "{figures:?}");
    let k = figures.len() as f64;
    let family = json["family_level"].as_f64().unwrap();
    assert!((family - (1.0 - 0.05 / k)).abs() < 1e-12, "{family}");
    for (name, figure) in figures {
        eprintln!(
            "seed only: {name}: ratio {:.4} ({:.4}-{:.4})",
            figure["ratio"].as_f64().unwrap_or(f64::NAN),
            figure["lo"].as_f64().unwrap_or(f64::NAN),
            figure["hi"].as_f64().unwrap_or(f64::NAN)
        );
        assert_eq!(figure["verdict"], "no difference shown", "{name}: {figure}");
        assert_eq!(figure["change"], "no_difference_shown", "{name}: {figure}");
        let (lo, hi) = (
            figure["lo"].as_f64().unwrap(),
            figure["hi"].as_f64().unwrap(),
        );
        assert!(lo <= 1.0 && 1.0 <= hi, "{name}: {figure}");
    }

    // Both runs as the trials of one point: their sessions pooled over the sum of their windows.
    let trials = work.path().join("trials");
    std::fs::create_dir(&trials).unwrap();
    std::fs::write(trials.join("trials.json"), "{}\n").unwrap();
    std::os::unix::fs::symlink(&a, trials.join("trial_0")).unwrap();
    std::os::unix::fs::symlink(&b, trials.join("trial_1")).unwrap();
    let out = work.path().join("cmp-trials");
    let json = written(&compare(&trials, &trials, &out), &out);
    assert_eq!(json["kind"], "trials");
    let pooled = json["figures"]["request_throughput"]["a"].as_f64().unwrap();
    let (rate_a, window_a) = rate_and_window(&a);
    let (rate_b, window_b) = rate_and_window(&b);
    let expected = (rate_a * window_a + rate_b * window_b) / (window_a + window_b);
    assert!(
        (pooled - expected).abs() < 1e-9 * expected,
        "{pooled} {expected}"
    );
    assert!(pooled != rate_a && pooled != rate_b, "{pooled}");
}

/// A run's request throughput (its interval's estimate) and its profiling window in seconds.
fn rate_and_window(run: &Path) -> (f64, f64) {
    let read = |name: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(run.join(name)).unwrap()).unwrap()
    };
    let rate = read("run_summary.json")["summary"]["intervals"]["figures"]["request_throughput"]
        ["estimate"]
        .as_f64()
        .unwrap();
    let window = &read("run_manifest.json")["profiling_ns"];
    let ns = window[1].as_u64().unwrap() - window[0].as_u64().unwrap();
    (rate, ns as f64 / 1e9)
}

#[test]
fn a_server_a_quarter_faster_shows_b_faster_on_itl() {
    let work = tempfile::tempdir().unwrap();
    let corpus = short_corpus(work.path());
    let (slow, fast) = (sim(1.0, Duration::ZERO), sim(1.25, Duration::ZERO));
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::thread::scope(|scope| {
        scope.spawn(|| run(&slow.url(), &corpus, &a, "42", "6", &ONE_LANE));
        run(&fast.url(), &corpus, &b, "42", "6", &ONE_LANE);
    });
    let out = work.path().join("cmp");
    let r = compare(&a, &b, &out);
    let json = written(&r, &out);
    let itl = &json["figures"]["itl_p50"];
    let (ratio, lo, hi) = (
        itl["ratio"].as_f64().unwrap(),
        itl["lo"].as_f64().unwrap(),
        itl["hi"].as_f64().unwrap(),
    );
    eprintln!(
        "speed 1.25: itl_p50 ratio {ratio:.4} ({lo:.4}-{hi:.4}) over {} and {} sessions: {}",
        sessions(&a),
        sessions(&b),
        itl["verdict"]
    );
    assert_eq!(itl["change"], "faster", "{itl}");
    assert_eq!(itl["better"], true, "{itl}");
    assert!(
        itl["verdict"].as_str().unwrap().starts_with("B faster by "),
        "{itl}"
    );
    assert!(lo <= 0.80 && 0.80 <= hi, "{itl}");
    assert!(hi < 1.0, "{itl}");

    // The text form: one line per figure, the ITL one with its verdict.
    let args = [
        "compare".to_owned(),
        a.display().to_string(),
        b.display().to_string(),
        "-o".to_owned(),
        work.path().join("cmp-text").display().to_string(),
    ];
    let text = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(text.code(), 0, "{}", text.stderr());
    let line = format!("itl_p50: {}", itl["verdict"].as_str().unwrap());
    assert!(
        text.stdout().lines().any(|l| l == line),
        "{}",
        text.stdout()
    );
}

#[test]
fn what_is_not_two_comparable_directories_is_refused_by_name() {
    let work = tempfile::tempdir().unwrap();
    let corpus = short_corpus(work.path());
    let server = sim(4.0, Duration::ZERO);
    let a = work.path().join("a");
    run(&server.url(), &corpus, &a, "42", "1", &ONE_LANE);
    let out = work.path().join("cmp");

    let missing = work.path().join("nowhere");
    let r = compare(&a, &missing, &out);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains(&format!("B {}: no such directory", missing.display())),
        "{}",
        r.stderr()
    );

    let empty = work.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let r = compare(&empty, &a, &out);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains(&format!(
            "A {} is not a run, trials or sweep directory: it holds no run_summary.json, trials.json or sweep.json",
            empty.display()
        )),
        "{}",
        r.stderr()
    );

    // A sweep of one point (the run's own directory as its conc_2).
    let sweep = work.path().join("sweep");
    std::fs::create_dir(&sweep).unwrap();
    let mut args = corpus_args("sweep", None, &corpus, &server.url());
    args.extend(
        [
            "--concurrency",
            "2",
            "--benchmark-duration",
            "1",
            "--ignore-trace-delays",
            "--output-artifact-dir",
            sweep.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let swept = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(swept.code(), 0, "{}", swept.stderr());
    let r = compare(&a, &sweep, &out);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains(&format!(
            "A {} is a run directory and B {} is a sweep directory",
            a.display(),
            sweep.display()
        )),
        "{}",
        r.stderr()
    );
    assert!(!out.exists(), "nothing is written for refused input");

    // The sweep against itself: one family per concurrency, through compare and sweep --compare.
    let r = compare(&sweep, &sweep, &out);
    let json = written(&r, &out);
    assert_eq!(json["kind"], "sweep");
    assert!(out.join("sweep_compare.html").is_file());
    assert_eq!(json["points"][0]["concurrency"], 2);
    let figures = json["points"][0]["figures"].as_object().unwrap();
    assert!(!figures.is_empty());
    for (name, figure) in figures {
        assert_eq!(figure["ratio"], 1.0, "{name}: {figure}");
        assert_eq!(figure["verdict"], "no difference shown", "{name}: {figure}");
    }
    let views = work.path().join("views");
    let args = [
        "sweep".to_owned(),
        "--compare".to_owned(),
        sweep.display().to_string(),
        sweep.display().to_string(),
        "--output-artifact-dir".to_owned(),
        views.display().to_string(),
    ];
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    for name in [
        "sweep_compare.json",
        "sweep_compare.html",
        "compare.json",
        "compare.html",
    ] {
        assert!(views.join(name).is_file(), "{name}");
    }
    let again: Value =
        serde_json::from_str(&std::fs::read_to_string(views.join("compare.json")).unwrap())
            .unwrap();
    assert_eq!(again["points"], json["points"]);
}
