//! The capture proxy end to end: a scripted agent session (a root with tool turns and a subagent,
//! Claude Code's session headers) goes through `agentx::capture` to the simulator, the corpus is
//! built, replayed against the simulator as session trees, and `dataset fidelity` judges the replay
//! against the capture. Also: no text reaches the corpus, and a reply cut mid-stream reaches the
//! client as it happened and is marked, not kept.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use agentx::capture::{CaptureConfig, CaptureSettings};
use agentx::dataset::tokens::TokenCounter;
use agentx::sim::{self, SimConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::{json, Value};
use tokio::net::TcpStream;

use crate::support::{Run, Sim};

/// A word no prompt or reply of the simulator has: the test looks for it in the corpus.
const SECRET: &str = "zyxwvutsecretword";

/// A streamed chat request through `proxy` with `headers`: the reply's text, or the body error.
async fn chat(
    proxy: SocketAddr,
    headers: &[(&str, &str)],
    messages: &[Value],
) -> Result<String, String> {
    let stream = TcpStream::connect(proxy).await.map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let body = json!({
        "model": "agentx-sim", "stream": true, "max_tokens": 24,
        "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "read_file",
            "description": "Read a file of the repository", "parameters": {"type": "object"}}}],
        "messages": messages,
    });
    let mut request = Request::post("/v1/chat/completions")
        .header("host", proxy.to_string())
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = String::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the reply broke: {e}"))?;
        if let Some(data) = frame.data_ref() {
            text.push_str(&String::from_utf8_lossy(data));
        }
    }
    let reply: String = text
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    Ok(reply)
}

