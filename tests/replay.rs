//! `agentx-host run` end to end: the real binary against the built-in simulator on port 0, with the
//! simulator's faults for the failure paths. Every test reads back the records the run streamed.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentx::record::{read_records, Phase, RequestRecord};
use agentx::sim::{Faults, SimConfig, Timing};

use crate::support::{fixture, Run, Sim};
use serde_json::Value;

fn fast() -> SimConfig {
    SimConfig::max()
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentx-host"));
    c.arg("run")
        .arg("agentx-mvp")
        .args(args)
        .current_dir(dir)
        .env("AGENTX_HOME", dir.join("home"))
        .env("AGENTX_LOG", "info")
        .env_remove("AGENTX_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES")
        .env_remove("AIPERF_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES");
    c
}

/// `agentx-host run agentx-mvp ARGS` as a process.
fn run_process(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let out = command(dir.path(), args).output().unwrap();
    Run {
        out,
        dir,
        took: Duration::ZERO,
    }
}

/// `agentx-host run agentx-mvp ARGS`, in this process.
fn run(args: &[&str]) -> Run {
    let argv: Vec<&str> = ["run", "agentx-mvp"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    Run::in_process(tempfile::tempdir().unwrap(), &argv, &[])
}

/// Flags of a short run against `url` on the bundled-size fixture corpus.
fn against<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let corpus: &'static str = Box::leak(
        fixture("traces-24.jsonl")
            .to_str()
            .unwrap()
            .to_owned()
            .into_boxed_str(),
    );
    let mut v = vec![
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus,
        "--custom-dataset-type",
        "weka_trace",
        "--random-seed",
        "42",
        "--unsafe-override",
        "--streaming",
    ];
    v.extend_from_slice(extra);
    v
}

fn by_session(recs: &[RequestRecord]) -> HashMap<String, Vec<&RequestRecord>> {
    let mut m: HashMap<String, Vec<&RequestRecord>> = HashMap::new();
    for r in recs {
        m.entry(r.correlation_id.clone()).or_default().push(r);
    }
    for v in m.values_mut() {
        v.sort_by_key(|r| r.turn);
    }
    m
}

