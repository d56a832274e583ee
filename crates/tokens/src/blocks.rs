//! Prompt text hashed in fixed-size blocks of words, each block's hash chaining every block before
//! it: the block identities a prefix cache keys on.
//!
//! Invariants: a block's hash chains the hash of every block before it, so a block matches only
//! when its whole prefix matches (as in vLLM's automatic prefix caching). Only full blocks are
//! hashed. A token is a whitespace-free word (the tokenizer-free model of this crate), and how the
//! text is split across messages does not change the hashes. The simulator keys its prefix cache
//! on these hashes, and [`chain_of`] computes the same chain on the sending side, so a client can
//! predict which blocks the simulator holds.
//!
//! [`mix64`] and FNV-1a here are hashes, not random draws (those come from `rand`): block hashes
//! and [`hash_str`]'s request and session keys must be pure functions of their input. (`text`'s
//! stream step is a different function: SplitMix64 with its increment.)

/// Hashes prompt words into chained block hashes, one word at a time.
#[derive(Debug, Clone)]
pub struct BlockHasher {
    block_size: u32,
    in_block: u32,
    cur: u64,
    prev: u64,
    /// Leading block hashes given up by [`BlockHasher::forget_hashes`]: `blocks` holds the ones
    /// after them.
    forgotten: usize,
    /// The hash of the last forgotten block (meaningless while `forgotten` is 0).
    last_forgotten: u64,
    blocks: Vec<u64>,
}

impl BlockHasher {
    /// A hasher for blocks of `block_size` tokens.
    pub fn new(block_size: u32) -> BlockHasher {
        BlockHasher {
            block_size: block_size.max(1),
            in_block: 0,
            cur: BLOCK_SEED,
            prev: CHAIN_SEED,
            forgotten: 0,
            last_forgotten: 0,
            blocks: Vec::new(),
        }
    }

    /// Add one token (a whitespace-free word).
    #[inline]
    pub fn push(&mut self, word: &[u8]) {
        self.push_key(fnv1a(word));
    }

    /// Add one token given by its key: a tokenizer's token id, or a word's hash ([`Self::push`]
    /// adds a word by its FNV-1a hash).
    #[inline]
    pub fn push_key(&mut self, key: u64) {
        self.cur = (self.cur.rotate_left(23) ^ key).wrapping_mul(MUL);
        self.in_block += 1;
        if self.in_block == self.block_size {
            self.prev = mix64(self.prev ^ self.cur.wrapping_mul(MUL2));
            self.blocks.push(self.prev);
            self.cur = BLOCK_SEED;
            self.in_block = 0;
        }
    }

    /// Add every whitespace-separated word of `text`.
    pub fn push_text(&mut self, text: &str) {
        self.push_text_bytes(text.as_bytes());
    }

    /// Add every word of `text` split at ASCII whitespace, as [`BlockHasher::push_text`] does
    /// (`str::split_ascii_whitespace`'s words, for bytes not yet checked as UTF-8).
    pub fn push_text_bytes(&mut self, text: &[u8]) {
        for_each_word_key(text, |key| self.push_key(key));
    }

    /// [`BlockHasher::push_text_bytes`] into this hasher and into `twin`, each word hashed once:
    /// two chains of the same text that differ only in what was pushed into them apart (a prompt
    /// and the same prompt with its cache-bust marker masked).
    pub fn push_text_bytes_twin(&mut self, twin: &mut BlockHasher, text: &[u8]) {
        for_each_word_key(text, |key| {
            self.push_key(key);
            twin.push_key(key);
        });
    }

    /// Tokens added so far, the partial block included.
    pub fn tokens(&self) -> u64 {
        (self.forgotten + self.blocks.len()) as u64 * u64::from(self.block_size)
            + u64::from(self.in_block)
    }

    /// The chained hashes of the full blocks seen so far (after the forgotten ones).
    pub fn finish(self) -> Vec<u64> {
        self.blocks
    }

