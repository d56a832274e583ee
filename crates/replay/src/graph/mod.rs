//! The replay of an aiperf Agent Graph IR corpus
//! (docs/specs/agent-graph-ir.md#9-scheduling-and-concurrency): lanes of trace instances, each
//! run by the per-trace executor ([`trace`]), their recycling under a stop condition, and the
//! open-loop start of a timestamped corpus.
//!
//! - **Lanes**: `concurrency` trace instances in flight; one instance may have several nodes in
//!   flight. Without a stop condition the run is one pass over the corpus's traces, in file order.
//!   With one (`request_count`, counting LLM node dispatches, or `duration`) a freed lane starts the
//!   next trace, wrapping to the first: traces recycle until the stop.
//! - **Open loop** ([`GraphConfig::open_loop`]): each trace starts at its graph's recorded offset
//!   (the earliest `recorded_start_unix_ms` of its graph less the corpus's earliest, divided by
//!   [`GraphConfig::replay_speedup`]), and `concurrency`, when set, caps the instances in flight
//!   (a due trace waits for a free one). A native workload has one graph, so its traces are all
//!   due at once.
//! - **Stop**: once the request count is spent or the duration passed, no node dispatches; the
//!   requests in flight finish and are recorded, and every instance ends.
//!
//! Every dispatch is one [`agentx_record::RequestRecord`] (`prompt` builds the body and the
//! record): the trace instance is the record's session (its correlation id and its tree's root),
//! its `trace_id` names `TRACE/NODE`, and the tree's `source_trace_id` names the trace.

mod prompt;
#[cfg(test)]
mod tests;
mod trace;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{watch, Semaphore};

use agentx_dataset::graph_ir::GraphCorpus;
use agentx_dataset::TokenCounter;
use agentx_protocol::{EndpointType, RequestBody};
use agentx_record::{Clock, RecordSender};
use agentx_scenario::ScenarioInstance;

use crate::Transport;

/// How a graph replay runs.
#[derive(Debug, Clone)]
pub struct GraphConfig {
    /// Trace instances in flight at once (at least 1). `None`: one closed-loop lane, and no cap on
    /// open-loop arrivals (aiperf gates its timestamp replay only under an explicit
    /// `--concurrency`).
    pub concurrency: Option<u32>,
    /// Stop after this many LLM node dispatches (traces recycle until then).
    pub request_count: Option<u64>,
    /// Stop dispatching after this long (traces recycle until then).
    pub duration: Option<Duration>,
    /// Start each trace at its recorded offset (capped by `concurrency`) instead of lanes that
    /// start the next trace when one ends.
    pub open_loop: bool,
    /// Divides the recorded offsets of an open-loop start (1.0: as recorded).
    pub replay_speedup: f64,
    /// The run's id: its first 8 characters start every instance and request id.
    pub run_id: String,
    /// Token counts from the server's `usage` when it sends both counts.
    pub use_server_token_count: bool,
}

impl GraphConfig {
    /// Whether a stop condition is set, so freed lanes recycle traces.
    fn recycles(&self) -> bool {
        self.request_count.is_some() || self.duration.is_some()
    }
}

/// How every node's body is shaped: the run's model and extra inputs, the endpoint, the token
/// field. A node's own `model`, `raw_tools` and `extra_body` apply over these (every request is
/// streamed: the client reads event streams only, so a node's `streaming: false` is not honoured).
#[derive(Debug, Clone)]
pub struct BodyShape {
    /// The run's model (`--model`), for nodes that name none.
    pub model: String,
    /// The run's extra inputs (`--extra-inputs`); a node's `extra_body` overrides a key.
    pub extra: Vec<(String, Value)>,
    /// Send the limit as `max_completion_tokens` (else `max_tokens`).
    pub max_completion_tokens: bool,
    /// The endpoint's API.
    pub api: EndpointType,
}

