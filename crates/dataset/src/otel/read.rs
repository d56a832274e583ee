//! Reading an OTel source into sessions of validated spans: the two layers of
//! docs/specs/otel-genai-traces.md#1-two-layers (OTLP JSON and the flattened span dict) decoded with serde_json
//! into one [`Span`] shape.
//!
//! - A JSONL file is one record per line; a file whose first line is not JSON is one JSON document
//!   (pretty-printed); a directory is one document per `*.json` file. A record is an OTLP
//!   `ExportTraceServiceRequest` (`resourceSpans`), a session row (`{trace_id|session_id, spans}`,
//!   also inference-perf's file-per-trace object) or one flattened span (`span_id`).
//! - OTLP spans and span rows are merged into sessions by trace id across lines and batches, in the
//!   order of their first span; a session row is a session of its own (a second row with its id is an
//!   error naming both lines).
//! - Each span is validated as it is read (timestamps present and parseable, end not before start, a
//!   known kind, a status code in 0..=2, integer token counts, messages that are JSON lists); message
//!   text is reduced to its keys ([`super::messages`]) at once and never kept.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::messages::{self, Prompt};
use crate::error::{DatasetError, Location};
use crate::weka::SourceFiles;

/// Operation names of LLM requests (`gen_ai.operation.name`).
pub(crate) const LLM_OPERATIONS: [&str; 3] = ["chat", "generate", "text_completion"];
/// Operation names the semantic conventions define that are not LLM requests.
const OTHER_OPERATIONS: [&str; 4] = ["invoke_agent", "create_agent", "execute_tool", "embeddings"];
/// Finish reasons that mark a tool-call turn (guidellm's list).
const TOOL_FINISH: [&str; 4] = ["tool_calls", "tool_call", "tool_use", "function_call"];

/// One validated span, with what the plan reads of its attributes.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) span_id: String,
    pub(crate) parent: Option<String>,
    pub(crate) name: String,
    pub(crate) start_ns: i64,
    pub(crate) end_ns: i64,
    /// Status code 2.
    pub(crate) error: bool,
    /// `gen_ai.operation.name`.
    pub(crate) operation: Option<String>,
    pub(crate) model: Option<String>,
    /// `gen_ai.usage.input_tokens` (or `prompt_tokens`).
    pub(crate) input_tokens: Option<u64>,
    /// `gen_ai.usage.output_tokens` (or `completion_tokens`).
    pub(crate) output_tokens: Option<u64>,
    /// The token counts were estimated from the messages (none recorded).
    pub(crate) estimated: bool,
    /// `gen_ai.agent.id`, else `gen_ai.agent.name`.
    pub(crate) agent_label: Option<String>,
    /// `gen_ai.agent.name`.
    pub(crate) agent_name: Option<String>,
    /// A finish reason marks a tool call.
    pub(crate) tool_use: bool,
    /// The recorded messages as keys; `None` without `gen_ai.input.messages`.
    pub(crate) prompt: Option<Prompt>,
    /// sha256 over start, end and the attributes: equal for exact duplicates.
    pub(crate) identity: [u8; 32],
    /// Where the span is: its line and field path.
    pub(crate) line: u64,
    pub(crate) field: String,
}

impl Span {
    /// An LLM request to replay (docs/specs/otel-genai-traces.md#3-building-the-plan, step 2): an LLM operation; without an operation, or with one
    /// the conventions do not define, a span with both token counts (guidellm) or a name starting with
    /// `chat ` (inference-perf).
    pub(crate) fn is_request(&self) -> bool {
        match self.operation.as_deref() {
            Some(op) if LLM_OPERATIONS.contains(&op) => true,
            Some(op) if OTHER_OPERATIONS.contains(&op) => false,
            _ => {
                (!self.estimated && self.input_tokens.is_some() && self.output_tokens.is_some())
                    || self.name.starts_with("chat ")
            }
        }
    }

    pub(crate) fn is_agent(&self) -> bool {
        self.operation.as_deref() == Some("invoke_agent")
    }
}

/// The spans of one session (a trace, or a session row).
#[derive(Debug, Clone)]
pub(crate) struct SessionSpans {
    pub(crate) id: String,
    pub(crate) file: PathBuf,
    /// Line of its first span (its row).
    pub(crate) line: u64,
    pub(crate) spans: Vec<Span>,
}