    /// The chained hashes of the full blocks seen so far (after the forgotten ones), without
    /// giving the hasher up.
    pub fn hashes(&self) -> &[u64] {
        &self.blocks
    }

    /// How many leading block hashes [`BlockHasher::forget_hashes`] gave up: [`BlockHasher::hashes`]
    /// starts at the block of this index.
    pub fn forgotten(&self) -> usize {
        self.forgotten
    }

    /// The hash of the last block [`BlockHasher::forget_hashes`] gave up (the block before
    /// [`BlockHasher::hashes`]), `None` when none was: what a caller that stored the forgotten
    /// blocks looks the chain up by.
    pub fn last_forgotten(&self) -> Option<u64> {
        (self.forgotten > 0).then_some(self.last_forgotten)
    }

    /// Gives up the hashes of the full blocks so far, keeping the state that chains the next ones:
    /// for a caller that has stored them elsewhere and needs only what comes after.
    pub fn forget_hashes(&mut self) {
        if let Some(&last) = self.blocks.last() {
            self.last_forgotten = last;
        }
        self.forgotten += self.blocks.len();
        self.blocks = Vec::new();
    }

    /// The state after the tokens added so far, to come back to with [`BlockHasher::rewind`].
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            in_block: self.in_block,
            cur: self.cur,
            prev: self.prev,
            blocks: self.forgotten + self.blocks.len(),
        }
    }

    /// Back to the state of `checkpoint` (taken from this hasher, after fewer or as many tokens as
    /// now): the tokens added since are forgotten, so a prompt that keeps a prefix of the previous
    /// one hashes only what follows it.
    /// A checkpoint inside the forgotten blocks forgets from it on: the state it restores chains
    /// the blocks after it, whose hashes were given up.
    pub fn rewind(&mut self, checkpoint: Checkpoint) {
        self.in_block = checkpoint.in_block;
        self.cur = checkpoint.cur;
        self.prev = checkpoint.prev;
        if checkpoint.blocks >= self.forgotten {
            self.blocks.truncate(checkpoint.blocks - self.forgotten);
        } else {
            // The chain's state after a block is that block's hash.
            self.forgotten = checkpoint.blocks;
            self.last_forgotten = checkpoint.prev;
            self.blocks.clear();
        }
    }

    /// Gives back the room the chain grew into beyond an eighth of its length: a conversation
    /// keeps its chain between turns, and a vector that grew by doubling holds up to as much
    /// again unused.
    pub fn shrink_slack(&mut self) {
        if self.blocks.capacity() > self.blocks.len() + self.blocks.len() / 8 {
            self.blocks.shrink_to_fit();
        }
    }
}

/// A [`BlockHasher`]'s state after some prefix of tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    in_block: u32,
    cur: u64,
    prev: u64,
    blocks: usize,
}

const BLOCK_SEED: u64 = 0x243f_6a88_85a3_08d3;
const CHAIN_SEED: u64 = 0x1319_8a2e_0370_7344;
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
const MUL2: u64 = 0xbf58_476d_1ce4_e5b9;

