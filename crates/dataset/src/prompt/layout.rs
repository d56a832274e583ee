//! The block layout of a trajectory's prompts, turn by turn, without text: which hash blocks and tails
//! form which message under either [`Tiling`] (the module docs of `prompt` describe both).

use super::*;
use crate::Dataset;

/// Words past the last full block of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tail {
    /// The first `words` words of the block with this hash id.
    Partial { id: u32, words: u32 },
    /// Synthesized words keyed by the turn.
    Synth { turn: u32, words: u32 },
}

impl Tail {
    pub(super) fn words(self) -> u64 {
        match self {
            Tail::Partial { words, .. } | Tail::Synth { words, .. } => u64::from(words),
        }
    }
}

/// A run of block positions `[start, end)` of the current hash-id list plus an optional tail.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Seg {
    pub(super) role: Role,
    /// The turn the segment belongs to: the turn an assistant segment answers, the turn whose new
    /// content a user segment is (0 for the system message).
    pub(super) turn: u32,
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) tail: Option<Tail>,
}

impl Seg {
    pub(super) fn is_empty(&self) -> bool {
        self.start == self.end && self.tail.is_none()
    }
}

/// What one step of the structure did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepInfo {
    /// The cut lost blocks of the previous prompt (a non-monotonic cut).
    pub reset: bool,
    /// Assistant blocks of the delta (before the wire-invariant adjustment).
    pub(crate) assistant_blocks: usize,
    /// The user part of the delta was empty (before the adjustment).
    pub(crate) user_delta_empty: bool,
}

/// The block structure of a trajectory, advanced turn by turn; no text.
#[derive(Debug, Clone)]
pub(super) struct Structure {
    /// The corpus the trajectory is read from (a handle on its mapping).
    dataset: Dataset,
    /// The trajectory's index in `dataset` (checked when the structure was made).
    trace: usize,
    pub(super) tiling: Tiling,
    /// The hash ids the segments index: the turn's recorded ids ([`Tiling::RecordedLength`]), the
    /// blocks of the history buffer ([`Tiling::Reference`]).
    pub(super) ids: Vec<u32>,
    /// Reference tiling: how many hash ids the current turn records. The ids themselves are not
    /// kept: the ones a turn adds to the buffer are its new ones, read from the corpus.
    pub(super) recorded_ids: usize,
    /// Reference tiling: the per-turn cap of assistant blocks ([`assistant_caps`]).
    pub(super) caps: Vec<Option<usize>>,
    pub(super) segs: Vec<Seg>,
    pub(super) full: usize,
    pub(super) turn: Option<usize>,
}

impl Structure {
    pub(super) fn new(traj: Trajectory<'_>, tiling: Tiling) -> Self {
        Structure {
            dataset: traj.dataset().clone(),
            trace: traj.index(),
            tiling,
            ids: Vec::new(),
            recorded_ids: 0,
            caps: match tiling {
                Tiling::RecordedLength => Vec::new(),
                Tiling::Reference => assistant_caps(traj),
            },
            segs: Vec::new(),
            full: 0,
            turn: None,
        }
    }

    /// Whether `other` lays out the same trajectory of the same corpus, with the same tiling.
    pub(super) fn same_trajectory(&self, other: &Structure) -> bool {
        std::sync::Arc::ptr_eq(&self.dataset.entry, &other.dataset.entry)
            && self.trace == other.trace
            && self.tiling == other.tiling
    }

