//! The session-tree scheduler (agentx-v1.md §4-5, docs/agentx-v1-reference.md M2/M3): replays
//! [`SessionTree`]s with trees, not requests, as the unit of concurrency.
//!
//! - **Lanes hold trees.** Each lane holds one runtime tree at a time: its root stream and the child
//!   streams its branches spawn. In-flight requests may exceed the lane count. A lane's next tree
//!   starts (at root turn 0, drawn round-robin from the corpus, with the next marker pass of its
//!   trace) only when the whole tree drained: the root's terminal turn returned and every started
//!   child finished.
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
//! - **Never stuck.** A tree with turns held by a join or the barrier and nothing in flight or
//!   scheduled (a predecessor that will never run, say after an overflow) releases them, counted
//!   in [`TreeCounts::forced_releases`], instead of holding its lane forever.
//!
//! Records, the threshold, interrupts, the grace period and the stop are those of the
//! single-stream replay ([`super`]); each request's record is sent the moment it completes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::timer;
use super::tree::TreeLane;
use super::{
    bar, bust, ReplayConfig, ReplayInputs, ReplayOutcome, Rest, Session, Shared, StopReason, Tally,
};
use crate::dataset::tree::SessionTree;
use crate::dataset::{AssistantMode, Conversation, Dataset, Trajectory};
use crate::record::{Phase, TreeInfo};
use crate::scenario::types_v2::{ReplayRules, TreeId};

/// What the scheduler replays: the corpus's trees and their streams' trajectories, the planned
/// lanes, the scenario's rules and every turn's delay.
pub struct TreePlan {
    /// One trajectory per stream: tree `i`'s stream `s` is `first_stream[i] + s`.
    pub streams: &'static Dataset,
    pub trees: &'static [SessionTree],
    pub first_stream: &'static [u32],
    pub lanes: Vec<TreeLane>,
    /// Where the sampler goes on from for recycled trees.
    pub next_draw: usize,
    pub rules: ReplayRules,
    /// Per stream (global index), per turn: the end-to-start delay in ms (0 for turn 0).
    pub delays_ms: Vec<Vec<f64>>,
    /// `--burst-phase-starts`: primers all at once, and each lane's T0 its own.
    pub burst: bool,
    /// The warmup's cache-pressure stage after the primers, if any.
    pub pressure: Option<Pressure>,
}

/// The warmup's optional cache-pressure stage (agentx-v1.md §4): after the primers, the trees go on
/// with no idle delay, 1-token requests, the barrier on and drained trees recycling, until its end;
/// then profiling resumes every stream where the stage left it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pressure {
    /// `--warmup-requests-per-lane N`: each lane sends N requests beyond its primers.
    RequestsPerLane(u64),
    /// `--agentic-cache-warmup-duration D`: the stage releases turns for D.
    Duration(Duration),
}

/// What the scheduler counted beyond the request tally.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TreeCounts {
    /// Trees started in profiling (the lanes' first trees and every recycled one).
    pub trees_started: u64,
    /// Trees that drained (in profiling and in the warmup's cache-pressure stage).
    pub trees_drained: u64,
    /// Child streams spawned during profiling.
    pub children_spawned: u64,
    /// Turns that waited for a join, and for the replay barrier.
    pub join_waits: u64,
    pub barrier_waits: u64,
    /// Held turns released because nothing in their tree could complete what they waited for.
    pub forced_releases: u64,
    /// Times the system idle cap moved the pending timers earlier, and by how much in all (s).
    pub system_idle_shifts: u64,
    pub system_idle_shifted_s: f64,
    /// The same for the per-tree idle cap.
    pub tree_idle_shifts: u64,
    /// Depth-0 warmup primers that overflowed the context (their lanes start a fresh tree), and
    /// child primers that failed (their streams go on).
    pub warmup_root_overflows: u64,
    pub warmup_child_failures: u64,
    /// Requests of the warmup's cache-pressure stage, and trees it recycled.
    pub pressure_requests: u64,
    pub pressure_trees: u64,
    /// Responses for trees that had already been replaced (none expected).
    pub late_events: u64,
    /// The most requests in flight at once.
    pub peak_in_flight: u64,
}

/// The outcome of a session-tree replay.
pub struct TreeOutcome {
    pub replay: ReplayOutcome,
    pub counts: TreeCounts,
}

/// Where the replay is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Primers,
    Pressure,
    Profiling,
}

