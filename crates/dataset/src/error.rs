//! The typed errors of the dataset module: where a trace is wrong, a source that cannot be found or read,
//! a cache that cannot be written, and the findings of a graph validator ([`Finding`]).
//!
//! Every message is lower-case and says what is wrong, where (file:line, trace id, request index and
//! field) and, where there is one, how to fix it.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Where in a source a problem sits: file, line (1-based, 0 if unknown), column, trace id, field path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Location {
    /// The source file (a traces file, or one `*.json` trace of a directory).
    pub file: PathBuf,
    /// 1-based line; 0 when unknown.
    pub line: u64,
    /// 1-based column; 0 when unknown.
    pub column: u64,
    /// The id of the trace the problem is in; `None` before the id is read.
    pub trace: Option<String>,
    /// A path into the trace object, e.g. `requests[3].think_time`.
    pub field: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.column > 0 {
                write!(f, ":{}", self.column)?;
            }
        }
        if let Some(t) = &self.trace {
            write!(f, ": trace {t:?}")?;
        }
        if let Some(p) = &self.field {
            write!(f, ": {p}")?;
        }
        Ok(())
    }
}

/// How serious a validator finding is: an error refuses the corpus, a warning is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The corpus is refused.
    Error,
    /// Reported; refused only under `--strict`.
    Warning,
}

/// One finding of a validator: the rule it breaks, where, what is wrong and how to fix it. The rule ids
/// are aiperf's where aiperf has the rule (`rule-9`, ...), else a name of agentx's own check.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    /// The rule, e.g. `rule-21` or `scheduler`.
    pub rule: String,
    /// Error or warning.
    pub severity: Severity,
    /// Where: file, line (of a JSONL record; 0 in a JSON document) and the JSON path as `field`.
    #[serde(serialize_with = "location_text")]
    pub location: Location,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

fn location_text<S: serde::Serializer>(location: &Location, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(location)
}

impl Finding {
    /// Whether the finding refuses the corpus.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}: {severity} {}: {} (fix: {})",
            self.location, self.rule, self.message, self.fix
        )
    }
}

/// The lines of a refusal: every finding, errors first, one per line.
fn findings_text(findings: &[Finding]) -> String {
    let errors = findings.iter().filter(|f| f.is_error()).count();
    let mut text = format!("{errors} error(s), {} warning(s)", findings.len() - errors);
    let (first, rest): (Vec<&Finding>, Vec<&Finding>) = findings.iter().partition(|f| f.is_error());
    for finding in first.into_iter().chain(rest) {
        text.push_str("\n  ");
        text.push_str(&finding.to_string());
    }
    text
}

