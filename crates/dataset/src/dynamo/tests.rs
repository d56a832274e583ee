//! Parsing, lowering and refusals of both Dynamo formats, on inline corpora and the fixtures.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::*;
use crate::format::Format;
use crate::tree::{build, TreeOptions};
use crate::weka::SubagentJoin;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(name)
}

fn scan_file(
    path: &Path,
    format: Format,
    block: Option<u32>,
) -> Result<Vec<ParsedTrace>, DatasetError> {
    let spec = FormatSpec::resolve_with(format, block, |_| None)?;
    let mut out = Vec::new();
    let collect = |t| {
        out.push(t);
        Ok(ControlFlow::Continue(()))
    };
    match format {
        Format::Dynamo => scan_request_trace(path, &spec, collect)?,
        _ => scan_agentic_mooncake(path, &spec, collect)?,
    };
    Ok(out)
}

/// `lines` written to `name` in a temporary directory and read as `format`.
fn scan_text(format: Format, lines: &[String]) -> Result<Vec<ParsedTrace>, DatasetError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    scan_file(&path, format, None)
}

fn err(format: Format, lines: &[String]) -> String {
    scan_text(format, lines).unwrap_err().to_string()
}

/// A `request_end` line: (id, session, parent, start, end, input length, hashes), block size 2.
fn req(
    id: &str,
    session: &str,
    parent: Option<&str>,
    start: u64,
    end: u64,
    input: u64,
    hashes: &[u64],
) -> String {
    let mut ctx = serde_json::json!({"session_id": session});
    if let Some(p) = parent {
        ctx["parent_session_id"] = p.into();
    }
    serde_json::json!({
        "schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": end,
        "agent_context": ctx,
        "request": {"request_id": id, "request_received_ms": start, "output_tokens": 4,
                    "replay": {"trace_block_size": 2, "input_length": input, "input_sequence_hashes": hashes}}
    })
    .to_string()
}

/// A `tool_end` line of `session` with Claude metadata `claude`.
fn claude_tool(session: &str, start: u64, end: u64, claude: &serde_json::Value) -> String {
    serde_json::json!({
        "schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": end,
        "agent_context": {"session_id": session},
        "tool": {"tool_call_id": "t1", "tool_class": "Task", "started_at_unix_ms": start,
                 "ended_at_unix_ms": end, "claude": claude}
    })
    .to_string()
}

/// The spec's minimal example (section 9): c1 waits for p1 (spawn), p2 for p1 and c1 (join).
fn minimal() -> Vec<String> {
    vec![
        req("p1", "run:root", None, 1000, 1100, 3, &[11, 22]),
        req("c1", "run:child", Some("run:root"), 1200, 1300, 2, &[33]),
        req("p2", "run:root", None, 1500, 1600, 4, &[11, 44]),
    ]
}

#[test]
fn the_minimal_example_nests_its_child_between_spawn_and_join() {
    let traces = scan_text(Format::Dynamo, &minimal()).unwrap();
    assert_eq!(traces.len(), 1);
    let t = &traces[0];
    assert_eq!(
        (t.id.as_str(), t.block_size, t.subagents),
        ("run:root", 2, 1)
    );
    assert!(t.explicit_sessions);
    let outer: Vec<u32> = t.requests.iter().map(|r| r.index).collect();
    assert_eq!(outer, [0, 2]);
    // Rolling hashes numbered in first-seen order: 11, 22, 33, 44.
    assert_eq!(t.requests[0].hash_ids, [0, 1]);
    assert_eq!(t.requests[1].hash_ids, [0, 3]);
    assert_eq!((t.requests[0].t, t.requests[1].t), (0.0, 0.5));
    assert_eq!(t.requests[0].api_time, Some(0.1));
    // p2's gap after its latest dependency (c1, ending at 1300): 200 ms.
    assert_eq!(t.requests[1].think_time, Some(0.2));
    let child = &t.subagent_entries[0];
    assert_eq!(child.index, 1);
    assert_eq!(child.agent_id.as_deref(), Some("run:child"));
    // Marked at the spawning request's end; the child starts 100 ms later.
    assert_eq!((child.t, child.requests[0].t), (0.1, 0.2));
    assert_eq!(child.requests[0].think_time, Some(0.1));
    assert_eq!(child.requests[0].hash_ids, [2]);
    assert_eq!(child.join, SubagentJoin::At(2));

    let tree = build(t, &TreeOptions::default()).unwrap();
    assert_eq!(tree.streams.len(), 2);
    assert_eq!(tree.streams[1].id, "run:root::sa:run:child");
    assert_eq!(tree.streams[1].parent, Some(0));
    assert_eq!(tree.branches.len(), 1);
    assert_eq!(
        (tree.branches[0].spawn_turn, tree.branches[0].join_turn),
        (0, Some(1))
    );
    assert_eq!(tree.branches[0].start_timestamp_ms, 100.0);
    // The turn after the spawn waits its recorded end-to-start gap.
    assert_eq!(tree.streams[0].turns[1].delay_ms, Some(400.0));
}

