//! The state machine on tokio's paused clock, with a scripted transport: every request of the
//! default script takes 140 ms (100 ms to the first token, then 4 more 10 ms apart), so each test
//! states the exact virtual instants of its sends and the records they leave.
//!
//! The corpus is one trace: root turns recorded at 0, 1 and 2 s (API times 0.5 s) and a subagent
//! of two requests after root turn 0. Each test lays the tree out itself (branches, joins, replay
//! predecessors, delays) so that what it asserts follows from the test alone.

use std::time::Duration;

use super::*;
use crate::testkit::{self, ms, req, subagent, trace, Harness, Reply, Scripted};
use crate::tree::TreeLaneStream;
use agentx_dataset::tree::corpus::{TreeCorpus, TreeOpen};
use agentx_dataset::tree::Branch;
use agentx_record::{Phase, RequestRecord};

/// The corpus's trees and their streams; a test edits its tree before the replay shares it.
type Corpus = TreeCorpus;

fn corpus() -> Corpus {
    let dir = testkit::kept_dir();
    let t = trace(
        "t",
        vec![
            req(0.0, 0.5),
            subagent(0.6, "sub", vec![req(0.6, 0.1), req(0.8, 0.1)]),
            req(1.0, 0.5),
            req(2.0, 0.5),
        ],
    );
    let path = testkit::corpus_file(&dir, &[t]);
    let ds = testkit::open(&dir, &path);
    let c = TreeCorpus::open(
        &ds,
        &TreeOpen {
            cache_dir: Some(dir.join("cache")),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    assert_eq!(c.trees.len(), 1);
    let lens: Vec<usize> = c.trees[0].streams.iter().map(|s| s.turns.len()).collect();
    assert_eq!(lens, [3, 2], "a root of 3 turns and a child of 2");
    c
}

/// The tree with no branch, join or replay predecessor: each test adds its own.
fn bare(tree: &mut SessionTree) {
    tree.branches.clear();
    for s in &mut tree.streams {
        for t in &mut s.turns {
            t.spawns.clear();
            t.joins.clear();
            t.replay_predecessors.clear();
        }
    }
}

/// Root turn 0 spawns the child, due at the turn's return (its recorded start, 0.6 s, is after the
/// turn's recorded end, 0.5 s); `join`: root turn 2 waits for it.
fn branch(tree: &mut SessionTree, join: bool) {
    tree.branches.push(Branch {
        id: "t:spawn:sub".into(),
        children: vec![1],
        spawn_turn: 0,
        join_turn: join.then_some(2),
        start_timestamp_ms: tree.streams[1].turns[0].ts_ms,
    });
    tree.streams[0].turns[0].spawns = vec![0];
    if join {
        tree.streams[0].turns[2].joins = vec![0];
    }
}

fn rules() -> ReplayRules {
    ReplayRules {
        warmup_max_tokens: 1,
        warmup_spread: false,
        system_idle_cap_seconds: None,
        trace_idle_cap_seconds: None,
        overflow_ends_tree: true,
        warmup_failure_aborts: true,
        recycle_from_turn_zero: true,
        allow_wrap: true,
        min_metric_coverage: 0.0,
    }
}

/// A lane whose tree starts at root turn 0 when profiling starts.
fn root_lane(lane: u32) -> TreeLane {
    TreeLane {
        lane,
        tree: 0,
        trace_id: "t".into(),
        t_star_ms: None,
        marker: format!("lane{lane}"),
        pass: lane,
        streams: vec![TreeLaneStream {
            index: 0,
            conversation_id: "t".into(),
            next_turn: 0,
            warm_turn: None,
            offset_ms: 0.0,
            lead_ms: 0.0,
            waiting: false,
        }],
    }
}

/// A tree replay's setup: `delays[stream][turn]` in ms.
struct Case {
    corpus: Corpus,
    lanes: Vec<TreeLane>,
    delays: [[f64; 3]; 2],
    rules: ReplayRules,
    pressure: Option<Pressure>,
    arrivals: Option<OpenLoop>,
    cfg: ReplayConfig,
    /// Sees each boundary scrape the replay asks for (none by default).
    boundary: Option<crate::BoundaryHook>,
}

impl Case {
    fn new(secs: f64) -> Case {
        let mut corpus = corpus();
        bare(&mut corpus.trees[0]);
        Case {
            corpus,
            lanes: vec![root_lane(0)],
            delays: [[0.0; 3]; 2],
            rules: rules(),
            pressure: None,
            arrivals: None,
            cfg: testkit::config(secs),
            boundary: None,
        }
    }

    fn tree(&mut self) -> &mut SessionTree {
        &mut self.corpus.trees[0]
    }

    /// Replays the case on `script`: the outcome and the records, sorted by send time (then lane
    /// and stream).
    async fn run(self, script: Scripted) -> (TreeOutcome, Vec<RequestRecord>) {
        let corpus = Arc::new(self.corpus);
        let delays_ms = corpus.trees[0]
            .streams
            .iter()
            .enumerate()
            .map(|(s, st)| self.delays[s][..st.turns.len()].to_vec())
            .collect();
        let plan = TreePlan {
            corpus: Arc::clone(&corpus),
            whole: crate::tree::Whole::of(&self.lanes),
            lanes: self.lanes,
            shard: None,
            next_draw: 1,
            rules: self.rules,
            delays_ms,
            burst: false,
            pressure: self.pressure,
            arrivals: self.arrivals,
        };
        let sc = testkit::scenario(agentx_scenario::builtin::BUILTIN_V1, "builtin:agentx-v1");
        let (h, mut inputs) = Harness::inputs(corpus.streams.clone(), sc, script);
        inputs.boundary = self.boundary;
        let out = run(self.cfg, plan, inputs).await;
        // Whatever stopped it, no session is left active once the replay returned.
        assert_eq!(h.live.snapshot().sessions_active, 0);
        let mut recs = h.records();
        recs.sort_by_key(|r| (r.send_ns, r.lane, depth(r)));
        (out, recs)
    }
}

fn depth(r: &RequestRecord) -> u8 {
    r.tree.as_ref().map_or(0, |t| t.agent_depth)
}

/// `(lane, "R"oot or "C"hild and turn, send ms)` of each record.
fn sends(recs: &[RequestRecord]) -> Vec<(u32, String, f64)> {
    recs.iter()
        .map(|r| {
            let who = if depth(r) == 0 { "R" } else { "C" };
            (r.lane, format!("{who}{}", r.turn), ms(r.send_ns))
        })
        .collect()
}

fn s(lane: u32, who: &str, at: f64) -> (u32, String, f64) {
    (lane, who.to_owned(), at)
}

/// Every request of the default script: 140 ms.
fn ok() -> Scripted {
    Scripted::new(|_| Reply::ok())
}

/// The child starts at root turn 0's return; a join holds root turn 2 from its due time (root
/// turn 1's end, 1280 ms) until the child's last turn returned (2420 ms), and the tree drains.
#[tokio::test(start_paused = true)]
async fn a_branch_spawns_at_its_root_turns_return_and_its_join_holds_the_root() {
    let mut case = Case::new(2.5);
    branch(case.tree(), true);
    case.delays = [[0.0, 1000.0, 0.0], [0.0, 2000.0, 0.0]];
    let (out, recs) = case.run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "C0", 140.0),
            s(0, "R1", 1140.0),
            s(0, "C1", 2280.0),
            s(0, "R2", 2420.0),
        ]
    );
    // The held turn's intended time is its release, and nothing was late.
    let r2 = &recs[4];
    assert_eq!(ms(r2.intended_ns), 2420.0);
    assert_eq!(ms(r2.end_ns), 2560.0);
    assert!(recs
        .iter()
        .all(|r| r.error.is_none() && r.phase == Phase::Profiling));
    // Child records name their root.
    let root = &recs[0].correlation_id;
    let child = recs[1].tree.as_ref().unwrap();
    assert_eq!(child.parent_correlation_id.as_ref(), Some(root));
    assert_eq!(&child.root_correlation_id, root);
    let c = &out.counts;
    assert_eq!(
        (c.children_spawned, c.join_waits, c.barrier_waits),
        (1, 1, 0)
    );
    assert_eq!(
        (c.trees_started, c.trees_drained, c.forced_releases),
        (1, 1, 0)
    );
    assert_eq!(out.replay.stop, StopReason::Completed);
    assert_eq!(out.replay.tally.ok, 5);
    assert_eq!(out.replay.profiling_ns, Some((0, 2_560_000_000)));
}

