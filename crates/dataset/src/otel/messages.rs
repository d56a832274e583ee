//! Recorded messages reduced to keys: each message of `gen_ai.system_instructions`,
//! `gen_ai.input.messages` and `gen_ai.output.messages` (or `gen_ai.output.text`) is normalized
//! (docs/specs/otel-genai-traces.md#2-attributes: the OTel parts shape and the OpenAI shape give the same
//! message) and kept only as a [`Msg`]: a 64-bit hash of its canonical JSON and its length in
//! characters. No text outlives [`prompt_of`].
//!
//! Canonical form: `{"role", "parts": [...]}` where a part is `{"type":"text","content"}`,
//! `{"type":"tool_call","id","name","arguments"}` (arguments given as a JSON string are decoded) or
//! `{"type":"tool_call_response","id","result"}`; other parts are kept as recorded. OpenAI `content`
//! (a string or a list of `{type:"text",text}`) becomes text parts, `tool_calls` tool-call parts, and
//! a `tool` message with `tool_call_id` a tool-call response. An output message's `finish_reason` is
//! left out (the same reply replayed as an input message has none).

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// One message: the hash of its canonical JSON, that JSON's length in characters, and inference-perf's
/// token estimate of it (`len(text) // 4`, text being its text, tool arguments and tool results).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Msg {
    pub(crate) key: u64,
    pub(crate) chars: u64,
    pub(crate) estimate: u64,
}

/// The recorded prompt of one span: the system instructions (as a first `system` message) and the
/// input messages; the reply's messages when recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prompt {
    pub(crate) input: Vec<Msg>,
    pub(crate) output: Option<Vec<Msg>>,
}

impl Prompt {
    /// Characters of the whole input.
    pub(crate) fn input_chars(&self) -> u64 {
        self.input.iter().map(|m| m.chars).sum()
    }

    /// The estimated input and output tokens (sums of the messages' estimates); output `None`
    /// without recorded output.
    pub(crate) fn estimate(&self) -> (u64, Option<u64>) {
        let sum = |list: &[Msg]| list.iter().map(|m| m.estimate).sum::<u64>();
        (sum(&self.input), self.output.as_deref().map(sum))
    }
}

/// The messages of a span's attributes; `None` without (or with empty) `gen_ai.input.messages`.
/// An error names the attribute whose value is not JSON or not a list of messages.
pub(crate) fn prompt_of(attributes: &Map<String, Value>) -> Result<Option<Prompt>, String> {
    let Some(input) = list(attributes, "gen_ai.input.messages")? else {
        return Ok(None);
    };
    if input.is_empty() {
        return Ok(None);
    }
    let mut keys = Vec::with_capacity(input.len() + 1);
    if let Some(system) = system_message(attributes)? {
        keys.push(key(&system));
    }
    keys.extend(input.iter().map(|m| key(&canonical(m))));
    let output = match list(attributes, "gen_ai.output.messages")? {
        Some(messages) => Some(messages.iter().map(|m| key(&canonical(m))).collect()),
        None => match attributes.get("gen_ai.output.text") {
            Some(Value::String(text)) => Some(vec![key(&json!({
                "role": "assistant",
                "parts": [{"type": "text", "content": text}],
            }))]),
            _ => None,
        },
    };
    Ok(Some(Prompt {
        input: keys,
        output,
    }))
}

/// A list attribute: a JSON list or a string holding one; `None` when absent.
fn list(attributes: &Map<String, Value>, name: &str) -> Result<Option<Vec<Value>>, String> {
    match attributes.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items.clone())),
        Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => Ok(Some(items)),
            Ok(other) => Err(format!(
                "{name} must be a JSON list of messages, got a JSON {}",
                kind(&other)
            )),
            Err(e) => Err(format!(
                "{name} is not JSON ({e}); it must be a JSON-encoded list of messages (or the list \
                 itself)"
            )),
        },
        Some(other) => Err(format!(
            "{name} must be a list of messages or a JSON string of one, got a JSON {}",
            kind(other)
        )),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// `gen_ai.system_instructions` as one `system` message: a list of parts (or a JSON string of one),
/// or plain text.
fn system_message(attributes: &Map<String, Value>) -> Result<Option<Value>, String> {
    let parts: Vec<Value> = match attributes.get("gen_ai.system_instructions") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(parts)) => parts.iter().map(part).collect(),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(parts)) => parts.iter().map(part).collect(),
            _ => vec![json!({"type": "text", "content": text})],
        },
        Some(other) => {
            return Err(format!(
                "gen_ai.system_instructions must be a list of parts or text, got a JSON {}",
                kind(other)
            ))
        }
    };
    Ok(Some(json!({"role": "system", "parts": parts})))
}

fn key(message: &Value) -> Msg {
    let text = message.to_string();
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Msg {
        key: u64::from_le_bytes(first),
        chars: text.chars().count() as u64,
        estimate: text_chars(message) / 4,
    }
}

