//! The graph IR loader on the fixtures: the public sample, the worked example, the two-trace
//! fixture, every invalid case of the spec's table, and the normalisation, lowering and stats
//! rules.

use std::path::{Path, PathBuf};

use super::ir::{ChannelType, Count, Reducer};
use super::*;
use crate::error::{DatasetError, Severity};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures"))
}

fn load_fixture(name: &str) -> GraphCorpus {
    load(&fixtures().join("graph-ir").join(name), false).unwrap()
}

fn node<'g>(graph: &'g Graph, id: &str) -> (NodeIndex, &'g Node) {
    let i = graph.nodes.iter().position(|n| n.id == id).unwrap();
    (NodeIndex(i as u32), &graph.nodes[i])
}

fn channel(graph: &Graph, name: &str) -> ChannelIndex {
    ChannelIndex(graph.channels.iter().position(|c| c.name == name).unwrap() as u32)
}

fn text(s: &str) -> Piece {
    Piece::Text(s.into())
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn the_public_sample_gets_start_end_and_its_channels() {
    let corpus = load_fixture("agentic-doc-minimal.jsonl");
    let graph = &corpus.graphs()[0];
    assert_eq!(graph.edges, 2, "START -> ask -> END injected");
    let (ask, node) = node(graph, "ask");
    assert_eq!(graph.entries, [ask]);
    assert_eq!(
        node.in_edges[0].anchor,
        Anchor::Start {
            min_start_delay_us: 0.0
        }
    );
    assert!(node.request.streaming && node.request.max_tokens.is_none());
    for name in ["answer", "question"] {
        let spec = graph.channel(channel(graph, name));
        assert_eq!(
            (spec.kind, spec.reducer),
            (ChannelType::Text, Reducer::Overwrite)
        );
    }
    let trace = &corpus.traces()[0];
    assert_eq!(trace.id, "question-1");
    assert_eq!(
        trace.prompts[ask.0 as usize],
        [PromptPart::Message {
            role: "user".into(),
            content: vec![
                text("Question: "),
                text("What is Graph IR in one sentence?")
            ],
        }]
    );
    assert!(corpus.warnings().is_empty() && !corpus.timestamped());
}

#[test]
fn the_worked_example_has_its_anchors_and_a_resolved_count_all() {
    let corpus = load_fixture("worked-example.json");
    let graph = &corpus.graphs()[0];
    let (plan, plan_node) = node(graph, "plan");
    let (child, child_node) = node(graph, "child");
    let (join, join_node) = node(graph, "join");
    assert_eq!(
        child_node.in_edges[0].anchor,
        Anchor::FirstToken {
            source: plan,
            delay_us: 500_000.0,
            dispatch_fallback_us: 2_000_000.0
        }
    );
    assert_eq!(child_node.in_edges.len(), 1);
    assert_eq!(plan_node.on_dispatch, [child]);
    assert_eq!(plan_node.on_completion, [join]);
    assert_eq!(child_node.on_completion, [join]);
    let anchors: Vec<Anchor> = join_node.in_edges.iter().map(|e| e.anchor).collect();
    assert_eq!(
        anchors,
        [
            Anchor::Completion {
                source: plan,
                delay_us: 1_000_000.0
            },
            Anchor::Completion {
                source: child,
                delay_us: 0.0
            },
        ]
    );
    let notes = channel(graph, "notes");
    assert_eq!(
        join_node.inputs,
        [FanIn {
            channel: notes,
            declared: Count::All,
            count: 2
        }]
    );
    assert_eq!(graph.channel(notes).writers, [plan, child]);
    assert_eq!(graph.topological_order(), [plan, child, join]);
    assert_eq!(graph.entries, [plan]);
    let prompt = &corpus.traces()[0].prompts[plan.0 as usize];
    assert_eq!(
        prompt[0],
        PromptPart::Message {
            role: "user".into(),
            content: vec![
                text("Draft a plan for: "),
                text("migrate the build to Bazel")
            ]
        }
    );
}

#[test]
fn two_traces_share_a_graph_with_dispatch_anchors_splices_and_replies() {
    let corpus = load_fixture("review-two-traces.json");
    assert_eq!(corpus.graphs().len(), 1);
    let graph = &corpus.graphs()[0];
    let (triage, triage_node) = node(graph, "triage");
    let (search, search_node) = node(graph, "search");
    let (lint, lint_node) = node(graph, "lint");
    let (patch, patch_node) = node(graph, "patch");
    assert_eq!(
        lint_node.in_edges[0].anchor,
        Anchor::Dispatch {
            source: triage,
            delay_us: 50_000.0
        }
    );
    assert_eq!(triage_node.on_dispatch, [lint]);
    assert_eq!(triage_node.on_completion, [search]);
    assert_eq!(search_node.min_start_delay_us, 250_000.0);
    assert!(!lint_node.request.streaming);
    assert_eq!(lint_node.request.extra_headers["x-agent"], "lint");
    assert_eq!(lint_node.request.extra_body["temperature"], 0);
    assert_eq!(patch_node.request.model.as_deref(), Some("patch-model"));
    let history = channel(graph, "history");
    assert_eq!(graph.channel(history).reducer, Reducer::AddMessages);
    assert_eq!(patch_node.inputs[0].count, 1);
    let brief = channel(graph, "brief");
    for trace in corpus.traces() {
        assert_eq!(trace.graph, 0);
        // The reader of @brief gets triage's reply; the reader of @history after search gets
        // the seed and then search's reply.
        let PromptPart::Message { content, .. } = &trace.prompts[search.0 as usize][2] else {
            panic!("a message")
        };
        assert_eq!(
            content[1],
            Piece::Reply {
                channel: brief,
                producer: triage
            }
        );
        let patch_prompt = &trace.prompts[patch.0 as usize];
        assert_eq!(
            patch_prompt.len(),
            4,
            "system, the seed message, search's reply, the user"
        );
        assert_eq!(
            patch_prompt[2],
            PromptPart::Replies {
                channel: history,
                producers: vec![search]
            }
        );
    }
    let seed = |i: usize| match &corpus.traces()[i].prompts[triage.0 as usize][1] {
        PromptPart::Message { content, .. } => content.clone(),
        other @ PromptPart::Replies { .. } => panic!("{other:?}"),
    };
    assert_ne!(seed(0), seed(1), "each trace's own initial_state");
}

/// The refusal of a fixture: (rule, location field, line, message) of every finding, or of the
/// decode error (rule "").
fn refusal(path: &Path) -> Vec<(String, String, u64, String)> {
    match load(path, false) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(DatasetError::GraphRefused { findings, .. }) => findings
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| {
                (
                    f.rule,
                    f.location.field.unwrap_or_default(),
                    f.location.line,
                    f.message,
                )
            })
            .collect(),
        Err(DatasetError::Invalid { location, message }) => {
            vec![(
                String::new(),
                location.field.unwrap_or_default(),
                location.line,
                message,
            )]
        }
        Err(other) => panic!("{}: {other}", path.display()),
    }
}

