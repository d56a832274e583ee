//! Corpus formats: which parser reads a source ([`Format`]), the options a format's content depends on
//! ([`FormatSpec`]: block size, the TraceLab join knobs), detection from a source's first record, and
//! the source file a JSONL format reads (`jsonl_path`). `super::any_format::scan` reads a source in
//! any of them.
//!
//! Every format becomes `ParsedTrace`s, the shape the weka parser produces, so the cache entry, the
//! views, prompt synthesis and the session-tree builder are the same for all of them:
//! - `weka` ([`super::weka`]): one trace per line (or per `*.json` file), hash ids numbered per trace.
//! - `mooncake` ([`super::mooncake`]): one request per line, grouped into sessions by `session_id`;
//!   hash ids are global to the corpus (the cache entry flags them, and block text is keyed by
//!   (seed, hash id) alone).
//! - `tracelab` ([`super::tracelab`]): one LLM round per line, grouped by `session_id`, block ids
//!   minted from the recorded prefix split, subagent sessions nested into their parents by timing
//!   containment.
//! - `dynamo` ([`super::dynamo`]): NVIDIA Dynamo's `dynamo.request.trace.v1` captures (JSONL or
//!   multi-member `.jsonl.gz`), sessions from `agent_context`, subagent sessions nested into their
//!   parents by Dynamo's own spawn/join rules; hash ids global to the corpus (rolling block hashes).
//! - `agentic-mooncake` ([`super::dynamo`]): Dynamo's Agentic Mooncake rows, v1 (`wait_for`) or v2
//!   (a `dynamo.agentic_mooncake` header line and `dependencies`); hash ids global to the corpus.
//! - `otel` ([`super::otel`]): OpenTelemetry GenAI spans (OTLP JSON or the flattened span dict),
//!   grouped into sessions by trace, block ids minted from the recorded messages' common prefix,
//!   subagents from nested `invoke_agent` spans.
//!
//! The cache key of a weka corpus is what it was before other formats existed; any other format's key
//! also covers its [`FormatSpec`] (so a changed block size or join knob builds another entry).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::DatasetError;
use super::weka::SourceFiles;

/// A corpus format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Session traces with requests and subagent entries (`traces.jsonl` or `*.json`).
    Weka,
    /// Mooncake: one request per JSONL row with `input_length` and `hash_ids`.
    Mooncake,
    /// TraceLab: one LLM round per JSONL row, joined into sessions.
    Tracelab,
    /// NVIDIA Dynamo's `dynamo.request.trace.v1` capture: one event per JSONL row.
    Dynamo,
    /// Dynamo's Agentic Mooncake: Mooncake rows with dependencies (v1 `wait_for`, v2 header and
    /// `dependencies`).
    #[serde(rename = "agentic-mooncake")]
    AgenticMooncake,
    /// OpenTelemetry GenAI traces: OTLP JSON or flattened spans, one session per trace.
    Otel,
}

impl Format {
    /// Every format, in the order messages list them.
    pub const ALL: [Format; 6] = [
        Format::Weka,
        Format::Mooncake,
        Format::Tracelab,
        Format::Dynamo,
        Format::AgenticMooncake,
        Format::Otel,
    ];

