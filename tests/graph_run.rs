//! `run --format graph-ir` end to end against the built-in simulator on port 0, which logs every
//! request (`--record-requests`): the worked example
//! (docs/specs/agent-graph-ir.md#11-minimal-valid-example) (every node once per trace, the
//! first-token edge's gate, the fan-in join, each node's `max_tokens`), a fixture whose prompts
//! splice live replies (the simulator's log of the spliced message against the producer's record),
//! aiperf's public doc sample, and a refused workload.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use agentx::record::RequestRecord;
use agentx::sim::{SimConfig, Timing};
use serde_json::Value;

use crate::support::{fixture, Run, Sim};

/// The simulator: first token after 20 ms, then 5 ms a token, every answer to its limit, each
/// request logged to `log`.
fn recording_sim(log: &Path) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(5),
    };
    cfg.record_requests = Some(log.to_owned());
    Sim::start(cfg)
}

/// `run --format graph-ir FILE` of the fixture `name` against `url`.
fn replay(url: &str, name: &str, extra: &[&str]) -> Run {
    let file = fixture("graph-ir").join(name).display().to_string();
    let mut args = vec![
        "run",
        "--format",
        "graph-ir",
        &file,
        "--url",
        url,
        "--model",
        "agentx-sim",
    ];
    args.extend(extra);
    Run::in_process(tempfile::tempdir().unwrap(), &args, &[])
}

/// The simulator's log lines by request id.
fn logged(path: &Path) -> HashMap<String, Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|v| (v["headers"]["x-request-id"].as_str().unwrap().to_owned(), v))
        .collect()
}

/// The record of `node` in trace instance `instance`.
fn of<'r>(records: &'r [RequestRecord], instance: &str, node: &str) -> &'r RequestRecord {
    records
        .iter()
        .find(|r| r.correlation_id == instance && r.trace_id.ends_with(&format!("/{node}")))
        .unwrap_or_else(|| panic!("{instance}: {node} was sent: {records:#?}"))
}

const MS: u64 = 1_000_000;

#[test]
fn the_worked_example_fires_each_node_at_its_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let sim = recording_sim(&log);
    let run = replay(&sim.url(), "worked-example.json", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    assert_eq!(records.len(), 3, "{records:#?}");
    let instance = records[0].correlation_id.clone();
    let (plan, child, join) = (
        of(&records, &instance, "plan"),
        of(&records, &instance, "child"),
        of(&records, &instance, "join"),
    );
    for rec in [plan, child, join] {
        assert!(rec.error.is_none(), "{rec:#?}");
        assert_eq!(rec.tree.as_ref().unwrap().source_trace_id, "t1");
    }
    // child: plan's first token + 0.5 s, while plan still streams (255 tokens at 5 ms).
    let first_token = plan.first_token_ns.unwrap();
    let gap = child.send_ns - first_token;
    assert!(
        (500 * MS..600 * MS).contains(&gap),
        "child sent {gap} ns after plan's first token"
    );
    assert!(child.send_ns < plan.end_ns, "child waited for plan's end");
    // join: both writers of notes ended, and plan's end + 1 s.
    assert!(join.send_ns >= child.end_ns && join.send_ns >= plan.end_ns + 1000 * MS - 5 * MS);
    let log = logged(&log);
    assert_eq!(log.len(), 3);
    for (rec, limit) in [(plan, 256), (child, 128), (join, 64)] {
        assert_eq!(rec.max_tokens, limit);
        assert_eq!(
            log[&rec.request_id]["max_completion_tokens"], limit,
            "{rec:#?}"
        );
    }
    for name in ["profile_export.jsonl", "profile_export_aiperf.json"] {
        assert!(run.artifacts().join(name).exists(), "{name}");
    }
    let profile = std::fs::read_to_string(run.artifacts().join("profile_export.jsonl")).unwrap();
    assert!(
        profile.contains("t1/child"),
        "the node is named in the profile export"
    );
}

