//! The static validator of a normalised workload
//! (docs/specs/agent-graph-ir.md#82-validator-findings-validatorpy-and-scheduler-errors-schedulerpy-2a1):
//! aiperf's rules 1, 9, 11, 12, 13, 15, 21, 54, 55, 56 and 57 with its messages, locations and
//! fixes; the scheduler's refusal of mixed-anchor and multi-start-anchored fan-in (its refusals of
//! a start or first-token anchor on a `START` edge and of a first-token edge without its start
//! fallback are the same conditions as rules 54 and 55, reported once under those rules); and the
//! checks aiperf leaves to run time that a loader can make statically: a fan-in that can never
//! complete (`fan-in`: a count above the writers that can write before the node, which aiperf fails
//! with `ChannelOrphanedError` or waits on forever), a corpus whose nodes are partly timestamped
//! (`partly-timestamped`, which aiperf's open-loop replay refuses), and a `graph_ref` that names no
//! graph (`graph-ref`, a warning: the trace runs the workload's graph, as aiperf falls back). Every
//! finding is collected, not only the first.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::ir::{Count, Edge, GraphRecord, Reducer, Workload, END, START, VERSION};
use crate::error::{Finding, Severity};

/// Every finding of `workload` (normalised), errors and warnings.
pub(crate) fn check(workload: &Workload) -> Vec<Finding> {
    let graph = &workload.graph;
    let mut findings = Vec::new();
    findings.extend(rule_01_cycles(graph));
    findings.extend(rule_09_overwrite_conflict(graph));
    findings.extend(rule_11_reserved_names(graph));
    findings.extend(rule_12_version(graph));
    findings.extend(rule_13_provenance_tool(graph));
    findings.extend(rule_15_expected_cached_tokens(graph));
    findings.extend(rule_21_unreachable(graph));
    findings.extend(rule_54_edge_delay_exclusivity(graph));
    findings.extend(rule_55_first_token_anchor_shape(graph));
    findings.extend(rule_56_edge_endpoints(graph));
    findings.extend(rule_57_finite_delays(graph));
    findings.extend(scheduler_fan_in(graph));
    findings.extend(unsatisfiable_fan_in(graph));
    findings.extend(partly_timestamped(graph));
    findings.extend(graph_refs(workload));
    findings
}

fn finding(
    graph: &GraphRecord,
    rule: &str,
    severity: Severity,
    path: String,
    message: String,
    fix: String,
) -> Finding {
    Finding {
        rule: rule.into(),
        severity,
        location: graph.place.at(path),
        message,
        fix,
    }
}

fn error(graph: &GraphRecord, rule: &str, path: String, message: String, fix: String) -> Finding {
    finding(graph, rule, Severity::Error, path, message, fix)
}

/// A list of ids as Python prints a sorted list of strings: `['a', 'b']`.
fn py_list<'a>(ids: impl IntoIterator<Item = &'a str>) -> String {
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    let quoted: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Successors by source, over every static edge.
fn adjacency(graph: &GraphRecord) -> HashMap<&str, Vec<&str>> {
    let mut adj: HashMap<&str, Vec<&str>> = HashMap::new();
    for edge in &graph.edges {
        adj.entry(edge.source.as_str())
            .or_default()
            .push(edge.target.as_str());
    }
    adj
}

/// Every id reachable from `root` (itself excluded unless on a cycle).
fn reachable<'a>(adj: &HashMap<&'a str, Vec<&'a str>>, root: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<&str> = adj.get(root).into_iter().flatten().copied().collect();
    while let Some(id) = queue.pop_front() {
        if seen.insert(id) {
            queue.extend(adj.get(id).into_iter().flatten().copied());
        }
    }
    seen
}

/// rule-1: a cycle in the static edges (iterative DFS, one finding).
fn rule_01_cycles(graph: &GraphRecord) -> Option<Finding> {
    let adj = adjacency(graph);
    let mut colour: HashMap<&str, u8> = HashMap::new();
    let roots = graph.nodes.keys().map(String::as_str).chain([START]);
    for root in roots {
        if colour.contains_key(root) {
            continue;
        }
        colour.insert(root, 1);
        let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
        while let Some((id, next)) = stack.last_mut() {
            let successors = adj.get(*id).map_or(&[][..], Vec::as_slice);
            if let Some(&succ) = successors.get(*next) {
                *next += 1;
                match colour.get(succ) {
                    Some(1) => {
                        return Some(error(
                            graph,
                            "rule-1",
                            "graph.edges".into(),
                            "Graph contains a cycle in the static edges.".into(),
                            "Pre-unroll cycles in the trace topology (cycles are a future graph feature).".into(),
                        ))
                    }
                    Some(_) => {}
                    None => {
                        colour.insert(succ, 1);
                        stack.push((succ, 0));
                    }
                }
            } else {
                colour.insert(id, 2);
                stack.pop();
            }
        }
    }
    None
}

