//! Token counting shared by prompt synthesis and the simulator.
//!
//! The tokenizer-free model: synthesized text is a sequence of whitespace-separated words, each of
//! which is one token of a typical BPE vocabulary, so the count of a text is its number of words.
//! Synthesis emits exactly `n` words for `n` tokens, and the simulator counts prompts the same way,
//! so both sides agree without loading a tokenizer.
//!
//! With a Hugging Face `tokenizer.json` ([`TokenCounter::Hf`]) counts are exact for that tokenizer, and
//! [`TokenCounter::vocabulary`] restricts synthesis to words the tokenizer encodes as one token each, so
//! synthesized prompts still hit their recorded token counts.
//!
//! [`resolve_tokenizer`] turns a `--tokenizer` value into a [`TokenizerSource`] offline, the way aiperf's
//! `--tokenizer` names one: a path (a `tokenizer.json`, or a directory holding one); `builtin` (aiperf:
//! tiktoken `o200k_base`), which here is the tokenizer-free word counter; or a Hugging Face model id
//! (`org/name`, or a bare `name` that matches exactly one cached `org/name`) found in the hub cache
//! ([`hub`], the same directories as the corpora). Nothing is downloaded.
//!
//! [`blocks`] hashes prompt words into chained blocks, the identities the simulator's prefix cache
//! keys on; the sending side computes the same chain ([`blocks::chain_of`]).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod blocks;
pub mod hub;
pub mod text;

use hub::RepoKind;
use text::{Vocabulary, WORDS};

/// The `--tokenizer` name aiperf maps to its zero-network tokenizer (tiktoken `o200k_base`).
pub(crate) const BUILTIN: &str = "builtin";

/// tiktoken encoding names aiperf routes to tiktoken rather than the hub; agentx has no tiktoken and
/// counts them like [`BUILTIN`].
pub(crate) const TIKTOKEN_ENCODINGS: &[&str] = &[
    "cl100k_base",
    "o200k_base",
    "o200k_harmony",
    "p50k_base",
    "p50k_edit",
    "r50k_base",
];

/// The file a tokenizer directory or model snapshot must hold.
pub(crate) const TOKENIZER_FILE: &str = "tokenizer.json";

/// Where a `--tokenizer` value resolved to ([`resolve_tokenizer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSource {
    /// `builtin` or a tiktoken encoding name: the tokenizer-free word counter ([`TokenCounter::Words`]).
    /// aiperf counts these with tiktoken `o200k_base`; agentx's synthesized words are single tokens of
    /// typical BPE vocabularies, so the two agree closely on synthesized prompts but are not identical.
    Builtin,
    /// A Hugging Face `tokenizer.json`: a path given directly, or the file of a cached model snapshot.
    File {
        /// The `tokenizer.json`.
        path: PathBuf,
        /// The model id it was found by (`org/name`), when it came from the hub cache.
        model: Option<String>,
    },
}

impl TokenizerSource {
    /// Loads the counter: [`TokenCounter::Words`] for [`TokenizerSource::Builtin`], else the file.
    pub fn counter(&self) -> Result<TokenCounter, TokenizerError> {
        match self {
            TokenizerSource::Builtin => Ok(TokenCounter::Words),
            TokenizerSource::File { path, .. } => TokenCounter::from_file(path),
        }
    }

    /// A one-line description for logs and run summaries: `builtin`, or the model id and file.
    pub fn describe(&self) -> String {
        match self {
            TokenizerSource::Builtin => BUILTIN.to_owned(),
            TokenizerSource::File {
                path,
                model: Some(model),
            } => format!("{model} ({})", path.display()),
            TokenizerSource::File { path, model: None } => path.display().to_string(),
        }
    }
}

/// Resolves a `--tokenizer` value offline (see the module doc), in this order: `builtin` and tiktoken
/// encoding names; an existing path (a file is taken as a `tokenizer.json`, a directory must hold one);
/// a model id `org/name` in the hub cache; a bare `name` that is the name part of exactly one cached
/// model with a `tokenizer.json`. A model that is not cached is an error naming the `hf download`
/// command that fetches it.
pub fn resolve_tokenizer(spec: &str) -> Result<TokenizerSource, TokenizerError> {
    resolve_tokenizer_in(spec, &hub::hub_dirs())
}

