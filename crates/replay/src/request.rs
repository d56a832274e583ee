//! One request of the replay: its body (with Dynamo's `session_control` for its stream's turn), its
//! send through the transport, its record (the scenario classifies errors; under
//! `--apply-chat-template` the client-side ISL is the rendered prompt's, counted while the request
//! is in flight), and its count in the tally and the failed-request threshold.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::session::Session;
use super::{bust, Shared};
use bytes::Bytes;

use agentx_dataset::{AssistantMode, CacheBust, TokenCounter};
use agentx_protocol::{Exchange, Failure, FailureKind, JsonBody, RequestIds, StreamTurn};
use agentx_record::{
    Phase, PromptBlocks, RecordError, ReplyStats, RequestRecord, TokenSource, Usage,
};
use agentx_scenario::types::{ErrorClass, ErrorResponse};

/// The exit of one request as the lane sees it.
pub(super) struct Sent {
    pub(super) overflow: bool,
    /// The record's error as `message (type)`.
    pub(super) error: Option<String>,
    pub(super) reply: Option<String>,
    /// The live reply's reasoning, when the history keeps it and it had some.
    pub(super) reasoning: Option<String>,
    pub(super) end: Instant,
}

/// A request ready to send.
pub(super) struct Prepared<'conv> {
    pub(super) body: JsonBody,
    pub(super) request_id: String,
    pub(super) trace_id: &'conv str,
    pub(super) turn: u32,
    pub(super) num_turns: u32,
    pub(super) max_tokens: u32,
    /// Client-side prompt tokens (word model or tokenizer), marker included.
    pub(super) client_isl: u64,
    /// The turn's theoretical prefix-cache stamp (hit blocks, total blocks); session trees only.
    pub(super) prefix: (u32, u32),
    /// The turn's source request in its trace (outer index, inner index); session trees only.
    pub(super) source_idx: (Option<u32>, Option<u32>),
    /// The messages' JSON pieces, kept for `--apply-chat-template`'s count (shared, not copied).
    pub(super) template_parts: Option<Vec<Bytes>>,
    /// The prompt's block chain as registered (when the run hashes chains).
    pub(super) prompt_blocks: Option<PromptBlocks>,
}

/// The request id of the run's next request (unique across shards).
pub(super) fn next_request_id(sh: &Shared) -> String {
    let seq = sh.request_seq.fetch_add(1, Ordering::Relaxed) * sh.stride.1 + sh.stride.0;
    format!("{}-r{seq}", sh.run_short)
}

/// The prompt's blocks as `request_id` sends them, registered with the run's first senders
/// (`None` when the run hashes no chains).
pub(super) fn prompt_blocks(
    sh: &Shared,
    session: &Session,
    conv: &agentx_dataset::Conversation,
    request_id: &str,
) -> Option<PromptBlocks> {
    prompt_blocks_marked(sh, session, conv, request_id, false)
}

/// [`prompt_blocks`]; with `tree_marker`, the blocks that chain the session's marker go to the
/// marker's own table, which the scheduler drops when the tree leaves its lane
/// ([`crate::prefix::Registry::forget`]).
pub(super) fn prompt_blocks_marked(
    sh: &Shared,
    session: &Session,
    conv: &agentx_dataset::Conversation,
    request_id: &str,
    tree_marker: bool,
) -> Option<PromptBlocks> {
    let registry = sh.prefix.as_ref()?;
    let bust = bust(sh.cfg.placement, &session.marker);
    let marker = tree_marker.then_some(session.marker.as_str());
    let mut blocks = conv.with_marked_prompt_chain(bust, registry.block_size, |prompt| {
        registry.register(request_id, crate::prefix::Chain { prompt, marker })
    });
    blocks.shared_unmarked =
        conv.with_masked_prompt_chain(bust, registry.block_size, |known, hashes, _| {
            registry.register_masked(known, hashes)
        });
    // The registry knows these blocks now (the masked set for ever, the marker's chains while the
    // tree lives, and so while this conversation does): the conversation need not keep them.
    conv.forget_chains();
    Some(blocks)
}

