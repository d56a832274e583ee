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

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::text::{Vocabulary, WORDS};

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

/// A `tokenizer.json` that could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "cannot load tokenizer {path}: {reason}; pass the path of a Hugging Face tokenizer.json"
    )]
    Load { path: PathBuf, reason: String },
    #[error(
        "tokenizer {path} encodes none of the synthesis vocabulary as single tokens; \
         use a BPE or SentencePiece tokenizer, or omit --tokenizer"
    )]
    NoSingleTokenWords { path: PathBuf },
}

impl TokenCounter {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let tok = tokenizers::Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let counter = TokenCounter::Hf(Arc::new(tok));
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
            TokenCounter::Hf(tok) => match tok.encode(text, false) {
                Ok(enc) => enc.len() as u64,
                Err(_) => text.split_ascii_whitespace().count() as u64,
            },
        }
    }

    /// The synthesis vocabulary whose words are single tokens for this counter (with their leading
    /// space); `None` when a tokenizer keeps none of them.
    pub fn vocabulary(&self) -> Option<Vocabulary> {
        match self {
            TokenCounter::Words => Some(Vocabulary::STANDARD),
            TokenCounter::Hf(tok) => {
                // Judge each word in context (after another word), the way it appears in prompts, so a
                // tokenizer that treats a leading space specially at the start of text is not misjudged.
                Vocabulary::filtered(|w| {
                    let one = tok.encode(format!(" {}", WORDS[0]), false).map(|e| e.len());
                    let two = tok
                        .encode(format!(" {} {w}", WORDS[0]), false)
                        .map(|e| e.len());
                    matches!((one, two), (Ok(a), Ok(b)) if b == a + 1)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_counts_whitespace_separated_runs() {
        let c = TokenCounter::Words;
        assert_eq!(c.count(""), 0);
        assert_eq!(c.count("  a  b\n\tc "), 3);
        assert_eq!(c.count("[rid:0123456789ab]\n\nfn main"), 3);
    }
}
