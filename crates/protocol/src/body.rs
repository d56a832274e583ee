//! Request bodies: the JSON made from the prompt synthesis's shared pieces ([`RequestBody`],
//! [`JsonBody`]), sent with vectored writes without being copied into one buffer. A body's only
//! per-stream part is Dynamo's `nvext.session_control` ([`super::session_control`]), written into
//! the tail after the messages. A Messages API body (`--endpoint-type anthropic`) is written by
//! [`super::anthropic`] from the same pieces, a Responses API body (`--endpoint-type responses`) by
//! [`super::responses`].

use super::session_control::{DynamoRouting, StreamTurn};
use bytes::Bytes;
use hyper::Uri;

/// The API a request speaks (`--endpoint-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EndpointType {
    /// OpenAI chat completions.
    #[default]
    Chat,
    /// Anthropic's Messages API ([`super::anthropic`]).
    Anthropic,
    /// OpenAI's Responses API ([`super::responses`]).
    Responses,
}

impl EndpointType {
    /// The names `--endpoint-type` takes.
    pub const NAMES: &'static str = "chat, anthropic, responses";

    /// The type `--endpoint-type` names.
    pub fn parse(name: &str) -> Option<EndpointType> {
        match name {
            "chat" => Some(EndpointType::Chat),
            "anthropic" => Some(EndpointType::Anthropic),
            "responses" => Some(EndpointType::Responses),
            _ => None,
        }
    }

    /// The request path when `--endpoint` is not given.
    pub fn default_path(self) -> &'static str {
        match self {
            EndpointType::Chat => "/v1/chat/completions",
            EndpointType::Anthropic => super::anthropic::PATH,
            EndpointType::Responses => super::responses::PATH,
        }
    }

    /// What a refusal of the request's shape adds to its message: the endpoint type and the flags
    /// (Anthropic's Messages API and the Responses API; a chat refusal's message is the server's).
    pub fn refusal_hint(self, status: hyper::StatusCode, uri: &Uri) -> String {
        match (self, status.as_u16()) {
            (EndpointType::Anthropic, 404 | 405 | 415 | 422) => format!(
                " (a Messages API body of --endpoint-type anthropic sent to {}: does the server \
                 serve the Anthropic Messages API there? Else pass --endpoint, or --endpoint-type chat)",
                uri.path()
            ),
            (EndpointType::Responses, 404 | 405 | 415 | 422) => format!(
                " (a Responses API body of --endpoint-type responses sent to {}: does the server \
                 serve the OpenAI Responses API there? Else pass --endpoint, or --endpoint-type chat)",
                uri.path()
            ),
            _ => String::new(),
        }
    }

    /// What ends a complete stream, as an error message names it.
    pub fn end_marker(self) -> &'static str {
        match self {
            EndpointType::Chat => "`data: [DONE]`",
            EndpointType::Anthropic => "a `message_stop` event",
            EndpointType::Responses => "a `response.completed` (or `response.incomplete`) event",
        }
    }

    /// The body keys this API's body sets itself beyond [`RequestBody::RESERVED`]: `--extra-inputs`
    /// may not name them.
    pub fn own_fields(self) -> &'static [&'static str] {
        match self {
            EndpointType::Chat => &[],
            EndpointType::Anthropic => &["system"],
            EndpointType::Responses => &super::responses::OWN_FIELDS,
        }
    }
}

/// Writes a chat completion request body into one reusable buffer.
#[derive(Debug, Clone)]
pub struct RequestBody {
    api: EndpointType,
    /// `{"model":"M","messages":`, built once and shared by every body.
    head: Bytes,
    stream: bool,
    include_usage: bool,
    /// `,"k":v` pairs of the extra inputs, already serialized.
    extra_json: Vec<u8>,
    /// `,"max_tokens":` or `,"max_completion_tokens":`.
    token_field: &'static [u8],
    /// `--use-dynamo-conv-aware-routing`, with the `nvext` of the extra inputs (taken out of
    /// `extra_json`, written per request with `session_control` set).
    dynamo: Option<(DynamoRouting, serde_json::Map<String, serde_json::Value>)>,
}

