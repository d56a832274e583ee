//! Prompt synthesis: the chat `messages` of each turn, rebuilt from hash ids at send time.
//!
//! Structure (one [`Conversation`] per session, advanced turn by turn):
//! - Turn 0: the tools+system tokens are one `system` message of `ceil((tool+system)/bs)` blocks taken
//!   from the first hash ids; the remaining blocks and the partial tail are a `user` message.
//! - Turn k: the history is cut at `L`, the longest common prefix of the hash ids of turns k-1 and k
//!   (never past the previous turn's full blocks). After the cut come an `assistant` segment of
//!   `ceil(out[k-1]/bs)` blocks (fewer if the turn has fewer new blocks) and a `user` segment with the
//!   remaining blocks plus the tail. A cut that loses blocks of the previous prompt is a context reset.
//! - The tail: `in - full_blocks*bs` words; the leading part of the next hash block when the trace has
//!   one, else synthesized words keyed by the turn. So a recorded-mode prompt has exactly `in` words.
//! - Wire invariant: the messages end with a `user` message. When a turn adds no user content, its last
//!   block moves from the preceding segment into a new user message.
//!
//! Reference tiling ([`Tiling::Reference`], the `agentx` scenario's choice): the layout of
//! agentx-harness 1.0.12 and aiperf 0.13 (`dataset/loader/weka_synth_buf.py`, `advance_turn`,
//! `truncate_synth_buf_at_block`, `compute_asst_block_caps`), kept so that a replay sends what the
//! reference sends, token for token. The history is a buffer of blocks; turn k cuts it at `L` only
//! when `L` does not exceed the blocks it holds (keeping the tails of the segments before the cut) and
//! then appends hash positions `L..` of turn k. When `L` passes the buffer (the previous prompt held
//! block `L-1` only as its partial tail), nothing is cut, the tail stays and that block is never sent
//! whole: the turn sends `bs - tail` fewer tokens than recorded, and the shortfall accumulates until a
//! real cut. Tails are synthesized words keyed by the turn (the reference samples them). The assistant
//! segment is `ceil(out[k-1]/bs)` blocks capped by the new blocks, by the reference's two-pass caps,
//! and by none when the cut left no user segment; when it would take every new block and there is no
//! tail, its last block goes to the user. Turn 0 is as above, its user tail synthesized.
//!
//! Content: every block's text is a pure function of (seed, trace id, hash id) ([`super::text`]), so equal
//! hash-id prefixes give byte-equal message prefixes and traces never share blocks. In a corpus whose
//! hash ids are global ([`Trajectory::global_hash_ids`], Mooncake traces) a block's text is a function
//! of (seed, hash id) alone, so equal ids in two traces give equal text; synthesized tails stay keyed
//! by the trace.
//!
//! Live-assistant mode ([`AssistantMode::Live`]): assistant segments are tracked (they still shape cuts)
//! but never sent; the replay passes the server's real reply to [`Conversation::advance`], which appends
//! it as an `assistant` message before the next user delta. A session starting at turn k sends the system
//! and user segments of turns 0..=k. A context reset rebuilds the history from the trace (live replies are
//! dropped). A turn whose user delta is empty cannot start a session in this mode
//! ([`sendable_starts`]), as in aiperf; mid-session such a turn still ends with a user message (above).
//!
//! Session trees ([`Conversation::with_recorded_history`]): in live mode the history a stream did not
//! see answered live (the back-filled turns of a stream started mid-trace, the history rebuilt after a
//! reset, a turn whose reply did not come back) keeps the recorded assistant text, so a stream's first
//! request carries its full recorded prefix; only a real live reply takes the place of the recorded
//! text of the turn it answers (aiperf 0.13 always sends the recorded text in tree replays:
//! docs/agentx-v1-reference.md P3).

use std::sync::Arc;

use bytes::Bytes;

use super::text::{block_stream, corpus_key, tail_stream, trace_key, Vocabulary};
use super::tokens::TokenCounter;
use super::view::Trajectory;

mod chain;
mod layout;
mod wire;
mod writer;

