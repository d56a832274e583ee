//! Tables keyed by block keys that grow a shard at a time: a set at 8 bytes a block ([`BlockSet`])
//! and a map ([`BlockMap`]), split into 256 shards by the key.
//!
//! The tables of a run grow with what it sends, up to the corpus's distinct blocks: millions for a
//! large corpus (the replay's first senders and its set of marker-masked blocks, the simulator's
//! block holders). A table that grows whole moves all of it at once, on a runtime's worker, while
//! every stream it serves waits: a hash table's doubling at 460,000 blocks took 17 ms, a sorted
//! set's merge at 1.7 million 6-9 ms. Split by the key, a shard grows when it fills, and growing
//! moves a 256th of the table.
//!
//! [`super::Lru`] keeps one table: its index is bounded by the cache's capacity, and the run's cache
//! truth, which evicts as often as it inserts, took 2.4 times as long with the index in shards.
//!
//! The set keeps each shard as a sorted vector and a small table of the blocks added since it was
//! last merged into the vector: a set that only grows (the masked chains are shared by every session
//! of a trace) holds 8 bytes a block, where a hash table holds 9 bytes a bucket and a half-empty
//! table after each doubling.

use super::BlockHashMap;

/// Shards of each table: a shard's growth moves a 256th of it.
const SHARD_BITS: u32 = 8;
const SHARDS: usize = 1 << SHARD_BITS;

/// The smallest table of recent blocks a shard merges into its vector.
const MIN_RECENT: usize = 64;

/// The shard of `key`: bits 40-47 of [`super::BlockKeyHasher`]'s multiplicative spread of it, so
/// that keys that are not mixed (a sender and a position packed into one number) spread too. A
/// shard's table takes a key's bucket from the low bits of the same hash and its control byte from
/// the top seven: these middle bits pick the shard without narrowing either within it.
fn shard_of(key: u64) -> usize {
    let spread = key.wrapping_mul(super::FIBONACCI);
    (spread >> 40) as usize & (SHARDS - 1)
}

/// A set of block keys.
#[derive(Debug)]
pub struct BlockSet {
    shards: Box<[SetShard]>,
}

/// One shard of a [`BlockSet`].
#[derive(Debug, Default)]
struct SetShard {
    sorted: Vec<u64>,
    recent: BlockHashMap<()>,
}

impl Default for BlockSet {
    fn default() -> BlockSet {
        BlockSet {
            shards: (0..SHARDS).map(|_| SetShard::default()).collect(),
        }
    }
}

impl BlockSet {
    /// Whether `hash` was added.
    pub fn contains(&self, hash: u64) -> bool {
        let shard = &self.shards[shard_of(hash)];
        shard.recent.contains_key(&hash) || shard.sorted.binary_search(&hash).is_ok()
    }

    /// Adds `hash` (not in the set).
    pub fn insert(&mut self, hash: u64) {
        let shard = &mut self.shards[shard_of(hash)];
        shard.recent.insert(hash, ());
        if shard.recent.len() >= MIN_RECENT.max(shard.sorted.len() / 16) {
            shard.merge();
        }
    }

    /// Blocks in the set.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.sorted.len() + shard.recent.len())
            .sum()
    }

    /// Whether the set holds no block.
    pub fn is_empty(&self) -> bool {
        self.shards
            .iter()
            .all(|shard| shard.sorted.is_empty() && shard.recent.is_empty())
    }
}

impl SetShard {
    /// Moves the recent blocks into the sorted vector: a merge from the back, in place.
    fn merge(&mut self) {
        let mut added: Vec<u64> = self.recent.drain().map(|(hash, ())| hash).collect();
        added.sort_unstable();
        let old_len = self.sorted.len();
        // Doubling, not exact: an exact reserve would move the whole vector to new memory at every
        // merge. The capacity past the length is never written.
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

/// A map from block hashes to `V`.
#[derive(Debug)]
pub struct BlockMap<V> {
    shards: Box<[BlockHashMap<V>]>,
}

impl<V> Default for BlockMap<V> {
    fn default() -> BlockMap<V> {
        BlockMap {
            shards: (0..SHARDS).map(|_| BlockHashMap::default()).collect(),
        }
    }
}

impl<V> BlockMap<V> {
    /// The value of `key`.
    pub fn get(&self, key: u64) -> Option<&V> {
        self.shards[shard_of(key)].get(&key)
    }

    /// The value of `key`, to change.
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        self.shards[shard_of(key)].get_mut(&key)
    }

    /// The value of `key`, `value` put there first when it has none.
    pub fn get_or_insert(&mut self, key: u64, value: V) -> &mut V {
        self.shards[shard_of(key)].entry(key).or_insert(value)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: u64) -> bool {
        self.shards[shard_of(key)].contains_key(&key)
    }

    /// Sets the value of `key`; its value before.
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        self.shards[shard_of(key)].insert(key, value)
    }

