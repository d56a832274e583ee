//! The weka trace format: strict parsing and validation of `traces.jsonl` files and directories of
//! `*.json` traces into [`ParsedTrace`]s.
//!
//! Invariants of a trace that passes: known fields only, right types, `hash_id_scope` is `"local"`,
//! `block_size > 0`, ids unique within the source, request start times `t` finite, non-negative and
//! non-decreasing, durations (`think_time`, `api_time`, `ttft`) finite and non-negative, `in >= 1`,
//! hash ids fit in 32 bits, and the first request's hash ids cover the tools+system prefix. Subagent
//! entries are parsed with the same rigour and counted; the replay of this corpus does not use them.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::{DatasetError, Location};

/// Recorded transport of a request (`type` `"n"` or `"s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Normal,
    Streaming,
}

impl RequestKind {
    /// The weka `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Normal => "n",
            RequestKind::Streaming => "s",
        }
    }
}

/// One validated top-level request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    pub t: f64,
    pub kind: RequestKind,
    pub model: String,
    pub input: u32,
    pub output: u32,
    pub hash_ids: Vec<u32>,
    pub input_types: Vec<String>,
    pub output_types: Vec<String>,
    pub stop: String,
    pub api_time: Option<f64>,
    pub think_time: Option<f64>,
    pub ttft: Option<f64>,
}

/// One validated trace; subagent entries are counted, not kept.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTrace {
    pub id: String,
    pub models: Vec<String>,
    pub block_size: u32,
    pub tool_tokens: u32,
    pub system_tokens: u32,
    pub requests: Vec<ParsedRequest>,
    pub subagents: u32,
    /// Where the trace starts in its source.
    pub location: Location,
}

/// The files of a local corpus, in the order their traces are read.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceFiles {
    /// One trace per line.
    Jsonl(PathBuf),
    /// One trace per `*.json` file, read in file-name order.
    Dir { dir: PathBuf, files: Vec<PathBuf> },
}

impl SourceFiles {
    /// Classifies a path: a directory lists its `*.json` files (sorted); anything else is JSONL.
    pub fn from_path(path: &Path) -> Result<Self, DatasetError> {
        let meta = std::fs::metadata(path).map_err(|e| DatasetError::io("read", path, e))?;
        if !meta.is_dir() {
            return Ok(SourceFiles::Jsonl(path.to_owned()));
        }
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| DatasetError::io("list", path, e))? {
            let entry = entry.map_err(|e| DatasetError::io("list", path, e))?;
            let p = entry.path();
            if p.extension().is_some_and(|x| x == "json") && p.is_file() {
                files.push(p);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(DatasetError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(SourceFiles::Dir {
            dir: path.to_owned(),
            files,
        })
    }

    /// The path a user named.
    pub fn path(&self) -> &Path {
        match self {
            SourceFiles::Jsonl(p) => p,
            SourceFiles::Dir { dir, .. } => dir,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrace {
    id: String,
    #[serde(default)]
    models: Vec<String>,
    block_size: u32,
    hash_id_scope: String,
    #[serde(default)]
    tool_tokens: u32,
    #[serde(default)]
    system_tokens: u32,
    requests: Vec<RawEntry>,
    #[serde(default)]
    #[allow(dead_code)]
    totals: Option<serde::de::IgnoredAny>,
}

/// Request and subagent entries share one struct so `deny_unknown_fields` works without serde's
/// buffering of internally tagged enums (slow on large hash-id arrays); which fields a `type` allows is
/// checked after parsing.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    #[serde(rename = "type")]
    kind: String,
    t: Option<f64>,
    model: Option<String>,
    #[serde(rename = "in")]
    input: Option<u32>,
    #[serde(rename = "out")]
    output: Option<u32>,
    hash_ids: Option<Vec<u32>>,
    input_types: Option<Vec<String>>,
    output_types: Option<Vec<String>>,
    stop: Option<String>,
    api_time: Option<f64>,
    think_time: Option<f64>,
    ttft: Option<f64>,
    agent_id: Option<String>,
    subagent_type: Option<String>,
    duration_ms: Option<f64>,
    total_tokens: Option<u64>,
    tool_use_count: Option<u64>,
    status: Option<String>,
    requests: Option<Vec<RawEntry>>,
    models: Option<Vec<String>>,
    tool_tokens: Option<u32>,
    system_tokens: Option<u32>,
}

impl RawEntry {
    /// Names of the subagent-only fields present.
    fn subagent_fields(&self) -> impl Iterator<Item = &'static str> {
        [
            ("agent_id", self.agent_id.is_some()),
            ("subagent_type", self.subagent_type.is_some()),
            ("duration_ms", self.duration_ms.is_some()),
            ("total_tokens", self.total_tokens.is_some()),
            ("tool_use_count", self.tool_use_count.is_some()),
            ("status", self.status.is_some()),
            ("requests", self.requests.is_some()),
            ("models", self.models.is_some()),
            ("tool_tokens", self.tool_tokens.is_some()),
            ("system_tokens", self.system_tokens.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, p)| p.then_some(n))
    }

    /// Names of the request-only fields present.
    fn request_fields(&self) -> impl Iterator<Item = &'static str> {
        [
            ("model", self.model.is_some()),
            ("in", self.input.is_some()),
            ("out", self.output.is_some()),
            ("hash_ids", self.hash_ids.is_some()),
            ("input_types", self.input_types.is_some()),
            ("output_types", self.output_types.is_some()),
            ("stop", self.stop.is_some()),
            ("api_time", self.api_time.is_some()),
            ("think_time", self.think_time.is_some()),
            ("ttft", self.ttft.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, p)| p.then_some(n))
    }
}

/// Context for building errors about one trace.
struct Ctx<'a> {
    base: &'a Location,
    trace: &'a str,
}

impl Ctx<'_> {
    fn err(&self, field: String, message: impl Into<String>) -> DatasetError {
        let mut location = self.base.clone();
        location.trace = Some(self.trace.to_owned());
        location.field = Some(field);
        DatasetError::Invalid {
            location,
            message: message.into(),
        }
    }
}

