//! The validated, immutable model of a graph corpus that the replay runs: [`GraphCorpus`], its
//! [`Graph`]s (nodes with their in-edges as [`Anchor`]s, their successors by trigger, their fan-in
//! requirements resolved to channel indices and counts) and its [`Trace`]s (each trace's prompt of
//! every node, static channel text resolved from its `initial_state`, dynamic splices named by the
//! producer node whose reply fills them).
//!
//! Invariants of a [`GraphCorpus`] (the loader refuses whatever breaks one, so an executor
//! re-checks nothing):
//! - every [`NodeIndex`] and [`ChannelIndex`] is in range of its graph; every trace's graph is in
//!   range of the corpus, and its `prompts` has one entry per node of that graph;
//! - the static edges are acyclic and every node is reachable from `START`;
//!   [`Graph::topological_order`] lists every node once, each after all its predecessors;
//! - a node with an [`Anchor::Dispatch`] or [`Anchor::FirstToken`] in-edge has exactly that one
//!   in-edge; a first-token anchor always has its dispatch fallback; only a `START` edge is
//!   [`Anchor::Start`], and no `START` edge is anchored on dispatch or first token;
//! - [`Node::on_completion`] and [`Node::on_dispatch`] are exactly the targets of the node's
//!   completion and dispatch/first-token out-edges (`END` left out); [`Graph::entries`] the targets
//!   of `START`;
//! - every delay is finite and >= 0;
//! - an overwrite channel has at most one writer; every fan-in count is >= 1 (or 0 for `all` on a
//!   channel nobody writes), and no greater than the writers that can write before the node, so a
//!   fan-in is never orphaned and never waits forever;
//! - every prompt reference is resolved: static text and messages are the trace's seeds, of the
//!   channel's type; every dynamic producer writes the channel and completes before the reading
//!   node dispatches (a path from it starts with a completion edge), listed in topological order,
//!   and the writers of every read channel form one edge chain;
//! - either every node carries a recorded start or none does ([`GraphCorpus::timestamped`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::ir::{
    ChannelType, Content, ContentItem, Count, Expected, GraphRecord, PromptItem, Provenance,
    Reducer, TraceRecord, Workload, END,
};
use crate::error::{Finding, Location, Severity};

/// A node's position in [`Graph::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIndex(pub u32);

/// A channel's position in [`Graph::channels`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChannelIndex(pub u32);

/// What an in-edge's gate is anchored on, with its delays in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Anchor {
    /// From `START`: the node may fire `min_start_delay_us` after the trace starts (the larger of
    /// the edge's `min_start_delay_us` and `delay_after_predecessor_us`).
    Start {
        /// Delay after the trace's start.
        min_start_delay_us: f64,
    },
    /// The source's completion (`delay_after_predecessor_us`, 0 for an ordering-only edge); the
    /// node is scheduled when the source completes.
    Completion {
        /// The predecessor.
        source: NodeIndex,
        /// Delay after its response completes.
        delay_us: f64,
    },
    /// The source's dispatch (`delay_after_predecessor_start_us`); the node is scheduled when the
    /// source is dispatched and does not wait for its completion.
    Dispatch {
        /// The predecessor.
        source: NodeIndex,
        /// Delay after its dispatch.
        delay_us: f64,
    },
    /// The source's first streamed token (`delay_after_predecessor_first_token_us`); scheduled at
    /// the source's dispatch, gated at its first token, or at dispatch + `dispatch_fallback_us`
    /// when the source ends without one.
    FirstToken {
        /// The predecessor.
        source: NodeIndex,
        /// Delay after its first token.
        delay_us: f64,
        /// Delay after its dispatch when no first token comes.
        dispatch_fallback_us: f64,
    },
}

impl Anchor {
    /// The source node (`None` for `START`).
    pub fn source(&self) -> Option<NodeIndex> {
        match *self {
            Anchor::Start { .. } => None,
            Anchor::Completion { source, .. }
            | Anchor::Dispatch { source, .. }
            | Anchor::FirstToken { source, .. } => Some(source),
        }
    }
}