/// What a graph replay reads and where it writes.
pub struct GraphInputs {
    /// The validated corpus.
    pub corpus: Arc<GraphCorpus>,
    /// The HTTP side.
    pub client: Box<dyn Transport>,
    /// How bodies are shaped.
    pub body: BodyShape,
    /// Client-side token counts.
    pub counter: TokenCounter,
    /// The record sink.
    pub records: RecordSender,
    /// The run's clock.
    pub clock: Clock,
    /// The run's interrupts so far: at the first nothing new dispatches, in-flight requests end.
    pub interrupt: watch::Receiver<u32>,
    /// The run's scenario, which classifies failed responses (context overflows).
    pub scenario: ScenarioInstance,
    /// The context-overflow phrases that override the scenario's list, when given.
    pub overflow_phrases: Option<Vec<String>>,
}

/// Counts of a finished graph replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphOutcome {
    /// Trace instances started.
    pub instances: u64,
    /// Instances in which every reachable node was sent.
    pub complete: u64,
    /// LLM node dispatches (requests sent).
    pub dispatches: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Nodes that were scheduled but never dispatched: a fan-in that could no longer be met (a
    /// producer failed), or the stop.
    pub stalled: u64,
}

/// What every instance of the replay shares.
pub(crate) struct Ctx {
    pub(crate) corpus: Arc<GraphCorpus>,
    pub(crate) client: Box<dyn Transport>,
    /// Every graph's nodes' body builders, by graph and node index.
    pub(crate) bodies: Vec<Vec<RequestBody>>,
    pub(crate) counter: TokenCounter,
    pub(crate) records: RecordSender,
    pub(crate) clock: Clock,
    pub(crate) use_server_token_count: bool,
    pub(crate) scenario: Mutex<ScenarioInstance>,
    pub(crate) overflow_phrases: Option<Vec<String>>,
    pub(crate) run_short: String,
    request_count: Option<u64>,
    dispatched: AtomicU64,
    request_seq: AtomicU64,
    /// Shared with the stop's watcher, which holds nothing else of the run (the records' sender
    /// must be gone when the replay returns).
    stopped: Arc<AtomicBool>,
}

impl Ctx {
    /// Takes one dispatch of the request count; `false` (and the stop) once the run is stopped
    /// or the count is spent.
    pub(crate) fn take_dispatch(&self) -> bool {
        if self.stopped.load(Ordering::Relaxed) {
            return false;
        }
        let taken = self.dispatched.fetch_add(1, Ordering::Relaxed);
        if self.request_count.is_some_and(|limit| taken >= limit) {
            self.dispatched.fetch_sub(1, Ordering::Relaxed);
            self.stop();
            return false;
        }
        true
    }

    /// Whether nothing new may start.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// The next request id of the run.
    pub(crate) fn next_request_id(&self) -> String {
        let seq = self.request_seq.fetch_add(1, Ordering::Relaxed);
        format!("{}-r{seq}", self.run_short)
    }
}

/// The recorded offset of every graph's traces from the corpus's earliest recorded start.
fn graph_offsets(corpus: &GraphCorpus) -> Vec<Duration> {
    let earliest = |graph: &agentx_dataset::graph_ir::Graph| {
        graph
            .nodes
            .iter()
            .filter_map(|n| n.recorded_start.and_then(|s| s.unix_ms))
            .min()
    };
    let starts: Vec<Option<u64>> = corpus.graphs().iter().map(earliest).collect();
    let first = starts.iter().flatten().min().copied().unwrap_or(0);
    starts
        .iter()
        .map(|s| Duration::from_millis(s.map_or(0, |ms| ms - first)))
        .collect()
}