#[test]
fn every_invalid_case_is_refused_with_its_rule_place_and_message() {
    let cases: [(&str, &str, &str, u64, &str); 22] = [
        ("01-cycle.json", "rule-1", "graph.edges", 0, "Graph contains a cycle in the static edges."),
        ("02-tool-node.json", "", "graph.nodes.run.node_type", 0, "unknown node node_type 'tool'; expected one of ['llm']"),
        ("03-no-prompt.json", "", "graph.nodes.ask", 0, "node has no prompt; synth-token fabrication is not supported"),
        ("04-first-token-no-fallback.json", "rule-55", "graph.edges[a->b]", 0, "is first-token-anchored (delay_after_predecessor_first_token_us) but sets no delay_after_predecessor_start_us"),
        ("05-anchor-from-start.json", "rule-54", "graph.edges[START->a]", 0, "START-sourced edges cannot be start-anchored"),
        ("05-anchor-from-start.json", "rule-55", "graph.edges[START->a]", 0, "START-sourced edges cannot be first-token-anchored"),
        ("06-both-anchors.json", "rule-54", "graph.edges[a->b]", 0, "sets both delay_after_predecessor_us and delay_after_predecessor_start_us; they are mutually exclusive."),
        ("07-mixed-anchor-fan-in.json", "scheduler", "graph.nodes.b", 0, "node 'b': mixed-anchor fan-in is unsupported: start-anchored edge 'a' -> 'b'"),
        ("08-orphaned-fan-in.json", "fan-in", "graph.nodes.join.inputs[0]", 0, "channel 'c' cannot reach count=3: only 2 arrivals possible"),
        ("09-count-zero.json", "", "graph.nodes.join.inputs[0].count", 0, "count must be a whole number >= 1 or \"all\", got 0"),
        ("10-overwrite-conflict.json", "rule-9", "graph.state.x", 0, "Channel 'x' has overwrite reducer but is written by multiple nodes: ['a', 'b']."),
        ("11-infinite-delay.jsonl", "", "min_start_delay_us", 1, "Infinity is not a finite number"),
        ("12-version.json", "rule-12", "graph.version", 0, "Unknown major version '1.0'; known: ['2.0']."),
        ("13-reserved-name.json", "rule-11", "graph.nodes._aiperf_x", 0, "Node id '_aiperf_x' is reserved (matches START/END or begins with '_aiperf')."),
        ("14-undeclared-target.json", "rule-56", "graph.edges[a->b]", 0, "edge target 'b' is neither a declared node nor the END sentinel."),
        ("15-unreachable.json", "rule-21", "graph.nodes.c", 0, "Node 'c' is unreachable from START."),
        ("16a-graph-after-trace.jsonl", "", "kind", 2, "graph record must precede trace records (rule-19)"),
        ("16b-two-graphs.jsonl", "", "kind", 2, "more than one 'kind: graph' record (rule-20)"),
        ("16c-kind-mix.jsonl", "", "kind", 2, "unknown kind 'mix'"),
        ("17-unknown-field.json", "", "graph.endpoints", 0, "the graph record has an unknown field 'endpoints'"),
        ("18-partly-timestamped.json", "partly-timestamped", "graph.nodes.b", 0, "aiperf's open-loop replay refuses to start on it"),
        ("19-provenance-tool.json", "rule-13", "graph.provenance.tool", 0, "provenance.source='weka_trace' requires a non-empty provenance.tool"),
    ];
    let dir = fixtures().join("invalid/graph-ir");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != "README.md")
        .collect();
    files.sort();
    let mut covered: Vec<&str> = cases.iter().map(|c| c.0).collect();
    covered.dedup();
    assert_eq!(files, covered, "one case per fixture");
    for (file, rule, field, line, fragment) in cases {
        let found = refusal(&dir.join(file));
        assert!(
            found
                .iter()
                .any(|(r, f, l, m)| r == rule && f == field && *l == line && m.contains(fragment)),
            "{file}: no ({rule}, {field}, {line}, {fragment:?}) in {found:#?}"
        );
    }
}

