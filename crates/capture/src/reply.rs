//! What a reply said, read from the bytes as they pass through to the client: streamed replies
//! through the SSE decoder and the API's event reader (`agentx_protocol`'s, for chat and Messages;
//! this module's for Responses), whole replies parsed once they end. Only what the journal keeps
//! comes out: usage, the stop reason, the reply's types and when its first output came.

use std::time::Instant;

use agentx_protocol::sse::SseDecoder;
use agentx_protocol::{EndpointType, Exchange, StreamState};
use serde_json::Value;

use crate::wire::Api;

/// Longest whole (non-streamed) reply read for its usage; a longer one is still passed on whole,
/// and journalled as broken with that reason.
const MAX_WHOLE_REPLY: usize = 64 << 20;

/// What a finished reply said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplyFacts {
    /// Prompt tokens as the server counted them.
    pub prompt_tokens: Option<u64>,
    /// Output tokens as the server counted them.
    pub completion_tokens: Option<u64>,
    /// The reply's text (to count when the server sent no usage, and for `--keep-text`).
    pub text: String,
    /// The stop reason as sent.
    pub stop: Option<String>,
    /// Reasoning arrived.
    pub thinking: bool,
    /// A tool call arrived.
    pub tool_use: bool,
    /// When the first output arrived.
    pub first_output: Option<Instant>,
    /// What was wrong with the reply's bytes, if anything.
    pub malformed: Option<String>,
}

/// Reads a reply as its bytes pass.
pub struct ReplyReader {
    api: Api,
    streaming: bool,
    decoder: SseDecoder,
    state: StreamState,
    exchange: Exchange,
    responses: ReplyFacts,
    whole: Vec<u8>,
    /// A whole reply was longer than [`MAX_WHOLE_REPLY`].
    whole_cut: bool,
    /// What the SSE decoder found wrong with the stream's bytes.
    sse_error: Option<String>,
}

impl ReplyReader {
    /// A reader of a reply of `api`, streamed or whole, to a request sent at `sent`.
    pub fn new(api: Api, streaming: bool, status: u16, sent: Instant) -> ReplyReader {
        let mut exchange = Exchange::new(sent);
        exchange.status = status;
        ReplyReader {
            api,
            streaming,
            decoder: SseDecoder::new(),
            state: StreamState {
                api: match api {
                    Api::Anthropic => EndpointType::Anthropic,
                    Api::Chat | Api::Responses => EndpointType::Chat,
                },
                keep_text: true,
                done: false,
                failure: None,
            },
            exchange,
            responses: ReplyFacts::default(),
            whole: Vec::new(),
            whole_cut: false,
            sse_error: None,
        }
    }

    /// The next bytes of the reply.
    pub fn feed(&mut self, bytes: &[u8]) {
        let now = Instant::now();
        if !self.streaming {
            if self.whole.len() + bytes.len() <= MAX_WHOLE_REPLY {
                self.whole.extend_from_slice(bytes);
            } else {
                self.whole_cut = true;
            }
            return;
        }
        let (api, state, exchange, responses) = (
            self.api,
            &mut self.state,
            &mut self.exchange,
            &mut self.responses,
        );
        let fed = self.decoder.feed(bytes, |event| match api {
            Api::Responses => responses_event(responses, event, now),
            Api::Chat | Api::Anthropic => state.on_event(event, now, exchange),
        });
        if let Err(error) = fed {
            self.sse_error.get_or_insert(error.to_string());
        }
    }

    /// What the reply said, once it ended.
    pub fn finish(self) -> ReplyFacts {
        if self.whole_cut {
            return ReplyFacts {
                malformed: Some(format!(
                    "the whole reply is longer than {} MiB; its usage was not read",
                    MAX_WHOLE_REPLY >> 20
                )),
                ..ReplyFacts::default()
            };
        }
        if !self.streaming {
            return whole_reply(self.api, &self.whole);
        }
        if self.api == Api::Responses {
            let mut facts = self.responses;
            facts.malformed = self.sse_error.or(facts.malformed);
            return facts;
        }
        let exchange = self.exchange;
        let usage = exchange.usage.unwrap_or_default();
        let stop = exchange.finish_reason.clone();
        ReplyFacts {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            thinking: exchange.reasoning_chunks > 0,
            tool_use: !exchange.tool_calls.is_empty()
                || matches!(stop.as_deref(), Some("tool_calls" | "tool_use")),
            first_output: exchange
                .chunk_offsets_ns
                .first()
                .map(|offset| exchange.sent + std::time::Duration::from_nanos(offset)),
            text: exchange.text,
            stop,
            malformed: self
                .state
                .failure
                .map(|failure| failure.message)
                .or(self.sse_error),
        }
    }
}

