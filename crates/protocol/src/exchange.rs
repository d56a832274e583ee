//! What one request gave: the stream's state while it arrives (chunks, usage, the reply text), the
//! [`Exchange`] it ends in and the [`Failure`] that says what went wrong.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use serde::Deserialize;

use agentx_record::Usage;

use crate::{EndpointType, ERROR_EXCERPT};

/// A response stream while it arrives: the endpoint's API, whether the reply text is kept, and
/// whether it ended or failed.
pub struct StreamState {
    /// The API whose events the stream carries.
    pub api: EndpointType,
    /// Collect the reply text into the exchange (live-assistant mode).
    pub keep_text: bool,
    /// The stream's end marker arrived.
    pub done: bool,
    /// What went wrong in the stream, once something did.
    pub failure: Option<Failure>,
}

impl StreamState {
    /// One chat-completions event (the OpenAI chunk shape) of a stream still going.
    pub(crate) fn on_chat_event(&mut self, event: &str, now: Instant, exchange: &mut Exchange) {
        if event == "[DONE]" {
            self.done = true;
            return;
        }
        let chunk: ChunkJson<'_> = match serde_json::from_str(event) {
            Ok(c) => c,
            Err(e) => {
                self.failure = Some(malformed_event(exchange, "a JSON chunk", &e, event, ""));
                return;
            }
        };
        if chunk.error.is_some() {
            let (kind, message) = server_error_message(event);
            let mut failure = Failure::new(
                exchange.status,
                FailureKind::StreamError,
                format!("the server sent an error event mid-stream: {message}"),
            );
            failure.server_type = kind;
            exchange.error_body = Some(excerpt(event, ERROR_EXCERPT).to_owned());
            self.failure = Some(failure);
            return;
        }
        let choices = &chunk.choices;
        if choices.with_output > 0 {
            let offset_ns = now.saturating_duration_since(exchange.sent).as_nanos() as u64;
            for _ in 0..choices.with_output {
                exchange.chunk_offsets_ns.push(offset_ns);
            }
            exchange.content_chunks += choices.with_content;
            if self.keep_text {
                exchange.text.push_str(&choices.content);
            }
        }
        if let Some(reason) = &choices.finish_reason {
            exchange.finish_reason = Some(reason.to_string());
        }
        if let Some(nvext) = chunk.nvext {
            nvext.absorb_into(&mut exchange.server);
        }
        if let Some(usage_json) = chunk.usage {
            exchange.usage = Some(Usage {
                prompt_tokens: usage_json.prompt_tokens,
                completion_tokens: usage_json.completion_tokens,
                cached_tokens: usage_json
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens),
            });
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct ChunkJson<'a> {
    #[serde(default, borrow)]
    choices: Choices<'a>,
    #[serde(default)]
    usage: Option<UsageJson>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    /// Dynamo's worker and timing figures (on the final chunk, when asked for).
    #[serde(default)]
    nvext: Option<crate::server_side::NvExtJson>,
}