/// One in-edge of a node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InEdge {
    /// The anchor and its delay.
    pub anchor: Anchor,
    /// The edge's `min_start_delay_us` (0 when unset; on a `START` edge it is in the anchor): the
    /// node may fire no earlier than this after its inputs are ready.
    pub min_start_delay_us: f64,
}

/// A fan-in requirement (`inputs`), resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct FanIn {
    /// The channel waited on.
    pub channel: ChannelIndex,
    /// The count as written.
    pub declared: Count,
    /// Node writes to wait for (`all` resolved to the number of writers).
    pub count: u32,
}

/// A recorded start of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordedStart {
    /// Offset from the trace's arrival, microseconds.
    pub arrival_offset_us: Option<u64>,
    /// Absolute start, Unix milliseconds.
    pub unix_ms: Option<u64>,
}

/// What a node sends besides its prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The model; `None` is the run's.
    pub model: Option<String>,
    /// The output cap; `None` sends none.
    pub max_tokens: Option<u32>,
    /// Stream the request.
    pub streaming: bool,
    /// The body's `tools`.
    pub raw_tools: Option<Vec<Value>>,
    /// HTTP headers, by name.
    pub extra_headers: BTreeMap<String, String>,
    /// Merged into the top level of the body.
    pub extra_body: Map<String, Value>,
    /// Predicted token counts (not sent).
    pub expected: Option<Expected>,
}

/// A node of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The node id.
    pub id: String,
    /// Its in-edges.
    pub in_edges: Vec<InEdge>,
    /// Successors scheduled when this node completes.
    pub on_completion: Vec<NodeIndex>,
    /// Successors scheduled when this node is dispatched (dispatch and first-token anchors).
    pub on_dispatch: Vec<NodeIndex>,
    /// The node's own `min_start_delay_us` (0 when unset), combined into the gate with max.
    pub min_start_delay_us: f64,
    /// Its recorded start, when the corpus is timestamped.
    pub recorded_start: Option<RecordedStart>,
    /// The AND fan-in gate.
    pub inputs: Vec<FanIn>,
    /// The channel its reply is written to.
    pub output: ChannelIndex,
    /// What it sends.
    pub request: Request,
}

/// A channel of a graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Channel {
    /// Its name.
    pub name: String,
    /// Its value type.
    pub kind: ChannelType,
    /// Its reducer.
    pub reducer: Reducer,
    /// The nodes whose output it is, in topological order.
    pub writers: Vec<NodeIndex>,
}

/// A graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    /// Schema version.
    pub version: String,
    /// Origin.
    pub provenance: Provenance,
    /// Channels, by name order.
    pub channels: Vec<Channel>,
    /// Nodes, by id order.
    pub nodes: Vec<Node>,
    /// The targets of `START` edges (the entry nodes), each once, in edge order.
    pub entries: Vec<NodeIndex>,
    /// Every static edge, `START`/`END` ones and injected ones included.
    pub edges: usize,
    topological: Vec<NodeIndex>,
}

impl Graph {
    /// The node at `index`.
    pub fn node(&self, index: NodeIndex) -> &Node {
        &self.nodes[index.0 as usize]
    }

    /// The channel at `index`.
    pub fn channel(&self, index: ChannelIndex) -> &Channel {
        &self.channels[index.0 as usize]
    }

    /// Every node once, each after all its predecessors (ties by index).
    pub fn topological_order(&self) -> &[NodeIndex] {
        &self.topological
    }
}

/// One piece of a prompt message's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text known before the run: a literal, or a text channel's seed.
    Text(String),
    /// The reply text of `producer`, written to text channel `channel`.
    Reply {
        /// The channel referenced.
        channel: ChannelIndex,
        /// The node whose reply it is.
        producer: NodeIndex,
    },
}

/// One part of a node's prompt for one trace.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptPart {
    /// A message: a literal one, or one of a messages channel's seed.
    Message {
        /// The role.
        role: String,
        /// Its content, concatenated.
        content: Vec<Piece>,
    },
    /// The replies of `producers` to messages channel `channel`, one assistant message each, in
    /// order.
    Replies {
        /// The channel spliced.
        channel: ChannelIndex,
        /// The nodes whose replies they are.
        producers: Vec<NodeIndex>,
    },
}

