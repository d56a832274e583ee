//! `--goodput`: the objectives a good request meets, judged per request on a real run against the
//! simulator, and the figures in the exports, the summary, the printed summary and the page.

use std::time::Duration;

use agentx::sim::{SimConfig, Timing};
use serde_json::Value;

use crate::support::{fixture_args, Run, Sim};

/// A short run at fixed timing (TTFT 20 ms, 4 ms per token: the median answer of the fixture corpus, 181 tokens, takes about 740 ms), with `extra` flags.
fn run_with(extra: &[&str]) -> Run {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(4),
    };
    let sim = Sim::start(cfg);
    let mut args = fixture_args("run", &sim.url());
    args.extend(["--concurrency", "3", "--benchmark-duration", "3"].map(String::from));
    args.extend(extra.iter().map(std::string::ToString::to_string));
    Run::in_process(tempfile::tempdir().unwrap(), &args, &[])
}

#[test]
fn goodput_is_judged_per_request_and_reported_where_aiperf_puts_it() {
    // A latency bound that splits the requests: short answers meet it, long ones do not.
    let r = run_with(&["--goodput", "ttft:1000 e2el:750", "--ignore-trace-delays"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let records = r.records();
    let prof: Vec<_> = records
        .iter()
        .filter(|x| x.phase == agentx::record::Phase::Profiling && !x.context_overflow)
        .collect();
    let ok = |x: &&&agentx::record::RequestRecord| x.error.is_none() && !x.cancelled;
    let good = prof
        .iter()
        .filter(ok)
        .filter(|x| x.latency_ns().is_some_and(|l| l as f64 / 1e6 <= 750.0))
        .filter(|x| x.ttft_ns().is_some_and(|t| t as f64 / 1e6 <= 1000.0))
        .count();
    assert!(good > 0 && good < prof.len(), "{good} of {}", prof.len());

    let agg = r.json("profile_export_aiperf.json");
    assert_eq!(agg["good_request_count"]["avg"], good as f64);
    assert_eq!(agg["good_request_count"]["unit"], "requests");
    let duration = agg["benchmark_duration"]["avg"].as_f64().unwrap();
    let goodput = agg["goodput"]["avg"].as_f64().unwrap();
    assert!((goodput - good as f64 / duration).abs() < 1e-9, "{goodput}");
    assert_eq!(agg["goodput"]["unit"], "requests/sec");
    let fraction = agg["good_request_fraction"]["avg"].as_f64().unwrap();
    assert!((fraction - good as f64 / prof.len() as f64).abs() < 1e-9);

    let s = r.summary();
    assert_eq!(s["summary"]["goodput"]["good_request_count"], good);
    let csv = std::fs::read_to_string(r.artifacts().join("profile_export_aiperf.csv")).unwrap();
    assert!(
        csv.contains(&format!("\nGood Request Count,{good}\n")),
        "{csv}"
    );
    assert!(r.stdout().contains("goodput "), "{}", r.stdout());
    let html = std::fs::read_to_string(r.artifacts().join("report.html")).unwrap();
    assert!(html.contains("goodput (good requests/s)"));
    // Sessions: each good when every request of it is good (the default share), and each with
    // its slowdown against the recorded trace (delays ignored here, so faster than recorded).
    let x = &s["summary"]["sessions"];
    let sessions: std::collections::HashSet<&str> =
        prof.iter().map(|r| r.correlation_id.as_str()).collect();
    assert_eq!(x["sessions"], sessions.len(), "{x}");
    assert_eq!(x["share"], 1.0);
    assert!(x["good_sessions"].as_u64().unwrap() <= sessions.len() as u64);
    assert!(x["slowdown"]["count"].as_u64().unwrap() > 0, "{x}");
    assert!(x["slowdown"]["p50"].as_f64().unwrap() > 0.0, "{x}");
    assert!(r.stdout().contains("sessions "), "{}", r.stdout());
    let manifest = r.json("run_manifest.json");
    assert_eq!(
        manifest["goodput"],
        "time_to_first_token:1000 request_latency:750"
    );
}

#[test]
fn without_goodput_the_exports_have_none_of_it() {
    let r = run_with(&[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let agg = r.json("profile_export_aiperf.json");
    for k in ["good_request_count", "goodput", "good_request_fraction"] {
        assert_eq!(agg.get(k), None, "{k}");
    }
    assert_eq!(r.summary()["summary"].get("goodput"), None::<&Value>);
    assert_eq!(r.summary()["summary"].get("sessions"), None::<&Value>);
    assert_eq!(r.json("run_manifest.json").get("goodput"), None::<&Value>);
}

#[test]
fn an_unknown_objective_lists_the_known_metrics() {
    let r = run_with(&["--goodput", "time_to_frist_token:5"]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let e = r.stderr();
    assert!(e.contains("--goodput"), "{e}");
    assert!(
        e.contains("known: input_sequence_length, time_to_first_token"),
        "{e}"
    );
}
