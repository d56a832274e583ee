//! End-to-end tests of the simulated server: real HTTP against `sim::spawn` on port 0, with a
//! small hyper client, plus the `agentx-host sim` binary and the official `openai` Python client.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentx::sim::{self, SimConfig, SimHandle, Timing};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::{json, Value};
use tokio::net::TcpStream;

/// A response as the tests see it. `body_error` is set when the body was cut short.
struct Reply {
    status: u16,
    headers: hyper::HeaderMap,
    body: String,
    body_error: Option<String>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("no header {name}"))
    }

    /// The `data:` payloads of an SSE body, in order.
    fn events(&self) -> Vec<&str> {
        self.body
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not an SSE data line: {e:?}"))
            })
            .collect()
    }
}

/// One request on a fresh connection.
async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Reply, String> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut tx, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(body.into())).unwrap();
    let resp = tx
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    let mut body_error = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Some(d) = f.data_ref() {
                    bytes.extend_from_slice(d);
                }
            }
            Err(e) => {
                body_error = Some(e.to_string());
                break;
            }
        }
    }
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8(bytes).unwrap(),
        body_error,
    })
}

async fn chat(h: &SimHandle, body: &Value, headers: &[(&str, &str)]) -> Reply {
    send(
        h.addr(),
        "POST",
        "/v1/chat/completions",
        headers,
        body.to_string(),
    )
    .await
    .unwrap()
}

fn words(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn stream_body(prompt: &str, max_tokens: u64) -> Value {
    json!({
        "model": "sim-model",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
        "ignore_eos": true,
    })
}

/// Parse the SSE stream and check it has vLLM's exact shape; returns (content, usage).
fn check_stream(r: &Reply, id: Option<&str>) -> (String, Value) {
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body_error.is_none(), "{:?}", r.body_error);
    assert_eq!(r.header("content-type"), "text/event-stream; charset=utf-8");
    let events = r.events();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("{err}: {e}")))
        .collect();
    let first_id = chunks[0]["id"].as_str().unwrap().to_string();
    assert!(first_id.starts_with("chatcmpl-"));
    if let Some(id) = id {
        assert_eq!(first_id, format!("chatcmpl-{id}"));
    }
    for c in &chunks {
        assert_eq!(c["id"], first_id.as_str());
        assert_eq!(c["object"], "chat.completion.chunk");
        assert!(c["created"].as_u64().unwrap() > 1_600_000_000);
        assert_eq!(c["model"], "sim-model");
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let usage = usage_chunk["usage"].clone();
    let content_chunks = &chunks[1..chunks.len() - 1];
    let mut content = String::new();
    for (i, c) in content_chunks.iter().enumerate() {
        let choice = &c["choices"][0];
        assert_eq!(choice["index"], 0);
        assert_eq!(choice["logprobs"], Value::Null);
        let last = i == content_chunks.len() - 1;
        if last {
            assert!(matches!(
                choice["finish_reason"].as_str(),
                Some("length" | "stop")
            ));
            assert_eq!(choice["stop_reason"], Value::Null);
        } else {
            assert_eq!(choice["finish_reason"], Value::Null, "chunk {i}");
        }
        content.push_str(choice["delta"]["content"].as_str().unwrap());
    }
    // One token per chunk, as vLLM sends them.
    assert_eq!(
        content_chunks.len() as u64,
        usage["completion_tokens"].as_u64().unwrap()
    );
    (content, usage)
}

fn count_words(s: &str) -> u64 {
    s.split_ascii_whitespace().count() as u64
}

fn max_config() -> SimConfig {
    SimConfig::max()
}