/// A trace of the corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The trace id.
    pub id: String,
    /// Opaque labels.
    pub tags: Vec<String>,
    /// The graph it runs ([`GraphCorpus::graphs`]).
    pub graph: usize,
    /// The prompt of every node of its graph, by node index.
    pub prompts: Vec<Vec<PromptPart>>,
    /// Where it was read.
    pub location: Location,
}

/// A validated graph corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphCorpus {
    source: PathBuf,
    graphs: Vec<Graph>,
    traces: Vec<Trace>,
    warnings: Vec<Finding>,
    timestamped: bool,
}

impl GraphCorpus {
    /// The workload file.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The graphs (a native workload has one).
    pub fn graphs(&self) -> &[Graph] {
        &self.graphs
    }

    /// The traces, in file order.
    pub fn traces(&self) -> &[Trace] {
        &self.traces
    }

    /// The graph of `trace`.
    pub fn graph_of(&self, trace: &Trace) -> &Graph {
        &self.graphs[trace.graph]
    }

    /// The validator's warnings.
    pub fn warnings(&self) -> &[Finding] {
        &self.warnings
    }

    /// Whether every node carries a recorded start (else none does).
    pub fn timestamped(&self) -> bool {
        self.timestamped
    }
}

/// The nodes a node's completion happens before: every node on a path from it whose first edge is
/// not anchored on its dispatch.
fn after_completion(graph: &GraphRecord, id: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<&str> = graph
        .edges
        .iter()
        .filter(|e| e.source == id && e.delay_after_predecessor_start_us.is_none())
        .map(|e| e.target.as_str())
        .collect();
    while let Some(next) = queue.pop_front() {
        if next != END && seen.insert(next.to_owned()) {
            queue.extend(
                graph
                    .edges
                    .iter()
                    .filter(|e| e.source == next)
                    .map(|e| e.target.as_str()),
            );
        }
    }
    seen
}

/// Kahn's order over the node ids (ties by id order).
fn topological(graph: &GraphRecord, index: &HashMap<&str, NodeIndex>) -> Vec<NodeIndex> {
    let mut indegree = vec![0usize; graph.nodes.len()];
    for edge in &graph.edges {
        if let (Some(_), Some(target)) = (
            index.get(edge.source.as_str()),
            index.get(edge.target.as_str()),
        ) {
            indegree[target.0 as usize] += 1;
        }
    }
    let mut ready: BTreeSet<NodeIndex> = (0..graph.nodes.len())
        .filter(|i| indegree[*i] == 0)
        .map(|i| NodeIndex(i as u32))
        .collect();
    let ids: Vec<&str> = graph.nodes.keys().map(String::as_str).collect();
    let mut order = Vec::with_capacity(ids.len());
    while let Some(next) = ready.pop_first() {
        order.push(next);
        for edge in graph
            .edges
            .iter()
            .filter(|e| e.source == ids[next.0 as usize])
        {
            if let Some(target) = index.get(edge.target.as_str()) {
                indegree[target.0 as usize] -= 1;
                if indegree[target.0 as usize] == 0 {
                    ready.insert(*target);
                }
            }
        }
    }
    order
}

/// The lowering of one graph: indices, and for each read channel of each node its producers.
struct Lowering<'a> {
    record: &'a GraphRecord,
    nodes: HashMap<&'a str, NodeIndex>,
    channels: HashMap<&'a str, ChannelIndex>,
    /// Per writer id, the ids its completion happens before.
    completes_before: HashMap<&'a str, BTreeSet<String>>,
    order: Vec<NodeIndex>,
    findings: Vec<Finding>,
}

/// The text of a seed message's content (a string, or a list of strings joined).
fn seed_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => parts
            .iter()
            .map(|p| p.as_str())
            .collect::<Option<Vec<_>>>()
            .map(|p| p.concat()),
        _ => None,
    }
}