pub use chain::PromptChain;
use layout::*;
pub use layout::{sendable_starts, StepInfo};
pub use wire::{Wire, TOOL_WORDS};
pub use writer::MessagesWriter;
use writer::{BlockText, BufferSink, Plan, TextSink};

/// Live mode: more cached pieces than this and the later ones are merged into one.
const MAX_JSON_PARTS: usize = 8;

/// A thread's scratch buffer for the pieces is given back above this size (a 1M-token history).
const MAX_SCRATCH: usize = 8 << 20;

thread_local! {
    /// Where live-mode pieces are written before they are kept at their size.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where assistant content comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssistantMode {
    /// Synthesized from the recorded `out` of the previous turn.
    Recorded,
    /// The server's real replies, threaded in by the replay.
    Live,
}

/// How a turn's blocks are laid out after the common prefix with the turn before (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tiling {
    /// Exactly the recorded `in` tokens.
    #[default]
    RecordedLength,
    /// As agentx-harness 1.0.12 and aiperf 0.13 lay prompts out.
    Reference,
}

/// A chat role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The system prompt.
    System,
    /// The user (and tool results).
    User,
    /// The model's replies.
    Assistant,
}

impl Role {
    /// The OpenAI chat `role` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// Where a cache-bust marker goes. `System*` fall back to the first user message when there is no
/// system message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// At the start of the system message.
    SystemPrefix,
    /// At the end of the system message.
    SystemSuffix,
    /// At the start of the first user message.
    FirstUserPrefix,
    /// At the end of the first user message.
    FirstUserSuffix,
}

/// A marker text and its placement, applied when messages are written.
#[derive(Debug, Clone, Copy)]
pub struct CacheBust<'a> {
    /// Where the marker goes.
    pub placement: Placement,
    /// The marker text, inserted as is.
    pub text: &'a str,
}

/// Errors of prompt synthesis.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A session asked to start at a turn past the trajectory's end.
    #[error("trace {trace:?} has {turns} turns; turn {turn} does not exist")]
    NoSuchTurn {
        /// The trace id.
        trace: String,
        /// The turn asked for (0-based).
        turn: usize,
        /// The trajectory's number of turns.
        turns: usize,
    },
}

/// The settings that determine prompt text: the seed and the word vocabulary. A clone shares the
/// vocabulary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSynth {
    seed: u64,
    vocab: Arc<Vocabulary>,
    tiling: Tiling,
}

impl PromptSynth {
    /// Text for `seed` with the standard vocabulary (the tokenizer-free model).
    pub fn new(seed: u64) -> Self {
        PromptSynth {
            seed,
            vocab: Arc::new(Vocabulary::STANDARD),
            tiling: Tiling::RecordedLength,
        }
    }

    /// Text for `seed` with the words `counter` counts as one token each.
    pub fn for_counter(seed: u64, counter: &TokenCounter) -> Self {
        PromptSynth {
            seed,
            vocab: Arc::new(counter.vocabulary().unwrap_or(Vocabulary::STANDARD)),
            tiling: Tiling::RecordedLength,
        }
    }

    /// The same text with prompts laid out by `tiling`.
    #[must_use]
    pub fn with_tiling(mut self, tiling: Tiling) -> Self {
        self.tiling = tiling;
        self
    }

    /// The seed prompt text is drawn with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// How prompts are laid out over the hash ids.
    pub fn tiling(&self) -> Tiling {
        self.tiling
    }

    /// A session of `traj` whose first request is turn `start` (with the history of turns 0..start).
    /// The conversation holds its own handles on the dataset and this synthesizer's vocabulary.
    pub fn conversation(
        &self,
        traj: Trajectory<'_>,
        start: usize,
        mode: AssistantMode,
    ) -> Result<Conversation, PromptError> {
        Conversation::new(self, traj, start, mode)
    }
}

/// A sent message in live mode: blocks of the tracked structure, or a live reply.
#[derive(Debug, Clone)]
enum Msg {
    Blocks(Seg),
    /// A live reply, stored JSON-escaped (it is written on every later turn) with its word count.
    Text {
        role: Role,
        escaped: String,
        words: u64,
        /// The turn the reply answers.
        turn: u32,
    },
}

