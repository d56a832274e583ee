//! The `agentx:scenario@0.2.0` world end to end: the bundled `agentx-v1.wasm` loaded by hash and
//! called through wasmtime (its answers equal aiperf 0.13's vectors), the 0.1.0 components beside it
//! unchanged, and each world refusing the other's calls with a clear error.

use agentx::scenario::types::{Placement, Setting, Value};
use agentx::scenario::types_v2::{
    Branch, DelayParams, Tree, TreeId, TreeParams, TreeStream, TurnTimes,
};
use agentx::scenario::{ScenarioError, World};

use crate::scenario::load;
use crate::support::Run;

fn stream(id: &str, ts: &[f64]) -> TreeStream {
    TreeStream {
        conversation_id: id.into(),
        turn_ts_ms: ts.to_vec(),
        unsendable: Vec::new(),
    }
}

fn set(name: &str, value: Value) -> Setting {
    Setting {
        name: name.into(),
        value,
        explicit: true,
    }
}

#[test]
fn agentx_v1_answers_through_the_0_2_world() {
    let sc = load("agentx-v1.wasm");
    assert_eq!(sc.world(), World::V0_2);
    assert_eq!(load("agentx-mvp.wasm").world(), World::V0_1);
    assert_eq!(load("kvct-v01.wasm").world(), World::V0_1);
    let mut instance = sc.instantiate().unwrap();
    assert_eq!(instance.describe().unwrap().name, "inferencex-agentx-v1");
    let resolved = instance
        .resolve(
            &[
                set("concurrency", Value::Integers(vec![8])),
                set(
                    "public-dataset",
                    Value::Text("semianalysis_cc_traces_weka_062126".into()),
                ),
                set("random-seed", Value::Integer(42)),
            ],
            1,
        )
        .unwrap()
        .unwrap();
    assert!(
        resolved.invalid_reasons.is_empty(),
        "{:?}",
        resolved.invalid_reasons
    );
    let rules = instance.rules(&resolved.settings).unwrap();
    assert_eq!(rules.system_idle_cap_seconds, Some(10.0));
    assert_eq!(rules.warmup_max_tokens, 1);

    // docs/specs/session-trees.md#golden-vectors: seed 42, trace_x, lane 0, ratios 0/1.
    let x = Tree {
        trace_id: "trace_x".into(),
        streams: vec![stream(
            "trace_x",
            &[0.0, 60000.0, 120000.0, 300000.0, 600000.0],
        )],
        branches: vec![],
    };
    let p = TreeParams {
        seed: 42,
        min_ratio: 0.0,
        max_ratio: 1.0,
        lead_cap_ms: 10_000.0,
    };
    let st = instance.start_tree(p, 0, &x).unwrap().unwrap();
    assert_eq!(st.t_star_ms, Some(258193.74924743973));
    assert_eq!(st.streams[0].next_turn, 3);
    assert_eq!(st.streams[0].warm_turn, Some(2));
    assert_eq!(st.streams[0].offset_ms, 41806.25075256027);
    assert_eq!(
        st.streams[0].lead_ms, 10_000.0,
        "capped at the system idle cap"
    );

    // The worked example (docs/specs/session-trees.md#worked-example) at t* = 30000 (ratios
    // pinned): the root waits on its child's join.
    let tree = Tree {
        trace_id: "ex".into(),
        streams: vec![
            stream("ex", &[0.0, 10000.0, 50000.0]),
            stream("ex::sa:c", &[5000.0, 20000.0, 40000.0]),
        ],
        branches: vec![Branch {
            branch_id: "ex:spawn:c".into(),
            children: vec![1],
            start_ms: Some(5000.0),
            spawn_turn: Some(0),
            join_turn: Some(2),
        }],
    };
    let pinned = TreeParams {
        min_ratio: 0.6,
        max_ratio: 0.6,
        ..p
    };
    let st = instance.start_tree(pinned, 0, &tree).unwrap().unwrap();
    assert_eq!(st.t_star_ms, Some(30000.0));
    let got: Vec<(u32, u32, bool)> = st
        .streams
        .iter()
        .map(|s| (s.index, s.next_turn, s.waiting))
        .collect();
    assert_eq!(got, vec![(0, 2, true), (1, 2, false)]);

    // One marker per tree (docs/specs/session-trees.md#cache-bust-marker).
    let m = instance
        .cache_bust_tree(
            Placement::FirstTurnPrefix,
            &TreeId {
                run_id: "00000000-0000-0000-0000-000000000000".into(),
                pass: 0,
                lane: 0,
                trace_id: "trace_x::sa:agent_001".into(),
            },
        )
        .unwrap();
    assert_eq!(m.text, "[rid:5a1c9f04290b]\n\n");
    let d = instance
        .tree_turn_delay(
            DelayParams {
                think_time_only: false,
                cap_seconds: None,
            },
            TurnTimes {
                ts_ms: 10_000.0,
                prev_ts_ms: 6_000.0,
                prev_api_ms: Some(-500.0),
                think_time_ms: None,
            },
        )
        .unwrap();
    assert_eq!(d, 4_500.0);
}