#[test]
fn demo_run_needs_no_flags_and_writes_every_record() {
    // The README's first command is `agentx-host run` (the built-in agentx-v1 on the bundled corpus
    // against the built-in simulator); here shortened and on the fastest preset.
    let args = [
        "run",
        "--benchmark-duration",
        "3",
        "--sim-preset",
        "max",
        "--benchmark-grace-period",
        "10",
    ];
    // A process: the test reads the run's log lines.
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let out = r.stdout();
    assert!(out.contains("run completed"), "{out}");
    assert!(
        out.contains("submission    not valid: unsafe_override"),
        "{out}"
    );
    let recs = r.records();
    let warm: Vec<_> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    assert!(warm.len() >= 4, "a primer per lane at least");
    assert!(warm.iter().all(|x| x.max_tokens == 1));
    assert!(recs.iter().any(|x| x.phase == Phase::Profiling));
    assert!(
        recs.iter().all(|x| agentx::metrics::Outcome::of(x).is_ok()),
        "{recs:#?}"
    );
    assert!(
        recs.iter().all(|x| x.tree.is_some()),
        "session-tree records"
    );
    let s = r.summary();
    assert_eq!(s["records"].as_u64().unwrap() as usize, recs.len());
    assert_eq!(s["submission_valid"], false);
    assert_eq!(s["scenario"]["name"], "agentx");
    assert_eq!(s["stop"], "completed");
    let stderr = r.stderr();
    assert!(stderr.contains("primers returned"), "{stderr}");

    // The MVP stays built in, by name. (A demo run is a process: see `cli::in_process`.)
    let r = run_process(&[
        "--benchmark-duration",
        "3",
        "--sim-preset",
        "max",
        "--benchmark-grace-period",
        "10",
    ]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let warm: Vec<_> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    assert_eq!(warm.len(), 4, "one warmup request per lane");
    assert_eq!(r.summary()["scenario"]["name"], "inferencex-agentx-mvp");
    let stderr = r.stderr();
    assert_eq!(r.code(), 0, "{}\n{}", r.stderr(), r.stdout());
    assert!(stderr.contains("start turn as % of trace"), "{stderr}");
}

#[test]
fn sessions_follow_the_plan_warmup_then_k_plus_one_then_recycle_from_turn_zero() {
    let sim = Sim::start(fast());
    let url = sim.url();
    let plan_run = run(&against(
        &url,
        &[
            "--concurrency",
            "3",
            "--benchmark-duration",
            "4",
            "--run-id",
            "feedc0de",
            "--dry-run",
            "--json",
            "--trajectory-start-min-ratio",
            "0.25",
            "--trajectory-start-max-ratio",
            "0.75",
        ],
    ));
    assert_eq!(plan_run.code(), 0, "{}", plan_run.stderr());
    assert_eq!(sim.requests(), 0, "a dry run sends nothing");
    let plan: Value = serde_json::from_str(&plan_run.stdout()).unwrap();
    let lanes = plan["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 3);
    let start_of: HashMap<u32, u32> = lanes
        .iter()
        .map(|l| {
            let (k, n) = (
                l["start_turn"].as_u64().unwrap(),
                l["turns"].as_u64().unwrap(),
            );
            assert!(k >= (n as f64 * 0.25) as u64 && k <= (n as f64 * 0.75) as u64);
            assert!(l["marker"].as_str().unwrap().starts_with("[rid:"));
            (l["lane"].as_u64().unwrap() as u32, k as u32)
        })
        .collect();
    // Same seed, same run id: the same plan, byte for byte.
    let again = run(&against(
        &url,
        &[
            "--concurrency",
            "3",
            "--benchmark-duration",
            "4",
            "--run-id",
            "feedc0de",
            "--dry-run",
            "--json",
            "--trajectory-start-min-ratio",
            "0.25",
            "--trajectory-start-max-ratio",
            "0.75",
        ],
    ));
    assert_eq!(plan_run.stdout(), again.stdout());

    let r = run(&against(
        &url,
        &[
            "--concurrency",
            "3",
            "--benchmark-duration",
            "4",
            "--run-id",
            "feedc0de",
            "--ignore-trace-delays",
            "--trajectory-start-min-ratio",
            "0.25",
            "--trajectory-start-max-ratio",
            "0.75",
        ],
    ));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let ids: HashSet<_> = recs.iter().map(|x| &x.request_id).collect();
    assert_eq!(ids.len(), recs.len(), "request ids are unique");
    for (lane, k) in &start_of {
        let w: Vec<_> = recs
            .iter()
            .filter(|x| x.phase == Phase::Warmup && x.lane == *lane)
            .collect();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].turn, *k, "warmup sends turn k");
    }
    let sessions = by_session(&recs);
    let mut recycled = 0;
    for s in sessions.values() {
        let first = s[0];
        if first.phase == Phase::Warmup {
            assert_eq!(s.len(), 1, "a warmup session is one request");
            continue;
        }
        // Turns of a session are consecutive, on one lane and one trace.
        for w in s.windows(2) {
            assert_eq!(w[1].turn, w[0].turn + 1);
            assert_eq!(w[1].lane, w[0].lane);
            assert_eq!(w[1].trace_id, w[0].trace_id);
            assert!(
                w[1].send_ns >= w[0].end_ns,
                "a turn waits for the previous one"
            );
        }
        if first.recycle_pass == 0 && first.turn == start_of[&first.lane] + 1 {
            continue;
        }
        assert_eq!(
            first.turn, 0,
            "recycled sessions start at turn 0: {first:?}"
        );
        recycled += 1;
    }
    assert!(
        recycled > 0,
        "with no think time lanes finish traces and recycle"
    );
    // No two live sessions of one trace at once (24 traces > 3 lanes).
    let mut spans: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for s in sessions.values().filter(|s| s[0].phase == Phase::Profiling) {
        spans
            .entry(&s[0].trace_id)
            .or_default()
            .push((s[0].send_ns, s[s.len() - 1].end_ns));
    }
    for (t, mut v) in spans {
        v.sort_unstable();
        for w in v.windows(2) {
            assert!(w[1].0 >= w[0].1, "trace {t} ran twice at once");
        }
    }
}