/// At the duration nothing new starts: a turn held by a join that the drain releases (the child
/// returns after the duration) is not sent, and the drained tree's lane starts no other tree.
#[tokio::test(start_paused = true)]
async fn a_turn_released_after_the_duration_is_not_sent() {
    let mut case = Case::new(2.3);
    branch(case.tree(), true);
    case.delays = [[0.0, 1000.0, 0.0], [0.0, 2000.0, 0.0]];
    let (out, recs) = case.run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "C0", 140.0),
            s(0, "R1", 1140.0),
            s(0, "C1", 2280.0),
        ]
    );
    // The child returned in the drain, at 2420 ms.
    assert_eq!(ms(recs[3].end_ns), 2420.0);
    assert_eq!(out.replay.profiling_ns, Some((0, 2_420_000_000)));
    let c = &out.counts;
    assert_eq!((c.join_waits, c.trees_started), (1, 1));
}

/// Without a join, the replay barrier holds root turn 2 until its predecessor, the child's turn
/// 1, returned.
#[tokio::test(start_paused = true)]
async fn the_replay_barrier_holds_a_turn_until_its_predecessor_returned() {
    let mut case = Case::new(2.5);
    branch(case.tree(), false);
    case.tree().streams[0].turns[2].replay_predecessors = vec![(1, 1)];
    case.delays = [[0.0, 1000.0, 0.0], [0.0, 2000.0, 0.0]];
    let (out, recs) = case.run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "C0", 140.0),
            s(0, "R1", 1140.0),
            s(0, "C1", 2280.0),
            s(0, "R2", 2420.0),
        ]
    );
    let c = &out.counts;
    assert_eq!(
        (c.join_waits, c.barrier_waits, c.forced_releases),
        (0, 1, 0)
    );
}

