//! The session-tree scheduler (docs/specs/session-trees.md#profiling-schedule,
//! docs/agentx-v1-reference.md M2/M3): replays [`SessionTree`]s with trees, not requests, as the
//! unit of concurrency.
//!
//! - **Lanes hold trees.** Each lane holds one runtime tree at a time: its root stream and the child
//!   streams its branches spawn. In-flight requests may exceed the lane count. A lane's next tree
//!   starts (at root turn 0, drawn round-robin from the corpus, with the next marker pass of its
//!   trace) only when the whole tree drained: the root's terminal turn returned and every started
//!   child finished.
//! - **Shards.** A shard of a sharded run replays its own lanes of the whole plan
//!   ([`TreePlan::shard`]): its sampler takes only the trees it owns
//!   (`super::tree::Sampler`), its primers and first turns sit on the whole plan's timeline
//!   ([`TreePlan::whole`]), and its warmup hand-off and stops go through the rendezvous as the
//!   single-stream replay's do.
//! - **Warmup.** Every alive stream with a warm turn sends it (`max_tokens` from the scenario's
//!   rules, the tree's marker, the full recorded prefix), spread so that every primer's recorded
//!   position lines up with t* (or all at once). A failed depth-0 primer aborts the run; a depth-0
//!   context overflow is counted and the lane starts a fresh tree when profiling begins (aiperf
//!   aborts the run on it); a failed child primer is logged and its stream goes on. The primers
//!   have no deadline. The optional cache-pressure stage that follows aborts the run on any
//!   depth-0 error, cancellation or overflow, and the warmup grace period bounds its drain.
//! - **Content.** Every stream's history up to its first live reply is the recorded one (assistant
//!   text included), in either assistant mode; in live mode real replies replace the recorded text
//!   from then on.
//! - **Tasks.** A request task that panics yields a failed record with the panic as its cause and
//!   ends its stream, like any request that cannot go on.
//! - **Profiling.** Every alive, non-waiting stream sends its next turn `offset − T0` after the start;
//!   later turns follow their previous response's end by the scenario's end-to-start delay. A root
//!   turn that spawns a branch starts its children at the turn's issue (when the branch began
//!   before the turn's recorded end) or at its return, unless that return is a context overflow
//!   ending the root before its last turn; a root turn that joins branches waits for
//!   every started child to finish; every turn waits for its replay-barrier predecessors in the
//!   same runtime tree.
//! - **Idle caps.** When nothing is in flight anywhere, pending timers move earlier so that the
//!   earliest fires at most the system idle cap after the last response; with a per-tree cap, a
//!   tree with nothing in flight has its own timers moved the same way.
//! - **Open loop.** With [`TreePlan::arrivals`] there are no planned lanes and no warmup: the
//!   lanes are slots, and each arrival of the seeded schedule ([`super::arrivals`]) starts the
//!   sampler's next tree at root turn 0 in a free slot (its ordinal is the tree's marker pass), or
//!   is rejected and counted when every slot holds a tree; a drained tree frees its slot instead of
//!   recycling. Arrivals more than one mean inter-arrival late are skipped and counted.
//! - **Never stuck.** A tree with turns held by a join or the barrier and nothing in flight or
//!   scheduled (a predecessor that will never run, say after an overflow) releases them, counted
//!   in [`TreeCounts::forced_releases`], instead of holding its lane forever.
//!
//! Records, the threshold, interrupts, the grace period and the stop are those of the
//! single-stream replay ([`super`]); each request's record is sent the moment it completes.

//!
//! The files: `state` is the state machine (runtime trees, stream states, timers, what a fired
//! timer or a returned request changes), `warmup` the primers, the cache-pressure stage and its
//! hand-off, `stream` a stream's request tasks; this file drives them through the phases.
//! The state machine's paused-time tests are in `tests.rs`.

mod state;
mod stream;
#[cfg(test)]
mod tests;
mod warmup;

/// One tree of the plan's corpus, held apart from the scheduler's state: a handle on the corpus
/// and the tree's index in it.
#[derive(Clone)]
pub(super) struct TreeRef {
    corpus: Arc<TreeCorpus>,
    index: usize,
}

