//! Session trees: one weka trace turned into the streams AgentX v1 replays
//! (docs/specs/session-trees.md#child-streams, docs/agentx-v1-reference.md M1/M2/M6), exactly as
//! aiperf 0.13.0.dev20261023's weka loader builds its conversations.
//!
//! This module owns the dataset side of a tree: which requests form which stream (the root's main
//! chain, one stream per subagent chain, one per flat worker chain of the top level), the streams'
//! aiperf conversation ids (`<trace>`, `<trace>::sa:<agent>[:aux|fa|wg:…]`, `<trace>::fa:NNN`,
//! `::aux:NNN`, `::wg:GGG_MMM`), parents, spawn and join turns and their grouping into SPAWN
//! branches, per-turn timestamps on the root clock, end-to-start delays (aiperf's formula with its
//! quirks), prefix-cache stamps, and the replay-barrier predecessors. It knows nothing of time,
//! scheduling or prompt text: the host scheduler replays a [`SessionTree`]; prompt synthesis (the
//! message roles and `reset_context` of each turn) stays with [`super::prompt`].
//!
//! A trace whose sessions are given (`ParsedTrace::explicit_sessions`, the Dynamo formats) keeps each
//! layer one stream (no chain detection), and a subagent entry may name its join turn
//! (`ParsedSubagent::join`) in place of the inferred one.
//!
//! Invariants of a built tree: stream 0 is the root; every other stream has depth 1, the root as
//! parent, and exactly one branch; turn timestamps are finite; a stream's turns are in replay order.
//!
//! **Errors** (aiperf refuses the trace too): a `t` that is not finite or negative (top-level, marker
//! or nested; the importer substitutes such values with a warning, the tree does not), `1000·t` not
//! finite, under the absolute basis a nested request more than 1e-6 s before its marker (it cannot be
//! placed on the root clock), a subagent without `agent_id`, and two retained subagents with the same
//! `agent_id`.
//!
//! **Counted outcomes** (aiperf accepts them; [`TreeCounts`]): nested requests clamped to their
//! marker (absolute basis, less than 1e-6 s early), subagents without a preceding root request
//! (dropped, listed in [`SessionTree::dropped_subagents`]), subagents without requests (one stream
//! without turns, which the scheduler treats as done at once), requests without hash ids (kept on
//! their layer's main chain), seams spliced, and the classes of the worker chains.

mod builder;
pub(crate) mod chain;
pub mod corpus;
mod turns;

pub use builder::build;
use builder::*;
use turns::*;

use std::collections::HashMap;

use super::error::{DatasetError, Location};
use super::warnings::WarningKind;
use super::weka::{ParsedRequest, ParsedSubagent, ParsedTrace, SubagentJoin};
use chain::{ChainClass, ChainParams, Detection, Req, EPS};

/// How nested (subagent) timestamps are read: chosen once per corpus (`--weka-nested-timestamp-basis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NestedBasis {
    /// Nested `t` is on the root clock; one more than 1e-6 s before its marker is an error, one
    /// within 1e-6 s is clamped to the marker.
    Absolute,
    /// Nested `t` is relative to its marker: `t += marker.t`.
    Relative,
}

impl NestedBasis {
    /// aiperf's `auto`: relative if any nested request of the corpus starts more than 1e-6 s before
    /// its marker, else absolute.
    pub fn infer<'a>(traces: impl IntoIterator<Item = &'a ParsedTrace>) -> NestedBasis {
        let relative = traces.into_iter().any(|t| {
            t.subagent_entries
                .iter()
                .any(|s| s.requests.iter().any(|r| r.t < s.t - EPS))
        });
        if relative {
            NestedBasis::Relative
        } else {
            NestedBasis::Absolute
        }
    }
}

/// Options of [`build`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TreeOptions {
    /// How nested timestamps are read.
    pub basis: NestedBasis,
    /// `--synthesis-max-osl`: caps `max_tokens` of root and flat turns (subagent turns are not capped).
    pub max_osl: Option<u32>,
    /// `AIPERF_DATASET_WEKA_SPLIT_FLATTENED_AGENTS` (default true): run chain detection. Off: one root
    /// stream in file order and one stream per subagent in `(t, index)` order.
    pub split_chains: bool,
    /// Chain-detection thresholds.
    pub chains: ChainParams,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            basis: NestedBasis::Absolute,
            max_osl: None,
            split_chains: true,
            chains: ChainParams::default(),
        }
    }
}

/// What produced a turn's new input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum InputKind {
    ToolResult,
    UserInput,
}

/// Which part of the trace a stream replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StreamKind {
    /// The root: the trace's main chain (`weka_main`).
    Main,
    /// A chain of a subagent entry (`weka_subagent`).
    Subagent,
    /// A worker chain of the top level (`weka_flat`).
    Flat,
}

