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
        let mut parts = Vec::with_capacity(messages.len() + 2);
        parts.push(self.head.clone());
        parts.extend(messages);
        let mut tail = Vec::with_capacity(160 + self.extra_json.len());
        tail.push(b']');
        if let Some(tools) = &tools {
            tail.extend_from_slice(b",\"tools\":");
            tail.extend_from_slice(tools);
        }
        self.write_tail(&mut tail, max_tokens, turn);
        parts.push(Bytes::from(tail));
        JsonBody::from_parts(parts)
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

/// A request body made of shared pieces with an exact length (so it goes out with `Content-Length`).
/// hyper queues the pieces and writes them with vectored writes, so a long conversation's JSON is
/// never copied into one buffer on its way to the socket.
#[derive(Debug, Clone, Default)]
pub struct JsonBody {
    parts: std::collections::VecDeque<Bytes>,
    len: u64,
}

impl JsonBody {
    /// A body of these pieces, sent in order.
    pub fn from_parts(parts: Vec<Bytes>) -> JsonBody {
        let parts: std::collections::VecDeque<Bytes> =
            parts.into_iter().filter(|p| !p.is_empty()).collect();
        let len = parts.iter().map(|p| p.len() as u64).sum();
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
        for p in &self.parts {
            whole.extend_from_slice(p);
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
        let next = self.parts.pop_front();
        if let Some(piece) = &next {
            self.len -= piece.len() as u64;
        }
        std::task::Poll::Ready(next.map(|p| Ok(http_body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}
