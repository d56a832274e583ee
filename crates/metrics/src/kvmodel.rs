//! The KV cache model: which prompt blocks a prefix cache of a given capacity holds, and which it
//! evicts, as requests arrive in order.
//!
//! [`Lru`] is the one eviction code path: the built-in simulator's engines run it, and a replay of a
//! run's block chains through it predicts what the simulator held. Pure: no I/O and no clocks.
//!
//! Invariants: blocks are keyed by chained hashes (`agentx_tokens::blocks`), so a block matches
//! only when its whole prefix matches, and the hit is the longest run of leading blocks present.
//! A lookup caches every block of the prompt, walking from the last block to the first, so within
//! one request the first block is the most recently used and eviction takes the tails of old
//! prompts before their shared heads (least recently used first, deeper blocks first on a tie).
//! A capacity of 0 caches nothing. The eviction count only grows.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

mod tables;

pub use tables::{BlockMap, BlockSet};

/// The hasher of every map keyed by block keys ([`BlockHashMap`]): one multiply by 2^64/phi and a
/// fold of the high half into the low (Fibonacci hashing), far cheaper than SipHash. Block hashes
/// are mixed already, but not every key is one: the cache truth keys a block by its first sender
/// and position packed into one number, and the table takes its bucket from the key's low bits
/// and its control byte from the top ones. Taken as they are, every request's block at one
/// position would share a bucket, and a run's model would take time in the square of its records.
#[derive(Default)]
pub struct BlockKeyHasher(u64);

/// A map keyed by block keys, hashed by [`BlockKeyHasher`].
pub type BlockHashMap<V> = HashMap<u64, V, BuildHasherDefault<BlockKeyHasher>>;

impl Hasher for BlockKeyHasher {
    fn finish(&self) -> u64 {
        let spread = self.0.wrapping_mul(FIBONACCI);
        spread ^ (spread >> 32)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// 2^64 divided by the golden ratio, odd: [`BlockKeyHasher`]'s multiplier.
const FIBONACCI: u64 = 0x9E37_79B9_7F4A_7C15;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    prev: u32,
    next: u32,
}

/// What one [`Lru::lookup_and_insert`] found and changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lookup {
    /// Leading blocks of the usable prefix that were cached (the hit, in blocks).
    pub hit_blocks: usize,
    /// Keys this lookup added to the cache, in insertion order (last block first).
    pub inserted: Vec<u64>,
    /// Keys this lookup evicted to stay within capacity, oldest first (a key both inserted and
    /// evicted by one long prompt is in both lists).
    pub evicted: Vec<u64>,
}

/// A least-recently-used set of block keys with a capacity in blocks.
pub struct Lru {
    capacity_blocks: usize,
    map: BlockHashMap<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used: evicted first.
    tail: u32,
    /// Blocks evicted since the cache was made.
    evicted: u64,
}

impl std::fmt::Debug for Lru {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lru")
            .field("capacity_blocks", &self.capacity_blocks)
            .field("blocks", &self.map.len())
            .field("evicted", &self.evicted)
            .finish()
    }
}

impl Lru {
    /// A cache of `capacity_blocks` blocks (at most `u32::MAX - 1`); 0 caches nothing.
    pub fn new(capacity_blocks: u64) -> Lru {
        Lru {
            capacity_blocks: capacity_blocks.min(u64::from(u32::MAX) - 1) as usize,
            map: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            evicted: 0,
        }
    }

    /// The capacity in blocks.
    pub fn capacity_blocks(&self) -> u64 {
        self.capacity_blocks as u64
    }

    /// Blocks cached now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether `key` is cached now.
    pub fn contains(&self, key: u64) -> bool {
        self.map.contains_key(&key)
    }

    /// Blocks evicted for capacity since the cache was made.
    pub fn evicted_total(&self) -> u64 {
        self.evicted
    }

