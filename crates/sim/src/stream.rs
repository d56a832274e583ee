//! Generated text and the response bodies: vLLM's SSE chunk stream and its one-shot completion.
//!
//! The stream is a hand-written [`http_body::Body`] state machine rather than a task feeding a
//! channel: each poll writes every event that is due into one buffer, built from per-request
//! pre-serialised JSON fragments, and sleeps only when the next token lies in the future. With
//! `Timing::Instant` it never reads the clock and batches up to [`FLUSH_BYTES`] of events per
//! frame, which is what makes the simulator cheap enough to never limit a client benchmark.
//!
//! Event order is exactly vLLM's: a role chunk (`delta: {"role":"assistant","content":""}`),
//! one content chunk per token (the last one carrying `finish_reason` and `stop_reason`), a usage
//! chunk with `choices: []` when `stream_options.include_usage` is set, then `data: [DONE]`.
//! A reply that reasons ([`ReplyPlan`]) streams its reasoning first, as vLLM's reasoning parsers
//! do (`delta.reasoning_content`), and one that calls a tool ends with the call's pieces
//! (`delta.tool_calls`, the first naming the call, finish reason `tool_calls`).
//! A Messages API stream has the same timing with Anthropic's events ([`super::anthropic`]), a
//! Responses API stream with the Responses events ([`super::responses`]).

use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::anthropic;
use super::config::ModelTiming;
use super::engine::Running;
use super::reply::ReplyPlan;
use super::request::Api;
use super::response::{Ident, Usage};
use super::responses;

/// Flush a frame once this much is buffered, so one slow client never buffers a whole answer.
pub(crate) const FLUSH_BYTES: usize = 16 << 10;

/// How long a stream about to be reset waits for its last chunks to be flushed.
const RESET_FLUSH: Duration = Duration::from_millis(20);

/// Words of the generated text; every word is one token in the tokenizer-free model.
const VOCAB: [&str; 64] = [
    "the", "model", "reads", "file", "and", "writes", "code", "to", "fix", "test", "build",
    "error", "function", "returns", "value", "from", "cache", "then", "calls", "tool", "with",
    "path", "line", "change", "patch", "diff", "check", "type", "struct", "field", "name", "list",
    "map", "key", "index", "loop", "over", "items", "each", "result", "ok", "run", "command",
    "output", "shows", "passing", "failing", "case", "input", "parse", "token", "stream",
    "request", "server", "client", "time", "next", "step", "plan", "done", "update", "module",
    "crate", "import",
];

/// A deterministic word sequence: uniform draws from [`VOCAB`] by a ChaCha8 stream over a seed.
#[derive(Debug)]
pub(crate) struct Words(ChaCha8Rng);

impl Words {
    /// The sequence for `seed`.
    pub(crate) fn new(seed: u64) -> Words {
        Words(ChaCha8Rng::seed_from_u64(seed))
    }

    /// The next word.
    #[inline]
    pub(crate) fn next_word(&mut self) -> &'static str {
        VOCAB[self.0.random_range(..VOCAB.len())]
    }

    /// `word_count` words joined by single spaces.
    pub(crate) fn text(&mut self, word_count: u64) -> String {
        let mut text = String::with_capacity(word_count as usize * 7);
        for i in 0..word_count {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(self.next_word());
        }
        text
    }
}

/// How the decode steps of one stream are timed.
#[derive(Debug, Clone)]
pub(crate) enum Pace {
    /// No delays, no clock reads.
    Instant,
    /// Constant inter-token latency.
    Fixed(Duration),
    /// Inter-token latency from the engine's running count; preemption when KV overflows, checked
    /// whenever a request starts a new block of `block_size` tokens.
    Modeled {
        timing: ModelTiming,
        block_size: u64,
    },
}

/// Fault points of one stream, as token indices.
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamFaults {
    /// Cut the connection once this many tokens have been sent.
    pub(crate) reset_after: Option<u64>,
    /// Pause for `stall` before this token.
    pub(crate) stall_before: Option<u64>,
    pub stall: Duration,
    /// Insert one malformed event before this token.
    pub(crate) malformed_before: Option<u64>,
    /// End the body cleanly, without the end marker, once this many tokens have been sent.
    pub(crate) truncate_after: Option<u64>,
    /// Send the API's error event and end once this many tokens have been sent.
    pub(crate) error_after: Option<u64>,
}