#[tokio::test]
async fn streams_exactly_like_vllm() {
    let h = sim::spawn(max_config()).unwrap();
    let prompt = words(40, "p");
    let r = chat(&h, &stream_body(&prompt, 7), &[("x-request-id", "req-1")]).await;
    assert_eq!(r.header("x-request-id"), "req-1");
    let (content, usage) = check_stream(&r, Some("req-1"));
    assert_eq!(count_words(&content), 7);
    assert_eq!(usage["prompt_tokens"], 40);
    assert_eq!(usage["completion_tokens"], 7);
    assert_eq!(usage["total_tokens"], 47);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    let events = r.events();
    let last_content: Value = serde_json::from_str(events[events.len() - 3]).unwrap();
    assert_eq!(last_content["choices"][0]["finish_reason"], "length");

    // The same request id gives the same text.
    let again = chat(&h, &stream_body(&prompt, 7), &[("x-request-id", "req-1")]).await;
    assert_eq!(check_stream(&again, Some("req-1")).0, content);

    // Without include_usage there is no usage chunk: role, 3 tokens, [DONE].
    let mut body = stream_body(&prompt, 3);
    body["stream_options"] = json!({"include_usage": false});
    let r = chat(&h, &body, &[]).await;
    let events = r.events();
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(!events.iter().any(|e| e.contains("\"usage\"")));
    h.shutdown().await;
}

#[tokio::test]
async fn answers_without_streaming() {
    let h = sim::spawn(max_config()).unwrap();
    let body = json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "you are terse"},
            {"role": "user", "content": [{"type": "text", "text": "two words"}]}
        ],
        "max_completion_tokens": 12,
        "ignore_eos": true
    });
    let r = chat(&h, &body, &[]).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-type"), "application/json");
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], "m");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(count_words(text), 12);
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(v["usage"]["total_tokens"], 17);
    h.shutdown().await;
}

#[tokio::test]
async fn ignore_eos_gives_exactly_max_tokens_and_otherwise_never_more() {
    let h = sim::spawn(max_config()).unwrap();
    let r = chat(&h, &stream_body("hello", 1000), &[]).await;
    let (content, usage) = check_stream(&r, None);
    assert_eq!(count_words(&content), 1000);
    assert_eq!(usage["completion_tokens"], 1000);

    for (i, max) in [1u64, 5, 100, 300, 2000].into_iter().enumerate() {
        let mut body = stream_body("hello there", max);
        body["ignore_eos"] = json!(false);
        let id = format!("free-{i}");
        let r = chat(&h, &body, &[("x-request-id", &id)]).await;
        let (content, usage) = check_stream(&r, Some(&id));
        let n = usage["completion_tokens"].as_u64().unwrap();
        assert!(n >= 1 && n <= max, "{n} tokens for max {max}");
        assert_eq!(count_words(&content), n);
        let events = r.events();
        let last: Value = serde_json::from_str(events[events.len() - 3]).unwrap();
        let want = if n == max { "length" } else { "stop" };
        assert_eq!(last["choices"][0]["finish_reason"], want);
    }
    h.shutdown().await;
}

