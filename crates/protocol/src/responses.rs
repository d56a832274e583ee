//! The OpenAI Responses API (`--endpoint-type responses`, `POST /v1/responses`): the request body in
//! its shape and the decoding of its streamed events. What the client measures is the same as for
//! chat completions, so a record of any API carries the same fields.
//!
//! - `write_body` turns the chat messages the prompt synthesis wrote (`{"role","content"}` objects)
//!   into a Responses body: every message, the system prompt included, becomes an `input` item
//!   `{"role","content":[part]}` in order, whose one part is an `input_text` (an assistant turn's
//!   is an `output_text`, as a previous reply is given back); `max_output_tokens` (left out for a
//!   turn without a limit), `stream`, `store: false` (a replay keeps nothing on the server) follow,
//!   then the extra inputs. The messages are parsed and written again, one copy of the prompt per
//!   request (the chat body is sent from shared pieces without one).
//! - [`on_event`] reads one event of the stream as it arrives, by its `type`:
//!   `response.output_text.delta` (a non-empty `delta` is output, timestamped, and content),
//!   `response.reasoning_text.delta` and `response.reasoning_summary_text.delta` (a non-empty `delta`
//!   is output, timestamped, reasoning), `response.output_item.added` of a `function_call` item
//!   (a tool call starts, named by its `call_id` and `name`; output),
//!   `response.function_call_arguments.delta` (its arguments' next piece; output),
//!   `response.completed` and `response.incomplete` (the end:
//!   the response's `usage`, with `input_tokens` as the prompt tokens, OpenAI's count including the
//!   cached ones, and `input_tokens_details.cached_tokens` as the cached tokens; the stop reason is
//!   `incomplete_details.reason` when the response is incomplete, `max_output_tokens` at the limit,
//!   else its `status`; `output_tokens_details.reasoning_tokens` as the reasoning tokens), `response.failed` and `error` (a stream error, its body kept for the
//!   scenario's classifier, the error's `code` as the server's type). Every other event
//!   (`response.created`, `response.in_progress`, the other item and part events, the `done`
//!   events, types added later) is skipped. There is no `[DONE]`: a stream
//!   that ends without `response.completed`, `response.incomplete` or a failure is incomplete.

use serde::Deserialize;
use serde_json::Value;

use super::agent_wire::{read_messages, write_string, write_tools, ChatMessage, ToolShape};
use super::exchange::{excerpt, malformed_event, StreamState};
use super::{Exchange, Failure, FailureKind, ERROR_EXCERPT};
use agentx_record::Usage;
use std::borrow::Cow;
use std::time::Instant;

/// The default request path.
pub const PATH: &str = "/v1/responses";

/// The body keys a Responses body sets itself beside the chat body's
/// ([`crate::RequestBody::RESERVED`]): `--extra-inputs` may not name them.
pub const OWN_FIELDS: [&str; 4] = ["input", "instructions", "max_output_tokens", "store"];

