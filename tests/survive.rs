//! Runs that keep what they measured: failed warmup requests judged by the threshold instead of
//! ending the run (the default `agentx` scenario), and an engine that dies mid-run (the simulator's
//! `die_at` fault) in both replay worlds: the failures are recorded with their cause, the threshold
//! stops the run, every export is written and the exit code is 1.

use std::path::Path;

use agentx::record::{Phase, RequestRecord};
use agentx::sim::{Faults, SimConfig, Timing};

use crate::support::{fixture, Run, Sim};

/// A simulator whose responses take a little while, with `faults`.
fn sim(faults: Faults) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: std::time::Duration::from_millis(20),
        itl: std::time::Duration::from_millis(1),
    };
    cfg.faults = faults;
    Sim::start(cfg)
}

/// The default scenario (`agentx`, session trees, its preset: threshold 0.10, 10 warmup requests per
/// lane) on the with-subagents fixture, shortened with `--unsafe-override`.
fn run_agentx(url: &str, concurrency: &str, duration: &str, extra: &[&str]) -> Run {
    let mut args = agentx_args(url, concurrency, duration);
    args.extend(extra.iter().map(std::string::ToString::to_string));
    Run::exec(tempfile::tempdir().unwrap(), &args, &[])
}

/// `run` of the default scenario on the with-subagents fixture against `url`.
fn agentx_args(url: &str, concurrency: &str, duration: &str) -> Vec<String> {
    let corpus = fixture("traces-subagents-8.jsonl");
    [
        "run",
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--unsafe-override",
        "--concurrency",
        concurrency,
        "--benchmark-duration",
        duration,
        "--benchmark-grace-period",
        "5",
        "--stats-interval",
        "0",
    ]
    .map(str::to_string)
    .to_vec()
}

/// The seed-era single-stream world (`agentx-mvp`) on the 24-trace fixture.
fn run_mvp(url: &str, extra: &[&str]) -> Run {
    let corpus = fixture("traces-24.jsonl");
    let mut args = vec![
        "run",
        "agentx-mvp",
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--custom-dataset-type",
        "weka_trace",
        "--random-seed",
        "42",
        "--unsafe-override",
        "--streaming",
        "--stats-interval",
        "0",
    ];
    args.extend_from_slice(extra);
    Run::exec(tempfile::tempdir().unwrap(), &args, &[])
}

/// Every file a finished run writes is there and parses.
pub(crate) fn assert_exports(dir: &Path) {
    for f in [
        "records.jsonl",
        "run_manifest.json",
        "run_summary.json",
        "profile_export.jsonl",
        "profile_export_aiperf.json",
        "profile_export_aiperf.csv",
        "metrics_plots.png",
        "report.html",
    ] {
        let p = dir.join(f);
        assert!(p.is_file(), "{} missing", p.display());
    }
    let agg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("profile_export_aiperf.json")).unwrap())
            .unwrap();
    assert_eq!(agg["was_cancelled"], true, "an early stop is marked");
}

fn errors(recs: &[RequestRecord]) -> Vec<&RequestRecord> {
    recs.iter().filter(|r| r.error.is_some()).collect()
}

