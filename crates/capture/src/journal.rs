//! The capture journal (`capture.jsonl`): one line per finished (or broken) request, appended the
//! moment its response ends, so a killed capture keeps every request it saw. The corpus is built
//! from it ([`crate::corpus`]). A line holds counts, times and block ids; text only under
//! `--keep-text`.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The journal's file name in a capture directory.
pub const JOURNAL_FILE: &str = "capture.jsonl";

/// One captured request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedRequest {
    /// Arrival order.
    pub seq: u64,
    /// The session (tree) it belongs to.
    pub root: String,
    /// Its stream.
    pub stream: String,
    /// The stream's parent stream (subagents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// How the session was known (`header:<profile>`, `structure`).
    pub identity: String,
    /// `chat`, `anthropic` or `responses`.
    pub api: String,
    /// The model asked for.
    pub model: String,
    /// Whether the reply streamed.
    pub streaming: bool,
    /// Unix seconds when the request arrived at the proxy.
    pub arrived_s: f64,
    /// Unix seconds when it was sent upstream.
    pub sent_s: f64,
    /// Unix seconds of the reply's first output (streamed replies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_s: Option<f64>,
    /// Unix seconds when the reply ended (or broke).
    pub end_s: f64,
    /// The HTTP status upstream answered (0: no answer).
    pub status: u16,
    /// Prompt tokens: the upstream's usage, else the tokenizer's count of the prompt.
    pub input_tokens: u64,
    /// Where `input_tokens` came from: `usage` or `tokenizer`.
    pub input_source: String,
    /// Output tokens: the upstream's usage, else the tokenizer's count of the reply.
    pub output_tokens: u64,
    /// Tokens of the tool definitions.
    pub tool_tokens: u64,
    /// Tokens of the system prompt.
    pub system_tokens: u64,
    /// The chained id of each full block of the prompt ([`crate::wire::block_chain`]).
    pub blocks: Vec<u64>,
    /// The new content's types.
    pub input_types: Vec<String>,
    /// The reply's types (`text`, `thinking`, `tool_use`).
    pub output_types: Vec<String>,
    /// The stop reason in weka's words (`end_turn`, `tool_use`, `max_tokens`, or as sent).
    pub stop: String,
    /// Why the exchange broke (upstream failed mid-stream, an error status, the client left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken: Option<String>,
    /// The request body and the reply text (`--keep-text` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<CapturedText>,
}

/// The text of a request, kept only when asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapturedText {
    /// The request body as sent.
    pub request: serde_json::Value,
    /// The reply's text.
    pub reply: String,
}

/// Appends journal lines.
pub struct JournalWriter {
    file: File,
}

impl JournalWriter {
    /// Opens (or continues) the journal in `dir`.
    pub fn open(dir: &Path) -> std::io::Result<JournalWriter> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(JOURNAL_FILE))?;
        Ok(JournalWriter { file })
    }

    /// Appends one request as a line, written through.
    pub fn append(&mut self, request: &CapturedRequest) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(request)?;
        line.push(b'\n');
        self.file.write_all(&line)
    }
}

/// Why a journal could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The journal.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line that is not a captured request (a torn last line is skipped, not this).
    #[error("{path}:{line}: not a captured request ({reason}); the journal is damaged")]
    Line {
        /// The journal.
        path: String,
        /// The 1-based line.
        line: usize,
        /// The parser's words.
        reason: String,
    },
}

/// Every request of the journal in `dir`, in arrival order; a torn last line (a killed capture)
/// is left out and counted.
pub fn read(dir: &Path) -> Result<(Vec<CapturedRequest>, usize), JournalError> {
    let path = dir.join(JOURNAL_FILE);
    let shown = path.display().to_string();
    let file = File::open(&path).map_err(|source| JournalError::Io {
        path: shown.clone(),
        source,
    })?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|source| JournalError::Io {
            path: shown.clone(),
            source,
        })?;
    let mut requests = Vec::with_capacity(lines.len());
    let mut torn = 0;
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<CapturedRequest>(line) {
            Ok(request) => requests.push(request),
            Err(_) if index + 1 == lines.len() => torn += 1,
            Err(error) => {
                return Err(JournalError::Line {
                    path: shown,
                    line: index + 1,
                    reason: error.to_string(),
                })
            }
        }
    }
    requests.sort_by_key(|request| request.seq);
    Ok((requests, torn))
}
