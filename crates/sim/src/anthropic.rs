//! The simulator's Anthropic Messages API (`POST /v1/messages`): the body's parsing and checks, the
//! error bodies and overflow wording in Anthropic's shape, and the streamed events' bytes. The
//! request then takes the same path as a chat completion (engine, prefix cache, timing model,
//! faults, metrics); only what goes over the wire differs.
//!
//! A stream is Anthropic's sequence: `message_start` (usage: `input_tokens` the uncached prompt,
//! `cache_read_input_tokens` what the prefix cache held, `cache_creation_input_tokens` 0), a text
//! `content_block_start`, one `ping`, a `content_block_delta` per chunk of tokens,
//! `content_block_stop`, `message_delta` (stop reason `end_turn` or `max_tokens`, output tokens),
//! `message_stop`. Errors are `{"type":"error","error":{"type","message"}}`; a prompt that does not
//! fit is `prompt is too long: N tokens > M maximum`, M being what the context leaves beside the
//! request's `max_tokens` (Anthropic's own wording for the prompt alone, which the scenarios'
//! overflow phrases know).

use bytes::BytesMut;
use serde_json::{Map, Value};

use super::request::{ApiError, ChatRequest};
use super::response::{Ident, Usage};
use agentx_tokens::blocks::BlockHasher;
use agentx_tokens::TokenCounter;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(message)
}

/// Anthropic's error type for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The error body in Anthropic's shape.
pub(crate) fn error_body(error: &ApiError) -> String {
    let message = serde_json::to_string(&error.message).unwrap_or_else(|_| "\"\"".into());
    format!(
        r#"{{"type":"error","error":{{"type":"{}","message":{message}}}}}"#,
        error_type(error.status)
    )
}

/// A prompt of `prompt` tokens that does not fit beside `max_tokens` in `max_model_len`.
pub(crate) fn context_overflow(max_model_len: u64, prompt: u64, max_tokens: u64) -> ApiError {
    ApiError {
        param: None,
        ..bad(format!(
            "prompt is too long: {prompt} tokens > {} maximum",
            max_model_len.saturating_sub(max_tokens)
        ))
    }
}

/// Parses and checks a Messages body into what the simulator uses; `block_size` is the prefix
/// cache's block size. The system text comes first in the prompt, then each message's text blocks
/// (string contents, `text` blocks, the text of `tool_result` blocks).
pub(crate) fn parse(
    body: &[u8],
    block_size: u32,
    counter: &TokenCounter,
) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("request body is not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(bad("request body must be a JSON object"));
    };
    let model = match obj.get("model") {
        Some(Value::String(s)) => Some(s.clone()),
        None => return Err(bad("model: Field required")),
        Some(_) => return Err(bad("model: Input should be a valid string")),
    };
    let max_tokens = match obj.get("max_tokens") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) if v >= 1 => v,
            _ => {
                return Err(bad(
                    "max_tokens: Input should be greater than or equal to 1",
                ))
            }
        },
        None => return Err(bad("max_tokens: Field required")),
        Some(_) => return Err(bad("max_tokens: Input should be a valid integer")),
    };
    let flag = |k: &str| match obj.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(format!("{k}: Input should be a valid boolean"))),
    };
    let stream = flag("stream")?;
    let ignore_eos = flag("ignore_eos")?;
    let mut prompt_tokens = 0u64;
    let mut hasher = BlockHasher::new(block_size);
    let mut add = |text: &str| {
        prompt_tokens += counter.count(text);
        hasher.push_text(text);
    };
    super::agent_text::tools_text(&obj, &mut add);
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => add(s),
        Some(Value::Array(blocks)) => blocks_text("system", blocks, &mut add)?,
        Some(_) => {
            return Err(bad(
                "system: Input should be a valid string or list of blocks",
            ))
        }
    }
    for_each_message(&obj, &mut add)?;
    Ok(ChatRequest {
        model,
        stream,
        include_usage: true,
        ignore_eos,
        max_tokens: Some(max_tokens),
        prompt_tokens,
        blocks: hasher.finish(),
        tool_name: super::request::first_tool_name(&obj),
    })
}

