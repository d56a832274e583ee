//! NVIDIA Dynamo's agentic corpora (docs/specs/dynamo-traces.md): `dynamo.request.trace.v1` captures
//! ([`request_trace`]) and Agentic Mooncake v1 and v2 rows ([`agentic`]), each read into one
//! dependency [`Graph`] of requests, which [`sessions`] turns into weka-shaped [`ParsedTrace`]s with
//! subagent entries, so the cache entry, the views and the session-tree builder read them as they
//! read a weka trace.
//!
//! The graph holds what Dynamo's replay holds: each request's session, start and end on one corpus
//! clock (milliseconds), its token counts and block ids, the requests it waits for, and the recorded
//! gap after them (`delay + tool_wait_ms`, the spec's sections 3.6 and 4a). A request trace gets its edges from
//! Dynamo's lowering rules (section 3: sequence, Claude tool metadata, or spawn/join inferred from times);
//! an Agentic Mooncake file states them. Block ids are global to the corpus ([`Format::global_hash_ids`]):
//! a request trace's rolling block hashes, which name a whole prefix, are numbered in first-seen
//! order as Dynamo's `RollingHashIdMapper` numbers them; Agentic Mooncake ids are kept.
//!
//! A source may be plain JSONL or gzip (every member of a multi-member file, as Dynamo's segmented
//! `jsonl_gz` sink writes them). Every error names file:line, the field and the fix.
//!
//! [`Format::global_hash_ids`]: super::format::Format::global_hash_ids

use std::io::BufRead;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::error::{DatasetError, Location};
use super::format::{open_text, FormatSpec};
use super::warnings::{Warning, WarningKind};
use super::weka::ParsedTrace;

pub(crate) mod agentic;
pub(crate) mod request_trace;
mod sessions;
#[cfg(test)]
mod tests;

/// One request of a Dynamo corpus.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// `request_id`.
    pub(crate) id: String,
    /// Index into [`Graph::sessions`].
    pub(crate) session: usize,
    /// The line of its record.
    pub(crate) line: u64,
    /// Start and end, milliseconds on the corpus clock (equal when no duration is recorded).
    pub(crate) start_ms: f64,
    pub(crate) end_ms: f64,
    /// Whether the end is recorded (a request trace's), so `end - start` is the request's time.
    pub(crate) timed: bool,
    pub(crate) input: u32,
    pub(crate) output: u32,
    pub(crate) hash_ids: Vec<u32>,
    pub(crate) model: String,
    /// The request's new input is a tool result (the previous request of its session called tools,
    /// or tool events precede it).
    pub(crate) after_tool: bool,
    /// The requests it waits for (indices into [`Graph::nodes`]).
    pub(crate) wait_for: Vec<usize>,
    /// The recorded gap after its dependencies (`delay + tool_wait_ms`), ms; `None` without any.
    pub(crate) gap_ms: Option<f64>,
}

/// One session: its requests in replay order.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// `agent_context.session_id` or `session_id`.
    pub(crate) id: String,
    /// `agent_context.parent_session_id` (request traces); `None` where the format names no parent.
    pub(crate) declared_parent: Option<String>,
    /// Indices into [`Graph::nodes`], in replay order.
    pub(crate) nodes: Vec<usize>,
}

/// The requests of one corpus and the edges between them.
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) path: PathBuf,
    pub(crate) block_size: u32,
    pub(crate) nodes: Vec<Node>,
    pub(crate) sessions: Vec<Session>,
    /// Warnings, with the session each is about (`None`: the corpus's).
    pub(crate) warnings: Vec<(Option<String>, Warning)>,
}

/// The error of line `line` of `path`, field `field`.
pub(crate) fn invalid(
    path: &Path,
    line: u64,
    field: &str,
    message: impl Into<String>,
) -> DatasetError {
    DatasetError::Invalid {
        location: located(path, line, field),
        message: message.into(),
    }
}