impl TreeRef {
    /// The tree's `index`-th tree of `corpus`.
    pub(super) fn new(corpus: &Arc<TreeCorpus>, index: usize) -> TreeRef {
        TreeRef {
            corpus: Arc::clone(corpus),
            index,
        }
    }

    /// The trajectory of the tree's stream `stream`.
    pub(super) fn stream_trajectory(&self, stream: u32) -> agentx_dataset::Trajectory<'_> {
        self.corpus.stream(self.index, stream as usize)
    }

    /// The conversation id of the tree's stream `stream`.
    pub(super) fn stream_id(&self, stream: u32) -> &str {
        &self.streams[stream as usize].id
    }
}

impl std::ops::Deref for TreeRef {
    type Target = SessionTree;

    fn deref(&self) -> &SessionTree {
        &self.corpus.trees[self.index]
    }
}

use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::tree::{Sampler, TreeLane, Whole};
use super::{
    bar, timer, ReplayConfig, ReplayInputs, ReplayOutcome, Rest, Shared, StopReason, Tally,
};
use agentx_dataset::tree::corpus::TreeCorpus;
use agentx_dataset::tree::SessionTree;
use agentx_metrics::scrape_log::Boundary;
use agentx_scenario::types_v2::ReplayRules;
use state::{Sched, St};
use stream::Stage;

/// What the scheduler replays: the corpus's trees and their streams' trajectories, the planned
/// lanes, the scenario's rules and every turn's delay.
pub struct TreePlan {
    /// The corpus's session trees, in corpus order, and one trajectory per stream
    /// ([`TreeCorpus::stream`]). The replay's tasks share it; it is freed with the last of them.
    pub corpus: Arc<TreeCorpus>,
    /// The lanes this process replays (a shard's are numbered from 0 here; see [`TreeShard`]).
    pub lanes: Vec<TreeLane>,
    /// Where the sampler goes on from for recycled trees.
    pub next_draw: usize,
    /// What the whole plan fixes for every shard: the warmup's largest lead, profiling's T0, the
    /// marker passes.
    pub whole: Whole,
    /// A sharded run's part: which trees this shard recycles, and its lanes' numbers in the whole
    /// plan; `None` in one process.
    pub shard: Option<TreeShard>,
    /// The scenario's replay rules (warmup tokens and spread, failures, barrier, idle caps).
    pub rules: ReplayRules,
    /// Per stream (global index), per turn: the end-to-start delay in ms (0 for turn 0).
    pub delays_ms: Vec<Vec<f64>>,
    /// `--burst-phase-starts`: primers all at once, and each lane's T0 its own.
    pub burst: bool,
    /// The warmup's cache-pressure stage after the primers, if any.
    pub pressure: Option<Pressure>,
    /// Open-loop session arrivals instead of lanes: `lanes` is empty, and each arrival starts a
    /// whole tree from root turn 0 in a free slot.
    pub arrivals: Option<OpenLoop>,
}

/// An open-loop run: the arrival process, and the ceiling on sessions in flight (the slots an
/// arrival may take; one over it is rejected and counted, never queued).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenLoop {
    /// The arrival process and its seed.
    pub spec: super::arrivals::ArrivalSpec,
    /// Sessions in flight at most (`--concurrency`): an arrival when all are taken is rejected.
    pub slots: u32,
}

/// One shard's part of a session-tree run.
#[derive(Debug, Clone)]
pub struct TreeShard {
    /// This shard's index, from 0.
    pub index: u32,
    /// Per corpus tree, the shard that recycles it ([`super::tree::tree_owners`]).
    pub owners: Vec<u32>,
    /// Per lane of [`TreePlan::lanes`], its number in the whole plan (records, markers).
    pub lane_ids: Vec<u32>,
}

/// The warmup's optional cache-pressure stage (docs/specs/session-trees.md#cache-pressure-stage):
/// after the primers, the trees go on with no idle delay, 1-token requests, the barrier on and drained
/// trees recycling, until its end; then profiling resumes every stream where the stage left it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pressure {
    /// `--warmup-requests-per-lane N`: each lane sends N requests beyond its primers.
    RequestsPerLane(u64),
    /// `--agentic-cache-warmup-duration D`: the stage releases turns for D.
    Duration(Duration),
}