/// The writers of each channel (a node writes its `output`).
fn writers(graph: &GraphRecord) -> BTreeMap<&str, Vec<&str>> {
    let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, node) in &graph.nodes {
        out.entry(node.output.as_str())
            .or_default()
            .push(id.as_str());
    }
    out
}

/// rule-9: an overwrite channel written by more than one node.
fn rule_09_overwrite_conflict(graph: &GraphRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for (channel, nodes) in writers(graph) {
        let overwrite = graph
            .state
            .get(channel)
            .is_none_or(|spec| spec.reducer == Reducer::Overwrite);
        if nodes.len() <= 1 || !overwrite {
            continue;
        }
        out.push(error(
            graph,
            "rule-9",
            format!("graph.state.{channel}"),
            format!(
                "Channel '{channel}' has overwrite reducer but is written by multiple nodes: {}.",
                py_list(nodes)
            ),
            format!(
                "Either give '{channel}' an add_messages reducer (only valid for type=messages) or rename one of the writer outputs."
            ),
        ));
    }
    out
}

/// rule-11: a node id that is a sentinel or starts with `_aiperf`.
fn rule_11_reserved_names(graph: &GraphRecord) -> Vec<Finding> {
    graph
        .nodes
        .keys()
        .filter(|id| *id == START || *id == END || id.starts_with("_aiperf"))
        .map(|id| {
            error(
                graph,
                "rule-11",
                format!("graph.nodes.{id}"),
                format!("Node id '{id}' is reserved (matches START/END or begins with '_aiperf')."),
                "Rename the node.".into(),
            )
        })
        .collect()
}

/// rule-12: an unknown version.
fn rule_12_version(graph: &GraphRecord) -> Option<Finding> {
    (graph.version != VERSION).then(|| {
        error(
            graph,
            "rule-12",
            "graph.version".into(),
            format!(
                "Unknown major version '{}'; known: ['{VERSION}'].",
                graph.version
            ),
            format!("Set version to one of ['{VERSION}']."),
        )
    })
}

/// rule-13: an adapter-emitted graph must say its tool (empty: error; the default `manual`:
/// warning).
fn rule_13_provenance_tool(graph: &GraphRecord) -> Option<Finding> {
    let provenance = &graph.provenance;
    if provenance.source == "hand-authored" {
        return None;
    }
    let source = &provenance.source;
    match provenance.tool.trim() {
        "" => Some(error(
            graph,
            "rule-13",
            "graph.provenance.tool".into(),
            format!("provenance.source='{source}' requires a non-empty provenance.tool (origin tool plus version)."),
            "Set provenance.tool to '<tool-name>/<version>', or change source to 'hand-authored'.".into(),
        )),
        "manual" => Some(finding(
            graph,
            "rule-13",
            Severity::Warning,
            "graph.provenance.tool".into(),
            format!(
                "provenance.source='{source}' carries the default provenance.tool 'manual'; an adapter-emitted graph should stamp its generating tool plus version."
            ),
            "Have the generating adapter set provenance.tool to '<tool-name>/<version>', or change source to 'hand-authored'.".into(),
        )),
        _ => None,
    }
}

/// rule-15 (warning): predicted cache tokens not every engine reports.
fn rule_15_expected_cached_tokens(graph: &GraphRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for (id, node) in &graph.nodes {
        let Some(expected) = node.expected else {
            continue;
        };
        for (field, value) in [
            ("cache_read_tokens", expected.cache_read_tokens),
            ("cache_creation_tokens", expected.cache_creation_tokens),
        ] {
            if value.is_some() {
                out.push(finding(
                    graph,
                    "rule-15",
                    Severity::Warning,
                    format!("graph.nodes.{id}.expected.{field}"),
                    format!(
                        "Node '{id}' sets expected.{field} but not all engines report {field}; this assertion will be skipped if the engine doesn't surface that field."
                    ),
                    "Drop it unless the server reports it.".into(),
                ));
            }
        }
    }
    out
}

