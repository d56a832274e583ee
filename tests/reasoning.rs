//! Reasoning and tool calls end to end: the real binary replays against the built-in simulator on
//! port 0 in chat, Anthropic and the Responses API while the simulator reasons before each reply
//! (`Replies::reasoning_tokens`) and ends it with a tool call whose arguments do not parse
//! (`Replies::tool_call_rate`, `Faults::malformed_tool_call_rate`, both 1.0). From the run's
//! exports: the time to first output token comes after the time to first token, the reasoning
//! tokens are the simulator's per reply, the parse failures are every call it made; without
//! reasoning or tool calls the first output is the first token and no reasoning is counted (absent,
//! or the 0 a Responses usage always says).

use std::time::Duration;

use agentx::sim::{Faults, SimConfig, Timing};
use serde_json::Value;

use crate::support::{fixture_args, Run, Sim};

/// Reasoning tokens per reply.
const REASONING: u64 = 3;

/// A short agentx-mvp replay of the fixture corpus against `url` on one lane, then `extra`. The
/// replies stop at the simulator's natural length (`ignore_eos` off), a few tokens, so the slow
/// decode steps keep a run short.
fn replay(url: &str, run_id: &str, extra: &[&str]) -> Run {
    let mut args = fixture_args("run", url);
    args.extend(
        [
            "--concurrency",
            "1",
            "--benchmark-duration",
            "2",
            "--ignore-trace-delays",
            "--extra-inputs",
            "ignore_eos:false",
            "--run-id",
            run_id,
        ]
        .map(str::to_owned),
    );
    args.extend(extra.iter().map(std::string::ToString::to_string));
    Run::in_process(tempfile::tempdir().unwrap(), &args, &[])
}

/// A simulator with a fixed timing (first token after 5 ms, 10 ms between tokens, so that no two
/// tokens share a read), replies of 4 to 12 tokens beside their reasoning, reasoning `reasoning`
/// tokens and calling a tool in every reply at `tool_call_rate`, all malformed.
fn sim(reasoning: u64, tool_call_rate: f64) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(10),
    };
    cfg.natural_output_tokens = 8;
    cfg.replies.reasoning_tokens = reasoning as u32;
    cfg.replies.tool_call_rate = tool_call_rate;
    cfg.faults = Faults {
        malformed_tool_call_rate: 1.0,
        ..Faults::default()
    };
    Sim::start(cfg)
}

/// The valid profiling lines of `profile_export.jsonl`: each line's metrics and its record's
/// output limit (from the records, by request id).
fn valid_lines(run: &Run) -> Vec<(Value, u32)> {
    let limits: std::collections::HashMap<String, u32> = run
        .records()
        .into_iter()
        .map(|r| (r.request_id, r.max_tokens))
        .collect();
    let text = std::fs::read_to_string(run.artifacts().join("profile_export.jsonl")).unwrap();
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|line| {
            line["error"].is_null() && line["metadata"]["benchmark_phase"] == "profiling"
        })
        .map(|line| {
            let id = line["metadata"]["x_request_id"]
                .as_str()
                .unwrap()
                .to_owned();
            (line["metrics"].clone(), limits[&id])
        })
        .collect()
}

fn value(metrics: &Value, tag: &str) -> Option<f64> {
    metrics[tag]["value"].as_f64()
}