impl Stage {
    fn phase(self) -> Phase {
        match self {
            Stage::Primers | Stage::Pressure => Phase::Warmup,
            Stage::Profiling => Phase::Profiling,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// A child whose branch has not started.
    NotStarted,
    /// Its next turn has a timer.
    Waiting,
    /// Its next turn is held by a join or the barrier.
    Held,
    InFlight,
    Done,
}

struct RtStream {
    st: St,
    next: u32,
    /// The conversation at `next`, when it was built beforehand.
    conv: Option<Box<Conversation<'static>>>,
    session: Option<Session>,
}

struct RtTree {
    gen: u64,
    tree: usize,
    lane: u32,
    marker: String,
    root_corr: String,
    streams: Vec<RtStream>,
    started: Vec<bool>,
    /// Per stream: turns completed (the barrier's view), seeded with the resume boundaries.
    done_upto: Vec<u32>,
    in_flight: u32,
    timers: u32,
    /// Held turns: (stream, intended ns).
    held: Vec<(u32, u64)>,
    pass: u32,
    /// The recorded instant the tree's replay starts from (ms on the root clock): t*, or root
    /// turn 0's start for a recycled tree; the pressure stage's hand-off measures offsets from it.
    origin_ms: f64,
    /// The end of the tree's last response (or its start): the per-tree idle cap counts from it.
    last_end: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timer {
    at: Instant,
    seq: u64,
    lane: u32,
    gen: u64,
    stream: u32,
}

/// A request's return, as the scheduler sees it.
struct Done {
    lane: u32,
    gen: u64,
    stream: u32,
    turn: u32,
    stage: Stage,
    overflow: bool,
    failed: Option<String>,
    end: Instant,
    /// The conversation at the stream's next turn (none after the last turn or when it could not
    /// be built).
    next: Option<Box<Conversation<'static>>>,
    session: Session,
}

struct Sched {
    sh: Arc<Shared>,
    plan: TreePlan,
    lanes: Vec<Option<RtTree>>,
    heap: BinaryHeap<Reverse<Timer>>,
    seq: u64,
    gen: u64,
    draw: usize,
    passes: HashMap<String, u32>,
    tasks: JoinSet<Done>,
    in_flight: u64,
    /// When the last response left nothing in flight.
    idle_since: Instant,
    stage: Stage,
    /// Per lane: requests sent in the pressure stage.
    pressure_sent: Vec<u64>,
    /// The pressure stage stopped releasing turns.
    paused: bool,
    counts: TreeCounts,
}

impl Sched {
    fn tree(&self, t: usize) -> &'static SessionTree {
        let trees: &'static [SessionTree] = self.plan.trees;
        &trees[t]
    }

    fn push_timer(&mut self, lane: u32, stream: u32, at: Instant) {
        let Some(rt) = self.lanes[lane as usize].as_mut() else {
            return;
        };
        rt.timers += 1;
        rt.streams[stream as usize].st = St::Waiting;
        self.seq += 1;
        self.heap.push(Reverse(Timer {
            at,
            seq: self.seq,
            lane,
            gen: rt.gen,
            stream,
        }));
    }

    fn new_session(&self, rt: &RtTree, stream: u32) -> Session {
        let tree = self.tree(rt.tree);
        let s = &tree.streams[stream as usize];
        let mut session = Session::new(&self.sh, rt.lane, rt.tree, rt.pass, rt.marker.clone());
        let root_corr = if stream == 0 {
            session.correlation_id.clone()
        } else {
            rt.root_corr.clone()
        };
        session.tree = Some(TreeInfo {
            agent_depth: s.depth,
            root_correlation_id: root_corr.clone(),
            parent_correlation_id: (stream != 0).then_some(root_corr),
            source_trace_id: tree.trace_id.clone(),
            prefix_hit_blocks: 0,
            prefix_total_blocks: 0,
            source_outer_idx: None,
            source_inner_idx: None,
        });
        session
    }

    /// A runtime tree of corpus tree `t` on `lane`, every stream not started.
    fn fresh_tree(&mut self, lane: u32, t: usize, marker: String, pass: u32) -> RtTree {
        self.gen += 1;
        let tree = self.tree(t);
        let mut rt = RtTree {
            gen: self.gen,
            tree: t,
            lane,
            marker,
            root_corr: String::new(),
            streams: tree
                .streams
                .iter()
                .map(|_| RtStream {
                    st: St::NotStarted,
                    next: 0,
                    conv: None,
                    session: None,
                })
                .collect(),
            started: vec![false; tree.branches.len()],
            done_upto: vec![0; tree.streams.len()],
            in_flight: 0,
            timers: 0,
            held: Vec::new(),
            pass,
            origin_ms: tree.streams[0].turns.first().map_or(0.0, |t| t.ts_ms),
            last_end: timer::now(),
        };
        let root = self.new_session(&rt, 0);
        rt.root_corr = root.correlation_id.clone();
        if let Some(t) = root.tree.as_ref() {
            debug_assert_eq!(t.root_correlation_id, rt.root_corr);
        }
        rt.streams[0].session = Some(root);
        rt
    }

    /// The runtime tree of a planned lane, its streams where t* left them.
    fn planned_tree(&mut self, lane: &TreeLane) -> RtTree {
        let mut rt = self.fresh_tree(lane.lane, lane.tree, lane.marker.clone(), lane.pass);
        let tree = self.tree(lane.tree);
        if let Some(t) = lane.t_star_ms {
            rt.origin_ms = t;
        } else if let Some(s) = lane.streams.iter().find(|s| s.index == 0) {
            rt.origin_ms = tree.streams[0].turns[s.next_turn as usize].ts_ms;
        }
        let n_root = tree.streams[0].turns.len() as u32;
        let root_next = lane
            .streams
            .iter()
            .find(|s| s.index == 0)
            .map_or(n_root, |s| s.next_turn);
        // Resume boundaries: turns recorded before t* count as completed.
        for (i, s) in tree.streams.iter().enumerate() {
            rt.done_upto[i] = match lane.t_star_ms {
                Some(t) => s
                    .turns
                    .iter()
                    .position(|x| x.ts_ms >= t)
                    .unwrap_or(s.turns.len()) as u32,
                None => 0,
            };
        }
        rt.done_upto[0] = root_next;
        for (b, br) in tree.branches.iter().enumerate() {
            // A branch is under way when its spawn turn is past, or when one of its children is
            // alive at t* (its recorded start came before t* though its spawn turn is still ahead):
            // it is not started again when the root reaches its spawn turn.
            let alive = lane
                .streams
                .iter()
                .any(|s| s.index != 0 && br.children.contains(&(s.index as usize)));
            rt.started[b] = (br.spawn_turn as u32) < root_next || alive;
            if rt.started[b] {
                for &c in &br.children {
                    rt.streams[c].st = St::Done;
                }
            }
        }
        rt.streams[0].st = St::Done;
        for s in &lane.streams {
            let i = s.index as usize;
            rt.streams[i].next = s.next_turn;
            rt.streams[i].st = St::Waiting; // its timer comes with the profiling start
            rt.done_upto[i] = s.next_turn;
            if i != 0 {
                let session = self.new_session(&rt, s.index);
                rt.streams[i].session = Some(session);
            }
        }
        rt
    }

    fn draw_tree(&mut self) -> Option<usize> {
        let n = self.plan.trees.len();
        for _ in 0..n {
            let t = self.draw % n;
            self.draw += 1;
            if !self.plan.trees[t].streams[0].turns.is_empty() {
                return Some(t);
            }
        }
        None
    }

    /// Starts the next tree of the sampler on `lane` at root turn 0, now.
    fn recycle(&mut self, lane: u32) {
        self.lanes[lane as usize] = None;
        if *self.sh.stop_new.borrow() {
            return;
        }
        let Some(t) = self.draw_tree() else { return };
        let trace = self.tree(t).trace_id.clone();
        let pass = {
            let p = self.passes.entry(trace.clone()).or_insert(0);
            let v = *p;
            *p += 1;
            v
        };
        let marker = {
            let mut sc = self.sh.scenario.lock().expect("scenario lock");
            match sc.cache_bust_tree(
                self.sh.cfg.placement,
                &TreeId {
                    run_id: self.sh.cfg.run_id.clone(),
                    pass,
                    lane,
                    trace_id: trace.clone(),
                },
            ) {
                Ok(m) => m.text,
                Err(e) => {
                    tracing::error!("{e}; this tree goes without a cache-bust marker");
                    String::new()
                }
            }
        };
        let rt = self.fresh_tree(lane, t, marker, pass);
        self.lanes[lane as usize] = Some(rt);
        if self.stage == Stage::Profiling {
            self.counts.trees_started += 1;
            self.sh.tally.lock().expect("tally lock").sessions += 1;
        } else {
            self.counts.pressure_trees += 1;
        }
        self.push_timer(lane, 0, timer::now());
    }

    /// Starts branch `b` of the tree on `lane`: each child's turn 0 at `base` plus its recorded
    /// distance from `ref_ts`.
    fn start_branch(&mut self, lane: u32, b: usize, base: Instant, ref_ts: f64) {
        let trees: &'static [SessionTree] = self.plan.trees;
        let Some(rt) = self.lanes[lane as usize].as_mut() else {
            return;
        };
        if rt.started[b] {
            return;
        }
        rt.started[b] = true;
        let tree = &trees[rt.tree];
        for &c in &tree.branches[b].children {
            let Some(first) = tree.streams[c].turns.first() else {
                if let Some(rt) = self.lanes[lane as usize].as_mut() {
                    rt.streams[c].st = St::Done;
                }
                continue;
            };
            let Some(rt) = self.lanes[lane as usize].as_ref() else {
                return;
            };
            let session = self.new_session(rt, c as u32);
            let rt = self.lanes[lane as usize].as_mut().expect("tree");
            rt.streams[c].session = Some(session);
            rt.streams[c].next = 0;
            self.counts.children_spawned += 1;
            let after = if self.stage == Stage::Pressure {
                0.0
            } else {
                (first.ts_ms - ref_ts).max(0.0)
            };
            self.push_timer(
                lane,
                c as u32,
                base + Duration::from_secs_f64(after / 1000.0),
            );
        }
    }

    /// Why stream `s`'s next turn must wait, if it must: `Some(true)` a join, `Some(false)` the
    /// barrier.
    fn holds(&self, rt: &RtTree, s: u32) -> Option<bool> {
        let tree = self.tree(rt.tree);
        let turn = &tree.streams[s as usize].turns[rt.streams[s as usize].next as usize];
        for &b in &turn.joins {
            if rt.started[b]
                && tree.branches[b]
                    .children
                    .iter()
                    .any(|&c| rt.streams[c].st != St::Done)
            {
                return Some(true);
            }
        }
        for &(ps, pt) in &turn.replay_predecessors {
            if rt.done_upto[ps] as usize <= pt && rt.streams[ps].st != St::Done {
                return Some(false);
            }
        }
        None
    }

    /// Sends stream `s`'s next turn now, or holds it.
    fn release(&mut self, lane: u32, s: u32, intended: u64, force: bool) {
        if *self.sh.stop_new.borrow() {
            return;
        }
        let Some(rt) = self.lanes[lane as usize].as_ref() else {
            return;
        };
        if self.stage == Stage::Pressure {
            let limit = match self.plan.pressure {
                Some(Pressure::RequestsPerLane(n)) => n,
                _ => u64::MAX,
            };
            if self.paused || self.pressure_sent[lane as usize] >= limit {
                // Deferred: profiling resumes the stream at this turn.
                let rt = self.lanes[lane as usize].as_mut().expect("tree");
                rt.streams[s as usize].st = St::Waiting;
                return;
            }
        }
        if !force && self.stage != Stage::Primers {
            if let Some(join) = self.holds(rt, s) {
                let rt = self.lanes[lane as usize].as_mut().expect("tree");
                if rt.streams[s as usize].st != St::Held {
                    if join {
                        self.counts.join_waits += 1;
                    } else {
                        self.counts.barrier_waits += 1;
                    }
                }
                rt.streams[s as usize].st = St::Held;
                if !rt.held.iter().any(|h| h.0 == s) {
                    rt.held.push((s, intended));
                }
                return;
            }
        }
        self.dispatch(lane, s, intended);
    }

    fn dispatch(&mut self, lane: u32, s: u32, intended: u64) {
        let stage = self.stage;
        let phase = stage.phase();
        let trees: &'static [SessionTree] = self.plan.trees;
        let g0 = self.plan.first_stream;
        let Some(rt) = self.lanes[lane as usize].as_mut() else {
            return;
        };
        let t = rt.tree;
        let tree = &trees[t];
        let st = &mut rt.streams[s as usize];
        let Some(session) = st.session.take() else {
            // Not expected: a stream is dispatched only with its session. Marking it in flight
            // would keep its tree from draining for the rest of the run; it ends here instead.
            tracing::error!(
                "stream {} of tree {} on lane {lane} has no session; it ends here",
                tree.streams[s as usize].id,
                tree.trace_id
            );
            st.st = St::Done;
            rt.held.retain(|h| h.0 != s);
            return;
        };
        let turn = st.next;
        st.st = St::InFlight;
        let conv = st.conv.take();
        rt.in_flight += 1;
        rt.held.retain(|h| h.0 != s);
        let gen = rt.gen;
        if stage == Stage::Pressure {
            self.pressure_sent[lane as usize] += 1;
            self.counts.pressure_requests += 1;
        }
        self.in_flight += 1;
        self.counts.peak_in_flight = self.counts.peak_in_flight.max(self.in_flight);
        let tt = &tree.streams[s as usize].turns[turn as usize];
        // A branch that began before this root turn's recorded end starts at the turn's issue.
        if s == 0 && stage != Stage::Primers {
            let api = tt.api_time_ms.unwrap_or(0.0);
            let now = timer::now();
            for &b in &tt.spawns {
                let br = &tree.branches[b];
                if api > 0.0 && br.start_timestamp_ms < tt.ts_ms + api {
                    self.start_branch(lane, b, now, tt.ts_ms);
                }
            }
        }
        let job = Job {
            lane,
            gen,
            stream: s,
            turn,
            stage,
            intended,
            max_tokens: match phase {
                Phase::Warmup => self.plan.rules.warmup_max_tokens.max(1),
                Phase::Profiling => tt.max_tokens.max(1),
            },
            prefix: (tt.prefix_hit_blocks, tt.prefix_total_blocks),
            source_idx: (Some(tt.source_outer_idx), tt.source_inner_idx),
            traj: self
                .plan
                .streams
                .trajectory(g0[t] as usize + s as usize)
                .expect("stream exists"),
            num_turns: tree.streams[s as usize].turns.len() as u32,
            conv_id: &tree.streams[s as usize].id,
            conv,
            session,
        };
        self.tasks.spawn(guarded(self.sh.clone(), job));
    }

    /// A response came back: the stream moves on, spawns and joins follow, held turns are
    /// re-checked, and a drained tree's lane recycles.
    fn on_done(&mut self, d: Done) {
        self.in_flight -= 1;
        if self.in_flight == 0 {
            // The system idle cap counts from the response that left nothing in flight.
            self.idle_since = d.end;
        }
        let trees: &'static [SessionTree] = self.plan.trees;
        let Some(rt) = self.lanes[d.lane as usize].as_mut() else {
            self.counts.late_events += 1;
            return;
        };
        if rt.gen != d.gen {
            self.counts.late_events += 1;
            return;
        }
        rt.in_flight -= 1;
        rt.last_end = rt.last_end.max(d.end);
        let tree = &trees[rt.tree];
        let s = d.stream as usize;
        let stream = &tree.streams[s];
        rt.done_upto[s] = rt.done_upto[s].max(d.turn + 1);
        rt.streams[s].session = Some(d.session);
        let last = d.turn as usize + 1 >= stream.turns.len();
        let ends = last
            || d.next.is_none()
            || (d.overflow && (s != 0 || self.plan.rules.overflow_ends_tree));
        if d.stage == Stage::Primers {
            // A primer: the stream resumes in profiling at the turn after it.
            let st = &mut rt.streams[s];
            st.conv = d.next;
            if d.overflow && s == 0 {
                st.st = St::Done;
            } else {
                st.st = St::Waiting;
            }
            return;
        }
        // An overflow before the last turn is the stream's death: a dead root spawns nothing at its
        // return (aiperf skips the branch orchestrator's intercept on such a return; a last-turn
        // overflow still spawns, and a branch started at the turn's issue stays started).
        let terminal_overflow = d.overflow && !last;
        if s == 0 && !terminal_overflow {
            // Branches not started at the turn's issue start at its return.
            let lane = d.lane;
            for &b in &stream.turns[d.turn as usize].spawns {
                let start = tree.branches[b].start_timestamp_ms;
                self.start_branch(lane, b, d.end, start);
            }
        }
        let rt = self.lanes[d.lane as usize].as_mut().expect("tree");
        if ends {
            rt.streams[s].st = St::Done;
            if d.overflow {
                tracing::info!(
                    "stream {} ended at turn {}/{} (context overflow)",
                    stream.id,
                    d.turn,
                    stream.turns.len()
                );
            }
        } else {
            let next = d.turn + 1;
            rt.streams[s].next = next;
            rt.streams[s].conv = d.next;
            let g = self.plan.first_stream[rt.tree] as usize + s;
            let delay = if d.stage == Stage::Pressure {
                0.0
            } else {
                self.plan.delays_ms[g]
                    .get(next as usize)
                    .copied()
                    .unwrap_or(0.0)
                    .max(0.0)
            };
            self.push_timer(
                d.lane,
                d.stream,
                d.end + Duration::from_secs_f64(delay / 1000.0),
            );
        }
        self.settle(d.lane);
    }

    /// Re-checks a tree's held turns, releases them when nothing else can, applies the per-tree
    /// idle cap, and recycles the lane when the tree drained.
    fn settle(&mut self, lane: u32) {
        let Some(rt) = self.lanes[lane as usize].as_ref() else {
            return;
        };
        let held: Vec<(u32, u64)> = rt.held.clone();
        for (s, intended) in held {
            let rt = self.lanes[lane as usize].as_ref().expect("tree");
            if self.holds(rt, s).is_none() {
                let now = self.sh.clock.now_ns();
                self.release(lane, s, intended.max(now), false);
            }
        }
        let rt = self.lanes[lane as usize].as_ref().expect("tree");
        if rt.in_flight == 0 && rt.timers == 0 && !rt.held.is_empty() {
            let held: Vec<(u32, u64)> = rt.held.clone();
            let tree = self.tree(rt.tree);
            for (s, _) in held {
                self.counts.forced_releases += 1;
                tracing::warn!(
                    "tree {} on lane {lane}: a held turn of stream {} waits for requests that will not run; released",
                    tree.trace_id,
                    tree.streams[s as usize].id
                );
                let now = self.sh.clock.now_ns();
                self.release(lane, s, now, true);
            }
        }
        let rt = self.lanes[lane as usize].as_ref().expect("tree");
        if rt.in_flight == 0 && rt.timers > 0 {
            if let Some(cap) = self.sh.cfg.trace_idle_cap {
                self.shift(Some((lane, rt.gen)), rt.last_end + cap, false);
            }
        }
        let rt = self.lanes[lane as usize].as_ref().expect("tree");
        let drained = rt.in_flight == 0
            && rt.timers == 0
            && rt.held.is_empty()
            && rt
                .streams
                .iter()
                .all(|s| matches!(s.st, St::Done | St::NotStarted));
        if drained && self.stage != Stage::Primers {
            for s in &rt.streams {
                if let Some(sess) = &s.session {
                    self.sh.client.end_session(&sess.correlation_id);
                }
            }
            self.counts.trees_drained += 1;
            self.recycle(lane);
        }
    }

    /// Moves pending timers (of one tree, or all) earlier so that the earliest is due at `target`
    /// (never before now), keeping their order.
    fn shift(&mut self, only: Option<(u32, u64)>, target: Instant, system: bool) {
        let mine = |t: &Timer| only.is_none_or(|(l, g)| t.lane == l && t.gen == g);
        let Some(earliest) = self
            .heap
            .iter()
            .filter(|t| mine(&t.0))
            .map(|t| t.0.at)
            .min()
        else {
            return;
        };
        if earliest <= target {
            return;
        }
        let by = earliest - target;
        let now = timer::now();
        let timers: Vec<Timer> = std::mem::take(&mut self.heap)
            .into_iter()
            .map(|Reverse(mut t)| {
                if mine(&t) {
                    t.at = t.at.checked_sub(by).unwrap_or(now).max(now);
                }
                t
            })
            .collect();
        self.heap = timers.into_iter().map(Reverse).collect();
        if system {
            self.counts.system_idle_shifts += 1;
            self.counts.system_idle_shifted_s += by.as_secs_f64();
        } else {
            self.counts.tree_idle_shifts += 1;
        }
    }

    /// Fires every due timer.
    fn fire_due(&mut self) {
        let now = timer::now();
        while let Some(Reverse(t)) = self.heap.peek().copied() {
            if t.at > now {
                break;
            }
            self.heap.pop();
            let Some(rt) = self.lanes[t.lane as usize].as_mut() else {
                continue;
            };
            if rt.gen != t.gen {
                continue;
            }
            rt.timers -= 1;
            if rt.streams[t.stream as usize].st != St::Waiting {
                continue;
            }
            let intended = self.sh.clock.ns_of(t.at);
            self.release(t.lane, t.stream, intended, false);
            self.settle(t.lane);
        }
    }

    /// The system idle cap: with nothing in flight, the earliest pending timer fires at most `cap`
    /// after the last response.
    fn cap_system_idle(&mut self) {
        if self.in_flight > 0 || self.stage != Stage::Profiling {
            return;
        }
        let Some(cap) = self.plan.rules.system_idle_cap_seconds else {
            return;
        };
        if cap.is_finite() && cap >= 0.0 {
            let target = self.idle_since + Duration::from_secs_f64(cap);
            self.shift(None, target.max(timer::now()), true);
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        self.heap.peek().map(|t| t.0.at)
    }
}

/// One request of a stream, as its task takes it.
struct Job {
    lane: u32,
    gen: u64,
    stream: u32,
    turn: u32,
    stage: Stage,
    intended: u64,
    max_tokens: u32,
    prefix: (u32, u32),
    source_idx: (Option<u32>, Option<u32>),
    traj: Trajectory<'static>,
    num_turns: u32,
    conv_id: &'static str,
    /// The conversation at `turn`, when it was built beforehand.
    conv: Option<Box<Conversation<'static>>>,
    session: Session,
}

/// A stream's conversation from `turn` on: the recorded history up to it (live replies replace
/// the recorded text only from the stream's first live reply on, see
/// [`Conversation::with_recorded_history`]).
fn tree_conversation(
    sh: &Shared,
    traj: Trajectory<'static>,
    turn: u32,
) -> Result<Conversation<'static>, crate::dataset::PromptError> {
    sh.synth
        .conversation(traj, turn as usize, sh.cfg.mode)
        .map(Conversation::with_recorded_history)
}

/// Runs a job's request. A panic in it becomes a failed record with the panic as its cause, and
/// the stream ends: its tree drains and every count it held is released.
async fn guarded(sh: Arc<Shared>, job: Job) -> Done {
    let spare = job.session.clone();
    let (who, conv_id) = (
        (job.lane, job.gen, job.stream, job.turn, job.stage),
        job.conv_id,
    );
    let (num_turns, max_tokens, intended) = (job.num_turns, job.max_tokens, job.intended);
    let (prefix, source_idx) = (job.prefix, job.source_idx);
    let recorded = AtomicBool::new(false);
    let fut = request(sh.clone(), job, &recorded);
    tokio::pin!(fut);
    match (CatchPanic { fut: fut.as_mut() }).await {
        Ok(d) => d,
        Err(cause) => {
            let cause = format!("the request task panicked: {cause}");
            tracing::error!("{cause}; stream {conv_id} ends here");
            if !recorded.load(Ordering::Relaxed) {
                let mut rec = super::failed_record(
                    &sh,
                    &spare,
                    super::FailedRequest {
                        trace_id: conv_id,
                        turn: who.3,
                        num_turns,
                        max_tokens,
                        phase: who.4.phase(),
                        intended,
                        kind: "panic",
                        message: cause.clone(),
                    },
                );
                if let Some(t) = rec.tree.as_mut() {
                    (t.prefix_hit_blocks, t.prefix_total_blocks) = prefix;
                    (t.source_outer_idx, t.source_inner_idx) = source_idx;
                }
                super::account(&sh, &rec);
                sh.records.send(rec);
            }
            sh.client.end_session(&spare.correlation_id);
            Done {
                lane: who.0,
                gen: who.1,
                stream: who.2,
                turn: who.3,
                stage: who.4,
                overflow: false,
                failed: Some(cause),
                end: timer::now(),
                next: None,
                session: spare,
            }
        }
    }
}

/// Sends a job's request and builds the stream's next conversation while its delay runs. Sets
/// `recorded` once the request's record went out.
async fn request(sh: Arc<Shared>, job: Job, recorded: &AtomicBool) -> Done {
    let Job {
        lane,
        gen,
        stream: s,
        turn,
        stage,
        intended,
        max_tokens,
        prefix,
        source_idx,
        traj,
        num_turns,
        conv_id,
        conv,
        session,
    } = job;
    let conv = match conv {
        Some(c) => Ok(*c),
        None => tree_conversation(&sh, traj, turn),
    };
    let mut conv = match conv {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}; stream {conv_id} ends here");
            return Done {
                lane,
                gen,
                stream: s,
                turn,
                stage,
                overflow: false,
                failed: Some(e.to_string()),
                end: timer::now(),
                next: None,
                session,
            };
        }
    };
    let req = {
        let bust = bust(sh.cfg.placement, &session.marker);
        let body = sh.body.build(max_tokens, conv.messages_json_parts(bust));
        let seq = sh.request_seq.fetch_add(1, Ordering::Relaxed) * sh.stride.1 + sh.stride.0;
        super::Prepared {
            body,
            request_id: format!("{}-r{seq}", sh.run_short),
            trace_id: conv_id,
            turn,
            num_turns,
            max_tokens,
            client_isl: conv.prompt_words() + sh.counter.count(&session.marker),
            prefix,
            source_idx,
        }
    };
    #[cfg(debug_assertions)]
    debug_fault(s, stage);
    let phase = stage.phase();
    let mut cancel = sh.cancel.subscribe();
    let sent = super::send_turn(&sh, &session, req, phase, intended, &mut cancel).await;
    recorded.store(true, Ordering::Relaxed);
    let last = turn + 1 >= num_turns;
    if last || sent.overflow {
        sh.client.end_session(&session.correlation_id);
    }
    // The next turn's conversation is built now, while its delay runs.
    let next = if last || sent.overflow {
        None
    } else if stage == Stage::Primers {
        tree_conversation(&sh, traj, turn + 1).ok().map(Box::new)
    } else {
        let reply = match sh.cfg.mode {
            AssistantMode::Live => sent.reply.as_deref(),
            AssistantMode::Recorded => None,
        };
        match conv.advance(reply) {
            Ok(_) => Some(Box::new(conv)),
            Err(e) => {
                tracing::error!("{e}; stream {conv_id} ends here");
                None
            }
        }
    };
    Done {
        lane,
        gen,
        stream: s,
        turn,
        stage,
        overflow: sent.overflow,
        failed: sent.error,
        end: sent.end,
        next: next.inspect(|c| {
            // Writes (and, live, caches) the history's JSON: the costly part of a body.
            let _ = c.messages_json_parts(bust(sh.cfg.placement, &session.marker));
        }),
        session,
    }
}

