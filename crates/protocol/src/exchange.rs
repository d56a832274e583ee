//! What one request gave: the stream's state while it arrives (chunks, usage, the reply text, the
//! reasoning and the tool calls), the [`Exchange`] it ends in and the [`Failure`] that says what
//! went wrong.
//!
//! Output, for every API: a non-empty content, reasoning or tool-call delta is a chunk
//! (`chunk_offsets_ns`, whose first is the TTFT, reasoning included, as aiperf's); the first
//! content or tool-call delta is the first output (`first_output_offset_ns`, aiperf's TTFO). Chat
//! reads reasoning from `delta.reasoning_content` (vLLM's) or `delta.reasoning`, and tool calls
//! from `delta.tool_calls[]`, whose pieces are joined by their `index`.

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
            exchange.reasoning_chunks += choices.with_reasoning;
            if choices.with_content > 0 || !choices.tool_calls.is_empty() {
                exchange.first_output_offset_ns.get_or_insert(offset_ns);
            }
            if self.keep_text {
                exchange.text.push_str(&choices.content);
                exchange.reasoning_text.push_str(&choices.reasoning);
            }
        }
        for piece in &choices.tool_calls {
            exchange.tool_call_piece(piece.index, &piece.id, &piece.name, &piece.arguments);
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
                reasoning_tokens: usage_json
                    .completion_tokens_details
                    .and_then(|d| d.reasoning_tokens),
            });
        }
    }
}

/// A string field that may be absent or `null`, borrowed from the event when it has no escapes.
/// (serde's own `Option<Cow<str>>` copies every string into a new allocation: it borrows a `Cow`
/// only as a field's direct type.) For `#[serde(default, borrow, deserialize_with = ...)]`.
pub(crate) fn borrowed_str<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    struct Text;
    impl<'de> serde::de::Visitor<'de> for Text {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(text))
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(text.to_owned()))
        }
        fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
            Ok(Cow::Owned(text))
        }
    }
    struct MaybeText;
    impl<'de> serde::de::Visitor<'de> for MaybeText {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_str(Text).map(Some)
        }
    }
    deserializer.deserialize_option(MaybeText)
}

#[derive(Deserialize)]
pub(crate) struct ChunkJson<'a> {
    #[serde(default, borrow)]
    choices: Choices<'a>,
    /// Boxed, as `nvext`: a chunk is moved while it is read, and these come once per stream.
    #[serde(default)]
    usage: Option<Box<UsageJson>>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    /// Dynamo's worker and timing figures (on the final chunk, when asked for).
    #[serde(default)]
    nvext: Option<Box<crate::server_side::NvExtJson>>,
}

/// The `choices` array, folded while it is read, so a chunk allocates nothing for it: how many choices
/// carried output (content, reasoning or a tool-call piece), content or reasoning, their content
/// and reasoning joined, their tool-call pieces, the last finish reason.
#[derive(Default)]
pub(crate) struct Choices<'a> {
    with_output: u64,
    with_content: u64,
    with_reasoning: u64,
    content: Cow<'a, str>,
    reasoning: Cow<'a, str>,
    tool_calls: Vec<ToolCallPiece<'a>>,
    finish_reason: Option<Cow<'a, str>>,
}

/// One piece of a chat tool call (`delta.tool_calls[]`): the first names the call, the rest carry
/// more of its arguments.
#[derive(Deserialize)]
pub(crate) struct ToolCallPiece<'a> {
    #[serde(default)]
    index: u32,
    #[serde(default, borrow)]
    id: Cow<'a, str>,
    #[serde(default, borrow)]
    function: FunctionPiece<'a>,
    #[serde(skip)]
    name: Cow<'a, str>,
    #[serde(skip)]
    arguments: Cow<'a, str>,
}

#[derive(Deserialize, Default)]
pub(crate) struct FunctionPiece<'a> {
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    arguments: Option<Cow<'a, str>>,
}

/// `text` appended to `into`, borrowing while `into` is empty.
fn join<'a>(into: &mut Cow<'a, str>, text: Cow<'a, str>) {
    if into.is_empty() {
        *into = text;
    } else {
        into.to_mut().push_str(&text);
    }
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
                    let delta = choice.delta;
                    let content = delta.content.unwrap_or_default();
                    let reasoning = delta
                        .reasoning_content
                        .or(delta.reasoning)
                        .unwrap_or_default();
                    let mut pieces = delta.tool_calls.unwrap_or_default();
                    pieces.retain_mut(|piece| {
                        piece.name = piece.function.name.take().unwrap_or_default();
                        piece.arguments = piece.function.arguments.take().unwrap_or_default();
                        !(piece.id.is_empty()
                            && piece.name.is_empty()
                            && piece.arguments.is_empty())
                    });
                    if !content.is_empty() || !reasoning.is_empty() || !pieces.is_empty() {
                        acc.with_output += 1;
                    }
                    if !content.is_empty() {
                        acc.with_content += 1;
                        join(&mut acc.content, content);
                    }
                    if !reasoning.is_empty() {
                        acc.with_reasoning += 1;
                        join(&mut acc.reasoning, reasoning);
                    }
                    acc.tool_calls.append(&mut pieces);
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
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
pub(crate) struct DeltaJson<'a> {
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::exchange::borrowed_str")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallPiece<'a>>>,
}

