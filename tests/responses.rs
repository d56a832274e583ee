//! `--endpoint-type responses` end to end: the real binary replays in the OpenAI Responses API
//! against the built-in simulator's `/v1/responses` on port 0. What the simulator recorded of each
//! request (`--record-requests`) is the prompt and the output limit the chat replay of the same
//! plan sent, in the Responses shape; the records carry the chat replay's tokens and timing; a
//! stream that ends without its end event, or with `response.failed`, is a failed request with
//! its reason.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use agentx::metrics::Outcome;
use agentx::record::{Phase, RequestRecord};
use agentx::sim::{Faults, SimConfig, Timing};
use serde_json::Value;

use crate::support::{fixture_args, plan_key, Run, Sim};

const SECRET: &str = "sk-agentx-responses-test-9e2a";

/// The simulator's fixed timing: every first token after 20 ms, 1 ms between tokens.
const TTFT: Duration = Duration::from_millis(20);
const ITL: Duration = Duration::from_millis(1);

/// A short agentx-mvp replay of the fixture corpus against `url` on one lane (so the plan, and
/// the prefix cache's state before each request, is the same in every API), with `extra` flags.
fn replay(url: &str, run_id: &str, extra: &[&str]) -> Run {
    let mut args = fixture_args("run", url);
    args.extend(
        [
            "--concurrency",
            "1",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
            "--run-id",
            run_id,
        ]
        .map(str::to_owned),
    );
    args.extend(extra.iter().map(std::string::ToString::to_string));
    Run::in_process(
        tempfile::tempdir().unwrap(),
        &args,
        &[("AGENTX_API_KEY", SECRET)],
    )
}

/// A simulator with the fixed timing that logs every request to `log`.
fn recording_sim(log: &Path) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: TTFT,
        itl: ITL,
    };
    cfg.record_headers = true;
    cfg.record_requests = Some(log.to_owned());
    Sim::start(cfg)
}

/// The request log's lines by the request id they came with.
fn logged(path: &Path) -> HashMap<String, Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|v| (v["headers"]["x-request-id"].as_str().unwrap().to_owned(), v))
        .collect()
}

/// The mean gap between a record's output chunks, ns.
fn mean_itl(r: &RequestRecord) -> f64 {
    let offsets = &r.chunk_offsets_ns;
    (offsets.last().unwrap_or(0) - offsets.first().unwrap_or(0)) as f64
        / (offsets.len() - 1).max(1) as f64
}

