//! [`ChunkOffsets`]: when each chunk of a response arrived, as offsets from the request's send,
//! held at 4 bytes a chunk.
//!
//! A run's records are read back whole for its report, and their chunk times were most of that
//! memory: a 20-minute run at 256 lanes streams about 20 million chunks. Held as 8-byte offsets
//! (and again as the sorted inter-chunk latencies the summary takes percentiles of), they took the
//! process from a flat replay to twice its RSS at the end. Here each chunk is its step from the
//! one before (the first's from the send) in a `u32` of nanoseconds; a step that does not fit (over
//! 4.29 s, or an offset before the one before it in a hand-written record) is kept exactly as its
//! whole offset beside. Every offset reads back as it was pushed, and the JSON is the list of
//! offsets, as before.

use std::fmt;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A step that is kept whole in [`ChunkOffsets::escaped`].
const ESCAPED: u32 = u32::MAX;

/// Each non-empty chunk's arrival, as nanoseconds from the request's send, in arrival order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChunkOffsets {
    /// Each chunk's offset less the one before it (the first's less 0), or [`ESCAPED`].
    steps: Vec<u32>,
    /// The whole offset of each escaped step, in order.
    escaped: Vec<u64>,
    /// The last offset pushed (0 before the first).
    last: u64,
}

impl ChunkOffsets {
    /// No chunks.
    pub const fn new() -> ChunkOffsets {
        ChunkOffsets {
            steps: Vec::new(),
            escaped: Vec::new(),
            last: 0,
        }
    }

    /// A chunk arrived `offset_ns` after the send.
    pub fn push(&mut self, offset_ns: u64) {
        let step = offset_ns
            .checked_sub(self.last)
            .and_then(|step| u32::try_from(step).ok())
            .filter(|step| *step != ESCAPED);
        match step {
            Some(step) => self.steps.push(step),
            None => {
                self.steps.push(ESCAPED);
                self.escaped.push(offset_ns);
            }
        }
        self.last = offset_ns;
    }

    /// Forgets every chunk.
    pub fn clear(&mut self) {
        *self = ChunkOffsets::new();
    }

    /// How many chunks arrived.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True when no chunk arrived.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The first chunk's offset (the time to first token).
    pub fn first(&self) -> Option<u64> {
        match *self.steps.first()? {
            ESCAPED => Some(self.escaped[0]),
            step => Some(u64::from(step)),
        }
    }

    /// The last chunk's offset.
    pub fn last(&self) -> Option<u64> {
        (!self.steps.is_empty()).then_some(self.last)
    }

    /// The offset of chunk `index` (walks the chunks before it).
    pub fn get(&self, index: usize) -> Option<u64> {
        self.iter().nth(index)
    }

    /// The offsets, in arrival order.
    pub fn iter(&self) -> Offsets<'_> {
        Offsets {
            steps: self.steps.iter(),
            escaped: self.escaped.iter(),
            at: 0,
        }
    }

    /// The gaps between consecutive chunks, in nanoseconds (0 where an offset is before the one
    /// before it): `len() - 1` of them.
    pub fn gaps(&self) -> impl Iterator<Item = u64> + '_ {
        self.iter()
            .zip(self.iter().skip(1))
            .map(|(earlier, later)| later.saturating_sub(earlier))
    }

    /// The offsets as a vector.
    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }

    /// Gives back the capacity beyond the chunks held.
    pub fn shrink_to_fit(&mut self) {
        self.steps.shrink_to_fit();
        self.escaped.shrink_to_fit();
    }
}

/// The offsets of a [`ChunkOffsets`], in arrival order.
#[derive(Clone)]
pub struct Offsets<'a> {
    steps: std::slice::Iter<'a, u32>,
    escaped: std::slice::Iter<'a, u64>,
    at: u64,
}

impl Iterator for Offsets<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        self.at = match *self.steps.next()? {
            ESCAPED => *self.escaped.next()?,
            step => self.at + u64::from(step),
        };
        Some(self.at)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.steps.size_hint()
    }
}

impl ExactSizeIterator for Offsets<'_> {}

impl<'a> IntoIterator for &'a ChunkOffsets {
    type Item = u64;
    type IntoIter = Offsets<'a>;

