//! The scheduler's warmup: the primers (each alive stream's warm turn), the optional
//! cache-pressure stage, and its hand-off into profiling (every stream resumes where the stage left
//! it, due its recorded offset past the hand-off's T0).

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::state::{Sched, St};
use super::stream::{Done, Stage};
use super::{Pressure, Wake};
use crate::timer;
use crate::tree::TreeLane;
use agentx_metrics::scrape_log::Boundary;

/// How the warmup ended when profiling may follow.
pub(super) struct Warmed {
    /// When the primers were released.
    pub(super) start: Instant,
    /// Primers that returned.
    pub(super) primers: u64,
    /// The cache-pressure stage ran: profiling resumes every stream where it left it.
    pub(super) pressured: bool,
}

/// Why the warmup stopped the run.
pub(super) struct WarmupStop {
    pub(super) interrupted: bool,
    pub(super) failures: Vec<String>,
}

/// The warmup: the primers, then the optional cache-pressure stage.
pub(super) async fn run(
    sched: &mut Sched,
    lanes_plan: &[TreeLane],
    interrupt: &mut watch::Receiver<u32>,
) -> Result<Warmed, WarmupStop> {
    let (start, primers) = primers(sched, lanes_plan, interrupt).await?;
    let pressured = match sched.plan.pressure {
        Some(p) => {
            sched.sh.boundary(Boundary::PressureStart).await;
            match pressure_stage(sched, p, interrupt).await {
                Ok(()) => true,
                Err(PressureStop::Interrupted) => {
                    return Err(WarmupStop {
                        interrupted: true,
                        failures: Vec::new(),
                    })
                }
                Err(PressureStop::Failed(f)) => {
                    return Err(WarmupStop {
                        interrupted: false,
                        failures: vec![f],
                    })
                }
            }
        }
        None => false,
    };
    Ok(Warmed {
        start,
        primers,
        pressured,
    })
}