#[tokio::test]
async fn cached_tokens_grow_with_a_repeated_prefix() {
    let h = sim::spawn(max_config()).unwrap();
    let mut convo = vec![json!({"role": "system", "content": words(100, "sys")})];
    let mut cached = Vec::new();
    for turn in 0..4 {
        convo.push(json!({"role": "user", "content": words(50, &format!("u{turn}-"))}));
        let body = json!({
            "model": "sim-model", "messages": convo, "max_tokens": 20, "ignore_eos": true,
            "stream": true, "stream_options": {"include_usage": true}
        });
        let r = chat(&h, &body, &[]).await;
        let (content, usage) = check_stream(&r, None);
        cached.push(
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap(),
        );
        assert_eq!(
            r.header("x-sim-cached-tokens"),
            cached.last().unwrap().to_string()
        );
        convo.push(json!({"role": "assistant", "content": content}));
    }
    assert_eq!(cached[0], 0);
    // Turn 2 reuses turn 1's prompt (150 tokens): 9 whole blocks of 16.
    assert_eq!(cached[1], 144);
    assert!(cached.windows(2).all(|w| w[1] > w[0]), "{cached:?}");
    assert!(cached.iter().all(|c| c % 16 == 0));
    let m = h.metrics_text();
    let hits: u64 = cached.iter().sum();
    assert!(
        m.contains(&format!(
            "vllm:prefix_cache_hits_total{{model_name=\"agentx-sim\",engine=\"0\"}} {hits}.0"
        )),
        "{m}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn cache_hits_shorten_prefill_and_ttft() {
    // The H200-like model at 50x speed: a 4000-token prompt costs 15 ms + 160 ms of prefill
    // when uncached and only the overhead when cached; the server reports its computed prefill.
    let mut c = SimConfig::h200();
    if let Timing::Modeled(m) = &mut c.timing {
        m.speed = 50.0;
    }
    let h = sim::spawn(c).unwrap();
    let prompt = words(4000, "w");
    let miss = chat(&h, &stream_body(&prompt, 2), &[]).await;
    let hit = chat(&h, &stream_body(&prompt, 2), &[]).await;
    check_stream(&miss, None);
    check_stream(&hit, None);
    let ms = |r: &Reply| r.header("x-sim-prefill-ms").parse::<f64>().unwrap();
    assert_eq!(miss.header("x-sim-cached-tokens"), "0");
    assert_eq!(hit.header("x-sim-cached-tokens"), "3984");
    assert!((ms(&miss) - 3.5).abs() < 0.01, "{}", ms(&miss));
    assert!((ms(&hit) - 0.3128).abs() < 0.01, "{}", ms(&hit));
    assert!(ms(&hit) < ms(&miss) / 10.0);
    h.shutdown().await;
}

#[tokio::test]
async fn context_overflow_uses_vllms_message() {
    let mut c = max_config();
    c.max_model_len = 100;
    let h = sim::spawn(c).unwrap();
    let r = chat(
        &h,
        &stream_body(&words(90, "w"), 20),
        &[("x-request-id", "ovf")],
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("x-request-id"), "ovf");
    assert_eq!(
        r.json(),
        json!({"error": {
            "message": "This model's maximum context length is 100 tokens. However, you requested 20 output tokens and your prompt contains 90 input tokens, for a total of 110 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=90)",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400
        }})
    );
    // Exactly at the limit is fine.
    let ok = chat(&h, &stream_body(&words(90, "w"), 10), &[]).await;
    check_stream(&ok, None);
    h.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_clear_4xx_and_the_server_keeps_serving() {
    let mut c = max_config();
    c.max_body_bytes = 10_000;
    let h = sim::spawn(c).unwrap();
    let cases: Vec<(String, u16, &str)> = vec![
        ("{not json".into(), 400, "not valid JSON"),
        ("{}".into(), 400, "missing field `messages`"),
        (
            r#"{"messages": {}}"#.into(),
            400,
            "field `messages` must be",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":"many"}"#.into(),
            400,
            "`max_tokens` must be a positive integer, got a string",
        ),
        (
            r#"{"messages":[{"role":"user","content":"x"}],"stream":1}"#.into(),
            400,
            "`stream` must be a boolean",
        ),
        (
            r#"{"messages":[{"role":7,"content":"x"}]}"#.into(),
            400,
            "`messages[0].role` must be a string",
        ),
        (
            format!(
                r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
                "a ".repeat(20_000)
            ),
            413,
            "over the limit of 10000 bytes",
        ),
    ];
    for (body, status, want) in cases {
        let r = send(h.addr(), "POST", "/v1/chat/completions", &[], body)
            .await
            .unwrap();
        assert_eq!(r.status, status, "{}", r.body);
        let v = r.json();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{msg}");
        assert_eq!(v["error"]["code"], status);
        assert_eq!(v["error"]["type"], "BadRequestError");
    }
    let r = send(h.addr(), "GET", "/nope", &[], "").await.unwrap();
    assert_eq!(
        (r.status, r.body.as_str()),
        (404, r#"{"detail":"Not Found"}"#)
    );
    let r = send(h.addr(), "GET", "/v1/chat/completions", &[], "")
        .await
        .unwrap();
    assert_eq!(r.status, 405);
    // Still serving.
    check_stream(&chat(&h, &stream_body("still here", 3), &[]).await, None);
    let r = send(h.addr(), "GET", "/health", &[], "").await.unwrap();
    assert_eq!(r.status, 200);
    let r = send(h.addr(), "GET", "/v1/models", &[], "").await.unwrap();
    assert_eq!(r.json()["data"][0]["id"], "agentx-sim");
    assert_eq!(r.json()["data"][0]["max_model_len"], 131072);
    h.shutdown().await;
}

#[tokio::test]
async fn strict_model_answers_vllms_404() {
    let mut c = max_config();
    c.strict_model = true;
    let h = sim::spawn(c).unwrap();
    let r = chat(&h, &stream_body("x", 1), &[]).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["error"]["message"],
        "The model `sim-model` does not exist."
    );
    h.shutdown().await;
}

/// Parse Prometheus text into `name{labels}` -> value, checking every sample line's shape.
fn parse_metrics(text: &str) -> (HashMap<String, f64>, HashMap<String, String>) {
    let mut samples = HashMap::new();
    let mut types = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (key, value) = line.rsplit_once(' ').unwrap();
        let v = if value == "+Inf" {
            f64::INFINITY
        } else {
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad value: {line}"))
        };
        assert!(key.contains('{') && key.ends_with('}'), "{line}");
        samples.insert(key.to_string(), v);
    }
    (samples, types)
}

fn sum_series(samples: &HashMap<String, f64>, name: &str) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.split('{').next() == Some(name))
        .map(|(_, v)| v)
        .sum()
}