/// The body of a stream's turn (with Dynamo's `session_control` when that is on), and the
/// messages' pieces the chat-template count renders when `--apply-chat-template` is on. A
/// recorded-mode history is written as it is sent ([`WrittenMessages`]); with the chat template on,
/// or in live mode, the body is made of the history's pieces.
pub(super) fn body_of(
    sh: &Shared,
    session: &Session,
    max_tokens: u32,
    (conv, bust): (&agentx_dataset::Conversation, Option<CacheBust<'_>>),
    last: bool,
) -> (JsonBody, Option<Vec<Bytes>>) {
    let turn = StreamTurn {
        correlation_id: &session.correlation_id,
        parent_correlation_id: session
            .tree
            .as_ref()
            .and_then(|t| t.parent_correlation_id.as_deref()),
        last,
    };
    let tools = conv.tools_json();
    let written = sh
        .cfg
        .chat_template
        .is_none()
        .then(|| conv.messages_json_writer(bust))
        .flatten();
    if let Some(writer) = written {
        let messages = Box::new(WrittenMessages(writer));
        return (
            sh.body.build_written(max_tokens, messages, tools, turn),
            None,
        );
    }
    let messages = conv.messages_json_parts(bust);
    let parts = sh.cfg.chat_template.is_some().then(|| messages.clone());
    let body = match tools {
        Some(tools) => sh
            .body
            .build_with_tools(max_tokens, messages, Some(tools), turn),
        None => sh.body.build_for(max_tokens, messages, turn),
    };
    (body, parts)
}

/// A recorded-mode history written a frame at a time as hyper sends the body.
#[derive(Debug, Clone)]
struct WrittenMessages(agentx_dataset::MessagesWriter);

impl agentx_protocol::WrittenPiece for WrittenMessages {
    fn remaining(&self) -> u64 {
        self.0.remaining()
    }

    fn write_next(&mut self, out: &mut Vec<u8>, budget: usize) {
        self.0.write_next(out, budget);
    }

    fn clone_piece(&self) -> Box<dyn agentx_protocol::WrittenPiece> {
        Box::new(self.clone())
    }
}

/// A session of `traj` whose first request is turn `start`, on the run's wire.
pub(super) fn conversation(
    sh: &Shared,
    traj: agentx_dataset::Trajectory<'_>,
    start: usize,
) -> Result<agentx_dataset::Conversation, agentx_dataset::PromptError> {
    let conv = sh.synth.conversation(traj, start, sh.cfg.mode)?;
    Ok(match (sh.cfg.wire, sh.cfg.keep_reasoning) {
        (agentx_dataset::Wire::Text, false) => conv,
        (wire, keep) => conv.with_wire(wire, keep),
    })
}

/// Writes the conversation's current turn as a request body.
pub(super) fn prepare<'conv>(
    sh: &Shared,
    session: &Session,
    conv: &'conv agentx_dataset::Conversation,
) -> Prepared<'conv> {
    let traj = conv.trajectory();
    let turn = conv.turn();
    let max_tokens = traj.turn(turn).map_or(1, |t| t.max_tokens());
    let bust = bust(sh.cfg.placement, &session.marker);
    let last = turn + 1 >= traj.num_turns();
    let (body, template_parts) = body_of(sh, session, max_tokens, (conv, bust), last);
    let request_id = next_request_id(sh);
    let client_isl = conv.prompt_words() + sh.counter.count(&session.marker);
    Prepared {
        body,
        prompt_blocks: prompt_blocks(sh, session, conv, &request_id),
        request_id,
        trace_id: traj.id(),
        turn: turn as u32,
        num_turns: traj.num_turns() as u32,
        max_tokens,
        client_isl,
        prefix: (0, 0),
        source_idx: (None, None),
        template_parts,
    }
}