/// The `choices` array, folded while it is read, so a chunk allocates nothing for it: how many choices
/// carried output (content or reasoning) or content, their content joined, the last finish reason.
#[derive(Default)]
pub(crate) struct Choices<'a> {
    with_output: u64,
    with_content: u64,
    content: Cow<'a, str>,
    finish_reason: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fold<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fold<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut acc = Choices::default();
                while let Some(choice) = seq.next_element::<ChoiceJson<'a>>()? {
                    let content = choice.delta.content.unwrap_or_default();
                    let reasoning = choice
                        .delta
                        .reasoning_content
                        .as_deref()
                        .or(choice.delta.reasoning.as_deref());
                    if !content.is_empty() || reasoning.is_some_and(|r| !r.is_empty()) {
                        acc.with_output += 1;
                    }
                    if !content.is_empty() {
                        acc.with_content += 1;
                        if acc.content.is_empty() {
                            acc.content = content;
                        } else {
                            acc.content.to_mut().push_str(&content);
                        }
                    }
                    if choice.finish_reason.is_some() {
                        acc.finish_reason = choice.finish_reason;
                    }
                }
                Ok(acc)
            }
        }
        d.deserialize_seq(Fold(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
pub(crate) struct ChoiceJson<'a> {
    #[serde(default, borrow)]
    delta: DeltaJson<'a>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
pub(crate) struct DeltaJson<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(crate) struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<DetailsJson>,
}

#[derive(Deserialize)]
pub(crate) struct DetailsJson {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// The server's error type and message from an OpenAI-style error body (`{"error": {...}}`,
/// `{"error": "..."}`, or `{"message": ...}`), else the body itself.
pub fn server_error_message(body: &str) -> (Option<String>, String) {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let pick = |parsed: &serde_json::Value| -> Option<(Option<String>, String)> {
        let error = parsed.get("error").unwrap_or(parsed);
        if let Some(text) = error.as_str() {
            return Some((None, text.to_owned()));
        }
        let msg = error.get("message")?.as_str()?.to_owned();
        let error_type = error
            .get("type")
            .and_then(|t| t.as_str())
            .map(str::to_owned);
        Some((error_type, msg))
    };
    parsed
        .as_ref()
        .and_then(pick)
        .unwrap_or_else(|| (None, excerpt(body.trim(), 500).to_owned()))
}

/// The failure of a stream event that does not parse as `what` (an API's event shape): the parser's
/// `error`, the event's first 200 bytes, then `hint` (what to check, or empty).
pub(crate) fn malformed_event(
    exchange: &Exchange,
    what: &str,
    error: &serde_json::Error,
    event: &str,
    hint: &str,
) -> Failure {
    Failure::new(
        exchange.status,
        FailureKind::MalformedSse,
        format!(
            "malformed SSE: an event is not {what} ({error}): {:?}{hint}",
            excerpt(event, 200)
        ),
    )
}

/// The first `max` bytes of `text`, cut at a character boundary.
pub fn excerpt(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An error and each of its sources, joined with `: `.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut chain = error.to_string();
    let mut src = error.source();
    while let Some(inner) = src {
        let inner_text = inner.to_string();
        if !chain.contains(&inner_text) {
            chain.push_str(": ");
            chain.push_str(&inner_text);
        }
        src = inner.source();
    }
    chain
}

/// The class of a failed exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The request could not be built.
    Request,
    /// No connection (refused, unreachable, connect timeout, TLS).
    Connect,
    /// A non-2xx status.
    Http,
    /// The connection broke before or during the response.
    Reset,
    /// The event stream could not be decoded.
    MalformedSse,
    /// The server sent an `error` event inside the stream.
    StreamError,
    /// The stream ended without `[DONE]`.
    Incomplete,
    /// The request timeout passed.
    Timeout,
    /// The run cancelled the request.
    Cancelled,
}

impl FailureKind {
    /// The kind's name in the records (`error.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Request => "request_error",
            FailureKind::Connect => "connect_error",
            FailureKind::Http => "http_error",
            FailureKind::Reset => "connection_reset",
            FailureKind::MalformedSse => "malformed_sse",
            FailureKind::StreamError => "stream_error",
            FailureKind::Incomplete => "incomplete_stream",
            FailureKind::Timeout => "timeout",
            FailureKind::Cancelled => "cancelled",
        }
    }
}

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The HTTP status (0 when no response came).
    pub status: u16,
    /// What kind of failure it was.
    pub kind: FailureKind,
    /// The server's own error type, when its body named one.
    pub server_type: Option<String>,
    /// What happened, in words.
    pub message: String,
}

impl Failure {
    /// A failure without a server error type.
    pub fn new(status: u16, kind: FailureKind, message: String) -> Failure {
        Failure {
            status,
            kind,
            server_type: None,
            message,
        }
    }
}

