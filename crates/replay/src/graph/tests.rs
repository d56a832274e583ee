//! The graph replay on tokio's paused clock with a scripted transport: each anchor's gate, the
//! first-token fallback, fan-in counts, the reducers as the prompts see them, and the lanes'
//! recycling under a request count. Every node's prompt names it (`NODE:<id>`) so the script
//! answers by node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::{BodyShape, GraphConfig, GraphInputs, GraphOutcome};
use crate::testkit::{kept_dir, Call, Reply, Scripted};
use agentx_dataset::graph_ir;
use agentx_dataset::TokenCounter;
use agentx_protocol::EndpointType;
use agentx_record::{read_records, Clock, RecordSink, RequestRecord};

/// The worked example (docs/specs/agent-graph-ir.md#11-minimal-valid-example), each prompt naming its node.
fn worked_example() -> Value {
    json!({
      "graph": {
        "version": "2.0",
        "provenance": {"source": "hand-authored", "tool": "manual"},
        "state": {"notes": {"type": "messages", "reducer": "add_messages"}},
        "nodes": {
          "plan": {"output": "notes", "max_tokens": 256,
                   "prompt": [{"role": "user", "content": ["NODE:plan Draft a plan for: ", "@task"]}]},
          "child": {"output": "notes", "max_tokens": 128,
                    "prompt": [{"role": "user", "content": "NODE:child List three risks."}]},
          "join": {"output": "summary", "max_tokens": 64,
                   "inputs": [{"channel": "notes", "count": "all"}],
                   "prompt": ["@notes", {"role": "user", "content": "NODE:join Summarize."}]}
        },
        "edges": [
          {"source": "START", "target": "plan"},
          {"source": "plan", "target": "child",
           "delay_after_predecessor_start_us": 2000000,
           "delay_after_predecessor_first_token_us": 500000},
          {"source": "plan", "target": "join", "delay_after_predecessor_us": 1000000},
          {"source": "child", "target": "join"},
          {"source": "join", "target": "END"}
        ]
      },
      "traces": [{"id": "t1", "initial_state": {"task": "migrate the build"}}]
    })
}

/// Three entry nodes writing `notes`, and `sum` after all three waiting for `count` writes.
fn fan_in(count: &Value) -> Value {
    let writer = |id: &str| {
        json!({"output": "notes", "max_tokens": 4,
        "prompt": [{"role": "user", "content": format!("NODE:{id}")}]})
    };
    json!({
      "graph": {
        "version": "2.0",
        "provenance": {"source": "hand-authored", "tool": "manual"},
        "state": {"notes": {"type": "messages", "reducer": "add_messages"}},
        "nodes": {
          "a": writer("a"), "b": writer("b"), "c": writer("c"),
          "sum": {"output": "total", "max_tokens": 4,
                  "inputs": [{"channel": "notes", "count": count}],
                  "prompt": [{"role": "user", "content": "NODE:sum"}]}
        },
        "edges": [
          {"source": "START", "target": "a"}, {"source": "START", "target": "b"},
          {"source": "START", "target": "c"},
          {"source": "a", "target": "sum"}, {"source": "b", "target": "sum"},
          {"source": "c", "target": "sum"}, {"source": "sum", "target": "END"}
        ]
      },
      "traces": [{"id": "f1"}]
    })
}

/// Writes `workload` and loads it.
fn corpus(workload: &Value) -> Arc<graph_ir::GraphCorpus> {
    let path: PathBuf = kept_dir().join("graph.json");
    std::fs::write(&path, workload.to_string()).unwrap();
    Arc::new(graph_ir::load(&path, false).unwrap())
}

/// The node a call is for (from its prompt's `NODE:<id>`).
fn node_of(call: &Call) -> String {
    let at = call
        .body
        .find("NODE:")
        .expect("every test prompt names its node")
        + 5;
    call.body[at..]
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect()
}

