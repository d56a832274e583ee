//! Import warnings: what a corpus does that aiperf's weka loader accepts but this importer's stricter
//! checks would refuse, and the other way round, what agentx-harness refuses and this importer reads
//! (the kinds whose [`WarningKind::harness_refuses`] is true; `run::harness` refuses them under
//! `--scenario agentx`).
//!
//! A warning never stops an import (the value is made replayable: clamped, remapped or dropped, as each
//! kind says); `--strict` turns the warnings of a corpus into an error. Warnings are counted by kind with
//! the first `FIRST_PLACES` places of each kind, and the report is stored in the cache entry so a warm
//! open reports the same warnings as the import that built it.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::{DatasetError, Location};

/// Places kept per kind.
pub(crate) const FIRST_PLACES: usize = 5;

/// What a warning is about. The snake_case names are stable: they key `--json` output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WarningKind {
    /// A number written as a string, a boolean, or an integer written as an integral float (`3.0`);
    /// read as its value, as pydantic's lax mode does.
    CoercedNumber,
    /// `id` is the empty string.
    EmptyId,
    /// A negative token count (`in`, `out`, `tool_tokens`, `system_tokens`); read as 0.
    NegativeTokens,
    /// `in: 0`: the request is replayed with an empty prompt tail.
    ZeroInput,
    /// A hash id above 2^32-1 or below 0; remapped to a free 32-bit id of its trace (equality kept).
    HashIdOutOfRange,
    /// A request or subagent start time `t` that is negative or not finite; a non-finite `t` is read as
    /// the previous request's.
    InvalidTime,
    /// A request start time `t` earlier than the previous request's; the replay waits 0 s for it.
    DecreasingTime,
    /// A `think_time`, `api_time`, `ttft` or `duration_ms` that is negative or not finite; dropped.
    InvalidDuration,
    /// A stream's first request (the trace's first, or a subagent entry's) has fewer hash ids than the
    /// blocks of its tools+system prefix; the system message is cut to the request's blocks.
    /// agentx-harness refuses such a trace (`--scenario agentx` does too).
    ShortFirstRequest,
    /// A field agentx-harness's weka schema requires or types otherwise (a trace without `models`, a
    /// request without `model`, a subagent entry without `subagent_type`, `status` or `models`, a
    /// `duration_ms` that is not a whole number, a Mooncake `output_length` of 0 or below); read as this
    /// importer reads it. agentx-harness refuses such a trace (`--scenario agentx` does too).
    HarnessSchema,
    /// A record Dynamo's loader skips without a word (a Dynamo request trace's line that is not a
    /// JSON object, a tool event without `agent_context` or ending before it starts); skipped too.
    DroppedRecord,
    /// A dependency of a Dynamo corpus the session-tree replay plays otherwise than Dynamo's
    /// lowering: a child session started while its spawning request was in flight, one no request
    /// spawned (a trace of its own), a join on a request before the child session's last.
    InexactEdge,
    /// An OTel LLM span with error status (code 2); dropped, as guidellm and aiperf drop it.
    ErrorSpan,
    /// An OTel LLM span equal to another of its session (start, end and attributes); dropped, as
    /// inference-perf drops it.
    DuplicateSpan,
    /// An OTel LLM span without input or output token counts or messages; dropped, as guidellm
    /// skips it.
    UntokenizedSpan,
    /// An OTel LLM span without token counts whose counts were estimated from its messages
    /// (`len(text) // 4` per message, as inference-perf estimates them).
    EstimatedTokens,
}

impl WarningKind {
    /// Every kind, in report order.
    pub const ALL: [WarningKind; 16] = [
        WarningKind::CoercedNumber,
        WarningKind::EmptyId,
        WarningKind::NegativeTokens,
        WarningKind::ZeroInput,
        WarningKind::HashIdOutOfRange,
        WarningKind::InvalidTime,
        WarningKind::DecreasingTime,
        WarningKind::InvalidDuration,
        WarningKind::ShortFirstRequest,
        WarningKind::HarnessSchema,
        WarningKind::DroppedRecord,
        WarningKind::InexactEdge,
        WarningKind::ErrorSpan,
        WarningKind::DuplicateSpan,
        WarningKind::UntokenizedSpan,
        WarningKind::EstimatedTokens,
    ];

