//! The server's own account of each request, end to end against the built-in simulator: every
//! record keeps its engine, queue, prefill, admission order and cache truth (which adds up to the
//! prompt tokens the cache did not serve), and the summary splits the time to first token.

use std::collections::HashSet;

use agentx::sim::SimConfig;

use super::support::{tree_run_args, Run, Sim};

#[test]
fn each_record_keeps_the_simulators_account_and_the_summary_splits_the_ttft() {
    let sim = Sim::start(SimConfig::default());
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &[]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    let answered: Vec<_> = records.iter().filter(|rec| rec.error.is_none()).collect();
    assert!(!answered.is_empty());
    let mut admitted = HashSet::new();
    for rec in &answered {
        let server = rec.server.as_ref().expect("the simulator's headers");
        assert!(
            server.worker.is_some() && server.queue_ns.is_some() && server.prefill_ns.is_some()
        );
        assert!(
            admitted.insert(server.admit_seq.expect("an admission order")),
            "unique"
        );
        let truth = server.truth.expect("the miss truth");
        let prompt = rec.usage.prompt_tokens.unwrap();
        let cached = rec.usage.cached_tokens.unwrap_or(0);
        assert_eq!(
            truth.cold + truth.capacity + truth.routing,
            prompt - cached,
            "{}",
            rec.request_id
        );
    }
    let summary = run.json("run_summary.json")["summary"].clone();
    let split = &summary["ttft_breakdown_ms"];
    let ok = summary["requests_ok"].as_u64().unwrap();
    for part in ["queue", "prefill", "server_other", "client"] {
        assert_eq!(split[part]["count"].as_u64(), Some(ok), "{part}: {split}");
    }
    // The parts of the server's TTFT fit inside it.
    assert!(
        split["prefill"]["p50"].as_f64().unwrap() <= summary["ttft_ms"]["max"].as_f64().unwrap()
    );
    assert!(
        run.stdout().contains("ttft split    p50 queue"),
        "{}",
        run.stdout()
    );
}

#[test]
fn server_timing_is_sent_and_under_the_harness_wire_marks_the_run() {
    let sim = Sim::start(SimConfig::default());
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--server-timing"]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let manifest = run.json("run_manifest.json");
    assert_eq!(
        manifest["replay_settings"]["server-timing"]["value"], true,
        "{}",
        manifest["replay_settings"]
    );
    let reasons = run.json("run_summary.json")["submission_invalid_reasons"].clone();
    assert!(
        reasons
            .as_array()
            .unwrap()
            .iter()
            .any(|reason| reason == "server_timing_not_harness"),
        "{reasons}"
    );
}