pub use agentx_metrics::tree_counts::TreeCounts;

/// The outcome of a session-tree replay.
pub struct TreeOutcome {
    /// The stop reason, request counts and profiling window, as the single-stream replay returns them.
    pub replay: ReplayOutcome,
    /// What the scheduler counted beyond the requests.
    pub counts: TreeCounts,
}

/// The scheduler's wake-up at its earliest timer, armed anew only when that instant changes: each
/// arming queues a deadline on the timer thread and wakes that thread, which once per response
/// would cost as much as the rest of the scheduler's work.
pub(super) struct Wake {
    at: Option<Instant>,
    pub(super) fut: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Wake {
    pub(super) fn new() -> Wake {
        Wake {
            at: None,
            fut: Box::pin(std::future::pending()),
        }
    }

    /// Makes `fut` complete at `at` (never, for none).
    pub(super) fn arm(&mut self, sh: &Arc<Shared>, at: Option<Instant>) {
        if at == self.at {
            return;
        }
        self.at = at;
        self.fut = match at {
            Some(at) => {
                let sh = sh.clone();
                Box::pin(async move { crate::lane::sleep_until(&sh, at).await })
            }
            None => Box::pin(std::future::pending()),
        };
    }

    /// `fut` completed: it must not be polled again, and the next `arm` arms anew.
    pub(super) fn fired(&mut self) {
        self.at = None;
        self.fut = Box::pin(std::future::pending());
    }
}

/// Runs a session-tree replay to its end: warmup primers, then profiling until the duration, the
/// threshold or an interrupt. Records go to `inputs.records` as they complete.
///
/// The scheduler runs as a task of the runtime: every response passes through its loop, and on a
/// worker thread the request task that finishes wakes it (and it spawns the next request) on the
/// same thread, where from the thread blocking on the runtime each response would cost two
/// cross-thread wake-ups.
pub async fn run(cfg: ReplayConfig, plan: TreePlan, inputs: ReplayInputs) -> TreeOutcome {
    match tokio::spawn(schedule(cfg, plan, inputs)).await {
        Ok(o) => o,
        Err(e) => match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            Err(e) => panic!("the session-tree scheduler was cancelled: {e}"),
        },
    }
}

async fn schedule(cfg: ReplayConfig, plan: TreePlan, inputs: ReplayInputs) -> TreeOutcome {
    let (mut sc, rest, lanes_plan) = setup(cfg, plan, inputs);
    let Rest {
        mut interrupt,
        on_profiling,
        mut threshold_rx,
        stride,
        link,
        mut remote_stop,
        local_stop,
        mut early_stop,
    } = rest;
    let sh = sc.sh.clone();
    sh.boundary(Boundary::WarmupStart).await;
    let mut warmed = warmup::run(&mut sc, &lanes_plan, &mut interrupt).await;
    // A sharded run: tell the others how this warmup ended, and begin profiling only when every
    // shard's warmup returned.
    // After the cache-pressure stage, profiling's T0 is the smallest of every shard's.
    let mut handoff_t0 = match &warmed {
        Ok(w) if w.pressured => sc.handoff_offset(),
        _ => None,
    };
    let sharded = link.is_some();
    if let Some((done, profile, ..)) = link {
        let (mut interrupted, failures) = match &warmed {
            Ok(_) => (false, Vec::new()),
            Err(s) => (s.interrupted, s.failures.clone()),
        };
        let warm_end = super::shard::WarmEnd {
            interrupted: &mut interrupted,
            failures: &failures,
            t0_ms: &mut handoff_t0,
        };
        let stop = local_stop.as_ref();
        if let Some(outcome) =
            super::shard::shard_warmup(&sh, warm_end, done, profile, stop, stride, &mut interrupt)
                .await
        {
            return TreeOutcome {
                replay: outcome,
                counts: sc.counts,
            };
        }
        if interrupted && warmed.is_ok() {
            warmed = Err(warmup::WarmupStop {
                interrupted,
                failures,
            });
        }
    }
    let warmed = match warmed {
        Ok(w) => w,
        Err(stop) => {
            sh.progress.finish();
            return TreeOutcome {
                replay: super::warmup_stopped(&sh, stop.interrupted, &stop.failures),
                counts: sc.counts,
            };
        }
    };
    // In one process the hand-off finds its own T0.
    let handoff_t0 = handoff_t0.filter(|_| sharded);
    // The warmup (primers and cache-pressure stage) drained: the scrape the profiling counters
    // start from, before the first profiling request.
    sh.boundary(Boundary::ProfilingStart).await;
    let (prof_start, start) =
        start_profiling(&mut sc, &lanes_plan, (&warmed, handoff_t0), on_profiling);
    let stops = super::Stops {
        interrupt: &mut interrupt,
        threshold: &mut threshold_rx,
        remote: remote_stop.as_mut(),
        local: local_stop.as_ref(),
        shard: stride.0,
        early: early_stop.as_mut(),
    };
    let (stop, message) = profile(&mut sc, start, prof_start, stops).await;
    let sending_stopped = sh.boundary_later(Boundary::ProfilingEnd);
    let (stop, message) = drain(&mut sc, &mut interrupt, stop, message).await;
    let outcome = finish(sc, stop, message, prof_start);
    // Every profiling request returned or was cancelled: the scrape the counters end at.
    if let Some(pending_scrape) = sending_stopped {
        let _ = pending_scrape.await;
    }
    sh.boundary(Boundary::ProfilingComplete).await;
    outcome
}