/// Sends a prepared request and records it.
pub(super) async fn send_turn(
    sh: &Arc<Shared>,
    session: &Session,
    mut req: Prepared<'_>,
    phase: Phase,
    intended: u64,
    cancel: &mut watch::Receiver<bool>,
) -> Sent {
    let keep_reply = sh.cfg.mode == AssistantMode::Live || !sh.cfg.use_server_token_count;
    // The reply's text (and reasoning) is read when the history or the client's count needs it.
    let keep_text = keep_reply || sh.cfg.keep_reasoning;
    // In flight until it returns, or until its task unwinds.
    let in_flight = sh.live_run.begin_request(phase, session.lane);
    let template_isl = match (&sh.cfg.chat_template, req.template_parts.take()) {
        (Some(template), Some(parts)) => {
            let template = template.clone();
            Some(tokio::task::spawn_blocking(move || {
                template.count_parts(&parts)
            }))
        }
        _ => None,
    };
    let exchange = sh
        .client
        .send(
            std::mem::take(&mut req.body),
            RequestIds {
                request_id: &req.request_id,
                correlation_id: &session.correlation_id,
                parent_correlation_id: session
                    .tree
                    .as_ref()
                    .and_then(|t| t.parent_correlation_id.as_deref()),
                root_correlation_id: session
                    .tree
                    .as_ref()
                    .map(|t| t.root_correlation_id.as_str()),
                last: req.turn + 1 >= req.num_turns,
                on_first_token: None,
            },
            keep_text,
            cancel,
        )
        .await;
    drop(in_flight);
    if let Some(task) = template_isl {
        match task.await {
            Ok(Ok(n)) => req.client_isl = n,
            Ok(Err(e)) => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        "{e}; such requests count their messages' text as their client-side ISL (warned once)"
                    );
                });
            }
            Err(e) => tracing::error!("the chat-template count of a request failed: {e}"),
        }
    }
    let rec = to_record(sh, session, req, phase, intended, &exchange);
    let sent = Sent {
        overflow: rec.context_overflow,
        error: rec
            .error
            .as_ref()
            .map(|e| format!("{} ({})", e.message, e.kind)),
        reply: (rec.error.is_none() && keep_reply).then_some(exchange.text),
        reasoning: (rec.error.is_none() && sh.cfg.keep_reasoning)
            .then_some(exchange.reasoning_text)
            .filter(|text| !text.is_empty()),
        end: exchange.end,
    };
    account(sh, &rec);
    sh.records.send(rec);
    sent
}

/// A reply's token counts, by aiperf's rule: the server's `usage` when the run reads it and it gave
/// both counts; else the client's ISL, and an OSL of the content, the tool calls' arguments and the
/// reasoning. The one home of that rule for every replay that writes records.
pub(crate) struct ReplyCounts {
    pub(crate) isl: u64,
    pub(crate) osl: u64,
    pub(crate) token_source: TokenSource,
    /// The server's reasoning count, else the client's count of the reasoning text (absent when
    /// there was none).
    pub(crate) reasoning_tokens: Option<u64>,
}

impl ReplyCounts {
    pub(crate) fn of(
        exchange: &Exchange,
        counter: &TokenCounter,
        use_server_token_count: bool,
        client_isl: u64,
    ) -> ReplyCounts {
        let usage = exchange.usage.unwrap_or_default();
        let client_reasoning =
            (!exchange.reasoning_text.is_empty()).then(|| counter.count(&exchange.reasoning_text));
        match (usage.prompt_tokens, usage.completion_tokens) {
            (Some(isl), Some(osl)) if use_server_token_count => ReplyCounts {
                isl,
                osl,
                token_source: TokenSource::Server,
                reasoning_tokens: usage.reasoning_tokens,
            },
            _ => {
                let arguments: u64 = exchange
                    .tool_calls
                    .iter()
                    .map(|call| counter.count(&call.arguments))
                    .sum();
                let content = counter.count(&exchange.text) + arguments;
                ReplyCounts {
                    isl: client_isl,
                    osl: content + client_reasoning.unwrap_or(0),
                    token_source: TokenSource::Client,
                    reasoning_tokens: usage.reasoning_tokens.or(client_reasoning),
                }
            }
        }
    }

