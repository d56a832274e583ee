//! The Anthropic Messages API (`--endpoint-type anthropic`): the request body in its shape and the
//! decoding of its streamed events. What the client measures is the same as for chat completions,
//! so a record of either API carries the same fields.
//!
//! - `write_body` turns the chat messages the prompt synthesis wrote (`{"role","content"}` objects)
//!   into a Messages body: the system messages become the top-level `system` text blocks, every
//!   other message a `messages` entry whose content is one `text` block; `max_tokens` and
//!   `stream: true` follow, then the extra inputs. The messages are parsed and written again, one
//!   copy of the prompt per request (the chat body is sent from shared pieces without one).
//! - [`on_event`] reads one event of the stream as it arrives: `message_start` (the usage, with
//!   `cache_read_input_tokens` as the cached prompt tokens; the prompt tokens are
//!   `input_tokens` plus both cache counts, as Anthropic counts the uncached rest alone),
//!   `content_block_start` / `content_block_delta` (non-empty `text` and `thinking` count as output
//!   and are timestamped; `text` alone is content, `thinking` reasoning; a `tool_use` block starts
//!   a tool call, its `input_json_delta` pieces are the arguments), `message_delta` (the stop
//!   reason as the server wrote it, the output tokens), `message_stop` (the end), `ping` and
//!   `content_block_stop` (nothing), `error` (a stream error, its body kept for the scenario's classifier). An event of
//!   another type is skipped, as Anthropic's versioning rules ask of clients.

use serde::Deserialize;

use super::agent_wire::{read_messages, write_string, write_tools, ChatMessage, ToolShape};
use super::exchange::{excerpt, malformed_event, server_error_message, StreamState};
use super::{Exchange, Failure, FailureKind, ERROR_EXCERPT};
use agentx_record::Usage;
use std::borrow::Cow;
use std::time::Instant;

/// The `anthropic-version` header every request carries.
pub const VERSION: &str = "2023-06-01";

/// The default request path.
pub const PATH: &str = "/v1/messages";