/// The message of an injected mid-stream error.
const STREAM_ERROR: &str = "simulated engine failure mid-stream (--stream-error-rate)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Role,
    Tokens,
    Usage,
    Done,
    Reset,
    End,
    /// Ended before its end marker (`--truncate-rate`, `--stream-error-rate`): the body ends as
    /// at [`Stage::End`], and the request counts as aborted.
    Cut,
}

/// Everything a stream needs at construction.
#[derive(Debug)]
pub(crate) struct StreamPlan {
    /// The events' shape.
    pub api: Api,
    pub running: Running,
    pub ident: Ident,
    pub(crate) pace: Pace,
    pub(crate) first_token_at: Option<Instant>,
    pub arrival: Instant,
    pub total_tokens: u64,
    pub finish_reason: &'static str,
    pub include_usage: bool,
    pub usage: Usage,
    pub words: Words,
    pub tokens_per_chunk: u32,
    pub faults: StreamFaults,
    /// The reasoning before the text and the tool call after it.
    pub reply: ReplyPlan,
}

/// The parts of a reply, in the order they stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    Reasoning,
    Text,
    Tool,
}

/// The SSE body of a streamed chat completion.
pub(crate) struct TokenStream {
    api: Api,
    ident: Ident,
    running: Running,
    /// `data: {"id":"..","object":"chat.completion.chunk","created":N,"model":"..",`
    head: Bytes,
    pace: Pace,
    stage: Stage,
    /// When the next event is due; `None` means now.
    due: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
    sleeping: bool,
    arrival: Instant,
    sent: u64,
    total: u64,
    per_chunk: u64,
    finish_reason: &'static str,
    include_usage: bool,
    usage: Usage,
    words: Words,
    faults: StreamFaults,
    buf: BytesMut,
    /// The Responses events' numbering.
    seq: responses::Sequence,
    /// The reply so far (a Responses stream's `done` events repeat it whole).
    text: String,
    /// The reasoning so far (a Responses stream's `done` events repeat it whole).
    reasoning_text: String,
    /// The reasoning and the tool call.
    reply: ReplyPlan,
    /// The part whose block is open (Anthropic's content block, a Responses output item).
    part: Part,
    /// The finished output items of a Responses stream, joined by commas.
    done_items: String,
}

const CHOICE_OPEN: &[u8] = br#""choices":[{"index":0,"delta":"#;
const ROLE_DELTA: &[u8] =
    br#"{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#;
const CONTENT_OPEN: &[u8] = br#"{"content":""#;
const EVENT_END: &[u8] = b"\n\n";

impl TokenStream {
    /// Start a stream from its plan.
    pub(crate) fn new(plan: StreamPlan) -> TokenStream {
        let head = format!(
            r#"data: {{"id":"{}","object":"chat.completion.chunk","created":{},"model":"{}","#,
            plan.ident.id_json, plan.ident.created, plan.ident.model_json
        );
        TokenStream {
            api: plan.api,
            ident: plan.ident,
            running: plan.running,
            head: Bytes::from(head),
            pace: plan.pace,
            stage: Stage::Role,
            due: plan.first_token_at,
            sleep: None,
            sleeping: false,
            arrival: plan.arrival,
            sent: 0,
            total: plan.total_tokens,
            per_chunk: u64::from(plan.tokens_per_chunk.max(1)),
            finish_reason: plan.finish_reason,
            include_usage: plan.include_usage,
            usage: plan.usage,
            words: plan.words,
            faults: plan.faults,
            buf: BytesMut::with_capacity(4096),
            seq: responses::Sequence::default(),
            text: String::new(),
            reasoning_text: String::new(),
            part: if plan.reply.reasoning > 0 {
                Part::Reasoning
            } else {
                Part::Text
            },
            reply: plan.reply,
            done_items: String::new(),
        }
    }

