//! The blocks of one session tree that chain its cache-bust marker, kept as chains rather than
//! one table entry per block.
//!
//! A block's hash chains every block before it, so two chains that hold the same hash at position
//! `i` agree on every position before it: whether a prompt's block is known is whether some chain
//! sent before holds the same hash at the same position, and the known blocks of a prompt run
//! from the start to where it parts from the chain it follows furthest. A tree's requests mostly
//! extend the chain of the turn before (one branch per session, grown in place); a context reset
//! or a request that parts from every branch starts a new branch with a copy of the part it
//! shares. So a tree costs 8 bytes per block it sent, where a table of first senders costs about
//! four times that.

use std::sync::Arc;

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

    /// Where `chain` parts from this branch, searching from position `start` (`start` when it
    /// shares nothing from there).
    fn parts_at(&self, chain: &[u64], start: usize) -> usize {
        if self.from != start {
            // A branch whose marker starts elsewhere holds other text from `start` on.
            return start;
        }
        let common = chain.len().min(self.end()) - start;
        start + super::known_prefix(common, |i| chain[start + i] == self.hashes[i])
    }

    /// The first sender of the block at `position`.
    fn sender_at(&self, position: usize) -> &Arc<str> {
        let run = self
            .senders
            .partition_point(|(first, _)| *first <= position);
        &self.senders[run.saturating_sub(1)].1
    }
}

/// The chains one tree sent from its marker on.
#[derive(Debug, Default)]
pub(super) struct MarkedChains {
    branches: Vec<Branch>,
}

/// How far a chain's marked blocks are known: where it parts from the branch it follows
/// furthest, and that branch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Known {
    pub(super) end: usize,
    branch: Option<usize>,
}

impl Known {
    /// No block from `start` on is known.
    pub(super) fn none(start: usize) -> Known {
        Known {
            end: start,
            branch: None,
        }
    }
}

impl MarkedChains {
    /// How far `chain`'s blocks from position `start` (its marker's first block) were sent before.
    pub(super) fn known(&self, chain: &[u64], start: usize) -> Known {
        let mut known = Known::none(start);
        for (index, branch) in self.branches.iter().enumerate() {
            let end = branch.parts_at(chain, start);
            if end > known.end {
                known = Known {
                    end,
                    branch: Some(index),
                };
            }
        }
        known
    }

    /// The first sender of the known block at `position` (before `known.end`).
    pub(super) fn sender(&self, known: Known, position: usize) -> Option<&Arc<str>> {
        let branch = &self.branches[known.branch?];
        (position < known.end).then(|| branch.sender_at(position))
    }

    /// Records that `sender` sent `chain`'s blocks from `known.end` on first.
    pub(super) fn register(
        &mut self,
        chain: &[u64],
        start: usize,
        known: Known,
        sender: &Arc<str>,
    ) {
        if known.end >= chain.len() {
            return;
        }
        if let Some(branch) = known
            .branch
            .map(|index| &mut self.branches[index])
            .filter(|branch| branch.end() == known.end)
        {
            // The chain extends the branch: grow it in place.
            branch.hashes.reserve_exact(chain.len() - known.end);
            branch.hashes.extend_from_slice(&chain[known.end..]);
            branch.senders.push((known.end, Arc::clone(sender)));
            return;
        }
        // A new branch, with the part it shares and who sent that part first.
        let mut senders: Vec<(usize, Arc<str>)> = Vec::new();
        if let Some(followed) = known.branch.map(|index| &self.branches[index]) {
            for (first, run_sender) in &followed.senders {
                if *first >= known.end {
                    break;
                }
                let first = (*first).max(start);
                match senders.last_mut() {
                    Some(last) if last.0 == first => last.1 = Arc::clone(run_sender),
                    _ => senders.push((first, Arc::clone(run_sender))),
                }
            }
        }
        senders.push((known.end, Arc::clone(sender)));
        self.branches.push(Branch {
            from: start,
            hashes: chain[start..].to_vec(),
            senders,
        });
    }

    /// Blocks held, a block shared by two branches counted twice.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.branches.iter().map(|branch| branch.hashes.len()).sum()
    }
}