#[test]
fn the_linear_chat_shorthand_reads_trace_messages_and_the_system_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "chat.jsonl",
        concat!(
            r#"{"kind":"graph","system":"Be brief."}"#,
            "\n",
            r#"{"id":"c1","messages":[{"role":"user","content":"hello there"}]}"#,
            "\n"
        ),
    );
    let corpus = load(&path, false).unwrap();
    let graph = &corpus.graphs()[0];
    let (chat, chat_node) = node(graph, "_llm");
    assert_eq!(graph.channel(chat_node.output).name, "messages");
    assert_eq!(
        corpus.traces()[0].prompts[chat.0 as usize],
        [
            PromptPart::Message {
                role: "system".into(),
                content: vec![text("Be brief.")]
            },
            PromptPart::Message {
                role: "user".into(),
                content: vec![text("hello there")]
            },
        ]
    );
    // Without messages there is nothing to send: refused, naming the trace.
    let bare = write(dir.path(), "bare.jsonl", "{\"id\":\"c2\"}\n");
    let found = refusal(&bare);
    assert_eq!(found[0].0, "lowering");
    assert_eq!(found[0].1, "traces[0].initial_state.messages");
    assert!(found[0].3.contains("does not seed it"), "{found:?}");
}

#[test]
fn documents_that_are_not_a_workload_are_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, body: &str, field: &str, says: &str| {
        let path = write(dir.path(), name, body);
        let error = load(&path, false).unwrap_err();
        let shown = error.to_string();
        assert!(shown.contains(says), "{name}: {shown}");
        if let DatasetError::Invalid { location, .. } = error {
            assert_eq!(location.field.unwrap_or_default(), field, "{name}");
        }
    };
    check(
        "w.yaml",
        "graph: {}\n",
        "",
        "YAML is not read: convert it to JSON first",
    );
    check(
        "k.json",
        r#"{"kind":"graph"}"#,
        "kind",
        "records with a 'kind' are JSONL",
    );
    check(
        "t.json",
        r#"{"graph":{},"traces":[],"mix":1}"#,
        "mix",
        "unknown top-level key 'mix'",
    );
    check(
        "e.json",
        r#"{"graph":{"nodes":{"a":{"output":"o","prompt":[]}}},"traces":[]}"#,
        "",
        "no trace records",
    );
    check(
        "b.json",
        r#"{"graph":{"edges":[{"source":"a","target":"b","branches":[]}]},"traces":[{"id":"t"}]}"#,
        "graph.edges[0].branches",
        "retired conditional edge",
    );
    check(
        "d.json",
        r#"{"graph":{"nodes":{"a":{"output":"o","prompt":[],"dispatch_overrides":{}}}},"traces":[{"id":"t"}]}"#,
        "graph.nodes.a.dispatch_overrides",
        "renamed 'extra_body'",
    );
    check(
        "m.json",
        r#"{"graph":{"nodes":{"a":{"output":"o","prompt":[],"messages":[]}}},"traces":[{"id":"t"}]}"#,
        "graph.nodes.a",
        "node sets both 'prompt' and 'messages'",
    );
    check(
        "x.json",
        r#"{"graph":{"nodes":{"a":{"output":"o","prompt":[],"max_tokens":0}}},"traces":[{"id":"t"}]}"#,
        "graph.nodes.a.max_tokens",
        "max_tokens must be a whole number >= 1",
    );
    check(
        "n.json",
        r#"{"graph":{"nodes":{"a":{"output":"o","prompt":[],"min_start_delay_us":-1}}},"traces":[{"id":"t"}]}"#,
        "graph.nodes.a.min_start_delay_us",
        "must be >= 0",
    );
    check(
        "l.json",
        r#"{"graph":{"nodes":{"a":{"kind":"router","output":"o","prompt":[]}}},"traces":[{"id":"t"}]}"#,
        "graph.nodes.a.kind",
        "unknown node kind 'router'",
    );
    check(
        "u.json",
        r#"{"graph":{"nodes":{"a":{"outptu":"o","prompt":[]}}},"traces":[{"id":"t"}]}"#,
        "graph.nodes.a.outptu",
        "did you mean 'output'?",
    );
    check(
        "i.json",
        r#"{"traces":[{"id":"t"},{"id":"t"}]}"#,
        "traces[1].id",
        "duplicate trace id",
    );
}

