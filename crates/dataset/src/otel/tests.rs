//! Unit tests of the OTel format: both layers, the plan's requests, agents, timing and block ids,
//! and the refusals.

use serde_json::{json, Value};

use super::*;
use crate::format::{document_format, Format};

/// The traces and the summary of `lines` (one JSONL file), at `block_size` tokens a block.
fn load(lines: &[Value], block_size: u32) -> Result<(Vec<ParsedTrace>, OtelSummary), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let text: String = lines.iter().map(|l| l.to_string() + "\n").collect();
    std::fs::write(&path, text).unwrap();
    let spec = FormatSpec::resolve_with(Format::Otel, Some(block_size), |_| None).unwrap();
    let mut traces = Vec::new();
    let (_, summary) = for_each_planned(&SourceFiles::Jsonl(path), &spec, |t| {
        traces.push(t);
        Ok(ControlFlow::Continue(()))
    })
    .map_err(|e| e.to_string())?;
    Ok((traces, summary))
}

/// A flattened span.
fn span(id: &str, parent: Option<&str>, start: f64, end: f64, attributes: Value) -> Value {
    let at = |s: f64| format!("2026-01-01T00:00:{s:09.6}");
    let mut span = json!({"trace_id": "t1", "span_id": id, "parent_span_id": parent, "name": "x",
           "start_time": at(start), "end_time": at(end), "status": {"code": 1}});
    span["attributes"] = attributes;
    span
}

fn chat(input: u64, output: u64) -> Value {
    json!({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
           "gen_ai.usage.input_tokens": input, "gen_ai.usage.output_tokens": output})
}

fn op(name: &str, agent: &str) -> Value {
    json!({"gen_ai.operation.name": name, "gen_ai.agent.id": agent})
}

fn row(spans: Vec<Value>) -> Value {
    json!({"trace_id": "t1", "spans": Value::Array(spans)})
}

fn message(role: &str, text: &str) -> Value {
    json!({"role": role, "content": text})
}

/// The flat example of docs/specs/otel-genai-traces.md#7-minimal-valid-examples: two requests sharing a one-message prefix.
fn spec_example() -> Value {
    let mut a = chat(12, 3);
    a["gen_ai.input.messages"] = json!([message("user", "hi")]).to_string().into();
    a["gen_ai.output.messages"] = json!([message("assistant", "hello")]).to_string().into();
    let mut b = chat(20, 4);
    b["gen_ai.input.messages"] = json!([
        message("user", "hi"),
        message("assistant", "hello"),
        message("user", "more")
    ])
    .to_string()
    .into();
    b["gen_ai.output.messages"] = json!([message("assistant", "ok")]).to_string().into();
    row(vec![
        span("a", None, 0.0, 1.0, a),
        span("b", None, 2.0, 3.0, b),
    ])
}

#[test]
fn the_spec_example_plans_two_requests_continuing_one_another() {
    let (traces, summary) = load(&[spec_example()], 4).unwrap();
    assert_eq!(traces.len(), 1);
    let t = &traces[0];
    assert_eq!(t.id, "t1");
    let r: Vec<(f64, u32, u32)> = t
        .requests
        .iter()
        .map(|r| (r.t, r.input, r.output))
        .collect();
    assert_eq!(r, [(0.0, 12, 3), (2.0, 20, 4)]);
    assert_eq!(t.requests[1].think_time, Some(1.0));
    assert_eq!(t.requests[0].api_time, Some(1.0));
    // b's input begins with a's input and output: a's three blocks, then two fresh ones.
    assert_eq!(t.requests[0].hash_ids, [1, 2, 3]);
    assert_eq!(t.requests[1].hash_ids, [1, 2, 3, 4, 5]);
    assert_eq!(
        (
            summary.requests,
            summary.requests_with_messages,
            summary.runtime_sessions
        ),
        (2, 2, 1)
    );
    assert_eq!(summary.assumed_prefix, 0);
}

#[test]
fn otlp_batches_merge_by_trace_id_and_decode_typed_values() {
    let kv = |k: &str, v: Value| json!({"key": k, "value": v});
    let otlp = |span_id: &str, start: &str, end: Value, input: Value| {
        json!({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "x"},
          "spans": [{"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": span_id, "parentSpanId": "",
            "name": "chat m", "kind": 3, "startTimeUnixNano": start, "endTimeUnixNano": end,
            "status": {"code": 1}, "attributes": [
              kv("gen_ai.operation.name", json!({"stringValue": "chat"})),
              kv("gen_ai.usage.input_tokens", input),
              kv("gen_ai.usage.output_tokens", json!({"intValue": "3"})),
              kv("gen_ai.response.finish_reasons", json!({"arrayValue": {"values": [{"stringValue": "tool_calls"}]}}))]}]}]}]})
    };
    let lines = [
        otlp(
            "b7ad6b7169203331",
            "1767225600000000000",
            json!("1767225601000000000"),
            json!({"intValue": "12"}),
        ),
        otlp(
            "b7ad6b7169203332",
            "1767225602500000000",
            json!(1_767_225_603_000_000_000u64),
            json!({"intValue": 20}),
        ),
    ];
    let (traces, summary) = load(&lines, 4).unwrap();
    assert_eq!(traces.len(), 1, "two batches, one trace");
    let t = &traces[0];
    assert_eq!(t.id, "0af7651916cd43dd8448eb211c80319c");
    let r: Vec<(f64, u32, &str)> = t
        .requests
        .iter()
        .map(|r| (r.t, r.input, r.stop.as_str()))
        .collect();
    assert_eq!(r, [(0.0, 12, "tool_use"), (2.5, 20, "tool_use")]);
    // No messages: the predecessor's whole prompt is the assumed prefix.
    assert_eq!(t.requests[1].hash_ids, [1, 2, 3, 4, 5]);
    assert_eq!((summary.assumed_prefix, summary.runtime_sessions), (1, 0));
}