impl RequestBody {
    /// `extra` are the `--extra-inputs` pairs (values already JSON); a key the body sets itself
    /// (`model`, `messages`, `stream`, `stream_options`, `max_tokens`) overrides nothing and is refused
    /// by the caller.
    pub fn new(
        model: &str,
        stream: bool,
        include_usage: bool,
        extra: &[(String, serde_json::Value)],
    ) -> RequestBody {
        let mut head = b"{\"model\":".to_vec();
        serde_json::to_writer(&mut head, model).expect("string serializes");
        head.extend_from_slice(b",\"messages\":");
        let mut extra_json = Vec::new();
        for (k, v) in extra {
            extra_json.push(b',');
            serde_json::to_writer(&mut extra_json, k).expect("string serializes");
            extra_json.push(b':');
            serde_json::to_writer(&mut extra_json, v).expect("value serializes");
        }
        RequestBody {
            api: EndpointType::Chat,
            head: Bytes::from(head),
            stream,
            include_usage,
            extra_json,
            token_field: b",\"max_tokens\":",
            dynamo: None,
        }
    }

    /// Bodies in the shape of `api` (the chat body by default).
    #[must_use]
    pub fn with_endpoint_type(mut self, api: EndpointType) -> RequestBody {
        self.api = api;
        self
    }

    /// Every body carries Dynamo's `nvext.session_control` ([`RequestBody::build_for`]); `extra`
    /// are the same extra inputs as [`RequestBody::new`]'s, whose `nvext` object (if any) is merged
    /// into each request's rather than written beside it.
    #[must_use]
    pub fn with_dynamo(
        mut self,
        routing: Option<DynamoRouting>,
        extra: &[(String, serde_json::Value)],
    ) -> RequestBody {
        let Some(routing) = routing else {
            self.dynamo = None;
            return self;
        };
        let mut base = serde_json::Map::new();
        let mut kept = Vec::new();
        for (key, value) in extra {
            match (key.as_str(), value) {
                ("nvext", serde_json::Value::Object(nvext)) => base.clone_from(nvext),
                _ => kept.push((key.clone(), value.clone())),
            }
        }
        let mut extra_json = Vec::new();
        for (key, value) in &kept {
            extra_json.push(b',');
            serde_json::to_writer(&mut extra_json, key).expect("string serializes");
            extra_json.push(b':');
            serde_json::to_writer(&mut extra_json, value).expect("value serializes");
        }
        self.extra_json = extra_json;
        self.dynamo = Some((routing, base));
        self
    }

    /// Dynamo's conversation-aware routing, when on.
    pub fn dynamo(&self) -> Option<DynamoRouting> {
        self.dynamo.as_ref().map(|d| d.0)
    }

    /// The token limit sent as `max_completion_tokens` (aiperf 0.13 and agentx-harness 1.0.12 for
    /// session trees; `max_tokens` only with their legacy flag) instead of `max_tokens`.
    #[must_use]
    pub fn with_max_completion_tokens(mut self, enabled: bool) -> RequestBody {
        self.token_field = if enabled {
            b",\"max_completion_tokens\":"
        } else {
            b",\"max_tokens\":"
        };
        self
    }

    /// The keys the body sets itself; `--extra-inputs` may not name them.
    pub const RESERVED: [&'static str; 6] = [
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
    ];

    /// Writes `{"model":..,"messages":<messages>,"max_tokens":N,"stream":..,...}` to `out`.
    pub fn write(&self, out: &mut Vec<u8>, max_tokens: u32, messages: impl FnOnce(&mut Vec<u8>)) {
        out.extend_from_slice(&self.head);
        messages(out);
        self.write_tail(out, max_tokens, None);
    }

    /// The same body as [`RequestBody::write`], made of shared pieces: `messages` is the messages
    /// array without its closing `]` (as `agentx_dataset::Conversation::messages_json_parts` gives
    /// it), and its pieces are sent as they are, not copied.
    pub fn build(&self, max_tokens: u32, messages: Vec<Bytes>) -> JsonBody {
        self.build_parts(max_tokens, (messages, None), None)
    }

