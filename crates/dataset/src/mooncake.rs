//! The Mooncake trace format: one request per JSONL line (`timestamp`, `input_length`,
//! `output_length`, `hash_ids`, as the Mooncake project publishes them; optionally `session_id` and
//! `delay`, as aiperf's `mooncake_trace` loader reads them), grouped into sessions and turned into
//! [`ParsedTrace`]s.
//!
//! As aiperf reads a Mooncake file: a line without `session_id` is a session of its own; lines that
//! share a `session_id` are the turns of one session, in file order, and sessions are in the order of
//! their first line. `timestamp` and `delay` are milliseconds. Each hash id is one block of
//! `block_size` tokens (512 by default, `--block-size`); the ids are global to the corpus (the same id
//! in two lines is the same block of text), which the cache entry records. A prompt of
//! `input_length` tokens is the blocks of its hash ids, the last one cut when `input_length` ends
//! inside it, then synthesized tokens past the last block.
//!
//! A session's turn starts at `(timestamp - first timestamp) / 1000` seconds when its lines have
//! timestamps, else at the sum of the delays before it; a `delay` is the turn's think time. A
//! generated session id is `line-N` (N the line of the request).
//!
//! A line without `output_length` is sent without a token limit, as aiperf sends it
//! (`ParsedRequest::no_output_limit`); its output is 0 wherever the corpus's output lengths count.
//!
//! Errors (file:line and field): a line that is not a JSON object, `input_length` missing or not a
//! positive integer, a hash id that is not an integer in 0..=2^32-1, more hash ids than
//! `input_length` reaches (aiperf refuses them too), and the input modes that carry a literal prompt
//! (`text_input`, `messages`, `payload`): the cache keeps token counts and hash ids, never text, so
//! they cannot be replayed. Lax numbers (`"3"`, `3.0`), a negative `output_length`, a negative or
//! non-finite `timestamp` or `delay` import with [`Warning`]s; an `output_length` of 0 or below (sent
//! as 1) with a `harness_schema` one, as agentx-harness refuses it (`--scenario agentx` does too).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{Map, Value};

use super::error::{DatasetError, Location};
use super::format::FormatSpec;
use super::warnings::{Warning, WarningKind};
use super::weka::{ParsedRequest, ParsedTrace, RequestKind};

/// One validated line.
#[derive(Debug, Clone)]
struct Row {
    line: u64,
    timestamp_ms: Option<f64>,
    delay_ms: Option<f64>,
    input: u32,
    /// `output_length`; `None` when the row has none (sent without a token limit).
    output: Option<u32>,
    hash_ids: Vec<u32>,
}

/// A session being assembled.
struct Session {
    id: String,
    rows: Vec<Row>,
    warnings: Vec<Warning>,
    location: Location,
}

/// Reads a field of one line: errors and warnings located at file:line, field.
struct Line<'a> {
    path: &'a Path,
    line: u64,
    obj: &'a Map<String, Value>,
    warnings: Vec<Warning>,
}

impl Line<'_> {
    fn location(&self, field: &str) -> Location {
        Location {
            file: self.path.to_owned(),
            line: self.line,
            field: Some(field.to_owned()),
            ..Location::default()
        }
    }

    fn err(&self, field: &str, message: impl Into<String>) -> DatasetError {
        DatasetError::Invalid {
            location: self.location(field),
            message: message.into(),
        }
    }

    fn warn(&mut self, kind: WarningKind, field: &str, message: String) {
        let location = self.location(field);
        self.warnings.push(Warning {
            kind,
            location,
            message,
        });
    }

    /// A number as pydantic's lax mode reads it (a JSON number, or a numeric string, with a warning).
    fn number(&mut self, field: &str) -> Result<Option<f64>, DatasetError> {
        let value = match self.obj.get(field) {
            None | Some(Value::Null) => return Ok(None),
            Some(value) => value,
        };
        let parsed = match value {
            Value::Number(parsed) => parsed.as_f64(),
            Value::String(s) => {
                let parsed = s.trim().parse::<f64>().ok();
                if parsed.is_some() {
                    self.warn(
                        WarningKind::CoercedNumber,
                        field,
                        format!(
                            "`{field}` is the string {s:?}, not a JSON number; read as its value"
                        ),
                    );
                }
                parsed
            }
            _ => None,
        };
        parsed
            .map(Some)
            .ok_or_else(|| self.err(field, format!("must be a number, got {value}")))
    }

    /// A whole number (an integral float reads as its value, with a warning).
    fn integer(&mut self, field: &str) -> Result<Option<i64>, DatasetError> {
        let Some(value) = self.number(field)? else {
            return Ok(None);
        };
        if value.fract() != 0.0 || !value.is_finite() || value.abs() > 9.0e15 {
            return Err(self.err(field, format!("must be a whole number, got {value}")));
        }
        if matches!(self.obj.get(field), Some(Value::Number(n)) if !n.is_i64() && !n.is_u64()) {
            self.warn(
                WarningKind::CoercedNumber,
                field,
                format!("`{field}` is {value} written as a float; read as the integer {value}"),
            );
        }
        Ok(Some(value as i64))
    }

    /// A time in milliseconds: negative or not finite is dropped with a warning.
    fn millis(&mut self, field: &str, kind: WarningKind) -> Result<Option<f64>, DatasetError> {
        let Some(value) = self.number(field)? else {
            return Ok(None);
        };
        if value.is_finite() && value >= 0.0 {
            return Ok(Some(value));
        }
        self.warn(
            kind,
            field,
            format!("`{field}` is {value}, not a finite number >= 0 (milliseconds); dropped"),
        );
        Ok(None)
    }

    fn hash_ids(&self) -> Result<Vec<u32>, DatasetError> {
        match self.obj.get("hash_ids") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(values)) => {
                hash_id_values(values).map_err(|(field, message)| self.err(&field, message))
            }
            Some(v) => Err(self.err("hash_ids", format!("must be a list of integers, got {v}"))),
        }
    }
}

