//! `agentx-host timeline`: a session-tree run with subagents against the built-in simulator, written
//! as trace events and checked for structure (every track's slices nest, every flow begins and ends,
//! phase edges in order) and counted exactly against the run's records and server-metrics journal.

use std::collections::{BTreeMap, HashMap};

use agentx::client::scrape_journal::{read_journal, SCRAPE_JOURNAL};
use agentx::sim::SimConfig;
use serde_json::Value;

use super::support::{tree_run_args, Run, Sim};

/// A slice as (start, end, name), in microseconds.
type Slice = (f64, f64, String);

/// Slices of one track: each pair either nests or is disjoint.
fn assert_nested(track: &str, mut slices: Vec<Slice>) {
    // Longer first at equal starts, so a parent comes before what it holds.
    slices.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut open: Vec<Slice> = Vec::new();
    for slice in slices {
        // Times are microseconds with nanosecond decimals: a sum of two may be off in the last bit.
        while open.last().is_some_and(|top| top.1 <= slice.0 + 1e-3) {
            open.pop();
        }
        if let Some(top) = open.last() {
            assert!(
                slice.1 <= top.1 + 1e-3,
                "{track}: {} [{}, {}] overlaps {} [{}, {}] without nesting",
                slice.2,
                slice.0,
                slice.1,
                top.2,
                top.0,
                top.1
            );
        }
        open.push(slice);
    }
}

#[test]
fn a_tree_run_with_subagents_is_a_well_formed_trace_counted_against_its_records() {
    let sim = Sim::start(SimConfig::default());
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--timeline"]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let dir = run.artifacts();
    // The run wrote its trace from what it held; the command writes the same from the files.
    let again = dir.join("again.json");
    let out = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "timeline",
            dir.to_str().unwrap(),
            "-o",
            again.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr());
    assert!(out.stderr().contains("again.json:"), "{}", out.stderr());
    let written = std::fs::read(dir.join("trace.json")).unwrap();
    assert!(
        written == std::fs::read(&again).unwrap(),
        "the run's trace.json and the command's differ"
    );
    let trace: Value = serde_json::from_slice(&written).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let records = run.records();
    let journal = read_journal(&dir.join(SCRAPE_JOURNAL)).unwrap();

    // Every record is exactly one request slice, on its lane's process.
    let requests: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"]["request_id"].is_string())
        .collect();
    assert_eq!(requests.len(), records.len());
    let by_id: HashMap<&str, &Value> = requests
        .iter()
        .map(|e| (e["args"]["request_id"].as_str().unwrap(), *e))
        .collect();
    for record in &records {
        let slice = by_id[record.request_id.as_str()];
        assert_eq!(slice["pid"], record.lane + 1);
        assert_eq!(slice["ts"].as_f64().unwrap(), record.send_ns as f64 / 1e3);
        assert_eq!(slice["cat"], record.phase.as_str());
    }
    // Nested phases: headers for each record with response headers, ttft and decode for each with
    // a first token.
    let count = |name: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == name)
            .count()
    };
    let with_headers = records.iter().filter(|r| r.first_byte_ns.is_some()).count();
    let with_token = records
        .iter()
        .filter(|r| r.first_token_ns.is_some())
        .count();
    assert_eq!(count("headers"), with_headers);
    assert_eq!((count("ttft"), count("decode")), (with_token, with_token));

    // Every track's slices nest.
    let mut tracks: BTreeMap<(u64, u64), Vec<Slice>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let start = e["ts"].as_f64().unwrap();
        let end = start + e["dur"].as_f64().unwrap();
        assert!(end >= start, "{e}");
        tracks
            .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
            .or_default()
            .push((start, end, e["name"].as_str().unwrap().to_owned()));
    }
    for ((pid, tid), slices) in tracks {
        assert_nested(&format!("pid {pid} tid {tid}"), slices);
    }

    // Flows: one start and one finish per id, the finish not before the start; one spawn per
    // subagent stream (each child's parent had a request before it).
    let mut flows: HashMap<u64, Vec<&Value>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
        flows.entry(e["id"].as_u64().unwrap()).or_default().push(e);
    }
    for (id, pair) in &flows {
        assert_eq!(pair.len(), 2, "flow {id}: {pair:?}");
        let (start, finish) = if pair[0]["ph"] == "s" {
            (pair[0], pair[1])
        } else {
            (pair[1], pair[0])
        };
        assert_eq!(
            (start["ph"].as_str(), finish["ph"].as_str()),
            (Some("s"), Some("f"))
        );
        assert!(finish["ts"].as_f64() >= start["ts"].as_f64(), "flow {id}");
    }
    // One spawn per subagent stream whose parent had a request end before the stream's first send
    // (a lane that starts at t* partway through a tree finds children already running).
    let mut first_send: HashMap<&str, (u64, &str)> = HashMap::new();
    for record in &records {
        if let Some(parent) = record
            .tree
            .as_ref()
            .and_then(|t| t.parent_correlation_id.as_deref())
        {
            let entry = first_send
                .entry(record.correlation_id.as_str())
                .or_insert((u64::MAX, parent));
            entry.0 = entry.0.min(record.send_ns);
        }
    }
    assert!(!first_send.is_empty(), "the fixture has subagents");
    let spawned = first_send
        .values()
        .filter(|(send, parent)| {
            records
                .iter()
                .any(|r| r.correlation_id == *parent && r.end_ns <= *send)
        })
        .count();
    assert!(spawned > 0);
    let spawns = flows
        .values()
        .filter(|pair| pair[0]["name"] == "spawn")
        .count();
    assert_eq!(spawns, spawned);

    // Counters: one sample per successful scrape and gauge the server exports (the simulator
    // exports running, waiting and KV usage).
    let scrapes: usize = journal.endpoints.iter().map(|e| e.scrape_ns.len()).sum();
    assert!(scrapes > 0);
    let samples = events.iter().filter(|e| e["ph"] == "C").count();
    assert_eq!(samples, 3 * scrapes);

    // Phase edges: global instants in time order, profiling's start before its completion.
    let edges: Vec<(&str, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "i")
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap()))
        .collect();
    assert!(edges.windows(2).all(|w| w[0].1 <= w[1].1), "{edges:?}");
    let at = |name: &str| edges.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
    assert!(
        at("profiling_start") < at("profiling_complete"),
        "{edges:?}"
    );
}

