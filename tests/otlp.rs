//! `--otlp-endpoint` and `--trace-context` end to end: a session-tree run with subagents against the
//! built-in simulator exports one span per request record and one per stream to a receiver built in
//! the test, with the tree as parents, and the simulator saw the same trace ids in `traceparent`;
//! under the default scenario (the harness's wire) no `traceparent` is sent unless asked for; a bad
//! endpoint is refused before any request; a collector that is down costs the run nothing but the
//! spans, counted.

use std::collections::{HashMap, HashSet};

use agentx::protocol::trace_context::{hex, request_span_id, stream_span_id, trace_id};
use agentx::sim::SimConfig;
use agentx::telemetry::testkit::Receiver;

use super::support::{recording_sim, tree_run_args, Run, Sim};

/// A receiver on its own runtime, kept alive for the test.
fn receiver() -> (tokio::runtime::Runtime, Receiver) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let receiver = runtime.block_on(Receiver::start());
    (runtime, receiver)
}

#[test]
fn a_tree_run_exports_a_span_per_request_and_per_stream_joined_to_the_traceparent_sent() {
    let sim = recording_sim();
    let (_runtime, collector) = receiver();
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(
            &sim.url(),
            &["--otlp-endpoint", &collector.url, "--trace-context"],
        ),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    let streams: HashSet<&str> = records.iter().map(|r| r.correlation_id.as_str()).collect();
    let spans = collector.spans();
    assert_eq!(spans.len(), records.len() + streams.len());
    let by_id: HashMap<Vec<u8>, &_> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
    assert_eq!(by_id.len(), spans.len(), "span ids are unique");

    // Each request's span: under its stream's span, in its tree's trace.
    for record in &records {
        let span = by_id[&request_span_id(&record.request_id).to_vec()];
        assert_eq!(
            span.parent_span_id,
            stream_span_id(&record.correlation_id).to_vec()
        );
        let root = record
            .tree
            .as_ref()
            .map_or(record.correlation_id.as_str(), |t| {
                t.root_correlation_id.as_str()
            });
        assert_eq!(span.trace_id, trace_id(root).to_vec());
        let phase = span
            .attributes
            .iter()
            .find(|kv| kv.key == "agentx.phase")
            .unwrap();
        assert!(format!("{:?}", phase.value).contains(record.phase.as_str()));
    }
    // A subagent stream's span hangs under the stream that spawned it.
    let children: Vec<_> = records
        .iter()
        .filter_map(|r| {
            r.tree
                .as_ref()
                .and_then(|t| t.parent_correlation_id.as_deref())
                .map(|p| (r, p))
        })
        .collect();
    assert!(!children.is_empty(), "the fixture has subagents");
    for (record, parent) in children {
        let span = by_id[&stream_span_id(&record.correlation_id).to_vec()];
        assert_eq!(span.parent_span_id, stream_span_id(parent).to_vec());
    }

    // The simulator saw each request's traceparent: its trace and its span.
    let received = sim.received();
    let sent: Vec<&str> = received
        .iter()
        .filter_map(|r| r.header("traceparent"))
        .collect();
    assert_eq!(sent.len(), received.len(), "every request carried one");
    for record in &records {
        let root = record
            .tree
            .as_ref()
            .map_or(record.correlation_id.as_str(), |t| {
                t.root_correlation_id.as_str()
            });
        let header = format!(
            "00-{}-{}-01",
            hex(&trace_id(root)),
            hex(&request_span_id(&record.request_id))
        );
        let got = received
            .iter()
            .find(|r| r.header("x-request-id") == Some(record.request_id.as_str()))
            .and_then(|r| r.header("traceparent"));
        assert_eq!(got, Some(header.as_str()), "{record:?}");
    }

    let manifest = run.json("run_manifest.json");
    assert_eq!(manifest["http"]["trace_context"], true);
    assert_eq!(manifest["otlp"]["spans_sent"], spans.len() as u64);
    assert_eq!(manifest["otlp"]["spans_dropped"], 0);
}

#[test]
fn the_harness_wire_sends_no_traceparent_unless_asked_and_other_scenarios_do() {
    let sim = Sim::start(SimConfig::default());
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &[]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(sim
        .received()
        .iter()
        .all(|r| r.header("traceparent").is_none()));
    assert_eq!(
        run.json("run_manifest.json")["http"]["trace_context"],
        false
    );

    // agentx-v1 (aiperf's session trees, not the harness's wire): on by default.
    let other = recording_sim();
    let mut args = tree_run_args(&other.url(), &[]);
    args.insert(1, "agentx-v1".into());
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(other
        .received()
        .iter()
        .all(|r| r.header("traceparent").is_some()));
    assert_eq!(run.json("run_manifest.json")["http"]["trace_context"], true);
}

#[test]
fn a_bad_endpoint_is_refused_before_any_request_and_a_dead_one_costs_only_spans() {
    let sim = Sim::start(SimConfig::default());
    let bad = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--otlp-endpoint", "collector:4318"]),
        &[],
    );
    assert_eq!(bad.code(), 2, "{}", bad.stderr());
    assert!(
        bad.stderr().contains("--otlp-endpoint \"collector:4318\""),
        "{}",
        bad.stderr()
    );
    assert_eq!(sim.requests(), 0);
    assert!(
        !bad.dir.path().join("artifacts").exists(),
        "nothing written"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--otlp-endpoint", &dead]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let otlp = &run.json("run_manifest.json")["otlp"];
    assert_eq!(otlp["spans_sent"], 0);
    assert!(otlp["spans_dropped"].as_u64().unwrap() > 0, "{otlp}");
    assert!(run.stderr().contains("spans dropped"), "{}", run.stderr());
}
