//! Parsing and validation of `POST /v1/chat/completions` bodies, and the error bodies vLLM sends.
//!
//! The body is parsed as a JSON value and checked field by field, so every rejection names the
//! field (`messages[2].content`), what was wrong and what is accepted. Unknown fields are ignored,
//! as vLLM does. Prompt tokens are counted with [`TokenCounter::Words`] over every message's text
//! (string content and `text` parts) and hashed into prefix-cache blocks in the same pass order.

use serde_json::{Map, Value};

use agentx_tokens::blocks::BlockHasher;
use agentx_tokens::TokenCounter;

/// The API a request came in (its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/messages` ([`super::anthropic`]).
    Anthropic,
    /// `POST /v1/responses` ([`super::responses`]).
    Responses,
}

/// An error answered with vLLM's JSON shape:
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    /// HTTP status, repeated as `code` in the body.
    pub status: u16,
    /// vLLM's error type name (`BadRequestError`, `NotFoundError`, ...).
    pub kind: &'static str,
    /// Human-readable message.
    pub message: String,
    /// The offending parameter, when vLLM names one.
    pub param: Option<String>,
}

impl ApiError {
    /// A 400 `BadRequestError`.
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            kind: "BadRequestError",
            message: message.into(),
            param: None,
        }
    }

    /// The JSON body.
    pub(crate) fn body(&self) -> String {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        })
        .to_string()
    }
}

/// A validated chat completion request, reduced to what the simulator uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ChatRequest {
    /// `model`, if given.
    pub model: Option<String>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `ignore_eos` (vLLM's extension): generate exactly the maximum number of tokens.
    pub ignore_eos: bool,
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<u64>,
    /// Prompt tokens (whitespace-separated words of all message text).
    pub prompt_tokens: u64,
    /// Chained hashes of the prompt's full cache blocks.
    pub blocks: Vec<u64>,
    /// The name of the request's first tool, which a reply's tool call calls.
    pub tool_name: Option<String>,
}

/// The name of the request's first tool: `tools[0].function.name` (chat's shape) or
/// `tools[0].name` (Anthropic's and the Responses API's); `None` without tools.
pub(crate) fn first_tool_name(obj: &serde_json::Map<String, Value>) -> Option<String> {
    let tool = obj.get("tools")?.as_array()?.first()?;
    let name = tool
        .get("function")
        .and_then(|function| function.get("name"))
        .or_else(|| tool.get("name"))?;
    name.as_str().map(str::to_owned)
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn wrong_type(field: &str, want: &str, got: &Value) -> ApiError {
    let mut error = ApiError::bad_request(format!(
        "field `{field}` must be {want}, got {}",
        type_name(got)
    ));
    error.param = Some(field.to_string());
    error
}

pub(crate) fn opt_bool(obj: &Map<String, Value>, field: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong_type(field, "a boolean (true or false)", v)),
    }
}

pub(crate) fn opt_positive_int(
    obj: &Map<String, Value>,
    field: &str,
) -> Result<Option<u64>, ApiError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => Err(ApiError {
                param: Some(field.to_string()),
                ..ApiError::bad_request(format!("field `{field}` must be at least 1, got 0"))
            }),
            Some(v) => Ok(Some(v)),
            None => Err(ApiError {
                param: Some(field.to_string()),
                ..ApiError::bad_request(format!(
                    "field `{field}` must be a positive integer, got {n}"
                ))
            }),
        },
        Some(v) => Err(wrong_type(field, "a positive integer", v)),
    }
}

/// Parse and validate a chat completion body; `block_size` is the prefix cache's block size.
pub(crate) fn parse_chat(
    body: &[u8],
    block_size: u32,
    counter: &TokenCounter,
) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "request body is not valid JSON: {e}; send a JSON object with `messages`"
        ))
    })?;
    let Value::Object(obj) = value else {
        return Err(ApiError::bad_request(format!(
            "request body must be a JSON object, got {}",
            type_name(&value)
        )));
    };

    let Options {
        model,
        stream,
        include_usage,
        ignore_eos,
        max_tokens,
    } = options(&obj)?;
    let mut prompt_tokens = 0u64;
    let mut hasher = BlockHasher::new(block_size);
    let mut add = |text: &str| {
        prompt_tokens += counter.count(text);
        hasher.push_text(text);
    };
    super::agent_text::tools_text(&obj, &mut add);
    for_each_text(&obj, &mut add)?;
    Ok(ChatRequest {
        model,
        stream,
        include_usage,
        ignore_eos,
        max_tokens,
        prompt_tokens,
        blocks: hasher.finish(),
        tool_name: first_tool_name(&obj),
    })
}

