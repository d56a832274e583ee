//! What a request and its response are, apart from how they travel: the JSON bodies (chat
//! completions, Anthropic Messages and the OpenAI Responses API, [`RequestBody`] from shared
//! pieces, [`JsonBody`]), the incremental SSE decoder ([`sse`]), the [`Exchange`] a request ends
//! in with the [`Failure`] that says what went wrong, the routing headers and Dynamo's session
//! control, the header names the built-in simulator stamps ([`headers`]), and the replay's side of
//! the HTTP client ([`transport::Transport`]). No sockets: the client crate sends, the simulator
//! serves, the replay schedules through the transport.

#![forbid(unsafe_code)]

mod agent_wire;
pub mod anthropic;
mod body;
mod exchange;
pub mod headers;
pub mod responses;
pub mod routing;
pub mod server_side;
pub mod session_control;
pub mod sse;
pub mod trace_context;
pub mod transport;

use std::time::Instant;

pub use body::*;
pub use exchange::*;
pub use routing::{ConnectionReuse, RoutingHeaders};
pub use session_control::{DynamoRouting, StreamTurn};

/// Longest error body excerpt kept (and handed to the scenario's classifier).
pub const ERROR_EXCERPT: usize = 4096;

impl StreamState {
    /// One event of the stream, read in the shape of the endpoint's API; nothing once it ended.
    pub fn on_event(&mut self, event: &str, now: Instant, exchange: &mut Exchange) {
        if self.done || self.failure.is_some() {
            return;
        }
        match self.api {
            EndpointType::Anthropic => anthropic::on_event(self, event, now, exchange),
            EndpointType::Responses => responses::on_event(self, event, now, exchange),
            EndpointType::Chat => self.on_chat_event(event, now, exchange),
        }
        if self.done {
            exchange.settle_tool_calls();
        }
    }
}

/// The ids sent as headers.
#[derive(Debug, Clone, Copy)]
pub struct RequestIds<'a> {
    /// The request's own id (`X-Request-ID`).
    pub request_id: &'a str,
    /// The stream's own correlation id.
    pub correlation_id: &'a str,
    /// The parent stream's correlation id (child streams of a session tree).
    pub parent_correlation_id: Option<&'a str>,
    /// The correlation id of the tree's root stream (a session tree's streams; a single-stream
    /// session is its own root): the trace its `traceparent` names.
    pub root_correlation_id: Option<&'a str>,
    /// The session's final turn: a sticky session's connection is released after it.
    pub last: bool,
    /// Told the instant of the response's first content chunk as it arrives (a graph replay gates
    /// first-token-anchored edges on it); `None` tells nobody.
    pub on_first_token: Option<FirstTokenHook<'a>>,
}

/// What a transport calls with the instant of a response's first content chunk, once, while the
/// response still streams.
#[derive(Clone, Copy)]
pub struct FirstTokenHook<'a>(pub &'a (dyn Fn(Instant) + Send + Sync));

impl std::fmt::Debug for FirstTokenHook<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstTokenHook")
    }
}

impl RequestIds<'_> {
    /// The correlation id of the tree's root stream, the stream's own for a single-stream session
    /// (the root of its own tree): the trace a `traceparent` names, the session a root-keyed
    /// routing header carries.
    pub fn root(&self) -> &str {
        self.root_correlation_id.unwrap_or(self.correlation_id)
    }
}