/// The scheduler of a plan: the shared state, every lane's planned tree where t* left it, and what
/// the phase loops take from the inputs.
fn setup(cfg: ReplayConfig, plan: TreePlan, inputs: ReplayInputs) -> (Sched, Rest, Vec<TreeLane>) {
    let recycler = super::recycle::Recycler::new(&[], std::iter::empty(), 0);
    let n_lanes = match &plan.arrivals {
        Some(o) => o.slots as usize,
        None => plan.lanes.len(),
    };
    let (sh, rest) = Shared::build(cfg, inputs, Vec::new(), recycler, n_lanes as u64);
    let passes: HashMap<String, u32> = plan.whole.passes.clone();
    let corpus = Arc::clone(&plan.corpus);
    let trees = &corpus.trees;
    let n_trees = trees.len();
    let usable = |t: usize| !trees[t].streams[0].turns.is_empty();
    let sampler = match &plan.shard {
        Some(s) => Sampler::new(
            plan.next_draw,
            Some(s.owners.clone()),
            s.index,
            n_trees,
            usable,
        ),
        None => Sampler::new(plan.next_draw, None, 0, n_trees, usable),
    };
    let lanes_plan = plan.lanes.clone();
    let mut sc = Sched {
        sh,
        lanes: (0..n_lanes).map(|_| None).collect(),
        heap: BinaryHeap::new(),
        seq: 0,
        gen: 0,
        sampler,
        passes,
        tasks: JoinSet::new(),
        in_flight: 0,
        idle_since: timer::now(),
        stage: Stage::Primers,
        pressure_sent: vec![0; n_lanes],
        paused: false,
        counts: TreeCounts::default(),
        schedule: None,
        markers_seen: Some(std::collections::HashSet::new()),
        plan,
    };
    for l in &lanes_plan {
        let lane_tree = sc.planned_tree(l);
        sc.hold(l.lane, Some(lane_tree));
    }
    (sc, rest, lanes_plan)
}

