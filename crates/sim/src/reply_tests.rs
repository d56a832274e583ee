//! Reasoning and tool calls in streamed replies, over real HTTP and read back by the client's own
//! stream readers: in each API the reasoning comes first and is counted in the usage, the tool call
//! ends the reply with arguments that join to JSON (or, under the fault, do not), and the reply
//! still ends at `max_tokens` exactly.

use std::net::SocketAddr;
use std::time::Instant;

use agentx_protocol::sse::SseDecoder;
use agentx_protocol::{EndpointType, Exchange, StreamState};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;

use crate::{spawn, SimConfig};

/// Sends one streamed request of `api` (with `ignore_eos` and `max_tokens`, naming the tool
/// `Bash` when `tools`) and reads its whole stream through the client's reader.
async fn exchange(addr: SocketAddr, api: EndpointType, max_tokens: u64, tools: bool) -> Exchange {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let user = json!({"role": "user", "content": "fix the build"});
    let (path, mut body) = match api {
        EndpointType::Chat => (
            "/v1/chat/completions",
            json!({"messages": [user], "stream_options": {"include_usage": true}}),
        ),
        EndpointType::Anthropic => ("/v1/messages", json!({"messages": [user]})),
        EndpointType::Responses => ("/v1/responses", json!({"input": [user]})),
    };
    body["model"] = json!("m");
    body["stream"] = json!(true);
    body["ignore_eos"] = json!(true);
    let limit = if api == EndpointType::Responses {
        "max_output_tokens"
    } else {
        "max_tokens"
    };
    body[limit] = json!(max_tokens);
    if tools {
        body["tools"] = match api {
            EndpointType::Chat => json!([{"type": "function", "function": {"name": "Bash"}}]),
            _ => json!([{"type": "function", "name": "Bash", "input_schema": {}}]),
        };
    }
    let request = hyper::Request::post(path)
        .header("host", "sim")
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200, "{api:?}");
    let sent = Instant::now();
    let mut exchange = Exchange::new(sent);
    let mut state = StreamState {
        api,
        keep_text: true,
        done: false,
        failure: None,
    };
    let mut decoder = SseDecoder::new();
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        let now = Instant::now();
        decoder
            .feed(data, |event| state.on_event(event, now, &mut exchange))
            .unwrap();
    }
    assert!(state.failure.is_none(), "{api:?}: {:?}", state.failure);
    assert!(state.done, "{api:?}: the stream did not end");
    exchange
}

fn config(reasoning_tokens: u32, tool_call_rate: f64, malformed: f64) -> SimConfig {
    let mut config = SimConfig::max();
    config.replies.reasoning_tokens = reasoning_tokens;
    config.replies.tool_call_rate = tool_call_rate;
    config.faults.malformed_tool_call_rate = malformed;
    config
}

const APIS: [EndpointType; 3] = [
    EndpointType::Chat,
    EndpointType::Anthropic,
    EndpointType::Responses,
];

#[tokio::test]
async fn reasoning_streams_first_in_every_api_and_counts_toward_max_tokens() {
    let sim = spawn(config(5, 0.0, 0.0)).unwrap();
    for api in APIS {
        let ex = exchange(sim.addr(), api, 12, false).await;
        assert_eq!(ex.reasoning_chunks, 5, "{api:?}");
        assert_eq!(ex.content_chunks, 7, "{api:?}");
        assert_eq!(ex.reasoning_text.split(' ').count(), 5, "{api:?}");
        assert_eq!(ex.text.split(' ').count(), 7, "{api:?}: {:?}", ex.text);
        // The first output is the sixth chunk: after the reasoning.
        assert_eq!(ex.first_output_offset_ns, ex.chunk_offsets_ns.get(5));
        assert!(ex.tool_calls.is_empty());
        let usage = ex.usage.expect("usage");
        assert_eq!(usage.completion_tokens, Some(12), "{api:?}");
        // Anthropic's usage has no reasoning count.
        let reported = (api != EndpointType::Anthropic).then_some(5);
        assert_eq!(usage.reasoning_tokens, reported, "{api:?}");
    }
    // A limit below the reasoning: every token is reasoning, no output.
    for api in APIS {
        let ex = exchange(sim.addr(), api, 3, false).await;
        assert_eq!((ex.reasoning_chunks, ex.content_chunks), (3, 0), "{api:?}");
        assert_eq!(ex.first_output_offset_ns, None, "{api:?}");
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn a_tool_call_ends_the_reply_and_malformed_arguments_do_not_parse() {
    let sim = spawn(config(2, 1.0, 0.0)).unwrap();
    for api in APIS {
        let ex = exchange(sim.addr(), api, 10, true).await;
        assert_eq!(ex.tool_calls.len(), 1, "{api:?}");
        let call = &ex.tool_calls[0];
        assert_eq!(call.name, "Bash", "{api:?}");
        assert!(!call.id.is_empty(), "{api:?}");
        assert!(call.parsed, "{api:?}: {:?}", call.arguments);
        // 2 reasoning, 4 content, 4 argument pieces.
        assert_eq!((ex.reasoning_chunks, ex.content_chunks), (2, 4), "{api:?}");
        assert_eq!(ex.usage.unwrap().completion_tokens, Some(10), "{api:?}");
        let finish = ex.finish_reason.as_deref();
        let expected = match api {
            EndpointType::Chat => "tool_calls",
            EndpointType::Anthropic => "tool_use",
            EndpointType::Responses => "completed",
        };
        assert_eq!(finish, Some(expected), "{api:?}");
        // Without tools in the request the call has the fixed name.
        let unnamed = exchange(sim.addr(), api, 10, false).await;
        assert_eq!(unnamed.tool_calls[0].name, crate::DEFAULT_TOOL_NAME);
    }
    sim.shutdown().await;
    let sim = spawn(config(0, 1.0, 1.0)).unwrap();
    for api in APIS {
        let ex = exchange(sim.addr(), api, 6, true).await;
        assert_eq!(
            ex.tool_call_parse_failures(),
            1,
            "{api:?}: {:?}",
            ex.tool_calls
        );
        // Without reasoning the first output is the first token.
        assert_eq!(ex.first_output_offset_ns, ex.chunk_offsets_ns.first());
    }
    sim.shutdown().await;
}
