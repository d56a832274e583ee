//! The text an agent's request carries beyond its messages' content, read the same way by every
//! API: the tool schemas' descriptions (read first, as a chat template renders the tools at the top
//! of the prompt), a tool call's arguments (the string values of its JSON object, so the JSON
//! around them adds no tokens) and the reasoning given back in the history. Names, ids and schema
//! structure carry no tokens, as role names do not.

use serde_json::{Map, Value};

/// Calls `add` with each tool's description, in order: `description` at the top of a tool
/// (Messages, Responses) or under its `function` (chat).
pub(crate) fn tools_text(obj: &Map<String, Value>, add: &mut dyn FnMut(&str)) {
    let Some(Value::Array(tools)) = obj.get("tools") else {
        return;
    };
    for tool in tools {
        let schema = tool.get("function").unwrap_or(tool);
        if let Some(Value::String(text)) = schema.get("description") {
            add(text);
        }
    }
}

/// Calls `add` with the string values of a call's arguments (a JSON object, or its text when it
/// is not one).
pub(crate) fn arguments_text(arguments: &str, add: &mut dyn FnMut(&str)) {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value) => strings_of(&value, add),
        Err(_) => add(arguments),
    }
}

/// Calls `add` with every string inside `value`, in order.
pub(crate) fn strings_of(value: &Value, add: &mut dyn FnMut(&str)) {
    match value {
        Value::String(text) => add(text),
        Value::Array(items) => items.iter().for_each(|item| strings_of(item, add)),
        Value::Object(fields) => fields.values().for_each(|item| strings_of(item, add)),
        _ => {}
    }
}

/// Calls `add` with a chat assistant message's reasoning and its tool calls' arguments.
pub(crate) fn chat_message_extras(message: &Map<String, Value>, add: &mut dyn FnMut(&str)) {
    if let Some(Value::String(text)) = message.get("reasoning_content") {
        add(text);
    }
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for call in calls {
            let arguments = call
                .get("function")
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str);
            if let Some(arguments) = arguments {
                arguments_text(arguments, add);
            }
        }
    }
}
