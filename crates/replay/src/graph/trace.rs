//! One trace instance, as aiperf's `TraceExecutor` runs it
//! (docs/specs/agent-graph-ir.md#9-scheduling-and-concurrency), with the anchors of
//! docs/specs/agent-graph-ir.md#5-edges-and-timing-anchors-modelspystaticedge-unknown-fields-rejected
//! and the fan-in of
//! docs/specs/agent-graph-ir.md#6-fan-in-modelspychannelrequirement-unknown-fields-rejected-count-always-serialized:
//! the entry nodes scheduled at the instance's start; a node scheduled once, by the first of its
//! in-edges whose anchor happens (later schedules are dropped); then held until the first-token
//! latch of its first-token edge's source is set (at the first token, or when the source ends
//! without one) and its fan-in is met (`count` node writes to each channel waited on); then held
//! until its gate, the latest of its in-edges' anchors plus their delays (an anchor that has not
//! happened, the other predecessor of an OR-scheduled node, is not waited on), its edges' and its
//! own `min_start_delay_us` after it became ready; then dispatched. On completion its reply is
//! written to its output channel and its completion successors are scheduled; its dispatch and
//! first-token successors were scheduled at its dispatch.
//!
//! A failed request writes nothing and schedules no completion successors (its producer is done,
//! as in aiperf's channel store); a node whose fan-in can then never be met stalls, and the
//! instance ends when nothing is in flight and no gate is pending. A first-token successor of a
//! failed node falls back to the source's dispatch plus `delay_after_predecessor_start_us`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::{prompt, Ctx, GraphOutcome};
use crate::timer;
use agentx_dataset::graph_ir::{Anchor, Graph, NodeIndex};
use agentx_protocol::{FirstTokenHook, RequestIds};

/// What a node's request task tells its instance.
#[derive(Debug)]
enum Event {
    /// The response's first content chunk arrived.
    FirstToken(NodeIndex, Instant),
    /// The response ended: its reply, or `None` when it failed.
    Done(NodeIndex, Instant, Option<String>),
}

/// Where a node is in its instance.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// Not scheduled.
    Idle,
    /// Scheduled; waiting for its first-token latch and its fan-in.
    Waiting,
    /// Ready; waiting for its gate.
    Gated(Instant),
    /// Sent, not ended.
    InFlight,
    /// Ended well.
    Done,
    /// Ended with a failure.
    Failed,
    /// Would have dispatched after the stop.
    Skipped,
}

/// The times of one node of the instance.
#[derive(Debug, Clone, Default)]
struct Times {
    dispatched: Option<Instant>,
    first_token: Option<Instant>,
    ended: Option<Instant>,
}

/// How one instance ended.
#[derive(Debug, Default)]
pub(super) struct Ended {
    dispatches: u64,
    failed: u64,
    stalled: u64,
}

impl Ended {
    /// Adds this instance to `outcome`.
    pub(super) fn add_to(&self, outcome: &mut GraphOutcome) {
        outcome.instances += 1;
        outcome.complete += u64::from(self.stalled == 0 && self.failed == 0);
        outcome.dispatches += self.dispatches;
        outcome.failed += self.failed;
        outcome.stalled += self.stalled;
    }
}

/// The live state of one instance.
pub(super) struct Instance<'g> {
    graph: &'g Graph,
    start: Instant,
    stages: Vec<Stage>,
    times: Vec<Times>,
    /// Node writes to each channel so far.
    writes: Vec<u32>,
    /// The replies of the nodes that ended well.
    replies: HashMap<NodeIndex, String>,
    gates: BinaryHeap<Reverse<(Instant, NodeIndex)>>,
}

impl<'g> Instance<'g> {
    /// An instance of `graph` started at `start`, its entry nodes scheduled.
    pub(super) fn new(graph: &'g Graph, start: Instant) -> Self {
        let mut instance = Instance {
            graph,
            start,
            stages: vec![Stage::Idle; graph.nodes.len()],
            times: vec![Times::default(); graph.nodes.len()],
            writes: vec![0; graph.channels.len()],
            replies: HashMap::new(),
            gates: BinaryHeap::new(),
        };
        for &entry in &graph.entries {
            instance.schedule(entry);
        }
        instance
    }