/// A held turn whose predecessor will never run (its branch is never spawned) is released as
/// soon as nothing else in its tree is in flight or scheduled.
#[tokio::test(start_paused = true)]
async fn a_held_turn_nothing_can_release_is_forced_out() {
    let mut case = Case::new(0.5);
    case.tree().streams[0].turns[2].replay_predecessors = vec![(1, 1)];
    let (out, recs) = case.run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "R1", 140.0),
            s(0, "R2", 280.0),
            s(0, "R0", 420.0),
        ]
    );
    let c = &out.counts;
    assert_eq!((c.barrier_waits, c.forced_releases), (1, 1));
    assert_eq!((c.trees_started, c.trees_drained), (2, 1));
}

/// The system idle cap: with nothing in flight anywhere, a 60 s think time ends 10 s after the
/// last response.
#[tokio::test(start_paused = true)]
async fn the_system_idle_cap_brings_a_long_think_time_to_ten_seconds() {
    let mut case = Case::new(11.0);
    case.rules.system_idle_cap_seconds = Some(10.0);
    case.delays = [[0.0, 60_000.0, 0.0], [0.0; 3]];
    let (out, recs) = case.run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "R1", 10_140.0),
            s(0, "R2", 10_280.0),
            s(0, "R0", 10_420.0),
        ]
    );
    assert_eq!(ms(recs[1].intended_ns), 10_140.0);
    let c = &out.counts;
    assert_eq!(c.tree_idle_shifts, 0);
    // Root turn 1 of each tree was moved 50 s earlier.
    assert_eq!(c.system_idle_shifts, 2);
    assert_eq!(c.system_idle_shifted_s, 100.0);
}