/// Live mode: the JSON of the messages already sent, reused by the next turn. The live history only
/// grows between rebuilds, so the bytes of its first `msgs` messages never change; a rebuild (`gen`)
/// or another marker invalidates them. The bytes are kept as immutable shared pieces (the first write,
/// then one piece per later write), so a request body refers to them instead of copying them.
#[derive(Debug, Clone, Default)]
struct JsonCache {
    /// `[m0,m1,...` without the closing bracket, in pieces.
    parts: Vec<Bytes>,
    msgs: usize,
    gen: u64,
    bust: Option<(Placement, String)>,
}

/// A session's messages, turn by turn.
#[derive(Debug, Clone)]
pub struct Conversation {
    synth: PromptSynth,
    /// The key of the trace's synthesized tails.
    key: u64,
    /// The key of block text: the trace's key, or the corpus's when its hash ids are global.
    block_key: u64,
    mode: AssistantMode,
    st: Structure,
    /// Live mode only: the messages as sent.
    live: Vec<Msg>,
    /// Live mode: history not answered live keeps its recorded assistant segments
    /// ([`Conversation::with_recorded_history`]).
    recorded_history: bool,
    /// Bumped whenever `live` is rebuilt rather than extended.
    gen: u64,
    json_cache: std::cell::RefCell<JsonCache>,
    /// The prompt's block chains as last hashed ([`Conversation::with_prompt_chain`], and with the
    /// marker masked [`Conversation::with_masked_prompt_chain`]).
    chain_cache: std::cell::RefCell<chain::ChainCache>,
    last: StepInfo,
    /// How the messages carry the agent's tools ([`Wire`]).
    wire: Wire,
    /// Whether the live replies' reasoning is kept in the history.
    keeps_reasoning: bool,
    /// The kept reasoning by the turn it answered: JSON-escaped, and its word count.
    reasoning: Vec<(u32, String, u64)>,
    /// The tools array of [`Wire::Tools`], made once.
    tools_cache: std::cell::OnceCell<Option<Bytes>>,
}

impl Conversation {
    fn new(
        synth: &PromptSynth,
        traj: Trajectory<'_>,
        start: usize,
        mode: AssistantMode,
    ) -> Result<Self, PromptError> {
        if start >= traj.num_turns() {
            return Err(PromptError::NoSuchTurn {
                trace: traj.id().to_owned(),
                turn: start,
                turns: traj.num_turns(),
            });
        }
        let mut structure = Structure::new(traj, synth.tiling);
        let mut last = structure.step();
        for _ in 0..start {
            last = structure.step();
        }
        let mut conv = Conversation {
            synth: synth.clone(),
            key: trace_key(synth.seed, traj.id()),
            block_key: if traj.global_hash_ids() {
                corpus_key(synth.seed)
            } else {
                trace_key(synth.seed, traj.id())
            },
            mode,
            st: structure,
            live: Vec::new(),
            recorded_history: false,
            gen: 0,
            json_cache: std::cell::RefCell::default(),
            chain_cache: std::cell::RefCell::default(),
            last,
            wire: Wire::Text,
            keeps_reasoning: false,
            reasoning: Vec::new(),
            tools_cache: std::cell::OnceCell::new(),
        };
        conv.rebuild_live();
        Ok(conv)
    }

    fn rebuild_live(&mut self) {
        self.gen += 1;
        if self.mode == AssistantMode::Live {
            let keep_assistant = self.recorded_history;
            self.live = self
                .st
                .segs
                .iter()
                .filter(|s| keep_assistant || s.role != Role::Assistant)
                .cloned()
                .map(Msg::Blocks)
                .collect();
        }
    }

    /// A session-tree stream's conversation: in live mode, the history no live reply answered (the
    /// turns before the start, the history rebuilt after a reset, a turn whose request failed) keeps
    /// the recorded assistant text, and only real replies replace it. Recorded mode is unchanged.
    #[must_use]
    pub fn with_recorded_history(mut self) -> Self {
        if !self.recorded_history {
            self.recorded_history = true;
            self.rebuild_live();
        }
        self
    }