    /// aiperf's name for the loader of the format (`--custom-dataset-type`); for the two Dynamo
    /// formats, which no aiperf release reads, Dynamo's own `--trace-format` names; aiperf has no
    /// loader of OTel traces either, so that one is agentx's own name, `otel`.
    pub fn aiperf_loader(self) -> &'static str {
        match self {
            Format::Weka => "weka_trace",
            Format::Mooncake => "mooncake_trace",
            Format::Tracelab => "tracelab",
            Format::Dynamo => "dynamo",
            Format::AgenticMooncake => "agentic_mooncake",
            Format::Otel => "otel",
        }
    }

    /// The format of aiperf's loader name `name`, if it is one of these.
    pub fn of_aiperf_loader(name: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.aiperf_loader() == name)
    }

    /// The name `--format` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Weka => "weka",
            Format::Mooncake => "mooncake",
            Format::Tracelab => "tracelab",
            Format::Dynamo => "dynamo",
            Format::AgenticMooncake => "agentic-mooncake",
            Format::Otel => "otel",
        }
    }

    /// The names of every format, comma-separated.
    pub fn names() -> String {
        Format::ALL.map(Format::as_str).join(", ")
    }

    /// Whether a hash id names the same block of text in every trace of the corpus (Mooncake's ids;
    /// Dynamo's rolling block hashes, which name a whole prefix, mapped to one id space per corpus).
    pub fn global_hash_ids(self) -> bool {
        matches!(
            self,
            Format::Mooncake | Format::Dynamo | Format::AgenticMooncake
        )
    }

    /// Tokens per hash block when none is given: aiperf's defaults (512 for Mooncake traces, also
    /// Agentic Mooncake v1, 64 for TraceLab), 64 for OTel traces (as the public weka corpora); `None`
    /// for weka, whose traces say their own, and for Dynamo request traces, whose rows carry
    /// `trace_block_size`. An Agentic Mooncake v2 header's `block_size` wins over the default.
    pub fn default_block_size(self) -> Option<u32> {
        match self {
            Format::Weka | Format::Dynamo => None,
            Format::Mooncake | Format::AgenticMooncake => Some(512),
            Format::Tracelab | Format::Otel => Some(64),
        }
    }

    /// Whether a source in this format may be gzip-compressed (Dynamo's `.jsonl.gz` sinks).
    pub fn reads_gzip(self) -> bool {
        matches!(self, Format::Dynamo | Format::AgenticMooncake)
    }

    /// Whether the format's rows may declare their own block size, which a `--block-size` must then
    /// equal (Dynamo request traces, Agentic Mooncake v2).
    pub fn embeds_block_size(self) -> bool {
        matches!(self, Format::Dynamo | Format::AgenticMooncake)
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How TraceLab subagent sessions are joined to their parents (aiperf's
/// `AIPERF_DATASET_TRACELAB_*` environment knobs, read when a corpus is opened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracelabJoin {
    /// `AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN` (default true): nest recovered children; false keeps
    /// every session a flat trace.
    pub subagents: bool,
    /// `AIPERF_DATASET_TRACELAB_CODEX_SUBAGENT_JOIN` (default true): also join codex sessions by their
    /// coarse session-level spawn window.
    pub codex: bool,
    /// `AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS` (default 10000): the shortest spawning tool call taken as
    /// a subagent round trip.
    pub min_spawn_ms: u64,
}

impl Default for TracelabJoin {
    fn default() -> Self {
        TracelabJoin {
            subagents: true,
            codex: true,
            min_spawn_ms: 10_000,
        }
    }
}

impl TracelabJoin {
    /// The knobs from the environment (`get` reads a variable); a value that does not parse is an error
    /// naming the variable.
    pub(crate) fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, DatasetError> {
        let mut j = TracelabJoin::default();
        let flag = |name: &str, default: bool| -> Result<bool, DatasetError> {
            let Some(v) = get(name) else {
                return Ok(default);
            };
            match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" | "t" | "y" => Ok(true),
                "0" | "false" | "no" | "off" | "f" | "n" => Ok(false),
                _ => Err(DatasetError::Argument(format!(
                    "{name}={v:?} is not a boolean; set it to true or false"
                ))),
            }
        };
        j.subagents = flag("AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN", j.subagents)?;
        j.codex = flag("AIPERF_DATASET_TRACELAB_CODEX_SUBAGENT_JOIN", j.codex)?;
        if let Some(v) = get("AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS") {
            j.min_spawn_ms = v.trim().parse().map_err(|_| {
                DatasetError::Argument(format!(
                    "AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS={v:?} is not a whole number of milliseconds >= 0"
                ))
            })?;
        }
        Ok(j)
    }
}

/// A format with the options its content depends on. Stored in the import report of every entry of a
/// corpus that is not weka (`super::cache::ImportReport::corpus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatSpec {
    /// The format.
    pub format: Format,
    /// Tokens per hash block (Mooncake and TraceLab; weka traces say their own). For the Dynamo
    /// formats the `--block-size` given, which the rows' own must equal; `None`: the rows'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    /// TraceLab only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracelab: Option<TracelabJoin>,
    /// `--trace-block-size` (weka): every trace laid out in this many tokens per hash block, whatever
    /// its `block_size` says, as agentx-harness 1.0.12's CLI lays every trace out in 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_block_size: Option<u32>,
}