/// The per-trace idle cap: a tree with nothing in flight has its timers moved to at most the cap
/// after its last response, while the system cap is off.
#[tokio::test(start_paused = true)]
async fn the_per_trace_idle_cap_brings_a_quiet_trees_turn_forward() {
    let mut case = Case::new(2.4);
    case.cfg.trace_idle_cap = Some(Duration::from_secs(2));
    case.delays = [[0.0, 5000.0, 0.0], [0.0; 3]];
    let (out, recs) = case.run(ok()).await;
    assert_eq!(
        sends(&recs),
        [s(0, "R0", 0.0), s(0, "R1", 2140.0), s(0, "R2", 2280.0)]
    );
    assert_eq!(ms(recs[1].intended_ns), 2140.0);
    let c = &out.counts;
    assert_eq!((c.tree_idle_shifts, c.system_idle_shifts), (1, 0));
    // The tree drained after the duration (2.4 s): its lane starts nothing.
    assert_eq!((c.trees_started, c.trees_drained), (1, 1));
}

/// A drained tree's lane starts the next tree of the sampler at root turn 0 at once, with the next
/// marker pass of its trace and a session of its own.
#[tokio::test(start_paused = true)]
async fn a_drained_tree_recycles_its_lane_at_once() {
    let (out, recs) = Case::new(0.5).run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "R1", 140.0),
            s(0, "R2", 280.0),
            s(0, "R0", 420.0),
        ]
    );
    let passes: Vec<u32> = recs.iter().map(|r| r.recycle_pass).collect();
    assert_eq!(passes, [0, 0, 0, 1]);
    assert_eq!(recs[0].correlation_id, recs[2].correlation_id);
    assert_ne!(recs[2].correlation_id, recs[3].correlation_id);
    assert_eq!(ms(recs[3].intended_ns), 420.0);
    let c = &out.counts;
    assert_eq!((c.trees_started, c.trees_drained), (2, 1));
    assert_eq!(out.replay.tally.sessions, 2);
    // The recycled root was in flight at the end (500 ms) and drained (no grace limit).
    assert_eq!(ms(recs[3].end_ns), 560.0);
}

/// A root turn that overflows the context before the root's last turn ends the tree (the
/// scenario's rule) and starts none of the branches due at its return; the next tree's do start.
#[tokio::test(start_paused = true)]
async fn a_root_overflow_skips_the_branches_due_at_its_return() {
    let mut case = Case::new(0.3);
    branch(case.tree(), false);
    case.delays = [[0.0, 1000.0, 0.0], [0.0; 3]];
    let script = Scripted::new(|c| {
        if c.n == 0 {
            Reply::overflow()
        } else {
            Reply::ok()
        }
    });
    let (out, recs) = case.run(script).await;
    assert_eq!(
        sends(&recs),
        [s(0, "R0", 0.0), s(0, "R0", 100.0), s(0, "C0", 240.0)]
    );
    assert!(recs[0].context_overflow);
    assert_eq!(
        recs[0].error.as_ref().map(|e| e.kind.as_str()),
        Some("context_overflow")
    );
    assert_eq!((recs[1].recycle_pass, recs[2].recycle_pass), (1, 1));
    let c = &out.counts;
    assert_eq!(
        (c.children_spawned, c.trees_started, c.trees_drained),
        (1, 2, 1)
    );
    assert_eq!(out.replay.tally.context_overflows, 1);
}

/// A request task that panics leaves a failed record with the panic as its cause, its stream ends
/// (root turn 2 is never sent) and its session is released at once, and the tree drains when the
/// child returns.
#[tokio::test(start_paused = true)]
async fn a_panicking_request_is_recorded_as_failed_and_its_tree_drains() {
    let mut case = Case::new(2.5);
    branch(case.tree(), false);
    case.delays = [[0.0, 1000.0, 0.0], [0.0, 2000.0, 0.0]];
    let script = Scripted::new(|c| {
        if !c.child && c.nth == 1 {
            Reply::panics()
        } else {
            Reply::ok()
        }
    });
    let ended = script.ended();
    let (out, recs) = case.run(script).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "C0", 140.0),
            s(0, "R1", 1140.0),
            s(0, "C1", 2280.0),
            s(0, "R0", 2420.0),
        ]
    );
    // The first session ended is the root's, at the panic (the child's ends at 2420 ms).
    assert_eq!(ended.lock().unwrap().first(), Some(&recs[0].correlation_id));
    let failed = &recs[2];
    let err = failed.error.as_ref().expect("an error");
    assert_eq!(err.kind, "panic");
    assert!(
        err.message
            .starts_with("the request task panicked: scripted panic of request 2"),
        "{}",
        err.message
    );
    assert_eq!(ms(failed.end_ns), 1140.0);
    assert_eq!(recs[4].recycle_pass, 1);
    let c = &out.counts;
    assert_eq!((c.trees_drained, c.trees_started), (1, 2));
    assert_eq!((out.replay.tally.failed, out.replay.tally.ok), (1, 4));
}

