//! Response headers the built-in simulator stamps and the client reads: the simulator's own time to
//! first token, from which a client finds the time it added itself, and the `x-sim-*` headers of
//! what the simulator decided (the engine, the cache hit, the timings, the admission order and why
//! each missed prompt token missed; the three miss headers add up to the prompt tokens minus the
//! cached ones).

/// The response header stamping when the request's last body byte was read, in unix nanoseconds.
pub const RECEIVED_HEADER: &str = "x-agentx-sim-request-received-ns";
/// The response header stamping when the response's content starts (when a streamed answer's first
/// token is due, or with `headers_at_first_token` when it goes out; when a one-shot answer is
/// sent), in unix nanoseconds on the same clock. The difference
/// of the two is the simulator's own time to first token, which a client subtracts from its TTFT to
/// find what it added itself, with no clock shared between the two.
pub const RESPONSE_START_HEADER: &str = "x-agentx-sim-response-start-ns";

/// The engine (data-parallel rank, from 0) the simulator ran the request on.
pub const SIM_ENGINE_HEADER: &str = "x-sim-engine";
/// The request's prompt tokens as the simulator counted them.
pub const SIM_PROMPT_TOKENS_HEADER: &str = "x-sim-prompt-tokens";
/// The prompt tokens the simulator's prefix cache served.
pub const SIM_CACHED_TOKENS_HEADER: &str = "x-sim-cached-tokens";
/// The modelled prefill compute, in milliseconds with three decimals (queueing excluded).
pub const SIM_PREFILL_MS_HEADER: &str = "x-sim-prefill-ms";
/// The time the request waited for a sequence slot and KV space, in milliseconds.
pub const SIM_QUEUE_MS_HEADER: &str = "x-sim-queue-ms";
/// The request's place in the order the simulator admitted requests, over every engine (from 1):
/// the order its prefix caches changed in.
pub const SIM_ADMIT_SEQ_HEADER: &str = "x-sim-admit-seq";
/// Missed prompt tokens no engine had ever cached (and the partial last block and last token, which
/// no hit covers).
pub const SIM_MISS_COLD_HEADER: &str = "x-sim-miss-cold";
/// Missed prompt tokens some engine had cached and evicted for capacity, none held at admission.
pub const SIM_MISS_CAPACITY_HEADER: &str = "x-sim-miss-capacity";
/// Missed prompt tokens another engine held at admission: the router sent the request elsewhere.
pub const SIM_MISS_ROUTING_HEADER: &str = "x-sim-miss-routing";
