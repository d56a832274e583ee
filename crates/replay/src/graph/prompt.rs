//! A graph node's request and its record: the body builder of each node (the run's shape with
//! the node's model, tools and `extra_body` over it, always streamed), the prompt built at
//! dispatch from the trace's resolved parts and the live replies it splices (the prompt grammar
//! of
//! docs/specs/agent-graph-ir.md#3-nodes-modelspy_basenode-modelspyllmnode-modelspynodekind-unknown-fields-rejected;
//! docs/specs/agent-graph-ir.md#7-isl-osl-and-prefix: a native prompt is literal messages, its ISL
//! whatever they tokenize to, its OSL the node's `max_tokens`), and the [`RequestRecord`] of its
//! exchange.

use std::collections::HashMap;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;

use super::{BodyShape, Ctx};
use agentx_dataset::graph_ir::{Graph, NodeIndex, Piece, PromptPart};
use agentx_protocol::{Exchange, FailureKind, JsonBody, RequestBody};
use agentx_record::{Phase, RequestRecord, TreeInfo, NO_OUTPUT_LIMIT};

/// One node's dispatch, as its request task takes it.
#[derive(Debug)]
pub(super) struct Sending {
    /// The trace instance (the record's session).
    pub(super) instance: String,
    /// The trace's index in the corpus.
    pub(super) trace: usize,
    /// The node.
    pub(super) node: NodeIndex,
    /// The prompt, `(role, text)` per message, its splices filled.
    pub(super) messages: Vec<(String, String)>,
    /// The node's gate: when it was due.
    pub(super) intended: Instant,
}

/// The body builder of every node of `graph`.
pub(super) fn bodies(graph: &Graph, shape: &BodyShape) -> Vec<RequestBody> {
    graph
        .nodes
        .iter()
        .map(|node| {
            let request = &node.request;
            let mut extra: Vec<(String, Value)> = shape
                .extra
                .iter()
                .filter(|(key, _)| !request.extra_body.contains_key(key))
                .cloned()
                .collect();
            extra.extend(
                request
                    .extra_body
                    .iter()
                    .map(|(key, value)| (key.clone(), value.clone())),
            );
            if let Some(tools) = &request.raw_tools {
                extra.retain(|(key, _)| key != "tools");
                extra.push(("tools".into(), Value::Array(tools.clone())));
            }
            let model = request.model.as_deref().unwrap_or(&shape.model);
            // Streamed whatever `streaming` says: the client reads event streams only.
            RequestBody::new(model, true, true, &extra)
                .with_max_completion_tokens(shape.max_completion_tokens)
                .with_endpoint_type(shape.api)
        })
        .collect()
}

/// A prompt's messages with the live replies spliced in: a text reference reads its producer's
/// reply (empty when the producer failed), a messages splice adds one assistant message per
/// producer that replied.
pub(super) fn messages(
    parts: &[PromptPart],
    replies: &HashMap<NodeIndex, String>,
) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            PromptPart::Message { role, content } => {
                let mut text = String::new();
                for piece in content {
                    match piece {
                        Piece::Text(literal) => text.push_str(literal),
                        Piece::Reply { producer, .. } => {
                            text.push_str(replies.get(producer).map_or("", String::as_str));
                        }
                    }
                }
                out.push((role.clone(), text));
            }
            PromptPart::Replies { producers, .. } => {
                for producer in producers {
                    if let Some(reply) = replies.get(producer) {
                        out.push(("assistant".into(), reply.clone()));
                    }
                }
            }
        }
    }
    out
}

/// The body of `sending`, its prompt's text (for the client-side ISL) and its token limit.
pub(super) fn body(ctx: &Ctx, sending: &Sending) -> (JsonBody, String, u32) {
    let graph = ctx.corpus.graph_of(&ctx.corpus.traces()[sending.trace]);
    let node = graph.node(sending.node);
    let max_tokens = node.request.max_tokens.unwrap_or(NO_OUTPUT_LIMIT);
    let mut json = vec![b'['];
    let mut text = String::new();
    for (i, (role, content)) in sending.messages.iter().enumerate() {
        if i > 0 {
            json.push(b',');
            text.push('\n');
        }
        let message = serde_json::json!({"role": role, "content": content});
        serde_json::to_writer(&mut json, &message).expect("a message serializes");
        text.push_str(content);
    }
    let builder = &ctx.bodies[ctx.corpus.traces()[sending.trace].graph][sending.node.0 as usize];
    (
        builder.build(max_tokens, vec![Bytes::from(json)]),
        text,
        max_tokens,
    )
}

/// The record of `sending`'s exchange.
pub(super) fn record(
    ctx: &Ctx,
    sending: &Sending,
    request_id: String,
    prompt_text: &str,
    max_tokens: u32,
    exchange: &Exchange,
) -> RequestRecord {
    let trace = &ctx.corpus.traces()[sending.trace];
    let graph = ctx.corpus.graph_of(trace);
    let node = graph.node(sending.node);
    let counts = crate::request::ReplyCounts::of(
        exchange,
        &ctx.counter,
        ctx.use_server_token_count,
        ctx.counter.count(prompt_text),
    );
    let (error, context_overflow) =
        crate::request::classified_error(&ctx.scenario, ctx.overflow_phrases.as_deref(), exchange);
    let cancelled = exchange
        .failure
        .as_ref()
        .is_some_and(|f| f.kind == FailureKind::Cancelled);
    let position = graph
        .topological_order()
        .iter()
        .position(|n| *n == sending.node)
        .unwrap_or(0) as u32;
    let send_ns = ctx.clock.ns_of(exchange.sent);
    RequestRecord {
        request_id,
        correlation_id: sending.instance.clone(),
        session_num: 0,
        phase: Phase::Profiling,
        lane: 0,
        trace_id: format!("{}/{}", trace.id, node.id),
        turn: position,
        num_turns: graph.nodes.len() as u32,
        recycle_pass: 0,
        intended_ns: ctx.clock.ns_of(sending.intended).min(send_ns),
        send_ns,
        first_byte_ns: exchange.first_byte.map(|t| ctx.clock.ns_of(t)),
        first_token_ns: exchange.first_token().map(|t| ctx.clock.ns_of(t)),
        chunk_offsets_ns: exchange.chunk_offsets_ns.clone(),
        end_ns: ctx.clock.ns_of(exchange.end),
        isl: counts.isl,
        osl: counts.osl,
        token_source: counts.token_source,
        usage: exchange.usage.unwrap_or_default(),
        max_tokens,
        finish_reason: exchange.finish_reason.clone(),
        cancelled,
        context_overflow,
        error,
        retry: exchange.retried.clone(),
        server_ttft_ns: exchange.server_ttft.map(|d| d.as_nanos() as u64),
        server: exchange.server.clone(),
        prompt_blocks: None,
        reply: counts.reply_stats(exchange, send_ns),
        tree: Some(TreeInfo {
            agent_depth: u8::from(!graph.entries.contains(&sending.node)),
            root_correlation_id: sending.instance.clone(),
            parent_correlation_id: None,
            source_trace_id: trace.id.clone(),
            prefix_hit_blocks: 0,
            prefix_total_blocks: 0,
            source_outer_idx: Some(position),
            source_inner_idx: None,
        }),
    }
}