/// Profiling begins: every alive, non-waiting stream is due `offset − T0` after the start (after
/// the pressure stage: where the stage left it, see [`Sched::hand_off`]); a lane whose root primer
/// overflowed starts a fresh tree. Returns the start on the run clock and as an instant.
fn start_profiling(
    sched: &mut Sched,
    lanes_plan: &[TreeLane],
    (warmed, handoff_t0): (&warmup::Warmed, Option<f64>),
    on_profiling: Option<Box<dyn FnOnce(u64) + Send>>,
) -> (u64, Instant) {
    let sh = sched.sh.clone();
    sched.stage = Stage::Profiling;
    sched.heap.clear();
    let prof_start = sh.clock.now_ns();
    let start = timer::now();
    sched.idle_since = start;
    if let Some(notify) = on_profiling {
        notify(prof_start);
    }
    tracing::info!(
        "Phase warmup complete: {} primers returned | elapsed={:.2}s",
        warmed.primers,
        start.duration_since(warmed.start).as_secs_f64()
    );
    tracing::info!(
        "Phase profiling started | profiling_index=0 | target: {:.1}s duration",
        sh.cfg.duration.as_secs_f64()
    );
    // T0 of the whole plan: every shard's streams are due on one timeline.
    let t0_all = sched.plan.whole.t0_ms;
    if warmed.pressured {
        sched.hand_off(start, handoff_t0);
    }
    if let Some(open_loop) = sched.plan.arrivals {
        tracing::info!(
            "open-loop session arrivals: {} per second ({}), at most {} sessions in flight",
            open_loop.spec.rate,
            open_loop.spec.pattern.name(),
            open_loop.slots
        );
        sched.schedule = Some(super::arrivals::Schedule::new(&open_loop.spec, start));
        sched.counts.arrivals = Some(super::arrivals::ArrivalCounts::default());
    }
    for l in lanes_plan.iter().filter(|_| !warmed.pressured) {
        let overflowed = sched.lanes[l.lane as usize]
            .as_ref()
            .is_none_or(|lane_tree| {
                l.streams.iter().any(|s| s.index == 0) && lane_tree.streams[0].st == St::Done
            });
        sched.counts.trees_started += 1;
        sh.tally.lock().expect("tally lock").sessions += 1;
        if overflowed {
            sched.counts.trees_started -= 1;
            sh.tally.lock().expect("tally lock").sessions -= 1;
            sched.recycle(l.lane);
            continue;
        }
        let t0 = if sched.plan.burst {
            l.streams
                .iter()
                .filter(|s| !s.waiting)
                .map(|s| s.offset_ms)
                .fold(f64::INFINITY, f64::min)
        } else {
            t0_all
        };
        let t0 = if t0.is_finite() { t0 } else { 0.0 };
        for s in &l.streams {
            let lane_tree = sched.lanes[l.lane as usize].as_mut().expect("planned");
            lane_tree.streams[s.index as usize].next = s.next_turn;
            lane_tree.streams[s.index as usize].st = St::Waiting;
            let after = (s.offset_ms - t0).max(0.0);
            sched.push_timer(
                l.lane,
                s.index,
                start + Duration::from_secs_f64(after / 1000.0),
            );
        }
    }
    // Trees that start with only future work: the per-tree idle cap counts from the start.
    for lane in 0..sched.lanes.len() as u32 {
        if let Some(lane_tree) = sched.lanes[lane as usize].as_mut() {
            lane_tree.last_end = start;
        }
        sched.settle(lane);
    }
    (prof_start, start)
}