#[test]
fn reasoning_delays_the_first_output_and_malformed_tool_calls_are_counted_in_every_api() {
    for (api, extra) in [
        ("chat", &[][..]),
        // Anthropic's usage has no reasoning count: the client counts the thinking text.
        ("anthropic", &["--client-token-count"][..]),
        ("responses", &[][..]),
    ] {
        let sim = sim(REASONING, 1.0);
        let mut flags = vec!["--endpoint-type", api];
        flags.extend_from_slice(extra);
        let run = replay(&sim.url(), &format!("reasoning-{api}"), &flags);
        assert_eq!(run.code(), 0, "{api}: {}", run.stderr());
        let lines = valid_lines(&run);
        assert!(!lines.is_empty(), "{api}: no valid profiling record");
        let mut calls = 0u64;
        for (metrics, max_tokens) in &lines {
            let max_tokens = u64::from(*max_tokens);
            let reasoning = REASONING.min(max_tokens);
            assert_eq!(
                value(metrics, "reasoning_token_count"),
                Some(reasoning as f64),
                "{api}: {metrics}"
            );
            let ttft = value(metrics, "time_to_first_token").unwrap();
            match value(metrics, "time_to_first_output_token") {
                // A reply of more tokens than the reasoning has output, after it.
                Some(ttfo) => {
                    assert!(max_tokens > REASONING, "{api}: {metrics}");
                    assert!(ttfo > ttft, "{api}: TTFO {ttfo} ms ≤ TTFT {ttft} ms");
                    // Every such reply ends in a malformed tool call.
                    assert_eq!(value(metrics, "tool_call_count"), Some(1.0), "{api}");
                    assert_eq!(
                        value(metrics, "tool_call_parse_failure_count"),
                        Some(1.0),
                        "{api}"
                    );
                    calls += 1;
                }
                None => assert!(max_tokens <= REASONING, "{api}: {metrics}"),
            }
        }
        let aggregate = run.json("profile_export_aiperf.json");
        assert_eq!(
            aggregate["total_tool_call_parse_failures"]["avg"], calls,
            "{api}"
        );
        let reasoning_sum: f64 = lines
            .iter()
            .map(|(m, _)| value(m, "reasoning_token_count").unwrap())
            .sum();
        assert_eq!(
            aggregate["total_reasoning_tokens"]["avg"].as_f64(),
            Some(reasoning_sum),
            "{api}"
        );
        assert_eq!(
            aggregate["reasoning_token_count"]["sum"].as_f64(),
            Some(reasoning_sum),
            "{api}"
        );
        assert!(
            aggregate["time_to_first_output_token"]["avg"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        // The run summary says the same: reasoning tokens, parse failures, TTFO after TTFT.
        let summary = &run.summary()["summary"];
        let reply = &summary["reply"];
        assert_eq!(
            reply["reasoning_tokens"].as_f64(),
            Some(reasoning_sum),
            "{api}: {reply}"
        );
        assert_eq!(reply["tool_call_parse_failures"], calls, "{api}: {reply}");
        assert!(
            reply["ttfo_ms"]["p50"].as_f64() > summary["ttft_ms"]["p50"].as_f64(),
            "{api}: {reply}"
        );
        let page = std::fs::read_to_string(run.artifacts().join("report.html")).unwrap();
        assert!(page.contains("TTFO (after reasoning)"), "{api}");
    }
}

#[test]
fn without_reasoning_the_first_output_is_the_first_token_and_no_reasoning_is_counted() {
    for api in ["chat", "anthropic", "responses"] {
        let sim = sim(0, 0.0);
        let run = replay(
            &sim.url(),
            &format!("plain-{api}"),
            &["--endpoint-type", api],
        );
        assert_eq!(run.code(), 0, "{api}: {}", run.stderr());
        let lines = valid_lines(&run);
        assert!(!lines.is_empty());
        // The Responses usage always says `reasoning_tokens` (0 here, as OpenAI's does), and
        // aiperf reports what the usage says; chat's and Anthropic's usage say nothing.
        let said = (api == "responses").then_some(0.0);
        for (metrics, _) in &lines {
            assert_eq!(
                value(metrics, "time_to_first_output_token"),
                value(metrics, "time_to_first_token"),
                "{api}: {metrics}"
            );
            assert_eq!(value(metrics, "reasoning_token_count"), said, "{api}");
            assert_eq!(value(metrics, "usage_reasoning_tokens"), said, "{api}");
            assert!(metrics.get("tool_call_count").is_none(), "{api}: {metrics}");
        }
        let aggregate = run.json("profile_export_aiperf.json");
        assert_eq!(
            aggregate["total_reasoning_tokens"]["avg"].as_f64(),
            said,
            "{api}"
        );
        assert!(aggregate.get("total_tool_call_parse_failures").is_none());
        assert!(run.summary()["summary"].get("reply").is_none(), "{api}");
        let page = std::fs::read_to_string(run.artifacts().join("report.html")).unwrap();
        assert!(!page.contains("TTFO (after reasoning)"), "{api}");
    }
}
