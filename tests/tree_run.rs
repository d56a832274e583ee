//! Session-tree replay end to end: `agentx-host run agentx-v1.wasm` on the with-subagents fixture
//! against the simulator, checked from `records.jsonl` alone (and the trees the dataset side builds
//! from the same file): joins gate their parent turn, children of one spawn overlap, nothing sits idle
//! past the 10 s system cap, a lane's next tree waits for its tree to drain, and warmup primes with
//! 1-token requests that bring every lane to t* together.

use std::collections::{BTreeMap, HashMap};

use agentx::dataset::tree::SessionTree;
use agentx::record::{Phase, RequestRecord};
use agentx::sim::{SimConfig, Timing};

use crate::support::{fixture, Run, Sim};

const NS: u64 = 1_000_000_000;

/// The fixture's trees as the dataset side builds them.
fn trees() -> HashMap<String, SessionTree> {
    use agentx::dataset::tree::{build, NestedBasis, TreeOptions};
    use agentx::dataset::weka::{for_each_trace, SourceFiles};
    let mut traces = Vec::new();
    let files = SourceFiles::from_path(&fixture("traces-subagents-8.jsonl")).unwrap();
    for_each_trace(&files, None, |t| {
        traces.push(t);
        Ok(())
    })
    .unwrap();
    let opts = TreeOptions {
        basis: NestedBasis::infer(&traces),
        ..TreeOptions::default()
    };
    traces
        .iter()
        .map(|t| build(t, &opts).unwrap())
        .map(|t| (t.trace_id.clone(), t))
        .collect()
}

fn run_trees(url: &str, concurrency: &str, duration: &str, extra: &[&str]) -> Run {
    let corpus = fixture("traces-subagents-8.jsonl");
    let v1 = crate::scenario::dist("agentx-v1.wasm");
    let mut args = vec![
        "run",
        v1.to_str().unwrap(),
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--random-seed",
        "42",
        "--unsafe-override",
        "--concurrency",
        concurrency,
        "--benchmark-duration",
        duration,
        "--benchmark-grace-period",
        "30",
        "--stats-interval",
        "0",
    ];
    args.extend_from_slice(extra);
    Run::in_process(tempfile::tempdir().unwrap(), &args, &[])
}

/// A simulator whose responses take a little while (so requests overlap and the order of ends and
/// sends means something).
fn sim() -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: std::time::Duration::from_millis(40),
        itl: std::time::Duration::from_millis(2),
    };
    Sim::start(cfg)
}

/// The records of one runtime tree: by stream conversation id, in send order.
type TreeRecs<'a> = BTreeMap<&'a str, Vec<&'a RequestRecord>>;

/// The fixture's trees by source trace id.
type Trees = HashMap<String, SessionTree>;