    /// [`RequestBody::build`] for one turn of a stream: with Dynamo's conversation-aware routing
    /// on, the body carries the turn's `nvext.session_control`.
    pub fn build_for(&self, max_tokens: u32, messages: Vec<Bytes>, turn: StreamTurn) -> JsonBody {
        self.build_parts(max_tokens, (messages, None), Some(turn))
    }

    /// [`RequestBody::build_for`] on the agent's wire: `tools` is the chat `tools` array the
    /// request carries (`agentx_dataset::Conversation::tools_json`), written in the API's shape;
    /// `None` is [`RequestBody::build_for`]'s body.
    pub fn build_with_tools(
        &self,
        max_tokens: u32,
        messages: Vec<Bytes>,
        tools: Option<Bytes>,
        turn: StreamTurn,
    ) -> JsonBody {
        self.build_parts(max_tokens, (messages, tools), Some(turn))
    }

    fn build_parts(
        &self,
        max_tokens: u32,
        (messages, tools): (Vec<Bytes>, Option<Bytes>),
        turn: Option<StreamTurn>,
    ) -> JsonBody {
        if self.api == EndpointType::Anthropic {
            // `{"model":M` without `,"messages":`, then `"stream":true,` and the rest of the tail.
            let head = &self.head[..self.head.len() - b",\"messages\":".len()];
            let mut tail = Vec::with_capacity(64 + self.extra_json.len());
            self.write_extra(&mut tail, turn);
            let mut out = Vec::new();
            let pieces = (&messages[..], tools.as_deref());
            super::anthropic::write_body(&mut out, head, pieces, max_tokens, &tail);
            return JsonBody::from_parts(vec![Bytes::from(out)]);
        }
        if self.api == EndpointType::Responses {
            // `{"model":M` without `,"messages":`, then the rest of the tail after `store`.
            let head = &self.head[..self.head.len() - b",\"messages\":".len()];
            let mut tail = Vec::with_capacity(64 + self.extra_json.len());
            self.write_extra(&mut tail, turn);
            let mut out = Vec::new();
            let limit = (max_tokens, self.stream);
            let pieces = (&messages[..], tools.as_deref());
            super::responses::write_body(&mut out, head, pieces, limit, &tail);
            return JsonBody::from_parts(vec![Bytes::from(out)]);
        }
        self.chat_body(
            max_tokens,
            (messages.into_iter().map(Piece::Shared), tools),
            turn,
        )
    }

    /// [`RequestBody::build_with_tools`] with the messages written as they are sent
    /// ([`WrittenPiece`]: the array without its closing `]`). The Messages and Responses APIs
    /// rewrite the messages into their shapes, so for them the piece is written whole first.
    pub fn build_written(
        &self,
        max_tokens: u32,
        messages: Box<dyn WrittenPiece>,
        tools: Option<Bytes>,
        turn: StreamTurn,
    ) -> JsonBody {
        if self.api != EndpointType::Chat {
            let mut whole = Vec::with_capacity(messages.remaining() as usize);
            write_whole(messages, &mut whole);
            let pieces = (vec![Bytes::from(whole)], tools);
            return self.build_parts(max_tokens, pieces, Some(turn));
        }
        let pieces = (std::iter::once(Piece::Written(messages)), tools);
        self.chat_body(max_tokens, pieces, Some(turn))
    }

    /// The chat body: the head, the messages' pieces, and the tail after them.
    fn chat_body(
        &self,
        max_tokens: u32,
        (messages, tools): (impl Iterator<Item = Piece>, Option<Bytes>),
        turn: Option<StreamTurn>,
    ) -> JsonBody {
        let mut tail = Vec::with_capacity(160 + self.extra_json.len());
        tail.push(b']');
        if let Some(tools) = &tools {
            tail.extend_from_slice(b",\"tools\":");
            tail.extend_from_slice(tools);
        }
        self.write_tail(&mut tail, max_tokens, turn);
        let head = std::iter::once(Piece::Shared(self.head.clone()));
        let tail = std::iter::once(Piece::Shared(Bytes::from(tail)));
        JsonBody::from_pieces(head.chain(messages).chain(tail))
    }