impl<'a> Lowering<'a> {
    fn new(record: &'a GraphRecord) -> Self {
        let nodes: HashMap<&str, NodeIndex> = record
            .nodes
            .keys()
            .enumerate()
            .map(|(i, id)| (id.as_str(), NodeIndex(i as u32)))
            .collect();
        let channels = record
            .state
            .keys()
            .enumerate()
            .map(|(i, name)| (name.as_str(), ChannelIndex(i as u32)))
            .collect();
        let completes_before = record
            .nodes
            .keys()
            .map(|id| (id.as_str(), after_completion(record, id)))
            .collect();
        let order = topological(record, &nodes);
        Lowering {
            record,
            nodes,
            channels,
            completes_before,
            order,
            findings: Vec::new(),
        }
    }

    fn ids(&self) -> Vec<&'a str> {
        self.record.nodes.keys().map(String::as_str).collect()
    }

    /// The writers of `channel` in topological order.
    fn writers(&self, channel: &str) -> Vec<&'a str> {
        let ids = self.ids();
        self.order
            .iter()
            .map(|i| ids[i.0 as usize])
            .filter(|id| self.record.nodes[*id].output == channel)
            .collect()
    }

    fn refuse(&mut self, path: String, message: String, fix: String) {
        self.findings.push(Finding {
            rule: "lowering".into(),
            severity: Severity::Error,
            location: self.record.place.at(path),
            message,
            fix,
        });
    }

    /// The producers of `channel` for reader `reader`: its writers whose completion happens before
    /// the reader dispatches. Refuses writers that form no chain, and a writer racing the reader.
    fn producers(&mut self, reader: &str, channel: &str, path: &str) -> Vec<NodeIndex> {
        let writers = self.writers(channel);
        for pair in writers.windows(2) {
            if !graph_reaches(self.record, pair[0], pair[1]) {
                self.refuse(path.into(),
                    format!("node '{reader}' reads channel '{channel}', whose writers '{}' and '{}' are not ordered by any edge (concurrent writers to a spliced channel are refused by aiperf's lowering)", pair[0], pair[1]),
                    format!("chain the writers of '{channel}' with an edge '{}' -> '{}', or give one of them another output", pair[0], pair[1]));
                return Vec::new();
            }
        }
        let mut producers = Vec::new();
        for writer in writers {
            if writer == reader || graph_reaches(self.record, reader, writer) {
                continue;
            }
            if !self.completes_before[writer].contains(reader) {
                self.refuse(path.into(),
                    format!("node '{reader}' reads channel '{channel}', but its writer '{writer}' may still be running when '{reader}' is dispatched (no path from '{writer}' to '{reader}' starts with a completion edge)"),
                    format!("anchor an edge from '{writer}' towards '{reader}' on completion, or read another channel"));
                continue;
            }
            producers.push(self.nodes[writer]);
        }
        producers
    }
}

/// Whether a path of static edges leads from `from` to `to`.
fn graph_reaches(graph: &GraphRecord, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from([from]);
    while let Some(id) = queue.pop_front() {
        for edge in graph.edges.iter().filter(|e| e.source == id) {
            if edge.target == to {
                return true;
            }
            if seen.insert(edge.target.as_str()) {
                queue.push_back(edge.target.as_str());
            }
        }
    }
    false
}

/// How a node reads a channel: the producers found once per graph, per (node, channel, use).
#[derive(Debug, Clone)]
struct Read {
    channel: ChannelIndex,
    reducer: Reducer,
    producers: Vec<NodeIndex>,
}