#[test]
fn responses_replay_sends_the_chat_prompt_and_measures_as_chat() {
    let dir = tempfile::tempdir().unwrap();
    let (responses_log, chat_log) = (
        dir.path().join("responses.jsonl"),
        dir.path().join("chat.jsonl"),
    );
    let sim = recording_sim(&responses_log);
    let r = replay(
        &sim.url(),
        "responses-test",
        &["--endpoint-type", "responses"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    assert!(
        recs.iter().any(|x| x.phase == Phase::Profiling),
        "{recs:#?}"
    );
    for x in &recs {
        assert!(Outcome::of(x).is_ok(), "{x:#?}");
        // ignore_eos: every answer runs to its limit, one word (token) per delta, and ends
        // `response.incomplete` for `max_output_tokens`.
        assert_eq!(x.osl, u64::from(x.max_tokens), "{x:#?}");
        assert_eq!(x.chunk_offsets_ns.len(), x.max_tokens as usize);
        assert_eq!(x.finish_reason.as_deref(), Some("max_output_tokens"));
        assert!(
            x.first_token_ns.unwrap() - x.send_ns >= TTFT.as_nanos() as u64,
            "{x:#?}"
        );
    }
    assert!(
        recs.iter().any(|x| x.usage.cached_tokens.unwrap() > 0),
        "later turns read the cache"
    );
    // The key as `Authorization: Bearer`, as for chat; no Anthropic header.
    for g in sim.received() {
        assert_eq!(g.header("anthropic-version"), None);
        assert_eq!(g.header("x-api-key"), None);
    }
    drop(sim);

    // The same plan in chat, against a fresh simulator.
    let sim = recording_sim(&chat_log);
    let chat = replay(&sim.url(), "responses-test", &[]);
    assert_eq!(chat.code(), 0, "{}", chat.stderr());
    drop(sim);
    let chat_recs: HashMap<_, _> = chat
        .records()
        .into_iter()
        .map(|x| (plan_key(&x), x))
        .collect();
    let (responses_sent, chat_sent) = (logged(&responses_log), logged(&chat_log));
    let mut matched = 0;
    let (mut itl_responses, mut itl_chat) = (0.0, 0.0);
    for x in &recs {
        let Some(c) = chat_recs.get(&plan_key(x)) else {
            // A later turn's lane and trace depend on timing: compared when both replays ran it.
            assert_ne!(
                x.phase,
                Phase::Warmup,
                "a warmup request is in every replay: {x:#?}"
            );
            continue;
        };
        // What the server counted and answered: the same tokens, the same cache hit (the
        // Responses usage also says its reasoning tokens, 0; chat's says nothing of them).
        assert_eq!(x.usage.reasoning_tokens, Some(0));
        let usage = agentx::record::Usage {
            reasoning_tokens: None,
            ..x.usage
        };
        assert_eq!(usage, c.usage, "{x:#?}\n{c:#?}");
        assert_eq!((x.isl, x.osl, x.max_tokens), (c.isl, c.osl, c.max_tokens));
        assert_eq!(x.chunk_offsets_ns.len(), c.chunk_offsets_ns.len());
        itl_responses += mean_itl(x);
        itl_chat += mean_itl(c);
        // What was sent: the chat messages as input items, the limit as `max_output_tokens`.
        let (sent, chat_body) = (&responses_sent[&x.request_id], &chat_sent[&c.request_id]);
        for field in [
            "digest",
            "roles",
            "message_tokens",
            "prompt_tokens",
            "marker",
            "ignore_eos",
        ] {
            assert_eq!(
                sent[field], chat_body[field],
                "{field}: {sent}\n{chat_body}"
            );
        }
        assert_eq!(sent["max_output_tokens"], chat_body["max_tokens"], "{sent}");
        assert_eq!(sent["max_output_tokens"], x.max_tokens);
        assert_eq!(
            (&sent["max_tokens"], &sent["stream"]),
            (&Value::Null, &Value::Bool(true))
        );
        assert_eq!(
            sent["other_values"],
            serde_json::json!({"store": false}),
            "{sent}"
        );
        matched += 1;
    }
    assert!(
        matched >= 2,
        "{matched} requests in both replays (a warmup per lane)"
    );
    // The pace is the engine model's in both: never faster than its ITL, and alike.
    let (itl_responses, itl_chat) = (
        itl_responses / f64::from(matched),
        itl_chat / f64::from(matched),
    );
    assert!(
        itl_responses >= 0.5 * ITL.as_nanos() as f64,
        "{itl_responses}"
    );
    assert!(
        itl_responses < 3.0 * itl_chat && itl_chat < 3.0 * itl_responses,
        "{itl_responses} {itl_chat}"
    );
}

#[test]
fn responses_refusals_name_the_endpoint_type_and_flags() {
    let sim = Sim::start(SimConfig::max());
    let url = sim.url();
    // A path that does not take the Responses API: the error names the endpoint type and the flags.
    let r = replay(
        &url,
        "responses-refused",
        &["--endpoint-type", "responses", "--endpoint", "/v1/complete"],
    );
    assert_ne!(r.code(), 0);
    let e = r.records()[0].error.clone().unwrap();
    assert_eq!(e.code, 404);
    assert!(
        e.message.contains("--endpoint-type responses") && e.message.contains("/v1/complete"),
        "{e:?}"
    );
    // A chat endpoint refuses the body: the server's own 400 (no hint: a 400 is also how servers
    // refuse a prompt too long, which the scenario classifies).
    let r = replay(
        &url,
        "responses-refused",
        &[
            "--endpoint-type",
            "responses",
            "--endpoint",
            "/v1/chat/completions",
        ],
    );
    assert_ne!(r.code(), 0);
    let e = r.records()[0].error.clone().unwrap();
    assert_eq!(e.code, 400);
    assert!(e.message.contains("`messages`"), "{e:?}");
    // What the Responses body cannot carry is refused before the run.
    for (flags, want) in [
        (&["--use-legacy-max-tokens"][..], "max_output_tokens"),
        (
            &["--extra-inputs", "instructions:be brief"][..],
            "--extra-inputs instructions",
        ),
        (
            &["--extra-inputs", "store:true"][..],
            "--extra-inputs store",
        ),
    ] {
        let mut args = vec!["--endpoint-type", "responses"];
        args.extend(flags);
        let r = replay(&url, "responses-refused", &args);
        assert_eq!(r.code(), 2, "{flags:?}: {}", r.stderr());
        assert!(r.stderr().contains(want), "{flags:?}: {}", r.stderr());
    }
}

#[test]
fn responses_overflow_is_classified() {
    let mut cfg = SimConfig::max();
    cfg.max_model_len = 40_000;
    let sim = Sim::start(cfg);
    let r = replay(
        &sim.url(),
        "responses-overflow",
        &[
            "--endpoint-type",
            "responses",
            "--trajectory-start-min-ratio",
            "0",
            "--trajectory-start-max-ratio",
            "0.1",
            "--failed-request-threshold",
            "0.01",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let over: Vec<_> = r
        .records()
        .into_iter()
        .filter(|x| x.context_overflow)
        .collect();
    assert!(!over.is_empty(), "some turns overflow");
    for o in &over {
        let e = o.error.as_ref().unwrap();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("maximum context length"), "{e:?}");
        assert_eq!(Outcome::of(o), Outcome::ContextOverflow);
    }
    assert_eq!(r.summary()["summary"]["requests_failed"], 0);
}

/// A stream cut before `response.completed` and a `response.failed` mid-stream are failed requests
/// with their reasons; what they measured before, and the records around them, are kept.
#[test]
fn responses_streams_without_an_end_or_with_a_failure_are_failed_requests() {
    let mut cfg = SimConfig::max();
    cfg.faults = Faults {
        seed: 11,
        truncate_rate: 0.2,
        stream_error_rate: 0.2,
        ..Faults::default()
    };
    let sim = Sim::start(cfg);
    let url = sim.url();
    let mut kinds = HashSet::new();
    // Fault decisions follow the request ids; a new run id per attempt draws new ones, so some
    // attempt gets past warmup.
    for attempt in 0..8 {
        let id = format!("responses-faults-{attempt}");
        let r = replay(
            &url,
            &id,
            &[
                "--endpoint-type",
                "responses",
                "--failed-request-threshold",
                "1",
            ],
        );
        if r.stderr().contains("warmup failed") {
            assert_eq!(r.code(), 1);
            continue;
        }
        assert_eq!(r.code(), 0, "attempt {attempt}: {}", r.stderr());
        let recs = r.records();
        let ok = recs.iter().filter(|x| Outcome::of(x).is_ok()).count();
        assert!(ok > 0, "the records around the failures are kept");
        for x in &recs {
            let Some(e) = &x.error else { continue };
            assert_eq!(Outcome::of(x), Outcome::Failed, "{x:#?}");
            // The faults fall after the first token of an answer longer than one.
            assert!(
                x.max_tokens == 1 || !x.chunk_offsets_ns.is_empty(),
                "measured before the failure: {x:#?}"
            );
            assert!(x.chunk_offsets_ns.len() < x.max_tokens as usize, "{x:#?}");
            match e.kind.as_str() {
                "incomplete_stream" => {
                    assert!(e.message.contains("response.completed"), "{e:?}");
                }
                "stream_error:server_error" => {
                    assert!(e.message.contains("response.failed"), "{e:?}");
                    assert!(e.message.contains("--stream-error-rate"), "{e:?}");
                    // The output so far, as the failed response's usage counted it.
                    assert_eq!(
                        x.usage.completion_tokens,
                        Some(x.chunk_offsets_ns.len() as u64)
                    );
                }
                other => panic!("unexpected failure {other}: {x:#?}"),
            }
            kinds.insert(e.kind.clone());
        }
        if kinds.len() == 2 {
            return;
        }
    }
    panic!("both failures were not seen: {kinds:?}");
}

/// The official `openai` Python package reads the simulator's `/v1/responses` as a third-party
/// client (raw events, the stream helper, a one-shot response, the overflow error). Runs when
/// `AGENTX_PYTHON` names a Python with `openai` installed (CI sets it).
#[test]
fn openai_python_client_reads_responses_from_the_simulator() {
    let Some(python) = std::env::var_os("AGENTX_PYTHON") else {
        eprintln!("skipped: set AGENTX_PYTHON to a python with the `openai` package to run it");
        return;
    };
    let sim = Sim::start(SimConfig::max());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/py/openai_responses_client.py"
    );
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(format!("{}/v1", sim.url()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["first"], "response.created");
    assert_eq!(v["last"], "response.incomplete");
    assert_eq!(
        v["event_types"],
        serde_json::json!([
            "response.content_part.added",
            "response.content_part.done",
            "response.created",
            "response.in_progress",
            "response.incomplete",
            "response.output_item.added",
            "response.output_item.done",
            "response.output_text.delta",
            "response.output_text.done",
        ])
    );
    assert_eq!(
        (v["content_tokens"].as_u64(), v["deltas"].as_u64()),
        (Some(16), Some(16))
    );
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["incomplete_reason"], "max_output_tokens");
    assert_eq!(v["output_text"], v["text"]);
    // 4 words of instructions and 40 of the prompt; the second time its 32 tokens of full
    // 16-token blocks are read from the prefix cache.
    assert_eq!(v["input_tokens"], 44);
    assert_eq!(v["cached_tokens"], 0);
    assert_eq!(
        (v["output_tokens"].as_u64(), v["total_tokens"].as_u64()),
        (Some(16), Some(60))
    );
    assert_eq!(v["second_cached_tokens"], 32);
    assert_eq!(v["helper_status"], "completed");
    assert_eq!(v["helper_input_tokens"], 6);
    assert_eq!(v["helper_deltas"], v["helper_output_tokens"]);
    assert_eq!(v["helper_output_words"], v["helper_output_tokens"]);
    assert_eq!(
        (
            v["non_stream_tokens"].as_u64(),
            v["non_stream_usage"].as_u64()
        ),
        (Some(5), Some(5))
    );
    assert_eq!(v["non_stream_status"], "incomplete");
    assert_eq!(v["overflow"]["status"], 400);
    assert!(
        v["overflow"]["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length"),
        "{v}"
    );
}