    /// The part token `index` belongs to.
    fn part_of(&self, index: u64) -> Part {
        if index < self.reply.reasoning {
            Part::Reasoning
        } else if index < self.total - self.reply.tool_tokens() {
            Part::Text
        } else {
            Part::Tool
        }
    }

    /// The index one past the last token of `part`.
    fn part_end(&self, part: Part) -> u64 {
        match part {
            Part::Reasoning => self.reply.reasoning,
            Part::Text => self.total - self.reply.tool_tokens(),
            Part::Tool => self.total,
        }
    }

    /// The index (Anthropic's block, the Responses output item) of `part`'s block.
    fn block_index(&self, part: Part) -> u32 {
        let text = u32::from(self.reply.reasoning > 0);
        match part {
            Part::Reasoning => 0,
            Part::Text => text,
            Part::Tool => text + 1,
        }
    }

    /// Closes the open blocks up to `part` and opens each after it (the text block always opens,
    /// empty when the reply's tokens went to reasoning and the tool call).
    fn enter(&mut self, part: Part) {
        while self.part < part {
            match (self.api, self.part) {
                (Api::Anthropic, Part::Reasoning) => {
                    anthropic::write_thinking_end(&mut self.buf, &self.ident);
                }
                (Api::Anthropic, _) => {
                    let name = self
                        .reply
                        .tool
                        .as_ref()
                        .map_or("", |t| t.name_json.as_str());
                    let index = self.block_index(Part::Text);
                    anthropic::write_tool_start(&mut self.buf, &self.ident, index, name);
                }
                (Api::Responses, Part::Reasoning) => {
                    let item = responses::write_reasoning_end(
                        &mut self.buf,
                        &mut self.seq,
                        &self.ident,
                        &self.reasoning_text,
                    );
                    self.done_items.push_str(&item);
                }
                (Api::Responses, _) => {
                    let index = self.block_index(Part::Text);
                    let item = responses::write_message_end(
                        &mut self.buf,
                        &mut self.seq,
                        (&self.ident, index),
                        &self.text,
                    );
                    push_item(&mut self.done_items, &item);
                    let name = self
                        .reply
                        .tool
                        .as_ref()
                        .map_or("", |t| t.name_json.as_str());
                    let seq = &mut self.seq;
                    responses::write_tool_start(&mut self.buf, seq, &self.ident, index + 1, name);
                }
                (Api::Chat, _) => {}
            }
            self.part = if self.part == Part::Reasoning {
                Part::Text
            } else {
                Part::Tool
            };
        }
    }