fn for_each_message(obj: &Map<String, Value>, add: &mut dyn FnMut(&str)) -> Result<(), ApiError> {
    let messages = match obj.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(bad("messages: at least one message is required")),
        None => return Err(bad("messages: Field required")),
        Some(_) => return Err(bad("messages: Input should be a valid list")),
    };
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(bad(format!(
                "messages.{i}: Input should be a valid dictionary"
            )));
        };
        match m.get("role").and_then(Value::as_str) {
            Some("user" | "assistant") => {}
            Some(r) => {
                return Err(bad(format!(
                    "messages.{i}.role: Unexpected role \"{r}\". The Messages API accepts a \
                     top-level `system` parameter, not \"system\" as an input message role; \
                     allowed roles are \"user\" and \"assistant\""
                )))
            }
            None => return Err(bad(format!("messages.{i}.role: Field required"))),
        }
        match m.get("content") {
            Some(Value::String(s)) => add(s),
            Some(Value::Array(blocks)) => {
                blocks_text(&format!("messages.{i}.content"), blocks, add)?;
            }
            None => return Err(bad(format!("messages.{i}.content: Field required"))),
            Some(_) => {
                return Err(bad(format!(
                    "messages.{i}.content: Input should be a valid string or list of blocks"
                )))
            }
        }
    }
    Ok(())
}

/// The text of content blocks; a block without a `type` is refused; a `tool_use` block's input
/// counts its string values; blocks without text (images) carry no tokens.
fn blocks_text(field: &str, blocks: &[Value], add: &mut dyn FnMut(&str)) -> Result<(), ApiError> {
    for (j, b) in blocks.iter().enumerate() {
        let block_type = b.get("type").and_then(Value::as_str);
        match block_type {
            Some("text") => match b.get("text") {
                Some(Value::String(s)) => add(s),
                _ => return Err(bad(format!("{field}.{j}.text: Field required"))),
            },
            Some("thinking") => {
                if let Some(Value::String(s)) = b.get("thinking") {
                    add(s);
                }
            }
            Some("tool_use") => {
                if let Some(input) = b.get("input") {
                    super::agent_text::strings_of(input, add);
                }
            }
            Some("tool_result") => match b.get("content") {
                Some(Value::String(s)) => add(s),
                Some(Value::Array(inner)) => {
                    blocks_text(&format!("{field}.{j}.content"), inner, add)?;
                }
                _ => {}
            },
            Some(_) => {}
            None => return Err(bad(format!("{field}.{j}.type: Field required"))),
        }
    }
    Ok(())
}

/// Anthropic's stop reason for the simulator's finish reason.
pub(crate) fn stop_reason(finish_reason: &str) -> &'static str {
    match finish_reason {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        _ => "end_turn",
    }
}

/// The `usage` object: `input_tokens` the uncached prompt, the prefix cache's hit as
/// `cache_read_input_tokens`.
fn usage_json(usage: &Usage, output_tokens: u64) -> String {
    format!(
        r#"{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":{},"output_tokens":{output_tokens}}}"#,
        usage.prompt_tokens.saturating_sub(usage.cached_tokens),
        usage.cached_tokens
    )
}

fn event(out: &mut BytesMut, name: &str, data: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// `message_start`, the first block's start (a `thinking` block when the reply reasons first, else
/// the text block) and a `ping`.
pub(crate) fn write_start(out: &mut BytesMut, ident: &Ident, usage: &Usage, thinking: bool) {
    let start = format!(
        r#"{{"type":"message_start","message":{{"id":"{}","type":"message","role":"assistant","model":"{}","content":[],"stop_reason":null,"stop_sequence":null,"usage":{}}}}}"#,
        ident.id_json,
        ident.model_json,
        usage_json(usage, 1)
    );
    event(out, "message_start", &start);
    if thinking {
        event(
            out,
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
        );
    } else {
        write_text_start(out, 0);
    }
    event(out, "ping", r#"{"type": "ping"}"#);
}

fn write_text_start(out: &mut BytesMut, index: u32) {
    let start = format!(
        r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"text","text":""}}}}"#
    );
    event(out, "content_block_start", &start);
}

/// `content_block_stop` of the block at `index`.
fn write_block_stop(out: &mut BytesMut, index: u32) {
    let stop = format!(r#"{{"type":"content_block_stop","index":{index}}}"#);
    event(out, "content_block_stop", &stop);
}

/// The thinking block's end (its `signature_delta`, its stop) and the text block's start at 1.
pub(crate) fn write_thinking_end(out: &mut BytesMut, ident: &Ident) {
    let signature = format!(
        r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"signature_delta","signature":"sig_{}"}}}}"#,
        ident.id_json
    );
    event(out, "content_block_delta", &signature);
    write_block_stop(out, 0);
    write_text_start(out, 1);
}