#[test]
fn spliced_prompts_carry_the_producers_live_replies() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let sim = recording_sim(&log);
    let run = replay(
        &sim.url(),
        "review-two-traces.json",
        &["--concurrency", "2"],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    assert_eq!(records.len(), 8, "two traces of four nodes");
    let log = logged(&log);
    let mut instances: Vec<&str> = records.iter().map(|r| r.correlation_id.as_str()).collect();
    instances.sort_unstable();
    instances.dedup();
    assert_eq!(instances.len(), 2);
    for instance in instances {
        let (triage, search, patch) = (
            of(&records, instance, "triage"),
            of(&records, instance, "search"),
            of(&records, instance, "patch"),
        );
        // search reads `@brief` (triage's reply) after "Find the files that ".
        let searched = &log[&search.request_id];
        let tokens = searched["message_tokens"].as_array().unwrap();
        assert_eq!(
            tokens.last().unwrap(),
            &Value::from(4 + triage.osl),
            "{searched}"
        );
        // patch splices `@history`: the seed, then search's reply as an assistant message.
        let patched = &log[&patch.request_id];
        assert_eq!(
            patched["roles"],
            serde_json::json!(["system", "user", "assistant", "user"]),
            "{patched}"
        );
        assert_eq!(patched["message_tokens"][2], Value::from(search.osl));
        assert_eq!(patched["model"], "patch-model");
    }
}

#[test]
fn the_public_doc_sample_runs_its_one_node_per_trace() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let sim = recording_sim(&log);
    let run = replay(&sim.url(), "agentic-doc-minimal.jsonl", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let records = run.records();
    // One trace, one node (`ask`, START -> ask -> END): one request, with no output limit.
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0].trace_id, "question-1/ask");
    let line = &logged(&log)[&records[0].request_id];
    assert_eq!(line["roles"], serde_json::json!(["user"]));
    // "Question: " and the seeded question: 1 + 7 words.
    assert_eq!(line["prompt_tokens"], 8, "{line}");
    assert!(line["max_completion_tokens"].is_null(), "{line}");
}

#[test]
fn a_refused_workload_stops_run_with_the_validators_findings() {
    let file = fixture("invalid/graph-ir/01-cycle.json")
        .display()
        .to_string();
    let run = Run::in_process(
        tempfile::tempdir().unwrap(),
        &["run", "--format", "graph-ir", "--input-file", &file],
        &[],
    );
    let validate = Run::in_process(
        tempfile::tempdir().unwrap(),
        &["dataset", "validate", "--format", "graph-ir", &file],
        &[],
    );
    assert_eq!((run.code(), validate.code()), (2, 2));
    assert_eq!(run.stderr(), validate.stderr());
    assert!(run.stderr().contains("rule-1"), "{}", run.stderr());
    let paced = Run::in_process(
        tempfile::tempdir().unwrap(),
        &[
            "run",
            "--format",
            "graph-ir",
            "--input-file",
            &fixture("graph-ir/worked-example.json")
                .display()
                .to_string(),
            "--request-rate",
            "5",
        ],
        &[],
    );
    assert_eq!(paced.code(), 2);
    assert!(
        paced
            .stderr()
            .contains("--request-rate cannot pace a graph-ir replay"),
        "{}",
        paced.stderr()
    );
}

/// The `graph-ir` component decides the replay: its stop condition and lanes are what ran, and
/// the manifest pins the component's and the workload's sha256, the seed and what it resolved.
#[test]
fn the_graph_scenario_decides_the_replay_and_the_manifest_pins_it() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let sim = recording_sim(&log);
    let run = replay(
        &sim.url(),
        "worked-example.json",
        &[
            "--request-count",
            "4",
            "--concurrency",
            "2",
            "--random-seed",
            "9",
        ],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    // Two lanes recycle the one trace until the fourth dispatch.
    let records = run.records();
    assert_eq!(records.len(), 4, "{records:#?}");
    assert_eq!(logged(&log).len(), 4);
    let manifest = run.json("run_manifest.json");
    let component = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-scenarios/dist/graph-ir.wasm"),
    )
    .unwrap();
    assert_eq!(manifest["scenario"]["name"], "graph-ir");
    assert_eq!(
        manifest["scenario"]["sha256"],
        hex::encode(Sha256::digest(&component))
    );
    let workload = std::fs::read(fixture("graph-ir/worked-example.json")).unwrap();
    assert_eq!(
        manifest["dataset"]["cache_key"],
        format!("graph-ir:sha256:{}", hex::encode(Sha256::digest(&workload)))
    );
    assert_eq!(
        (manifest["seed"].as_u64(), manifest["seed_drawn"].as_bool()),
        (Some(9), Some(false))
    );
    let resolved: HashMap<&str, &Value> = manifest["resolved_settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| (row["name"].as_str().unwrap(), &row["value"]))
        .collect();
    assert_eq!(resolved["request-count"], 4);
    assert_eq!(resolved["concurrency"], 2);
    assert_eq!(resolved["open-loop-replay"], true);
    assert!(manifest["ended_unix_ns"].as_u64() > manifest["started_unix_ns"].as_u64());
    crate::support::assert_artifacts_match_schemas(&run.artifacts());
    let aiperf = run.json("profile_export_aiperf.json");
    assert_eq!(
        aiperf["metadata"]["scenario"]["component_sha256"],
        manifest["scenario"]["sha256"]
    );
}