    /// Takes the value of `key` out.
    pub fn remove(&mut self, key: u64) -> Option<V> {
        self.shards[shard_of(key)].remove(&key)
    }

    /// Keys in the map.
    pub fn len(&self) -> usize {
        self.shards.iter().map(std::collections::HashMap::len).sum()
    }

    /// Whether the map holds no key.
    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(std::collections::HashMap::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks added in any order are found, merged or not, and nothing else is.
    #[test]
    fn a_block_set_holds_what_was_added_across_merges() {
        let mut set = BlockSet::default();
        // SplitMix64's finaliser: well-mixed keys, as chained block hashes are.
        let hash = |i: u64| {
            let z = (i ^ (i >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for i in 0..200_000 {
            set.insert(hash(i));
            if i % 39_989 == 0 {
                assert!((0..=i).all(|j| set.contains(hash(j))));
            }
        }
        assert_eq!(set.len(), 200_000);
        let merged: usize = set.shards.iter().map(|shard| shard.sorted.len()).sum();
        assert!(merged >= 150_000, "merged: {merged}");
        for shard in &set.shards {
            assert!(shard.sorted.windows(2).all(|pair| pair[0] < pair[1]));
            // The hashes are well mixed: every shard holds its share, give or take.
            let held = shard.sorted.len() + shard.recent.len();
            assert!((600..1000).contains(&held), "{held}");
        }
        assert!((0..200_000).all(|i| set.contains(hash(i))));
        assert!((200_000..210_000).all(|i| !set.contains(hash(i))));
    }

    /// Keys that are not mixed (a sender and a position packed into one number, as the cache truth
    /// keys a block) spread over the shards too.
    #[test]
    fn packed_keys_spread_over_the_shards() {
        let mut map = BlockMap::default();
        for owner in 0..64u64 {
            for position in 0..1024u64 {
                map.insert((owner << 24) | position, ());
            }
        }
        assert_eq!(map.len(), 64 * 1024);
        let fullest = map.shards.iter().map(std::collections::HashMap::len).max();
        assert!(fullest < Some(2 * 64 * 1024 / SHARDS), "{fullest:?}");
        assert!(map.shards.iter().all(|shard| !shard.is_empty()));
        // Within a shard, the keys' hashes still spread over buckets (the low bits) and control
        // bytes (the top seven): a shard picked by bits its table uses would crowd them.
        use std::hash::BuildHasher;
        let build = std::hash::BuildHasherDefault::<super::super::BlockKeyHasher>::default();
        for shard in &map.shards {
            let hashes: Vec<u64> = shard.keys().map(|&key| build.hash_one(key)).collect();
            let buckets: std::collections::HashSet<u64> =
                hashes.iter().map(|hash| hash & 0x3ff).collect();
            let controls: std::collections::HashSet<u64> =
                hashes.iter().map(|hash| hash >> 57).collect();
            assert!(
                buckets.len() * 10 > hashes.len() * 6,
                "{} of {}",
                buckets.len(),
                hashes.len()
            );
            assert!(controls.len() > 80, "{} control bytes", controls.len());
        }
    }

    /// A map finds each value by its hash, across shards, the top bits included.
    #[test]
    fn a_block_map_finds_each_value_by_its_hash() {
        let mut map = BlockMap::default();
        let hashes = [0, 1, u64::MAX, 1 << 63, (1 << 56) - 1, 1 << 56];
        for (value, &hash) in hashes.iter().enumerate() {
            map.insert(hash, value);
        }
        assert_eq!(map.len(), hashes.len());
        for (value, &hash) in hashes.iter().enumerate() {
            assert_eq!(map.get(hash), Some(&value));
            assert!(map.contains_key(hash));
        }
        assert!(!map.contains_key(2));
        assert_eq!(map.get(u64::MAX - 1), None);
    }
}
