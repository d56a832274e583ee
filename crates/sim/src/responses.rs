//! The simulator's OpenAI Responses API (`POST /v1/responses`): the body's parsing and checks and
//! the streamed events' bytes. The request then takes the same path as a chat completion (engine,
//! prefix cache, timing model, faults, metrics); only what goes over the wire differs. Errors are
//! vLLM's (`{"error":{"message","type","param","code"}}`, the chat wording of a context overflow),
//! as vLLM serves its `/v1/responses`.
//!
//! A stream is the Responses sequence, each event named by `event:` and numbered by
//! `sequence_number`: `response.created` and `response.in_progress` (the response `in_progress`),
//! `response.output_item.added` (an assistant `message`), `response.content_part.added` (an
//! `output_text` part), a `response.output_text.delta` per chunk of tokens, then
//! `response.output_text.done`, `response.content_part.done`, `response.output_item.done` (the whole
//! text) and the end: `response.completed` (status `completed`) or, at the output limit,
//! `response.incomplete` (status `incomplete`, `incomplete_details.reason` `max_output_tokens`), as
//! OpenAI ends a reply cut at `max_output_tokens`. The end's response carries `usage`:
//! `input_tokens` the whole prompt, `input_tokens_details.cached_tokens` what the prefix cache
//! held, `output_tokens`, `output_tokens_details.reasoning_tokens` 0, `total_tokens`. An injected
//! mid-stream error (`--stream-error-rate`) is a `response.failed` whose response has status
//! `failed` and an `error` with code `server_error`.

use bytes::BytesMut;
use serde_json::{Map, Value};

use super::request::{opt_bool, opt_positive_int, wrong_type, ApiError, ChatRequest};
use super::response::{Ident, Usage};
use agentx_tokens::blocks::BlockHasher;
use agentx_tokens::TokenCounter;

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError {
        param: Some(field.to_owned()),
        ..ApiError::bad_request(message)
    }
}

/// Parses and checks a Responses body into what the simulator uses; `block_size` is the prefix
/// cache's block size. `instructions` come first in the prompt, then each input item's text in
/// order (a string `input` is one user message).
pub(crate) fn parse(
    body: &[u8],
    block_size: u32,
    counter: &TokenCounter,
) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "request body is not valid JSON: {e}; send a JSON object with `input`"
        ))
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_request("request body must be a JSON object"));
    };
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(wrong_type("model", "a string", v)),
    };
    let stream = opt_bool(&obj, "stream")?.unwrap_or(false);
    let ignore_eos = opt_bool(&obj, "ignore_eos")?.unwrap_or(false);
    let max_tokens = opt_positive_int(&obj, "max_output_tokens")?;
    let mut prompt_tokens = 0u64;
    let mut hasher = BlockHasher::new(block_size);
    let mut add = |text: &str| {
        prompt_tokens += counter.count(text);
        hasher.push_text(text);
    };
    super::agent_text::tools_text(&obj, &mut add);
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => add(s),
        Some(v) => return Err(wrong_type("instructions", "a string", v)),
    }
    for_each_input(&obj, &mut add)?;
    Ok(ChatRequest {
        model,
        stream,
        // The end event always carries the usage.
        include_usage: true,
        ignore_eos,
        max_tokens,
        prompt_tokens,
        blocks: hasher.finish(),
        tool_name: super::request::first_tool_name(&obj),
    })
}