    /// The record's account of the reply (first output, reasoning, tool calls) for a request sent
    /// at `send_ns`.
    pub(crate) fn reply_stats(&self, exchange: &Exchange, send_ns: u64) -> ReplyStats {
        ReplyStats {
            first_output_ns: exchange
                .first_output_offset_ns
                .map(|offset| send_ns + offset),
            reasoning_tokens: self.reasoning_tokens,
            tool_calls: exchange.tool_calls.len() as u32,
            tool_call_parse_failures: exchange.tool_call_parse_failures() as u32,
        }
    }
}

/// The record's error for `failure`, whose class is `kind` (the failure's own, or what the scenario
/// classified it as), with the server's error type after a `:` when its body named one.
fn record_error(failure: &Failure, kind: String) -> RecordError {
    RecordError {
        code: failure.status,
        kind: match &failure.server_type {
            Some(server_type) => format!("{kind}:{server_type}"),
            None => kind,
        },
        message: failure.message.clone(),
    }
}

/// The record's error of a failed exchange and whether it was a context overflow: the scenario's
/// `classify-error` of the status and body (`phrases` overriding its list when given), or the
/// failure's own class when it says no or cannot answer. A cancellation is never classified.
pub(crate) fn classified_error(
    scenario: &std::sync::Mutex<agentx_scenario::ScenarioInstance>,
    phrases: Option<&[String]>,
    exchange: &Exchange,
) -> (Option<RecordError>, bool) {
    let Some(failure) = exchange.failure.as_ref() else {
        return (None, false);
    };
    let mut kind = failure.kind.as_str().to_string();
    let mut context_overflow = false;
    if failure.kind != FailureKind::Cancelled {
        let body = exchange
            .error_body
            .clone()
            .unwrap_or_else(|| failure.message.clone());
        let response = ErrorResponse {
            status: failure.status,
            body_excerpt: body,
        };
        let answer = scenario
            .lock()
            .expect("scenario lock")
            .classify_error(&response, phrases);
        match answer {
            Ok(class) if class.class == ErrorClass::ContextOverflow => {
                context_overflow = true;
                kind = "context_overflow".into();
            }
            Ok(_) => {}
            Err(e) => tracing::error!("{e}; the error counts as an ordinary failure"),
        }
    }
    (Some(record_error(failure, kind)), context_overflow)
}

