//! The blocks of one session tree that chain its cache-bust marker, kept as chains rather than
//! one table entry per block.
//!
//! A block's hash chains every block before it, so two chains that hold the same hash at position
//! `i` agree on every position before it: a prompt's known blocks run from its start to where it
//! parts from everything sent before. A tree's sessions mostly extend the chain of their turn
//! before, so each is kept as a branch, grown in place. When a turn parts from its branch before
//! the branch's end (the turn before ended in a tail this one replaces, or the context was cut),
//! the branch is cut there and the blocks past the cut, still sent and so still known, move to a
//! small table ([`MarkedChains::cut`]). So a tree costs 8 bytes per block of its live chains and a
//! table entry per block it dropped, where a table of first senders costs about four times that
//! for every block.
//!
//! A conversation gives up its chain's hashes once they are registered ([`PromptChain`]), so a
//! later prompt of it comes with the hashes after them only, and the hash of the last one given
//! up. A branch can therefore start past the marker's first block: where a chain whose earlier
//! blocks are held elsewhere (cut from another branch) goes on.

use std::sync::Arc;

use agentx_metrics::kvmodel::BlockHashMap;

use agentx_dataset::PromptChain;

/// One branch: chain positions `from..from + hashes.len()`, and who sent each run of them first.
#[derive(Debug)]
struct Branch {
    /// The chain position of `hashes[0]`: the marker's first block, or a later one.
    from: usize,
    hashes: Vec<u64>,
    /// `(first position, sender)` of each run of blocks one request sent first, in order.
    senders: Vec<(usize, Arc<str>)>,
}

impl Branch {
    fn end(&self) -> usize {
        self.from + self.hashes.len()
    }

    /// Whether the branch holds the block `hash` at `position`.
    fn holds(&self, position: usize, hash: u64) -> bool {
        position >= self.from && position < self.end() && self.hashes[position - self.from] == hash
    }

    /// Where `chain` parts from this branch, looking from position `start` (the marker's first
    /// block) on; `None` when it holds none of the chain's blocks from there. A block's hash chains
    /// every block before it, so the chain follows the branch from the first position both hold
    /// to where they part.
    fn parts_at(&self, chain: &PromptChain<'_>, start: usize) -> Option<usize> {
        let first = self.from.max(start).max(chain.first_held());
        let shared_end = chain.len().min(self.end());
        if first >= shared_end || !chain.hash_at(first).is_some_and(|h| self.holds(first, h)) {
            return None;
        }
        let after = first + 1;
        let held = |i: usize| {
            chain
                .hash_at(after + i)
                .is_some_and(|hash| self.holds(after + i, hash))
        };
        Some(after + known_prefix(shared_end - after, held))
    }

    /// The first sender of the block at `position`.
    fn sender_at(&self, position: usize) -> &Arc<str> {
        let run = self
            .senders
            .partition_point(|(first, _)| *first <= position);
        &self.senders[run.saturating_sub(1)].1
    }
}

/// The length of the prefix of `0..len` where `known` holds (it holds on a prefix: a block is known
/// only when every block before it is).
fn known_prefix(len: usize, known: impl Fn(usize) -> bool) -> usize {
    // Every index below `known_end` is known, none from `unknown_from` on.
    let (mut known_end, mut unknown_from) = (0, len);
    while known_end < unknown_from {
        let mid = known_end + (unknown_from - known_end) / 2;
        if known(mid) {
            known_end = mid + 1;
        } else {
            unknown_from = mid;
        }
    }
    known_end
}

/// Appends a run that starts at `position` unless the last run has the same sender.
fn push_run(senders: &mut Vec<(usize, Arc<str>)>, position: usize, sender: Arc<str>) {
    if !senders
        .last()
        .is_some_and(|(_, last)| Arc::ptr_eq(last, &sender))
    {
        senders.push((position, sender));
    }
}

/// The chains one tree sent from its marker on.
#[derive(Debug, Default)]
pub(super) struct MarkedChains {
    branches: Vec<Branch>,
    /// Blocks cut from the end of a branch when a later chain parted from it before its end, with
    /// their first senders: still known.
    cut: BlockHashMap<Arc<str>>,
}

impl MarkedChains {
    /// How far `chain`'s blocks from position `start` (its marker's first block) were sent before:
    /// the position of its first block nobody sent. Its forgotten blocks were.
    pub(super) fn known(&self, chain: &PromptChain<'_>, start: usize) -> usize {
        let holds = |position: usize| match chain.hash_at(position) {
            Some(hash) => self.sender(position, hash).is_some(),
            None => false,
        };
        let from = start.max(chain.forgotten);
        from + known_prefix(chain.len().saturating_sub(from), |i| holds(from + i))
    }

    /// The first sender of the block `hash` at `position`, if it was sent.
    pub(super) fn sender(&self, position: usize, hash: u64) -> Option<&Arc<str>> {
        match self.branches.iter().find(|b| b.holds(position, hash)) {
            Some(branch) => Some(branch.sender_at(position)),
            None => self.cut.get(&hash),
        }
    }

    /// Records that `sender` sent `chain`'s blocks from `known` on first (`start`: the marker's
    /// first block).
    pub(super) fn register(
        &mut self,
        chain: &PromptChain<'_>,
        start: usize,
        known: usize,
        sender: &Arc<str>,
    ) {
        let len = chain.len();
        if known >= len {
            return;
        }
        // The branch the chain follows furthest, if it holds any of its blocks.
        let followed = self
            .branches
            .iter()
            .enumerate()
            .filter_map(|(index, branch)| Some((index, branch.parts_at(chain, start)?)))
            .max_by_key(|&(_, parted)| parted);
        let (branch, parted) = match followed {
            Some((index, parted)) => {
                let branch = &mut self.branches[index];
                // Cut the branch where the chain parts from it; its blocks past the cut stay known.
                for position in parted..branch.end() {
                    let first = Arc::clone(branch.sender_at(position));
                    self.cut
                        .insert(branch.hashes[position - branch.from], first);
                }
                branch.hashes.truncate(parted - branch.from);
                branch.senders.retain(|(first, _)| *first < parted);
                (branch, parted)
            }
            None => {
                // A new branch, from the first block whose hash the chain holds: the forgotten
                // blocks before it are in other branches, or were cut from them.
                let from = start.max(chain.forgotten);
                self.branches.push(Branch {
                    from,
                    hashes: Vec::new(),
                    senders: Vec::new(),
                });
                (self.branches.last_mut().expect("just pushed"), from)
            }
        };
        // Blocks from the cut to `known` were known as cut blocks: they join the branch with
        // their first senders.
        for position in parted..known {
            let first = chain
                .hash_at(position)
                .and_then(|hash| self.cut.remove(&hash));
            push_run(
                &mut branch.senders,
                position,
                first.unwrap_or_else(|| Arc::clone(sender)),
            );
        }
        push_run(&mut branch.senders, known, Arc::clone(sender));
        let tail = &chain.hashes[parted - chain.forgotten..];
        branch.hashes.reserve_exact(tail.len());
        branch.hashes.extend_from_slice(tail);
    }

    /// Branches held.
    #[cfg(test)]
    pub(super) fn branches(&self) -> usize {
        self.branches.len()
    }

    /// Blocks held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.cut.len()
            + self
                .branches
                .iter()
                .map(|branch| branch.hashes.len())
                .sum::<usize>()
    }
}
