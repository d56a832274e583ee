//! The records of an Agent Graph IR workload as decoded, before normalisation: the graph record,
//! its nodes, channels and edges, and the trace records
//! (docs/specs/agent-graph-ir.md#2-top-level-records).
//!
//! These are the file's own shapes, field for field, with the place each record was read from. The
//! decoder ([`super::decode`]) fills them strictly; [`super::normalise`] rewrites them in place as
//! aiperf does; the validator reads them; [`super::model`] lowers them into the replay's model.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::error::Location;

/// The `START` sentinel: an edge source only.
pub const START: &str = "START";
/// The `END` sentinel: an edge target only.
pub const END: &str = "END";
/// The only known schema version (aiperf's `_KNOWN_VERSIONS`).
pub const VERSION: &str = "2.0";
/// The node id of the linear-chat shorthand.
pub const LINEAR_CHAT_NODE: &str = "_llm";
/// The channel a trace's `messages` moves into.
pub const MESSAGES_CHANNEL: &str = "messages";

/// Where a record was read: the file and, in JSONL, its line (0 in a JSON document, or for the
/// graph of a workload that has no graph record).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Place {
    /// The workload file.
    pub file: PathBuf,
    /// The 1-based JSONL line of the record; 0 in a JSON document.
    pub line: u64,
}

impl Place {
    /// The location of the JSON path `field` inside this record.
    pub fn at(&self, field: impl Into<String>) -> Location {
        Location {
            file: self.file.clone(),
            line: self.line,
            field: Some(field.into()),
            ..Location::default()
        }
    }
}

/// `graph.provenance`: where the file came from. Unknown keys are folded into `extra`.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// Origin tag (`hand-authored` by default).
    pub source: String,
    /// The generating tool and its version (`manual` by default).
    pub tool: String,
    /// Capture time, ISO-8601.
    pub captured_at: Option<String>,
    /// Free text.
    pub notes: Option<String>,
    /// Every other key, and the keys of an explicit `extra` mapping.
    pub extra: Map<String, Value>,
}

impl Default for Provenance {
    fn default() -> Self {
        Provenance {
            source: "hand-authored".into(),
            tool: "manual".into(),
            captured_at: None,
            notes: None,
            extra: Map::new(),
        }
    }
}

/// A channel's value type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelType {
    /// A string.
    Text,
    /// A list of chat messages.
    Messages,
}

/// How writes to a channel combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reducer {
    /// One writer; the write replaces the value.
    Overwrite,
    /// Message lists appended (a message with the same `id` replaces the earlier one).
    AddMessages,
}

/// A channel declaration (`graph.state.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelSpec {
    /// Value type (`text` by default).
    pub kind: ChannelType,
    /// Reducer (`overwrite` by default).
    pub reducer: Reducer,
}

/// A fan-in requirement's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Wait for the Nth node write (N >= 1).
    Writes(u32),
    /// Wait for a write of every node that statically writes the channel.
    All,
}

/// One `inputs` entry of a node.
#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    /// The channel waited on.
    pub channel: String,
    /// How many writes.
    pub count: Count,
}

/// One string of a message's `content` list.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentItem {
    /// Literal text (a leading `@@` already unescaped to `@`).
    Text(String),
    /// `@name`: the text of channel `name`.
    Channel(String),
}

/// A message's `content`.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// A plain string: literal text.
    Text(String),
    /// A list of strings: literal text and text channel references.
    Parts(Vec<ContentItem>),
}

/// One item of a node's prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptItem {
    /// A chat message `{role, content}`.
    Message {
        /// The role.
        role: String,
        /// The content.
        content: Content,
    },
    /// `"@name"` at the top level: the messages of channel `name` spliced in.
    Splice(String),
}

/// A node's predicted token counts (`expected`); predictions only, never sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Expected {
    /// Predicted prompt tokens.
    pub input_tokens: Option<u64>,
    /// Predicted completion tokens.
    pub output_tokens: Option<u64>,
    /// Predicted cache-read tokens.
    pub cache_read_tokens: Option<u64>,
    /// Predicted cache-creation tokens.
    pub cache_creation_tokens: Option<u64>,
}