/// One replayed request.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TreeTurn {
    /// Recorded start, ms on the root clock (`1000·t`).
    pub ts_ms: f64,
    /// End-to-start delay after the previous turn of the stream; `None` on turn 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delay_ms: Option<f64>,
    /// The delay under `--use-think-time-only` (`1000·think_time` when recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delay_ms_think_time_only: Option<f64>,
    /// `1000·max(0, api_time)`; `None` when missing or not finite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_time_ms: Option<f64>,
    /// `max(1, min(out, max_osl))` (root and flat), `max(1, out)` (subagent);
    /// [`crate::NO_OUTPUT_LIMIT`] when the request records no output length (sent without a
    /// token limit).
    pub max_tokens: u32,
    /// Theoretical prefix-cache stamp: leading hash ids already sent by the trace, of all.
    pub prefix_hit_blocks: u32,
    /// Hash ids of the request (the stamp's denominator).
    pub prefix_total_blocks: u32,
    /// Where the request sits in the trace: outer index, and inner index for a nested request.
    pub source_outer_idx: u32,
    /// The inner index of a nested request; `None` for a top-level one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_inner_idx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) input_kind: Option<InputKind>,
    /// Branches (indices into [`SessionTree::branches`]) this turn spawns and joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spawns: Vec<usize>,
    /// Branches this turn joins (waits for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joins: Vec<usize>,
    /// Replay-barrier predecessors `(stream, turn)` in its scope, sorted by (conversation id, turn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay_predecessors: Vec<(usize, usize)>,
}

/// One stream (an aiperf conversation).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stream {
    /// The aiperf conversation id (`<trace>`, `<trace>::sa:<agent>...`, `<trace>::fa:NNN`, ...).
    pub id: String,
    /// Which part of the trace the stream replays.
    pub kind: StreamKind,
    /// The class of a worker chain (a subagent's chain 0 and the root have none).
    pub class: Option<ChainClass>,
    /// 0 for the root, 1 otherwise.
    pub depth: u8,
    /// The parent stream (the root) of a child.
    pub parent: Option<usize>,
    /// The branch a child belongs to.
    pub branch: Option<usize>,
    /// Barrier scope: the trace id (root and flat streams) or `<trace>::sa:<agent_id>`.
    pub(crate) replay_scope: String,
    /// Turn-0 tool and system tokens (the declared ones, or 0/0 when not proven shared).
    pub(crate) init_tool_tokens: u32,
    pub(crate) init_system_tokens: u32,
    /// The stream and turn holding the request this stream forked from (a subagent's chain 0: the
    /// spawning root turn).
    pub(crate) fork_source: Option<(usize, usize)>,
    /// The stream's turns in replay order.
    pub turns: Vec<TreeTurn>,
}

/// A SPAWN branch: children started together from one root turn.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Branch {
    /// `<trace>:spawn:<first agent_id>` or `<trace>:flatspawn:<n of the first worker>`.
    pub id: String,
    /// The child streams (indices into [`SessionTree::streams`]).
    pub children: Vec<usize>,
    /// The root turn that starts the children.
    pub spawn_turn: usize,
    /// The root turn that waits for the children; `None`: they run in the background.
    pub join_turn: Option<usize>,
    /// The children's start, ms on the root clock.
    pub start_timestamp_ms: f64,
}

/// Counted outcomes of one build (over the streams built; dropped subagents are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TreeCounts {
    /// Nested requests less than 1e-6 s before their marker, moved onto it (absolute basis).
    pub(crate) clamped_requests: usize,
    /// Retained subagents without requests (one stream without turns each).
    pub(crate) empty_subagents: usize,
    /// Replayed requests without hash ids.
    pub(crate) empty_hash_requests: usize,
    /// Seams spliced in the top level (subagent layers' seams are not counted, as in aiperf).
    pub(crate) seams: usize,
    /// Worker chains classified aux (reductions included), reduction, worker-group member.
    pub aux: usize,
    /// Worker chains classified reduction (also counted in `aux`).
    pub reductions: usize,
    pub(crate) worker_group: usize,
}

/// One trace as a tree of streams.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SessionTree {
    /// The trace's `id`.
    pub trace_id: String,
    /// Root first, then subagent streams (entry order, chain order), then flat streams.
    pub streams: Vec<Stream>,
    /// The SPAWN branches, in spawn order.
    pub branches: Vec<Branch>,
    /// `agent_id`s of subagent entries without a preceding root request.
    pub dropped_subagents: Vec<String>,
    /// Counted outcomes of the build.
    pub counts: TreeCounts,
}

/// The topology of a tree entry, kept in its import report ([`crate::cache::ImportReport::trees`]; built and read by [`corpus`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct TreeTopology {
    /// The nested-timestamp basis the trees were built with (the inferred one under `auto`).
    pub basis: NestedBasis,
    /// One tree per trace of the dataset, in dataset order.
    pub trees: Vec<SessionTree>,
}

#[cfg(test)]
mod tests;
