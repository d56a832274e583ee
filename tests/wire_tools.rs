//! `--scenario agent-wire --wire tools` end to end: the real binary replays the with-subagents
//! fixture (whose turns stop on `tool_use`) in each API against the built-in simulator on port 0
//! with `--record-requests`, and what the simulator recorded of each request is compared with the
//! `--wire text` replay of the same plan: tool schemas in every request, tool call and result pairs
//! where the corpus has tool turns, each request's prompt tokens equal to the text wire's (the
//! tolerance is zero under the word model: the same words are sent, in other fields), the prefix
//! cache read as much. `--reasoning-in-history` is stated in the manifest, and `agentx` refuses
//! `--wire tools`.

use std::collections::HashMap;
use std::path::Path;

use agentx::record::RequestRecord;
use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{tree_run_args, Run, Sim};

/// A simulator that logs every request to `log`, streaming `reasoning_tokens` of reasoning before
/// each reply.
fn recording_sim(log: &Path, reasoning_tokens: u32) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.record_headers = true;
    cfg.record_requests = Some(log.to_owned());
    cfg.replies.reasoning_tokens = reasoning_tokens;
    Sim::start(cfg)
}

/// A session-tree replay of the fixture under `agent-wire` in `api`, with `extra` flags, and the
/// simulator's log of it.
fn replay(api: &str, extra: &[&str]) -> (Run, HashMap<String, Value>) {
    replay_with_reasoning(api, 0, extra)
}

/// [`replay`] against a simulator whose replies stream `reasoning_tokens` of reasoning first.
fn replay_with_reasoning(
    api: &str,
    reasoning_tokens: u32,
    extra: &[&str],
) -> (Run, HashMap<String, Value>) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let sim = recording_sim(&log, reasoning_tokens);
    let mut flags = vec![
        "--scenario",
        "agent-wire",
        "--endpoint-type",
        api,
        "--run-id",
        "wire-tools-test",
    ];
    flags.extend(extra);
    let run = Run::in_process(
        tempfile::tempdir().unwrap(),
        &tree_run_args(&sim.url(), &flags),
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    drop(sim);
    let lines = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|v| (v["headers"]["x-request-id"].as_str().unwrap().to_owned(), v))
        .collect();
    (run, lines)
}

/// A request of a plan: which stream replays which trace's turn, in which phase.
fn key(record: &RequestRecord) -> (String, String, u32, String) {
    (
        record.correlation_id.clone(),
        record.trace_id.clone(),
        record.turn,
        format!("{:?}", record.phase),
    )
}

/// Each record of `run` by its plan key, with the simulator's line of it.
fn by_key(
    run: &Run,
    lines: &HashMap<String, Value>,
) -> HashMap<(String, String, u32, String), (RequestRecord, Value)> {
    run.records()
        .into_iter()
        .filter_map(|record| {
            let line = lines.get(&record.request_id)?.clone();
            Some((key(&record), (record, line)))
        })
        .collect()
}

/// The manifest's applied value of `name`.
fn applied(run: &Run, name: &str) -> Value {
    run.json("run_manifest.json")["replay_settings"][name]["value"].clone()
}