/// Where an error is: file, line, session and field.
struct Place<'a> {
    file: &'a Path,
    line: u64,
    session: Option<&'a str>,
}

impl Place<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> DatasetError {
        DatasetError::Invalid {
            location: Location {
                file: self.file.to_owned(),
                line: self.line,
                trace: self.session.map(str::to_owned),
                field: Some(field.into()),
                ..Location::default()
            },
            message: message.into(),
        }
    }
}

/// The sessions as they are collected.
#[derive(Default)]
struct Collector {
    sessions: Vec<SessionSpans>,
    /// Merged traces (OTLP and span rows) by trace id.
    by_trace: HashMap<String, usize>,
    /// Session rows by id, with their line.
    by_row: HashMap<String, (usize, u64)>,
}

impl Collector {
    fn merged(&mut self, trace_id: &str, file: &Path, line: u64) -> &mut SessionSpans {
        let slot = match self.by_trace.get(trace_id) {
            Some(&slot) => slot,
            None => {
                self.sessions.push(SessionSpans {
                    id: trace_id.to_owned(),
                    file: file.to_owned(),
                    line,
                    spans: Vec::new(),
                });
                self.by_trace
                    .insert(trace_id.to_owned(), self.sessions.len() - 1);
                self.sessions.len() - 1
            }
        };
        &mut self.sessions[slot]
    }
}

/// Reads every session of `files`.
pub(crate) fn read_sessions(files: &SourceFiles) -> Result<Vec<SessionSpans>, DatasetError> {
    let mut out = Collector::default();
    match files {
        SourceFiles::Jsonl(path) => read_file(path, &mut out)?,
        SourceFiles::Dir { files, .. } => {
            for path in files {
                let text =
                    std::fs::read_to_string(path).map_err(|e| DatasetError::io("read", path, e))?;
                read_document(path, &text, &mut out)?;
            }
        }
    }
    Ok(out.sessions)
}

fn read_file(path: &Path, out: &mut Collector) -> Result<(), DatasetError> {
    let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    if reader
        .fill_buf()
        .map_err(|e| DatasetError::io("read", path, e))?
        .starts_with(&[0x1f, 0x8b])
    {
        return Err(crate::format::gzipped(path));
    }
    let (mut text, mut line) = (String::new(), 0u64);
    loop {
        text.clear();
        let read = reader
            .read_line(&mut text)
            .map_err(|e| DatasetError::io("read", path, e))?;
        if read == 0 {
            return Ok(());
        }
        line += 1;
        if text.trim().is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(text.trim()) {
            Ok(value) => value,
            Err(_) if out.sessions.is_empty() => {
                // Not one record per line: the whole file is one document.
                let mut whole = text.clone();
                reader
                    .read_to_string(&mut whole)
                    .map_err(|e| DatasetError::io("read", path, e))?;
                let lead = "\n".repeat(line as usize - 1);
                return read_document(path, &(lead + &whole), out);
            }
            Err(e) => {
                return Err(Place {
                    file: path,
                    line,
                    session: None,
                }
                .err(
                    ".",
                    format!("not JSON ({e}); an OTel JSONL corpus is one JSON object per line"),
                ))
            }
        };
        read_record(path, line, value, out)?;
    }
}

/// One JSON document (a `*.json` file, or a file that is not JSONL).
fn read_document(path: &Path, text: &str, out: &mut Collector) -> Result<(), DatasetError> {
    let value: Value = serde_json::from_str(text).map_err(|e| DatasetError::Invalid {
        location: Location {
            file: path.to_owned(),
            line: e.line() as u64,
            column: e.column() as u64,
            ..Location::default()
        },
        message: format!(
            "not JSON ({e}); an OTel trace file is one JSON object (OTLP or {{trace_id, spans}})"
        ),
    })?;
    let line = text.lines().position(|l| !l.trim().is_empty()).unwrap_or(0) as u64 + 1;
    read_record(path, line, value, out)
}