fn resolve_tokenizer_in(spec: &str, dirs: &[PathBuf]) -> Result<TokenizerSource, TokenizerError> {
    if spec == BUILTIN || TIKTOKEN_ENCODINGS.contains(&spec) {
        return Ok(TokenizerSource::Builtin);
    }
    let path = Path::new(spec);
    if path.is_dir() {
        let file = path.join(TOKENIZER_FILE);
        if !file.is_file() {
            return Err(TokenizerError::Argument(format!(
                "--tokenizer {spec}: the directory has no {TOKENIZER_FILE}; pass a directory or file \
                 holding a Hugging Face {TOKENIZER_FILE}, a cached model id (org/name), or `builtin`"
            )));
        }
        return Ok(TokenizerSource::File {
            path: file,
            model: None,
        });
    }
    if path.is_file() {
        return Ok(TokenizerSource::File {
            path: path.to_owned(),
            model: None,
        });
    }
    if hub::is_repo_id(spec) {
        return match hub::find(dirs, RepoKind::Model, spec, TOKENIZER_FILE) {
            Some(path) => Ok(TokenizerSource::File {
                path,
                model: Some(spec.to_owned()),
            }),
            None => Err(TokenizerError::NotCached {
                model: spec.to_owned(),
                file: TOKENIZER_FILE.to_owned(),
                searched: hub::describe_dirs(dirs),
            }),
        };
    }
    if !spec.is_empty() && !spec.contains(['/', '\\']) {
        let matches = cached_models_named(dirs, spec);
        match matches.as_slice() {
            [one] => {
                if let Some(path) = hub::find(dirs, RepoKind::Model, one, TOKENIZER_FILE) {
                    return Ok(TokenizerSource::File {
                        path,
                        model: Some(one.clone()),
                    });
                }
            }
            [] => {}
            many => {
                return Err(TokenizerError::Argument(format!(
                    "--tokenizer {spec} is ambiguous: the Hugging Face cache holds {}; pass one of them",
                    many.join(", ")
                )))
            }
        }
    }
    Err(TokenizerError::Argument(format!(
        "--tokenizer {spec} is neither `builtin`, an existing tokenizer.json or directory, nor a cached \
         Hugging Face model (looked in {}); pass a model id as org/name (fetch it with \
         `hf download ORG/NAME tokenizer.json tokenizer_config.json`) or the path of a tokenizer.json",
        hub::describe_dirs(dirs)
    )))
}

/// Cached model ids (`org/name`, sorted, distinct) whose name part is `name` and that have a
/// `tokenizer.json`.
fn cached_models_named(dirs: &[PathBuf], name: &str) -> Vec<String> {
    let suffix = format!("--{name}");
    let mut out = Vec::new();
    for cache_dir in dirs {
        let Ok(entries) = std::fs::read_dir(cache_dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let dir_name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = dir_name.strip_prefix("models--") else {
                continue;
            };
            let Some(org) = rest.strip_suffix(&suffix) else {
                continue;
            };
            let repo = format!("{org}/{name}");
            if hub::is_repo_id(&repo)
                && hub::find_in(cache_dir, RepoKind::Model, &repo, TOKENIZER_FILE).is_some()
            {
                out.push(repo);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Counts tokens in text.
#[derive(Clone, Default)]
pub enum TokenCounter {
    /// One token per whitespace-separated word (the tokenizer-free default).
    #[default]
    Words,
    /// Exact counts from a Hugging Face tokenizer (no special tokens added).
    Hf(Arc<tokenizers::Tokenizer>),
}

/// Two counters are equal when they count the same way: both by words, or the same loaded tokenizer.
impl PartialEq for TokenCounter {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TokenCounter::Words, TokenCounter::Words) => true,
            (TokenCounter::Hf(a), TokenCounter::Hf(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenCounter::Words => f.write_str("Words"),
            TokenCounter::Hf(_) => f.write_str("Hf(..)"),
        }
    }
}

/// Why a `--tokenizer` value names no tokenizer, or a `tokenizer.json` could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// `--tokenizer NAME` names a Hugging Face model that is not in the local cache.
    #[error(
        "tokenizer `{model}` is neither an existing file or directory nor in the Hugging Face cache \
         (looked for {file} in {searched}); fetch it with \
         `hf download {model} tokenizer.json tokenizer_config.json` (older clients: \
         `huggingface-cli download {model} tokenizer.json tokenizer_config.json`), set HF_HUB_CACHE to \
         the cache that has it, or pass the path of a tokenizer.json"
    )]
    NotCached {
        /// The model id given.
        model: String,
        /// The file looked for in its snapshots.
        file: String,
        /// The cache directories searched.
        searched: String,
    },

    /// A tokenizer argument that names nothing usable (a flag value).
    #[error("{0}")]
    Argument(String),
    /// A `tokenizer.json` the tokenizers library could not load.
    #[error(
        "cannot load tokenizer {path}: {reason}; pass the path of a Hugging Face tokenizer.json"
    )]
    Load {
        /// The file.
        path: PathBuf,
        /// The library's error.
        reason: String,
    },
    #[error(
        "tokenizer {path} encodes none of the synthesis vocabulary as single tokens; \
         use a BPE or SentencePiece tokenizer, or omit --tokenizer"
    )]
    /// A tokenizer under which no word of the synthesis vocabulary is a single token.
    NoSingleTokenWords {
        /// The file.
        path: PathBuf,
    },
}