    /// Everything after the messages array. A turn without a limit
    /// ([`agentx_record::NO_OUTPUT_LIMIT`]) is sent without the token field, as agentx-harness
    /// 1.0.12 sends it (aiperf/endpoints/openai_chat.py:60-66).
    pub(crate) fn write_tail(&self, out: &mut Vec<u8>, max_tokens: u32, turn: Option<StreamTurn>) {
        if max_tokens != agentx_record::NO_OUTPUT_LIMIT {
            out.extend_from_slice(self.token_field);
            out.extend_from_slice(max_tokens.max(1).to_string().as_bytes());
        }
        if self.stream {
            out.extend_from_slice(b",\"stream\":true");
            if self.include_usage {
                out.extend_from_slice(b",\"stream_options\":{\"include_usage\":true}");
            }
        } else {
            out.extend_from_slice(b",\"stream\":false");
        }
        self.write_extra(out, turn);
    }

    /// The extra inputs, Dynamo's `nvext` for `turn`, and the closing `}`.
    fn write_extra(&self, out: &mut Vec<u8>, turn: Option<StreamTurn>) {
        out.extend_from_slice(&self.extra_json);
        if let (Some((routing, base)), Some(stream_turn)) = (&self.dynamo, turn) {
            routing.write_nvext(out, base, stream_turn);
        }
        out.push(b'}');
    }
}

/// A piece of a body written as it is sent: its length is known before its first byte, its text is
/// made a frame at a time (the messages of a recorded-mode history, which are a function of their
/// hash ids, so a request waiting for a busy server holds a frame and not its whole history).
pub trait WrittenPiece: Send + Sync + std::fmt::Debug {
    /// Bytes not yet written.
    fn remaining(&self) -> u64;
    /// Appends the next bytes to `out`, about `budget` of them (at least one while any remain).
    fn write_next(&mut self, out: &mut Vec<u8>, budget: usize);
    /// The same piece from where this one stands (the copy a retry sends).
    fn clone_piece(&self) -> Box<dyn WrittenPiece>;
}

/// Appends all that is left of `piece` to `out`.
fn write_whole(mut piece: Box<dyn WrittenPiece>, out: &mut Vec<u8>) {
    while piece.remaining() > 0 {
        piece.write_next(out, usize::MAX);
    }
}

/// One piece of a [`JsonBody`].
#[derive(Debug)]
enum Piece {
    Shared(Bytes),
    Written(Box<dyn WrittenPiece>),
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Shared(bytes) => bytes.len() as u64,
            Piece::Written(piece) => piece.remaining(),
        }
    }
}

impl Clone for Piece {
    fn clone(&self) -> Piece {
        match self {
            Piece::Shared(bytes) => Piece::Shared(bytes.clone()),
            Piece::Written(piece) => Piece::Written(piece.clone_piece()),
        }
    }
}

/// The bytes a written piece makes per frame: a frame is one buffer hyper queues for a vectored
/// write.
const WRITTEN_FRAME: usize = 32 << 10;

/// A request body made of pieces with an exact length (so it goes out with `Content-Length`):
/// shared pieces, which hyper queues and writes with vectored writes, so a long conversation's
/// JSON is never copied into one buffer on its way to the socket, and written pieces
/// ([`WrittenPiece`]), made a frame at a time as the connection takes them.
#[derive(Debug, Clone, Default)]
pub struct JsonBody {
    parts: std::collections::VecDeque<Piece>,
    len: u64,
}

impl JsonBody {
    /// A body of these pieces, sent in order.
    pub fn from_parts(parts: Vec<Bytes>) -> JsonBody {
        JsonBody::from_pieces(parts.into_iter().map(Piece::Shared))
    }

