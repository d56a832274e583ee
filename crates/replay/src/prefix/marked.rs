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

use std::sync::Arc;

use agentx_metrics::kvmodel::BlockHashMap;

/// One branch: chain positions `from..from + hashes.len()`, and who sent each run of them first.
#[derive(Debug)]
struct Branch {
    /// The chain position of `hashes[0]`: the first block that chains the marker.
    from: usize,
    hashes: Vec<u64>,
    /// `(first position, sender)` of each run of blocks one request sent first, in order.
    senders: Vec<(usize, Arc<str>)>,
}

impl Branch {
    fn end(&self) -> usize {
        self.from + self.hashes.len()
    }

    /// Whether the branch holds `chain`'s block at `position`.
    fn holds(&self, chain: &[u64], position: usize) -> bool {
        position >= self.from
            && position < self.end()
            && self.hashes[position - self.from] == chain[position]
    }

    /// Where `chain` parts from this branch, searching from position `start` (`start` when it
    /// shares nothing from there).
    fn parts_at(&self, chain: &[u64], start: usize) -> usize {
        if self.from != start {
            // A branch whose marker starts elsewhere holds other text from `start` on.
            return start;
        }
        let common = chain.len().min(self.end()) - start;
        start + known_prefix(common, |i| chain[start + i] == self.hashes[i])
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
    /// the position of its first block nobody sent.
    pub(super) fn known(&self, chain: &[u64], start: usize) -> usize {
        let holds = |position: usize| {
            self.branches
                .iter()
                .any(|branch| branch.holds(chain, position))
                || self.cut.contains_key(&chain[position])
        };
        start + known_prefix(chain.len() - start, |i| holds(start + i))
    }

    /// The first sender of `chain`'s block at `position`, if it was sent.
    pub(super) fn sender(&self, chain: &[u64], position: usize) -> Option<&Arc<str>> {
        match self.branches.iter().find(|b| b.holds(chain, position)) {
            Some(branch) => Some(branch.sender_at(position)),
            None => self.cut.get(&chain[position]),
        }
    }

    /// Records that `sender` sent `chain`'s blocks from `known` on first (`start`: the marker's
    /// first block).
    pub(super) fn register(
        &mut self,
        chain: &[u64],
        start: usize,
        known: usize,
        sender: &Arc<str>,
    ) {
        if known >= chain.len() {
            return;
        }
        // The branch the chain follows furthest, if it shares a block with any.
        let followed = self
            .branches
            .iter()
            .enumerate()
            .map(|(index, branch)| (index, branch.parts_at(chain, start)))
            .filter(|&(_, parted)| parted > start)
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
                self.branches.push(Branch {
                    from: start,
                    hashes: Vec::new(),
                    senders: Vec::new(),
                });
                (self.branches.last_mut().expect("just pushed"), start)
            }
        };
        // Blocks from the cut to `known` were known as cut blocks: they join the branch with
        // their first senders.
        for (position, hash) in chain.iter().enumerate().take(known).skip(parted) {
            let first = self.cut.remove(hash);
            push_run(
                &mut branch.senders,
                position,
                first.unwrap_or_else(|| Arc::clone(sender)),
            );
        }
        push_run(&mut branch.senders, known, Arc::clone(sender));
        branch.hashes.reserve_exact(chain.len() - parted);
        branch.hashes.extend_from_slice(&chain[parted..]);
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
