//! A Dynamo request [`Graph`] as weka-shaped [`ParsedTrace`]s: one trace per root session (a session
//! that no request of another session spawned), its child sessions nested as subagent entries whose
//! spawn and join are the graph's edges, so the session-tree builder replays them.
//!
//! What the tree model expresses, and how the graph maps onto it:
//! - A session is one stream whose requests run one after another: each request but the first must
//!   wait for the one before it in its session (Dynamo's sequence edge).
//! - A child session's first request waits for exactly one request of another session, the spawn; the
//!   child's entry is placed right after that request, so the tree spawns it there. Its marker is the
//!   spawning request's end (the child then starts its recorded gap after the request returns, as
//!   Dynamo dispatches it), or the child's start when that is earlier (the child ran while the
//!   request was in flight: replayed from the request's issue, with a warning).
//! - A request of the parent that waits for a request of a child session is the child's join
//!   (`SubagentJoin::At`); a child nobody waits for runs in the background (`SubagentJoin::Background`).
//!   The tree joins on the child's whole session: a wait on a request before its last is warned.
//! - Everything else is refused, naming file:line: a request that does not wait for its session's
//!   previous one, a first request that waits for two sessions, a wait on a session that is not a
//!   child of the waiting session, and a grandchild (the tree nests one level: the session ids and
//!   the line are named, nothing is flattened). A request-trace session whose declared parent spawned
//!   none of its requests (it starts before all of them) is a trace of its own, with a warning, and
//!   refused when the parent still waits for it.
//!
//! Each request keeps its recorded start on the root clock (`t`), its recorded time as `api_time`
//! (request traces) and its gap after its dependencies as `think_time`.

use std::collections::HashMap;

use super::{invalid, Graph, Node};
use crate::error::{DatasetError, Location};
use crate::warnings::{Warning, WarningKind};
use crate::weka::{ParsedRequest, ParsedSubagent, ParsedTrace, RequestKind, SubagentJoin};

/// A child session placed under its root.
#[derive(Debug, Clone, Copy)]
struct Child {
    session: usize,
    /// The node that spawns it and the one that joins it.
    spawn: usize,
    join: Option<usize>,
}

/// Who is whose parent, and where each child spawns and joins.
#[derive(Debug, Default)]
struct Topology {
    /// Per session: the node of another session its first request waits for.
    spawn: Vec<Option<usize>>,
    /// Per session: the earliest node of its parent that waits for it.
    join: Vec<Option<usize>>,
}

/// The traces of a graph, root sessions in the order of their first request.
pub(super) fn traces(mut graph: Graph) -> Result<Vec<ParsedTrace>, DatasetError> {
    check_sequences(&graph)?;
    let topology = topology(&mut graph)?;
    let parent = |s: usize| topology.spawn[s].map(|n| graph.nodes[n].session);
    let mut roots: Vec<usize> = (0..graph.sessions.len())
        .filter(|&s| parent(s).is_none())
        .collect();
    roots.sort_by_key(|&s| graph.sessions[s].nodes[0]);
    let mut root_of: Vec<usize> = (0..graph.sessions.len()).collect();
    let mut children: HashMap<usize, Vec<Child>> = HashMap::new();
    for (s, root) in root_of.iter_mut().enumerate() {
        if let (Some(p), Some(spawn)) = (parent(s), topology.spawn[s]) {
            *root = p;
            children.entry(p).or_default().push(Child {
                session: s,
                spawn,
                join: topology.join[s],
            });
        }
    }
    let mut traces = Vec::with_capacity(roots.len());
    let mut trace_of: HashMap<usize, usize> = HashMap::new();
    for &root in &roots {
        trace_of.insert(root, traces.len());
        let kids = children.remove(&root).unwrap_or_default();
        traces.push(root_trace(&mut graph, root, kids)?);
    }
    let by_id: HashMap<&str, usize> = graph
        .sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    for (session, warning) in std::mem::take(&mut graph.warnings) {
        let slot = session
            .and_then(|id| by_id.get(id.as_str()).copied())
            .and_then(|s| trace_of.get(&root_of[s]).copied())
            .unwrap_or(0);
        if let Some(trace) = traces.get_mut(slot) {
            trace.warnings.push(warning);
        }
    }
    Ok(traces)
}