    fn from_pieces(pieces: impl IntoIterator<Item = Piece>) -> JsonBody {
        let parts: std::collections::VecDeque<Piece> =
            pieces.into_iter().filter(|p| p.len() > 0).collect();
        let len = parts.iter().map(Piece::len).sum();
        JsonBody { parts, len }
    }

    /// Bytes left to send.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole body in one buffer (for tests and diagnostics; sending never does this).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut whole = Vec::with_capacity(self.len as usize);
        for piece in &self.parts {
            match piece {
                Piece::Shared(bytes) => whole.extend_from_slice(bytes),
                Piece::Written(piece) => write_whole(piece.clone_piece(), &mut whole),
            }
        }
        whole
    }
}

impl http_body::Body for JsonBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let frame = match self.parts.pop_front() {
            None => None,
            Some(Piece::Shared(bytes)) => Some(bytes),
            Some(Piece::Written(mut piece)) => {
                let mut frame = Vec::with_capacity(WRITTEN_FRAME + 1024);
                piece.write_next(&mut frame, WRITTEN_FRAME);
                if piece.remaining() > 0 {
                    self.parts.push_front(Piece::Written(piece));
                }
                Some(Bytes::from(frame))
            }
        };
        if let Some(bytes) = &frame {
            self.len = self.len.saturating_sub(bytes.len() as u64);
        }
        std::task::Poll::Ready(frame.map(|bytes| Ok(http_body::Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body;

    /// `left` bytes of `b'x'`, `step` at a time.
    #[derive(Debug, Clone)]
    struct Letters {
        left: u64,
        step: u64,
    }

    impl WrittenPiece for Letters {
        fn remaining(&self) -> u64 {
            self.left
        }

        fn write_next(&mut self, out: &mut Vec<u8>, budget: usize) {
            let target = out.len() + budget.min(1 << 30);
            while self.left > 0 && out.len() < target {
                let n = self.step.min(self.left);
                out.extend(std::iter::repeat_n(b'x', n as usize));
                self.left -= n;
            }
        }

        fn clone_piece(&self) -> Box<dyn WrittenPiece> {
            Box::new(self.clone())
        }
    }

    fn frames(mut body: JsonBody) -> Vec<Bytes> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut frames = Vec::new();
        while let std::task::Poll::Ready(Some(Ok(frame))) =
            std::pin::Pin::new(&mut body).poll_frame(&mut cx)
        {
            assert_eq!(
                body.size_hint().exact(),
                Some(body.len()),
                "the length left stays exact"
            );
            frames.push(frame.into_data().expect("data frame"));
        }
        assert!(body.is_end_stream() && body.is_empty());
        frames
    }

    /// A written body announces its exact length, sends it in frames of about the frame size,
    /// and is the body the same messages make as shared pieces.
    #[test]
    fn a_written_body_sends_its_announced_length_in_frames() {
        let body = RequestBody::new("m", true, true, &[]);
        let turn = StreamTurn {
            correlation_id: "c",
            parent_correlation_id: None,
            last: false,
        };
        let messages = 100_000 + 13;
        let letters = Letters {
            left: messages,
            step: 70,
        };
        let written = body.build_written(7, Box::new(letters.clone()), None, turn);
        let whole = "x".repeat(messages as usize);
        let shared = body.build_for(7, vec![Bytes::from(whole)], turn);
        assert_eq!(written.len(), shared.len());
        assert_eq!(written.to_vec(), shared.to_vec());
        let sent = frames(written.clone());
        assert!(sent.len() >= 4, "{} frames", sent.len());
        assert!(sent
            .iter()
            .all(|f| f.len() <= WRITTEN_FRAME + 70 && !f.is_empty()));
        assert_eq!(sent.concat(), shared.to_vec());
        // The Messages API takes the messages whole.
        let anthropic = body.clone().with_endpoint_type(EndpointType::Anthropic);
        let written = anthropic.build_written(7, Box::new(letters), None, turn);
        assert_eq!(
            written.to_vec(),
            anthropic
                .build_for(7, vec![Bytes::from("x".repeat(messages as usize))], turn)
                .to_vec()
        );
    }
}