#[tokio::test]
async fn metrics_have_vllm_names_types_and_per_engine_series() {
    let mut config = max_config();
    config.engines = 2;
    let server = sim::spawn(config).unwrap();
    let mut prompt_total = 0;
    for i in 0..6 {
        let r = chat(&server, &stream_body(&words(10 + i, "m"), 4), &[]).await;
        check_stream(&r, None);
        assert_eq!(r.header("x-sim-engine"), (i % 2).to_string());
        prompt_total += 10 + i;
    }
    // A correlation id pins a session to one engine.
    let e: Vec<String> = futures_of(&server, 4).await;
    assert!(e.windows(2).all(|w| w[0] == w[1]), "{e:?}");

    let r = send(server.addr(), "GET", "/metrics", &[], "")
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").starts_with("text/plain"));
    let (s, types) = parse_metrics(&r.body);
    for (name, kind) in [
        ("vllm:prompt_tokens_total", "counter"),
        ("vllm:generation_tokens_total", "counter"),
        ("vllm:prefix_cache_queries_total", "counter"),
        ("vllm:prefix_cache_hits_total", "counter"),
        ("vllm:request_success_total", "counter"),
        ("vllm:num_preemptions_total", "counter"),
        ("vllm:num_requests_running", "gauge"),
        ("vllm:num_requests_waiting", "gauge"),
        ("vllm:kv_cache_usage_perc", "gauge"),
        ("vllm:time_to_first_token_seconds", "histogram"),
        ("vllm:inter_token_latency_seconds", "histogram"),
        ("vllm:e2e_request_latency_seconds", "histogram"),
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    for engine in ["0", "1"] {
        let key =
            format!("vllm:prompt_tokens_total{{model_name=\"agentx-sim\",engine=\"{engine}\"}}");
        assert!(s[&key] > 0.0, "{key}");
        let inf = format!(
            "vllm:time_to_first_token_seconds_bucket{{model_name=\"agentx-sim\",engine=\"{engine}\",le=\"+Inf\"}}"
        );
        let count = format!(
            "vllm:time_to_first_token_seconds_count{{model_name=\"agentx-sim\",engine=\"{engine}\"}}"
        );
        assert_eq!(s[&inf], s[&count]);
    }
    let correlated_prompts = 4 * 5;
    assert_eq!(
        sum_series(&s, "vllm:prompt_tokens_total"),
        (prompt_total + correlated_prompts) as f64
    );
    assert_eq!(sum_series(&s, "vllm:generation_tokens_total"), 40.0);
    assert_eq!(sum_series(&s, "vllm:request_success_total"), 10.0);
    assert_eq!(
        sum_series(&s, "vllm:time_to_first_token_seconds_count"),
        10.0
    );
    assert_eq!(
        sum_series(&s, "vllm:inter_token_latency_seconds_count"),
        40.0
    );
    assert_eq!(sum_series(&s, "vllm:num_requests_running"), 0.0);
    server.shutdown().await;
}

async fn futures_of(h: &SimHandle, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..n {
        let r = chat(
            h,
            &stream_body(&words(5, "c"), 4),
            &[("x-correlation-id", "session-7")],
        )
        .await;
        check_stream(&r, None);
        out.push(r.header("x-sim-engine").to_string());
    }
    out
}

#[tokio::test]
async fn max_num_seqs_queues_requests() {
    // One sequence at a time, each taking ~100 ms of fixed decode: the second waits for the first.
    let mut config = SimConfig::h200();
    config.max_num_seqs = 1;
    if let Timing::Modeled(model) = &mut config.timing {
        model.prefill_overhead = Duration::ZERO;
        model.itl_base = Duration::from_millis(10);
        model.itl_per_seq = Duration::ZERO;
    }
    let server = sim::spawn(config).unwrap();
    let (first, second) = (stream_body("first", 10), stream_body("second", 10));
    let (a, b) = tokio::join!(chat(&server, &first, &[]), chat(&server, &second, &[]));
    check_stream(&a, None);
    check_stream(&b, None);
    let q = |r: &Reply| r.header("x-sim-queue-ms").parse::<f64>().unwrap();
    let (short, long) = if q(&a) < q(&b) {
        (q(&a), q(&b))
    } else {
        (q(&b), q(&a))
    };
    assert!(short < 50.0 && long >= 90.0, "queue ms {short} {long}");
    let (s, _) = parse_metrics(&server.metrics_text());
    assert_eq!(sum_series(&s, "vllm:request_queue_time_seconds_count"), 2.0);
    server.shutdown().await;
}

#[tokio::test]
async fn fixed_latency_mode() {
    let mut c = max_config();
    c.timing = Timing::Fixed {
        ttft: Duration::from_millis(40),
        itl: Duration::from_millis(5),
    };
    let h = sim::spawn(c).unwrap();
    let t = Instant::now();
    let r = chat(&h, &stream_body("x y z", 20), &[]).await;
    check_stream(&r, None);
    // A lower bound only: 40 ms to the first token plus 19 gaps of 5 ms.
    assert!(
        t.elapsed() >= Duration::from_millis(135),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.header("x-sim-prefill-ms"), "40.000");
    // The server's own time to first token: from when the request's last body byte arrived at its
    // socket (the kernel's stamp; here it came with the head) to the first token, due 40 ms after
    // the head was read. The request went out after `t` and the stamps are wall-clock times.
    let stamp = |name: &str| r.header(name).parse::<u64>().unwrap();
    let received = stamp("x-agentx-sim-request-received-ns");
    let start = stamp("x-agentx-sim-response-start-ns");
    assert!(
        start.saturating_sub(received) >= 40_000_000
            && u128::from(start - received) <= t.elapsed().as_nanos(),
        "{received} {start}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn headers_at_first_token_hold_the_head_until_the_token() {
    let mut c = max_config();
    c.timing = Timing::Fixed {
        ttft: Duration::from_millis(40),
        itl: Duration::from_millis(1),
    };
    c.headers_at_first_token = true;
    let h = sim::spawn(c).unwrap();
    let stream = TcpStream::connect(h.addr()).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::post("/v1/chat/completions")
        .header("host", h.addr().to_string())
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(stream_body("x y z", 3).to_string())))
        .unwrap();
    let t = Instant::now();
    let resp = tx.send_request(req).await.unwrap();
    // The head came with the first token, due 40 ms after the request arrived (a lower bound).
    assert!(
        t.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t.elapsed()
    );
    let stamp = |name: &str| -> u64 { resp.headers()[name].to_str().unwrap().parse().unwrap() };
    let received = stamp("x-agentx-sim-request-received-ns");
    let start = stamp("x-agentx-sim-response-start-ns");
    assert!(start > received, "{received} {start}");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.ends_with(b"data: [DONE]\n\n"), "{body:?}");
    h.shutdown().await;
}