/// rule-21: a node not reachable from START.
fn rule_21_unreachable(graph: &GraphRecord) -> Vec<Finding> {
    let seen = reachable(&adjacency(graph), START);
    graph
        .nodes
        .keys()
        .filter(|id| !seen.contains(id.as_str()))
        .map(|id| {
            error(
                graph,
                "rule-21",
                format!("graph.nodes.{id}"),
                format!("Node '{id}' is unreachable from START."),
                format!("Add an edge `{{from: <ancestor>, to: {id}}}` or remove the node."),
            )
        })
        .collect()
}

/// rule-54: completion and start anchors on one edge; a start anchor on a START edge.
fn rule_54_edge_delay_exclusivity(graph: &GraphRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for edge in &graph.edges {
        let (source, target) = (&edge.source, &edge.target);
        if edge.delay_after_predecessor_us.is_some()
            && edge.delay_after_predecessor_start_us.is_some()
        {
            out.push(error(
                graph,
                "rule-54",
                edge.path(),
                format!("edge '{source}' -> '{target}' sets both delay_after_predecessor_us and delay_after_predecessor_start_us; they are mutually exclusive."),
                "Keep exactly one anchor: end-anchored (delay_after_predecessor_us) or start-anchored (delay_after_predecessor_start_us).".into(),
            ));
        }
        if source == START && edge.delay_after_predecessor_start_us.is_some() {
            out.push(error(
                graph,
                "rule-54",
                edge.path(),
                format!("edge '{source}' -> '{target}' is start-anchored (delay_after_predecessor_start_us), but START-sourced edges cannot be start-anchored; the START pseudo-node never dispatches, so the target would never be scheduled."),
                "Use min_start_delay_us for an absolute offset from trace start instead of delay_after_predecessor_start_us.".into(),
            ));
        }
    }
    out
}

/// rule-55: a first-token anchor needs its start fallback, excludes the completion anchor and
/// cannot leave START.
fn rule_55_first_token_anchor_shape(graph: &GraphRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for edge in graph
        .edges
        .iter()
        .filter(|e| e.delay_after_predecessor_first_token_us.is_some())
    {
        let (source, target) = (&edge.source, &edge.target);
        if edge.delay_after_predecessor_start_us.is_none() {
            out.push(error(
                graph,
                "rule-55",
                edge.path(),
                format!("edge '{source}' -> '{target}' is first-token-anchored (delay_after_predecessor_first_token_us) but sets no delay_after_predecessor_start_us; the runtime needs the start delay as the dispatch fallback when the predecessor terminates without a first token."),
                "Add delay_after_predecessor_start_us to this edge as the dispatch-anchored fallback for delay_after_predecessor_first_token_us.".into(),
            ));
        }
        if edge.delay_after_predecessor_us.is_some() {
            out.push(error(
                graph,
                "rule-55",
                edge.path(),
                format!("edge '{source}' -> '{target}' sets both delay_after_predecessor_us and delay_after_predecessor_first_token_us; the completion anchor and the first-token anchor are mutually exclusive."),
                "Drop delay_after_predecessor_us and keep delay_after_predecessor_first_token_us with its delay_after_predecessor_start_us fallback.".into(),
            ));
        }
        if source == START {
            out.push(error(
                graph,
                "rule-55",
                edge.path(),
                format!("edge '{source}' -> '{target}' is first-token-anchored (delay_after_predecessor_first_token_us), but START-sourced edges cannot be first-token-anchored; the START pseudo-node never dispatches or streams a first token."),
                "Use min_start_delay_us for an absolute offset from trace start instead of delay_after_predecessor_first_token_us.".into(),
            ));
        }
    }
    out
}

/// rule-56: an edge endpoint that is neither a declared node nor the matching sentinel.
fn rule_56_edge_endpoints(graph: &GraphRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for edge in &graph.edges {
        if edge.source != START && !graph.nodes.contains_key(&edge.source) {
            out.push(error(
                graph,
                "rule-56",
                edge.path(),
                format!("edge source '{}' is neither a declared node nor the START sentinel.", edge.source),
                "Declare the node in graph.nodes or fix the edge source (only 'START' is a valid non-node source).".into(),
            ));
        }
        if edge.target != END && !graph.nodes.contains_key(&edge.target) {
            out.push(error(
                graph,
                "rule-56",
                edge.path(),
                format!("edge target '{}' is neither a declared node nor the END sentinel.", edge.target),
                "Declare the node in graph.nodes or fix the edge target (only 'END' is a valid non-node target).".into(),
            ));
        }
    }
    out
}