#[test]
fn claude_metadata_names_spawn_and_join_exactly_and_background_has_none() {
    let lines = vec![
        req("p1", "r", None, 1000, 1100, 2, &[1]),
        req("p2", "r", None, 1150, 1200, 2, &[2]),
        req("c1", "c", Some("r"), 1250, 1300, 2, &[3]),
        req("p3", "r", None, 1400, 1500, 2, &[4]),
        req("p4", "r", None, 1600, 1700, 2, &[5]),
        req("b1", "bg", Some("r"), 1750, 1800, 2, &[6]),
        req("p5", "r", None, 1900, 2000, 2, &[7]),
        // Spawned by p1 (not p2, the latest before it), consumed by p4 (not p3, the first after it).
        claude_tool(
            "r",
            1100,
            1350,
            &serde_json::json!({"source_request_id": "p1",
            "consumer_request_id": "p4", "child_session_id": "c", "execution_mode": "blocking"}),
        ),
        claude_tool(
            "r",
            1700,
            1700,
            &serde_json::json!({"source_request_id": "p4",
            "child_session_id": "bg", "execution_mode": "background"}),
        ),
    ];
    let t = &scan_text(Format::Dynamo, &lines).unwrap()[0];
    let entries: Vec<(u32, SubagentJoin)> = t
        .subagent_entries
        .iter()
        .map(|e| (e.index, e.join))
        .collect();
    // Outer order: p1, c, p2, p3, p4, bg, p5.
    assert_eq!(
        entries,
        [(1, SubagentJoin::At(4)), (5, SubagentJoin::Background)]
    );
    let tree = build(t, &TreeOptions::default()).unwrap();
    let branches: Vec<(usize, Option<usize>)> = tree
        .branches
        .iter()
        .map(|b| (b.spawn_turn, b.join_turn))
        .collect();
    assert_eq!(branches, [(0, Some(3)), (3, None)]);
}

#[test]
fn sessions_without_context_are_single_requests_and_a_mix_is_refused() {
    let plain = |id: &str, start: u64| {
        serde_json::json!({"schema": "dynamo.request.trace.v1", "event_type": "request_end",
            "event_time_unix_ms": start + 50, "request": {"request_id": id, "request_received_ms": start,
            "output_tokens": 3, "replay": {"trace_block_size": 2, "input_length": 3,
            "input_sequence_hashes": [9, 8]}}})
        .to_string()
    };
    let traces = scan_text(Format::Dynamo, &[plain("a", 10), plain("b", 20)]).unwrap();
    let ids: Vec<&str> = traces.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    assert_eq!(
        traces[1].requests[0].hash_ids,
        [0, 1],
        "one id space for the corpus"
    );
    let e = err(
        Format::Dynamo,
        &[plain("a", 10), req("p1", "s", None, 30, 40, 2, &[1])],
    );
    assert!(
        e.contains("t.jsonl:1: agent_context: Dynamo request trace cannot mix"),
        "{e}"
    );
}