/// Two lanes with a cache-pressure stage of one request per lane: lane 0 from t* = 0.5 s (root
/// turn 1 next, turn 0 its primer), lane 1 from t* = 1.5 s (root turn 2 next, turn 1 its primer),
/// root turn 1 followed by a 10 s think gap.
fn pressure_case() -> Case {
    let mut case = Case::new(2.0);
    case.pressure = Some(Pressure::RequestsPerLane(1));
    case.delays = [[0.0, 10_000.0, 0.0], [0.0; 3]];
    let lane = |lane: u32, t_star: f64, next: u32| TreeLane {
        t_star_ms: Some(t_star),
        streams: vec![TreeLaneStream {
            next_turn: next,
            warm_turn: Some(next - 1),
            ..root_lane(lane).streams[0].clone()
        }],
        ..root_lane(lane)
    };
    case.lanes = vec![lane(0, 500.0, 1), lane(1, 1500.0, 2)];
    case
}

/// The warmup's cache-pressure stage after the primers, then the hand-off: each lane sends one
/// request past its primer (lane 1's is its root's last turn, so its tree drains and recycles in
/// the stage); profiling then resumes every stream at its turn's recorded offset past its tree's
/// origin, less the smallest such offset (T0).
#[tokio::test(start_paused = true)]
async fn the_pressure_stage_hands_off_to_profiling_at_recorded_offsets() {
    let case = pressure_case();
    let (out, recs) = case.run(ok()).await;
    let phases: Vec<(u32, String, f64, Phase)> = sends(&recs)
        .into_iter()
        .zip(&recs)
        .map(|((l, w, t), r)| (l, w, t, r.phase))
        .collect();
    let (w, p) = (Phase::Warmup, Phase::Profiling);
    assert_eq!(
        phases,
        [
            // Primers, then the pressure stage's one request per lane.
            (0, "R0".into(), 0.0, w),
            (1, "R1".into(), 0.0, w),
            (0, "R1".into(), 140.0, w),
            (1, "R2".into(), 140.0, w),
            // Lane 1's recycled tree: offset 0 (T0); lane 0's root turn 2: 2000 - 500 past T0.
            (1, "R0".into(), 280.0, p),
            (0, "R2".into(), 1780.0, p),
            // Lane 0's tree drained: its next tree starts at once.
            (0, "R0".into(), 1920.0, p),
        ]
    );
    assert!(
        recs[..4].iter().all(|r| r.max_tokens == 1),
        "warmup max_tokens"
    );
    let c = &out.counts;
    assert_eq!((c.pressure_requests, c.pressure_trees), (2, 1));
    assert_eq!((c.trees_started, c.trees_drained), (3, 2));
    assert_eq!(out.replay.profiling_ns.map(|p| p.0), Some(280_000_000));
}