#[test]
fn a_nested_invoke_agent_is_a_subagent_and_one_deeper_is_refused() {
    let spans = vec![
        span("root", None, 0.0, 9.0, op("invoke_agent", "main")),
        span("c1", Some("root"), 0.5, 1.0, chat(128, 8)),
        span("tool", Some("root"), 1.1, 4.0, op("execute_tool", "main")),
        span("sub", Some("tool"), 1.2, 3.9, op("invoke_agent", "helper")),
        span("c2", Some("sub"), 1.3, 2.0, chat(64, 4)),
        span("c3", Some("sub"), 2.5, 3.0, chat(96, 4)),
        span("c4", Some("root"), 4.5, 5.0, chat(192, 8)),
    ];
    let (traces, summary) = load(&[row(spans.clone())], 32).unwrap();
    let t = &traces[0];
    assert_eq!((summary.requests, summary.subagents), (4, 1));
    let times: Vec<f64> = t.requests.iter().map(|r| r.t).collect();
    assert_eq!(
        times,
        [0.0, 4.0],
        "root requests on the first LLM span's clock"
    );
    assert_eq!(t.subagents, 1);
    let sub = &t.subagent_entries[0];
    assert_eq!(sub.index, 1, "after the root request that spawned it");
    assert_eq!(sub.t, 0.7, "the invoke_agent span's start");
    assert_eq!(sub.agent_id.as_deref(), Some("helper-sub"));
    let inner: Vec<(f64, Option<f64>)> = sub.requests.iter().map(|r| (r.t, r.think_time)).collect();
    assert_eq!(inner, [(0.8, None), (2.0, Some(0.5))]);
    // The root's second request follows its first in the root agent (not the subagent).
    assert_eq!(t.requests[1].think_time, Some(3.5));
    assert_eq!(t.requests[1].hash_ids[..4], t.requests[0].hash_ids[..]);

    let mut deeper = spans;
    deeper.push(span(
        "subsub",
        Some("c3"),
        2.6,
        2.9,
        op("invoke_agent", "x"),
    ));
    deeper.push(span("c5", Some("subsub"), 2.7, 2.8, chat(64, 4)));
    let e = load(&[row(deeper)], 32).unwrap_err();
    assert!(
        e.contains("t.jsonl:1: trace \"t1\": spans[8].parent_span_id"),
        "{e}"
    );
    assert!(
        e.contains("\"subsub\" <- \"sub\" <- \"root\"") || e.contains("subsub <- sub <- root"),
        "{e}"
    );
}

#[test]
fn dropped_spans_are_counted_warnings() {
    let mut failed = span("e", None, 1.0, 1.5, chat(64, 0));
    failed["status"] = json!({"code": 2});
    let lines = [row(vec![
        span("a", None, 0.0, 1.0, chat(64, 4)),
        failed,
        span("b", None, 2.0, 3.0, chat(70, 4)),
        span("b2", None, 2.0, 3.0, chat(70, 4)),
        span(
            "n",
            None,
            3.5,
            4.0,
            json!({"gen_ai.operation.name": "chat"}),
        ),
    ])];
    let (traces, summary) = load(&lines, 32).unwrap();
    assert_eq!(traces[0].requests.len(), 2);
    let kinds: Vec<&str> = traces[0].warnings.iter().map(|w| w.kind.as_str()).collect();
    assert_eq!(kinds, ["error_span", "untokenized_span", "duplicate_span"]);
    assert_eq!(
        (
            summary.error_spans,
            summary.duplicate_spans,
            summary.untokenized_spans
        ),
        (1, 1, 1)
    );
    let where_ = traces[0].warnings[0].to_string();
    assert!(
        where_.contains("t.jsonl:1: trace \"t1\": spans[1].status"),
        "{where_}"
    );
}