#[tokio::test]
async fn fault_fail_rate_answers_500_or_503() {
    let mut c = max_config();
    c.faults.fail_rate = 1.0;
    let h = sim::spawn(c).unwrap();
    let mut seen = Vec::new();
    for i in 0..12 {
        let id = format!("f{i}");
        let r = chat(&h, &stream_body("x", 3), &[("x-request-id", &id)]).await;
        assert!(r.status == 500 || r.status == 503, "{}", r.status);
        let v = r.json();
        assert_eq!(v["error"]["code"], r.status);
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--fail-rate"));
        seen.push(r.status);
    }
    assert!(seen.contains(&500) && seen.contains(&503), "{seen:?}");
    h.shutdown().await;

    // Deterministic by seed: the same ids fail the same way at a partial rate.
    let run = |seed: u64| async move {
        let mut c = max_config();
        c.faults.fail_rate = 0.5;
        c.faults.seed = seed;
        let h = sim::spawn(c).unwrap();
        let mut v = Vec::new();
        for i in 0..16 {
            let id = format!("d{i}");
            v.push(
                chat(&h, &stream_body("x", 2), &[("x-request-id", &id)])
                    .await
                    .status,
            );
        }
        h.shutdown().await;
        v
    };
    let a = run(9).await;
    assert_eq!(a, run(9).await);
    assert!(a.contains(&200) && a.iter().any(|s| *s != 200), "{a:?}");
}