    /// Match a prompt's blocks against the cache, then cache them all.
    ///
    /// `keys` are the chained keys of the prompt's full blocks, first block first; only the first
    /// `usable` may count as a hit (a server computes at least the last prompt token, so a prompt
    /// of `n` tokens in blocks of `b` can use `(n - 1) / b`). The hit is the longest run of leading
    /// usable blocks that were cached before this call.
    pub fn lookup_and_insert(&mut self, keys: &[u64], usable: usize) -> Lookup {
        let mut lookup = Lookup::default();
        if self.capacity_blocks == 0 {
            return lookup;
        }
        lookup.hit_blocks = keys
            .iter()
            .take(usable)
            .take_while(|&&key| self.map.contains_key(&key))
            .count();
        // Walk from the last block to the first so the head of the prompt ends up most recent.
        for &key in keys.iter().rev() {
            match self.map.get(&key) {
                Some(&slot) => self.move_to_front(slot),
                None => {
                    self.insert_front(key);
                    lookup.inserted.push(key);
                }
            }
        }
        while self.map.len() > self.capacity_blocks {
            if let Some(key) = self.evict_tail() {
                lookup.evicted.push(key);
            }
        }
        lookup
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { prev, next, .. } = self.slots[slot as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn link_front(&mut self, slot: u32) {
        self.slots[slot as usize].prev = NIL;
        self.slots[slot as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = slot;
        }
        self.head = slot;
        if self.tail == NIL {
            self.tail = slot;
        }
    }

    fn move_to_front(&mut self, slot: u32) {
        if self.head != slot {
            self.unlink(slot);
            self.link_front(slot);
        }
    }

    fn insert_front(&mut self, key: u64) {
        let slot = Slot {
            key,
            prev: NIL,
            next: NIL,
        };
        let index = match self.free.pop() {
            Some(index) => {
                self.slots[index as usize] = slot;
                index
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.map.insert(key, index);
        self.link_front(index);
    }

    /// Evicts the least recently used block: its key, or `None` when nothing is cached.
    fn evict_tail(&mut self) -> Option<u64> {
        let slot = self.tail;
        if slot == NIL {
            return None;
        }
        self.unlink(slot);
        let key = self.slots[slot as usize].key;
        self.map.remove(&key);
        self.free.push(slot);
        self.evicted += 1;
        Some(key)
    }
}

#[cfg(test)]
mod tests {

    /// Keys that differ only in their high bits (the cache truth's packed sender and position)
    /// land in different buckets (the low bits) and carry different control bytes (the top 7).
    #[test]
    fn packed_keys_spread_over_buckets_and_control_bytes() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<BlockKeyHasher>::default();
        let hashes: Vec<u64> = (0..1024u64)
            .map(|owner| build.hash_one((owner << 24) | 5))
            .collect();
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 0xFFF).collect();
        let controls: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(
            buckets.len() > 600,
            "{} distinct buckets of 4096",
            buckets.len()
        );
        assert_eq!(controls.len(), 128, "every control byte in use");
    }
    use super::*;

    /// Distinct keys `from..from + n`, standing for one prompt's chained block keys.
    fn keys(from: u64, n: u64) -> Vec<u64> {
        (from..from + n).collect()
    }

    #[test]
    fn hits_the_leading_cached_blocks_within_the_usable_prefix() {
        let mut lru = Lru::new(100);
        let first = lru.lookup_and_insert(&keys(0, 3), 3);
        assert_eq!(first.hit_blocks, 0);
        assert_eq!(first.inserted, [2, 1, 0], "last block first");
        let again = lru.lookup_and_insert(&keys(0, 5), 4);
        assert_eq!(again.hit_blocks, 3);
        assert_eq!(again.inserted, [4, 3]);
        assert_eq!(
            lru.lookup_and_insert(&keys(0, 5), 2).hit_blocks,
            2,
            "capped at usable"
        );
        assert!(lru.contains(4) && !lru.contains(5));
        assert_eq!(lru.evicted_total(), 0);
    }

    #[test]
    fn evicts_old_tails_first_and_counts_every_eviction() {
        let mut lru = Lru::new(3);
        let mut inserted = lru.lookup_and_insert(&keys(0, 3), 3).inserted.len();
        let other = lru.lookup_and_insert(&[100], 1);
        inserted += other.inserted.len();
        assert_eq!(other.evicted, [2], "the old prompt's tail goes first");
        let back = lru.lookup_and_insert(&keys(0, 3), 3);
        assert_eq!(back.hit_blocks, 2);
        assert_eq!(back.evicted, [100]);
        inserted += back.inserted.len();
        for from in [200, 300, 400] {
            inserted += lru.lookup_and_insert(&keys(from, 2), 2).inserted.len();
        }
        assert_eq!(inserted, 11);
        assert_eq!(lru.len(), 3);
        assert_eq!(
            lru.evicted_total(),
            11 - 3,
            "evictions = insertions beyond the capacity"
        );
    }

    #[test]
    fn a_prompt_longer_than_the_capacity_keeps_its_head() {
        let mut lru = Lru::new(3);
        let long = lru.lookup_and_insert(&keys(0, 10), 10);
        assert_eq!(long.inserted.len(), 10);
        assert_eq!(long.evicted, [9, 8, 7, 6, 5, 4, 3]);
        assert_eq!(lru.lookup_and_insert(&keys(0, 10), 10).hit_blocks, 3);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut lru = Lru::new(0);
        assert_eq!(lru.lookup_and_insert(&keys(0, 4), 4), Lookup::default());
        assert!(lru.is_empty());
        assert_eq!(lru.lookup_and_insert(&keys(0, 4), 4).hit_blocks, 0);
        assert_eq!(lru.capacity_blocks(), 0);
    }
}