/// Debug builds only: `AGENTX_TEST_PANIC=N` makes the task of the N-th profiling request of a root
/// stream (counted from 1) panic, so tests can see what the scheduler does with a panicked task.
#[cfg(debug_assertions)]
fn debug_fault(stream: u32, stage: Stage) {
    use std::sync::atomic::AtomicU64;
    use std::sync::OnceLock;
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    static SEEN: AtomicU64 = AtomicU64::new(0);
    let at = AT.get_or_init(|| {
        std::env::var("AGENTX_TEST_PANIC")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if let Some(n) = *at {
        if stream == 0 && stage == Stage::Profiling && SEEN.fetch_add(1, Ordering::Relaxed) + 1 == n
        {
            panic!("AGENTX_TEST_PANIC: root profiling request {n}");
        }
    }
}

/// A future that turns a panic while polling `fut` into `Err` with the panic's message.
struct CatchPanic<'a, F> {
    fut: std::pin::Pin<&'a mut F>,
}

impl<F: std::future::Future> std::future::Future for CatchPanic<'_, F> {
    type Output = Result<F::Output, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = self.fut.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(p) => std::task::Poll::Ready(Err(panic_message(p.as_ref()))),
        }
    }
}

/// The text of a panic's payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The scheduler's wake-up at its earliest timer, armed anew only when that instant changes: each
/// arming queues a deadline on the timer thread and wakes that thread, which once per response
/// would cost as much as the rest of the scheduler's work.
struct Wake {
    at: Option<Instant>,
    fut: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

impl Wake {
    fn new() -> Wake {
        Wake {
            at: None,
            fut: Box::pin(std::future::pending()),
        }
    }