/// The channel reads of every node's prompt, checked against the channel types; keyed by
/// (node id, channel name).
fn reads(lowering: &mut Lowering<'_>) -> HashMap<(String, String), Read> {
    let mut out = HashMap::new();
    let record = lowering.record;
    for (id, node) in &record.nodes {
        for (i, item) in node.prompt.iter().enumerate() {
            let path = format!("graph.nodes.{id}.prompt[{i}]");
            let (names, wanted): (Vec<&str>, ChannelType) = match item {
                PromptItem::Splice(name) => (vec![name.as_str()], ChannelType::Messages),
                PromptItem::Message {
                    content: Content::Parts(parts),
                    ..
                } => (
                    parts
                        .iter()
                        .filter_map(|p| match p {
                            ContentItem::Channel(name) => Some(name.as_str()),
                            ContentItem::Text(_) => None,
                        })
                        .collect(),
                    ChannelType::Text,
                ),
                PromptItem::Message { .. } => continue,
            };
            for name in names {
                let spec = record.state[name];
                if spec.kind != wanted
                    || (wanted == ChannelType::Text && spec.reducer != Reducer::Overwrite)
                {
                    let (said, fix) = match wanted {
                        ChannelType::Messages => ("\"@NAME\" at the prompt's top level splices a messages channel", "reference a text channel inside a message's content, or declare it {type: messages, reducer: add_messages}"),
                        ChannelType::Text => ("\"@NAME\" inside a message's content reads a text channel (overwrite reducer)", "splice a messages channel at the prompt's top level as \"@NAME\", or declare it {type: text, reducer: overwrite}"),
                    };
                    lowering.refuse(
                        path.clone(),
                        format!(
                            "{} but '{name}' is {:?}/{:?}",
                            said.replace("NAME", name),
                            spec.kind,
                            spec.reducer
                        )
                        .to_lowercase(),
                        fix.replace("NAME", name),
                    );
                    continue;
                }
                let producers = lowering.producers(id, name, &path);
                out.insert(
                    (id.clone(), name.to_owned()),
                    Read {
                        channel: lowering.channels[name],
                        reducer: spec.reducer,
                        producers,
                    },
                );
            }
        }
    }
    out
}

/// Builds the model of a validated workload; `Err` with the lowering's findings (channel types,
/// missing or malformed seeds, concurrent writers) when it cannot.
pub(crate) fn build(
    workload: &Workload,
    warnings: Vec<Finding>,
) -> Result<GraphCorpus, Vec<Finding>> {
    let record = &workload.graph;
    let mut lowering = Lowering::new(record);
    let reads = reads(&mut lowering);
    let mut findings = std::mem::take(&mut lowering.findings);
    if !findings.is_empty() {
        findings.extend(warnings);
        return Err(findings);
    }
    let graph = graph(&lowering);
    let mut traces = Vec::with_capacity(workload.traces.len());
    for trace in &workload.traces {
        match trace_prompts(trace, record, &reads) {
            Ok(prompts) => traces.push(Trace {
                id: trace.id.clone(),
                tags: trace.tags.clone(),
                graph: 0,
                prompts,
                location: Location {
                    trace: Some(trace.id.clone()),
                    ..trace.place.at(trace.path(""))
                },
            }),
            Err(mut refused) => findings.append(&mut refused),
        }
    }
    if !findings.is_empty() {
        findings.extend(warnings);
        return Err(findings);
    }
    let timestamped = graph.nodes.iter().all(|n| n.recorded_start.is_some());
    Ok(GraphCorpus {
        source: workload.path.clone(),
        graphs: vec![graph],
        traces,
        warnings,
        timestamped,
    })
}

/// The anchor of an edge into a node (`index` maps node ids).
fn anchor(edge: &super::ir::Edge, index: &HashMap<&str, NodeIndex>) -> InEdge {
    let ready = edge.min_start_delay_us.unwrap_or(0.0);
    let Some(&source) = index.get(edge.source.as_str()) else {
        let after = edge.delay_after_predecessor_us.unwrap_or(0.0);
        return InEdge {
            anchor: Anchor::Start {
                min_start_delay_us: ready.max(after),
            },
            min_start_delay_us: 0.0,
        };
    };
    let anchor = match (
        edge.delay_after_predecessor_start_us,
        edge.delay_after_predecessor_first_token_us,
    ) {
        (Some(fallback), Some(delay_us)) => Anchor::FirstToken {
            source,
            delay_us,
            dispatch_fallback_us: fallback,
        },
        (Some(delay_us), None) => Anchor::Dispatch { source, delay_us },
        _ => Anchor::Completion {
            source,
            delay_us: edge.delay_after_predecessor_us.unwrap_or(0.0),
        },
    };
    InEdge {
        anchor,
        min_start_delay_us: ready,
    }
}

