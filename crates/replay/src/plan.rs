//! The plan of a replay, made before any request is sent: which trace each lane plays, the start turn
//! the scenario picks for it, each session's cache-bust marker, and the think-time delay before every
//! turn of every trace (so no guest call sits between a response and the next send).

use std::fmt::Write as _;

use serde::Serialize;

use agentx_dataset::{sendable_starts, AssistantMode, Dataset, Tiling};
use agentx_scenario::types::{
    DelayParams, Placement, SessionId, StartParams, Trajectory, TurnTiming,
};
use agentx_scenario::{ScenarioError, ScenarioInstance};

/// One lane of the plan.
#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    /// The lane's index, from 0.
    pub lane: u32,
    /// Index of the trace in the dataset.
    #[serde(skip)]
    pub trace: usize,
    /// The trace's id.
    pub trace_id: String,
    /// The trace's turns.
    pub turns: u32,
    /// The warmup turn k; profiling resumes at k+1.
    pub start_turn: u32,
    /// The cache-bust marker of the lane's first session (warmup and the first profiling session).
    pub marker: String,
}

impl Lane {
    /// The start turn as a percentage of the trace.
    pub fn percent(&self) -> f64 {
        100.0 * f64::from(self.start_turn) / f64::from(self.turns.max(1))
    }
}

/// What the plan needs from the resolved configuration.
#[derive(Debug, Clone)]
pub struct PlanParams {
    /// Lanes replayed at once (`--concurrency`).
    pub concurrency: u32,
    /// The scenario's parameters for picking each lane's start turn.
    pub start: StartParams,
    /// The scenario's parameters for the think-time delay before each turn.
    pub delay: DelayParams,
    /// Where the cache-bust marker goes in each request's messages.
    pub placement: Placement,
    /// Whether assistant turns replay the recorded text or the server's live replies.
    pub mode: AssistantMode,
    /// How prompts are laid out (which turns can start a session depends on it).
    pub tiling: Tiling,
    /// The run's id, from which the scenario mints each lane's cache-bust marker.
    pub run_id: String,
}

/// The whole plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// One entry per lane, in lane order.
    pub lanes: Vec<Lane>,
    /// Traces that can start a session, in dataset order (the recycle queue's initial order).
    pub pool: Vec<usize>,
    /// `delays[trace][turn]`: seconds to wait after turn-1 ends before sending turn (0 for turn 0).
    pub delays: Vec<Vec<f64>>,
    /// Lanes had to share traces because the pool is smaller than the concurrency.
    pub wrapped: bool,
}

/// Errors of planning.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The scenario failed to plan the starts or the delays.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// No trace has a turn a session can start at.
    #[error("no trace of the dataset can start a session ({traces} traces; each needs at least 2 turns with a sendable start); use a larger corpus or raise --num-dataset-entries")]
    NoUsableTrace {
        /// Traces in the dataset.
        traces: usize,
    },
}

/// How much of a plan cannot fit a server's context length (by the corpus's recorded counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverContext {
    /// Lanes whose warmup request (the start turn's prompt plus its output) is longer.
    pub lanes: usize,
    /// Traces of the pool with at least one such request.
    pub traces: usize,
    /// Traces in the pool.
    pub pool: usize,
}