fn read_record(
    path: &Path,
    line: u64,
    value: Value,
    out: &mut Collector,
) -> Result<(), DatasetError> {
    let place = Place {
        file: path,
        line,
        session: None,
    };
    let Value::Object(record) = value else {
        return Err(place.err(".", "not a JSON object; an OTel record is an object"));
    };
    if let Some(batches) = record.get("resourceSpans") {
        return read_otlp(&place, batches, out);
    }
    if let Some(spans) = record.get("spans") {
        return read_row(&place, &record, spans, out);
    }
    if record.contains_key("span_id") {
        let span = flat_span(&place, "", &record)?;
        let trace = string_field(&place, &record, "trace_id", "")?;
        out.merged(&trace, path, line).spans.push(span);
        return Ok(());
    }
    let mut keys: Vec<&str> = record.keys().map(String::as_str).collect();
    keys.truncate(12);
    Err(place.err(
        ".",
        format!(
            "not an OTel record (keys: {}): give an OTLP ExportTraceServiceRequest \
             (`resourceSpans`), a session row (`trace_id` or `session_id` with `spans`) or a span \
             (`trace_id`, `span_id`)",
            keys.join(", ")
        ),
    ))
}

/// A session row: `{trace_id|session_id, spans}` (session-per-line, or inference-perf's
/// file-per-trace object).
fn read_row(
    place: &Place<'_>,
    record: &Map<String, Value>,
    spans: &Value,
    out: &mut Collector,
) -> Result<(), DatasetError> {
    let Value::Array(spans) = spans else {
        return Err(place.err("spans", "must be a list of spans"));
    };
    let trace_id = match record.get("trace_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(place.err("trace_id", format!("must be a string, got {other}"))),
    };
    let id = match (record.get("session_id").and_then(Value::as_str), &trace_id) {
        (Some(s), _) if !s.is_empty() => s.to_owned(),
        (_, Some(t)) if !t.is_empty() => t.clone(),
        _ => format!("line-{}", place.line),
    };
    if let Some(&(_, first)) = out.by_row.get(&id) {
        return Err(place.err(
            "session_id",
            format!(
                "session {id:?} is also the session of line {first}; give each row its own \
                 session_id (or trace_id)"
            ),
        ));
    }
    let session_place = Place {
        session: Some(&id),
        ..*place
    };
    let mut session = SessionSpans {
        id: id.clone(),
        file: place.file.to_owned(),
        line: place.line,
        spans: Vec::with_capacity(spans.len()),
    };
    for (i, span) in spans.iter().enumerate() {
        let field = format!("spans[{i}]");
        let Value::Object(obj) = span else {
            return Err(session_place.err(field, "a span must be a JSON object"));
        };
        let span = flat_span(&session_place, &field, obj)?;
        if let (Some(row), Some(Value::String(own))) = (&trace_id, obj.get("trace_id")) {
            if own != row {
                return Err(session_place.err(
                    format!("{field}.trace_id"),
                    format!(
                        "span {:?} has trace_id {own:?} in a row of trace_id {row:?}; a session \
                         row holds the spans of its own trace: move the span to its trace's row",
                        span.span_id
                    ),
                ));
            }
        }
        session.spans.push(span);
    }
    out.by_row.insert(id, (out.sessions.len(), place.line));
    out.sessions.push(session);
    Ok(())
}

/// The spans of one `ExportTraceServiceRequest`, merged into their traces.
fn read_otlp(place: &Place<'_>, batches: &Value, out: &mut Collector) -> Result<(), DatasetError> {
    let list = |value: Option<&Value>, field: &str| -> Result<Vec<Value>, DatasetError> {
        match value {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(other) => Err(place.err(field, format!("must be a list, got {other}"))),
        }
    };
    for (r, resource) in list(Some(batches), "resourceSpans")?.iter().enumerate() {
        let scope_field = format!("resourceSpans[{r}].scopeSpans");
        for (s, scope) in list(resource.get("scopeSpans"), &scope_field)?
            .iter()
            .enumerate()
        {
            let spans_field = format!("{scope_field}[{s}].spans");
            for (i, span) in list(scope.get("spans"), &spans_field)?.iter().enumerate() {
                let field = format!("{spans_field}[{i}]");
                let Value::Object(obj) = span else {
                    return Err(place.err(field, "a span must be a JSON object"));
                };
                let trace = hex_id(place, obj, "traceId", &field, 32)?;
                let span = otlp_span(place, &field, obj)?;
                out.merged(&trace, place.file, place.line).spans.push(span);
            }
        }
    }
    Ok(())
}