#[tokio::test]
async fn fault_reset_cuts_the_stream_mid_way() {
    let mut c = max_config();
    c.faults.reset_rate = 1.0;
    let h = sim::spawn(c).unwrap();
    let r = chat(&h, &stream_body("x", 50), &[]).await;
    assert_eq!(r.status, 200);
    assert!(r.body_error.is_some(), "stream was not cut");
    let events = r.events();
    assert!(events.len() >= 2, "{events:?}");
    assert!(!r.body.contains("[DONE]"));
    // The server survives.
    let r = send(h.addr(), "GET", "/health", &[], "").await.unwrap();
    assert_eq!(r.status, 200);
    let (s, _) = parse_metrics(&h.metrics_text());
    assert_eq!(
        s["vllm:request_success_total{model_name=\"agentx-sim\",engine=\"0\",finished_reason=\"abort\"}"],
        1.0
    );
    h.shutdown().await;
}

#[tokio::test]
async fn fault_stall_pauses_the_stream() {
    let mut c = max_config();
    c.faults.stall_rate = 1.0;
    c.faults.stall = Duration::from_millis(300);
    let h = sim::spawn(c).unwrap();
    let t = Instant::now();
    let r = chat(&h, &stream_body("x", 10), &[]).await;
    check_stream(&r, None);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    h.shutdown().await;
}

#[tokio::test]
async fn fault_malformed_inserts_one_bad_event() {
    let mut c = max_config();
    c.faults.malformed_rate = 1.0;
    let h = sim::spawn(c).unwrap();
    let r = chat(&h, &stream_body("x", 10), &[]).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    let bad: Vec<_> = events
        .iter()
        .filter(|e| **e != "[DONE]" && serde_json::from_str::<Value>(e).is_err())
        .collect();
    assert_eq!(bad.len(), 1, "{events:?}");
    // Every token still arrives.
    assert_eq!(events.len(), 1 + 1 + 10 + 1 + 1);
    h.shutdown().await;
}

