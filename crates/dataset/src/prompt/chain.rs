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

/// The hasher of one conversation and its state after each message hashed.
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
    /// Each message hashed, in order, with the hasher's state after it.
    hashed: Vec<(MessageKey, Checkpoint)>,
    /// The chain position (in words) of the marker's first word, once the message that carries it
    /// was hashed: every block from the one holding it on chains the marker.
    marker_word: Option<u64>,
}

impl Conversation {
    /// Calls `use_chain` with the current turn's block chain: the chained hashes of its full blocks
    /// of `block_size` words, and its length in words (the partial last block and the marker
    /// included). The text is the one [`Conversation::messages_json_parts`] sends with the same
    /// `bust`.
    pub fn with_prompt_chain<R>(
        &self,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chain: impl FnOnce(&[u64], u64) -> R,
    ) -> R {
        self.chain_in(&self.chain_cache, bust, block_size, |hasher, _| {
            use_chain(hasher.hashes(), hasher.tokens())
        })
    }

    /// [`Conversation::with_prompt_chain`], with the index of the chain's first block that
    /// chains the cache-bust marker ([`Conversation::marked_from_block`]) as the third argument.
    pub fn with_marked_prompt_chain<R>(
        &self,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chain: impl FnOnce(&[u64], u64, Option<usize>) -> R,
    ) -> R {
        self.chain_in(
            &self.chain_cache,
            bust,
            block_size,
            |hasher, marked_from| use_chain(hasher.hashes(), hasher.tokens(), marked_from),
        )
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
        let marker = bust?;
        let masked = mask_words(marker.text);
        let masked_bust = CacheBust {
            placement: marker.placement,
            text: &masked,
        };
        Some(self.chain_in(
            &self.masked_chain_cache,
            Some(masked_bust),
            block_size,
            |hasher, _| use_chain(hasher.forgotten(), hasher.hashes(), hasher.tokens()),
        ))
    }

    /// Gives up the hashes of the masked chain made so far, keeping what chains its next blocks:
    /// for a caller that stored them (the prefix registry's set of masked blocks, which never
    /// forgets), so that a conversation holds the hashes of its masked prompt only until they are
    /// registered. Later chains of [`Conversation::with_masked_prompt_chain`] leave them out.
    pub fn forget_masked_chain(&self) {
        if let Some(hasher) = self.masked_chain_cache.borrow_mut().hasher.as_mut() {
            hasher.forget_hashes();
        }
    }

    /// The chain of the current turn with `bust`, kept in `cache` across turns.
    fn chain_in<R>(
        &self,
        cache: &std::cell::RefCell<ChainCache>,
        bust: Option<CacheBust<'_>>,
        block_size: u32,
        use_chain: impl FnOnce(&BlockHasher, Option<usize>) -> R,
    ) -> R {
        let mut cache = cache.borrow_mut();
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
            if !diverged && hashed.get(msg_idx).is_some_and(|(done, _)| *done == key) {
                kept = msg_idx + 1;
            } else {
                if !diverged {
                    diverged = true;
                    rewind_to(hasher, hashed, kept, *block_size);
                }
                text.clear();
                let marker = bust.filter(|_| bust_target == Some(msg_idx));
                self.write_raw_text(&mut text, message, marker);
                let before = hasher.tokens();
                hasher.push_text_bytes(&text);
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
                hashed.push((key, hasher.checkpoint()));
            }
            msg_idx += 1;
        });
        if !diverged && kept < hashed.len() {
            rewind_to(hasher, hashed, kept, *block_size);
        }
        if diverged {
            hasher.shrink_slack();
        }
        let marked_from = marked_from(*marker_word, *block_size);
        use_chain(hasher, marked_from)
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

/// Keeps the first `kept` messages hashed and takes the hasher back to the state after them.
fn rewind_to(
    hasher: &mut BlockHasher,
    hashed: &mut Vec<(MessageKey, Checkpoint)>,
    kept: usize,
    block_size: u32,
) {
    hashed.truncate(kept);
    match hashed.last() {
        Some((_, state)) => hasher.rewind(*state),
        None => *hasher = BlockHasher::new(block_size),
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
