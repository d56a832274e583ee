//! The session-tree builder against the golden vectors aiperf 0.13.0.dev20261023 computed on the
//! fixture corpora (fixtures/golden/v1_trees_*.json, v1_chains.json), field by field.

use std::path::PathBuf;

use serde_json::Value;

use super::chain::{self, ChainParams, Req};
use super::*;
use crate::weka::{for_each_trace, parse_trace, SourceFiles};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn golden(name: &str) -> Value {
    let p = root().join("fixtures/golden").join(name);
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn corpus(path: &str) -> Vec<ParsedTrace> {
    let mut out = Vec::new();
    for_each_trace(&SourceFiles::Jsonl(root().join(path)), None, |t| {
        out.push(t);
        Ok(())
    })
    .unwrap();
    out
}

fn trees(path: &str) -> Vec<SessionTree> {
    let traces = corpus(path);
    let basis = NestedBasis::infer(&traces);
    let opts = TreeOptions {
        basis,
        ..TreeOptions::default()
    };
    traces.iter().map(|t| build(t, &opts).unwrap()).collect()
}

/// Collects mismatches instead of stopping at the first, so one run names them all.
#[derive(Default)]
struct Diff(Vec<String>);

impl Diff {
    #[allow(
        clippy::needless_pass_by_value,
        reason = "every call builds `got` in place (`x.into()`); a borrow adds a `&` to each"
    )]
    fn eq(&mut self, place: &str, field: &str, got: Value, want: &Value) {
        if got != *want {
            self.0
                .push(format!("{place}: {field}: got {got}, golden {want}"));
        }
    }
    fn finish(self) {
        assert!(
            self.0.is_empty(),
            "{} mismatches:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

fn f(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

fn of<T: Into<Value>>(x: Option<T>) -> Value {
    x.map_or(Value::Null, Into::into)
}

fn kind_str(k: StreamKind) -> &'static str {
    match k {
        StreamKind::Main => "weka_main",
        StreamKind::Subagent => "weka_subagent",
        StreamKind::Flat => "weka_flat",
    }
}

/// The fields of the golden turns this module computes (all but `roles` and `reset_context`, which
/// prompt synthesis decides).
fn compare_trees(golden_file: &str, corpus_path: &str) {
    let g = golden(golden_file);
    let got = trees(corpus_path);
    let mut d = Diff::default();
    let want_trees = g["trees"].as_array().unwrap();
    compare_corpus(&mut d, &got, &g);
    for (t, w) in got.iter().zip(want_trees) {
        let tp = format!("trace {}", t.trace_id);
        d.eq(&tp, "root", t.trace_id.clone().into(), &w["root"]);
        let ids: Vec<Value> = t.streams.iter().map(|s| s.id.clone().into()).collect();
        d.eq(&tp, "stream_ids", Value::Array(ids), &w["stream_ids"]);
        d.eq(
            &tp,
            "dropped_subagents",
            t.dropped_subagents.clone().into(),
            &w["dropped_subagents"],
        );
        compare_branches(&mut d, &tp, t, w["branches"].as_array().unwrap());
        let ws = w["streams"].as_array().unwrap();
        d.eq(
            &tp,
            "stream count",
            t.streams.len().into(),
            &ws.len().into(),
        );
        for (s, ws) in t.streams.iter().zip(ws) {
            compare_stream(&mut d, &tp, t, s, ws);
        }
    }
    d.finish();
}

/// What the golden file says of the corpus as a whole: the tree count, the clamped requests and
/// the emission order.
fn compare_corpus(d: &mut Diff, got: &[SessionTree], g: &Value) {
    d.eq(
        "corpus",
        "tree count",
        got.len().into(),
        &g["trees"].as_array().unwrap().len().into(),
    );
    let clamped: usize = got.iter().map(|t| t.counts.clamped_requests).sum();
    d.eq(
        "corpus",
        "clamped_request_count",
        clamped.into(),
        &g["timestamp_resolution"]["clamped_request_count"],
    );
    // Emission order: all roots, then each trace's children.
    let mut order: Vec<Value> = got.iter().map(|t| t.trace_id.clone().into()).collect();
    for t in got {
        order.extend(t.streams.iter().skip(1).map(|s| Value::from(s.id.clone())));
    }
    d.eq(
        "corpus",
        "conversation_order",
        Value::Array(order),
        &g["conversation_order"],
    );
}

/// A tree's branches against the golden `branches`.
fn compare_branches(d: &mut Diff, tp: &str, t: &SessionTree, wb: &[Value]) {
    d.eq(
        tp,
        "branch count",
        t.branches.len().into(),
        &wb.len().into(),
    );
    for (b, wb) in t.branches.iter().zip(wb) {
        let bp = format!("{tp} branch {}", b.id);
        d.eq(&bp, "branch_id", b.id.clone().into(), &wb["branch_id"]);
        let ch: Vec<Value> = b
            .children
            .iter()
            .map(|&c| t.streams[c].id.clone().into())
            .collect();
        d.eq(&bp, "children", Value::Array(ch), &wb["children"]);
        d.eq(&bp, "spawn_turn", b.spawn_turn.into(), &wb["spawn_turn"]);
        d.eq(&bp, "join_turn", of(b.join_turn), &wb["join_turn"]);
        d.eq(
            &bp,
            "is_background",
            b.join_turn.is_none().into(),
            &wb["is_background"],
        );
        d.eq(
            &bp,
            "start_timestamp_ms",
            f(b.start_timestamp_ms),
            &wb["start_timestamp_ms"],
        );
    }
}

/// One stream of a tree against its golden entry: its place in the tree, its branch, its turns.
fn compare_stream(d: &mut Diff, tp: &str, t: &SessionTree, s: &Stream, ws: &Value) {
    let sp = format!("{tp} stream {}", s.id);
    d.eq(
        &sp,
        "conversation_id",
        s.id.clone().into(),
        &ws["conversation_id"],
    );
    d.eq(&sp, "is_root", (s.depth == 0).into(), &ws["is_root"]);
    d.eq(&sp, "agent_depth", s.depth.into(), &ws["agent_depth"]);
    let parent = s.parent.map(|p| t.streams[p].id.clone());
    d.eq(
        &sp,
        "parent_conversation_id",
        of(parent),
        &ws["parent_conversation_id"],
    );
    d.eq(
        &sp,
        "source_kind",
        kind_str(s.kind).into(),
        &ws["source_kind"],
    );
    d.eq(
        &sp,
        "replay_scope_id",
        s.replay_scope.clone().into(),
        &ws["replay_scope_id"],
    );
    let br = s.branch.map(|b| &t.branches[b]);
    d.eq(
        &sp,
        "branch_id",
        of(br.map(|b| b.id.clone())),
        &ws["branch_id"],
    );
    d.eq(
        &sp,
        "spawn_turn",
        of(br.map(|b| b.spawn_turn)),
        &ws["spawn_turn"],
    );
    d.eq(
        &sp,
        "join_turn",
        of(br.and_then(|b| b.join_turn)),
        &ws["join_turn"],
    );
    d.eq(
        &sp,
        "is_background",
        of(br.map(|b| b.join_turn.is_none())),
        &ws["is_background"],
    );
    d.eq(
        &sp,
        "branch_start_ts_ms",
        br.map_or(Value::Null, |b| f(b.start_timestamp_ms)),
        &ws["branch_start_ts_ms"],
    );
    let wt = ws["turns"].as_array().unwrap();
    d.eq(&sp, "turn count", s.turns.len().into(), &wt.len().into());
    for (k, (u, wu)) in s.turns.iter().zip(wt).enumerate() {
        compare_turn(d, &format!("{sp} turn {k}"), t, u, wu);
    }
}

/// One turn of a stream against its golden entry.
fn compare_turn(d: &mut Diff, up: &str, t: &SessionTree, u: &TreeTurn, wu: &Value) {
    d.eq(up, "ts_ms", f(u.ts_ms), &wu["ts_ms"]);
    d.eq(
        up,
        "delay_ms",
        u.delay_ms.map_or(Value::Null, f),
        &wu["delay_ms"],
    );
    d.eq(
        up,
        "delay_ms_think_time_only",
        u.delay_ms_think_time_only.map_or(Value::Null, f),
        &wu["delay_ms_think_time_only"],
    );
    d.eq(
        up,
        "api_time_ms",
        u.api_time_ms.map_or(Value::Null, f),
        &wu["api_time_ms"],
    );
    d.eq(up, "max_tokens", u.max_tokens.into(), &wu["max_tokens"]);
    d.eq(
        up,
        "prefix_hit_blocks",
        u.prefix_hit_blocks.into(),
        &wu["prefix_hit_blocks"],
    );
    d.eq(
        up,
        "prefix_total_blocks",
        u.prefix_total_blocks.into(),
        &wu["prefix_total_blocks"],
    );
    d.eq(
        up,
        "source_outer_idx",
        u.source_outer_idx.into(),
        &wu["source_outer_idx"],
    );
    d.eq(
        up,
        "source_inner_idx",
        of(u.source_inner_idx),
        &wu["source_inner_idx"],
    );
    let ik = u.input_kind.map(|k| match k {
        InputKind::ToolResult => "tool_result",
        InputKind::UserInput => "user_input",
    });
    d.eq(up, "input_kind", of(ik), &wu["input_kind"]);
    let names = |v: &[usize]| -> Value {
        v.iter()
            .map(|&b| Value::from(t.branches[b].id.clone()))
            .collect()
    };
    d.eq(
        up,
        "spawns_branches",
        names(&u.spawns),
        &wu["spawns_branches"],
    );
    d.eq(up, "joins_branches", names(&u.joins), &wu["joins_branches"]);
    let preds: Value = u
        .replay_predecessors
        .iter()
        .map(|&(st, k)| serde_json::json!([t.streams[st].id, k]))
        .collect();
    d.eq(up, "replay_predecessors", preds, &wu["replay_predecessors"]);
}

#[test]
fn trees_match_golden_subagents8() {
    compare_trees(
        "v1_trees_subagents8.json",
        "fixtures/traces-subagents-8.jsonl",
    );
}

#[test]
fn trees_match_golden_traces24() {
    compare_trees("v1_trees_traces24.json", "fixtures/traces-24.jsonl");
}

#[test]
#[ignore = "roles and reset_context of each turn come from prompt synthesis (aiperf's \
            weka_synth_buf ConversationReconstructor with its pull-back planner), which this module \
            does not own; not implemented yet"]
fn turn_roles_and_reset_context_match_golden() {
    panic!("roles/reset_context are not computed by dataset::tree");
}

fn reqs_of<'a>(rs: &'a [ParsedRequest], ts: Option<&'a [f64]>) -> Vec<Req<'a>> {
    rs.iter()
        .enumerate()
        .map(|(i, r)| Req {
            index: r.index,
            t: ts.map_or(r.t, |ts| ts[i]),
            api_time: r.recorded_api_time,
            model: &r.model,
            hash_ids: &r.hash_ids,
            input: r.input,
            output: r.output,
        })
        .collect()
}

/// Compares a detection with the golden `detection` object; `key` names request lists
/// (`request_idx` or `inner_idx`).
fn compare_detection(
    d: &mut Diff,
    place: &str,
    reqs: &[Req<'_>],
    got: &chain::Detection,
    w: &Value,
    key: &str,
) {
    d.eq(place, "main_index", got.main_index.into(), &w["main_index"]);
    d.eq(
        place,
        "worker_indices",
        got.worker_indices.clone().into(),
        &w["worker_indices"],
    );
    d.eq(
        place,
        "seams_merged",
        got.seams_merged.into(),
        &w["seams_merged"],
    );
    d.eq(
        place,
        "unclassified_empty_hash",
        got.unclassified_empty_hash.into(),
        &w["unclassified_empty_hash"],
    );
    let groups = chain::worker_groups(reqs, got, &ChainParams::default());
    let mut gm = serde_json::Map::new();
    let mut keys: Vec<_> = groups.iter().collect();
    keys.sort();
    for (ci, (g, m)) in keys {
        gm.insert(ci.to_string(), serde_json::json!([g, m]));
    }
    d.eq(
        place,
        "worker_groups",
        Value::Object(gm),
        &w["worker_groups"],
    );
    let wc = w["chains"].as_array().unwrap();
    d.eq(
        place,
        "chain count",
        got.chains.len().into(),
        &wc.len().into(),
    );
    for (i, (c, wc)) in got.chains.iter().zip(wc).enumerate() {
        let cp = format!("{place} chain {i}");
        let idx: Vec<u32> = c.requests.iter().map(|&q| reqs[q].index).collect();
        d.eq(&cp, key, idx.into(), &wc[key]);
        let fork = c.fork.as_ref().map_or(Value::Null, |fk| {
            serde_json::json!({
                "parent_chain": fk.parent_chain,
                "fork_request_idx": fk.fork_index,
                "depth": fk.depth,
                "fork_time": fk.fork_time,
            })
        });
        d.eq(&cp, "fork", fork, &wc["fork"]);
        d.eq(&cp, "spliced_into", of(c.spliced_into), &wc["spliced_into"]);
    }
}

fn compare_chains(name: &str, corpus_path: &str) {
    let g = golden("v1_chains.json");
    let traces = corpus(corpus_path);
    let basis = NestedBasis::infer(&traces);
    let opts = TreeOptions {
        basis,
        ..TreeOptions::default()
    };
    let mut d = Diff::default();
    let entries = g["corpora"][name].as_array().unwrap();
    let mut n = 0;
    for t in &traces {
        let tree = build(t, &opts).unwrap();
        let top_entries: Vec<&Value> = entries
            .iter()
            .filter(|e| e["trace_id"] == t.id.as_str())
            .collect();
        n += 1;
        compare_top_layer(&mut d, t, &tree, top_entries[0]);
        // Subagent layers, detection on every entry (dropped ones too).
        for si in 0..t.subagent_entries.len() {
            let w = top_entries.get(si + 1).copied().unwrap_or(&Value::Null);
            n += 1;
            compare_subagent_layer(&mut d, t, &tree, si, w);
        }
    }
    d.eq(name, "entry count", n.into(), &entries.len().into());
    d.finish();
}

/// A layer's requests without its preamble, and the preamble's request index if it has one.
fn without_preamble<'a>(reqs: &[Req<'a>]) -> (Vec<u32>, Vec<Req<'a>>) {
    let pre_pos = chain::preamble(reqs);
    let pre: Vec<u32> = pre_pos.map(|i| reqs[i].index).into_iter().collect();
    let rest: Vec<Req<'_>> = (0..reqs.len())
        .filter(|&i| Some(i) != pre_pos)
        .map(|i| reqs[i])
        .collect();
    (pre, rest)
}