fn string_field(
    place: &Place<'_>,
    obj: &Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<String, DatasetError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        other => Err(place.err(
            join(field, key),
            format!("must be a non-empty string, got {}", shown(other)),
        )),
    }
}

fn hex_id(
    place: &Place<'_>,
    obj: &Map<String, Value>,
    key: &str,
    field: &str,
    len: usize,
) -> Result<String, DatasetError> {
    let id = string_field(place, obj, key, field)?;
    if id.len() != len || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(place.err(
            join(field, key),
            format!(
                "{id:?} is not {len} hex digits; OTLP/JSON writes ids as lowercase hex (not base64 \
                 as proto-JSON does): re-export with the collector's file exporter"
            ),
        ));
    }
    Ok(id.to_ascii_lowercase())
}

fn join(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_owned()
    } else {
        format!("{field}.{key}")
    }
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "nothing".to_owned(), Value::to_string)
}

/// The fields both layers share, before validation.
struct RawSpan {
    span_id: String,
    parent: Option<String>,
    name: String,
    start_ns: i64,
    end_ns: i64,
    status: u8,
    attributes: Map<String, Value>,
}

fn otlp_span(
    place: &Place<'_>,
    field: &str,
    obj: &Map<String, Value>,
) -> Result<Span, DatasetError> {
    let span_id = hex_id(place, obj, "spanId", field, 16)?;
    let parent = match obj.get("parentSpanId") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(_) => Some(hex_id(place, obj, "parentSpanId", field, 16)?),
    };
    let at = |key: &str| -> Result<i64, DatasetError> {
        let nanos = match obj.get(key) {
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(Value::Number(n)) => n.as_u64(),
            _ => None,
        };
        match nanos.and_then(|n| i64::try_from(n).ok()).filter(|&n| n > 0) {
            Some(n) => Ok(n),
            None => Err(place.err(
                join(field, key),
                format!(
                    "span {span_id:?}: must be nanoseconds since the epoch (a decimal string or a \
                     number, above 0), got {}",
                    shown(obj.get(key))
                ),
            )),
        }
    };
    let (start_ns, end_ns) = (at("startTimeUnixNano")?, at("endTimeUnixNano")?);
    match obj.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|k| k <= 5) => {}
        Some(other) => {
            return Err(place.err(
                join(field, "kind"),
                format!(
                    "span {span_id:?}: kind {other} is not an OTLP span kind (0 unspecified, 1 \
                     internal, 2 server, 3 client, 4 producer, 5 consumer)"
                ),
            ))
        }
    }
    let mut attributes = Map::new();
    if let Some(list) = obj.get("attributes") {
        decode_kvs(list, &mut attributes).map_err(|message| {
            place.err(
                join(field, "attributes"),
                format!("span {span_id:?}: {message}"),
            )
        })?;
    }
    let raw = RawSpan {
        status: status_code(place, field, &span_id, obj.get("status"))?,
        span_id,
        parent,
        name: obj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        start_ns,
        end_ns,
        attributes,
    };
    finish(place, field, raw)
}

/// An OTLP `KeyValue` list into `out` (typed values decoded).
fn decode_kvs(list: &Value, out: &mut Map<String, Value>) -> Result<(), String> {
    let Value::Array(items) = list else {
        return Err(format!(
            "attributes must be a list of {{key, value}}, got {list}"
        ));
    };
    for item in items {
        let key = item
            .get("key")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("an attribute without a string `key`: {item}"))?;
        let value = match item.get("value") {
            None | Some(Value::Null) => Value::Null,
            Some(v) => any_value(v).map_err(|e| format!("attribute {key:?}: {e}"))?,
        };
        out.insert(key.to_owned(), value);
    }
    Ok(())
}