/// The boundary scrapes, each a 30 ms scrape on the virtual clock: the replay asks for them in
/// phase order and waits for the ones that bound the profiling counters. The profiling_start
/// scrape comes after every warmup request (primers and cache-pressure stage) returned, and
/// profiling begins, and its first request goes, only when it is in; the profiling_complete scrape
/// comes after every profiling request returned and after profiling's end was noted.
#[tokio::test(start_paused = true)]
async fn boundary_scrapes_come_at_the_phase_edges_and_bound_profiling() {
    use agentx_metrics::scrape_log::Boundary;
    let mut case = pressure_case();
    let seen: Arc<std::sync::Mutex<Vec<(Boundary, u64, u64)>>> = Arc::default();
    let log = seen.clone();
    let start = tokio::time::Instant::now();
    case.boundary = Some(Arc::new(move |b| {
        let log = log.clone();
        Box::pin(async move {
            let asked = start.elapsed().as_nanos() as u64;
            tokio::time::sleep(Duration::from_millis(30)).await;
            let done = start.elapsed().as_nanos() as u64;
            log.lock().unwrap().push((b, asked, done));
        })
    }));
    let (out, recs) = case.run(ok()).await;
    let seen = seen.lock().unwrap().clone();
    let order: Vec<Boundary> = seen.iter().map(|x| x.0).collect();
    assert_eq!(order, Boundary::ALL);
    let at = |b: Boundary| *seen.iter().find(|x| x.0 == b).unwrap();
    let (p0, p1) = out.replay.profiling_ns.unwrap();
    let (_, ws_asked, ws_done) = at(Boundary::WarmupStart);
    assert_eq!(ws_asked, 0);
    let warm: Vec<&RequestRecord> = recs.iter().filter(|r| r.phase == Phase::Warmup).collect();
    let prof: Vec<&RequestRecord> = recs
        .iter()
        .filter(|r| r.phase == Phase::Profiling)
        .collect();
    assert!(warm.iter().all(|r| r.send_ns >= ws_done));
    let (_, ps_asked, ps_done) = at(Boundary::ProfilingStart);
    assert_eq!(ps_asked, warm.iter().map(|r| r.end_ns).max().unwrap());
    // Profiling begins on the instant the scrape is in, before its first request.
    assert_eq!(p0, ps_done);
    assert_eq!(prof.iter().map(|r| r.send_ns).min(), Some(p0));
    let (_, pe_asked, _) = at(Boundary::ProfilingEnd);
    assert_eq!(pe_asked, p0 + 2_000_000_000);
    let (_, pc_asked, _) = at(Boundary::ProfilingComplete);
    assert!(pc_asked >= p1 && p1 >= prof.iter().map(|r| r.end_ns).max().unwrap());
}

/// An open-loop case: no lanes, `slots` the ceiling, arrivals of `spec`.
fn open_loop(secs: f64, spec: crate::arrivals::ArrivalSpec, slots: u32) -> Case {
    let mut case = Case::new(secs);
    case.lanes.clear();
    case.delays = [[0.0, 1000.0, 0.0], [0.0; 3]];
    case.arrivals = Some(OpenLoop { spec, slots });
    case
}

/// Constant arrivals at 2/s (0, 500, ..., 2500 ms) with one slot: a tree takes 1420 ms (turns at
/// 0, 1140 and 1280, 140 ms each), so the arrivals at 500 and 1000 find the slot taken and are
/// rejected (not queued), the one at 1500 starts the next tree from root turn 0 with its own
/// marker pass (its ordinal, 3), and 2000 and 2500 are rejected again.
#[tokio::test(start_paused = true)]
async fn open_loop_arrivals_over_the_ceiling_are_rejected_not_queued() {
    use crate::arrivals::{ArrivalCounts, ArrivalSpec, Pattern};
    let spec = ArrivalSpec::new(2.0, Pattern::Constant, None, 7).unwrap();
    let (out, recs) = open_loop(2.9, spec, 1).run(ok()).await;
    assert_eq!(
        sends(&recs),
        [
            s(0, "R0", 0.0),
            s(0, "R1", 1140.0),
            s(0, "R2", 1280.0),
            s(0, "R0", 1500.0),
            s(0, "R1", 2640.0),
            s(0, "R2", 2780.0),
        ]
    );
    let passes: Vec<u32> = recs.iter().map(|r| r.recycle_pass).collect();
    assert_eq!(passes, [0, 0, 0, 3, 3, 3]);
    assert_eq!(
        out.counts.arrivals,
        Some(ArrivalCounts {
            offered: 6,
            admitted: 2,
            rejected: 4,
            skipped: 0
        })
    );
    assert_eq!((out.counts.trees_started, out.counts.trees_drained), (2, 2));
    assert_eq!(out.replay.tally.sessions, 2);
    assert!(recs.iter().all(|r| r.phase == Phase::Profiling));
}