#[test]
fn provenance_keeps_vendor_keys_and_legacy_kind_and_messages_alias_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "p.json",
        r#"{"graph":{"provenance":{"source":"weka_trace","tool":"manual","run":7},
             "nodes":{"a":{"kind":"llm","output":"o","messages":[{"role":"user","content":"@@literal"}]}}},
            "traces":[{"id":"t"}]}"#,
    );
    let corpus = load(&path, false).unwrap();
    let graph = &corpus.graphs()[0];
    assert_eq!(graph.provenance.extra["run"], 7);
    assert_eq!(
        corpus.warnings().len(),
        1,
        "rule-13's warning for the default tool"
    );
    assert_eq!(corpus.warnings()[0].rule, "rule-13");
    assert!(
        matches!(load(&path, true), Err(DatasetError::GraphRefused { .. })),
        "--strict"
    );
    let PromptPart::Message { content, .. } = &corpus.traces()[0].prompts[0][0] else {
        panic!()
    };
    assert_eq!(
        content[0],
        text("@@literal"),
        "a plain string content is literal"
    );
}

#[test]
fn a_fan_in_on_a_writer_downstream_waits_forever_and_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "f.json",
        r#"{"graph":{"state":{"c":{"type":"messages","reducer":"add_messages"}},
             "nodes":{"a":{"output":"c","prompt":[{"role":"user","content":"x"}]},
                      "b":{"output":"c","inputs":[{"channel":"c","count":"all"}],"prompt":[{"role":"user","content":"y"}]}},
             "edges":[{"source":"START","target":"a"},{"source":"a","target":"b"}]},
            "traces":[{"id":"t"}]}"#,
    );
    let found = refusal(&path);
    assert_eq!(found[0].0, "fan-in");
    assert!(
        found[0]
            .3
            .contains("['b'] is the node itself or runs after it"),
        "{found:?}"
    );
}

