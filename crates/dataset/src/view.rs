//! Zero-copy views into a mapped cache entry: [`Dataset`] -> [`Trajectory`] -> [`Turn`] -> [`HashIds`].
//!
//! Views are `Copy` handles (a reference and an index); field reads decode little-endian values in place
//! and hash-id lists are slices of the mapped pool. Every index a view follows was bounds-checked when the
//! entry was validated ([`super::cache::Layout::parse`]), so no accessor can fail on an opened dataset.

use std::path::Path;
use std::sync::Arc;

use super::alias::Alias;
use super::cache::{rd_f64, rd_u32, rd_u64, CacheKey, Entry, Outcome, TRACE_REC, TURN_REC};
use super::mmap::as_u32s;
use super::weka::RequestKind;

/// An opened corpus: a mapped, validated cache entry plus where it came from. A clone is another
/// handle on the same mapping (the entry is shared), so a replay's tasks and conversations each hold
/// one and the mapping lives as long as the last of them.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub(crate) entry: Arc<Entry>,
    pub(crate) source: Arc<Path>,
    pub(crate) alias: Option<&'static Alias>,
    pub(crate) outcome: Outcome,
}

impl Dataset {
    fn bytes(&self) -> &[u8] {
        self.entry.map.bytes()
    }

    pub(crate) fn string(&self, index: u32) -> &str {
        let bytes = self.bytes();
        let layout = &self.entry.layout;
        let offset = rd_u32(bytes, layout.strings_off + 8 + index as usize * 8) as usize;
        let str_len = rd_u32(bytes, layout.strings_off + 12 + index as usize * 8) as usize;
        let data = layout.strings_off + 8 + layout.n_strings * 8;
        // Validated as UTF-8 when the entry was opened.
        std::str::from_utf8(&bytes[data + offset..data + offset + str_len]).unwrap_or("")
    }

    fn pool(&self) -> &[u32] {
        let layout = &self.entry.layout;
        as_u32s(&self.bytes()[layout.pool_off..layout.pool_off + layout.pool_len * 4])
            .unwrap_or(&[])
    }

    /// Number of trajectories (traces).
    pub fn len(&self) -> usize {
        self.entry.layout.n_traces
    }

    /// Whether the dataset has no trajectories.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total number of requests over all trajectories.
    pub fn total_turns(&self) -> usize {
        self.entry.layout.n_turns
    }

    /// Subagent entries parsed and not replayed.
    pub fn subagents_ignored(&self) -> u64 {
        self.entry.layout.subagents
    }

    /// The trajectory at `index` in dataset order.
    pub fn trajectory(&self, index: usize) -> Option<Trajectory<'_>> {
        (index < self.len()).then(|| self.trajectory_at(index))
    }

    /// The trajectory at `index`, which the caller took from a trajectory of this dataset.
    pub(crate) fn trajectory_at(&self, index: usize) -> Trajectory<'_> {
        debug_assert!(index < self.len());
        Trajectory {
            ds: self,
            index,
            rec: self.entry.layout.traces_off + index * TRACE_REC,
        }
    }

    /// All trajectories in dataset order.
    pub fn trajectories(&self) -> impl ExactSizeIterator<Item = Trajectory<'_>> + '_ {
        (0..self.len()).map(move |index| self.trajectory_at(index))
    }

    /// The trajectory with trace id `id` (a linear scan).
    pub fn find(&self, id: &str) -> Option<Trajectory<'_>> {
        self.trajectories().find(|t| t.id() == id)
    }

    /// The cache entry file backing this dataset.
    pub fn cache_path(&self) -> &Path {
        &self.entry.path
    }

    /// Size of the cache entry in bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.entry.layout.file_len as u64
    }

    /// The content key of the entry.
    pub fn cache_key(&self) -> CacheKey {
        self.entry.layout.key
    }

    /// Whether the entry was found or built by this open.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The traces file or directory the dataset was imported from.
    pub fn source_path(&self) -> &Path {
        &self.source
    }

    /// The public corpus name it was opened by, if any.
    pub fn alias(&self) -> Option<&'static Alias> {
        self.alias
    }
}

