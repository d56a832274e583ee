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
//! ended. A block whose hash chains a tree's cache-bust marker can be sent by that tree alone (the
//! marker is the tree's own, a recycled tree draws a new one), so such blocks are kept in a table
//! of the marker's own, dropped whole when the tree leaves its lane ([`Registry::forget`]) without
//! changing any later request's figures: nobody can send them again. The blocks before the marker
//! (a system prompt other trees share) are in the run's shared table and stay. So a long run's
//! registry holds its live trees' blocks and the blocks shared across trees, not everything it
//! ever sent, and a tree that ends costs one table drop, not a list of its blocks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentx_metrics::kvmodel::BlockHashMap;
use agentx_record::PromptBlocks;

/// A prompt's chain as [`Registry::register`] takes it.
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a> {
    /// The chained block hashes.
    pub(crate) hashes: &'a [u64],
    /// Its length in words.
    pub(crate) words: u64,
    /// The tree's marker and the index of the chain's first block that chains it: that block and
    /// every later one go to the marker's table. `None` keeps every block in the shared table.
    pub(crate) marked: Option<(&'a str, usize)>,
}

/// The first senders: the shared table and one table per marker.
#[derive(Default)]
struct Senders {
    shared: BlockHashMap<Arc<str>>,
    by_marker: HashMap<Box<str>, BlockHashMap<Arc<str>>>,
}

/// The first sender of every block the run sent.
pub(crate) struct Registry {
    /// Words per block of the chains.
    pub(crate) block_size: u32,
    first_sender: Mutex<Senders>,
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

    /// Drops the table of `marker`: the blocks of a tree that ended, which chain its marker.
    pub(crate) fn forget(&self, marker: &str) {
        let mut senders = self.first_sender.lock().expect("prefix registry lock");
        senders.by_marker.remove(marker);
    }

    /// Blocks in the registry now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let senders = self.first_sender.lock().expect("prefix registry lock");
        senders.shared.len() + senders.by_marker.values().map(HashMap::len).sum::<usize>()
    }

    /// Registers the prompt of `request_id` and says which of its leading blocks an earlier
    /// request sent first.
    pub(crate) fn register(&self, request_id: &str, chain: Chain<'_>) -> PromptBlocks {
        let mut guard = self.first_sender.lock().expect("prefix registry lock");
        let Senders { shared, by_marker } = &mut *guard;
        let hashes = chain.hashes;
        // Blocks from `marked_from` on are in the marker's table, the ones before in the shared.
        let (marked_from, mut marked) = match chain.marked {
            Some((marker, from)) if from < hashes.len() => {
                if !by_marker.contains_key(marker) {
                    by_marker.insert(marker.into(), BlockHashMap::default());
                }
                (from, by_marker.get_mut(marker))
            }
            _ => (hashes.len(), None),
        };
        // The table that holds block `index`, and its first sender there.
        fn sender<'t>(
            tables: (
                &'t BlockHashMap<Arc<str>>,
                Option<&'t BlockHashMap<Arc<str>>>,
            ),
            marked_from: usize,
            hash: (usize, u64),
        ) -> Option<&'t Arc<str>> {
            let (shared, marked) = tables;
            let (index, hash) = hash;
            let table = if index < marked_from {
                Some(shared)
            } else {
                marked
            };
            table.and_then(|table| table.get(&hash))
        }
        // The known blocks are a prefix: find its end by a binary search.
        let (mut known, mut unknown) = (0, hashes.len());
        while known < unknown {
            let mid = known + (unknown - known) / 2;
            let tables = (&*shared, marked.as_deref());
            if sender(tables, marked_from, (mid, hashes[mid])).is_some() {
                known = mid + 1;
            } else {
                unknown = mid;
            }
        }
        let from = known.checked_sub(1).and_then(|last_known| {
            let tables = (&*shared, marked.as_deref());
            sender(tables, marked_from, (last_known, hashes[last_known]))
                .map(std::string::ToString::to_string)
        });
        if known < hashes.len() {
            let first: Arc<str> = Arc::from(request_id);
            for (index, &hash) in hashes.iter().enumerate().skip(known) {
                let table = match marked.as_deref_mut() {
                    Some(table) if index >= marked_from => table,
                    _ => &mut *shared,
                };
                table.insert(hash, Arc::clone(&first));
            }
        }
        PromptBlocks {
            block_size: self.block_size,
            blocks: u32::try_from(hashes.len()).unwrap_or(u32::MAX),
            words: chain.words,
            shared: u32::try_from(known).unwrap_or(u32::MAX),
            from,
            shared_unmarked: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(hashes: &[u64], words: u64) -> Chain<'_> {
        Chain {
            hashes,
            words,
            marked: None,
        }
    }

    #[test]
    fn a_prompt_points_at_the_request_that_sent_its_shared_prefix_first() {
        let registry = Registry::new(16);
        let first = registry.register("r0", plain(&[1, 2, 3], 50));
        assert_eq!(first.shared, 0);
        assert_eq!(first.from, None);
        // The next turn keeps the three blocks and adds two.
        let second = registry.register("r1", plain(&[1, 2, 3, 4, 5], 90));
        assert_eq!((second.shared, second.from.as_deref()), (3, Some("r0")));
        // A subagent shares the first four: block 3 (index 3) was first sent by r1.
        let child = registry.register("r2", plain(&[1, 2, 3, 4, 9], 80));
        assert_eq!((child.shared, child.from.as_deref()), (4, Some("r1")));
        // A prompt that diverges at once shares nothing.
        let other = registry.register("r3", plain(&[7, 8], 40));
        assert_eq!((other.shared, other.from), (0, None));
        assert_eq!((other.block_size, other.blocks, other.words), (16, 2, 40));
    }

    /// A tree's blocks from its marker on are found by its later requests, across the two tables,
    /// and forgetting the tree leaves the blocks before its marker, which another tree still finds
    /// with the first sender it had.
    #[test]
    fn a_tree_forgets_the_blocks_of_its_marker_only() {
        let registry = Registry::new(16);
        let marked = |hashes: &'static [u64], from: usize| Chain {
            hashes,
            words: 16 * hashes.len() as u64,
            marked: Some(("[rid:a]", from)),
        };
        // Blocks 1 and 2 come before the marker (a shared system prompt); 3.. chain it.
        registry.register("a0", marked(&[1, 2, 3, 4], 2));
        let next = registry.register("a1", marked(&[1, 2, 3, 4, 5], 2));
        assert_eq!((next.shared, next.from.as_deref()), (4, Some("a0")));
        // A subagent whose marker sits later shares the system prompt; its block 7 (before its
        // marker) goes to the shared table.
        let child = registry.register("a2", marked(&[1, 2, 7, 8], 3));
        assert_eq!((child.shared, child.from.as_deref()), (2, Some("a0")));
        assert_eq!(registry.len(), 7);
        registry.forget("[rid:a]");
        assert_eq!(registry.len(), 3);
        let other = registry.register("b0", plain(&[1, 2, 9], 48));
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