fn check_duration(
    ctx: &Ctx<'_>,
    path: &str,
    name: &str,
    v: Option<f64>,
) -> Result<(), DatasetError> {
    match v {
        Some(x) if !x.is_finite() || x < 0.0 => Err(ctx.err(
            format!("{path}.{name}"),
            format!("must be a finite number >= 0 (seconds), got {x}"),
        )),
        _ => Ok(()),
    }
}

fn required<T>(
    ctx: &Ctx<'_>,
    path: &str,
    name: &str,
    v: Option<T>,
    kind: &str,
) -> Result<T, DatasetError> {
    v.ok_or_else(|| {
        ctx.err(
            format!("{path}.{name}"),
            format!("missing field `{name}`, required on a request of type {kind:?}"),
        )
    })
}

/// Validates one n/s entry (top-level or nested in a subagent) and converts it.
fn convert_request(ctx: &Ctx<'_>, path: &str, e: RawEntry) -> Result<ParsedRequest, DatasetError> {
    let kind = match e.kind.as_str() {
        "n" => RequestKind::Normal,
        "s" => RequestKind::Streaming,
        other => unreachable!("caller dispatches on type, got {other}"),
    };
    if let Some(f) = e.subagent_fields().next() {
        return Err(ctx.err(
            format!("{path}.{f}"),
            format!("field `{f}` belongs to subagent entries and is not allowed on a request of type {:?}", e.kind),
        ));
    }
    if kind == RequestKind::Normal && e.ttft.is_some() {
        return Err(ctx.err(
            format!("{path}.ttft"),
            "`ttft` is only recorded on streaming requests (type \"s\")",
        ));
    }
    let t = required(ctx, path, "t", e.t, &e.kind)?;
    if !t.is_finite() || t < 0.0 {
        return Err(ctx.err(
            format!("{path}.t"),
            format!("must be a finite number >= 0 (seconds), got {t}"),
        ));
    }
    let input = required(ctx, path, "in", e.input, &e.kind)?;
    if input == 0 {
        return Err(ctx.err(
            format!("{path}.in"),
            "must be >= 1: a request without input tokens cannot be replayed",
        ));
    }
    let output = required(ctx, path, "out", e.output, &e.kind)?;
    let hash_ids = required(ctx, path, "hash_ids", e.hash_ids, &e.kind)?;
    check_duration(ctx, path, "think_time", e.think_time)?;
    check_duration(ctx, path, "api_time", e.api_time)?;
    check_duration(ctx, path, "ttft", e.ttft)?;
    Ok(ParsedRequest {
        t,
        kind,
        model: e.model.unwrap_or_default(),
        input,
        output,
        hash_ids,
        input_types: e.input_types.unwrap_or_default(),
        output_types: e.output_types.unwrap_or_default(),
        stop: e.stop.unwrap_or_default(),
        api_time: e.api_time,
        think_time: e.think_time,
        ttft: e.ttft,
    })
}