/// What one request produced.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// When the request was sent.
    pub sent: Instant,
    /// When the response's first byte arrived.
    pub first_byte: Option<Instant>,
    /// Offsets from `sent` of each non-empty content or reasoning chunk.
    pub chunk_offsets_ns: Vec<u64>,
    /// Non-empty content chunks (reasoning excluded).
    pub content_chunks: u64,
    /// When the response ended (or failed).
    pub end: Instant,
    /// The HTTP status (0 when no response came).
    pub status: u16,
    /// The stream's `usage`, when it sent one.
    pub usage: Option<Usage>,
    /// The stop reason as the server wrote it.
    pub finish_reason: Option<String>,
    /// The reply text (when asked for).
    pub text: String,
    /// The reply's reasoning text (filled by the stream readers that read it; empty otherwise).
    pub reasoning_text: String,
    /// The first [`ERROR_EXCERPT`] bytes of an error body or error event.
    pub error_body: Option<String>,
    /// What went wrong, when something did.
    pub failure: Option<Failure>,
    /// Set when the request was sent a second time, and why.
    pub retried: Option<String>,
    /// The server's own time from the request's last body byte to the start of its response, when
    /// its headers say (the built-in simulator's stamps).
    pub server_ttft: Option<Duration>,
    /// The server's own account of the request (its headers, Dynamo's `nvext`), when it gave one.
    pub server: Option<agentx_record::ServerSide>,
}

/// The server's time from a request's last body byte to the start of its response, when both of the
/// built-in simulator's stamps came (unix nanoseconds on the server's clock; only their difference
/// is read, so no clock is shared).
pub fn server_ttft(headers: &hyper::HeaderMap) -> Option<Duration> {
    use crate::headers::{RECEIVED_HEADER, RESPONSE_START_HEADER};
    let stamp = |name: &str| -> Option<u64> { headers.get(name)?.to_str().ok()?.parse().ok() };
    let (received, start) = (stamp(RECEIVED_HEADER)?, stamp(RESPONSE_START_HEADER)?);
    Some(Duration::from_nanos(start.saturating_sub(received)))
}

impl Exchange {
    /// An exchange sent at `sent`, nothing received yet.
    pub fn new(sent: Instant) -> Exchange {
        Exchange {
            sent,
            first_byte: None,
            chunk_offsets_ns: Vec::new(),
            content_chunks: 0,
            end: sent,
            status: 0,
            usage: None,
            finish_reason: None,
            text: String::new(),
            reasoning_text: String::new(),
            error_body: None,
            failure: None,
            retried: None,
            server_ttft: None,
            server: None,
        }
    }

    /// Records `failure` unless an earlier failure was recorded.
    pub fn fail(&mut self, failure: Failure) {
        if self.failure.is_none() {
            self.failure = Some(failure);
        }
    }

    /// The instant of the first content chunk.
    pub fn first_token(&self) -> Option<Instant> {
        self.chunk_offsets_ns
            .first()
            .map(|&o| self.sent + Duration::from_nanos(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_chunks_nvext_lands_in_the_exchange_beside_its_usage() {
        let mut state = StreamState {
            api: EndpointType::Chat,
            keep_text: false,
            done: false,
            failure: None,
        };
        let sent = Instant::now();
        let mut exchange = Exchange::new(sent);
        state.on_chat_event(
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            sent,
            &mut exchange,
        );
        state.on_chat_event(
            r#"{"choices":[{"delta":{},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":900,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":640}},
                "nvext":{"worker_id":{"decode_worker_id":5,"decode_dp_rank":2},
                         "timing":{"prefill_wait_time_ms":1.5,"prefill_time_ms":20.0,"ttft_ms":25.0}}}"#,
            sent,
            &mut exchange,
        );
        assert!(state.failure.is_none(), "{:?}", state.failure);
        let server = exchange.server.expect("nvext read");
        assert_eq!(server.worker.as_deref(), Some("5/2"));
        assert_eq!(
            (server.queue_ns, server.prefill_ns, server.ttft_ns),
            (Some(1_500_000), Some(20_000_000), Some(25_000_000))
        );
        assert_eq!(
            exchange.usage.and_then(|usage| usage.cached_tokens),
            Some(640)
        );
    }
}