#[derive(Deserialize)]
pub(crate) struct UsageJson {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<DetailsJson>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetailsJson>,
}

#[derive(Deserialize)]
pub(crate) struct DetailsJson {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
pub(crate) struct CompletionDetailsJson {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
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
    pub chunk_offsets_ns: agentx_record::ChunkOffsets,
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
    /// Offset from `sent` of the first non-reasoning output (content or tool-call delta).
    pub first_output_offset_ns: Option<u64>,
    /// Reasoning chunks received.
    pub reasoning_chunks: u64,
    /// The reasoning text, joined (collected when `text` is, i.e. when asked for).
    pub reasoning_text: String,
    /// The tool calls the reply made, their arguments as streamed.
    pub tool_calls: Vec<ReplyToolCall>,
}

/// A tool call of a reply, as it was streamed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyToolCall {
    /// The call's id (chat's `id`, Anthropic's `tool_use` id, the Responses `call_id`).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments' JSON text, its pieces joined.
    pub arguments: String,
    /// The arguments were valid JSON at the end of the stream.
    pub parsed: bool,
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
            chunk_offsets_ns: agentx_record::ChunkOffsets::new(),
            content_chunks: 0,
            end: sent,
            status: 0,
            usage: None,
            finish_reason: None,
            text: String::new(),
            error_body: None,
            failure: None,
            retried: None,
            server_ttft: None,
            server: None,
            first_output_offset_ns: None,
            reasoning_chunks: 0,
            reasoning_text: String::new(),
            tool_calls: Vec::new(),
        }
    }

    /// The offset from `sent` of `now`.
    pub(crate) fn offset_ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.sent).as_nanos() as u64
    }

    /// A non-empty reasoning delta arrived at `now` (`text` kept when `keep_text`).
    pub(crate) fn reasoning_delta(&mut self, now: Instant, text: &str, keep_text: bool) {
        self.chunk_offsets_ns.push(self.offset_ns(now));
        self.reasoning_chunks += 1;
        if keep_text {
            self.reasoning_text.push_str(text);
        }
    }

    /// A non-empty content delta arrived at `now` (`text` kept when `keep_text`).
    pub(crate) fn content_delta(&mut self, now: Instant, text: &str, keep_text: bool) {
        let offset_ns = self.offset_ns(now);
        self.chunk_offsets_ns.push(offset_ns);
        self.first_output_offset_ns.get_or_insert(offset_ns);
        self.content_chunks += 1;
        if keep_text {
            self.text.push_str(text);
        }
    }

    /// A tool call's piece arrived at `now`: output, timestamped; `arguments` joined to the call
    /// at `index` (a call at a new index starts there).
    pub(crate) fn tool_call_delta(
        &mut self,
        now: Instant,
        index: u32,
        (id, name): (&str, &str),
        arguments: &str,
    ) {
        if id.is_empty() && name.is_empty() && arguments.is_empty() {
            return;
        }
        let offset_ns = self.offset_ns(now);
        self.chunk_offsets_ns.push(offset_ns);
        self.first_output_offset_ns.get_or_insert(offset_ns);
        self.tool_call_piece(index, id, name, arguments);
    }

    /// `arguments` joined to the tool call at `index` (its id and name set when given), without a
    /// timestamp (chat's pieces are timestamped with their chunk).
    pub(crate) fn tool_call_piece(&mut self, index: u32, id: &str, name: &str, arguments: &str) {
        let index = index as usize;
        if self.tool_calls.len() <= index {
            self.tool_calls
                .resize_with(index + 1, ReplyToolCall::default);
        }
        let call = &mut self.tool_calls[index];
        if !id.is_empty() {
            id.clone_into(&mut call.id);
        }
        if !name.is_empty() {
            name.clone_into(&mut call.name);
        }
        call.arguments.push_str(arguments);
    }

    /// Marks each tool call whose arguments are valid JSON (an empty text is none); called when the
    /// stream ends.
    pub fn settle_tool_calls(&mut self) {
        for call in &mut self.tool_calls {
            call.parsed = serde_json::from_str::<serde::de::IgnoredAny>(&call.arguments).is_ok();
        }
    }

    /// The tool calls whose arguments did not parse.
    pub fn tool_call_parse_failures(&self) -> usize {
        self.tool_calls.iter().filter(|call| !call.parsed).count()
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
            .map(|offset_ns| self.sent + Duration::from_nanos(offset_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk's strings are borrowed from the event unless they hold escapes; `null` and an absent
    /// field are `None`; a number where a string belongs is an error, as before.
    #[test]
    fn chunk_strings_borrow_from_the_event() {
        let event = r#"{"choices":[{"delta":{"content":"plain","reasoning":null},"finish_reason":"stop"}]}"#;
        let chunk: ChunkJson<'_> = serde_json::from_str(event).unwrap();
        assert!(matches!(chunk.choices.content, Cow::Borrowed("plain")));
        assert!(matches!(
            chunk.choices.finish_reason,
            Some(Cow::Borrowed("stop"))
        ));
        assert_eq!(chunk.choices.with_reasoning, 0);
        let escaped = r#"{"choices":[{"delta":{"content":"a\n\"b\""}}]}"#;
        let chunk: ChunkJson<'_> = serde_json::from_str(escaped).unwrap();
        assert!(matches!(&chunk.choices.content, Cow::Owned(text) if text == "a\n\"b\""));
        assert!(chunk.choices.finish_reason.is_none());
        let wrong = r#"{"choices":[{"delta":{"content":7}}]}"#;
        assert!(serde_json::from_str::<ChunkJson<'_>>(wrong).is_err());
    }

    /// `chunks` read as a chat stream ending in `[DONE]`, each 1 ms after the last.
    fn read_chat(chunks: &[&str]) -> Exchange {
        let mut state = StreamState {
            api: EndpointType::Chat,
            keep_text: true,
            done: false,
            failure: None,
        };
        let sent = Instant::now();
        let mut exchange = Exchange::new(sent);
        for (i, chunk) in chunks.iter().chain(&["[DONE]"]).enumerate() {
            let now = sent + Duration::from_millis(i as u64 + 1);
            state.on_event(chunk, now, &mut exchange);
            assert!(state.failure.is_none(), "{chunk}: {:?}", state.failure);
        }
        assert!(state.done);
        exchange
    }

    #[test]
    fn reasoning_then_content_gives_a_first_output_after_the_first_token() {
        let ex = read_chat(&[
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#,
            r#"{"choices":[{"delta":{"reasoning":" so"}}]}"#,
            r#"{"choices":[{"delta":{"content":"yes"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
        ]);
        assert_eq!(ex.chunk_offsets_ns, vec![2_000_000, 3_000_000, 4_000_000]);
        assert_eq!(ex.first_output_offset_ns, Some(4_000_000));
        assert_eq!((ex.reasoning_chunks, ex.content_chunks), (2, 1));
        assert_eq!(
            (ex.reasoning_text.as_str(), ex.text.as_str()),
            ("hmm so", "yes")
        );
        assert_eq!(ex.usage.unwrap().reasoning_tokens, Some(2));
        // Without reasoning the first output is the first token.
        let plain = read_chat(&[r#"{"choices":[{"delta":{"content":"a"}}]}"#]);
        assert_eq!(plain.first_output_offset_ns, plain.chunk_offsets_ns.first());
        assert_eq!(plain.usage, None);
    }

    #[test]
    fn tool_call_pieces_join_by_index_across_chunks() {
        let ex = read_chat(&[
            r#"{"choices":[{"delta":{"reasoning_content":"plan"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"Bash","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"cmd\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_2","function":{"name":"Read","arguments":"{\"path"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"ls\"}"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(ex.first_output_offset_ns, Some(2_000_000));
        assert_eq!(ex.chunk_offsets_ns.len(), 5);
        assert_eq!(ex.content_chunks, 0);
        assert_eq!(ex.tool_calls.len(), 2);
        assert_eq!(
            ex.tool_calls[0],
            ReplyToolCall {
                id: "call_1".into(),
                name: "Bash".into(),
                arguments: r#"{"cmd":"ls"}"#.into(),
                parsed: true,
            }
        );
        // The second call's arguments never close.
        assert_eq!(ex.tool_calls[1].arguments, r#"{"path"#);
        assert!(!ex.tool_calls[1].parsed);
        assert_eq!(ex.tool_call_parse_failures(), 1);
        assert_eq!(ex.finish_reason.as_deref(), Some("tool_calls"));
    }

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
