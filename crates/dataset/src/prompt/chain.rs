//! The prompt's block chain: the chained hashes of the text a turn sends, as the simulator hashes
//! what it receives ([`agentx_tokens::blocks`]: each message's text in order, split at whitespace,
//! in blocks of a given size, the cache-bust marker included where it is written).
//!
//! Kept across turns: the hasher's state after each message is remembered, so a turn that keeps
//! the previous turn's messages hashes only the messages after them, and a session's chains cost
//! what its new tokens cost, not its whole context per turn. A message is the same as before when
//! its segment and the hash ids it covers are (recorded mode: a segment rebuilt after a context
//! reset may sit at the same positions over other ids) or when it has the same place in a live
//! history that was extended, not rebuilt.
//!
//! With a cache-bust marker, the same pass keeps the chain of the prompt with the marker masked:
//! every message but the marker's has the same words in both, so each of its words is split and
//! hashed once and pushed into both chains.

use std::sync::Arc;

use agentx_tokens::blocks::{BlockHasher, Checkpoint};

use super::{CacheBust, Conversation, MsgRef, Placement, Seg};

/// What identifies a message already hashed.
#[derive(Debug, Clone, PartialEq)]
enum MessageKey {
    /// Recorded mode: the segment and a fingerprint of the hash ids it covers (after a context
    /// reset, a segment rebuilt at the same positions can cover other ids).
    Seg(Seg, u64),
    /// Live mode: the message's place in the live history of one generation.
    Live(usize),
}

/// The hashers of one conversation (the prompt's chain, and with a marker the same chain with the
/// marker masked) and their states after each message hashed.
#[derive(Debug, Clone, Default)]
pub(super) struct ChainCache {
    /// The chain's block size; 0 before the first chain.
    block_size: u32,
    /// The live history's generation the keys belong to.
    gen: u64,
    bust: Option<(Placement, String)>,
    /// The message that carries the marker.
    bust_target: Option<usize>,
    hasher: Option<BlockHasher>,
    /// The chain of the same text with the marker's words masked; `None` without a marker. Every
    /// message but the marker's is pushed into both at once, each word hashed once.
    masked: Option<BlockHasher>,
    /// Each message hashed, in order, with the hashers' states after it.
    hashed: Vec<Hashed>,
    /// The chain position (in words) of the marker's first word, once the message that carries it
    /// was hashed: every block from the one holding it on chains the marker.
    marker_word: Option<u64>,
}

/// A message hashed, and the hashers' states after it.
#[derive(Debug, Clone)]
struct Hashed {
    key: MessageKey,
    after: Checkpoint,
    masked_after: Option<Checkpoint>,
}

impl Conversation {
    /// Calls `use_chain` with the current turn's block chain: the chained hashes of its full blocks
    /// of `block_size` words, and its length in words (the partial last block and the marker
    /// included). The text is the one [`Conversation::messages_json_parts`] sends with the same
    /// `bust`. The hashes start after any blocks [`Conversation::forget_chains`] gave up: the whole
    /// chain for a conversation that never forgot.
    pub fn with_prompt_chain<R>(
        &self,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chain: impl FnOnce(&[u64], u64) -> R,
    ) -> R {
        self.chain_in(bust, block_size, |hashers| {
            use_chain(hashers.plain.hashes(), hashers.plain.tokens())
        })
    }

