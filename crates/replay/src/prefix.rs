//! Who sent each prompt block first: the registry that turns each request's block chain into the
//! small [`PromptBlocks`] its record keeps (how many leading blocks an earlier request sent first,
//! and which one), so the cache model can rebuild every block's identity from the records alone.
//!
//! The chains are prefix-closed: a request registers every block of its prompt, and a block's
//! hash chains every block before it, so when a block is known all blocks before it are too. The
//! longest known prefix is then found by a binary search, and a request costs the lookups of its
//! new blocks, not of its whole prompt.
//!
//! Memory: the blocks before a tree's cache-bust marker (a system prompt other trees share) are
//! in the run's shared table, one entry per distinct block. A block whose hash chains a tree's
//! marker can be sent by that tree alone (the marker is the tree's own, a recycled tree draws a new
//! one), so a tree's blocks from its marker on are kept apart, as the chains the tree sent
//! ([`marked`], 8 bytes a block), and dropped whole when the tree leaves its lane
//! ([`Registry::forget`]) without changing any later request's figures: nobody can send them
//! again. So a long run's registry holds its live trees' blocks and the blocks shared across trees,
//! not everything it ever sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentx_dataset::PromptChain;
use agentx_record::PromptBlocks;

mod marked;

use agentx_metrics::kvmodel::{BlockMap, BlockSet};
use marked::MarkedChains;

/// A prompt's chain as [`Registry::register`] takes it: the blocks after the leading ones its
/// conversation gave up once an earlier prompt of it was registered, and the tree's marker.
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a> {
    /// The blocks, as the conversation gives them.
    pub(crate) prompt: PromptChain<'a>,
    /// The tree's marker: the chain's blocks from its `marked_from` on go to the marker's chains.
    /// `None` keeps every block in the shared table.
    pub(crate) marker: Option<&'a str>,
}

impl Chain<'_> {
    /// The tree's marker and the index of the chain's first block that chains it.
    fn marked(&self) -> Option<(&str, usize)> {
        self.marker.zip(self.prompt.marked_from)
    }
}

/// The first senders: the shared table, and each tree's chains from its marker on.
#[derive(Default)]
struct Senders {
    /// Each block's first sender, as its index in `shared_senders`: 16 bytes an entry, where the
    /// sender's `Arc<str>` itself made 24 (the table holds every distinct block before a marker,
    /// hundreds of thousands on a long corpus).
    shared: BlockMap<usize>,
    /// The requests that sent a block of the shared table first, each once. The table never
    /// forgets, and every sender here sent at least one of its blocks first, so this grows with
    /// the corpus's distinct blocks, not with the run's requests.
    shared_senders: Vec<Arc<str>>,
    by_marker: HashMap<Box<str>, MarkedChains>,
}

/// The first sender of every block the run sent.
pub(crate) struct Registry {
    /// Words per block of the chains.
    pub(crate) block_size: u32,
    first_sender: Mutex<Senders>,
    /// Every block of the chains with the marker masked.
    masked_sent: Mutex<BlockSet>,
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
    /// earlier request sent (the value of [`PromptBlocks::shared_unmarked`]). `hashes` follows
    /// `known` leading blocks the caller registered before (its conversation's earlier prompts,
    /// whose hashes it no longer holds): the set never forgets, so they count as sent.
    pub(crate) fn register_masked(&self, known: usize, hashes: &[u64]) -> u32 {
        let mut sent = self.masked_sent.lock().expect("prefix registry lock");
        let shared = hashes.partition_point(|&hash| sent.contains(hash));
        for &hash in &hashes[shared..] {
            sent.insert(hash);
        }
        u32::try_from(known + shared).unwrap_or(u32::MAX)
    }

    /// Drops the chains of `marker`: the blocks of a tree that ended, which chain its marker.
    pub(crate) fn forget(&self, marker: &str) {
        let mut senders = self.first_sender.lock().expect("prefix registry lock");
        senders.by_marker.remove(marker);
    }

    /// Branches of `marker`'s chains now.
    #[cfg(test)]
    pub(crate) fn branches(&self, marker: &str) -> usize {
        let senders = self.first_sender.lock().expect("prefix registry lock");
        senders
            .by_marker
            .get(marker)
            .map_or(0, MarkedChains::branches)
    }

    /// Requests the shared table names as a first sender.
    #[cfg(test)]
    pub(crate) fn shared_senders(&self) -> usize {
        let senders = self.first_sender.lock().expect("prefix registry lock");
        senders.shared_senders.len()
    }