/// A `hash_ids` list as this replay keeps it (each id in `0..=2^32-1`), or the first entry that is
/// not one: its field (`hash_ids[i]`) and what is wrong. Mooncake's and Dynamo's agentic Mooncake
/// lists share the rule.
pub(crate) fn hash_id_values(values: &[Value]) -> Result<Vec<u32>, (String, String)> {
    values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            value
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    (
                        format!("hash_ids[{index}]"),
                        format!(
                            "{value} is not a hash id this replay keeps (an integer in \
                             0..=2^32-1); renumber the corpus's hash ids"
                        ),
                    )
                })
        })
        .collect()
}

/// Validates one line into a row and its session id (`None`: a session of its own).
fn parse_row(
    path: &Path,
    line: u64,
    text: &str,
    block_size: u32,
) -> Result<(Row, Option<String>, Vec<Warning>), DatasetError> {
    let invalid_at = |field: Option<&str>, message: String| DatasetError::Invalid {
        location: Location {
            file: path.to_owned(),
            line,
            field: field.map(str::to_owned),
            ..Location::default()
        },
        message,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        invalid_at(
            None,
            format!("not JSON ({e}); a Mooncake trace is one JSON object per line"),
        )
    })?;
    let Value::Object(obj) = value else {
        return Err(invalid_at(
            None,
            "not a JSON object; a Mooncake trace is one request object per line".into(),
        ));
    };
    let mut parsed = Line {
        path,
        line,
        obj: &obj,
        warnings: Vec::new(),
    };
    for mode in ["text_input", "messages", "payload"] {
        if obj.get(mode).is_some_and(|v| !v.is_null()) {
            return Err(parsed.err(
                mode,
                format!(
                    "`{mode}` carries a literal prompt, which agentx cannot replay: its dataset cache \
                     keeps token counts and hash ids and synthesizes every prompt from them, never \
                     stored text (agentx-harness sends such rows verbatim). Give the row \
                     `input_length` (the prompt's token count) and, for prefix sharing, `hash_ids`, \
                     in place of `{mode}`"
                ),
            ));
        }
    }
    let session = match obj.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(parsed.err("session_id", format!("must be a string, got {v}"))),
    };
    let input = match parsed.integer("input_length")? {
        None => {
            return Err(parsed.err(
                "input_length",
                "missing: every request needs its input token count (`input_length`)",
            ))
        }
        Some(n) if n <= 0 || n > i64::from(u32::MAX) => {
            return Err(parsed.err(
                "input_length",
                format!("must be in 1..=2^32-1 tokens, got {n}"),
            ))
        }
        Some(n) => n as u32,
    };
    let output = match parsed.integer("output_length")? {
        None => None,
        Some(n) if n < 0 => {
            parsed.warn(
                WarningKind::NegativeTokens,
                "output_length",
                format!("`output_length` is {n}, a negative token count; read as 0"),
            );
            Some(0)
        }
        Some(n) => Some(
            u32::try_from(n)
                .map_err(|_| parsed.err("output_length", format!("{n} tokens is above 2^32-1")))?,
        ),
    };
    if output == Some(0) {
        parsed.warn(
            WarningKind::HarnessSchema,
            "output_length",
            "`output_length` is not a positive token count; sent as 1. agentx-harness 1.0.12 \
             refuses the row (a turn's max_tokens must be >= 1); give it at least 1, or leave \
             `output_length` out to send it without a token limit"
                .into(),
        );
    }
    let hash_ids = parsed.hash_ids()?;
    let reach = u64::from(input).div_ceil(u64::from(block_size));
    if hash_ids.len() as u64 > reach {
        return Err(parsed.err(
            "hash_ids",
            format!(
                "{} hash ids of {block_size} tokens, but input_length {input} fills only {reach} \
                 blocks (the last hash id must start before input_length); is the block size right? \
                 (--block-size, 512 by default)",
                hash_ids.len()
            ),
        ));
    }
    let timestamp_ms = parsed.millis("timestamp", WarningKind::InvalidTime)?;
    let delay_ms = parsed.millis("delay", WarningKind::InvalidDuration)?;
    let warnings = std::mem::take(&mut parsed.warnings);
    Ok((
        Row {
            line,
            timestamp_ms,
            delay_ms,
            input,
            output,
            hash_ids,
        },
        session,
        warnings,
    ))
}