/// The runtime trees of a run by their root correlation id: each tree's lane and records.
type RuntimeTrees<'a> = BTreeMap<&'a str, (u32, TreeRecs<'a>)>;

#[test]
fn a_session_tree_run_gates_joins_overlaps_children_caps_idle_and_recycles_drained_trees() {
    let sim = sim();
    let r = run_trees(&sim.url(), "4", "45", &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let manifest = r.json("run_manifest.json");
    let counts = &manifest["trees"];
    assert!(counts.is_object(), "{manifest}");
    let trees = trees();
    let (p0, p1) = (
        manifest["profiling_ns"][0].as_u64().unwrap(),
        manifest["profiling_ns"][1].as_u64().unwrap(),
    );
    records_place_their_trees(&recs, &trees);
    export_rows_name_their_source_requests(&r, &trees);

    // Warmup: primers carry max_tokens=1 and come before profiling.
    let warm: Vec<_> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    assert!(!warm.is_empty());
    assert!(warm.iter().all(|x| x.max_tokens == 1));
    assert!(
        warm.iter().all(|x| x.end_ns <= p0),
        "primers returned before profiling"
    );

    let prof: Vec<&RequestRecord> = recs
        .iter()
        .filter(|x| x.phase == Phase::Profiling)
        .collect();
    assert!(prof.len() > 40, "{} profiling records", prof.len());

    // Runtime trees by their root correlation id.
    let mut by_tree: RuntimeTrees = BTreeMap::new();
    for x in &prof {
        let t = x.tree.as_ref().unwrap();
        by_tree
            .entry(t.root_correlation_id.as_str())
            .or_insert((x.lane, BTreeMap::new()))
            .1
            .entry(x.trace_id.as_str())
            .or_default()
            .push(x);
    }
    joins_gate_and_children_overlap(&by_tree, &trees);
    no_idle_gap_past_the_system_cap(&prof, p0);
    let recycled = lanes_recycle_drained_trees(&by_tree);
    assert_eq!(counts["late_events"], 0);
    assert!(p1 > p0);

    // The summary and the manifest say what happened.
    let summary = r.summary();
    assert_eq!(summary["stop"], "completed");
    assert!(counts["trees_drained"].as_u64().unwrap() >= recycled as u64);
    assert!(counts["children_spawned"].as_u64().unwrap() > 0);
}

/// Every tree record says where it sits.
fn records_place_their_trees(recs: &[RequestRecord], trees: &Trees) {
    for x in recs {
        let t = x.tree.as_ref().expect("tree fields on every record");
        assert!(
            trees.contains_key(&t.source_trace_id),
            "{}",
            t.source_trace_id
        );
        assert_eq!(t.agent_depth == 0, x.trace_id == t.source_trace_id);
        assert_eq!(t.parent_correlation_id.is_some(), t.agent_depth > 0);
    }
}

/// profile_export.jsonl gives every row its turn's source request, as aiperf's Weka loader
/// (agentx-harness 1.0.12, aiperf/workers/worker.py:1465-1485; dataset/loader/weka_trace.py:1683,
/// 1985-1986, 2080): root and flat turns their top-level index (inner null), subagent turns their
/// marker's index and their index among its requests.
fn export_rows_name_their_source_requests(r: &Run, trees: &Trees) {
    let export = std::fs::read_to_string(r.artifacts().join("profile_export.jsonl")).unwrap();
    let (mut rows, mut nested) = (0, 0);
    for l in export.lines() {
        let md = &serde_json::from_str::<serde_json::Value>(l).unwrap()["metadata"];
        let tree = &trees[md["source_trace_id"].as_str().unwrap()];
        let conv = md["conversation_id"].as_str().unwrap();
        let stream = tree.streams.iter().find(|s| s.id == conv).unwrap();
        let turn = &stream.turns[md["turn_index"].as_u64().unwrap() as usize];
        assert_eq!(md["source_outer_idx"], turn.source_outer_idx, "{md}");
        assert_eq!(
            md["source_inner_idx"].as_u64(),
            turn.source_inner_idx.map(u64::from),
            "{md}"
        );
        assert_eq!(
            md["source_inner_idx"].is_null(),
            md["source_kind"] != "weka_subagent",
            "{md}"
        );
        rows += 1;
        nested += usize::from(turn.source_inner_idx.is_some());
    }
    assert!(
        rows > 40 && nested > 0,
        "{rows} rows, {nested} of subagents"
    );
}

/// Joins: a root turn that joins a branch is sent only after the last response of every child of
/// that branch (in the same runtime tree) ended. Children of one spawn run at the same time.
fn joins_gate_and_children_overlap(by_tree: &RuntimeTrees, trees: &Trees) {
    let mut joins_checked = 0;
    let mut overlaps = 0;
    for (lane, streams) in by_tree.values() {
        let any = streams.values().next().unwrap()[0];
        let tree = &trees[&any.tree.as_ref().unwrap().source_trace_id];
        let root = &tree.streams[0];
        for rr in streams.get(root.id.as_str()).into_iter().flatten() {
            if rr.cancelled {
                continue;
            }
            for &b in &root.turns[rr.turn as usize].joins {
                for &c in &tree.branches[b].children {
                    let Some(kids) = streams.get(tree.streams[c].id.as_str()) else {
                        continue;
                    };
                    let last_end = kids.iter().map(|k| k.end_ns).max().unwrap();
                    assert!(
                        rr.send_ns >= last_end,
                        "lane {lane}: {} turn {} sent at {} before child {} ended at {last_end}",
                        root.id,
                        rr.turn,
                        rr.send_ns,
                        tree.streams[c].id
                    );
                    joins_checked += 1;
                }
            }
        }
        overlaps += overlapping_spawns(tree, streams);
    }
    assert!(joins_checked > 0, "no join was exercised");
    assert!(overlaps > 0, "no spawn with two children ran");
}

/// Children of one spawn run at the same time (spawns of this replay: every child's first record
/// is its turn 0; a tree resumed at t* may hold children with one turn left each, which the
/// recording's offsets keep apart); the number of spawns with two children or more checked.
fn overlapping_spawns(tree: &SessionTree, streams: &TreeRecs) -> usize {
    let mut overlaps = 0;
    for br in &tree.branches {
        let kids: Vec<_> = br
            .children
            .iter()
            .filter_map(|&c| streams.get(tree.streams[c].id.as_str()))
            .collect();
        if kids.len() < br.children.len() || kids.iter().any(|v| v[0].turn != 0) {
            continue;
        }
        let spans: Vec<(u64, u64)> = kids
            .iter()
            .map(|v| {
                (
                    v.iter().map(|x| x.send_ns).min().unwrap(),
                    v.iter().map(|x| x.end_ns).max().unwrap(),
                )
            })
            .collect();
        if spans.len() >= 2 {
            for (i, a) in spans.iter().enumerate() {
                let with_sibling = spans
                    .iter()
                    .enumerate()
                    .any(|(j, b)| i != j && a.0 < b.1 && b.0 < a.1);
                assert!(with_sibling, "a child of {} runs alone: {spans:?}", br.id);
            }
            overlaps += 1;
        }
    }
    overlaps
}

/// No gap with nothing in flight exceeds the 10 s system idle cap (measured over profiling, which
/// starts at `p0`).
fn no_idle_gap_past_the_system_cap(prof: &[&RequestRecord], p0: u64) {
    let mut spans: Vec<(u64, u64)> = prof.iter().map(|x| (x.send_ns, x.end_ns)).collect();
    spans.sort_unstable();
    let mut reach = p0;
    let mut worst = 0u64;
    for (a, b) in &spans {
        if *a > reach {
            worst = worst.max(a - reach);
        }
        reach = reach.max(*b);
    }
    assert!(
        worst <= 10 * NS + NS / 2,
        "an idle gap of {:.2} s",
        worst as f64 / 1e9
    );
}

/// A lane's next tree starts only after its previous tree drained; the number of such hand-overs.
fn lanes_recycle_drained_trees(by_tree: &RuntimeTrees) -> usize {
    let mut lanes: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for (lane, streams) in by_tree.values() {
        let all = streams.values().flatten();
        let first = all.clone().map(|x| x.send_ns).min().unwrap();
        let last = all.map(|x| x.end_ns).max().unwrap();
        lanes.entry(*lane).or_default().push((first, last));
    }
    let mut recycled = 0;
    for (lane, mut v) in lanes {
        v.sort_unstable();
        for w in v.windows(2) {
            assert!(
                w[1].0 >= w[0].1,
                "lane {lane}: a tree started at {} before the previous one drained at {}",
                w[1].0,
                w[0].1
            );
            recycled += 1;
        }
    }
    assert!(recycled > 0, "no lane recycled within the run");
    recycled
}

/// Warmup primers are spread so that every lane reaches t* together: each lane's first profiling
/// request is due at its own earliest offset past the run's T0, so lanes whose earliest stream is at
/// T0 all start within a few milliseconds of the profiling start.
#[test]
fn warmup_primes_with_one_token_and_lanes_start_profiling_together() {
    let sim = sim();
    let r = run_trees(&sim.url(), "8", "5", &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let manifest = r.json("run_manifest.json");
    let p0 = manifest["profiling_ns"][0].as_u64().unwrap();
    let lanes = manifest["lanes"].as_array().unwrap();
    let recs = r.records();
    let warm: Vec<_> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    let primers: usize = lanes
        .iter()
        .flat_map(|l| l["streams"].as_array().unwrap())
        .filter(|s| !s["warm_turn"].is_null())
        .count();
    assert_eq!(
        warm.len(),
        primers,
        "one primer per alive stream with a warm turn"
    );
    assert!(warm.iter().all(|x| x.max_tokens == 1 && x.error.is_none()));
    // Primers fire at (largest lead - own lead) after the warmup's start.
    let max_lead = lanes
        .iter()
        .flat_map(|l| l["streams"].as_array().unwrap())
        .filter(|s| !s["warm_turn"].is_null())
        .map(|s| s["lead_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let w0 = warm.iter().map(|x| x.intended_ns).min().unwrap();
    for x in &warm {
        let lane = &lanes[x.lane as usize];
        let s = lane["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["conversation_id"] == x.trace_id.as_str())
            .unwrap();
        let want = (max_lead - s["lead_ms"].as_f64().unwrap()) * 1e6;
        let got = (x.intended_ns - w0) as f64;
        assert!(
            (got - want).abs() < 5e6,
            "{}: primer at {got} ns, want {want}",
            x.trace_id
        );
    }
    let t0 = lanes
        .iter()
        .flat_map(|l| l["streams"].as_array().unwrap())
        .filter(|s| s["waiting"] == false)
        .map(|s| s["offset_ms"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let mut at_t0 = Vec::new();
    for l in lanes {
        let lane = l["lane"].as_u64().unwrap() as u32;
        let own = l["streams"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["waiting"] == false)
            .map(|s| s["offset_ms"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min);
        let first = recs
            .iter()
            .filter(|x| x.phase == Phase::Profiling && x.lane == lane)
            .map(|x| x.intended_ns)
            .min();
        let Some(first) = first else { continue };
        if own - t0 > 2_000.0 {
            // Later starts may move earlier under the system idle cap.
            continue;
        }
        let due = (own - t0) * 1e6;
        let got = (first - p0) as f64;
        assert!(
            (got - due).abs() < 50e6,
            "lane {lane}: first profiling request due {due} ns after the start, sent at {got}"
        );
        if own == t0 {
            at_t0.push(first);
        }
    }
    assert!(!at_t0.is_empty());
    let spread = at_t0.iter().max().unwrap() - at_t0.iter().min().unwrap();
    assert!(spread < 20_000_000, "lanes at T0 started {spread} ns apart");
}

/// `--warmup-requests-per-lane N`: after the primers each lane sends N more 1-token requests (the
/// cache-pressure stage), then profiling resumes every stream where the stage left it.
#[test]
fn the_cache_pressure_stage_sends_n_requests_per_lane_then_hands_off() {
    let sim = sim();
    let r = run_trees(&sim.url(), "4", "4", &["--warmup-requests-per-lane", "3"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let manifest = r.json("run_manifest.json");
    let lanes = manifest["lanes"].as_array().unwrap();
    let primers = lanes
        .iter()
        .flat_map(|l| l["streams"].as_array().unwrap())
        .filter(|s| !s["warm_turn"].is_null())
        .count();
    let recs = r.records();
    let warm: Vec<_> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    assert_eq!(warm.len(), primers + 3 * 4, "primers plus 3 per lane");
    assert!(warm.iter().all(|x| x.max_tokens == 1));
    for lane in 0..4 {
        assert_eq!(
            warm.iter().filter(|x| x.lane == lane).count()
                - lanes[lane as usize]["streams"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|s| !s["warm_turn"].is_null())
                    .count(),
            3,
            "lane {lane}"
        );
    }
    assert_eq!(manifest["trees"]["pressure_requests"], 12);
    assert!(
        !manifest["not_acted_on"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w
                .as_str()
                .unwrap()
                .starts_with("--warmup-requests-per-lane")),
        "acted on with a session-tree scenario"
    );
    let p0 = manifest["profiling_ns"][0].as_u64().unwrap();
    assert!(warm.iter().all(|x| x.end_ns <= p0));
    assert!(recs
        .iter()
        .any(|x| x.phase == Phase::Profiling && x.error.is_none()));
}

/// `--trace-idle-gap-cap-seconds 1`: within one tree, nothing waits more than a second with none of
/// the tree's requests in flight (measured from the records).
#[test]
fn the_trace_idle_cap_bounds_every_trees_idle_gaps() {
    let sim = sim();
    let r = run_trees(
        &sim.url(),
        "3",
        "15",
        &["--trace-idle-gap-cap-seconds", "1"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let mut by_tree: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for x in recs.iter().filter(|x| x.phase == Phase::Profiling) {
        by_tree
            .entry(x.tree.as_ref().unwrap().root_correlation_id.as_str())
            .or_default()
            .push((x.send_ns, x.end_ns));
    }
    let mut worst = 0u64;
    for spans in by_tree.values_mut() {
        spans.sort_unstable();
        let mut reach = spans[0].1;
        for (a, b) in spans.iter().skip(1) {
            worst = worst.max(a.saturating_sub(reach));
            reach = reach.max(*b);
        }
    }
    assert!(
        worst <= NS + NS / 5,
        "a tree sat idle for {:.3} s",
        worst as f64 / 1e9
    );
    let manifest = r.json("run_manifest.json");
    assert!(manifest["trees"]["tree_idle_shifts"].as_u64().unwrap() > 0);
}

/// A hand-written corpus of awkward trees: a subagent that outlives its root (no join ever comes:
/// it runs in the background and holds the lane until it ends), a subagent without requests (done at
/// once, its join does not wait), and, with the absolute nested-timestamp basis, a nested request
/// recorded before its marker (it cannot be placed: a clear error naming the trace).
#[test]
fn awkward_trees_replay_and_unplaceable_timestamps_are_refused() {
    let req = |t: f64, ids: &[u32], api: f64| {
        serde_json::json!({"t": t, "type": "n", "model": "m", "in": ids.len() * 64, "out": 40,
            "hash_ids": ids, "input_types": ["tool_result"], "output_types": ["text"],
            "stop": "tool_use", "api_time": api})
    };
    let ids = |n: u32, base: u32| (base..base + n).collect::<Vec<u32>>();
    let bg = serde_json::json!({"id": "bg", "models": ["m"], "block_size": 64, "hash_id_scope": "local", "tool_tokens": 0,
    "system_tokens": 0, "requests": [
        req(0.0, &ids(4, 1), 0.5),
        {"t": 1.0, "type": "subagent", "agent_id": "late", "duration_ms": 20000,
         "requests": [req(1.0, &ids(3, 100), 0.5), req(4.0, &ids(5, 100), 0.5), req(12.0, &ids(7, 100), 0.5)]},
        req(2.0, &ids(6, 1), 0.5),
        req(3.0, &ids(8, 1), 0.5),
    ]});
    let empty = serde_json::json!({"id": "empty", "models": ["m"], "block_size": 64, "hash_id_scope": "local", "tool_tokens": 0,
    "system_tokens": 0, "requests": [
        req(0.0, &ids(4, 1), 0.5),
        {"t": 1.0, "type": "subagent", "agent_id": "nothing", "duration_ms": 500, "requests": []},
        req(2.0, &ids(6, 1), 0.5),
        req(4.0, &ids(8, 1), 0.5),
    ]});
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("awkward.jsonl");
    std::fs::write(&corpus, format!("{bg}\n{empty}\n")).unwrap();
    let sim = sim();
    let v1 = crate::scenario::dist("agentx-v1.wasm");
    let base = |extra: &[&str]| {
        let mut a: Vec<String> = [
            "run",
            v1.to_str().unwrap(),
            "--url",
            &sim.url(),
            "--model",
            "agentx-sim",
            "--input-file",
            corpus.to_str().unwrap(),
            "--random-seed",
            "7",
            "--unsafe-override",
            "--concurrency",
            "2",
            "--benchmark-duration",
            "12",
            "--benchmark-grace-period",
            "30",
            "--stats-interval",
            "0",
        ]
        .map(str::to_owned)
        .to_vec();
        a.extend(extra.iter().map(std::string::ToString::to_string));
        a
    };
    let r = Run::in_process(tempfile::tempdir().unwrap(), &base(&[]), &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let prof: Vec<_> = recs
        .iter()
        .filter(|x| x.phase == Phase::Profiling && !x.cancelled)
        .collect();
    // The background child's requests run past its root's last turn, and its tree's lane takes its
    // next tree only after them.
    let mut trees: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for x in &prof {
        trees
            .entry(x.tree.as_ref().unwrap().root_correlation_id.as_str())
            .or_default()
            .push(x);
    }
    let mut outlived = 0;
    for v in trees.values() {
        let root_end = v
            .iter()
            .filter(|x| x.trace_id == "bg")
            .map(|x| x.end_ns)
            .max();
        let child_end = v
            .iter()
            .filter(|x| x.trace_id == "bg::sa:late")
            .map(|x| x.end_ns)
            .max();
        if let (Some(a), Some(b)) = (root_end, child_end) {
            if b > a {
                outlived += 1;
            }
        }
    }
    assert!(outlived > 0, "no background child outlived its root");
    // The empty subagent never holds its join: no record of it, and the root went on.
    assert!(!recs.iter().any(|x| x.trace_id.starts_with("empty::")));
    assert!(prof.iter().any(|x| x.trace_id == "empty" && x.turn >= 1));
    let manifest = r.json("run_manifest.json");
    assert_eq!(manifest["trees"]["late_events"], 0);

    // A nested request before its marker cannot be placed on the root clock (absolute basis).
    let mut early = bg.clone();
    early["id"] = "early".into();
    early["requests"][1]["requests"][0]["t"] = 0.2.into();
    let bad = dir.path().join("early.jsonl");
    std::fs::write(&bad, format!("{early}\n")).unwrap();
    let mut args = base(&["--weka-nested-timestamp-basis", "absolute"]);
    let i = args.iter().position(|a| a == "--input-file").unwrap();
    args[i + 1] = bad.to_str().unwrap().to_string();
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(r.stderr().contains("trace \"early\""), "{}", r.stderr());
    assert!(
        !r.artifacts().join("records.jsonl").exists(),
        "nothing sent"
    );
    assert!(
        r.stderr().contains("cannot be placed on the root clock"),
        "{}",
        r.stderr()
    );
}

/// A root turn whose return is a context overflow before its last turn ends the tree, and the
/// branch due at that return is not started: aiperf skips the branch orchestrator's `intercept` (the
/// at-return spawn) when `overflow_terminal` (not the final turn, an error, the overflow
/// classifier) holds (agentx-harness 1.0.12, aiperf/credit/callback_handler.py:438-460;
/// aiperf 0.13.0.dev20261023, credit/callback_handler.py:478-501). Two traces alike but for root
/// turn 1's prompt: in `dies` it overflows the simulator's context, in `lives` it fits; both spawn
/// subagent `kid` at turn 1's return (its branch starts after the turn's recorded end).
#[test]
fn a_root_turn_that_overflows_spawns_no_branch_at_its_return() {
    let req = |t: f64, ids: &[u32], api: f64| {
        serde_json::json!({"t": t, "type": "n", "model": "m", "in": ids.len() * 64, "out": 40,
            "hash_ids": ids, "input_types": ["tool_result"], "output_types": ["text"],
            "stop": "tool_use", "api_time": api})
    };
    let ids = |n: u32, base: u32| (base..base + n).collect::<Vec<u32>>();
    let trace = |id: &str, turn1_blocks: u32| {
        serde_json::json!({"id": id, "models": ["m"], "block_size": 64, "hash_id_scope": "local",
        "tool_tokens": 0, "system_tokens": 0, "requests": [
            req(0.0, &ids(4, 1), 0.5),
            req(1.0, &ids(turn1_blocks, 1), 0.5),
            {"t": 2.0, "type": "subagent", "agent_id": "kid", "duration_ms": 2000,
             "requests": [req(2.0, &ids(3, 100), 0.5), req(3.0, &ids(5, 100), 0.5)]},
            req(5.0, &ids(turn1_blocks + 2, 1), 0.5),
        ]})
    };
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("overflow.jsonl");
    let (dies, lives) = (trace("dies", 40), trace("lives", 6));
    std::fs::write(&corpus, format!("{dies}\n{lives}\n")).unwrap();
    // Root turn 1 of `dies` is ~2,560 prompt tokens; everything else stays under ~600.
    let mut cfg = SimConfig::max();
    cfg.max_model_len = 1_500;
    cfg.timing = Timing::Fixed {
        ttft: std::time::Duration::from_millis(20),
        itl: std::time::Duration::from_millis(1),
    };
    let sim = Sim::start(cfg);
    let v1 = crate::scenario::dist("agentx-v1.wasm");
    let url = sim.url();
    let args = [
        "run",
        v1.to_str().unwrap(),
        "--url",
        &url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--random-seed",
        "3",
        "--unsafe-override",
        "--trajectory-start-min-ratio",
        "0",
        "--trajectory-start-max-ratio",
        "0",
        "--concurrency",
        "2",
        "--benchmark-duration",
        "6",
        "--benchmark-grace-period",
        "30",
        "--stats-interval",
        "0",
    ];
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let overflowed: Vec<_> = recs
        .iter()
        .filter(|x| x.trace_id == "dies" && x.context_overflow)
        .collect();
    assert!(!overflowed.is_empty(), "root turn 1 of `dies` overflows");
    assert!(overflowed.iter().all(|x| x.turn == 1));
    assert!(
        !recs.iter().any(|x| x.trace_id == "dies" && x.turn > 1),
        "the overflow ends the root"
    );
    assert!(
        !recs.iter().any(|x| x.trace_id == "dies::sa:kid"),
        "a branch of an overflowed root turn ran"
    );
    // The same branch of the turn that fits runs; only those turns spawned.
    assert!(
        recs.iter().any(|x| x.trace_id == "lives::sa:kid"),
        "the spawn of `lives` ran"
    );
    let lives_turn1 = recs
        .iter()
        .filter(|x| x.trace_id == "lives" && x.turn == 1)
        .count() as u64;
    let spawned = r.json("run_manifest.json")["trees"]["children_spawned"]
        .as_u64()
        .unwrap();
    assert!(
        (1..=lives_turn1).contains(&spawned),
        "{spawned} children spawned, {lives_turn1} turns of `lives` could spawn"
    );
}

/// The single-stream replay's guarantees hold for trees: the failed-request threshold stops the run
/// with its records kept, and an interrupt drains, keeps every record streamed so far, and exits 1.
#[cfg(unix)]
#[test]
fn session_trees_keep_the_threshold_and_the_interrupt() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::process::Stdio;
    use std::time::Duration;

    let mut cfg = SimConfig::max();
    cfg.faults = agentx::sim::Faults {
        seed: 7,
        fail_rate: 0.5,
        ..agentx::sim::Faults::default()
    };
    let sim = Sim::start(cfg);
    let mut tripped = false;
    for attempt in 0..8 {
        let id = format!("attempt{attempt}");
        let r = run_trees(
            &sim.url(),
            "2",
            "30",
            &["--run-id", &id, "--failed-request-threshold", "0.05"],
        );
        assert_eq!(r.code(), 1, "{}", r.stderr());
        assert!(!r.records().is_empty(), "records kept");
        if r.stderr().contains("warmup failed") {
            // A root primer failed: the run aborts before profiling (as aiperf), records kept.
            continue;
        }
        assert!(
            r.stderr()
                .contains("--failed-request-threshold 0.05 exceeded"),
            "{}",
            r.stderr()
        );
        assert_eq!(r.summary()["stop"], "failed_request_threshold_exceeded");
        tripped = true;
        break;
    }
    assert!(tripped, "eight warmups in a row failed");

    let sim = self::sim();
    let corpus = fixture("traces-subagents-8.jsonl");
    let v1 = crate::scenario::dist("agentx-v1.wasm");
    let dir = tempfile::tempdir().unwrap();
    let url = sim.url();
    let child = crate::support::agentx_command(dir.path(), &[])
        .args([
            "run",
            v1.to_str().unwrap(),
            "--url",
            &url,
            "--model",
            "agentx-sim",
            "--input-file",
            corpus.to_str().unwrap(),
            "--unsafe-override",
            "--concurrency",
            "3",
            "--benchmark-duration",
            "600",
            "--stats-interval",
            "0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let records = dir.path().join("artifacts/latest/records.jsonl");
    // Wait until records are on disk (written as they complete, before the run ends).
    crate::support::wait_for_records(&records, 12, Duration::from_secs(90));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let recs = agentx::record::read_records(&records).unwrap();
    assert!(recs.len() >= 12);
    let s: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("artifacts/latest/run_summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(s["stop"], "interrupted");
}

/// `--goodput` in a tree replay: a session is a whole tree (its root stream and every subagent),
/// each with its slowdown against the recorded trace.
#[test]
fn goodput_counts_trees_as_sessions() {
    let sim = sim();
    let r = run_trees(
        &sim.url(),
        "2",
        "4",
        &["--goodput", "ttft:10000", "--session-goodput-share", "0.5"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let records = r.records();
    let prof: Vec<&RequestRecord> = records
        .iter()
        .filter(|x| x.phase == Phase::Profiling && !x.context_overflow)
        .collect();
    let trees: std::collections::HashSet<&str> = prof
        .iter()
        .map(|x| x.tree.as_ref().unwrap().root_correlation_id.as_str())
        .collect();
    let streams: std::collections::HashSet<&str> =
        prof.iter().map(|x| x.correlation_id.as_str()).collect();
    assert!(
        streams.len() > trees.len(),
        "the fixture's trees have subagents"
    );
    let x = &r.summary()["summary"]["sessions"];
    assert_eq!(x["sessions"], trees.len(), "{x}");
    assert_eq!(x["share"], 0.5);
    assert!(x["slowdown"]["count"].as_u64().unwrap() > 0, "{x}");
}

/// Jobs: the count run_summary.json gives equals the count this test makes from records.jsonl and
/// the fixture's trees by the rule written out here (every stream with turns sent from turn 0 to
/// its last, all in profiling, none cancelled, overflowed or failed); the lanes' first trees (t*)
/// and the trees the window cut are partial, never jobs.
#[test]
fn jobs_are_the_trees_replayed_whole_inside_the_window() {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: std::time::Duration::from_millis(5),
        itl: std::time::Duration::ZERO,
    };
    let sim = Sim::start(cfg);
    let r = run_trees(
        &sim.url(),
        "2",
        "6",
        &["--trace-idle-gap-cap-seconds", "0.05", "--gpus", "2"],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let records = r.records();
    let trees = trees();
    let mut runtime: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for x in &records {
        runtime.entry(x.session_root()).or_default().push(x);
    }
    // A tree wholly in warmup is no part of the window.
    runtime.retain(|_, tree_records| tree_records.iter().any(|x| x.phase == Phase::Profiling));
    let whole = runtime
        .values()
        .filter(|tree_records| {
            let source = &tree_records[0].tree.as_ref().unwrap().source_trace_id;
            let shape = &trees[source];
            let clean = tree_records.iter().all(|x| {
                x.phase == Phase::Profiling
                    && !x.cancelled
                    && !x.context_overflow
                    && x.error.is_none()
            });
            let every_turn = shape.streams.iter().all(|stream| {
                (0..stream.turns.len() as u32).all(|turn| {
                    tree_records
                        .iter()
                        .any(|x| x.trace_id == stream.id && x.turn == turn)
                })
            });
            clean && every_turn
        })
        .count() as u64;
    let jobs = &r.summary()["summary"]["jobs"];
    assert_eq!(jobs["ok"], whole, "{jobs}");
    assert!(whole > 0, "no tree ran whole in the window: {jobs}");
    // Each lane's first tree began at t*, before the window.
    assert!(jobs["partial_start"].as_u64().unwrap() >= 2, "{jobs}");
    let counted = [
        "ok",
        "with_errors",
        "partial_start",
        "partial_end",
        "ended_early",
    ]
    .iter()
    .map(|k| jobs[k].as_u64().unwrap())
    .sum::<u64>();
    assert_eq!(
        counted,
        runtime.len() as u64,
        "every tree in one class: {jobs}"
    );
    let window_s = jobs["window_s"].as_f64().unwrap();
    let per_hour = jobs["jobs_per_hour"].as_f64().unwrap();
    assert!(
        (per_hour - 3600.0 * whole as f64 / window_s).abs() < 1e-6,
        "{jobs}"
    );
    assert_eq!(
        jobs["jobs_per_hour_per_gpu"].as_f64().unwrap(),
        per_hour / 2.0
    );
    assert_eq!(
        jobs["jobs_per_hour_per_lane"].as_f64().unwrap(),
        per_hour / 2.0
    );
    assert!(
        r.stdout().contains(&format!("jobs          {whole} whole")),
        "{}",
        r.stdout()
    );
}