#[test]
fn fixed_latency_records_time_every_token() {
    let mut cfg = fast();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(50),
        itl: Duration::from_millis(2),
    };
    let sim = Sim::start(cfg);
    let url = sim.url();
    let r = run(&against(
        &url,
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
        ],
    ));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    assert!(recs.len() > 4);
    let (mut ttfts, mut itls) = (Vec::new(), Vec::new());
    for x in &recs {
        assert!(agentx::metrics::Outcome::of(x).is_ok(), "{x:?}");
        // ignore_eos: exactly the recorded output length (at least one token), each one a chunk.
        assert_eq!(x.osl, u64::from(x.max_tokens), "{x:?}");
        assert_eq!(x.chunk_offsets_ns.len() as u64, x.osl);
        assert_eq!(x.usage.completion_tokens, Some(x.osl));
        assert!(x.usage.cached_tokens.is_some());
        // The simulator's fixed delays bound each request from below; how far above they land is
        // the machine's load, judged on the median below, not per request.
        let ttft = x.ttft_ns().unwrap() as f64 / 1e6;
        assert!(ttft >= 50.0, "ttft {ttft} ms");
        ttfts.push(ttft);
        assert!(x.first_byte_ns.unwrap() <= x.first_token_ns.unwrap());
        assert!(x.end_ns >= x.send_ns + x.chunk_offsets_ns.last().unwrap());
        // The simulator stamps its own time to first token (from when the request's last byte
        // arrived at its socket to when the first token went out: its fixed 50 ms from reading the
        // head, and however late it read), and what the client added is the rest of the scheduled
        // TTFT (from when the request was due, send lag included): aiperf's TTFT plus the send
        // lag. The server's part lies inside what the client saw.
        let server = x.server_ttft_ns.unwrap();
        let scheduled = x.scheduled_ttft_ns().unwrap();
        assert!(server > 0 && server <= scheduled, "{x:?}");
        assert_eq!(scheduled, x.ttft_ns().unwrap() + x.send_lag_ns());
        assert_eq!(x.client_ttft_ns(), Some(scheduled - server));
        if x.osl >= 2 {
            let itl = x.itl_ns().unwrap() / 1e6;
            assert!(itl >= 1.5, "itl {itl} ms");
            itls.push(itl);
        }
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    assert!(median(ttfts) < 500.0, "median ttft");
    assert!(!itls.is_empty() && median(itls) < 50.0, "median itl");
}

#[test]
fn locks_are_listed_together_and_exit_2() {
    let r = run(&[
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--input-file",
        fixture("traces-24.jsonl").to_str().unwrap(),
        "--concurrency",
        "8,16",
        "--benchmark-duration",
        "60",
        "--inter-turn-delay-cap-seconds",
        "5",
    ]);
    assert_eq!(r.code(), 2);
    let e = r.stderr();
    for flag in [
        "--concurrency",
        "--benchmark-duration",
        "--inter-turn-delay-cap-seconds",
    ] {
        assert!(e.contains(flag), "{flag} missing from: {e}");
    }
    assert!(
        !r.dir.path().join("artifacts").exists(),
        "nothing is written for a refused run"
    );
}