pub(super) fn to_record(
    sh: &Shared,
    session: &Session,
    req: Prepared<'_>,
    phase: Phase,
    intended: u64,
    exchange: &Exchange,
) -> RequestRecord {
    let counts = ReplyCounts::of(
        exchange,
        &sh.counter,
        sh.cfg.use_server_token_count,
        req.client_isl,
    );
    let (error, context_overflow) =
        classified_error(&sh.scenario, sh.cfg.overflow_phrases.as_deref(), exchange);
    let cancelled = exchange
        .failure
        .as_ref()
        .is_some_and(|f| f.kind == FailureKind::Cancelled);
    let send_ns = sh.clock.ns_of(exchange.sent);
    RequestRecord {
        request_id: req.request_id,
        correlation_id: session.correlation_id.clone(),
        session_num: session.session_num,
        phase,
        lane: session.lane,
        trace_id: req.trace_id.to_owned(),
        turn: req.turn,
        num_turns: req.num_turns,
        recycle_pass: session.recycle_pass,
        intended_ns: intended.min(send_ns),
        send_ns,
        first_byte_ns: exchange.first_byte.map(|t| sh.clock.ns_of(t)),
        first_token_ns: exchange.first_token().map(|t| sh.clock.ns_of(t)),
        chunk_offsets_ns: exchange.chunk_offsets_ns.clone(),
        end_ns: sh.clock.ns_of(exchange.end),
        isl: counts.isl,
        osl: counts.osl,
        token_source: counts.token_source,
        usage: exchange.usage.unwrap_or_default(),
        max_tokens: req.max_tokens,
        finish_reason: exchange.finish_reason.clone(),
        cancelled,
        context_overflow,
        error,
        retry: exchange.retried.clone(),
        server_ttft_ns: exchange.server_ttft.map(|d| d.as_nanos() as u64),
        server: exchange.server.clone(),
        prompt_blocks: req.prompt_blocks,
        reply: counts.reply_stats(exchange, send_ns),
        tree: session.tree.clone().map(|mut t| {
            (t.prefix_hit_blocks, t.prefix_total_blocks) = req.prefix;
            (t.source_outer_idx, t.source_inner_idx) = req.source_idx;
            t
        }),
    }
}

/// A request that failed before (or instead of) an exchange with the server.
pub(super) struct FailedRequest<'trace> {
    pub(super) trace_id: &'trace str,
    pub(super) turn: u32,
    pub(super) num_turns: u32,
    pub(super) max_tokens: u32,
    pub(super) phase: Phase,
    pub(super) intended: u64,
    /// The record error's class (`type`) and message.
    pub(super) kind: &'static str,
    pub(super) message: String,
}

/// The record of a [`FailedRequest`]: an error with no response, sent and ended now.
pub(super) fn failed_record(
    sh: &Shared,
    session: &Session,
    failed: FailedRequest<'_>,
) -> RequestRecord {
    let now = sh.clock.now_ns();
    RequestRecord {
        reply: ReplyStats::default(),
        request_id: next_request_id(sh),
        correlation_id: session.correlation_id.clone(),
        session_num: session.session_num,
        phase: failed.phase,
        lane: session.lane,
        trace_id: failed.trace_id.to_owned(),
        turn: failed.turn,
        num_turns: failed.num_turns,
        recycle_pass: session.recycle_pass,
        intended_ns: failed.intended.min(now),
        send_ns: now,
        first_byte_ns: None,
        first_token_ns: None,
        chunk_offsets_ns: agentx_record::ChunkOffsets::new(),
        end_ns: now,
        isl: 0,
        osl: 0,
        token_source: TokenSource::Client,
        usage: Usage::default(),
        max_tokens: failed.max_tokens,
        finish_reason: None,
        cancelled: false,
        context_overflow: false,
        error: Some(RecordError {
            code: 0,
            kind: failed.kind.to_owned(),
            message: failed.message,
        }),
        retry: None,
        server_ttft_ns: None,
        server: None,
        prompt_blocks: None,
        tree: session.tree.clone(),
    }
}

/// Counts a record and trips the failed-request threshold.
pub(super) fn account(sh: &Shared, rec: &RequestRecord) {
    sh.live.record(rec);
    let mut tally = sh.tally.lock().expect("tally lock");
    tally.add(rec);
    if rec.phase == Phase::Warmup {
        return;
    }
    if let Some(shard_tally) = &sh.shard_tally {
        // The threshold is over all shards' records: the rendezvous sums and decides.
        shard_tally.send_replace(tally.clone());
        return;
    }
    if let Some(threshold) = sh.cfg.failed_request_threshold {
        // Judged after every record but an overflow's (aiperf counts an overflow, then judges at
        // the next record).
        if !rec.context_overflow
            && tally.threshold_exceeded(threshold, sh.concurrency)
            && !sh.threshold_hit.swap(true, Ordering::Relaxed)
        {
            let _ = sh.threshold_tx.send(true);
        }
    }
}