/// Calls `add` with the text of every input item, in order: a message's string content or its
/// `input_text`/`output_text` parts, a function call's `arguments`, a function call output's
/// `output`, a reasoning item's summary and content texts; other items (images) carry no tokens.
fn for_each_input(obj: &Map<String, Value>, add: &mut dyn FnMut(&str)) -> Result<(), ApiError> {
    let items =
        match obj.get("input") {
            Some(Value::String(s)) => {
                add(s);
                return Ok(());
            }
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) => return Err(bad("input", "field `input` must not be empty")),
            None => return Err(bad(
                "input",
                "missing field `input`: send a string or an array of {\"role\", \"content\"} items",
            )),
            Some(v) => return Err(wrong_type("input", "a string or an array of items", v)),
        };
    for (i, item) in items.iter().enumerate() {
        let Value::Object(item) = item else {
            return Err(wrong_type(&format!("input[{i}]"), "an object", item));
        };
        let text = |key: &str| item.get(key).and_then(Value::as_str);
        match text("type") {
            None | Some("message") => message_text(i, item, add)?,
            Some("function_call") => {
                super::agent_text::arguments_text(text("arguments").unwrap_or(""), add);
            }
            Some("function_call_output") => add(text("output").unwrap_or("")),
            Some("reasoning") => {
                for key in ["summary", "content"] {
                    if let Some(Value::Array(parts)) = item.get(key) {
                        for part in parts {
                            if let Some(Value::String(s)) = part.get("text") {
                                add(s);
                            }
                        }
                    }
                }
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The text of input item `i`, a message.
fn message_text(
    i: usize,
    item: &Map<String, Value>,
    add: &mut dyn FnMut(&str),
) -> Result<(), ApiError> {
    match item.get("role").and_then(Value::as_str) {
        Some("user" | "assistant" | "system" | "developer") => {}
        Some(role) => {
            return Err(bad(
                &format!("input[{i}].role"),
                format!(
                    "field `input[{i}].role` is {role:?}; use \"user\", \"assistant\", \"system\" \
                     or \"developer\""
                ),
            ))
        }
        None => {
            return Err(bad(
                &format!("input[{i}].role"),
                format!("missing field `input[{i}].role`"),
            ))
        }
    }
    match item.get("content") {
        Some(Value::String(s)) => add(s),
        Some(Value::Array(parts)) => {
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text") => match part.get("text") {
                        Some(Value::String(s)) => add(s),
                        _ => {
                            let field = format!("input[{i}].content[{j}].text");
                            return Err(bad(&field, format!("missing field `{field}`")));
                        }
                    },
                    Some(_) => {}
                    None => {
                        let field = format!("input[{i}].content[{j}].type");
                        return Err(bad(&field, format!("missing field `{field}`")));
                    }
                }
            }
        }
        None => {
            let field = format!("input[{i}].content");
            return Err(bad(&field, format!("missing field `{field}`")));
        }
        Some(v) => {
            return Err(wrong_type(
                &format!("input[{i}].content"),
                "a string or an array of parts",
                v,
            ))
        }
    }
    Ok(())
}

/// The `usage` object.
fn usage_json(usage: &Usage) -> String {
    format!(
        r#"{{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens":{},"output_tokens_details":{{"reasoning_tokens":{}}},"total_tokens":{}}}"#,
        usage.prompt_tokens,
        usage.cached_tokens,
        usage.completion_tokens,
        usage.reasoning_tokens,
        usage.prompt_tokens + usage.completion_tokens
    )
}

/// The id of the reply's one output item.
fn item_id(ident: &Ident) -> String {
    format!("msg_{}", ident.id_json)
}

/// The assistant message item holding `text` (a JSON string literal), `status` as given.
fn message_item(ident: &Ident, status: &str, text_json: Option<&str>) -> String {
    let content = text_json.map_or(String::new(), |text| {
        format!(r#"{{"type":"output_text","text":{text},"annotations":[],"logprobs":[]}}"#)
    });
    format!(
        r#"{{"id":"{}","type":"message","role":"assistant","status":"{status}","content":[{content}]}}"#,
        item_id(ident)
    )
}

/// How a response stands, as its object says.
struct Standing<'a> {
    status: &'a str,
    /// The output items, joined.
    output: &'a str,
    usage: Option<&'a Usage>,
    incomplete: Option<&'a str>,
    error: Option<&'a str>,
}

