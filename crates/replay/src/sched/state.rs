//! The scheduler's state machine: the runtime trees of the lanes, their streams' states, the
//! timer heap, and what happens when a timer fires or a response returns (spawns, joins, the
//! replay barrier, forced releases, both idle caps, recycling a drained tree). Nothing here awaits:
//! the loops in [`super`] and [`super::warmup`] drive it, [`super::stream`] runs the requests.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::stream::{guarded, Done, Job, Stage};
use super::{Pressure, TreeCounts, TreePlan, TreeRef};
use crate::tree::TreeLane;
use crate::{timer, Session, Shared};
use agentx_dataset::Conversation;
use agentx_record::{Phase, TreeInfo};
use agentx_scenario::types_v2::TreeId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum St {
    /// A child whose branch has not started.
    NotStarted,
    /// Its next turn has a timer.
    Waiting,
    /// Its next turn is held by a join or the barrier.
    Held,
    InFlight,
    Done,
}

pub(super) struct RtStream {
    pub(super) st: St,
    pub(super) next: u32,
    /// The conversation at `next`, when it was built beforehand.
    pub(super) conv: Option<Box<Conversation>>,
    pub(super) session: Option<Session>,
}

pub(super) struct RtTree {
    pub(super) gen: u64,
    pub(super) tree: usize,
    pub(super) lane: u32,
    pub(super) marker: String,
    pub(super) root_corr: String,
    pub(super) streams: Vec<RtStream>,
    pub(super) started: Vec<bool>,
    /// Per stream: turns completed (the barrier's view), seeded with the resume boundaries.
    pub(super) done_upto: Vec<u32>,
    pub(super) in_flight: u32,
    pub(super) timers: u32,
    /// Held turns: (stream, intended ns).
    pub(super) held: Vec<(u32, u64)>,
    pub(super) pass: u32,
    /// The recorded instant the tree's replay starts from (ms on the root clock): t*, or root
    /// turn 0's start for a recycled tree; the pressure stage's hand-off measures offsets from it.
    pub(super) origin_ms: f64,
    /// The end of the tree's last response (or its start): the per-tree idle cap counts from it.
    pub(super) last_end: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) at: Instant,
    pub(super) seq: u64,
    pub(super) lane: u32,
    pub(super) gen: u64,
    pub(super) stream: u32,
}

pub(super) struct Sched {
    pub(super) sh: Arc<Shared>,
    pub(super) plan: TreePlan,
    pub(super) lanes: Vec<Option<RtTree>>,
    pub(super) heap: BinaryHeap<Reverse<Timer>>,
    pub(super) seq: u64,
    pub(super) gen: u64,
    pub(super) sampler: crate::tree::Sampler,
    pub(super) passes: HashMap<String, u32>,
    pub(super) tasks: JoinSet<Done>,
    pub(super) in_flight: u64,
    /// When the last response left nothing in flight.
    pub(super) idle_since: Instant,
    pub(super) stage: Stage,
    /// Per lane: requests sent in the pressure stage.
    pub(super) pressure_sent: Vec<u64>,
    /// The pressure stage stopped releasing turns.
    pub(super) paused: bool,
    pub(super) counts: TreeCounts,
    /// An open-loop run's arrival schedule, from the start of profiling to the stop.
    pub(super) schedule: Option<crate::arrivals::Schedule>,
    /// The markers of the trees started so far, while every one was new: a tree's marked blocks
    /// are forgotten when it leaves its lane only while no marker came twice (`None` from the
    /// first repeat on, which keeps every block from then).
    pub(super) markers_seen: Option<std::collections::HashSet<String>>,
}

impl Sched {
    pub(super) fn tree(&self, tree_index: usize) -> TreeRef {
        TreeRef::new(&self.plan.corpus, tree_index)
    }