fn bad_type(ctx: &Ctx<'_>, path: &str, kind: &str, allowed: &str) -> DatasetError {
    ctx.err(
        format!("{path}.type"),
        format!("type {kind:?} is not one of {allowed}"),
    )
}

/// Validates a subagent entry (its nested requests included); nothing of it is kept.
fn check_subagent(ctx: &Ctx<'_>, path: &str, e: RawEntry) -> Result<(), DatasetError> {
    if let Some(f) = e.request_fields().next() {
        return Err(ctx.err(
            format!("{path}.{f}"),
            format!("field `{f}` belongs to requests and is not allowed on a subagent entry"),
        ));
    }
    let t = e.t.ok_or_else(|| {
        ctx.err(
            format!("{path}.t"),
            "missing field `t`, required on a subagent entry",
        )
    })?;
    if !t.is_finite() || t < 0.0 {
        return Err(ctx.err(
            format!("{path}.t"),
            format!("must be a finite number >= 0 (seconds), got {t}"),
        ));
    }
    if let Some(d) = e.duration_ms {
        if !d.is_finite() || d < 0.0 {
            return Err(ctx.err(
                format!("{path}.duration_ms"),
                format!("must be a finite number >= 0, got {d}"),
            ));
        }
    }
    let inner = e.requests.ok_or_else(|| {
        ctx.err(
            format!("{path}.requests"),
            "missing field `requests`, required on a subagent entry",
        )
    })?;
    for (j, r) in inner.into_iter().enumerate() {
        let p = format!("{path}.requests[{j}]");
        match r.kind.as_str() {
            "n" | "s" => {
                convert_request(ctx, &p, r)?;
            }
            other => {
                return Err(bad_type(
                    ctx,
                    &p,
                    other,
                    "\"n\", \"s\" (subagents do not nest)",
                ))
            }
        }
    }
    Ok(())
}

fn convert_trace(raw: RawTrace, base: &Location) -> Result<ParsedTrace, DatasetError> {
    let ctx = Ctx {
        base,
        trace: &raw.id,
    };
    if raw.id.is_empty() {
        return Err(ctx.err("id".into(), "must be a non-empty string"));
    }
    if raw.hash_id_scope != "local" {
        return Err(ctx.err(
            "hash_id_scope".into(),
            format!(
                "{:?} is not supported; only \"local\" (hash ids numbered per trace) can be replayed",
                raw.hash_id_scope
            ),
        ));
    }
    if raw.block_size == 0 {
        return Err(ctx.err(
            "block_size".into(),
            "must be > 0 (tokens per hash block, 64 in public corpora)",
        ));
    }
    let mut requests = Vec::with_capacity(raw.requests.len());
    let mut subagents = 0u32;
    let mut last_t = f64::NEG_INFINITY;
    for (i, e) in raw.requests.into_iter().enumerate() {
        let path = format!("requests[{i}]");
        match e.kind.as_str() {
            "n" | "s" => {
                let r = convert_request(&ctx, &path, e)?;
                if r.t < last_t {
                    return Err(ctx.err(
                        format!("{path}.t"),
                        format!(
                            "request start times must not decrease: {} after {}",
                            r.t, last_t
                        ),
                    ));
                }
                last_t = r.t;
                requests.push(r);
            }
            "subagent" => {
                check_subagent(&ctx, &path, e)?;
                subagents += 1;
            }
            other => return Err(bad_type(&ctx, &path, other, "\"n\", \"s\", \"subagent\"")),
        }
    }
    let prefix = u64::from(raw.tool_tokens) + u64::from(raw.system_tokens);
    if let Some(first) = requests.first() {
        let blocks = prefix.div_ceil(u64::from(raw.block_size));
        if blocks > first.hash_ids.len() as u64 {
            return Err(ctx.err(
                "requests[0].hash_ids".into(),
                format!(
                    "the first request has {} hash ids, fewer than the {blocks} blocks of the tools+system \
                     prefix ({prefix} tokens of tool_tokens+system_tokens at block_size {})",
                    first.hash_ids.len(),
                    raw.block_size
                ),
            ));
        }
    }
    Ok(ParsedTrace {
        id: raw.id,
        models: raw.models,
        block_size: raw.block_size,
        tool_tokens: raw.tool_tokens,
        system_tokens: raw.system_tokens,
        requests,
        subagents,
        location: base.clone(),
    })
}

