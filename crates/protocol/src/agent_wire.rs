//! The agent's wire in the chat shape the prompt synthesis writes (`--wire tools`,
//! `--reasoning-in-history keep`), read back by the Messages and Responses bodies: an assistant
//! message's `tool_calls` and `reasoning_content`, a `tool` message's `tool_call_id`, and the chat
//! `tools` array.

use serde::Deserialize;
use std::borrow::Cow;

/// One chat message of the synthesis's array.
#[derive(Deserialize)]
pub(crate) struct ChatMessage<'a> {
    #[serde(borrow)]
    pub(crate) role: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    pub(crate) content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    pub(crate) reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(crate) tool_calls: Vec<ToolCall<'a>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    pub(crate) tool_call_id: Option<Cow<'a, str>>,
}

/// One entry of an assistant message's `tool_calls`.
#[derive(Deserialize)]
pub(crate) struct ToolCall<'a> {
    #[serde(borrow)]
    pub(crate) id: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) function: FunctionCall<'a>,
}

/// A call's function: its name and its arguments (a JSON object as a string).
#[derive(Deserialize)]
pub(crate) struct FunctionCall<'a> {
    #[serde(borrow)]
    pub(crate) name: Cow<'a, str>,
    #[serde(borrow)]
    pub(crate) arguments: Cow<'a, str>,
}

/// One entry of the chat `tools` array.
#[derive(Deserialize)]
pub(crate) struct ChatTool<'a> {
    #[serde(borrow)]
    pub(crate) function: ToolFunction<'a>,
}

/// A tool's schema.
#[derive(Deserialize)]
pub(crate) struct ToolFunction<'a> {
    #[serde(borrow)]
    pub(crate) name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(crate) description: Cow<'a, str>,
    #[serde(default)]
    pub(crate) parameters: Option<serde_json::Value>,
}

/// The chat messages of the synthesis's pieces (the array without its closing `]`).
pub(crate) fn read_messages(array: &[u8]) -> Vec<ChatMessage<'_>> {
    serde_json::from_slice(array).unwrap_or_default()
}

/// The chat `tools` array, empty when absent or unreadable.
fn read_tools(tools: Option<&[u8]>) -> Vec<ChatTool<'_>> {
    tools
        .and_then(|json| serde_json::from_slice(json).ok())
        .unwrap_or_default()
}

/// Which API's tool objects [`write_tools`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolShape {
    /// Anthropic Messages: `{"name","description","input_schema"}`.
    Messages,
    /// OpenAI Responses: `{"type":"function","name","description","parameters"}`.
    Responses,
}

/// `,"tools":[...]` of the agent's wire in `shape`, from the chat `tools` array; nothing when it
/// has no tools.
pub(crate) fn write_tools(out: &mut Vec<u8>, tools: Option<&[u8]>, shape: ToolShape) {
    let tools = read_tools(tools);
    if tools.is_empty() {
        return;
    }
    let (opening, schema_key): (&[u8], &[u8]) = match shape {
        ToolShape::Messages => (br#"{"name":"#, br#","input_schema":"#),
        ToolShape::Responses => (br#"{"type":"function","name":"#, br#","parameters":"#),
    };
    out.extend_from_slice(br#","tools":["#);
    for (i, tool) in tools.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(opening);
        write_string(out, &tool.function.name);
        out.extend_from_slice(br#","description":"#);
        write_string(out, &tool.function.description);
        out.extend_from_slice(schema_key);
        write_parameters(out, &tool.function);
        out.push(b'}');
    }
    out.push(b']');
}

/// Writes a tool's parameters schema, `{"type":"object"}` when it has none.
fn write_parameters(out: &mut Vec<u8>, function: &ToolFunction<'_>) {
    match &function.parameters {
        Some(schema) => serde_json::to_writer(&mut *out, schema).expect("value serializes"),
        None => out.extend_from_slice(br#"{"type":"object"}"#),
    }
}

/// Writes `text` as a JSON string.
pub(crate) fn write_string(out: &mut Vec<u8>, text: &str) {
    serde_json::to_writer(&mut *out, text).expect("string serializes");
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::{json, Value};

    /// The chat messages of the agent's wire: a tool call with kept reasoning, its result.
    fn chat_wire() -> (Vec<Bytes>, Bytes) {
        let messages = vec![Bytes::from_static(
            br#"[{"role":"system","content":" s"},{"role":"user","content":" u"},{"role":"assistant","content":null,"reasoning_content":"think","tool_calls":[{"id":"call_0","type":"function","function":{"name":"tool_0","arguments":"{\"input\":\" a b\"}"}}]},{"role":"tool","tool_call_id":"call_0","content":" r"}"#,
        )];
        let tools = Bytes::from_static(
            br#"[{"type":"function","function":{"name":"tool_0","description":" d e","parameters":{"type":"object"}}}]"#,
        );
        (messages, tools)
    }

    #[test]
    fn the_messages_body_carries_tools_tool_use_results_and_thinking() {
        let (messages, tools) = chat_wire();
        let mut out = Vec::new();
        let pieces = (&messages[..], Some(&tools[..]));
        super::super::anthropic::write_body(&mut out, br#"{"model":"m""#, pieces, 5, b"}");
        let body: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            body["tools"],
            json!([{"name": "tool_0", "description": " d e", "input_schema": {"type": "object"}}])
        );
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "think", "signature": ""},
                {"type": "tool_use", "id": "call_0", "name": "tool_0", "input": {"input": " a b"}}]})
        );
        assert_eq!(
            body["messages"][2],
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_0", "content": " r"}]})
        );
    }

    #[test]
    fn the_responses_body_carries_tools_function_calls_outputs_and_reasoning() {
        let (messages, tools) = chat_wire();
        let mut out = Vec::new();
        let pieces = (&messages[..], Some(&tools[..]));
        super::super::responses::write_body(&mut out, br#"{"model":"m""#, pieces, (5, true), b"}");
        let body: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "name": "tool_0", "description": " d e", "parameters": {"type": "object"}}])
        );
        let input = body["input"].as_array().unwrap();
        assert_eq!(input[2]["type"], "reasoning");
        assert_eq!(input[2]["summary"][0]["text"], "think");
        assert_eq!(
            input[3],
            json!({"type": "function_call", "call_id": "call_0", "name": "tool_0", "arguments": "{\"input\":\" a b\"}"})
        );
        assert_eq!(
            input[4],
            json!({"type": "function_call_output", "call_id": "call_0", "output": " r"})
        );
    }
}
