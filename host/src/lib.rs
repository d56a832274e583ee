//! agentx: a benchmark engine for LLM inference servers under agentic-coding load.
//!
//! The native host owns networking, the dataset cache, time and files; the policy of a benchmark
//! scenario runs as a sandboxed WebAssembly component loaded by hash (see [`scenario`]).
//!
//! This crate is the command line ([`cli`]) and a run's stages ([`run`]); everything below them is a
//! crate of the workspace (`crates/*`, one paragraph each in `docs/architecture.md`), re-exported
//! here under its module name so that the binary, the integration tests, the benches and the fuzz
//! targets reach the whole library as `agentx::<module>`.
//!
//! Unsafe code is denied; the allocator's options ([`allocator`]) and the binary's constructor that
//! sets them (`main.rs`) allow it for one item each.

/// The printing macros (`outln!`, `out!`, `errln!`) for every module of the command line.
#[macro_use]
extern crate agentx_record as printing;

pub mod allocator;
pub mod cli;
pub mod run;

pub use agentx_capture as capture;
pub use agentx_client as client;
pub use agentx_dashboard as dashboard;
pub use agentx_dataset as dataset;
pub use agentx_export as export;
pub use agentx_metrics as metrics;
pub use agentx_protocol as protocol;
pub use agentx_record as record;
pub use agentx_record::{fsio, out};
pub use agentx_replay as replay;
pub use agentx_replay::ui;
pub use agentx_scenario as scenario;
pub use agentx_sim as sim;
pub use agentx_telemetry as telemetry;