/// The top level of a trace: its preamble, its detection, the main stream and the flat worker
/// streams.
fn compare_top_layer(d: &mut Diff, t: &ParsedTrace, tree: &SessionTree, w: &Value) {
    let place = format!("trace {} top", t.id);
    d.eq(&place, "layer", "top".into(), &w["layer"]);
    let reqs = reqs_of(&t.requests, None);
    let (pre, rest) = without_preamble(&reqs);
    d.eq(
        &place,
        "preamble_request_idx",
        pre.into(),
        &w["preamble_request_idx"],
    );
    let det = chain::detect(&rest, &ChainParams::default());
    compare_detection(d, &place, &rest, &det, &w["detection"], "request_idx");
    let root = &tree.streams[0];
    let main: Vec<u32> = root.turns.iter().map(|u| u.source_outer_idx).collect();
    d.eq(
        &place,
        "main_request_idx",
        main.into(),
        &w["main_request_idx"],
    );
    let ws = w["worker_streams"].as_array().unwrap();
    let flat: Vec<&Stream> = tree
        .streams
        .iter()
        .filter(|s| s.kind == StreamKind::Flat)
        .collect();
    d.eq(
        &place,
        "worker stream count",
        flat.len().into(),
        &ws.len().into(),
    );
    for (s, ws) in flat.iter().zip(ws) {
        let sp = format!("{place} stream {}", s.id);
        d.eq(
            &sp,
            "conversation_id",
            s.id.clone().into(),
            &ws["conversation_id"],
        );
        let idx: Vec<u32> = s.turns.iter().map(|u| u.source_outer_idx).collect();
        d.eq(&sp, "request_idx", idx.into(), &ws["request_idx"]);
        compare_worker_stream(d, &sp, tree, s, ws);
    }
}