/// Runs `workload` on `script` under `cfg`; the outcome and the records, each with its node.
async fn replay(
    workload: &Value,
    cfg: GraphConfig,
    script: impl Fn(&str, &Call) -> Reply + Send + Sync + 'static,
) -> (GraphOutcome, Vec<RequestRecord>) {
    let dir = kept_dir();
    let sink = RecordSink::create(&agentx_record::fsio::Root::create(&dir).unwrap()).unwrap();
    let (_interrupts, interrupt) = watch::channel(0u32);
    let inputs = GraphInputs {
        corpus: corpus(workload),
        client: Box::new(Scripted::new(move |call| script(&node_of(call), call))),
        body: BodyShape {
            model: "m".into(),
            extra: Vec::new(),
            max_completion_tokens: true,
            api: EndpointType::Chat,
        },
        counter: TokenCounter::Words,
        records: sink.sender(),
        clock: Clock::start(),
        interrupt,
        scenario: crate::testkit::scenario(
            agentx_scenario::builtin::BUILTIN_GRAPH_IR,
            "graph-ir.wasm",
        ),
        overflow_phrases: None,
    };
    let outcome = super::run(cfg, inputs).await;
    let path = sink.path().to_owned();
    sink.close().unwrap();
    (outcome, read_records(&path).unwrap())
}

fn one_pass() -> GraphConfig {
    GraphConfig {
        concurrency: Some(1),
        request_count: None,
        duration: None,
        open_loop: false,
        replay_speedup: 1.0,
        run_id: "graphrun".into(),
        use_server_token_count: false,
    }
}

/// The node id of a record (`TRACE/NODE`).
fn node(rec: &RequestRecord) -> &str {
    rec.trace_id.rsplit('/').next().unwrap()
}

/// When every dispatch of node `id` was sent, in ms, in record order.
fn every_sent_ms(records: &[RequestRecord], id: &str) -> Vec<u64> {
    records
        .iter()
        .filter(|r| node(r) == id)
        .map(|r| r.send_ns / 1_000_000)
        .collect()
}

/// Send time of `id`'s record in ms from the clock's start.
fn sent_ms(records: &[RequestRecord], id: &str) -> u64 {
    let rec = records
        .iter()
        .find(|r| node(r) == id)
        .unwrap_or_else(|| panic!("{id} sent"));
    rec.send_ns / 1_000_000
}

#[tokio::test(start_paused = true)]
async fn a_first_token_edge_fires_at_the_first_token_plus_its_delay() {
    // Every reply: first token at 100 ms, ends at 140 ms.
    let (outcome, records) = replay(&worked_example(), one_pass(), |_, _| Reply::ok()).await;
    assert_eq!(sent_ms(&records, "plan"), 0);
    assert_eq!(
        sent_ms(&records, "child"),
        600,
        "plan's first token + 0.5 s"
    );
    // join: both writes to notes (child ends at 740), and plan's end + 1 s = 1140.
    assert_eq!(sent_ms(&records, "join"), 1140);
    assert_eq!(outcome.dispatches, 3);
    assert_eq!((outcome.complete, outcome.stalled), (1, 0));
    let limits: Vec<(&str, u32)> = records.iter().map(|r| (node(r), r.max_tokens)).collect();
    assert!(limits.contains(&("plan", 256)) && limits.contains(&("child", 128)));
    assert!(limits.contains(&("join", 64)));
}