    /// Schedules `node` unless it was scheduled before (aiperf drops duplicate schedules).
    fn schedule(&mut self, node: NodeIndex) {
        if self.stages[node.0 as usize] == Stage::Idle {
            self.stages[node.0 as usize] = Stage::Waiting;
        }
    }

    /// Whether the first-token latches `node` waits on are set.
    fn latched(&self, node: NodeIndex) -> bool {
        self.graph
            .node(node)
            .in_edges
            .iter()
            .all(|edge| match edge.anchor {
                Anchor::FirstToken { source, .. } => {
                    let times = &self.times[source.0 as usize];
                    times.first_token.is_some() || times.ended.is_some()
                }
                _ => true,
            })
    }

    /// Whether every fan-in requirement of `node` is met.
    fn fanned_in(&self, node: NodeIndex) -> bool {
        self.graph
            .node(node)
            .inputs
            .iter()
            .all(|input| self.writes[input.channel.0 as usize] >= input.count)
    }

    /// The instant `node` may fire, having become ready at `ready`.
    fn gate(&self, node: NodeIndex, ready: Instant) -> Instant {
        let us = |delay: f64| Duration::from_secs_f64(delay / 1e6);
        let spec = self.graph.node(node);
        let mut gate = ready + us(spec.min_start_delay_us);
        for edge in &spec.in_edges {
            let at = match edge.anchor {
                Anchor::Start { min_start_delay_us } => Some(self.start + us(min_start_delay_us)),
                Anchor::Completion { source, delay_us } => self.times[source.0 as usize]
                    .ended
                    .map(|t| t + us(delay_us)),
                Anchor::Dispatch { source, delay_us } => self.times[source.0 as usize]
                    .dispatched
                    .map(|t| t + us(delay_us)),
                Anchor::FirstToken {
                    source,
                    delay_us,
                    dispatch_fallback_us,
                } => {
                    let times = &self.times[source.0 as usize];
                    match times.first_token {
                        Some(first) => Some(first + us(delay_us)),
                        None => times.dispatched.map(|t| t + us(dispatch_fallback_us)),
                    }
                }
            };
            gate = gate.max(ready + us(edge.min_start_delay_us));
            if let Some(at) = at {
                gate = gate.max(at);
            }
        }
        gate
    }

    /// Moves every waiting node whose latch and fan-in are met to its gate; returns the nodes
    /// whose gate has passed at `now`, with their gates, in index order.
    fn due(&mut self, now: Instant) -> Vec<(NodeIndex, Instant)> {
        for index in 0..self.stages.len() {
            let node = NodeIndex(index as u32);
            if self.stages[index] == Stage::Waiting && self.latched(node) && self.fanned_in(node) {
                let gate = self.gate(node, now);
                self.stages[index] = Stage::Gated(gate);
                self.gates.push(Reverse((gate, node)));
            }
        }
        let mut due = Vec::new();
        while let Some(&Reverse((gate, node))) = self.gates.peek() {
            if gate > now {
                break;
            }
            self.gates.pop();
            due.push((node, gate));
        }
        due.sort();
        due
    }

    /// `node` went to the endpoint at `at`: its dispatch and first-token successors are
    /// scheduled.
    fn dispatched(&mut self, node: NodeIndex, at: Instant) {
        self.stages[node.0 as usize] = Stage::InFlight;
        self.times[node.0 as usize].dispatched = Some(at);
        let graph = self.graph;
        for &next in &graph.node(node).on_dispatch {
            self.schedule(next);
        }
    }

    /// Applies what a request task told.
    fn apply(&mut self, event: Event) {
        match event {
            Event::FirstToken(node, at) => self.times[node.0 as usize].first_token = Some(at),
            Event::Done(node, at, reply) => {
                let index = node.0 as usize;
                self.times[index].ended = Some(at);
                let Some(reply) = reply else {
                    self.stages[index] = Stage::Failed;
                    return;
                };
                self.stages[index] = Stage::Done;
                let graph = self.graph;
                self.writes[graph.node(node).output.0 as usize] += 1;
                self.replies.insert(node, reply);
                for &next in &graph.node(node).on_completion {
                    self.schedule(next);
                }
            }
        }
    }