/// The request's options; `n` must be 1.
struct Options {
    model: Option<String>,
    stream: bool,
    include_usage: bool,
    ignore_eos: bool,
    /// `max_completion_tokens`, else `max_tokens`.
    max_tokens: Option<u64>,
}

fn options(obj: &Map<String, Value>) -> Result<Options, ApiError> {
    let model = match obj.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(wrong_type("model", "a string", v)),
    };
    let stream = opt_bool(obj, "stream")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => {
            if !stream {
                return Err(ApiError {
                    param: Some("stream_options".into()),
                    ..ApiError::bad_request(
                        "Stream options can only be defined when `stream=True`.",
                    )
                });
            }
            match o.get("include_usage") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(wrong_type("stream_options.include_usage", "a boolean", v)),
            }
        }
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };
    let ignore_eos = opt_bool(obj, "ignore_eos")?.unwrap_or(false);
    let max_tokens = match opt_positive_int(obj, "max_completion_tokens")? {
        Some(v) => Some(v),
        None => opt_positive_int(obj, "max_tokens")?,
    };
    match obj.get("n") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
        Some(v) => {
            return Err(ApiError {
                param: Some("n".into()),
                ..ApiError::bad_request(format!(
                    "field `n` must be 1 (the simulator generates one choice), got {v}"
                ))
            })
        }
    }

    Ok(Options {
        model,
        stream,
        include_usage,
        ignore_eos,
        max_tokens,
    })
}

/// Calls `add` with the text of every message, in order (string contents and `text` parts, then an
/// assistant message's `reasoning_content` and its tool calls' arguments).
fn for_each_text(obj: &Map<String, Value>, add: &mut dyn FnMut(&str)) -> Result<(), ApiError> {
    let messages = match obj.get("messages") {
        None => {
            return Err(ApiError {
                param: Some("messages".into()),
                ..ApiError::bad_request(
                    "missing field `messages`: send a non-empty array of {\"role\", \"content\"} objects",
                )
            })
        }
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong_type("messages", "a non-empty array of message objects", v)),
    };
    if messages.is_empty() {
        return Err(ApiError {
            param: Some("messages".into()),
            ..ApiError::bad_request("field `messages` must not be empty")
        });
    }

    for (i, m) in messages.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(wrong_type(&format!("messages[{i}]"), "an object", m));
        };
        match m.get("role") {
            Some(Value::String(_)) => {}
            None => {
                return Err(ApiError {
                    param: Some(format!("messages[{i}].role")),
                    ..ApiError::bad_request(format!(
                        "missing field `messages[{i}].role`: every message needs a role such as \"user\""
                    ))
                })
            }
            Some(v) => return Err(wrong_type(&format!("messages[{i}].role"), "a string", v)),
        }
        match m.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => add(s),
            Some(Value::Array(parts)) => content_parts(i, parts, add)?,
            Some(v) => {
                return Err(wrong_type(
                    &format!("messages[{i}].content"),
                    "a string, an array of content parts, or null",
                    v,
                ))
            }
        }
        super::agent_text::chat_message_extras(m, add);
    }
    Ok(())
}