#[test]
fn failed_warmup_requests_are_judged_by_the_threshold_not_fatal() {
    // 3 % of requests fail: the reference ends the run at the first failed root primer; agentx
    // judges the warmup's failed share against the 0.10 threshold and goes on.
    let s = sim(Faults {
        seed: 11,
        fail_rate: 0.03,
        ..Faults::default()
    });
    // The request ids, and so the simulator's fault draws, follow from the run id.
    let r = run_agentx(&s.url(), "8", "8", &["--run-id", "warmup-faults-1"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let warm_failed = recs
        .iter()
        .filter(|x| x.phase == Phase::Warmup && x.error.is_some())
        .count();
    assert!(
        warm_failed > 0,
        "3 % of ~100 warmup requests fail (seeded): {}",
        recs.len()
    );
    assert_eq!(r.summary()["stop"], "completed");
    assert!(recs.iter().any(|x| x.phase == Phase::Profiling));

    // Half of them fail: the warmup's share is past the threshold, the run stops as a failed
    // warmup, keeps its records and writes every export.
    let s = sim(Faults {
        seed: 11,
        fail_rate: 0.5,
        ..Faults::default()
    });
    let r = run_agentx(&s.url(), "4", "8", &["--run-id", "warmup-faults-2"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(
        r.stderr()
            .contains("--failed-request-threshold 0.1 exceeded in warmup"),
        "{}",
        r.stderr()
    );
    assert_eq!(r.summary()["stop"], "warmup_failed");
    let recs = r.records();
    let warm = recs.iter().filter(|x| x.phase == Phase::Warmup).count();
    assert!(warm >= 10, "judged from the floor of 10 on: {warm}");
    assert!(recs.iter().all(|x| x.phase == Phase::Warmup));
    assert_exports(&r.artifacts());
}

#[test]
fn a_dead_engine_ends_a_session_tree_run_with_exports_and_exit_1() {
    // Warmup is 4 primers and 10 requests per lane at 2 lanes: the engine dies in profiling.
    let s = sim(Faults {
        die_at: Some(34),
        ..Faults::default()
    });
    let r = run_agentx(&s.url(), "2", "60", &["--request-timeout-seconds", "5"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert_eq!(
        r.summary()["stop"],
        "failed_request_threshold_exceeded",
        "{}",
        r.stderr()
    );
    dead_engine_records(&r.records());
    assert_exports(&r.artifacts());

    // Dead in warmup: the warmup's failed share stops the run.
    let s = sim(Faults {
        die_at: Some(6),
        ..Faults::default()
    });
    let r = run_agentx(&s.url(), "2", "60", &["--request-timeout-seconds", "5"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert_eq!(r.summary()["stop"], "warmup_failed", "{}", r.stderr());
    let recs = r.records();
    assert!(errors(&recs).len() >= 5, "{recs:#?}");
    assert_exports(&r.artifacts());
}

#[test]
fn a_dead_engine_ends_a_single_stream_run_with_exports_and_exit_1() {
    let s = sim(Faults {
        die_at: Some(40),
        ..Faults::default()
    });
    let r = run_mvp(
        &s.url(),
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "60",
            "--failed-request-threshold",
            "0.1",
            "--request-timeout-seconds",
            "5",
            "--ignore-trace-delays",
        ],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert_eq!(
        r.summary()["stop"],
        "failed_request_threshold_exceeded",
        "{}",
        r.stderr()
    );
    dead_engine_records(&r.records());
    assert_exports(&r.artifacts());
}

/// Requests before the death succeeded; after it each failed with a cause a user can act on.
fn dead_engine_records(recs: &[RequestRecord]) {
    let ok = recs.iter().filter(|x| x.error.is_none()).count();
    assert!(ok >= 20, "the requests before the death are kept: {ok}");
    let failed = errors(recs);
    assert!(!failed.is_empty());
    for f in &failed {
        let e = f.error.as_ref().unwrap();
        assert!(
            !e.kind.is_empty() && !e.message.is_empty(),
            "a failure says why: {f:#?}"
        );
    }
    let kinds: std::collections::BTreeSet<&str> = failed
        .iter()
        .map(|f| f.error.as_ref().unwrap().kind.as_str())
        .collect();
    eprintln!("dead-engine failure kinds: {kinds:?}");
}

/// Waits until the manifest notes the start of profiling and `records.jsonl` has `n` profiling
/// records.
fn wait_profiling(dir: &Path, n: usize) {
    let t0 = std::time::Instant::now();
    loop {
        let m: Option<serde_json::Value> = std::fs::read(dir.join("run_manifest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let started = m.is_some_and(|m| m["profiling_started_ns"].is_u64());
        let lines = std::fs::read_to_string(dir.join("records.jsonl"))
            .map(|t| {
                t.lines()
                    .filter(|l| l.contains(r#""phase":"profiling""#))
                    .count()
            })
            .unwrap_or(0);
        if started && lines >= n {
            return;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(120),
            "no profiling in {}",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A run of the default scenario against `url` as a child process, writing to `<tmp>/run`.
fn spawn_agentx(tmp: &Path, url: &str) -> std::process::Child {
    crate::support::agentx_command(tmp, &[])
        .args(agentx_args(url, "3", "600"))
        .arg("--output-artifact-dir")
        .arg(tmp.join("run"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn agentx(tmp: &Path, args: &[&str]) -> std::process::Output {
    crate::support::agentx_command(tmp, &[])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_killed_run_is_finalized_into_every_export_and_report_reads_it() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::io::Write;

    let s = sim(Faults::default());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut child = spawn_agentx(tmp.path(), &s.url());
    wait_profiling(&dir, 8);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = child.wait();
    // What the kill left: the manifest and whole records, no summary or exports. A record the kill
    // cut in half is appended by hand (the writer flushes whole lines, but a kill can land mid-write).
    assert!(!dir.join("run_summary.json").exists());
    assert!(!dir.join("profile_export_aiperf.json").exists());
    let whole = agentx::record::read_records(&dir.join("records.jsonl"))
        .unwrap()
        .len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("records.jsonl"))
        .unwrap();
    f.write_all(br#"{"request_id":"cut","correlation_id":"x","ph"#)
        .unwrap();
    drop(f);

    let out = agentx(
        tmp.path(),
        &[
            "finalize",
            dir.to_str().unwrap(),
            "--reason",
            "slurm time limit",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the last record was cut off"), "{err}");
    assert_exports(&dir);
    // The torn line is cut off the file; the whole records before it stay, byte for byte.
    let text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    assert!(text.ends_with("}\n") && !text.contains("\"cut\""));
    assert_eq!(text.lines().count(), whole);
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap()
    };
    let m = read("run_manifest.json");
    assert_eq!(m["stop"], "killed");
    assert_eq!(m["finalized"]["reason"], "slurm time limit");
    assert_eq!(m["finalized"]["records"], whole as u64);
    assert!(m["finalized"]["torn_record"].is_string());
    assert_eq!(m["finalized"]["server_metrics"], true, "the scrape journal");
    assert!(dir.join("server_metrics_export.json").is_file());
    let [p0, p1] = [&m["profiling_ns"][0], &m["profiling_ns"][1]].map(|v| v.as_u64().unwrap());
    assert_eq!(Some(p0), m["profiling_started_ns"].as_u64());
    assert!(p1 > p0);
    let summary = read("run_summary.json");
    assert_eq!(summary["stop"], "killed");
    assert_eq!(summary["records"], whole as u64);
    assert!(summary["message"]
        .as_str()
        .unwrap()
        .contains("slurm time limit"));
    assert!(summary["submission_invalid_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r == "run_cancelled"));
    // Every record the run measured is in the exports, and records.jsonl reads whole again.
    let recs = agentx::record::read_records(&dir.join("records.jsonl")).unwrap();
    assert_eq!(recs.len(), whole);
    let exported = std::fs::read_to_string(dir.join("profile_export.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert!(exported > 0 && exported <= whole);

    // The result row reads the finalized directory, and it meets the contract.
    let row = tmp.path().join("row.json");
    let out = crate::support::agentx_command(tmp.path(), crate::row_contract::ROW_IDENTITY)
        .args(["report", dir.to_str().unwrap(), "-o", row.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row: serde_json::Value = serde_json::from_slice(&std::fs::read(&row).unwrap()).unwrap();
    crate::row_contract::assert_row(&row);

    // Once is enough; a directory that is not a run is named.
    let out = agentx(tmp.path(), &["finalize", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("finalized already"));
    let out = agentx(tmp.path(), &["finalize", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no run_manifest.json"));
}

#[test]
fn a_second_signal_cancels_in_flight_requests_and_still_leaves_every_export() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let s = sim(Faults::default());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let child = spawn_agentx(tmp.path(), &s.url());
    wait_profiling(&dir, 8);
    let pid = Pid::from_raw(child.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    kill(pid, Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_exports(&dir);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run_summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stop"], "interrupted");
}