/// The subagent entry `si` of a trace: its preamble, its detection and, when it is retained, its
/// streams.
fn compare_subagent_layer(d: &mut Diff, t: &ParsedTrace, tree: &SessionTree, si: usize, w: &Value) {
    let s = &t.subagent_entries[si];
    let stream = |id: &str| tree.streams.iter().position(|s| s.id == id);
    let agent = s.agent_id.clone().unwrap_or_default();
    let place = format!("trace {} subagent {si} ({agent})", t.id);
    d.eq(&place, "agent_id", agent.clone().into(), &w["agent_id"]);
    d.eq(
        &place,
        "marker_request_idx",
        s.index.into(),
        &w["marker_request_idx"],
    );
    let ts: Vec<f64> = s.requests.iter().map(|r| r.t.max(s.t)).collect();
    let reqs = reqs_of(&s.requests, Some(&ts));
    let (pre, rest) = without_preamble(&reqs);
    d.eq(
        &place,
        "preamble_inner_idx",
        pre.into(),
        &w["preamble_inner_idx"],
    );
    let det = chain::detect(&rest, &ChainParams::default());
    compare_detection(d, &place, &rest, &det, &w["detection"], "inner_idx");
    // The streams of a retained entry.
    if tree.dropped_subagents.contains(&agent) && stream(&format!("{}::sa:{agent}", t.id)).is_none()
    {
        return;
    }
    for ws in w["streams"].as_array().unwrap() {
        let id = ws["conversation_id"].as_str().unwrap();
        let sp = format!("{place} stream {id}");
        let Some(st) = stream(id) else {
            // Dropped entries still have golden plans; a retained namesake was checked already.
            if !tree.dropped_subagents.contains(&agent) {
                d.0.push(format!("{sp}: missing"));
            }
            continue;
        };
        let s = &tree.streams[st];
        if s.turns.first().map(|u| u.source_outer_idx) != Some(t.subagent_entries[si].index) {
            continue; // the golden entry of a dropped namesake
        }
        let idx: Vec<Option<u32>> = s.turns.iter().map(|u| u.source_inner_idx).collect();
        d.eq(
            &sp,
            "inner_idx",
            serde_json::to_value(idx).unwrap(),
            &ws["inner_idx"],
        );
        compare_worker_stream(d, &sp, tree, s, ws);
    }
}