/// One trace: an ordered list of turns (requests) that form a session.
#[derive(Debug, Clone, Copy)]
pub struct Trajectory<'d> {
    ds: &'d Dataset,
    index: usize,
    rec: usize,
}

impl<'d> Trajectory<'d> {
    fn u32_at(&self, offset: usize) -> u32 {
        rd_u32(self.ds.bytes(), self.rec + offset)
    }

    /// The dataset this trajectory belongs to.
    pub fn dataset(&self) -> &'d Dataset {
        self.ds
    }

    /// Position in dataset order.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The trace id.
    pub fn id(&self) -> &'d str {
        self.ds.string(self.u32_at(0))
    }

    /// The trace's `models` list.
    pub fn models(&self) -> impl Iterator<Item = &'d str> {
        self.ds
            .string(self.u32_at(4))
            .split('\n')
            .filter(|s| !s.is_empty())
    }

    fn first_turn(&self) -> usize {
        self.u32_at(8) as usize
    }

    /// Number of turns (top-level requests).
    pub fn num_turns(&self) -> usize {
        self.u32_at(12) as usize
    }

    /// Tokens per hash block.
    pub fn block_size(&self) -> u32 {
        self.u32_at(16)
    }

    /// Tool-definition tokens of the trace's prompt prefix.
    pub fn tool_tokens(&self) -> u32 {
        self.u32_at(20)
    }

    /// System-prompt tokens of the trace's prompt prefix.
    pub fn system_tokens(&self) -> u32 {
        self.u32_at(24)
    }

    /// Blocks of the merged tools+system prefix: ceil((tool + system) / block_size).
    pub fn system_blocks(&self) -> usize {
        (u64::from(self.tool_tokens()) + u64::from(self.system_tokens()))
            .div_ceil(u64::from(self.block_size())) as usize
    }

    /// Subagent entries of this trace (parsed, not replayed).
    pub fn subagents(&self) -> u32 {
        self.u32_at(28)
    }

    /// Whether the corpus's hash ids are global (one id is one block of text in every trace, as in
    /// Mooncake traces) rather than numbered per trace.
    pub fn global_hash_ids(&self) -> bool {
        self.u32_at(36) & super::cache::TRACE_GLOBAL_HASH_IDS != 0
    }

    /// Turn `index`, if it exists.
    pub fn turn(&self, index: usize) -> Option<Turn<'d>> {
        (index < self.num_turns()).then(|| self.turn_unchecked(index))
    }

    fn turn_unchecked(&self, index: usize) -> Turn<'d> {
        let layout = &self.ds.entry.layout;
        Turn {
            traj: *self,
            k: index,
            off: layout.turns_off + (self.first_turn() + index) * TURN_REC,
        }
    }

    /// All turns in order.
    pub fn turns(&self) -> impl ExactSizeIterator<Item = Turn<'d>> + 'd {
        let traj = *self;
        (0..self.num_turns()).map(move |k| traj.turn_unchecked(k))
    }
}

/// One recorded request of a trajectory.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'d> {
    traj: Trajectory<'d>,
    k: usize,
    off: usize,
}

fn opt(value: f64) -> Option<f64> {
    (!value.is_nan()).then_some(value)
}