/// Strips serde_json's " at line L column C" suffix; the location is reported separately.
fn serde_message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

/// Best effort: the `id` of a trace that failed to parse, for the error message.
fn sniff_id(text: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct IdOnly {
        id: String,
    }
    serde_json::from_str::<IdOnly>(text).ok().map(|x| x.id)
}

/// Builds the located error of a trace that failed to parse.
fn parse_error(text: &str, base: &Location, plain: serde_json::Error) -> DatasetError {
    let de = &mut serde_json::Deserializer::from_str(text);
    let (path, inner) = match serde_path_to_error::deserialize::<_, RawTrace>(de) {
        Err(e) => (e.path().to_string(), e.into_inner()),
        // The object itself parsed: the error is text after it.
        Ok(_) => (".".to_owned(), plain),
    };
    let mut location = base.clone();
    // JSONL lines are one line each: keep the file line and report the column; a pretty-printed *.json
    // file reports serde's own line.
    if inner.line() > 1 || base.line == 0 {
        location.line = base.line.max(1) + inner.line() as u64 - 1;
    }
    location.column = inner.column() as u64;
    location.trace = sniff_id(text);
    location.field = (path != ".").then_some(path);
    let hint = if inner.is_syntax() || inner.is_eof() {
        "; each line of a traces.jsonl must be one complete JSON trace object"
    } else {
        ""
    };
    DatasetError::Invalid {
        location,
        message: format!("{}{hint}", serde_message(&inner)),
    }
}

/// Parses and validates one trace object from `text`; `base` locates `text` in its file (line of the
/// first character, 1-based).
pub fn parse_trace(text: &str, base: &Location) -> Result<ParsedTrace, DatasetError> {
    // The fast path parses without tracking paths; only a failing trace is parsed again with
    // serde_path_to_error to say which field broke.
    let raw: RawTrace = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(plain) => return Err(parse_error(text, base, plain)),
    };
    convert_trace(raw, base)
}