#[test]
fn wrapped_records_and_multi_member_gzip_read_as_plain_lines() {
    let lines = minimal();
    let wrapped = format!(
        "{{\"timestamp\":\"2026-01-01T00:00:00Z\",\"event\":{}}}",
        lines[1]
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl.gz");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [vec![lines[0].clone(), wrapped], vec![lines[2].clone()]] {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all((chunk.join("\n") + "\n").as_bytes()).unwrap();
        file.write_all(&gz.finish().unwrap()).unwrap();
    }
    drop(file);
    let files = crate::weka::SourceFiles::Jsonl(path.clone());
    assert_eq!(crate::format::detect(&files).unwrap(), Format::Dynamo);
    let gz = scan_file(&path, Format::Dynamo, None).unwrap();
    assert_eq!(
        gz,
        scan_text(Format::Dynamo, &minimal())
            .unwrap()
            .into_iter()
            .map(|mut t| {
                t.location.file = path.clone();
                t
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn every_refusal_names_line_and_field() {
    let good = req("p1", "s", None, 1000, 1100, 3, &[1, 2]);
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        f(&mut v);
        vec![req("p0", "s", None, 900, 950, 2, &[7]), v.to_string()]
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            with(&|v| v["schema"] = "dynamo.request.trace.v2".into()),
            ":2: schema: unknown variant",
        ),
        (
            with(&|v| v["event_type"] = "request_start".into()),
            ":2: event_type: \"request_start\"",
        ),
        (
            with(&|v| {
                v.as_object_mut().unwrap().remove("request");
            }),
            ":2: request: missing request payload",
        ),
        (
            with(&|v| {
                v["request"].as_object_mut().unwrap().remove("replay");
            }),
            ":2: request.replay: missing replay metrics",
        ),
        (
            with(&|v| {
                v["request"]
                    .as_object_mut()
                    .unwrap()
                    .remove("request_received_ms");
            }),
            ":2: request.request_received_ms: missing",
        ),
        (
            with(&|v| {
                v["request"]
                    .as_object_mut()
                    .unwrap()
                    .remove("output_tokens");
            }),
            ":2: request.output_tokens: missing",
        ),
        (
            with(&|v| {
                v.as_object_mut().unwrap().remove("event_time_unix_ms");
            }),
            ":2: event_time_unix_ms: missing",
        ),
        (
            with(&|v| v["request"]["replay"]["input_length"] = 5.into()),
            "requires exactly 3 replay hashes, got 2",
        ),
        (
            with(&|v| v["request"]["replay"]["trace_block_size"] = 0.into()),
            ":2: request.replay.trace_block_size: is 0",
        ),
        (
            with(&|v| {
                v["request"]["replay"]["trace_block_size"] = 3.into();
                v["request"]["replay"]["input_length"] = 6.into();
            }),
            ":2: request.replay.trace_block_size: mixed replay trace_block_size",
        ),
        (
            with(&|v| {
                v["request"]["replay"]["completion_sequence_hashes"] =
                    serde_json::json!([9, 9, 5, 6]);
            }),
            ":2: request.replay.completion_sequence_hashes",
        ),
        (
            with(&|v| v["request"]["request_id"] = "p0".into()),
            ":2: request.request_id: duplicate request_id",
        ),
        (
            vec![
                req("c0", "s", Some("y"), 900, 950, 2, &[7]),
                req("c1", "s", Some("x"), 1000, 1100, 2, &[8]),
            ],
            ":2: agent_context.parent_session_id: session \"s\" has conflicting",
        ),
    ];
    for (lines, want) in cases {
        let e = err(Format::Dynamo, &lines);
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    let empty = err(Format::Dynamo, &["{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"tool_start\",\"event_time_unix_ms\":1}".into()]);
    assert!(empty.contains("no request_end records"), "{empty}");
}

#[test]
fn bad_claude_metadata_and_cycles_are_refused() {
    let mut base = minimal();
    let tool = |claude: serde_json::Value| claude_tool("run:root", 1100, 1150, &claude);
    let cases = [
        (
            tool(serde_json::json!({"source_request_id": "zz", "execution_mode": "blocking"})),
            "tool.claude.source_request_id: tool \"t1\" references unknown request_id \"zz\"",
        ),
        (
            tool(serde_json::json!({"source_request_id": "c1", "execution_mode": "blocking"})),
            "belongs to a different session",
        ),
        (
            tool(serde_json::json!({"source_request_id": "p1", "execution_mode": "later"})),
            "tool.claude.execution_mode: unsupported execution_mode",
        ),
        // p1 waits for c1, whose first request waits for p2: p2 waits for p1. A cycle.
        (
            tool(
                serde_json::json!({"source_request_id": "p2", "consumer_request_id": "p1", "child_session_id": "run:child", "execution_mode": "blocking"}),
            ),
            "contain a cycle",
        ),
    ];
    for (line, want) in cases {
        let mut lines = base.clone();
        lines.push(line);
        let e = err(Format::Dynamo, &lines);
        assert!(e.contains(want), "{want:?} not in {e}");
        assert!(e.contains("t.jsonl:"), "{e}");
    }
    let twice = serde_json::json!({"source_request_id": "p1", "child_session_id": "run:child", "execution_mode": "blocking"});
    base.push(tool(twice.clone()));
    base.push(tool(twice));
    let e = err(Format::Dynamo, &base);
    assert!(
        e.contains(":5: tool.claude.child_session_id: multiple tool events"),
        "{e}"
    );
}

#[test]
fn a_grandchild_session_is_refused_with_its_sessions_and_line() {
    let mut lines = minimal();
    lines.push(req(
        "g1",
        "run:grand",
        Some("run:child"),
        1250,
        1280,
        2,
        &[55],
    ));
    let e = err(Format::Dynamo, &lines);
    assert!(e.contains("t.jsonl:4:"), "{e}");
    assert!(
        e.contains("\"run:grand\"") && e.contains("\"run:child\"") && e.contains("\"run:root\""),
        "{e}"
    );
    assert!(e.contains("nests subagents one level deep"), "{e}");
}

#[test]
fn tools_dynamo_drops_are_warned_and_a_block_size_must_match() {
    let mut lines = minimal();
    let mut loose: serde_json::Value = serde_json::from_str(&claude_tool(
        "run:root",
        1100,
        1150,
        &serde_json::json!({"source_request_id": "p1", "execution_mode": "blocking"}),
    ))
    .unwrap();
    loose.as_object_mut().unwrap().remove("agent_context");
    lines.push(loose.to_string());
    lines.push(claude_tool(
        "run:root",
        1150,
        1100,
        &serde_json::json!({"source_request_id": "p1", "execution_mode": "blocking"}),
    ));
    lines.push("[1, 2]".into());
    let t = &scan_text(Format::Dynamo, &lines).unwrap()[0];
    let places: Vec<(WarningKind, u64)> = t
        .warnings
        .iter()
        .map(|w| (w.kind, w.location.line))
        .collect();
    assert_eq!(
        places,
        [
            (WarningKind::DroppedRecord, 4),
            (WarningKind::DroppedRecord, 5),
            (WarningKind::DroppedRecord, 6)
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, minimal().join("\n")).unwrap();
    let e = scan_file(&path, Format::Dynamo, Some(16))
        .unwrap_err()
        .to_string();
    assert!(e.contains(":1: request.replay.trace_block_size: trace_block_size 16 (--block-size) does not match"), "{e}");
    assert!(scan_file(&path, Format::Dynamo, Some(2)).is_ok());
}

#[test]
fn the_request_trace_fixture_builds_the_recorded_tree() {
    let traces = scan_file(
        &fixture("dynamo-request-trace-10.jsonl"),
        Format::Dynamo,
        None,
    )
    .unwrap();
    let ids: Vec<&str> = traces.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["run-1:lead", "run-2:solo"]);
    assert!(
        traces.iter().all(|t| t.warnings.is_empty()),
        "{:?}",
        traces[0].warnings
    );
    let lead = &traces[0];
    let tree = build(lead, &TreeOptions::default()).unwrap();
    let streams: Vec<(&str, usize)> = tree
        .streams
        .iter()
        .map(|s| (s.id.as_str(), s.turns.len()))
        .collect();
    assert_eq!(
        streams,
        [
            ("run-1:lead", 4),
            ("run-1:lead::sa:run-1:researcher", 2),
            ("run-1:lead::sa:run-1:watcher", 1),
            ("run-1:lead::sa:run-1:tester", 1)
        ]
    );
    let branches: Vec<(usize, Option<usize>, f64)> = tree
        .branches
        .iter()
        .map(|b| (b.spawn_turn, b.join_turn, b.start_timestamp_ms))
        .collect();
    // researcher: Claude source L1, consumer L2; watcher: background from L2; tester: inferred
    // from times (spawned by L3, joined by L4). Each marked at its spawning request's end.
    assert_eq!(
        branches,
        [(0, Some(1), 400.0), (1, None, 1700.0), (2, Some(3), 2300.0)]
    );
    // The shared prefix: L1 and S1 are the same four blocks, in two traces.
    assert_eq!(lead.requests[0].hash_ids, traces[1].requests[0].hash_ids);
    assert_eq!(lead.requests[1].input_types, ["tool_result"]);
    assert_eq!(lead.requests[0].stop, "tool_use");
}

fn v1(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| (*l).to_owned()).collect()
}

#[test]
fn agentic_mooncake_v1_places_rows_after_their_dependencies() {
    let traces = scan_file(
        &fixture("agentic-mooncake-v1-6.jsonl"),
        Format::AgenticMooncake,
        None,
    )
    .unwrap();
    let ids: Vec<&str> = traces.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["plan", "solo"]);
    let plan = &traces[0];
    assert_eq!(plan.block_size, 512);
    // a1 at 0; b1 20 ms after it; b2 210 ms after b1; a2 30 ms after b2; d1 5 ms after a2.
    let times: Vec<f64> = plan.requests.iter().map(|r| r.t).collect();
    assert_eq!(times, [0.0, 0.26]);
    assert_eq!(plan.requests[1].think_time, Some(0.03));
    assert_eq!(plan.requests[0].api_time, None);
    let tree = build(plan, &TreeOptions::default()).unwrap();
    let branches: Vec<(usize, Option<usize>)> = tree
        .branches
        .iter()
        .map(|b| (b.spawn_turn, b.join_turn))
        .collect();
    assert_eq!(branches, [(0, Some(1)), (1, None)]);
    assert_eq!(tree.streams[1].turns[1].delay_ms, Some(210.0));
    assert_eq!(traces[1].requests[0].t, 0.0);

    let v2 = scan_file(
        &fixture("agentic-mooncake-v2-6.jsonl"),
        Format::AgenticMooncake,
        None,
    )
    .unwrap();
    assert_eq!(v2.len(), 2);
    assert_eq!(v2[0].block_size, 256);
    let tree2 = build(&v2[0], &TreeOptions::default()).unwrap();
    let shape = |t: &crate::tree::SessionTree| -> Vec<(usize, Option<usize>)> {
        t.branches
            .iter()
            .map(|b| (b.spawn_turn, b.join_turn))
            .collect()
    };
    assert_eq!(shape(&tree2), shape(&tree));
    let times2: Vec<f64> = v2[0].requests.iter().map(|r| r.t).collect();
    assert_eq!(times2, times);
}

#[test]
fn agentic_mooncake_refusals_name_line_and_field() {
    let root = r#"{"request_id":"r1","session_id":"s","timestamp":0,"input_length":4,"output_length":2,"hash_ids":[0],"prefix_reset":true}"#;
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            v1(&[
                root,
                r#"{"request_id":"r2","session_id":"s","input_length":6,"output_length":2,"wait_for":["r1"],"delay":-1}"#,
            ]),
            ":2: delay: is -1",
        ),
        (
            v1(&[
                root,
                r#"{"request_id":"r2","session_id":"s","input_length":6,"output_length":2,"wait_for":["r1"],"tool_wait_ms":-5}"#,
            ]),
            ":2: tool_wait_ms: is -5",
        ),
        (
            v1(&[
                root,
                r#"{"request_id":"r2","session_id":"s","input_length":6,"output_length":2,"wait_for":["r2"]}"#,
            ]),
            ":2: wait_for[0]: request \"r2\" waits for itself",
        ),
        (
            v1(&[
                root,
                r#"{"request_id":"r2","session_id":"s","input_length":6,"output_length":2,"wait_for":["nope"]}"#,
            ]),
            ":2: wait_for[0]: request \"r2\" depends on unknown request \"nope\"",
        ),
        (
            v1(&[
                root,
                r#"{"session_id":"s","input_length":6,"output_length":2,"wait_for":["r1"]}"#,
            ]),
            ":2: request_id: missing",
        ),
        (
            v1(&[
                root,
                r#"{"request_id":"r1","session_id":"t","timestamp":3,"input_length":6,"output_length":2}"#,
            ]),
            ":2: request_id: duplicate",
        ),
        (
            v1(&[
                root,
                r#"{"request_id":"r2","session_id":"s","input_length":6,"output_length":2,"wait_for":["r1"],"request_kind":"helper"}"#,
            ]),
            ":2: request_kind: unknown request_kind",
        ),
        (
            v1(&[
                root,
                r#"{"request_id":"r2","session_id":"s","timestamp":5,"input_length":6,"output_length":2}"#,
            ]),
            ":2: request \"r2\" of session \"s\" does not wait for the session's previous request",
        ),
        (
            v1(&[
                r#"{"request_id":"r1","play_id":"p","session_id":"s","model":"m","input_length":4,"output_length":2,"not_before_ms":0,"dependencies":[]}"#,
            ]),
            ":1: dependencies: a v2 row",
        ),
        (
            v1(&[
                root,
                r#"{"schema":"dynamo.agentic_mooncake","version":2,"block_size":4}"#,
            ]),
            ":2: schema: a header after rows",
        ),
        (
            v1(&[r#"{"schema":"dynamo.agentic_mooncake","version":3,"block_size":4}"#]),
            ":1: version: version 3",
        ),
        (
            v1(&[
                r#"{"schema":"dynamo.agentic_mooncake","version":2,"block_size":4}"#,
                r#"{"request_id":"r1","play_id":"p","session_id":"s","model":"m","input_length":4,"output_length":2,"hash_ids":[0],"not_before_ms":0,"dependencies":[]}"#,
                r#"{"request_id":"r2","play_id":"p","session_id":"s","model":"m","input_length":4,"output_length":2,"hash_ids":[0],"not_before_ms":0,"dependencies":[{"request_id":"r1","trigger":"arrival","delay_ms":0,"relation":"sequence"}]}"#,
            ]),
            ":3: dependencies[0].trigger: unknown trigger",
        ),
        (
            v1(&[
                r#"{"schema":"dynamo.agentic_mooncake","version":2,"block_size":4}"#,
                r#"{"request_id":"r1","play_id":"p","session_id":"s","model":"m","input_length":4,"output_length":2,"hash_ids":[0],"not_before_ms":0,"dependencies":[]}"#,
                r#"{"request_id":"r2","play_id":"p","session_id":"s","model":"m","input_length":4,"output_length":2,"hash_ids":[0],"not_before_ms":0,"dependencies":[{"request_id":"r1","trigger":"completion","delay_ms":0,"relation":"cousin"}]}"#,
            ]),
            ":3: dependencies[0].relation: unknown relation",
        ),
        (
            v1(&[
                r#"{"request_id":"a","session_id":"s","input_length":4,"output_length":2,"wait_for":["b"]}"#,
                r#"{"request_id":"b","session_id":"t","input_length":4,"output_length":2,"wait_for":["a"]}"#,
            ]),
            "contain a cycle",
        ),
    ];
    for (lines, want) in cases {
        let e = err(Format::AgenticMooncake, &lines);
        assert!(e.contains(want), "{want:?} not in {e}");
    }
}

#[test]
fn agentic_mooncake_edges_the_tree_cannot_express_are_refused() {
    let row = |id: &str, session: &str, wait: &[&str]| {
        let mut v = serde_json::json!({"request_id": id, "session_id": session, "input_length": 4,
            "output_length": 2, "wait_for": wait});
        if wait.is_empty() {
            v["timestamp"] = 0.into();
        }
        v.to_string()
    };
    // A session's first row waiting for two sessions.
    let e = err(
        Format::AgenticMooncake,
        &[
            row("a", "s", &[]),
            row("b", "t", &[]),
            row("c", "u", &["a", "b"]),
        ],
    );
    assert!(e.contains(":3: request \"c\", the first of session \"u\", waits for requests of two other sessions"), "{e}");
    // A request waiting for a session that is not its subagent.
    let e = err(
        Format::AgenticMooncake,
        &[
            row("a", "s", &[]),
            row("b", "t", &[]),
            row("a2", "s", &["a", "b"]),
        ],
    );
    assert!(
        e.contains(":3: request \"a2\" of session \"s\" waits for request \"b\""),
        "{e}"
    );
    // A grandchild.
    let e = err(
        Format::AgenticMooncake,
        &[
            row("a", "s", &[]),
            row("b", "t", &["a"]),
            row("c", "u", &["b"]),
        ],
    );
    assert!(
        e.contains(":3:") && e.contains("nests subagents one level deep"),
        "{e}"
    );
}
