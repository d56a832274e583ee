//! agentx: a benchmark engine for LLM inference servers under agentic-coding load.
//!
//! The native host owns networking, the dataset cache, time and files; the policy of a benchmark
//! scenario runs as a sandboxed WebAssembly component loaded by hash (see [`scenario`]).
//!
//! Unsafe code is denied crate-wide; the two places that need it (mapping a dataset cache entry,
//! `dataset::mmap`, and loading a compiled scenario component, `scenario`) allow it item by item,
//! each with its reason.

#![deny(unsafe_code)]

#[macro_use]
pub mod out;

pub mod cli;
pub mod client;
pub mod dataset;
pub mod export;
pub mod fsio;
pub mod metrics;
pub mod record;
pub mod replay;
pub mod run;
pub mod scenario;
pub mod sim;
pub mod ui;