/// Writes the Responses body: `head` is `{"model":M` (without the chat body's `,"messages":`),
/// `messages` the chat messages array without its closing `]` in pieces, `tools` the chat `tools`
/// array of the agent's wire, `tail` what follows `store` (the extra inputs, Dynamo's `nvext`)
/// with the closing `}`.
pub(crate) fn write_body(
    out: &mut Vec<u8>,
    head: &[u8],
    (messages, tools): (&[bytes::Bytes], Option<&[u8]>),
    (max_tokens, stream): (u32, bool),
    tail: &[u8],
) {
    let mut array = Vec::with_capacity(messages.iter().map(bytes::Bytes::len).sum::<usize>() + 1);
    for piece in messages {
        array.extend_from_slice(piece);
    }
    array.push(b']');
    // The pieces are the synthesis's own JSON: an array of chat messages.
    let msgs = read_messages(&array);
    out.extend_from_slice(head);
    out.extend_from_slice(br#","input":["#);
    for (i, message) in msgs.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_items(out, message);
    }
    out.push(b']');
    write_tools(out, tools, ToolShape::Responses);
    // A turn without a limit is sent without one, as the chat body is.
    if max_tokens != agentx_record::NO_OUTPUT_LIMIT {
        out.extend_from_slice(br#","max_output_tokens":"#);
        out.extend_from_slice(max_tokens.max(1).to_string().as_bytes());
    }
    out.extend_from_slice(if stream {
        br#","stream":true"#
    } else {
        br#","stream":false"#
    });
    out.extend_from_slice(br#","store":false"#);
    out.extend_from_slice(tail);
}

/// The `input` items of one chat message: a `reasoning` item first when the history keeps the
/// reasoning, then the message (`{"role","content":[part]}`, an assistant turn's part an
/// `output_text`), or a `function_call` item per tool call, or the `function_call_output` of a
/// `tool` message.
fn write_items(out: &mut Vec<u8>, message: &ChatMessage<'_>) {
    let text = message.content.as_deref().unwrap_or("");
    if let Some(call_id) = &message.tool_call_id {
        out.extend_from_slice(br#"{"type":"function_call_output","call_id":"#);
        write_string(out, call_id);
        out.extend_from_slice(br#","output":"#);
        write_string(out, text);
        out.push(b'}');
        return;
    }
    let mut items = 0;
    if let Some(reasoning) = &message.reasoning_content {
        out.extend_from_slice(br#"{"type":"reasoning","summary":[{"type":"summary_text","text":"#);
        write_string(out, reasoning);
        out.extend_from_slice(b"}]}");
        items += 1;
    }
    if message.tool_calls.is_empty() || !text.is_empty() {
        if items > 0 {
            out.push(b',');
        }
        let part = if message.role == "assistant" {
            "output_text"
        } else {
            "input_text"
        };
        out.extend_from_slice(br#"{"role":"#);
        write_string(out, &message.role);
        out.extend_from_slice(br#","content":[{"type":""#);
        out.extend_from_slice(part.as_bytes());
        out.extend_from_slice(br#"","text":"#);
        write_string(out, text);
        out.extend_from_slice(b"}]}");
        items += 1;
    }
    for call in &message.tool_calls {
        if items > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"type":"function_call","call_id":"#);
        write_string(out, &call.id);
        out.extend_from_slice(br#","name":"#);
        write_string(out, &call.function.name);
        out.extend_from_slice(br#","arguments":"#);
        write_string(out, &call.function.arguments);
        out.push(b'}');
        items += 1;
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    response: Option<ResponseJson>,
    #[serde(default, borrow)]
    item: Option<ItemJson<'a>>,
}

/// An output item (`response.output_item.added`): a `function_call` names a tool call.
#[derive(Deserialize)]
struct ItemJson<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    call_id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    name: Option<Cow<'a, str>>,
}

/// The response object a `response.completed`, `response.incomplete` or `response.failed` carries.
#[derive(Deserialize)]
struct ResponseJson {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    incomplete_details: Option<IncompleteJson>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct IncompleteJson {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<DetailsJson>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetailsJson>,
}

#[derive(Deserialize)]
struct OutputDetailsJson {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct DetailsJson {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl ResponseJson {
    /// The usage and the stop reason into `exchange`.
    fn absorb(self, exchange: &mut Exchange) {
        if let Some(usage) = self.usage {
            exchange.usage = Some(Usage {
                prompt_tokens: usage.input_tokens,
                completion_tokens: usage.output_tokens,
                cached_tokens: usage.input_tokens_details.and_then(|d| d.cached_tokens),
                reasoning_tokens: usage.output_tokens_details.and_then(|d| d.reasoning_tokens),
            });
        }
        let reason = self.incomplete_details.and_then(|d| d.reason);
        if let Some(reason) = reason.or(self.status) {
            exchange.finish_reason = Some(reason);
        }
    }
}

/// An error object's `code` (else its `type`) and `message`.
fn error_fields(error: Option<&Value>) -> (Option<String>, String) {
    let text = |key: &str| error.and_then(|e| e.get(key)).and_then(Value::as_str);
    let kind = text("code").or_else(|| text("type")).map(str::to_owned);
    let message = text("message").unwrap_or("(no message)").to_owned();
    (kind, message)
}

/// A stream error: `message` said by the server in `event`, its `kind` as the server's type.
fn stream_error(
    state: &mut StreamState,
    exchange: &mut Exchange,
    event: &str,
    (kind, message): (Option<String>, String),
    what: &str,
) {
    let mut failure = Failure::new(
        exchange.status,
        FailureKind::StreamError,
        format!("the server sent {what} mid-stream: {message}"),
    );
    failure.server_type = kind;
    exchange.error_body = Some(excerpt(event, ERROR_EXCERPT).to_owned());
    state.failure = Some(failure);
}

/// One event of a Responses stream into `exchange` (see the module's documentation).
pub fn on_event(state: &mut StreamState, event: &str, now: Instant, exchange: &mut Exchange) {
    let parsed: Event<'_> = match serde_json::from_str(event) {
        Ok(e) => e,
        Err(e) => {
            state.failure = Some(malformed_event(
                exchange,
                "a Responses API event",
                &e,
                event,
                "; does the endpoint serve the Responses API of --endpoint-type responses?",
            ));
            return;
        }
    };
    match parsed.kind.as_ref() {
        "response.output_text.delta" => {
            let delta = parsed.delta.as_deref().unwrap_or("");
            if !delta.is_empty() {
                exchange.content_delta(now, delta, state.keep_text);
            }
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            let delta = parsed.delta.as_deref().unwrap_or("");
            if !delta.is_empty() {
                exchange.reasoning_delta(now, delta, state.keep_text);
            }
        }
        "response.output_item.added" => {
            let Some(item) = parsed.item.filter(|i| i.kind == "function_call") else {
                return;
            };
            let index = exchange.tool_calls.len() as u32;
            let id = item.call_id.as_deref().unwrap_or("");
            let name = item.name.as_deref().unwrap_or("");
            exchange.tool_call_delta(now, index, (id, name), "");
        }
        "response.function_call_arguments.delta" => {
            let delta = parsed.delta.as_deref().unwrap_or("");
            let index = exchange.tool_calls.len().saturating_sub(1) as u32;
            exchange.tool_call_delta(now, index, ("", ""), delta);
        }
        "response.completed" | "response.incomplete" => {
            if let Some(response) = parsed.response {
                response.absorb(exchange);
            }
            state.done = true;
        }
        "response.failed" => {
            let response = parsed.response;
            let error = response.as_ref().and_then(|r| r.error.clone());
            if let Some(response) = response {
                response.absorb(exchange);
            }
            let fields = error_fields(error.as_ref());
            stream_error(state, exchange, event, fields, "a response.failed event");
        }
        "error" => {
            let whole: Option<Value> = serde_json::from_str(event).ok();
            // `{"type":"error","code","message"}`, or the error nested as `error`.
            let error = whole.as_ref().map(|w| w.get("error").unwrap_or(w));
            let fields = error_fields(error);
            stream_error(state, exchange, event, fields, "an error event");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EndpointType, ReplyToolCall};
    use bytes::Bytes;
    use serde_json::json;

    #[test]
    fn body_has_input_items_in_order_and_the_output_limit() {
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
            (0, true),
            br#","k":1}"#,
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        let text = |kind: &str, text: &str| json!([{"type": kind, "text": text}]);
        assert_eq!(
            v,
            json!({
                "model": "m", "max_output_tokens": 1, "stream": true, "store": false, "k": 1,
                "input": [
                    {"role": "system", "content": text("input_text", "be \"brief\"")},
                    {"role": "user", "content": text("input_text", "hi\n")},
                    {"role": "assistant", "content": text("output_text", "yo")},
                    {"role": "user", "content": text("input_text", "more")},
                ]
            })
        );
        let mut out = Vec::new();
        let user = [Bytes::from_static(br#"[{"role":"user","content":"x"}"#)];
        let no_limit = (agentx_record::NO_OUTPUT_LIMIT, false);
        write_body(&mut out, br#"{"model":"m""#, (&user, None), no_limit, b"}");
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v.get("max_output_tokens").is_none(), "{v}");
        assert_eq!(v["stream"], false);
    }

    fn state() -> StreamState {
        StreamState {
            api: EndpointType::Responses,
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
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","status":"in_progress","usage":null}}"#,
            r#"{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_1","status":"in_progress"}}"#,
            r#"{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}"#,
            r#"{"type":"response.reasoning_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"hm"}"#,
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":""}"#,
            r#"{"type":"response.content_part.added","sequence_number":5,"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":""}}"#,
            r#"{"type":"response.output_text.delta","sequence_number":6,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"a "}"#,
            r#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":""}"#,
            r#"{"type":"response.output_text.delta","sequence_number":8,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"b"}"#,
            r#"{"type":"response.function_call_arguments.delta","sequence_number":9,"item_id":"fc_1","output_index":2,"delta":"{}"}"#,
            r#"{"type":"response.output_text.done","sequence_number":10,"item_id":"msg_1","output_index":1,"content_index":0,"text":"a b"}"#,
            r#"{"type":"response.some_future_event","x":1}"#,
        ] {
            st.on_event(e, now, &mut ex);
            assert!(st.failure.is_none(), "{e}");
        }
        assert!(!st.done);
        st.on_event(
            r#"{"type":"response.incomplete","sequence_number":11,"response":{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":30},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":1},"total_tokens":40}}}"#,
            now,
            &mut ex,
        );
        assert!(st.done);
        // The reasoning, two content deltas and an arguments delta.
        assert_eq!(ex.chunk_offsets_ns.len(), 4);
        assert_eq!((ex.content_chunks, ex.reasoning_chunks), (2, 1));
        assert_eq!(ex.text, "a b");
        assert_eq!(ex.reasoning_text, "hm");
        assert_eq!(ex.tool_calls.len(), 1);
        assert!(ex.tool_calls[0].parsed, "{:?}", ex.tool_calls);
        assert_eq!(ex.finish_reason.as_deref(), Some("max_output_tokens"));
        assert_eq!(
            ex.usage,
            Some(Usage {
                prompt_tokens: Some(37),
                completion_tokens: Some(3),
                cached_tokens: Some(30),
                reasoning_tokens: Some(1),
            })
        );
        let mut ex = Exchange::new(now);
        let mut st = state();
        st.on_event(
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":1}}}"#,
            now,
            &mut ex,
        );
        assert!(st.done && st.failure.is_none());
        assert_eq!(ex.finish_reason.as_deref(), Some("completed"));
        assert_eq!(ex.usage.unwrap().cached_tokens, None);
    }

    /// `events` read in order, each at its own instant (1 ms apart), into a fresh exchange.
    fn read(events: &[&str]) -> Exchange {
        let sent = Instant::now();
        let mut ex = Exchange::new(sent);
        let mut st = state();
        for (i, e) in events.iter().enumerate() {
            let now = sent + std::time::Duration::from_millis(i as u64 + 1);
            st.on_event(e, now, &mut ex);
            assert!(st.failure.is_none(), "{e}: {:?}", st.failure);
        }
        assert!(st.done);
        ex
    }

    #[test]
    fn reasoning_then_text_sets_the_first_output_after_the_first_token() {
        let ex = read(&[
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}"#,
            r#"{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"think"}"#,
            r#"{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":" more"}"#,
            r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"answer"}"#,
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":5,"output_tokens":3,"output_tokens_details":{"reasoning_tokens":2}}}}"#,
        ]);
        assert_eq!(ex.chunk_offsets_ns, vec![2_000_000, 3_000_000, 4_000_000]);
        assert_eq!(ex.first_output_offset_ns, Some(4_000_000));
        assert_eq!((ex.reasoning_chunks, ex.content_chunks), (2, 1));
        assert_eq!(ex.reasoning_text, "think more");
        assert_eq!(ex.usage.unwrap().reasoning_tokens, Some(2));
        assert!(ex.tool_calls.is_empty());
    }

    #[test]
    fn a_function_call_joins_its_argument_pieces_and_flags_bad_json() {
        let call = |last_piece: &str| {
            let last = format!(
                r#"{{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{last_piece}"}}"#
            );
            read(&[
                r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_9","name":"Bash","arguments":""}}"#,
                r#"{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\"cmd\":"}"#,
                &last,
                r#"{"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":0,"arguments":"{}"}"#,
                r#"{"type":"response.completed","response":{"status":"completed"}}"#,
            ])
        };
        let ex = call(r#"\"ls\"}"#);
        assert_eq!(
            ex.tool_calls,
            vec![ReplyToolCall {
                id: "call_9".into(),
                name: "Bash".into(),
                arguments: r#"{"cmd":"ls"}"#.into(),
                parsed: true,
            }]
        );
        // The item's start is the first output.
        assert_eq!(ex.first_output_offset_ns, Some(1_000_000));
        assert_eq!(ex.chunk_offsets_ns.len(), 3);
        assert_eq!(ex.content_chunks, 0);
        let bad = call(r#"\"ls\""#);
        assert!(!bad.tool_calls[0].parsed);
        assert_eq!(bad.tool_call_parse_failures(), 1);
    }

    #[test]
    fn failed_and_error_events_and_bad_json_fail_the_stream() {
        let now = Instant::now();
        let mut ex = Exchange::new(now);
        let mut st = state();
        st.on_event(
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"The model crashed"},"usage":{"input_tokens":9,"output_tokens":2}}}"#,
            now,
            &mut ex,
        );
        let f = st.failure.take().unwrap();
        assert_eq!(f.kind, FailureKind::StreamError);
        assert_eq!(f.server_type.as_deref(), Some("server_error"));
        assert!(f.message.contains("response.failed") && f.message.contains("The model crashed"));
        assert!(ex.error_body.unwrap().contains("server_error"));
        assert_eq!(ex.usage.unwrap().prompt_tokens, Some(9));
        let mut ex = Exchange::new(now);
        let mut st = state();
        st.on_event(
            r#"{"type":"error","code":"rate_limit_exceeded","message":"Slow down","param":null,"sequence_number":3}"#,
            now,
            &mut ex,
        );
        let f = st.failure.take().unwrap();
        assert_eq!(f.server_type.as_deref(), Some("rate_limit_exceeded"));
        assert!(f.message.contains("Slow down"), "{}", f.message);
        // A chat chunk has no `type`; `[DONE]` is not JSON.
        for bad in [r#"{"choices":[{"delta":{"content":"x"}}]}"#, "[DONE]"] {
            let mut ex = Exchange::new(now);
            let mut st = state();
            st.on_event(bad, now, &mut ex);
            let f = st.failure.unwrap();
            assert_eq!(f.kind, FailureKind::MalformedSse);
            assert!(
                f.message.contains("--endpoint-type responses"),
                "{}",
                f.message
            );
        }
    }
}