impl TokenCounter {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let tokenizer =
            tokenizers::Tokenizer::from_file(path).map_err(|error| TokenizerError::Load {
                path: path.to_owned(),
                reason: error.to_string(),
            })?;
        let counter = TokenCounter::Hf(Arc::new(tokenizer));
        if counter.vocabulary().is_none() {
            return Err(TokenizerError::NoSingleTokenWords {
                path: path.to_owned(),
            });
        }
        Ok(counter)
    }

    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> u64 {
        match self {
            TokenCounter::Words => text.split_ascii_whitespace().count() as u64,
            // An encoding error (not expected for plain text) falls back to the word model rather than
            // failing a count.
            TokenCounter::Hf(tokenizer) => match tokenizer.encode(text, false) {
                Ok(encoding) => encoding.len() as u64,
                Err(_) => text.split_ascii_whitespace().count() as u64,
            },
        }
    }

    /// The tokens of `text` as keys a block hash chains: a tokenizer's token ids, or under the word
    /// model each whitespace-separated word's 64-bit hash. Equal text gives equal keys, so equal
    /// prompt prefixes give equal blocks.
    pub fn token_keys(&self, text: &str) -> Vec<u64> {
        match self {
            TokenCounter::Hf(tokenizer) => match tokenizer.encode(text, false) {
                Ok(encoding) => encoding.get_ids().iter().map(|&id| u64::from(id)).collect(),
                Err(_) => word_keys(text),
            },
            TokenCounter::Words => word_keys(text),
        }
    }

    /// The synthesis vocabulary whose words are single tokens for this counter (with their leading
    /// space); `None` when a tokenizer keeps none of them.
    pub fn vocabulary(&self) -> Option<Vocabulary> {
        match self {
            TokenCounter::Words => Some(Vocabulary::STANDARD),
            TokenCounter::Hf(tokenizer) => {
                // Judge each word in context (after another word), the way it appears in prompts, so a
                // tokenizer that treats a leading space specially at the start of text is not misjudged.
                Vocabulary::filtered(|word| {
                    let one = tokenizer
                        .encode(format!(" {}", WORDS[0]), false)
                        .map(|encoding| encoding.len());
                    let two = tokenizer
                        .encode(format!(" {} {word}", WORDS[0]), false)
                        .map(|encoding| encoding.len());
                    matches!((one, two), (Ok(alone), Ok(after)) if after == alone + 1)
                })
            }
        }
    }
}