impl FormatSpec {
    /// The weka format.
    pub(crate) const WEKA: FormatSpec = FormatSpec {
        format: Format::Weka,
        block_size: None,
        tracelab: None,
        trace_block_size: None,
    };

    /// `format` with `block_size` (its default when `None`) and, for TraceLab, the join knobs of the
    /// process environment.
    pub fn resolve(format: Format, block_size: Option<u32>) -> Result<FormatSpec, DatasetError> {
        Self::resolve_with(format, block_size, |k| std::env::var(k).ok())
    }

    /// [`Self::resolve`] with the environment read through `get`.
    pub(crate) fn resolve_with(
        format: Format,
        block_size: Option<u32>,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<FormatSpec, DatasetError> {
        if block_size == Some(0) {
            return Err(DatasetError::Argument(
                "--block-size must be at least 1 (tokens per hash block)".into(),
            ));
        }
        if format == Format::Weka {
            if let Some(b) = block_size {
                return Err(DatasetError::Argument(format!(
                    "a block size ({b}: `dataset`'s --block-size, `run`'s --isl-block-size) does \
                     not apply to a weka corpus: each weka trace says its own block_size; drop the flag"
                )));
            }
            return Ok(FormatSpec::WEKA);
        }
        Ok(FormatSpec {
            format,
            block_size: if format.embeds_block_size() {
                block_size
            } else {
                block_size.or(format.default_block_size())
            },
            tracelab: match format {
                Format::Tracelab => Some(TracelabJoin::from_env(get)?),
                _ => None,
            },
            trace_block_size: None,
        })
    }

    /// This spec with every weka trace laid out in `trace_block_size`-token blocks
    /// (`--trace-block-size`; `None` keeps each trace's own). Only weka traces declare a block size:
    /// another format's is `--isl-block-size`.
    pub(crate) fn with_trace_block_size(
        mut self,
        trace_block_size: Option<u32>,
    ) -> Result<FormatSpec, DatasetError> {
        match trace_block_size {
            None => {}
            Some(0) => {
                return Err(DatasetError::Argument(
                    "--trace-block-size 0: give the tokens per hash block every trace is laid out \
                     in, e.g. --trace-block-size 64 (the harness CLI's layout)"
                        .into(),
                ))
            }
            Some(n) if self.format != Format::Weka => {
                return Err(DatasetError::Argument(format!(
                    "--trace-block-size {n} lays out weka traces, which declare their own block \
                     size; a {} corpus declares none: give its block size with --isl-block-size",
                    self.format
                )))
            }
            Some(_) => {}
        }
        self.trace_block_size = trace_block_size;
        Ok(self)
    }

    /// The block size of a Mooncake or TraceLab corpus (of a Dynamo corpus, the one given, else the
    /// default; its traces hold the one their rows declare).
    pub fn block_size(&self) -> u32 {
        self.block_size
            .or(self.format.default_block_size())
            .unwrap_or(64)
    }

    /// The digest the cache key is derived from: the source digest itself for weka laid out as its
    /// traces declare (keys of weka entries are unchanged), else sha256 over the format spec and the
    /// source digest (another format, or `--trace-block-size`).
    pub(crate) fn keyed_digest(&self, source_digest: &[u8; 32]) -> [u8; 32] {
        if *self == FormatSpec::WEKA {
            return *source_digest;
        }
        let mut h = Sha256::new();
        h.update(b"agentx-corpus-format\0");
        h.update(serde_json::to_vec(self).expect("a format spec serializes"));
        h.update(b"\0source\0");
        h.update(source_digest);
        h.finalize().into()
    }
}

/// The keys that mark each format's records. A weka trace has `requests`; a TraceLab round has all of
/// aiperf's detection keys; a Mooncake request has `input_length` (or one of the other input modes
/// aiperf's Mooncake model knows) and no `requests`.
const TRACELAB_KEYS: [&str; 6] = [
    "session_id",
    "round_index",
    "input_tokens_total",
    "prefix_tokens",
    "newly_append_tokens",
    "timing_events",
];
const MOONCAKE_KEYS: [&str; 5] = [
    "input_length",
    "text_input",
    "messages",
    "payload",
    "hash_ids",
];

/// The keys of an Agentic Mooncake v1 row beyond a Mooncake row's (Dynamo's `AgenticMooncakeRow`).
const AGENTIC_MOONCAKE_KEYS: [&str; 6] = [
    "wait_for",
    "prefix_reset",
    "tool_wait_ms",
    "request_kind",
    "branches",
    "tool_events",
];

/// The `schema` of a record: its own, or that of the `event` a sink envelope wraps.
fn schema_of(object: &serde_json::Map<String, serde_json::Value>) -> Option<&str> {
    object
        .get("schema")
        .and_then(|s| s.as_str())
        .or_else(|| object.get("event")?.get("schema")?.as_str())
}

/// The formats whose marks the object `object` carries.
fn matches(object: &serde_json::Map<String, serde_json::Value>) -> Vec<Format> {
    match schema_of(object) {
        // Any version: the parser refuses one it does not read, naming it.
        Some(s) if s.starts_with("dynamo.request.trace") => return vec![Format::Dynamo],
        Some(s) if s.starts_with("dynamo.agentic_mooncake") => {
            return vec![Format::AgenticMooncake]
        }
        _ => {}
    }
    let mut out = Vec::new();
    if object.contains_key("requests") {
        out.push(Format::Weka);
    }
    if TRACELAB_KEYS.iter().all(|k| object.contains_key(*k)) {
        out.push(Format::Tracelab);
    } else if MOONCAKE_KEYS.iter().any(|k| object.contains_key(*k))
        && !object.contains_key("requests")
    {
        let agentic = object.contains_key("request_id")
            && AGENTIC_MOONCAKE_KEYS
                .iter()
                .any(|k| object.contains_key(*k));
        out.push(if agentic {
            Format::AgenticMooncake
        } else {
            Format::Mooncake
        });
    }
    if otel_marks(object) {
        out.push(Format::Otel);
    }
    out
}

/// An OTel record: an OTLP `ExportTraceServiceRequest` (`resourceSpans`), a session row (a `spans`
/// list) or a flattened span (`trace_id` and `span_id`), without weka's `requests`.
pub(crate) fn otel_marks(object: &serde_json::Map<String, serde_json::Value>) -> bool {
    !object.contains_key("requests")
        && (object.contains_key("resourceSpans")
            || object.get("spans").is_some_and(serde_json::Value::is_array)
            || (object.contains_key("span_id") && object.contains_key("trace_id")))
}

/// The format of a JSON document whose first line is not a JSON object (a pretty-printed file, or
/// a directory's `*.json` file): otel when its first JSON value is an OTel record, else weka (whose
/// parser then says what is wrong).
pub(crate) fn document_format(path: &Path) -> Format {
    let Ok(file) = File::open(path) else {
        return Format::Weka;
    };
    let first = serde_json::Deserializer::from_reader(BufReader::new(file))
        .into_iter::<serde_json::Value>()
        .next();
    match first {
        Some(Ok(serde_json::Value::Object(obj))) if otel_marks(&obj) => Format::Otel,
        _ => Format::Weka,
    }
}

/// Detects the format of a source from its first record: a directory is weka, or otel when its first
/// `*.json` file is an OTel trace; a JSONL file is the one format whose marks its first non-empty line
/// carries (a `schema` of `dynamo.request.trace.*` or `dynamo.agentic_mooncake`, bare or in a sink
/// envelope's `event`, marks a Dynamo format; a Mooncake row with `request_id` and a dependency key is
/// Agentic Mooncake v1). A first line that is not a JSON object is otel when the file's first JSON
/// value is an OTel trace (a pretty-printed file), else weka; an object with an `id` and no other
/// format's marks is read as weka (whose parser then says what is wrong, where). Two formats' marks,
/// or none, is an error naming the formats. A gzip file is read through its decompressor; only the
/// Dynamo formats read one.
pub fn detect(files: &SourceFiles) -> Result<Format, DatasetError> {
    let path = match files {
        SourceFiles::Dir { files, .. } => {
            return Ok(files.first().map_or(Format::Weka, |f| document_format(f)))
        }
        SourceFiles::Jsonl(p) => p,
    };
    let gzip = is_gzip(path)?;
    let first = match first_line(path) {
        Err(DatasetError::Io { source, .. }) if gzip => {
            return Err(DatasetError::Argument(format!(
                "{}: gzip-compressed, and its first line does not decompress ({source}); only the \
                 {} and {} formats read gzip: decompress it first (`gunzip -k {}`)",
                path.display(),
                Format::Dynamo,
                Format::AgenticMooncake,
                path.display()
            )))
        }
        other => other?,
    };
    let Some((line, text)) = first else {
        return if gzip {
            Err(gzipped(path))
        } else {
            Ok(Format::Weka)
        };
    };
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(&text)
    else {
        return if gzip {
            Err(gzipped(path))
        } else {
            Ok(document_format(path))
        };
    };
    let found = matches(&obj);
    match found.as_slice() {
        [one] if gzip && !one.reads_gzip() => Err(gzipped(path)),
        [one] => Ok(*one),
        [] if gzip => Err(gzipped(path)),
        [] if obj.contains_key("id") => Ok(Format::Weka),
        _ => {
            let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            keys.truncate(12);
            Err(DatasetError::UnknownFormat {
                path: path.to_owned(),
                line,
                keys: keys.join(", "),
                matched: found
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(" and "),
                known: Format::names(),
            })
        }
    }
}

/// Whether `path` starts with the gzip magic bytes.
fn is_gzip(path: &Path) -> Result<bool, DatasetError> {
    let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
    let mut reader = BufReader::new(file);
    let head = reader
        .fill_buf()
        .map_err(|e| DatasetError::io("read", path, e))?;
    Ok(head.starts_with(&[0x1f, 0x8b]))
}

/// A reader of the text of `path`: a gzip file (every member of a multi-member one, as Dynamo's
/// segmented sinks write them) through its decompressor, any other file as is.
pub(crate) fn open_text(path: &Path) -> Result<Box<dyn BufRead>, DatasetError> {
    let gzip = is_gzip(path)?;
    let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
    Ok(if gzip {
        Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(BufReader::new(file)),
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 20, file))
    })
}

