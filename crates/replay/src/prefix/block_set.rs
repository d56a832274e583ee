//! A set of block hashes at 8 bytes a block: a sorted vector, and a small table of the blocks added
//! since it was last merged into the vector.
//!
//! The marker-masked chains of a run are shared by every session of a trace, so their set only
//! grows, up to the corpus's distinct blocks (millions for a large corpus). A hash table holds
//! them at 9 bytes a bucket and a half-empty table after each doubling, and a doubling holds the
//! old table and the new one at once; the sorted vector holds 8 bytes a block and grows by the
//! merged part only.

use agentx_metrics::kvmodel::BlockHashMap;

/// The smallest table of recent blocks merged into the vector.
const MIN_RECENT: usize = 4096;

/// A set of block hashes.
#[derive(Debug, Default)]
pub(super) struct BlockSet {
    sorted: Vec<u64>,
    recent: BlockHashMap<()>,
}

impl BlockSet {
    /// Whether `hash` was added.
    pub(super) fn contains(&self, hash: u64) -> bool {
        self.recent.contains_key(&hash) || self.sorted.binary_search(&hash).is_ok()
    }

    /// Adds `hash` (not in the set).
    pub(super) fn insert(&mut self, hash: u64) {
        self.recent.insert(hash, ());
        if self.recent.len() >= MIN_RECENT.max(self.sorted.len() / 16) {
            self.merge();
        }
    }

    /// Blocks in the set.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }

    /// Moves the recent blocks into the sorted vector: a merge from the back, in place.
    fn merge(&mut self) {
        let mut added: Vec<u64> = self.recent.drain().map(|(hash, ())| hash).collect();
        added.sort_unstable();
        let old_len = self.sorted.len();
        // Doubling, not exact: an exact reserve moved the whole vector to new pages at every
        // merge (a 16th of its length added each time), a stall of milliseconds on the runtime's
        // worker once it holds millions of blocks. The capacity past the length is never written.
        self.sorted.reserve(added.len());
        self.sorted.resize(old_len + added.len(), 0);
        // `write` is the next slot to fill from the back; `old` and `new` count what is left of
        // each run.
        let (mut old, mut new, mut write) = (old_len, added.len(), old_len + added.len());
        while new > 0 {
            write -= 1;
            if old > 0 && self.sorted[old - 1] > added[new - 1] {
                self.sorted[write] = self.sorted[old - 1];
                old -= 1;
            } else {
                self.sorted[write] = added[new - 1];
                new -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks added in any order are found, merged or not, and nothing else is.
    #[test]
    fn a_block_set_holds_what_was_added_across_merges() {
        let mut set = BlockSet::default();
        let hash = |i: u64| agentx_dataset::tokens::blocks::mix64(i);
        for i in 0..50_000 {
            set.insert(hash(i));
            if i % 9_973 == 0 {
                assert!((0..=i).all(|j| set.contains(hash(j))));
            }
        }
        assert_eq!(set.len(), 50_000);
        assert!(set.sorted.len() >= 40_000, "merged: {}", set.sorted.len());
        assert!(set.sorted.windows(2).all(|pair| pair[0] < pair[1]));
        assert!((0..50_000).all(|i| set.contains(hash(i))));
        assert!((50_000..60_000).all(|i| !set.contains(hash(i))));
    }
}