#[tokio::test]
async fn fault_stop_after_refuses_later_requests() {
    let mut c = max_config();
    c.faults.stop_after = Some(2);
    let h = sim::spawn(c).unwrap();
    for _ in 0..2 {
        check_stream(&chat(&h, &stream_body("x", 2), &[]).await, None);
    }
    // The listener is closed shortly after the second request arrives.
    let mut refused = false;
    for _ in 0..50 {
        let r = send(
            h.addr(),
            "POST",
            "/v1/chat/completions",
            &[],
            stream_body("x", 2).to_string(),
        )
        .await;
        if r.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "third request was answered");
    h.shutdown().await;
}

#[tokio::test]
async fn client_disconnect_releases_the_slot() {
    let mut c = max_config();
    c.timing = Timing::Fixed {
        ttft: Duration::from_millis(1),
        itl: Duration::from_millis(20),
    };
    let h = sim::spawn(c).unwrap();
    let addr = h.addr();
    let t = tokio::spawn(async move {
        send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            stream_body("x", 1000).to_string(),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (s, _) = parse_metrics(&h.metrics_text());
    assert_eq!(sum_series(&s, "vllm:num_requests_running"), 1.0);
    t.abort();
    let mut running = 1.0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        running = sum_series(
            &parse_metrics(&h.metrics_text()).0,
            "vllm:num_requests_running",
        );
        if running == 0.0 {
            break;
        }
    }
    assert_eq!(running, 0.0);
    h.shutdown().await;
}

#[test]
fn cli_serves_and_stops_on_sigterm() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(["sim", "--port", "0", "--preset", "max", "--engines", "2"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no url in {line:?}"));
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            stream_body("hi", 4).to_string(),
        )
        .await
        .unwrap();
        check_stream(&r, None);
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");

    let out = Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(["sim", "--stall-rate", "0.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stall-ms"));
}

/// The official `openai` Python package streams a chat completion with usage from the sim.
/// Runs when `AGENTX_PYTHON` names a Python with `openai` installed (CI sets it).
#[test]
fn openai_python_client_streams_with_usage() {
    let Some(python) = std::env::var_os("AGENTX_PYTHON") else {
        eprintln!("skipped: set AGENTX_PYTHON to a python with the `openai` package to run it");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = rt.block_on(async { sim::spawn(max_config()).unwrap() });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py/openai_client.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(format!("{}/v1", h.url()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let v: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["completion_tokens"], 16);
    assert_eq!(v["content_tokens"], 16);
    assert_eq!(v["chunks"], 16);
    assert_eq!(v["finish_reason"], "length");
    assert_eq!(v["prompt_tokens"], 40);
    assert_eq!(v["total_tokens"], 56);
    assert_eq!(v["second_cached_tokens"], 32);
    assert_eq!(v["non_stream_tokens"], 5);
    assert_eq!(v["non_stream_usage"], 5);
    rt.block_on(h.shutdown());
}

/// With a tokenizer.json the sim counts prompt tokens exactly as that tokenizer does, not by words.
#[tokio::test]
async fn tokenizer_json_counts_prompts_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // A word-level vocabulary split on whitespace and punctuation: "a,b" is three tokens here, one word.
    let vocab: serde_json::Map<String, Value> = ["<unk>", "a", "b", ","]
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), json!(i)))
        .collect();
    let tj = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, tj.to_string()).unwrap();
    let mut config = max_config();
    config.tokenizer = agentx::dataset::tokens::TokenCounter::from_file(&path).unwrap();
    let h = sim::spawn(config).unwrap();
    let r = chat(&h, &stream_body("a,b a,b b", 2), &[]).await;
    let (_, usage) = check_stream(&r, None);
    assert_eq!(usage["prompt_tokens"], 7, "3 + 3 + 1 tokens in 3 words");
    h.shutdown().await;
}