/// An OTLP `AnyValue` as plain JSON.
fn any_value(value: &Value) -> Result<Value, String> {
    let Value::Object(obj) = value else {
        return Err(format!("an AnyValue must be an object, got {value}"));
    };
    if let Some(v) = obj.get("stringValue") {
        return Ok(v.clone());
    }
    if let Some(v) = obj.get("boolValue") {
        return Ok(v.clone());
    }
    if let Some(v) = obj.get("intValue") {
        return match v {
            Value::String(s) => s
                .trim()
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| format!("intValue {s:?} is not an int64")),
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok(v.clone()),
            other => Err(format!("intValue {other} is not an int64")),
        };
    }
    if let Some(v) = obj.get("doubleValue") {
        return Ok(v.clone());
    }
    if let Some(v) = obj.get("bytesValue") {
        return Ok(v.clone());
    }
    if let Some(array) = obj.get("arrayValue") {
        let values = array.get("values").and_then(Value::as_array);
        let decoded: Result<Vec<Value>, String> =
            values.into_iter().flatten().map(any_value).collect();
        return decoded.map(Value::Array);
    }
    if let Some(list) = obj.get("kvlistValue") {
        let mut out = Map::new();
        decode_kvs(
            list.get("values").unwrap_or(&Value::Array(Vec::new())),
            &mut out,
        )?;
        return Ok(Value::Object(out));
    }
    Ok(Value::Null)
}

fn status_code(
    place: &Place<'_>,
    field: &str,
    span_id: &str,
    status: Option<&Value>,
) -> Result<u8, DatasetError> {
    let code = status.and_then(|s| s.get("code"));
    let parsed = match code {
        None | Some(Value::Null) => Some(0),
        Some(Value::Number(n)) => n.as_u64().filter(|&c| c <= 2).map(|c| c as u8),
        Some(Value::String(s)) => match s.trim().to_ascii_uppercase().as_str() {
            "STATUS_CODE_UNSET" | "UNSET" => Some(0),
            "STATUS_CODE_OK" | "OK" => Some(1),
            "STATUS_CODE_ERROR" | "ERROR" => Some(2),
            _ => None,
        },
        Some(_) => None,
    };
    parsed.ok_or_else(|| {
        place.err(
            join(field, "status.code"),
            format!(
                "span {span_id:?}: status code {} is outside 0..=2 (0 unset, 1 ok, 2 error)",
                shown(code)
            ),
        )
    })
}

fn flat_span(
    place: &Place<'_>,
    field: &str,
    obj: &Map<String, Value>,
) -> Result<Span, DatasetError> {
    let span_id = string_field(place, obj, "span_id", field)?;
    let parent = match obj.get("parent_span_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(place.err(
                join(field, "parent_span_id"),
                format!("span {span_id:?}: must be a span id string or null, got {other}"),
            ))
        }
    };
    let at = |key: &str| -> Result<i64, DatasetError> {
        let value = obj.get(key);
        let parsed = match value {
            Some(Value::String(s)) => iso_nanos(s),
            _ => None,
        };
        parsed.ok_or_else(|| {
            let hint = if matches!(value, Some(Value::Number(_))) {
                "; numeric unix times are OTLP's *UnixNano fields, a flattened span's times are \
                 strings"
            } else {
                ""
            };
            place.err(
                join(field, key),
                format!(
                    "span {span_id:?}: must be an ISO-8601 time (e.g. 2026-02-25T10:00:00.000000, \
                     naive is UTC, or with Z or an offset), got {}{hint}",
                    shown(value)
                ),
            )
        })
    };
    let (start_ns, end_ns) = (at("start_time")?, at("end_time")?);
    match obj.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if flat_kind(s) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|k| k <= 5) => {}
        Some(other) => {
            return Err(place.err(
                join(field, "kind"),
                format!(
                    "span {span_id:?}: kind {other} is not a span kind (SPAN_KIND_INTERNAL, \
                     SERVER, CLIENT, PRODUCER, CONSUMER or UNSPECIFIED)"
                ),
            ))
        }
    }
    let attributes = match obj.get("attributes") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            return Err(place.err(
                join(field, "attributes"),
                format!("span {span_id:?}: must be an object of attributes, got {other}"),
            ))
        }
    };
    let raw = RawSpan {
        status: status_code(place, field, &span_id, obj.get("status"))?,
        span_id,
        parent,
        name: obj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        start_ns,
        end_ns,
        attributes,
    };
    finish(place, field, raw)
}

fn flat_kind(kind: &str) -> bool {
    let upper = kind.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SPAN_KIND_").unwrap_or(&upper);
    matches!(
        bare,
        "UNSPECIFIED" | "INTERNAL" | "SERVER" | "CLIENT" | "PRODUCER" | "CONSUMER"
    )
}