/// Reads traces in source order and hands each to `f`; stops after `limit` traces if given. Returns
/// the number of traces read. Duplicate trace ids are an error naming both places.
pub fn for_each_trace(
    source: &SourceFiles,
    limit: Option<usize>,
    mut f: impl FnMut(ParsedTrace) -> Result<(), DatasetError>,
) -> Result<usize, DatasetError> {
    let mut seen: HashMap<String, Location> = HashMap::new();
    let mut count = 0usize;
    let mut deliver = |t: ParsedTrace, count: &mut usize| -> Result<(), DatasetError> {
        if let Some(first) = seen.get(&t.id) {
            let mut location = t.location.clone();
            location.trace = Some(t.id.clone());
            location.field = Some("id".into());
            return Err(DatasetError::Invalid {
                location,
                message: format!(
                    "duplicate trace id (first at {}:{}); trace ids must be unique",
                    first.file.display(),
                    first.line
                ),
            });
        }
        seen.insert(t.id.clone(), t.location.clone());
        *count += 1;
        f(t)
    };
    match source {
        SourceFiles::Jsonl(path) => {
            let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut line = String::new();
            let mut lineno = 0u64;
            loop {
                if limit.is_some_and(|l| count >= l) {
                    break;
                }
                line.clear();
                let n = reader
                    .read_line(&mut line)
                    .map_err(|e| DatasetError::io("read", path, e))?;
                if n == 0 {
                    break;
                }
                lineno += 1;
                let text = line.trim();
                if text.is_empty() {
                    continue;
                }
                let base = Location {
                    file: path.clone(),
                    line: lineno,
                    ..Location::default()
                };
                let t = parse_trace(text, &base)?;
                deliver(t, &mut count)?;
            }
            if count == 0 {
                return Err(DatasetError::Empty { path: path.clone() });
            }
        }
        SourceFiles::Dir { files, .. } => {
            let mut buf = String::new();
            for path in files {
                if limit.is_some_and(|l| count >= l) {
                    break;
                }
                buf.clear();
                File::open(path)
                    .and_then(|mut f| f.read_to_string(&mut buf))
                    .map_err(|e| DatasetError::io("read", path, e))?;
                let base = Location {
                    file: path.clone(),
                    line: 1,
                    ..Location::default()
                };
                let t = parse_trace(&buf, &base)?;
                deliver(t, &mut count)?;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> Location {
        Location {
            file: "x.jsonl".into(),
            line: 3,
            ..Location::default()
        }
    }

    const OK: &str = r#"{"id":"a","models":["m"],"block_size":4,"hash_id_scope":"local","tool_tokens":3,"system_tokens":2,
      "requests":[{"t":0,"type":"n","model":"m","in":9,"out":2,"hash_ids":[1,2],"think_time":null},
                  {"t":1.5,"type":"subagent","agent_id":"agent_001","requests":[{"t":0,"type":"s","in":3,"out":1,"hash_ids":[7],"ttft":0.1}]},
                  {"t":2,"type":"s","in":12,"out":0,"hash_ids":[1,2,3],"ttft":0.2,"stop":"end_turn"}],
      "totals":{"subagent_count":1}}"#;

    #[test]
    fn parses_requests_and_counts_subagents() {
        let t = parse_trace(&OK.replace('\n', ""), &loc()).unwrap();
        assert_eq!(t.id, "a");
        assert_eq!(t.requests.len(), 2);
        assert_eq!(t.subagents, 1);
        assert_eq!(t.requests[1].kind, RequestKind::Streaming);
        assert_eq!(t.requests[1].hash_ids, vec![1, 2, 3]);
        assert_eq!(t.requests[0].think_time, None);
    }

    fn err_of(text: &str) -> String {
        parse_trace(&text.replace('\n', ""), &loc())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_field_and_trace() {
        let e = err_of(&OK.replace("\"out\":2", "\"out\":2,\"bogus\":1"));
        assert!(
            e.contains("x.jsonl:3")
                && e.contains("trace \"a\"")
                && e.contains("requests[0]")
                && e.contains("bogus"),
            "{e}"
        );
        let e = err_of(&OK.replace("\"local\"", "\"global\""));
        assert!(
            e.contains("hash_id_scope") && e.contains("\"global\""),
            "{e}"
        );
        let e = err_of(&OK.replace("{\"t\":0,\"type\":\"n\"", "{\"t\":3,\"type\":\"n\""));
        assert!(
            e.contains("requests[2].t") && e.contains("must not decrease"),
            "{e}"
        );
        let e = err_of(&OK.replace("\"in\":12", "\"in\":\"12\""));
        assert!(
            e.contains("requests[2].in") && e.contains("invalid type"),
            "{e}"
        );
        let e = err_of(&OK.replace("\"type\":\"n\"", "\"type\":\"x\""));
        assert!(e.contains("requests[0].type"), "{e}");
        let e = err_of(&OK.replace("\"think_time\":null", "\"think_time\":-1"));
        assert!(e.contains("requests[0].think_time"), "{e}");
        let e = err_of(&OK.replace("\"hash_ids\":[1,2]", "\"hash_ids\":[1]"));
        assert!(
            e.contains("requests[0].hash_ids") && e.contains("tools+system"),
            "{e}"
        );
        let e = err_of(&OK.replace("\"ttft\":0.1", "\"ttft\":0.1,\"agent_id\":\"x\""));
        assert!(e.contains("requests[1].requests[0].agent_id"), "{e}");
        let e = err_of(&OK[..40]);
        assert!(e.contains("x.jsonl:3:"), "{e}");
    }
}