    fn into_iter(self) -> Offsets<'a> {
        self.iter()
    }
}

impl FromIterator<u64> for ChunkOffsets {
    fn from_iter<I: IntoIterator<Item = u64>>(offsets: I) -> ChunkOffsets {
        let mut chunks = ChunkOffsets::new();
        offsets.into_iter().for_each(|offset| chunks.push(offset));
        chunks
    }
}

impl From<Vec<u64>> for ChunkOffsets {
    fn from(offsets: Vec<u64>) -> ChunkOffsets {
        let mut chunks: ChunkOffsets = offsets.into_iter().collect();
        chunks.shrink_to_fit();
        chunks
    }
}

impl PartialEq<Vec<u64>> for ChunkOffsets {
    fn eq(&self, offsets: &Vec<u64>) -> bool {
        self.len() == offsets.len() && self.iter().eq(offsets.iter().copied())
    }
}

impl fmt::Debug for ChunkOffsets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for ChunkOffsets {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for ChunkOffsets {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ChunkOffsets, D::Error> {
        struct OffsetList;
        impl<'de> Visitor<'de> for OffsetList {
            type Value = ChunkOffsets;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of chunk offsets in nanoseconds")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ChunkOffsets, A::Error> {
                let mut chunks = ChunkOffsets::new();
                while let Some(offset) = seq.next_element::<u64>()? {
                    chunks.push(offset);
                }
                // Read back whole at a run's end: no doubling slack kept per record.
                chunks.shrink_to_fit();
                Ok(chunks)
            }
        }
        deserializer.deserialize_seq(OffsetList)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// Every offset reads back as pushed, whatever its step: small, zero, over `u32`, exactly the
    /// escape value, backwards; through JSON too.
    #[test]
    fn offsets_read_back_as_pushed() {
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..500 {
            let mut offsets = Vec::new();
            let mut at: u64 = 0;
            for _ in 0..rng.random_range(0..40) {
                at = match rng.random_range(0..6) {
                    0 => at,
                    1 => at + u64::from(ESCAPED),
                    2 => at + u64::from(ESCAPED) + rng.random_range(0..3),
                    3 => at.saturating_sub(rng.random_range(0..1_000_000)),
                    4 => rng.random_range(0..u64::MAX / 2),
                    _ => at + rng.random_range(0..50_000_000),
                };
                offsets.push(at);
            }
            let chunks = ChunkOffsets::from(offsets.clone());
            assert_eq!(chunks, offsets);
            assert_eq!(chunks.len(), offsets.len());
            assert_eq!(chunks.first(), offsets.first().copied());
            assert_eq!(chunks.last(), offsets.last().copied());
            assert_eq!(chunks.get(1), offsets.get(1).copied());
            let gaps: Vec<u64> = offsets
                .windows(2)
                .map(|w| w[1].saturating_sub(w[0]))
                .collect();
            assert_eq!(chunks.gaps().collect::<Vec<_>>(), gaps);
            let json = serde_json::to_string(&chunks).unwrap();
            assert_eq!(json, serde_json::to_string(&offsets).unwrap());
            assert_eq!(serde_json::from_str::<ChunkOffsets>(&json).unwrap(), chunks);
        }
    }

    #[test]
    fn a_step_that_fits_takes_four_bytes() {
        let chunks: ChunkOffsets = (1..=1000u64).map(|i| i * 10_000_000).collect();
        assert_eq!(chunks.steps.len(), 1000);
        assert!(chunks.escaped.is_empty());
        let slow: ChunkOffsets = [9_000_000_000u64, 9_010_000_000].into_iter().collect();
        assert_eq!(slow.escaped, vec![9_000_000_000]);
        assert_eq!(slow.to_vec(), vec![9_000_000_000, 9_010_000_000]);
    }

    #[test]
    fn a_list_that_is_not_offsets_is_an_error() {
        let err = serde_json::from_str::<ChunkOffsets>("[1, -2]").unwrap_err();
        assert!(err.to_string().contains("invalid value"), "{err}");
        assert!(serde_json::from_str::<ChunkOffsets>("{}").is_err());
    }
}