    /// The earliest pending gate.
    fn next_gate(&self) -> Option<Instant> {
        self.gates.peek().map(|Reverse((gate, _))| *gate)
    }

    fn in_flight(&self) -> usize {
        self.stages
            .iter()
            .filter(|s| **s == Stage::InFlight)
            .count()
    }

    fn count(&self, stage: Stage) -> u64 {
        self.stages.iter().filter(|s| **s == stage).count() as u64
    }
}

/// Runs instance `seq` of trace `index` to its end.
pub(super) async fn run(ctx: &Arc<Ctx>, index: usize, seq: u64) -> Ended {
    let corpus = ctx.corpus.clone();
    let trace = &corpus.traces()[index];
    let graph = corpus.graph_of(trace);
    let instance_id = format!("{}-g{seq}", ctx.run_short);
    let mut instance = Instance::new(graph, timer::now());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_keep, never) = watch::channel(false);
    let mut ended = Ended::default();
    loop {
        let now = timer::now();
        let due = instance.due(now);
        if !due.is_empty() {
            for (node, gate) in due {
                if !ctx.take_dispatch() {
                    instance.stages[node.0 as usize] = Stage::Skipped;
                    continue;
                }
                let sending = prompt::Sending {
                    instance: instance_id.clone(),
                    trace: index,
                    node,
                    messages: prompt::messages(&trace.prompts[node.0 as usize], &instance.replies),
                    intended: gate,
                };
                instance.dispatched(node, now);
                ended.dispatches += 1;
                tokio::spawn(send(ctx.clone(), sending, tx.clone(), never.clone()));
            }
            // Dispatch successors may be due at once.
            continue;
        }
        if instance.in_flight() == 0 && instance.gates.is_empty() {
            break;
        }
        let gate = instance.next_gate();
        tokio::select! {
            event = rx.recv() => {
                if let Some(event) = event {
                    instance.apply(event);
                }
            }
            () = sleep_until(gate) => {}
        }
        while let Ok(event) = rx.try_recv() {
            instance.apply(event);
        }
    }
    ended.failed = instance.count(Stage::Failed);
    ended.stalled = instance.count(Stage::Waiting) + instance.count(Stage::Skipped);
    ended
}

/// Sleeps until `gate`, forever without one.
async fn sleep_until(gate: Option<Instant>) {
    match gate {
        Some(gate) => tokio::time::sleep_until(tokio::time::Instant::from_std(gate)).await,
        None => std::future::pending().await,
    }
}

/// Sends one node's request, records it, and tells the instance its first token and its end.
async fn send(
    ctx: Arc<Ctx>,
    sending: prompt::Sending,
    tx: mpsc::UnboundedSender<Event>,
    mut never: watch::Receiver<bool>,
) {
    let node = sending.node;
    let request_id = ctx.next_request_id();
    let (body, prompt_text, max_tokens) = prompt::body(&ctx, &sending);
    let first = tx.clone();
    let hook = move |at: Instant| {
        let _ = first.send(Event::FirstToken(node, at));
    };
    let exchange = ctx
        .client
        .send(
            body,
            RequestIds {
                request_id: &request_id,
                correlation_id: &sending.instance,
                parent_correlation_id: None,
                root_correlation_id: Some(&sending.instance),
                last: false,
                on_first_token: Some(FirstTokenHook(&hook)),
            },
            true,
            &mut never,
        )
        .await;
    let reply = exchange.failure.is_none().then(|| exchange.text.clone());
    let record = prompt::record(
        &ctx,
        &sending,
        request_id,
        &prompt_text,
        max_tokens,
        &exchange,
    );
    ctx.records.send(record);
    let _ = tx.send(Event::Done(node, exchange.end, reply));
}