impl Plan {
    /// What will overflow a context of `max_len` tokens: a request needs its prompt plus its
    /// requested output (`max_tokens`), as vLLM counts it.
    pub fn over_context(&self, ds: &Dataset, max_len: u64) -> OverContext {
        let need = |t: &agentx_dataset::Turn<'_>| {
            u64::from(t.input_tokens()) + u64::from(t.output_tokens().max(1))
        };
        let lanes = self
            .lanes
            .iter()
            .filter(|l| {
                ds.trajectory(l.trace)
                    .and_then(|t| t.turn(l.start_turn as usize))
                    .is_some_and(|t| need(&t) > max_len)
            })
            .count();
        let traces = self
            .pool
            .iter()
            .filter(|&&i| {
                ds.trajectory(i)
                    .is_some_and(|t| t.turns().any(|t| need(&t) > max_len))
            })
            .count();
        OverContext {
            lanes,
            traces,
            pool: self.pool.len(),
        }
    }

    /// Plans a run: start turns in one guest call, delays per turn, markers per lane.
    pub fn build(
        ds: &Dataset,
        scenario: &mut ScenarioInstance,
        params: &PlanParams,
    ) -> Result<Plan, PlanError> {
        let wit: Vec<Trajectory> = ds
            .trajectories()
            .map(|t| wit_trajectory(t, params, t.id().to_owned()))
            .collect();
        let starts = scenario.plan_starts(params.start, &wit)?;
        let pool: Vec<usize> = starts
            .iter()
            .enumerate()
            .filter(|(_, k)| k.is_some())
            .map(|(i, _)| i)
            .collect();
        if pool.is_empty() {
            return Err(PlanError::NoUsableTrace { traces: ds.len() });
        }
        let conc = params.concurrency as usize;
        let wrapped = pool.len() < conc;
        let mut lanes = Vec::with_capacity(conc);
        for lane in 0..conc {
            let trace = pool[lane % pool.len()];
            let traj = ds.trajectory(trace).expect("pool index is in the dataset");
            // A lane that shares its trace with an earlier one draws its start with the lane in the
            // salt (`seed:trace:lane`), as aiperf's wrap-fill does, so shared traces start apart.
            let start_turn = if lane < pool.len() {
                starts[trace].expect("pool traces have a start")
            } else {
                let salted = wit_trajectory(traj, params, format!("{}:{lane}", traj.id()));
                match scenario.start_turn(params.start, &salted)? {
                    Some(start_turn) => start_turn,
                    None => starts[trace].expect("pool traces have a start"),
                }
            };
            let marker = scenario
                .cache_bust(
                    params.placement,
                    &SessionId {
                        run_id: params.run_id.clone(),
                        recycle_pass: 0,
                        lane: lane as u32,
                        trace_id: traj.id().to_owned(),
                    },
                )?
                .text;
            lanes.push(Lane {
                lane: lane as u32,
                trace,
                trace_id: traj.id().to_owned(),
                turns: traj.num_turns() as u32,
                start_turn,
                marker,
            });
        }
        let mut delays = Vec::with_capacity(ds.len());
        for t in ds.trajectories() {
            let mut turn_delays = Vec::with_capacity(t.num_turns());
            let mut prev_t = None;
            for turn in t.turns() {
                let timing = TurnTiming {
                    think_time: turn.think_time(),
                    timestamp_gap: prev_t.map(|p: f64| (turn.t() - p).max(0.0)),
                };
                turn_delays.push(if turn.index() == 0 {
                    0.0
                } else {
                    scenario.turn_delay(params.delay, timing)?
                });
                prev_t = Some(turn.t());
            }
            delays.push(turn_delays);
        }
        Ok(Plan {
            lanes,
            pool,
            delays,
            wrapped,
        })
    }

    /// The part of the plan shard `index` of `count` runs: the lanes `l` with `l % count == index`,
    /// and its own part of the recycle pool. Every pool trace belongs to one shard: a lane's start
    /// trace to the lane's shard, the others dealt in pool order to the shard holding the fewest so
    /// far (lowest index on a tie). A trace therefore never runs on two shards, and within a shard
    /// the recycle queue keeps it on one lane at a time while the shard holds more traces than
    /// lanes. The delays stay whole (they are indexed by trace).
    #[must_use]
    pub fn shard(&self, index: u32, count: u32) -> Plan {
        let count = count.max(1);
        let shard_of_lane = |l: u32| l % count;
        let mut owner: std::collections::HashMap<usize, u32> = std::collections::HashMap::new();
        for l in &self.lanes {
            owner.entry(l.trace).or_insert(shard_of_lane(l.lane));
        }
        let mut held = vec![0usize; count as usize];
        for s in owner.values() {
            held[*s as usize] += 1;
        }
        let mut pool = Vec::new();
        for &t in &self.pool {
            let shard = match owner.get(&t) {
                Some(&shard) => shard,
                None => {
                    let shard = (0..count)
                        .min_by_key(|&shard| (held[shard as usize], shard))
                        .unwrap_or(0);
                    held[shard as usize] += 1;
                    owner.insert(t, shard);
                    shard
                }
            };
            if shard == index {
                pool.push(t);
            }
        }
        Plan {
            lanes: self
                .lanes
                .iter()
                .filter(|l| shard_of_lane(l.lane) == index)
                .cloned()
                .collect(),
            pool,
            delays: self.delays.clone(),
            wrapped: self.wrapped,
        }
    }

    /// The startup table: one line per lane and the min/median/max start percentage.
    pub fn table(&self) -> String {
        let mut table = String::new();
        let width = self
            .lanes
            .iter()
            .map(|l| l.trace_id.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(
            table,
            "{:>5}  {:<width$}  {:>11}  {:>6}",
            "lane", "trace", "start_turn", "pct"
        );
        for l in &self.lanes {
            let _ = writeln!(
                table,
                "{:>5}  {:<width$}  {:>11}  {:>5.1}%",
                l.lane,
                l.trace_id,
                format!("{}/{}", l.start_turn, l.turns),
                l.percent()
            );
        }
        let (min, med, max) = self.percent_spread();
        let _ = write!(
            table,
            "start turn as % of trace: min {min:.1}%, median {med:.1}%, max {max:.1}% over {} lanes",
            self.lanes.len()
        );
        table
    }

    /// Min, median and max start percentage over the lanes.
    pub fn percent_spread(&self) -> (f64, f64, f64) {
        let mut sorted: Vec<f64> = self.lanes.iter().map(Lane::percent).collect();
        sorted.sort_unstable_by(f64::total_cmp);
        if sorted.is_empty() {
            return (0.0, 0.0, 0.0);
        }
        let count = sorted.len();
        let med = if count % 2 == 1 {
            sorted[count / 2]
        } else {
            (sorted[count / 2 - 1] + sorted[count / 2]) / 2.0
        };
        (sorted[0], med, sorted[count - 1])
    }
}