    /// The current turn's chain as the replay registers it: the blocks after those
    /// [`Conversation::forget_chains`] gave up (as far as this prompt still begins with them), and
    /// where the marker's blocks start ([`Conversation::marked_from_block`]).
    pub fn with_marked_prompt_chain<R>(
        &self,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chain: impl FnOnce(PromptChain<'_>) -> R,
    ) -> R {
        self.chain_in(bust, block_size, |hashers| {
            use_chain(PromptChain {
                forgotten: hashers.plain.forgotten(),
                last_forgotten: hashers.plain.last_forgotten(),
                hashes: hashers.plain.hashes(),
                words: hashers.plain.tokens(),
                marked_from: hashers.marked_from,
            })
        })
    }

    /// The index of the first block of the last [`Conversation::with_prompt_chain`] chain whose hash
    /// chains the cache-bust marker: that block and every later one belong to this marker alone,
    /// so no prompt without it (another session's, another tree's) can send them. `None` without a
    /// marker, or before a chain was made.
    pub fn marked_from_block(&self) -> Option<usize> {
        let cache = self.chain_cache.borrow();
        marked_from(cache.marker_word, cache.block_size)
    }

    /// Calls `use_chain` with the chain of the same prompt with its cache-bust marker masked (each
    /// word of the marker written as `#`, so the words and the block boundaries stay): the chain
    /// two sessions of one trace share but for their markers, which tells a miss the marker caused
    /// from a cold one. `None` without a marker.
    ///
    /// `use_chain` gets how many leading blocks are left out (those
    /// [`Conversation::forget_masked_chain`] gave up, as far as this prompt still begins with them),
    /// the hashes of the blocks after them, and the prompt's length in words.
    pub fn with_masked_prompt_chain<R>(
        &self,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chain: impl FnOnce(usize, &[u64], u64) -> R,
    ) -> Option<R> {
        bust?;
        self.chain_in(bust, block_size, |hashers| {
            hashers
                .masked
                .map(|masked| use_chain(masked.forgotten(), masked.hashes(), masked.tokens()))
        })
    }

    /// Takes over the chains `earlier` made: `earlier` is this conversation's stream at an earlier
    /// turn, rebuilt rather than advanced (a stream's next turn after a warmup primer is its
    /// recorded history, made anew). The messages both share are not hashed again, and the blocks
    /// `earlier` gave up stay given up: the registry has them. Without this, the rebuilt
    /// conversation hashes its whole prompt and holds every hash until it is sent, through the
    /// warmup: with 1,024 lanes' primers that was 84 MB of hashes held at once.
    ///
    /// Recorded mode only, where a message is known by its content (its segment and the hash ids
    /// it covers); live mode knows a message by its place in one history, which a rebuilt
    /// conversation does not share. A conversation of another trajectory or text takes nothing.
    pub fn adopt_chains(&self, earlier: &Conversation) {
        let recorded = self.mode == super::AssistantMode::Recorded
            && earlier.mode == super::AssistantMode::Recorded;
        let same_text = self.key == earlier.key
            && self.block_key == earlier.block_key
            && Arc::ptr_eq(&self.synth.vocab, &earlier.synth.vocab)
            && self.st.same_trajectory(&earlier.st);
        if !(recorded && same_text) {
            return;
        }
        let mut adopted = earlier.chain_cache.take();
        adopted.gen = self.gen;
        *self.chain_cache.borrow_mut() = adopted;
    }

    /// Gives up the hashes of both chains made so far, keeping what chains their next blocks: for a
    /// caller that stored them (the prefix registry, which knows every block it was given while the
    /// conversation's tree lives), so that a conversation holds its prompt's hashes only until they
    /// are registered. Later chains of [`Conversation::with_marked_prompt_chain`] and
    /// [`Conversation::with_masked_prompt_chain`] leave them out.
    pub fn forget_chains(&self) {
        let mut cache = self.chain_cache.borrow_mut();
        if let Some(plain) = cache.hasher.as_mut() {
            plain.forget_hashes();
        }
        if let Some(masked) = cache.masked.as_mut() {
            masked.forget_hashes();
        }
    }

    /// The chains of the current turn with `bust`, kept across turns: a message already hashed
    /// (the same key at the same place) is not hashed again.
    fn chain_in<R>(
        &self,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chains: impl FnOnce(Hashers<'_>) -> R,
    ) -> R {
        let mut cache = self.chain_cache.borrow_mut();
        let bust_key = bust.map(|marker| (marker.placement, marker.text.to_owned()));
        let bust_target = bust.and_then(|marker| self.bust_target(marker.placement));
        if cache.block_size != block_size.max(1)
            || cache.gen != self.gen
            || cache.bust != bust_key
            || cache.bust_target != bust_target
        {
            *cache = ChainCache {
                block_size: block_size.max(1),
                gen: self.gen,
                masked: bust.map(|_| BlockHasher::new(block_size)),
                bust: bust_key,
                bust_target,
                hasher: Some(BlockHasher::new(block_size)),
                hashed: Vec::new(),
                marker_word: None,
            };
        }
        let ChainCache {
            block_size,
            hasher,
            masked,
            hashed,
            marker_word,
            ..
        } = &mut *cache;
        let hasher = hasher.get_or_insert_with(|| BlockHasher::new(*block_size));
        let mut kept = 0;
        let mut diverged = false;
        let mut msg_idx = 0;
        let mut text = Vec::new();
        self.for_each_msg(|_, message| {
            let key = match message {
                MsgRef::Blocks(seg) if self.mode == super::AssistantMode::Recorded => {
                    MessageKey::Seg(seg.clone(), self.ids_fingerprint(seg))
                }
                _ => MessageKey::Live(msg_idx),
            };
            if !diverged && hashed.get(msg_idx).is_some_and(|done| done.key == key) {
                kept = msg_idx + 1;
            } else {
                if !diverged {
                    diverged = true;
                    rewind_to(hasher, masked.as_mut(), hashed, kept, *block_size);
                }
                let marker = bust.filter(|_| bust_target == Some(msg_idx));
                let before = hasher.tokens();
                self.hash_message(hasher, masked.as_mut(), &mut text, message, marker);
                // The marker's words as the hasher splits them (a marker of none chains nothing).
                let marker_words = marker.map_or(0, |marker| {
                    marker.text.split_ascii_whitespace().count() as u64
                });
                if let Some(marker) = marker.filter(|_| marker_words > 0) {
                    // A prefix marker starts the message; any other ends it.
                    *marker_word = Some(match marker.placement {
                        Placement::SystemPrefix | Placement::FirstUserPrefix => before,
                        Placement::SystemSuffix | Placement::FirstUserSuffix => {
                            hasher.tokens().saturating_sub(marker_words)
                        }
                    });
                }
                hashed.push(Hashed {
                    key,
                    after: hasher.checkpoint(),
                    masked_after: masked.as_ref().map(BlockHasher::checkpoint),
                });
            }
            msg_idx += 1;
        });
        if !diverged && kept < hashed.len() {
            rewind_to(hasher, masked.as_mut(), hashed, kept, *block_size);
        }
        if diverged {
            hasher.shrink_slack();
            if let Some(masked) = masked.as_mut() {
                masked.shrink_slack();
            }
        }
        use_chains(Hashers {
            plain: hasher,
            masked: masked.as_ref(),
            marked_from: marked_from(*marker_word, *block_size),
        })
    }

    /// Hashes one message into `hasher`, and into `masked` with the marker's words masked. Only the
    /// marker's message is written twice; every other one is split and hashed once for both.
    fn hash_message(
        &self,
        hasher: &mut BlockHasher,
        masked: Option<&mut BlockHasher>,
        text: &mut Vec<u8>,
        message: MsgRef<'_>,
        marker: Option<CacheBust<'_>>,
    ) {
        text.clear();
        self.write_raw_text(text, message, marker);
        let Some(masked) = masked else {
            hasher.push_text_bytes(text);
            return;
        };
        let Some(marker) = marker else {
            hasher.push_text_bytes_twin(masked, text);
            return;
        };
        hasher.push_text_bytes(text);
        let masked_text = mask_words(marker.text);
        let masked_marker = CacheBust {
            placement: marker.placement,
            text: &masked_text,
        };
        text.clear();
        self.write_raw_text(text, message, Some(masked_marker));
        masked.push_text_bytes(text);
    }

    /// A fingerprint of the hash ids `seg` covers.
    fn ids_fingerprint(&self, seg: &Seg) -> u64 {
        self.st.ids[seg.start..seg.end]
            .iter()
            .fold(0x9e37_79b9_7f4a_7c15, |acc: u64, &id| {
                agentx_tokens::blocks::mix64(acc ^ u64::from(id))
            })
    }

    /// The text of one message as the server reads it (JSON escapes undone), the marker where it
    /// goes.
    fn write_raw_text(
        &self,
        out: &mut Vec<u8>,
        message: MsgRef<'_>,
        marker: Option<CacheBust<'_>>,
    ) {
        let prefix = marker.filter(|marker| {
            matches!(
                marker.placement,
                Placement::SystemPrefix | Placement::FirstUserPrefix
            )
        });
        if let Some(marker) = prefix {
            out.extend_from_slice(marker.text.as_bytes());
        }
        match message {
            MsgRef::Blocks(_) => self.write_content(out, message),
            MsgRef::Text(escaped, _, _) => push_json_unescaped(out, escaped.as_bytes()),
        }
        if let Some(marker) = marker.filter(|_| prefix.is_none()) {
            out.extend_from_slice(marker.text.as_bytes());
        }
    }
}

/// The index of the block that holds the marker's first word (at `marker_word` in the chain).
fn marked_from(marker_word: Option<u64>, block_size: u32) -> Option<usize> {
    marker_word.map(|word| (word / u64::from(block_size.max(1))) as usize)
}

/// `text` with each word (a run of non-whitespace) written as one `#`, the whitespace kept.
fn mask_words(text: &str) -> String {
    let mut masked = String::with_capacity(text.len());
    let mut in_word = false;
    for character in text.chars() {
        if character.is_whitespace() {
            masked.push(character);
            in_word = false;
        } else if !in_word {
            masked.push('#');
            in_word = true;
        }
    }
    masked
}

/// A turn's block chain as [`Conversation::with_marked_prompt_chain`] gives it: the blocks after
/// the leading ones the conversation gave up.
#[derive(Debug, Clone, Copy)]
pub struct PromptChain<'a> {
    /// Leading blocks left out ([`Conversation::forget_chains`]): the caller stored them before.
    pub forgotten: usize,
    /// The hash of the last of them; `None` when none are left out.
    pub last_forgotten: Option<u64>,
    /// The chained hashes of the blocks after them.
    pub hashes: &'a [u64],
    /// The prompt's length in words.
    pub words: u64,
    /// The index (in the whole chain) of the first block that chains the cache-bust marker.
    pub marked_from: Option<usize>,
}

impl PromptChain<'_> {
    /// Blocks in the whole chain, the forgotten ones included.
    pub fn len(&self) -> usize {
        self.forgotten + self.hashes.len()
    }