/// Line `line` of `path`, field `field` (none when empty).
pub(crate) fn located(path: &Path, line: u64, field: &str) -> Location {
    Location {
        file: path.to_owned(),
        line,
        field: (!field.is_empty()).then(|| field.to_owned()),
        ..Location::default()
    }
}

impl Graph {
    /// Records a warning about line `line`, field `field` (of session `session`, if known).
    pub(crate) fn warn(
        &mut self,
        kind: WarningKind,
        session: Option<&str>,
        line: u64,
        field: &str,
        message: String,
    ) {
        let mut location = located(&self.path, line, field);
        location.trace = session.map(str::to_owned);
        self.warnings.push((
            session.map(str::to_owned),
            Warning {
                kind,
                location,
                message,
            },
        ));
    }

    /// The nodes in an order where each comes after every node it waits for (Kahn's algorithm, ties
    /// in node order); a cycle is an error naming a request on it.
    pub(crate) fn topological_order(&self) -> Result<Vec<usize>, DatasetError> {
        let n = self.nodes.len();
        let mut pending: Vec<usize> = self.nodes.iter().map(|x| x.wait_for.len()).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in self.nodes.iter().enumerate() {
            for &d in &node.wait_for {
                dependents[d].push(i);
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..n).filter(|&i| pending[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop_first() {
            order.push(i);
            for &j in &dependents[i] {
                pending[j] -= 1;
                if pending[j] == 0 {
                    ready.insert(j);
                }
            }
        }
        if let Some(stuck) = (0..n).find(|&i| pending[i] > 0) {
            let node = &self.nodes[stuck];
            return Err(invalid(
                &self.path,
                node.line,
                "",
                format!(
                    "agentic request dependencies contain a cycle through request {:?} (session {:?}): \
                     a request cannot wait, directly or through others, for itself; fix the \
                     dependencies (Claude tool metadata, wait_for or dependencies) that close it",
                    node.id, self.sessions[node.session].id
                ),
            ));
        }
        Ok(order)
    }
}

/// Field readers of one JSON object of line `line`; errors name the field's path (`prefix.name`).
pub(crate) struct Fields<'a> {
    pub(crate) path: &'a Path,
    pub(crate) line: u64,
    pub(crate) obj: &'a Map<String, Value>,
    /// The object's path in the record (`request.replay`), empty for the record itself.
    pub(crate) prefix: &'a str,
}

impl<'a> Fields<'a> {
    pub(crate) fn field(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    pub(crate) fn err(&self, name: &str, message: impl Into<String>) -> DatasetError {
        invalid(self.path, self.line, &self.field(name), message)
    }

    fn present(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    /// A string field; `None` when absent or null.
    pub(crate) fn opt_str(&self, name: &str) -> Result<Option<&'a str>, DatasetError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.err(name, format!("must be a string, got {v}"))),
        }
    }

    /// A required string field.
    pub(crate) fn req_str(&self, name: &str, what: &str) -> Result<&'a str, DatasetError> {
        self.opt_str(name)?
            .ok_or_else(|| self.err(name, format!("missing: {what}")))
    }

    /// A whole number >= 0; `None` when absent or null.
    pub(crate) fn opt_u64(&self, name: &str) -> Result<Option<u64>, DatasetError> {
        match self.present(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.err(name, format!("must be a whole number >= 0, got {v}"))),
        }
    }

    /// A required whole number >= 0.
    pub(crate) fn req_u64(&self, name: &str, what: &str) -> Result<u64, DatasetError> {
        self.opt_u64(name)?
            .ok_or_else(|| self.err(name, format!("missing: {what}")))
    }