fn wit_trajectory(
    trajectory: agentx_dataset::Trajectory<'_>,
    params: &PlanParams,
    trace_id: String,
) -> Trajectory {
    let unsendable = sendable_starts(trajectory, params.mode, params.tiling)
        .iter()
        .enumerate()
        .filter(|(_, ok)| !**ok)
        .map(|(i, _)| i as u32)
        .collect();
    Trajectory {
        trace_id,
        num_turns: trajectory.num_turns() as u32,
        unsendable,
    }
}

#[cfg(test)]
mod shard_tests {
    use super::*;

    fn plan(lanes: u32, pool: usize) -> Plan {
        Plan {
            lanes: (0..lanes)
                .map(|l| Lane {
                    lane: l,
                    trace: l as usize % pool,
                    trace_id: format!("t{}", l as usize % pool),
                    turns: 4,
                    start_turn: 1,
                    marker: format!("m{l}"),
                })
                .collect(),
            pool: (0..pool).collect(),
            delays: vec![vec![0.0; 4]; pool],
            wrapped: (lanes as usize) > pool,
        }
    }

    #[test]
    fn shards_split_lanes_and_pool_without_sharing_a_trace() {
        let p = plan(8, 20);
        let parts: Vec<Plan> = (0..3).map(|i| p.shard(i, 3)).collect();
        let mut lanes: Vec<u32> = parts
            .iter()
            .flat_map(|s| s.lanes.iter().map(|l| l.lane))
            .collect();
        lanes.sort_unstable();
        assert_eq!(lanes, (0..8).collect::<Vec<_>>());
        assert_eq!(
            parts.iter().map(|s| s.lanes.len()).collect::<Vec<_>>(),
            vec![3, 3, 2]
        );
        let mut pool: Vec<usize> = parts.iter().flat_map(|s| s.pool.clone()).collect();
        pool.sort_unstable();
        assert_eq!(
            pool,
            (0..20).collect::<Vec<_>>(),
            "every trace in exactly one shard"
        );
        for s in &parts {
            // A shard's lanes start on traces of its own pool, and it holds more traces than lanes.
            assert!(s.lanes.iter().all(|l| s.pool.contains(&l.trace)));
            assert!(s.pool.len() > s.lanes.len(), "{:?}", s.pool);
        }
        // One shard is the whole plan.
        let one = p.shard(0, 1);
        assert_eq!(one.pool, p.pool);
        assert_eq!(one.lanes.len(), 8);
    }
}
