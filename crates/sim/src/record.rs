//! The request log (`agentx-host sim --record-requests FILE`): one JSON line per chat completion
//! request the simulator parsed, written as it arrives, so that what two clients sent can be
//! compared request for request (`bench/differential.sh`).
//!
//! A line holds what identifies the request across clients and what shapes the load: its arrival
//! time, the identity and routing headers, the model, the token limits and stream options as sent,
//! the other top-level fields with their values (sampling parameters, Dynamo's `nvext`), the
//! prompt tokens as the simulator counts them, each message's role and token count (a Responses
//! API request's `input` items are its messages), the
//! cache-bust marker (`[rid:…]`) if the first user message carries one, and a digest of the messages
//! with that marker removed (two runs that differ only by their run id digest alike). Requests whose
//! body is not a valid chat request are logged with their error instead.
//!
//! A line is written when its body has been read and parsed: a body over 16 KiB is parsed on a
//! request-preparation thread (`prep::PREPARE_INLINE_BYTES`), so its line can follow the line of a
//! request that arrived after it. `seq` is the arrival order.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use agentx_tokens::TokenCounter;

/// The headers a line keeps besides the routing profiles' (lowercase), when the request
/// carries them.
const LOGGED_BESIDE_PROFILES: [&str; 9] = [
    "x-request-id",
    "x-correlation-id",
    "x-session-affinity",
    "x-session-id",
    "x-smg-routing-key",
    "x-dynamo-session-id",
    "x-dynamo-parent-session-id",
    "traceparent",
    "user-agent",
];

/// The headers a line keeps (lowercase): [`LOGGED_BESIDE_PROFILES`], then every other header a
/// routing profile sends (agentx-protocol's `routing::HEADER_TABLE`, the one home of their names).
pub(crate) fn logged_headers() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<String> = LOGGED_BESIDE_PROFILES
            .iter()
            .map(|name| (*name).to_owned())
            .collect();
        for row in agentx_protocol::routing::HEADER_TABLE {
            let name = row.name.to_ascii_lowercase();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    })
}

/// The open request log.
pub(crate) struct RequestLog {
    path: PathBuf,
    file: Mutex<File>,
    started: tokio::time::Instant,
}

impl std::fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLog")
            .field("path", &self.path)
            .finish()
    }
}

/// What the server knows of a request when it logs it.
#[derive(Clone)]
pub(crate) struct Arrival {
    /// The request's number (1 for the first chat request).
    pub seq: u64,
    /// The connection it came on (0 for the first accepted).
    pub conn: u64,
    /// When it arrived.
    pub at: tokio::time::Instant,
    /// The kept headers ([`logged_headers`]) and their values.
    pub headers: Vec<(&'static str, String)>,
}

impl RequestLog {
    /// Creates (or truncates) the log at `path`.
    pub(crate) fn create(path: &Path) -> std::io::Result<RequestLog> {
        let file = File::create(path)?;
        Ok(RequestLog {
            path: path.to_owned(),
            file: Mutex::new(file),
            started: tokio::time::Instant::now(),
        })
    }

    /// Appends the line of one request whose body is `body`. A write error is reported once per
    /// request as a warning; the request is served regardless.
    pub(crate) fn log(&self, arrival: &Arrival, body: &[u8], counter: &TokenCounter) {
        let mut line = describe(arrival, self.started, body, counter).to_string();
        line.push('\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(error) = file.write_all(line.as_bytes()) {
            tracing::warn!(
                "cannot write the request log {}: {error}",
                self.path.display()
            );
        }
    }
}

fn unix_ns_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The cache-bust marker at the start of `text` (`[rid:` … `]`), if any.
pub(crate) fn marker(text: &str) -> Option<&str> {
    let rest = text.trim_start();
    if !rest.starts_with("[rid:") {
        return None;
    }
    rest.find(']').map(|end| &rest[..=end])
}

/// The text of a message's content: a string, or its `text` parts joined by newlines.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The names of the request's tools and the tokens of their descriptions.
fn tools_of(obj: &Map<String, Value>, counter: &TokenCounter) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    if let Some(Value::Array(tools)) = obj.get("tools") {
        for tool in tools {
            let schema = tool.get("function").unwrap_or(tool);
            let name = schema.get("name").and_then(Value::as_str).unwrap_or("?");
            names.push(name.to_owned());
        }
    }
    let mut tokens = 0;
    super::agent_text::tools_text(obj, &mut |text| tokens += counter.count(text));
    (names, tokens)
}