/// What a worker stream (flat or subagent) carries besides its requests: whether it is auxiliary,
/// its initial tool and system tokens, the stream it forks from.
fn compare_worker_stream(d: &mut Diff, sp: &str, tree: &SessionTree, s: &Stream, ws: &Value) {
    d.eq(
        sp,
        "is_aux",
        s.class.is_some_and(super::chain::ChainClass::is_aux).into(),
        &ws["is_aux"],
    );
    d.eq(
        sp,
        "init_tool_tokens",
        s.init_tool_tokens.into(),
        &ws["init_tool_tokens"],
    );
    d.eq(
        sp,
        "init_system_tokens",
        s.init_system_tokens.into(),
        &ws["init_system_tokens"],
    );
    let fs = s.fork_source.map_or(Value::Null, |(st, k)| {
        serde_json::json!([tree.streams[st].id, k])
    });
    d.eq(sp, "fork_source", fs, &ws["fork_source"]);
}

#[test]
fn chains_match_golden_subagents8() {
    compare_chains("subagents8", "fixtures/traces-subagents-8.jsonl");
}

#[test]
fn chains_match_golden_traces24() {
    compare_chains("traces24", "fixtures/traces-24.jsonl");
}

#[test]
fn chains_match_golden_synthetic_detection() {
    let g = golden("v1_chains.json");
    let mut d = Diff::default();
    for case in g["synthetic"]["detection_cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let rs = case["requests"].as_array().unwrap();
        let hashes: Vec<Vec<u32>> = rs
            .iter()
            .map(|r| {
                r["hash_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|h| h.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect();
        let reqs: Vec<Req<'_>> = rs
            .iter()
            .enumerate()
            .map(|(i, r)| Req {
                index: i as u32,
                t: r["t"].as_f64().unwrap(),
                api_time: r["api_time"].as_f64(),
                model: r["model"].as_str().unwrap(),
                hash_ids: &hashes[i],
                input: 0,
                output: 0,
            })
            .collect();
        let det = chain::detect(&reqs, &ChainParams::default());
        compare_detection(
            &mut d,
            &format!("case {name}"),
            &reqs,
            &det,
            &case["detection"],
            "request_idx",
        );
    }
    d.finish();
}

#[test]
fn chains_match_golden_synthetic_classification() {
    let g = golden("v1_chains.json");
    let p = ChainParams::default();
    let mut d = Diff::default();
    for case in g["synthetic"]["classification_cases"].as_array().unwrap() {
        let place = format!("case {}", case["name"].as_str().unwrap());
        let reqs: Vec<Req<'_>> = case["requests"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, r)| Req {
                index: i as u32,
                t: 0.0,
                api_time: None,
                model: r["model"].as_str().unwrap(),
                hash_ids: &[],
                input: r["in"].as_u64().unwrap() as u32,
                output: r["out"].as_u64().unwrap() as u32,
            })
            .collect();
        let refs: Vec<&Req<'_>> = reqs.iter().collect();
        let peak = case["main_peak_isl"].as_u64().unwrap() as u32;
        let aux = chain::is_aux(&refs, peak, case["main_model"].as_str(), &p);
        let red = chain::is_reduction(&refs, &p);
        d.eq(&place, "is_aux_chain", aux.into(), &case["is_aux_chain"]);
        d.eq(
            &place,
            "is_reduction_chain",
            red.into(),
            &case["is_reduction_chain"],
        );
        let class = if aux {
            "aux"
        } else if red {
            "aux(reduction)"
        } else {
            "agent"
        };
        d.eq(&place, "loader_class", class.into(), &case["loader_class"]);
    }
    d.finish();
}

fn loc() -> Location {
    Location {
        file: "x.jsonl".into(),
        line: 7,
        ..Location::default()
    }
}

fn tree_of(text: &str, basis: NestedBasis) -> Result<SessionTree, DatasetError> {
    let t = parse_trace(text, &loc()).unwrap();
    build(
        &t,
        &TreeOptions {
            basis,
            ..TreeOptions::default()
        },
    )
}

const HEAD: &str = r#"{"id":"tr","block_size":4,"hash_id_scope":"local","requests":["#;

#[test]
fn bad_input_is_a_located_error() {
    let sub = |t: &str, inner_t: &str, extra: &str| {
        format!(
            r#"{HEAD}{{"t":0,"type":"n","in":4,"out":1,"hash_ids":[1]}},
               {{"t":{t},"type":"subagent"{extra},"requests":[{{"t":{inner_t},"type":"n","in":4,"out":1,"hash_ids":[2]}}]}},
               {{"t":9,"type":"n","in":8,"out":1,"hash_ids":[1,3]}}]}}"#
        )
    };
    let e = tree_of(&sub("5", "4", r#","agent_id":"a""#), NestedBasis::Absolute)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("x.jsonl:7")
            && e.contains("trace \"tr\"")
            && e.contains("requests[1].requests[0].t")
            && e.contains("before its subagent's marker"),
        "{e}"
    );
    // The same trace under the relative basis places the request at 9 s.
    let t = tree_of(&sub("5", "4", r#","agent_id":"a""#), NestedBasis::Relative).unwrap();
    assert_eq!(t.streams[1].turns[0].ts_ms, 9000.0);
    let e = tree_of(&sub("5", "5", ""), NestedBasis::Absolute)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("requests[1].agent_id") && e.contains("missing"),
        "{e}"
    );
    let e = tree_of(&sub("-1", "5", r#","agent_id":"a""#), NestedBasis::Absolute)
        .unwrap_err()
        .to_string();
    assert!(e.contains("requests[1].t"), "{e}");
    let e = tree_of(
        &sub("5", "\"nan\"", r#","agent_id":"a""#),
        NestedBasis::Absolute,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("requests[1].requests[0].t"), "{e}");
    // Two retained subagents with one agent_id.
    let dup = format!(
        r#"{HEAD}{{"t":0,"type":"n","in":4,"out":1,"hash_ids":[1]}},
           {{"t":1,"type":"subagent","agent_id":"a","requests":[{{"t":1,"type":"n","in":4,"out":1,"hash_ids":[2]}}]}},
           {{"t":2,"type":"subagent","agent_id":"a","requests":[{{"t":2,"type":"n","in":4,"out":1,"hash_ids":[3]}}]}}]}}"#
    );
    let e = tree_of(&dup, NestedBasis::Absolute)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("requests[2].agent_id") && e.contains("requests[1]"),
        "{e}"
    );
}