/// Runs the corpus's trace instances to the end (one pass, or until the stop condition).
pub async fn run(cfg: GraphConfig, inputs: GraphInputs) -> GraphOutcome {
    let nodes = inputs.corpus.graphs().iter().flat_map(|g| &g.nodes);
    let headed: Vec<&str> = nodes
        .filter(|n| !n.request.extra_headers.is_empty())
        .map(|n| n.id.as_str())
        .collect();
    if !headed.is_empty() {
        tracing::warn!(
            "nodes {headed:?} set extra_headers, which this replay does not send (the client \
             sends the run's headers only)"
        );
    }
    let bodies = inputs
        .corpus
        .graphs()
        .iter()
        .map(|graph| prompt::bodies(graph, &inputs.body))
        .collect();
    let ctx = Arc::new(Ctx {
        corpus: inputs.corpus,
        client: inputs.client,
        bodies,
        counter: inputs.counter,
        records: inputs.records,
        clock: inputs.clock,
        use_server_token_count: cfg.use_server_token_count,
        scenario: Mutex::new(inputs.scenario),
        overflow_phrases: inputs.overflow_phrases,
        run_short: cfg.run_id.chars().take(8).collect(),
        request_count: cfg.request_count,
        dispatched: AtomicU64::new(0),
        request_seq: AtomicU64::new(0),
        stopped: Arc::new(AtomicBool::new(false)),
    });
    let watcher = tokio::spawn(watch_stop(
        ctx.stopped.clone(),
        cfg.duration,
        inputs.interrupt,
    ));
    let outcome = if cfg.open_loop {
        open_loop(&ctx, &cfg).await
    } else {
        lanes(&ctx, &cfg).await
    };
    watcher.abort();
    outcome
}

/// Stops the run at the duration or an interrupt.
async fn watch_stop(
    stopped: Arc<AtomicBool>,
    duration: Option<Duration>,
    mut interrupt: watch::Receiver<u32>,
) {
    let deadline = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = deadline => {}
        _ = interrupt.wait_for(|count| *count > 0) => {}
    }
    stopped.store(true, Ordering::Relaxed);
}

/// The closed loop: `concurrency` lanes, each starting the next trace when its instance ends.
async fn lanes(ctx: &Arc<Ctx>, cfg: &GraphConfig) -> GraphOutcome {
    let traces = ctx.corpus.traces().len() as u64;
    let next = Arc::new(AtomicU64::new(0));
    let recycles = cfg.recycles();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..cfg.concurrency.unwrap_or(1).max(1) {
        let (ctx, next) = (ctx.clone(), next.clone());
        set.spawn(async move {
            let mut outcome = GraphOutcome::default();
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if traces == 0 || ctx.stopped() || (!recycles && seq >= traces) {
                    return outcome;
                }
                let ended = trace::run(&ctx, (seq % traces) as usize, seq).await;
                ended.add_to(&mut outcome);
            }
        });
    }
    sum(set).await
}

/// The open loop: every trace at its graph's recorded offset, at most `concurrency` in flight
/// when it is set.
async fn open_loop(ctx: &Arc<Ctx>, cfg: &GraphConfig) -> GraphOutcome {
    let offsets: Vec<Duration> = graph_offsets(&ctx.corpus)
        .into_iter()
        .map(|offset| offset.div_f64(cfg.replay_speedup))
        .collect();
    let cap = cfg
        .concurrency
        .map_or(Semaphore::MAX_PERMITS, |n| n.max(1) as usize);
    let slots = Arc::new(Semaphore::new(cap));
    let start = tokio::time::Instant::now();
    let mut order: Vec<usize> = (0..ctx.corpus.traces().len()).collect();
    order.sort_by_key(|&i| offsets[ctx.corpus.traces()[i].graph]);
    let mut set = tokio::task::JoinSet::new();
    for (seq, index) in order.into_iter().enumerate() {
        tokio::time::sleep_until(start + offsets[ctx.corpus.traces()[index].graph]).await;
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        if ctx.stopped() {
            break;
        }
        let ctx = ctx.clone();
        set.spawn(async move {
            let mut outcome = GraphOutcome::default();
            trace::run(&ctx, index, seq as u64)
                .await
                .add_to(&mut outcome);
            drop(slot);
            outcome
        });
    }
    sum(set).await
}

/// The lanes' counts summed.
async fn sum(mut set: tokio::task::JoinSet<GraphOutcome>) -> GraphOutcome {
    let mut total = GraphOutcome::default();
    while let Some(done) = set.join_next().await {
        match done {
            Ok(part) => {
                total.instances += part.instances;
                total.complete += part.complete;
                total.dispatches += part.dispatches;
                total.failed += part.failed;
                total.stalled += part.stalled;
            }
            Err(error) => tracing::error!("a graph replay lane ended abnormally: {error}"),
        }
    }
    total
}