/// One Responses API event.
fn responses_event(facts: &mut ReplyFacts, event: &str, now: Instant) {
    let Ok(parsed) = serde_json::from_str::<Value>(event) else {
        facts.malformed = Some(format!(
            "malformed SSE: an event is not JSON: {:?}",
            agentx_protocol::excerpt(event, 200)
        ));
        return;
    };
    let kind = parsed.get("type").and_then(Value::as_str).unwrap_or("");
    let delta = parsed.get("delta").and_then(Value::as_str).unwrap_or("");
    match kind {
        "response.output_text.delta" if !delta.is_empty() => {
            facts.first_output.get_or_insert(now);
            facts.text.push_str(delta);
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta"
            if !delta.is_empty() =>
        {
            facts.first_output.get_or_insert(now);
            facts.thinking = true;
        }
        "response.function_call_arguments.delta" => {
            facts.first_output.get_or_insert(now);
            facts.tool_use = true;
        }
        "response.completed" | "response.incomplete" => {
            if let Some(response) = parsed.get("response") {
                read_responses_result(facts, response);
            }
        }
        _ => {}
    }
}

/// A count of a reply's `usage` object.
fn usage_count(usage: Option<&Value>, name: &str) -> Option<u64> {
    usage
        .and_then(|usage| usage.get(name))
        .and_then(Value::as_u64)
}

/// A finished Responses object: its usage, status and output items.
fn read_responses_result(facts: &mut ReplyFacts, response: &Value) {
    let usage = response.get("usage");
    facts.prompt_tokens = usage_count(usage, "input_tokens");
    facts.completion_tokens = usage_count(usage, "output_tokens");
    for item in response
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => facts.tool_use = true,
            Some("reasoning") => facts.thinking = true,
            _ => {}
        }
    }
    facts.stop = Some(match (facts.tool_use, response.get("status")) {
        (true, _) => "tool_use".into(),
        (false, Some(Value::String(status))) if status == "incomplete" => "max_tokens".into(),
        _ => "end_turn".into(),
    });
}

/// A whole reply of `api`: its usage, stop reason and content.
fn whole_reply(api: Api, bytes: &[u8]) -> ReplyFacts {
    let mut facts = ReplyFacts::default();
    let Ok(reply) = serde_json::from_slice::<Value>(bytes) else {
        facts.malformed = Some("the reply is not JSON".into());
        return facts;
    };
    match api {
        Api::Chat => {
            let usage = reply.get("usage");
            facts.prompt_tokens = usage_count(usage, "prompt_tokens");
            facts.completion_tokens = usage_count(usage, "completion_tokens");
            let choice = reply.pointer("/choices/0");
            let message = choice.and_then(|choice| choice.get("message"));
            facts.text = message
                .and_then(|message| message.get("content"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            facts.thinking = message
                .and_then(|m| m.get("reasoning_content").or(m.get("reasoning")))
                .is_some_and(|r| r.as_str().is_some_and(|r| !r.is_empty()));
            facts.stop = choice
                .and_then(|choice| choice.get("finish_reason"))
                .and_then(Value::as_str)
                .map(str::to_string);
            facts.tool_use = message.is_some_and(|m| m.get("tool_calls").is_some())
                || facts.stop.as_deref() == Some("tool_calls");
        }
        Api::Anthropic => {
            let usage = reply.get("usage");
            let count = |name: &str| usage_count(usage, name);
            facts.prompt_tokens = count("input_tokens").map(|input| {
                input
                    + count("cache_read_input_tokens").unwrap_or(0)
                    + count("cache_creation_input_tokens").unwrap_or(0)
            });
            facts.completion_tokens = count("output_tokens");
            for block in reply
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        facts
                            .text
                            .push_str(block.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    Some("thinking") => facts.thinking = true,
                    Some("tool_use") => facts.tool_use = true,
                    _ => {}
                }
            }
            facts.stop = reply
                .get("stop_reason")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Api::Responses => read_responses_result(&mut facts, &reply),
    }
    facts
}

/// A stop reason in weka's words.
pub fn weka_stop(stop: Option<&str>, tool_use: bool) -> String {
    match stop {
        _ if tool_use => "tool_use".into(),
        Some("stop" | "end_turn" | "stop_sequence") => "end_turn".into(),
        Some("length" | "max_tokens") => "max_tokens".into(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_chat_reply_gives_usage_stop_and_first_output() {
        let sent = Instant::now();
        let mut reader = ReplyReader::new(Api::Chat, true, 200, sent);
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"hello there\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}],",
            "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}\n\n",
            "data: [DONE]\n\n"
        );
        for piece in stream.as_bytes().chunks(7) {
            reader.feed(piece);
        }
        let facts = reader.finish();
        assert_eq!(facts.prompt_tokens, Some(12));
        assert_eq!(facts.completion_tokens, Some(3));
        assert!(facts.thinking && facts.tool_use);
        assert_eq!(facts.text, "hello there");
        assert!(facts.first_output.is_some());
        assert_eq!(weka_stop(facts.stop.as_deref(), facts.tool_use), "tool_use");
    }

    #[test]
    fn a_streamed_responses_reply_gives_its_usage_at_completion() {
        let mut reader = ReplyReader::new(Api::Responses, true, 200, Instant::now());
        let stream = concat!(
            "event: response.output_text.delta\n",
            "data: {\"type\":\"response.output_text.delta\",\"delta\":\"ok\"}\n\n",
            "data: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",",
            "\"usage\":{\"input_tokens\":40,\"output_tokens\":1},\"output\":[]}}\n\n"
        );
        reader.feed(stream.as_bytes());
        let facts = reader.finish();
        assert_eq!(
            (facts.prompt_tokens, facts.completion_tokens),
            (Some(40), Some(1))
        );
        assert_eq!(facts.stop.as_deref(), Some("end_turn"));
    }

    #[test]
    fn a_whole_anthropic_reply_counts_cached_input() {
        let mut reader = ReplyReader::new(Api::Anthropic, false, 200, Instant::now());
        reader.feed(
            br#"{"content":[{"type":"text","text":"hi"},{"type":"tool_use","name":"ls","input":{}}],
                "stop_reason":"tool_use","usage":{"input_tokens":5,"cache_read_input_tokens":100,"output_tokens":7}}"#,
        );
        let facts = reader.finish();
        assert_eq!(facts.prompt_tokens, Some(105));
        assert!(facts.tool_use);
    }
}
