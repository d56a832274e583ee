//! What aiperf's parser does to a workload after decoding it
//! (docs/specs/agent-graph-ir.md#1-file-layout,
//! docs/specs/agent-graph-ir.md#4-channels-and-reducers-modelspychannelspec-channeltype-reducername),
//! in its order: the linear-chat shorthand (a graph with no nodes becomes node `_llm` with prompt
//! `[system?, "@messages"]`, output `messages`, edges `START -> _llm -> END`), START/END injection
//! (no edge from `START`: `START -> n` for every node that no edge targets; no edge to `END`: `n ->
//! END` for every node that is no edge's source), `trace.messages` moved into
//! `initial_state.messages`, and channel auto-derivation (a channel that is read or written but not
//! declared gets a spec).
//!
//! aiperf builds the linear chat inside auto-derivation, after injection; here it comes first,
//! which gives the same graph: a graph without nodes gets no injected edges, and the shorthand
//! declares its own.

use std::collections::BTreeMap;

use serde_json::Value;

use super::ir::{
    ChannelSpec, ChannelType, Content, ContentItem, Edge, LlmNode, PromptItem, Reducer, Workload,
    END, LINEAR_CHAT_NODE, MESSAGES_CHANNEL, START,
};
use crate::error::{Finding, Severity};

/// Normalises `workload` in place; returns the warnings of what it dropped.
pub(crate) fn normalise(workload: &mut Workload) -> Vec<Finding> {
    linear_chat(workload);
    inject_start_end(workload);
    let warnings = move_trace_messages(workload);
    derive_channels(workload);
    warnings
}

/// A graph with no nodes becomes the linear chat.
fn linear_chat(workload: &mut Workload) {
    let graph = &mut workload.graph;
    if !graph.nodes.is_empty() {
        return;
    }
    let mut prompt = Vec::new();
    if let Some(system) = &graph.system {
        prompt.push(PromptItem::Message {
            role: "system".into(),
            content: Content::Text(system.clone()),
        });
    }
    prompt.push(PromptItem::Splice(MESSAGES_CHANNEL.into()));
    graph.nodes.insert(
        LINEAR_CHAT_NODE.into(),
        LlmNode {
            prompt,
            output: MESSAGES_CHANNEL.into(),
            streaming: true,
            ..LlmNode::default()
        },
    );
    for (source, target) in [(START, LINEAR_CHAT_NODE), (LINEAR_CHAT_NODE, END)] {
        graph.edges.push(Edge {
            source: source.into(),
            target: target.into(),
            injected: true,
            ..Edge::default()
        });
    }
}

/// aiperf's `_auto_inject_start_end`.
fn inject_start_end(workload: &mut Workload) {
    let graph = &mut workload.graph;
    let edge = |source: &str, target: &str| Edge {
        source: source.into(),
        target: target.into(),
        injected: true,
        ..Edge::default()
    };
    let mut added = Vec::new();
    if !graph.edges.iter().any(|e| e.source == START) {
        for id in graph.nodes.keys() {
            if !graph.edges.iter().any(|e| &e.target == id) {
                added.push(edge(START, id));
            }
        }
    }
    if !graph.edges.iter().any(|e| e.target == END) {
        for id in graph.nodes.keys() {
            if !graph.edges.iter().any(|e| &e.source == id) {
                added.push(edge(id, END));
            }
        }
    }
    graph.edges.extend(added);
}

/// `trace.messages` into `initial_state.messages`, unless that is set (a warning then).
fn move_trace_messages(workload: &mut Workload) -> Vec<Finding> {
    let mut warnings = Vec::new();
    for trace in &mut workload.traces {
        let Some(messages) = trace.messages.take() else {
            continue;
        };
        if trace.initial_state.contains_key(MESSAGES_CHANNEL) {
            warnings.push(Finding {
                rule: "trace-messages".into(),
                severity: Severity::Warning,
                location: trace.place.at(trace.path("messages")),
                message: format!(
                    "trace '{}' sets both messages and initial_state.messages; messages is ignored, as aiperf ignores it",
                    trace.id
                ),
                fix: "keep one of them".into(),
            });
            continue;
        }
        trace
            .initial_state
            .insert(MESSAGES_CHANNEL.into(), Value::Array(messages));
    }
    warnings
}

/// The spec a channel gets from its name alone.
fn by_name(name: &str) -> ChannelSpec {
    if name == MESSAGES_CHANNEL {
        ChannelSpec {
            kind: ChannelType::Messages,
            reducer: Reducer::AddMessages,
        }
    } else {
        ChannelSpec {
            kind: ChannelType::Text,
            reducer: Reducer::Overwrite,
        }
    }
}

