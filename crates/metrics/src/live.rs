//! What a run knows about itself while it goes ([`LiveRun`]): the replay's counts at send time
//! (requests sent and in flight by phase, busy lanes, active sessions, the stage and its
//! progress) and the completed requests' totals, which the record sink's watcher adds one record at
//! a time ([`LiveRun::absorb`]) by the same rules as [`crate::Summary::of`]: the outcome of
//! [`Outcome::of`], tokens and latencies of the successful requests only. So once the sink has
//! closed, the profiling totals equal the run summary's counts, tokens and distributions' counts
//! and sums.
//!
//! Two views read it: agentx's own Prometheus endpoint (`--metrics-listen`, agentx-telemetry) and
//! the live dashboard (`--ui dashboard`). Both take a [`LiveSnapshot`], a plain copy, at their
//! own pace. Everything here is atomics and short locks, never I/O: the replay's hot path pays a
//! few relaxed increments per request.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use agentx_record::{Phase, RequestRecord};

use crate::Outcome;

/// The histogram bucket bounds (seconds) of the time to first token: vLLM's
/// `vllm:time_to_first_token_seconds` bounds, so a dashboard puts client and server side by side.
pub const TTFT_BUCKETS_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// The bounds (seconds) of each request's mean inter-token latency (vLLM's
/// `vllm:inter_token_latency_seconds`).
pub const ITL_BUCKETS_S: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// The bounds (seconds) of the request latency (vLLM's `vllm:e2e_request_latency_seconds`).
pub const LATENCY_BUCKETS_S: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// The bounds (seconds) of the send lag, from a tenth of a millisecond (a client keeping up) to
/// seconds (a client that cannot).
pub const SEND_LAG_BUCKETS_S: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How many of the latest failures a run keeps for the views.
pub const RECENT_ERRORS: usize = 8;

/// The latest server-side figures (the realtime block's `srv` row, the dashboard's server pane;
/// `None` is shown as `-`), from the scrape of the server's `/metrics`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SrvRow {
    /// Percent of prompt tokens served from the prefix cache since the start.
    pub prefix_cache_hit: Option<f64>,
    /// Percent of prompt tokens served from an external (offloaded) cache since the start.
    pub ext_cache_hit: Option<f64>,
    /// Percent of KV cache in use now.
    pub kv_usage: Option<f64>,
    /// Requests the server is running now.
    pub running: Option<f64>,
    /// Requests waiting in the server's queue now.
    pub waiting: Option<f64>,
    /// Server-counted prompt and generation tokens per second over the last interval.
    pub tput_in: Option<f64>,
    /// Server-counted generation tokens per second over the last interval.
    pub tput_out: Option<f64>,
}

/// A fixed-bucket histogram: a count per upper bound (not cumulative), the values past the last
/// bound, their sum and count.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// The upper bounds, ascending.
    pub bounds: &'static [f64],
    /// Values at or under each bound and over the one before (one per bound).
    pub counts: Vec<u64>,
    /// Values over the last bound.
    pub over: u64,
    /// The sum of every value.
    pub sum: f64,
    /// The number of values.
    pub count: u64,
}

impl Buckets {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Buckets {
        Buckets {
            bounds,
            counts: vec![0; bounds.len()],
            over: 0,
            sum: 0.0,
            count: 0,
        }
    }

    /// Adds `value`.
    pub fn observe(&mut self, value: f64) {
        match self.bounds.iter().position(|&bound| value <= bound) {
            Some(index) => self.counts[index] += 1,
            None => self.over += 1,
        }
        self.sum += value;
        self.count += 1;
    }

    /// `(bound, values at or under it)` for each bound, then `(+Inf, count)`: Prometheus's
    /// cumulative buckets.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut running = 0;
        let mut out: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(&bound, &count)| {
                running += count;
                (bound, running)
            })
            .collect();
        out.push((f64::INFINITY, self.count));
        out
    }

    /// The mean, `None` before the first value.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// The completed requests of one phase, by the summary's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseTotals {
    /// Requests that ended well.
    pub ok: u64,
    /// Requests that failed (context overflows and cancellations apart).
    pub failed: u64,
    /// Requests cancelled.
    pub cancelled: u64,
    /// Responses the scenario classified as context overflows.
    pub context_overflows: u64,
    /// Prompt tokens of the successful requests.
    pub input_tokens: u64,
    /// Output tokens of the successful requests.
    pub output_tokens: u64,
    /// Cached prompt tokens the successful responses reported.
    pub cached_tokens: u64,
    /// Time to first token of the successful requests, seconds.
    pub ttft_s: Buckets,
    /// Each successful request's mean inter-token latency, seconds.
    pub itl_s: Buckets,
    /// Request latency of the successful requests, seconds.
    pub latency_s: Buckets,
    /// Send lag of the successful requests, seconds.
    pub send_lag_s: Buckets,
}