fn text_block(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(br#"{"type":"text","text":"#);
    serde_json::to_writer(&mut *out, text).expect("string serializes");
    out.push(b'}');
}

/// The `max_tokens` of a Messages request whose turn records no output length.
const NO_LIMIT_MAX_TOKENS: u32 = 1024;

/// Writes the Messages body: `head` is `{"model":M` (without the chat body's `,"messages":`),
/// `messages` the chat messages array without its closing `]` in pieces, `tools` the chat `tools`
/// array of the agent's wire, `tail` what follows `stream` (the extra inputs, Dynamo's `nvext`)
/// with the closing `}`.
pub(crate) fn write_body(
    out: &mut Vec<u8>,
    head: &[u8],
    (messages, tools): (&[bytes::Bytes], Option<&[u8]>),
    max_tokens: u32,
    tail: &[u8],
) {
    let mut array = Vec::with_capacity(messages.iter().map(bytes::Bytes::len).sum::<usize>() + 1);
    for p in messages {
        array.extend_from_slice(p);
    }
    array.push(b']');
    // The pieces are the synthesis's own JSON: an array of chat messages.
    let msgs = read_messages(&array);
    out.extend_from_slice(head);
    // The Messages API requires max_tokens: a request without a limit gets the API's usual 1024, as
    // agentx-harness 1.0.12 sends it (aiperf/endpoints/anthropic_messages.py:491-493).
    let max_tokens = if max_tokens == agentx_record::NO_OUTPUT_LIMIT {
        NO_LIMIT_MAX_TOKENS
    } else {
        max_tokens.max(1)
    };
    out.extend_from_slice(br#","max_tokens":"#);
    out.extend_from_slice(max_tokens.to_string().as_bytes());
    out.extend_from_slice(br#","stream":true"#);
    write_tools(out, tools, ToolShape::Messages);
    let mut system = msgs.iter().filter(|m| m.role == "system").peekable();
    if system.peek().is_some() {
        out.extend_from_slice(br#","system":["#);
        for (i, m) in system.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            text_block(out, m.content.as_deref().unwrap_or(""));
        }
        out.push(b']');
    }
    out.extend_from_slice(br#","messages":["#);
    for (i, m) in msgs.iter().filter(|m| m.role != "system").enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_message(out, m);
    }
    out.push(b']');
    out.extend_from_slice(tail);
}

/// One message of `messages`: a text block, after a `thinking` block when the history keeps the
/// reasoning; an assistant tool call as `tool_use` blocks, a `tool` message as a user
/// `tool_result` block.
fn write_message(out: &mut Vec<u8>, m: &ChatMessage<'_>) {
    let text = m.content.as_deref().unwrap_or("");
    if let Some(id) = &m.tool_call_id {
        out.extend_from_slice(br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"#);
        write_string(out, id);
        out.extend_from_slice(br#","content":"#);
        write_string(out, text);
        out.extend_from_slice(b"}]}");
        return;
    }
    out.extend_from_slice(br#"{"role":"#);
    write_string(out, &m.role);
    out.extend_from_slice(br#","content":["#);
    let mut blocks = 0;
    if let Some(thinking) = &m.reasoning_content {
        out.extend_from_slice(br#"{"type":"thinking","thinking":"#);
        write_string(out, thinking);
        out.extend_from_slice(br#","signature":""}"#);
        blocks += 1;
    }
    if m.tool_calls.is_empty() || !text.is_empty() {
        if blocks > 0 {
            out.push(b',');
        }
        text_block(out, text);
        blocks += 1;
    }
    for call in &m.tool_calls {
        if blocks > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"type":"tool_use","id":"#);
        write_string(out, &call.id);
        out.extend_from_slice(br#","name":"#);
        write_string(out, &call.function.name);
        out.extend_from_slice(br#","input":"#);
        match serde_json::from_str::<serde_json::Value>(&call.function.arguments) {
            Ok(input @ serde_json::Value::Object(_)) => {
                serde_json::to_writer(&mut *out, &input).expect("value serializes");
            }
            _ => out.extend_from_slice(b"{}"),
        }
        out.push(b'}');
        blocks += 1;
    }
    out.extend_from_slice(b"]}");
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    message: Option<StartJson>,
    #[serde(default, borrow)]
    content_block: Option<BlockJson<'a>>,
    #[serde(default, borrow)]
    delta: Option<BlockJson<'a>>,
    #[serde(default)]
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct StartJson {
    #[serde(default)]
    usage: Option<UsageJson>,
}

/// A content block (`content_block_start`) or a delta (`content_block_delta`, `message_delta`).
#[derive(Deserialize)]
struct BlockJson<'a> {
    #[serde(
        rename = "type",
        default,
        borrow,
        deserialize_with = "crate::exchange::borrowed_str"
    )]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    stop_reason: Option<Cow<'a, str>>,
}

impl BlockJson<'_> {
    /// A block's start or delta into `exchange`: non-empty text is content, non-empty thinking is
    /// reasoning, a `tool_use` block starts a tool call whose `input_json_delta`s follow (blocks
    /// stream one after another, so a delta belongs to the last call).
    fn absorb(&self, state: &StreamState, now: Instant, exchange: &mut Exchange) {
        match self.kind.as_deref() {
            Some("tool_use") => {
                let index = exchange.tool_calls.len() as u32;
                let id = self.id.as_deref().unwrap_or("");
                let name = self.name.as_deref().unwrap_or("");
                exchange.tool_call_delta(now, index, (id, name), "");
                return;
            }
            Some("input_json_delta") => {
                let index = exchange.tool_calls.len().saturating_sub(1) as u32;
                let piece = self.partial_json.as_deref().unwrap_or("");
                if !piece.is_empty() {
                    exchange.tool_call_delta(now, index, ("", ""), piece);
                }
                return;
            }
            _ => {}
        }
        let text = self.text.as_deref().unwrap_or("");
        let thinking = self.thinking.as_deref().unwrap_or("");
        if !thinking.is_empty() {
            exchange.reasoning_delta(now, thinking, state.keep_text);
        }
        if !text.is_empty() {
            exchange.content_delta(now, text, state.keep_text);
        }
    }
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl UsageJson {
    /// Merged into what the stream reported before (`message_delta` repeats or completes
    /// `message_start`'s counts).
    fn merge(&self, into: &mut Usage) {
        if let Some(input) = self.input_tokens {
            let cached = self.cache_read_input_tokens.unwrap_or(0);
            let created = self.cache_creation_input_tokens.unwrap_or(0);
            into.prompt_tokens = Some(input + cached + created);
            into.cached_tokens = self.cache_read_input_tokens.or(into.cached_tokens);
        }
        if let Some(out) = self.output_tokens {
            into.completion_tokens = Some(out);
        }
    }
}

/// One event of a Messages stream into `exchange` (see the module's documentation).
pub fn on_event(state: &mut StreamState, event: &str, now: Instant, exchange: &mut Exchange) {
    let parsed: Event<'_> = match serde_json::from_str(event) {
        Ok(e) => e,
        Err(e) => {
            state.failure = Some(malformed_event(
                exchange,
                "an Anthropic Messages event",
                &e,
                event,
                "; does the endpoint serve the Messages API of --endpoint-type anthropic?",
            ));
            return;
        }
    };
    match parsed.kind.as_ref() {
        "message_start" => {
            if let Some(usage) = parsed.message.and_then(|m| m.usage) {
                usage.merge(exchange.usage.get_or_insert_with(Usage::default));
            }
        }
        "content_block_start" | "content_block_delta" => {
            let block = parsed.content_block.or(parsed.delta);
            let Some(content) = block else { return };
            content.absorb(state, now, exchange);
        }
        "message_delta" => {
            if let Some(reason) = parsed.delta.and_then(|d| d.stop_reason) {
                exchange.finish_reason = Some(reason.into_owned());
            }
            if let Some(usage) = parsed.usage {
                usage.merge(exchange.usage.get_or_insert_with(Usage::default));
            }
        }
        "message_stop" => state.done = true,
        "error" => {
            let (kind, message) = server_error_message(event);
            let mut failure = Failure::new(
                exchange.status,
                FailureKind::StreamError,
                format!("the server sent an error event mid-stream: {message}"),
            );
            failure.server_type = kind;
            exchange.error_body = Some(excerpt(event, ERROR_EXCERPT).to_owned());
            state.failure = Some(failure);
        }
        // `ping`, `content_block_stop`, and event types added later.
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EndpointType;
    use bytes::Bytes;
    use serde_json::{json, Value};

    #[test]
    fn body_has_top_level_system_and_text_blocks() {
        let msgs = vec![
            Bytes::from_static(br#"[{"role":"system","content":"be \"brief\""}"#),
            Bytes::from_static(
                br#",{"role":"user","content":"hi\n"},{"role":"assistant","content":"yo"}"#,
            ),
            Bytes::from_static(br#",{"role":"user","content":"more"}"#),
        ];
        let mut out = Vec::new();
        write_body(
            &mut out,
            br#"{"model":"m""#,
            (&msgs, None),
            0,
            br#","k":1}"#,
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            json!({
                "model": "m", "max_tokens": 1, "stream": true, "k": 1,
                "system": [{"type": "text", "text": "be \"brief\""}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi\n"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
                    {"role": "user", "content": [{"type": "text", "text": "more"}]},
                ]
            })
        );
        let mut out = Vec::new();
        write_body(
            &mut out,
            br#"{"model":"m""#,
            (
                &[Bytes::from_static(br#"[{"role":"user","content":"x"}"#)],
                None,
            ),
            7,
            b"}",
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v.get("system").is_none());
        assert_eq!(v["max_tokens"], 7);
        let mut out = Vec::new();
        let user = [Bytes::from_static(br#"[{"role":"user","content":"x"}"#)];
        write_body(
            &mut out,
            br#"{"model":"m""#,
            (&user, None),
            agentx_record::NO_OUTPUT_LIMIT,
            b"}",
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["max_tokens"], 1024);
    }

    fn state() -> StreamState {
        StreamState {
            api: EndpointType::Anthropic,
            keep_text: true,
            done: false,
            failure: None,
        }
    }

    #[test]
    fn events_give_chunks_usage_stop_reason_and_end() {
        let mut ex = Exchange::new(Instant::now());
        let mut st = state();
        let now = Instant::now();
        for e in [
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":2,"cache_read_input_tokens":30,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"x"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a "}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"b"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"some_future_event","x":1}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":3}}"#,
        ] {
            st.on_event(e, now, &mut ex);
            assert!(st.failure.is_none(), "{e}");
        }
        assert!(!st.done);
        st.on_event(r#"{"type":"message_stop"}"#, now, &mut ex);
        assert!(st.done);
        assert_eq!(ex.chunk_offsets_ns.len(), 3);
        assert_eq!(ex.content_chunks, 2);
        assert_eq!(ex.text, "a b");
        assert_eq!(ex.finish_reason.as_deref(), Some("max_tokens"));
        assert_eq!(
            ex.usage,
            Some(Usage {
                prompt_tokens: Some(37),
                completion_tokens: Some(3),
                cached_tokens: Some(30),
                reasoning_tokens: None,
            })
        );
    }

    #[test]
    fn thinking_then_text_then_a_tool_use_block() {
        let sent = Instant::now();
        let mut ex = Exchange::new(sent);
        let mut st = state();
        for (i, e) in [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"let me"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" see"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"ok"}}"#,
            r#"{"type":"content_block_stop","index":1}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"a.rs\"}"}}"#,
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"message_stop"}"#,
        ]
        .into_iter()
        .enumerate()
        {
            let now = sent + std::time::Duration::from_millis(i as u64 + 1);
            st.on_event(e, now, &mut ex);
            assert!(st.failure.is_none(), "{e}");
        }
        assert!(st.done);
        assert_eq!(ex.reasoning_chunks, 2);
        assert_eq!(ex.reasoning_text, "let me see");
        assert_eq!(ex.chunk_offsets_ns.first(), Some(2_000_000));
        // The first text delta is the first output, after two reasoning chunks.
        assert_eq!(ex.first_output_offset_ns, Some(7_000_000));
        assert_eq!(ex.tool_calls.len(), 1);
        let call = &ex.tool_calls[0];
        assert_eq!((call.id.as_str(), call.name.as_str()), ("toolu_1", "Read"));
        assert_eq!(call.arguments, r#"{"path":"a.rs"}"#);
        assert!(call.parsed);
        assert_eq!(ex.finish_reason.as_deref(), Some("tool_use"));
    }

    #[test]
    fn a_tool_use_whose_input_never_closes_does_not_parse() {
        let now = Instant::now();
        let mut ex = Exchange::new(now);
        let mut st = state();
        for e in [
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_2","name":"Read","input":{}}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a"}}"#,
            r#"{"type":"message_stop"}"#,
        ] {
            st.on_event(e, now, &mut ex);
        }
        assert_eq!(ex.first_output_offset_ns, Some(0));
        assert_eq!(ex.tool_call_parse_failures(), 1);
    }

    #[test]
    fn error_events_and_bad_json_fail_the_stream() {
        let now = Instant::now();
        let mut ex = Exchange::new(now);
        let mut st = state();
        st.on_event(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            now,
            &mut ex,
        );
        let f = st.failure.take().unwrap();
        assert_eq!(f.kind, FailureKind::StreamError);
        assert_eq!(f.server_type.as_deref(), Some("overloaded_error"));
        assert!(f.message.contains("Overloaded"));
        assert!(ex.error_body.unwrap().contains("overloaded_error"));
        let mut ex = Exchange::new(now);
        st.on_event("[DONE]", now, &mut ex);
        assert_eq!(st.failure.unwrap().kind, FailureKind::MalformedSse);
    }
}