#[test]
fn bad_flags_say_which_and_how() {
    let corpus = fixture("traces-24.jsonl");
    let corpus = corpus.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "--url",
                "localhost:8000",
                "--model",
                "m",
                "--input-file",
                corpus,
                "--concurrency",
                "2",
                "--benchmark-duration",
                "900",
            ],
            "--url",
        ),
        (
            &[
                "--url",
                "http://x",
                "--input-file",
                corpus,
                "--concurrency",
                "2",
                "--benchmark-duration",
                "900",
                "--unsafe-override",
            ],
            "--model is required",
        ),
        (&["--url", "http://x", "--model", "m"], "no dataset"),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--input-file",
                corpus,
                "--extra-inputs",
                "nocolon",
            ],
            "--extra-inputs",
        ),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--input-file",
                corpus,
                "--extra-inputs",
                "max_tokens:5",
            ],
            "max_tokens",
        ),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--input-file",
                corpus,
                "--failed-request-threshold",
                "2",
            ],
            "--failed-request-threshold",
        ),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--input-file",
                corpus,
                "--benchmark-grace-period",
                "soon",
            ],
            "--benchmark-grace-period",
        ),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--input-file",
                "/nonexistent/t.jsonl",
                "--concurrency",
                "2",
                "--benchmark-duration",
                "900",
            ],
            "/nonexistent/t.jsonl",
        ),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--public-dataset",
                "nope",
            ],
            "--public-dataset nope",
        ),
        (
            &[
                "--url",
                "http://x",
                "--model",
                "m",
                "--input-file",
                corpus,
                "--endpoint-type",
                "embeddings",
            ],
            "--endpoint-type",
        ),
    ];
    for (args, want) in cases {
        let r = run(args);
        assert_eq!(r.code(), 2, "{args:?}: {}", r.stderr());
        assert!(r.stderr().contains(want), "{args:?}: {}", r.stderr());
        assert!(!r.stderr().contains("panicked"), "{}", r.stderr());
    }
}

#[test]
fn server_errors_trip_the_failed_request_threshold_and_keep_the_records() {
    let mut cfg = fast();
    cfg.faults = Faults {
        seed: 7,
        fail_rate: 0.5,
        ..Faults::default()
    };
    // Warmup must pass: faults follow the request ids, so a new run id per attempt until it does.
    let sim = Sim::start(cfg);
    let url = sim.url();
    let mut last = None;
    for attempt in 0..8 {
        let id = format!("attempt{attempt}");
        let r = run(&against(
            &url,
            &[
                "--run-id",
                &id,
                "--concurrency",
                "2",
                "--benchmark-duration",
                "30",
                "--ignore-trace-delays",
                "--failed-request-threshold",
                "0.05",
            ],
        ));
        if r.stderr().contains("warmup failed") {
            last = Some(r);
            continue;
        }
        assert_eq!(r.code(), 1, "{}", r.stderr());
        assert!(
            r.stderr()
                .contains("--failed-request-threshold 0.05 exceeded"),
            "{}",
            r.stderr()
        );
        let recs = r.records();
        let prof: Vec<_> = recs
            .iter()
            .filter(|x| x.phase == Phase::Profiling)
            .collect();
        assert!(prof.len() >= 10, "armed after max(concurrency, 10) records");
        let failed: Vec<_> = prof
            .iter()
            .filter(|x| x.error.is_some() && !x.cancelled)
            .collect();
        assert!(!failed.is_empty());
        for f in failed {
            let e = f.error.as_ref().unwrap();
            assert!(e.code == 500 || e.code == 503, "{e:?}");
            assert!(e.kind.starts_with("http_error"), "{e:?}");
            assert!(!e.message.is_empty());
        }
        assert_eq!(r.summary()["stop"], "failed_request_threshold_exceeded");
        return;
    }
    let r = last.unwrap();
    // Eight warmups in a row failed: still a clean abort with exit 1 and the records kept.
    assert_eq!(r.code(), 1);
    assert!(!r.records().is_empty());
}

#[test]
fn a_failed_warmup_aborts_the_run_with_exit_1() {
    let mut cfg = fast();
    cfg.faults = Faults {
        seed: 1,
        fail_rate: 1.0,
        ..Faults::default()
    };
    let sim = Sim::start(cfg);
    let url = sim.url();
    let r = run(&against(
        &url,
        &["--concurrency", "2", "--benchmark-duration", "30"],
    ));
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(r.stderr().contains("warmup failed"), "{}", r.stderr());
    let recs = r.records();
    assert_eq!(recs.len(), 2);
    assert!(recs
        .iter()
        .all(|x| x.phase == Phase::Warmup && x.error.is_some()));
    assert_eq!(r.summary()["stop"], "warmup_failed");
}