#[test]
fn accepted_oddities_are_counted() {
    // A subagent without requests, one before any root request (dropped), a request without hashes.
    let text = format!(
        r#"{HEAD}{{"t":0.5,"type":"subagent","agent_id":"early","requests":[{{"t":0.5,"type":"n","in":4,"out":1,"hash_ids":[9]}}]}},
           {{"t":1,"type":"n","in":4,"out":1,"hash_ids":[1]}},
           {{"t":2,"type":"subagent","agent_id":"empty","duration_ms":1000,"requests":[]}},
           {{"t":4,"type":"n","in":4,"out":0,"hash_ids":[]}}]}}"#
    );
    let t = tree_of(&text, NestedBasis::Absolute).unwrap();
    assert_eq!(t.dropped_subagents, vec!["early".to_owned()]);
    assert_eq!(t.counts.empty_subagents, 1);
    assert_eq!(t.counts.empty_hash_requests, 1);
    let ids: Vec<&str> = t.streams.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["tr", "tr::sa:empty"]);
    assert!(t.streams[1].turns.is_empty());
    assert_eq!(t.branches[0].join_turn, Some(1));
    assert_eq!(t.streams[0].turns[1].max_tokens, 1);
}

#[test]
fn clamped_nested_start_is_counted() {
    let text = format!(
        r#"{HEAD}{{"t":0,"type":"n","in":4,"out":1,"hash_ids":[1]}},
           {{"t":10,"type":"subagent","agent_id":"a","requests":[{{"t":9.9999996,"type":"n","in":4,"out":1,"hash_ids":[2]}}]}}]}}"#
    );
    let t = tree_of(&text, NestedBasis::Absolute).unwrap();
    assert_eq!(t.counts.clamped_requests, 1);
    assert_eq!(t.streams[1].turns[0].ts_ms, 10000.0);
    assert_eq!(
        t.branches[0].join_turn, None,
        "no later root turn: background"
    );
}