    /// Makes `fut` complete at `at` (never, for none).
    fn arm(&mut self, sh: &Arc<Shared>, at: Option<Instant>) {
        if at == self.at {
            return;
        }
        self.at = at;
        self.fut = match at {
            Some(at) => {
                let sh = sh.clone();
                Box::pin(async move { super::sleep_until(&sh, at).await })
            }
            None => Box::pin(std::future::pending()),
        };
    }

    /// `fut` completed: it must not be polled again, and the next `arm` arms anew.
    fn fired(&mut self) {
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
    let recycler = super::recycle::Recycler::new(&[], std::iter::empty(), 0);
    let n_lanes = plan.lanes.len();
    let (sh, rest) = Shared::build(cfg, inputs, Vec::new(), recycler, n_lanes as u64);
    let Rest {
        mut interrupt,
        on_profiling,
        mut threshold_rx,
        ..
    } = rest;
    let mut passes: HashMap<String, u32> = HashMap::new();
    for l in &plan.lanes {
        let p = passes.entry(l.trace_id.clone()).or_insert(0);
        *p = (*p).max(l.pass + 1);
    }
    let lanes_plan = plan.lanes.clone();
    let mut sc = Sched {
        sh: sh.clone(),
        lanes: (0..n_lanes).map(|_| None).collect(),
        heap: BinaryHeap::new(),
        seq: 0,
        gen: 0,
        draw: plan.next_draw,
        passes,
        tasks: JoinSet::new(),
        in_flight: 0,
        idle_since: timer::now(),
        stage: Stage::Primers,
        pressure_sent: vec![0; n_lanes],
        paused: false,
        counts: TreeCounts::default(),
        plan,
    };
    for l in &lanes_plan {
        let rt = sc.planned_tree(l);
        sc.lanes[l.lane as usize] = Some(rt);
    }

    // ---- warmup: the primers ----
    let warm_start = timer::now();
    let spread = sc.plan.rules.warmup_spread && !sc.plan.burst;
    let max_lead = lanes_plan
        .iter()
        .flat_map(|l| l.streams.iter())
        .filter(|s| s.warm_turn.is_some())
        .map(|s| s.lead_ms)
        .fold(0.0f64, f64::max);
    let mut primers = 0u64;
    for l in &lanes_plan {
        for s in &l.streams {
            let Some(w) = s.warm_turn else { continue };
            let off = if spread {
                (max_lead - s.lead_ms).max(0.0)
            } else {
                0.0
            };
            let rt = sc.lanes[l.lane as usize].as_mut().expect("planned");
            rt.streams[s.index as usize].next = w;
            primers += 1;
            sc.push_timer(
                l.lane,
                s.index,
                warm_start + Duration::from_secs_f64(off / 1000.0),
            );
        }
    }
    sh.progress.phase("warmup", primers);
    tracing::info!(
        "Phase warmup started | target: {primers} primers over {n_lanes} lanes (max_tokens={}, {})",
        sc.plan.rules.warmup_max_tokens,
        if spread {
            format!("spread over {:.0} ms", max_lead)
        } else {
            "all at once".into()
        }
    );
    // The primers wait without a grace period: aiperf's warmup phase has no duration, so no
    // deadline (agentx-harness 1.0.12 timing/phase/runner.py:1089-1098, lifecycle.py:145-146;
    // docs/agentx-v1-reference.md P3). The grace bounds only the pressure stage's drain.
    let mut returned = 0u64;
    let mut failures: Vec<String> = Vec::new();
    let mut interrupted = false;
    let mut wake = Wake::new();
    while returned < primers {
        wake.arm(&sh, sc.next_wake());
        tokio::select! {
            Some(r) = sc.tasks.join_next() => {
                let Ok(d) = r else {
                    failures.push("a warmup task failed".into());
                    returned += 1;
                    continue;
                };
                returned += 1;
                sh.progress.update(returned, format!("{returned}/{primers} primers returned"));
                let depth0 = d.stream == 0;
                let lane = d.lane;
                let (overflow, failed) = (d.overflow, d.failed.clone());
                let next_turn = d.turn + 1;
                let stream = d.stream;
                sc.on_done(d);
                if let Some(rt) = sc.lanes[lane as usize].as_mut() {
                    rt.streams[stream as usize].next = next_turn;
                }
                match (overflow, failed) {
                    (true, _) if depth0 => {
                        sc.counts.warmup_root_overflows += 1;
                        tracing::info!("warmup: lane {lane}'s root primer overflowed the context; the lane starts a fresh tree when profiling begins");
                    }
                    (false, Some(e)) if depth0 && sc.plan.rules.warmup_failure_aborts => {
                        failures.push(format!("lane {lane} root primer: {e}"));
                    }
                    (_, Some(e)) => {
                        sc.counts.warmup_child_failures += 1;
                        tracing::warn!("warmup: lane {lane} stream {stream} primer failed ({e}); the stream goes on");
                    }
                    _ => {}
                }
                if !failures.is_empty() {
                    let _ = sh.cancel.send(true);
                    while sc.tasks.join_next().await.is_some() {}
                    break;
                }
            }
            _ = &mut wake.fut => {
                wake.fired();
                sc.fire_due();
            }
            _ = interrupt.changed() => {
                interrupted = true;
                let _ = sh.cancel.send(true);
                while sc.tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
    if interrupted || !failures.is_empty() {
        sh.progress.finish();
        return TreeOutcome {
            replay: super::warmup_stopped(&sh, interrupted, &failures),
            counts: sc.counts,
        };
    }

    let pressured = match sc.plan.pressure {
        Some(p) => match pressure_stage(&mut sc, p, &mut interrupt).await {
            Ok(()) => true,
            Err(stop) => {
                sh.progress.finish();
                let (interrupted, failures) = match stop {
                    PressureStop::Interrupted => (true, Vec::new()),
                    PressureStop::Failed(f) => (false, vec![f]),
                };
                return TreeOutcome {
                    replay: super::warmup_stopped(&sh, interrupted, &failures),
                    counts: sc.counts,
                };
            }
        },
        None => false,
    };

    // ---- profiling ----
    sc.stage = Stage::Profiling;
    sc.heap.clear();
    let prof_start = sh.clock.now_ns();
    let start = timer::now();
    sc.idle_since = start;
    if let Some(f) = on_profiling {
        f(prof_start);
    }
    tracing::info!(
        "Phase warmup complete: {returned} primers returned | elapsed={:.2}s",
        start.duration_since(warm_start).as_secs_f64()
    );
    tracing::info!(
        "Phase profiling started | profiling_index=0 | target: {:.1}s duration",
        sh.cfg.duration.as_secs_f64()
    );
    let t0_all = lanes_plan
        .iter()
        .flat_map(|l| l.streams.iter())
        .filter(|s| !s.waiting)
        .map(|s| s.offset_ms)
        .fold(f64::INFINITY, f64::min);
    if pressured {
        sc.hand_off(start);
    }
    for l in lanes_plan.iter().filter(|_| !pressured) {
        let overflowed = sc.lanes[l.lane as usize].as_ref().is_none_or(|rt| {
            l.streams.iter().any(|s| s.index == 0) && rt.streams[0].st == St::Done
        });
        sc.counts.trees_started += 1;
        sh.tally.lock().expect("tally lock").sessions += 1;
        if overflowed {
            sc.counts.trees_started -= 1;
            sh.tally.lock().expect("tally lock").sessions -= 1;
            sc.recycle(l.lane);
            continue;
        }
        let t0 = if sc.plan.burst {
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
            let rt = sc.lanes[l.lane as usize].as_mut().expect("planned");
            rt.streams[s.index as usize].next = s.next_turn;
            rt.streams[s.index as usize].st = St::Waiting;
            let after = (s.offset_ms - t0).max(0.0);
            sc.push_timer(
                l.lane,
                s.index,
                start + Duration::from_secs_f64(after / 1000.0),
            );
        }
    }
    // Trees that start with only future work: the per-tree idle cap counts from the start.
    for lane in 0..n_lanes as u32 {
        if let Some(rt) = sc.lanes[lane as usize].as_mut() {
            rt.last_end = start;
        }
        sc.settle(lane);
    }
    sh.progress
        .phase("profiling", sh.cfg.duration.as_secs().max(1));
    let deadline = tokio::time::Instant::from_std(start + sh.cfg.duration);
    let ticker = sh.cfg.stats_interval;
    let mut tick = tokio::time::interval(ticker.unwrap_or(Duration::from_secs(3600)));
    tick.tick().await;
    let mut bar_tick = tokio::time::interval(Duration::from_millis(500));
    let mut stop = StopReason::Completed;
    let mut message = None;
    sc.fire_due();
    sc.cap_system_idle();
    let mut wake = Wake::new();
    let deadline = tokio::time::sleep_until(deadline);
    tokio::pin!(deadline);
    loop {
        wake.arm(&sh, sc.next_wake());
        tokio::select! {
            Some(r) = sc.tasks.join_next() => {
                if let Ok(d) = r {
                    sc.on_done(d);
                }
                sc.fire_due();
                sc.cap_system_idle();
            }
            _ = &mut wake.fut => {
                wake.fired();
                sc.fire_due();
                sc.cap_system_idle();
            }
            _ = &mut deadline => break,
            _ = threshold_rx.wait_for(|t| *t) => {
                stop = StopReason::ThresholdExceeded;
                let t = sh.tally.lock().expect("tally lock").clone();
                message = Some(format!(
                    "--failed-request-threshold {} exceeded: {} of {} profiling requests failed; in-flight requests were cancelled",
                    sh.cfg.failed_request_threshold.unwrap_or(0.0), t.failed, t.threshold_judged()
                ));
                break;
            }
            _ = interrupt.changed() => {
                stop = StopReason::Interrupted;
                message = Some("interrupted: no new turns were started and in-flight requests were drained".into());
                break;
            }
            _ = tick.tick(), if ticker.is_some() => {
                let elapsed = Duration::from_nanos(sh.clock.now_ns() - prof_start);
                let t = sh.tally.lock().expect("tally lock").clone();
                tracing::info!(
                    "Phase profiling progress | returned={} | in_flight={} | trees={} | errors={} | overflows={} | elapsed={:.1}s",
                    t.requests, sc.in_flight, sc.counts.trees_started, t.failed, t.context_overflows, elapsed.as_secs_f64()
                );
                let srv = sh.srv_row.as_ref().and_then(|f| f());
                sh.progress.block(&sh.live.block(elapsed, "profiling", srv.as_ref()));
            }
            _ = bar_tick.tick() => bar(&sh, prof_start),
            _ = async {}, if sc.tasks.is_empty() && sc.heap.is_empty() => {
                // Nothing in flight and nothing to come: every lane is out of trees.
                break;
            }
        }
    }
    let _ = sh.stop_new.send(true);
    sc.heap.clear();
    if stop == StopReason::ThresholdExceeded {
        let _ = sh.cancel.send(true);
    }
    // Drain: in-flight requests get the grace period (a second interrupt cancels them at once).
    let grace = sh.cfg.grace.map(|g| tokio::time::Instant::now() + g);
    loop {
        let again = interrupt.changed();
        let timeout = async {
            match grace {
                Some(g) => tokio::time::sleep_until(g).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = sc.tasks.join_next() => match r {
                None => break,
                Some(Ok(d)) => sc.on_done(d),
                Some(Err(_)) => {}
            },
            _ = timeout => {
                tracing::warn!("grace period over; cancelling in-flight requests");
                let _ = sh.cancel.send(true);
                while sc.tasks.join_next().await.is_some() {}
                break;
            }
            _ = again => {
                if stop == StopReason::Completed {
                    stop = StopReason::Interrupted;
                    message = Some("interrupted while draining; in-flight requests were cancelled".into());
                }
                let _ = sh.cancel.send(true);
                while sc.tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
    sh.progress.finish();
    let prof_end = sh.clock.now_ns();
    let tally: Tally = sh.tally.lock().expect("tally lock").clone();
    tracing::info!(
        "Phase profiling complete | completed={}, cancelled={}, errors={}, overflows={} | trees started={}, drained={} | elapsed={:.2}s{}",
        tally.ok,
        tally.cancelled,
        tally.failed,
        tally.context_overflows,
        sc.counts.trees_started,
        sc.counts.trees_drained,
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
        counts: sc.counts,
    }
}

/// Why the cache-pressure stage stopped the run.
#[derive(Debug, PartialEq)]
enum PressureStop {
    Interrupted,
    /// A root request failed or overflowed, or the drain outlasted the warmup grace period.
    Failed(String),
}

/// The warmup's cache-pressure stage: every waiting stream goes on at once with no idle delay until
/// each lane sent its requests (or the stage's time is up); then releases stop and the stage drains.
///
/// As in the reference: an error, cancellation or context overflow of a root (depth-0) request
/// aborts the run as a warmup failure (agentx-harness 1.0.12 credit/callback_handler.py:296-323;
/// docs/agentx-v1-reference.md P6), and the warmup grace period bounds the drain once releases
/// stopped (timing/phase/runner.py:973-992): at its end the in-flight requests are cancelled and
/// the run fails. The reference then exits without outputs; agentx keeps every record and writes
/// its outputs, marked `warmup_failed`.
async fn pressure_stage(
    sc: &mut Sched,
    p: Pressure,
    interrupt: &mut tokio::sync::watch::Receiver<u32>,
) -> Result<(), PressureStop> {
    sc.stage = Stage::Pressure;
    sc.heap.clear();
    let now = timer::now();
    tracing::info!(
        "warmup: cache-pressure stage ({})",
        match p {
            Pressure::RequestsPerLane(n) => format!("{n} requests per lane"),
            Pressure::Duration(d) => format!("{:.0} s", d.as_secs_f64()),
        }
    );
    for lane in 0..sc.lanes.len() as u32 {
        let Some(rt) = sc.lanes[lane as usize].as_mut() else {
            continue;
        };
        rt.timers = 0;
        if rt.streams[0].st == St::Done && rt.streams.iter().all(|s| s.st != St::Waiting) {
            sc.recycle(lane);
            continue;
        }
        let waiting: Vec<u32> = (0..rt.streams.len() as u32)
            .filter(|&s| rt.streams[s as usize].st == St::Waiting)
            .collect();
        for s in waiting {
            sc.push_timer(lane, s, now);
        }
    }
    let end = match p {
        Pressure::Duration(d) => Some(tokio::time::Instant::from_std(now + d)),
        Pressure::RequestsPerLane(_) => None,
    };
    // The drain's deadline, set when releases stop.
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    sc.fire_due();
    let mut wake = Wake::new();
    let failure = loop {
        if let Pressure::RequestsPerLane(n) = p {
            if sc.pressure_sent.iter().all(|&x| x >= n) {
                sc.paused = true;
            }
        }
        if sc.paused && drain_deadline.is_none() {
            drain_deadline = Some(match sc.sh.cfg.warmup_grace {
                Some(g) => tokio::time::Instant::now() + g,
                None => tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86_400),
            });
        }
        if sc.tasks.is_empty() && (sc.paused || sc.heap.is_empty()) {
            break None;
        }
        wake.arm(&sc.sh, sc.next_wake());
        tokio::select! {
            Some(r) = sc.tasks.join_next() => {
                if let Ok(d) = r {
                    if let Some(f) = sc.pressure_root_failure(&d) {
                        break Some(PressureStop::Failed(f));
                    }
                    sc.on_done(d);
                }
                sc.fire_due();
            }
            _ = &mut wake.fut => {
                wake.fired();
                sc.fire_due();
            }
            _ = async {
                match end {
                    Some(e) => tokio::time::sleep_until(e).await,
                    None => std::future::pending().await,
                }
            }, if !sc.paused => sc.paused = true,
            _ = async {
                match drain_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            }, if drain_deadline.is_some() => {
                let left = sc.tasks.len();
                tracing::warn!("warmup: the cache-pressure drain outlasted the warmup grace period; cancelling {left} in-flight warmup requests");
                break Some(PressureStop::Failed(format!(
                    "{left} cache-pressure requests did not return within the warmup grace period {:?} and were cancelled",
                    sc.sh.cfg.warmup_grace.unwrap_or_default()
                )));
            }
            _ = interrupt.changed() => break Some(PressureStop::Interrupted),
        }
    };
    if let Some(stop) = failure {
        let _ = sc.sh.cancel.send(true);
        while sc.tasks.join_next().await.is_some() {}
        return Err(stop);
    }
    tracing::info!(
        requests = sc.counts.pressure_requests,
        trees = sc.counts.pressure_trees,
        "warmup: cache-pressure stage drained"
    );
    Ok(())
}

impl Sched {
    /// A root request of the pressure stage that failed, was cancelled or overflowed: why the run
    /// stops (when the scenario's rules abort on a failed depth-0 warmup request).
    fn pressure_root_failure(&self, d: &Done) -> Option<String> {
        if d.stream != 0 || !self.plan.rules.warmup_failure_aborts {
            return None;
        }
        let tree = self.lanes[d.lane as usize]
            .as_ref()
            .filter(|rt| rt.gen == d.gen)
            .map(|rt| self.tree(rt.tree).trace_id.as_str())?;
        let what = match (&d.failed, d.overflow) {
            (_, true) => "overflowed the context".to_string(),
            (Some(e), false) => format!("failed: {e}"),
            (None, false) => return None,
        };
        Some(format!(
            "lane {} root request (tree {tree}, turn {}) of the cache-pressure stage {what}",
            d.lane, d.turn
        ))
    }

    /// Profiling after the pressure stage: every stream resumes at its deferred or held turn, due
    /// `offset − T0` after `start`, where a stream's offset is its turn's recorded start past its
    /// tree's origin and T0 the smallest offset of a turn not held by a join (see [`handoff_t0`]).
    fn hand_off(&mut self, start: Instant) {
        self.heap.clear();
        let trees: &'static [SessionTree] = self.plan.trees;
        let mut due: Vec<Resume> = Vec::new();
        for rt in self.lanes.iter().flatten() {
            let tree = &trees[rt.tree];
            for (i, st) in rt.streams.iter().enumerate() {
                if matches!(st.st, St::Waiting | St::Held) {
                    let off = tree.streams[i].turns[st.next as usize].ts_ms - rt.origin_ms;
                    due.push(Resume {
                        lane: rt.lane,
                        stream: i as u32,
                        offset_ms: off.max(0.0),
                        joining: st.st == St::Held && self.holds(rt, i as u32) == Some(true),
                    });
                }
            }
        }
        for rt in self.lanes.iter_mut().flatten() {
            rt.timers = 0;
            rt.held.clear();
            for st in rt.streams.iter_mut() {
                if st.st == St::Held {
                    st.st = St::Waiting;
                }
            }
        }
        let t0 = handoff_t0(&due);
        let mut lanes_seen = std::collections::HashSet::new();
        for r in due {
            if lanes_seen.insert(r.lane) {
                self.counts.trees_started += 1;
                self.sh.tally.lock().expect("tally lock").sessions += 1;
            }
            let at = start + Duration::from_secs_f64((r.offset_ms - t0).max(0.0) / 1000.0);
            self.push_timer(r.lane, r.stream, at);
        }
        for lane in 0..self.lanes.len() as u32 {
            if self.lanes[lane as usize].is_none() {
                self.recycle(lane);
            }
        }
    }
}

/// A stream profiling resumes after the pressure stage.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Resume {
    lane: u32,
    stream: u32,
    /// Its next turn's recorded start past its tree's origin (ms).
    offset_ms: f64,
    /// The turn waits for a join (a gated parent).
    joining: bool,
}

/// The profiling start offset after the pressure stage: the smallest offset of a resumed turn not
/// waiting for a join; turns deferred by the stage's quota and turns held by the replay barrier
/// count, as aiperf builds its hand-off states: returned credits are `waiting_on_children` only when
/// join-blocked, and barrier-pending turns are added with `waiting_on_children=False`
/// (agentx-harness 1.0.12 timing/strategies/agentic_replay.py:1040-1066, 1116-1150; the minimum in
/// `_profiling_phase_t0_offset_ms`, 1387-1399). 0 when every turn joins.
fn handoff_t0(due: &[Resume]) -> f64 {
    let t0 = due
        .iter()
        .filter(|r| !r.joining)
        .map(|r| r.offset_ms)
        .fold(f64::INFINITY, f64::min);
    if t0.is_finite() {
        t0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resume(stream: u32, offset_ms: f64, joining: bool) -> Resume {
        Resume {
            lane: 0,
            stream,
            offset_ms,
            joining,
        }
    }

    /// A turn held by the replay barrier sets the profiling start offset; a turn held by a join
    /// does not (agentx-harness 1.0.12 timing/strategies/agentic_replay.py:1065, 1148).
    #[test]
    fn the_handoff_start_offset_counts_barrier_held_turns_not_joins() {
        // Stream 1 was held by the barrier at offset 200 ms, stream 2 deferred at 900 ms, the root
        // waits for a join at 50 ms.
        let due = [
            resume(0, 50.0, true),
            resume(1, 200.0, false),
            resume(2, 900.0, false),
        ];
        assert_eq!(handoff_t0(&due), 200.0);
        assert_eq!(handoff_t0(&[resume(0, 50.0, true)]), 0.0);
        assert_eq!(handoff_t0(&[]), 0.0);
    }
}