    /// A number; `None` when absent or null.
    pub(crate) fn opt_f64(&self, name: &str) -> Result<Option<f64>, DatasetError> {
        match self.present(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.err(name, format!("must be a number, got {v}"))),
        }
    }

    /// A duration in milliseconds: a finite number >= 0; `None` when absent or null.
    pub(crate) fn opt_millis(&self, name: &str) -> Result<Option<f64>, DatasetError> {
        match self.opt_f64(name)? {
            Some(ms) if !ms.is_finite() || ms < 0.0 => Err(self.err(
                name,
                format!("is {ms}, not a finite number of milliseconds >= 0; give 0 or more"),
            )),
            other => Ok(other),
        }
    }

    /// An object field; `None` when absent or null.
    pub(crate) fn opt_obj(
        &self,
        name: &str,
    ) -> Result<Option<&'a Map<String, Value>>, DatasetError> {
        match self.present(name) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(v) => Err(self.err(name, format!("must be an object, got {v}"))),
        }
    }

    /// An array field; empty when absent or null.
    pub(crate) fn array(&self, name: &str) -> Result<&'a [Value], DatasetError> {
        match self.present(name) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(self.err(name, format!("must be a list, got {v}"))),
        }
    }

    /// A list of strings; empty when absent or null.
    pub(crate) fn strings(&self, name: &str) -> Result<Vec<&'a str>, DatasetError> {
        self.array(name)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().ok_or_else(|| {
                    self.err(
                        &format!("{name}[{i}]"),
                        format!("must be a string, got {v}"),
                    )
                })
            })
            .collect()
    }

    /// A nested object's readers.
    pub(crate) fn nested(&self, obj: &'a Map<String, Value>, prefix: &'a str) -> Fields<'a> {
        Fields {
            path: self.path,
            line: self.line,
            obj,
            prefix,
        }
    }
}

/// Reads every non-blank line of `path` (gzip decompressed) with its 1-based number.
pub(crate) fn read_lines(
    path: &Path,
    mut on_line: impl FnMut(u64, &str) -> Result<(), DatasetError>,
) -> Result<(), DatasetError> {
    let mut reader = open_text(path)?;
    let mut text = String::new();
    let mut line = 0u64;
    loop {
        text.clear();
        let read = reader
            .read_line(&mut text)
            .map_err(|e| DatasetError::io("read", path, e))?;
        if read == 0 {
            return Ok(());
        }
        line += 1;
        if !text.trim().is_empty() {
            on_line(line, text.trim())?;
        }
    }
}

/// The `--block-size` check: a block size given must equal the one the corpus declares, as Dynamo's
/// `validate_dynamo_trace_block_size` requires.
pub(crate) fn check_block_size(
    spec: &FormatSpec,
    path: &Path,
    line: u64,
    field: &str,
    declared: u32,
) -> Result<(), DatasetError> {
    match spec.block_size {
        Some(given) if given != declared => Err(invalid(
            path,
            line,
            field,
            format!(
                "trace_block_size {given} (--block-size) does not match the block size {declared} \
                 this corpus declares; its hash ids each cover {declared} tokens: drop --block-size \
                 or give --block-size {declared}"
            ),
        )),
        _ => Ok(()),
    }
}

/// Hands the traces of a graph to `on_trace` until it answers `Break`.
fn deliver(
    graph: Graph,
    on_trace: &mut impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    let traces = sessions::traces(graph)?;
    let mut count = 0usize;
    for trace in traces {
        count += 1;
        if on_trace(trace)?.is_break() {
            break;
        }
    }
    Ok(count)
}

/// Reads a `dynamo.request.trace.v1` capture and hands each root session's trace to `on_trace`.
pub(crate) fn scan_request_trace(
    path: &Path,
    spec: &FormatSpec,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    deliver(request_trace::read(path, spec)?, &mut on_trace)
}

/// Reads an Agentic Mooncake file (v1, or v2 with its header) and hands each root session's trace to
/// `on_trace`.
pub(crate) fn scan_agentic_mooncake(
    path: &Path,
    spec: &FormatSpec,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    deliver(agentic::read(path, spec)?, &mut on_trace)
}