/// Everything that can go wrong opening, importing or synthesizing a dataset.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A record breaks its format (weka, Mooncake, TraceLab or Dynamo).
    #[error("{location}: {message}")]
    Invalid {
        /// Where the record breaks it.
        location: Location,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A file or directory could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was attempted (`read`, `create`, ...), as the message's verb.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },

    /// A dataset directory entry is a symlink that leads outside the directory.
    #[error(
        "{}: this entry of the dataset directory {} is a symlink that leads outside it (to {}); \
         agentx reads a dataset directory only through the directory itself: copy the file in, or \
         pass it as --input-file",
        entry.display(),
        dir.display(),
        target.display()
    )]
    SymlinkOutside {
        /// The symlink.
        entry: PathBuf,
        /// The dataset directory.
        dir: PathBuf,
        /// Where the symlink resolves to.
        target: PathBuf,
    },

    /// A source holds no traces.
    #[error("{}: no traces found; a weka corpus is a traces.jsonl (one trace per line) or a directory of *.json traces", path.display())]
    Empty {
        /// The source file or directory.
        path: PathBuf,
    },

    /// Neither a path nor a known alias.
    #[error(
        "dataset `{spec}` is neither an existing file or directory nor a known dataset name \
         (known: {known}); pass the path of a traces.jsonl, a directory of *.json traces, a known name, \
         or a Hugging Face dataset repository id (org/name) in the local hub cache"
    )]
    UnknownSource {
        /// The `--input-file` value as given.
        spec: String,
        /// The known corpus names, comma-separated.
        known: String,
    },

    /// A JSONL corpus whose first record carries the marks of no format, or of two.
    #[error(
        "{}:{line}: cannot tell the corpus format from its first record (keys: {keys}{}); the formats \
         are {known} (a weka trace has `id` and `requests`, a Mooncake request `input_length` and \
         `hash_ids`, a TraceLab round `session_id`, `round_index`, `input_tokens_total`, \
         `prefix_tokens`, `newly_append_tokens` and `timing_events`, a Dynamo record \
         `\"schema\":\"dynamo.request.trace.v1\"`, an Agentic Mooncake row `request_id` and \
         `wait_for`, an OTel trace `resourceSpans`, or `spans` and no `requests`); pass --format NAME",
        path.display(),
        if matched.is_empty() { String::new() } else { format!("; it looks like both {matched}") }
    )]
    UnknownFormat {
        /// The JSONL file.
        path: PathBuf,
        /// 1-based line of the first record.
        line: u64,
        /// The record's top-level keys, comma-separated.
        keys: String,
        /// The formats whose marks the record carries when it carries two (empty otherwise).
        matched: String,
        /// The format names `--format` takes.
        known: String,
    },

    /// A known public corpus that is not in the local Hugging Face cache.
    #[error(
        "dataset `{name}` ({repo}) is not in the Hugging Face cache (looked in {searched}); \
         fetch it with `hf download {repo} --repo-type dataset` (older clients: \
         `huggingface-cli download {repo} --repo-type dataset`) or set HF_HUB_CACHE to the cache that has it"
    )]
    NotCached {
        /// The corpus name.
        name: String,
        /// Its hub repository id (`org/name`).
        repo: String,
        /// The hub cache directories looked in.
        searched: String,
    },

    /// A corpus repository in the cache whose snapshot lacks the traces file the importer reads.
    #[error(
        "dataset `{name}` ({repo}) is in the Hugging Face cache without its {file} (the snapshot holds {found}); \
         agentx reads the {file} the corpus publishes: fetch it with \
         `hf download {repo} {file} --repo-type dataset` (older clients: \
         `huggingface-cli download {repo} {file} --repo-type dataset`)"
    )]
    MissingTracesFile {
        /// The corpus name (the repository id for a repository outside the table).
        name: String,
        /// Its hub repository id (`org/name`).
        repo: String,
        /// The traces file looked for, relative to the snapshot.
        file: String,
        /// The files the snapshot holds.
        found: String,
    },

    /// `--tokenizer` names no tokenizer that can be loaded.
    #[error(transparent)]
    Tokenizer(#[from] agentx_tokens::TokenizerError),

    /// `--max-context-length` (with `--num-dataset-entries`) left no trace.
    #[error(
        "{dataset}: no trace fits --max-context-length {max_context_length} (scanned {scanned} traces; \
         the smallest peak context, max over requests of in + max(1, min(out, max_osl)), is {smallest_peak} \
         tokens); raise it to at least {smallest_peak} to admit any trace"
    )]
    EmptySelection {
        /// The source path.
        dataset: String,
        /// The `--max-context-length` value, tokens.
        max_context_length: u64,
        /// Traces read.
        scanned: u64,
        /// The smallest peak context of any trace, tokens.
        smallest_peak: u64,
    },

    /// A cache entry could not be used or written.
    #[error("dataset cache {}: {reason}", path.display())]
    Cache {
        /// The cache entry or directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// `--strict` and a corpus with import warnings.
    #[error("{}: {message}", path.display())]
    Strict {
        /// The source path.
        path: PathBuf,
        /// The first place of each warning kind.
        message: String,
    },

    /// A graph corpus its validator refuses: every finding, errors and warnings.
    #[error("{}: the graph corpus is refused: {}", path.display(), findings_text(findings))]
    GraphRefused {
        /// The source file.
        path: PathBuf,
        /// Every finding (at least one error, or a warning under `--strict`).
        findings: Vec<Finding>,
    },

    /// A bad argument to a dataset operation (a flag value).
    #[error("{0}")]
    Argument(String),
}

impl DatasetError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        DatasetError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
