//! `--routing-headers`: a session-tree run with subagents sends each profile's headers, exactly,
//! on the requests the table names (checked against what the simulator received, request by
//! request), records the profile in the manifest, and under the harness's wire marks a profile the
//! harness cannot send; a bad profile is refused before anything runs.

use std::collections::HashMap;

use agentx::sim::{Received, SimConfig};

use super::support::{recording_sim, tree_run_args, Run, Sim};

/// What the simulator received, by each request's `X-Request-ID`.
fn by_request_id(received: &[Received]) -> HashMap<&str, &Received> {
    received
        .iter()
        .filter_map(|request| Some((request.header("x-request-id")?, request)))
        .collect()
}

#[test]
fn dynamo_headers_go_on_the_requests_the_table_names() {
    let sim = recording_sim();
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--routing-headers", "dynamo"]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    let received = sim.received();
    let by_request = by_request_id(&received);
    let (mut children, mut finals) = (0, 0);
    for record in &records {
        let request = by_request[record.request_id.as_str()];
        let tree = record.tree.as_ref().expect("a session-tree record");
        assert_eq!(
            request.header("x-correlation-id"),
            Some(record.correlation_id.as_str())
        );
        assert_eq!(
            request.header("x-dynamo-session-id"),
            Some(record.correlation_id.as_str())
        );
        assert_eq!(
            request.header("x-dynamo-parent-session-id"),
            tree.parent_correlation_id.as_deref(),
            "{}",
            record.request_id
        );
        let last = record.turn + 1 >= record.num_turns;
        assert_eq!(
            request.header("x-dynamo-session-final"),
            last.then_some("true"),
            "{} turn {} of {}",
            record.request_id,
            record.turn,
            record.num_turns
        );
        // The profile replaces the switches: no X-Session-Affinity, although on by default.
        assert_eq!(request.header("x-session-affinity"), None);
        children += usize::from(tree.parent_correlation_id.is_some());
        finals += usize::from(last);
    }
    assert!(
        children > 0 && finals > 0,
        "the run had subagents and final turns"
    );
    let manifest = run.json("run_manifest.json");
    assert_eq!(
        manifest["replay_settings"]["routing-headers"]["value"], "dynamo",
        "{}",
        manifest["replay_settings"]
    );
    assert_eq!(
        manifest["http"]["session_headers"],
        serde_json::json!([
            "X-Dynamo-Session-ID",
            "X-Dynamo-Parent-Session-ID",
            "X-Dynamo-Session-Final"
        ])
    );
    assert_eq!(manifest["http"]["routing_profile"], "dynamo");
    // The default scenario keeps the harness's wire, which has no X-Dynamo-Session-Final.
    let summary = run.json("run_summary.json");
    // The summary names what was sent, as the manifest does.
    assert_eq!(summary["http"], manifest["http"]);
    assert!(
        summary["submission_invalid_reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|reason| reason == "routing_headers_not_harness"),
        "{summary}"
    );
    assert!(
        run.stderr().contains("sends no X-Dynamo-Session-Final"),
        "{}",
        run.stderr()
    );
}

#[test]
fn claude_code_headers_carry_the_root_session_and_the_agent_ids() {
    let sim = recording_sim();
    let mut args = tree_run_args(&sim.url(), &["--routing-headers", "claude-code"]);
    // agentx-v1: aiperf's session trees, whose wire is not the harness's.
    args.insert(1, "agentx-v1".into());
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let received = sim.received();
    let by_request = by_request_id(&received);
    for record in run.records() {
        let request = by_request[record.request_id.as_str()];
        let tree = record.tree.as_ref().expect("a session-tree record");
        assert_eq!(
            request.header("x-claude-code-session-id"),
            Some(tree.root_correlation_id.as_str())
        );
        let child = tree.parent_correlation_id.is_some();
        assert_eq!(
            request.header("x-claude-code-agent-id"),
            child.then_some(record.correlation_id.as_str())
        );
        let nested = tree
            .parent_correlation_id
            .as_deref()
            .filter(|parent| *parent != tree.root_correlation_id);
        assert_eq!(request.header("x-claude-code-parent-agent-id"), nested);
    }
    let summary = run.json("run_summary.json");
    assert!(!summary["submission_invalid_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|reason| reason == "routing_headers_not_harness"));
}

#[test]
fn a_bad_profile_is_refused_naming_the_choices() {
    let sim = recording_sim();
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--routing-headers", "dynamo-v2"]),
        &[],
    );
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("dynamo, smg, session-id, claude-code, codex, none")
            && run.stderr().contains("custom:NAME"),
        "{}",
        run.stderr()
    );
    assert_eq!(sim.received().len(), 0);
}

/// The summary's `routing` block of a tree run against a four-engine simulator routed by `router`,
/// with Dynamo's headers sent, and the tree run's flags changed as `flags` says.
fn routing_seen(router: agentx::sim::Router, flags: &[(&str, &str)]) -> serde_json::Value {
    let sim = Sim::start(SimConfig {
        engines: 4,
        router,
        ..SimConfig::default()
    });
    let mut args = tree_run_args(&sim.url(), &["--routing-headers", "dynamo"]);
    for (flag, value) in flags {
        let at = args
            .iter()
            .position(|arg| arg == flag)
            .expect("the tree run sets the flag");
        (*value).clone_into(&mut args[at + 1]);
    }
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(
        run.stdout().contains("sessions stayed on one worker"),
        "{}",
        run.stdout()
    );
    run.json("run_summary.json")["summary"]["routing"].clone()
}

#[test]
fn session_routing_keeps_each_tree_on_one_worker_and_round_robin_does_not() {
    // By Dynamo's session header, a child bound to its parent's engine: every tree on one worker.
    let pinned = routing_seen(agentx::sim::Router::Session, &[]);
    assert!(pinned["sessions"].as_u64().unwrap() > 0, "{pinned}");
    assert_eq!(
        pinned["sessions_on_one_worker"], pinned["sessions"],
        "{pinned}"
    );
    assert_eq!(pinned["worker_switches"], 0, "{pinned}");
    // Round-robin ignores the headers: a tree's turns spread over the workers. One lane, so that
    // a tree's turns follow each other at the simulator and its counter moves each to the next
    // worker (with four lanes, the other trees' turns could fall between them so that each landed
    // where its last did: a loaded machine's 7 requests of 4 trees had no switch), and a window
    // long enough for a tree's two turns on a loaded machine.
    let one_lane = [("--concurrency", "1"), ("--benchmark-duration", "12")];
    let spread = routing_seen(agentx::sim::Router::RoundRobin, &one_lane);
    assert!(spread["workers"].as_u64().unwrap() > 1, "{spread}");
    assert!(spread["worker_switches"].as_u64().unwrap() > 0, "{spread}");
}
