//! What a captured request says, read from its body in the shape of its API: the prompt as token
//! keys in order (tool definitions, then the system prompt, then the messages), how many of them
//! are tools and system, the new content's types, the model and whether it streams. Only counts
//! and keys leave this module; the text is dropped here unless the capture keeps it.

use agentx_tokens::TokenCounter;
use serde_json::Value;

/// The APIs a capture records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI chat completions (`/v1/chat/completions`).
    Chat,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
}

impl Api {
    /// The API a request path is for; `None` for a path the capture forwards without recording.
    pub fn of_path(path: &str) -> Option<Api> {
        if path.ends_with("/chat/completions") {
            Some(Api::Chat)
        } else if path.ends_with("/messages") {
            Some(Api::Anthropic)
        } else if path.ends_with("/responses") {
            Some(Api::Responses)
        } else {
            None
        }
    }

    /// The API's name in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Anthropic => "anthropic",
            Api::Responses => "responses",
        }
    }
}

/// A request's prompt as the capture keeps it: token keys, no text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompt {
    /// The model asked for.
    pub model: String,
    /// Whether the reply streams.
    pub streaming: bool,
    /// Every token's key, in prompt order.
    pub keys: Vec<u64>,
    /// Tokens of the tool definitions (the first keys).
    pub tool_tokens: u64,
    /// Tokens of the system prompt (the keys after the tools).
    pub system_tokens: u64,
    /// The new content's types: `text`, `tool_result`, `image`.
    pub input_types: Vec<String>,
}

/// Why a request body could not be read as its API's request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

/// Reads a request body of `api` into its prompt, counting with `counter`.
pub fn read_prompt(api: Api, body: &[u8], counter: &TokenCounter) -> Result<Prompt, WireError> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| WireError(format!("the request body is not JSON ({e})")))?;
    let object = request
        .as_object()
        .ok_or_else(|| WireError("the request body is not a JSON object".into()))?;
    let model = object
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let streaming = object.get("stream").and_then(Value::as_bool) == Some(true);
    let mut prompt = Prompt {
        model,
        streaming,
        ..Prompt::default()
    };
    if let Some(tools) = object.get("tools").filter(|tools| !is_empty(tools)) {
        prompt.keys = counter.token_keys(&tools.to_string());
        prompt.tool_tokens = prompt.keys.len() as u64;
    }
    let (system, messages) = match api {
        Api::Chat => chat_parts(object.get("messages")),
        Api::Anthropic => (
            object.get("system").map(text_of).unwrap_or_default(),
            object
                .get("messages")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        ),
        Api::Responses => responses_parts(object),
    };
    if !system.is_empty() {
        let keys = counter.token_keys(&system);
        prompt.system_tokens = keys.len() as u64;
        prompt.keys.extend(keys);
    }
    if messages.is_empty() {
        return Err(WireError(format!(
            "the request has no messages (a {} request carries its conversation in {})",
            api.as_str(),
            match api {
                Api::Responses => "`input`",
                _ => "`messages`",
            }
        )));
    }
    for message in &messages {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        prompt.keys.extend(counter.token_keys(role));
        prompt
            .keys
            .extend(counter.token_keys(&message_text(message)));
    }
    prompt.input_types = input_types(api, messages.last());
    Ok(prompt)
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Chat: leading `system`/`developer` messages are the system prompt, the rest the messages.
fn chat_parts(messages: Option<&Value>) -> (String, Vec<Value>) {
    let all = messages
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let lead = all
        .iter()
        .take_while(|message| {
            matches!(
                message.get("role").and_then(Value::as_str),
                Some("system" | "developer")
            )
        })
        .count();
    let system = all[..lead]
        .iter()
        .map(message_text)
        .collect::<Vec<_>>()
        .join("\n");
    (system, all[lead..].to_vec())
}