/// An `llm` node (the only node kind of schema 2.0 as aiperf reads it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LlmNode {
    /// Free-form metadata.
    pub metadata: Map<String, Value>,
    /// Minimum wait after the node's inputs are satisfied, microseconds.
    pub min_start_delay_us: Option<f64>,
    /// Recorded offset from the trace's arrival, microseconds.
    pub arrival_offset_us: Option<u64>,
    /// Recorded absolute start, Unix milliseconds (aiperf's later models; the Dynamo adapter).
    pub recorded_start_unix_ms: Option<u64>,
    /// The AND fan-in gate.
    pub inputs: Vec<Requirement>,
    /// The prompt (alias `messages`).
    pub prompt: Vec<PromptItem>,
    /// The channel the reply is written to.
    pub output: String,
    /// Stream the request (default true).
    pub streaming: bool,
    /// The model; `None` is the run's.
    pub model: Option<String>,
    /// The output cap (>= 1).
    pub max_tokens: Option<u32>,
    /// The body's `tools`.
    pub raw_tools: Option<Vec<Value>>,
    /// HTTP headers.
    pub extra_headers: Option<BTreeMap<String, String>>,
    /// Predicted token counts.
    pub expected: Option<Expected>,
    /// Merged into the top level of the request body.
    pub extra_body: Option<Map<String, Value>>,
    /// Set by an adapter's trie build.
    pub theoretical_prefix_cache_hit_blocks: Option<u64>,
    /// Set by an adapter's trie build.
    pub theoretical_prefix_cache_total_blocks: Option<u64>,
}

/// A static edge and its delays (microseconds, each finite and >= 0 when set).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Edge {
    /// A node id or `START`.
    pub source: String,
    /// A node id or `END`.
    pub target: String,
    /// Anchored on the source's completion.
    pub delay_after_predecessor_us: Option<f64>,
    /// Anchored on the source's dispatch.
    pub delay_after_predecessor_start_us: Option<f64>,
    /// Anchored on the source's first token (needs the dispatch anchor as its fallback).
    pub delay_after_predecessor_first_token_us: Option<f64>,
    /// After the target's inputs are ready; on a `START` edge, after the trace starts.
    pub min_start_delay_us: Option<f64>,
    /// Added by START/END injection, not declared in the file.
    pub injected: bool,
}

impl Edge {
    /// The edge's JSON path as aiperf writes it: `graph.edges[a->b]`.
    pub fn path(&self) -> String {
        format!("graph.edges[{}->{}]", self.source, self.target)
    }
}

/// The graph record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GraphRecord {
    /// Schema version (`2.0` by default).
    pub version: String,
    /// Origin.
    pub provenance: Provenance,
    /// System prompt of the linear-chat shorthand.
    pub system: Option<String>,
    /// Channel declarations, by name.
    pub state: BTreeMap<String, ChannelSpec>,
    /// Nodes, by id.
    pub nodes: BTreeMap<String, LlmNode>,
    /// Static edges, in file order (injected ones after).
    pub edges: Vec<Edge>,
    /// Where the record was read.
    pub place: Place,
}

/// A trace record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceRecord {
    /// Stable trace id.
    pub id: String,
    /// Opaque labels.
    pub tags: Vec<String>,
    /// Key of the graph the trace runs; `None` is the workload's graph.
    pub graph_ref: Option<String>,
    /// The linear-chat shorthand's messages (moved into `initial_state.messages`).
    pub messages: Option<Vec<Value>>,
    /// Channel values at t=0.
    pub initial_state: BTreeMap<String, Value>,
    /// Recorded outputs by node id, then channel (read only to derive channels).
    pub replay_outputs: BTreeMap<String, BTreeMap<String, Value>>,
    /// Where the record was read.
    pub place: Place,
    /// Position among the workload's traces.
    pub index: usize,
}

impl TraceRecord {
    /// The trace's JSON path: `traces[i]`, with `.field` when given.
    pub fn path(&self, field: &str) -> String {
        if field.is_empty() {
            format!("traces[{}]", self.index)
        } else {
            format!("traces[{}].{field}", self.index)
        }
    }
}

/// A whole workload as read: one graph (a default one when the file has no graph record) and its
/// traces in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Workload {
    /// The workload file.
    pub path: PathBuf,
    /// The graph.
    pub graph: GraphRecord,
    /// The traces.
    pub traces: Vec<TraceRecord>,
}