/// Seeded poisson arrivals with room for all: every arrival starts its tree's root turn 0 exactly
/// at its drawn instant, the same seed gives the same instants, and the two markers of the same
/// trace differ (each arrival's ordinal salts its marker).
#[tokio::test(start_paused = true)]
async fn open_loop_poisson_arrivals_start_at_their_seeded_instants() {
    use crate::arrivals::{ArrivalSpec, Pattern};
    let spec = ArrivalSpec::new(3.0, Pattern::Poisson, None, 11).unwrap();
    let secs = 4.0;
    let (out, recs) = open_loop(secs, spec, 64).run(ok()).await;
    let want: Vec<f64> = spec
        .offsets(200)
        .into_iter()
        .take_while(|&t| t < secs)
        .map(|t| (t * 1e9) as u64 as f64 / 1e6)
        .collect();
    let roots: Vec<f64> = recs
        .iter()
        .filter(|r| r.turn == 0 && depth(r) == 0)
        .map(|r| ms(r.send_ns))
        .collect();
    assert!(want.len() >= 6, "{want:?}");
    assert_eq!(roots.len(), want.len());
    for (got, want) in roots.iter().zip(&want) {
        assert!(
            *got >= want - 0.001 && *got <= want + 1.0,
            "{got} vs {want} (timers fire on the millisecond)"
        );
    }
    let c = out.counts.arrivals.unwrap();
    assert_eq!(
        (c.offered, c.admitted, c.rejected, c.skipped),
        (want.len() as u64, want.len() as u64, 0, 0)
    );
    let passes: Vec<u32> = recs
        .iter()
        .filter(|r| r.turn == 0 && depth(r) == 0)
        .map(|r| r.recycle_pass)
        .collect();
    assert_eq!(passes, (0..want.len() as u32).collect::<Vec<_>>());
    let mut sc = testkit::scenario(
        agentx_scenario::builtin::BUILTIN_OPEN,
        "builtin:agentx-open",
    );
    let mut marker = |pass: u32| {
        sc.cache_bust_tree(
            agentx_scenario::types::Placement::FirstTurnPrefix,
            &agentx_scenario::types_v2::TreeId {
                run_id: "test-run".into(),
                pass,
                lane: 0,
                trace_id: "t".into(),
            },
        )
        .unwrap()
        .text
    };
    assert_ne!(marker(0), marker(1));
}

/// A client that stalls 1200 ms when sending the first request: the scheduler wakes at 1200 with
/// the arrivals of 500 and 1000 due. The one at 500 is more than one inter-arrival (500 ms) late and
/// is skipped, not fired in a burst; the one at 1000 starts its tree at 1200; the schedule goes on
/// at 1500, 2000 and 2500, where the four slots are full (the trees of 0, 1000, 1500 and 2000 in
/// flight) and the arrival is rejected.
#[tokio::test(start_paused = true)]
async fn a_stalled_open_loop_skips_the_stale_arrivals_instead_of_bursting() {
    use crate::arrivals::{ArrivalCounts, ArrivalSpec, Pattern};
    let spec = ArrivalSpec::new(2.0, Pattern::Constant, None, 7).unwrap();
    let script = Scripted::new(|c| Reply {
        stall: (c.n == 0).then_some(Duration::from_millis(1200)),
        ..Reply::ok()
    });
    let (out, recs) = open_loop(2.9, spec, 4).run(script).await;
    let roots: Vec<(u32, f64)> = recs
        .iter()
        .filter(|r| r.turn == 0)
        .map(|r| (r.recycle_pass, ms(r.intended_ns)))
        .collect();
    assert_eq!(
        roots,
        [(0, 0.0), (2, 1200.0), (3, 1500.0), (4, 2000.0)],
        "(arrival ordinal, intended ms) of each tree's first request"
    );
    assert_eq!(
        out.counts.arrivals,
        Some(ArrivalCounts {
            offered: 6,
            admitted: 4,
            rejected: 1,
            skipped: 1
        })
    );
}