/// Each request but a session's first waits for the one before it.
fn check_sequences(graph: &Graph) -> Result<(), DatasetError> {
    for session in &graph.sessions {
        for pair in session.nodes.windows(2) {
            let (prev, node) = (&graph.nodes[pair[0]], &graph.nodes[pair[1]]);
            if !node.wait_for.contains(&pair[0]) {
                return Err(invalid(
                    &graph.path,
                    node.line,
                    "",
                    format!(
                        "request {:?} of session {:?} does not wait for the session's previous request \
                         {:?} (line {}): the session-tree replay plays a session's requests one after \
                         another; add the dependency, or give the request a session of its own",
                        node.id, session.id, prev.id, prev.line
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Parents from each session's first request, joins from the other requests' waits, refusing what
/// the tree cannot express.
fn topology(graph: &mut Graph) -> Result<Topology, DatasetError> {
    let n = graph.sessions.len();
    let mut topology = Topology {
        spawn: vec![None; n],
        join: vec![None; n],
    };
    for s in 0..n {
        let first = &graph.nodes[graph.sessions[s].nodes[0]];
        let cross: Vec<usize> = first
            .wait_for
            .iter()
            .copied()
            .filter(|&d| graph.nodes[d].session != s)
            .collect();
        match cross.as_slice() {
            [] => {}
            [one] => topology.spawn[s] = Some(*one),
            [a, b, ..] => {
                return Err(invalid(
                    &graph.path,
                    first.line,
                    "",
                    format!(
                        "request {:?}, the first of session {:?}, waits for requests of two other \
                         sessions ({:?} of {:?} and {:?} of {:?}): the session-tree replay starts a \
                         session from one request of its parent; keep one of the dependencies",
                        first.id,
                        graph.sessions[s].id,
                        graph.nodes[*a].id,
                        graph.sessions[graph.nodes[*a].session].id,
                        graph.nodes[*b].id,
                        graph.sessions[graph.nodes[*b].session].id
                    ),
                ))
            }
        }
    }
    check_depth(graph, &topology)?;
    lift_unspawned(graph, &topology);
    for s in 0..n {
        let nodes = graph.sessions[s].nodes.clone();
        for &node in &nodes[1..] {
            for d in graph.nodes[node].wait_for.clone() {
                let child = graph.nodes[d].session;
                if child != s {
                    join(graph, &mut topology, s, node, d)?;
                }
            }
        }
    }
    Ok(topology)
}

/// A session whose parent is itself a child is refused, naming the three sessions.
fn check_depth(graph: &Graph, topology: &Topology) -> Result<(), DatasetError> {
    let parent = |s: usize| topology.spawn[s].map(|n| graph.nodes[n].session);
    for s in 0..graph.sessions.len() {
        let (Some(p), Some(grand)) = (parent(s), parent(s).and_then(parent)) else {
            continue;
        };
        let first = &graph.nodes[graph.sessions[s].nodes[0]];
        return Err(invalid(
            &graph.path,
            first.line,
            "",
            format!(
                "session {:?} (request {:?}) is a subagent of {:?}, itself a subagent of {:?}: the \
                 session-tree replay nests subagents one level deep and cannot replay a grandchild \
                 session; replay the deeper sessions from a corpus of their own, or drop the \
                 grandchild sessions",
                graph.sessions[s].id, first.id, graph.sessions[p].id, graph.sessions[grand].id
            ),
        ));
    }
    Ok(())
}

/// Warns about each request-trace session whose declared parent is in the trace but spawned none of
/// its requests: it is replayed as a trace of its own.
fn lift_unspawned(graph: &mut Graph, topology: &Topology) {
    for s in 0..graph.sessions.len() {
        let Some(parent) = graph.sessions[s].declared_parent.clone() else {
            continue;
        };
        if topology.spawn[s].is_some() || !graph.sessions.iter().any(|p| p.id == parent) {
            continue;
        }
        let first = &graph.nodes[graph.sessions[s].nodes[0]];
        let (id, line, session) = (first.id.clone(), first.line, graph.sessions[s].id.clone());
        graph.warn(
            WarningKind::InexactEdge,
            Some(&session),
            line,
            "agent_context.parent_session_id",
            format!(
                "session {session:?} (first request {id:?}) starts before every request of its parent \
                 session {parent:?}, so no request spawned it; it is replayed as a trace of its own"
            ),
        );
    }
}

/// Request `node` of session `s` waits for request `d` of another session: the join of `d`'s
/// session, which must be a child of `s`.
fn join(
    graph: &mut Graph,
    topology: &mut Topology,
    s: usize,
    node: usize,
    d: usize,
) -> Result<(), DatasetError> {
    let child = graph.nodes[d].session;
    let parent = topology.spawn[child].map(|n| graph.nodes[n].session);
    if parent != Some(s) {
        let unspawned =
            graph.sessions[child].declared_parent.as_deref() == Some(graph.sessions[s].id.as_str());
        let why = if unspawned {
            format!(
                "session {:?} starts before every request of {:?}, so no request spawned it, yet this \
                 request waits for it; the session-tree replay joins only a child it spawned",
                graph.sessions[child].id, graph.sessions[s].id
            )
        } else {
            format!(
                "session {:?} is not a subagent session of {:?}; the session-tree replay lets a \
                 request wait only for its own session and its subagents",
                graph.sessions[child].id, graph.sessions[s].id
            )
        };
        let node = &graph.nodes[node];
        return Err(invalid(
            &graph.path,
            node.line,
            "",
            format!(
                "request {:?} of session {:?} waits for request {:?}: {why}",
                node.id, graph.sessions[s].id, graph.nodes[d].id
            ),
        ));
    }
    let last = *graph.sessions[child]
        .nodes
        .last()
        .expect("a session has a request");
    if d != last {
        let (id, line) = (graph.nodes[node].id.clone(), graph.nodes[node].line);
        let (dep, child_id) = (graph.nodes[d].id.clone(), graph.sessions[child].id.clone());
        let session = graph.sessions[s].id.clone();
        graph.warn(
            WarningKind::InexactEdge,
            Some(&session),
            line,
            "",
            format!(
                "request {id:?} waits for request {dep:?}, which is not the last of its session \
                 {child_id:?}: the session-tree replay waits for the whole session"
            ),
        );
    }
    let earlier = topology.join[child].is_none_or(|j| j > node);
    if earlier {
        topology.join[child] = Some(node);
    }
    Ok(())
}

/// One request as a weka request on the clock starting at `origin` (ms).
fn request(node: &Node, index: u32, origin: f64, next_after_tool: bool) -> ParsedRequest {
    let api = node
        .timed
        .then(|| ((node.end_ms - node.start_ms) / 1000.0).max(0.0));
    let think = node.gap_ms.map(|g| g / 1000.0);
    ParsedRequest {
        index,
        t: (node.start_ms - origin) / 1000.0,
        kind: RequestKind::Normal,
        model: node.model.clone(),
        input: node.input,
        output: node.output,
        no_output_limit: false,
        hash_ids: node.hash_ids.clone(),
        input_types: vec![if node.after_tool {
            "tool_result"
        } else {
            "text"
        }
        .into()],
        output_types: vec!["text".into()],
        stop: if next_after_tool {
            "tool_use"
        } else {
            "end_turn"
        }
        .into(),
        api_time: api,
        think_time: think,
        ttft: None,
        recorded_api_time: api,
        recorded_think_time: think,
    }
}

/// The requests of session `s` on the clock starting at `origin`, with `index(k)` for the k-th.
fn session_requests(
    graph: &Graph,
    s: usize,
    origin: f64,
    index: impl Fn(usize) -> u32,
) -> Vec<ParsedRequest> {
    let nodes = &graph.sessions[s].nodes;
    nodes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let next_after_tool = nodes.get(k + 1).is_some_and(|&m| graph.nodes[m].after_tool);
            request(&graph.nodes[n], index(k), origin, next_after_tool)
        })
        .collect()
}

/// The trace of root session `root` with its children nested after their spawning requests.
fn root_trace(
    graph: &mut Graph,
    root: usize,
    mut kids: Vec<Child>,
) -> Result<ParsedTrace, DatasetError> {
    let nodes = graph.sessions[root].nodes.clone();
    let first = &graph.nodes[nodes[0]];
    let (origin, line) = (first.start_ms, first.line);
    kids.sort_by(|a, b| {
        let start = |c: &Child| graph.nodes[graph.sessions[c.session].nodes[0]].start_ms;
        start(a).total_cmp(&start(b)).then_with(|| {
            graph.sessions[a.session]
                .id
                .cmp(&graph.sessions[b.session].id)
        })
    });
    // Outer indices: each request, then the children it spawns.
    let mut outer_of_node: HashMap<usize, u32> = HashMap::new();
    let mut outer_of_kid: Vec<u32> = vec![0; kids.len()];
    let mut next = 0u32;
    for &n in &nodes {
        outer_of_node.insert(n, next);
        next += 1;
        for (i, _) in kids.iter().enumerate().filter(|(_, k)| k.spawn == n) {
            outer_of_kid[i] = next;
            next += 1;
        }
    }
    let requests = session_requests(graph, root, origin, |k| outer_of_node[&nodes[k]]);
    let mut entries = Vec::with_capacity(kids.len());
    for (kid, &outer) in kids.iter().zip(&outer_of_kid) {
        entries.push(entry(graph, kid, outer, origin, &outer_of_node)?);
    }
    entries.sort_by_key(|e| e.index);
    let mut models: Vec<String> = Vec::new();
    let all = requests
        .iter()
        .chain(entries.iter().flat_map(|e| e.requests.iter()));
    for r in all {
        if !r.model.is_empty() && !models.contains(&r.model) {
            models.push(r.model.clone());
        }
    }
    let subagent_peak = entries
        .iter()
        .flat_map(|e| e.requests.iter())
        .map(|r| u64::from(r.input) + u64::from(r.output.max(1)))
        .max()
        .unwrap_or(0);
    Ok(ParsedTrace {
        id: graph.sessions[root].id.clone(),
        models,
        block_size: graph.block_size,
        tool_tokens: 0,
        system_tokens: 0,
        requests,
        subagents: entries.len() as u32,
        subagent_peak,
        subagent_entries: entries,
        location: Location {
            file: graph.path.clone(),
            line,
            ..Location::default()
        },
        warnings: Vec::<Warning>::new(),
        explicit_sessions: true,
    })
}

/// A child session as a subagent entry at outer index `outer`.
fn entry(
    graph: &mut Graph,
    kid: &Child,
    outer: u32,
    origin: f64,
    outer_of_node: &HashMap<usize, u32>,
) -> Result<ParsedSubagent, DatasetError> {
    let session = graph.sessions[kid.session].id.clone();
    let nodes = graph.sessions[kid.session].nodes.clone();
    let (first, spawn) = (&graph.nodes[nodes[0]], &graph.nodes[kid.spawn]);
    let marker = first.start_ms.min(spawn.end_ms);
    if marker < origin {
        return Err(invalid(
            &graph.path,
            first.line,
            "",
            format!(
                "session {session:?} starts at {} ms, before its root session's first request: the \
                 session-tree replay cannot place it on the root's clock; check the capture's clocks",
                first.start_ms
            ),
        ));
    }
    if first.start_ms < spawn.end_ms && spawn.timed {
        let message = format!(
            "session {session:?} starts {} ms before its spawning request {:?} (line {}) ends: it is \
             replayed from that request's issue with its recorded offset, where Dynamo's lowering \
             waits for the request to complete",
            spawn.end_ms - first.start_ms,
            spawn.id,
            spawn.line
        );
        let line = first.line;
        graph.warn(WarningKind::InexactEdge, Some(&session), line, "", message);
    }
    let end = nodes
        .iter()
        .map(|&n| graph.nodes[n].end_ms)
        .fold(marker, f64::max);
    Ok(ParsedSubagent {
        index: outer,
        t: (marker - origin) / 1000.0,
        agent_id: Some(session),
        duration_ms: Some(end - marker),
        tool_tokens: 0,
        system_tokens: 0,
        requests: session_requests(graph, kid.session, origin, |k| k as u32),
        join: match kid.join {
            Some(node) => SubagentJoin::At(outer_of_node[&node]),
            None => SubagentJoin::Background,
        },
    })
}