/// The graph's nodes, channels and edges as the model holds them.
fn graph(lowering: &Lowering<'_>) -> Graph {
    let record = lowering.record;
    let index = &lowering.nodes;
    let mut nodes: Vec<Node> = record
        .nodes
        .iter()
        .map(|(id, node)| Node {
            id: id.clone(),
            in_edges: Vec::new(),
            on_completion: Vec::new(),
            on_dispatch: Vec::new(),
            min_start_delay_us: node.min_start_delay_us.unwrap_or(0.0),
            recorded_start: (node.arrival_offset_us.is_some()
                || node.recorded_start_unix_ms.is_some())
            .then_some(RecordedStart {
                arrival_offset_us: node.arrival_offset_us,
                unix_ms: node.recorded_start_unix_ms,
            }),
            inputs: node
                .inputs
                .iter()
                .map(|r| FanIn {
                    channel: lowering.channels[r.channel.as_str()],
                    declared: r.count,
                    count: match r.count {
                        Count::Writes(n) => n,
                        Count::All => lowering.writers(&r.channel).len() as u32,
                    },
                })
                .collect(),
            output: lowering.channels[node.output.as_str()],
            request: Request {
                model: node.model.clone(),
                max_tokens: node.max_tokens,
                streaming: node.streaming,
                raw_tools: node.raw_tools.clone(),
                extra_headers: node.extra_headers.clone().unwrap_or_default(),
                extra_body: node.extra_body.clone().unwrap_or_default(),
                expected: node.expected,
            },
        })
        .collect();
    let mut entries = Vec::new();
    for edge in &record.edges {
        let Some(&target) = index.get(edge.target.as_str()) else {
            continue;
        };
        let in_edge = anchor(edge, index);
        match in_edge.anchor {
            Anchor::Start { .. } if !entries.contains(&target) => entries.push(target),
            Anchor::Start { .. } => {}
            Anchor::Completion { source, .. } => {
                nodes[source.0 as usize].on_completion.push(target);
            }
            Anchor::Dispatch { source, .. } | Anchor::FirstToken { source, .. } => {
                nodes[source.0 as usize].on_dispatch.push(target);
            }
        }
        nodes[target.0 as usize].in_edges.push(in_edge);
    }
    let channels = record
        .state
        .iter()
        .map(|(name, spec)| Channel {
            name: name.clone(),
            kind: spec.kind,
            reducer: spec.reducer,
            writers: lowering.writers(name).iter().map(|id| index[id]).collect(),
        })
        .collect();
    Graph {
        version: record.version.clone(),
        provenance: record.provenance.clone(),
        channels,
        nodes,
        entries,
        edges: record.edges.len(),
        topological: lowering.order.clone(),
    }
}

/// The prompts of every node of `record` for `trace`; `Err` with a finding per unresolvable
/// reference.
fn trace_prompts(
    trace: &TraceRecord,
    record: &GraphRecord,
    reads: &HashMap<(String, String), Read>,
) -> Result<Vec<Vec<PromptPart>>, Vec<Finding>> {
    let mut refused = Vec::new();
    let mut prompts = Vec::with_capacity(record.nodes.len());
    for (id, node) in &record.nodes {
        let mut parts = Vec::new();
        for item in &node.prompt {
            let resolved = match item {
                PromptItem::Message { role, content } => {
                    message(trace, id, role, content, reads).map(|m| vec![m])
                }
                PromptItem::Splice(name) => splice(trace, id, name, reads),
            };
            match resolved {
                Ok(mut more) => parts.append(&mut more),
                Err(finding) => refused.push(*finding),
            }
        }
        prompts.push(parts);
    }
    if refused.is_empty() {
        Ok(prompts)
    } else {
        Err(refused)
    }
}

/// A trace's refusal of `node`'s read of `name`.
fn seed_refusal(
    trace: &TraceRecord,
    node: &str,
    name: &str,
    message: &str,
    fix: String,
) -> Box<Finding> {
    let mut location = trace.place.at(trace.path(&format!("initial_state.{name}")));
    location.trace = Some(trace.id.clone());
    Box::new(Finding {
        rule: "lowering".into(),
        severity: Severity::Error,
        location,
        message: format!("node '{node}' reads '@{name}': {message}"),
        fix,
    })
}

/// How `node` reads `name` (found for every reference of a graph the lowering accepted).
fn read_of<'r>(
    trace: &TraceRecord,
    node: &str,
    name: &str,
    reads: &'r HashMap<(String, String), Read>,
) -> Result<&'r Read, Box<Finding>> {
    reads
        .get(&(node.to_owned(), name.to_owned()))
        .ok_or_else(|| {
            seed_refusal(
                trace,
                node,
                name,
                "the channel cannot be read",
                "fix the channel's declaration".into(),
            )
        })
}