#[test]
fn each_world_refuses_the_other_worlds_calls() {
    let mut v1 = load("agentx-v1.wasm").instantiate().unwrap();
    let e = v1
        .start_turn(
            agentx::scenario::types::StartParams {
                seed: 1,
                min_ratio: 0.0,
                max_ratio: 0.7,
            },
            &agentx::scenario::types::Trajectory {
                trace_id: "t".into(),
                num_turns: 5,
                unsendable: vec![],
            },
        )
        .unwrap_err();
    assert!(matches!(e, ScenarioError::WrongWorld { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("implements agentx:scenario@0.2.0 (session trees), which has no `start-turn`"),
        "{msg}"
    );
    // The instance still answers afterwards.
    assert!(v1.describe().is_ok());

    let mut mvp = load("agentx-mvp.wasm").instantiate().unwrap();
    let e = mvp
        .start_tree(
            TreeParams {
                seed: 1,
                min_ratio: 0.0,
                max_ratio: 1.0,
                lead_cap_ms: 10_000.0,
            },
            0,
            &Tree {
                trace_id: "t".into(),
                streams: vec![stream("t", &[0.0, 1.0])],
                branches: vec![],
            },
        )
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "implements agentx:scenario@0.1.0 (single-stream sessions), which has no `start-tree`"
        ),
        "{e}"
    );

    // The demo run (built-in simulator, bundled corpus) replays with the session-tree scheduler
    // when named by path.
    let r = Run::in_process(
        tempfile::tempdir().unwrap(),
        &[
            "run",
            crate::scenario::dist("agentx-v1.wasm").to_str().unwrap(),
            "--benchmark-duration",
            "3",
            "--stats-interval",
            "0",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    assert!(recs.iter().all(|x| x.tree.is_some()));
    assert!(recs
        .iter()
        .any(|x| x.phase == agentx::record::Phase::Profiling && x.error.is_none()));
}

/// `run --dry-run --json` with agentx-v1 on the with-subagents fixture plans what aiperf 0.13 plans
/// for the same seed, concurrency and benchmark id: per lane the trace, t*, the alive streams with
/// their next and warm turns and offsets, the tree's marker, and the warmup spread (each primer's
/// delay is the largest lead minus its own).
#[test]
fn the_dry_run_of_agentx_v1_is_aiperfs_plan() {
    let fixture = crate::support::fixture("traces-subagents-8.jsonl");
    let r = Run::in_process(
        tempfile::tempdir().unwrap(),
        &[
            "run",
            crate::scenario::dist("agentx-v1.wasm").to_str().unwrap(),
            "--input-file",
            fixture.to_str().unwrap(),
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--concurrency",
            "8",
            "--random-seed",
            "42",
            "--run-id",
            "00000000-0000-0000-0000-000000000000",
            "--unsafe-override",
            "--dry-run",
            "--json",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(plan["scenario"]["world"], "agentx:scenario@0.2.0");
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::support::fixture("golden/v1_tstar.json")).unwrap(),
    )
    .unwrap();
    let run = golden["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["corpus"] == "subagents8"
                && r["seed"] == 42
                && r["concurrency"] == 8
                && r["min_ratio"] == 0.0
        })
        .unwrap();
    let lanes = plan["lanes"].as_array().unwrap();
    let want = run["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), want.len());
    for (g, w) in lanes.iter().zip(want) {
        let what = format!("lane {}", w["lane"]);
        assert_eq!(g["trace_id"], w["trace_id"], "{what}");
        assert_eq!(g["t_star_ms"], w["t_star_ms"], "{what}");
        let gs = g["streams"].as_array().unwrap();
        let ws = w["states"].as_array().unwrap();
        assert_eq!(gs.len(), ws.len(), "{what}");
        for (a, b) in gs.iter().zip(ws) {
            for (k, j) in [
                ("conversation_id", "conversation_id"),
                ("next_turn", "next_turn"),
                ("warm_turn", "warm_turn"),
                ("offset_ms", "offset_ms"),
                ("waiting", "waiting_on_children"),
            ] {
                assert_eq!(a[k], b[j], "{what} {}: {k}", b["conversation_id"]);
            }
        }
    }
    // Markers and the warmup spread, against aiperf's own warmup dispatch.
    let max_lead = lanes
        .iter()
        .flat_map(|l| l["streams"].as_array().unwrap())
        .filter(|s| !s["warm_turn"].is_null())
        .map(|s| s["lead_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let events = run["spread"]["warmup_events"].as_array().unwrap();
    assert!(!events.is_empty());
    for e in events {
        let root = e["root_correlation_id"].as_str().unwrap();
        let lane: usize = root[1..root.find(':').unwrap()].parse().unwrap();
        let l = &lanes[lane];
        assert_eq!(l["marker"], e["cache_bust_marker"], "lane {lane}");
        let s = l["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["conversation_id"] == e["conversation_id"])
            .unwrap();
        assert_eq!(s["warm_turn"], e["turn_index"], "lane {lane}");
        let delay = (max_lead - s["lead_ms"].as_f64().unwrap()) / 1000.0;
        assert!(
            (delay - e["delay_s"].as_f64().unwrap()).abs() < 1e-9,
            "lane {lane} {}: primer at {delay} s, aiperf {}",
            e["conversation_id"],
            e["delay_s"]
        );
    }
}