    /// The current turn (the request these messages are for).
    pub fn turn(&self) -> usize {
        self.st.turn.unwrap_or(0)
    }

    /// The trajectory being replayed.
    pub fn trajectory(&self) -> Trajectory<'_> {
        self.st.traj()
    }

    /// Whether the current turn is the trajectory's last.
    pub fn is_final(&self) -> bool {
        self.turn() + 1 >= self.st.traj().num_turns()
    }

    /// What the step into the current turn did (reset, delta sizes).
    pub fn step_info(&self) -> StepInfo {
        self.last
    }

    /// Moves to the next turn. In live mode `live_reply` (the server's reply to the current turn) is
    /// appended as an assistant message first; in recorded mode it is ignored.
    pub fn advance(&mut self, live_reply: Option<&str>) -> Result<StepInfo, PromptError> {
        if self.is_final() {
            let traj = self.st.traj();
            return Err(PromptError::NoSuchTurn {
                trace: traj.id().to_owned(),
                turn: self.turn() + 1,
                turns: traj.num_turns(),
            });
        }
        if self.mode == AssistantMode::Live {
            if let Some(reply) = live_reply {
                let mut escaped = Vec::with_capacity(reply.len() + 16);
                push_json_escaped(&mut escaped, reply);
                self.live.push(Msg::Text {
                    role: Role::Assistant,
                    escaped: String::from_utf8(escaped).expect("escaping keeps UTF-8"),
                    words: reply.split_ascii_whitespace().count() as u64,
                    turn: self.turn() as u32,
                });
            }
        }
        let before = self.st.segs.clone();
        let info = self.st.step();
        self.last = info;
        if self.mode == AssistantMode::Live {
            // The sent history stays valid when the previous turn's segments survive unchanged (its last
            // one may only lose its tail); then only the new user segments are sent. Otherwise (a reset,
            // or the wire-invariant adjustment touched an old segment) rebuild it from the structure.
            let mut expected = before;
            if self.st.tiling == Tiling::Reference {
                // An uncut history keeps every segment as it was, tails included.
            } else if let Some(last) = expected.last_mut() {
                last.tail = None;
                if last.start == last.end {
                    expected.pop();
                }
            }
            let segs = &self.st.segs;
            if !info.reset && segs.len() >= expected.len() && segs[..expected.len()] == expected[..]
            {
                // The recorded answer stays when no live one replaces it (trees only).
                let keep_assistant = self.recorded_history && live_reply.is_none();
                let added: Vec<Msg> = segs[expected.len()..]
                    .iter()
                    .filter(|s| keep_assistant || s.role == Role::User)
                    .cloned()
                    .map(Msg::Blocks)
                    .collect();
                self.live.extend(added);
            } else {
                self.rebuild_live();
            }
        }
        Ok(info)
    }

    fn for_each_msg<'s>(&'s self, mut visit: impl FnMut(Role, MsgRef<'s>)) {
        match self.mode {
            AssistantMode::Recorded => self
                .st
                .segs
                .iter()
                .for_each(|s| visit(s.role, MsgRef::Blocks(s))),
            AssistantMode::Live => self.live.iter().for_each(|m| match m {
                Msg::Blocks(s) => visit(s.role, MsgRef::Blocks(s)),
                Msg::Text {
                    role,
                    escaped,
                    words,
                    turn,
                } => visit(*role, MsgRef::Text(escaped, *words, Some(*turn))),
            }),
        }
    }

    fn write_content(&self, out: &mut Vec<u8>, message: MsgRef<'_>) {
        let text = self.block_text();
        self.emit_content(&mut BufferSink { out, text: &text }, message);
    }

    /// How this conversation's block text is made.
    fn block_text(&self) -> BlockText {
        BlockText {
            vocab: Arc::clone(&self.synth.vocab),
            block_key: self.block_key,
            block_words: self.st.traj().block_size() as usize,
        }
    }

    /// A message's content (JSON-escaped) into `sink`.
    fn emit_content(&self, sink: &mut impl TextSink, message: MsgRef<'_>) {
        match message {
            MsgRef::Blocks(s) => {
                sink.blocks(&self.st.ids[s.start..s.end]);
                match s.tail {
                    Some(Tail::Partial { id, words }) => {
                        sink.words(block_stream(self.block_key, id), words as usize);
                    }
                    Some(Tail::Synth { turn, words }) => {
                        sink.words(tail_stream(self.key, turn), words as usize);
                    }
                    None => {}
                }
            }
            MsgRef::Text(escaped, _, _) => sink.bytes(escaped.as_bytes()),
        }
    }

    /// Index of the message that takes the marker.
    fn bust_target(&self, placement: Placement) -> Option<usize> {
        let mut first_system = None;
        let mut first_user = None;
        let mut msg_idx = 0;
        self.for_each_msg(|r, _| {
            if r == Role::System && first_system.is_none() {
                first_system = Some(msg_idx);
            }
            if r == Role::User && first_user.is_none() {
                first_user = Some(msg_idx);
            }
            msg_idx += 1;
        });
        match placement {
            Placement::SystemPrefix | Placement::SystemSuffix => first_system.or(first_user),
            Placement::FirstUserPrefix | Placement::FirstUserSuffix => first_user,
        }
    }

    /// Appends the JSON `messages` array (`[{"role":..,"content":..},..]`) of the current turn to `out`,
    /// with the cache-bust marker inserted if given. `out` is not cleared, so a caller can write the
    /// request body around it.
    pub fn write_messages_json(&self, out: &mut Vec<u8>, bust: Option<CacheBust<'_>>) {
        for p in self.messages_json_parts(bust) {
            out.extend_from_slice(&p);
        }
        out.push(b']');
    }

    /// The JSON `messages` array of the current turn without its closing `]`, as shared pieces to be
    /// sent one after another (see [`Conversation::write_messages_json`] for the same bytes in one
    /// buffer). In live mode only the messages added since the last call are synthesized and the
    /// earlier pieces are shared, not copied.
    pub fn messages_json_parts(&self, bust: Option<CacheBust<'_>>) -> Vec<Bytes> {
        if self.mode != AssistantMode::Live {
            let mut out = Vec::new();
            self.write_messages_from(&mut out, bust, 0);
            return vec![Bytes::from(out)];
        }
        let mut cache = self.json_cache.borrow_mut();
        let key = bust.map(|b| (b.placement, b.text.to_owned()));
        if cache.gen != self.gen || cache.bust != key || cache.msgs > self.live.len() {
            *cache = JsonCache {
                parts: Vec::new(),
                msgs: 0,
                gen: self.gen,
                bust: key,
            };
        }
        if cache.msgs < self.live.len() || cache.parts.is_empty() {
            // Written into a reused buffer, then kept at its exact size: a piece is written with
            // room for the longest words (8 bytes each, about 5.5 used) and grows by doubling, and
            // a kept piece would hold all that slack for the rest of the session.
            let piece = SCRATCH.with_borrow_mut(|s| {
                s.clear();
                self.write_messages_from(s, bust, cache.msgs);
                let piece = Bytes::copy_from_slice(s);
                if s.capacity() > MAX_SCRATCH {
                    *s = Vec::new();
                }
                piece
            });
            cache.parts.push(piece);
            cache.msgs = self.live.len();
            if cache.parts.len() > MAX_JSON_PARTS {
                // The later pieces are a turn or a few each: merging them keeps the piece count
                // (and the iovecs per write) bounded; the first piece, the session's whole history
                // at its start turn, is never copied.
                let tail = cache.parts.split_off(1);
                let mut merged = Vec::with_capacity(tail.iter().map(Bytes::len).sum());
                for p in &tail {
                    merged.extend_from_slice(p);
                }
                cache.parts.push(Bytes::from(merged));
            }
        }
        cache.parts.clone()
    }

    /// Appends messages `from..` (with the `[` or `,` before each) to `out`, without the closing `]`.
    fn write_messages_from(&self, out: &mut Vec<u8>, bust: Option<CacheBust<'_>>, from: usize) {
        if self.agent_wire() {
            return self.write_agent_messages_from(out, bust, from);
        }
        let text = self.block_text();
        self.emit_messages_from(&mut BufferSink { out, text: &text }, bust, from);
    }

    /// The messages array of the current turn without its closing `]`, the same bytes as
    /// [`Conversation::messages_json_parts`], written as it is sent: recorded mode on the chat wire
    /// only (`None` otherwise; live mode keeps its history's pieces, the agent wire writes them at
    /// once).
    pub fn messages_json_writer(&self, bust: Option<CacheBust<'_>>) -> Option<MessagesWriter> {
        if self.mode != AssistantMode::Recorded || self.agent_wire() {
            return None;
        }
        let mut plan = Plan::new(self.block_text());
        self.emit_messages_from(&mut plan, bust, 0);
        Some(plan.into_writer())
    }

    /// Messages `from..` of the chat wire into `sink`, as [`Conversation::write_messages_from`]
    /// writes them.
    fn emit_messages_from(
        &self,
        sink: &mut impl TextSink,
        bust: Option<CacheBust<'_>>,
        from: usize,
    ) {
        let target = bust.and_then(|marker| {
            self.bust_target(marker.placement)
                .map(|msg_idx| (msg_idx, marker))
        });
        if from == 0 {
            sink.bytes(b"[");
        }
        let mut escaped_marker = Vec::new();
        let mut msg_idx = 0;
        self.for_each_msg(|role, m| {
            if msg_idx < from {
                msg_idx += 1;
                return;
            }
            if msg_idx > 0 {
                sink.bytes(b",");
            }
            sink.bytes(b"{\"role\":\"");
            sink.bytes(role.as_str().as_bytes());
            sink.bytes(b"\",\"content\":\"");
            let mark = target
                .filter(|(t, _)| *t == msg_idx)
                .map(|(_, marker)| marker);
            if let Some(marker) = mark {
                escaped_marker.clear();
                push_json_escaped(&mut escaped_marker, marker.text);
            }
            let prefix = mark.filter(|marker| {
                matches!(
                    marker.placement,
                    Placement::SystemPrefix | Placement::FirstUserPrefix
                )
            });
            if prefix.is_some() {
                sink.bytes(&escaped_marker);
            }
            self.emit_content(sink, m);
            if mark.is_some_and(|marker| prefix.is_none() && !marker.text.is_empty()) {
                sink.bytes(&escaped_marker);
            }
            sink.bytes(b"\"}");
            msg_idx += 1;
        });
    }

    /// The current turn's messages as owned values (for inspection and tests; the replay writes JSON).
    pub fn messages(&self, bust: Option<CacheBust<'_>>) -> Vec<Message> {
        let mut json = Vec::new();
        self.write_messages_json(&mut json, bust);
        serde_json::from_slice(&json).expect("messages JSON is well-formed")
    }

    /// Tokens of the current prompt under the word model, markers excluded: exactly the turn's `in` in
    /// recorded mode (plus the reasoning the history keeps, [`Wire`]).
    pub fn prompt_words(&self) -> u64 {
        self.message_words() + self.reasoning_words()
    }

    fn message_words(&self) -> u64 {
        let block = u64::from(self.st.traj().block_size());
        let mut words = 0;
        self.for_each_msg(|_, m| {
            words += match m {
                MsgRef::Blocks(s) => {
                    (s.end - s.start) as u64 * block + s.tail.map_or(0, Tail::words)
                }
                MsgRef::Text(_, words, _) => words,
            }
        });
        words
    }
}

#[derive(Clone, Copy)]
enum MsgRef<'m> {
    Blocks(&'m Seg),
    /// Already JSON-escaped text, its word count and the turn a live reply answers.
    Text(&'m str, u64, Option<u32>),
}

/// An owned chat message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct Message {
    /// The chat `role` (`system`, `user` or `assistant`).
    pub role: String,
    /// The message text.
    pub content: String,
}

/// Appends `text` JSON-escaped (without quotes).
pub fn push_json_escaped(out: &mut Vec<u8>, text: &str) {
    let mut last = 0;
    let b = text.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        let esc: Option<&[u8]> = match c {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&b[last..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
        }
        last = i + 1;
    }
    out.extend_from_slice(&b[last..]);
}