/// The primers: every alive stream with a warm turn sends it, spread so that each primer's
/// recorded position lines up with t* (or all at once); returns when all of them returned, with
/// when they were released and how many there were.
async fn primers(
    sched: &mut Sched,
    lanes_plan: &[TreeLane],
    interrupt: &mut watch::Receiver<u32>,
) -> Result<(Instant, u64), WarmupStop> {
    let sh = sched.sh.clone();
    let n_lanes = lanes_plan.len();
    let warm_start = timer::now();
    let spread = sched.plan.rules.warmup_spread && !sched.plan.burst;
    // The whole plan's largest lead: every shard's primers line up with one t*.
    let max_lead = sched.plan.whole.max_lead_ms;
    let mut primers = 0u64;
    for l in lanes_plan {
        for s in &l.streams {
            let Some(warm_turn) = s.warm_turn else {
                continue;
            };
            let off = if spread {
                (max_lead - s.lead_ms).max(0.0)
            } else {
                0.0
            };
            let lane_tree = sched.lanes[l.lane as usize].as_mut().expect("planned");
            lane_tree.streams[s.index as usize].next = warm_turn;
            primers += 1;
            sched.push_timer(
                l.lane,
                s.index,
                warm_start + Duration::from_secs_f64(off / 1000.0),
            );
        }
    }
    sh.progress.phase("warmup", primers);
    tracing::info!(
        "Phase warmup started | target: {primers} primers over {n_lanes} lanes (max_tokens={}, {})",
        sched.plan.rules.warmup_max_tokens,
        if spread {
            format!("spread over {max_lead:.0} ms")
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
    let mut beat = Heartbeat::new(sched);
    while returned < primers {
        wake.arm(&sh, sched.next_wake());
        tokio::select! {
            () = beat.tick() => {
                // Primers still spread ahead cannot return before their release.
                let ahead = (max_lead / 1000.0 - timer::now().saturating_duration_since(warm_start).as_secs_f64()).max(0.0);
                log_progress(sched, "primers", returned, primers, warm_start, ahead);
            }
            Some(r) = sched.tasks.join_next() => {
                let Ok(finished) = r else {
                    failures.push("a warmup task failed".into());
                    returned += 1;
                    continue;
                };
                returned += 1;
                sh.progress.update(returned, format!("{returned}/{primers} primers returned"));
                let depth0 = finished.stream == 0;
                let lane = finished.lane;
                let (overflow, failed) = (finished.overflow, finished.failed.clone());
                let next_turn = finished.turn + 1;
                let stream = finished.stream;
                sched.on_done(finished);
                if let Some(lane_tree) = sched.lanes[lane as usize].as_mut() {
                    lane_tree.streams[stream as usize].next = next_turn;
                }
                // The lane as the whole plan numbers it (a shard's own start at 0).
                let lane = sched.lane_id(lane);
                match (overflow, failed) {
                    (true, _) if depth0 => {
                        sched.counts.warmup_root_overflows += 1;
                        tracing::info!("warmup: lane {lane}'s root primer overflowed the context; the lane starts a fresh tree when profiling begins");
                    }
                    (false, Some(e)) if depth0 && sched.plan.rules.warmup_failure_aborts => {
                        failures.push(format!("lane {lane} root primer: {e}"));
                    }
                    (false, Some(e)) if depth0 => {
                        sched.counts.warmup_root_failures += 1;
                        tracing::warn!("warmup: lane {lane}'s root primer failed ({e}); the lane starts a fresh tree when profiling begins");
                    }
                    (_, Some(e)) => {
                        sched.counts.warmup_child_failures += 1;
                        tracing::warn!("warmup: lane {lane} stream {stream} primer failed ({e}); the stream goes on");
                    }
                    _ => {}
                }
                if failures.is_empty() {
                    failures.extend(sched.warmup_threshold());
                }
                if !failures.is_empty() {
                    let _ = sh.cancel.send_replace(true);
                    while sched.tasks.join_next().await.is_some() {}
                    break;
                }
            }
            () = &mut wake.fut => {
                wake.fired();
                sched.fire_due();
            }
            _ = interrupt.changed() => {
                interrupted = true;
                let _ = sh.cancel.send_replace(true);
                while sched.tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
    if interrupted || !failures.is_empty() {
        return Err(WarmupStop {
            interrupted,
            failures,
        });
    }
    Ok((warm_start, returned))
}

/// Why the cache-pressure stage stopped the run.
#[derive(Debug, PartialEq)]
pub(super) enum PressureStop {
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
    sched: &mut Sched,
    pressure: Pressure,
    interrupt: &mut watch::Receiver<u32>,
) -> Result<(), PressureStop> {
    sched.stage = Stage::Pressure;
    sched.heap.clear();
    let now = timer::now();
    tracing::info!(
        "warmup: cache-pressure stage ({})",
        match pressure {
            Pressure::RequestsPerLane(n) => format!("{n} requests per lane"),
            Pressure::Duration(d) => format!("{:.0} s", d.as_secs_f64()),
        }
    );
    for lane in 0..sched.lanes.len() as u32 {
        let Some(lane_tree) = sched.lanes[lane as usize].as_mut() else {
            continue;
        };
        lane_tree.timers = 0;
        if lane_tree.streams[0].st == St::Done
            && lane_tree.streams.iter().all(|s| s.st != St::Waiting)
        {
            sched.recycle(lane);
            continue;
        }
        let waiting: Vec<u32> = (0..lane_tree.streams.len() as u32)
            .filter(|&s| lane_tree.streams[s as usize].st == St::Waiting)
            .collect();
        for s in waiting {
            sched.push_timer(lane, s, now);
        }
    }
    let end = match pressure {
        Pressure::Duration(d) => Some(tokio::time::Instant::from_std(now + d)),
        Pressure::RequestsPerLane(_) => None,
    };
    // The drain's deadline, set when releases stop.
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    sched.fire_due();
    let mut wake = Wake::new();
    let mut beat = Heartbeat::new(sched);
    let failure = loop {
        if let Pressure::RequestsPerLane(n) = pressure {
            if sched.pressure_sent.iter().all(|&x| x >= n) {
                sched.paused = true;
            }
        }
        if sched.paused && drain_deadline.is_none() {
            drain_deadline = Some(match sched.sh.cfg.warmup_grace {
                Some(g) => tokio::time::Instant::now() + g,
                None => tokio::time::Instant::now() + Duration::from_secs(100 * 365 * 86_400),
            });
        }
        if sched.tasks.is_empty() && (sched.paused || sched.heap.is_empty()) {
            break None;
        }
        wake.arm(&sched.sh, sched.next_wake());
        tokio::select! {
            () = beat.tick() => {
                let (done, total, floor) = pressure_progress(sched, pressure, now, end);
                log_progress(sched, "cache pressure", done, total, now, floor);
            }
            Some(r) = sched.tasks.join_next() => {
                if let Ok(finished) = r {
                    if let Some(failure) = sched.pressure_root_failure(&finished) {
                        break Some(PressureStop::Failed(failure));
                    }
                    let failed = finished.failed.is_some();
                    sched.on_done(finished);
                    if let Some(failure) = failed.then(|| sched.warmup_threshold()).flatten() {
                        break Some(PressureStop::Failed(failure));
                    }
                }
                sched.fire_due();
            }
            () = &mut wake.fut => {
                wake.fired();
                sched.fire_due();
            }
            () = async {
                match end {
                    Some(e) => tokio::time::sleep_until(e).await,
                    None => std::future::pending().await,
                }
            }, if !sched.paused => sched.paused = true,
            () = async {
                match drain_deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            }, if drain_deadline.is_some() => {
                let left = sched.tasks.len();
                tracing::warn!("warmup: the cache-pressure drain outlasted the warmup grace period; cancelling {left} in-flight warmup requests");
                break Some(PressureStop::Failed(format!(
                    "{left} cache-pressure requests did not return within the warmup grace period {:?} and were cancelled",
                    sched.sh.cfg.warmup_grace.unwrap_or_default()
                )));
            }
            _ = interrupt.changed() => break Some(PressureStop::Interrupted),
        }
    };
    if let Some(stop) = failure {
        let _ = sched.sh.cancel.send_replace(true);
        while sched.tasks.join_next().await.is_some() {}
        return Err(stop);
    }
    tracing::info!(
        requests = sched.counts.pressure_requests,
        trees = sched.counts.pressure_trees,
        "warmup: cache-pressure stage drained"
    );
    Ok(())
}

/// The `Phase warmup progress` heartbeat of the tree warmup (aiperf's line, every
/// `warmup_progress_interval`), with an ETA from the stage's observed rate.
struct Heartbeat {
    tick: Option<tokio::time::Interval>,
}

impl Heartbeat {
    fn new(sched: &Sched) -> Heartbeat {
        Heartbeat {
            tick: sched.sh.cfg.warmup_progress_interval.map(|i| {
                let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + i, i);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                interval
            }),
        }
    }

    /// The next beat (never, without an interval).
    async fn tick(&mut self) {
        match self.tick.as_mut() {
            Some(t) => {
                t.tick().await;
            }
            None => std::future::pending().await,
        }
    }
}

/// The `Phase warmup progress` line of `stage`: `done` of `total` returned since `since`, never
/// finishing before `floor` seconds from now.
fn log_progress(sched: &Sched, stage: &str, done: u64, total: u64, since: Instant, floor: f64) {
    let tally = sched.sh.tally.lock().expect("tally lock").clone();
    let elapsed = timer::now().saturating_duration_since(since).as_secs_f64();
    tracing::info!(
        "Phase warmup progress | {stage} | returned={done}/{total} | in_flight={} | errors={} | elapsed={elapsed:.1}s | {}",
        sched.tasks.len(),
        tally.warmup_failed,
        crate::eta_field(done, total, elapsed, floor)
    );
}

/// The cache-pressure stage's progress: requests returned of the requests it sends (lanes × the
/// per-lane count), or seconds elapsed of its duration; and the time it cannot end before.
fn pressure_progress(
    sched: &Sched,
    pressure: Pressure,
    start: Instant,
    end: Option<tokio::time::Instant>,
) -> (u64, u64, f64) {
    match pressure {
        Pressure::RequestsPerLane(n) => {
            let sent: u64 = sched.pressure_sent.iter().sum();
            let returned = sent.saturating_sub(sched.tasks.len() as u64);
            (returned, n * sched.pressure_sent.len() as u64, 0.0)
        }
        Pressure::Duration(d) => {
            let left = end.map_or(0.0, |e| {
                e.saturating_duration_since(tokio::time::Instant::now())
                    .as_secs_f64()
            });
            let done = timer::now()
                .saturating_duration_since(start)
                .min(d)
                .as_secs();
            (done, d.as_secs().max(1), left)
        }
    }
}

impl Sched {
    /// Why the warmup stops when its failed requests exceed `--failed-request-threshold` (judged
    /// as profiling is, over the warmup's own counts; see [`crate::threshold`]), under
    /// rules that do not abort at a failed root request. A shard judges its own warmup.
    pub(super) fn warmup_threshold(&self) -> Option<String> {
        if self.plan.rules.warmup_failure_aborts {
            return None;
        }
        let threshold = self.sh.cfg.failed_request_threshold?;
        let tally = self.sh.tally.lock().expect("tally lock");
        tally.warmup_threshold_exceeded(threshold, self.sh.concurrency)
            .then(|| {
                format!(
                    "--failed-request-threshold {threshold} exceeded in warmup: {} of {} warmup requests failed",
                    tally.warmup_failed,
                    tally.warmup_judged()
                )
            })
    }

    /// A root request of the pressure stage that failed, was cancelled or overflowed: why the run
    /// stops (when the scenario's rules abort on a failed depth-0 warmup request).
    pub(super) fn pressure_root_failure(&self, done: &Done) -> Option<String> {
        if done.stream != 0 || !self.plan.rules.warmup_failure_aborts {
            return None;
        }
        let tree = self.lanes[done.lane as usize]
            .as_ref()
            .filter(|lane_tree| lane_tree.gen == done.gen)
            .map(|lane_tree| &self.plan.corpus.trees[lane_tree.tree].trace_id)?;
        let what = match (&done.failed, done.overflow) {
            (_, true) => "overflowed the context".to_string(),
            (Some(e), false) => format!("failed: {e}"),
            (None, false) => return None,
        };
        Some(format!(
            "lane {} root request (tree {tree}, turn {}) of the cache-pressure stage {what}",
            self.lane_id(done.lane),
            done.turn
        ))
    }

    /// Profiling after the pressure stage: every stream resumes at its deferred or held turn, due
    /// `offset − T0` after `start`, where a stream's offset is its turn's recorded start past its
    /// tree's origin and T0 the smallest offset of a turn not held by a join (see [`handoff_t0`]).
    ///
    /// `t0`: the T0 over all shards of a sharded run (the smallest of the shards'
    /// [`Sched::handoff_offset`]); `None`: this replay's own.
    pub(super) fn hand_off(&mut self, start: Instant, t0: Option<f64>) {
        self.heap.clear();
        let due = self.handoff_due();
        for lane_tree in self.lanes.iter_mut().flatten() {
            lane_tree.timers = 0;
            lane_tree.held.clear();
            for st in &mut lane_tree.streams {
                if st.st == St::Held {
                    st.st = St::Waiting;
                }
            }
        }
        let t0 = t0.unwrap_or_else(|| handoff_t0(&due));
        let mut lanes_seen = std::collections::HashSet::new();
        for r in due {
            if lanes_seen.insert(r.lane) {
                self.counts.trees_started += 1;
                self.sh.tally.lock().expect("tally lock").sessions += 1;
            }
            let due_at = start + Duration::from_secs_f64((r.offset_ms - t0).max(0.0) / 1000.0);
            self.push_timer(r.lane, r.stream, due_at);
        }
        for lane in 0..self.lanes.len() as u32 {
            if self.lanes[lane as usize].is_none() {
                self.recycle(lane);
            }
        }
    }

    /// This replay's part of the hand-off's T0: the smallest offset of its resumed turns not
    /// waiting for a join (`None` for none), which a shard sends to the others.
    pub(super) fn handoff_offset(&self) -> Option<f64> {
        handoff_min(&self.handoff_due())
    }

    /// Every stream profiling resumes after the pressure stage, with its offset.
    fn handoff_due(&self) -> Vec<Resume> {
        let corpus = std::sync::Arc::clone(&self.plan.corpus);
        let trees = &corpus.trees;
        let mut due: Vec<Resume> = Vec::new();
        for lane_tree in self.lanes.iter().flatten() {
            let tree = &trees[lane_tree.tree];
            for (i, st) in lane_tree.streams.iter().enumerate() {
                if matches!(st.st, St::Waiting | St::Held) {
                    let off = tree.streams[i].turns[st.next as usize].ts_ms - lane_tree.origin_ms;
                    due.push(Resume {
                        lane: lane_tree.lane,
                        stream: i as u32,
                        offset_ms: off.max(0.0),
                        joining: st.st == St::Held && self.holds(lane_tree, i as u32) == Some(true),
                    });
                }
            }
        }
        due
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
    handoff_min(due).unwrap_or(0.0)
}

/// The smallest offset of a resumed turn not waiting for a join, if any.
fn handoff_min(due: &[Resume]) -> Option<f64> {
    let t0 = due
        .iter()
        .filter(|r| !r.joining)
        .map(|r| r.offset_ms)
        .fold(f64::INFINITY, f64::min);
    t0.is_finite().then_some(t0)
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
