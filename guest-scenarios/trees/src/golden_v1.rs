//! aiperf 0.13's own answers for session trees (`fixtures/golden/v1_tstar.json` and
//! `v1_markers.json`, written by `bench/golden/gen-v1.sh` from aiperf's `TrajectorySource` and
//! `cache_bust` code, with the trees of `v1_trees_*.json`): every lane's seed, t*, alive streams,
//! next and warm turns, offsets, waiting roots and join turns, and every marker, must match.

use std::collections::HashMap;
use std::format;
use std::string::{String, ToString};
use std::vec::Vec;

use serde_json::Value as J;

use crate::tree::{lane_seed, start_tree, Branch, Tree, TreeParams, TreeStream};

fn doc(name: &str) -> J {
    let path = format!(
        "{}/../../fixtures/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}; generate it with bench/golden/gen-v1.sh"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn f(v: &J) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn opt_u32(v: &J) -> Option<u32> {
    v.as_u64().map(|x| x as u32)
}

/// The trees of a `v1_trees_*.json`, by root id, as the planner sees them.
fn trees(name: &str) -> HashMap<String, Tree> {
    let d = doc(name);
    let mut out = HashMap::new();
    for t in d["trees"].as_array().unwrap() {
        let ids: Vec<&str> = t["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["conversation_id"].as_str().unwrap())
            .collect();
        let index = |id: &str| ids.iter().position(|x| *x == id).unwrap() as u32;
        let streams = t["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| TreeStream {
                conversation_id: s["conversation_id"].as_str().unwrap().to_string(),
                turn_ts_ms: s["turns"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| f(&x["ts_ms"]))
                    .collect(),
                unsendable: Vec::new(),
            })
            .collect();
        let branches = t["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| Branch {
                branch_id: b["branch_id"].as_str().unwrap().to_string(),
                children: b["children"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| index(c.as_str().unwrap()))
                    .collect(),
                start_ms: b["start_timestamp_ms"].as_f64(),
                spawn_turn: opt_u32(&b["spawn_turn"]),
                join_turn: if b["is_background"].as_bool().unwrap_or(false) {
                    None
                } else {
                    opt_u32(&b["join_turn"])
                },
            })
            .collect();
        let root = t["root"].as_str().unwrap().to_string();
        out.insert(
            root.clone(),
            Tree {
                trace_id: root,
                streams,
                branches,
            },
        );
    }
    out
}

/// Compares one lane's start with aiperf's states, naming the lane and stream on a mismatch.
fn check_states(
    what: &str,
    tree: &Tree,
    t_star: Option<f64>,
    want_t: f64,
    got: &crate::tree::TreeStart,
    states: &J,
) {
    assert_eq!(t_star, Some(want_t), "{what}: t*");
    let _ = got;
    let want = states.as_array().unwrap();
    assert_eq!(
        got.streams.len(),
        want.len(),
        "{what}: alive streams {:?} want {:?}",
        got.streams
            .iter()
            .map(|s| &tree.streams[s.index as usize].conversation_id)
            .collect::<Vec<_>>(),
        want.iter()
            .map(|s| s["conversation_id"].as_str().unwrap())
            .collect::<Vec<_>>()
    );
    for (g, w) in got.streams.iter().zip(want) {
        let id = &tree.streams[g.index as usize].conversation_id;
        let at = format!("{what}, stream {id}");
        assert_eq!(id, w["conversation_id"].as_str().unwrap(), "{at}: order");
        assert_eq!(
            Some(g.next_turn),
            opt_u32(&w["next_turn"]),
            "{at}: next turn"
        );
        assert_eq!(g.warm_turn, opt_u32(&w["warm_turn"]), "{at}: warm turn");
        assert_eq!(g.offset_ms, f(&w["offset_ms"]), "{at}: offset");
        assert_eq!(
            g.waiting,
            w["waiting_on_children"].as_bool().unwrap(),
            "{at}: waiting"
        );
        assert_eq!(
            g.join_turn,
            opt_u32(&w["join_target_turn"]),
            "{at}: join turn"
        );
    }
}

#[test]
fn t_star_and_alive_streams_match_aiperf_on_every_run() {
    let d = doc("v1_tstar.json");
    let cap = d["system_idle_gap_cap_seconds"].as_f64().unwrap() * 1000.0;
    let corpora = [
        ("subagents8", trees("v1_trees_subagents8.json")),
        ("traces24", trees("v1_trees_traces24.json")),
    ];
    let mut lanes_checked = 0;
    for run in d["runs"].as_array().unwrap() {
        let corpus = run["corpus"].as_str().unwrap();
        let trees = &corpora.iter().find(|(n, _)| *n == corpus).unwrap().1;
        let p = TreeParams {
            seed: run["seed"].as_u64().unwrap(),
            min_ratio: f(&run["min_ratio"]),
            max_ratio: f(&run["max_ratio"]),
            lead_cap_ms: cap,
        };
        for lane in run["lanes"].as_array().unwrap() {
            let l = lane["lane"].as_u64().unwrap() as u32;
            let trace = lane["trace_id"].as_str().unwrap();
            let what = format!(
                "{corpus} seed {} conc {} ratios {}/{} lane {l} ({trace})",
                p.seed, run["concurrency"], p.min_ratio, p.max_ratio
            );
            assert_eq!(
                lane_seed(p.seed, trace, l),
                lane["seed_u64"].as_u64().unwrap(),
                "{what}: lane seed"
            );
            let tree = &trees[trace];
            let got = start_tree(&p, l, tree).unwrap_or_else(|| panic!("{what}: no start"));
            match lane["t_star_ms"].as_f64() {
                Some(t) => check_states(&what, tree, got.t_star_ms, t, &got, &lane["states"]),
                None => {
                    assert_eq!(got.t_star_ms, None, "{what}: a turn-index lane");
                    assert_eq!(
                        Some(got.streams[0].warm_turn.unwrap()),
                        opt_u32(&lane["start_turn_index"]),
                        "{what}: k"
                    );
                }
            }
            lanes_checked += 1;
        }
    }
    assert!(lanes_checked > 200, "{lanes_checked} lanes");
}

#[test]
fn the_spec_example_and_section_3_rows_match() {
    let d = doc("v1_tstar.json");
    let trees = trees("v1_trees_subagents8.json");
    let ex = &d["spec_example"];
    let tree = &trees[ex["trace_id"].as_str().unwrap()];
    for snap in ex["snapshots"].as_array().unwrap() {
        let t = f(&snap["t_star_ms"]);
        let streams = crate::tree::snapshot(tree, t, 10_000.0).unwrap();
        let got = crate::tree::TreeStart {
            t_star_ms: Some(t),
            streams,
        };
        check_states(
            &format!("spec example t*={t}"),
            tree,
            got.t_star_ms,
            t,
            &got,
            &snap["states"],
        );
    }
    // The rows of docs/specs/session-trees.md#golden-vectors: trace_x / trace_y on their own.
    let x = TreeStream {
        conversation_id: "trace_x".into(),
        turn_ts_ms: std::vec![0.0, 60000.0, 120000.0, 300000.0, 600000.0],
        unsendable: Vec::new(),
    };
    let y = TreeStream {
        conversation_id: "trace_y".into(),
        turn_ts_ms: std::vec![1000.0, 2000.0, 5000.0, 9000.0, 11000.0, 20000.0],
        unsendable: Vec::new(),
    };
    for row in d["spec_section3"]["golden_rows"].as_array().unwrap() {
        let s = row["seed_string"].as_str().unwrap();
        let parts: Vec<&str> = s.split(':').collect();
        let (seed, trace, lane): (u64, &str, u32) = (
            parts[0].parse().unwrap(),
            parts[1],
            parts[2].parse().unwrap(),
        );
        assert_eq!(
            lane_seed(seed, trace, lane),
            row["seed_u64"].as_u64().unwrap(),
            "{s}"
        );
        let stream = if trace == "trace_x" { &x } else { &y };
        let tree = Tree {
            trace_id: trace.into(),
            streams: std::vec![stream.clone()],
            branches: Vec::new(),
        };
        for (key, lo, hi) in [
            ("ratios_0.0_1.0", 0.0, 1.0),
            ("ratios_0.25_0.75", 0.25, 0.75),
        ] {
            let p = TreeParams {
                seed,
                min_ratio: lo,
                max_ratio: hi,
                lead_cap_ms: 10_000.0,
            };
            let got = start_tree(&p, lane, &tree).unwrap();
            let w = &row[key];
            assert_eq!(got.t_star_ms, Some(f(&w["t_star_ms"])), "{s} {key}: t*");
            assert_eq!(
                Some(got.streams[0].next_turn),
                opt_u32(&w["next_turn"]),
                "{s} {key}"
            );
            assert_eq!(
                got.streams[0].offset_ms,
                f(&w["offset_ms"]),
                "{s} {key}: offset"
            );
        }
    }
}

#[test]
fn tree_markers_match_aiperf() {
    let d = doc("v1_markers.json");
    let mut n = 0;
    for row in d["spec_section6_golden"].as_array().unwrap() {
        let got = crate::agentx_v1::tree_marker(
            policy::types::Placement::FirstTurnPrefix,
            &crate::agentx_v1::TreeId {
                run_id: row["benchmark_id"].as_str().unwrap().into(),
                pass: row["pass"].as_u64().unwrap() as u32,
                lane: row["lane"].as_u64().unwrap() as u32,
                trace_id: row["trace_id"].as_str().unwrap().into(),
            },
        );
        assert_eq!(got.text, row["marker"].as_str().unwrap(), "{row}");
        n += 1;
    }
    let fields: Vec<&str> = d["grid_fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    let col = |name: &str| fields.iter().position(|x| *x == name).unwrap();
    for row in d["grid"].as_array().unwrap() {
        let get = |name: &str| &row[col(name)];
        let marker_col = fields.iter().position(|x| x.contains("marker")).unwrap();
        let got = crate::agentx_v1::tree_marker(
            policy::types::Placement::FirstTurnPrefix,
            &crate::agentx_v1::TreeId {
                run_id: get("benchmark_id").as_str().unwrap().into(),
                pass: get("pass").as_u64().unwrap() as u32,
                lane: get("lane").as_u64().unwrap() as u32,
                trace_id: get("trace_id").as_str().unwrap().into(),
            },
        );
        assert_eq!(got.text, row[marker_col].as_str().unwrap(), "{row}");
        n += 1;
    }
    for (id, base) in d["base_trace_id"].as_object().unwrap() {
        assert_eq!(
            crate::agentx_v1::base_trace_id(id),
            base.as_str().unwrap(),
            "{id}"
        );
    }
    assert!(n >= 3);
}