/// Reads every line of `path` into sessions, in the order of their first line.
fn read_sessions(path: &Path, block_size: u32) -> Result<Vec<Session>, DatasetError> {
    let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut sessions: Vec<Session> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut text = String::new();
    let mut line = 0u64;
    loop {
        text.clear();
        if reader
            .read_line(&mut text)
            .map_err(|e| DatasetError::io("read", path, e))?
            == 0
        {
            break;
        }
        line += 1;
        if text.trim().is_empty() {
            continue;
        }
        let (row, session, warnings) = parse_row(path, line, text.trim(), block_size)?;
        let (session_id, explicit) = match session {
            Some(s) => (s, true),
            None => (format!("line-{line}"), false),
        };
        let location = Location {
            file: path.to_owned(),
            line,
            ..Location::default()
        };
        let slot = match by_id.get(&session_id) {
            Some(&slot) if explicit => slot,
            Some(&slot) => {
                return Err(DatasetError::Invalid {
                    location,
                    message: format!(
                        "this request has no session_id and its generated id {session_id:?} is already the \
                         session_id of line {}; rename that session",
                        sessions[slot].location.line
                    ),
                })
            }
            None => {
                by_id.insert(session_id.clone(), sessions.len());
                sessions.push(Session {
                    id: session_id,
                    rows: Vec::new(),
                    warnings: Vec::new(),
                    location,
                });
                sessions.len() - 1
            }
        };
        sessions[slot].rows.push(row);
        sessions[slot].warnings.extend(warnings);
    }
    Ok(sessions)
}

/// One session as a trace: turns in file order, start times relative to the session's first line.
fn session_trace(session: Session, block_size: u32) -> ParsedTrace {
    let mut warnings = session.warnings;
    let timed = session.rows.iter().all(|r| r.timestamp_ms.is_some());
    let origin = session
        .rows
        .first()
        .and_then(|r| r.timestamp_ms)
        .unwrap_or(0.0);
    let mut elapsed = 0.0f64;
    let mut last_t: Option<f64> = None;
    let mut requests = Vec::with_capacity(session.rows.len());
    for (k, r) in session.rows.iter().enumerate() {
        let think = r.delay_ms.map(|d| d / 1000.0);
        let start = if timed {
            (r.timestamp_ms.unwrap_or(origin) - origin) / 1000.0
        } else {
            if k > 0 {
                elapsed += think.unwrap_or(0.0);
            }
            elapsed
        };
        if let Some(last) = last_t.filter(|&l| start < l) {
            warnings.push(Warning {
                kind: WarningKind::DecreasingTime,
                location: Location {
                    file: session.location.file.clone(),
                    line: r.line,
                    trace: Some(session.id.clone()),
                    field: Some("timestamp".into()),
                    column: 0,
                },
                message: format!(
                    "request start times of the session decrease: {start} s after {last} s; replayed \
                     without a wait"
                ),
            });
        }
        last_t = Some(start);
        requests.push(ParsedRequest {
            index: k as u32,
            t: start,
            kind: RequestKind::Normal,
            model: String::new(),
            input: r.input,
            output: r.output.unwrap_or(0),
            no_output_limit: r.output.is_none(),
            hash_ids: r.hash_ids.clone(),
            input_types: vec!["text".into()],
            output_types: vec!["text".into()],
            stop: String::new(),
            api_time: None,
            think_time: think,
            ttft: None,
            recorded_api_time: None,
            recorded_think_time: think,
        });
    }
    ParsedTrace {
        id: session.id,
        models: Vec::new(),
        block_size,
        tool_tokens: 0,
        system_tokens: 0,
        requests,
        subagents: 0,
        subagent_peak: 0,
        subagent_entries: Vec::new(),
        location: session.location,
        warnings,
        explicit_sessions: false,
    }
}