impl<'d> Turn<'d> {
    fn b(&self) -> &'d [u8] {
        self.traj.ds.bytes()
    }

    /// The trajectory this turn belongs to.
    pub fn trajectory(&self) -> Trajectory<'d> {
        self.traj
    }

    /// Position within the trajectory (0-based).
    pub fn index(&self) -> usize {
        self.k
    }

    /// Start time relative to the trace start, seconds.
    pub fn t(&self) -> f64 {
        rd_f64(self.b(), self.off)
    }

    /// Recorded client delay before this request (seconds), if recorded.
    pub fn think_time(&self) -> Option<f64> {
        opt(rd_f64(self.b(), self.off + 8))
    }

    /// Recorded server processing time (seconds), if recorded.
    pub fn api_time(&self) -> Option<f64> {
        opt(rd_f64(self.b(), self.off + 16))
    }

    /// Recorded time to first token (seconds; streaming requests), if recorded.
    pub fn ttft(&self) -> Option<f64> {
        opt(rd_f64(self.b(), self.off + 24))
    }

    /// Input (prompt) tokens: the target ISL (`in`).
    pub fn input_tokens(&self) -> u32 {
        rd_u32(self.b(), self.off + 32)
    }

    /// Output tokens (`out`): the request's `max_tokens`; 0 for tool-only turns.
    pub fn output_tokens(&self) -> u32 {
        rd_u32(self.b(), self.off + 36)
    }

    /// The request records no output length (a Mooncake row without `output_length`): it is sent
    /// without a token limit, and `output_tokens` is 0.
    pub(crate) fn no_output_limit(&self) -> bool {
        rd_u32(self.b(), self.off + 76) & super::cache::TURN_NO_OUTPUT_LIMIT != 0
    }

    /// The `max_tokens` this turn is sent with: its output tokens (at least 1), or
    /// [`super::NO_OUTPUT_LIMIT`] when it records none.
    pub fn max_tokens(&self) -> u32 {
        if self.no_output_limit() {
            super::NO_OUTPUT_LIMIT
        } else {
            self.output_tokens().max(1)
        }
    }

    /// Length of the longest common prefix of this turn's hash ids with the previous turn's (0 for the
    /// first turn).
    pub fn lcp_with_previous(&self) -> usize {
        rd_u32(self.b(), self.off + 40) as usize
    }

    /// Number of hash ids of this turn.
    pub fn num_hash_ids(&self) -> usize {
        rd_u32(self.b(), self.off + 44) as usize
    }

    /// The hash ids after the common prefix with the previous turn, a slice of the mapped pool.
    pub(crate) fn new_hash_ids(&self) -> &'d [u32] {
        let start = rd_u64(self.b(), self.off + 48) as usize;
        let count = self.num_hash_ids() - self.lcp_with_previous();
        &self.traj.ds.pool()[start..start + count]
    }

    /// This turn's full hash-id list, as slices of the mapped pool.
    pub fn hash_ids(&self) -> HashIds<'d> {
        let mut segs = Vec::new();
        let mut end = self.num_hash_ids();
        let mut turn_idx = self.k;
        // Walk back through the prefix chain: each turn contributes the part of its own suffix that
        // lies below `end`; validation guarantees each lcp fits within the previous turn's ids.
        while end > 0 {
            let turn = self.traj.turn_unchecked(turn_idx);
            let lcp = turn.lcp_with_previous();
            if end > lcp {
                segs.push(&turn.new_hash_ids()[..end - lcp]);
                end = lcp;
            }
            if end == 0 || turn_idx == 0 {
                break;
            }
            turn_idx -= 1;
        }
        segs.reverse();
        HashIds {
            segs,
            len: self.num_hash_ids(),
        }
    }

    /// Recorded transport (`"n"` or `"s"`).
    pub fn kind(&self) -> RequestKind {
        if rd_u32(self.b(), self.off + 72) == 1 {
            RequestKind::Streaming
        } else {
            RequestKind::Normal
        }
    }

    /// Recorded model.
    pub fn model(&self) -> &'d str {
        self.traj.ds.string(rd_u32(self.b(), self.off + 56))
    }

    /// Stop reason (`""`, `"tool_use"`, `"end_turn"`, ...).
    pub fn stop(&self) -> &'d str {
        self.traj.ds.string(rd_u32(self.b(), self.off + 60))
    }

    /// `input_types`, comma-joined.
    pub fn input_types(&self) -> &'d str {
        self.traj.ds.string(rd_u32(self.b(), self.off + 64))
    }

    /// `output_types`, comma-joined.
    pub fn output_types(&self) -> &'d str {
        self.traj.ds.string(rd_u32(self.b(), self.off + 68))
    }
}

/// A turn's hash-id list: consecutive slices of the mapped pool, in order.
#[derive(Debug, Clone)]
pub struct HashIds<'d> {
    segs: Vec<&'d [u32]>,
    len: usize,
}

impl<'d> HashIds<'d> {
    /// Number of ids.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ids in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.segs.iter().flat_map(|s| s.iter().copied())
    }

    /// The ids copied into a vector.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut ids = Vec::with_capacity(self.len);
        for s in &self.segs {
            ids.extend_from_slice(s);
        }
        ids
    }
}
