//! Who sent each prompt block first: the registry that turns each request's block chain into the
//! small [`PromptBlocks`] its record keeps (how many leading blocks an earlier request sent first,
//! and which one), so the cache model can rebuild every block's identity from the records alone.
//!
//! The chains are prefix-closed: a request registers every block of its prompt, and a block's
//! hash chains every block before it, so when a block is known all blocks before it are too. The
//! longest known prefix is then found by a binary search, and a request costs the lookups of its
//! new blocks, not of its whole prompt.
//!
//! Memory is one entry per distinct block the run sent, less the blocks of session trees that
//! ended: a block whose hash chains a tree's cache-bust marker can be sent by that tree alone (the
//! marker is the tree's own, a recycled tree draws a new one), so once the tree is gone nobody can
//! send it again and its entry is dropped ([`Registry::forget`]), without changing any later
//! request's figures. The blocks before the marker (a system prompt other trees share) stay. So a
//! long run's registry holds its live trees' blocks and the blocks shared across trees, not
//! everything it ever sent.

use std::sync::{Arc, Mutex};

use agentx_metrics::kvmodel::BlockHashMap;
use agentx_record::PromptBlocks;

/// The first sender of every block the run sent.
pub(crate) struct Registry {
    /// Words per block of the chains.
    pub(crate) block_size: u32,
    first_sender: Mutex<BlockHashMap<Arc<str>>>,
    /// Every block of the chains with the marker masked.
    masked_sent: Mutex<BlockHashMap<()>>,
}

impl Registry {
    /// An empty registry of chains in blocks of `block_size` words.
    pub(crate) fn new(block_size: u32) -> Registry {
        Registry {
            block_size: block_size.max(1),
            first_sender: Mutex::default(),
            masked_sent: Mutex::default(),
        }
    }

    /// Registers the chain of a prompt with its marker masked; the leading blocks of it an
    /// earlier request sent (the value of [`PromptBlocks::shared_unmarked`]).
    pub(crate) fn register_masked(&self, hashes: &[u64]) -> u32 {
        let mut sent = self.masked_sent.lock().expect("prefix registry lock");
        let shared = hashes.partition_point(|hash| sent.contains_key(hash));
        for &hash in &hashes[shared..] {
            sent.insert(hash, ());
        }
        u32::try_from(shared).unwrap_or(u32::MAX)
    }

    /// Drops the entries of `hashes`: blocks of a tree that ended, which chain its marker.
    pub(crate) fn forget(&self, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        let mut first_sender = self.first_sender.lock().expect("prefix registry lock");
        for hash in hashes {
            first_sender.remove(hash);
        }
    }

    /// Blocks in the registry now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.first_sender
            .lock()
            .expect("prefix registry lock")
            .len()
    }

    /// Registers the prompt of `request_id` (its chain's `hashes`, `words` long) and says which of
    /// its leading blocks an earlier request sent first.
    pub(crate) fn register(&self, request_id: &str, hashes: &[u64], words: u64) -> PromptBlocks {
        let mut first_sender = self.first_sender.lock().expect("prefix registry lock");
        // The known blocks are a prefix: find its end.
        let shared = hashes.partition_point(|hash| first_sender.contains_key(hash));
        let from = shared
            .checked_sub(1)
            .and_then(|last_shared| first_sender.get(&hashes[last_shared]))
            .map(std::string::ToString::to_string);
        if shared < hashes.len() {
            let sender: Arc<str> = Arc::from(request_id);
            for &hash in &hashes[shared..] {
                first_sender.insert(hash, Arc::clone(&sender));
            }
        }
        PromptBlocks {
            block_size: self.block_size,
            blocks: u32::try_from(hashes.len()).unwrap_or(u32::MAX),
            words,
            shared: u32::try_from(shared).unwrap_or(u32::MAX),
            from,
            shared_unmarked: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_points_at_the_request_that_sent_its_shared_prefix_first() {
        let registry = Registry::new(16);
        let first = registry.register("r0", &[1, 2, 3], 50);
        assert_eq!(first.shared, 0);
        assert_eq!(first.from, None);
        // The next turn keeps the three blocks and adds two.
        let second = registry.register("r1", &[1, 2, 3, 4, 5], 90);
        assert_eq!((second.shared, second.from.as_deref()), (3, Some("r0")));
        // A subagent shares the first four: block 3 (index 3) was first sent by r1.
        let child = registry.register("r2", &[1, 2, 3, 4, 9], 80);
        assert_eq!((child.shared, child.from.as_deref()), (4, Some("r1")));
        // A prompt that diverges at once shares nothing.
        let other = registry.register("r3", &[7, 8], 40);
        assert_eq!((other.shared, other.from), (0, None));
        assert_eq!((other.block_size, other.blocks, other.words), (16, 2, 40));
    }

    /// Forgetting a tree's marked blocks leaves the blocks before its marker, which another tree
    /// still finds with the first sender it had.
    #[test]
    fn a_tree_forgets_the_blocks_of_its_marker_only() {
        let registry = Registry::new(16);
        // Blocks 1 and 2 come before the marker (a shared system prompt); 3.. chain it.
        registry.register("a0", &[1, 2, 3, 4], 64);
        registry.register("a1", &[1, 2, 3, 4, 5], 80);
        registry.forget(&[3, 4, 5]);
        assert_eq!(registry.len(), 2);
        let other = registry.register("b0", &[1, 2, 9], 48);
        assert_eq!((other.shared, other.from.as_deref()), (2, Some("a0")));
    }

    #[test]
    fn masked_chains_count_the_blocks_sent_before_in_any_session() {
        let registry = Registry::new(16);
        assert_eq!(registry.register_masked(&[1, 2, 3]), 0);
        assert_eq!(registry.register_masked(&[1, 2, 4, 5]), 2);
        assert_eq!(registry.register_masked(&[1, 2, 4, 5, 6]), 4);
    }
}