#[tokio::test(start_paused = true)]
async fn a_first_token_edge_falls_back_to_dispatch_plus_its_start_delay() {
    let script = |node: &str, _: &Call| match node {
        "plan" => Reply {
            fail: Some((500, "boom".into())),
            ..Reply::ok()
        },
        _ => Reply::ok(),
    };
    let (outcome, records) = replay(&worked_example(), one_pass(), script).await;
    let plan = records.iter().find(|r| node(r) == "plan").unwrap();
    assert!(!plan.context_overflow);
    assert_eq!(plan.error.as_ref().map(|e| e.code), Some(500));
    assert_eq!(sent_ms(&records, "child"), 2000, "plan's dispatch + 2 s");
    // plan failed: it wrote nothing, so join's count of 2 writes is never met.
    assert!(records.iter().all(|r| node(r) != "join"));
    assert_eq!(
        (outcome.failed, outcome.stalled, outcome.complete),
        (1, 1, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn completion_and_dispatch_anchors_and_the_node_delay() {
    let workload = json!({
      "graph": {
        "version": "2.0",
        "provenance": {"source": "hand-authored", "tool": "manual"},
        "nodes": {
          "triage": {"output": "brief", "prompt": [{"role": "user", "content": "NODE:triage"}]},
          "search": {"output": "found", "min_start_delay_us": 250000,
                     "prompt": [{"role": "user", "content": "NODE:search"}]},
          "lint": {"output": "lint", "prompt": [{"role": "user", "content": "NODE:lint"}]},
          "late": {"output": "late", "prompt": [{"role": "user", "content": "NODE:late"}]}
        },
        "edges": [
          {"source": "START", "target": "triage"},
          {"source": "triage", "target": "search", "delay_after_predecessor_us": 100000},
          {"source": "triage", "target": "lint", "delay_after_predecessor_start_us": 50000},
          {"source": "triage", "target": "late", "delay_after_predecessor_us": 300000},
          {"source": "search", "target": "END"}, {"source": "lint", "target": "END"},
          {"source": "late", "target": "END"}
        ]
      },
      "traces": [{"id": "x"}]
    });
    let (_, records) = replay(&workload, one_pass(), |_, _| Reply::ok()).await;
    assert_eq!(sent_ms(&records, "lint"), 50, "triage's dispatch + 50 ms");
    assert_eq!(sent_ms(&records, "late"), 440, "triage's end + 300 ms");
    // Ready at triage's end (140), its own delay 250 ms outlasts the edge's 100 ms.
    assert_eq!(sent_ms(&records, "search"), 390);
}

/// `a`, `b`, `c` end at 140, 340 and 540 ms.
fn staggered(node: &str, _: &Call) -> Reply {
    let ttft = match node {
        "b" => 300,
        "c" => 500,
        _ => 100,
    };
    Reply {
        ttft: Duration::from_millis(ttft),
        ..Reply::ok()
    }
}

#[tokio::test(start_paused = true)]
async fn a_count_n_fan_in_fires_at_the_nth_write() {
    let (outcome, records) = replay(&fan_in(&json!(2)), one_pass(), staggered).await;
    assert_eq!(sent_ms(&records, "sum"), 340);
    assert_eq!(outcome.dispatches, 4);
}

#[tokio::test(start_paused = true)]
async fn a_count_all_fan_in_waits_for_every_writer() {
    let (_, records) = replay(&fan_in(&json!("all")), one_pass(), staggered).await;
    assert_eq!(sent_ms(&records, "sum"), 540);
}

#[tokio::test(start_paused = true)]
async fn add_messages_appends_and_overwrite_replaces_in_the_prompts() {
    let workload = json!({
      "graph": {
        "version": "2.0",
        "provenance": {"source": "hand-authored", "tool": "manual"},
        "state": {"hist": {"type": "messages", "reducer": "add_messages"},
                  "brief": {"type": "text", "reducer": "overwrite"}},
        "nodes": {
          "b": {"output": "brief", "prompt": [{"role": "user", "content": "NODE:b"}]},
          "w": {"output": "hist", "prompt": [{"role": "user", "content": "NODE:w"}]},
          "v": {"output": "hist", "prompt": [{"role": "user", "content": "NODE:v"}]},
          "r": {"output": "out", "prompt": ["@hist",
                {"role": "user", "content": ["NODE:r brief=", "@brief"]}]}
        },
        "edges": [
          {"source": "START", "target": "b"}, {"source": "b", "target": "w"},
          {"source": "w", "target": "v"}, {"source": "v", "target": "r"},
          {"source": "r", "target": "END"}
        ]
      },
      "traces": [{"id": "s", "initial_state": {"brief": "SEED",
                  "hist": [{"role": "user", "content": "seeded history"}]}}]
    });
    let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let script = move |node: &str, call: &Call| {
        if node == "r" {
            seen.lock().unwrap().push(call.body.clone());
        }
        Reply::ok()
    };
    let (_, _) = replay(&workload, one_pass(), script).await;
    let body: Value = serde_json::from_str(&bodies.lock().unwrap()[0]).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let texts: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    // Calls 0 (b), 1 (w) and 2 (v) reply `w<n>` five times.
    assert_eq!(
        texts,
        vec![
            ("user", "seeded history"),
            ("assistant", "w1 w1 w1 w1 w1 "),
            ("assistant", "w2 w2 w2 w2 w2 "),
            ("user", "NODE:r brief=w0 w0 w0 w0 w0 "),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn lanes_recycle_traces_until_the_request_count() {
    let cfg = GraphConfig {
        concurrency: Some(2),
        request_count: Some(7),
        ..one_pass()
    };
    let (outcome, records) = replay(&worked_example(), cfg, |_, _| Reply::ok()).await;
    assert_eq!(outcome.dispatches, 7);
    assert_eq!(records.len(), 7);
    // Three instances: two whole (3 each) and one cut after its first node.
    let mut instances: Vec<&str> = records.iter().map(|r| r.correlation_id.as_str()).collect();
    instances.sort_unstable();
    instances.dedup();
    assert_eq!(instances.len(), 3, "{instances:?}");
}

#[tokio::test(start_paused = true)]
async fn one_pass_sends_every_node_of_every_trace_once() {
    let mut workload = worked_example();
    workload["traces"] = json!([{"id": "t1", "initial_state": {"task": "a"}},
                                {"id": "t2", "initial_state": {"task": "b"}}]);
    let cfg = GraphConfig {
        concurrency: Some(4),
        ..one_pass()
    };
    let (outcome, records) = replay(&workload, cfg, |_, _| Reply::ok()).await;
    assert_eq!(
        (outcome.instances, outcome.complete, outcome.dispatches),
        (2, 2, 6)
    );
    let mut sent: Vec<&str> = records.iter().map(|r| r.trace_id.as_str()).collect();
    sent.sort_unstable();
    assert_eq!(
        sent,
        ["t1/child", "t1/join", "t1/plan", "t2/child", "t2/join", "t2/plan"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_duration_stops_new_dispatches_and_lanes_recycle_until_it() {
    // An instance takes 1280 ms (join at 1140 + 140); the second's join (at 2420) falls after
    // the 2 s stop and is never dispatched.
    let cfg = GraphConfig {
        duration: Some(Duration::from_secs(2)),
        ..one_pass()
    };
    let (outcome, records) = replay(&worked_example(), cfg, |_, _| Reply::ok()).await;
    assert_eq!(
        (outcome.instances, outcome.dispatches),
        (2, 5),
        "{outcome:?}"
    );
    assert_eq!((outcome.complete, outcome.stalled), (1, 1));
    assert_eq!(records.len(), 5);
    assert_eq!(
        sent_ms(&records[3..], "plan"),
        1280,
        "the lane's next instance"
    );
}

/// The worked example's graph with three traces.
fn three_traces() -> Value {
    let mut workload = worked_example();
    workload["traces"] = json!([{"id": "t1", "initial_state": {"task": "a"}},
                                {"id": "t2", "initial_state": {"task": "b"}},
                                {"id": "t3", "initial_state": {"task": "c"}}]);
    workload
}

#[tokio::test(start_paused = true)]
async fn an_open_loop_starts_every_trace_at_once_capped_by_the_concurrency() {
    let workload = three_traces();
    let cfg = GraphConfig {
        concurrency: Some(2),
        open_loop: true,
        ..one_pass()
    };
    let (outcome, records) = replay(&workload, cfg, |_, _| Reply::ok()).await;
    assert_eq!((outcome.instances, outcome.dispatches), (3, 9));
    let plans = every_sent_ms(&records, "plan");
    // Two at once, the third when a slot frees.
    assert_eq!(plans.iter().filter(|&&ms| ms == 0).count(), 2, "{plans:?}");
    assert!(plans.contains(&1280), "{plans:?}");
}

#[tokio::test(start_paused = true)]
async fn an_open_loop_without_a_concurrency_admits_every_due_trace() {
    let workload = three_traces();
    let cfg = GraphConfig {
        concurrency: None,
        open_loop: true,
        ..one_pass()
    };
    let (outcome, records) = replay(&workload, cfg, |_, _| Reply::ok()).await;
    assert_eq!((outcome.instances, outcome.dispatches), (3, 9));
    let plans = every_sent_ms(&records, "plan");
    assert_eq!(
        plans,
        [0, 0, 0],
        "aiperf gates open-loop admission only under --concurrency"
    );
}

#[tokio::test(start_paused = true)]
async fn the_scenario_classifies_a_context_overflow() {
    let script = |node: &str, _: &Call| match node {
        "child" => Reply::overflow(),
        _ => Reply::ok(),
    };
    let (outcome, records) = replay(&worked_example(), one_pass(), script).await;
    assert_eq!(outcome.failed, 1);
    let child = records.iter().find(|r| node(r) == "child").unwrap();
    assert!(child.context_overflow, "{child:?}");
    assert_eq!(
        child.error.as_ref().map(|e| e.kind.as_str()),
        Some("context_overflow")
    );
}
