//! The vocabulary every other crate of agentx speaks: [`RequestRecord`] (the one fact type of a run,
//! its chunk times held compactly as [`ChunkOffsets`]) and its sink, the run's clock, atomic file IO under a directory capability ([`fsio`]), the output
//! paths and printing that never panics ([`mod@out`]), the distribution kernel ([`dist`]) and the rule
//! that says what became of a request ([`outcome`]).
//!
//! It depends on no other crate of the workspace.

#![forbid(unsafe_code)]

#[macro_use]
pub mod out;

mod chunks;
pub mod dist;
pub mod fsio;
pub mod outcome;
pub mod priority;
mod record;
pub mod testkit;

pub use chunks::{ChunkOffsets, Offsets};
pub use record::*;

/// The `max_tokens` of a request sent without a token limit (a Mooncake row without
/// `output_length`): the request body leaves the token field out, as agentx-harness does.
pub const NO_OUTPUT_LIMIT: u32 = u32::MAX;