/// Reads the sessions of a Mooncake trace file and hands each to `on_trace` until it answers
/// `Break`.
pub(crate) fn scan(
    path: &Path,
    spec: &FormatSpec,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    let block_size = spec.block_size();
    let sessions = read_sessions(path, block_size)?;
    if sessions.is_empty() {
        return Err(DatasetError::Empty {
            path: path.to_owned(),
        });
    }
    let mut count = 0usize;
    for s in sessions {
        count += 1;
        if on_trace(session_trace(s, block_size))?.is_break() {
            break;
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Format;

    fn parse(lines: &str) -> Result<Vec<ParsedTrace>, DatasetError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.jsonl");
        std::fs::write(&p, lines).unwrap();
        let spec = FormatSpec::resolve_with(Format::Mooncake, Some(4), |_| None).unwrap();
        let mut out = Vec::new();
        scan(&p, &spec, |t| {
            out.push(t);
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(out)
    }

    #[test]
    fn lines_group_by_session_in_first_line_order() {
        let t = parse(
            r#"{"timestamp": 1000, "input_length": 8, "output_length": 2, "hash_ids": [1, 2]}
{"session_id": "s", "timestamp": 1500, "input_length": 6, "output_length": 1, "hash_ids": [1, 2]}

{"session_id": "s", "timestamp": 3500, "delay": 1000, "input_length": 12, "output_length": 3, "hash_ids": [1, 2, 3]}
"#,
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].id, "line-1");
        assert_eq!(t[1].id, "s");
        assert_eq!(t[1].location.line, 2);
        let r = &t[1].requests;
        assert_eq!((r[0].t, r[1].t), (0.0, 2.0));
        assert_eq!(r[1].think_time, Some(1.0));
        assert_eq!(r[1].hash_ids, [1, 2, 3]);
        assert_eq!(t[1].block_size, 4);
    }

    #[test]
    fn bad_lines_name_file_line_and_field() {
        let e = parse("{\"input_length\": 4, \"output_length\": 1}\n{\"output_length\": 1}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.jsonl:2: input_length: missing"), "{e}");
        let e = parse(r#"{"input_length": 4, "output_length": 1, "hash_ids": [1, -2]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains(":1: hash_ids[1]"), "{e}");
        let e = parse(r#"{"input_length": 4, "output_length": 1, "hash_ids": [1, 2]}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--block-size"), "{e}");
        let e = parse(r#"{"text_input": "hi", "output_length": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains(":1: text_input"), "{e}");
        let e = parse("[1]\n").unwrap_err().to_string();
        assert!(e.contains(":1: not a JSON object"), "{e}");
    }

    #[test]
    fn lax_values_import_with_warnings() {
        let t =
            parse(r#"{"input_length": "5", "output_length": -1, "hash_ids": [3, 4], "delay": -3}"#)
                .unwrap();
        let kinds: Vec<_> = t[0].warnings.iter().map(|w| w.kind).collect();
        assert_eq!(
            kinds,
            [
                WarningKind::CoercedNumber,
                WarningKind::NegativeTokens,
                WarningKind::HarnessSchema,
                WarningKind::InvalidDuration
            ]
        );
        assert_eq!((t[0].requests[0].input, t[0].requests[0].output), (5, 0));
        assert!(!t[0].requests[0].no_output_limit);
    }

    #[test]
    fn a_row_without_output_length_has_no_limit() {
        let t = parse(
            r#"{"session_id": "s", "input_length": 8, "output_length": 3, "hash_ids": [1, 2]}
{"session_id": "s", "delay": 500, "input_length": 12, "hash_ids": [1, 2, 3]}
{"session_id": "s", "delay": 500, "input_length": 16, "output_length": null, "hash_ids": [1, 2, 3, 4]}
"#,
        )
        .unwrap();
        let limits: Vec<_> = t[0]
            .requests
            .iter()
            .map(|r| (r.output, r.no_output_limit))
            .collect();
        assert_eq!(limits, [(3, false), (0, true), (0, true)]);
        assert!(t[0].warnings.is_empty());
    }
}