    fn arm(&mut self, at: Instant) {
        match &mut self.sleep {
            Some(s) => s.as_mut().reset(at),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.sleeping = true;
    }

    /// Whether the next event must wait; arms the timer if so.
    #[inline]
    fn must_wait(&mut self, now: &mut Option<Instant>) -> bool {
        let Some(due) = self.due else {
            return false;
        };
        let at = *now.get_or_insert_with(Instant::now);
        if due > at {
            self.arm(due);
            return true;
        }
        false
    }

    fn write_tokens(&mut self, tokens: u64, last: bool) {
        match self.part {
            Part::Reasoning => self.write_reasoning(tokens, last),
            Part::Tool => self.write_tool_pieces(tokens, last),
            Part::Text => self.write_text(tokens, last),
        }
    }

    fn write_text(&mut self, tokens: u64, last: bool) {
        if self.api == Api::Anthropic {
            let index = self.block_index(Part::Text);
            anthropic::write_delta_open(&mut self.buf, index, ("text_delta", "text"));
            self.write_words(tokens);
            self.buf.extend_from_slice(anthropic::DELTA_CLOSE);
            return;
        }
        if self.api == Api::Responses {
            let index = self.block_index(Part::Text);
            responses::write_delta_open(&mut self.buf, &mut self.seq, &self.ident, index);
            self.write_words(tokens);
            self.buf.extend_from_slice(responses::DELTA_CLOSE);
            return;
        }
        self.buf.extend_from_slice(&self.head);
        self.buf.extend_from_slice(CHOICE_OPEN);
        self.buf.extend_from_slice(CONTENT_OPEN);
        self.write_words(tokens);
        self.buf.extend_from_slice(b"\"}");
        self.close_choice(last);
    }

    /// A chat choice's end after its delta: the finish reason on the reply's last chunk.
    fn close_choice(&mut self, last: bool) {
        if last {
            self.buf
                .extend_from_slice(br#","logprobs":null,"finish_reason":""#);
            self.buf.extend_from_slice(self.finish_reason.as_bytes());
            self.buf.extend_from_slice(br#"","stop_reason":null}]}"#);
        } else {
            self.buf
                .extend_from_slice(br#","logprobs":null,"finish_reason":null}]}"#);
        }
        self.buf.extend_from_slice(EVENT_END);
    }

    /// `tokens` reasoning words in the API's reasoning delta.
    fn write_reasoning(&mut self, tokens: u64, last: bool) {
        match self.api {
            Api::Anthropic => {
                let kind = ("thinking_delta", "thinking");
                anthropic::write_delta_open(&mut self.buf, 0, kind);
            }
            Api::Responses => {
                responses::write_reasoning_delta_open(&mut self.buf, &mut self.seq, &self.ident);
            }
            Api::Chat => {
                self.buf.extend_from_slice(&self.head);
                self.buf.extend_from_slice(CHOICE_OPEN);
                self.buf.extend_from_slice(br#"{"reasoning_content":""#);
            }
        }
        for i in 0..tokens {
            if self.sent + i > 0 {
                self.buf.extend_from_slice(b" ");
                if self.api == Api::Responses {
                    self.reasoning_text.push(' ');
                }
            }
            let word = self.words.next_word();
            self.buf.extend_from_slice(word.as_bytes());
            if self.api == Api::Responses {
                self.reasoning_text.push_str(word);
            }
        }
        match self.api {
            Api::Anthropic => self.buf.extend_from_slice(anthropic::DELTA_CLOSE),
            Api::Responses => self.buf.extend_from_slice(responses::DELTA_CLOSE),
            Api::Chat => {
                self.buf.extend_from_slice(b"\"}");
                self.close_choice(last);
            }
        }
    }

    /// The tool call's next `tokens` pieces of its arguments in the API's delta; chat's first
    /// piece names the call.
    fn write_tool_pieces(&mut self, tokens: u64, last: bool) {
        let Some(tool) = self.reply.tool.as_ref() else {
            return;
        };
        let first = (self.sent - self.part_end(Part::Text)) as usize;
        let pieces = &tool.pieces[first..first + tokens as usize];
        match self.api {
            Api::Anthropic => {
                let index = self.block_index(Part::Tool);
                let kind = ("input_json_delta", "partial_json");
                anthropic::write_delta_open(&mut self.buf, index, kind);
            }
            Api::Responses => {
                let index = self.block_index(Part::Tool);
                let seq = &mut self.seq;
                responses::write_arguments_delta_open(&mut self.buf, seq, &self.ident, index);
            }
            Api::Chat => {
                self.buf.extend_from_slice(&self.head);
                self.buf.extend_from_slice(CHOICE_OPEN);
                self.buf.extend_from_slice(br#"{"tool_calls":[{"index":0,"#);
                if first == 0 {
                    let named = format!(
                        r#""id":"call_{}","type":"function","function":{{"name":"{}","arguments":""#,
                        self.ident.id_json, tool.name_json
                    );
                    self.buf.extend_from_slice(named.as_bytes());
                } else {
                    self.buf.extend_from_slice(br#""function":{"arguments":""#);
                }
            }
        }
        for piece in pieces {
            self.buf.extend_from_slice(piece.as_bytes());
        }
        match self.api {
            Api::Anthropic => self.buf.extend_from_slice(anthropic::DELTA_CLOSE),
            Api::Responses => self.buf.extend_from_slice(responses::DELTA_CLOSE),
            Api::Chat => {
                self.buf.extend_from_slice(b"\"}}]}");
                self.close_choice(last);
            }
        }
    }

    /// The next `word_count` words, a space before each but the answer's first.
    fn write_words(&mut self, word_count: u64) {
        let start = self.reply.reasoning;
        for i in 0..word_count {
            if self.sent + i > start {
                self.buf.extend_from_slice(b" ");
            }
            let word = self.words.next_word();
            self.buf.extend_from_slice(word.as_bytes());
            if self.api == Api::Responses {
                if self.sent + i > start {
                    self.text.push(' ');
                }
                self.text.push_str(word);
            }
        }
    }

    /// Emit every due event, stopping at a wait, a full buffer, a reset or the end.
    fn advance(&mut self) {
        let mut now: Option<Instant> = None;
        loop {
            match self.stage {
                Stage::Role => {
                    if self.must_wait(&mut now) {
                        return;
                    }
                    match self.api {
                        Api::Anthropic => {
                            let thinking = self.part == Part::Reasoning;
                            anthropic::write_start(
                                &mut self.buf,
                                &self.ident,
                                &self.usage,
                                thinking,
                            );
                        }
                        Api::Responses => {
                            let reasoning = self.part == Part::Reasoning;
                            let seq = &mut self.seq;
                            responses::write_start(&mut self.buf, seq, &self.ident, reasoning);
                        }
                        Api::Chat => {
                            self.buf.extend_from_slice(&self.head);
                            self.buf.extend_from_slice(CHOICE_OPEN);
                            self.buf.extend_from_slice(ROLE_DELTA);
                            self.buf.extend_from_slice(EVENT_END);
                        }
                    }
                    self.stage = Stage::Tokens;
                }
                Stage::Tokens => {
                    if self.sent >= self.total {
                        self.stage = if self.include_usage {
                            Stage::Usage
                        } else {
                            Stage::Done
                        };
                        continue;
                    }
                    if self.faults.truncate_after == Some(self.sent) {
                        self.stage = Stage::Cut;
                        return;
                    }
                    if self.faults.error_after == Some(self.sent) {
                        self.write_error();
                        self.stage = Stage::Cut;
                        return;
                    }
                    if self.faults.reset_after == Some(self.sent) {
                        // Pause before cutting, so what was sent reaches the client first
                        // (hyper drops unflushed bytes when a body fails).
                        self.stage = Stage::Reset;
                        let at = *now.get_or_insert_with(Instant::now);
                        self.arm(at + RESET_FLUSH);
                        return;
                    }
                    if self.faults.stall_before == Some(self.sent) {
                        self.faults.stall_before = None;
                        let base = match self.due {
                            Some(d) => d,
                            None => *now.get_or_insert_with(Instant::now),
                        };
                        self.due = Some(base + self.faults.stall);
                    }
                    if self.must_wait(&mut now) {
                        return;
                    }
                    if self.faults.malformed_before == Some(self.sent) {
                        self.faults.malformed_before = None;
                        match self.api {
                            Api::Anthropic => {
                                self.buf.extend_from_slice(anthropic::DELTA_MALFORMED);
                            }
                            Api::Responses => {
                                self.buf.extend_from_slice(responses::DELTA_MALFORMED);
                            }
                            Api::Chat => {
                                self.buf.extend_from_slice(&self.head);
                                // Cut short inside the choices array: the JSON never closes.
                                self.buf.extend_from_slice(br#""choices":[{"index":0,"del"#);
                                self.buf.extend_from_slice(EVENT_END);
                            }
                        }
                    }
                    let part = self.part_of(self.sent);
                    self.enter(part);
                    // A chunk holds one part's tokens.
                    let mut tokens = self.per_chunk.min(self.part_end(part) - self.sent);
                    // Fault points fall on chunk boundaries.
                    for p in [
                        self.faults.reset_after,
                        self.faults.stall_before,
                        self.faults.malformed_before,
                        self.faults.truncate_after,
                        self.faults.error_after,
                    ]
                    .into_iter()
                    .flatten()
                    {
                        if p > self.sent && p < self.sent + tokens {
                            tokens = p - self.sent;
                        }
                    }
                    let last = self.sent + tokens == self.total;
                    self.write_tokens(tokens, last);
                    self.sent += tokens;
                    self.step(tokens);
                    if self.buf.len() >= FLUSH_BYTES {
                        return;
                    }
                }
                Stage::Usage if self.api == Api::Anthropic => {
                    self.enter(self.last_part());
                    let index = self.block_index(self.part);
                    anthropic::write_end(&mut self.buf, index, self.finish_reason, &self.usage);
                    self.stage = Stage::Done;
                }
                Stage::Usage if self.api == Api::Responses => {
                    self.write_responses_end();
                    self.stage = Stage::Done;
                }
                Stage::Usage => {
                    self.buf.extend_from_slice(&self.head);
                    self.buf.extend_from_slice(br#""choices":[],"usage":"#);
                    self.usage.write_json(&mut self.buf);
                    self.buf.extend_from_slice(b"}");
                    self.buf.extend_from_slice(EVENT_END);
                    self.stage = Stage::Done;
                }
                Stage::Done => {
                    match self.api {
                        Api::Chat => self.buf.extend_from_slice(b"data: [DONE]\n\n"),
                        Api::Anthropic => anthropic::write_stop(&mut self.buf),
                        // `response.completed` (or `incomplete`) ended it.
                        Api::Responses => {}
                    }
                    self.finish();
                    self.stage = Stage::End;
                    return;
                }
                Stage::Reset | Stage::End | Stage::Cut => return,
            }
        }
    }

    /// The part a reply ends in: the tool call's when it makes one, else the text's.
    fn last_part(&self) -> Part {
        if self.reply.tool.is_some() {
            Part::Tool
        } else {
            Part::Text
        }
    }

    /// A Responses stream's end: the open items closed, then `response.completed` (or
    /// `response.incomplete`) listing every item.
    fn write_responses_end(&mut self) {
        self.enter(self.last_part());
        let index = self.block_index(self.part);
        let item = match self.reply.tool.as_ref() {
            Some(tool) => {
                let reply = (&self.ident, index);
                let seq = &mut self.seq;
                responses::write_tool_end(
                    &mut self.buf,
                    seq,
                    reply,
                    &tool.name_json,
                    &tool.arguments,
                )
            }
            None => {
                let reply = (&self.ident, index);
                responses::write_message_end(&mut self.buf, &mut self.seq, reply, &self.text)
            }
        };
        push_item(&mut self.done_items, &item);
        let end = (self.finish_reason, &self.usage);
        responses::write_final(
            &mut self.buf,
            &mut self.seq,
            &self.ident,
            &self.done_items,
            end,
        );
    }

    /// The API's error event for an injected mid-stream failure (`--stream-error-rate`), with the
    /// output so far in its usage.
    fn write_error(&mut self) {
        match self.api {
            Api::Chat => {
                let message = serde_json::to_string(STREAM_ERROR).unwrap_or_default();
                self.buf.extend_from_slice(
                    format!(
                        r#"data: {{"error":{{"object":"error","message":{message},"type":"InternalServerError","param":null,"code":500}}}}"#
                    )
                    .as_bytes(),
                );
                self.buf.extend_from_slice(EVENT_END);
            }
            Api::Anthropic => anthropic::write_error(&mut self.buf, STREAM_ERROR),
            Api::Responses => {
                let usage = Usage {
                    completion_tokens: self.sent,
                    ..self.usage
                };
                let ident = &self.ident;
                responses::write_failed(&mut self.buf, &mut self.seq, ident, &usage, STREAM_ERROR);
            }
        }
    }

    /// Account `tokens` generated tokens and plan the next decode step.
    #[inline]
    fn step(&mut self, tokens: u64) {
        self.running.add_kv(tokens);
        let metrics = &self.running.engine.metrics;
        metrics.generation_tokens.fetch_add(tokens, Relaxed);
        match &self.pace {
            Pace::Instant => metrics.itl.observe_n(0, tokens),
            Pace::Fixed(itl) => {
                let itl = *itl;
                metrics.itl.observe_n(itl.as_nanos() as u64, tokens);
                self.due = self.due.map(|d| d + itl * tokens as u32);
            }
            Pace::Modeled {
                timing: mt,
                block_size,
            } => {
                let running = metrics.running.load(Relaxed);
                let mut itl = mt.itl(running);
                metrics.itl.observe_n(itl.as_nanos() as u64, tokens);
                itl *= tokens as u32;
                if self.sent % block_size.max(&1) < tokens && self.running.kv_over_capacity() {
                    // Out of KV blocks: the newest work is preempted and recomputed.
                    metrics.preemptions.fetch_add(1, Relaxed);
                    itl += mt.prefill(self.usage.prompt_tokens + self.sent);
                }
                self.due = self.due.map(|d| d + itl);
            }
        }
    }

    fn finish(&mut self) {
        let metrics = &self.running.engine.metrics;
        let e2e = Instant::now().saturating_duration_since(self.arrival);
        metrics.e2e.observe_duration(e2e);
        metrics.generation_len.observe_n(self.total, 1);
        match self.finish_reason {
            "length" => metrics.success_length.fetch_add(1, Relaxed),
            _ => metrics.success_stop.fetch_add(1, Relaxed),
        };
    }

    fn take_frame(&mut self) -> Frame<Bytes> {
        Frame::data(self.buf.split().freeze())
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        if self.stage != Stage::End {
            self.running
                .engine
                .metrics
                .success_abort
                .fetch_add(1, Relaxed);
        }
    }
}

impl Body for TokenStream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            if this.sleeping {
                if let Some(sleep) = this.sleep.as_mut() {
                    if std::future::Future::poll(sleep.as_mut(), cx).is_pending() {
                        if !this.buf.is_empty() {
                            return Poll::Ready(Some(Ok(this.take_frame())));
                        }
                        return Poll::Pending;
                    }
                }
                this.sleeping = false;
            }
            match this.stage {
                Stage::End | Stage::Cut => {
                    if this.buf.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(this.take_frame())));
                }
                Stage::Reset => {
                    if !this.buf.is_empty() {
                        return Poll::Ready(Some(Ok(this.take_frame())));
                    }
                    return Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "connection reset mid-stream (--reset-rate)",
                    ))));
                }
                _ => {}
            }
            this.advance();
            if !this.buf.is_empty() {
                return Poll::Ready(Some(Ok(this.take_frame())));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.stage, Stage::End | Stage::Cut) && self.buf.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// `item` appended to the comma-separated `items`.
fn push_item(items: &mut String, item: &str) {
    if !items.is_empty() {
        items.push(',');
    }
    items.push_str(item);
}

/// The one-shot (`stream: false`) completion object, as vLLM serialises it.
pub(crate) fn completion_json(
    ident: &Ident,
    text: &str,
    finish_reason: &str,
    usage: &Usage,
) -> Vec<u8> {
    let content = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into());
    let mut out = BytesMut::with_capacity(text.len() + 512);
    out.extend_from_slice(
        format!(
            r#"{{"id":"{}","object":"chat.completion","created":{},"model":"{}","choices":[{{"index":0,"message":{{"role":"assistant","content":{content},"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null}},"logprobs":null,"finish_reason":"{finish_reason}","stop_reason":null}}],"service_tier":null,"system_fingerprint":null,"usage":"#,
            ident.id_json, ident.created, ident.model_json
        )
        .as_bytes(),
    );
    usage.write_json(&mut out);
    out.extend_from_slice(br#","prompt_logprobs":null,"kv_transfer_params":null}"#);
    out.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_deterministic_and_one_token_each() {
        let a = Words::new(7).text(50);
        let b = Words::new(7).text(50);
        assert_eq!(a, b);
        assert_ne!(a, Words::new(8).text(50));
        assert_eq!(agentx_tokens::TokenCounter::Words.count(&a), 50);
    }

    #[test]
    fn completion_json_parses() {
        let id = Ident::new("chatcmpl-\"x\"", "m", 1);
        let body = completion_json(
            &id,
            "a b",
            "length",
            &Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                cached_tokens: 1,
                reasoning_tokens: 0,
            },
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "chatcmpl-\"x\"");
        assert_eq!(v["choices"][0]["message"]["content"], "a b");
        assert_eq!(v["usage"]["total_tokens"], 5);
        assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
    }
}
