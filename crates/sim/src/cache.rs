//! The prefix cache of one engine (prompt tokens hashed in fixed-size blocks, least recently used
//! blocks evicted first), and the index of every engine's blocks that says why a prompt's blocks
//! missed ([`BlockIndex`]).
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
//!
//! The index is updated under the admitting engine's cache lock, with every block that admission
//! inserted or evicted, before that lock is released; so it always holds what each engine held after
//! its last admission, in one total order (the admission sequence). Lock order: an engine's state,
//! then the index, never the other way round.

use std::sync::Mutex;

use agentx_metrics::kvmodel::{BlockMap, Lookup, Lru};

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
    #[cfg(test)]
    pub(crate) fn lookup_and_insert(&mut self, blocks: &[u64], prompt_tokens: u64) -> u64 {
        let lookup = self
            .lru
            .lookup_and_insert(blocks, self.usable_blocks(prompt_tokens));
        lookup.hit_blocks as u64 * u64::from(self.block_size)
    }

    /// Tokens per block.
    pub(crate) fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The prompt's leading blocks a hit may cover: never the last prompt token.
    pub(crate) fn usable_blocks(&self, prompt_tokens: u64) -> usize {
        (prompt_tokens.saturating_sub(1) / u64::from(self.block_size)) as usize
    }

    /// Whether block `hash` is cached.
    pub(crate) fn contains(&self, hash: u64) -> bool {
        self.lru.contains(hash)
    }

    /// [`PrefixCache::lookup_and_insert`] with the blocks it inserted and evicted.
    pub(crate) fn lookup(&mut self, blocks: &[u64], prompt_tokens: u64) -> Lookup {
        self.lru
            .lookup_and_insert(blocks, self.usable_blocks(prompt_tokens))
    }

    /// Blocks evicted for capacity since the cache was made.
    pub(crate) fn evicted_total(&self) -> u64 {
        self.lru.evicted_total()
    }
}

/// Why a request's uncached prompt tokens missed, in tokens; the three add up to the prompt tokens
/// minus the cached ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MissTruth {
    /// No engine had ever cached the block, plus the partial last block and the last token.
    pub cold: u64,
    /// An engine had cached the block and evicted it; none held it at admission.
    pub capacity: u64,
    /// Another engine held the block at admission.
    pub routing: u64,
}

/// Every block any engine ever cached, with how many engines hold it now, and the admission
/// counter: the server-wide side of each miss's truth.
#[derive(Debug, Default)]
pub(crate) struct BlockIndex {
    state: Mutex<IndexState>,
}

#[derive(Debug, Default)]
struct IndexState {
    /// Block hash to the number of engines holding it now; an entry stays (at 0) once inserted.
    holders: BlockMap<u32>,
    /// Requests admitted so far, over every engine.
    admitted: u64,
}

/// One admission's cache lookup, as [`BlockIndex::admit`] needs it.
pub(crate) struct Admitted<'a> {
    /// The prompt's full blocks.
    pub blocks: &'a [u64],
    /// The prompt's tokens.
    pub prompt_tokens: u64,
    /// Leading blocks a hit may cover.
    pub usable: usize,
    /// Whether the engine held each of the first `usable` blocks before the lookup.
    pub held_before: &'a [bool],
    /// What the lookup found and changed.
    pub lookup: &'a Lookup,
    /// Tokens per block.
    pub block_size: u32,
}

impl BlockIndex {
    /// Numbers one admission and classifies its missed blocks against what every engine held
    /// before it, then records the blocks it inserted and evicted. Called with the admitting
    /// engine's state locked. Returns the admission's sequence number (from 1) and its truth.
    pub(crate) fn admit(&self, admitted: &Admitted<'_>) -> (u64, MissTruth) {
        let Admitted {
            blocks,
            prompt_tokens,
            usable,
            held_before,
            lookup,
            block_size,
        } = *admitted;
        let block = u64::from(block_size);
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut truth = MissTruth::default();
        let missed = blocks
            .iter()
            .zip(held_before)
            .take(usable)
            .skip(lookup.hit_blocks);
        for (hash, &held) in missed {
            match state.holders.get(*hash) {
                Some(&holders) if holders > u32::from(held) => truth.routing += block,
                Some(_) => truth.capacity += block,
                None => truth.cold += block,
            }
        }
        let cached = lookup.hit_blocks as u64 * block;
        truth.cold += prompt_tokens
            .saturating_sub(cached)
            .saturating_sub(truth.routing + truth.capacity + truth.cold);
        for hash in &lookup.inserted {
            *state.holders.get_or_insert(*hash, 0) += 1;
        }
        for hash in &lookup.evicted {
            if let Some(holders) = state.holders.get_mut(*hash) {
                *holders = holders.saturating_sub(1);
            }
        }
        state.admitted += 1;
        (state.admitted, truth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn hashes(text: &str, bs: u32) -> Vec<u64> {
        agentx_tokens::blocks::chain_of([text], bs).hashes
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
