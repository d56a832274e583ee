//! `agentx-host sweep` end to end against the built-in simulator: one complete run per point, the
//! summary, resume, refusals, and a failing point that does not stop the sweep.

use std::collections::HashSet;
use std::path::Path;

use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{fixture_args, Run, Sim};

fn sweep(url: &str, dir: &std::path::Path, extra: &[&str]) -> Run {
    let out = dir.join("sweep");
    let mut args = fixture_args("sweep", url);
    args.extend(
        [
            "--benchmark-duration",
            "2",
            "--trace-idle-gap-cap-seconds",
            "0.01",
            "--gpus",
            "2",
            "--output-artifact-dir",
            out.to_str().unwrap(),
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(std::string::ToString::to_string));
    let home = tempfile::tempdir().unwrap();
    // The identity a CI job exports, so each point's InferenceX row can be written.
    Run::exec(home, &args, crate::row_contract::ROW_IDENTITY)
}

fn json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_sweep_runs_every_point_resumes_and_refuses_what_would_overwrite() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    let r = sweep(&sim.url(), work.path(), &["--concurrency", "1,3"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let s = json(&out.join("sweep.json"));
    every_point_is_a_replayable_run_with_its_report(&out, &s);
    plot_redraws_the_sweep_and_report_refuses_it(&out);
    a_second_sweep_compares_point_by_point(&sim.url(), &out, work.path());

    // Without --resume nothing finished is overwritten.
    let sent = sim.requests();
    let r = sweep(&sim.url(), work.path(), &["--concurrency", "1,3"]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains("already holds a run of concurrency 1")
            && r.stderr().contains("--resume"),
        "{}",
        r.stderr()
    );
    // --resume keeps both points and sends nothing.
    let r = sweep(
        &sim.url(),
        work.path(),
        &["--concurrency", "1,3", "--resume"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(sim.requests(), sent, "no point ran again");
    let s = json(&out.join("sweep.json"));
    assert!(s["points"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["status"] == "resumed"));
    // --resume with another input is refused, naming it.
    let r = sweep(
        &sim.url(),
        work.path(),
        &[
            "--concurrency",
            "1,3",
            "--resume",
            "--request-timeout-seconds",
            "99",
        ],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("holds a sweep with other inputs: the command line"),
        "{}",
        r.stderr()
    );
    assert_eq!(sim.requests(), sent);
}

/// Each point of the sweep of concurrencies 1 and 3 in `out` (`s`: its sweep.json) is a complete,
/// replayable run with its own run id, markers and InferenceX report; the CSV and the views are
/// written.
fn every_point_is_a_replayable_run_with_its_report(out: &Path, s: &Value) {
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    let mut run_ids = HashSet::new();
    let mut markers = HashSet::new();
    for (p, n) in points.iter().zip([1, 3]) {
        assert_eq!(p["concurrency"], n);
        assert_eq!(p["status"], "completed", "{p}");
        assert!(p["requests_ok"].as_u64().unwrap() > 0);
        // Throughput per GPU is the total over --gpus 2.
        let (t, g) = (
            p["total_token_throughput"].as_f64().unwrap(),
            p["total_token_throughput_per_gpu"].as_f64().unwrap(),
        );
        assert!((t / 2.0 - g).abs() < 1e-6);
        // And the jobs: per hour, per GPU (over --gpus 2), as the point's run summary has them.
        let dir = out.join(format!("conc_{n}"));
        let jobs = &json(&dir.join("run_summary.json"))["summary"]["jobs"];
        assert_eq!(p["jobs_ok"], jobs["ok"], "{p}");
        let per_hour = p["jobs_per_hour"].as_f64().unwrap();
        assert_eq!(per_hour, jobs["jobs_per_hour"].as_f64().unwrap());
        assert_eq!(p["jobs_per_hour_per_gpu"].as_f64().unwrap(), per_hour / 2.0);
        let m = json(&dir.join("run_manifest.json"));
        assert_eq!(m["concurrency"], n);
        assert_eq!(m["seed"], 42);
        assert_eq!(m["argv"][0], "run", "a point is a replayable run");
        run_ids.insert(m["run_id"].as_str().unwrap().to_owned());
        markers.insert(m["lanes"][0]["marker"].as_str().unwrap().to_owned());
        // The point's InferenceX report, named as InferenceX names it.
        let rep = json(&dir.join(format!("agentx_conc{n}.json")));
        assert_eq!(rep["conc"], n, "{rep}");
        crate::row_contract::assert_row(&rep);
        assert_eq!(p["report"], format!("conc_{n}/agentx_conc{n}.json"));
    }
    assert_eq!(run_ids.len(), 2, "each point has its own run id");
    assert_eq!(markers.len(), 2, "and so its own cache-bust markers");
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
    assert!(csv.lines().nth(2).unwrap().starts_with("3,completed,"));
    assert!(
        csv.lines().next().unwrap().ends_with(
            ",jobs_ok,jobs_partial,jobs_per_hour,jobs_per_hour_per_gpu,jobs_per_hour_per_user"
        ),
        "{csv}"
    );
    for view in ["sweep_pareto.png", "report.html"] {
        assert!(out.join(view).is_file(), "{view}");
    }
    // The page draws the job view beside the token one.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("jobs/h per GPU vs jobs/h per user"));
}

/// `plot SWEEPDIR` draws the sweep again (not the first point's run page over it); `report`
/// refuses the ambiguous directory and lists the points.
fn plot_redraws_the_sweep_and_report_refuses_it(out: &Path) {
    let page = std::fs::read(out.join("report.html")).unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    std::fs::remove_file(out.join("sweep_pareto.png")).unwrap();
    let p = Run::exec(
        tempfile::tempdir().unwrap(),
        &["plot", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(p.code(), 0, "{}", p.stderr());
    assert_eq!(std::fs::read(out.join("report.html")).unwrap(), page);
    assert!(out.join("sweep_pareto.png").is_file());
    assert!(!out.join("metrics_plots.png").exists());
    let rep = Run::exec(
        tempfile::tempdir().unwrap(),
        &["report", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(rep.code(), 2);
    assert!(
        rep.stderr().contains("holds several runs")
            && rep.stderr().contains("conc_1")
            && rep.stderr().contains("conc_3"),
        "{}",
        rep.stderr()
    );
}

/// A second sweep of the same points, compared with the first (in `out`): one row of ratios per
/// point; a directory that is not a sweep is refused.
fn a_second_sweep_compares_point_by_point(url: &str, out: &Path, work: &Path) {
    let other = tempfile::tempdir().unwrap();
    let r = sweep(url, other.path(), &["--concurrency", "1,3"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let cmp = work.join("compare");
    let r = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "sweep",
            "--compare",
            out.to_str().unwrap(),
            other.path().join("sweep").to_str().unwrap(),
            "--output-artifact-dir",
            cmp.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let rows = std::fs::read_to_string(cmp.join("sweep_compare.csv")).unwrap();
    assert_eq!(rows.lines().count(), 3, "{rows}");
    for f in [
        "sweep_compare.json",
        "sweep_compare.png",
        "sweep_compare.html",
    ] {
        assert!(cmp.join(f).is_file(), "{f}");
    }
    let r = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "sweep",
            "--compare",
            out.to_str().unwrap(),
            cmp.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains("not a sweep directory"),
        "{}",
        r.stderr()
    );
}

#[test]
fn bad_lists_are_refused_and_a_failing_point_does_not_stop_the_sweep() {
    let work = tempfile::tempdir().unwrap();
    for (list, want) in [
        ("4,1", "pass --concurrency 1,4"),
        ("1,1", "each point once"),
        ("", "is empty"),
    ] {
        let r = sweep("http://127.0.0.1:9", work.path(), &["--concurrency", list]);
        assert_eq!(r.code(), 2);
        assert!(r.stderr().contains(want), "{list}: {}", r.stderr());
    }
    // A server that fails every request: the warmup fails at each point, both are recorded, exit 1.
    let mut cfg = SimConfig::max();
    cfg.faults.fail_rate = 1.0;
    let sim = Sim::start(cfg);
    let r = sweep(&sim.url(), work.path(), &["--concurrency", "1,2"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let s = json(&work.path().join("sweep/sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "the sweep went on after the first failure");
    for p in points {
        assert_eq!(p["status"], "failed");
        assert!(
            p["error"].as_str().unwrap().contains("warmup_failed"),
            "{p}"
        );
    }
}

/// A `/metrics` endpoint that always shows three requests running.
fn busy_metrics() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        let page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n";
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    url
}

#[test]
fn a_server_that_never_becomes_idle_fails_the_next_point_with_the_reason() {
    let sim = Sim::start(SimConfig::max());
    let busy = busy_metrics();
    let work = tempfile::tempdir().unwrap();
    let r = sweep(
        &sim.url(),
        work.path(),
        &[
            "--concurrency",
            "1,2",
            "--idle-timeout",
            "1",
            "--server-metrics",
            &busy,
        ],
    );
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let s = json(&work.path().join("sweep/sweep.json"));
    assert_eq!(s["points"][0]["status"], "completed");
    let e = s["points"][1]["error"].as_str().unwrap();
    assert!(
        e.contains("did not become idle within --idle-timeout 1 s") && e.contains("3 running"),
        "{e}"
    );
}

#[test]
fn an_interrupted_sweep_stops_after_the_current_point_and_keeps_what_it_measured() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    let mut args = fixture_args("sweep", &sim.url());
    args.extend(
        [
            "--concurrency",
            "1,2",
            "--benchmark-duration",
            "60",
            "--trace-idle-gap-cap-seconds",
            "0.01",
            "--output-artifact-dir",
            out.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(&args)
        .env("AGENTX_HOME", work.path().join("home"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the first point streams profiling records.
    let records = out.join("conc_1/records.jsonl");
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&records).map_or(0, |s| s.lines().count()) < 5 {
        assert!(t0.elapsed().as_secs() < 60, "no records streamed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the finished points are kept"), "{err}");
    let s = json(&out.join("sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "the second point never started: {s}");
    assert_eq!(points[0]["status"], "failed");
    assert!(points[0]["error"].as_str().unwrap().contains("interrupted"));
    assert!(
        out.join("conc_1/records.jsonl").is_file(),
        "the measured records stay"
    );
    assert!(!out.join("conc_2").exists());
}

#[test]
fn a_sweep_with_a_drawn_seed_resumes_with_it() {
    let sim = Sim::start(SimConfig::max());
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    let args = |resume: bool| {
        let mut a = fixture_args("sweep", &sim.url());
        let at = a.iter().position(|x| x == "--random-seed").unwrap();
        a.drain(at..at + 2);
        a.extend(
            [
                "--concurrency",
                "1",
                "--benchmark-duration",
                "1",
                "--trace-idle-gap-cap-seconds",
                "0.01",
                "--output-artifact-dir",
                out.to_str().unwrap(),
            ]
            .map(String::from),
        );
        if resume {
            a.push("--resume".into());
        }
        a
    };
    let r = Run::exec(tempfile::tempdir().unwrap(), &args(false), &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let drawn = json(&out.join("sweep.json"))["inputs"]["seed"].clone();
    let sent = sim.requests();
    let r = Run::exec(tempfile::tempdir().unwrap(), &args(true), &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        r.stderr().contains("goes on with its recorded seed"),
        "{}",
        r.stderr()
    );
    let s = json(&out.join("sweep.json"));
    assert_eq!(s["inputs"]["seed"], drawn);
    assert_eq!(s["points"][0]["status"], "resumed");
    assert_eq!(sim.requests(), sent);
    // The recorded seed given on resume is the same sweep; another seed is not.
    let with_seed = |seed: u64| {
        let mut a = args(true);
        a.extend(["--random-seed".to_string(), seed.to_string()]);
        a
    };
    let drawn = drawn.as_u64().unwrap();
    let r = Run::exec(tempfile::tempdir().unwrap(), &with_seed(drawn), &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(sim.requests(), sent);
    let other = drawn.wrapping_add(1);
    let r = Run::exec(tempfile::tempdir().unwrap(), &with_seed(other), &[]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains(&format!(
            "other inputs: the seed (was {drawn}, now {other})"
        )),
        "{}",
        r.stderr()
    );
}

/// `--slo --find-max` against a server whose inter-token latency grows with the requests it runs
/// (5 ms, plus 5 ms per running request): the search brackets over the ladder, bisects, and answers
/// with a point that met the SLO next to one that did not; `--resume` retraces it without running a
/// point again.
#[test]
fn find_max_brackets_bisects_and_resumes() {
    let mut cfg = SimConfig::max();
    cfg.timing = agentx::sim::Timing::Modeled(agentx::sim::ModelTiming {
        prefill_tokens_per_s: 1e6,
        prefill_overhead: std::time::Duration::from_millis(5),
        itl_base: std::time::Duration::from_millis(5),
        itl_per_seq: std::time::Duration::from_millis(5),
        speed: 1.0,
    });
    let sim = Sim::start(cfg);
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("sweep");
    let flags = [
        "--concurrency",
        "1,8",
        "--slo",
        "inter_token_latency_avg:17.5 request_throughput:0.1 good_request_fraction:0.9",
        "--goodput",
        "time_to_first_token:60000",
        "--find-max",
        "--ignore-trace-delays",
    ];
    let r = sweep(&sim.url(), work.path(), &flags);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let s = json(&out.join("sweep.json"));
    let slo = &s["slo"];
    let f = &slo["find_max"];
    let order: Vec<u64> = f["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(order.len() >= 3 && order[..2] == [1, 8], "{slo}");
    let verdict = |n: u64| {
        slo["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["concurrency"] == n)
            .unwrap_or_else(|| panic!("no verdict for {n}: {slo}"))["meets"]
            .as_bool()
            .unwrap()
    };
    // Every point the search ran is a normal point of the sweep, with its verdict.
    let points: Vec<u64> = s["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["concurrency"].as_u64().unwrap())
        .collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(points, sorted, "points in increasing concurrency");
    for &n in &order {
        assert!(out.join(format!("conc_{n}/run_manifest.json")).is_file());
        verdict(n);
    }
    let answer = f["max_concurrency"]
        .as_u64()
        .expect("concurrency 1 meets the SLO");
    assert!(verdict(answer), "{f}");
    assert_eq!(f["bracketed"], true, "8 lanes are slower: {slo}");
    let failing = f["first_failing"].as_u64().unwrap();
    assert!(!verdict(failing) && failing > answer, "{f}");
    assert!(failing - answer <= f["resolution"].as_u64().unwrap(), "{f}");
    assert_eq!(f["resolution"], 1);
    assert!(r
        .stdout()
        .contains(&format!("find-max      concurrency {answer} meets the SLO")));
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains(&format!("max concurrent agents {answer} ")));
    // aiperf's max-goodput-under-slo: of the points that met the SLO (which asks for 90 % good
    // requests), the one with the most goodput.
    let passing: Vec<(u64, f64)> = slo["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["meets"] == true)
        .map(|p| {
            let g = p["goodput"].as_f64().unwrap_or_else(|| panic!("{p}"));
            (p["concurrency"].as_u64().unwrap(), g)
        })
        .collect();
    let best = passing.iter().map(|p| p.1).fold(0.0, f64::max);
    let peak = &f["max_goodput"];
    assert!(best > 0.0 && peak["goodput"].as_f64() == Some(best), "{f}");
    assert!(passing
        .iter()
        .any(|p| Some(p.0) == peak["concurrency"].as_u64()));
    assert!(page.contains("the most goodput among the points that meet it"));

    // --resume runs nothing again and reaches the same answer.
    let mut again = flags.to_vec();
    again.push("--resume");
    let r = sweep(&sim.url(), work.path(), &again);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(
        !r.stderr().contains("sweep: concurrency 1 into"),
        "{}",
        r.stderr()
    );
    let s2 = json(&out.join("sweep.json"));
    assert_eq!(s2["slo"]["find_max"], *f);

    // An SLO on a goodput figure needs --goodput; --find-max needs --slo.
    let r = sweep(
        &sim.url(),
        work.path(),
        &["--concurrency", "1", "--slo", "good_request_fraction:0.9"],
    );
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("--goodput"), "{}", r.stderr());
    // A session objective needs --session-slo; an unknown figure is refused with the names.
    let r = sweep(
        &sim.url(),
        work.path(),
        &["--concurrency", "1", "--slo", "sessions_meeting_slo:0.9"],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("names sessions_meeting_slo, which only a run with --session-slo measures"),
        "{}",
        r.stderr()
    );
    let r = sweep(
        &sim.url(),
        work.path(),
        &["--concurrency", "1", "--session-slo", "ttft_p91:5"],
    );
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("\"ttft_p91\" is not a session figure; name one of ttft_p90"),
        "{}",
        r.stderr()
    );
    let r = sweep(
        &sim.url(),
        work.path(),
        &["--concurrency", "1", "--find-max"],
    );
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("--slo"), "{}", r.stderr());
}

/// `--find-max` on a session objective (every session's median output speed at least 52 tokens/s,
/// on a simulator whose ITL is 5 ms plus 5 ms per running request: about 66 tokens/s at 2 lanes, 40
/// at 4; the search at a resolution of 2 lanes runs 1, 8, 4, 2) finds what a plain sweep over the
/// same points, judged here from each point's `summary.session_slo`, finds; the answer names the
/// objective that bound it.
#[test]
fn find_max_on_a_session_objective_matches_a_manual_sweep() {
    let mut cfg = SimConfig::max();
    cfg.timing = agentx::sim::Timing::Modeled(agentx::sim::ModelTiming {
        prefill_tokens_per_s: 1e6,
        prefill_overhead: std::time::Duration::from_millis(5),
        itl_base: std::time::Duration::from_millis(5),
        itl_per_seq: std::time::Duration::from_millis(5),
        speed: 1.0,
    });
    let sim = Sim::start(cfg);
    let session_slo = ["--session-slo", "output_speed:52", "--ignore-trace-delays"];
    let work = tempfile::tempdir().unwrap();
    let mut flags = vec![
        "--concurrency",
        "1,8",
        "--slo",
        "sessions_meeting_slo:0.9",
        "--find-max",
        "--find-max-resolution",
        "2",
    ];
    flags.extend(session_slo);
    let r = sweep(&sim.url(), work.path(), &flags);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let found = json(&work.path().join("sweep/sweep.json"))["slo"]["find_max"].clone();
    let mut points: Vec<u64> = found["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    points.sort_unstable();

    // The same points as a plain sweep, judged here.
    let manual = tempfile::tempdir().unwrap();
    let list = points
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut flags = vec!["--concurrency", list.as_str()];
    flags.extend(session_slo);
    let r = sweep(&sim.url(), manual.path(), &flags);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let meets = |n: u64| {
        let summary = json(
            &manual
                .path()
                .join(format!("sweep/conc_{n}/run_summary.json")),
        );
        let sessions = &summary["summary"]["session_slo"];
        sessions["meeting_fraction"].as_f64().unwrap() >= 0.9
    };
    let first_failing = points.iter().copied().find(|&n| !meets(n));
    let answer = points
        .iter()
        .copied()
        .filter(|&n| first_failing.is_none_or(|fail| n < fail))
        .max();
    assert_eq!(found["max_concurrency"].as_u64(), answer, "{found}");
    assert_eq!(found["max_concurrency"], 2, "{found}");
    assert_eq!(
        found["bound_by"],
        serde_json::json!(["sessions_meeting_slo"])
    );
    assert!(found["jobs_per_hour"].as_f64().is_some(), "{found}");
    assert_eq!(
        found["agents_per_gpu"].as_f64(),
        Some(1.0),
        "2 agents on --gpus 2"
    );
}