/// The text parts of message `message_index`'s content array, each passed to `add`.
fn content_parts(
    message_index: usize,
    parts: &[Value],
    add: &mut dyn FnMut(&str),
) -> Result<(), ApiError> {
    for (j, p) in parts.iter().enumerate() {
        let field = || format!("messages[{message_index}].content[{j}]");
        let Value::Object(p) = p else {
            return Err(wrong_type(&field(), "a content part object", p));
        };
        match p.get("type") {
            Some(Value::String(t)) if t == "text" => match p.get("text") {
                Some(Value::String(s)) => add(s),
                Some(v) => {
                    return Err(wrong_type(&format!("{}.text", field()), "a string", v))
                }
                None => {
                    return Err(ApiError::bad_request(format!(
                        "missing field `{}.text` in a part of type \"text\"",
                        field()
                    )))
                }
            },
            // Images, audio and other parts carry no text tokens in this model.
            Some(Value::String(_)) => {}
            Some(v) => {
                return Err(wrong_type(&format!("{}.type", field()), "a string", v))
            }
            None => {
                return Err(ApiError::bad_request(format!(
                    "missing field `{}.type`: content parts look like {{\"type\": \"text\", \"text\": \"...\"}}",
                    field()
                )))
            }
        }
    }
    Ok(())
}

/// vLLM's context-length refusal for a prompt of `prompt` tokens asking for `output` more.
pub(crate) fn context_overflow(max_model_len: u64, prompt: u64, output: Option<u64>) -> ApiError {
    let message = match output {
        Some(out) => format!(
            "This model's maximum context length is {max_model_len} tokens. However, you \
             requested {out} output tokens and your prompt contains {prompt} input tokens, for \
             a total of {} tokens. Please reduce the length of the input prompt or the number \
             of requested output tokens. (parameter=input_tokens, value={prompt})",
            prompt + out
        ),
        None => format!(
            "You passed {prompt} input tokens and requested 0 output tokens. However, the \
             model's context length is only {max_model_len} tokens, resulting in a maximum \
             input length of {max_model_len} tokens. Please reduce the length of the input \
             prompt. (parameter=input_tokens, value={prompt})"
        ),
    };
    ApiError {
        status: 400,
        kind: "BadRequestError",
        message,
        param: Some("input_tokens".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ChatRequest, ApiError> {
        parse_chat(s.as_bytes(), 4, &TokenCounter::Words)
    }

    #[test]
    fn counts_words_in_strings_and_text_parts() {
        let r = parse(
            r#"{"model":"m","messages":[
                {"role":"system","content":"a b c"},
                {"role":"user","content":[{"type":"text","text":"d e"},{"type":"image_url","image_url":{}}]},
                {"role":"assistant","content":null,"tool_calls":[]}
            ],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}"#,
        )
        .unwrap();
        assert_eq!(r.prompt_tokens, 5);
        assert_eq!(r.blocks.len(), 1);
        assert_eq!(r.max_tokens, Some(5));
        assert!(r.stream && r.include_usage && r.ignore_eos);
        assert_eq!(r.model.as_deref(), Some("m"));
    }

    #[test]
    fn max_completion_tokens_wins() {
        let r = parse(r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7}"#)
            .unwrap();
        assert_eq!(r.max_tokens, Some(7));
    }

    #[test]
    fn errors_name_the_field() {
        for (body, want) in [
            ("{", "not valid JSON"),
            ("[]", "must be a JSON object"),
            ("{}", "missing field `messages`"),
            (r#"{"messages":"hi"}"#, "field `messages` must be"),
            (r#"{"messages":[]}"#, "must not be empty"),
            (r#"{"messages":[{"content":"x"}]}"#, "`messages[0].role`"),
            (
                r#"{"messages":[{"role":"user","content":5}]}"#,
                "`messages[0].content`",
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}"#,
                "`messages[0].content[0].text`",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":"9"}"#,
                "`max_tokens` must be a positive integer, got a string",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":-1}"#,
                "`max_tokens` must be a positive integer",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#,
                "at least 1",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
                "`stream` must be a boolean",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}"#,
                "stream=True",
            ),
            (
                r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#,
                "`n` must be 1",
            ),
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, 400);
            assert!(e.message.contains(want), "{body}: {}", e.message);
        }
    }

    #[test]
    fn error_body_has_vllm_shape() {
        let e = context_overflow(100, 90, Some(20));
        let v: Value = serde_json::from_str(&e.body()).unwrap();
        assert_eq!(v["error"]["type"], "BadRequestError");
        assert_eq!(v["error"]["code"], 400);
        assert_eq!(v["error"]["param"], "input_tokens");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with("This model's maximum context length is 100 tokens. However, you requested 20 output tokens and your prompt contains 90 input tokens, for a total of 110 tokens."), "{msg}");
    }
}