/// Characters of a canonical message's text, tool-call arguments and tool results.
fn text_chars(message: &Value) -> u64 {
    let count = |value: Option<&Value>| match value {
        Some(Value::String(s)) => s.chars().count() as u64,
        Some(Value::Null) | None => 0,
        Some(other) => other.to_string().chars().count() as u64,
    };
    let parts = message.get("parts").and_then(Value::as_array);
    parts
        .into_iter()
        .flatten()
        .map(|p| match p.get("type").and_then(Value::as_str) {
            Some("text") => count(p.get("content")),
            Some("tool_call") => count(p.get("name")) + count(p.get("arguments")),
            Some("tool_call_response") => count(p.get("result")),
            _ => count(Some(p)),
        })
        .sum()
}

/// Arguments recorded as a JSON string are decoded, so both shapes compare equal.
fn arguments(value: Option<&Value>) -> Value {
    match value {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

/// One part in canonical form.
fn part(value: &Value) -> Value {
    let Value::Object(p) = value else {
        return json!({"type": "text", "content": value});
    };
    match p.get("type").and_then(Value::as_str) {
        Some("text") => json!({
            "type": "text",
            "content": p.get("content").or_else(|| p.get("text")).cloned().unwrap_or(Value::Null),
        }),
        Some("tool_call") => json!({
            "type": "tool_call",
            "id": p.get("id").cloned().unwrap_or(Value::Null),
            "name": p.get("name").cloned().unwrap_or(Value::Null),
            "arguments": arguments(p.get("arguments")),
        }),
        Some("tool_call_response") => json!({
            "type": "tool_call_response",
            "id": p.get("id").cloned().unwrap_or(Value::Null),
            "result": p.get("result").or_else(|| p.get("response")).cloned().unwrap_or(Value::Null),
        }),
        _ => value.clone(),
    }
}

/// One message in canonical form (module docs).
pub(crate) fn canonical(message: &Value) -> Value {
    let Value::Object(m) = message else {
        return json!({"role": "", "parts": [part(message)]});
    };
    let role = m.get("role").and_then(Value::as_str).unwrap_or("");
    let mut parts: Vec<Value> = Vec::new();
    if let Some(Value::Array(list)) = m.get("parts") {
        parts.extend(list.iter().map(part));
    }
    match m.get("content") {
        Some(Value::String(text)) if !text.is_empty() => {
            parts.push(json!({"type": "text", "content": text}));
        }
        Some(Value::Array(items)) => parts.extend(items.iter().map(part)),
        _ => {}
    }
    if let Some(Value::Array(calls)) = m.get("tool_calls") {
        for call in calls {
            let function = call.get("function").unwrap_or(call);
            parts.push(json!({
                "type": "tool_call",
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "name": function.get("name").cloned().unwrap_or(Value::Null),
                "arguments": arguments(function.get("arguments")),
            }));
        }
    }
    if let Some(id) = m.get("tool_call_id") {
        let text: Vec<Value> = parts
            .iter()
            .map(|p| p.get("content").cloned().unwrap_or_else(|| p.clone()))
            .collect();
        let result = match text.as_slice() {
            [one] => one.clone(),
            _ => Value::Array(text),
        };
        parts = vec![json!({"type": "tool_call_response", "id": id, "result": result})];
    }
    json!({"role": role, "parts": parts})
}

/// Leading messages `a` and `b` share.
pub(crate) fn common_prefix(a: &[Msg], b: &[Msg]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x.key == y.key).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_give_the_same_keys() {
        let otel = json!([
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "ls",
                "arguments": {"path": "."}}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "result": "a b"}]}
        ]);
        let openai = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b"}
        ]);
        let mut a = Map::new();
        a.insert("gen_ai.input.messages".into(), otel);
        let mut b = Map::new();
        b.insert(
            "gen_ai.input.messages".into(),
            Value::String(openai.to_string()),
        );
        let (a, b) = (
            prompt_of(&a).unwrap().unwrap(),
            prompt_of(&b).unwrap().unwrap(),
        );
        assert_eq!(a.input, b.input);
        assert_eq!(common_prefix(&a.input, &b.input), 3);
    }

    #[test]
    fn output_text_is_an_assistant_message_and_bad_json_is_refused() {
        let mut attrs = Map::new();
        attrs.insert(
            "gen_ai.input.messages".into(),
            json!([{"role": "user", "content": "q"}]),
        );
        attrs.insert("gen_ai.output.text".into(), json!("answer"));
        attrs.insert("gen_ai.system_instructions".into(), json!("be brief"));
        let prompt = prompt_of(&attrs).unwrap().unwrap();
        assert_eq!(prompt.input.len(), 2, "system, then the user message");
        let reply = canonical(&json!({"role": "assistant", "content": "answer"}));
        assert_eq!(prompt.output.unwrap(), vec![key(&reply)]);
        attrs.insert("gen_ai.input.messages".into(), json!("[{\"role\": "));
        let e = prompt_of(&attrs).unwrap_err();
        assert!(e.starts_with("gen_ai.input.messages is not JSON"), "{e}");
        attrs.insert(
            "gen_ai.input.messages".into(),
            json!("{\"role\": \"user\"}"),
        );
        assert!(prompt_of(&attrs).unwrap_err().contains("got a JSON object"));
        attrs.remove("gen_ai.input.messages");
        assert_eq!(prompt_of(&attrs).unwrap(), None);
    }
}