/// The first non-empty line of `path` (1-based number, trimmed text), `None` for an empty file; a
/// gzip file is decompressed.
fn first_line(path: &Path) -> Result<Option<(u64, String)>, DatasetError> {
    let mut reader = open_text(path)?;
    let mut line = String::new();
    let mut n = 0u64;
    loop {
        line.clear();
        let read = reader
            .read_line(&mut line)
            .map_err(|e| DatasetError::io("read", path, e))?;
        if read == 0 {
            return Ok(None);
        }
        n += 1;
        if !line.trim().is_empty() {
            return Ok(Some((n, line.trim().to_owned())));
        }
    }
}

/// The error of a gzip-compressed corpus.
pub(crate) fn gzipped(path: &Path) -> DatasetError {
    DatasetError::Argument(format!(
        "{}: gzip-compressed; agentx reads this format's JSONL itself (only dynamo and \
         agentic-mooncake sources may be gzip): decompress it first (`gunzip -k {}`)",
        path.display(),
        path.display()
    ))
}

/// The one JSONL file of a Mooncake, TraceLab or Dynamo source.
pub(crate) fn jsonl_path(files: &SourceFiles, format: Format) -> Result<&Path, DatasetError> {
    match files {
        SourceFiles::Jsonl(p) => Ok(p),
        SourceFiles::Dir { dir, .. } => Err(DatasetError::Argument(format!(
            "{}: a {format} corpus is one JSONL file (one record per line), not a directory; pass the \
             file, or --format weka for a directory of weka *.json traces",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(s: &str) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn marks_pick_one_format() {
        assert_eq!(matches(&obj(r#"{"id":"a","requests":[]}"#)), [Format::Weka]);
        assert_eq!(
            matches(&obj(
                r#"{"timestamp":0,"input_length":3,"output_length":1,"hash_ids":[1]}"#
            )),
            [Format::Mooncake]
        );
        let tl = r#"{"session_id":"s","round_index":0,"input_tokens_total":1,"prefix_tokens":0,
                     "newly_append_tokens":1,"timing_events":[]}"#;
        assert_eq!(matches(&obj(tl)), [Format::Tracelab]);
        assert!(matches(&obj(r#"{"foo":1}"#)).is_empty());
        for otel in [
            r#"{"resourceSpans":[]}"#,
            r#"{"trace_id":"t","spans":[]}"#,
            r#"{"session_id":"s","harness":"h","spans":[]}"#,
            r#"{"trace_id":"t","span_id":"a","start_time":"2026-01-01T00:00:00"}"#,
        ] {
            assert_eq!(matches(&obj(otel)), [Format::Otel], "{otel}");
        }
        assert_eq!(
            matches(&obj(r#"{"id":"a","requests":[],"spans":[]}"#)),
            [Format::Weka]
        );
        assert_eq!(
            matches(&obj(r#"{"requests":[],"input_length":1}"#)),
            [Format::Weka]
        );
    }

    #[test]
    fn a_gzipped_corpus_names_the_command_that_decompresses_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl.gz");
        std::fs::write(&p, [0x1f, 0x8b, 8, 0, 0, 0]).unwrap();
        let e = detect(&SourceFiles::Jsonl(p)).unwrap_err().to_string();
        assert!(e.contains("gunzip -k"), "{e}");
    }

    #[test]
    fn weka_keys_are_unchanged_and_other_formats_differ() {
        let d = [7u8; 32];
        assert_eq!(FormatSpec::WEKA.keyed_digest(&d), d);
        let m = FormatSpec::resolve_with(Format::Mooncake, None, |_| None).unwrap();
        assert_eq!(m.block_size, Some(512));
        let m2 = FormatSpec::resolve_with(Format::Mooncake, Some(16), |_| None).unwrap();
        assert_ne!(m.keyed_digest(&d), d);
        assert_ne!(m.keyed_digest(&d), m2.keyed_digest(&d));
    }

    #[test]
    fn a_trace_block_size_keys_another_weka_entry_and_only_weka_takes_one() {
        let d = [7u8; 32];
        let laid = FormatSpec::WEKA.with_trace_block_size(Some(64)).unwrap();
        assert_ne!(laid.keyed_digest(&d), d);
        let other = FormatSpec::WEKA.with_trace_block_size(Some(32)).unwrap();
        assert_ne!(laid.keyed_digest(&d), other.keyed_digest(&d));
        assert_eq!(
            FormatSpec::WEKA
                .with_trace_block_size(None)
                .unwrap()
                .keyed_digest(&d),
            d
        );
        let zero = FormatSpec::WEKA.with_trace_block_size(Some(0)).unwrap_err();
        assert!(zero.to_string().contains("--trace-block-size 0"), "{zero}");
        let m = FormatSpec::resolve_with(Format::Mooncake, None, |_| None).unwrap();
        let e = m.with_trace_block_size(Some(64)).unwrap_err().to_string();
        assert!(e.contains("--isl-block-size"), "{e}");
    }

    #[test]
    fn tracelab_knobs_come_from_the_environment() {
        let env = |k: &str| match k {
            "AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN" => Some("false".to_owned()),
            "AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS" => Some("500".to_owned()),
            _ => None,
        };
        let s = FormatSpec::resolve_with(Format::Tracelab, None, env).unwrap();
        let j = s.tracelab.unwrap();
        assert!(!j.subagents && j.codex);
        assert_eq!(j.min_spawn_ms, 500);
        assert_eq!(s.block_size, Some(64));
        let bad =
            |k: &str| (k == "AIPERF_DATASET_TRACELAB_CODEX_SUBAGENT_JOIN").then(|| "maybe".into());
        let e = FormatSpec::resolve_with(Format::Tracelab, None, bad).unwrap_err();
        assert!(e
            .to_string()
            .contains("AIPERF_DATASET_TRACELAB_CODEX_SUBAGENT_JOIN"));
        assert!(FormatSpec::resolve_with(Format::Weka, Some(8), |_| None).is_err());
    }
}