/// Profiling until the duration, the threshold, an interrupt, or every lane out of trees: why it
/// stopped, and a line that explains an early stop.
async fn profile(
    sched: &mut Sched,
    start: Instant,
    prof_start: u64,
    stops: super::Stops<'_>,
) -> (StopReason, Option<String>) {
    let super::Stops {
        interrupt,
        threshold: threshold_rx,
        mut remote,
        local,
        shard,
        mut early,
    } = stops;
    let sh = sched.sh.clone();
    sh.progress
        .phase("profiling", sh.cfg.duration.as_secs().max(1));
    let deadline = tokio::time::Instant::from_std(start + sh.cfg.duration);
    let ticker = sh.cfg.stats_interval;
    let mut tick = tokio::time::interval(ticker.unwrap_or(Duration::from_secs(3600)));
    tick.tick().await;
    let mut bar_tick = tokio::time::interval(Duration::from_millis(500));
    let mut stop = StopReason::Completed;
    let mut message = None;
    sched.fire_due();
    sched.cap_system_idle();
    let mut wake = Wake::new();
    let deadline = tokio::time::sleep_until(deadline);
    tokio::pin!(deadline);
    loop {
        wake.arm(&sh, sched.next_wake());
        tokio::select! {
            Some(r) = sched.tasks.join_next() => {
                if let Ok(finished) = r {
                    sched.on_done(finished);
                }
                sched.fire_due();
                sched.cap_system_idle();
            }
            () = &mut wake.fut => {
                wake.fired();
                sched.fire_due();
                sched.cap_system_idle();
            }
            () = &mut deadline => break,
            _ = threshold_rx.wait_for(|t| *t) => {
                stop = StopReason::ThresholdExceeded;
                let tally = sh.tally.lock().expect("tally lock").clone();
                message = Some(format!(
                    "--failed-request-threshold {} exceeded: {} of {} profiling requests failed; in-flight requests were cancelled",
                    sh.cfg.failed_request_threshold.unwrap_or(0.0), tally.failed, tally.threshold_judged()
                ));
                break;
            }
            _ = interrupt.changed() => {
                (stop, message) = crate::shard::interrupted(local, shard);
                break;
            }
            Some((why, text)) = crate::shard::other_shard(&mut remote) => {
                (stop, message) = crate::shard::stopped_by(why, text);
                break;
            }
            Some(text) = super::precision_reached(&mut early) => {
                (stop, message) = (StopReason::PrecisionReached, Some(text));
                break;
            }
            _ = tick.tick(), if ticker.is_some() => {
                let elapsed = Duration::from_nanos(sh.clock.now_ns() - prof_start);
                let tally = sh.tally.lock().expect("tally lock").clone();
                tracing::info!(
                    "Phase profiling progress | returned={} | in_flight={} | trees={} | errors={} | overflows={} | elapsed={:.1}s",
                    tally.requests, sched.in_flight, sched.counts.trees_started, tally.failed, tally.context_overflows, elapsed.as_secs_f64()
                );
                let srv = sh.srv_row.as_ref().and_then(|f| f());
                sh.progress.block(&sh.live.block(elapsed, "profiling", srv.as_ref()));
            }
            _ = bar_tick.tick() => bar(&sh, prof_start),
            () = async {}, if sched.tasks.is_empty() && sched.heap.is_empty() && sched.schedule.is_none() => {
                // Nothing in flight and nothing to come: every lane is out of trees.
                break;
            }
        }
    }
    (stop, message)
}

/// The stop ([`crate::drain`]): the pending wake-ups are dropped, and the requests in
/// flight are waited out with the state machine taking in each one that ends.
async fn drain(
    sched: &mut Sched,
    interrupt: &mut watch::Receiver<u32>,
    stop: StopReason,
    message: Option<String>,
) -> (StopReason, Option<String>) {
    sched.heap.clear();
    sched.schedule = None;
    let sh = sched.sh.clone();
    super::drain::drain(&sh, sched, interrupt, stop, message).await
}

impl super::drain::InFlight for Sched {
    async fn next_done(&mut self) -> bool {
        match self.tasks.join_next().await {
            None => false,
            Some(Ok(d)) => {
                self.on_done(d);
                true
            }
            Some(Err(_)) => true,
        }
    }

    async fn abandon(&mut self) {
        while self.tasks.join_next().await.is_some() {}
    }
}

/// The outcome of a replay that reached profiling.
fn finish(sched: Sched, stop: StopReason, message: Option<String>, prof_start: u64) -> TreeOutcome {
    let sh = &sched.sh;
    sh.progress.finish();
    let prof_end = sh.clock.now_ns();
    let tally: Tally = sh.tally.lock().expect("tally lock").clone();
    tracing::info!(
        "Phase profiling complete | completed={}, cancelled={}, errors={}, overflows={} | trees started={}, drained={} | elapsed={:.2}s{}",
        tally.ok,
        tally.cancelled,
        tally.failed,
        tally.context_overflows,
        sched.counts.trees_started,
        sched.counts.trees_drained,
        (prof_end - prof_start) as f64 / 1e9,
        if stop.cancelled() { " | was_cancelled=True" } else { "" }
    );
    TreeOutcome {
        replay: ReplayOutcome {
            stop,
            tally,
            profiling_ns: Some((prof_start, prof_end)),
            message,
        },
        counts: sched.counts,
    }
}