/// The word model's token keys: each whitespace-separated word's hash.
fn word_keys(text: &str) -> Vec<u64> {
    text.split_ascii_whitespace()
        .map(blocks::hash_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::hub::testkit::{put, set_main};

    #[test]
    fn builtin_and_tiktoken_names_are_the_word_counter() {
        let none: Vec<PathBuf> = Vec::new();
        for name in ["builtin", "o200k_base", "cl100k_base"] {
            let s = resolve_tokenizer_in(name, &none).unwrap();
            assert_eq!(s, TokenizerSource::Builtin);
            assert_eq!(s.counter().unwrap(), TokenCounter::Words);
        }
        assert_eq!(TokenizerSource::Builtin.describe(), "builtin");
    }

    #[test]
    fn token_keys_are_a_tokenizers_ids_or_the_words_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = r#"{"version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": null, "decoder": null, "model": {"type": "WordLevel",
            "vocab": {"the": 7, "and": 8, "for": 9, "this": 10}, "unk_token": "the"}}"#;
        let path = dir.path().join(TOKENIZER_FILE);
        std::fs::write(&path, tokenizer).unwrap();
        let counter = TokenCounter::from_file(&path).unwrap();
        assert_eq!(counter.token_keys("this and the for"), [10, 8, 7, 9]);
        let words = TokenCounter::Words.token_keys("a b a");
        assert_eq!(words.len(), 3);
        assert_eq!(words[0], words[2]);
        assert_ne!(words[0], words[1]);
    }

    #[test]
    fn paths_are_a_file_or_a_directory_holding_tokenizer_json() {
        let dir = tempfile::tempdir().unwrap();
        let none: Vec<PathBuf> = Vec::new();
        let file = dir.path().join("tokenizer.json");
        std::fs::write(&file, "{}").unwrap();
        let spec = dir.path().display().to_string();
        let want = TokenizerSource::File {
            path: file.clone(),
            model: None,
        };
        assert_eq!(resolve_tokenizer_in(&spec, &none).unwrap(), want);
        assert_eq!(
            resolve_tokenizer_in(&file.display().to_string(), &none).unwrap(),
            want
        );
        let empty = tempfile::tempdir().unwrap();
        let e = resolve_tokenizer_in(&empty.path().display().to_string(), &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("has no tokenizer.json"), "{e}");
    }

    #[test]
    fn model_ids_resolve_from_the_hub_cache() {
        let hub = tempfile::tempdir().unwrap();
        let h = hub.path();
        let dirs = vec![h.to_owned()];
        let k = RepoKind::Model;
        put(h, k, "Org/Model-8B", "old", "tokenizer.json", "{}").unwrap();
        let main = put(h, k, "Org/Model-8B", "abc", "tokenizer.json", "{}").unwrap();
        set_main(h, k, "Org/Model-8B", "abc").unwrap();
        let got = resolve_tokenizer_in("Org/Model-8B", &dirs).unwrap();
        assert_eq!(
            got,
            TokenizerSource::File {
                path: main.clone(),
                model: Some("Org/Model-8B".into())
            }
        );
        assert!(got.describe().starts_with("Org/Model-8B ("));
        assert_eq!(
            main,
            h.join("models--Org--Model-8B/snapshots/abc/tokenizer.json")
        );
        // A bare name matching exactly one cached model resolves to it; two are ambiguous.
        assert_eq!(resolve_tokenizer_in("Model-8B", &dirs).unwrap(), got);
        put(h, k, "Other/Model-8B", "r", "tokenizer.json", "{}").unwrap();
        let e = resolve_tokenizer_in("Model-8B", &dirs)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ambiguous") && e.contains("Other/Model-8B"),
            "{e}"
        );
        // A snapshot without tokenizer.json does not count.
        put(h, k, "Org/NoTok", "r", "config.json", "{}").unwrap();
        assert!(resolve_tokenizer_in("Org/NoTok", &dirs).is_err());
    }

    #[test]
    fn an_uncached_model_names_the_download_command() {
        let hub = tempfile::tempdir().unwrap();
        let dirs = vec![hub.path().to_owned()];
        let e = resolve_tokenizer_in("deepseek-ai/DeepSeek-V4", &dirs)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hf download deepseek-ai/DeepSeek-V4 tokenizer.json tokenizer_config.json"),
            "{e}"
        );
        assert!(
            e.contains("huggingface-cli download deepseek-ai/DeepSeek-V4"),
            "{e}"
        );
        assert!(e.contains(&hub.path().display().to_string()), "{e}");
        let e = resolve_tokenizer_in("no-such-model", &dirs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("hf download ORG/NAME tokenizer.json"), "{e}");
    }

    #[test]
    fn words_counts_whitespace_separated_runs() {
        let c = TokenCounter::Words;
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("  a  b\n\tc "), 3);
        assert_eq!(c.count("[rid:0123456789ab]\n\nfn main"), 3);
    }
}