fn tools_wire_matches_text_wire(api: &str) {
    let (tools, tool_lines) = replay(api, &["--wire", "tools"]);
    let (text, text_lines) = replay(api, &["--wire", "text"]);
    assert_eq!(applied(&tools, "wire"), "tools");
    assert_eq!(applied(&text, "wire"), "text");
    assert_eq!(applied(&tools, "reasoning-in-history"), "drop");
    let tools_sent = by_key(&tools, &tool_lines);
    let text_sent = by_key(&text, &text_lines);
    assert!(!tools_sent.is_empty());
    let (mut matched, mut pairs, mut with_tools) = (0, 0, 0);
    let (mut cached_tools, mut cached_text) = (0u64, 0u64);
    for (plan_key, (record, line)) in &tools_sent {
        // Tool schemas, their descriptions the trace's recorded tool text (a trace without tool
        // tokens, or a first prompt shorter than its tool text, has none on either wire).
        let tool_tokens = line["tool_tokens"].as_u64().unwrap();
        let has_tools = !line["tools"].as_array().unwrap().is_empty();
        if has_tools {
            assert!(tool_tokens == 512 || tool_tokens == 1024, "{line}");
            with_tools += 1;
        }
        // A tool call is followed by its result.
        let kinds: Vec<&str> = line["message_kinds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap())
            .collect();
        for (index, kind) in kinds.iter().enumerate() {
            if kind.contains("tool_call") {
                assert!(kinds[index + 1].contains("tool_result"), "{kinds:?}");
                pairs += 1;
            }
        }
        let Some((text_record, _)) = text_sent.get(plan_key) else {
            continue;
        };
        matched += 1;
        // The same tokens: the client's count and the server's.
        assert_eq!(record.isl, text_record.isl, "{plan_key:?}");
        assert_eq!(
            record.usage.prompt_tokens, text_record.usage.prompt_tokens,
            "{plan_key:?}"
        );
        cached_tools += record.usage.cached_tokens.unwrap_or(0);
        cached_text += text_record.usage.cached_tokens.unwrap_or(0);
    }
    assert!(
        matched > 0 && pairs > 0 && with_tools > tools_sent.len() / 2,
        "{matched} matched, {pairs} pairs, {with_tools} with tools"
    );
    // Shared prefixes stay shared: the cache reads as much as on the text wire.
    assert!(cached_text > 0);
    assert!(
        cached_tools as f64 >= 0.9 * cached_text as f64,
        "cached {cached_tools} on the tools wire, {cached_text} on the text wire"
    );
    // The text wire sends no tools and no tool turns.
    for line in text_lines.values() {
        assert!(line["tools"].as_array().unwrap().is_empty(), "{line}");
        assert!(line["message_kinds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|k| k == "text"));
    }
}

#[test]
fn chat_tools_wire_sends_the_text_wire_tokens_as_tools() {
    tools_wire_matches_text_wire("chat");
}

#[test]
fn anthropic_tools_wire_sends_the_text_wire_tokens_as_tools() {
    tools_wire_matches_text_wire("anthropic");
}

#[test]
fn responses_tools_wire_sends_the_text_wire_tokens_as_tools() {
    tools_wire_matches_text_wire("responses");
}

/// Without reasoning in the live replies (the simulator streams none), `keep` and `drop` send the
/// same prompts; the manifest states which the run applied.
#[test]
fn reasoning_in_history_is_stated_and_changes_nothing_without_reasoning() {
    let (keep, keep_lines) = replay("chat", &["--reasoning-in-history", "keep"]);
    let (dropped, drop_lines) = replay("chat", &["--reasoning-in-history", "drop"]);
    assert_eq!(applied(&keep, "reasoning-in-history"), "keep");
    assert_eq!(applied(&dropped, "reasoning-in-history"), "drop");
    let kept = by_key(&keep, &keep_lines);
    let mut matched = 0;
    for (plan_key, (record, line)) in by_key(&dropped, &drop_lines) {
        if let Some((other, other_line)) = kept.get(&plan_key) {
            matched += 1;
            assert_eq!(record.isl, other.isl);
            assert_eq!(line["digest"], other_line["digest"]);
        }
    }
    assert!(matched > 0);
}

/// Live replies that reason: `keep` threads each reply's reasoning back into the history (a
/// reasoning part in the recorded message kinds, and more prompt tokens than `drop` sends for the
/// same request), `drop` sends none, in each API's shape.
#[test]
fn kept_reasoning_reaches_the_history_in_every_api_and_dropped_reasoning_does_not() {
    const REASONING: u32 = 6;
    for api in ["chat", "anthropic", "responses"] {
        let flags = |mode| ["--wire", "tools", "--reasoning-in-history", mode];
        let (keep, keep_lines) = replay_with_reasoning(api, REASONING, &flags("keep"));
        let (dropped, drop_lines) = replay_with_reasoning(api, REASONING, &flags("drop"));
        let has_reasoning = |line: &Value| {
            line["message_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|kind| kind.as_str().unwrap().contains("reasoning"))
        };
        assert!(
            !drop_lines.values().any(has_reasoning),
            "{api}: drop sent reasoning"
        );
        let kept = by_key(&keep, &keep_lines);
        let (mut matched, mut longer) = (0, 0);
        for (plan_key, (record, _)) in by_key(&dropped, &drop_lines) {
            let Some((kept_record, kept_line)) = kept.get(&plan_key) else {
                continue;
            };
            matched += 1;
            assert!(kept_record.isl >= record.isl, "{api} {plan_key:?}");
            if has_reasoning(kept_line) {
                assert!(kept_record.isl > record.isl, "{api} {plan_key:?}");
                longer += 1;
            }
        }
        assert!(
            matched > 0 && longer > 0,
            "{api}: {matched} matched, {longer} with kept reasoning"
        );
    }
}

#[test]
fn agentx_refuses_the_tools_wire() {
    for (scenario, flags) in [
        ("agentx", ["--wire", "tools"]),
        ("agentx-open", ["--reasoning-in-history", "keep"]),
    ] {
        let args = tree_run_args(
            "http://127.0.0.1:9",
            &["--scenario", scenario, flags[0], flags[1]],
        );
        let run = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_ne!(run.code(), 0);
        let err = run.stderr();
        assert!(err.contains(&format!("the scenario {scenario} ")), "{err}");
        assert!(err.contains(&format!("{} {}", flags[0], flags[1])), "{err}");
        assert!(err.contains("--scenario agent-wire"), "{err}");
    }
}
