//! `dataset stats --format graph-ir`: what a graph corpus holds (traces, nodes, edges by anchor,
//! fan-in nodes, channels by reducer) and the prefix-cache hit its prompts allow in theory.
//!
//! The hit rule: within each trace, nodes in topological order; each node's prompt is its messages'
//! content text (roles left out) tokenized with the counter (the word model by default) and hashed
//! in `block_size`-token blocks with chained hashes ([`agentx_tokens::blocks`]); a dynamic splice
//! (a producer's reply) counts as the producer's `max_tokens` fresh tokens (0 without one), the
//! same tokens wherever that reply is read in the trace and never equal to text. A block hits when
//! its chained hash was seen earlier in the same trace; the rate is hits over all full blocks of
//! all traces.

use std::collections::HashSet;

use agentx_tokens::blocks::{mix64, BlockHasher};
use agentx_tokens::TokenCounter;

use super::ir::Reducer;
use super::model::{Anchor, GraphCorpus, NodeIndex, Piece, PromptPart, Trace};

/// In-edges by anchor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AnchorCounts {
    /// From `START`.
    pub start: usize,
    /// On a predecessor's completion.
    pub completion: usize,
    /// On a predecessor's dispatch.
    pub dispatch: usize,
    /// On a predecessor's first token.
    pub first_token: usize,
}

/// Channels by reducer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReducerCounts {
    /// `overwrite`.
    pub overwrite: usize,
    /// `add_messages`.
    pub add_messages: usize,
}

/// The figures of `dataset stats --format graph-ir`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GraphStats {
    /// Traces.
    pub traces: usize,
    /// Graphs.
    pub graphs: usize,
    /// Nodes over the graphs.
    pub nodes: usize,
    /// Static edges over the graphs (`START`, `END` and injected ones included).
    pub edges: usize,
    /// Node in-edges by anchor.
    pub in_edges: AnchorCounts,
    /// Nodes with a fan-in gate (`inputs`).
    pub fan_in_nodes: usize,
    /// Channels by reducer.
    pub channels: ReducerCounts,
    /// Whether every node carries a recorded start.
    pub timestamped: bool,
    /// Tokens per hash block.
    pub block_size: u32,
    /// Prompt tokens over every node of every trace (text and dynamic).
    pub prompt_tokens: u64,
    /// Of those, the dynamic ones (producers' `max_tokens`).
    pub dynamic_tokens: u64,
    /// Full blocks over every node of every trace.
    pub blocks: u64,
    /// Blocks whose chained hash was seen earlier in their trace.
    pub hit_blocks: u64,
    /// `hit_blocks / blocks` (0 without blocks).
    pub theoretical_hit_rate: f64,
    /// Validator warnings.
    pub warnings: usize,
}

/// Seed of the keys of a producer's reply tokens.
const REPLY_SEED: u64 = 0x6772_6170_685f_6972;

/// The stats of `corpus` under `counter`, in `block_size`-token blocks.
pub fn stats(corpus: &GraphCorpus, counter: &TokenCounter, block_size: u32) -> GraphStats {
    let mut out = GraphStats {
        traces: corpus.traces().len(),
        graphs: corpus.graphs().len(),
        nodes: 0,
        edges: 0,
        in_edges: AnchorCounts::default(),
        fan_in_nodes: 0,
        channels: ReducerCounts::default(),
        timestamped: corpus.timestamped(),
        block_size,
        prompt_tokens: 0,
        dynamic_tokens: 0,
        blocks: 0,
        hit_blocks: 0,
        theoretical_hit_rate: 0.0,
        warnings: corpus.warnings().len(),
    };
    for graph in corpus.graphs() {
        out.nodes += graph.nodes.len();
        out.edges += graph.edges;
        out.fan_in_nodes += graph.nodes.iter().filter(|n| !n.inputs.is_empty()).count();
        for edge in graph.nodes.iter().flat_map(|n| &n.in_edges) {
            let slot = match edge.anchor {
                Anchor::Start { .. } => &mut out.in_edges.start,
                Anchor::Completion { .. } => &mut out.in_edges.completion,
                Anchor::Dispatch { .. } => &mut out.in_edges.dispatch,
                Anchor::FirstToken { .. } => &mut out.in_edges.first_token,
            };
            *slot += 1;
        }
        for channel in &graph.channels {
            match channel.reducer {
                Reducer::Overwrite => out.channels.overwrite += 1,
                Reducer::AddMessages => out.channels.add_messages += 1,
            }
        }
    }
    for trace in corpus.traces() {
        trace_blocks(corpus, trace, counter, block_size, &mut out);
    }
    if out.blocks > 0 {
        out.theoretical_hit_rate = out.hit_blocks as f64 / out.blocks as f64;
    }
    out
}

/// Adds the tokens, blocks and hits of one trace to `out`.
fn trace_blocks(
    corpus: &GraphCorpus,
    trace: &Trace,
    counter: &TokenCounter,
    block_size: u32,
    out: &mut GraphStats,
) {
    let graph = corpus.graph_of(trace);
    let mut seen: HashSet<u64> = HashSet::new();
    for &node in graph.topological_order() {
        let mut hasher = BlockHasher::new(block_size);
        let mut text = String::new();
        let mut reply = |producer: NodeIndex, hasher: &mut BlockHasher, text: &mut String| {
            flush(counter, hasher, text);
            let tokens = graph.node(producer).request.max_tokens.unwrap_or(0);
            for position in 0..u64::from(tokens) {
                hasher.push_key(mix64(REPLY_SEED ^ (u64::from(producer.0) << 32 | position)));
            }
            out.dynamic_tokens += u64::from(tokens);
        };
        for part in &trace.prompts[node.0 as usize] {
            match part {
                PromptPart::Message { content, .. } => {
                    for piece in content {
                        match piece {
                            Piece::Text(piece) => text.push_str(piece),
                            Piece::Reply { producer, .. } => {
                                reply(*producer, &mut hasher, &mut text);
                            }
                        }
                    }
                    // A message ends a word.
                    text.push(' ');
                }
                PromptPart::Replies { producers, .. } => {
                    for producer in producers {
                        reply(*producer, &mut hasher, &mut text);
                    }
                }
            }
        }
        flush(counter, &mut hasher, &mut text);
        out.prompt_tokens += hasher.tokens();
        for block in hasher.finish() {
            out.blocks += 1;
            if !seen.insert(block) {
                out.hit_blocks += 1;
            }
        }
    }
}

/// Hashes the text gathered so far.
fn flush(counter: &TokenCounter, hasher: &mut BlockHasher, text: &mut String) {
    for key in counter.token_keys(text) {
        hasher.push_key(key);
    }
    text.clear();
}
