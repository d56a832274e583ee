//! `--endpoint-type anthropic` end to end: the real binary replays in Anthropic's Messages API
//! against the built-in simulator's `/v1/messages` on port 0, and its records and exports are those
//! of a chat replay of the same plan.

use std::collections::HashMap;

use agentx::export::aiperf;
use agentx::metrics::Outcome;
use agentx::record::Phase;
use agentx::sim::SimConfig;

use crate::support::{fixture_args, plan_key, Run, Sim};

const SECRET: &str = "sk-ant-agentx-test-4c1d";

/// A short agentx-mvp replay of the fixture corpus against `url`, with `extra` flags.
fn replay(url: &str, extra: &[&str]) -> Run {
    let mut args = fixture_args("run", url);
    args.extend(
        [
            "--concurrency",
            "2",
            "--benchmark-duration",
            "3",
            "--ignore-trace-delays",
            "--run-id",
            "anthropic-test",
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

#[test]
fn anthropic_replay_gives_the_records_and_exports_of_a_chat_replay() {
    let mut cfg = SimConfig::max();
    cfg.record_headers = true;
    let sim = Sim::start(cfg);
    let url = sim.url();
    let r = replay(&url, &["--endpoint-type", "anthropic"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    assert!(
        recs.iter().any(|x| x.phase == Phase::Profiling),
        "{recs:#?}"
    );
    for x in &recs {
        assert!(Outcome::of(x).is_ok(), "{x:#?}");
        assert!(x.first_token_ns.is_some() && !x.chunk_offsets_ns.is_empty());
        // ignore_eos: every answer runs to its limit, one word (token) per delta.
        assert_eq!(x.osl, u64::from(x.max_tokens), "{x:#?}");
        assert_eq!(x.chunk_offsets_ns.len(), x.max_tokens as usize);
        assert_eq!(x.usage.completion_tokens, Some(u64::from(x.max_tokens)));
        assert_eq!(x.finish_reason.as_deref(), Some("max_tokens"));
        assert!(x.usage.prompt_tokens.unwrap() > x.usage.cached_tokens.unwrap());
    }
    assert!(
        recs.iter().any(|x| x.usage.cached_tokens.unwrap() > 0),
        "later turns read the prefix cache"
    );
    // The headers of the Messages API, the key as `x-api-key`.
    let got = sim.received();
    assert_eq!(got.len(), recs.len());
    for g in &got {
        assert_eq!(g.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(g.header("x-api-key"), Some(SECRET));
    }
    // The exports, as for chat; the key is in none of them.
    let agg = r.json(aiperf::PROFILE_EXPORT_JSON);
    for m in [
        "time_to_first_token",
        "inter_token_latency",
        "output_sequence_length",
    ] {
        assert!(agg[m]["avg"].as_f64().unwrap() >= 0.0, "{m}: {agg}");
    }
    for e in std::fs::read_dir(r.artifacts()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
                "{} holds the key",
                p.display()
            );
        }
    }

    // The same plan in chat: each request had the same prompt, counted the same by the server.
    let chat = replay(&url, &[]);
    assert_eq!(chat.code(), 0, "{}", chat.stderr());
    let chat: HashMap<_, _> = chat
        .records()
        .into_iter()
        .map(|x| (plan_key(&x), x))
        .collect();
    let mut matched_warmups = 0;
    for x in &recs {
        let Some(c) = chat.get(&plan_key(x)) else {
            // A later turn's lane and trace depend on timing: compared when both replays ran it.
            assert_ne!(
                x.phase,
                Phase::Warmup,
                "a warmup request is in every replay: {x:#?}"
            );
            continue;
        };
        assert_eq!(
            x.usage.prompt_tokens, c.usage.prompt_tokens,
            "{x:#?}\n{c:#?}"
        );
        assert_eq!((x.isl, x.max_tokens), (c.isl, c.max_tokens));
        matched_warmups += usize::from(x.phase == Phase::Warmup);
    }
    // One warmup request per lane, at the lane's sampled start: the same plan in both replays.
    assert_eq!(matched_warmups, 2, "{recs:#?}");
}

#[test]
fn anthropic_overflow_is_classified_and_a_refused_shape_names_the_flag() {
    let mut cfg = SimConfig::max();
    cfg.max_model_len = 40_000;
    let sim = Sim::start(cfg);
    let url = sim.url();
    let r = replay(
        &url,
        &[
            "--endpoint-type",
            "anthropic",
            "--trajectory-start-min-ratio",
            "0",
            "--trajectory-start-max-ratio",
            "0.1",
            "--failed-request-threshold",
            "0.01",
        ],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let over: Vec<_> = recs.iter().filter(|x| x.context_overflow).collect();
    assert!(!over.is_empty(), "some turns overflow");
    for o in &over {
        let e = o.error.as_ref().unwrap();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("prompt is too long"), "{e:?}");
    }
    assert_eq!(r.summary()["summary"]["requests_failed"], 0);

    // A path that does not take the Messages API: the error names the endpoint type and the flags.
    let r = replay(
        &url,
        &["--endpoint-type", "anthropic", "--endpoint", "/v1/complete"],
    );
    assert_ne!(r.code(), 0);
    let recs = r.records();
    let e = recs[0].error.as_ref().unwrap();
    assert_eq!(e.code, 404);
    assert!(e.message.contains("--endpoint-type anthropic"), "{e:?}");
    assert!(e.message.contains("/v1/complete"), "{e:?}");

    // A chat endpoint answers in chat chunks: malformed for the Messages API, with the same hint.
    let r = replay(
        &url,
        &[
            "--endpoint-type",
            "anthropic",
            "--endpoint",
            "/v1/chat/completions",
        ],
    );
    assert_ne!(r.code(), 0);
    let e = r.records()[0].error.clone().unwrap();
    assert!(
        e.message.contains("not an Anthropic Messages event"),
        "{e:?}"
    );
    assert!(e.message.contains("--endpoint-type anthropic"), "{e:?}");

    let r = replay(&url, &["--endpoint-type", "completions"]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr().contains("chat, anthropic, responses"),
        "{}",
        r.stderr()
    );
}

/// The official `anthropic` Python package streams from the simulator's `/v1/messages` as a
/// third-party client (raw events, the stream helper, a one-shot message, the overflow error).
/// Runs when `AGENTX_PYTHON` names a Python with `anthropic` installed (CI sets it).
#[test]
fn anthropic_python_client_streams_from_the_simulator() {
    let Some(python) = std::env::var_os("AGENTX_PYTHON") else {
        eprintln!("skipped: set AGENTX_PYTHON to a python with the `anthropic` package to run it");
        return;
    };
    let sim = Sim::start(SimConfig::max());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/anthropic_client.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(sim.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["first"], "message_start");
    assert_eq!(v["last"], "message_stop");
    assert_eq!(
        v["event_types"],
        serde_json::json!([
            "content_block_delta",
            "content_block_start",
            "content_block_stop",
            "message_delta",
            "message_start",
            "message_stop"
        ])
    );
    assert_eq!(
        (v["content_tokens"].as_u64(), v["deltas"].as_u64()),
        (Some(16), Some(16))
    );
    assert_eq!(v["stop_reason"], "max_tokens");
    // 4 system words and 40 of the prompt; the second time its 32 tokens of full 16-token blocks
    // are read from the prefix cache.
    assert_eq!(v["input_tokens"], 44);
    assert_eq!(v["cache_read_input_tokens"], 0);
    assert_eq!(v["output_tokens"], 16);
    assert_eq!(v["second_cache_read_input_tokens"], 32);
    assert_eq!(v["second_input_tokens"], 12);
    assert_eq!(v["helper_tokens"], 5);
    assert_eq!(v["helper_final_stop"], "max_tokens");
    assert_eq!(v["helper_final_output_tokens"], 5);
    assert_eq!(
        (
            v["non_stream_tokens"].as_u64(),
            v["non_stream_usage"].as_u64()
        ),
        (Some(5), Some(5))
    );
    assert_eq!(v["overflow"]["status"], 400);
    assert_eq!(v["overflow"]["type"], "invalid_request_error");
    assert!(v["overflow"]["message"]
        .as_str()
        .unwrap()
        .starts_with("prompt is too long: 200000 tokens > "));
}
