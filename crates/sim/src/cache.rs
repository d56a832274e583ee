//! The prefix cache of one engine: prompt tokens hashed in fixed-size blocks, least recently used
//! blocks evicted first.
//!
//! Invariants: a block's hash chains the hash of every block before it, so a block matches only
//! when its whole prefix matches (as in vLLM's automatic prefix caching). Only full blocks are
//! cached. A hit never covers the last prompt token (the engine must compute at least one token
//! to produce logits), so a fully cached prompt of `n` tokens reports at most `n - 1` cached
//! tokens, rounded down to whole blocks. Within one request the first block is the most recently
//! used, so eviction takes the tails of old prompts before their shared heads.
//!
//! The block hashes come from [`agentx_tokens::blocks::BlockHasher`]; the eviction code is the cache
//! model's ([`agentx_metrics::kvmodel::Lru`]), so a replay of the same chains predicts this cache.

use agentx_metrics::kvmodel::Lru;

/// The prefix cache of one engine: [`Lru`] over block hashes, with the capacity and the hit in
/// tokens.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    block_size: u32,
    lru: Lru,
}

impl PrefixCache {
    /// A cache of `capacity_tokens` tokens (rounded down to whole blocks); 0 disables caching.
    pub(crate) fn new(block_size: u32, capacity_tokens: u64) -> PrefixCache {
        let block_size = block_size.max(1);
        PrefixCache {
            block_size,
            lru: Lru::new(capacity_tokens / u64::from(block_size)),
        }
    }

    /// Blocks currently cached.
    #[cfg(test)]
    fn len_blocks(&self) -> usize {
        self.lru.len()
    }

    /// Match the prompt's blocks against the cache and then cache them all.
    ///
    /// `blocks` are the chained hashes of the prompt's full blocks and `prompt_tokens` its length.
    /// Returns the cached tokens: the matched prefix blocks times the block size, never covering
    /// the last prompt token.
    pub(crate) fn lookup_and_insert(&mut self, blocks: &[u64], prompt_tokens: u64) -> u64 {
        let usable = (prompt_tokens.saturating_sub(1) / u64::from(self.block_size)) as usize;
        let lookup = self.lru.lookup_and_insert(blocks, usable);
        lookup.hit_blocks as u64 * u64::from(self.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_tokens::blocks::BlockHasher;

    fn hashes(text: &str, bs: u32) -> Vec<u64> {
        let mut h = BlockHasher::new(bs);
        h.push_text(text);
        h.finish()
    }

    fn words(n: usize, tag: &str) -> String {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!("{tag}{i} "));
        }
        text
    }

    #[test]
    fn repeated_prefix_hits_whole_blocks_but_never_the_last_token() {
        let mut c = PrefixCache::new(4, 1000);
        let p1 = words(10, "w");
        assert_eq!(c.lookup_and_insert(&hashes(&p1, 4), 10), 0);
        // Same 10 tokens again: 2 full blocks cached, both usable since 9 tokens remain before the last.
        assert_eq!(c.lookup_and_insert(&hashes(&p1, 4), 10), 8);
        // Prompt of exactly 8 tokens fully cached: only one block usable (last token recomputed).
        let p8 = words(8, "w");
        assert_eq!(c.lookup_and_insert(&hashes(&p8, 4), 8), 4);
        // Extension of the first prompt hits its blocks.
        let p2 = words(20, "w");
        assert_eq!(c.lookup_and_insert(&hashes(&p2, 4), 20), 8);
        assert_eq!(c.lookup_and_insert(&hashes(&p2, 4), 20), 16);
    }

    #[test]
    fn lru_evicts_old_tails_first() {
        // Room for 3 blocks of 2 tokens.
        let mut c = PrefixCache::new(2, 6);
        let a = hashes(&words(6, "a"), 2); // 3 blocks
        c.lookup_and_insert(&a, 6);
        assert_eq!(c.len_blocks(), 3);
        let b = hashes(&words(2, "b"), 2); // 1 block, evicts a's tail block
        c.lookup_and_insert(&b, 2);
        assert_eq!(c.len_blocks(), 3);
        // a's first two blocks survive; a 7-token prompt can use 3 blocks but only 2 are cached.
        assert_eq!(c.lookup_and_insert(&a, 7), 4);
    }

    #[test]
    fn zero_capacity_disables_caching() {
        let mut c = PrefixCache::new(4, 0);
        let h = hashes(&words(16, "x"), 4);
        assert_eq!(c.lookup_and_insert(&h, 16), 0);
        assert_eq!(c.lookup_and_insert(&h, 16), 0);
        assert_eq!(c.len_blocks(), 0);
    }

    #[test]
    fn prompt_longer_than_capacity_keeps_its_head() {
        let mut c = PrefixCache::new(1, 3);
        let h = hashes(&words(10, "x"), 1);
        c.lookup_and_insert(&h, 10);
        assert_eq!(c.len_blocks(), 3);
        assert_eq!(c.lookup_and_insert(&h, 10), 3);
    }
}