/// Calls `each` with the FNV-1a hash of every word of `text` split at ASCII whitespace, in order:
/// the split and the hash in one pass over the bytes.
#[inline]
fn for_each_word_key(text: &[u8], mut each: impl FnMut(u64)) {
    let mut hash = FNV_OFFSET;
    let mut in_word = false;
    for &byte in text {
        if byte.is_ascii_whitespace() {
            if in_word {
                each(hash);
                hash = FNV_OFFSET;
                in_word = false;
            }
        } else {
            hash = (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
            in_word = true;
        }
    }
    if in_word {
        each(hash);
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[inline]
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// A 64-bit hash of a string (request ids, seeds).
pub fn hash_str(text: &str) -> u64 {
    mix64(fnv1a(text.as_bytes()))
}

/// SplitMix64's finaliser: a cheap, well-mixed 64-bit permutation (a hash step, not a generator).
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The chain of one prompt: its full blocks' chained hashes and its length in tokens (words).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    /// The chained hashes of the prompt's full blocks, first block first.
    pub hashes: Vec<u64>,
    /// Every token of the prompt, the partial last block included.
    pub tokens: u64,
}

/// The chain of the prompt made of `texts` in order (its messages' texts, as the simulator reads
/// them), in blocks of `block_size` words (0 counts as 1, as [`BlockHasher::new`] does).
pub fn chain_of<'a>(texts: impl IntoIterator<Item = &'a str>, block_size: u32) -> Chain {
    let mut hasher = BlockHasher::new(block_size);
    for text in texts {
        hasher.push_text(text);
    }
    let tokens = hasher.tokens();
    Chain {
        hashes: hasher.finish(),
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass split and hash reads the words `split_ascii_whitespace` reads, and a twin push
    /// gives both hashers the chain each would have alone.
    #[test]
    fn word_keys_and_twins_hash_as_the_words_one_by_one() {
        let texts = [
            "",
            " ",
            "one",
            "  two words\t\n",
            "tab\tsep\x0cform\rfeed\x0b vertical-tab-is-a-word",
            "caf\u{e9} na\u{ef}ve \u{a0}nbsp-inside \u{3000}ideographic",
        ];
        for block_size in [1, 3, 16] {
            for text in texts {
                let mut by_words = BlockHasher::new(block_size);
                for word in text.split_ascii_whitespace() {
                    by_words.push(word.as_bytes());
                }
                let mut one_pass = BlockHasher::new(block_size);
                one_pass.push_text_bytes(text.as_bytes());
                assert_eq!(one_pass.checkpoint(), by_words.checkpoint(), "{text:?}");
                assert_eq!(one_pass.hashes(), by_words.hashes(), "{text:?}");

                let (mut first, mut twin) =
                    (BlockHasher::new(block_size), BlockHasher::new(block_size));
                first.push_text("marker ");
                twin.push_text("# ");
                for _ in 0..5 {
                    first.push_text_bytes_twin(&mut twin, text.as_bytes());
                }
                let (mut alone, mut twin_alone) =
                    (BlockHasher::new(block_size), BlockHasher::new(block_size));
                alone.push_text("marker ");
                twin_alone.push_text("# ");
                for _ in 0..5 {
                    alone.push_text(text);
                    twin_alone.push_text(text);
                }
                assert_eq!(first.checkpoint(), alone.checkpoint());
                assert_eq!(first.hashes(), alone.hashes());
                assert_eq!(twin.checkpoint(), twin_alone.checkpoint());
                assert_eq!(twin.hashes(), twin_alone.hashes());
            }
        }
    }

    /// A hasher that forgets its hashes chains the next blocks as one that kept them, counts the
    /// same tokens, and rewinds to a checkpoint before or after what it forgot.
    #[test]
    fn forgetting_hashes_keeps_the_chain() {
        let words: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let mut kept = BlockHasher::new(8);
        let mut forgetting = BlockHasher::new(8);
        let mut early = None;
        for (i, word) in words.iter().enumerate() {
            kept.push(word.as_bytes());
            forgetting.push(word.as_bytes());
            if i == 20 {
                early = Some(forgetting.checkpoint());
            }
            if i == 43 {
                forgetting.forget_hashes();
            }
        }
        assert_eq!(forgetting.forgotten(), 5);
        assert_eq!(forgetting.last_forgotten(), Some(kept.hashes()[4]));
        assert_eq!(forgetting.tokens(), kept.tokens());
        assert_eq!(forgetting.hashes(), &kept.hashes()[5..]);
        assert_eq!(forgetting.checkpoint(), kept.checkpoint());
        // Back inside the forgotten blocks: everything after the checkpoint is forgotten too.
        let early = early.expect("taken at word 20");
        forgetting.rewind(early);
        kept.rewind(early);
        assert_eq!((forgetting.forgotten(), forgetting.hashes()), (2, &[][..]));
        assert_eq!(forgetting.last_forgotten(), Some(kept.hashes()[1]));
        for word in &words[21..60] {
            kept.push(word.as_bytes());
            forgetting.push(word.as_bytes());
        }
        assert_eq!(forgetting.hashes(), &kept.hashes()[2..]);
        assert_eq!(forgetting.tokens(), kept.tokens());
        // Forgetting with nothing new keeps the last forgotten block; a fresh hasher has none.
        forgetting.forget_hashes();
        forgetting.forget_hashes();
        assert_eq!(forgetting.last_forgotten(), kept.hashes().last().copied());
        assert_eq!(BlockHasher::new(8).last_forgotten(), None);
    }

    fn hashes(text: &str, bs: u32) -> Vec<u64> {
        chain_of([text], bs).hashes
    }

    fn words(n: usize, tag: &str) -> String {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!("{tag}{i} "));
        }
        text
    }

    #[test]
    fn a_rewound_hasher_hashes_as_if_the_later_tokens_never_came() {
        let mut hasher = BlockHasher::new(4);
        hasher.push_text(&words(6, "a"));
        let after_six = hasher.checkpoint();
        hasher.push_text(&words(9, "b"));
        assert_eq!(hasher.hashes().len(), 3);
        hasher.rewind(after_six);
        assert_eq!(hasher.tokens(), 6);
        hasher.push_text(&words(5, "c"));
        let expected = hashes(&(words(6, "a") + &words(5, "c")), 4);
        assert_eq!(hasher.hashes(), &expected[..]);
        assert_eq!(hasher.finish(), expected);
    }

    #[test]
    fn chained_hashes_depend_on_the_whole_prefix() {
        let a = hashes(&(words(4, "a") + &words(4, "c")), 4);
        let b = hashes(&(words(4, "b") + &words(4, "c")), 4);
        assert_eq!(a.len(), 2);
        assert_ne!(
            a[1], b[1],
            "same second block after a different first block"
        );
        // Splitting text differently across messages does not change the hashes.
        let mut h = BlockHasher::new(4);
        h.push_text("a0 a1");
        h.push_text(" a2\na3 c0 c1 c2 c3");
        assert_eq!(h.finish(), a);
        // A partial block is not hashed.
        assert_eq!(hashes(&words(7, "a"), 4).len(), 1);
    }

    #[test]
    fn golden_vectors_are_unchanged() {
        // Values of the simulator's hasher before it moved here; a change breaks every recorded
        // expectation of which blocks the simulator holds.
        assert_eq!(
            hashes("the quick brown fox jumps over the lazy dog again", 4),
            [0xb0b3_256c_e5ed_42d4, 0xc401_8a6f_e13f_2615]
        );
        assert_eq!(
            hashes("a b", 1),
            [0x618b_e18c_3c60_27f9, 0x08be_144d_b4f2_53c3]
        );
        assert_eq!(hash_str("t1::sa:a-7"), 0xd59c_14db_67f5_f790);
        assert_eq!(mix64(7), 0x12ae_3023_7b17_df14);
    }

    #[test]
    fn a_prompt_and_its_extension_share_their_leading_hashes() {
        let turn1 = [words(5, "sys").as_str(), words(14, "user").as_str()].map(str::to_owned);
        let reply = words(9, "reply");
        let next = words(6, "next");
        let first = chain_of(turn1.iter().map(String::as_str), 4);
        let second = chain_of(
            turn1
                .iter()
                .map(String::as_str)
                .chain([reply.as_str(), next.as_str()]),
            4,
        );
        assert_eq!(first.tokens, 19);
        assert_eq!(second.tokens, 34);
        assert_eq!(first.hashes.len(), 4, "19 tokens: 4 full blocks of 4");
        assert_eq!(second.hashes.len(), 8);
        assert_eq!(second.hashes[..4], first.hashes[..], "the shared prefix");
        // The extension's fifth block spans the first prompt's partial tail and new words.
        let other = chain_of([words(19, "x").as_str(), reply.as_str()], 4);
        assert_ne!(other.hashes[4], second.hashes[4]);
        assert_eq!(chain_of([""], 4), Chain::default());
    }
}
