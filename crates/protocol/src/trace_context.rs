//! W3C trace context for the requests of a run: the `traceparent` header a request carries and the
//! ids of the spans the OTLP export writes for it, derived from the run's own ids so that both agree
//! without either being stored.
//!
//! A session tree (or a single-stream session) is one trace: its id is derived from the root
//! stream's correlation id (which carries the run's id). Each stream is a span (its parent the stream
//! that spawned it), and each request a span whose parent is its stream's span; the request's span
//! id is what `traceparent` names, so a server's spans for the request become its children. The ids
//! are the leading bytes of SHA-256 over a domain tag and the id, never all zeros.

use sha2::{Digest, Sha256};

/// The header's name.
pub const TRACEPARENT: &str = "traceparent";

/// A 16-byte trace id.
pub type TraceId = [u8; 16];
/// An 8-byte span id.
pub type SpanId = [u8; 8];

/// The trace of the tree (or session) whose root stream has `root_correlation_id`.
pub fn trace_id(root_correlation_id: &str) -> TraceId {
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest(b"agentx trace\0", root_correlation_id)[..16]);
    nonzero(&mut id);
    id
}

/// The span of the stream (session) with `correlation_id`.
pub fn stream_span_id(correlation_id: &str) -> SpanId {
    span(b"agentx stream\0", correlation_id)
}

/// The span of the request with `request_id` (the one its `traceparent` names).
pub fn request_span_id(request_id: &str) -> SpanId {
    span(b"agentx request\0", request_id)
}

/// The `traceparent` value of a request: version 00, the tree's trace, the request's span, sampled.
pub fn traceparent(root_correlation_id: &str, request_id: &str) -> String {
    format!(
        "00-{}-{}-01",
        hex(&trace_id(root_correlation_id)),
        hex(&request_span_id(request_id))
    )
}

fn span(tag: &[u8], id: &str) -> SpanId {
    let mut span = [0u8; 8];
    span.copy_from_slice(&digest(tag, id)[..8]);
    nonzero(&mut span);
    span
}

fn digest(tag: &[u8], id: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(tag);
    hasher.update(id.as_bytes());
    hasher.finalize().into()
}

/// The W3C format forbids an all-zero id; a digest that starts with that many zeros gets a 1.
fn nonzero(id: &mut [u8]) {
    if id.iter().all(|&byte| byte == 0) {
        id[id.len() - 1] = 1;
    }
}

/// Lower-case hex, as the header spells ids.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_well_formed_and_names_the_request_span() {
        let header = traceparent("3f2a91c0-s7", "3f2a91c0-r42");
        let parts: Vec<&str> = header.split('-').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!((parts[0], parts[3]), ("00", "01"));
        assert_eq!(parts[1], hex(&trace_id("3f2a91c0-s7")));
        assert_eq!(parts[2], hex(&request_span_id("3f2a91c0-r42")));
        assert!(parts[1].len() == 32 && parts[2].len() == 16);
        assert!(parts[1..3].iter().all(|p| p
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())));
    }

    #[test]
    fn ids_depend_on_their_input_and_kind_only() {
        assert_eq!(trace_id("a-s1"), trace_id("a-s1"));
        assert_ne!(trace_id("a-s1"), trace_id("a-s2"));
        // A stream and a request of the same text are different spans.
        assert_ne!(stream_span_id("x"), request_span_id("x"));
        // Pinned (SHA-256 computed apart): the ids are part of the wire, so a change here is a
        // change of what runs send.
        assert_eq!(hex(&request_span_id("r")), "86dba0a6dede7f49");
        assert_eq!(hex(&trace_id("a-s1")), "8c881585d3e003752b592349002d94ea");
    }
}