impl Default for PhaseTotals {
    fn default() -> PhaseTotals {
        PhaseTotals {
            ok: 0,
            failed: 0,
            cancelled: 0,
            context_overflows: 0,
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            ttft_s: Buckets::new(TTFT_BUCKETS_S),
            itl_s: Buckets::new(ITL_BUCKETS_S),
            latency_s: Buckets::new(LATENCY_BUCKETS_S),
            send_lag_s: Buckets::new(SEND_LAG_BUCKETS_S),
        }
    }
}

impl PhaseTotals {
    /// Every completed request, whatever its outcome.
    pub fn completed(&self) -> u64 {
        self.ok + self.failed + self.cancelled + self.context_overflows
    }

    /// Counts `rec` by `outcome` (its [`Outcome::of`]).
    fn absorb(&mut self, rec: &RequestRecord, outcome: Outcome) {
        match outcome {
            Outcome::Ok => {}
            Outcome::Failed => {
                self.failed += 1;
                return;
            }
            Outcome::Cancelled => {
                self.cancelled += 1;
                return;
            }
            Outcome::ContextOverflow => {
                self.context_overflows += 1;
                return;
            }
        }
        self.ok += 1;
        self.input_tokens += rec.isl;
        self.output_tokens += rec.osl;
        self.cached_tokens += rec.usage.cached_tokens.unwrap_or(0);
        if let Some(ttft_ns) = rec.ttft_ns() {
            self.ttft_s.observe(ttft_ns as f64 / 1e9);
        }
        if let Some(itl_ns) = rec.itl_ns() {
            self.itl_s.observe(itl_ns / 1e9);
        }
        if let Some(latency_ns) = rec.latency_ns() {
            self.latency_s.observe(latency_ns as f64 / 1e9);
        }
        self.send_lag_s.observe(rec.send_lag_ns() as f64 / 1e9);
    }
}

/// A failed request, as the views list the latest ones.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentError {
    /// When it ended, nanoseconds on the run's clock.
    pub end_ns: u64,
    /// The phase it belonged to.
    pub phase: Phase,
    /// The HTTP status (0 when none came).
    pub code: u16,
    /// The error's kind and message.
    pub message: String,
}

/// The stage a run is in, as the progress bar names it, and how far it went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StageProgress {
    /// The stage's name (`warmup`, `profiling`, `grace`...); empty before the replay starts.
    pub name: String,
    /// Steps of the stage (seconds of profiling, or warmup requests).
    pub length: u64,
    /// Steps done.
    pub position: u64,
    /// The progress bar's counts line.
    pub message: String,
}

/// A plain copy of a [`LiveRun`] at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSnapshot {
    /// Lanes this process replays.
    pub lanes: u64,
    /// Lanes with at least one request in flight.
    pub lanes_busy: u64,
    /// Sessions (single streams, or whole session trees) that began and have not ended.
    pub sessions_active: u64,
    /// Requests sent, warmup and profiling.
    pub sent: [u64; 2],
    /// Requests in flight, warmup and profiling.
    pub in_flight: [u64; 2],
    /// The completed requests, warmup and profiling.
    pub totals: [PhaseTotals; 2],
    /// The stage and its progress.
    pub stage: StageProgress,
    /// The latest failures, oldest first.
    pub recent_errors: Vec<RecentError>,
}

impl LiveSnapshot {
    /// The totals of `phase`.
    pub fn phase(&self, phase: Phase) -> &PhaseTotals {
        &self.totals[phase_index(phase)]
    }
}

/// What a run knows about itself while it goes (see the module's documentation).
#[derive(Debug, Default)]
pub struct LiveRun {
    lanes: u64,
    /// Requests in flight per lane id.
    lane_in_flight: Vec<AtomicU32>,
    lanes_busy: AtomicU64,
    sessions_active: AtomicI64,
    sent: [AtomicU64; 2],
    in_flight: [AtomicU64; 2],
    completed: Mutex<Completed>,
    stage: Mutex<StageProgress>,
}

#[derive(Debug, Default)]
struct Completed {
    totals: [PhaseTotals; 2],
    recent_errors: VecDeque<RecentError>,
}