#[test]
fn resets_malformed_streams_and_stalls_become_error_records_not_hangs() {
    let mut cfg = fast();
    cfg.faults = Faults {
        seed: 3,
        reset_rate: 0.1,
        malformed_rate: 0.1,
        stall: Duration::from_secs(30),
        stall_rate: 0.1,
        ..Faults::default()
    };
    let sim = Sim::start(cfg);
    let url = sim.url();
    let started = Instant::now();
    let mut kinds = HashSet::new();
    // Fault decisions follow the request ids; a new run id per attempt draws new ones, so some
    // attempt gets past warmup (one lane: request ids are sequential).
    for attempt in 0..8 {
        let id = format!("attempt{attempt}");
        let r = run(&against(
            &url,
            &[
                "--run-id",
                &id,
                "--concurrency",
                "1",
                "--benchmark-duration",
                "4",
                "--ignore-trace-delays",
                "--request-timeout-seconds",
                "1",
                "--benchmark-grace-period",
                "2",
            ],
        ));
        if r.stderr().contains("warmup failed") {
            assert_eq!(r.code(), 1);
            continue;
        }
        assert_eq!(r.code(), 0, "attempt {attempt}: {}", r.stderr());
        for x in r.records() {
            if let Some(e) = &x.error {
                kinds.insert(e.kind.split(':').next().unwrap().to_string());
                assert!(!e.message.is_empty());
            }
        }
        if ["connection_reset", "malformed_sse", "timeout"]
            .iter()
            .all(|k| kinds.contains(*k))
        {
            break;
        }
    }
    for k in ["connection_reset", "malformed_sse", "timeout"] {
        assert!(kinds.contains(k), "{k} not seen in {kinds:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "runs never hang"
    );
}

#[test]
fn a_server_that_goes_away_ends_in_connect_errors_within_the_grace() {
    let mut cfg = fast();
    cfg.faults = Faults {
        stop_after: Some(12),
        ..Faults::default()
    };
    let sim = Sim::start(cfg);
    let url = sim.url();
    let started = Instant::now();
    let r = run(&against(
        &url,
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
            "--request-timeout-seconds",
            "2",
            "--connect-timeout-seconds",
            "1",
        ],
    ));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(started.elapsed() < Duration::from_secs(60));
    let recs = r.records();
    let ok = recs
        .iter()
        .filter(|x| agentx::metrics::Outcome::of(x).is_ok())
        .count();
    assert!(ok >= 10, "the first requests succeed and are kept");
    assert!(
        recs.iter().any(|x| x.error.is_some()),
        "later ones fail: {recs:#?}"
    );
}

#[test]
fn context_overflow_ends_the_trajectory_and_is_not_a_failure() {
    let mut cfg = fast();
    // Small enough that the longer prompts of the corpus (up to ~63k words) overflow.
    cfg.max_model_len = 40_000;
    let sim = Sim::start(cfg);
    let url = sim.url();
    let r = run(&against(
        &url,
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "5",
            "--ignore-trace-delays",
            "--trajectory-start-min-ratio",
            "0",
            "--trajectory-start-max-ratio",
            "0.1",
            "--failed-request-threshold",
            "0.01",
        ],
    ));
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let over: Vec<_> = recs.iter().filter(|x| x.context_overflow).collect();
    assert!(!over.is_empty(), "some turns overflow");
    let sessions = by_session(&recs);
    for o in &over {
        let s = &sessions[&o.correlation_id];
        assert_eq!(
            s.last().unwrap().request_id,
            o.request_id,
            "an overflow is the session's last request"
        );
        assert_eq!(o.error.as_ref().unwrap().code, 400);
    }
    let s = r.summary();
    assert_eq!(
        s["summary"]["context_overflows"].as_u64().unwrap() as usize,
        over.len()
    );
    assert_eq!(s["summary"]["requests_failed"], 0);
    let reasons = s["submission_invalid_reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|x| x == "context_overflow_rate_exceeded"),
        "{reasons:?}"
    );
}