#[test]
fn a_killed_runs_torn_records_and_a_missing_journal_are_said_not_fatal() {
    let sim = Sim::start(SimConfig::default());
    let run = Run::exec(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &["--no-server-metrics"]),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let dir = run.artifacts();
    let recorded = run.records().len();
    // A kill mid-write: half a line at the end.
    let records = dir.join("records.jsonl");
    let mut text = std::fs::read_to_string(&records).unwrap();
    text.push_str("{\"request_id\":\"cut-");
    std::fs::write(&records, text).unwrap();
    let out_file = dir.join("elsewhere.json");
    let out = Run::exec(
        tempfile::tempdir().unwrap(),
        &[
            "timeline",
            dir.to_str().unwrap(),
            "-o",
            out_file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code(), 0, "{}", out.stderr());
    let stderr = out.stderr();
    assert!(stderr.contains("torn last line"), "{stderr}");
    assert!(stderr.contains("no server metrics"), "{stderr}");
    let trace: Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let requests = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["args"]["request_id"].is_string())
        .count();
    assert_eq!(requests, recorded);
}

#[test]
fn a_directory_that_is_not_a_run_is_refused_with_what_to_name() {
    let empty = tempfile::tempdir().unwrap();
    let out = Run::exec(
        tempfile::tempdir().unwrap(),
        &["timeline", empty.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(out.code(), 2);
    assert!(out.stderr().contains("nothing to draw"), "{}", out.stderr());
}