/// Every text of one message or input item the model reads (its content, a tool call's
/// arguments, a tool result, the reasoning), joined by newlines, and what it is on the agent's
/// wire: `text`, `tool_call`, `tool_result` or `reasoning` (joined by `+` when several).
fn agent_text_of(message: &Value) -> (String, String) {
    use super::agent_text::{arguments_text, chat_message_extras, strings_of};
    let mut texts: Vec<String> = Vec::new();
    let mut kinds: Vec<&str> = Vec::new();
    let note = |kind: &'static str, kinds: &mut Vec<&str>| {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    };
    let Value::Object(m) = message else {
        return (String::new(), "text".into());
    };
    let text = |key: &str| m.get(key).and_then(Value::as_str);
    match (text("role"), text("type")) {
        (Some("tool"), _) | (None, Some("function_call_output")) => note("tool_result", &mut kinds),
        (None, Some("function_call")) => note("tool_call", &mut kinds),
        (None, Some("reasoning")) => note("reasoning", &mut kinds),
        _ => {}
    }
    if let Some(Value::Array(parts)) = m.get("content") {
        for part in parts {
            match part.get("type").and_then(Value::as_str) {
                Some("tool_use") => note("tool_call", &mut kinds),
                Some("tool_result") => note("tool_result", &mut kinds),
                Some("thinking") => note("reasoning", &mut kinds),
                _ => {}
            }
            for key in ["text", "thinking"] {
                if let Some(Value::String(s)) = part.get(key) {
                    texts.push(s.clone());
                }
            }
            if let Some(input) = part.get("input") {
                strings_of(input, &mut |s| texts.push(s.to_owned()));
            }
            match part.get("content") {
                Some(Value::String(s)) => texts.push(s.clone()),
                Some(inner @ Value::Array(_)) => texts.push(content_text(Some(inner))),
                _ => {}
            }
        }
    } else {
        texts.push(content_text(m.get("content")));
    }
    if m.get("reasoning_content").is_some() {
        note("reasoning", &mut kinds);
    }
    if m.get("tool_calls")
        .is_some_and(|calls| calls.as_array().is_some_and(|c| !c.is_empty()))
    {
        note("tool_call", &mut kinds);
    }
    chat_message_extras(m, &mut |s| texts.push(s.to_owned()));
    if let Some(arguments) = text("arguments") {
        arguments_text(arguments, &mut |s| texts.push(s.to_owned()));
    }
    if let Some(output) = text("output") {
        texts.push(output.to_owned());
    }
    for key in ["summary"] {
        if let Some(Value::Array(parts)) = m.get(key) {
            for part in parts {
                if let Some(Value::String(s)) = part.get("text") {
                    texts.push(s.clone());
                }
            }
        }
    }
    texts.retain(|t| !t.is_empty());
    let kind = if kinds.is_empty() {
        "text".to_owned()
    } else {
        kinds.join("+")
    };
    (texts.join("\n"), kind)
}