/// A streamed Messages request through `proxy`: the reply's text.
async fn messages(proxy: SocketAddr, body: &Value) -> String {
    let stream = TcpStream::connect(proxy).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let request = Request::post("/v1/messages")
        .header("host", proxy.to_string())
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes)
        .split("\n\n")
        .filter_map(|event| event.lines().find_map(|line| line.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|event| {
            event
                .pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

/// `words` words of filler (a file's content, a task), each distinct enough to hash apart.
fn filler(tag: &str, words: usize) -> String {
    (0..words)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One agent session: a root of four turns (a task, then tool results) that starts a subagent of
/// three turns after its second, with Claude Code's headers, and think gaps between turns.
async fn scripted_session(proxy: SocketAddr) {
    let root_headers = [("x-claude-code-session-id", "session-1")];
    let agent_headers = [
        ("x-claude-code-session-id", "session-1"),
        ("x-claude-code-agent-id", "agent-explore"),
    ];
    let mut root = vec![
        json!({"role": "system", "content": format!("{} {SECRET}", filler("sys", 300))}),
        json!({"role": "user", "content": filler("task", 200)}),
    ];
    for turn in 0..4 {
        let reply = chat(proxy, &root_headers, &root).await.unwrap();
        root.push(json!({"role": "assistant", "content": reply, "tool_calls": [
            {"id": format!("call{turn}"), "type": "function",
             "function": {"name": "read_file", "arguments": format!("{{\"path\": \"f{turn}\"}}")}}]}));
        root.push(
            json!({"role": "tool", "tool_call_id": format!("call{turn}"),
            "content": filler(&format!("file{turn}x"), 150)}),
        );
        if turn == 1 {
            let mut agent = vec![
                json!({"role": "system", "content": filler("agentsys", 150)}),
                json!({"role": "user", "content": filler("explore", 120)}),
            ];
            for step in 0..3 {
                let reply = chat(proxy, &agent_headers, &agent).await.unwrap();
                agent.push(json!({"role": "assistant", "content": reply}));
                agent
                    .push(json!({"role": "user", "content": filler(&format!("found{step}x"), 90)}));
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
}

fn capture_config(upstream: &str, dir: &Path) -> CaptureConfig {
    CaptureConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        upstream: upstream.parse().unwrap(),
        dir: dir.to_owned(),
        block_size: 64,
        counter: TokenCounter::Words,
        tokenizer_name: "words".into(),
        keep_text: false,
    }
}

#[test]
fn a_captured_session_replays_with_its_shape_and_input_tokens() {
    let sim = Sim::start(SimConfig::default());
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("capture");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let manifest = runtime.block_on(async {
        let capture = agentx::capture::start(capture_config(&sim.url(), &dir))
            .await
            .unwrap();
        scripted_session(capture.addr()).await;
        capture.finish().await.unwrap()
    });
    assert_eq!(
        (manifest.requests, manifest.traces, manifest.streams),
        (7, 1, 2)
    );
    assert_eq!(manifest.identified_by["header:claude-code"], 7);
    assert!(manifest.broken.is_empty(), "{:?}", manifest.broken);
    let corpus = dir.join("traces.jsonl");
    let text = std::fs::read_to_string(&corpus).unwrap();
    assert!(!text.contains(SECRET) && !text.contains("task1") && !text.contains("file0x"));
    assert!(!dir.join("capture_text.jsonl").exists());
    let journal = std::fs::read_to_string(dir.join("capture.jsonl")).unwrap();
    assert!(!journal.contains(SECRET) && !journal.contains("task1"));
    let trace: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let entries = trace["requests"].as_array().unwrap();
    assert_eq!(entries.len(), 5, "4 root requests and the subagent entry");
    assert_eq!(entries[2]["type"], "subagent");
    assert_eq!(entries[2]["requests"].as_array().unwrap().len(), 3);
    // The subagent's prompts share none of the root's blocks; each root turn extends the last.
    let ids = |entry: &Value| -> Vec<u64> {
        entry["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap())
            .collect()
    };
    let (first, second) = (ids(&entries[0]), ids(&entries[1]));
    assert!(second.len() > first.len() && second.starts_with(&first));
    assert!(entries[0]["in"].as_u64().unwrap() > 500);

    // The capture replayed as session trees, and judged against itself.
    let run = Run::in_process(
        tempfile::tempdir().unwrap(),
        &[
            "run",
            "--url",
            &sim.url(),
            "--model",
            "agentx-sim",
            "--input-file",
            corpus.to_str().unwrap(),
            "--random-seed",
            "7",
            "--unsafe-override",
            "--concurrency",
            "1",
            "--benchmark-duration",
            "6",
            "--benchmark-grace-period",
            "60",
            "--stats-interval",
            "0",
        ],
        &[],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let report = Run::in_process(
        tempfile::tempdir().unwrap(),
        &[
            "dataset",
            "fidelity",
            corpus.to_str().unwrap(),
            run.artifacts().to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    assert_eq!(report.code(), 0, "{}{}", report.stdout(), report.stderr());
    let report: Value = serde_json::from_str(&report.stdout()).unwrap();
    assert!(report["matched"].as_u64().unwrap() >= 7, "{report:#}");
    assert!(
        report["isl_relative_error"]["max"].as_f64().unwrap() <= 0.01,
        "{report:#}"
    );
    let tree = &report["trees"][0];
    assert_eq!(tree["planned"], json!([4, 3]), "{report:#}");
    assert_eq!(tree["equal"], true, "{report:#}");
}

#[test]
fn a_reply_cut_mid_stream_reaches_the_client_cut_and_is_marked_not_kept() {
    let mut config = SimConfig::default();
    config.faults.reset_rate = 1.0;
    config.timing = sim::Timing::Fixed {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(5),
    };
    let sim = Sim::start(config);
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("capture");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (outcome, manifest) = runtime.block_on(async {
        let capture = agentx::capture::start(capture_config(&sim.url(), &dir))
            .await
            .unwrap();
        let messages = [json!({"role": "user", "content": filler("w", 100)})];
        let outcome = chat(capture.addr(), &[], &messages).await;
        (outcome, capture.finish().await.unwrap())
    });
    let error = outcome.expect_err("the client sees the cut");
    assert!(error.contains("broke"), "{error}");
    assert_eq!(manifest.requests, 1);
    assert_eq!(manifest.corpus_requests, 0);
    assert_eq!(manifest.broken.len(), 1);
    assert!(
        manifest.broken[0].reason.contains("mid-stream"),
        "{:?}",
        manifest.broken
    );
    // A killed capture's corpus is built again from its journal and settings alone.
    let settings = CaptureSettings::read(&dir).unwrap();
    let again = agentx::capture::build_corpus(&dir, &settings).unwrap();
    assert_eq!(again, manifest);
}

#[test]
fn fidelity_refuses_a_directory_that_is_not_a_run() {
    let empty = tempfile::tempdir().unwrap();
    let corpus = crate::support::fixture("traces-24.jsonl");
    let run = Run::in_process(
        tempfile::tempdir().unwrap(),
        &[
            "dataset",
            "fidelity",
            corpus.to_str().unwrap(),
            empty.path().to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(run.code(), 0);
    assert!(
        run.stderr().contains("holds no records.jsonl"),
        "{}",
        run.stderr()
    );
}

#[test]
fn a_messages_session_without_headers_is_placed_by_its_prompts_and_keeps_text_when_asked() {
    let sim = Sim::start(SimConfig::default());
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("capture");
    let mut config = capture_config(&sim.url(), &dir);
    config.keep_text = true;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let manifest = runtime.block_on(async {
        let capture = agentx::capture::start(config).await.unwrap();
        let mut history = vec![json!({"role": "user", "content": filler("ask", 200)})];
        for turn in 0..2 {
            let body = json!({"model": "agentx-sim", "max_tokens": 16, "stream": true,
                "system": [{"type": "text", "text": format!("{} {SECRET}", filler("rules", 100))}],
                "messages": history});
            let reply = messages(capture.addr(), &body).await;
            assert!(!reply.is_empty());
            history.push(json!({"role": "assistant", "content": [{"type": "text", "text": reply}]}));
            history.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("t{turn}"), "content": filler("out", 80)}]}));
        }
        capture.finish().await.unwrap()
    });
    assert_eq!(
        (manifest.traces, manifest.streams, manifest.corpus_requests),
        (1, 1, 2)
    );
    assert_eq!(manifest.identified_by["structure"], 2);
    let corpus = std::fs::read_to_string(dir.join("traces.jsonl")).unwrap();
    assert!(!corpus.contains(SECRET));
    let trace: Value = serde_json::from_str(corpus.trim()).unwrap();
    let second = &trace["requests"][1];
    assert_eq!(second["input_types"], json!(["tool_result"]));
    assert!(trace["system_tokens"].as_u64().unwrap() >= 101);
    // The text is beside the corpus, by trace and time.
    let text = std::fs::read_to_string(dir.join("capture_text.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["trace"], "capture_0001");
    assert!(lines[1]["request"]["system"][0]["text"]
        .as_str()
        .unwrap()
        .contains(SECRET));
    assert!(!lines[0]["reply"].as_str().unwrap().is_empty());
}
