//! aiperf's Agent Graph IR v2.0, the dataset side (docs/specs/agent-graph-ir.md): a workload file
//! read strictly ([`read`](self) and `decode`: JSONL records or one JSON document), normalised as
//! aiperf normalises it (`normalise`: the linear-chat shorthand, START/END injection,
//! `trace.messages`, channel auto-derivation), validated (`validate`: aiperf's rules, the
//! scheduler's refusals, and the run-time failures a loader can see statically), and lowered into
//! the immutable [`GraphCorpus`] the replay runs ([`model`], whose invariants an executor relies on
//! without checking again), with the figures of `dataset stats` ([`stats`]).
//!
//! A graph corpus is not a corpus of session traces: it does not go through the mmap cache or
//! `any_format::scan`. [`load`] is its one entry.

pub mod ir;
pub mod model;
pub mod stats;

mod decode;
mod normalise;
mod read;
mod validate;

use std::path::Path;

pub use model::{
    Anchor, Channel, ChannelIndex, FanIn, Graph, GraphCorpus, InEdge, Node, NodeIndex, Piece,
    PromptPart, RecordedStart, Request, Trace,
};
pub use stats::{stats, GraphStats};

use crate::error::{DatasetError, Finding};

/// The block size of `dataset stats --format graph-ir` without `--block-size`.
pub const DEFAULT_BLOCK_SIZE: u32 = 64;

/// Reads, normalises, validates and lowers the workload at `path`. A file that cannot be read or
/// decoded is the first error, located; a workload the validator refuses is
/// [`DatasetError::GraphRefused`] with every finding, errors and warnings; under `strict` a warning
/// refuses too.
pub fn load(path: &Path, strict: bool) -> Result<GraphCorpus, DatasetError> {
    let mut workload = read::workload(path)?;
    let mut findings = normalise::normalise(&mut workload);
    findings.extend(validate::check(&workload));
    let refused = |findings: Vec<Finding>| DatasetError::GraphRefused {
        path: path.to_owned(),
        findings,
    };
    if findings.iter().any(Finding::is_error) {
        return Err(refused(findings));
    }
    let corpus = model::build(&workload, findings).map_err(refused)?;
    if strict && !corpus.warnings().is_empty() {
        return Err(refused(corpus.warnings().to_vec()));
    }
    Ok(corpus)
}

#[cfg(test)]
mod tests;