/// The delays of an edge, by field name.
fn delays(edge: &Edge) -> [(&'static str, Option<f64>); 4] {
    [
        (
            "delay_after_predecessor_us",
            edge.delay_after_predecessor_us,
        ),
        ("min_start_delay_us", edge.min_start_delay_us),
        (
            "delay_after_predecessor_start_us",
            edge.delay_after_predecessor_start_us,
        ),
        (
            "delay_after_predecessor_first_token_us",
            edge.delay_after_predecessor_first_token_us,
        ),
    ]
}

/// Python's repr of a non-finite float.
fn py_float(value: f64) -> String {
    match value {
        v if v.is_nan() => "nan".into(),
        v if v > 0.0 => "inf".into(),
        _ => "-inf".into(),
    }
}

/// rule-57: a non-finite delay (the decoder refuses them in a file; this catches a graph built in
/// code).
fn rule_57_finite_delays(graph: &GraphRecord) -> Vec<Finding> {
    let mut out = Vec::new();
    for edge in &graph.edges {
        for (field, value) in delays(edge) {
            let Some(value) = value.filter(|v| !v.is_finite()) else {
                continue;
            };
            out.push(error(
                graph,
                "rule-57",
                format!("{}.{field}", edge.path()),
                format!(
                    "edge '{}' -> '{}' sets {field}={}; delay values must be finite (a non-finite gate never clears and hangs the trace).",
                    edge.source, edge.target, py_float(value)
                ),
                format!("Set {field} to a finite microsecond value or drop it."),
            ));
        }
    }
    for (id, node) in &graph.nodes {
        if let Some(value) = node.min_start_delay_us.filter(|v| !v.is_finite()) {
            out.push(error(
                graph,
                "rule-57",
                format!("graph.nodes.{id}.min_start_delay_us"),
                format!(
                    "node '{id}' sets min_start_delay_us={}; delay values must be finite (a non-finite gate never clears and hangs the trace).",
                    py_float(value)
                ),
                "Set min_start_delay_us to a finite microsecond value or drop it.".into(),
            ));
        }
    }
    out
}

/// The scheduler's refusal: a start-anchored in-edge that is not its target's only in-edge.
fn scheduler_fan_in(graph: &GraphRecord) -> Vec<Finding> {
    let mut by_target: BTreeMap<&str, Vec<&Edge>> = BTreeMap::new();
    for edge in &graph.edges {
        by_target
            .entry(edge.target.as_str())
            .or_default()
            .push(edge);
    }
    let mut out = Vec::new();
    for (target, edges) in by_target {
        let (start, completion): (Vec<&Edge>, Vec<&Edge>) = edges
            .iter()
            .partition(|e| e.delay_after_predecessor_start_us.is_some());
        if start.is_empty() || edges.len() == 1 {
            continue;
        }
        let (shape, detail) = match completion.first() {
            Some(other) => (
                "mixed-anchor fan-in",
                format!(
                    "start-anchored edge '{}' -> '{target}' (delay_after_predecessor_start_us) and completion edge '{}' -> '{target}' arrive at the same node",
                    start[0].source, other.source
                ),
            ),
            None => (
                "multi-start-anchored fan-in",
                format!(
                    "start-anchored edges '{}' -> '{target}' and '{}' -> '{target}' (delay_after_predecessor_start_us) arrive at the same node",
                    start[0].source, start[1].source
                ),
            ),
        };
        out.push(error(
            graph,
            "scheduler",
            format!("graph.nodes.{target}"),
            format!(
                "node '{target}': {shape} is unsupported: {detail}. The runtime schedules a start-anchored target at its anchor parent's DISPATCH, so the node would fire without waiting for its other predecessor and then be re-scheduled into the cycle guard when that predecessor finishes or dispatches. A start-anchored in-edge must be its target's ONLY in-edge."
            ),
            "Keep the start-anchored edge as the node's only in-edge: drop the others, or anchor every in-edge on completion (delay_after_predecessor_us).".into(),
        ));
    }
    out
}

/// A fan-in whose count can never be reached: more writes than nodes write the channel (aiperf's
/// `ChannelOrphanedError` at run time), or than can write before the node (the rest are the node
/// itself or run after it, so it waits forever). A count of `all` on a channel no node writes is
/// satisfied at once (a warning).
fn unsatisfiable_fan_in(graph: &GraphRecord) -> Vec<Finding> {
    let adj = adjacency(graph);
    let all_writers = writers(graph);
    let mut out = Vec::new();
    for (id, node) in &graph.nodes {
        if node.inputs.is_empty() {
            continue;
        }
        let downstream = reachable(&adj, id.as_str());
        for (i, requirement) in node.inputs.iter().enumerate() {
            let channel = requirement.channel.as_str();
            let path = format!("graph.nodes.{id}.inputs[{i}]");
            let writers = all_writers.get(channel).cloned().unwrap_or_default();
            let needed = match requirement.count {
                Count::Writes(n) => n as usize,
                Count::All => writers.len(),
            };
            let shown = match requirement.count {
                Count::Writes(n) => n.to_string(),
                Count::All => format!("all ({})", writers.len()),
            };
            if writers.is_empty() && requirement.count == Count::All {
                out.push(finding(graph, "fan-in", Severity::Warning, path,
                    format!("node '{id}' waits for count=all writes to channel '{channel}', which no node writes: the requirement is met at once"),
                    format!("name a channel some node writes, or drop the requirement on '{channel}'")));
                continue;
            }
            if needed > writers.len() {
                out.push(error(graph, "fan-in", path,
                    format!("node '{id}' waits for count={shown} writes to channel '{channel}', but only {} node(s) write it ({}): it can never fire (aiperf fails it at run time: ChannelOrphanedError: channel '{channel}' cannot reach count={needed}: only {} arrivals possible)",
                        writers.len(), py_list(writers.iter().copied()), writers.len()),
                    format!("lower the count to at most {}, use count: \"all\", or add a node whose output is '{channel}'", writers.len())));
                continue;
            }
            let late: Vec<&str> = writers
                .iter()
                .copied()
                .filter(|w| *w == id.as_str() || downstream.contains(w))
                .collect();
            if needed > writers.len() - late.len() {
                out.push(error(graph, "fan-in", path,
                    format!("node '{id}' waits for count={shown} writes to channel '{channel}', but of its writers {} only {} can write before it: {} is the node itself or runs after it, so the node waits forever",
                        py_list(writers.iter().copied()), writers.len() - late.len(), py_list(late.iter().copied())),
                    format!("lower the count to at most {}, or make every writer of '{channel}' run before '{id}'", writers.len() - late.len())));
            }
        }
    }
    out
}

/// A corpus whose nodes are partly timestamped: some carry a recorded start and some do not.
fn partly_timestamped(graph: &GraphRecord) -> Option<Finding> {
    let stamped = |node: &super::ir::LlmNode| {
        node.arrival_offset_us.is_some() || node.recorded_start_unix_ms.is_some()
    };
    let with = graph.nodes.iter().find(|(_, n)| stamped(n))?;
    let (without, _) = graph.nodes.iter().find(|(_, n)| !stamped(n))?;
    let count = graph.nodes.values().filter(|n| stamped(n)).count();
    Some(error(
        graph,
        "partly-timestamped",
        format!("graph.nodes.{without}"),
        format!(
            "{count} of {} nodes carry a recorded start (arrival_offset_us or recorded_start_unix_ms; e.g. '{}') but '{without}' does not: a partly timestamped corpus cannot be replayed in recorded time (aiperf's open-loop replay refuses to start on it)",
            graph.nodes.len(),
            with.0
        ),
        "give every node its recorded start, or drop them all (the replay then follows the edge delays)".into(),
    ))
}

/// Traces whose `graph_ref` names no graph: a native workload has one graph, which they run.
fn graph_refs(workload: &Workload) -> Vec<Finding> {
    workload
        .traces
        .iter()
        .filter_map(|trace| {
            let name = trace.graph_ref.as_ref()?;
            Some(Finding {
                rule: "graph-ref".into(),
                severity: Severity::Warning,
                location: trace.place.at(trace.path("graph_ref")),
                message: format!(
                    "trace '{}' names graph_ref '{name}', but a native workload has one graph and no graphs by key: the trace runs the workload's graph, as aiperf falls back",
                    trace.id
                ),
                fix: "drop graph_ref".into(),
            })
        })
        .collect()
}