    /// The trajectory being laid out.
    pub(super) fn traj(&self) -> Trajectory<'_> {
        self.dataset.trajectory_at(self.trace)
    }

    /// Applies the next turn.
    pub(super) fn step(&mut self) -> StepInfo {
        let turn_idx = self.turn.map_or(0, |t| t + 1);
        if self.tiling == Tiling::Reference {
            let info = self.step_reference(turn_idx);
            self.turn = Some(turn_idx);
            return info;
        }
        let traj = self.dataset.trajectory_at(self.trace);
        let turn = traj.turn(turn_idx).expect("caller checks the turn exists");
        let block = traj.block_size() as usize;
        let lcp = turn.lcp_with_previous();
        self.ids.truncate(lcp);
        self.ids.extend_from_slice(turn.new_hash_ids());
        let num_ids = self.ids.len();
        let input = turn.input_tokens() as usize;
        let full = num_ids.min(input / block);
        let rest = (input - full * block) as u32;
        let tail = match rest {
            0 => None,
            _ if full < num_ids => Some(Tail::Partial {
                id: self.ids[full],
                words: rest,
            }),
            _ => Some(Tail::Synth {
                turn: turn_idx as u32,
                words: rest,
            }),
        };
        let mut info = StepInfo {
            reset: false,
            assistant_blocks: 0,
            user_delta_empty: false,
        };
        let user_start;
        if turn_idx == 0 {
            self.segs.clear();
            user_start = self.push_system(full);
        } else {
            let keep = lcp.min(self.full).min(full);
            info.reset = keep < self.full;
            while self.segs.last().is_some_and(|s| s.start >= keep) {
                self.segs.pop();
            }
            if let Some(last) = self.segs.last_mut() {
                last.end = last.end.min(keep);
                last.tail = None;
                if last.is_empty() {
                    self.segs.pop();
                }
            }
            let prev_out = self
                .traj()
                .turn(turn_idx - 1)
                .map_or(0, |t| t.output_tokens() as usize);
            let answer_blocks = prev_out.div_ceil(block).min(full - keep);
            if answer_blocks > 0 {
                self.segs.push(Seg {
                    role: Role::Assistant,
                    turn: turn_idx as u32 - 1,
                    start: keep,
                    end: keep + answer_blocks,
                    tail: None,
                });
            }
            info.assistant_blocks = answer_blocks;
            user_start = keep + answer_blocks;
        }
        let user = Seg {
            role: Role::User,
            turn: turn_idx as u32,
            start: user_start,
            end: full,
            tail,
        };
        if user.is_empty() {
            info.user_delta_empty = true;
            self.end_with_user();
        } else {
            self.segs.push(user);
        }
        self.full = full;
        self.turn = Some(turn_idx);
        info
    }

    /// Turn 0's `system` message: the tools+system blocks, at most `full` of them. Returns where the
    /// user message starts.
    fn push_system(&mut self, full: usize) -> usize {
        let system = self.traj().system_blocks().min(full);
        if system > 0 {
            self.segs.push(Seg {
                role: Role::System,
                turn: 0,
                start: 0,
                end: system,
                tail: None,
            });
        }
        system
    }

    /// [`Tiling::Reference`]: applies turn `turn_index` as the reference's
    /// `init_turn_0`/`advance_turn` do.
    fn step_reference(&mut self, turn_index: usize) -> StepInfo {
        // A handle of its own: the turn's new ids are read from the mapping while the layout
        // changes.
        let dataset = self.dataset.clone();
        let traj = dataset.trajectory_at(self.trace);
        let turn = traj
            .turn(turn_index)
            .expect("caller checks the turn exists");
        let block = traj.block_size() as usize;
        let lcp = turn.lcp_with_previous();
        // The turn records the previous turn's first `lcp` ids (as far as it had them), then its
        // new ones: id `i` from `kept` on is `new_ids[i - kept]`.
        let kept = lcp.min(self.recorded_ids);
        let new_ids = turn.new_hash_ids();
        self.recorded_ids = kept + new_ids.len();
        let geo = Geometry::of(self.recorded_ids, turn.input_tokens() as usize, block);
        let tail = (geo.synth > 0).then_some(Tail::Synth {
            turn: turn_index as u32,
            words: geo.synth as u32,
        });
        let mut info = StepInfo {
            reset: false,
            assistant_blocks: 0,
            user_delta_empty: false,
        };
        if turn_index == 0 {
            self.segs.clear();
            self.ids.clear();
            self.ids.extend_from_slice(&new_ids[..geo.covered - kept]);
            let system = self.push_system(geo.covered);
            let user = Seg {
                role: Role::User,
                turn: 0,
                start: system,
                end: geo.covered,
                tail,
            };
            info.user_delta_empty = user.is_empty();
            if !user.is_empty() || self.segs.is_empty() {
                self.segs.push(user);
            }
            self.full = geo.covered;
            return info;
        }
        if lcp <= self.ids.len() {
            info.reset = self.cut_reference(lcp);
        }
        let start = self.ids.len();
        let new = geo.covered.saturating_sub(lcp);
        if lcp < geo.covered {
            // Ids from `lcp` on are new ones, as `lcp` is at least `kept`.
            self.ids
                .extend_from_slice(&new_ids[lcp - kept..geo.covered - kept]);
        }
        let prev_out = self
            .traj()
            .turn(turn_index - 1)
            .map_or(0, |t| t.output_tokens() as usize);
        // No user segment left: the conversation resumes with a user turn.
        let wanted = match self.segs.iter().any(|system| system.role == Role::User) {
            true => prev_out.div_ceil(block),
            false => 0,
        };
        let mut assistant = wanted.min(new);
        if let Some(cap) = self.caps.get(turn_index).copied().flatten() {
            assistant = assistant.min(cap);
        }
        if geo.synth == 0 && assistant == new && assistant > 0 {
            assistant -= 1;
        }
        if assistant > 0 {
            self.segs.push(Seg {
                role: Role::Assistant,
                turn: turn_index as u32 - 1,
                start,
                end: start + assistant,
                tail: None,
            });
        }
        let user = Seg {
            role: Role::User,
            turn: turn_index as u32,
            start: start + assistant,
            end: start + new,
            tail,
        };
        info.assistant_blocks = assistant;
        info.user_delta_empty = user.is_empty();
        if !user.is_empty() {
            self.segs.push(user);
        }
        self.full = self.ids.len();
        info
    }

    /// [`Tiling::Reference`]: cuts the buffer to its first `keep` blocks (`keep` at most the blocks it
    /// holds), as `truncate_synth_buf_at_block` does: the segment the cut lands in or ends at loses its
    /// tail, the segments after it go, the tails before it stay. Whether a sent segment changed.
    fn cut_reference(&mut self, keep: usize) -> bool {
        let mut changed = false;
        while self.segs.last().is_some_and(|s| s.start >= keep) {
            self.segs.pop();
            changed = true;
        }
        if let Some(last) = self.segs.last_mut() {
            if last.end > keep || last.tail.is_some() {
                last.end = last.end.min(keep);
                last.tail = None;
                changed = true;
            }
        }
        self.ids.truncate(keep);
        changed
    }

    /// Moves the last block into a user message unless the segments already end with one.
    fn end_with_user(&mut self) {
        let Some(last) = self.segs.last_mut() else {
            return;
        };
        if last.role == Role::User || last.end == last.start {
            return;
        }
        let end = last.end;
        let turn = self.turn.map_or(0, |t| t as u32 + 1);
        last.end -= 1;
        last.tail = None;
        if last.is_empty() {
            self.segs.pop();
        }
        self.segs.push(Seg {
            role: Role::User,
            turn,
            start: end - 1,
            end,
            tail: None,
        });
    }
}