/// ISO-8601 to nanoseconds since the epoch; a time without an offset is UTC.
pub(crate) fn iso_nanos(text: &str) -> Option<i64> {
    let text = text.trim();
    if let Ok(parsed) = chrono::DateTime::parse_from_rfc3339(text) {
        return parsed.timestamp_nanos_opt();
    }
    for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(parsed) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return parsed.and_utc().timestamp_nanos_opt();
        }
    }
    None
}

/// A token count: an integer >= 0 (a float with a fraction, a string or a negative number is
/// refused, as aiperf refuses it).
fn token_count(attributes: &Map<String, Value>, keys: [&str; 2]) -> Result<Option<u64>, String> {
    for key in keys {
        match attributes.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) => {
                if let Some(v) = n.as_u64() {
                    return Ok(Some(v));
                }
                if let Some(v) = n.as_f64().filter(|v| v.fract() == 0.0 && *v >= 0.0) {
                    return Ok(Some(v as u64));
                }
                return Err(format!(
                    "{key}: {n} is not a token count (a whole number >= 0)"
                ));
            }
            Some(other) => {
                return Err(format!(
                    "{key}: {other} is not a token count (a whole number >= 0)"
                ))
            }
        }
    }
    Ok(None)
}

fn text_attribute(attributes: &Map<String, Value>, key: &str) -> Option<String> {
    match attributes.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// Finish reasons: a list, or a JSON-encoded list, or one string.
fn tool_use(attributes: &Map<String, Value>) -> bool {
    let reasons = match attributes.get("gen_ai.response.finish_reasons") {
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(list)) => list,
            _ => vec![Value::String(s.clone())],
        },
        Some(Value::Array(list)) => list.clone(),
        _ => Vec::new(),
    };
    reasons
        .iter()
        .filter_map(Value::as_str)
        .any(|r| TOOL_FINISH.contains(&r.to_ascii_lowercase().as_str()))
}

/// Validates what both layers share and reads the attributes the plan needs.
fn finish(place: &Place<'_>, field: &str, raw: RawSpan) -> Result<Span, DatasetError> {
    let id = raw.span_id.clone();
    if raw.end_ns < raw.start_ns {
        return Err(place.err(
            join(field, "end_time"),
            format!(
                "span {id:?} ends {} ms before it starts; fix the span's end time",
                (raw.start_ns - raw.end_ns) as f64 / 1e6
            ),
        ));
    }
    let attributes = &raw.attributes;
    let attr_err =
        |message: String| place.err(join(field, "attributes"), format!("span {id:?}: {message}"));
    let input_tokens = token_count(
        attributes,
        ["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"],
    )
    .map_err(attr_err)?;
    let output_tokens = token_count(
        attributes,
        [
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
        ],
    )
    .map_err(attr_err)?;
    let prompt = messages::prompt_of(attributes).map_err(attr_err)?;
    let mut hasher = Sha256::new();
    hasher.update(raw.start_ns.to_le_bytes());
    hasher.update(raw.end_ns.to_le_bytes());
    let mut keys: Vec<&String> = attributes.keys().collect();
    keys.sort();
    for key in keys {
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(attributes[key].to_string().as_bytes());
        hasher.update([0]);
    }
    let agent_name = text_attribute(attributes, "gen_ai.agent.name");
    // inference-perf's fallback (IP-G:1211-1216): without recorded counts, len(text) // 4 per message.
    let (mut input_tokens, mut output_tokens, mut estimated) = (input_tokens, output_tokens, false);
    if let Some(prompt) = prompt.as_ref().filter(|_| input_tokens.is_none()) {
        let (input, output) = prompt.estimate();
        input_tokens = Some(input);
        output_tokens = output_tokens.or(output).or(Some(0));
        estimated = true;
    }
    Ok(Span {
        estimated,
        operation: text_attribute(attributes, "gen_ai.operation.name"),
        model: text_attribute(attributes, "gen_ai.request.model")
            .or_else(|| text_attribute(attributes, "gen_ai.response.model")),
        input_tokens,
        output_tokens,
        agent_label: text_attribute(attributes, "gen_ai.agent.id").or_else(|| agent_name.clone()),
        agent_name,
        tool_use: tool_use(attributes),
        prompt,
        identity: hasher.finalize().into(),
        line: place.line,
        field: field.to_owned(),
        span_id: raw.span_id,
        parent: raw.parent,
        name: raw.name,
        start_ns: raw.start_ns,
        end_ns: raw.end_ns,
        error: raw.status == 2,
    })
}