/// The JSON line of one request.
fn describe(
    arrival: &Arrival,
    started: tokio::time::Instant,
    body: &[u8],
    counter: &TokenCounter,
) -> Value {
    let elapsed = arrival.at.saturating_duration_since(started).as_secs_f64();
    let mut out = Map::new();
    out.insert("seq".into(), json!(arrival.seq));
    out.insert("conn".into(), json!(arrival.conn));
    // Unix time of the logging, which follows the arrival by the body's read and parse.
    out.insert("unix_ns".into(), json!(unix_ns_now()));
    out.insert("t_s".into(), json!((elapsed * 1e6).round() / 1e6));
    let headers: Map<String, Value> = arrival
        .headers
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    out.insert("headers".into(), Value::Object(headers));
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
        out.insert(
            "error".into(),
            json!("the body is not a JSON object; see the server's answer"),
        );
        return Value::Object(out);
    };
    for key in [
        "model",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "max_output_tokens",
        "ignore_eos",
    ] {
        out.insert(key.into(), obj.get(key).cloned().unwrap_or(Value::Null));
    }
    let extra: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| {
            !matches!(
                *k,
                "model"
                    | "stream"
                    | "stream_options"
                    | "max_tokens"
                    | "max_completion_tokens"
                    | "max_output_tokens"
                    | "ignore_eos"
                    | "messages"
                    | "input"
                    | "tools"
            )
        })
        .collect();
    out.insert("other_fields".into(), json!(extra));
    // Their values too (sampling parameters, `nvext.session_control`): small, and what a router or
    // an engine acts on.
    let values: Map<String, Value> = extra
        .iter()
        .filter_map(|k| obj.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    out.insert("other_values".into(), Value::Object(values));
    // A Responses API request's messages are its `input` items (a string is one user message).
    let one_input;
    let messages = match obj.get("messages").or_else(|| obj.get("input")) {
        Some(Value::Array(items)) => items.as_slice(),
        Some(Value::String(text)) => {
            one_input = [json!({"role": "user", "content": text})];
            &one_input[..]
        }
        _ => &[],
    };
    let mut digest = Sha256::new();
    let mut roles = Vec::with_capacity(messages.len());
    let mut tokens = Vec::with_capacity(messages.len());
    let mut found_marker: Option<String> = None;
    let mut total = 0u64;
    let (tool_names, tool_tokens) = tools_of(&obj, counter);
    total += tool_tokens;
    out.insert("tools".into(), json!(tool_names));
    out.insert("tool_tokens".into(), json!(tool_tokens));
    let mut kinds = Vec::with_capacity(messages.len());
    for m in messages {
        let role = m
            .get("role")
            .or_else(|| m.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        let (mut text, kind) = agent_text_of(m);
        kinds.push(kind);
        total += counter.count(&text);
        if found_marker.is_none() && role == "user" {
            if let Some(found) = marker(&text) {
                found_marker = Some(found.to_owned());
                text = text.trim_start()[found.len()..].trim_start().to_owned();
            }
        }
        tokens.push(counter.count(&text));
        roles.push(role.to_owned());
        digest.update(role.as_bytes());
        digest.update([0]);
        digest.update(text.as_bytes());
        digest.update([0]);
    }
    out.insert("prompt_tokens".into(), json!(total));
    out.insert("messages".into(), json!(messages.len()));
    out.insert("roles".into(), json!(roles));
    out.insert("message_tokens".into(), json!(tokens));
    out.insert("message_kinds".into(), json!(kinds));
    out.insert("marker".into(), json!(found_marker));
    out.insert(
        "digest".into(),
        json!(hex::encode(&digest.finalize()[..12])),
    );
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_every_header_a_routing_profile_sends() {
        let names = logged_headers();
        assert_eq!(
            &names[..LOGGED_BESIDE_PROFILES.len()],
            LOGGED_BESIDE_PROFILES
        );
        for row in agentx_protocol::routing::HEADER_TABLE {
            let name = row.name.to_ascii_lowercase();
            assert_eq!(
                names.iter().filter(|kept| **kept == name).count(),
                1,
                "{name}"
            );
        }
        assert!(names.iter().any(|name| name == "x-claude-code-session-id"));
    }

    fn line(body: &str) -> Value {
        let now = tokio::time::Instant::now();
        let arrival = Arrival {
            seq: 3,
            conn: 1,
            at: now,
            headers: vec![("x-correlation-id", "t1::sa:a-7".into())],
        };
        describe(&arrival, now, body.as_bytes(), &TokenCounter::Words)
    }

    #[test]
    fn a_line_counts_tokens_and_strips_the_marker_from_the_digest() {
        let a = line(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},
                "max_completion_tokens":7,"ignore_eos":true,"messages":[
                {"role":"system","content":"a b c"},
                {"role":"user","content":"[rid:0123456789ab]\n\nd e"},
                {"role":"assistant","content":[{"type":"text","text":"f"}]}]}"#,
        );
        assert_eq!(a["seq"], 3);
        assert_eq!(a["headers"]["x-correlation-id"], "t1::sa:a-7");
        assert_eq!(a["max_completion_tokens"], 7);
        assert_eq!(a["max_tokens"], Value::Null);
        assert_eq!(a["stream_options"]["include_usage"], true);
        assert_eq!(a["prompt_tokens"], 7, "the marker counts as one word");
        assert_eq!(a["message_tokens"], json!([3, 2, 1]));
        assert_eq!(a["roles"], json!(["system", "user", "assistant"]));
        assert_eq!(a["marker"], "[rid:0123456789ab]");
        let b = line(
            r#"{"model":"m","stream":true,"max_completion_tokens":7,"messages":[
                {"role":"system","content":"a b c"},
                {"role":"user","content":"[rid:ffffffffffff]\n\nd e"},
                {"role":"assistant","content":"f"}]}"#,
        );
        assert_eq!(
            a["digest"], b["digest"],
            "another run id, the same messages"
        );
        let c = line(
            r#"{"messages":[{"role":"system","content":"a b c"},{"role":"user","content":"d e g"}]}"#,
        );
        assert_ne!(a["digest"], c["digest"]);
        assert_eq!(c["marker"], Value::Null);
    }

    #[test]
    fn a_responses_request_logs_its_input_items_as_the_chat_messages() {
        let chat = line(
            r#"{"model":"m","max_tokens":7,"messages":[
                {"role":"system","content":"a b c"},
                {"role":"user","content":"[rid:0123456789ab]\n\nd e"},
                {"role":"assistant","content":"f"}]}"#,
        );
        let responses = line(
            r#"{"model":"m","max_output_tokens":7,"stream":true,"store":false,"input":[
                {"role":"system","content":[{"type":"input_text","text":"a b c"}]},
                {"role":"user","content":[{"type":"input_text","text":"[rid:0123456789ab]\n\nd e"}]},
                {"role":"assistant","content":[{"type":"output_text","text":"f"}]}]}"#,
        );
        for key in [
            "digest",
            "roles",
            "message_tokens",
            "prompt_tokens",
            "marker",
        ] {
            assert_eq!(responses[key], chat[key], "{key}");
        }
        assert_eq!(responses["max_output_tokens"], 7);
        assert_eq!(responses["other_fields"], json!(["store"]));
        let one = line(r#"{"input":"g h"}"#);
        assert_eq!(
            (&one["roles"], &one["prompt_tokens"]),
            (&json!(["user"]), &json!(2))
        );
    }

    #[test]
    fn a_body_that_is_not_an_object_is_logged_with_an_error() {
        let a = line("[1]");
        assert!(a["error"].as_str().unwrap().contains("not a JSON object"));
        assert_eq!(a["seq"], 3);
    }

    #[tokio::test]
    async fn an_unwritable_log_is_an_error_naming_the_flag() {
        let mut c = crate::SimConfig::max();
        c.record_requests = Some("/nonexistent-dir/requests.jsonl".into());
        let e = crate::spawn(c).unwrap_err().to_string();
        assert!(e.contains("--record-requests"), "{e}");
        assert!(e.contains("/nonexistent-dir/requests.jsonl"), "{e}");
    }
}