/// The response object.
fn response_json(ident: &Ident, standing: &Standing<'_>) -> String {
    let usage = standing.usage.map_or("null".to_owned(), usage_json);
    let incomplete = standing.incomplete.map_or("null".to_owned(), |reason| {
        format!(r#"{{"reason":"{reason}"}}"#)
    });
    format!(
        r#"{{"id":"{}","object":"response","created_at":{},"status":"{}","model":"{}","output":[{}],"usage":{usage},"incomplete_details":{incomplete},"error":{},"instructions":null,"metadata":{{}},"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"temperature":null,"top_p":null,"store":false}}"#,
        ident.id_json,
        ident.created,
        standing.status,
        ident.model_json,
        standing.output,
        standing.error.unwrap_or("null"),
    )
}

/// Sequence numbers of a stream's events.
#[derive(Debug, Default)]
pub(crate) struct Sequence(u64);

impl Sequence {
    fn next(&mut self) -> u64 {
        let n = self.0;
        self.0 += 1;
        n
    }
}

/// `event: <kind>` and `data: {"type":"<kind>","sequence_number":N,<rest>`.
fn event(out: &mut BytesMut, seq: &mut Sequence, kind: &str, rest: &str) {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(64 + rest.len());
    let _ = write!(
        text,
        "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{},{rest}\n\n",
        seq.next()
    );
    out.extend_from_slice(text.as_bytes());
}

/// `response.created`, `response.in_progress`, then the first item's start: the reasoning item when
/// the reply reasons first, else the message item and its text part.
pub(crate) fn write_start(out: &mut BytesMut, seq: &mut Sequence, ident: &Ident, reasoning: bool) {
    let in_progress = response_json(
        ident,
        &Standing {
            status: "in_progress",
            output: "",
            usage: None,
            incomplete: None,
            error: None,
        },
    );
    for kind in ["response.created", "response.in_progress"] {
        event(out, seq, kind, &format!(r#""response":{in_progress}}}"#));
    }
    if reasoning {
        let item = reasoning_item(ident, "in_progress", None);
        event(
            out,
            seq,
            "response.output_item.added",
            &format!(r#""output_index":0,"item":{item}}}"#),
        );
    } else {
        write_message_start(out, seq, ident, 0);
    }
}

/// The message item's and its text part's start, at `index`.
fn write_message_start(out: &mut BytesMut, seq: &mut Sequence, ident: &Ident, index: u32) {
    let item = message_item(ident, "in_progress", None);
    event(
        out,
        seq,
        "response.output_item.added",
        &format!(r#""output_index":{index},"item":{item}}}"#),
    );
    event(
        out,
        seq,
        "response.content_part.added",
        &format!(
            r#""item_id":"{}","output_index":{index},"content_index":0,"part":{{"type":"output_text","text":"","annotations":[],"logprobs":[]}}}}"#,
            item_id(ident)
        ),
    );
}

/// The reasoning item, its text (a JSON string literal) when given.
fn reasoning_item(ident: &Ident, status: &str, text_json: Option<&str>) -> String {
    let content = text_json.map_or(String::new(), |text| {
        format!(r#"{{"type":"reasoning_text","text":{text}}}"#)
    });
    format!(
        r#"{{"id":"rs_{}","type":"reasoning","status":"{status}","summary":[],"content":[{content}]}}"#,
        ident.id_json
    )
}

/// The reasoning item's end (`response.reasoning_text.done`, `response.output_item.done`) and the
/// message item's start at 1; returns the finished reasoning item.
pub(crate) fn write_reasoning_end(
    out: &mut BytesMut,
    seq: &mut Sequence,
    ident: &Ident,
    reasoning: &str,
) -> String {
    let text_json = serde_json::to_string(reasoning).unwrap_or_else(|_| "\"\"".into());
    event(
        out,
        seq,
        "response.reasoning_text.done",
        &format!(
            r#""item_id":"rs_{}","output_index":0,"content_index":0,"text":{text_json}}}"#,
            ident.id_json
        ),
    );
    let done = reasoning_item(ident, "completed", Some(&text_json));
    event(
        out,
        seq,
        "response.output_item.done",
        &format!(r#""output_index":0,"item":{done}}}"#),
    );
    write_message_start(out, seq, ident, 1);
    done
}

/// The head of a reasoning delta, up to its text's first character; [`DELTA_CLOSE`] ends it.
pub(crate) fn write_reasoning_delta_open(out: &mut BytesMut, seq: &mut Sequence, ident: &Ident) {
    let head = format!(
        "event: response.reasoning_text.delta\ndata: {{\"type\":\"response.reasoning_text.delta\",\"sequence_number\":{},\"item_id\":\"rs_{}\",\"output_index\":0,\"content_index\":0,\"delta\":\"",
        seq.next(),
        ident.id_json
    );
    out.extend_from_slice(head.as_bytes());
}

/// The function call item (`call_id` and `name`, no arguments yet), at `index`.
fn function_call_item(ident: &Ident, status: &str, name_json: &str, arguments: &str) -> String {
    let arguments = serde_json::to_string(arguments).unwrap_or_else(|_| "\"\"".into());
    format!(
        r#"{{"id":"fc_{id}","type":"function_call","status":"{status}","call_id":"call_{id}","name":"{name_json}","arguments":{arguments}}}"#,
        id = ident.id_json
    )
}

/// The function call item's start at `index`.
pub(crate) fn write_tool_start(
    out: &mut BytesMut,
    seq: &mut Sequence,
    ident: &Ident,
    index: u32,
    name_json: &str,
) {
    let item = function_call_item(ident, "in_progress", name_json, "");
    event(
        out,
        seq,
        "response.output_item.added",
        &format!(r#""output_index":{index},"item":{item}}}"#),
    );
}

/// The head of an arguments delta of the call at `index`, up to its text's first character;
/// [`DELTA_CLOSE`] ends it.
pub(crate) fn write_arguments_delta_open(
    out: &mut BytesMut,
    seq: &mut Sequence,
    ident: &Ident,
    index: u32,
) {
    let head = format!(
        "event: response.function_call_arguments.delta\ndata: {{\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":{},\"item_id\":\"fc_{}\",\"output_index\":{index},\"delta\":\"",
        seq.next(),
        ident.id_json
    );
    out.extend_from_slice(head.as_bytes());
}

/// The function call's end at `index` (`response.function_call_arguments.done` with the whole
/// `arguments`, `response.output_item.done`); returns the finished item.
pub(crate) fn write_tool_end(
    out: &mut BytesMut,
    seq: &mut Sequence,
    (ident, index): (&Ident, u32),
    name_json: &str,
    arguments: &str,
) -> String {
    let arguments_json = serde_json::to_string(arguments).unwrap_or_else(|_| "\"\"".into());
    event(
        out,
        seq,
        "response.function_call_arguments.done",
        &format!(
            r#""item_id":"fc_{}","output_index":{index},"name":"{name_json}","arguments":{arguments_json}}}"#,
            ident.id_json
        ),
    );
    let done = function_call_item(ident, "completed", name_json, arguments);
    event(
        out,
        seq,
        "response.output_item.done",
        &format!(r#""output_index":{index},"item":{done}}}"#),
    );
    done
}

/// The head of a text delta of the message at `index`, up to its text's first character.
pub(crate) fn write_delta_open(out: &mut BytesMut, seq: &mut Sequence, ident: &Ident, index: u32) {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(200);
    let _ = write!(
        text,
        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"{}\",\"output_index\":{index},\"content_index\":0,\"logprobs\":[],\"delta\":\"",
        seq.next(),
        item_id(ident)
    );
    out.extend_from_slice(text.as_bytes());
}

/// The end of a text delta.
pub(crate) const DELTA_CLOSE: &[u8] = b"\"}\n\n";
/// A delta cut short (`--malformed-rate`): its JSON never closes.
pub(crate) const DELTA_MALFORMED: &[u8] =
    b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_num\n\n";

/// The text's, the part's and the item's `done` events, then `response.completed` or, at the
/// output limit, `response.incomplete`; `text` is the whole reply.
#[cfg(test)]
pub(crate) fn write_end(
    out: &mut BytesMut,
    seq: &mut Sequence,
    (ident, text): (&Ident, &str),
    finish_reason: &str,
    usage: &Usage,
) {
    let done_item = write_message_end(out, seq, (ident, 0), text);
    write_final(out, seq, ident, &done_item, (finish_reason, usage));
}

/// The message's (at `index`) text's, part's and item's `done` events; `text` is the whole
/// reply. Returns the finished item.
pub(crate) fn write_message_end(
    out: &mut BytesMut,
    seq: &mut Sequence,
    (ident, index): (&Ident, u32),
    text: &str,
) -> String {
    let text_json = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into());
    let item = item_id(ident);
    event(
        out,
        seq,
        "response.output_text.done",
        &format!(
            r#""item_id":"{item}","output_index":{index},"content_index":0,"text":{text_json},"logprobs":[]}}"#
        ),
    );
    event(
        out,
        seq,
        "response.content_part.done",
        &format!(
            r#""item_id":"{item}","output_index":{index},"content_index":0,"part":{{"type":"output_text","text":{text_json},"annotations":[],"logprobs":[]}}}}"#
        ),
    );
    let done_item = message_item(ident, "completed", Some(&text_json));
    event(
        out,
        seq,
        "response.output_item.done",
        &format!(r#""output_index":{index},"item":{done_item}}}"#),
    );
    done_item
}

/// `response.completed` or, at the output limit, `response.incomplete`, its output the finished
/// `items` (joined by commas).
pub(crate) fn write_final(
    out: &mut BytesMut,
    seq: &mut Sequence,
    ident: &Ident,
    items: &str,
    (finish_reason, usage): (&str, &Usage),
) {
    let (kind, body) = final_response(ident, items, finish_reason, usage);
    event(out, seq, kind, &format!(r#""response":{body}}}"#));
}

/// The end event's type and its response: completed, or incomplete at the output limit.
fn final_response(
    ident: &Ident,
    output: &str,
    finish_reason: &str,
    usage: &Usage,
) -> (&'static str, String) {
    let at_limit = finish_reason == "length";
    let standing = Standing {
        status: if at_limit { "incomplete" } else { "completed" },
        output,
        usage: Some(usage),
        incomplete: at_limit.then_some("max_output_tokens"),
        error: None,
    };
    let kind = if at_limit {
        "response.incomplete"
    } else {
        "response.completed"
    };
    (kind, response_json(ident, &standing))
}

/// `response.failed` after `sent` output tokens: the response failed with `message`.
pub(crate) fn write_failed(
    out: &mut BytesMut,
    seq: &mut Sequence,
    ident: &Ident,
    usage: &Usage,
    message: &str,
) {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into());
    let error = format!(r#"{{"code":"server_error","message":{message}}}"#);
    let failed = response_json(
        ident,
        &Standing {
            status: "failed",
            output: "",
            usage: Some(usage),
            incomplete: None,
            error: Some(&error),
        },
    );
    event(
        out,
        seq,
        "response.failed",
        &format!(r#""response":{failed}}}"#),
    );
}

/// The one-shot (`stream: false`) response.
pub(crate) fn response_object(
    ident: &Ident,
    text: &str,
    finish_reason: &str,
    usage: &Usage,
) -> Vec<u8> {
    let text_json = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into());
    let item = message_item(ident, "completed", Some(&text_json));
    final_response(ident, &item, finish_reason, usage)
        .1
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<ChatRequest, ApiError> {
        parse(s.as_bytes(), 4, &TokenCounter::Words)
    }

    #[test]
    fn counts_instructions_and_every_input_item() {
        let r = parse_str(
            r#"{"model":"m","max_output_tokens":5,"stream":true,"instructions":"a b",
               "input":[{"role":"system","content":[{"type":"input_text","text":"c"}]},
                        {"role":"user","content":[{"type":"input_text","text":"d e"},{"type":"input_image","image_url":"x"}]},
                        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"f"}]},
                        {"type":"function_call","call_id":"c1","name":"ls","arguments":"g h"},
                        {"type":"function_call_output","call_id":"c1","output":"i"},
                        {"role":"developer","content":"j"}],"ignore_eos":true}"#,
        )
        .unwrap();
        assert_eq!(
            (r.prompt_tokens, r.max_tokens, r.stream, r.ignore_eos),
            (10, Some(5), true, true)
        );
        assert_eq!(r.blocks.len(), 2);
        let r = parse_str(r#"{"input":"one two three"}"#).unwrap();
        assert_eq!((r.prompt_tokens, r.max_tokens, r.stream), (3, None, false));
    }

    #[test]
    fn refusals_name_the_field() {
        for (body, want) in [
            (r#"{"model":"m"}"#, "missing field `input`"),
            (r#"{"input":[]}"#, "`input` must not be empty"),
            (
                r#"{"input":[{"role":"tool","content":"x"}]}"#,
                "input[0].role",
            ),
            (
                r#"{"input":[{"role":"user","content":[{"text":"x"}]}]}"#,
                "input[0].content[0].type",
            ),
            (
                r#"{"input":"x","max_output_tokens":0}"#,
                "max_output_tokens",
            ),
            (r#"{"input":"x","stream":"yes"}"#, "stream"),
        ] {
            let e = parse_str(body).unwrap_err();
            assert!(e.message.contains(want), "{body}: {}", e.message);
            assert_eq!(e.status, 400);
        }
    }

    fn usage() -> Usage {
        Usage {
            prompt_tokens: 30,
            completion_tokens: 2,
            cached_tokens: 16,
            reasoning_tokens: 0,
        }
    }

    /// The `data` of every event, checked against its `event:` name and numbered in order.
    fn events(out: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(out).unwrap();
        let mut all = Vec::new();
        for block in text.split("\n\n").filter(|b| !b.is_empty()) {
            let (name, data) = block.split_once('\n').unwrap();
            let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(name.strip_prefix("event: ").unwrap(), v["type"]);
            assert_eq!(v["sequence_number"], all.len());
            all.push(v);
        }
        all
    }

    #[test]
    fn a_stream_is_the_responses_sequence() {
        let ident = Ident::new("resp_1", "m", 7);
        let mut seq = Sequence::default();
        let mut out = BytesMut::new();
        write_start(&mut out, &mut seq, &ident, false);
        for word in ["a", " b"] {
            write_delta_open(&mut out, &mut seq, &ident, 0);
            out.extend_from_slice(word.as_bytes());
            out.extend_from_slice(DELTA_CLOSE);
        }
        write_end(&mut out, &mut seq, (&ident, "a b"), "length", &usage());
        let all = events(&out);
        let kinds: Vec<&str> = all.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete",
            ]
        );
        let end = &all[9]["response"];
        assert_eq!(end["status"], "incomplete");
        assert_eq!(end["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(end["usage"]["input_tokens_details"]["cached_tokens"], 16);
        assert_eq!(end["usage"]["total_tokens"], 32);
        assert_eq!(end["output"][0]["content"][0]["text"], "a b");
        let one_shot: Value =
            serde_json::from_slice(&response_object(&ident, "a", "stop", &usage())).unwrap();
        assert_eq!(one_shot["status"], "completed");
        assert_eq!(one_shot["output"][0]["content"][0]["text"], "a");
        let mut out = BytesMut::new();
        write_failed(&mut out, &mut Sequence::default(), &ident, &usage(), "boom");
        let failed = &events(&out)[0];
        assert_eq!(failed["response"]["error"]["code"], "server_error");
        assert_eq!(failed["response"]["status"], "failed");
    }
}
