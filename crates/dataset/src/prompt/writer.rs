//! The messages array written as it is sent ([`MessagesWriter`]): a recorded-mode request's
//! history is a function of its hash ids, so instead of the whole JSON the body holds a plan (the
//! JSON framing, the hash ids, the tails) and writes the text a frame at a time while the socket
//! takes it. A request waiting for a busy server then holds a frame, not its whole history; its
//! exact length is known before the first byte, so it still goes out with `Content-Length`.
//!
//! One code path writes the text either way: [`TextSink`] is where a message's pieces go, a
//! buffer at once ([`BufferSink`]) or a plan ([`Plan`]) that [`MessagesWriter`] writes later with
//! the same calls.

use std::sync::Arc;

use super::super::text::{block_stream, max_bytes, push_words, words_len, Vocabulary};

/// Where the text of a messages array goes.
pub(super) trait TextSink {
    /// Bytes as they are (JSON framing, escaped text).
    fn bytes(&mut self, bytes: &[u8]);
    /// The words of the hash blocks `ids`, a block's words each.
    fn blocks(&mut self, ids: &[u32]);
    /// `words` words of the synthesis stream `stream`.
    fn words(&mut self, stream: u64, words: usize);
}

/// How block text is made: the vocabulary, the key of the blocks' streams and the words per block.
#[derive(Debug, Clone)]
pub(super) struct BlockText {
    pub(super) vocab: Arc<Vocabulary>,
    pub(super) block_key: u64,
    pub(super) block_words: usize,
}

impl BlockText {
    fn push_block(&self, out: &mut Vec<u8>, id: u32) {
        push_words(
            &self.vocab,
            out,
            block_stream(self.block_key, id),
            self.block_words,
        );
    }
}

/// A [`TextSink`] that writes into a buffer at once.
pub(super) struct BufferSink<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) text: &'a BlockText,
}

impl TextSink for BufferSink<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    fn blocks(&mut self, ids: &[u32]) {
        self.out
            .reserve(max_bytes(ids.len() * self.text.block_words));
        for &id in ids {
            self.text.push_block(self.out, id);
        }
    }

    fn words(&mut self, stream: u64, words: usize) {
        push_words(&self.text.vocab, self.out, stream, words);
    }
}

/// One step of a plan.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `Plan::bytes[from..to]`.
    Bytes { from: usize, to: usize },
    /// The blocks of `Plan::ids[from..to]`.
    Blocks { from: usize, to: usize },
    /// Words of a synthesis stream (a tail).
    Words { stream: u64, words: usize },
}

/// A [`TextSink`] that records what to write, and the length it will have.
#[derive(Debug)]
pub(super) struct Plan {
    text: BlockText,
    bytes: Vec<u8>,
    ids: Vec<u32>,
    steps: Vec<Step>,
    len: u64,
}

impl Plan {
    pub(super) fn new(text: BlockText) -> Plan {
        Plan {
            text,
            bytes: Vec::new(),
            ids: Vec::new(),
            steps: Vec::new(),
            len: 0,
        }
    }

    /// The writer of the planned text, from its first byte.
    pub(super) fn into_writer(mut self) -> MessagesWriter {
        self.bytes.shrink_to_fit();
        self.ids.shrink_to_fit();
        self.steps.shrink_to_fit();
        MessagesWriter {
            remaining: self.len,
            plan: Arc::new(self),
            step: 0,
            block: 0,
        }
    }
}

impl TextSink for Plan {
    fn bytes(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let from = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        let to = self.bytes.len();
        self.len += bytes.len() as u64;
        match self.steps.last_mut() {
            Some(Step::Bytes { to: end, .. }) if *end == from => *end = to,
            _ => self.steps.push(Step::Bytes { from, to }),
        }
    }

    fn blocks(&mut self, ids: &[u32]) {
        if ids.is_empty() {
            return;
        }
        let from = self.ids.len();
        self.ids.extend_from_slice(ids);
        for &id in ids {
            let stream = block_stream(self.text.block_key, id);
            self.len += words_len(&self.text.vocab, stream, self.text.block_words) as u64;
        }
        self.steps.push(Step::Blocks {
            from,
            to: self.ids.len(),
        });
    }

    fn words(&mut self, stream: u64, words: usize) {
        if words == 0 {
            return;
        }
        self.len += words_len(&self.text.vocab, stream, words) as u64;
        self.steps.push(Step::Words { stream, words });
    }
}

/// A messages array written a frame at a time ([`MessagesWriter::write_next`]); the bytes are
/// those [`super::Conversation::write_messages_json`] writes, without the closing `]`. A clone
/// shares the plan and writes from where the original stood.
#[derive(Debug, Clone)]
pub struct MessagesWriter {
    plan: Arc<Plan>,
    /// The next step to write.
    step: usize,
    /// Blocks of the current `Blocks` step already written.
    block: usize,
    remaining: u64,
}

impl MessagesWriter {
    /// Bytes not yet written.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// Appends the next bytes to `out`: whole steps and blocks until `out` holds at least `budget`
    /// bytes or the text ends (a block or a tail is never split, so `out` may pass `budget` by
    /// one of them).
    pub fn write_next(&mut self, out: &mut Vec<u8>, budget: usize) {
        let before = out.len();
        let plan = &*self.plan;
        while out.len() < budget {
            let Some(&step) = plan.steps.get(self.step) else {
                break;
            };
            match step {
                Step::Bytes { from, to } => {
                    out.extend_from_slice(&plan.bytes[from..to]);
                    self.step += 1;
                }
                Step::Blocks { from, to } => {
                    let ids = &plan.ids[from + self.block..to];
                    for &id in ids {
                        plan.text.push_block(out, id);
                        self.block += 1;
                        if out.len() >= budget {
                            break;
                        }
                    }
                    if from + self.block == to {
                        self.step += 1;
                        self.block = 0;
                    }
                }
                Step::Words { stream, words } => {
                    push_words(&plan.text.vocab, out, stream, words);
                    self.step += 1;
                }
            }
        }
        self.remaining = self.remaining.saturating_sub((out.len() - before) as u64);
    }
}