#[test]
fn a_reader_racing_a_writer_of_its_channel_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "r.json",
        r#"{"graph":{"nodes":{"a":{"output":"note","prompt":[{"role":"user","content":"x"}]},
                              "b":{"output":"o","prompt":[{"role":"user","content":["see ","@note"]}]}},
             "edges":[{"source":"START","target":"a"},{"source":"a","target":"b","delay_after_predecessor_start_us":5}]},
            "traces":[{"id":"t","initial_state":{"note":"seed"}}]}"#,
    );
    let found = refusal(&path);
    assert_eq!(found[0].0, "lowering");
    assert!(found[0].3.contains("may still be running"), "{found:?}");
    // A messages channel referenced inside content is the wrong type.
    let typed = write(
        dir.path(),
        "ty.json",
        r#"{"graph":{"state":{"log":{"type":"messages","reducer":"add_messages"}},
             "nodes":{"a":{"output":"o","prompt":[{"role":"user","content":["@log"]}]}}},
            "traces":[{"id":"t"}]}"#,
    );
    let found = refusal(&typed);
    assert!(found[0].3.contains("reads a text channel"), "{found:?}");
}

#[test]
fn stats_count_anchors_channels_and_the_in_trace_prefix_hit() {
    let corpus = load_fixture("worked-example.json");
    let figures = stats(&corpus, &crate::TokenCounter::Words, 2);
    assert_eq!((figures.traces, figures.nodes, figures.edges), (1, 3, 5));
    assert_eq!(
        figures.in_edges,
        stats::AnchorCounts {
            start: 1,
            completion: 2,
            dispatch: 0,
            first_token: 1
        }
    );
    assert_eq!(figures.fan_in_nodes, 1);
    assert_eq!(
        figures.channels,
        stats::ReducerCounts {
            overwrite: 2,
            add_messages: 1
        }
    );
    // plan: "Draft a plan for: migrate the build to Bazel" (9 words, 4 blocks), child "List three
    // risks." (3, 1), join "Summarize the plan and risks." (5, 2): 7 blocks, none repeated.
    assert_eq!(
        (figures.prompt_tokens, figures.blocks, figures.hit_blocks),
        (17, 7, 0)
    );

    // Two readers of the same seed and reply share their blocks: the second's hit.
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "h.json",
        r#"{"graph":{"nodes":{
              "a":{"output":"r","max_tokens":4,"prompt":[{"role":"user","content":"one two three four"}]},
              "b":{"output":"o1","prompt":[{"role":"user","content":["one two three four ","@r"]}]},
              "c":{"output":"o2","prompt":[{"role":"user","content":["one two three four ","@r"," tail"]}]}},
             "edges":[{"source":"START","target":"a"},{"source":"a","target":"b"},{"source":"a","target":"c"}]},
            "traces":[{"id":"t"}]}"#,
    );
    let figures = stats(&load(&path, false).unwrap(), &crate::TokenCounter::Words, 4);
    // a: 1 block; b: the same text block (hit) + 1 reply block; c: both hit, "tail" is a partial block.
    assert_eq!(
        (figures.blocks, figures.hit_blocks, figures.dynamic_tokens),
        (5, 3, 8)
    );
    assert!((figures.theoretical_hit_rate - 0.6).abs() < 1e-12);
}