#[test]
fn bad_input_is_refused_naming_line_field_and_span() {
    let ok = || span("a", None, 0.0, 1.0, chat(64, 4));
    let with = |key: &str, value: Value| {
        let mut s = ok();
        s[key] = value;
        s
    };
    let attr = |key: &str, value: Value| {
        let mut s = ok();
        s["attributes"][key] = value;
        s
    };
    let cases = [
        (
            row(vec![with("end_time", json!("2025-12-31T23:59:59"))]),
            "spans[0].end_time: span \"a\" ends 1000 ms before it starts",
        ),
        (
            row(vec![with(
                "start_time",
                json!(1_767_225_600_000_000_000u64),
            )]),
            "numeric unix times",
        ),
        (
            row(vec![with("start_time", json!("yesterday"))]),
            "spans[0].start_time: span \"a\": must be an ISO-8601 time",
        ),
        (
            row(vec![with("status", json!({"code": 3}))]),
            "spans[0].status.code: span \"a\": status code 3 is outside 0..=2",
        ),
        (
            row(vec![with("kind", json!("SPAN_KIND_SIDEWAYS"))]),
            "spans[0].kind: span \"a\": kind \"SPAN_KIND_SIDEWAYS\" is not a span kind",
        ),
        (
            row(vec![attr("gen_ai.usage.input_tokens", json!(1.5))]),
            "gen_ai.usage.input_tokens: 1.5 is not a token count",
        ),
        (
            row(vec![attr("gen_ai.input.messages", json!("[{\"role\""))]),
            "spans[0].attributes: span \"a\": gen_ai.input.messages is not JSON",
        ),
        (
            row(vec![with("trace_id", json!("t2"))]),
            "spans[0].trace_id: span \"a\" has trace_id \"t2\" in a row of trace_id \"t1\"",
        ),
        (
            row(vec![
                span("a", Some("b"), 0.0, 1.0, chat(64, 4)),
                span("b", Some("a"), 0.0, 1.0, op("invoke_agent", "x")),
            ]),
            "is its own ancestor (parent chain a -> b -> a)",
        ),
        (json!({"prompt": "hi"}), ".: not an OTel record"),
    ];
    for (line, want) in cases {
        let e = load(&[json!({"trace_id": "t0", "spans": []}), line], 32).unwrap_err();
        assert!(e.contains("t.jsonl:2"), "{e}");
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    let otlp_kind = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "kind": 9,
        "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]});
    let e = load(&[otlp_kind], 32).unwrap_err();
    assert!(
        e.contains("resourceSpans[0].scopeSpans[0].spans[0].kind: span \"b7ad6b7169203331\": kind 9 is not an OTLP span kind"),
        "{e}"
    );
    let base64_id = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "CvdlGRbNQ92ESOshHIAxnA==", "spanId": "b7ad6b7169203331"}]}]}]});
    let e = load(&[base64_id], 32).unwrap_err();
    assert!(e.contains("not 32 hex digits"), "{e}");
}

#[test]
fn a_pretty_printed_file_and_a_directory_of_traces_read_as_documents() {
    let dir = tempfile::tempdir().unwrap();
    let pretty = dir.path().join("one.json");
    std::fs::write(
        &pretty,
        serde_json::to_string_pretty(&spec_example()).unwrap(),
    )
    .unwrap();
    assert_eq!(document_format(&pretty), Format::Otel);
    let files = SourceFiles::from_path(dir.path()).unwrap();
    assert_eq!(crate::format::detect(&files).unwrap(), Format::Otel);
    for source in [SourceFiles::Jsonl(pretty.clone()), files] {
        let spec = FormatSpec::resolve_with(Format::Otel, None, |_| None).unwrap();
        let mut n = 0;
        scan(&source, &spec, |t| {
            n += t.requests.len();
            Ok(ControlFlow::Continue(()))
        })
        .unwrap();
        assert_eq!(n, 2);
    }
}

#[test]
fn no_message_text_reaches_a_trace() {
    let (traces, _) = load(&[spec_example()], 4).unwrap();
    let shown = format!("{traces:?}");
    for text in ["hello", "\"hi\"", "more"] {
        assert!(!shown.contains(text), "{text} in {shown}");
    }
}

#[test]
fn the_fixtures_summarize_as_their_readme_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let spec = FormatSpec::resolve_with(Format::Otel, None, |_| None).unwrap();
    let summary = |name: &str| summarize(&root.join(name), &spec).unwrap();
    let otlp = summary("otel-agents.otlp.jsonl");
    assert_eq!(
        (
            otlp.sessions,
            otlp.requests,
            otlp.subagents,
            otlp.runtime_sessions
        ),
        (2, 7, 1, 1)
    );
    assert_eq!(
        (
            otlp.error_spans,
            otlp.duplicate_spans,
            otlp.assumed_prefix,
            otlp.requests_with_messages
        ),
        (1, 1, 1, 5)
    );
    let flat = summary("otel-sessions.flat.jsonl");
    assert_eq!(
        (flat.sessions, flat.requests, flat.runtime_sessions),
        (2, 5, 1)
    );
    let sample = summary("inference-perf_simple_chain.otel.json");
    assert_eq!(
        (
            sample.requests,
            sample.estimated_tokens,
            sample.runtime_sessions
        ),
        (3, 3, 1)
    );
}