/// A prompt message with its channel references resolved.
fn message(
    trace: &TraceRecord,
    node: &str,
    role: &str,
    content: &Content,
    reads: &HashMap<(String, String), Read>,
) -> Result<PromptPart, Box<Finding>> {
    let items = match content {
        Content::Text(text) => vec![Piece::Text(text.clone())],
        Content::Parts(items) => {
            let mut pieces = Vec::with_capacity(items.len());
            for item in items {
                pieces.push(match item {
                    ContentItem::Text(text) => Piece::Text(text.clone()),
                    ContentItem::Channel(name) => text_reference(trace, node, name, reads)?,
                });
            }
            pieces
        }
    };
    Ok(PromptPart::Message {
        role: role.to_owned(),
        content: items,
    })
}

/// `@name` inside content: the last producer's reply, else the trace's seed string.
fn text_reference(
    trace: &TraceRecord,
    node: &str,
    name: &str,
    reads: &HashMap<(String, String), Read>,
) -> Result<Piece, Box<Finding>> {
    let read = read_of(trace, node, name, reads)?;
    if let Some(&producer) = read.producers.last() {
        return Ok(Piece::Reply {
            channel: read.channel,
            producer,
        });
    }
    match trace.initial_state.get(name) {
        Some(Value::String(text)) => Ok(Piece::Text(text.clone())),
        Some(other) => Err(seed_refusal(trace, node, name,
            &format!("a text channel's value must be a string, got {other}"),
            format!("give initial_state.{name} a string"))),
        None => Err(seed_refusal(trace, node, name,
            &format!("trace '{}' does not seed it in initial_state and no node writes it before '{node}'", trace.id),
            format!("add \"{name}\": \"...\" to the trace's initial_state"))),
    }
}

/// `"@name"` at the top level: the seed's messages (unless an overwrite producer replaces them),
/// then the producers' replies.
fn splice(
    trace: &TraceRecord,
    node: &str,
    name: &str,
    reads: &HashMap<(String, String), Read>,
) -> Result<Vec<PromptPart>, Box<Finding>> {
    let read = read_of(trace, node, name, reads)?;
    let producers = match read.reducer {
        Reducer::AddMessages => read.producers.clone(),
        Reducer::Overwrite => read.producers.last().copied().into_iter().collect(),
    };
    let mut parts = Vec::new();
    let replaced = read.reducer == Reducer::Overwrite && !producers.is_empty();
    match trace.initial_state.get(name) {
        None if producers.is_empty() => {
            return Err(seed_refusal(trace, node, name,
                &format!("trace '{}' does not seed it in initial_state and no node writes it before '{node}'", trace.id),
                format!("add \"{name}\": [{{\"role\": \"user\", \"content\": \"...\"}}] to the trace's initial_state (or messages, for the messages channel)")));
        }
        None => {}
        Some(_) if replaced => {}
        Some(Value::Array(messages)) => {
            for (i, seed) in messages.iter().enumerate() {
                let role = seed.get("role").and_then(Value::as_str);
                let text = seed.get("content").and_then(seed_text);
                let (Some(role), Some(text)) = (role, text) else {
                    return Err(seed_refusal(trace, node, name,
                        &format!("message {i} of the seed is not {{\"role\": string, \"content\": string or list of strings}}: {seed}"),
                        format!("write initial_state.{name}[{i}] as {{\"role\": \"user\", \"content\": \"...\"}}")));
                };
                parts.push(PromptPart::Message {
                    role: role.to_owned(),
                    content: vec![Piece::Text(text)],
                });
            }
        }
        Some(other) => {
            return Err(seed_refusal(
                trace,
                node,
                name,
                &format!("a messages channel's value must be a list of messages, got {other}"),
                format!("give initial_state.{name} a list [{{\"role\": ..., \"content\": ...}}]"),
            ));
        }
    }
    if !producers.is_empty() {
        parts.push(PromptPart::Replies {
            channel: read.channel,
            producers,
        });
    }
    Ok(parts)
}