/// [`Tiling::Reference`]: the block accounting of one turn (`compute_turn_block_geometry`).
struct Geometry {
    /// Full blocks with a recorded hash id: `min(ids, in / bs)`.
    covered: usize,
    /// Synthesized words: the partial tail plus the blocks the recording has no id for.
    synth: usize,
}

impl Geometry {
    fn of(ids: usize, input: usize, block_size: usize) -> Geometry {
        let full = input / block_size;
        Geometry {
            covered: ids.min(full),
            synth: input % block_size + full.saturating_sub(ids) * block_size,
        }
    }
}

/// [`Tiling::Reference`]: the reference's two-pass caps on each turn's assistant blocks
/// (`compute_asst_block_caps`), so that a later turn that only pulls back (no new block, no tail)
/// ends on a user block. The planner keeps its own tile of block owners, advanced by the cut clamped to
/// the tile (the reconstruction itself appends from the uncut prefix; the reference's two differ there,
/// and this follows both as written).
fn assistant_caps(traj: Trajectory<'_>) -> Vec<Option<usize>> {
    let num_turns = traj.num_turns();
    let block = traj.block_size() as usize;
    let mut caps = vec![None; num_turns];
    let mut eff = vec![0usize; num_turns];
    let mut tile: Vec<usize> = Vec::new();
    for (k, turn) in (0..num_turns).filter_map(|k| traj.turn(k).map(|t| (k, t))) {
        let lcp = turn.lcp_with_previous();
        let geo = Geometry::of(turn.num_hash_ids(), turn.input_tokens() as usize, block);
        if k == 0 {
            tile = vec![0; geo.covered];
            continue;
        }
        let shared_end = lcp.min(tile.len());
        eff[k] = shared_end;
        let new = geo.covered.saturating_sub(shared_end);
        if new == 0 && geo.synth == 0 && shared_end >= 1 {
            let owner = tile[shared_end - 1];
            if owner != 0 && shared_end > eff[owner] {
                let bound = shared_end - 1 - eff[owner];
                caps[owner] = Some(caps[owner].map_or(bound, |c: usize| c.min(bound)));
            }
        }
        tile.truncate(shared_end);
        tile.extend(std::iter::repeat_n(k, new));
    }
    caps
}

/// Which turns of `traj` may be the first request of a fresh session in `mode`: in live mode, turns
/// whose user delta is empty cannot (the server would see no new user content); in recorded mode, turns
/// whose whole delta is empty cannot. Turn 0 always can.
pub fn sendable_starts(traj: Trajectory<'_>, mode: AssistantMode, tiling: Tiling) -> Vec<bool> {
    let mut structure = Structure::new(traj, tiling);
    (0..traj.num_turns())
        .map(|_| {
            let info = structure.step();
            match mode {
                AssistantMode::Live => !info.user_delta_empty,
                AssistantMode::Recorded => !(info.user_delta_empty && info.assistant_blocks == 0),
            }
        })
        .collect()
}