#[cfg(unix)]
#[test]
fn an_interrupt_drains_keeps_the_records_and_exits_1() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let mut cfg = fast();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(5),
    };
    let sim = Sim::start(cfg);
    let url = sim.url();
    let dir = tempfile::tempdir().unwrap();
    let child = command(
        dir.path(),
        &against(
            &url,
            &[
                "--concurrency",
                "2",
                "--benchmark-duration",
                "600",
                "--ignore-trace-delays",
            ],
        ),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let records = dir.path().join("artifacts/latest/records.jsonl");
    // Wait until records are on disk (written as they complete, before the run ends).
    crate::support::wait_for_records(&records, 6, Duration::from_secs(60));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupt"), "{err}");
    let recs = read_records(&records).unwrap();
    assert!(recs.len() >= 6);
    let s: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("artifacts/latest/run_summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(s["stop"], "interrupted");
    assert!(s["submission_invalid_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r == "run_cancelled"));
}

#[test]
fn h2c_works_and_the_api_key_is_never_written() {
    let sim = Sim::start(fast());
    let url = sim.url();
    let dir = tempfile::tempdir().unwrap();
    let secret = "sk-agentx-test-9f8e7d";
    let out = command(
        dir.path(),
        &against(
            &url,
            &[
                "--concurrency",
                "2",
                "--benchmark-duration",
                "2",
                "--ignore-trace-delays",
                "--http2",
            ],
        ),
    )
    .env("AGENTX_API_KEY", secret)
    .env("AGENTX_LOG", "debug")
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let recs = read_records(&dir.path().join("artifacts/latest/records.jsonl")).unwrap();
    assert!(recs.len() >= 2);
    assert!(
        recs.iter().all(|r| agentx::metrics::Outcome::of(r).is_ok()),
        "h2c requests succeed: {recs:#?}"
    );
    assert!(!err.contains(secret));
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    for e in std::fs::read_dir(dir.path().join("artifacts/latest")).unwrap() {
        let p = e.unwrap().path();
        let bytes = std::fs::read(&p).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds the key",
            p.display()
        );
    }
}

#[test]
fn a_manifest_reruns_the_same_plan_and_refuses_changed_inputs() {
    let sim = Sim::start(fast());
    let url = sim.url();
    let corpus = fixture("traces-24.jsonl");
    let dir = tempfile::tempdir().unwrap();
    // No --random-seed: the seed is drawn, and the manifest must carry it.
    let out = command(
        dir.path(),
        &[
            "--url",
            &url,
            "--model",
            "agentx-sim",
            "--dataset",
            corpus.to_str().unwrap(),
            "--concurrency",
            "3",
            "--benchmark-duration",
            "2",
            "--unsafe-override",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let art = dir.path().join("artifacts/latest");
    let m: Value =
        serde_json::from_slice(&std::fs::read(art.join("run_manifest.json")).unwrap()).unwrap();
    assert_eq!(m["seed_drawn"], true);
    assert!(m["ended_unix_ns"].as_u64().unwrap() > m["started_unix_ns"].as_u64().unwrap());
    assert_eq!(m["scenario"]["name"], "inferencex-agentx-mvp");
    assert_eq!(m["dataset"]["cache_key"].as_str().unwrap().len(), 64);

    let replay = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentx-host"));
        c.arg("replay")
            .arg(&art)
            .args(extra)
            .current_dir(dir.path())
            .env("AGENTX_HOME", dir.path().join("home"));
        c.output().unwrap()
    };
    let plan = replay(&["--dry-run", "--json"]);
    assert_eq!(
        plan.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let p: Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(p["lanes"], m["lanes"], "same start turns and markers");
    assert_eq!(p["seed"], m["seed"]);

    let rerun = replay(&["--output-artifact-dir", "again"]);
    assert_eq!(
        rerun.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    let recs = read_records(&dir.path().join("again/records.jsonl")).unwrap();
    let first = read_records(&art.join("records.jsonl")).unwrap();
    let warm = |r: &[RequestRecord]| {
        let mut v: Vec<_> = r
            .iter()
            .filter(|x| x.phase == Phase::Warmup)
            .map(|x| (x.lane, x.trace_id.clone(), x.turn))
            .collect();
        v.sort();
        v
    };
    assert_eq!(warm(&recs), warm(&first));

    // A manifest whose scenario hash no longer matches is refused with the reason.
    let mut bad = m.clone();
    bad["scenario"]["sha256"] = Value::String("00".repeat(32));
    std::fs::write(art.join("run_manifest.json"), bad.to_string()).unwrap();
    let o = replay(&["--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the manifest recorded sha256:0000"));
}