    /// Whether the chain has no block at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The hash of the block at `position`: any block from the last forgotten one on.
    pub fn hash_at(&self, position: usize) -> Option<u64> {
        match position.checked_sub(self.forgotten) {
            Some(index) => self.hashes.get(index).copied(),
            None if position + 1 == self.forgotten => self.last_forgotten,
            None => None,
        }
    }

    /// The first position whose hash is held here: the last forgotten block, else the first.
    pub fn first_held(&self) -> usize {
        self.forgotten.saturating_sub(1)
    }
}

/// The chains of a turn, as [`Conversation::chain_in`] hands them over.
struct Hashers<'a> {
    plain: &'a BlockHasher,
    masked: Option<&'a BlockHasher>,
    /// The index of the plain chain's first block that chains the marker.
    marked_from: Option<usize>,
}

/// Keeps the first `kept` messages hashed and takes the hashers back to their states after them.
fn rewind_to(
    hasher: &mut BlockHasher,
    masked: Option<&mut BlockHasher>,
    hashed: &mut Vec<Hashed>,
    kept: usize,
    block_size: u32,
) {
    hashed.truncate(kept);
    match hashed.last() {
        Some(done) => {
            hasher.rewind(done.after);
            if let (Some(masked), Some(state)) = (masked, done.masked_after) {
                masked.rewind(state);
            }
        }
        None => {
            *hasher = BlockHasher::new(block_size);
            if let Some(masked) = masked {
                *masked = BlockHasher::new(block_size);
            }
        }
    }
}