    /// Whether agentx-harness 1.0.12 refuses a corpus with this warning (at its trace-declared block
    /// size, for [`WarningKind::ShortFirstRequest`]).
    pub fn harness_refuses(self) -> bool {
        matches!(
            self,
            WarningKind::ShortFirstRequest | WarningKind::HarnessSchema
        )
    }

    /// The stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningKind::CoercedNumber => "coerced_number",
            WarningKind::EmptyId => "empty_id",
            WarningKind::NegativeTokens => "negative_tokens",
            WarningKind::ZeroInput => "zero_input",
            WarningKind::HashIdOutOfRange => "hash_id_out_of_range",
            WarningKind::InvalidTime => "invalid_time",
            WarningKind::DecreasingTime => "decreasing_time",
            WarningKind::InvalidDuration => "invalid_duration",
            WarningKind::ShortFirstRequest => "short_first_request",
            WarningKind::HarnessSchema => "harness_schema",
            WarningKind::DroppedRecord => "dropped_record",
            WarningKind::InexactEdge => "inexact_edge",
            WarningKind::ErrorSpan => "error_span",
            WarningKind::DuplicateSpan => "duplicate_span",
            WarningKind::UntokenizedSpan => "untokenized_span",
            WarningKind::EstimatedTokens => "estimated_tokens",
        }
    }
}

impl fmt::Display for WarningKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One warning: its kind, where, and what.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// What kind of warning it is.
    pub kind: WarningKind,
    /// Where in the source it was found.
    pub location: Location,
    /// What was accepted and how to make the record conform.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// The warnings of one kind: how many, and the first few places (`file:line: trace: field: message`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KindReport {
    /// Warnings of this kind.
    pub count: u64,
    /// The first few places, as `file:line: trace: field: message` lines.
    pub first: Vec<String>,
}

/// The warnings of a corpus, counted by kind (kind names as keys, in name order).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WarningReport {
    /// Warnings of all kinds.
    pub total: u64,
    /// The count and first places of each kind, keyed by kind name.
    pub by_kind: BTreeMap<String, KindReport>,
}

impl WarningReport {
    /// Counts one warning, keeping its place if it is among the first of its kind.
    pub fn add(&mut self, warning: &Warning) {
        self.total += 1;
        let k = self
            .by_kind
            .entry(warning.kind.as_str().to_owned())
            .or_default();
        k.count += 1;
        if k.first.len() < FIRST_PLACES {
            k.first.push(warning.to_string());
        }
    }

    /// Whether the corpus has no warnings.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// `zero_input 2, hash_id_out_of_range 1`: the counts on one line.
    pub fn summary(&self) -> String {
        self.by_kind
            .iter()
            .map(|(k, r)| format!("{k} {}", r.count))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The human report: a count line per kind followed by its first places, indented.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (k, r) in &self.by_kind {
            out.push(format!("{k:<22} {}", r.count));
            for p in &r.first {
                out.push(format!("  {p}"));
            }
            if r.count > r.first.len() as u64 {
                out.push(format!("  ... and {} more", r.count - r.first.len() as u64));
            }
        }
        out
    }

    /// The error `--strict` makes of a corpus with warnings; `Ok` when there are none.
    pub fn strict(&self, source: &std::path::Path) -> Result<(), DatasetError> {
        if self.is_empty() {
            return Ok(());
        }
        let places = self
            .by_kind
            .iter()
            .filter_map(|(k, r)| r.first.first().map(|p| format!("\n  {p} [{k}]")))
            .collect::<String>();
        Err(DatasetError::Strict {
            path: source.to_owned(),
            message: format!(
                "{} warnings ({}), which --strict makes errors; first of each kind:{places}",
                self.total,
                self.summary()
            ),
        })
    }
}