/// The text block's (at `index`) end and the `tool_use` block's start after it.
pub(crate) fn write_tool_start(out: &mut BytesMut, ident: &Ident, index: u32, name_json: &str) {
    write_block_stop(out, index);
    let start = format!(
        r#"{{"type":"content_block_start","index":{},"content_block":{{"type":"tool_use","id":"toolu_{}","name":"{name_json}","input":{{}}}}}}"#,
        index + 1,
        ident.id_json
    );
    event(out, "content_block_start", &start);
}

/// The head of a delta of the block at `index` of `kind` (`thinking_delta` with its `thinking`,
/// `text_delta` with its `text`, `input_json_delta` with its `partial_json`), up to its string's
/// first character; [`DELTA_CLOSE`] ends it.
pub(crate) fn write_delta_open(out: &mut BytesMut, index: u32, (kind, field): (&str, &str)) {
    if index == 0 && kind == "text_delta" {
        out.extend_from_slice(DELTA_OPEN);
        return;
    }
    let head = format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"{kind}\",\"{field}\":\""
    );
    out.extend_from_slice(head.as_bytes());
}

/// The head of a text delta, up to its text's first character.
pub(crate) const DELTA_OPEN: &[u8] = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"";
/// The end of a text delta.
pub(crate) const DELTA_CLOSE: &[u8] = b"\"}}\n\n";
/// A delta cut short (`--malformed-rate`): its JSON never closes.
pub(crate) const DELTA_MALFORMED: &[u8] =
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"del\n\n";

/// The last block's (at `index`) `content_block_stop` and `message_delta` with the stop reason and
/// the output tokens.
pub(crate) fn write_end(out: &mut BytesMut, index: u32, finish_reason: &str, usage: &Usage) {
    write_block_stop(out, index);
    let delta = format!(
        r#"{{"type":"message_delta","delta":{{"stop_reason":"{}","stop_sequence":null}},"usage":{{"output_tokens":{}}}}}"#,
        stop_reason(finish_reason),
        usage.completion_tokens
    );
    event(out, "message_delta", &delta);
}

/// An `error` event (`api_error`) with `message`, as Anthropic sends one mid-stream.
pub(crate) fn write_error(out: &mut BytesMut, message: &str) {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into());
    let data = format!(r#"{{"type":"error","error":{{"type":"api_error","message":{message}}}}}"#);
    event(out, "error", &data);
}

/// `message_stop`.
pub(crate) fn write_stop(out: &mut BytesMut) {
    event(out, "message_stop", r#"{"type":"message_stop"}"#);
}

/// The one-shot (`stream: false`) message.
pub(crate) fn message_json(
    ident: &Ident,
    text: &str,
    finish_reason: &str,
    usage: &Usage,
) -> Vec<u8> {
    let content = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into());
    format!(
        r#"{{"id":"{}","type":"message","role":"assistant","model":"{}","content":[{{"type":"text","text":{content}}}],"stop_reason":"{}","stop_sequence":null,"usage":{}}}"#,
        ident.id_json,
        ident.model_json,
        stop_reason(finish_reason),
        usage_json(usage, usage.completion_tokens)
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<ChatRequest, ApiError> {
        parse(s.as_bytes(), 4, &TokenCounter::Words)
    }

    #[test]
    fn counts_system_and_blocks() {
        let r = parse_str(
            r#"{"model":"m","max_tokens":5,"stream":true,"system":[{"type":"text","text":"a b"}],
               "messages":[{"role":"user","content":[{"type":"text","text":"c d e"},{"type":"image","source":{}}]},
                           {"role":"assistant","content":"f"}]}"#,
        )
        .unwrap();
        assert_eq!(
            (r.prompt_tokens, r.max_tokens, r.stream),
            (6, Some(5), true)
        );
        assert_eq!(r.blocks.len(), 1);
    }

    #[test]
    fn refusals_name_the_field() {
        for (body, want) in [
            (
                r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
                "max_tokens: Field required",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}"#,
                "Unexpected role \"system\"",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[]}"#,
                "at least one message",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"text":"x"}]}]}"#,
                "messages.0.content.0.type",
            ),
        ] {
            let e = parse_str(body).unwrap_err();
            assert!(e.message.contains(want), "{body}: {}", e.message);
            let v: Value = serde_json::from_str(&error_body(&e)).unwrap();
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], "invalid_request_error");
        }
        let e = context_overflow(100, 90, 20);
        assert_eq!(e.message, "prompt is too long: 90 tokens > 80 maximum");
    }
}
