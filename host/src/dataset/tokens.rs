//! Token counting shared by prompt synthesis and the simulator.
//!
//! The tokenizer-free model: synthesized text is a sequence of whitespace-separated words, each of
//! which is one token of a typical BPE vocabulary, so the count of a text is its number of words.
//! Synthesis emits exactly `n` words for `n` tokens, and the simulator counts prompts the same way,
//! so both sides agree without loading a tokenizer.

/// Counts tokens in text.
#[derive(Debug, Clone, Default)]
pub enum TokenCounter {
    /// One token per whitespace-separated word (the tokenizer-free default).
    #[default]
    Words,
}

impl TokenCounter {
    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> u64 {
        match self {
            TokenCounter::Words => text.split_ascii_whitespace().count() as u64,
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