    pub(super) fn push_timer(&mut self, lane: u32, stream: u32, at: Instant) {
        let Some(lane_tree) = self.lanes[lane as usize].as_mut() else {
            return;
        };
        lane_tree.timers += 1;
        lane_tree.streams[stream as usize].st = St::Waiting;
        self.seq += 1;
        self.heap.push(Reverse(Timer {
            at,
            seq: self.seq,
            lane,
            gen: lane_tree.gen,
            stream,
        }));
    }

    pub(super) fn new_session(&self, lane_tree: &RtTree, stream: u32) -> Session {
        let tree = self.tree(lane_tree.tree);
        let recorded = &tree.streams[stream as usize];
        let lane = self.lane_id(lane_tree.lane);
        let mut session = Session::new(
            &self.sh,
            lane,
            lane_tree.tree,
            lane_tree.pass,
            lane_tree.marker.clone(),
        );
        let root_corr = if stream == 0 {
            session.correlation_id.clone()
        } else {
            lane_tree.root_corr.clone()
        };
        session.tree = Some(TreeInfo {
            agent_depth: recorded.depth,
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

    /// A runtime tree of corpus tree `tree_index` on `lane`, every stream not started.
    pub(super) fn fresh_tree(
        &mut self,
        lane: u32,
        tree_index: usize,
        marker: String,
        pass: u32,
    ) -> RtTree {
        if let Some(seen) = &mut self.markers_seen {
            if !marker.is_empty() && !seen.insert(marker.clone()) {
                tracing::warn!(
                    "the scenario gave two trees the same cache-bust marker ({marker:?}): they share \
                     their cached prompts; the prefix registry keeps every block from now on"
                );
                self.markers_seen = None;
            }
        }
        self.gen += 1;
        let tree = self.tree(tree_index);
        let mut lane_tree = RtTree {
            gen: self.gen,
            tree: tree_index,
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
        let root = self.new_session(&lane_tree, 0);
        lane_tree.root_corr.clone_from(&root.correlation_id);
        if let Some(info) = root.tree.as_ref() {
            debug_assert_eq!(info.root_correlation_id, lane_tree.root_corr);
        }
        lane_tree.streams[0].session = Some(root);
        lane_tree
    }

    /// The runtime tree of a planned lane, its streams where t* left them.
    pub(super) fn planned_tree(&mut self, lane: &TreeLane) -> RtTree {
        let mut lane_tree = self.fresh_tree(lane.lane, lane.tree, lane.marker.clone(), lane.pass);
        let tree = self.tree(lane.tree);
        if let Some(t_star) = lane.t_star_ms {
            lane_tree.origin_ms = t_star;
        } else if let Some(root_stream) = lane.streams.iter().find(|s| s.index == 0) {
            lane_tree.origin_ms = tree.streams[0].turns[root_stream.next_turn as usize].ts_ms;
        }
        let n_root = tree.streams[0].turns.len() as u32;
        let root_next = lane
            .streams
            .iter()
            .find(|s| s.index == 0)
            .map_or(n_root, |s| s.next_turn);
        // Resume boundaries: turns recorded before t* count as completed.
        for (i, s) in tree.streams.iter().enumerate() {
            lane_tree.done_upto[i] = match lane.t_star_ms {
                Some(t) => s
                    .turns
                    .iter()
                    .position(|x| x.ts_ms >= t)
                    .unwrap_or(s.turns.len()) as u32,
                None => 0,
            };
        }
        lane_tree.done_upto[0] = root_next;
        for (b, branch) in tree.branches.iter().enumerate() {
            // A branch is under way when its spawn turn is past, or when one of its children is
            // alive at t* (its recorded start came before t* though its spawn turn is still ahead):
            // it is not started again when the root reaches its spawn turn.
            let alive = lane
                .streams
                .iter()
                .any(|s| s.index != 0 && branch.children.contains(&(s.index as usize)));
            lane_tree.started[b] = (branch.spawn_turn as u32) < root_next || alive;
            if lane_tree.started[b] {
                for &c in &branch.children {
                    lane_tree.streams[c].st = St::Done;
                }
            }
        }
        lane_tree.streams[0].st = St::Done;
        for s in &lane.streams {
            let index = s.index as usize;
            lane_tree.streams[index].next = s.next_turn;
            lane_tree.streams[index].st = St::Waiting; // its timer comes with the profiling start
            lane_tree.done_upto[index] = s.next_turn;
            if index != 0 {
                let session = self.new_session(&lane_tree, s.index);
                lane_tree.streams[index].session = Some(session);
            }
        }
        lane_tree
    }

    pub(super) fn draw_tree(&mut self) -> Option<usize> {
        let corpus = Arc::clone(&self.plan.corpus);
        let trees = &corpus.trees;
        self.sampler
            .next(trees.len(), |t| !trees[t].streams[0].turns.is_empty())
    }

    /// Lane `lane`'s number in the whole plan (a shard numbers its own lanes from 0).
    pub(super) fn lane_id(&self, lane: u32) -> u32 {
        self.plan
            .shard
            .as_ref()
            .and_then(|s| s.lane_ids.get(lane as usize).copied())
            .unwrap_or(lane)
    }

    /// `lane` holds `tree` from now (`None`: no tree); the run's active sessions follow.
    pub(super) fn hold(&mut self, lane: u32, tree: Option<RtTree>) {
        let slot = &mut self.lanes[lane as usize];
        let delta = i64::from(tree.is_some()) - i64::from(slot.is_some());
        let left = std::mem::replace(slot, tree);
        self.sh.live_run.session_delta(delta);
        if let Some(left) = left {
            self.forget_marked(&left.marker);
        }
    }

    /// The prefix registry forgets blocks of a tree that left its lane (see `crate::prefix`), while
    /// the run's markers are all distinct.
    pub(super) fn forget_marked(&self, marker: &str) {
        if let (Some(registry), Some(_)) = (&self.sh.prefix, &self.markers_seen) {
            registry.forget(marker);
        }
    }

    /// Starts the next tree of the sampler on `lane` at root turn 0, now; in an open-loop run the
    /// lane's slot is freed instead (arrivals start trees).
    pub(super) fn recycle(&mut self, lane: u32) {
        self.hold(lane, None);
        if *self.sh.stop_new.borrow() || self.plan.arrivals.is_some() {
            return;
        }
        self.start_tree(lane, None);
    }

    /// Starts the arrivals due now (see [`crate::arrivals`]; one more than a mean
    /// inter-arrival late is skipped and counted): each takes a free slot and
    /// starts the sampler's next tree at root turn 0 with a marker of its own (the arrival's
    /// ordinal is the tree's pass); with every slot taken it is rejected and counted.
    pub(super) fn admit_arrivals(&mut self) {
        if self.stage != Stage::Profiling || *self.sh.stop_new.borrow() {
            return;
        }
        let now = timer::now();
        loop {
            let Some(due) = self.schedule.as_mut().and_then(|s| s.due(now)) else {
                return;
            };
            let arrivals = self.counts.arrivals.get_or_insert_default();
            arrivals.offered += due.skipped;
            arrivals.skipped += due.skipped;
            let Some(ordinal) = due.ordinal else { continue };
            let free = self.lanes.iter().position(Option::is_none);
            let started = match free {
                Some(l) => {
                    let pass = u32::try_from(ordinal).unwrap_or(u32::MAX);
                    self.start_tree(l as u32, Some(pass))
                }
                None => false,
            };
            let arrivals = self.counts.arrivals.get_or_insert_default();
            arrivals.offered += 1;
            if started {
                arrivals.admitted += 1;
            } else {
                arrivals.rejected += 1;
            }
        }
    }

    /// Starts the sampler's next tree on `lane` at root turn 0, now, with the next marker pass of
    /// its trace (or `pass`, an arrival's ordinal); false when the corpus has no tree to start.
    fn start_tree(&mut self, lane: u32, pass: Option<u32>) -> bool {
        let Some(tree_index) = self.draw_tree() else {
            return false;
        };
        let trace = self.tree(tree_index).trace_id.clone();
        let pass = pass.unwrap_or_else(|| {
            let next = self.passes.entry(trace.clone()).or_insert(0);
            let minted = *next;
            *next += 1;
            minted
        });
        let marker = {
            let mut scenario = self.sh.scenario.lock().expect("scenario lock");
            match scenario.cache_bust_tree(
                self.sh.cfg.placement,
                &TreeId {
                    run_id: self.sh.cfg.run_id.clone(),
                    pass,
                    lane: self.lane_id(lane),
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
        let lane_tree = self.fresh_tree(lane, tree_index, marker, pass);
        self.hold(lane, Some(lane_tree));
        if self.stage == Stage::Profiling {
            self.counts.trees_started += 1;
            self.sh.tally.lock().expect("tally lock").sessions += 1;
        } else {
            self.counts.pressure_trees += 1;
        }
        self.push_timer(lane, 0, timer::now());
        true
    }

    /// Starts branch `branch` of the tree on `lane`: each child's turn 0 at `base` plus its
    /// recorded distance from `ref_ts`.
    pub(super) fn start_branch(&mut self, lane: u32, branch: usize, base: Instant, ref_ts: f64) {
        let corpus = Arc::clone(&self.plan.corpus);
        let trees = &corpus.trees;
        let Some(lane_tree) = self.lanes[lane as usize].as_mut() else {
            return;
        };
        if lane_tree.started[branch] {
            return;
        }
        lane_tree.started[branch] = true;
        let tree = &trees[lane_tree.tree];
        for &c in &tree.branches[branch].children {
            let Some(first) = tree.streams[c].turns.first() else {
                if let Some(lane_tree) = self.lanes[lane as usize].as_mut() {
                    lane_tree.streams[c].st = St::Done;
                }
                continue;
            };
            let Some(lane_tree) = self.lanes[lane as usize].as_ref() else {
                return;
            };
            let session = self.new_session(lane_tree, c as u32);
            let lane_tree = self.lanes[lane as usize].as_mut().expect("tree");
            lane_tree.streams[c].session = Some(session);
            lane_tree.streams[c].next = 0;
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

    /// Why stream `stream`'s next turn must wait, if it must: `Some(true)` a join, `Some(false)`
    /// the barrier.
    pub(super) fn holds(&self, lane_tree: &RtTree, stream: u32) -> Option<bool> {
        let tree = self.tree(lane_tree.tree);
        let turn =
            &tree.streams[stream as usize].turns[lane_tree.streams[stream as usize].next as usize];
        for &b in &turn.joins {
            if lane_tree.started[b]
                && tree.branches[b]
                    .children
                    .iter()
                    .any(|&c| lane_tree.streams[c].st != St::Done)
            {
                return Some(true);
            }
        }
        for &(ps, pt) in &turn.replay_predecessors {
            if lane_tree.done_upto[ps] as usize <= pt && lane_tree.streams[ps].st != St::Done {
                return Some(false);
            }
        }
        None
    }

    /// Sends stream `stream`'s next turn now, or holds it.
    pub(super) fn release(&mut self, lane: u32, stream: u32, intended: u64, force: bool) {
        if *self.sh.stop_new.borrow() {
            return;
        }
        let Some(lane_tree) = self.lanes[lane as usize].as_ref() else {
            return;
        };
        if self.stage == Stage::Pressure {
            let limit = match self.plan.pressure {
                Some(Pressure::RequestsPerLane(n)) => n,
                _ => u64::MAX,
            };
            if self.paused || self.pressure_sent[lane as usize] >= limit {
                // Deferred: profiling resumes the stream at this turn.
                let lane_tree = self.lanes[lane as usize].as_mut().expect("tree");
                lane_tree.streams[stream as usize].st = St::Waiting;
                return;
            }
        }
        if !force && self.stage != Stage::Primers {
            if let Some(join) = self.holds(lane_tree, stream) {
                let lane_tree = self.lanes[lane as usize].as_mut().expect("tree");
                if lane_tree.streams[stream as usize].st != St::Held {
                    if join {
                        self.counts.join_waits += 1;
                    } else {
                        self.counts.barrier_waits += 1;
                    }
                }
                lane_tree.streams[stream as usize].st = St::Held;
                if !lane_tree.held.iter().any(|h| h.0 == stream) {
                    lane_tree.held.push((stream, intended));
                }
                return;
            }
        }
        self.dispatch(lane, stream, intended);
    }

    pub(super) fn dispatch(&mut self, lane: u32, stream: u32, intended: u64) {
        let lane_no = self.lane_id(lane);
        let stage = self.stage;
        let phase = stage.phase();
        let corpus = Arc::clone(&self.plan.corpus);
        let Some(lane_tree) = self.lanes[lane as usize].as_mut() else {
            return;
        };
        let tree = TreeRef::new(&corpus, lane_tree.tree);
        let stream_state = &mut lane_tree.streams[stream as usize];
        let Some(session) = stream_state.session.take() else {
            // Not expected: a stream is dispatched only with its session. Marking it in flight
            // would keep its tree from draining for the rest of the run; it ends here instead.
            tracing::error!(
                "stream {} of tree {} on lane {lane_no} has no session; it ends here",
                tree.streams[stream as usize].id,
                tree.trace_id
            );
            stream_state.st = St::Done;
            lane_tree.held.retain(|h| h.0 != stream);
            return;
        };
        let turn = stream_state.next;
        stream_state.st = St::InFlight;
        let conv = stream_state.conv.take();
        lane_tree.in_flight += 1;
        lane_tree.held.retain(|h| h.0 != stream);
        let gen = lane_tree.gen;
        if stage == Stage::Pressure {
            self.pressure_sent[lane as usize] += 1;
            self.counts.pressure_requests += 1;
        }
        self.in_flight += 1;
        self.counts.peak_in_flight = self.counts.peak_in_flight.max(self.in_flight);
        let recorded_turn = &tree.streams[stream as usize].turns[turn as usize];
        // A branch that began before this root turn's recorded end starts at the turn's issue.
        if stream == 0 && stage != Stage::Primers {
            let api = recorded_turn.api_time_ms.unwrap_or(0.0);
            let now = timer::now();
            for &b in &recorded_turn.spawns {
                let branch = &tree.branches[b];
                if api > 0.0 && branch.start_timestamp_ms < recorded_turn.ts_ms + api {
                    self.start_branch(lane, b, now, recorded_turn.ts_ms);
                }
            }
        }
        let job = Job {
            lane,
            gen,
            stream,
            turn,
            stage,
            intended,
            max_tokens: match phase {
                Phase::Warmup => self.plan.rules.warmup_max_tokens.max(1),
                Phase::Profiling => recorded_turn.max_tokens.max(1),
            },
            prefix: (
                recorded_turn.prefix_hit_blocks,
                recorded_turn.prefix_total_blocks,
            ),
            source_idx: (
                Some(recorded_turn.source_outer_idx),
                recorded_turn.source_inner_idx,
            ),
            num_turns: tree.streams[stream as usize].turns.len() as u32,
            tree,
            conv,
            session,
        };
        self.tasks.spawn(guarded(self.sh.clone(), job));
    }

    /// A response came back: the stream moves on, spawns and joins follow, held turns are
    /// re-checked, and a drained tree's lane recycles.
    pub(super) fn on_done(&mut self, done: Done) {
        self.in_flight -= 1;
        if self.in_flight == 0 {
            // The system idle cap counts from the response that left nothing in flight.
            self.idle_since = done.end;
        }
        let corpus = Arc::clone(&self.plan.corpus);
        let trees = &corpus.trees;
        let lane_tree = match self.lanes[done.lane as usize].as_mut() {
            Some(lane_tree) if lane_tree.gen == done.gen => lane_tree,
            _ => {
                self.counts.late_events += 1;
                // Its tree has left the lane: nobody can send its marked blocks again (the
                // request registered them after the tree's table was dropped).
                self.forget_marked(&done.session.marker);
                return;
            }
        };
        lane_tree.in_flight -= 1;
        lane_tree.last_end = lane_tree.last_end.max(done.end);
        let tree = &trees[lane_tree.tree];
        let stream_index = done.stream as usize;
        let stream = &tree.streams[stream_index];
        lane_tree.done_upto[stream_index] = lane_tree.done_upto[stream_index].max(done.turn + 1);
        lane_tree.streams[stream_index].session = Some(done.session);
        let last = done.turn as usize + 1 >= stream.turns.len();
        let ends = last
            || done.next.is_none()
            || (done.overflow && (stream_index != 0 || self.plan.rules.overflow_ends_tree));
        if done.stage == Stage::Primers {
            // A primer: the stream resumes in profiling at the turn after it.
            let stream_state = &mut lane_tree.streams[stream_index];
            stream_state.conv = done.next;
            // A root primer that overflowed, or failed under rules that judge warmup failures
            // instead of aborting: the lane starts a fresh tree when profiling begins.
            let failed_root = done.failed.is_some() && !self.plan.rules.warmup_failure_aborts;
            if stream_index == 0 && (done.overflow || failed_root) {
                stream_state.st = St::Done;
            } else {
                stream_state.st = St::Waiting;
            }
            return;
        }
        // An overflow before the last turn is the stream's death: a dead root spawns nothing at its
        // return (aiperf skips the branch orchestrator's intercept on such a return; a last-turn
        // overflow still spawns, and a branch started at the turn's issue stays started).
        let terminal_overflow = done.overflow && !last;
        if stream_index == 0 && !terminal_overflow {
            // Branches not started at the turn's issue start at its return.
            let lane = done.lane;
            for &b in &stream.turns[done.turn as usize].spawns {
                let start = tree.branches[b].start_timestamp_ms;
                self.start_branch(lane, b, done.end, start);
            }
        }
        let lane_tree = self.lanes[done.lane as usize].as_mut().expect("tree");
        if ends {
            lane_tree.streams[stream_index].st = St::Done;
            if done.overflow {
                tracing::info!(
                    "stream {} ended at turn {}/{} (context overflow)",
                    stream.id,
                    done.turn,
                    stream.turns.len()
                );
            }
        } else {
            let next = done.turn + 1;
            lane_tree.streams[stream_index].next = next;
            lane_tree.streams[stream_index].conv = done.next;
            let global_stream =
                self.plan.corpus.first_stream[lane_tree.tree] as usize + stream_index;
            let delay = if done.stage == Stage::Pressure {
                0.0
            } else {
                self.plan.delays_ms[global_stream]
                    .get(next as usize)
                    .copied()
                    .unwrap_or(0.0)
                    .max(0.0)
            };
            self.push_timer(
                done.lane,
                done.stream,
                done.end + Duration::from_secs_f64(delay / 1000.0),
            );
        }
        self.settle(done.lane);
    }

    /// Re-checks a tree's held turns, releases them when nothing else can, applies the per-tree
    /// idle cap, and recycles the lane when the tree drained.
    pub(super) fn settle(&mut self, lane: u32) {
        let Some(lane_tree) = self.lanes[lane as usize].as_ref() else {
            return;
        };
        let held: Vec<(u32, u64)> = lane_tree.held.clone();
        for (s, intended) in held {
            let lane_tree = self.lanes[lane as usize].as_ref().expect("tree");
            if self.holds(lane_tree, s).is_none() {
                let now = self.sh.clock.now_ns();
                self.release(lane, s, intended.max(now), false);
            }
        }
        let lane_tree = self.lanes[lane as usize].as_ref().expect("tree");
        if lane_tree.in_flight == 0 && lane_tree.timers == 0 && !lane_tree.held.is_empty() {
            let held: Vec<(u32, u64)> = lane_tree.held.clone();
            let tree = self.tree(lane_tree.tree);
            for (s, _) in held {
                self.counts.forced_releases += 1;
                tracing::warn!(
                    "tree {} on lane {}: a held turn of stream {} waits for requests that will not run; released",
                    tree.trace_id,
                    self.lane_id(lane),
                    tree.streams[s as usize].id
                );
                let now = self.sh.clock.now_ns();
                self.release(lane, s, now, true);
            }
        }
        let lane_tree = self.lanes[lane as usize].as_ref().expect("tree");
        if lane_tree.in_flight == 0 && lane_tree.timers > 0 {
            if let Some(cap) = self.sh.cfg.trace_idle_cap {
                self.shift(Some((lane, lane_tree.gen)), lane_tree.last_end + cap, false);
            }
        }
        let lane_tree = self.lanes[lane as usize].as_ref().expect("tree");
        let drained = lane_tree.in_flight == 0
            && lane_tree.timers == 0
            && lane_tree.held.is_empty()
            && lane_tree
                .streams
                .iter()
                .all(|s| matches!(s.st, St::Done | St::NotStarted));
        if drained && self.stage != Stage::Primers {
            for s in &lane_tree.streams {
                if let Some(sess) = &s.session {
                    self.sh.client.end_session(&sess.correlation_id);
                }
            }
            self.counts.trees_drained += 1;
            self.recycle(lane);
        }
    }

    /// Moves pending timers (of one tree, or all) earlier so that the earliest is due at `target`,
    /// keeping their order. A target the scheduler reached late (it saw the response that started
    /// the idle time after `target` had passed) stays the timer's due time: the turn fires at once
    /// and its intended time is the capped schedule, so the lateness shows as send lag instead of
    /// moving the schedule.
    pub(super) fn shift(&mut self, only: Option<(u32, u64)>, target: Instant, system: bool) {
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
        let shift_by = earliest - target;
        let timers: Vec<Timer> = std::mem::take(&mut self.heap)
            .into_iter()
            .map(|Reverse(mut t)| {
                if mine(&t) {
                    t.at = t.at.checked_sub(shift_by).unwrap_or(target);
                }
                t
            })
            .collect();
        self.heap = timers.into_iter().map(Reverse).collect();
        if system {
            self.counts.system_idle_shifts += 1;
            self.counts.system_idle_shifted_s += shift_by.as_secs_f64();
        } else {
            self.counts.tree_idle_shifts += 1;
        }
    }

    /// Starts the due arrivals, then fires every due timer.
    pub(super) fn fire_due(&mut self) {
        self.admit_arrivals();
        let now = timer::now();
        while let Some(Reverse(due)) = self.heap.peek().copied() {
            if due.at > now {
                break;
            }
            self.heap.pop();
            let Some(lane_tree) = self.lanes[due.lane as usize].as_mut() else {
                continue;
            };
            if lane_tree.gen != due.gen {
                continue;
            }
            lane_tree.timers -= 1;
            if lane_tree.streams[due.stream as usize].st != St::Waiting {
                continue;
            }
            let intended = self.sh.clock.ns_of(due.at);
            self.release(due.lane, due.stream, intended, false);
            self.settle(due.lane);
        }
    }

    /// The system idle cap: with nothing in flight, the earliest pending timer fires at most `cap`
    /// after the last response.
    pub(super) fn cap_system_idle(&mut self) {
        if self.in_flight > 0 || self.stage != Stage::Profiling {
            return;
        }
        let Some(cap) = self.plan.rules.system_idle_cap_seconds else {
            return;
        };
        if cap.is_finite() && cap >= 0.0 {
            let target = self.idle_since + Duration::from_secs_f64(cap);
            self.shift(None, target, true);
        }
    }

    pub(super) fn next_wake(&self) -> Option<Instant> {
        let timer = self.heap.peek().map(|t| t.0.at);
        let arrival = self
            .schedule
            .as_ref()
            .map(super::super::arrivals::Schedule::next_at);
        match (timer, arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