/// Declares every channel that is used but not declared: a prompt-level `@x` is
/// messages/add_messages, an `@x` inside content text/overwrite, any other (an output, an
/// initial_state or replay_outputs key, an input's channel) by its name: `messages` is
/// messages/add_messages, the rest text/overwrite.
fn derive_channels(workload: &mut Workload) {
    let mut derived: BTreeMap<String, ChannelSpec> = BTreeMap::new();
    let mut offer = |name: &str, spec: ChannelSpec| {
        derived.entry(name.to_owned()).or_insert(spec);
    };
    let messages = by_name(MESSAGES_CHANNEL);
    let text = ChannelSpec {
        kind: ChannelType::Text,
        reducer: Reducer::Overwrite,
    };
    for node in workload.graph.nodes.values() {
        for item in &node.prompt {
            match item {
                PromptItem::Splice(name) => offer(name, messages),
                PromptItem::Message {
                    content: Content::Parts(parts),
                    ..
                } => {
                    for part in parts {
                        if let ContentItem::Channel(name) = part {
                            offer(name, text);
                        }
                    }
                }
                PromptItem::Message { .. } => {}
            }
        }
    }
    let named = workload
        .graph
        .nodes
        .values()
        .flat_map(|node| {
            std::iter::once(node.output.as_str())
                .chain(node.inputs.iter().map(|r| r.channel.as_str()))
        })
        .chain(
            workload
                .traces
                .iter()
                .flat_map(|t| t.initial_state.keys().map(String::as_str)),
        )
        .chain(workload.traces.iter().flat_map(|t| {
            t.replay_outputs
                .values()
                .flat_map(|writes| writes.keys().map(String::as_str))
        }))
        .map(str::to_owned)
        .collect::<Vec<_>>();
    for name in named {
        offer(&name, by_name(&name));
    }
    for (name, spec) in derived {
        workload.graph.state.entry(name).or_insert(spec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph_ir::ir::{GraphRecord, TraceRecord};

    fn node(output: &str, prompt: Vec<PromptItem>) -> LlmNode {
        LlmNode {
            output: output.into(),
            prompt,
            streaming: true,
            ..LlmNode::default()
        }
    }

    #[test]
    fn a_graph_without_nodes_becomes_the_linear_chat() {
        let mut workload = Workload {
            graph: GraphRecord {
                system: Some("be brief".into()),
                ..GraphRecord::default()
            },
            traces: vec![TraceRecord {
                id: "t".into(),
                messages: Some(vec![serde_json::json!({"role": "user", "content": "hi"})]),
                ..TraceRecord::default()
            }],
            ..Workload::default()
        };
        assert!(normalise(&mut workload).is_empty());
        let chat = &workload.graph.nodes[LINEAR_CHAT_NODE];
        assert_eq!(chat.output, MESSAGES_CHANNEL);
        assert_eq!(chat.prompt.len(), 2);
        assert_eq!(chat.prompt[1], PromptItem::Splice(MESSAGES_CHANNEL.into()));
        let edges: Vec<_> = workload
            .graph
            .edges
            .iter()
            .map(|e| (e.source.as_str(), e.target.as_str()))
            .collect();
        assert_eq!(edges, [(START, LINEAR_CHAT_NODE), (LINEAR_CHAT_NODE, END)]);
        assert_eq!(
            workload.graph.state[MESSAGES_CHANNEL],
            by_name(MESSAGES_CHANNEL)
        );
        assert!(workload.traces[0].messages.is_none());
        assert!(workload.traces[0]
            .initial_state
            .contains_key(MESSAGES_CHANNEL));
    }

    #[test]
    fn start_and_end_are_injected_only_where_no_edge_names_them() {
        let mut workload = Workload::default();
        let prompt = vec![PromptItem::Message {
            role: "user".into(),
            content: Content::Parts(vec![
                ContentItem::Text("x".into()),
                ContentItem::Channel("task".into()),
            ]),
        }];
        for id in ["a", "b", "c"] {
            workload
                .graph
                .nodes
                .insert(id.into(), node(&format!("{id}_out"), prompt.clone()));
        }
        workload.graph.edges.push(Edge {
            source: "a".into(),
            target: "b".into(),
            ..Edge::default()
        });
        normalise(&mut workload);
        let injected: Vec<_> = workload
            .graph
            .edges
            .iter()
            .filter(|e| e.injected)
            .map(|e| (e.source.as_str(), e.target.as_str()))
            .collect();
        assert_eq!(
            injected,
            [(START, "a"), (START, "c"), ("b", END), ("c", END)]
        );
        assert_eq!(workload.graph.state["task"].reducer, Reducer::Overwrite);
        assert_eq!(workload.graph.state["a_out"].kind, ChannelType::Text);

        // A declared START edge stops START injection.
        let mut declared = workload.clone();
        declared.graph.edges.retain(|e| !e.injected);
        declared.graph.edges.push(Edge {
            source: START.into(),
            target: "a".into(),
            ..Edge::default()
        });
        normalise(&mut declared);
        assert!(!declared
            .graph
            .edges
            .iter()
            .any(|e| e.injected && e.source == START));
    }

    #[test]
    fn trace_messages_give_way_to_initial_state_with_a_warning() {
        let mut workload = Workload {
            traces: vec![TraceRecord {
                id: "t".into(),
                messages: Some(vec![]),
                initial_state: [(MESSAGES_CHANNEL.to_owned(), serde_json::json!([]))].into(),
                ..TraceRecord::default()
            }],
            ..Workload::default()
        };
        let warnings = normalise(&mut workload);
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].rule, "trace-messages");
        assert_eq!(
            warnings[0].location.field.as_deref(),
            Some("traces[0].messages")
        );
    }
}