/// Appends `escaped` (written by [`super::push_json_escaped`]) with its escapes undone.
fn push_json_unescaped(out: &mut Vec<u8>, escaped: &[u8]) {
    let mut pos = 0;
    while pos < escaped.len() {
        let byte = escaped[pos];
        if byte != b'\\' || pos + 1 >= escaped.len() {
            out.push(byte);
            pos += 1;
            continue;
        }
        let (unescaped, used) = match escaped[pos + 1] {
            b'n' => (b'\n', 2),
            b'r' => (b'\r', 2),
            b't' => (b'\t', 2),
            b'u' => {
                let code = escaped
                    .get(pos + 2..pos + 6)
                    .and_then(|hex| std::str::from_utf8(hex).ok())
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok());
                match code {
                    Some(code) => (code, 6),
                    None => (b'\\', 1),
                }
            }
            other => (other, 2),
        };
        out.push(unescaped);
        pos += used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masked_marker_keeps_its_words_and_loses_its_text() {
        assert_eq!(mask_words("[rid:38681fd7841f]\n\n"), "#\n\n");
        assert_eq!(mask_words(" two words\t"), " # #\t");
        assert_eq!(mask_words(""), "");
    }

    #[test]
    fn unescaping_undoes_the_escapes_written() {
        let text = "a \"quoted\" back\\slash\nnew\rline\ttab \u{1}\u{1f} end";
        let mut escaped = Vec::new();
        super::super::push_json_escaped(&mut escaped, text);
        let mut unescaped = Vec::new();
        push_json_unescaped(&mut unescaped, &escaped);
        assert_eq!(String::from_utf8(unescaped).unwrap(), text);
    }
}