/// A session scenario cannot decide a graph replay, the graph scenario cannot run session traces,
/// and a session-trace run refuses the graph-only flags.
#[test]
fn graph_and_session_scenarios_refuse_each_others_runs() {
    let workload = fixture("graph-ir/worked-example.json")
        .display()
        .to_string();
    let run = |args: &[&str]| Run::in_process(tempfile::tempdir().unwrap(), args, &[]);
    let session_scenario = run(&[
        "run",
        "--format",
        "graph-ir",
        "--input-file",
        &workload,
        "--scenario",
        "agentx",
    ]);
    assert_eq!(session_scenario.code(), 2);
    assert!(
        session_scenario
            .stderr()
            .contains("does not decide a graph-ir replay")
            && session_scenario.stderr().contains("--scenario graph-ir"),
        "{}",
        session_scenario.stderr()
    );
    let graph_scenario = run(&["run", "--scenario", "graph-ir", "--benchmark-duration", "1"]);
    assert_eq!(graph_scenario.code(), 2);
    assert!(
        graph_scenario
            .stderr()
            .contains("decides graph-ir replays, not session traces"),
        "{}",
        graph_scenario.stderr()
    );
    let graph_flag = run(&["run", "--request-count", "3", "--replay-speedup", "2"]);
    assert_eq!(graph_flag.code(), 2);
    assert!(
        graph_flag
            .stderr()
            .contains("--request-count, --replay-speedup: only a graph-ir replay"),
        "{}",
        graph_flag.stderr()
    );
    let list = run(&[
        "run",
        "--format",
        "graph-ir",
        "--input-file",
        &workload,
        "--concurrency",
        "2,4",
    ]);
    assert_eq!(list.code(), 2);
    assert!(
        list.stderr()
            .contains("--concurrency 2,4: a graph-ir run takes one number"),
        "{}",
        list.stderr()
    );
}

/// Ctrl-C stops a graph replay as it stops a session replay: nothing new dispatches, the records
/// already measured are kept, the exports and the summary are written, the stop is `interrupted`,
/// the verdict says `run_cancelled`, and the exit code is 1.
#[cfg(unix)]
#[test]
fn an_interrupt_keeps_the_records_and_writes_the_summary() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let sim = recording_sim(&dir.path().join("requests.jsonl"));
    let file = fixture("graph-ir/worked-example.json")
        .display()
        .to_string();
    let child = crate::support::agentx_command(dir.path(), &[])
        .args([
            "run",
            "--format",
            "graph-ir",
            "--input-file",
            &file,
            "--url",
            &sim.url(),
            "--model",
            "agentx-sim",
            "--concurrency",
            "2",
            "--benchmark-duration",
            "600",
            "--output-artifact-dir",
            "out",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out_dir = dir.path().join("out");
    crate::support::wait_for_records(&out_dir.join("records.jsonl"), 4, Duration::from_secs(60));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupt"), "{err}");
    let records = agentx::record::read_records(&out_dir.join("records.jsonl")).unwrap();
    assert!(records.len() >= 4, "{}", records.len());
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("run_summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stop"], "interrupted");
    assert_eq!(summary["records"], records.len());
    assert!(summary["submission_invalid_reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|reason| reason == "run_cancelled"));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("run_manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["stop"], "interrupted");
    assert!(out_dir.join("profile_export_aiperf.json").exists());
}