/// Responses: `instructions` is the system prompt; `input` is a string or a list of items.
fn responses_parts(object: &serde_json::Map<String, Value>) -> (String, Vec<Value>) {
    let system = object.get("instructions").map(text_of).unwrap_or_default();
    let messages = match object.get("input") {
        Some(Value::String(text)) => vec![serde_json::json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    (system, messages)
}

/// The text of a message or item: its content (a string or parts), tool calls' arguments, a tool
/// result's output.
fn message_text(message: &Value) -> String {
    let mut pieces = Vec::new();
    for field in ["content", "output", "arguments", "summary"] {
        if let Some(value) = message.get(field) {
            pieces.push(text_of(value));
        }
    }
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for call in calls {
            let function = call.get("function").unwrap_or(call);
            for field in ["name", "arguments"] {
                if let Some(value) = function.get(field) {
                    pieces.push(text_of(value));
                }
            }
        }
    }
    pieces.retain(|piece| !piece.is_empty());
    pieces.join("\n")
}

/// The text a JSON value holds: a string, the parts of a content list (text, thinking, tool input
/// and results), or its JSON for anything else.
fn text_of(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(part_text)
            .filter(|text| !text.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

fn part_text(part: &Value) -> String {
    let Some(object) = part.as_object() else {
        return text_of(part);
    };
    for field in ["text", "thinking", "output_text"] {
        if let Some(Value::String(text)) = object.get(field) {
            return text.clone();
        }
    }
    if let Some(input) = object.get("input") {
        let name = object.get("name").and_then(Value::as_str).unwrap_or("");
        return format!("{name} {input}");
    }
    if let Some(content) = object.get("content") {
        return text_of(content);
    }
    String::new()
}

/// The types of the request's new content: its last message's parts.
fn input_types(api: Api, last: Option<&Value>) -> Vec<String> {
    let Some(last) = last else {
        return Vec::new();
    };
    let mut types: Vec<String> = Vec::new();
    let mut add = |kind: &str| {
        if !types.iter().any(|known| known == kind) {
            types.push(kind.to_string());
        }
    };
    let role = last.get("role").and_then(Value::as_str).unwrap_or("");
    let item_type = last.get("type").and_then(Value::as_str).unwrap_or("");
    if role == "tool" || item_type == "function_call_output" {
        add("tool_result");
    }
    match last.get("content") {
        Some(Value::String(_)) if role != "tool" => add("text"),
        Some(Value::Array(parts)) => {
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("tool_result") => add("tool_result"),
                    Some("image" | "image_url" | "input_image") => add("image"),
                    Some(_) | None if api != Api::Anthropic || part.get("text").is_some() => {
                        add("text");
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    types
}

/// The prompt's full blocks of `block_size` tokens, each block's id chaining every block before
/// it (a block is equal only where its whole prefix is), as a prefix cache keys them: the chained
/// hashes of `agentx_tokens::blocks::BlockHasher`, fed the token keys.
pub fn block_chain(keys: &[u64], block_size: u32) -> Vec<u64> {
    let mut hasher = agentx_tokens::blocks::BlockHasher::new(block_size);
    for &key in keys {
        hasher.push_key(key);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_request_counts_tools_then_system_then_messages() {
        let body = serde_json::json!({
            "model": "m", "stream": true,
            "tools": [{"type": "function", "function": {"name": "read", "parameters": {}}}],
            "messages": [
                {"role": "system", "content": "you are terse"},
                {"role": "user", "content": "read the file"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"}
            ]
        });
        let prompt =
            read_prompt(Api::Chat, body.to_string().as_bytes(), &TokenCounter::Words).unwrap();
        assert!(prompt.streaming);
        assert_eq!(prompt.system_tokens, 3);
        assert!(prompt.tool_tokens > 0);
        assert_eq!(prompt.input_types, ["tool_result"]);
        let total = prompt.keys.len() as u64;
        assert!(total > prompt.tool_tokens + prompt.system_tokens);
    }

    #[test]
    fn an_anthropic_request_reads_system_blocks_and_tool_results() {
        let body = serde_json::json!({
            "model": "claude", "max_tokens": 10,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "hi there"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "ls", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a b c"}]}
            ]
        });
        let prompt = read_prompt(
            Api::Anthropic,
            body.to_string().as_bytes(),
            &TokenCounter::Words,
        )
        .unwrap();
        assert!(!prompt.streaming);
        assert_eq!(prompt.system_tokens, 2);
        assert_eq!(prompt.input_types, ["tool_result"]);
    }

    #[test]
    fn equal_prefixes_chain_to_equal_blocks_and_a_change_breaks_every_later_one() {
        let keys: Vec<u64> = (0..10).collect();
        let mut changed = keys.clone();
        changed[5] = 99;
        let a = block_chain(&keys, 2);
        let b = block_chain(&changed, 2);
        assert_eq!(a.len(), 5);
        assert_eq!(a[..2], b[..2]);
        assert!(a[2..].iter().zip(&b[2..]).all(|(x, y)| x != y));
    }

    #[test]
    fn a_body_that_is_not_a_request_is_refused_with_why() {
        let error = read_prompt(Api::Chat, b"[1,2]", &TokenCounter::Words).unwrap_err();
        assert!(error.0.contains("not a JSON object"), "{error}");
        let error = read_prompt(Api::Chat, b"{\"model\":\"m\"}", &TokenCounter::Words).unwrap_err();
        assert!(error.0.contains("no messages"), "{error}");
    }
}
