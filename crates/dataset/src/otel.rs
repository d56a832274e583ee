//! The OTel format: OpenTelemetry GenAI traces (docs/specs/otel-genai-traces.md), in both layers,
//! read into weka-shaped [`ParsedTrace`]s with subagent entries, which the session-tree builder
//! replays.
//!
//! - `read`: OTLP JSON (`ExportTraceServiceRequest`, one per file or one per line, spans merged by
//!   trace id) and the flattened span dict (session rows `{trace_id|session_id, spans}` one per line
//!   or one per `*.json` file, and span rows), validated span by span. The layer is told by each
//!   record's keys.
//! - `messages`: recorded messages reduced to hashes and lengths; no text is kept.
//! - `plan`: one session (a trace, or a session row) as one weka trace: its LLM request spans in
//!   `(start, span_id)` order, subagents from nested `invoke_agent` spans as subagent entries, block
//!   ids from the messages' common prefix.
//!
//! Each built trace is weka JSON parsed by [`super::weka::parse_trace`], so every later stage reads
//! it as it reads a weka trace; the spans the plan drops (error status, no token counts, exact
//! duplicates) and the token counts it estimates become warnings of the trace
//! ([`WarningKind::ErrorSpan`], [`WarningKind::DuplicateSpan`], [`WarningKind::UntokenizedSpan`],
//! [`WarningKind::EstimatedTokens`]). [`summarize`] counts what
//! `dataset stats` shows of the format: requests with messages, prefixes assumed, and the sessions
//! for which `history=runtime`'s precondition holds.
//!
//! [`WarningKind::ErrorSpan`]: super::warnings::WarningKind::ErrorSpan
//! [`WarningKind::DuplicateSpan`]: super::warnings::WarningKind::DuplicateSpan
//! [`WarningKind::UntokenizedSpan`]: super::warnings::WarningKind::UntokenizedSpan
//! [`WarningKind::EstimatedTokens`]: super::warnings::WarningKind::EstimatedTokens

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{DatasetError, Location};
use super::format::FormatSpec;
use super::weka::{parse_trace, ParsedTrace, SourceFiles};

mod messages;
mod plan;
mod read;

/// What an OTel corpus holds beyond its traces (`dataset stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OtelSummary {
    /// Sessions read (traces and session rows), with or without requests.
    pub sessions: u64,
    /// Sessions with no request to replay (skipped).
    pub sessions_without_requests: u64,
    /// Requests replayed (root and subagent).
    pub requests: u64,
    /// Subagents (nested `invoke_agent` spans with requests).
    pub subagents: u64,
    /// Requests that record `gen_ai.input.messages`.
    pub requests_with_messages: u64,
    /// Requests after an agent's first whose prefix was assumed (no messages on it or on its
    /// predecessor): the predecessor's whole prompt.
    pub assumed_prefix: u64,
    /// Sessions for which `history=runtime`'s precondition holds (every request records its
    /// messages, and each continues its agent's previous input and output).
    pub runtime_sessions: u64,
    /// LLM spans dropped for error status.
    pub error_spans: u64,
    /// LLM spans dropped as exact duplicates.
    pub duplicate_spans: u64,
    /// LLM spans dropped for lack of token counts and messages.
    pub untokenized_spans: u64,
    /// LLM spans whose token counts were estimated from their messages.
    pub estimated_tokens: u64,
}

impl OtelSummary {
    fn add(&mut self, facts: &plan::Facts, replayed: bool) {
        self.sessions += 1;
        self.sessions_without_requests += u64::from(!replayed);
        self.requests += facts.requests;
        self.subagents += facts.subagents;
        self.requests_with_messages += facts.with_messages;
        self.assumed_prefix += facts.assumed_prefix;
        self.runtime_sessions += u64::from(replayed && facts.runtime_ready);
        self.error_spans += facts.error_spans;
        self.duplicate_spans += facts.duplicate_spans;
        self.untokenized_spans += facts.untokenized_spans;
        self.estimated_tokens += facts.estimated_tokens;
    }
}

/// Plans every session of `files`, handing each built trace to `on_trace` until it answers `Break`.
fn for_each_planned(
    files: &SourceFiles,
    spec: &FormatSpec,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<(usize, OtelSummary), DatasetError> {
    let sessions = read::read_sessions(files)?;
    if sessions.is_empty() {
        return Err(DatasetError::Empty {
            path: files.path().to_owned(),
        });
    }
    let mut summary = OtelSummary::default();
    let mut seen: HashMap<String, (PathBuf, u64)> = HashMap::new();
    let mut delivered = 0usize;
    for session in &sessions {
        let planned = plan::plan_session(session, spec.block_size())?;
        summary.add(&planned.facts, !planned.traces.is_empty());
        let mut warnings = planned.warnings;
        for blob in planned.traces {
            let base = Location {
                file: session.file.clone(),
                line: session.line,
                ..Location::default()
            };
            let id = blob["id"].as_str().unwrap_or_default().to_owned();
            if let Some((file, line)) = seen.get(&id) {
                return Err(DatasetError::Invalid {
                    location: Location {
                        trace: Some(session.id.clone()),
                        field: Some("trace_id".into()),
                        ..base
                    },
                    message: format!(
                        "its trace id {id:?} is also that of the session at {}:{line}: ids keep only \
                         [A-Za-z0-9._-]; make the trace (or session) ids differ in those characters",
                        file.display()
                    ),
                });
            }
            seen.insert(id, (session.file.clone(), session.line));
            let mut trace = parse_trace(&blob.to_string(), &base)?;
            trace.warnings.append(&mut warnings);
            delivered += 1;
            if on_trace(trace)?.is_break() {
                return Ok((delivered, summary));
            }
        }
    }
    if delivered == 0 {
        return Err(DatasetError::Invalid {
            location: Location {
                file: files.path().to_owned(),
                ..Location::default()
            },
            message: format!(
                "{} sessions and no LLM request span to replay: a request is a span with \
                 gen_ai.operation.name chat, generate or text_completion (or both token counts), \
                 status not error, and gen_ai.usage.input_tokens and output_tokens",
                sessions.len()
            ),
        });
    }
    Ok((delivered, summary))
}

/// Reads an OTel source and hands each trace (a session, then its subagents no root request
/// precedes) to `on_trace` until it answers `Break`.
pub(crate) fn scan(
    files: &SourceFiles,
    spec: &FormatSpec,
    on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    for_each_planned(files, spec, on_trace).map(|(n, _)| n)
}

/// The counts of an OTel source ([`OtelSummary`]), read from the source itself (the cache entry
/// keeps only the traces).
pub fn summarize(path: &Path, spec: &FormatSpec) -> Result<OtelSummary, DatasetError> {
    let files = SourceFiles::from_path(path)?;
    for_each_planned(&files, spec, |_| Ok(ControlFlow::Continue(()))).map(|(_, s)| s)
}

#[cfg(test)]
mod tests;
