//! The HTTP side of a replay: connection pool, request bodies, incremental SSE decoding, timestamps.
//! It measures and reports; it never decides policy.

pub mod sse;
