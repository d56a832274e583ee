//! Response headers the built-in simulator stamps and the client reads: the simulator's own time to
//! first token, from which a client finds the time it added itself.

/// The response header stamping when the request's last body byte was read, in unix nanoseconds.
pub const RECEIVED_HEADER: &str = "x-agentx-sim-request-received-ns";
/// The response header stamping when the response's content starts (when a streamed answer's first
/// token is due, or with `headers_at_first_token` when it goes out; when a one-shot answer is
/// sent), in unix nanoseconds on the same clock. The difference
/// of the two is the simulator's own time to first token, which a client subtracts from its TTFT to
/// find what it added itself, with no clock shared between the two.
pub const RESPONSE_START_HEADER: &str = "x-agentx-sim-response-start-ns";
