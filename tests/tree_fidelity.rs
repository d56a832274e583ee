//! Session-tree replay fidelity against the reference (docs/agentx-v1-reference.md): what each
//! request carries, the warmup's cache-pressure stage, a panicking request task and a branch alive
//! at t* whose spawn turn is still ahead. End to end, `agentx-host run agentx-v1.wasm` against the
//! simulator, checked from the records.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use agentx::record::{Phase, RequestRecord};
use agentx::sim::{SimConfig, Timing};
use serde_json::{json, Value};

use crate::support::{fixture, Run, Sim};

fn sim_with(ttft_ms: u64, max_model_len: Option<u64>) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(1),
    };
    if let Some(n) = max_model_len {
        cfg.max_model_len = n;
    }
    Sim::start(cfg)
}

/// `agentx-host run agentx-v1.wasm` on `corpus` with seed 42, a 30 s grace and no progress lines;
/// `extra` adds the rest.
fn run_v1(url: &str, corpus: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Run {
    run_component("agentx-v1.wasm", url, corpus, extra, env)
}

/// `agentx-host run` of the bundled component `file` (agentx-v1's flags).
fn run_component(
    file: &str,
    url: &str,
    corpus: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let v1 = crate::scenario::dist(file);
    let mut args: Vec<String> = [
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
        "--benchmark-grace-period",
        "30",
        "--stats-interval",
        "0",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(extra.iter().map(std::string::ToString::to_string));
    if env.is_empty() {
        Run::in_process(tempfile::tempdir().unwrap(), &args, env)
    } else {
        // A process: the replay reads its fault injection from the process's environment.
        Run::exec(tempfile::tempdir().unwrap(), &args, env)
    }
}

/// A top-level (or nested) weka request of `ids.len()` full blocks.
fn req(t: f64, ids: &[u32], api: f64) -> Value {
    json!({"t": t, "type": "n", "model": "m", "in": ids.len() * 64, "out": 40,
        "hash_ids": ids, "input_types": ["tool_result"], "output_types": ["text"],
        "stop": "tool_use", "api_time": api})
}

fn ids(n: u32, base: u32) -> Vec<u32> {
    (base..base + n).collect()
}

fn trace(id: &str, requests: &[Value]) -> Value {
    json!({"id": id, "models": ["m"], "block_size": 64, "hash_id_scope": "local",
        "tool_tokens": 0, "system_tokens": 0, "requests": requests})
}

fn corpus(dir: &tempfile::TempDir, traces: &[Value]) -> std::path::PathBuf {
    let p = dir.path().join("corpus.jsonl");
    let text: String = traces.iter().fold(String::new(), |mut text, trace| {
        use std::fmt::Write;
        let _ = writeln!(text, "{trace}");
        text
    });
    std::fs::write(&p, text).unwrap();
    p
}

/// Every request's recorded prompt length in a weka file, by (trace, outer index, inner index).
fn recorded_inputs(path: &std::path::Path) -> HashMap<(String, u32, Option<u32>), u64> {
    let mut out = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let id = t["id"].as_str().unwrap().to_owned();
        for (i, r) in t["requests"].as_array().unwrap().iter().enumerate() {
            if r["type"] == "subagent" {
                for (j, x) in r["requests"].as_array().unwrap().iter().enumerate() {
                    out.insert(
                        (id.clone(), i as u32, Some(j as u32)),
                        x["in"].as_u64().unwrap(),
                    );
                }
            } else {
                out.insert((id.clone(), i as u32, None), r["in"].as_u64().unwrap());
            }
        }
    }
    out
}

/// The server's prompt tokens of each successful request and the trace's recorded `in` for it.
fn prompt_vs_recorded(
    recs: &[RequestRecord],
    recorded: &HashMap<(String, u32, Option<u32>), u64>,
) -> Vec<(u64, u64)> {
    recs.iter()
        .filter(|x| x.error.is_none() && !x.cancelled)
        .map(|x| {
            let t = x.tree.as_ref().expect("tree fields");
            let key = (
                t.source_trace_id.clone(),
                t.source_outer_idx.expect("outer index"),
                t.source_inner_idx,
            );
            (x.usage.prompt_tokens.expect("server count"), recorded[&key])
        })
        .collect()
}

/// Tree replays send the recorded assistant text: aiperf 0.13 and agentx-harness 1.0.12 replay weka
/// trees with context mode `DELTAS_WITH_RESPONSES` (dataset/loader/weka_trace.py: aiperf 1196-1200,
/// harness 852-856), which back-fills the skipped turns from the trace and never stores a live reply
/// (workers/session_manager.py: aiperf 221-238, harness 140-157; docs/agentx-v1-reference.md P3). Recorded mode
/// (agentx-v1 decides it): every request's prompt is the trace's recorded length (plus the marker's
/// constant tokens). Live mode (a scenario that decides it: the test component probe-v3, with
/// agentx-v1's start ratios, no cache-pressure stage and server counts): each stream's first
/// request (a primer, a stream resumed or spawned) carries its full recorded prefix too; live
/// replies replace recorded text only after they exist.
#[test]
fn tree_requests_carry_the_recorded_prefix_in_both_assistant_modes() {
    let path = fixture("traces-subagents-8.jsonl");
    let recorded = recorded_inputs(&path);
    let sim = sim_with(20, None);
    let mut marker_tokens = None;
    let live = [
        "--trajectory-start-min-ratio",
        "0",
        "--trajectory-start-max-ratio",
        "1",
        "--warmup-requests-per-lane",
        "0",
        "--use-server-token-count",
        "--num-dataset-entries",
        "8",
    ];
    for (mode, file, extra) in [
        ("recorded", "agentx-v1.wasm", &[][..]),
        ("live", "probe-v3.wasm", &live[..]),
    ] {
        let mut args = vec!["--concurrency", "6", "--benchmark-duration", "6"];
        args.extend(extra);
        let r = run_component(file, &sim.url(), &path, &args, &[]);
        assert_eq!(r.code(), 0, "{mode}: {}", r.stderr());
        assert_eq!(r.json("run_manifest.json")["assistant_mode"], mode);
        let recs = r.records();
        let pairs = prompt_vs_recorded(&recs, &recorded);
        assert!(pairs.len() > 20, "{mode}: {} requests", pairs.len());
        // The marker's tokens: the same on every request of both runs.
        let m = *marker_tokens.get_or_insert(pairs[0].0 as i64 - pairs[0].1 as i64);
        assert!((1..=4).contains(&m), "marker of {m} tokens");
        // Each stream's first request (by correlation id), and all of them in recorded mode.
        let mut first: BTreeMap<&str, &RequestRecord> = BTreeMap::new();
        for x in recs.iter().filter(|x| x.error.is_none() && !x.cancelled) {
            let e = first.entry(x.correlation_id.as_str()).or_insert(x);
            if x.send_ns < e.send_ns {
                *e = x;
            }
        }
        let firsts: Vec<RequestRecord> = first.values().map(|x| (*x).clone()).collect();
        let checked = if mode == "recorded" { &recs } else { &firsts };
        let mut mid_trace = 0;
        for (x, (prompt, want)) in checked
            .iter()
            .filter(|x| x.error.is_none() && !x.cancelled)
            .zip(prompt_vs_recorded(checked, &recorded))
        {
            assert_eq!(
                prompt as i64 - want as i64,
                m,
                "{mode}: {} turn {} ({:?}) sent {prompt} prompt tokens for a recorded {want}",
                x.trace_id,
                x.turn,
                x.phase
            );
            mid_trace += usize::from(x.turn >= 1);
        }
        assert!(mid_trace > 0, "{mode}: no stream started past turn 0");
    }
}

/// A request task that panics becomes a failed record with the panic as its cause, and its stream
/// ends: the tree drains, the lane takes its next tree and nothing is left counted in flight.
/// (`AGENTX_TEST_PANIC=1`, debug builds only: the first profiling request of a root stream panics.)
#[test]
fn a_panicking_request_task_is_a_failed_record_and_its_tree_drains() {
    let path = fixture("traces-subagents-8.jsonl");
    let sim = sim_with(20, None);
    let r = run_v1(
        &sim.url(),
        &path,
        &["--concurrency", "1", "--benchmark-duration", "25"],
        &[("AGENTX_TEST_PANIC", "1")],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let recs = r.records();
    let panicked: Vec<_> = recs
        .iter()
        .filter(|x| x.error.as_ref().is_some_and(|e| e.kind == "panic"))
        .collect();
    assert_eq!(panicked.len(), 1, "{}", r.stderr());
    let p = panicked[0];
    let e = p.error.as_ref().unwrap();
    assert!(
        e.message
            .contains("the request task panicked: AGENTX_TEST_PANIC"),
        "{e:?}"
    );
    assert_eq!(p.phase, Phase::Profiling);
    let t = p.tree.as_ref().unwrap();
    assert_eq!(t.agent_depth, 0);
    // The stream ended at the panic and the lane went on with another tree.
    assert!(!recs
        .iter()
        .any(|x| x.correlation_id == p.correlation_id && x.turn > p.turn));
    let next_tree = recs.iter().any(|x| {
        x.tree.as_ref().unwrap().root_correlation_id != t.root_correlation_id
            && x.send_ns > p.end_ns
            && x.phase == Phase::Profiling
    });
    assert!(next_tree, "the lane never took another tree");
    let manifest = r.json("run_manifest.json");
    assert!(manifest["trees"]["trees_drained"].as_u64().unwrap() >= 1);
    assert_eq!(manifest["trees"]["late_events"], 0);
    let summary = r.summary();
    assert_eq!(summary["stop"], "completed");
}

/// A branch whose recorded start precedes t* while its spawn turn is still ahead: its child is
/// alive at t* (docs/specs/session-trees.md#alive-streams: a child is alive when its branch start ≤
/// t*) and goes on from there; the root reaching the spawn turn does not start the branch a second
/// time. Root turns at 0, 10, 20 s; subagent `sub` (file position 2, so spawned by root turn 1 at
/// 10 s) recorded at 5, 8 and 12 s; t* = 9 s.
#[test]
fn a_branch_alive_at_t_star_is_not_started_again_at_its_spawn_turn() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(
        "ahead",
        &[
            req(0.0, &ids(4, 1), 0.5),
            req(10.0, &ids(6, 1), 0.5),
            json!({"t": 5.0, "type": "subagent", "agent_id": "sub", "duration_ms": 7500,
                "requests": [req(5.0, &ids(3, 100), 0.5), req(8.0, &ids(5, 100), 0.5),
                    req(12.0, &ids(7, 100), 0.5)]}),
            req(20.0, &ids(8, 1), 0.5),
        ],
    );
    let path = corpus(&dir, &[t]);
    let sim = sim_with(20, None);
    let r = run_v1(
        &sim.url(),
        &path,
        &[
            "--concurrency",
            "1",
            "--benchmark-duration",
            "8",
            "--trajectory-start-min-ratio",
            "0.45",
            "--trajectory-start-max-ratio",
            "0.45",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let manifest = r.json("run_manifest.json");
    let lane = &manifest["lanes"][0];
    let alive: Vec<&str> = lane["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["conversation_id"].as_str().unwrap_or(""))
        .collect();
    assert!(
        alive.iter().any(|s| s.contains("::sa:sub")),
        "the subagent is alive at t*: {lane}"
    );
    let recs = r.records();
    // Per runtime tree, no (stream, turn) is sent twice, and the first tree's child resumes at its
    // turn 2 without going back to turn 0.
    let mut sent: BTreeMap<(String, String, u32), u32> = BTreeMap::new();
    for x in recs.iter().filter(|x| x.phase == Phase::Profiling) {
        let root = x.tree.as_ref().unwrap().root_correlation_id.clone();
        *sent.entry((root, x.trace_id.clone(), x.turn)).or_default() += 1;
    }
    let twice: Vec<_> = sent.iter().filter(|(_, &n)| n > 1).collect();
    assert!(twice.is_empty(), "sent twice in one tree: {twice:?}");
    let first_root = recs
        .iter()
        .filter(|x| x.phase == Phase::Profiling)
        .min_by_key(|x| x.send_ns)
        .map(|x| x.tree.as_ref().unwrap().root_correlation_id.clone())
        .unwrap();
    let child_turns: Vec<u32> = recs
        .iter()
        .filter(|x| {
            x.phase == Phase::Profiling
                && x.trace_id.contains("::sa:sub")
                && x.tree.as_ref().unwrap().root_correlation_id == first_root
        })
        .map(|x| x.turn)
        .collect();
    assert_eq!(child_turns, vec![2], "{}", r.stderr());
    assert_eq!(manifest["trees"]["late_events"], 0);
}

/// The cache-pressure stage (`--warmup-requests-per-lane`): a root request that overflows the
/// context there aborts the run as a warmup failure, as any depth-0 warmup error or cancellation
/// does in the reference (agentx-harness 1.0.12 credit/callback_handler.py:296-323; aiperf#1288 for
/// overflows). Root turns at 0, 10, 20, 30 s; t* = 13.5 s, so the primer is turn 1 (~384 tokens)
/// and the stage's first root request turn 2 (~3,840 tokens, past the simulator's 1,000).
/// agentx writes its outputs all the same.
#[test]
fn a_root_overflow_in_the_cache_pressure_stage_aborts_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(
        "swells",
        &[
            req(0.0, &ids(4, 1), 0.5),
            req(10.0, &ids(6, 1), 0.5),
            req(20.0, &ids(60, 1), 0.5),
            req(30.0, &ids(62, 1), 0.5),
        ],
    );
    let path = corpus(&dir, &[t]);
    let sim = sim_with(20, Some(1_000));
    let r = run_v1(
        &sim.url(),
        &path,
        &[
            "--concurrency",
            "1",
            "--benchmark-duration",
            "5",
            "--trajectory-start-min-ratio",
            "0.45",
            "--trajectory-start-max-ratio",
            "0.45",
            "--warmup-requests-per-lane",
            "3",
        ],
        &[],
    );
    assert_ne!(r.code(), 0, "{}", r.stderr());
    let summary = r.summary();
    assert_eq!(summary["stop"], "warmup_failed", "{summary}");
    assert!(
        r.stderr()
            .contains("cache-pressure stage overflowed the context"),
        "{}",
        r.stderr()
    );
    let recs = r.records();
    assert!(recs.iter().all(|x| x.phase == Phase::Warmup));
    assert!(recs
        .iter()
        .any(|x| x.context_overflow && x.turn == 2 && x.trace_id == "swells"));
    assert!(r.artifacts().join("profile_export.jsonl").exists());
}

/// The warmup grace period bounds the cache-pressure stage's drain, not the primers (the reference
/// waits for primers without a deadline: agentx-harness 1.0.12 timing/phase/runner.py:1089-1098,
/// lifecycle.py:145-146; the drain: runner.py:973-992). Every response takes 1.5 s and the grace is
/// 0.5 s: the primers return; the stage's requests are cancelled at the grace's end and the run
/// fails, keeping its records and writing its outputs (the reference writes none).
#[test]
fn the_warmup_grace_bounds_the_pressure_drain_not_the_primers() {
    let path = fixture("traces-subagents-8.jsonl");
    let sim = sim_with(1_500, None);
    // Primers only: the grace does not apply.
    let r = run_v1(
        &sim.url(),
        &path,
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "2",
            "--agentic-warmup-grace-period",
            "0.5",
        ],
        &[],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.summary()["stop"], "completed");
    // With a pressure stage, its drain outlasts the grace.
    let r = run_v1(
        &sim.url(),
        &path,
        &[
            "--concurrency",
            "2",
            "--benchmark-duration",
            "2",
            "--agentic-warmup-grace-period",
            "0.5",
            "--warmup-requests-per-lane",
            "1",
        ],
        &[],
    );
    assert_ne!(r.code(), 0, "{}", r.stderr());
    assert_eq!(r.summary()["stop"], "warmup_failed");
    assert!(
        r.stderr()
            .contains("cache-pressure requests did not return within the warmup grace period"),
        "{}",
        r.stderr()
    );
    let recs = r.records();
    let primers = recs.iter().filter(|x| x.error.is_none()).count();
    assert!(primers >= 2, "the primers returned");
    assert!(
        recs.iter().any(|x| x.cancelled && x.phase == Phase::Warmup),
        "a pressure request was cancelled"
    );
    assert!(r.artifacts().join("profile_export.jsonl").exists());
}