/// Index of a phase in the per-phase arrays.
fn phase_index(phase: Phase) -> usize {
    match phase {
        Phase::Warmup => 0,
        Phase::Profiling => 1,
    }
}

/// A request counted in flight until it is dropped ([`LiveRun::begin_request`]).
#[derive(Debug)]
pub struct InFlight<'a> {
    run: &'a LiveRun,
    phase: Phase,
    lane: u32,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.run.in_flight[phase_index(self.phase)].fetch_sub(1, Ordering::Relaxed);
        if let Some(lane) = self.run.lane_in_flight.get(self.lane as usize) {
            if lane.fetch_sub(1, Ordering::Relaxed) == 1 {
                self.run.lanes_busy.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl LiveRun {
    /// A run of the lanes `lane_ids` (this process's own in a sharded run, whose ids are the
    /// run's: shard 1 of 2 replays lanes 1, 3, 5...).
    pub fn new(lane_ids: &[u32]) -> LiveRun {
        let bound = lane_ids.iter().max().map_or(0, |&max| max as usize + 1);
        LiveRun {
            lanes: lane_ids.len() as u64,
            lane_in_flight: (0..bound).map(|_| AtomicU32::new(0)).collect(),
            ..LiveRun::default()
        }
    }

    /// Requests in flight, both phases (cheaper than a snapshot).
    pub fn requests_in_flight(&self) -> u64 {
        self.in_flight
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .sum()
    }

    /// A request of `phase` on `lane` is being sent: counted sent, and in flight until the
    /// returned guard drops (when it returned, or its task unwound).
    pub fn begin_request(&self, phase: Phase, lane: u32) -> InFlight<'_> {
        let index = phase_index(phase);
        self.sent[index].fetch_add(1, Ordering::Relaxed);
        self.in_flight[index].fetch_add(1, Ordering::Relaxed);
        if let Some(lane_count) = self.lane_in_flight.get(lane as usize) {
            if lane_count.fetch_add(1, Ordering::Relaxed) == 0 {
                self.lanes_busy.fetch_add(1, Ordering::Relaxed);
            }
        }
        InFlight {
            run: self,
            phase,
            lane,
        }
    }

    /// A session began (`+1`) or ended (`-1`).
    pub fn session_delta(&self, delta: i64) {
        self.sessions_active.fetch_add(delta, Ordering::Relaxed);
    }

    /// The replay stopped: sessions cut by the end no longer count as active.
    pub fn sessions_over(&self) {
        self.sessions_active.store(0, Ordering::Relaxed);
    }

    /// The replay entered the stage `name` of `length` steps.
    pub fn set_stage(&self, name: &str, length: u64) {
        let mut stage = self
            .stage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *stage = StageProgress {
            name: name.to_string(),
            length,
            position: 0,
            message: String::new(),
        };
    }

    /// The stage went `position` steps; `message` is the progress bar's counts line.
    pub fn set_progress(&self, position: u64, message: &str) {
        let mut stage = self
            .stage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stage.position = position;
        message.clone_into(&mut stage.message);
    }

    /// Adds a completed request (the record sink's watcher calls it once per record written).
    pub fn absorb(&self, rec: &RequestRecord) {
        let mut completed = self
            .completed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let outcome = Outcome::of(rec);
        completed.totals[phase_index(rec.phase)].absorb(rec, outcome);
        if outcome == Outcome::Failed {
            if let Some(error) = &rec.error {
                if completed.recent_errors.len() == RECENT_ERRORS {
                    completed.recent_errors.pop_front();
                }
                completed.recent_errors.push_back(RecentError {
                    end_ns: rec.end_ns,
                    phase: rec.phase,
                    code: error.code,
                    message: format!("{}: {}", error.kind, error.message),
                });
            }
        }
    }

    /// A plain copy of everything, at once.
    pub fn snapshot(&self) -> LiveSnapshot {
        let (totals, recent_errors) = {
            let completed = self
                .completed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (
                completed.totals.clone(),
                completed.recent_errors.iter().cloned().collect(),
            )
        };
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LiveSnapshot {
            lanes: self.lanes,
            lanes_busy: load(&self.lanes_busy),
            sessions_active: self.sessions_active.load(Ordering::Relaxed).max(0) as u64,
            sent: [load(&self.sent[0]), load(&self.sent[1])],
            in_flight: [load(&self.in_flight[0]), load(&self.in_flight[1])],
            totals,
            stage: self
                .stage
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            recent_errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Summary;
    use agentx_record::testkit;

    #[test]
    fn the_profiling_totals_equal_the_summary_of_the_same_records() {
        let mut records = Vec::new();
        for index in 0..40u64 {
            let mut rec = testkit::rec(
                index * 100,
                &[20 + index, 30 + index, 45 + index],
                1000 + index,
                3,
            );
            // a send lag of `index` microseconds
            rec.intended_ns = rec.send_ns - index * 1_000;
            rec.usage.cached_tokens = Some(index);
            rec.phase = if index < 5 {
                Phase::Warmup
            } else {
                Phase::Profiling
            };
            match index % 7 {
                0 => rec.cancelled = true,
                1 => rec.context_overflow = true,
                2 => {
                    rec.error = Some(agentx_record::RecordError {
                        code: 503,
                        kind: "http_error".into(),
                        message: format!("busy {index}"),
                    });
                }
                _ => {}
            }
            records.push(rec);
        }
        let live = LiveRun::new(&[0, 1, 2, 3]);
        for rec in &records {
            live.absorb(rec);
        }
        let snapshot = live.snapshot();
        let summary = Summary::of(&records);
        let profiling = snapshot.phase(Phase::Profiling);
        assert_eq!(profiling.ok, summary.requests_ok);
        assert_eq!(profiling.failed, summary.requests_failed);
        assert_eq!(profiling.cancelled, summary.cancelled);
        assert_eq!(profiling.context_overflows, summary.context_overflows);
        assert_eq!(profiling.input_tokens, summary.input_tokens);
        assert_eq!(profiling.output_tokens, summary.output_tokens);
        assert_eq!(
            snapshot.phase(Phase::Warmup).completed(),
            summary.warmup_requests
        );
        let lag = summary.send_lag_ms.expect("successful requests");
        assert_eq!(profiling.send_lag_s.count, lag.count as u64);
        assert!((profiling.send_lag_s.sum * 1e3 - lag.avg * lag.count as f64).abs() < 1e-6);
        let ttft = summary.ttft_ms.expect("successful requests");
        assert_eq!(profiling.ttft_s.count, ttft.count as u64);
        assert!((profiling.ttft_s.sum * 1e3 - ttft.avg * ttft.count as f64).abs() < 1e-6);
        // Only failures are listed, the latest RECENT_ERRORS of them, oldest first.
        let failures: Vec<_> = records
            .iter()
            .filter(|rec| matches!(Outcome::of(rec), Outcome::Failed))
            .collect();
        assert_eq!(
            snapshot.recent_errors.len(),
            failures.len().min(RECENT_ERRORS)
        );
        assert_eq!(
            snapshot.recent_errors.last().map(|error| error.end_ns),
            failures.last().map(|rec| rec.end_ns)
        );
    }

    #[test]
    fn a_lane_is_busy_while_any_of_its_requests_is_in_flight() {
        // Shard 1 of 2: lanes 1, 3 and 5.
        let live = LiveRun::new(&[1, 3, 5]);
        let first = live.begin_request(Phase::Profiling, 1);
        let second = live.begin_request(Phase::Profiling, 1);
        let other = live.begin_request(Phase::Warmup, 5);
        let snapshot = live.snapshot();
        assert_eq!((snapshot.lanes, snapshot.lanes_busy), (3, 2));
        assert_eq!((snapshot.sent, snapshot.in_flight), ([1, 2], [1, 2]));
        drop(first);
        assert_eq!(live.snapshot().lanes_busy, 2);
        drop(second);
        drop(other);
        let snapshot = live.snapshot();
        assert_eq!((snapshot.lanes_busy, snapshot.in_flight), (0, [0, 0]));
        assert_eq!(snapshot.sent, [1, 2]);
        // A lane outside the plan is counted in flight, never busy.
        drop(live.begin_request(Phase::Profiling, 99));
        assert_eq!(live.snapshot().sent, [1, 3]);
    }

    #[test]
    fn buckets_are_cumulative_with_the_overflow_under_infinity() {
        let mut buckets = Buckets::new(&[0.1, 1.0]);
        for value in [0.05, 0.1, 0.5, 3.0] {
            buckets.observe(value);
        }
        assert_eq!(
            buckets.cumulative(),
            vec![(0.1, 2), (1.0, 3), (f64::INFINITY, 4)]
        );
        assert_eq!(buckets.mean(), Some(3.65 / 4.0));
    }
}