    /// Blocks in the registry now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let senders = self.first_sender.lock().expect("prefix registry lock");
        senders.shared.len()
            + senders
                .by_marker
                .values()
                .map(MarkedChains::len)
                .sum::<usize>()
    }

    /// Registers the prompt of `request_id` and says which of its leading blocks an earlier
    /// request sent first.
    pub(crate) fn register(&self, request_id: &str, chain: Chain<'_>) -> PromptBlocks {
        let mut guard = self.first_sender.lock().expect("prefix registry lock");
        let Senders {
            shared,
            shared_senders,
            by_marker,
        } = &mut *guard;
        let prompt = &chain.prompt;
        let len = prompt.len();
        // Blocks from `marked_from` on are in the marker's chains, the ones before in the table.
        let (marked_from, marked) = match chain.marked() {
            Some((marker, from)) if from < len => {
                if !by_marker.contains_key(marker) {
                    by_marker.insert(marker.into(), MarkedChains::default());
                }
                (from, by_marker.get_mut(marker))
            }
            _ => (len, None),
        };
        // The forgotten blocks are known; the table is searched after them.
        let searched = prompt.forgotten.min(marked_from);
        let known_unmarked = searched
            + prompt.hashes[..marked_from - searched]
                .partition_point(|&hash| shared.contains_key(hash));
        let known = match marked.as_deref() {
            Some(chains) if known_unmarked == marked_from => chains.known(prompt, marked_from),
            _ => known_unmarked,
        };
        let from = known.checked_sub(1).and_then(|last| {
            let hash = prompt.hash_at(last)?;
            if last < marked_from {
                shared
                    .get(hash)
                    .and_then(|&index| shared_senders.get(index))
            } else {
                marked
                    .as_deref()
                    .and_then(|chains| chains.sender(last, hash))
            }
        });
        let from = from.map(std::string::ToString::to_string);
        if known < len {
            let first: Arc<str> = Arc::from(request_id);
            if known < marked_from {
                let index = shared_senders.len();
                shared_senders.push(Arc::clone(&first));
                for position in known..marked_from {
                    if let Some(hash) = prompt.hash_at(position) {
                        shared.insert(hash, index);
                    }
                }
            }
            if let Some(chains) = marked {
                chains.register(prompt, marked_from, known.max(marked_from), &first);
            }
        }
        PromptBlocks {
            block_size: self.block_size,
            blocks: u32::try_from(len).unwrap_or(u32::MAX),
            words: prompt.words,
            shared: u32::try_from(known).unwrap_or(u32::MAX),
            from,
            shared_unmarked: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain of `whole` without its first `forgotten` blocks, in the marker's chains from the
    /// block `marked` gives on.
    fn chain<'a>(
        whole: &'a [u64],
        forgotten: usize,
        words: u64,
        marked: Option<(&'a str, usize)>,
    ) -> Chain<'a> {
        Chain {
            prompt: PromptChain {
                forgotten,
                last_forgotten: forgotten.checked_sub(1).map(|last| whole[last]),
                hashes: &whole[forgotten..],
                words,
                marked_from: marked.map(|(_, from)| from),
            },
            marker: marked.map(|(marker, _)| marker),
        }
    }

    fn plain(hashes: &[u64], words: u64) -> Chain<'_> {
        chain(hashes, 0, words, None)
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
        // A request that sends only known blocks is not kept as a sender.
        let again = registry.register("r4", plain(&[1, 2, 3, 4], 60));
        assert_eq!((again.shared, again.from.as_deref()), (4, Some("r1")));
        assert_eq!((registry.len(), registry.shared_senders()), (8, 4));
    }

    /// A tree's blocks from its marker on are found by its later requests, across the two tables,
    /// and forgetting the tree leaves the blocks before its marker, which another tree still finds
    /// with the first sender it had.
    #[test]
    fn a_tree_forgets_the_blocks_of_its_marker_only() {
        let registry = Registry::new(16);
        let marked = |hashes: &'static [u64], from: usize| {
            chain(hashes, 0, 16 * hashes.len() as u64, Some(("[rid:a]", from)))
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

    /// The marker's chains answer as one table of every block ever sent would: over trees whose
    /// sessions share a system prompt, start their marker at different blocks, extend their
    /// chains turn by turn, reset them, follow one another, and leave out the leading blocks they
    /// registered before (as a conversation that gave up its hashes does), or do not.
    #[test]
    fn marked_chains_answer_as_a_table_of_every_block() {
        let mut draw = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |below: u64| {
            draw = draw.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (draw >> 33) % below
        };
        let registry = Registry::new(16);
        let mut table: agentx_metrics::kvmodel::BlockHashMap<String> = HashMap::default();
        let chain_of = |tokens: &[u64], marker: (u64, usize)| -> Vec<u64> {
            let mut hash = 0u64;
            let mut chain = Vec::new();
            for (position, &token) in tokens.iter().enumerate() {
                let token = if position == marker.1 {
                    token ^ (marker.0 << 40)
                } else {
                    token
                };
                hash = agentx_dataset::tokens::blocks::mix64(hash ^ token);
                chain.push(hash);
            }
            chain
        };
        let (mut requests, mut known_past_marker, mut from_earlier_turn) = (0, 0, 0);
        let mut forgetting = 0;
        for tree in 0..6u64 {
            let marker = format!("[rid:{tree}]");
            // Each session: its tokens, the block its marker starts at, and how many leading
            // blocks it registered and gave up.
            let mut sessions: Vec<(Vec<u64>, usize, usize)> = Vec::new();
            for turn in 0..40 {
                let pick = next(4) as usize;
                if sessions.is_empty() || pick == 0 {
                    // A new session: the shared system prompt, and sometimes a prefix of another
                    // session of the tree, with its marker at its own block.
                    let system = 1 + next(3) as usize;
                    let mut tokens: Vec<u64> = (0..system as u64).collect();
                    let at = system + next(2) as usize;
                    if let Some((other, other_at, _)) = sessions.last().filter(|_| next(2) == 0) {
                        tokens =
                            other[..(*other_at + 1 + next(3) as usize).min(other.len())].to_vec();
                        sessions.push((tokens, *other_at, 0));
                    } else {
                        tokens.extend((0..at + 2 - system).map(|_| 100 + next(5)));
                        sessions.push((tokens, at, 0));
                    }
                }
                let index = next(sessions.len() as u64) as usize;
                let (tokens, at, forgotten) = &mut sessions[index];
                if next(5) == 0 {
                    // A context reset: cut, then new blocks; what was given up past the cut is
                    // hashed again.
                    let cut = (*at + 1 + next(4) as usize).min(tokens.len());
                    tokens.truncate(cut);
                    *forgotten = (*forgotten).min(cut);
                }
                tokens.extend((0..1 + next(4)).map(|_| 100 + next(5)));
                let whole = chain_of(tokens, (tree + 1, *at));
                let request_id = format!("t{tree}-r{turn}");
                let expected_shared = whole.partition_point(|hash| table.contains_key(hash));
                let expected_from = expected_shared
                    .checked_sub(1)
                    .map(|last| table[&whole[last]].clone());
                for &hash in &whole[expected_shared..] {
                    table.insert(hash, request_id.clone());
                }
                let got = registry.register(
                    &request_id,
                    chain(
                        &whole,
                        *forgotten,
                        16 * whole.len() as u64,
                        Some((&marker, *at)),
                    ),
                );
                // Half the sessions give up what they registered, as a conversation does.
                if tree % 2 == 1 || next(3) == 0 {
                    *forgotten = whole.len();
                }
                forgetting += usize::from(*forgotten > *at + 1);
                assert_eq!(
                    (got.shared as usize, &got.from),
                    (expected_shared, &expected_from),
                    "{request_id}"
                );
                // Every block is held once: no branch copies another's.
                assert_eq!(registry.len(), table.len(), "{request_id}");
                requests += 1;
                known_past_marker += usize::from(expected_shared > *at + 1);
                from_earlier_turn += usize::from(
                    got.from
                        .is_some_and(|from| from.starts_with(&format!("t{tree}-"))),
                );
            }
        }
        assert_eq!(requests, 240);
        assert!(
            forgetting > 60,
            "{forgetting} registrations left out blocks past a marker"
        );
        assert!(
            known_past_marker > 100 && from_earlier_turn > 100,
            "{known_past_marker} {from_earlier_turn}"
        );
    }

    /// A conversation that gives up its hashes once registered extends its one branch turn by turn,
    /// as one that keeps them does, and finds its own earlier blocks.
    #[test]
    fn a_chain_without_its_registered_blocks_extends_its_branch() {
        let registry = Registry::new(16);
        let whole: Vec<u64> = (1..=12).collect();
        let mut forgotten = 0;
        let mut answers = Vec::new();
        for (turn, end) in [4usize, 7, 7, 12].into_iter().enumerate() {
            let got = registry.register(
                &format!("r{turn}"),
                chain(
                    &whole[..end],
                    forgotten,
                    16 * end as u64,
                    Some(("[rid:a]", 2)),
                ),
            );
            assert_eq!(got.blocks as usize, end);
            answers.push((got.shared, got.from));
            forgotten = end;
        }
        let from = |r: &str| Some(r.to_string());
        assert_eq!(
            answers,
            [(0, None), (4, from("r0")), (7, from("r1")), (7, from("r1"))]
        );
        assert_eq!((registry.len(), registry.branches("[rid:a]")), (12, 1));
    }

    #[test]
    fn masked_chains_count_the_blocks_sent_before_in_any_session() {
        let registry = Registry::new(16);
        assert_eq!(registry.register_masked(0, &[1, 2, 3]), 0);
        assert_eq!(registry.register_masked(0, &[1, 2, 4, 5]), 2);
        assert_eq!(registry.register_masked(0, &[1, 2, 4, 5, 6]), 4);
        // A chain whose first blocks the caller knows are registered (its own earlier prompt).
        assert_eq!(registry.register_masked(4, &[6, 7]), 5);
        assert_eq!(registry.register_masked(5, &[7, 8]), 6);
    }
}
