//! What a run tells other tools while it goes: OTLP spans ([`otlp`]), one per request record
//! and one per session (stream), exported over OTLP/HTTP (protobuf) to a collector, with the trace
//! context the requests carried ([`agentx_protocol::trace_context`]) so that a server's spans join
//! the client's; and agentx's own Prometheus endpoint ([`prom`], `--metrics-listen`), the run's live
//! counts for the Prometheus that scrapes the server.
//!
//! Telemetry never slows or fails a run: spans go through a bounded queue, a full queue drops them,
//! and an endpoint that is down or slow loses its batches; both are counted and said once.

#![forbid(unsafe_code)]

pub mod otlp;
pub mod prom;
pub mod testkit;
